/* nbdstack: a size on a command line, for the bench and test programs.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A number (decimal, or 0x hex) with an optional suffix (b, K, M, G, T,
 * P, E: powers of 1024).  Not for plugins and filters: those use
 * parse-size-param.h, which goes through nbdkit_parse_size.  Programs die on a
 * bad size, with one line naming themselves and the text they could not read.
 */

#ifndef NBDSTACK_PARSE_SIZE_ARG_H
#define NBDSTACK_PARSE_SIZE_ARG_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The power of 2 that a size suffix stands for (qemu's set: b K M G T
 * P E, in either case; none or b: bytes), or -1 for anything else.
 */
static inline int
size_suffix_shift (char c)
{
  switch (c)
    {
    case '\0':
    case 'b':
    case 'B':
      return 0;
    case 'k':
    case 'K':
      return 10;
    case 'm':
    case 'M':
      return 20;
    case 'g':
    case 'G':
      return 30;
    case 't':
    case 'T':
      return 40;
    case 'p':
    case 'P':
      return 50;
    case 'e':
    case 'E':
      return 60;
    default:
      return -1;
    }
}

/* PROG names the program in the message; sizes below MIN are refused
 * too (1 where zero makes no sense, 0 for offsets).
 */
static inline uint64_t
parse_size_arg (const char *prog, const char *s, uint64_t min)
{
  char *end;
  uint64_t v;
  int shift;

  errno = 0;
  v = strtoull (s, &end, 0);
  if (errno || end == s || *s == '-')
    goto bad;
  shift = size_suffix_shift (*end);
  if (shift < 0)
    goto bad;
  if (*end)
    end++;
  if (*end != '\0' || v < min || v > (UINT64_MAX >> shift))
    goto bad;
  return v << shift;

bad:
  fprintf (stderr, "%s: bad size: %s\n", prog, s);
  exit (EXIT_FAILURE);
}

#endif /* NBDSTACK_PARSE_SIZE_ARG_H */
