/* nbdstack: lock-free statistics counters for the data path.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Relaxed atomics: the counters are only read for the exit summary, so
 * they need no ordering with anything else, and no lock.
 */
#ifndef NBDSTACK_STAT_COUNTER_H
#define NBDSTACK_STAT_COUNTER_H

#include <stdint.h>

static inline void
stat_add (uint64_t *counter, uint64_t n)
{
  __atomic_fetch_add (counter, n, __ATOMIC_RELAXED);
}

static inline uint64_t
stat_get (uint64_t *counter)
{
  return __atomic_load_n (counter, __ATOMIC_RELAXED);
}

#endif /* NBDSTACK_STAT_COUNTER_H */
