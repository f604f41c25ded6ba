/* nbdstack: alignment and min/max helpers.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_ALIGN_H
#define NBDSTACK_ALIGN_H

#include <stdbool.h>
#include <stdint.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* 'align' must be a power of two in all of these. */
#define IS_ALIGNED(x, align) (((x) & ((align) - 1)) == 0)
#define ROUND_DOWN(x, align) ((x) & ~((__typeof__ (x)) (align) - 1))
#define ROUND_UP(x, align) ROUND_DOWN ((x) + (align) - 1, (align))

/* Any divisor, not only powers of two. */
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))

static inline bool
is_power_of_2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

/* log2 of a power of two. */
static inline unsigned
log_2_bits (uint64_t v)
{
  return v ? 63 - __builtin_clzll (v) : 0;
}

#endif /* NBDSTACK_ALIGN_H */
