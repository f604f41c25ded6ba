/* nbdstack tests: the failure helpers of the C unit tests.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * die() prints its message and exits 1; CHECK(cond) dies naming the
 * file, line and condition when cond is false.  Checks stay in release
 * builds (no NDEBUG dependence), unlike assert().
 */
#ifndef NBDSTACK_TESTS_UNIT_CHECK_H
#define NBDSTACK_TESTS_UNIT_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static __attribute__ ((noreturn, format (printf, 1, 2))) void
die (const char *fs, ...)
{
  va_list args;

  va_start (args, fs);
  vfprintf (stderr, fs, args);
  va_end (args);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

#define CHECK(cond)                                                            \
  do                                                                           \
    {                                                                          \
      if (!(cond))                                                             \
        die ("%s:%d: check failed: %s", __FILE__, __LINE__, #cond);            \
    }                                                                          \
  while (0)

#endif /* NBDSTACK_TESTS_UNIT_CHECK_H */
