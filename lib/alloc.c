/* nbdstack qcow2 library: where new clusters go.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Two layouts.  Linear (regular files): guest cluster g lives at host
 * cluster linear_start + g, so a disk uploaded in any order ends up in
 * guest order in the file (no fragmentation, and reads of neighbouring
 * guest data are neighbouring host reads); metadata goes below
 * linear_start while there is room, then past the span; when g's home
 * is taken, g goes past the span too.  Compact (block devices, and
 * images whose layout was not made by us): a bump pointer from the end
 * of what is in use, after the clusters freed since the open, up to
 * the size `qemu-img measure` gives a fully allocated image (soft_end);
 * there the clusters below are looked at once, and then, while frees
 * are waiting for a commit or the reuse barrier, the writer is sent to
 * reclaim them (ENOSPC with alloc_strict) before anything goes past it.
 *
 * Every cluster is taken with qcow2_rc_claim, which sets its refcount
 * to 1 if it was 0: the refcounts are the only record of what is free,
 * so no cluster can be handed out twice, and one that a new refcount
 * block took is skipped.  The one exception is a linear home whose own
 * guest cluster dropped it and takes it back before that drop was
 * applied (see "Homes taken back" below).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "align.h"
#include "qcow2-internal.h"

/* Clusters `qemu-img measure` counts for a fully allocated image of
 * this geometry: header, L1, every L2 table, refcount table and blocks
 * for all of it (a fixed point), data.
 */
static uint64_t
fully_allocated_clusters (const struct qcow2_image *img)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t per_block = cs * 8 >> img->refcount_order;
  const uint64_t span = DIV_ROUND_UP (img->size, cs);
  const uint64_t l2 = DIV_ROUND_UP (span, 1ULL << img->l2_bits);
  const uint64_t meta = 1 + DIV_ROUND_UP (l2 * 8, cs) + l2;
  uint64_t blocks = 0, table = 0, i;

  for (i = 0; i < 64; ++i)
    {
      uint64_t b = DIV_ROUND_UP (meta + span + blocks + table, per_block);
      uint64_t t = DIV_ROUND_UP (b * 8, cs);
      if (b == blocks && t == table)
        break;
      blocks = b;
      table = t;
    }
  return meta + span + blocks + table;
}

int
qcow2_alloc_init (struct qcow2_image *img, struct qcow2_error *err)
{
  uint64_t full;

  img->bump = img->host_end >> img->cluster_bits;
  if (img->alloc_mode == QCOW2_ALLOC_LINEAR
      && img->bump < img->linear_start + img->linear_clusters)
    img->bump = img->linear_start + img->linear_clusters;
  /* Compact: stay within what a fully allocated image needs (or what
   * is in use already, if more: snapshots, leaks, another layout).
   */
  img->soft_end = UINT64_MAX;
  if (img->alloc_mode == QCOW2_ALLOC_COMPACT)
    {
      full = fully_allocated_clusters (img);
      img->soft_end = img->bump > full ? img->bump : full;
    }
  img->scan = 1;
  img->scanned = false;
  return 0;
}

void
qcow2_alloc_free_state (struct qcow2_image *img)
{
  free (img->freed);
  img->freed = NULL;
  img->nfreed = img->freed_cap = 0;
  free (img->homes);
  img->homes = NULL;
  img->nhomes = img->homes_cap = 0;
}

int
qcow2_alloc_reuse (struct qcow2_image *img, uint64_t cluster)
{
  if (img->nfreed == img->freed_cap)
    {
      size_t cap = img->freed_cap ? img->freed_cap * 2 : 64;
      uint64_t *p = realloc (img->freed, cap * sizeof *p);
      if (p == NULL)
        return -1; /* only lost for reuse: it stays free on disk */
      img->freed = p;
      img->freed_cap = cap;
    }
  img->freed[img->nfreed++] = cluster;
  return 0;
}

/* ---- Homes taken back (linear layout) ----
 *
 * A trim or a zero that unmaps drops guest cluster g's reference to
 * its home H only after the next commit and the reuse barrier.  A
 * rewrite of g before that would find H still counted and go past the
 * span.  Instead g takes H back at once, which is safe: H was g's alone
 * (COPIED, and nothing else counts it: refcount = drops waiting), so
 * whatever entry on disk may still point at H is g's own, and new bytes
 * there read as a write to g that was not flushed yet; a request that
 * looked up g's old entry and reads H late reads g too.  The take-back
 * is recorded as a drop to skip: per home, 'pending' drops of g's
 * reference are waiting and 'cancelled' of them are to be skipped, so
 * that the references really held are refcount - pending + cancelled.
 * An open-addressed table keyed by the host cluster (never 0).
 */
struct qcow2_home
{
  uint64_t cluster;
  uint32_t pending, cancelled;
};

static struct qcow2_home *
home_find (const struct qcow2_image *img, uint64_t cluster)
{
  size_t mask = img->homes_cap - 1, i;

  if (img->homes_cap == 0)
    return NULL;
  for (i = (cluster * 0x9e3779b97f4a7c15ULL) >> 20 & mask;
       img->homes[i].cluster; i = (i + 1) & mask)
    if (img->homes[i].cluster == cluster)
      return &img->homes[i];
  return NULL;
}

static struct qcow2_home *
home_insert (struct qcow2_image *img, uint64_t cluster)
{
  size_t mask, i;

  if ((img->nhomes + 1) * 2 > img->homes_cap)
    {
      size_t cap = img->homes_cap ? img->homes_cap * 2 : 64, j;
      struct qcow2_home *old = img->homes, *p = calloc (cap, sizeof *p);

      if (p == NULL)
        return NULL;
      img->homes = p;
      mask = cap - 1;
      for (j = 0; j < img->homes_cap; ++j)
        if (old[j].cluster)
          {
            for (i = (old[j].cluster * 0x9e3779b97f4a7c15ULL) >> 20 & mask;
                 p[i].cluster; i = (i + 1) & mask)
              ;
            p[i] = old[j];
          }
      img->homes_cap = cap;
      free (old);
    }
  mask = img->homes_cap - 1;
  for (i = (cluster * 0x9e3779b97f4a7c15ULL) >> 20 & mask;
       img->homes[i].cluster; i = (i + 1) & mask)
    ;
  img->homes[i] = (struct qcow2_home){ cluster, 0, 0 };
  img->nhomes++;
  return &img->homes[i];
}

/* Remove *h, shifting back the entries of its probe run. */
static void
home_remove (struct qcow2_image *img, struct qcow2_home *h)
{
  size_t mask = img->homes_cap - 1, i = h - img->homes, j = i, k;

  img->homes[i].cluster = 0;
  for (;;)
    {
      j = (j + 1) & mask;
      if (img->homes[j].cluster == 0)
        break;
      k = (img->homes[j].cluster * 0x9e3779b97f4a7c15ULL) >> 20 & mask;
      /* Move j to i unless its home slot k lies cyclically in (i, j]. */
      if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
        continue;
      img->homes[i] = img->homes[j];
      img->homes[j].cluster = 0;
      i = j;
    }
  img->nhomes--;
}

void
qcow2_alloc_note_drop (struct qcow2_image *img, uint64_t e, uint64_t guest)
{
  uint64_t host = (e & L2E_OFFSET_MASK) >> img->cluster_bits;
  struct qcow2_home *h;

  if (img->alloc_mode != QCOW2_ALLOC_LINEAR || (e & OFLAG_COMPRESSED)
      || !(e & OFLAG_COPIED) || guest >= img->linear_clusters
      || host != img->linear_start + guest)
    return;
  h = home_find (img, host);
  if (h == NULL)
    h = home_insert (img, host);
  if (h) /* out of memory: the home is only not taken back */
    h->pending++;
}

bool
qcow2_alloc_skip_drop (struct qcow2_image *img, uint64_t cluster)
{
  struct qcow2_home *h = home_find (img, cluster);
  bool skip;

  if (h == NULL)
    return false;
  skip = h->cancelled > 0;
  if (skip)
    h->cancelled--;
  if (h->pending > 0)
    h->pending--;
  if (h->pending == 0)
    home_remove (img, h);
  return skip;
}

/* Guest cluster g's home 'c' is counted: take it back if every count
 * is a drop of g's own reference waiting.  1 taken, 0 not, -1 error.
 */
static int
take_back_home (struct qcow2_image *img, uint64_t c, struct qcow2_error *err)
{
  struct qcow2_home *h = home_find (img, c);
  uint64_t v;

  if (h == NULL || h->pending <= h->cancelled)
    return 0;
  if (qcow2_rc_get (img, c, &v, err) == -1)
    return -1;
  if (v != h->pending - h->cancelled)
    return 0; /* someone else (a snapshot) holds it too */
  h->cancelled++;
  return 1;
}

/* ---- finding a free cluster ---- */

/* Claim 'c': 1 taken, 0 in use, -1 error. */
static int
try_claim (struct qcow2_image *img, uint64_t c, struct qcow2_error *err)
{
  if (img->io->fixed_size && (c + 1) << img->cluster_bits > img->file_size)
    return 0;
  return qcow2_rc_claim (img, c, err);
}

/* Are there frees that a commit and the reuse barrier would make
 * reusable?
 */
bool
qcow2_alloc_frees_waiting (const struct qcow2_image *img)
{
  return img->npending > 0 || img->commit.nfrees > 0 || img->ndeferred > 0;
}

void
qcow2_alloc_after_reclaim (struct qcow2_image *img)
{
  /* Nothing came free (the frees only lowered counts: snapshots,
   * compressed clusters): more really is in use than a fully allocated
   * image holds.  Let the bump pointer go on for a while before the
   * next reclaim, so that not every allocation costs a commit.
   */
  if (img->nfreed == 0 && img->bump >= img->soft_end)
    img->soft_end = img->bump + 64 + img->soft_end / 64;
}

static int
from_bump (struct qcow2_image *img, uint64_t *cluster, struct qcow2_error *err)
{
  const uint64_t end
      = img->io->fixed_size ? img->file_size >> img->cluster_bits : UINT64_MAX;
  const uint64_t soft = img->soft_end < end ? img->soft_end : end;
  uint64_t c, n;
  int r;

  for (;;)
    {
      if (img->bump >= soft && !img->scanned)
        {
          /* Look once at everything below (free since before the open,
           * or given back), next-fit from where the last look stopped.
           */
          for (n = 1; n < soft; ++n)
            {
              c = img->scan;
              img->scan = c + 1 >= soft ? 1 : c + 1;
              r = try_claim (img, c, err);
              if (r == -1)
                return -1;
              if (r == 1)
                {
                  *cluster = c;
                  return 0;
                }
            }
          img->scanned = true;
        }
      if (img->bump >= soft && img->alloc_strict
          && qcow2_alloc_frees_waiting (img))
        {
          qcow2_set_error (err, ENOSPC,
                           "no free cluster until the frees waiting are "
                           "committed");
          return -1;
        }
      if (img->bump >= end)
        break;
      /* A claim may make a refcount block, which may allocate: use the
       * pointer as it is now.
       */
      c = img->bump++;
      r = try_claim (img, c, err);
      if (r == -1)
        return -1;
      if (r == 1)
        {
          *cluster = c;
          return 0;
        }
    }
  qcow2_set_error (err, ENOSPC, "no free cluster left on the device");
  return -1;
}

int
qcow2_alloc_cluster (struct qcow2_image *img, bool metadata, uint64_t guest,
                     uint64_t *cluster, struct qcow2_error *err)
{
  uint64_t c;
  int r;

  if (img->alloc_mode == QCOW2_ALLOC_LINEAR)
    {
      if (!metadata && guest < img->linear_clusters)
        {
          c = img->linear_start + guest;
          r = try_claim (img, c, err);
          if (r == 0)
            r = take_back_home (img, c, err);
          if (r == -1)
            return -1;
          if (r == 1)
            {
              *cluster = c;
              return 0;
            }
        }
      while (metadata && img->meta_cursor < img->linear_start)
        {
          c = img->meta_cursor++;
          r = try_claim (img, c, err);
          if (r == -1)
            return -1;
          if (r == 1)
            {
              *cluster = c;
              return 0;
            }
        }
    }

  /* Freed clusters first (never a linear home: those stay for their
   * guest cluster).
   */
  while (img->nfreed > 0)
    {
      c = img->freed[--img->nfreed];

      if (img->alloc_mode == QCOW2_ALLOC_LINEAR && c >= img->linear_start
          && c < img->linear_start + img->linear_clusters)
        continue;
      r = try_claim (img, c, err);
      if (r == -1)
        return -1;
      if (r == 1)
        {
          *cluster = c;
          return 0;
        }
    }
  return from_bump (img, cluster, err);
}
