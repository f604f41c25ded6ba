/* nbdstack: number of elements of an array.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_ARRAY_SIZE_H
#define NBDSTACK_ARRAY_SIZE_H

#include <assert.h> /* static_assert */

/* sizeof a / sizeof a[0] silently gives a wrong count when 'a' is a
 * pointer (a table passed to a function), so that refuses to compile.
 * The result is still an integer constant expression.
 */
#define ARRAY_SIZE(a)                                                          \
  (sizeof (a) / sizeof ((a)[0])                                                \
   + 0 * sizeof (struct {                                                      \
       static_assert (!__builtin_types_compatible_p (__typeof__ (a),           \
                                                     __typeof__ (&(a)[0])),    \
                      "ARRAY_SIZE needs an array, not a pointer");             \
       char array_size_dummy_;                                                 \
     }))

#endif /* NBDSTACK_ARRAY_SIZE_H */
