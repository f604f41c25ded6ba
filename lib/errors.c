/* nbdstack qcow2 library: the error messages every layer reports.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a function that fails fills the caller's struct
 * qcow2_error (errno and a one-line message) exactly once, through
 * qcow2_set_error, and returns -1; these helpers are the messages that
 * more than one file gives, so that they read the same everywhere.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qcow2-internal.h"

void
qcow2_set_error (struct qcow2_error *err, int errnum, const char *fs, ...)
{
  va_list args;

  if (err == NULL)
    return;
  err->errnum = errnum;
  va_start (args, fs);
  vsnprintf (err->msg, sizeof err->msg, fs, args);
  va_end (args);
}

int
qcow2_io_error (struct qcow2_error *err, int r, const char *what)
{
  qcow2_set_error (err, -r, "%s: %s", what, strerror (-r));
  return -1;
}

int
qcow2_io_error_at (struct qcow2_error *err, int r, const char *what,
                   uint64_t off)
{
  qcow2_set_error (err, -r, "%s at %#" PRIx64 ": %s", what, off, strerror (-r));
  return -1;
}

int
qcow2_failed_error (struct qcow2_error *err, bool changing)
{
  if (changing)
    qcow2_set_error (err, EIO, "the image failed earlier and is read-only");
  else
    qcow2_set_error (err, EIO, "the image failed earlier");
  return -1;
}
