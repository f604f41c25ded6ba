/* Unit test of common/array-size.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdint.h>
#include <stdio.h>

#include "array-size.h"

struct big
{
  char c[3];
  uint64_t u;
};

int
main (void)
{
  static const char *const words[] = { "a", "b", "c" };
  int one[1];
  struct big bigs[7];
  char text[] = "hello";
  uint64_t matrix[4][5];

  assert (ARRAY_SIZE (words) == 3);
  assert (ARRAY_SIZE (one) == 1);
  assert (ARRAY_SIZE (bigs) == 7);
  assert (ARRAY_SIZE (text) == 6);
  assert (ARRAY_SIZE (matrix) == 4);
  assert (ARRAY_SIZE (matrix[0]) == 5);
  /* Still a constant expression, usable where C needs one. */
  static_assert (ARRAY_SIZE (words) == 3, "constant");
  {
    char sized[ARRAY_SIZE (bigs)];
    assert (sizeof sized == 7);
  }
  printf ("PASS: array-size\n");
  return 0;
}
