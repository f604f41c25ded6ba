/* nbdstack coalesce filter: the buffered bytes.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The buffered bytes live at their own export offset inside one
 * anonymous MAP_NORESERVE mapping as large as the export.  Any run of
 * adjacent buffered ranges is therefore contiguous in memory, so merged
 * ranges go down with a single pwrite straight from the buffer: the
 * payload is copied exactly once (client buffer -> mapping), no
 * per-request malloc, no gather copy.  Only touched pages become
 * resident; pages are returned once written (a few huge ones are
 * recycled instead, see recycle_into), and resident memory is bounded
 * by charging every interval its span in whole pages against
 * coalesce-size (back-pressure when full).
 *
 * The lock protects only the interval set and counters and is never
 * held across a call to the plugin: ranges being written are marked
 * IV_INFLIGHT, ranges being copied in IV_FILLING, ranges replaced by a
 * zero/trim/direct write in progress IV_ZOMBIE, and a later request
 * that overlaps any of them waits, so an older write never lands after
 * a newer one.
 *
 * The bottom of the stack (buffer.h): nothing here calls up into
 * write-back or the callbacks.  It reads the failure state writeback.c
 * keeps in co (a full buffer does not wait for a failing plugin).
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "buffer.h"
#include "cleanup.h"
#include "coalesce.h"

/* [a, b) left the buffer, or changed below it (see REMOVAL_LOG). */
static void
buffer_log_removal (uint64_t a, uint64_t b)
{
  co.removals[co.removal_gen % REMOVAL_LOG].start = a;
  co.removals[co.removal_gen % REMOVAL_LOG].end = b;
  co.removal_gen++;
}

/* True if something overlapping [a, b) left the buffer since gen. */
static bool
removed_since (uint64_t gen, uint64_t a, uint64_t b)
{
  uint64_t g;

  if (co.removal_gen - gen >= REMOVAL_LOG)
    return true;
  for (g = gen; g < co.removal_gen; ++g)
    {
      if (co.removals[g % REMOVAL_LOG].start < b
          && a < co.removals[g % REMOVAL_LOG].end)
        return true;
    }
  return false;
}

/* Recycled huge pages.
 *
 * Invariant: a page listed in recycled[] lies in the map and held no
 * buffered byte when it was listed; that is checked again, under the
 * lock, before the page is used.  Listed pages stay resident: resident
 * memory is at most coalesce-size, the kept range and RECYCLE_MAX huge
 * pages, at most half of coalesce-size.  An eighth of the buffer's
 * pages (4 at the default 64M) was too few: with nbdcopy's four
 * connections write-back empties pages in four regions at once, and
 * most new pages were still faulted fresh (clear_page 16% of the
 * server's samples, 0.6% with half).
 *
 * Buffered bytes sit at their own export offset, so a copied stream
 * would land every 2M on a page touched for the first time, which the
 * kernel faults in and zeroes: half of the server's CPU with nbdcopy's
 * four connections merging through the buffer.  Instead a page that
 * write-back emptied is moved (mremap with MREMAP_DONTUNMAP: its page
 * tables move, nothing is zeroed or copied) under the next write that
 * needs a fresh page.  Its old place is then mapped afresh (mmap
 * MAP_FIXED), and so are pages given back in huge-page mode, so that
 * they merge back into the map: the number of mappings stays bounded
 * by the pages in use, whatever the upload's size.
 */
#define RECYCLE_MAX 32

/* The list holds at most half of coalesce-size. */
static unsigned
recycle_room (void)
{
  return MIN (RECYCLE_MAX, co.buffer_limit / HUGE_PAGE / 2);
}

static uint64_t recycled[RECYCLE_MAX];
static unsigned n_recycled;
static bool recycle_off; /* a move or a remap failed: no more recycling */

/* The index of page p in recycled[], or n_recycled if it is not listed. */
static unsigned
listed_at (uint64_t p)
{
  unsigned i;

  for (i = 0; i < n_recycled && recycled[i] != p; ++i)
    ;
  return i;
}

/* Map [lo, hi) (huge pages) afresh, empty; 0 or -1. */
static int
remap_fresh (uint64_t lo, uint64_t hi)
{
  if (mmap (co.map + lo, hi - lo, PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0)
      == MAP_FAILED)
    return -1;
  return madvise (co.map + lo, hi - lo, MADV_HUGEPAGE);
}

/* Give the pages of [lo, hi) (page-aligned, unused) back: huge pages
 * onto the recycle list while it has room, the rest to the kernel.
 */
static void
give_back (uint64_t lo, uint64_t hi)
{
  if (co.set.page_size != HUGE_PAGE)
    {
      madvise (co.map + lo, hi - lo, MADV_DONTNEED);
      return;
    }
#ifdef MREMAP_DONTUNMAP
  for (; lo < hi && n_recycled < recycle_room () && !recycle_off;
       lo += HUGE_PAGE)
    {
      if (listed_at (lo) == n_recycled)
        recycled[n_recycled++] = lo;
    }
#endif
  if (lo < hi && (recycle_off || remap_fresh (lo, hi) == -1))
    madvise (co.map + lo, hi - lo, MADV_DONTNEED);
}

/* Forget the recycle list, giving its pages back to the kernel. */
static void
recycle_drop (void)
{
  while (n_recycled > 0)
    {
      uint64_t r = recycled[--n_recycled];
      if (ivset_count_overlaps (&co.set, r, r + HUGE_PAGE) == 0)
        madvise (co.map + r, HUGE_PAGE, MADV_DONTNEED);
    }
}

/* A write into [a, b) is about to be buffered (nothing carved yet):
 * each huge page of it that holds no buffered byte, and so is not
 * resident, gets a recycled page moved under it.
 */
static void
recycle_into (uint64_t a, uint64_t b)
{
#ifdef MREMAP_DONTUNMAP
  uint64_t p;
  unsigned i;

  if (co.set.page_size != HUGE_PAGE)
    return;
  for (p = ROUND_DOWN (a, HUGE_PAGE); p < b && n_recycled > 0 && !recycle_off;
       p += HUGE_PAGE)
    {
      if (ivset_count_overlaps (&co.set, p, p + HUGE_PAGE) > 0
          || (p < co.kept_hi && co.kept_lo < p + HUGE_PAGE))
        continue; /* resident already */
      i = listed_at (p);
      if (i < n_recycled)
        {
          /* Listed itself: resident; use it in place. */
          recycled[i] = recycled[--n_recycled];
          continue;
        }
      while (n_recycled > 0)
        {
          uint64_t r = recycled[--n_recycled];

          if (ivset_count_overlaps (&co.set, r, r + HUGE_PAGE) > 0)
            continue; /* buffered into again since it was listed */
          if (mremap (co.map + r, HUGE_PAGE, HUGE_PAGE,
                      MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                      co.map + p)
              == MAP_FAILED)
            {
              nbdkit_debug ("coalesce: not recycling pages: mremap: %m");
              recycle_off = true;
              recycle_drop ();
              return;
            }
          co.pages_recycled++;
          if (remap_fresh (r, r + HUGE_PAGE) == -1)
            {
              /* r stays mapped, empty (MREMAP_DONTUNMAP), as a mapping
               * of its own: harmless, but stop making more of them.
               */
              nbdkit_debug ("coalesce: not recycling pages: mmap: %m");
              recycle_off = true;
              recycle_drop ();
              return;
            }
          break;
        }
    }
#endif
}

/* Give back the pages of [lo, hi) (page-aligned) that no buffered
 * interval touches (give_back).
 */
static void
release_unused_pages (uint64_t lo, uint64_t hi)
{
  const struct ivset *set = &co.set;
  const uint64_t pg = set->page_size;
  size_t i = ivset_find (set, lo > pg ? lo - pg : 0);

  for (; lo < hi; ++i)
    {
      uint64_t busy_lo = hi, busy_hi = hi;
      if (i < set->len && ROUND_DOWN (set->v[i].start, pg) < hi)
        {
          busy_lo = MAX (ROUND_DOWN (set->v[i].start, pg), lo);
          busy_hi = MIN (ROUND_UP (set->v[i].end, pg), hi);
        }
      else
        i = set->len;
      if (lo < busy_lo)
        give_back (lo, busy_lo);
      lo = MAX (lo, busy_hi);
      if (i == set->len)
        break;
    }
}

/* Page policy (coalesce-hugepages unset): a huge page pays when the
 * buffer fills a good part of it before writing it back, as a copy
 * does; it costs a 2M fault and zeroing (about 400 us here) for each
 * write that lands alone in a 2M region, as random small writes do.
 * So the pieces written back decide: every POLICY_PIECES of them, an
 * average of at least HUGE_PAGE / 8 asks for huge pages, one below
 * HUGE_PAGE / 64 for small ones.  A copied stream of 256K writes
 * (nbdcopy's) merges into pieces of 128K-1M, mostly above 256K: with
 * the old 1M / 256K band it flipped to small pages and back several
 * times an upload and paid a 4K fault per 4K copied (5 switches, 0.4 s
 * of back-pressure, 1.6x the plugin's CPU on bench/make-used-sample);
 * random 512-byte writes leave pieces of about 512 bytes.  Switching
 * to huge pages happens at once (charging whole huge pages
 * over-estimates what small pages hold); switching back waits until
 * the buffer is empty, so that no huge page is ever charged as a small
 * one.
 */
#define POLICY_PIECES 16

static void
set_page_size (uint64_t pg)
{
  size_t i;

  if (co.kept_lo < co.kept_hi)
    release_unused_pages (co.kept_lo, co.kept_hi);
  co.kept_lo = co.kept_hi = 0;
  recycle_drop ();
  madvise (co.map, co.map_len - HUGE_PAGE,
           pg == HUGE_PAGE ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  co.set.page_size = pg;
  co.set.charged = 0;
  for (i = 0; i < co.set.len; ++i)
    co.set.charged += iv_charge (&co.set, co.set.v[i].start, co.set.v[i].end);
  co.page_switches++;
  nbdkit_debug ("coalesce: buffer pages now %" PRIu64 " bytes", pg);
}

static uint64_t want_page_size;

void
buffer_note_piece (uint64_t len)
{
  uint64_t avg;

  if (!co.adaptive_pages)
    return;
  co.pol_pieces++;
  co.pol_bytes += len;
  if (co.pol_pieces < POLICY_PIECES)
    return;
  avg = co.pol_bytes / co.pol_pieces;
  co.pol_pieces = co.pol_bytes = 0;
  if (avg >= HUGE_PAGE / 8)
    want_page_size = HUGE_PAGE;
  else if (avg < HUGE_PAGE / 64)
    want_page_size = co.small_page;
  if (want_page_size == HUGE_PAGE && co.set.page_size != HUGE_PAGE)
    set_page_size (HUGE_PAGE);
}

/* Drop interval idx and give back its pages, except the most recently
 * freed range, which stays resident until another range is freed:
 * a client writing small pieces at queue depth one with a flush after
 * each would otherwise fault in (and the kernel zero) a fresh page,
 * 2M with huge pages, for every write.  Readers are told through the
 * removal log.
 */
void
buffer_release_and_remove (size_t idx)
{
  const uint64_t pg = co.set.page_size;
  const uint64_t a = co.set.v[idx].start, b = co.set.v[idx].end;
  const uint64_t lo = ROUND_DOWN (a, pg), hi = ROUND_UP (b, pg);

  buffer_log_removal (a, b);
  ivset_remove (&co.set, idx);
  if (co.set.len == 0 && want_page_size && want_page_size != pg)
    {
      release_unused_pages (lo, hi);
      set_page_size (want_page_size);
      pthread_cond_broadcast (&co.changed);
      return;
    }
  if (lo < co.kept_lo || hi > co.kept_hi)
    {
      if (co.kept_lo < co.kept_hi)
        release_unused_pages (co.kept_lo, co.kept_hi);
      co.kept_lo = lo;
      co.kept_hi = hi;
    }
  pthread_cond_broadcast (&co.changed);
}

/* Wait for 'changed'.  Waking is counted, so that the hot path (a small
 * write becoming dirty) broadcasts only when somebody waits.
 */
void
buffer_wait_changed (void)
{
  co.busy_waiters++;
  pthread_cond_wait (&co.changed, &co.lock);
  co.busy_waiters--;
}

/* True if buffered data waiting to be written (or being copied in)
 * overlaps or touches [a, b): a write there merges with it.
 */
bool
buffer_touches (uint64_t a, uint64_t b)
{
  size_t i;

  for (i = ivset_find (&co.set, a > 0 ? a - 1 : 0);
       i < co.set.len && co.set.v[i].start <= b; ++i)
    if (co.set.v[i].state == IV_DIRTY || co.set.v[i].state == IV_FILLING)
      return true;
  return false;
}

static void
wait_not_busy (uint64_t a, uint64_t b)
{
  while (ivset_busy (&co.set, a, b))
    buffer_wait_changed ();
}

/* Find an interval by start offset after the lock was dropped
 * (intervals in states other than IV_DIRTY are never moved by others).
 */
size_t
buffer_find_exact (uint64_t start)
{
  size_t i = ivset_find (&co.set, start);

  assert (i < co.set.len && co.set.v[i].start == start);
  return i;
}

static void
mark_dirty (size_t idx)
{
  if (co.set.dirty_bytes == 0)
    {
      now (&co.dirty_since);
      pthread_cond_signal (&co.wake_bg);
    }
  ivset_set_state (&co.set, idx, IV_DIRTY);
  ivset_merge (&co.set, idx);
  if (co.set.charged >= co.high_water)
    pthread_cond_signal (&co.wake_bg);
  if (co.busy_waiters > 0)
    pthread_cond_broadcast (&co.changed);
}

/* Back-pressure: never grow past coalesce-size.  Returns (lock held)
 * once [a, b) fits in the buffer and nothing there is busy: both must
 * hold at once, and waiting for either drops the lock.  -1 with *err
 * when the plugin is failing and the buffer is full.
 */
static int
wait_for_room (uint64_t a, uint64_t b, int *err)
{
  for (;;)
    {
      /* (The page size may change whenever the lock is dropped.) */
      uint64_t charge = iv_charge (&co.set, a, b);

      if (co.set.charged + charge > co.buffer_limit)
        {
          struct timespec t0, t1;
          if (co.plugin_failing && co.mode == MODE_WRITEBACK)
            {
              /* The plugin is failing and the buffer is full: waiting could
               * be forever, so fail this write instead of hanging.
               */
              *err = co.last_err;
              return -1;
            }
          now (&t0);
          pthread_cond_signal (&co.wake_bg);
          /* Not counted in busy_waiters: room is made by write-back
           * completions, which always broadcast, and counting these
           * waiters would make every small write wake them all.
           */
          pthread_cond_wait (&co.changed, &co.lock);
          now (&t1);
          co.backpressure_ns += ns_between (&t0, &t1);
          continue;
        }
      if (ivset_busy (&co.set, a, b))
        {
          buffer_wait_changed ();
          continue;
        }
      return 0;
    }
}

/* Copy a write into the buffer and acknowledge it.  *fail_gen_at_ack
 * is the failure generation at that moment, read under the lock: a
 * writethrough writer compares it with later ones to learn whether a
 * group commit failed its data.
 */
int
buffer_write (const void *buf, uint32_t count, uint64_t offset,
              uint64_t *fail_gen_at_ack, int *err)
{
  const uint64_t a = offset, b = offset + count;
  uint64_t inherited;
  size_t idx;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  if (wait_for_room (a, b, err) == -1)
    return -1;
  if (ivset_reserve (&co.set, 2) == -1)
    {
      *err = ENOMEM;
      return -1;
    }
  recycle_into (a, b);
  /* The bytes this write replaces may be owed to a flush that is in
   * progress: the write takes over their sequence number.
   */
  inherited = ivset_oldest (&co.set, a, b);
  idx = ivset_carve (&co.set, a, b, NULL, NULL);
  ivset_insert (
      &co.set, idx,
      (struct iv){
          .start = a, .end = b, .oldest = inherited, .state = IV_FILLING });

  /* Copy the payload without the lock: the range is IV_FILLING, so no
   * one else writes it and its pages cannot be released.  The scope's
   * lock is dropped around the copy on purpose (a large copy must not
   * stall every other request), and taken again before the scope ends.
   */
  if (count >= 65536)
    {
      pthread_mutex_unlock (&co.lock);
      memcpy (co.map + a, buf, count);
      pthread_mutex_lock (&co.lock);
      idx = buffer_find_exact (a);
    }
  else
    memcpy (co.map + a, buf, count);

  co.writes_in++;
  co.bytes_in += count;
  ++co.seq;
  co.set.v[idx].oldest = MIN (inherited, co.seq);
  mark_dirty (idx);
  *fail_gen_at_ack = co.fail_gen;
  return 0;
}

/* For a zero, trim or direct write (direct.c): take the buffered data
 * in [a, b) out of write-back (it must never land after that request)
 * until buffer_settle.  Until then readers keep seeing it and flushes
 * wait for it (the pieces keep their sequence numbers).
 */
int
buffer_take_out (uint64_t a, uint64_t b, struct iv **pieces_out, size_t *n_out,
                 int *err)
{
  struct iv *pieces;
  size_t i, n, idx;

  *pieces_out = NULL;
  *n_out = 0;
  wait_not_busy (a, b);
  n = ivset_count_overlaps (&co.set, a, b);
  if (n == 0)
    return 0;
  pieces = malloc (n * sizeof *pieces);
  if (pieces == NULL || ivset_reserve (&co.set, n + 1) == -1)
    {
      *err = ENOMEM;
      free (pieces);
      return -1;
    }
  idx = ivset_carve (&co.set, a, b, pieces, &n);
  for (i = 0; i < n; ++i)
    {
      pieces[i].state = IV_ZOMBIE;
      ivset_insert (&co.set, idx + i, pieces[i]);
      co.zeroes_dropped_bytes += pieces[i].end - pieces[i].start;
    }
  *pieces_out = pieces;
  *n_out = n;
  return 0;
}

/* The request is done: if it succeeded the plugin holds the newest
 * data and the pieces go; if it failed, nothing changed below and the
 * pieces are dirty again.
 */
void
buffer_settle (uint64_t a, uint64_t b, const struct iv *pieces, size_t n,
               bool ok)
{
  for (size_t i = 0; i < n; ++i)
    {
      size_t idx = buffer_find_exact (pieces[i].start);
      assert (co.set.v[idx].state == IV_ZOMBIE);
      if (ok)
        buffer_release_and_remove (idx);
      else
        {
          ivset_set_state (&co.set, idx, IV_DIRTY);
          ivset_merge (&co.set, idx);
        }
    }
  if (ok && n == 0)
    {
      /* A read that looked below before this changed the plugin must not
       * mix old plugin data with nothing: log the range as changed.
       */
      buffer_log_removal (a, b);
    }
  pthread_cond_broadcast (&co.changed);
}

/* Read below, then lay the buffer over it. */
int
buffer_read (void *buf, uint32_t count, uint64_t offset, int *err)
{
  const uint64_t end = offset + count;
  nbdkit_next *below = co.below;
  int tries;

  for (tries = 0;; tries++)
    {
      uint64_t gen, covered = 0;
      size_t i, first;
      bool locked_read = tries >= 8;
      int r;

      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
      first = ivset_find (&co.set, offset);
      for (i = first; i < co.set.len && co.set.v[i].start < end; ++i)
        covered += MIN (co.set.v[i].end, end) - MAX (co.set.v[i].start, offset);
      if (covered < count)
        {
          gen = co.removal_gen;
          /* The scope's lock is dropped around the read below on purpose
           * (reads must not stall the buffer), except after repeated
           * races with write-back (only under a sustained stream of
           * completions over this very range): then the read below is
           * done with the lock held, which cannot race.
           */
          if (!locked_read)
            pthread_mutex_unlock (&co.lock);
          r = CALL_BELOW (below->pread (below, buf, count, offset, 0, err));
          if (!locked_read)
            pthread_mutex_lock (&co.lock);
          if (r == -1)
            return -1;
          if (!locked_read && removed_since (gen, offset, end))
            continue;
          first = ivset_find (&co.set, offset);
        }
      for (i = first; i < co.set.len && co.set.v[i].start < end; ++i)
        {
          uint64_t a = MAX (co.set.v[i].start, offset);
          uint64_t b = MIN (co.set.v[i].end, end);
          memcpy ((char *)buf + (a - offset), co.map + a, b - a);
        }
      return 0;
    }
}

/* Buffered ranges are data, whatever the plugin says about them now.
 * The buffer is looked at before asking below: data that leaves the
 * buffer meanwhile has been written, so one of the two sees it.
 */
int
buffer_extents (uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents *extents, int *err)
{
  const uint64_t end = offset + count;
  nbdkit_next *below = co.below;
  struct nbdkit_extents *from_below = NULL;
  struct iv *snap = NULL;
  size_t n = 0, i, j = 0;
  int r = -1;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
    n = ivset_count_overlaps (&co.set, offset, end);
    if (n > 0)
      {
        snap = malloc (n * sizeof *snap);
        if (snap == NULL)
          {
            *err = ENOMEM;
            return -1;
          }
        memcpy (snap, &co.set.v[ivset_find (&co.set, offset)],
                n * sizeof *snap);
      }
  }

  from_below = nbdkit_extents_new (offset, end);
  if (from_below == NULL)
    {
      *err = errno;
      goto out;
    }
  if (CALL_BELOW (below->extents (below, count, offset, flags, from_below, err))
      == -1)
    goto out;

  for (i = 0; i < nbdkit_extents_count (from_below); ++i)
    {
      struct nbdkit_extent e = nbdkit_get_extent (from_below, i);
      uint64_t a = MAX (e.offset, offset);
      uint64_t b = MIN (e.offset + e.length, end);

      while (a < b)
        {
          uint64_t stop;
          uint32_t type;

          while (j < n && snap[j].end <= a)
            j++;
          if (j < n && snap[j].start <= a)
            {
              stop = MIN (b, snap[j].end);
              type = 0;
            }
          else
            {
              stop = j < n ? MIN (b, snap[j].start) : b;
              type = e.type;
            }
          if (nbdkit_add_extent (extents, a, stop - a, type) == -1)
            {
              *err = errno;
              goto out;
            }
          a = stop;
        }
    }
  r = 0;
out:
  nbdkit_extents_free (from_below);
  free (snap);
  return r;
}
