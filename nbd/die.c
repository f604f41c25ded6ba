/* nbdstack-nbd: the one-line messages of the command itself.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "die.h"

const char *const progname = "nbdstack-nbd";

/* "PROGNAME: PREFIXMESSAGE\n" on stderr. */
static void
report (const char *prefix, const char *fmt, va_list ap)
{
  fprintf (stderr, "%s: %s", progname, prefix);
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
}

void
die (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  report ("", fmt, ap);
  va_end (ap);
  exit (EXIT_FAILURE);
}

void
warn (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  report ("warning: ", fmt, ap);
  va_end (ap);
}
