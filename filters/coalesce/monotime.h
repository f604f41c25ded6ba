/* nbdstack coalesce filter: CLOCK_MONOTONIC time helpers.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Every deadline in the filter is a CLOCK_MONOTONIC timespec, and every
 * condition variable it times out on is made with that clock.
 * Header-only, calls nothing of the filter.
 */
#ifndef NBDSTACK_COALESCE_MONOTIME_H
#define NBDSTACK_COALESCE_MONOTIME_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* *ts = the time now. */
static inline void
now (struct timespec *ts)
{
  clock_gettime (CLOCK_MONOTONIC, ts);
}

/* Nanoseconds from *a to *b (b not before a). */
static inline uint64_t
ns_between (const struct timespec *a, const struct timespec *b)
{
  return (b->tv_sec - a->tv_sec) * UINT64_C (1000000000) + b->tv_nsec
         - a->tv_nsec;
}

/* Move *ts ms milliseconds later. */
static inline void
add_ms (struct timespec *ts, unsigned ms)
{
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000;
  if (ts->tv_nsec >= 1000000000)
    {
      ts->tv_sec++;
      ts->tv_nsec -= 1000000000;
    }
}

/* True if *a is strictly before *b. */
static inline bool
ts_before (const struct timespec *a, const struct timespec *b)
{
  return a->tv_sec < b->tv_sec
         || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

#endif /* NBDSTACK_COALESCE_MONOTIME_H */
