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
 * With extended L2 entries, the whole subclusters of those partial
 * clusters change only their bits too, as qemu's zero_l2_subclusters:
 * zero bit set, allocation bit cleared, host cluster and COPIED kept
 * (a cluster shared with a snapshot included: only our entry changes),
 * so nothing is allocated or written for them.  A cluster whose 32
 * subclusters all end up zero gets the whole-cluster treatment (and so
 * may release its host cluster).  Only the pieces that cover a
 * subcluster partially are written, and compressed clusters, which have
 * no bitmap, are written as before.
 *
 * A fast zero (FAST) fails with ENOTSUP before changing anything if any
 * part would need data written; setting bits writes no data.  Discard is
 * zero without the partial clusters (subclusters included: qemu ignores
 * them too) and without writing data: what a discarded range reads is
 * the client's problem, but here whole clusters read as zeroes
 * afterwards (except on version 2 over a backing file, which are left
 * alone).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-internal.h"

enum mode
{
  ZERO_KEEP,  /* keep clusters that are ours alone allocated */
  ZERO_UNMAP, /* release them */
  DISCARD
};

#define FALLBACK 2 /* the cluster needs zeroes written */

/* Does the header name a backing file that is not open (the layer is
 * served alone, as imageio's "backing": null)?  Then nothing here knows
 * what unallocated bytes read as through the chain a later reader will
 * open, so zeroes must be recorded (zero flags, written zeroes), never
 * left as "unallocated reads zero": that would show the backing file's
 * data through the chain where the client wrote zeroes.
 */
static bool
backing_unknown (const struct qcow2_image *img)
{
  return img->backing_ops == NULL && img->backing_file != NULL;
}

/* Would unallocated guest bytes at 'goff' read as zeroes, through the
 * whole chain?
 */
static bool
unallocated_reads_zero (const struct qcow2_image *img, uint64_t goff)
{
  if (img->backing_ops == NULL)
    return !backing_unknown (img);
  return goff >= img->backing_size;
}

/* Does [off, off+n) (inside one cluster) read as zeroes already?
 * Without the lock, the cluster claimed.  The entries answer first: a
 * zero or unallocated run over nothing needs no read (most edges of a
 * client zeroing a whole sparse disk, whose requests drift off the
 * cluster grid); anything else is read and compared.
 */
static int
reads_zero (struct qcow2_image *img, unsigned char *buf, uint64_t off,
            uint64_t n, bool *zero, struct qcow2_error *err)
{
  struct qcow2_run run;

  if (qcow2_map_run (img, off, n, &run, err) == -1)
    return -1;
  if (run.len >= n
      && (run.type == SC_ZERO_PLAIN || run.type == SC_ZERO_ALLOC
          || (run.type == SC_UNALLOCATED && unallocated_reads_zero (img, off))))
    {
      *zero = true;
      return 0;
    }
  if (qcow2_pread_unlocked (img, buf, n, off, err) == -1)
    return -1;
  *zero = memcmp (buf, img->zero_buf, n) == 0;
  return 0;
}

/* Under the lock (exclusive), the cluster claimed, its table 'ref' held
 * for writing: make the cluster whose entry is 'ent' read as zeroes by
 * the entry alone (version 3, or nothing below it).  0 or -1.
 */
static int
zero_entry (struct qcow2_image *img, struct l2_ref *ref, uint64_t *ent,
            uint64_t gc, bool backing_shows, enum mode mode,
            struct qcow2_error *err)
{
  const bool v3 = img->version >= 3;
  const uint64_t e = get_be64 (ent);
  const uint64_t bm = img->ext_l2 ? get_be64 (ent + 1) : 0;
  const uint64_t host = e & L2E_OFFSET_MASK;
  const bool keep = mode == ZERO_KEEP && v3 && !(e & OFLAG_COMPRESSED) && host
                    && (e & OFLAG_COPIED);
  uint64_t want, want_bm;

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
      if (!keep && qcow2_free_entry (img, e, true, gc, err) == -1)
        return -1;
      put_be64 (ent, want);
      if (img->ext_l2)
        put_be64 (ent + 1, want_bm);
      l2_cache_mark_dirty (ref);
    }
  return 0;
}

/* Under the lock (exclusive), the cluster claimed: guest cluster 'gc'
 * reads as zeroes: 0, QCOW2_RETRY, FALLBACK or -1.
 */
static int
zero_cluster (struct qcow2_image *img, uint64_t gc, enum mode mode,
              struct qcow2_error *err)
{
  const uint64_t l1_idx = gc >> img->l2_bits;
  const bool backing_shows
      = !unallocated_reads_zero (img, gc << img->cluster_bits);
  struct l2_ref ref;
  int r;

  if ((img->l1[l1_idx] & L1E_OFFSET_MASK) == 0 && !backing_shows)
    return 0; /* no table, nothing below: zeroes already */
  if (img->version < 3 && backing_shows)
    return mode == DISCARD ? 0 : FALLBACK;
  r = qcow2_get_l2_for_write (img, l1_idx, &ref, err);
  if (r != 0)
    return r;
  r = zero_entry (img, &ref, qcow2_l2_entry (img, &ref, gc), gc, backing_shows,
                  mode, err);
  l2_cache_put (&ref);
  return r;
}

/* Under the lock (exclusive), the cluster claimed: the whole
 * subclusters [lo, hi) of one cluster of an extended L2 image read as
 * zeroes by their bits alone; 'hi' may pass the disk's end.  0,
 * QCOW2_RETRY, FALLBACK or -1.
 */
static int
zero_subclusters (struct qcow2_image *img, uint64_t lo, uint64_t hi,
                  enum mode mode, struct qcow2_error *err)
{
  const uint64_t gc = lo >> img->cluster_bits;
  const uint64_t goff = gc << img->cluster_bits;
  const uint64_t l1_idx = gc >> img->l2_bits;
  const bool backing_shows = !unallocated_reads_zero (img, goff);
  /* Nothing reads the subclusters past the disk's end: zeroing them
   * too lets the disk's last cluster become all zero.
   */
  const unsigned sc_lo = (lo - goff) >> img->sc_bits;
  const unsigned sc_hi = hi >= img->size ? 32 : (hi - goff) >> img->sc_bits;
  const uint64_t mask = ((1ULL << (sc_hi - sc_lo)) - 1) << sc_lo;
  struct l2_ref ref;
  uint64_t *ent, e, bm, want_bm;
  int r;

  if ((img->l1[l1_idx] & L1E_OFFSET_MASK) == 0 && !backing_shows)
    return 0; /* no table, nothing below: zeroes already */
  r = qcow2_get_l2_for_write (img, l1_idx, &ref, err);
  if (r != 0)
    return r;
  ent = qcow2_l2_entry (img, &ref, gc);
  e = get_be64 (ent);
  bm = get_be64 (ent + 1);
  want_bm = (bm | mask << 32) & ~mask;
  if (e & OFLAG_COMPRESSED)
    /* No bitmap.  do_zero looked first and the claim keeps the entry,
     * so this is only a safety net.
     */
    r = FALLBACK;
  else if (!(e & L2E_OFFSET_MASK) && !backing_shows)
    ; /* no host cluster, nothing below: zeroes already */
  else if (want_bm >> 32 == BITMAP_ALL_ALLOC)
    /* All zero now: as a whole zeroed cluster (which may release the
     * host cluster, or keep it with all 32 zero bits).
     */
    r = zero_entry (img, &ref, ent, gc, backing_shows, mode, err);
  else if (want_bm != bm)
    {
      /* The host cluster (shared with a snapshot or ours), its offset
       * and COPIED stay: no reference changes, only this entry.
       */
      put_be64 (ent + 1, want_bm);
      l2_cache_mark_dirty (&ref);
    }
  l2_cache_put (&ref);
  return r;
}

/* A piece of a zero request: [lo, hi), partial or (for subclusters)
 * the whole ones of a partial cluster.
 */
struct edge
{
  uint64_t lo, hi;
  bool needed; /* must be written zeroes */
};

/* Cut [lo, hi) at units of 2^bits bytes (clusters, or subclusters of
 * one cluster): the whole units [*a, *b), the disk's last unit counting
 * as whole when the range reaches the disk's end, and the partial
 * pieces around them, each inside one unit (lo == hi when absent).
 */
static void
split_range (const struct qcow2_image *img, unsigned bits, uint64_t lo,
             uint64_t hi, struct edge e[2], uint64_t *a, uint64_t *b)
{
  const uint64_t us = 1ULL << bits;
  uint64_t wa = (lo + us - 1) & ~(us - 1); /* first whole unit */
  uint64_t wb = hi & ~(us - 1);            /* end of the whole ones */

  if (hi == img->size)
    wb = (hi + us - 1) & ~(us - 1); /* the disk's last unit is whole */
  memset (e, 0, 2 * sizeof *e);
  *a = *b = 0;
  if (wa >= wb)
    {
      /* No whole unit: inside one, or across one boundary. */
      uint64_t mid = (lo | (us - 1)) + 1;
      e[0] = (struct edge){ lo, hi < mid ? hi : mid, false };
      if (hi > mid)
        e[1] = (struct edge){ mid, hi, false };
      return;
    }
  if (lo < wa)
    e[0] = (struct edge){ lo, wa, false };
  if (hi > wb)
    e[1] = (struct edge){ wb, hi, false };
  *a = wa;
  *b = wb;
}

/* Under the lock, dropping it on purpose for the write: zeroes written
 * over [lo, hi) (up to the disk's end), the fallback.  0 or -1.
 */
static int
write_zeroes_relock (struct qcow2_image *img, struct qcow2_req *req,
                     uint64_t lo, uint64_t hi, struct qcow2_error *err)
{
  int r;

  if (hi > img->size)
    hi = img->size;
  pthread_rwlock_unlock (&img->lock);
  r = qcow2_write_claimed (img, req, (const char *)img->zero_buf, lo, hi - lo,
                           err);
  pthread_rwlock_wrlock (&img->lock);
  return r;
}

/* Under the lock: guest cluster 'gc' lies under an L1 entry without a
 * table, and reads as zeroes with nothing below: its whole table's
 * worth needs no change.
 */
static bool
tableless_zero (const struct qcow2_image *img, uint64_t gc)
{
  return (img->l1[gc >> img->l2_bits] & L1E_OFFSET_MASK) == 0
         && unallocated_reads_zero (img, gc << img->cluster_bits);
}

/* Under the lock (shared): whether the whole clusters [first, last) all
 * lie under L1 entries without a table and read as zeroes with nothing
 * below, and 'sub' is empty: then zero_entries would change nothing, and
 * need not wait for the exclusive lock (a client zeroing a whole sparse
 * disk sends thousands of such requests at once).
 */
static bool
nothing_to_change (struct qcow2_image *img, const struct edge sub[2],
                   uint64_t first, uint64_t last)
{
  ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE (&img->lock);
  const uint64_t table = 1ULL << img->l2_bits;
  uint64_t gc;

  if (sub[0].lo < sub[0].hi || sub[1].lo < sub[1].hi || img_failed (img))
    return false;
  for (gc = first; gc < last; gc = (gc / table + 1) * table)
    if (!tableless_zero (img, gc))
      return false;
  return true;
}

/* The changes of entries only, under the lock, dropped to write zeroes
 * (FALLBACK) or to commit: the whole subclusters 'sub' of the partial
 * clusters, then the whole clusters [first, last).  0 or -1.
 */
static int
zero_entries (struct qcow2_image *img, struct qcow2_req *req,
              const struct edge sub[2], uint64_t first, uint64_t last,
              enum mode mode, struct qcow2_error *err)
{
  const uint64_t table = 1ULL << img->l2_bits;
  uint64_t gc = first, lo, hi;
  unsigned i = 0;
  int r = 0;
  /* Dropped on purpose around fallback writes and commits (the
   * relock helpers), held again when they return.
   */
  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);

  if (img_failed (img))
    return qcow2_failed_error (err, true);
  while (r == 0 && (i < 2 || gc < last))
    {
      if (i < 2)
        {
          lo = sub[i].lo;
          hi = sub[i].hi;
          if (lo >= hi)
            {
              i++;
              continue;
            }
          r = zero_subclusters (img, lo, hi, mode, err);
        }
      else
        {
          uint64_t l1_idx = gc >> img->l2_bits;

          /* A whole table's worth with no table and nothing below. */
          if (tableless_zero (img, gc))
            {
              gc = (l1_idx + 1) * table;
              continue;
            }
          lo = gc << img->cluster_bits;
          hi = lo + img->cluster_size;
          r = zero_cluster (img, gc, mode, err);
        }
      if (r == FALLBACK)
        r = write_zeroes_relock (img, req, lo, hi, err);
      if (r == QCOW2_RETRY)
        {
          r = qcow2_commit_relock (img, err);
          continue;
        }
      if (i < 2)
        i++;
      else
        gc++;
    }
  return r;
}

/* What a zero request does besides its entries: the pieces of the
 * partial clusters that may need zeroes written, the whole subclusters
 * of those clusters (extended L2), and the whole clusters [a, b).
 */
struct zplan
{
  struct edge part[4];
  unsigned nparts;
  struct edge sub[2];
  uint64_t a, b;
};

/* A fast zero refused (err set): nothing changed. */
#define REFUSED 3

/* The claim held: plan the partial clusters 'edge' (a discard leaves
 * them alone): with a bitmap, their whole subclusters only change bits
 * and the rest is written; without (no extended L2, or compressed), all
 * of them is written.  0 or -1.
 */
static int
plan_edges (struct qcow2_image *img, enum mode mode, const struct edge edge[2],
            struct zplan *p, struct qcow2_error *err)
{
  unsigned i, j;

  for (i = 0; mode != DISCARD && i < 2; ++i)
    {
      bool bitmap = img->ext_l2, compressed;
      struct edge piece[2];

      if (edge[i].hi <= edge[i].lo)
        continue;
      if (bitmap)
        {
          if (qcow2_map_compressed (img, edge[i].lo, &compressed, err) == -1)
            return -1;
          bitmap = !compressed;
        }
      if (!bitmap)
        {
          p->part[p->nparts++] = edge[i];
          continue;
        }
      split_range (img, img->sc_bits, edge[i].lo, edge[i].hi, piece,
                   &p->sub[i].lo, &p->sub[i].hi);
      for (j = 0; j < 2; ++j)
        if (piece[j].hi > piece[j].lo)
          p->part[p->nparts++] = piece[j];
    }
  return 0;
}

/* Everything that would need data written, before changing anything:
 * a fast zero must fail untouched (the claim keeps the answer true
 * until the changes).  0, REFUSED or -1.
 */
static int
check_parts (struct qcow2_image *img, struct zplan *p, bool fast,
             struct qcow2_error *err)
{
  unsigned char *buf = NULL;
  unsigned i;
  int r = 0;

  for (i = 0; r == 0 && i < p->nparts; ++i)
    {
      struct edge *e = &p->part[i];
      bool zero;

      if (buf == NULL && (buf = qcow2_scratch_get (img, err)) == NULL)
        return -1;
      if (reads_zero (img, buf, e->lo, e->hi - e->lo, &zero, err) == -1)
        {
          r = -1;
          break;
        }
      /* Zeroes read through this layer alone prove nothing about the
       * chain when its backing file is not open.
       */
      e->needed = !zero || backing_unknown (img);
      if (fast && !zero)
        r = REFUSED;
    }
  qcow2_scratch_put (img, buf);
  if (r == 0 && fast && img->version < 3 && p->a < p->b
      && (backing_unknown (img)
          || (img->backing_ops && p->a < img->backing_size)))
    r = REFUSED;
  if (r == REFUSED)
    qcow2_set_error (err, ENOTSUP, "a fast zero would have to write data");
  return r;
}

/* The range claimed, 'req' registered: zero [offset, end).  0, REFUSED
 * or -1.
 */
static int
zero_claimed (struct qcow2_image *img, struct qcow2_req *req, uint64_t offset,
              uint64_t end, enum mode mode, bool fast, struct qcow2_error *err)
{
  struct edge edge[2]; /* the partial clusters */
  struct zplan p;
  unsigned i;
  int r;

  memset (&p, 0, sizeof p);
  split_range (img, img->cluster_bits, offset, end, edge, &p.a, &p.b);
  if (plan_edges (img, mode, edge, &p, err) == -1)
    return -1;
  r = check_parts (img, &p, fast, err);
  if (r != 0)
    return r;
  /* The partial pieces first: a write makes a whole extended L2
   * cluster all data, and the bits set below must come after it.
   */
  for (i = 0; i < p.nparts; ++i)
    if (p.part[i].needed
        && qcow2_write_claimed (img, req, (const char *)img->zero_buf,
                                p.part[i].lo, p.part[i].hi - p.part[i].lo, err)
               == -1)
      return -1;
  if (nothing_to_change (img, p.sub, p.a >> img->cluster_bits,
                         p.b >> img->cluster_bits))
    return 0;
  if (p.a < p.b || p.sub[0].lo < p.sub[0].hi || p.sub[1].lo < p.sub[1].hi)
    return zero_entries (img, req, p.sub, p.a >> img->cluster_bits,
                         p.b >> img->cluster_bits, mode, err);
  return 0;
}

static int
do_zero (struct qcow2_image *img, uint64_t offset, uint64_t count,
         enum mode mode, bool fast, struct qcow2_error *err)
{
  struct qcow2_claim claim;
  struct qcow2_req req;
  int r = qcow2_change_begin (img, &claim, &req, offset, count, "zero", err);

  if (r <= 0)
    return r;
  r = zero_claimed (img, &req, offset, offset + count, mode, fast, err);
  /* As for writes (write.c): ENOSPC left the image consistent, and a
   * refused fast zero changed nothing.
   */
  qcow2_change_end (img, &claim, &req, r == REFUSED ? 0 : r, err);
  return r == REFUSED ? -1 : r;
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
