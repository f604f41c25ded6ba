/* nbdstack qcow2 library: libFuzzer target.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The input is a whole image file.  It is opened from memory (active
 * layer, snapshot "1", and over a backing layer), then read and mapped
 * at a few places that depend on the image, with a small L2 cache so
 * eviction is exercised too.  Then it is opened writable on a growing
 * in-memory copy (bounded, so a hostile image cannot make it grow
 * without end), written at a few places, flushed and closed.  Any
 * sanitizer report or crash is a bug: hostile images must only ever
 * produce errors.
 */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2.h"

#define MAX_READ 16384

static void
exercise (struct qcow2_image *img, const uint8_t *data, size_t size)
{
  static unsigned char buf[MAX_READ];
  struct qcow2_error err;
  uint64_t vsize = qcow2_get_size (img), off, len;
  uint64_t picks[6];
  unsigned flags, i;

  if (vsize == 0)
    return;
  /* Offsets: start, end, middle, and a few taken from the input's
   * tail so the fuzzer can steer them.
   */
  picks[0] = 0;
  picks[1] = vsize - 1;
  picks[2] = vsize / 2;
  for (i = 3; i < 6; ++i)
    {
      uint64_t v = 0;
      if (size >= 8 * (i - 2))
        memcpy (&v, data + size - 8 * (i - 2), 8);
      picks[i] = v % vsize;
    }
  for (i = 0; i < 6; ++i)
    {
      off = picks[i];
      len = vsize - off < MAX_READ ? vsize - off : MAX_READ;
      if (i >= 3)
        len = 1 + picks[(i + 1) % 6] % len;
      qcow2_pread (img, buf, len, off, &err);
    }
  /* Walk the map from the start, bounded. */
  off = 0;
  for (i = 0; i < 64 && off < vsize; ++i)
    {
      if (qcow2_block_status (img, off, vsize - off, &len, &flags, &err) == -1)
        break;
      if (len == 0 || len > vsize - off)
        abort (); /* contract violation */
      off += len;
    }
}

/* Writes, zeroes and discards of a few sizes at offsets the input
 * steers, read back, then a flush.  Errors are expected; only the
 * absence of crashes matters.
 */
static void
exercise_writes (struct qcow2_image *img, const uint8_t *data, size_t size)
{
  static unsigned char buf[MAX_READ];
  struct qcow2_error err;
  uint64_t vsize = qcow2_get_size (img);
  unsigned i;

  if (vsize == 0)
    return;
  memset (buf, 0x5a, sizeof buf);
  for (i = 0; i < 4; ++i)
    {
      uint64_t v = 0, off, len;
      if (size >= 8 * (i + 1))
        memcpy (&v, data + size - 8 * (i + 1), 8);
      off = v % vsize;
      len = 1 + (v >> 40) % MAX_READ;
      if (len > vsize - off)
        len = vsize - off;
      /* Writes mostly; zeroes and discards as the input says. */
      switch ((v >> 60) & 7)
        {
        case 0:
          if (qcow2_zero (
                  img, len, off,
                  (v >> 59) & 1 ? QCOW2_ZERO_MAY_UNMAP : QCOW2_ZERO_FAST, &err)
                  == -1
              && err.errnum != ENOTSUP)
            return;
          break;
        case 1:
          if (qcow2_discard (img, len, off, &err) == -1)
            return;
          break;
        default:
          if (qcow2_pwrite (img, buf, len, off, &err) == -1)
            return;
        }
      qcow2_pread (img, buf, len, off, &err);
    }
  qcow2_flush (img, &err);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  /* Passes: the active layer; snapshot "1"; the active layer over a
   * backing layer (a raw file of zeroes, shorter than most disks), as
   * backing=follow builds it.
   */
  static const char *const snapshots[] = { NULL, "1", NULL };
  static unsigned char backing[65536];
  static struct qcow2_hostio *backing_io;
  unsigned char *copy = malloc (size ? size : 1);
  struct qcow2_hostio *io;
  uint32_t cluster_size = 0;
  unsigned i;

  if (backing_io == NULL)
    backing_io = qcow2_hostio_mem (backing, sizeof backing);
  if (copy == NULL)
    return 0;
  memcpy (copy, data, size);
  io = qcow2_hostio_mem (copy, size);
  for (i = 0; io && i < 3; ++i)
    {
      struct qcow2_open_options opts
          = { .l2_cache_size = 4096, .snapshot = snapshots[i] };
      struct qcow2_error err;
      struct qcow2_image *img = qcow2_open (io, &opts, &err);
      if (img == NULL)
        continue;
      cluster_size = qcow2_get_cluster_size (img);
      if (i == 2 && backing_io)
        qcow2_set_backing (img, &qcow2_raw_layer_ops, backing_io,
                           sizeof backing);
      exercise (img, data, size);
      qcow2_close (img);
    }
  qcow2_hostio_close (io);

  /* Writable: at most 16 MiB more than the input; not with clusters
   * over 64 KiB, whose every write copies megabytes (the fuzzer would
   * run a hundred times slower for code the smaller sizes cover).
   */
  io = cluster_size && cluster_size <= 65536
           ? qcow2_hostio_mem_rw (data, size, size + 16 * 1024 * 1024, false)
           : NULL;
  if (io)
    {
      struct qcow2_open_options opts = { .l2_cache_size = 4096,
                                         .writable = true,
                                         .refcount_cache_blocks = 4 };
      struct qcow2_error err;
      struct qcow2_image *img = qcow2_open (io, &opts, &err);
      if (img)
        {
          exercise_writes (img, data, size);
          qcow2_close_err (img, &err);
        }
      qcow2_hostio_close (io);
    }
  free (copy);
  return 0;
}
