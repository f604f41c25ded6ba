/* nbdstack tests: read a whole file into memory, for the C unit tests.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_TESTS_SLURP_H
#define NBDSTACK_TESTS_SLURP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The contents of PATH in a malloc'd buffer (free it), its length in
 * *len; prints the reason and exits 1 if it cannot be read.
 */
static inline unsigned char *
slurp (const char *path, size_t *len)
{
  FILE *fp = fopen (path, "rb");
  unsigned char *buf;
  long n;

  if (fp == NULL || fseek (fp, 0, SEEK_END) == -1 || (n = ftell (fp)) < 0)
    {
      fprintf (stderr, "%s: %s\n", path, strerror (errno));
      exit (EXIT_FAILURE);
    }
  rewind (fp);
  buf = malloc (n ? n : 1);
  if (buf == NULL || fread (buf, 1, n, fp) != (size_t)n)
    {
      fprintf (stderr, "%s: read failed\n", path);
      exit (EXIT_FAILURE);
    }
  fclose (fp);
  *len = n;
  return buf;
}

#endif /* NBDSTACK_TESTS_SLURP_H */
