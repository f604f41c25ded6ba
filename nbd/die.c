/* nbdstack-nbd: the one-line messages of the command itself.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "die.h"

const char *const progname = "nbdstack-nbd";

void
die (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: ", progname);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

void
warn (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: warning: ", progname);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}
