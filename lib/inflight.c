/* nbdstack qcow2 library: requests in flight (claims and the reuse
 * barrier).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant (claims): a guest cluster is claimed by one request at a
 * time, and only its claimer changes its L2 entry.  A write, zero or
 * discard claims every guest cluster it touches at once, before it
 * looks at an entry (no request holds one claim while waiting for
 * another, so there is no deadlock); a request meeting a claimed
 * cluster waits.  So the claimer may do its data I/O without the image
 * lock.  Reads do not claim.
 *
 * Invariant (the reuse barrier): a cluster whose reference commit N
 * removed is decremented (and maybe reused) only once every request
 * registered with an epoch below N has ended.  Every request of a
 * writable image (reads and block status too) is registered while it
 * runs, with the epoch (number of commit cuts) at its start, in a list
 * in start order (epochs never decrease along it); a request registered
 * after cut N looks its entries up after the cut and cannot reach a
 * cluster N freed, and one that may have seen the old entry can no
 * longer read or write the cluster once it ended.
 *
 * Lock order: 'lock' (the image's) before epoch_lock; claim_lock is
 * taken with no other lock held.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-internal.h"

/* ---- claims on guest clusters ---- */

/* Under claim_lock: is any of clusters [first, last] claimed? */
static bool
claimed (const struct qcow2_image *img, uint64_t first, uint64_t last)
{
  const struct qcow2_claim *c;

  for (c = img->claims; c; c = c->next)
    if (c->first <= last && first <= c->last)
      return true;
  return false;
}

void
qcow2_claim_range (struct qcow2_image *img, struct qcow2_claim *claim,
                   uint64_t offset, uint64_t count)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->claim_lock);

  claim->first = offset >> img->cluster_bits;
  claim->last = (offset + (count ? count : 1) - 1) >> img->cluster_bits;
  while (claimed (img, claim->first, claim->last))
    pthread_cond_wait (&img->claim_released, &img->claim_lock);
  claim->next = img->claims;
  img->claims = claim;
}

void
qcow2_unclaim (struct qcow2_image *img, struct qcow2_claim *claim)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->claim_lock);
  struct qcow2_claim **p;

  for (p = &img->claims; *p != claim; p = &(*p)->next)
    ;
  *p = claim->next;
  pthread_cond_broadcast (&img->claim_released);
}

/* ---- the reuse barrier ---- */

bool qcow2_test_no_reuse_barrier;

void
qcow2_req_begin (struct qcow2_image *img, struct qcow2_req *req)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);

  req->epoch = img->epoch;
  req->next = NULL;
  req->prev = img->req_tail;
  if (img->req_tail)
    img->req_tail->next = req;
  else
    img->req_head = req;
  img->req_tail = req;
}

/* Under epoch_lock: frees of commits up to this epoch may be applied. */
static uint64_t
barrier_epoch (const struct qcow2_image *img)
{
  if (qcow2_test_no_reuse_barrier || img->req_head == NULL)
    return UINT64_MAX;
  return img->req_head->epoch;
}

/* Under epoch_lock: take 'req' out of the list. */
static void
unlink_req (struct qcow2_image *img, struct qcow2_req *req)
{
  if (req->prev)
    req->prev->next = req->next;
  else
    img->req_head = req->next;
  if (req->next)
    req->next->prev = req->prev;
  else
    img->req_tail = req->prev;
}

/* Ends 'req'; true if held-back frees may now be applied. */
static bool
end_req (struct qcow2_image *img, struct qcow2_req *req)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);

  unlink_req (img, req);
  if (img->barrier_waiters > 0)
    pthread_cond_broadcast (&img->barrier_moved);
  return img->deferred_first_epoch <= barrier_epoch (img);
}

void
qcow2_req_end (struct qcow2_image *img, struct qcow2_req *req)
{
  struct qcow2_error ignored;

  if (!end_req (img, req))
    return;
  ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&img->lock);
  if (!img_failed (img) && qcow2_apply_deferred (img, &ignored) == -1)
    img_set_failed (img);
}

uint64_t
qcow2_next_epoch (struct qcow2_image *img)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);

  return ++img->epoch;
}

void
qcow2_req_wait_older (struct qcow2_image *img, struct qcow2_req *req)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);
  const uint64_t target = img->epoch;

  /* This request holds no entry from before: re-register it as if it
   * started now, at the end of the list (in start order), so that it
   * does not hold back the frees it waits for.
   */
  if (req->next)
    {
      unlink_req (img, req);
      req->prev = img->req_tail;
      req->next = NULL;
      img->req_tail->next = req;
      img->req_tail = req;
    }
  req->epoch = target;
  /* Moving this request may be what another waiter waits for. */
  if (img->barrier_waiters > 0)
    pthread_cond_broadcast (&img->barrier_moved);
  /* Wait for the requests that started before.  No deadlock: the
   * oldest of the waiters re-registered after its own commit, so
   * nothing waits for it, and requests that do not wait end.
   */
  img->barrier_waiters++;
  while (barrier_epoch (img) < target && !img_failed (img))
    pthread_cond_wait (&img->barrier_moved, &img->epoch_lock);
  img->barrier_waiters--;
}

/* Under 'lock': publish where the deferred list now starts (taking
 * epoch_lock).
 */
static void
set_first_epoch (struct qcow2_image *img)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);

  img->deferred_first_epoch
      = img->ndeferred ? img->deferred[0].epoch : UINT64_MAX;
}

int
qcow2_defer_frees (struct qcow2_image *img, uint64_t epoch,
                   const uint64_t *frees, size_t n, struct qcow2_error *err)
{
  size_t i;

  if (n == 0)
    return 0;
  if (img->ndeferred + n > img->deferred_cap)
    {
      size_t cap = img->deferred_cap ? img->deferred_cap : 64;
      struct qcow2_deferred *p;

      while (cap < img->ndeferred + n)
        cap *= 2;
      p = realloc (img->deferred, cap * sizeof *p);
      if (p == NULL)
        {
          qcow2_set_error (err, ENOMEM, "out of memory");
          return -1;
        }
      img->deferred = p;
      img->deferred_cap = cap;
    }
  for (i = 0; i < n; ++i)
    img->deferred[img->ndeferred++]
        = (struct qcow2_deferred){ frees[i], epoch };
  set_first_epoch (img);
  return 0;
}

/* Under 'lock': drop the reference of deferred free 'cl'; a cluster
 * reaching 0 is punched and reusable.
 */
static int
apply_one (struct qcow2_image *img, uint64_t cl, struct qcow2_error *err)
{
  uint64_t v;

  /* Its linear home was taken back by its guest cluster. */
  if (qcow2_alloc_skip_drop (img, cl))
    return 0;
  if (qcow2_rc_update (img, cl, -1, err) == -1
      || qcow2_rc_get (img, cl, &v, err) == -1)
    return -1;
  if (v != 0)
    return 0;
  /* A metadata cluster is never reusable, whatever its count. */
  if (qcow2_meta_check (img, cl << img->cluster_bits, img->cluster_size, "free",
                        err)
      == -1)
    return -1;
  /* Give the space back to the file system; a hint only. */
  if (img->io->zero)
    img->io->zero (img->io, cl << img->cluster_bits, img->cluster_size, true);
  qcow2_alloc_reuse (img, cl);
  return 0;
}

/* The epoch up to which held-back frees may be applied now. */
static uint64_t
barrier_limit (struct qcow2_image *img)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&img->epoch_lock);

  return barrier_epoch (img);
}

int
qcow2_apply_deferred (struct qcow2_image *img, struct qcow2_error *err)
{
  /* Requests registering from now on have an epoch at least the
   * current one, above every deferred free's: they cannot lower the
   * limit for what is applied here.
   */
  const uint64_t limit = barrier_limit (img);
  size_t i, n;

  for (n = 0; n < img->ndeferred && img->deferred[n].epoch <= limit; ++n)
    ;
  for (i = 0; i < n; ++i)
    if (apply_one (img, img->deferred[i].cluster, err) == -1)
      return -1;
  if (n == 0)
    return 0;
  memmove (img->deferred, img->deferred + n,
           (img->ndeferred - n) * sizeof *img->deferred);
  img->ndeferred -= n;
  set_first_epoch (img);
  return 0;
}

void
qcow2_inflight_free (struct qcow2_image *img)
{
  free (img->deferred);
  img->deferred = NULL;
  img->ndeferred = img->deferred_cap = 0;
}
