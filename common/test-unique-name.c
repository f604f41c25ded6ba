/* Unit test of common/unique-name.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "unique-name.h"

#define STR(x) STR_1 (x)
#define STR_1(x) #x

int
main (void)
{
  /* Two expansions on one line: with __LINE__ these would be the same
   * identifier and the second declaration would not compile.
   */
  // clang-format off
  __attribute__ ((unused)) int UNIQUE_NAME (v) = 1, UNIQUE_NAME (v) = 2;
  // clang-format on
  const char *a = STR (UNIQUE_NAME (v)), *b = STR (UNIQUE_NAME (v));

  assert (strcmp (a, b) != 0);
  /* The prefix is kept, so that a debugger shows whose local it is. */
  assert (strncmp (a, "v", 1) == 0 && strncmp (b, "v", 1) == 0);
  assert (strcmp (a, "v") != 0);
  printf ("PASS: unique-name (%s, %s)\n", a, b);
  return 0;
}
