/* nbdstack qcow2 library: the guest-to-host mapping (L1 and L2
 * entries), as qemu's qcow2-cluster.c.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: no table or data cluster offset read from an L1 or L2
 * entry is used before it passed the checks here (aligned, inside the
 * file, not over the header's tables), so a hostile entry is an I/O
 * error for the one request that meets it.  For writing: once
 * qcow2_get_l2_for_write returned a table, the L1 entry stays (COPIED,
 * the same table) for as long as the image is open, and a reference an
 * entry drops is released only after the next commit (commit.c).
 *
 * Reading: a guest range is cut into runs that read the same way
 * (unallocated, zero, data at consecutive host offsets, one compressed
 * cluster) by walking its L2 table.  Writing: a missing L2 table is
 * made in a cache slot, and one shared with a snapshot (no COPIED in
 * the L1 entry) is first copied for the active layer (cow_l2).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-internal.h"

/* ---- checks of offsets found in entries ---- */

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

/* The table at 'l2_off' (checked) from the cache: 0 or -1. */
static int
get_table (struct qcow2_image *img, uint64_t l2_off, struct l2_ref *ref,
           struct qcow2_error *err)
{
  int r = l2_cache_get (img->l2, l2_off, ref);

  return r < 0 ? qcow2_io_error_at (err, r, "reading L2 table", l2_off) : 0;
}

uint64_t *
qcow2_l2_entry (const struct qcow2_image *img, const struct l2_ref *ref,
                uint64_t gc)
{
  const uint64_t l2_idx = gc & ((1ULL << img->l2_bits) - 1);

  return (uint64_t *)((char *)ref->table + l2_idx * img->l2_entry_bytes);
}

/* ---- looking up runs ---- */

/* [off, off+max) starts in an L1 entry with no table: the run of
 * unallocated bytes up to the next table, merging neighbours so that a
 * sparse disk is described in few steps.
 */
static void
unallocated_run (const struct qcow2_image *img, uint64_t off, uint64_t end,
                 struct qcow2_run *run)
{
  const unsigned l2_shift = img->cluster_bits + img->l2_bits;
  uint64_t l1_idx = off >> l2_shift;
  uint64_t table_end = (l1_idx + 1) << l2_shift;

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
}

/* Walk the entries of table 'table' from 'off' to 'table_end' while
 * they read the same way as the first: the run's type and host in
 * *run, where it stopped in *pos.  0 or -1.
 */
static int
walk_table (struct qcow2_image *img, const uint64_t *table, uint64_t off,
            uint64_t table_end, struct qcow2_run *run, uint64_t *posp,
            struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size, scs = 1ULL << img->sc_bits;
  uint64_t pos = off, expect = 0;
  int first = -1;

  while (pos < table_end)
    {
      uint64_t idx = (pos >> img->cluster_bits) & ((1ULL << img->l2_bits) - 1);
      const uint64_t *ent
          = (const uint64_t *)((const char *)table + idx * img->l2_entry_bytes);
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
          return -1;
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
            return -1;
          break; /* the next call reports it */
        }
      if (t == SC_COMPRESSED)
        next = (pos | (cs - 1)) + 1;
      else
        next = (pos | (scs - 1)) + 1;
      expect = host + (next - pos);
      pos = next;
    }
  run->type = first;
  *posp = pos;
  return 0;
}

static int
get_run (struct qcow2_image *img, uint64_t off, uint64_t max,
         struct qcow2_run *run, struct qcow2_error *err)
{
  const unsigned l2_shift = img->cluster_bits + img->l2_bits;
  const uint64_t end = off + max; /* <= size < 2^63 */
  const uint64_t l1_idx = off >> l2_shift;
  uint64_t table_end = (l1_idx + 1) << l2_shift;
  uint64_t l2_off, pos;
  struct l2_ref ref;
  int r;

  if (l1_idx >= img->l1_size || (img->l1[l1_idx] & L1E_OFFSET_MASK) == 0)
    {
      unallocated_run (img, off, end, run);
      return 0;
    }
  l2_off = img->l1[l1_idx] & L1E_OFFSET_MASK;
  if (qcow2_check_l2_offset (img, l2_off, l1_idx, err) == -1
      || get_table (img, l2_off, &ref, err) == -1)
    return -1;
  if (table_end > end)
    table_end = end;
  r = walk_table (img, ref.table, off, table_end, run, &pos, err);
  l2_cache_put (&ref);
  if (r == -1)
    return -1;
  run->len = (pos < end ? pos : end) - off;
  return 0;
}

int
qcow2_map_run (struct qcow2_image *img, uint64_t off, uint64_t max,
               struct qcow2_run *run, struct qcow2_error *err)
{
  if (!img->writable)
    return get_run (img, off, max, run, err);

  ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE (&img->lock);
  return get_run (img, off, max, run, err);
}

int
qcow2_map_compressed (struct qcow2_image *img, uint64_t goff, bool *compressed,
                      struct qcow2_error *err)
{
  ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE (&img->lock);
  const uint64_t gc = goff >> img->cluster_bits;
  const uint64_t l1_idx = gc >> img->l2_bits;
  const uint64_t l2_off = img->l1[l1_idx] & L1E_OFFSET_MASK;
  struct l2_ref ref;

  *compressed = false;
  if (l2_off == 0)
    return 0;
  if (qcow2_check_l2_offset (img, l2_off, l1_idx, err) == -1
      || get_table (img, l2_off, &ref, err) == -1)
    return -1;
  *compressed
      = (get_be64 (qcow2_l2_entry (img, &ref, gc)) & OFLAG_COMPRESSED) != 0;
  l2_cache_put (&ref);
  return 0;
}

/* ---- tables for writing ---- */

/* A slot for the table at 'offset': 0, QCOW2_RETRY or -1. */
static int
get_write (struct qcow2_image *img, uint64_t offset, bool fresh,
           struct l2_ref *ref, struct qcow2_error *err)
{
  int r = l2_cache_get_write (img->l2, offset, fresh, ref);

  if (r == -EAGAIN)
    return QCOW2_RETRY;
  return r < 0 ? qcow2_io_error_at (err, r, "L2 table", offset) : 0;
}

/* A new, zeroed table at a new metadata cluster *c, in a cache slot:
 * 0, QCOW2_RETRY (the cluster given back: nothing refers to it) or -1
 * (on error *c stays counted: a leak, never corruption).
 */
static int
new_table (struct qcow2_image *img, uint64_t *c, struct l2_ref *ref,
           struct qcow2_error *err)
{
  int r;

  if (qcow2_alloc_cluster (img, true, 0, c, err) == -1
      || qcow2_meta_add (img, QCOW2_META_L2, *c, err) == -1)
    return -1;
  r = get_write (img, *c << img->cluster_bits, true, ref, err);
  if (r == QCOW2_RETRY)
    {
      qcow2_meta_remove (img, *c);
      if (qcow2_rc_update (img, *c, -1, err) == -1)
        return -1;
      qcow2_alloc_reuse (img, *c);
    }
  return r;
}

/* L1 entry 'l1_idx' now points at the table at cluster 'c', ours. */
static void
set_l1 (struct qcow2_image *img, uint64_t l1_idx, uint64_t c)
{
  img->l1[l1_idx] = (c << img->cluster_bits) | OFLAG_COPIED;
  qcow2_l1_mark_dirty (img, l1_idx);
}

/* The table at 'old' is shared (with a snapshot): give the active L1
 * its own copy.  The data clusters keep their counts (one per L1 table
 * that reaches them, through either copy); the new table is counted
 * once, and the old one loses the active L1's reference after the
 * commit that points the L1 entry at the copy.  0, QCOW2_RETRY or -1.
 */
static int
cow_l2 (struct qcow2_image *img, uint64_t l1_idx, uint64_t old,
        struct l2_ref *ref, struct qcow2_error *err)
{
  struct l2_ref src;
  uint64_t c;
  int r;

  if (get_table (img, old, &src, err) == -1)
    return -1;
  r = new_table (img, &c, ref, err);
  if (r == 0)
    memcpy ((void *)ref->table, src.table, img->cluster_size);
  l2_cache_put (&src);
  if (r != 0)
    return r;
  if (qcow2_free_after_commit (img, old >> img->cluster_bits, err) == -1)
    {
      l2_cache_put (ref);
      return -1;
    }
  /* The old table stays a snapshot's (not checked, as in qemu). */
  qcow2_meta_remove (img, old >> img->cluster_bits);
  set_l1 (img, l1_idx, c);
  return 0;
}

int
qcow2_get_l2_for_write (struct qcow2_image *img, uint64_t l1_idx,
                        struct l2_ref *ref, struct qcow2_error *err)
{
  uint64_t l1e = img->l1[l1_idx];
  uint64_t l2_off = l1e & L1E_OFFSET_MASK, c;
  int r;

  if (l2_off == 0)
    {
      r = new_table (img, &c, ref, err);
      if (r != 0)
        return r;
      set_l1 (img, l1_idx, c);
      return 0;
    }
  if (qcow2_check_l2_offset (img, l2_off, l1_idx, err) == -1)
    return -1;
  if (!(l1e & OFLAG_COPIED))
    return cow_l2 (img, l1_idx, l2_off, ref, err);
  return get_write (img, l2_off, false, ref, err);
}

int
qcow2_free_entry (struct qcow2_image *img, uint64_t e, bool copied,
                  uint64_t guest, struct qcow2_error *err)
{
  /* Never a metadata cluster, whatever a hostile entry says. */
  if (qcow2_meta_check_entry (img, e, copied, err) == -1)
    return -1;
  if (e & OFLAG_COMPRESSED)
    {
      /* Its sectors may share host clusters with neighbours: each host
       * cluster it touches holds one reference for it.
       */
      uint64_t coffset = e & img->coffset_mask;
      uint64_t nb = ((e >> img->csize_shift) & img->csize_mask) + 1;
      uint64_t start = coffset & ~511ULL, end = start + nb * 512, c;

      for (c = start >> img->cluster_bits; c <= (end - 1) >> img->cluster_bits;
           ++c)
        if (qcow2_free_after_commit (img, c, err) == -1)
          return -1;
      return 0;
    }
  if ((e & L2E_OFFSET_MASK) && (copied || !(e & OFLAG_COPIED)))
    {
      if (qcow2_free_after_commit (
              img, (e & L2E_OFFSET_MASK) >> img->cluster_bits, err)
          == -1)
        return -1;
      qcow2_alloc_note_drop (img, e, guest);
    }
  return 0;
}
