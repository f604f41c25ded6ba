/* nbdstack qcow2 library: writing the virtual disk.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A guest range is written one cluster at a time.  A cluster that is
 * ours alone (COPIED, a normal data cluster whose refcount is 1) is
 * overwritten in place: no metadata changes.  Anything else (never
 * written, zero, compressed, shared with a snapshot) gets a new cluster: the
 * part of it the request does not cover is what the guest reads there now (the
 * backing file, zeroes, the decompressed or shared data), copied in the
 * same pwritev as the request's data; then the L2 entry points at it.
 * The old cluster's reference is dropped after the commit that removes
 * it (commit.c).  The tables come from mapping.c (made if missing, an
 * L2 table shared with a snapshot copied first).  The data is durable
 * before the entry that points at it because every entry is written
 * only in a commit's second phase.
 *
 * Requests run in parallel (see lib/WRITING.md, "Locking"): each
 * claims the guest clusters it touches, then per cluster decides under
 * the image's lock (exclusive, briefly: look up the entry, allocate a
 * cluster and count it), writes the data without the lock, and takes
 * the lock again to point the entry at the new cluster.  The claim
 * keeps the entry from changing meanwhile; an entry is linked only once
 * its data write has completed, so any commit that includes the entry
 * also makes the data durable first (phase 1's flush).  The old
 * cluster's reference is dropped only at the relink, after the next
 * commit, and once every request that might still use it has ended.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-internal.h"

#define RETRY QCOW2_RETRY

/* WITHOUT the lock, in registered request 'req' that holds no entry it
 * looked up before (between runs of a write): commit, let the reuse
 * barrier pass this request, wait for the requests older than the
 * commit and apply the frees they held back, so that an allocation
 * that found no space can find the clusters freed meanwhile.
 */
static int
reclaim (struct qcow2_image *img, struct qcow2_req *req,
         struct qcow2_error *err)
{
  int r;

  if (qcow2_commit (img, err) == -1)
    return -1;
  qcow2_req_wait_older (img, req);

  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);
  r = img_failed (img) ? 0 : qcow2_apply_deferred (img, err);
  if (r == -1)
    {
      img_set_failed (img);
      return -1;
    }
  qcow2_alloc_after_reclaim (img);
  return 0;
}

/* One guest cluster of a run being written: where its bytes go on the
 * host, and what to link once they are there.
 */
enum slot_kind
{
  OVERWRITE, /* ours alone and all data: the bytes only, no link */
  NEW,       /* a new cluster: the whole cluster, then the entry */
  IN_PLACE,  /* ours alone but not all data: the whole cluster, then
              * the entry says it is all data */
};

struct wslot
{
  enum slot_kind kind;
  uint64_t off, n;     /* the request's guest bytes in this cluster */
  uint64_t host;       /* host offset of the cluster */
  struct l2_ref ref;   /* NEW, IN_PLACE: held until linked */
  uint64_t *ent;       /* its L2 entry in ref's table */
  uint64_t e, bm;      /* the entry (and bitmap) when it was prepared */
  unsigned char *fill; /* NEW, IN_PLACE, partly covered: the cluster as
                        * the guest reads it now (img->zero_buf when that
                        * is all zeroes: not ours to free) */
};

static void
free_fill (struct qcow2_image *img, struct wslot *s)
{
  if (s->fill != img->zero_buf)
    qcow2_scratch_put (img, s->fill);
  s->fill = NULL;
}

/* Host bytes a slot writes: [slot_start, slot_end). */
static uint64_t
slot_start (const struct qcow2_image *img, const struct wslot *s)
{
  return s->host
         + (s->kind == OVERWRITE ? s->off & (img->cluster_size - 1) : 0);
}

static uint64_t
slot_end (const struct qcow2_image *img, const struct wslot *s)
{
  return s->kind == OVERWRITE ? slot_start (img, s) + s->n
                              : s->host + img->cluster_size;
}

/* Under the lock: decide where [off, off+n) (inside one cluster) goes,
 * allocating a cluster if it needs one.  0, RETRY (nothing changed:
 * every cache slot is dirty, commit first) or -1.
 */
static int
prepare_slot (struct qcow2_image *img, uint64_t off, uint64_t n,
              struct wslot *s, struct qcow2_error *err)
{
  const uint64_t l1_idx = off >> (img->cluster_bits + img->l2_bits);
  uint64_t c, v;
  int r;

  if (img_failed (img))
    return qcow2_failed_error (err, true);
  r = qcow2_get_l2_for_write (img, l1_idx, &s->ref, err);
  if (r != 0)
    return r;
  s->off = off;
  s->n = n;
  s->fill = NULL;
  s->ent = qcow2_l2_entry (img, &s->ref, off >> img->cluster_bits);
  s->e = get_be64 (s->ent);
  s->bm = img->ext_l2 ? get_be64 (s->ent + 1) : 0;
  s->host = s->e & L2E_OFFSET_MASK;

  if (!(s->e & OFLAG_COMPRESSED) && s->host && (s->e & OFLAG_COPIED))
    {
      if (qcow2_check_data_cluster (img, s->host, off, err) == -1
          || qcow2_meta_check (img, s->host, img->cluster_size, "write", err)
                 == -1
          || qcow2_rc_get (img, s->host >> img->cluster_bits, &v, err) == -1)
        goto fail;
      if (v != 1)
        {
          qcow2_set_error (err, EIO,
                           "cluster %#" PRIx64 " is marked as ours alone "
                           "(COPIED) but its refcount is %" PRIu64,
                           s->host, v);
          goto fail;
        }
      if (img->ext_l2 ? s->bm == BITMAP_ALL_ALLOC : !(s->e & OFLAG_ZERO))
        {
          /* The common case of an upload overwriting: data only, and
           * the claim keeps the entry (and so the cluster) ours.
           */
          s->kind = OVERWRITE;
          l2_cache_put (&s->ref);
          return 0;
        }
      /* Some of it reads as zeroes or from below (a preallocated zero
       * cluster, unallocated subclusters): the whole host cluster gets
       * what the guest reads there, in place, before the entry says it
       * is all data.
       */
      s->kind = IN_PLACE;
      return 0;
    }
  /* What the link will free must not be metadata: refuse now, before
   * anything is allocated or written.
   */
  if (qcow2_meta_check_entry (img, s->e, false, err) == -1
      || qcow2_alloc_cluster (img, false, off >> img->cluster_bits, &c, err)
             == -1)
    goto fail;
  s->kind = NEW;
  s->host = c << img->cluster_bits;
  /* A metadata cluster with refcount 0 (a corrupt image, or a bug of
   * ours) stays counted and untouched.
   */
  if (qcow2_meta_check (img, s->host, img->cluster_size, "write", err) == -1)
    goto fail;
  /* The table slot stays referenced (never evicted) and the L1 entry
   * stays what it is now (qcow2_get_l2_for_write), so 'ent' is still
   * this cluster's entry at the link.
   */
  return 0;

fail:
  l2_cache_put (&s->ref);
  return -1;
}

/* Without the lock: what the guest reads in a partly covered slot's
 * cluster now (up to the end of the disk).
 */
static int
read_fill (struct qcow2_image *img, struct wslot *s, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t gstart = s->off & ~(cs - 1);
  const uint64_t len = img->size - gstart < cs ? img->size - gstart : cs;

  if (s->kind == OVERWRITE || s->n == cs)
    return 0;
  /* Never written, nothing below: zeroes, nothing to read or copy (the
   * usual case of an upload into a fresh image).
   */
  if (s->kind == NEW
      && ((s->e == 0 && s->bm == 0
           && (img->backing_ops == NULL || gstart >= img->backing_size))
          || (!img->ext_l2 && s->e == OFLAG_ZERO)))
    {
      s->fill = (unsigned char *)img->zero_buf;
      return 0;
    }
  s->fill = qcow2_scratch_get (img, err);
  if (s->fill == NULL)
    return -1;
  memset (s->fill + len, 0, cs - len);
  return qcow2_pread_unlocked (img, s->fill, len, gstart, err);
}

/* Under the lock: point the entry of a written NEW or IN_PLACE slot at
 * its cluster, and let go of the slot.  0 or -1.
 */
static int
link_slot (struct qcow2_image *img, struct wslot *s, struct qcow2_error *err)
{
  int r = -1;

  if (s->kind == OVERWRITE)
    return 0;
  if (get_be64 (s->ent) != s->e
      || (img->ext_l2 && get_be64 (s->ent + 1) != s->bm))
    {
      qcow2_set_error (err, EIO,
                       "the L2 entry of claimed guest offset %#" PRIx64
                       " changed under its write",
                       s->off);
      goto out;
    }
  /* A COPIED cluster was written in place. */
  if (s->kind == NEW
      && qcow2_free_entry (img, s->e, false, s->off >> img->cluster_bits, err)
             == -1)
    goto out;
  put_be64 (s->ent, s->host | OFLAG_COPIED);
  if (img->ext_l2)
    put_be64 (s->ent + 1, BITMAP_ALL_ALLOC);
  l2_cache_mark_dirty (&s->ref);
  r = 0;
out:
  l2_cache_put (&s->ref);
  return r;
}

/* Under the lock: let go of slots that will not be linked (after an
 * error; their clusters stay counted: a leak at worst, and the image
 * fails).
 */
static void
drop_slots (struct qcow2_image *img, struct wslot *run, unsigned n)
{
  unsigned i;

  for (i = 0; i < n; ++i)
    {
      if (run[i].kind != OVERWRITE)
        l2_cache_put (&run[i].ref);
      free_fill (img, &run[i]);
    }
}

/* Without the lock: the bytes of slots run[0..n), host-contiguous, in
 * one write.  Only the first slot can start and only the last can end
 * inside its cluster, and the request's data is contiguous, so three
 * pieces at most: a fill, the data, a fill.
 */
static int
write_run (struct qcow2_image *img, const char *data, struct wslot *run,
           unsigned n, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  struct wslot *first = &run[0], *last = &run[n - 1];
  uint64_t in = first->off & (cs - 1), datalen = 0, start, tail;
  struct iovec iov[3];
  int niov = 0, r;
  unsigned i;

  for (i = 0; i < n; ++i)
    {
      if (read_fill (img, &run[i], err) == -1)
        return -1;
      datalen += run[i].n;
    }
  start = slot_start (img, first);
  if (first->kind != OVERWRITE && in > 0)
    iov[niov++] = (struct iovec){ first->fill, in };
  iov[niov++] = (struct iovec){ (void *)data, datalen };
  tail = (last->off & (cs - 1)) + last->n;
  if (last->kind != OVERWRITE && tail < cs)
    iov[niov++] = (struct iovec){ last->fill + tail, cs - tail };
  r = img->io->pwritev (img->io, iov, niov, start);
  if (r < 0)
    return qcow2_io_error_at (err, r, "writing data", start);
  return 0;
}

/* Write [off, off+count) from 'data', the range claimed, without the
 * lock held: 0 or -1 (committing itself when the cache is full of
 * dirty tables).  Clusters are prepared under the lock a run at a time,
 * as long as their host bytes continue one another (the linear layout
 * places a whole L2 table's clusters in guest order; an upload
 * overwrites or fills them in order), so a large request is one host
 * write, whatever the cluster size.
 */
#define RUN_MAX 256

/* Reclaims before an allocation may give up with ENOSPC (each one a
 * commit and a wait for the requests older than it).
 */
#define RECLAIM_MAX 4

/* A write in progress: the slots prepared, run[0, n_write) the ones
 * the next host write covers, and what is left of the request.
 */
struct wstate
{
  struct qcow2_req *req;
  struct wslot *run; /* RUN_MAX slots */
  unsigned n_run, n_write, reclaims;
  const char *run_data; /* the data of run[0] */
  uint64_t off, count;  /* not prepared yet */
};

/* Under the lock, dropping it on purpose for the call: reclaim. */
static int
reclaim_relock (struct qcow2_image *img, struct qcow2_req *req,
                struct qcow2_error *err)
{
  int r;

  pthread_rwlock_unlock (&img->lock);
  r = reclaim (img, req, err);
  pthread_rwlock_wrlock (&img->lock);
  return r;
}

/* 1. Under the lock: prepare clusters while they continue run[0]'s
 * host bytes; a prepared one that does not starts the next run.  0 or
 * -1 (the caller drops the slots).
 */
static int
prepare_run (struct qcow2_image *img, struct wstate *w, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  int r;

  w->n_write = w->n_run;
  while (w->count > 0 && w->n_run < RUN_MAX && w->n_write == w->n_run)
    {
      uint64_t n = cs - (w->off & (cs - 1));
      if (n > w->count)
        n = w->count;
      /* Frees waiting for a commit are reclaimed before going past
       * what a fully allocated image needs.
       */
      img->alloc_strict = w->reclaims < RECLAIM_MAX;
      r = prepare_slot (img, w->off, n, &w->run[w->n_run], err);
      img->alloc_strict = false;
      /* ENOSPC changed nothing of this cluster (an L2 table it made
       * stays).  Write what is prepared first; then, holding no entry
       * looked up before, reclaim what waits and retry.
       */
      if (r == -1 && err->errnum == ENOSPC && w->n_run > 0)
        break;
      if (r == -1 && err->errnum == ENOSPC && w->reclaims < RECLAIM_MAX
          && qcow2_alloc_frees_waiting (img))
        {
          w->reclaims++;
          if (reclaim_relock (img, w->req, err) == -1)
            return -1;
          continue;
        }
      if (r == RETRY && w->n_run == 0)
        {
          /* Every slot is dirty: let a commit clean them.  Nothing of
           * this cluster has changed yet.
           */
          if (qcow2_commit_relock (img, err) == -1)
            return -1;
          continue;
        }
      if (r == RETRY)
        break; /* write what is prepared, then commit if need be */
      if (r == -1)
        return -1;
      w->n_run++;
      w->off += n;
      w->count -= n;
      if (w->n_run == 1
          || slot_start (img, &w->run[w->n_run - 1])
                 == slot_end (img, &w->run[w->n_run - 2]))
        w->n_write = w->n_run;
    }
  return 0;
}

/* 3. Under the lock: the entries of run[0, n_write) point at the data,
 * which is complete; the rest of the run moves up.  0, or -1 with
 * every slot let go.
 */
static int
link_run (struct qcow2_image *img, struct wstate *w, struct qcow2_error *err)
{
  unsigned i;

  for (i = 0; i < w->n_write; ++i)
    {
      int r = link_slot (img, &w->run[i], err);

      free_fill (img, &w->run[i]);
      if (r == -1)
        {
          drop_slots (img, w->run + i + 1, w->n_run - i - 1);
          return -1;
        }
      w->run_data += w->run[i].n;
    }
  memmove (w->run, w->run + w->n_write,
           (w->n_run - w->n_write) * sizeof w->run[0]);
  w->n_run -= w->n_write;
  return 0;
}

int
qcow2_write_claimed (struct qcow2_image *img, struct qcow2_req *req,
                     const char *data, uint64_t off, uint64_t count,
                     struct qcow2_error *err)
{
  struct wslot run[RUN_MAX];
  struct wstate w = {
    .req = req, .run = run, .run_data = data, .off = off, .count = count
  };
  /* Held throughout, except that it is dropped on purpose around the
   * data write, commits and reclaims: never held across data I/O.
   */
  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);
  int r;

  while (w.count > 0 || w.n_run > 0)
    {
      if (prepare_run (img, &w, err) == -1)
        goto fail;
      /* 2. Without the lock: the data (and what the guest reads around
       * it in new clusters).
       */
      pthread_rwlock_unlock (&img->lock);
      r = write_run (img, w.run_data, w.run, w.n_write, err);
      pthread_rwlock_wrlock (&img->lock);
      if (r == -1)
        goto fail;
      if (link_run (img, &w, err) == -1)
        return -1;
    }
  return 0;

fail:
  drop_slots (img, w.run, w.n_run);
  return -1;
}

/* Whether a write or zero of [offset, offset + count) may go ahead:
 * the image is writable and the range is inside the disk.
 */
static int
check_change (struct qcow2_image *img, uint64_t count, uint64_t offset,
              const char *what, struct qcow2_error *err)
{
  if (!img->writable)
    {
      qcow2_set_error (err, EROFS, "the image is open read-only");
      return -1;
    }
  if (offset > img->size || count > img->size - offset)
    {
      qcow2_set_error (err, EINVAL, "%s beyond the end of the disk", what);
      return -1;
    }
  return 0;
}

int
qcow2_change_begin (struct qcow2_image *img, struct qcow2_claim *claim,
                    struct qcow2_req *req, uint64_t offset, uint64_t count,
                    const char *what, struct qcow2_error *err)
{
  if (check_change (img, count, offset, what, err) == -1)
    return -1;
  if (img_failed (img))
    return qcow2_failed_error (err, true);
  if (count == 0)
    return 0;
  qcow2_claim_range (img, claim, offset, count);
  qcow2_req_begin (img, req);
  return 1;
}

void
qcow2_change_end (struct qcow2_image *img, struct qcow2_claim *claim,
                  struct qcow2_req *req, int r, const struct qcow2_error *err)
{
  /* Metadata in memory may be half-changed: refuse further writes
   * rather than commit a guess.  Not after ENOSPC: what failed to
   * allocate changed nothing, a data write that failed is not linked
   * (its cluster leaks until the next open), and the image stays
   * consistent: the next request may succeed once space is freed.
   */
  if (r == -1 && err->errnum != ENOSPC)
    img_set_failed (img);
  qcow2_unclaim (img, claim);
  qcow2_req_end (img, req);
}

int
qcow2_pwrite (struct qcow2_image *img, const void *buf, size_t count,
              uint64_t offset, struct qcow2_error *err)
{
  struct qcow2_claim claim;
  struct qcow2_req req;
  int r = qcow2_change_begin (img, &claim, &req, offset, count, "write", err);

  if (r <= 0)
    return r;
  r = qcow2_write_claimed (img, &req, buf, offset, count, err);
  qcow2_change_end (img, &claim, &req, r, err);
  return r;
}

int
qcow2_flush (struct qcow2_image *img, struct qcow2_error *err)
{
  if (!img->writable)
    return 0;
  return qcow2_commit (img, err);
}
