/* nbdstack host-file layer: the shared pool of O_DIRECT bounce buffers.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: each idle buffer is in exactly one slot, and a buffer in
 * use is in none.  A slot is claimed by atomically exchanging it with
 * NULL (so two threads can never take the same buffer) and filled by a
 * compare-and-swap from NULL (so a put never overwrites one).  Takers
 * scan from slot 0: the same few buffers, already faulted in, serve a
 * steady load, and the pool only grows when more requests are in
 * flight at once than ever before.
 */
#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "bounce.h"
#include "stat-counter.h"

/* Idle buffers kept at most (more in flight at once: the extra ones are
 * made for the request and freed after it).
 */
#define BOUNCE_KEEP 64

/* One slot per cache line: takers and putters of different slots do not
 * slow each other down.
 */
struct slot
{
  _Atomic (void *) p;
  char pad[64 - sizeof (void *)];
};

static struct slot slots[BOUNCE_KEEP];
static atomic_uint made;  /* buffers made so far (for the summary) */
static atomic_uint freed; /* buffers freed at put: the pool was full */
static uint64_t taken;    /* bounce_get calls (stat_add) */

void *
bounce_get (void)
{
  void *p;
  int err;

  stat_add (&taken, 1);
  for (unsigned i = 0; i < BOUNCE_KEEP; ++i)
    if (atomic_load_explicit (&slots[i].p, memory_order_relaxed) != NULL)
      {
        p = atomic_exchange_explicit (&slots[i].p, NULL, memory_order_acquire);
        if (p)
          return p;
      }
  err = posix_memalign (&p, BOUNCE_ALIGN, BOUNCE_SIZE);
  if (err)
    {
      errno = err;
      return NULL;
    }
  atomic_fetch_add_explicit (&made, 1, memory_order_relaxed);
  return p;
}

void
bounce_put (void *p)
{
  if (p == NULL)
    return;
  for (unsigned i = 0; i < BOUNCE_KEEP; ++i)
    {
      void *expect = NULL;
      if (atomic_load_explicit (&slots[i].p, memory_order_relaxed) == NULL
          && atomic_compare_exchange_strong_explicit (&slots[i].p, &expect, p,
                                                      memory_order_release,
                                                      memory_order_relaxed))
        return;
    }
  atomic_fetch_add_explicit (&freed, 1, memory_order_relaxed);
  free (p);
}

void
bounce_pool_free (unsigned *made_r, unsigned *freed_r, uint64_t *taken_r)
{
  for (unsigned i = 0; i < BOUNCE_KEEP; ++i)
    free (atomic_exchange (&slots[i].p, NULL));
  *made_r = atomic_load (&made);
  *freed_r = atomic_load (&freed);
  *taken_r = stat_get (&taken);
}
