/* nbdstack bench: what the two imageio-style clients share.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * imageio-client (upload) and imageio-download work the same way: CONNS
 * threads, one NBD connection and one request in flight each, taking
 * REGION-sized regions of the image in turn until none is left.  This
 * is that part; each client keeps what it does with a region.
 * Invariant: every region is given to exactly one thread.
 * Any error prints "PROGNAME: ..." and exits 1.
 */
#ifndef NBDSTACK_BENCH_IMAGEIO_COMMON_H
#define NBDSTACK_BENCH_IMAGEIO_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include <libnbd.h>

/* The name messages start with; set by main before anything else. */
extern const char *imageio_progname;

/* Prints "PROGNAME: WHAT: <libnbd's error>" and exits 1. */
__attribute__ ((noreturn)) void imageio_die_nbd (const char *what);

/* Claims the next region of [0, size) nobody has taken: false when none
 * is left, else [*start, *end).  Thread-safe.
 */
bool imageio_next_region (uint64_t size, uint64_t region_size, uint64_t *start,
                          uint64_t *end);

/* Runs worker (NULL) in conns threads and waits for them all. */
void imageio_run_workers (unsigned conns, void *(*worker) (void *));

#endif /* NBDSTACK_BENCH_IMAGEIO_COMMON_H */
