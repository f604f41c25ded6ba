/* Unit test of the qcow2 library on its own, over the in-memory host
 * I/O: the whole disk and random ranges read on 4 threads at once must
 * equal qemu's reading (a raw file made by qemu-img convert), and the
 * block status must tile the disk.
 *   test-qcow2-unit IMAGE.qcow2 REFERENCE.raw [L2-CACHE-BYTES [SNAPSHOT]]
 * (L2-CACHE-BYTES 0: the default; SNAPSHOT: serve that snapshot.)
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2.h"
#include "slurp.h"

static struct qcow2_image *img;
static unsigned char *ref;
static uint64_t size;

static void *
reader (void *arg)
{
  unsigned seed = (unsigned)(uintptr_t)arg;
  unsigned char *buf = malloc (1 << 20);
  unsigned i;

  for (i = 0; i < 2000; ++i)
    {
      uint64_t off = ((uint64_t)rand_r (&seed) << 16 ^ rand_r (&seed)) % size;
      uint64_t len = 1 + rand_r (&seed) % (1 << 20);
      struct qcow2_error err;

      if (len > size - off)
        len = size - off;
      if (qcow2_pread (img, buf, len, off, &err) == -1)
        {
          fprintf (stderr, "pread %#llx+%llu: %s\n", (unsigned long long)off,
                   (unsigned long long)len, err.msg);
          exit (EXIT_FAILURE);
        }
      if (memcmp (buf, ref + off, len) != 0)
        {
          fprintf (stderr, "data differs in %#llx+%llu\n",
                   (unsigned long long)off, (unsigned long long)len);
          exit (EXIT_FAILURE);
        }
    }
  free (buf);
  return NULL;
}

int
main (int argc, char *argv[])
{
  struct qcow2_open_options opts = { 0 };
  struct qcow2_error err;
  struct qcow2_hostio *io;
  size_t img_len, ref_len;
  unsigned char *file, *all;
  pthread_t th[4];
  uint64_t off, len;
  unsigned flags, i;

  if (argc < 3)
    {
      fprintf (stderr,
               "usage: %s IMAGE REFERENCE [L2-CACHE-BYTES [SNAPSHOT]]\n",
               argv[0]);
      exit (EXIT_FAILURE);
    }
  if (argc > 3)
    opts.l2_cache_size = strtoull (argv[3], NULL, 0);
  if (argc > 4)
    opts.snapshot = argv[4];
  file = slurp (argv[1], &img_len);
  ref = slurp (argv[2], &ref_len);
  io = qcow2_hostio_mem (file, img_len);
  img = qcow2_open (io, &opts, &err);
  if (img == NULL)
    {
      fprintf (stderr, "%s: %s\n", argv[1], err.msg);
      exit (EXIT_FAILURE);
    }
  size = qcow2_get_size (img);
  if (size != ref_len)
    {
      fprintf (stderr, "size %llu != reference %zu\n", (unsigned long long)size,
               ref_len);
      exit (EXIT_FAILURE);
    }

  /* The whole disk in one read. */
  all = malloc (size ? size : 1);
  if (qcow2_pread (img, all, size, 0, &err) == -1
      || memcmp (all, ref, size) != 0)
    {
      fprintf (stderr, "whole-disk read differs or fails: %s\n", err.msg);
      exit (EXIT_FAILURE);
    }
  free (all);

  /* Reads past the end are refused, not served. */
  if (size > 0 && qcow2_pread (img, ref, 2, size - 1, &err) != -1)
    {
      fprintf (stderr, "a read past the end succeeded\n");
      exit (EXIT_FAILURE);
    }

  /* Extents tile the disk, and a ZERO extent reads as zeroes. */
  for (off = 0; off < size; off += len)
    {
      if (qcow2_block_status (img, off, size - off, &len, &flags, &err) == -1)
        {
          fprintf (stderr, "block status at %llu: %s\n",
                   (unsigned long long)off, err.msg);
          exit (EXIT_FAILURE);
        }
      if (len == 0 || len > size - off)
        {
          fprintf (stderr, "bad extent length %llu\n", (unsigned long long)len);
          exit (EXIT_FAILURE);
        }
      if (flags & QCOW2_STATUS_ZERO)
        for (i = 0; i < len; ++i)
          if (ref[off + i])
            {
              fprintf (stderr, "extent at %llu says zero, but is not\n",
                       (unsigned long long)off);
              exit (EXIT_FAILURE);
            }
    }

  /* Random ranges on 4 threads at once. */
  for (i = 0; i < 4; ++i)
    pthread_create (&th[i], NULL, reader, (void *)(uintptr_t)(i + 1));
  for (i = 0; i < 4; ++i)
    pthread_join (th[i], NULL);

  qcow2_close (img);
  qcow2_hostio_close (io);
  free (file);
  free (ref);
  printf ("ok: %s\n", argv[1]);
  return 0;
}
