/* nbdstack qcow2 library: refcounts for writing.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The refcount table (in memory, host order) points at refcount blocks,
 * one cluster of entries 2^refcount_order bits wide each; blocks are
 * loaded into a small cache on demand.  Nothing here syncs for ordinary
 * updates: the caller's commit writes dirty blocks and orders them
 * with flushes.
 *
 * The invariant that makes this simple: the refcounts in memory are
 * never below the references that could be on disk (increments happen
 * before anything points at a cluster; decrements only after the
 * pointer's removal is durable).  So any dirty block may be written
 * back at any moment, which is what evicting one does, and a crash
 * leaves at worst leaked clusters.
 *
 * New blocks are rare (one per cluster_size * 8 / width clusters) and
 * are made durable on the spot: the block is written, then its refcount
 * (in itself, or in the block that covers it) and a flush, then the
 * table entry and a flush.  A table that is too small grows the way
 * qemu grows it: new blocks and the new table go past everything in
 * use, describing themselves, and the header switches to the new table
 * only once all of it is on disk.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

#define REFT_OFFSET_MASK 0xfffffffffffffe00ULL
#define HEADER_REFTABLE_OFFSET 48 /* then refcount_table_clusters, 4 bytes */

struct rc_slot
{
  uint64_t index;  /* refcount table index */
  uint64_t offset; /* host offset of the block; 0: slot empty */
  unsigned char *data;
  uint64_t last_use;
  bool dirty;
};

struct refcounts
{
  uint64_t *table; /* host order */
  uint64_t entries;
  unsigned order;
  unsigned block_bits; /* log2 of entries per block */
  uint64_t max_value;
  struct rc_slot *slots;
  unsigned nslots;
  uint64_t clock;
  struct rc_slot *last; /* the last block used: most lookups hit it */
};

uint64_t
qcow2_rc_entry_get (const void *block, unsigned order, uint64_t i)
{
  const unsigned char *b = block;

  switch (order)
    {
    case 0:
      return (b[i / 8] >> (i % 8)) & 1;
    case 1:
      return (b[i / 4] >> (2 * (i % 4))) & 3;
    case 2:
      return (b[i / 2] >> (4 * (i % 2))) & 15;
    case 3:
      return b[i];
    case 4:
      return get_be16 (b + 2 * i);
    case 5:
      return get_be32 (b + 4 * i);
    default:
      return get_be64 (b + 8 * i);
    }
}

/* Sub-byte entries fill each byte from its least significant bit, as
 * qemu lays them out.
 */
void
qcow2_rc_entry_set (void *block, unsigned order, uint64_t i, uint64_t v)
{
  unsigned char *b = block;
  unsigned bits = 1u << order, shift;

  switch (order)
    {
    case 0:
    case 1:
    case 2:
      shift = bits * (i % (8 / bits));
      b += i / (8 / bits);
      *b = (*b & ~(((1u << bits) - 1) << shift)) | (unsigned)v << shift;
      break;
    case 3:
      b[i] = v;
      break;
    case 4:
      put_be16 (b + 2 * i, v);
      break;
    case 5:
      put_be32 (b + 4 * i, v);
      break;
    default:
      put_be64 (b + 8 * i, v);
      break;
    }
}

/* Is a refcount block at 'off' acceptable?  Checked when the table is
 * loaded, so later code can trust the table.
 */
static bool
block_offset_ok (const struct qcow2_image *img, uint64_t off)
{
  return (off & (img->cluster_size - 1)) == 0 && off >= img->cluster_size
         && off < img->file_size
         && !ranges_overlap (off, img->cluster_size, img->reftable_offset,
                             img->reftable_bytes)
         && !ranges_overlap (off, img->cluster_size, img->active_l1_offset,
                             img->active_l1_bytes);
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Two table entries naming one block would have a cluster's count
 * changed through one and read through the other; they would also make
 * every scan of the blocks (qcow2_rc_highest_used) cost table entries
 * times block size.  A real image never has them.
 */
static int
refuse_duplicates (struct qcow2_image *img, const struct refcounts *rc,
                   struct qcow2_error *err)
{
  uint64_t *sorted = malloc (rc->entries * 8 + 1), i, n = 0;
  int r = 0;

  if (sorted == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the refcounts");
      return -1;
    }
  for (i = 0; i < rc->entries; ++i)
    if (rc->table[i])
      sorted[n++] = rc->table[i];
  qsort (sorted, n, 8, cmp_u64);
  for (i = 1; i < n; ++i)
    if (sorted[i] == sorted[i - 1])
      {
        qcow2_set_error (err, EIO,
                         "the refcount table names block %#" PRIx64 " twice",
                         sorted[i]);
        r = -1;
        break;
      }
  free (sorted);
  return r;
}

int
qcow2_rc_open (struct qcow2_image *img, unsigned cache_blocks,
               struct qcow2_error *err)
{
  struct refcounts *rc = calloc (1, sizeof *rc);
  uint64_t i;
  int r;

  if (rc == NULL)
    goto nomem;
  img->rc = rc;
  rc->order = img->refcount_order;
  rc->block_bits = img->cluster_bits + 3 - rc->order;
  rc->max_value = rc->order == 6 ? UINT64_MAX : (1ULL << (1u << rc->order)) - 1;
  rc->entries = img->reftable_bytes / 8;
  rc->table = malloc (img->reftable_bytes);
  if (rc->table == NULL)
    goto nomem;
  r = img->io->pread (img->io, rc->table, img->reftable_bytes,
                      img->reftable_offset);
  if (r < 0)
    return qcow2_io_error_at (err, r, "reading the refcount table",
                              img->reftable_offset);
  for (i = 0; i < rc->entries; ++i)
    {
      uint64_t e = get_be64 (&rc->table[i]);
      rc->table[i] = e & REFT_OFFSET_MASK;
      if (rc->table[i] && !block_offset_ok (img, rc->table[i]))
        {
          qcow2_set_error (err, EIO,
                           "refcount table entry %" PRIu64
                           " points to an invalid refcount block %#" PRIx64,
                           i, e);
          return -1;
        }
    }
  if (refuse_duplicates (img, rc, err) == -1)
    return -1;
  rc->nslots = cache_blocks < 4 ? 4 : cache_blocks;
  rc->slots = calloc (rc->nslots, sizeof *rc->slots);
  if (rc->slots == NULL)
    goto nomem;
  return 0;

nomem:
  qcow2_set_error (err, ENOMEM, "out of memory for the refcounts");
  return -1;
}

void
qcow2_rc_close (struct qcow2_image *img)
{
  struct refcounts *rc = img->rc;
  unsigned i;

  if (rc == NULL)
    return;
  for (i = 0; rc->slots && i < rc->nslots; ++i)
    free (rc->slots[i].data);
  free (rc->slots);
  free (rc->table);
  free (rc);
  img->rc = NULL;
}

static int
write_slot (struct qcow2_image *img, struct rc_slot *s, struct qcow2_error *err)
{
  int r = qcow2_hostio_pwrite (img->io, s->data, img->cluster_size, s->offset);

  if (r < 0)
    return qcow2_io_error_at (err, r, "writing a refcount block", s->offset);
  s->dirty = false;
  return 0;
}

int
qcow2_rc_write_dirty (struct qcow2_image *img, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  unsigned i;

  for (i = 0; i < rc->nslots; ++i)
    if (rc->slots[i].dirty && write_slot (img, &rc->slots[i], err) == -1)
      return -1;
  return 0;
}

unsigned
qcow2_rc_dirty_blocks (const struct qcow2_image *img)
{
  const struct refcounts *rc = img->rc;
  unsigned i, n = 0;

  for (i = 0; i < rc->nslots; ++i)
    n += rc->slots[i].dirty;
  return n;
}

/* The cached block for table index 'idx' (whose entry is non-zero),
 * loading it into the least recently used slot; a dirty victim is
 * written back first, which the invariant above allows at any time.
 */
static struct rc_slot *
get_block (struct qcow2_image *img, uint64_t idx, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  struct rc_slot *victim = NULL;
  unsigned i;
  int r;

  if (rc->last && rc->last->offset && rc->last->index == idx)
    {
      rc->last->last_use = ++rc->clock;
      return rc->last;
    }
  for (i = 0; i < rc->nslots; ++i)
    {
      struct rc_slot *s = &rc->slots[i];
      if (s->offset && s->index == idx)
        {
          s->last_use = ++rc->clock;
          return rc->last = s;
        }
      if (victim == NULL || s->offset == 0
          || (victim->offset
              && (victim->dirty > s->dirty
                  || (victim->dirty == s->dirty
                      && s->last_use < victim->last_use))))
        victim = s;
    }
  if (victim->dirty && write_slot (img, victim, err) == -1)
    return NULL;
  victim->offset = 0;
  if (victim->data == NULL
      && posix_memalign ((void **)&victim->data, 4096, img->cluster_size) != 0)
    {
      victim->data = NULL;
      qcow2_set_error (err, ENOMEM, "out of memory for a refcount block");
      return NULL;
    }
  r = img->io->pread (img->io, victim->data, img->cluster_size, rc->table[idx]);
  if (r < 0)
    {
      qcow2_io_error_at (err, r, "reading a refcount block", rc->table[idx]);
      return NULL;
    }
  victim->index = idx;
  victim->offset = rc->table[idx];
  victim->last_use = ++rc->clock;
  return rc->last = victim;
}

int
qcow2_rc_get (struct qcow2_image *img, uint64_t cluster, uint64_t *value,
              struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  uint64_t idx = cluster >> rc->block_bits;
  struct rc_slot *s;

  if (idx >= rc->entries || rc->table[idx] == 0)
    {
      *value = 0;
      return 0;
    }
  s = get_block (img, idx, err);
  if (s == NULL)
    return -1;
  *value = qcow2_rc_entry_get (s->data, rc->order,
                               cluster & ((1ULL << rc->block_bits) - 1));
  return 0;
}

/* Write 'len' bytes at 'off' and flush: for the rare metadata that is
 * made durable immediately.
 */
static int
write_sync (struct qcow2_image *img, const void *buf, size_t len, uint64_t off,
            const char *what, struct qcow2_error *err)
{
  int r = qcow2_write_sync (img->io, buf, len, off);

  return r < 0 ? qcow2_io_error_at (err, r, what, off) : 0;
}

static void
note_host_end (struct qcow2_image *img, uint64_t end)
{
  if (end > img->host_end)
    img->host_end = end;
  if (end > img->file_size) /* readers load it without the lock */
    __atomic_store_n (&img->file_size, end, __ATOMIC_RELAXED);
}

static int grow_table (struct qcow2_image *img, uint64_t need_idx,
                       struct qcow2_error *err);

/* Make sure the block for table index 'idx' exists.  It goes at the
 * first cluster it covers: that cluster's refcount is 0 (no block
 * counts it yet), so it is free, and the block describes itself.  In
 * the linear layout that cluster must not be a guest cluster's home:
 * the block goes at the first cluster it covers past the span, or,
 * when it covers homes only, where metadata goes (below the span or
 * past it, counted by a block that is not such a block: no deeper
 * recursion).  So blocks are made on first use, never ahead.
 */
static int
ensure_block (struct qcow2_image *img, uint64_t idx, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  uint64_t cluster = idx << rc->block_bits;
  uint64_t off, at;
  unsigned char *data;
  unsigned char entry[8];

  if (idx >= rc->entries && grow_table (img, idx, err) == -1)
    return -1;
  if (rc->table[idx])
    return 0; /* growing the table made it */
  if (img->alloc_mode == QCOW2_ALLOC_LINEAR && cluster >= img->linear_start
      && cluster < img->linear_start + img->linear_clusters)
    {
      const uint64_t span_end = img->linear_start + img->linear_clusters;

      if (span_end < cluster + (1ULL << rc->block_bits))
        cluster = span_end;
      else
        {
          if (qcow2_alloc_cluster (img, true, 0, &at, err) == -1)
            return -1;
          if (rc->table[idx]) /* cannot happen: 'at' is counted elsewhere */
            {
              qcow2_set_error (
                  err, EIO,
                  "refcount block %" PRIu64 " appeared while placing it", idx);
              return -1;
            }
          return qcow2_rc_install_blocks (img, &idx, &at, 1, err);
        }
    }
  off = cluster << img->cluster_bits;
  /* Refcount 0 under a table the header points at: a corrupt image
   * (qemu-img check reports it); writing here would destroy it.
   */
  if (off < img->cluster_size
      || ranges_overlap (off, img->cluster_size, img->reftable_offset,
                         img->reftable_bytes)
      || ranges_overlap (off, img->cluster_size, img->active_l1_offset,
                         img->active_l1_bytes)
      || ranges_overlap (off, img->cluster_size, img->snapshots_offset,
                         img->snapshots_bytes))
    {
      qcow2_set_error (err, EIO,
                       "metadata at %#" PRIx64 " has no refcount (the image "
                       "is corrupt: repair it with qemu-img check -r all)",
                       off);
      return -1;
    }
  if (qcow2_meta_check (img, off, img->cluster_size, "refcount block write",
                        err)
      == -1)
    return -1;
  if (img->io->fixed_size && off + img->cluster_size > img->file_size)
    {
      qcow2_set_error (err, ENOSPC, "no space for a refcount block");
      return -1;
    }
  if (posix_memalign ((void **)&data, 4096, img->cluster_size) != 0)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for a refcount block");
      return -1;
    }
  memset (data, 0, img->cluster_size);
  qcow2_rc_entry_set (data, rc->order, cluster - (idx << rc->block_bits), 1);
  if (write_sync (img, data, img->cluster_size, off, "writing a refcount block",
                  err)
      == -1)
    {
      free (data);
      return -1;
    }
  free (data);
  note_host_end (img, off + img->cluster_size);
  put_be64 (entry, off);
  if (write_sync (img, entry, 8, img->reftable_offset + idx * 8,
                  "writing the refcount table", err)
      == -1)
    return -1;
  rc->table[idx] = off;
  return qcow2_meta_add (img, QCOW2_META_REFBLOCK, cluster, err);
}

/* A new table for index need_idx and everything in use (from cluster
 * p on): how many new blocks and table clusters go at p, iterated to a
 * fixed point (they count themselves), at least doubling the table.
 */
static int
size_growth (struct qcow2_image *img, uint64_t need_idx, uint64_t p,
             uint64_t *nblocksp, uint64_t *tclustersp, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  const uint64_t cs = img->cluster_size, per_block = 1ULL << rc->block_bits;
  uint64_t nblocks = 0, tclusters = 0, end, i;

  for (;;)
    {
      uint64_t want, nb = 0, tc;
      end = p + nblocks + tclusters;
      want = (end + per_block - 1) / per_block;
      if (want < need_idx + 1)
        want = need_idx + 1;
      if (want < rc->entries * 2) /* geometric: growth stays rare */
        want = rc->entries * 2;
      /* Before counting blocks: a hostile image can ask for a table
       * (and so a loop) of any size.
       */
      if (want > MAX_REFTABLE_BYTES / 8)
        {
          qcow2_set_error (err, EFBIG,
                           "the refcount table would exceed %u bytes",
                           MAX_REFTABLE_BYTES);
          return -1;
        }
      tc = (want * 8 + cs - 1) / cs;
      for (i = p / per_block; i <= (p + nblocks + tc - 1) / per_block; ++i)
        nb += i >= rc->entries || rc->table[i] == 0;
      if (nb == nblocks && tc == tclusters)
        break;
      nblocks = nb;
      tclusters = tc;
    }
  *nblocksp = nblocks;
  *tclustersp = tclusters;
  return 0;
}

/* The new area [p, end)'s refcounts (1 each): new blocks ('table' has
 * their offsets, rc->table not yet) are written whole from 'buf'; an
 * existing block covering part of it is updated through the cache.
 */
static int
count_new_area (struct qcow2_image *img, const uint64_t *table,
                unsigned char *buf, uint64_t p, uint64_t end,
                struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  const uint64_t cs = img->cluster_size, per_block = 1ULL << rc->block_bits;
  uint64_t i;

  for (i = p / per_block; i <= (end - 1) / per_block; ++i)
    {
      uint64_t c, lo = i * per_block, hi = lo + per_block;
      int r;

      if (lo < p)
        lo = p;
      if (hi > end)
        hi = end;
      if (i >= rc->entries || rc->table[i] == 0)
        {
          memset (buf, 0, cs);
          for (c = lo; c < hi; ++c)
            qcow2_rc_entry_set (buf, rc->order, c - i * per_block, 1);
          r = qcow2_hostio_pwrite (img->io, buf, cs, table[i]);
          if (r < 0)
            return qcow2_io_error_at (err, r, "writing a refcount block",
                                      table[i]);
        }
      else
        {
          struct rc_slot *s = get_block (img, i, err);
          if (s == NULL)
            return -1;
          for (c = lo; c < hi; ++c)
            qcow2_rc_entry_set (s->data, rc->order, c - i * per_block, 1);
          if (write_slot (img, s, err) == -1)
            return -1;
        }
    }
  return 0;
}

/* Flush the new blocks, then write the new table of 'entries' at
 * cluster p + nblocks, synced.
 */
static int
write_new_table (struct qcow2_image *img, const uint64_t *table,
                 uint64_t entries, uint64_t p, uint64_t nblocks,
                 struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  uint64_t *be, i;
  int r = img->io->flush (img->io);

  if (r < 0)
    return qcow2_io_error_at (err, r, "flushing new refcount blocks", p * cs);
  be = malloc (entries * 8);
  if (be == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the refcount table");
      return -1;
    }
  for (i = 0; i < entries; ++i)
    put_be64 (&be[i], table[i]);
  r = write_sync (img, be, entries * 8, (p + nblocks) * cs,
                  "writing the refcount table", err);
  free (be);
  return r;
}

/* Grow the table so that index 'need_idx' exists.  Past everything in
 * use (cluster P) go the blocks the new area itself needs, then the new
 * table; both sizes depend on each other, so iterate to a fixed point.
 */
static int
grow_table (struct qcow2_image *img, uint64_t need_idx, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  const uint64_t cs = img->cluster_size, per_block = 1ULL << rc->block_bits;
  const uint64_t p = (img->host_end + cs - 1) >> img->cluster_bits;
  uint64_t nblocks, tclusters, entries, end, i, first, last, next_block;
  uint64_t old_offset = img->reftable_offset, old_bytes = img->reftable_bytes;
  uint64_t *table = NULL;
  unsigned char *buf = NULL, hdr[12];
  int ret = -1;

  if (size_growth (img, need_idx, p, &nblocks, &tclusters, err) == -1)
    return -1;
  entries = tclusters * cs / 8;
  end = p + nblocks + tclusters;
  if (img->io->fixed_size && end * cs > img->file_size)
    {
      qcow2_set_error (err, ENOSPC, "no space to grow the refcount table");
      return -1;
    }

  /* Everything dirty first: the new table will point at those blocks. */
  if (qcow2_rc_write_dirty (img, err) == -1)
    return -1;

  table = calloc (entries, 8);
  buf = malloc (cs);
  if (table == NULL || buf == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the refcount table");
      goto out;
    }
  memcpy (table, rc->table, rc->entries * 8);
  first = p / per_block;
  last = (end - 1) / per_block;
  next_block = p;
  for (i = first; i <= last; ++i)
    if (table[i] == 0)
      table[i] = next_block++ * cs;
  if (count_new_area (img, table, buf, p, end, err) == -1)
    goto out;
  note_host_end (img, (p + nblocks) * cs);
  if (write_new_table (img, table, entries, p, nblocks, err) == -1)
    goto out;
  note_host_end (img, end * cs);
  put_be64 (hdr, (p + nblocks) * cs);
  put_be32 (hdr + 8, tclusters);
  if (write_sync (img, hdr, sizeof hdr, HEADER_REFTABLE_OFFSET,
                  "writing the header", err)
      == -1)
    goto out;

  /* Switched: the old table is garbage once nothing refers to it. */
  for (i = first; i <= last; ++i)
    if ((i >= rc->entries || rc->table[i] == 0)
        && qcow2_meta_add (img, QCOW2_META_REFBLOCK,
                           table[i] >> img->cluster_bits, err)
               == -1)
      goto out;
  free (rc->table);
  rc->table = table;
  table = NULL;
  rc->entries = entries;
  img->reftable_offset = (p + nblocks) * cs;
  img->reftable_bytes = tclusters * cs;
  if (qcow2_meta_move_table (img, QCOW2_META_REFTABLE, img->reftable_offset,
                             img->reftable_bytes, err)
      == -1)
    goto out;
  for (i = 0; i < old_bytes / cs; ++i)
    if (qcow2_rc_update (img, (old_offset / cs) + i, -1, err) == -1)
      goto out;
  ret = 0;
out:
  free (table);
  free (buf);
  return ret;
}

int
qcow2_rc_update (struct qcow2_image *img, uint64_t cluster, int64_t delta,
                 struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  uint64_t idx = cluster >> rc->block_bits;
  uint64_t i = cluster & ((1ULL << rc->block_bits) - 1);
  struct rc_slot *s;
  uint64_t v;

  /* No block: the refcount is 0, and a decrement is refused before a
   * block is made (over a cluster that may be in use).
   */
  if (delta < 0 && (idx >= rc->entries || rc->table[idx] == 0))
    {
      qcow2_set_error (err, EIO,
                       "refcount of cluster %#" PRIx64 " would be out of "
                       "range (0 %+" PRId64 ", it has no refcount block)",
                       cluster << img->cluster_bits, delta);
      return -1;
    }
  if (ensure_block (img, idx, err) == -1)
    return -1;
  s = get_block (img, idx, err);
  if (s == NULL)
    return -1;
  v = qcow2_rc_entry_get (s->data, rc->order, i);
  if ((delta < 0 && v < (uint64_t)-delta)
      || (delta > 0 && rc->max_value - v < (uint64_t)delta))
    {
      qcow2_set_error (err, EIO,
                       "refcount of cluster %#" PRIx64 " would be out of "
                       "range (%" PRIu64 " %+" PRId64 ")",
                       cluster << img->cluster_bits, v, delta);
      return -1;
    }
  qcow2_rc_entry_set (s->data, rc->order, i, v + delta);
  s->dirty = true;
  return 0;
}

int
qcow2_rc_claim (struct qcow2_image *img, uint64_t cluster,
                struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  uint64_t v;

  /* Make the block first: it may land on this very cluster. */
  if (ensure_block (img, cluster >> rc->block_bits, err) == -1
      || qcow2_rc_get (img, cluster, &v, err) == -1)
    return -1;
  if (v != 0)
    return 0;
  if (qcow2_rc_update (img, cluster, 1, err) == -1)
    return -1;
  note_host_end (img, (cluster + 1) << img->cluster_bits);
  return 1;
}

int
qcow2_rc_highest_used (struct qcow2_image *img, uint64_t *cluster,
                       struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  uint64_t idx = rc->entries;

  *cluster = 0;
  while (idx-- > 0)
    {
      uint64_t j = 1ULL << rc->block_bits;
      struct rc_slot *s;

      if (rc->table[idx] == 0)
        continue;
      s = get_block (img, idx, err);
      if (s == NULL)
        return -1;
      while (j-- > 0)
        if (qcow2_rc_entry_get (s->data, rc->order, j))
          {
            *cluster = (idx << rc->block_bits) + j;
            return 0;
          }
    }
  return 0;
}

/* ---- The linear layout (adopt.c, ensure_block) ---- */

int
qcow2_rc_record_blocks (struct qcow2_image *img, struct qcow2_error *err)
{
  uint64_t i, n = img->reftable_bytes / 8;

  for (i = 0; i < n; ++i)
    {
      uint64_t off = qcow2_rc_block_at (img, i);
      if (off
          && qcow2_meta_add (img, QCOW2_META_REFBLOCK, off >> img->cluster_bits,
                             err)
                 == -1)
        return -1;
    }
  return 0;
}

uint64_t
qcow2_rc_block_at (const struct qcow2_image *img, uint64_t idx)
{
  return idx < img->rc->entries ? img->rc->table[idx] : 0;
}

uint64_t
qcow2_rc_block_clusters (const struct qcow2_image *img)
{
  return 1ULL << img->rc->block_bits;
}

int
qcow2_rc_cover (struct qcow2_image *img, uint64_t end_cluster,
                struct qcow2_error *err)
{
  uint64_t need
      = end_cluster == 0 ? 0 : (end_cluster - 1) >> img->rc->block_bits;

  if (need < img->rc->entries)
    return 0;
  return grow_table (img, need, err);
}

int
qcow2_rc_install_blocks (struct qcow2_image *img, const uint64_t *idx,
                         const uint64_t *at, size_t n, struct qcow2_error *err)
{
  struct refcounts *rc = img->rc;
  unsigned char entry[8];
  size_t i;
  int r;

  /* 1. The (empty) blocks, and the counts of the clusters they are in:
   * durable before anything points at them.
   */
  for (i = 0; i < n; ++i)
    {
      if (idx[i] >= rc->entries || rc->table[idx[i]] != 0)
        {
          qcow2_set_error (err, EINVAL,
                           "refcount table index %" PRIu64
                           " is out of range or in use",
                           idx[i]);
          return -1;
        }
      r = qcow2_hostio_pwrite (img->io, img->zero_buf, img->cluster_size,
                               at[i] << img->cluster_bits);
      if (r < 0)
        return qcow2_io_error_at (err, r, "writing a refcount block",
                                  at[i] << img->cluster_bits);
    }
  if (qcow2_rc_write_dirty (img, err) == -1)
    return -1;
  r = img->io->flush (img->io);
  if (r < 0)
    return qcow2_io_error_at (err, r, "flushing new refcount blocks", 0);

  /* 2. The table entries, then a flush. */
  for (i = 0; i < n; ++i)
    {
      put_be64 (entry, at[i] << img->cluster_bits);
      r = qcow2_hostio_pwrite (img->io, entry, 8,
                               img->reftable_offset + idx[i] * 8);
      if (r < 0)
        return qcow2_io_error_at (err, r, "writing the refcount table",
                                  img->reftable_offset + idx[i] * 8);
      rc->table[idx[i]] = at[i] << img->cluster_bits;
      if (qcow2_meta_add (img, QCOW2_META_REFBLOCK, at[i], err) == -1)
        return -1;
    }
  r = img->io->flush (img->io);
  return r < 0 ? qcow2_io_error_at (err, r, "flushing the refcount table", 0)
               : 0;
}
