/* Micro-benchmark of common/is-zero.h: GB/s of is_zero() on all-zero
 * buffers (the whole buffer must be read) and on random buffers (it
 * should return at the first byte), for sizes from 4K to 32M.  For
 * comparison it also times on the same buffers: a word-at-a-time OR
 * loop, an OR of 16-byte vectors in 256-byte chunks (the obvious
 * hand-written alternative: on this machine it was 2-3x slower than
 * is_zero's memcmp, which glibc runs with AVX2, so is-zero.h keeps
 * memcmp), and memcmp() against a zero buffer (reads twice the bytes).  For
 * random buffers the time per call is printed too (it should not grow
 * with the size).  Each cell is the best of 3 measurements, since
 * other load on the machine only ever makes a run slower.
 *
 *   is-zero-speed [SECONDS-PER-CELL]      (default 0.2)
 *
 * The numbers are only meaningful side by side in one run: the machine
 * is shared.  Every result is also checked, so a wrong answer aborts.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "is-zero.h"
#include "now.h"
#include "prng.h"

#define MAX_SIZE (32 * 1024 * 1024)

/* All zero, for memcmp_zero; from calloc so it costs no binary size. */
static const unsigned char *zero_buf;

/* Reference 1: OR 8 words at a time, stop at the first non-zero chunk. */
static bool
or_loop (const void *buf, size_t len)
{
  const unsigned char *p = buf;
  size_t i = 0;

  for (; i + 64 <= len; i += 64)
    {
      uint64_t w[8];
      memcpy (w, p + i, 64);
      if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
        return false;
    }
  for (; i < len; ++i)
    if (p[i])
      return false;
  return true;
}

/* Candidate: OR 256-byte chunks together in 16-byte vectors (SSE2 on
 * any x86-64; GCC's generic vectors elsewhere) and test once per chunk.
 */
typedef uint64_t zvec __attribute__ ((vector_size (16)));

static bool
vec_or (const void *buf, size_t len)
{
  const unsigned char *p = buf;
  size_t i;

  for (i = 0; i < 16 && i < len; ++i)
    if (p[i])
      return false;
  if (len <= 16)
    return true;
  for (i = 16; len - i >= 256; i += 256)
    {
      zvec acc = { 0, 0 }, v;
      for (int k = 0; k < 16; ++k)
        {
          memcpy (&v, p + i + 16 * k, 16);
          acc |= v;
        }
      if ((acc[0] | acc[1]) != 0)
        return false;
    }
  /* p[0..i) is zero, so the tail is zero iff it equals itself shifted
   * back by 16 bytes.
   */
  return memcmp (p + i - 16, p + i, len - i) == 0;
}

/* Reference 2: memcmp with a static zero buffer (reads twice as much). */
static bool
memcmp_zero (const void *buf, size_t len)
{
  return memcmp (buf, zero_buf, len) == 0;
}

/* Keeps the compiler from dropping calls whose result is unused. */
static volatile bool sink;

/* GB/s of fn over buf[0..len), run for about 'seconds'. */
static double
measure (bool (*fn) (const void *, size_t), const unsigned char *buf,
         size_t len, bool want, double seconds)
{
  uint64_t iters = 0, batch = 1;
  double start = now_s (), elapsed;

  do
    {
      for (uint64_t i = 0; i < batch; ++i)
        {
          bool r = fn (buf, len);
          if (r != want)
            {
              fprintf (stderr, "is-zero-speed: wrong answer for %zu bytes\n",
                       len);
              exit (EXIT_FAILURE);
            }
          sink = r;
        }
      iters += batch;
      if (batch < (1u << 20))
        batch *= 2;
      elapsed = now_s () - start;
    }
  while (elapsed < seconds);
  return (double)len * iters / elapsed / 1e9;
}

int
main (int argc, char *argv[])
{
  static const size_t sizes[] = {
    4096, 65536, 1 << 20, 2 << 20, 8 << 20, 32 << 20,
  };
  static const struct
  {
    const char *name;
    bool (*fn) (const void *, size_t);
  } fns[] = {
    { "is_zero", is_zero },
    { "or-loop", or_loop },
    { "vec-or", vec_or },
    { "memcmp-0", memcmp_zero },
  };
  double seconds = argc > 1 ? atof (argv[1]) : 0.2;
  unsigned char *zeroes, *random;
  uint64_t s = 0x9e3779b97f4a7c15;

  if (seconds <= 0)
    {
      fprintf (stderr, "usage: is-zero-speed [SECONDS-PER-CELL]\n");
      return EXIT_FAILURE;
    }
  if (posix_memalign ((void **)&zeroes, 4096, MAX_SIZE) != 0
      || posix_memalign ((void **)&random, 4096, MAX_SIZE) != 0)
    {
      perror ("posix_memalign");
      return EXIT_FAILURE;
    }
  zero_buf = calloc (1, MAX_SIZE);
  if (zero_buf == NULL)
    {
      perror ("calloc");
      return EXIT_FAILURE;
    }
  memset (zeroes, 0, MAX_SIZE);
  for (size_t i = 0; i < MAX_SIZE; i += 8)
    {
      uint64_t r = prng_next (&s);
      memcpy (random + i, &r, 8);
    }
  random[0] |= 1; /* is_zero must exit at once */

  /* Self-check edge cases: a single non-zero byte anywhere is seen. */
  for (size_t len = 1; len <= 300; ++len)
    for (size_t i = 0; i < len; ++i)
      {
        zeroes[i] = 1;
        if (is_zero (zeroes, len) || !is_zero (zeroes + i + 1, len - i - 1))
          {
            fprintf (stderr, "is-zero-speed: is_zero wrong at %zu/%zu\n", i,
                     len);
            return EXIT_FAILURE;
          }
        zeroes[i] = 0;
      }
  zeroes[MAX_SIZE - 1] = 1;
  if (is_zero (zeroes, MAX_SIZE))
    {
      fprintf (stderr, "is-zero-speed: missed the last byte\n");
      return EXIT_FAILURE;
    }
  zeroes[MAX_SIZE - 1] = 0;

  printf ("%-9s %9s %10s %14s\n", "function", "size", "zero GB/s",
          "random ns/call");
  for (size_t f = 0; f < sizeof fns / sizeof fns[0]; ++f)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
      {
        double z = 0, r = 0;
        for (int k = 0; k < 3; ++k)
          {
            double zk = measure (fns[f].fn, zeroes, sizes[i], true, seconds);
            double rk = measure (fns[f].fn, random, sizes[i], false, seconds);
            z = zk > z ? zk : z;
            r = rk > r ? rk : r;
          }
        printf ("%-9s %8zuK %10.2f %14.1f\n", fns[f].name, sizes[i] / 1024, z,
                sizes[i] / r);
      }
  return EXIT_SUCCESS;
}
