/* nbdstack: nbdkit_error for the unit tests of the parsers in common/,
 * which run without nbdkit.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Include once, in the test's .c: it defines nbdkit_error, which keeps
 * the last message in message[] and counts the calls in errors.
 */
#ifndef NBDSTACK_TEST_NBDKIT_ERROR_H
#define NBDSTACK_TEST_NBDKIT_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include <nbdkit-plugin.h>

static char message[1024];
static unsigned errors;

/* Records the message (formatted) and counts the call. */
void
nbdkit_error (const char *fs, ...)
{
  va_list args;

  va_start (args, fs);
  vsnprintf (message, sizeof message, fs, args);
  va_end (args);
  errors++;
}

#endif /* NBDSTACK_TEST_NBDKIT_ERROR_H */
