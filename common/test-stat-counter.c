/* Unit test of common/stat-counter.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Several threads add to one counter at once: a plain += loses updates
 * here on any machine with more than one core, the atomic add must not.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "stat-counter.h"

#define THREADS 4
#define ADDS 500000

static uint64_t counter;
static uint64_t big;

static void *
adder (void *arg)
{
  uint64_t n = (uintptr_t)arg;

  for (unsigned i = 0; i < ADDS; ++i)
    {
      stat_add (&counter, 1);
      stat_add (&big, n);
    }
  return NULL;
}

int
main (void)
{
  pthread_t t[THREADS];
  uint64_t want_big = 0;

  assert (stat_get (&counter) == 0);
  stat_add (&counter, 0);
  assert (stat_get (&counter) == 0);

  for (unsigned i = 0; i < THREADS; ++i)
    {
      /* Per-thread amounts above 2^32, so that a 32-bit add would show. */
      uint64_t n = ((uint64_t)1 << 33) + i;
      want_big += n * ADDS;
      assert (pthread_create (&t[i], NULL, adder, (void *)(uintptr_t)n) == 0);
    }
  for (unsigned i = 0; i < THREADS; ++i)
    assert (pthread_join (t[i], NULL) == 0);

  assert (stat_get (&counter) == (uint64_t)THREADS * ADDS);
  assert (stat_get (&big) == want_big);
  printf ("PASS: stat-counter\n");
  return 0;
}
