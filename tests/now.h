/* nbdstack tests and benchmarks: the one clock of the test programs.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: durations are measured on CLOCK_MONOTONIC only, never on
 * the wall clock (which NTP may step during a run).
 */
#ifndef NBDSTACK_TESTS_NOW_H
#define NBDSTACK_TESTS_NOW_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * INT64_C (1000000000) + ts.tv_nsec;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif /* NBDSTACK_TESTS_NOW_H */
