/* nbdstack tests: what realloc returns, with nbd/nbdstack-alignbuf.so
 * preloaded or not (tests/test-nbd-align-buffers.sh).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   alignbuf-check aligned   the shim must be loaded: every realloc of
 *                            64 KiB or more starts on a 4 KiB page
 *   alignbuf-check plain     it must not be: glibc's large reallocation
 *                            starts off a page (why the shim exists)
 *
 * Either way, every realloc keeps the first min (old, new) bytes, in a
 * walk of growing, shrinking, small and large sizes, from NULL and from
 * malloc.  Prints one line per step; exit 1 on the first failure.
 * Built without the sanitizers: the shim must be the first realloc.
 */
#include <config.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096
#define LARGE (64 * 1024)

static bool want_aligned;
static unsigned char seed;

/* Fill the N bytes at P with a pattern that starts at SEED. */
static void
fill (unsigned char *p, size_t n, unsigned char s)
{
  for (size_t i = 0; i < n; ++i)
    p[i] = (unsigned char)(s + i * 7);
}

/* Whether the N bytes at P still hold fill's pattern from S. */
static bool
holds (const unsigned char *p, size_t n, unsigned char s)
{
  for (size_t i = 0; i < n; ++i)
    if (p[i] != (unsigned char)(s + i * 7))
      return false;
  return true;
}

/* realloc P (holding OLD bytes of the pattern) to N bytes and check it. */
static unsigned char *
step (unsigned char *p, size_t old, size_t n)
{
  unsigned char *q = realloc (p, n);
  size_t keep = old < n ? old : n;
  unsigned off;

  if (q == NULL)
    {
      printf ("realloc %zu -> %zu: NULL\n", old, n);
      exit (EXIT_FAILURE);
    }
  off = (uintptr_t)q % PAGE;
  printf ("realloc %zu -> %zu: %u bytes past a page\n", old, n, off);
  if (!holds (q, keep, seed))
    {
      printf ("FAIL: the first %zu bytes were not kept\n", keep);
      exit (EXIT_FAILURE);
    }
  if (n >= LARGE && want_aligned && off != 0)
    {
      printf ("FAIL: %zu bytes not page-aligned with the shim\n", n);
      exit (EXIT_FAILURE);
    }
  fill (q, n, ++seed);
  return q;
}

int
main (int argc, char *argv[])
{
  static const size_t walk[] = {
    100,  LARGE,         1 << 20, 8 << 20, 5 << 20, 1 << 20,
    1000, (8 << 20) + 1, 200000,  300000,  70000,   16,
  };
  bool loaded = dlsym (RTLD_DEFAULT, "nbdstack_alignbuf_loaded") != NULL;
  unsigned char *p = NULL;
  size_t old = 0;
  bool off_page = false;

  if (argc != 2
      || (strcmp (argv[1], "aligned") != 0 && strcmp (argv[1], "plain") != 0))
    {
      fprintf (stderr, "usage: alignbuf-check aligned|plain\n");
      return 2;
    }
  want_aligned = strcmp (argv[1], "aligned") == 0;
  if (loaded != want_aligned)
    {
      printf ("FAIL: the shim is %sloaded\n", loaded ? "" : "not ");
      return EXIT_FAILURE;
    }
  for (size_t i = 0; i < sizeof walk / sizeof walk[0]; ++i)
    {
      p = step (p, old, walk[i]);
      if (walk[i] >= LARGE && (uintptr_t)p % PAGE != 0)
        off_page = true;
      old = walk[i];
    }
  free (p);

  /* From malloc, not from NULL: glibc maps 1 MiB on its own. */
  p = malloc (1 << 20);
  if (p == NULL)
    return EXIT_FAILURE;
  fill (p, 1 << 20, seed);
  p = step (p, 1 << 20, 3 << 20);
  if ((uintptr_t)p % PAGE != 0)
    off_page = true;
  free (p);

  if (!want_aligned && !off_page)
    {
      printf ("FAIL: glibc's large reallocations were all page-aligned: "
              "the shim has nothing to fix\n");
      return EXIT_FAILURE;
    }
  printf ("ok\n");
  return 0;
}
