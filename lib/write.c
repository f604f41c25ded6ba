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
 * it (commit.c).  An L2 table shared with a snapshot (no COPIED flag in
 * the L1 entry) is first copied for the active layer (cow_l2).  The data is
 * durable before the entry that points at it because every entry is written
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

#include "qcow2-internal.h"

static int
failed_image (struct qcow2_image *img, struct qcow2_error *err)
{
  qcow2_set_error (err, EIO, "the image failed earlier and is read-only");
  return -1;
}

#define RETRY QCOW2_RETRY

/* A slot for the table at 'offset': 0, RETRY or -1. */
static int
get_write (struct qcow2_image *img, uint64_t offset, bool fresh,
           struct l2_ref *ref, struct qcow2_error *err)
{
  int r = l2_cache_get_write (img->l2, offset, fresh, ref);

  if (r == -EAGAIN)
    return RETRY;
  if (r < 0)
    {
      qcow2_set_error (err, -r, "L2 table at %#" PRIx64 ": %s", offset,
                       strerror (-r));
      return -1;
    }
  return 0;
}

/* The table at 'old' is shared (with a snapshot): give the active L1
 * its own copy.  The data clusters keep their counts (one per L1 table
 * that reaches them, through either copy); the new table is counted
 * once, and the old one loses the active L1's reference after the
 * commit that points the L1 entry at the copy.  0, RETRY or -1.
 */
static int
cow_l2 (struct qcow2_image *img, uint64_t l1_idx, uint64_t old,
        struct l2_ref *ref, struct qcow2_error *err)
{
  struct l2_ref src;
  uint64_t c;
  int r;

  r = l2_cache_get (img->l2, old, &src);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading L2 table at %#" PRIx64 ": %s", old,
                       strerror (-r));
      return -1;
    }
  if (qcow2_alloc_cluster (img, true, 0, &c, err) == -1)
    {
      l2_cache_put (&src);
      return -1;
    }
  r = get_write (img, c << img->cluster_bits, true, ref, err);
  if (r == 0)
    memcpy ((void *)ref->table, src.table, img->cluster_size);
  l2_cache_put (&src);
  if (r == RETRY)
    {
      /* Nothing refers to c: give it back now. */
      if (qcow2_rc_update (img, c, -1, err) == -1)
        return -1;
      qcow2_alloc_reuse (img, c);
    }
  if (r != 0)
    return r;
  if (qcow2_free_after_commit (img, old >> img->cluster_bits, err) == -1)
    {
      l2_cache_put (ref);
      return -1;
    }
  img->l1[l1_idx] = (c << img->cluster_bits) | OFLAG_COPIED;
  qcow2_l1_mark_dirty (img, l1_idx);
  return 0;
}

/* The L2 table covering L1 index 'l1_idx', made if missing.  0, RETRY
 * or -1.
 */
int
qcow2_get_l2_for_write (struct qcow2_image *img, uint64_t l1_idx,
                        struct l2_ref *ref, struct qcow2_error *err)
{
  uint64_t l1e = img->l1[l1_idx];
  uint64_t l2_off = l1e & L1E_OFFSET_MASK, c;
  int r;

  if (l2_off == 0)
    {
      if (qcow2_alloc_cluster (img, true, 0, &c, err) == -1)
        return -1;
      r = get_write (img, c << img->cluster_bits, true, ref, err);
      if (r == RETRY)
        {
          /* Nothing refers to c: give it back now. */
          if (qcow2_rc_update (img, c, -1, err) == -1)
            return -1;
          qcow2_alloc_reuse (img, c);
        }
      if (r != 0)
        return r; /* on error c stays counted: a leak, never corruption */
      img->l1[l1_idx] = (c << img->cluster_bits) | OFLAG_COPIED;
      qcow2_l1_mark_dirty (img, l1_idx);
      return 0;
    }
  if (qcow2_check_l2_offset (img, l2_off, l1_idx, err) == -1)
    return -1;
  if (!(l1e & OFLAG_COPIED))
    return cow_l2 (img, l1_idx, l2_off, ref, err);
  return get_write (img, l2_off, false, ref, err);
}

/* Drop the references entry 'e' holds (a COPIED cluster's too if
 * 'copied'), after the next commit.
 */
int
qcow2_free_entry (struct qcow2_image *img, uint64_t e, bool copied,
                  struct qcow2_error *err)
{
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
    return qcow2_free_after_commit (
        img, (e & L2E_OFFSET_MASK) >> img->cluster_bits, err);
  return 0;
}

static int
io_error (struct qcow2_error *err, int r, const char *what, uint64_t off)
{
  qcow2_set_error (err, -r, "%s at %#" PRIx64 ": %s", what, off, strerror (-r));
  return -1;
}

/* Write [off, off+n) (inside one cluster) from 'data', without the
 * lock, the cluster claimed: 0 or -1.
 */
int
qcow2_write_cluster (struct qcow2_image *img, const char *data, uint64_t off,
                     uint64_t n, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t in = off & (cs - 1), gstart = off - in;
  const uint64_t l1_idx = off >> (img->cluster_bits + img->l2_bits);
  const uint64_t l2_idx
      = (off >> img->cluster_bits) & ((1ULL << img->l2_bits) - 1);
  struct l2_ref ref;
  uint64_t *ent, e, bm, host, c, v;
  unsigned char *fill = NULL;
  struct iovec iov[3];
  bool in_place = false;
  int niov = 0, r;

  /* 1. Under the lock: the entry, and where the data goes. */
  for (;;)
    {
      pthread_rwlock_wrlock (&img->lock);
      if (img_failed (img))
        {
          pthread_rwlock_unlock (&img->lock);
          return failed_image (img, err);
        }
      r = qcow2_get_l2_for_write (img, l1_idx, &ref, err);
      if (r != RETRY)
        break;
      /* Every slot is dirty: let a commit clean them.  Nothing of this
       * cluster has changed yet.
       */
      pthread_rwlock_unlock (&img->lock);
      if (qcow2_commit (img, err) == -1)
        return -1;
    }
  if (r == -1)
    {
      pthread_rwlock_unlock (&img->lock);
      return -1;
    }
  r = -1;
  ent = (uint64_t *)((char *)ref.table + l2_idx * img->l2_entry_bytes);
  e = get_be64 (ent);
  bm = img->ext_l2 ? get_be64 (ent + 1) : 0;
  host = e & L2E_OFFSET_MASK;

  if (!(e & OFLAG_COMPRESSED) && host && (e & OFLAG_COPIED))
    {
      if (qcow2_check_data_cluster (img, host, off, err) == -1
          || qcow2_rc_get (img, host >> img->cluster_bits, &v, err) == -1)
        goto out_locked;
      if (v != 1)
        {
          qcow2_set_error (err, EIO,
                           "cluster %#" PRIx64 " is marked as ours alone "
                           "(COPIED) but its refcount is %" PRIu64,
                           host, v);
          goto out_locked;
        }
      if (img->ext_l2 ? bm == BITMAP_ALL_ALLOC : !(e & OFLAG_ZERO))
        {
          /* The common case of an upload overwriting: data only, and
           * the claim keeps the entry (and so the cluster) ours.
           */
          l2_cache_put (&ref);
          pthread_rwlock_unlock (&img->lock);
          r = qcow2_hostio_pwrite (img->io, data, n, host + in);
          if (r < 0)
            return io_error (err, r, "writing data", host + in);
          return 0;
        }
      /* Some of it reads as zeroes or from below (a preallocated zero
       * cluster, unallocated subclusters): the whole host cluster gets
       * what the guest reads there, in place, before the entry says it
       * is all data.
       */
      c = host >> img->cluster_bits;
      in_place = true;
    }
  else if (qcow2_alloc_cluster (img, false, off >> img->cluster_bits, &c, err)
           == -1)
    goto out_locked;
  /* The table slot stays referenced (never evicted) and the L1 entry
   * stays what it is now (qcow2_get_l2_for_write), so 'ent' is still
   * this cluster's entry at the relink.
   */
  pthread_rwlock_unlock (&img->lock);

  /* 2. Without the lock: what the guest reads around the request now
   * (up to the end of the disk), and the data.
   */
  if (n < cs)
    {
      uint64_t len = img->size - gstart < cs ? img->size - gstart : cs;

      if (posix_memalign ((void **)&fill, 4096, cs) != 0)
        {
          fill = NULL;
          qcow2_set_error (err, ENOMEM, "out of memory");
          goto out_unlocked;
        }
      memset (fill + len, 0, cs - len);
      if (qcow2_pread_unlocked (img, fill, len, gstart, err) == -1)
        goto out_unlocked;
    }
  if (in > 0)
    iov[niov++] = (struct iovec){ fill, in };
  iov[niov++] = (struct iovec){ (void *)data, n };
  if (in + n < cs)
    iov[niov++] = (struct iovec){ fill + in + n, cs - in - n };
  r = img->io->pwritev (img->io, iov, niov, c << img->cluster_bits);
  if (r < 0)
    {
      io_error (err, r, "writing data", c << img->cluster_bits);
      r = -1;
      goto out_unlocked;
    }

  /* 3. Under the lock: the entry points at the data, which is complete. */
  r = -1;
  pthread_rwlock_wrlock (&img->lock);
  if (get_be64 (ent) != e || (img->ext_l2 && get_be64 (ent + 1) != bm))
    {
      qcow2_set_error (err, EIO,
                       "the L2 entry of claimed guest offset %#" PRIx64
                       " changed under its write",
                       off);
      goto out_locked;
    }
  /* A COPIED cluster was written in place. */
  if (!in_place && qcow2_free_entry (img, e, false, err) == -1)
    goto out_locked;
  put_be64 (ent, (c << img->cluster_bits) | OFLAG_COPIED);
  if (img->ext_l2)
    put_be64 (ent + 1, BITMAP_ALL_ALLOC);
  l2_cache_mark_dirty (&ref);
  r = 0;
out_locked:
  l2_cache_put (&ref);
  pthread_rwlock_unlock (&img->lock);
  free (fill);
  return r;

out_unlocked:
  /* c stays counted: a leak at worst, and the image fails anyway. */
  pthread_rwlock_wrlock (&img->lock);
  l2_cache_put (&ref);
  pthread_rwlock_unlock (&img->lock);
  free (fill);
  return -1;
}

/* Whether a write or zero of [offset, offset + count) may go ahead:
 * the image is writable and the range is inside the disk.
 */
int
qcow2_check_change (struct qcow2_image *img, uint64_t count, uint64_t offset,
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
qcow2_pwrite (struct qcow2_image *img, const void *buf, size_t count,
              uint64_t offset, struct qcow2_error *err)
{
  const char *p = buf;
  struct qcow2_claim claim;
  struct qcow2_req req;
  int r = 0;

  if (qcow2_check_change (img, count, offset, "write", err) == -1)
    return -1;
  if (img_failed (img))
    return failed_image (img, err);
  if (count == 0)
    return 0;
  qcow2_claim_range (img, &claim, offset, count);
  qcow2_req_begin (img, &req);
  while (r == 0 && count > 0)
    {
      uint64_t n = img->cluster_size - (offset & (img->cluster_size - 1));
      if (n > count)
        n = count;
      r = qcow2_write_cluster (img, p, offset, n, err);
      p += n;
      offset += n;
      count -= n;
    }
  /* Metadata in memory may be half-changed: refuse further writes
   * rather than commit a guess.
   */
  if (r == -1)
    img_set_failed (img);
  qcow2_unclaim (img, &claim);
  qcow2_req_end (img, &req);
  return r;
}

int
qcow2_flush (struct qcow2_image *img, struct qcow2_error *err)
{
  if (!img->writable)
    return 0;
  return qcow2_commit (img, err);
}
