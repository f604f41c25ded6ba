/* nbdstack coalesce filter: requests that go down uncopied (direct.c).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a direct request never lands before, nor is overtaken by,
 * older buffered data of its range: that data is taken out of
 * write-back (IV_ZOMBIE) until the request has reached the plugin.
 *
 * May call: writeback.h, buffer.h, order.h, intervals.h, the plugin
 * (CALL_BELOW).  Called by: coalesce.c.
 */
#ifndef NBDSTACK_COALESCE_DIRECT_H
#define NBDSTACK_COALESCE_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

#include "order.h"

enum direct_op
{
  OP_ZERO,
  OP_TRIM,
  OP_WRITE
};

/* Send a zero, trim or write of [offset, offset + count) below, ordered
 * after the buffered data it replaces (called without the lock); large:
 * a large write, for the stream.  -1 with *err set.
 */
extern int direct_request (struct order_stream *stream, bool large,
                           enum direct_op op, const void *buf, uint32_t count,
                           uint64_t offset, uint32_t flags, int *err);

#endif /* NBDSTACK_COALESCE_DIRECT_H */
