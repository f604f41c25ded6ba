/* nbdstack coalesce filter: writing the buffer below (writeback.c).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: the durability rule (coalesce.h); a sync with sequence S
 * returns only when nothing owed to S is left, and a failure below is
 * reported by exactly one NBD flush.
 *
 * May call: buffer.h, intervals.h, monotime.h, the plugin (CALL_BELOW).
 * Called by: coalesce.c, direct.c.
 */
#ifndef NBDSTACK_COALESCE_WRITEBACK_H
#define NBDSTACK_COALESCE_WRITEBACK_H

#include <stdbool.h>
#include <stdint.h>

/* since_gen for writeback_sync: failures from now on. */
#define SINCE_NOW UINT64_MAX

/* Called without the lock: */

/* Start the coalesce-threads writer threads; -1 after nbdkit_error. */
extern int writeback_start (void);
/* Stop the writers, then write and flush everything (shutdown). */
extern void writeback_stop (void);
/* Make everything acknowledged so far reach the plugin (and be flushed
 * if do_flush); report: also return an unreported failure.  -1, *err.
 */
extern int writeback_sync (bool do_flush, bool report, uint64_t since_gen,
                           int *err);
/* Write [a, b) of the buffer below in max_write chunks; -1, *err. */
extern int writeback_write_down (uint64_t a, uint64_t b, int *err);

/* Lock held: */

/* A write below succeeded: the plugin is no longer failing. */
extern void writeback_note_success (void);
/* A write below failed with err: the writers back off. */
extern void writeback_note_failure (int err);

#endif /* NBDSTACK_COALESCE_WRITEBACK_H */
