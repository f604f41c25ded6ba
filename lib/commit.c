/* nbdstack qcow2 library: making writes durable in a crash-safe order.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Writes change only memory (refcounts, L2 tables, L1) besides the data
 * itself; a commit makes all of it durable with two flushes:
 *
 *   1. refcount blocks and new L2 tables, then flush.  This also makes
 *      durable all data written so far.
 *   2. L2 tables that were already on disk, and L1 sectors, then flush.
 *      Every entry written here points at data and has refcounts that
 *      phase 1 made durable; a new table an L1 entry points at is too.
 *   3. the references the commit removed are now gone from the disk:
 *      decrement their refcounts (in memory: the next commit writes
 *      them) and make clusters that reach 0 reusable.
 *
 * So a crash at any point leaves every reference with a durable target
 * and a refcount at least as large as its references (at worst leaked
 * clusters), and a cluster is never reused while an old pointer to it
 * may still be on disk.  This is the single-threaded form: the caller
 * holds the write lock, so no write runs during a commit.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

#define L1_SECTOR_ENTRIES 64 /* 512-byte sectors: written atomically */

void
qcow2_l1_mark_dirty (struct qcow2_image *img, uint64_t l1_idx)
{
  uint64_t sector = l1_idx / L1_SECTOR_ENTRIES;

  img->l1_dirty[sector / 64] |= 1ULL << (sector % 64);
}

int
qcow2_free_after_commit (struct qcow2_image *img, uint64_t cluster,
                         struct qcow2_error *err)
{
  if (img->npending == img->pending_cap)
    {
      size_t cap = img->pending_cap ? img->pending_cap * 2 : 64;
      uint64_t *p = realloc (img->pending, cap * sizeof *p);
      if (p == NULL)
        {
          qcow2_set_error (err, ENOMEM, "out of memory");
          return -1;
        }
      img->pending = p;
      img->pending_cap = cap;
    }
  img->pending[img->npending++] = cluster;
  return 0;
}

static int
fail (struct qcow2_image *img, struct qcow2_error *err, int r, const char *what)
{
  if (r < 0)
    qcow2_set_error (err, -r, "%s: %s", what, strerror (-r));
  img->failed = true;
  return -1;
}

static int
write_l1 (struct qcow2_image *img, bool *wrote, struct qcow2_error *err)
{
  const uint64_t nsectors
      = ((uint64_t)img->l1_size + L1_SECTOR_ENTRIES - 1) / L1_SECTOR_ENTRIES;
  uint64_t s, buf[L1_SECTOR_ENTRIES];

  for (s = 0; s < nsectors; ++s)
    {
      uint64_t first = s * L1_SECTOR_ENTRIES, n = L1_SECTOR_ENTRIES, i;
      int r;

      if (!(img->l1_dirty[s / 64] & (1ULL << (s % 64))))
        continue;
      if (first + n > img->l1_size)
        n = img->l1_size - first;
      for (i = 0; i < n; ++i)
        put_be64 (&buf[i], img->l1[first + i]);
      r = qcow2_hostio_pwrite (img->io, buf, n * 8, img->l1_offset + first * 8);
      if (r < 0)
        return fail (img, err, r, "writing the L1 table");
      img->l1_dirty[s / 64] &= ~(1ULL << (s % 64));
      *wrote = true;
    }
  return 0;
}

int
qcow2_commit (struct qcow2_image *img, struct qcow2_error *err)
{
  bool phase2;
  size_t i;
  int r;

  if (img->failed)
    {
      qcow2_set_error (err, EIO, "the image failed earlier and is read-only");
      return -1;
    }

  /* 1: what new references will need. */
  if (qcow2_rc_write_dirty (img, err) == -1)
    return fail (img, err, 0, NULL);
  r = l2_cache_write_dirty (img->l2, true);
  if (r < 0)
    return fail (img, err, r, "writing new L2 tables");
  r = img->io->flush (img->io);
  if (r < 0)
    return fail (img, err, r, "flush");

  /* 2: the references. */
  phase2 = l2_cache_dirty_count (img->l2) > 0;
  r = l2_cache_write_dirty (img->l2, false);
  if (r < 0)
    return fail (img, err, r, "writing L2 tables");
  if (write_l1 (img, &phase2, err) == -1)
    return -1;
  if (phase2)
    {
      r = img->io->flush (img->io);
      if (r < 0)
        return fail (img, err, r, "flush");
    }

  /* 3: removed references are durably gone. */
  for (i = 0; i < img->npending; ++i)
    {
      uint64_t c = img->pending[i], v;

      if (qcow2_rc_update (img, c, -1, err) == -1
          || qcow2_rc_get (img, c, &v, err) == -1)
        return fail (img, err, 0, NULL);
      if (v == 0)
        {
          /* Give the space back to the file system; a hint only. */
          if (img->io->zero)
            img->io->zero (img->io, c << img->cluster_bits, img->cluster_size,
                           true);
          qcow2_alloc_reuse (img, c);
        }
    }
  img->npending = 0;
  return 0;
}
