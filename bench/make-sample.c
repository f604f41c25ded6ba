/* nbdstack bench: write a deterministic, realistic sample disk image.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   make-sample OUTPUT SIZE DATA_PERMILLE ZERO_PERMILLE SEED
 *
 * Usually run through bench/make-sample.sh, which parses sizes like "4G".
 *
 * The image is a sparse raw file of SIZE bytes holding:
 *  - data extents of incompressible pseudo-random bytes, sizes log-uniform
 *    in [64 KiB, 64 MiB], DATA_PERMILLE/1000 of SIZE in total;
 *  - allocated runs of zero bytes (really written, so they occupy disk
 *    blocks), sizes log-uniform in [64 KiB, 16 MiB], ZERO_PERMILLE/1000
 *    of SIZE in total;
 *  - holes everywhere else, as random gaps between the extents.
 * Everything is 4 KiB aligned, so that SEEK_DATA/SEEK_HOLE, qemu-img map
 * and NBD block status all see the same layout.  The same arguments
 * always give the same bytes (xoshiro256** seeded with splitmix64; data
 * stored little-endian).  A layout summary is printed on stdout.
 */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prng.h"

#define ALIGN 4096
#define CHUNK (1 << 20)

static uint64_t rng_s[4];

/* splitmix64: seeds xoshiro256**'s state from one seed. */
static uint64_t
splitmix64 (uint64_t *x)
{
  return prng_mix (*x += UINT64_C (0x9e3779b97f4a7c15));
}

static inline uint64_t
rotl (uint64_t x, int k)
{
  return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static inline uint64_t
rng (void)
{
  uint64_t result = rotl (rng_s[1] * 5, 7) * 9;
  uint64_t t = rng_s[1] << 17;

  rng_s[2] ^= rng_s[0];
  rng_s[3] ^= rng_s[1];
  rng_s[1] ^= rng_s[2];
  rng_s[0] ^= rng_s[3];
  rng_s[2] ^= t;
  rng_s[3] = rotl (rng_s[3], 45);
  return result;
}

/* Uniform in [0, 1). */
static double
rng_unit (void)
{
  return (rng () >> 11) * 0x1.0p-53;
}

/* Log-uniform size in [lo, hi], rounded down to ALIGN (at least ALIGN). */
static uint64_t
rng_size (uint64_t lo, uint64_t hi)
{
  double l = log ((double)lo), h = log ((double)hi);
  uint64_t s = (uint64_t)exp (l + (h - l) * rng_unit ());

  s -= s % ALIGN;
  return s < ALIGN ? ALIGN : s;
}

struct extent
{
  uint64_t len;
  int zero; /* 1: allocated zeroes, 0: random data */
};

static struct extent *extents;
static size_t n_extents, cap_extents;

static void
add_extent (uint64_t len, int zero)
{
  if (n_extents == cap_extents)
    {
      cap_extents = cap_extents ? cap_extents * 2 : 256;
      extents = realloc (extents, cap_extents * sizeof *extents);
      if (extents == NULL)
        {
          perror ("make-sample: realloc");
          exit (EXIT_FAILURE);
        }
    }
  extents[n_extents].len = len;
  extents[n_extents].zero = zero;
  n_extents++;
}

/* Extents of one kind adding up to exactly target bytes (ALIGN multiple). */
static void
add_extents (uint64_t target, uint64_t lo, uint64_t hi, int zero)
{
  while (target > 0)
    {
      uint64_t len = rng_size (lo, hi);
      if (len > target)
        len = target;
      add_extent (len, zero);
      target -= len;
    }
}

static void
write_all (int fd, const char *buf, size_t len, uint64_t offset,
           const char *output)
{
  while (len > 0)
    {
      ssize_t r = pwrite (fd, buf, len, offset);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          fprintf (stderr, "make-sample: %s: write at %" PRIu64 ": %s\n",
                   output, offset, strerror (errno));
          exit (EXIT_FAILURE);
        }
      buf += r;
      len -= r;
      offset += r;
    }
}

static uint64_t
parse_u64 (const char *what, const char *s)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (s, &end, 10);
  if (errno || end == s || *end || s[0] == '-')
    {
      fprintf (stderr, "make-sample: %s: not a number: '%s'\n", what, s);
      exit (EXIT_FAILURE);
    }
  return v;
}

static const char *
human (uint64_t n, char *buf, size_t len)
{
  if (n >= (UINT64_C (1) << 30))
    snprintf (buf, len, "%.2f GiB", n / (double)(UINT64_C (1) << 30));
  else
    snprintf (buf, len, "%.1f MiB", n / (double)(1 << 20));
  return buf;
}

int
main (int argc, char *argv[])
{
  const char *output;
  uint64_t size, data_target, zero_target, seed, holes, offset;
  uint64_t data_bytes = 0, zero_bytes = 0;
  size_t n_data = 0, n_zero = 0, i;
  double *weights, wsum = 0;
  char *buf, *zbuf;
  char h1[32], h2[32], h3[32], h4[32];
  int fd;

  if (argc != 6)
    {
      fprintf (
          stderr,
          "usage: make-sample OUTPUT SIZE DATA_PERMILLE ZERO_PERMILLE SEED\n");
      exit (EXIT_FAILURE);
    }
  output = argv[1];
  size = parse_u64 ("SIZE", argv[2]);
  data_target = parse_u64 ("DATA_PERMILLE", argv[3]);
  zero_target = parse_u64 ("ZERO_PERMILLE", argv[4]);
  seed = parse_u64 ("SEED", argv[5]);
  if (size < 16 * ALIGN)
    {
      fprintf (stderr, "make-sample: SIZE must be at least %d bytes\n",
               16 * ALIGN);
      exit (EXIT_FAILURE);
    }
  if (data_target + zero_target > 1000)
    {
      fprintf (stderr, "make-sample: data + zero permille must be <= 1000\n");
      exit (EXIT_FAILURE);
    }
  /* Per mille of the size, rounded down to ALIGN. */
  data_target = (uint64_t)((double)size * data_target / 1000);
  data_target -= data_target % ALIGN;
  zero_target = (uint64_t)((double)size * zero_target / 1000);
  zero_target -= zero_target % ALIGN;

  for (i = 0; i < 4; ++i)
    rng_s[i] = splitmix64 (&seed);

  add_extents (data_target, 64 << 10, 64 << 20, 0);
  add_extents (zero_target, 64 << 10, 16 << 20, 1);
  /* Shuffle (Fisher-Yates) so data and zero runs are interleaved. */
  for (i = n_extents; i > 1; --i)
    {
      size_t j = rng () % i;
      struct extent t = extents[i - 1];
      extents[i - 1] = extents[j];
      extents[j] = t;
    }
  /* Spread the holes as n+1 random gaps (before, between, after). */
  holes = size - data_target - zero_target;
  weights = malloc ((n_extents + 1) * sizeof *weights);
  buf = malloc (CHUNK);
  zbuf = calloc (1, CHUNK);
  if (weights == NULL || buf == NULL || zbuf == NULL)
    {
      perror ("make-sample: malloc");
      exit (EXIT_FAILURE);
    }
  for (i = 0; i <= n_extents; ++i)
    wsum += weights[i] = rng_unit ();

  fd = open (output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd == -1)
    {
      fprintf (stderr, "make-sample: %s: %s\n", output, strerror (errno));
      exit (EXIT_FAILURE);
    }
  if (ftruncate (fd, size) == -1)
    {
      fprintf (stderr, "make-sample: %s: ftruncate: %s\n", output,
               strerror (errno));
      exit (EXIT_FAILURE);
    }

  offset = 0;
  for (i = 0; i < n_extents; ++i)
    {
      uint64_t gap = (uint64_t)(holes * (weights[i] / wsum));
      uint64_t left;

      gap -= gap % ALIGN;
      offset += gap;
      for (left = extents[i].len; left > 0;)
        {
          size_t n = left < CHUNK ? left : CHUNK;
          if (extents[i].zero)
            write_all (fd, zbuf, n, offset, output);
          else
            {
              for (size_t k = 0; k < n; k += 8)
                {
                  uint64_t v = htole64 (rng ());
                  memcpy (buf + k, &v, 8);
                }
              write_all (fd, buf, n, offset, output);
            }
          offset += n;
          left -= n;
        }
      if (extents[i].zero)
        {
          zero_bytes += extents[i].len;
          n_zero++;
        }
      else
        {
          data_bytes += extents[i].len;
          n_data++;
        }
    }
  if (offset > size)
    { /* cannot happen: gaps sum to <= holes */
      fprintf (stderr, "make-sample: internal error: layout overflows\n");
      exit (EXIT_FAILURE);
    }
  /* Written back now, so that the first timed upload does not pay for it. */
  if (fsync (fd) == -1 || close (fd) == -1)
    {
      fprintf (stderr, "make-sample: %s: fsync/close: %s\n", output,
               strerror (errno));
      exit (EXIT_FAILURE);
    }

  printf ("sample %s: virtual %s (%" PRIu64 " bytes), "
          "data %s in %zu extents (%.1f%%), "
          "zero runs %s in %zu extents (%.1f%%), holes %s\n",
          output, human (size, h1, sizeof h1), size,
          human (data_bytes, h2, sizeof h2), n_data, 100.0 * data_bytes / size,
          human (zero_bytes, h3, sizeof h3), n_zero, 100.0 * zero_bytes / size,
          human (size - data_bytes - zero_bytes, h4, sizeof h4));
  free (weights);
  free (buf);
  free (zbuf);
  free (extents);
  return 0;
}
