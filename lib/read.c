/* nbdstack qcow2 library: reading the virtual disk.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A guest range is cut into runs that read the same way (unallocated,
 * zero, data at consecutive host offsets, one compressed cluster) by
 * walking its L2 table; each host cluster is checked against the file
 * and the metadata before it is read, so a hostile L2 entry is an I/O
 * error for the one request that meets it.  Block status comes from the
 * same runs.  The layer ops at the end let one image be another's
 * backing file.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

/* How one (sub)cluster reads, like qemu's QCOW2_SUBCLUSTER_* types. */
enum sc_type
{
  SC_UNALLOCATED, /* goes to the backing file, or zeroes */
  SC_ZERO_PLAIN,  /* zeroes, no host cluster */
  SC_ZERO_ALLOC,  /* zeroes, host cluster kept */
  SC_NORMAL,      /* data at a host offset */
  SC_COMPRESSED,  /* the cluster is compressed */
};

/* A run of the virtual disk that reads the same way. */
struct run
{
  enum sc_type type;
  uint64_t len;
  uint64_t host; /* SC_NORMAL: host offset of the start;
                  * SC_COMPRESSED: the L2 entry */
};

/* Is [off, off+len) of the qcow2 file metadata that the header points
 * at directly?  (The cheap part of qemu's overlap checks.)
 */
static bool
overlaps_metadata (const struct qcow2_image *img, uint64_t off, uint64_t len)
{
  return off < img->cluster_size
         || ranges_overlap (off, len, img->active_l1_offset,
                            img->active_l1_bytes)
         || ranges_overlap (off, len, img->l1_offset,
                            (uint64_t)img->l1_size * 8)
         || ranges_overlap (off, len, img->reftable_offset, img->reftable_bytes)
         || ranges_overlap (off, len, img->snapshots_offset,
                            img->snapshots_bytes);
}

/* How subcluster 'sc' of the cluster with entry 'e' and bitmap 'bm'
 * reads; -1 if the combination is invalid.
 */
static int
classify (const struct qcow2_image *img, uint64_t e, uint64_t bm, unsigned sc)
{
  bool has_host
      = (e & L2E_OFFSET_MASK) != 0 || (img->data_file && (e & OFLAG_COPIED));

  if (e & OFLAG_COMPRESSED)
    return SC_COMPRESSED;
  if (img->ext_l2)
    {
      if (has_host)
        {
          if ((bm >> 32) & bm)
            return -1;
          if (bm & (1ULL << (32 + sc)))
            return SC_ZERO_ALLOC;
          if (bm & (1ULL << sc))
            return SC_NORMAL;
          return SC_UNALLOCATED;
        }
      if (bm & BITMAP_ALL_ALLOC)
        return -1;
      if (bm & (1ULL << (32 + sc)))
        return SC_ZERO_PLAIN;
      return SC_UNALLOCATED;
    }
  if (e & OFLAG_ZERO)
    return (e & L2E_OFFSET_MASK) ? SC_ZERO_ALLOC : SC_ZERO_PLAIN;
  return has_host ? SC_NORMAL : SC_UNALLOCATED;
}

/* Check the host cluster of a normal entry before anything reads it. */
int
qcow2_check_data_cluster (const struct qcow2_image *img, uint64_t host,
                          uint64_t vofs, struct qcow2_error *err)
{
  if (host & (img->cluster_size - 1))
    {
      qcow2_set_error (err, EIO,
                       "data cluster offset %#" PRIx64 " is not "
                       "aligned (guest offset %#" PRIx64 ")",
                       host, vofs);
      return -1;
    }
  if (img->data_io != img->io)
    return 0; /* data file: guest offset == host offset,
               * no metadata in it */
  if (host >= img->file_size)
    {
      qcow2_set_error (err, EIO,
                       "data cluster offset %#" PRIx64 " is beyond "
                       "the end of the file (guest offset %#" PRIx64 ")",
                       host, vofs);
      return -1;
    }
  if (overlaps_metadata (img, host, img->cluster_size))
    {
      qcow2_set_error (err, EIO,
                       "data cluster offset %#" PRIx64 " overlaps "
                       "metadata (guest offset %#" PRIx64 ")",
                       host, vofs);
      return -1;
    }
  return 0;
}

int
qcow2_check_l2_offset (const struct qcow2_image *img, uint64_t l2_off,
                       uint64_t l1_idx, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;

  if (l2_off & (cs - 1))
    {
      qcow2_set_error (err, EIO,
                       "L2 table offset %#" PRIx64 " is not aligned "
                       "(L1 index %" PRIu64 ")",
                       l2_off, l1_idx);
      return -1;
    }
  if (l2_off >= img->file_size || cs > img->file_size - l2_off)
    {
      qcow2_set_error (err, EIO,
                       "L2 table offset %#" PRIx64 " is beyond the "
                       "end of the file (L1 index %" PRIu64 ")",
                       l2_off, l1_idx);
      return -1;
    }
  if (overlaps_metadata (img, l2_off, cs))
    {
      qcow2_set_error (err, EIO,
                       "L2 table offset %#" PRIx64 " overlaps "
                       "metadata (L1 index %" PRIu64 ")",
                       l2_off, l1_idx);
      return -1;
    }
  return 0;
}

static int
get_run (struct qcow2_image *img, uint64_t off, uint64_t max, struct run *run,
         struct qcow2_error *err)
{
  const unsigned l2_shift = img->cluster_bits + img->l2_bits;
  const uint64_t cs = img->cluster_size, scs = 1ULL << img->sc_bits;
  const uint64_t end = off + max; /* <= size < 2^63 */
  uint64_t l1_idx = off >> l2_shift;
  uint64_t table_end = (l1_idx + 1) << l2_shift;
  uint64_t l2_off, pos, expect = 0;
  struct l2_ref ref;
  int first = -1;

  if (l1_idx >= img->l1_size || (img->l1[l1_idx] & L1E_OFFSET_MASK) == 0)
    {
      /* Unallocated L2 tables: merge neighbours so that a sparse disk is
       * described in few steps.
       */
      while (table_end < end && l1_idx + 1 < img->l1_size
             && (img->l1[l1_idx + 1] & L1E_OFFSET_MASK) == 0)
        {
          l1_idx++;
          table_end += 1ULL << l2_shift;
        }
      if (l1_idx + 1 >= img->l1_size)
        table_end = end;
      run->type = SC_UNALLOCATED;
      run->len = (table_end < end ? table_end : end) - off;
      return 0;
    }

  l2_off = img->l1[l1_idx] & L1E_OFFSET_MASK;
  if (qcow2_check_l2_offset (img, l2_off, l1_idx, err) == -1)
    return -1;
  {
    int r = l2_cache_get (img->l2, l2_off, &ref);
    if (r < 0)
      {
        qcow2_set_error (err, -r, "reading L2 table at %#" PRIx64 ": %s",
                         l2_off, strerror (-r));
        return -1;
      }
  }

  pos = off;
  if (table_end > end)
    table_end = end;
  while (pos < table_end)
    {
      uint64_t idx = (pos >> img->cluster_bits) & ((1ULL << img->l2_bits) - 1);
      const uint64_t *ent = (const uint64_t *)((const char *)ref.table
                                               + idx * img->l2_entry_bytes);
      uint64_t e = get_be64 (ent);
      uint64_t bm = img->ext_l2 ? get_be64 (ent + 1) : 0;
      unsigned sc = (pos & (cs - 1)) >> img->sc_bits;
      uint64_t host = (e & L2E_OFFSET_MASK) + (pos & (cs - 1));
      uint64_t next;
      int t = classify (img, e, bm, sc);

      if (t == -1)
        {
          qcow2_set_error (err, EIO,
                           "invalid L2 entry %#" PRIx64 " bitmap %#" PRIx64
                           " (guest offset %#" PRIx64 ")",
                           e, bm, pos);
          goto fail;
        }
      if (first == -1)
        {
          first = t;
          run->host = t == SC_COMPRESSED ? e : host;
          expect = host;
        }
      else if (t != first || (t == SC_NORMAL && host != expect)
               || t == SC_COMPRESSED)
        break;
      /* Only check host clusters we are about to read. */
      if (t == SC_NORMAL && (pos == off || (pos & (cs - 1)) == 0)
          && qcow2_check_data_cluster (img, e & L2E_OFFSET_MASK, pos, err)
                 == -1)
        {
          if (pos == off)
            goto fail;
          break; /* the next call reports it */
        }
      if (t == SC_COMPRESSED)
        next = (pos | (cs - 1)) + 1;
      else
        next = (pos | (scs - 1)) + 1;
      expect = host + (next - pos);
      pos = next;
    }
  l2_cache_put (&ref);
  run->type = first;
  run->len = (pos < end ? pos : end) - off;
  return 0;

fail:
  l2_cache_put (&ref);
  return -1;
}

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

/* A run, looked up under the lock (shared) on a writable image: no
 * writer is changing an entry meanwhile.  Its data is read after the
 * lock is dropped: a writer may then change the entry (the reader reads
 * the old data, or the new one written in place), but the cluster
 * cannot be freed and reused before the reader's request ends (the
 * reuse barrier, commit.c).
 */
static int
locked_run (struct qcow2_image *img, uint64_t off, uint64_t max,
            struct run *run, struct qcow2_error *err)
{
  int r;

  if (!img->writable)
    return get_run (img, off, max, run, err);
  pthread_rwlock_rdlock (&img->lock);
  r = get_run (img, off, max, run, err);
  pthread_rwlock_unlock (&img->lock);
  return r;
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
      struct run run;
      int r = 0;

      if (locked_run (img, offset, count, &run, err) == -1)
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
  struct run run;

  if (max == 0 || offset >= img->size || max > img->size - offset)
    {
      qcow2_set_error (err, EINVAL, "block status beyond the end of the disk");
      return -1;
    }
  if (locked_run (img, offset, max, &run, err) == -1)
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
