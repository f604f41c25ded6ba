/* nbdstack host-file layer: aligned bounce buffers for O_DIRECT, shared
 * by every thread and every open file.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit hands requests over in its own buffers (16-byte aligned), so
 * with cache=none every request's data is copied through one of these.
 * They are pooled, not kept per thread: the number of buffers that ever
 * exist is the number of requests in flight at once, not nbdkit's thread
 * count (16 threads per connection, each with its own buffer, cost
 * 32 MiB per connection).  Taking and returning a buffer is a few atomic
 * operations on the pool's slots, never a lock.
 */
#ifndef NBDSTACK_IMAGE_BOUNCE_H
#define NBDSTACK_IMAGE_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

/* Every pooled buffer.  Larger requests are copied through it in
 * chunks, one O_DIRECT call each.
 */
#ifndef BOUNCE_SIZE
#define BOUNCE_SIZE (2 * 1024 * 1024)
#endif
#define BOUNCE_ALIGN 4096

/* An idle buffer of BOUNCE_SIZE bytes, aligned to BOUNCE_ALIGN, made if
 * none is idle (its pages become resident only as they are used).
 * NULL with errno set (ENOMEM).
 */
extern void *bounce_get (void);
/* Give back a buffer from bounce_get (NULL: no-op).  Kept idle for the
 * next request, or freed if the pool already keeps BOUNCE_KEEP.
 */
extern void bounce_put (void *p);
/* At unload: free the idle buffers; *made: how many were ever made,
 * *freed: how many a put freed because the pool was full, *taken: how
 * many times a buffer was taken (requests that needed one).
 */
extern void bounce_pool_free (unsigned *made, unsigned *freed, uint64_t *taken);

#endif /* NBDSTACK_IMAGE_BOUNCE_H */
