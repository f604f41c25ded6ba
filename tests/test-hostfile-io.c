/* Unit test of the host-file layer (lib/hostfile) on a real file.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   test-hostfile-io DIR
 *
 * For each of buffered and O_DIRECT, fixed size (an unaligned tail
 * through the buffered descriptor) and HOSTFILE_GROW: random unaligned
 * writes (one buffer and scattered iovecs, from unaligned memory),
 * zeroes and reads of a file whose size is not a multiple of any
 * alignment, each checked against a reference buffer, then the whole
 * file read back with a plain descriptor; threads writing different
 * bytes of the same units at once (the read-modify-write locks); a
 * FAST zero refused without changing anything; a zero over data just
 * written into a hole (never skipped as "already a hole"); growth past
 * the end;
 * and extents that never call data a hole.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostfile.h"
#include "unit-check.h"

#define SIZE (1024 * 1024 + 1234) /* unaligned for every alignment */
#define MAXLEN (70 * 1024)
#define THREADS 4
#define PIECE 100

static unsigned char ref[SIZE];
static unsigned char buf[MAXLEN + 64], got[MAXLEN + 64];
static unsigned seed = 1;

static unsigned
rnd (unsigned n)
{
  seed = seed * 1103515245 + 12345;
  return (seed >> 8) % n;
}

static void
fill (unsigned char *p, size_t n)
{
  for (size_t i = 0; i < n; ++i)
    p[i] = rnd (256);
}

static void
read_back (struct hostfile *hf, uint64_t off, size_t len)
{
  CHECK (hostfile_pread (hf, got + 1, len, off) == 0);
  if (memcmp (got + 1, ref + off, len) != 0)
    die ("pread at %llu (%zu bytes) differs from the reference",
         (unsigned long long)off, len);
}

/* One random request; the reference follows it. */
static void
random_op (struct hostfile *hf)
{
  size_t len = 1 + rnd (MAXLEN);
  uint64_t off = rnd (SIZE - len + 1);
  unsigned skew = rnd (16);
  struct iovec iov[3];
  size_t a, b;

  switch (rnd (4))
    {
    case 0:
      fill (buf + skew, len);
      CHECK (hostfile_pwrite (hf, buf + skew, len, off, rnd (4) == 0) == 0);
      memcpy (ref + off, buf + skew, len);
      break;
    case 1: /* three pieces, the middle one maybe empty */
      fill (buf + skew, len);
      a = rnd (len + 1);
      b = a + rnd (len - a + 1);
      iov[0] = (struct iovec){ buf + skew, a };
      iov[1] = (struct iovec){ buf + skew + a, b - a };
      iov[2] = (struct iovec){ buf + skew + b, len - b };
      CHECK (hostfile_pwritev (hf, iov, 3, off, false) == 0);
      memcpy (ref + off, buf + skew, len);
      break;
    case 2:
      CHECK (hostfile_zero (hf, off, len, rnd (2) ? HOSTFILE_ZERO_MAY_TRIM : 0)
             == 0);
      memset (ref + off, 0, len);
      break;
    default:
      read_back (hf, off, len);
    }
}

struct worker
{
  struct hostfile *hf;
  unsigned id;
  unsigned char last[64][PIECE]; /* what it wrote last in each piece */
};

/* Thread id owns bytes [k*THREADS*PIECE + id*PIECE, +PIECE): each
 * piece shares its units with the other threads' pieces.
 */
static void *
worker (void *arg)
{
  struct worker *w = arg;
  unsigned s = w->id + 7;

  for (unsigned i = 0; i < 3000; ++i)
    {
      unsigned k = (s = s * 1103515245 + 12345) >> 8 & 63;
      unsigned char v[PIECE];

      memset (v, (s >> 16) & 0xff, PIECE);
      if (hostfile_pwrite (w->hf, v, PIECE,
                           (uint64_t)k * THREADS * PIECE + w->id * PIECE, false)
          != 0)
        die ("concurrent write failed");
      memcpy (w->last[k], v, PIECE);
    }
  return NULL;
}

static void
concurrent (struct hostfile *hf)
{
  static struct worker w[THREADS];
  pthread_t th[THREADS];

  for (unsigned t = 0; t < THREADS; ++t)
    {
      w[t].hf = hf;
      w[t].id = t;
      /* Pieces never written keep the reference's bytes. */
      for (unsigned k = 0; k < 64; ++k)
        memcpy (w[t].last[k], ref + k * THREADS * PIECE + t * PIECE, PIECE);
      CHECK (pthread_create (&th[t], NULL, worker, &w[t]) == 0);
    }
  for (unsigned t = 0; t < THREADS; ++t)
    {
      CHECK (pthread_join (th[t], NULL) == 0);
      for (unsigned k = 0; k < 64; ++k)
        memcpy (ref + k * THREADS * PIECE + t * PIECE, w[t].last[k], PIECE);
    }
  read_back (hf, 0, 64 * THREADS * PIECE);
}

/* After hostfile_refuse_fast_zero a FAST zero of a whole aligned range
 * is refused and changes nothing.
 */
static void
fast_zero_refused (struct hostfile *hf)
{
  hostfile_refuse_fast_zero (hf);
  CHECK (hostfile_zero (hf, 65536, 65536, HOSTFILE_ZERO_FAST) == -ENOTSUP);
  read_back (hf, 65536, 65536);
  /* Without FAST it falls back to writing. */
  CHECK (hostfile_zero (hf, 65536 + 3, 65536, 0) == 0);
  memset (ref + 65536 + 3, 0, 65536);
  read_back (hf, 65536, 65536 + 3);
}

/* A zero that may trim skips a range only when it is all hole: data
 * written just now into a hole (still in the page cache when buffered)
 * is zeroed all the same, by a zero and by a zero with FUA.
 */
static void
zero_over_fresh_data (struct hostfile *hf)
{
  static const char data[] = "fresh data in a hole";
  const uint64_t off = 3 * 65536;
  unsigned i;

  for (i = 0; i < 2; ++i)
    {
      CHECK (hostfile_zero (hf, off, 65536, HOSTFILE_ZERO_MAY_TRIM) == 0);
      memset (ref + off, 0, 65536);
      CHECK (hostfile_pwrite (hf, data, sizeof data, off + 1000 + i, false)
             == 0);
      memcpy (ref + off + 1000 + i, data, sizeof data);
      read_back (hf, off, 65536);
      CHECK (
          hostfile_zero (hf, off, 65536,
                         HOSTFILE_ZERO_MAY_TRIM | (i ? HOSTFILE_ZERO_FUA : 0))
          == 0);
      memset (ref + off, 0, 65536);
      read_back (hf, off, 65536);
    }
  /* Zeroing the hole again leaves it reading as zeroes. */
  CHECK (hostfile_zero (hf, off, 65536, HOSTFILE_ZERO_MAY_TRIM) == 0);
  read_back (hf, off, 65536);
}

/* A hole is never reported where the reference has data. */
static void
check_extents (struct hostfile *hf)
{
  uint64_t off = 0, len;
  bool hole;

  while (off < SIZE)
    {
      CHECK (hostfile_extent (hf, off, SIZE - off, &len, &hole) == 0);
      CHECK (len >= 1 && len <= SIZE - off);
      if (hole)
        for (uint64_t i = off; i < off + len; ++i)
          CHECK (ref[i] == 0);
      off += len;
    }
}

/* The file as a plain descriptor reads it must be the reference. */
static void
check_file (const char *path, off_t size)
{
  static unsigned char whole[SIZE];
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  struct stat st;

  CHECK (fd >= 0 && fstat (fd, &st) == 0);
  CHECK (st.st_size == size);
  CHECK (pread (fd, whole, SIZE, 0) == SIZE);
  close (fd);
  if (memcmp (whole, ref, SIZE) != 0)
    die ("%s: file differs from the reference", path);
}

static void
run (const char *dir, unsigned flags)
{
  char path[4096];
  struct hostfile_error err;
  struct hostfile *hf;
  int fd;

  snprintf (path, sizeof path, "%s/hostfile-%u.img", dir, flags);
  fill (ref, SIZE);
  fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK (fd >= 0 && write (fd, ref, SIZE) == SIZE && close (fd) == 0);

  hf = hostfile_open (path, flags | HOSTFILE_WRITE, &err);
  if (hf == NULL)
    die ("%s: %s", path, err.msg);
  CHECK (hf->writable && hf->direct == !!(flags & HOSTFILE_DIRECT));
  CHECK (hostfile_refresh_size (hf) == SIZE);
  CHECK ((flags & HOSTFILE_GROW) || !hf->direct || hf->bfd >= 0);
  for (unsigned i = 0; i < 3000; ++i)
    random_op (hf);
  read_back (hf, SIZE - 5000, 5000); /* the tail */
  concurrent (hf);
  check_extents (hf);
  fast_zero_refused (hf);
  zero_over_fresh_data (hf);
  CHECK (hostfile_pread (hf, got, 10, SIZE - 5) == -EIO); /* past the end */
  CHECK (hostfile_flush (hf) == 0);
  check_file (path, SIZE);

  if (flags & HOSTFILE_GROW)
    {
      /* A write past the end grows the file; the gap reads as zeroes. */
      static const char tail[] = "past the end";
      CHECK (hostfile_pwrite (hf, tail, sizeof tail, SIZE + 100, true) == 0);
      CHECK (hostfile_current_size (hf) >= SIZE + 100 + (int64_t)sizeof tail);
      CHECK (hostfile_pread (hf, got, 100 + sizeof tail, SIZE) == 0);
      for (unsigned i = 0; i < 100; ++i)
        CHECK (got[i] == 0);
      CHECK (memcmp (got + 100, tail, sizeof tail) == 0);
      /* The qcow2 library's view is the same file. */
      CHECK (hf->io.pread (&hf->io, got, 5, SIZE + 100) == 0);
      CHECK (memcmp (got, tail, 5) == 0);
      CHECK (hf->io.pwritev && hf->io.max_size > SIZE);
    }
  hostfile_close (hf);
  printf ("hostfile %s%s: ok\n",
          flags & HOSTFILE_DIRECT ? "direct" : "buffered",
          flags & HOSTFILE_GROW ? " grow" : "");
}

int
main (int argc, char *argv[])
{
  if (argc != 2)
    die ("usage: %s DIR", argv[0]);
  run (argv[1], 0);
  run (argv[1], HOSTFILE_GROW);
  run (argv[1], HOSTFILE_DIRECT);
  run (argv[1], HOSTFILE_DIRECT | HOSTFILE_GROW);
  return 0;
}
