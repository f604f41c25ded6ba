/* nbdstack tests: the one pseudo-random generator of the test programs.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a run is reproducible from its seed on every libc (rand ()
 * is not), and every test program draws from these functions only, so
 * a seed printed by one test means the same sequence everywhere.
 * prng_next is xorshift64*: its state must never be 0 (seed it with
 * a value | 1, or with prng_mix (seed) | 1).  prng_mix is splitmix64's output
 * function: no state, for callers that number their draws (fault-shim.c's
 * shared atomic counter) or need a state from a seed.
 */
#ifndef NBDSTACK_TESTS_PRNG_H
#define NBDSTACK_TESTS_PRNG_H

#include <stdint.h>

/* The next number of the xorshift64* sequence in *s (advances *s). */
static inline uint64_t
prng_next (uint64_t *s)
{
  uint64_t x = *s;

  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C (0x2545F4914F6CDD1D);
}

/* A number in [0, n) from *s (n == 0 gives 0). */
static inline uint64_t
prng_below (uint64_t *s, uint64_t n)
{
  return n ? prng_next (s) % n : 0;
}

/* splitmix64's mix of x: a well-spread 64-bit value, never stateful. */
static inline uint64_t
prng_mix (uint64_t x)
{
  x = (x ^ (x >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C (0x94d049bb133111eb);
  return x ^ (x >> 31);
}

#endif /* NBDSTACK_TESTS_PRNG_H */
