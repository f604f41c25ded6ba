/* nbdstack qcow2 library: zeroing and discarding.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Whole clusters change only their L2 entry: version 3 images mark them
 * zero (keeping a cluster that is ours alone when the caller wants the
 * space kept, as qemu's ZERO_ALLOC; with extended L2, all 32 subclusters
 * zero in the bitmap), or make them unallocated where
 * that reads as zeroes (no backing file under them); version 2 images
 * have no zero flag and can only deallocate, so over a backing file
 * they get written zeroes.  Dropped host clusters are released after
 * the commit that removes their reference, as for writes.  The partial
 * clusters at the edges are written zeroes through the write path,
 * unless they already read as zeroes.
 *
 * A fast zero (FAST) fails with ENOTSUP before changing anything if any
 * part would need data written.  Discard is zero without the edges and
 * without writing data: what a discarded range reads is the client's
 * problem, but here whole clusters read as zeroes afterwards (except on
 * version 2 over a backing file, which are left alone).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

enum mode
{
  ZERO_KEEP,  /* keep clusters that are ours alone allocated */
  ZERO_UNMAP, /* release them */
  DISCARD
};

#define FALLBACK 2 /* the cluster needs zeroes written */

/* Would unallocated guest bytes at 'goff' read as zeroes? */
static bool
unallocated_reads_zero (const struct qcow2_image *img, uint64_t goff)
{
  return img->backing_ops == NULL || goff >= img->backing_size;
}

/* Does [off, off+n) (inside one cluster) read as zeroes already?
 * Without the lock, the cluster claimed.
 */
static int
reads_zero (struct qcow2_image *img, unsigned char *buf, uint64_t off,
            uint64_t n, bool *zero, struct qcow2_error *err)
{
  if (qcow2_pread_unlocked (img, buf, n, off, err) == -1)
    return -1;
  *zero = memcmp (buf, img->zero_buf, n) == 0;
  return 0;
}

/* Under the lock (exclusive), the cluster claimed: guest cluster 'gc'
 * reads as zeroes: 0, QCOW2_RETRY, FALLBACK or -1.
 */
static int
zero_cluster (struct qcow2_image *img, uint64_t gc, enum mode mode,
              struct qcow2_error *err)
{
  const uint64_t goff = gc << img->cluster_bits;
  const uint64_t l1_idx = gc >> img->l2_bits;
  const uint64_t l2_idx = gc & ((1ULL << img->l2_bits) - 1);
  const bool backing_shows = !unallocated_reads_zero (img, goff);
  const bool v3 = img->version >= 3;
  struct l2_ref ref;
  bool keep;
  uint64_t *ent, e, bm, host, want, want_bm;
  int r;

  if ((img->l1[l1_idx] & L1E_OFFSET_MASK) == 0 && !backing_shows)
    return 0; /* no table, nothing below: zeroes already */
  if (!v3 && backing_shows)
    return mode == DISCARD ? 0 : FALLBACK;
  r = qcow2_get_l2_for_write (img, l1_idx, &ref, err);
  if (r != 0)
    return r;
  ent = (uint64_t *)((char *)ref.table + l2_idx * img->l2_entry_bytes);
  e = get_be64 (ent);
  bm = img->ext_l2 ? get_be64 (ent + 1) : 0;
  host = e & L2E_OFFSET_MASK;
  keep = mode == ZERO_KEEP && v3 && !(e & OFLAG_COMPRESSED) && host
         && (e & OFLAG_COPIED);
  /* Extended L2 says "zero" in the bitmap, the others in the entry. */
  if (keep)
    want = host | OFLAG_COPIED | (img->ext_l2 ? 0 : OFLAG_ZERO);
  else if (backing_shows && !img->ext_l2)
    want = OFLAG_ZERO; /* v3 here */
  else
    want = 0;
  want_bm = img->ext_l2 && (keep || backing_shows) ? BITMAP_ALL_ZERO : 0;
  if (want != e || want_bm != bm)
    {
      if (!keep && qcow2_free_entry (img, e, true, err) == -1)
        {
          l2_cache_put (&ref);
          return -1;
        }
      put_be64 (ent, want);
      if (img->ext_l2)
        put_be64 (ent + 1, want_bm);
      l2_cache_mark_dirty (&ref);
    }
  l2_cache_put (&ref);
  return 0;
}

/* The partial clusters at the edges of [offset, end): each is either
 * whole (it ends at the disk's end) or [lo, hi) inside one cluster.
 */
struct edge
{
  uint64_t lo, hi;
  bool needed; /* must be written zeroes */
};

static void
find_edges (const struct qcow2_image *img, uint64_t offset, uint64_t end,
            struct edge e[2], uint64_t *first, uint64_t *last)
{
  const uint64_t cs = img->cluster_size;
  uint64_t a = (offset + cs - 1) & ~(cs - 1); /* first whole cluster */
  uint64_t b = end & ~(cs - 1);               /* end of the whole ones */

  if (end == img->size)
    b = (end + cs - 1) & ~(cs - 1); /* the disk's last cluster is whole */
  memset (e, 0, 2 * sizeof *e);
  if (a >= b)
    {
      /* No whole cluster: inside one, or across one boundary. */
      uint64_t mid = (offset | (cs - 1)) + 1;
      e[0] = (struct edge){ offset, end < mid ? end : mid, false };
      if (end > mid)
        e[1] = (struct edge){ mid, end, false };
      *first = *last = 0;
      return;
    }
  if (offset < a)
    e[0] = (struct edge){ offset, a, false };
  if (end > b)
    e[1] = (struct edge){ b, end, false };
  *first = a >> img->cluster_bits;
  *last = b >> img->cluster_bits; /* exclusive */
}

static int
failed_image (struct qcow2_image *img, struct qcow2_error *err)
{
  qcow2_set_error (err, EIO, "the image failed earlier and is read-only");
  return -1;
}

/* Commit with the lock dropped (every cache slot is dirty), then take
 * it again: 0 or -1.
 */
static int
commit_relock (struct qcow2_image *img, struct qcow2_error *err)
{
  int r;

  pthread_rwlock_unlock (&img->lock);
  r = qcow2_commit (img, err);
  pthread_rwlock_wrlock (&img->lock);
  if (r == 0 && img_failed (img))
    r = failed_image (img, err);
  return r;
}

static int
do_zero (struct qcow2_image *img, uint64_t offset, uint64_t count,
         enum mode mode, bool fast, struct qcow2_error *err)
{
  const uint64_t end = offset + count;
  struct qcow2_claim claim;
  struct qcow2_req req;
  struct edge edge[2];
  unsigned char *buf = NULL;
  uint64_t gc, first, last;
  unsigned i;
  int r = 0;

  if (qcow2_check_change (img, count, offset, "zero", err) == -1)
    return -1;
  if (img_failed (img))
    return failed_image (img, err);
  if (count == 0)
    return 0;
  find_edges (img, offset, end, edge, &first, &last);

  qcow2_claim_range (img, &claim, offset, count);
  qcow2_req_begin (img, &req);
  /* Everything that would need data written, before changing anything:
   * a fast zero must fail untouched.  The claim keeps it true until the
   * changes below.
   */
  for (i = 0; mode != DISCARD && i < 2; ++i)
    if (edge[i].hi > edge[i].lo)
      {
        bool zero;

        if (buf == NULL && (buf = malloc (img->cluster_size)) == NULL)
          {
            qcow2_set_error (err, ENOMEM, "out of memory");
            goto fail;
          }
        if (reads_zero (img, buf, edge[i].lo, edge[i].hi - edge[i].lo, &zero,
                        err)
            == -1)
          goto fail;
        edge[i].needed = !zero;
        if (fast && !zero)
          goto notsup;
      }
  if (fast && img->version < 3 && img->backing_ops
      && (first << img->cluster_bits) < img->backing_size && first < last)
    goto notsup;

  for (i = 0; i < 2; ++i)
    if (edge[i].needed
        && qcow2_write_claimed (img, (const char *)img->zero_buf, edge[i].lo,
                                edge[i].hi - edge[i].lo, err)
               == -1)
      goto fail;

  /* Whole clusters change only their entries: under the lock, dropped
   * to write zeroes (FALLBACK) or to commit.
   */
  if (first < last)
    {
      pthread_rwlock_wrlock (&img->lock);
      if (img_failed (img))
        r = failed_image (img, err);
    }
  for (gc = first; r == 0 && gc < last;)
    {
      const uint64_t table = 1ULL << img->l2_bits;
      uint64_t l1_idx = gc >> img->l2_bits;

      /* A whole table's worth with no table and nothing below. */
      if ((img->l1[l1_idx] & L1E_OFFSET_MASK) == 0
          && unallocated_reads_zero (img, gc << img->cluster_bits))
        {
          gc = (l1_idx + 1) * table;
          continue;
        }
      r = zero_cluster (img, gc, mode, err);
      if (r == FALLBACK)
        {
          uint64_t goff = gc << img->cluster_bits;
          uint64_t n = img->size - goff < img->cluster_size ? img->size - goff
                                                            : img->cluster_size;
          pthread_rwlock_unlock (&img->lock);
          r = qcow2_write_claimed (img, (const char *)img->zero_buf, goff, n,
                                   err);
          pthread_rwlock_wrlock (&img->lock);
        }
      if (r == QCOW2_RETRY)
        {
          r = commit_relock (img, err);
          continue;
        }
      gc++;
    }
  if (first < last)
    pthread_rwlock_unlock (&img->lock);
  if (r == -1)
    goto fail;
  r = 0;
  goto out;

notsup:
  qcow2_set_error (err, ENOTSUP, "a fast zero would have to write data");
  r = -1;
  goto out;
fail:
  img_set_failed (img);
  r = -1;
out:
  free (buf);
  qcow2_unclaim (img, &claim);
  qcow2_req_end (img, &req);
  return r;
}

int
qcow2_zero (struct qcow2_image *img, uint64_t count, uint64_t offset,
            unsigned flags, struct qcow2_error *err)
{
  return do_zero (img, offset, count,
                  flags & QCOW2_ZERO_MAY_UNMAP ? ZERO_UNMAP : ZERO_KEEP,
                  flags & QCOW2_ZERO_FAST, err);
}

int
qcow2_discard (struct qcow2_image *img, uint64_t count, uint64_t offset,
               struct qcow2_error *err)
{
  return do_zero (img, offset, count, DISCARD, false, err);
}
