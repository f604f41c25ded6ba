/* nbdstack qcow2 library: reading the virtual disk.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A guest range is read a run at a time (mapping.c cuts it into runs
 * that read the same way: unallocated, zero, data at consecutive host
 * offsets, one compressed cluster), each looked up under the lock
 * (shared) on a writable image and read without it: a writer may then
 * change the entry (the reader reads the old data, or the new one
 * written in place), but the cluster cannot be freed and reused before
 * the reader's request ends (the reuse barrier, inflight.c).  Block
 * status comes from the same runs.  The layer ops at the end let one
 * image be another's backing file.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

/* ---- reading ---- */

static int
read_backing (struct qcow2_image *img, char *buf, uint64_t len, uint64_t off,
              struct qcow2_error *err)
{
  uint64_t n = 0;

  if (img->backing_ops && off < img->backing_size)
    {
      n = img->backing_size - off < len ? img->backing_size - off : len;
      if (img->backing_ops->pread (img->backing_opaque, buf, n, off, err) == -1)
        return -1;
    }
  memset (buf + n, 0, len - n);
  return 0;
}

static int
read_host (struct qcow2_image *img, char *buf, uint64_t len, uint64_t host,
           struct qcow2_error *err)
{
  struct qcow2_hostio *io = img->data_io;
  /* Grows while writers allocate (under the lock); read here without. */
  uint64_t fsize = io == img->io
                       ? __atomic_load_n (&img->file_size, __ATOMIC_RELAXED)
                       : img->data_file_size;
  uint64_t n = host < fsize ? (fsize - host < len ? fsize - host : len) : 0;
  int r;

  /* The end of a last cluster the file does not cover (the file was not
   * extended over it, or a sparse data file) reads as zeroes, as in
   * qemu; a cluster starting past the end was refused by the mapping.
   */
  if (n > 0)
    {
      r = io->pread (io, buf, n, host);
      if (r < 0)
        {
          qcow2_set_error (err, -r, "reading data at %#" PRIx64 ": %s", host,
                           strerror (-r));
          return -1;
        }
    }
  memset (buf + n, 0, len - n);
  return 0;
}

int
qcow2_pread_unlocked (struct qcow2_image *img, void *buf, size_t count,
                      uint64_t offset, struct qcow2_error *err)
{
  char *p = buf;

  if (offset > img->size || count > img->size - offset)
    {
      qcow2_set_error (err, EINVAL, "read beyond the end of the disk");
      return -1;
    }
  while (count > 0)
    {
      struct qcow2_run run;
      int r = 0;

      if (qcow2_map_run (img, offset, count, &run, err) == -1)
        return -1;
      switch (run.type)
        {
        case SC_UNALLOCATED:
          r = read_backing (img, p, run.len, offset, err);
          break;
        case SC_ZERO_PLAIN:
        case SC_ZERO_ALLOC:
          memset (p, 0, run.len);
          break;
        case SC_NORMAL:
          r = read_host (img, p, run.len, run.host, err);
          break;
        case SC_COMPRESSED:
          r = qcow2_read_compressed_part (
              img, run.host, p, offset & (img->cluster_size - 1), run.len, err);
          break;
        }
      if (r == -1)
        return -1;
      p += run.len;
      offset += run.len;
      count -= run.len;
    }
  return 0;
}

/* A writable image changes its tables in place: a reader looks up each
 * run under the lock (shared) and reads the data without it, inside a
 * registered request (the reuse barrier).  A read-only image takes no
 * lock at all.  A failed image serves nothing, as qemu does: after a
 * failed write-back, a table in the cache may be newer than the disk
 * and be evicted, so what a read would find is not known.
 */
int
qcow2_pread (struct qcow2_image *img, void *buf, size_t count, uint64_t offset,
             struct qcow2_error *err)
{
  struct qcow2_req req;
  int r;

  if (!img->writable)
    return qcow2_pread_unlocked (img, buf, count, offset, err);
  if (img_failed (img))
    return qcow2_failed_error (err, false);
  qcow2_req_begin (img, &req);
  r = qcow2_pread_unlocked (img, buf, count, offset, err);
  qcow2_req_end (img, &req);
  /* Failed meanwhile: what was read may come from a table that no
   * longer matches the disk.
   */
  if (r == 0 && img_failed (img))
    r = qcow2_failed_error (err, false);
  return r;
}

static int block_status_unlocked (struct qcow2_image *img, uint64_t offset,
                                  uint64_t max, uint64_t *len, unsigned *flags,
                                  struct qcow2_error *err);

int
qcow2_block_status (struct qcow2_image *img, uint64_t offset, uint64_t max,
                    uint64_t *len, unsigned *flags, struct qcow2_error *err)
{
  struct qcow2_req req;
  int r;

  if (!img->writable)
    return block_status_unlocked (img, offset, max, len, flags, err);
  if (img_failed (img))
    return qcow2_failed_error (err, false);
  qcow2_req_begin (img, &req);
  r = block_status_unlocked (img, offset, max, len, flags, err);
  qcow2_req_end (img, &req);
  if (r == 0 && img_failed (img))
    r = qcow2_failed_error (err, false);
  return r;
}

static int
block_status_unlocked (struct qcow2_image *img, uint64_t offset, uint64_t max,
                       uint64_t *len, unsigned *flags, struct qcow2_error *err)
{
  struct qcow2_run run;

  if (max == 0 || offset >= img->size || max > img->size - offset)
    {
      qcow2_set_error (err, EINVAL, "block status beyond the end of the disk");
      return -1;
    }
  if (qcow2_map_run (img, offset, max, &run, err) == -1)
    return -1;
  *len = run.len;
  switch (run.type)
    {
    case SC_NORMAL:
      *flags = 0;
      /* Allocated but never written (preallocation=metadata, a sparse
       * data file) reads as zeroes: say so, as qemu does.
       */
      if (img->data_io->block_status)
        {
          uint64_t hlen;
          bool hole;
          if (img->data_io->block_status (img->data_io, run.host, run.len,
                                          &hlen, &hole)
                  == 0
              && hlen > 0 && hlen <= run.len)
            {
              *len = hlen;
              *flags = hole ? QCOW2_STATUS_ZERO : 0;
            }
        }
      break;
    case SC_COMPRESSED:
      *flags = 0;
      break;
    case SC_ZERO_ALLOC:
      *flags = QCOW2_STATUS_ZERO;
      break;
    case SC_ZERO_PLAIN:
      *flags = QCOW2_STATUS_ZERO | QCOW2_STATUS_HOLE;
      break;
    case SC_UNALLOCATED:
      if (img->backing_ops && offset < img->backing_size)
        {
          uint64_t n = img->backing_size - offset;
          /* What the backing file has shows through. */
          return img->backing_ops->block_status (img->backing_opaque, offset,
                                                 n < run.len ? n : run.len, len,
                                                 flags, err);
        }
      *flags = QCOW2_STATUS_ZERO | QCOW2_STATUS_HOLE;
      break;
    }
  return 0;
}

/* ---- layers for backing chains ---- */

static int
image_layer_pread (void *opaque, void *buf, size_t count, uint64_t offset,
                   struct qcow2_error *err)
{
  return qcow2_pread (opaque, buf, count, offset, err);
}

static int
image_layer_status (void *opaque, uint64_t offset, uint64_t max, uint64_t *len,
                    unsigned *flags, struct qcow2_error *err)
{
  return qcow2_block_status (opaque, offset, max, len, flags, err);
}

const struct qcow2_layer_ops qcow2_image_layer_ops = {
  .pread = image_layer_pread,
  .block_status = image_layer_status,
};

static int
raw_layer_pread (void *opaque, void *buf, size_t count, uint64_t offset,
                 struct qcow2_error *err)
{
  struct qcow2_hostio *io = opaque;
  int r = io->pread (io, buf, count, offset);

  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading the backing file at %#" PRIx64 ": %s",
                       offset, strerror (-r));
      return -1;
    }
  return 0;
}

static int
raw_layer_status (void *opaque, uint64_t offset, uint64_t max, uint64_t *len,
                  unsigned *flags, struct qcow2_error *err)
{
  struct qcow2_hostio *io = opaque;
  bool hole = false;

  *len = max;
  if (io->block_status && io->block_status (io, offset, max, len, &hole) < 0)
    {
      *len = max; /* unknown: call it data */
      hole = false;
    }
  *flags = hole ? QCOW2_STATUS_HOLE | QCOW2_STATUS_ZERO : 0;
  return 0;
}

const struct qcow2_layer_ops qcow2_raw_layer_ops = {
  .pread = raw_layer_pread,
  .block_status = raw_layer_status,
};
