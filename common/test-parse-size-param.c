/* Unit test of common/parse-size-param.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit's functions are stubbed: the helper's job is to refuse, with
 * its own message, what nbdkit_parse_size would refuse with one that
 * does not name the parameter, and to hand everything else to it.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-plugin.h>

#include "parse-size-param.h"
#include "test-nbdkit-error.h"

static const char *parsed; /* last string nbdkit_parse_size saw */

/* Recognisable results, and -1 for the overflow nbdkit would refuse. */
int64_t
nbdkit_parse_size (const char *str)
{
  parsed = str;
  if (strcmp (str, "99999999999999999999") == 0)
    {
      nbdkit_error ("nbdkit's own overflow message");
      return -1;
    }
  return 1000 + strlen (str);
}

static void
good (const char *value)
{
  unsigned e = errors;

  parsed = NULL;
  assert (parse_size_param ("size", value) == 1000 + (int64_t)strlen (value));
  assert (parsed == value);
  assert (errors == e);
}

static void
bad (const char *value)
{
  char want[256];
  unsigned e = errors;

  parsed = NULL;
  assert (parse_size_param ("size", value) == -1);
  assert (parsed == NULL);
  assert (errors == e + 1);
  snprintf (want, sizeof want,
            "size=%s: expected a size such as 4096, 64K or 1M", value);
  if (strcmp (message, want) != 0)
    {
      fprintf (stderr, "got '%s'\nwant '%s'\n", message, want);
      exit (1);
    }
}

int
main (void)
{
  static const char *const goods[] = {
    "0",  "1",  "4096", "007", "64K",  "64k",  "1M",
    "2G", "1T", "1P",   "1E",  "512b", "512B", "1m",
  };
  static const char *const bads[] = {
    "",  "abc", "-5",  "+5",   " 1",  "1 ",   "1.5", "64KB",
    "K", "1X",  "1KK", "0x10", "1e3", "64Ki", "%s",
  };

  for (size_t i = 0; i < sizeof goods / sizeof goods[0]; ++i)
    good (goods[i]);
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; ++i)
    bad (bads[i]);

  /* nbdkit_parse_size's own refusals come through unchanged. */
  assert (parse_size_param ("size", "99999999999999999999") == -1);
  assert (strcmp (message, "nbdkit's own overflow message") == 0);

  printf ("PASS: parse-size-param\n");
  return 0;
}
