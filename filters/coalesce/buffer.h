/* nbdstack coalesce filter: the buffered bytes (buffer.c).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a range in the buffer is either the newest data of those
 * bytes or (IV_ZOMBIE) data a request still running replaces; readers
 * see the buffer over the plugin, never the plugin over the buffer.
 *
 * The bottom of the stack but for the intervals: buffer.c never calls
 * up.  May call: intervals.h, monotime.h, the plugin (CALL_BELOW).
 * Called by: coalesce.c, direct.c, writeback.c.
 */
#ifndef NBDSTACK_COALESCE_BUFFER_H
#define NBDSTACK_COALESCE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "intervals.h"

/* Lock held (co.lock): */

/* Remove interval idx, give back its pages (but the last ones freed),
 * log the removal and wake waiters.
 */
extern void buffer_release_and_remove (size_t idx);
/* The index of the interval starting at start, which must be there. */
extern size_t buffer_find_exact (uint64_t start);
/* Wait for co.changed, counted in busy_waiters. */
extern void buffer_wait_changed (void);
/* True if dirty or filling data overlaps or touches [a, b). */
extern bool buffer_touches (uint64_t a, uint64_t b);
/* A piece of len bytes was written back: feeds the page policy. */
extern void buffer_note_piece (uint64_t len);
/* Wait until nothing in [a, b) is busy, then mark what is buffered there
 * IV_ZOMBIE and copy it to *pieces (*n; malloc'd, NULL if none); -1
 * with *err = ENOMEM.
 */
extern int buffer_take_out (uint64_t a, uint64_t b, struct iv **pieces,
                            size_t *n, int *err);
/* The request that took pieces out of [a, b) ended: drop them if it
 * succeeded (ok), else make them dirty again; wakes waiters.
 */
extern void buffer_settle (uint64_t a, uint64_t b, const struct iv *pieces,
                           size_t n, bool ok);

/* Called without the lock: */

/* Copy a write in and acknowledge it; *fail_gen_at_ack: co.fail_gen at
 * that moment.  Waits while the buffer is full.
 */
extern int buffer_write (const void *buf, uint32_t count, uint64_t offset,
                         uint64_t *fail_gen_at_ack, int *err);
/* Read below and lay the buffer over it. */
extern int buffer_read (void *buf, uint32_t count, uint64_t offset, int *err);
/* Extents below, with buffered ranges reported as data. */
extern int buffer_extents (uint32_t count, uint64_t offset, uint32_t flags,
                           struct nbdkit_extents *extents, int *err);

#endif /* NBDSTACK_COALESCE_BUFFER_H */
