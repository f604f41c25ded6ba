/* nbdstack: alignment and min/max helpers.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * All of these evaluate each argument exactly once, so an argument may
 * have side effects (MIN (next (), limit)) or be costly to compute.
 */
#ifndef NBDSTACK_ALIGN_H
#define NBDSTACK_ALIGN_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "unique-name.h"

static inline bool
is_power_of_2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

/* 1 if e is an integer constant expression, without evaluating e (the
 * Linux kernel's __is_constexpr): (void *) (0 * e) is a null pointer
 * constant only then, which makes the ?: have type int * instead of
 * void *.
 */
#define IS_CONSTEXPR(e)                                                        \
  (sizeof (int) == sizeof (*(8 ? ((void *)(0l * (long)(e))) : (int *)8)))

/* The result has the type 'x < y ? x : y' has, as with the plain ?:
 * macro, but x++ or f () is no longer done twice.  A constant argument
 * is compared as itself, not through its copy, because -Wsign-compare
 * knows that a non-negative constant is safe to compare with an
 * unsigned value but not that a variable holding one is; it has no side
 * effects to repeat.
 */
#define MIN(x, y) MIN_1 ((x), (y), UNIQUE_NAME (min_x_), UNIQUE_NAME (min_y_))
#define MIN_1(x, y, x_, y_)                                                    \
  ({                                                                           \
    __typeof__ (x) x_ = (x);                                                   \
    __typeof__ (y) y_ = (y);                                                   \
    MINMAX_ARG (x, x_) < MINMAX_ARG (y, y_) ? MINMAX_ARG (x, x_)               \
                                            : MINMAX_ARG (y, y_);              \
  })
#define MAX(x, y) MAX_1 ((x), (y), UNIQUE_NAME (max_x_), UNIQUE_NAME (max_y_))
#define MAX_1(x, y, x_, y_)                                                    \
  ({                                                                           \
    __typeof__ (x) x_ = (x);                                                   \
    __typeof__ (y) y_ = (y);                                                   \
    MINMAX_ARG (x, x_) > MINMAX_ARG (y, y_) ? MINMAX_ARG (x, x_)               \
                                            : MINMAX_ARG (y, y_);              \
  })
/* clang-format 14 writes no space after __builtin_choose_expr, 19 does:
 * left as written here (and below) so that both agree on the file.
 */
/* clang-format off */
#define MINMAX_ARG(e, copy)                                                    \
  __builtin_choose_expr (IS_CONSTEXPR (e), (e), (copy))
/* clang-format on */

/* The masks below are only right for a power of two; any other
 * alignment silently gives a wrong answer.  A constant alignment is
 * refused at compile time; for a variable one the static check sees 1
 * and passes, and the assert checks it where the macro is used.
 */
/* clang-format off */
#define ALIGN_STATIC_CHECK(align)                                              \
  static_assert (ALIGN_POWER_OF_2_CONST (                                      \
                   __builtin_choose_expr (IS_CONSTEXPR (align), (align), 1)),  \
                 "alignment must be a power of 2")
#define ALIGN_POWER_OF_2_CONST(v) ((v) != 0 && ((v) & ((v) - 1)) == 0)
/* clang-format on */

#define IS_ALIGNED(x, align) IS_ALIGNED_1 ((x), (align), UNIQUE_NAME (ia_a_))
#define IS_ALIGNED_1(x, align, a_)                                             \
  ({                                                                           \
    ALIGN_STATIC_CHECK (align);                                                \
    __typeof__ (align) a_ = (align);                                           \
    assert (is_power_of_2 (a_));                                               \
    ((x) & (a_ - 1)) == 0;                                                     \
  })

/* The mask is made in the type of x before it is inverted: ~(4096u - 1)
 * applied to a uint64_t would also clear its top 32 bits.
 */
#define ROUND_DOWN(x, align)                                                   \
  ROUND_DOWN_1 ((x), (align), UNIQUE_NAME (rd_a_), UNIQUE_NAME (rd_m_))
#define ROUND_DOWN_1(x, align, a_, m_)                                         \
  ({                                                                           \
    ALIGN_STATIC_CHECK (align);                                                \
    __typeof__ (align) a_ = (align);                                           \
    assert (is_power_of_2 (a_));                                               \
    __typeof__ (x) m_ = a_;                                                    \
    (x) & ~(m_ - 1);                                                           \
  })

/* Computed in the type of x + align, so that rounding a narrow x up to a
 * wide alignment cannot wrap in x's type.
 */
#define ROUND_UP(x, align)                                                     \
  ROUND_UP_1 ((x), (align), UNIQUE_NAME (ru_a_), UNIQUE_NAME (ru_m_))
#define ROUND_UP_1(x, align, a_, m_)                                           \
  ({                                                                           \
    ALIGN_STATIC_CHECK (align);                                                \
    __typeof__ (align) a_ = (align);                                           \
    assert (is_power_of_2 (a_));                                               \
    __typeof__ ((x) + a_) m_ = a_;                                             \
    ((x) + m_ - 1) & ~(m_ - 1);                                                \
  })

/* Any divisor, not only powers of two. */
#define DIV_ROUND_UP(n, d)                                                     \
  DIV_ROUND_UP_1 ((n), (d), UNIQUE_NAME (dru_n_), UNIQUE_NAME (dru_d_))
#define DIV_ROUND_UP_1(n, d, n_, d_)                                           \
  ({                                                                           \
    __typeof__ ((n) + (d)) n_ = (n);                                           \
    __typeof__ ((n) + (d)) d_ = (d);                                           \
    (n_ + d_ - 1) / d_;                                                        \
  })

#endif /* NBDSTACK_ALIGN_H */
