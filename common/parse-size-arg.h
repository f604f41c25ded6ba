/* nbdstack: a size on a command line, for the bench and test programs.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A number (decimal, or 0x hex) with an optional K, M or G suffix (powers
 * of 1024).  Not for plugins and filters: those use parse-size-param.h,
 * which goes through nbdkit_parse_size.  Programs die on a bad size, with
 * one line naming themselves and the text they could not read.
 */

#ifndef NBDSTACK_PARSE_SIZE_ARG_H
#define NBDSTACK_PARSE_SIZE_ARG_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* PROG names the program in the message; sizes below MIN are refused
 * too (1 where zero makes no sense, 0 for offsets).
 */
static inline uint64_t
parse_size_arg (const char *prog, const char *s, uint64_t min)
{
  char *end;
  uint64_t v;
  unsigned shift = 0;

  errno = 0;
  v = strtoull (s, &end, 0);
  if (errno || end == s || *s == '-')
    goto bad;
  switch (*end)
    {
    case 'k':
    case 'K':
      shift = 10;
      end++;
      break;
    case 'm':
    case 'M':
      shift = 20;
      end++;
      break;
    case 'g':
    case 'G':
      shift = 30;
      end++;
      break;
    }
  if (*end != '\0' || v < min || v > (UINT64_MAX >> shift))
    goto bad;
  return v << shift;

bad:
  fprintf (stderr, "%s: bad size: %s\n", prog, s);
  exit (EXIT_FAILURE);
}

#endif /* NBDSTACK_PARSE_SIZE_ARG_H */
