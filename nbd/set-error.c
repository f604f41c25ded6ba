/* nbdstack-nbd: the one error message a parse step hands back.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "set-error.h"

int
set_error (char **err, const char *fmt, ...)
{
  va_list ap;

  free (*err);
  *err = NULL;
  va_start (ap, fmt);
  if (vasprintf (err, fmt, ap) == -1)
    *err = NULL;
  va_end (ap);
  return -1;
}
