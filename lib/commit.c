/* nbdstack qcow2 library: making writes durable in a crash-safe order,
 * one commit for many flushes.
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
 * may still be on disk.
 *
 * Group commit: the flushes (fdatasync) run without the image lock, so
 * reads and writes go on meanwhile, and a flush that arrives during a
 * commit waits for the next one, which serves every flush that arrived
 * in the meantime.  The cut, under the lock, writes phase 1 (page-cache
 * writes, and the only writers of refcount blocks - eviction, table
 * growth - also hold the lock, so no older copy can land after a newer
 * one) and copies phase 2 (L2 tables, pinned in the cache until the
 * copy is written; L1 sectors), and takes the references to drop.
 * Changes after the cut belong to the next commit.  Requests run in
 * parallel with all of this and link an entry only once its data write
 * has completed, so a cut never includes an entry whose data is still
 * being written.  Phase 3 runs under the lock again, but requests that
 * started before the cut may still be reading or writing a cluster this
 * commit freed: its decrement is held back (qcow2_deferred) until every
 * request registered before the cut has ended (the reuse barrier,
 * qcow2_req_begin/end).  A commit never waits for requests, so a request
 * may itself commit in its middle (a cache full of dirty tables).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
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

/* Copy the dirty L1 sectors, big-endian, into the commit's buffer. */
static int
cut_l1 (struct qcow2_image *img, struct qcow2_error *err)
{
  const uint64_t nsectors
      = ((uint64_t)img->l1_size + L1_SECTOR_ENTRIES - 1) / L1_SECTOR_ENTRIES;
  struct qcow2_commit *c = &img->commit;
  uint64_t s;

  c->nl1 = 0;
  for (s = 0; s < nsectors; ++s)
    {
      uint64_t first = s * L1_SECTOR_ENTRIES, n = L1_SECTOR_ENTRIES, i;
      uint64_t *buf;

      if (!(img->l1_dirty[s / 64] & (1ULL << (s % 64))))
        continue;
      if (c->nl1 == c->l1_cap)
        {
          size_t cap = c->l1_cap ? c->l1_cap * 2 : 8;
          uint64_t *p = realloc (c->l1_buf, cap * 512);
          uint64_t *q = realloc (c->l1_sector, cap * sizeof *q);
          if (p)
            c->l1_buf = p;
          if (q)
            c->l1_sector = q;
          if (p == NULL || q == NULL)
            {
              qcow2_set_error (err, ENOMEM, "out of memory");
              return -1;
            }
          c->l1_cap = cap;
        }
      if (first + n > img->l1_size)
        n = img->l1_size - first;
      buf = c->l1_buf + c->nl1 * L1_SECTOR_ENTRIES;
      for (i = 0; i < n; ++i)
        put_be64 (&buf[i], img->l1[first + i]);
      c->l1_sector[c->nl1++] = s;
      img->l1_dirty[s / 64] &= ~(1ULL << (s % 64));
    }
  return 0;
}

/* Under the lock: phase 1's writes, phase 2's copies, the frees. */
static int
cut (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_commit *c = &img->commit;
  uint64_t *tmp;
  size_t tcap;
  int r;

  if (qcow2_rc_write_dirty (img, err) == -1)
    return -1;
  r = l2_cache_write_dirty (img->l2, true);
  if (r < 0)
    return qcow2_io_error (err, r, "writing new L2 tables");
  r = l2_cache_cut (img->l2, &c->l2, &c->nl2, &c->l2_cap);
  if (r < 0)
    return qcow2_io_error (err, r, "copying L2 tables");
  if (cut_l1 (img, err) == -1)
    return -1;
  /* The frees of this epoch go with it; the next starts empty. */
  tmp = c->frees;
  tcap = c->frees_cap;
  c->frees = img->pending;
  c->nfrees = img->npending;
  c->frees_cap = img->pending_cap;
  img->pending = tmp;
  img->pending_cap = tcap;
  img->npending = 0;
  return 0;
}

/* Without the lock: the two flushes and phase 2's writes. */
static int
write_out (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_commit *c = &img->commit;
  size_t i;
  int r;

  r = img->io->flush (img->io);
  if (r < 0)
    return qcow2_io_error (err, r, "flush");
  for (i = 0; i < c->nl2; ++i)
    {
      r = qcow2_hostio_pwrite (img->io, c->l2[i].table, img->cluster_size,
                               c->l2[i].offset);
      if (r < 0)
        return qcow2_io_error (err, r, "writing an L2 table");
    }
  for (i = 0; i < c->nl1; ++i)
    {
      uint64_t first = c->l1_sector[i] * L1_SECTOR_ENTRIES;
      uint64_t n = img->l1_size - first < L1_SECTOR_ENTRIES
                       ? img->l1_size - first
                       : L1_SECTOR_ENTRIES;
      r = qcow2_hostio_pwrite (img->io, c->l1_buf + i * L1_SECTOR_ENTRIES,
                               n * 8, img->l1_offset + first * 8);
      if (r < 0)
        return qcow2_io_error (err, r, "writing the L1 table");
    }
  if (c->nl2 > 0 || c->nl1 > 0)
    {
      r = img->io->flush (img->io);
      if (r < 0)
        return qcow2_io_error (err, r, "flush");
    }
  return 0;
}

/* Under the lock: start cut number *my_cut at a new epoch (*epoch), and
 * take it.  *started is false if the image had failed (nothing taken:
 * nothing to finish).
 */
static int
take_cut (struct qcow2_image *img, uint64_t *my_cut, uint64_t *epoch,
          bool *started, struct qcow2_error *err)
{
  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);

  *started = !img_failed (img);
  if (!*started)
    return qcow2_failed_error (err, true);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->commit_lock);
    *my_cut = ++img->cut_seq;
  }
  /* Requests registered from here on see the entries as of this cut:
   * none of them can reach a cluster this commit frees.
   */
  *epoch = qcow2_next_epoch (img);
  return cut (img, err);
}

/* Under the lock again, after write_out returned 'r': hold back the
 * frees of cut 'epoch' and apply those whose barrier passed.
 */
static int
finish_cut (struct qcow2_image *img, uint64_t epoch, int r,
            struct qcow2_error *err)
{
  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);

  l2_cache_unpin_all (img->l2);
  if (r == 0)
    r = qcow2_defer_frees (img, epoch, img->commit.frees, img->commit.nfrees,
                           err);
  if (r == 0)
    img->commit.nfrees = 0;
  if (r == 0)
    r = qcow2_apply_deferred (img, err);
  if (r == -1)
    img_set_failed (img);
  return r;
}

/* One commit, by the thread that set img->committing. */
static int
run_commit (struct qcow2_image *img, uint64_t *my_cut, struct qcow2_error *err)
{
  uint64_t epoch = 0;
  bool started;
  int r;

  r = take_cut (img, my_cut, &epoch, &started, err);
  if (!started)
    return -1;
  if (r == 0)
    r = write_out (img, err);
  return finish_cut (img, epoch, r, err);
}

int
qcow2_commit (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_error ignored = { 0 };
  uint64_t target, my_cut = 0;
  int r = 0;

  if (err == NULL)
    err = &ignored;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->commit_lock);
  /* Everything that completed before this call is covered by any cut
   * taken from now on.
   */
  target = img->cut_seq + 1;
  while (img->done_seq < target && img->commit_errno == 0)
    {
      if (img->committing)
        {
          pthread_cond_wait (&img->commit_done, &img->commit_lock);
          continue;
        }
      img->committing = true;
      /* Dropped on purpose while this thread commits: commit_lock is
       * never held while taking the image lock.
       */
      pthread_mutex_unlock (&img->commit_lock);
      r = run_commit (img, &my_cut, err);
      pthread_mutex_lock (&img->commit_lock);
      img->committing = false;
      if (r == 0)
        img->done_seq = my_cut;
      else if (img->commit_errno == 0)
        img->commit_errno = err->errnum ? err->errnum : EIO;
      pthread_cond_broadcast (&img->commit_done);
    }
  if (img->done_seq < target)
    {
      if (r == 0)
        qcow2_set_error (err, img->commit_errno, "commit failed: %s",
                         strerror (img->commit_errno));
      r = -1;
    }
  return r;
}

int
qcow2_commit_relock (struct qcow2_image *img, struct qcow2_error *err)
{
  int r;

  /* Dropped on purpose: a commit takes the lock itself. */
  pthread_rwlock_unlock (&img->lock);
  r = qcow2_commit (img, err);
  pthread_rwlock_wrlock (&img->lock);
  if (r == 0 && img_failed (img))
    r = qcow2_failed_error (err, true);
  return r;
}

void
qcow2_commit_free (struct qcow2_image *img)
{
  struct qcow2_commit *c = &img->commit;
  size_t i;

  for (i = 0; i < c->l2_cap; ++i)
    free (c->l2[i].table);
  free (c->l2);
  free (c->l1_buf);
  free (c->l1_sector);
  free (c->frees);
  memset (c, 0, sizeof *c);
}
