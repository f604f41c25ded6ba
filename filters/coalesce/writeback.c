/* nbdstack coalesce filter: writing the buffer below.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Write-back is done by coalesce-threads writer threads and by flushing
 * clients, each taking the lowest dirty piece of at most
 * coalesce-max-write bytes.  Pieces are taken in ascending order, but
 * once taken they are written in parallel, so with more than one writer
 * the plugin may see neighbouring pieces swapped; coalesce-threads=1
 * writes strictly in ascending order.
 *
 * Flushes (and FUA requests, and writethrough writes) take a sequence
 * number S and return once no interval with oldest < S is left (see the
 * durability rule in coalesce.h): they write such intervals themselves,
 * wait for those in flight, being copied in or replaced by a request
 * still running, and write again what a failed replacement put back.
 *
 * Failures below:
 * - writeback mode keeps the data of a failed write-back and retries it
 *   (the writers after a back-off of a second, every flush at once);
 * - the next NBD flush on any connection returns the failure, once,
 *   even if the data has been written since; FUA requests fail only if
 *   their own write-back fails, and leave the report to the next flush;
 * - while the latest write below failed, a write that finds the buffer
 *   full fails with that error instead of waiting; the first write
 *   below that succeeds ends this, and the back-off with it;
 * - writethrough mode drops the data of a failed write-back: every
 *   write acknowledged into the buffer before that failure, and still
 *   waiting, gets the error.
 *
 * Below the callbacks and direct.c, above the buffer (writeback.h): it
 * calls buffer.c and intervals.c, never up.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "buffer.h"
#include "cleanup.h"
#include "coalesce.h"
#include "writeback.h"

#define RETRY_BACKOFF_MS 1000

void
writeback_note_success (void)
{
  co.plugin_failing = false;
}

void
writeback_note_failure (int err)
{
  co.plugin_failing = true;
  co.last_err = err ? err : EIO;
  now (&co.retry_after);
  add_ms (&co.retry_after, RETRY_BACKOFF_MS);
}

/* Write [a, b) from the buffer below, in chunks of max_write (called
 * without the lock).
 */
int
writeback_write_down (uint64_t a, uint64_t b, int *err)
{
  nbdkit_next *below = co.below;
  uint64_t chunks = 0;
  uint64_t off;

  for (off = a; off < b;)
    {
      uint32_t n = MIN (b - off, (uint64_t)co.max_write);
      if (CALL_BELOW (below->pwrite (below, co.map + off, n, off, 0, err))
          == -1)
        return -1;
      off += n;
      chunks++;
    }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
    co.writes_out += chunks;
    co.wgen++;
    co.bytes_out += b - a;
  }
  if (coalesce_debug_verbose)
    nbdkit_debug ("coalesce: wrote %" PRIu64 " bytes at %" PRIu64 " in %" PRIu64
                  " request(s)",
                  b - a, a, chunks);
  return 0;
}

/* One ascending pass: write back every dirty interval whose oldest
 * write has a sequence number below S.  Called with the lock held (in
 * the caller's scope lock); drops it around each write on purpose, as
 * the lock is never held across a call below.  Returns the number of
 * failures.
 */
static unsigned
writeback_before (uint64_t S, int *first_err)
{
  struct ivset *set = &co.set;
  uint64_t cursor = 0;
  unsigned failures = 0;

  for (;;)
    {
      size_t i;
      uint64_t a, b;
      int err = 0, r;

      for (i = ivset_find (set, cursor); i < set->len; ++i)
        if (set->v[i].state == IV_DIRTY && set->v[i].oldest < S)
          break;
      if (i == set->len)
        return failures;

      a = set->v[i].start;
      b = set->v[i].end;
      /* Take at most max_write bytes, so that the other writers can
       * take the following pieces of a long interval in parallel.
       */
      if (b - a > co.max_write && ivset_reserve (set, 1) == 0)
        {
          struct iv head = set->v[i], rest = set->v[i];
          head.end = rest.start = a + co.max_write;
          ivset_remove (set, i);
          ivset_insert (set, i, head);
          ivset_insert (set, i + 1, rest);
          b = head.end;
        }
      ivset_set_state (set, i, IV_INFLIGHT);
      pthread_mutex_unlock (&co.lock);
      r = writeback_write_down (a, b, &err);
      pthread_mutex_lock (&co.lock);
      i = buffer_find_exact (a);
      assert (set->v[i].end == b && set->v[i].state == IV_INFLIGHT);
      if (r == 0)
        {
          writeback_note_success ();
          buffer_note_piece (b - a);
          buffer_release_and_remove (i);
        }
      else
        {
          failures++;
          if (!*first_err)
            *first_err = err;
          co.fail_gen++;
          writeback_note_failure (err);
          if (co.mode == MODE_WRITETHROUGH)
            buffer_release_and_remove (i);
          else
            {
              nbdkit_error ("coalesce: writing %" PRIu64
                            " bytes at offset %" PRIu64
                            " failed: %s (data kept, will retry)",
                            b - a, a, strerror (err));
              co.err_unreported = co.last_err;
              ivset_set_state (set, i, IV_DIRTY);
              i = ivset_merge (set, i);
              b = MAX (b, set->v[i].end);
              pthread_cond_broadcast (&co.changed);
            }
        }
      cursor = b;
    }
}

/* Whether any interval owed to a flush with sequence S is left, and
 * whether one of them is dirty (one we can write ourselves).
 */
static void
owed_before (uint64_t S, bool *any, bool *dirty)
{
  size_t i;

  *any = *dirty = false;
  for (i = 0; i < co.set.len; ++i)
    if (co.set.v[i].oldest < S)
      {
        *any = true;
        if (co.set.v[i].state == IV_DIRTY)
          {
            *dirty = true;
            return;
          }
      }
}

/* The first half of writeback_sync (lock taken here): write back, or
 * wait for, everything owed to a new sequence number.  Returns 0 and
 * *wgen, the writes below it covers, or the errno of a failure after
 * since_gen.
 */
static int
write_back_owed (bool report, uint64_t since_gen, uint64_t *wgen)
{
  uint64_t S;
  int first_err = 0, e;
  bool helped = false;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  S = ++co.seq;
  if (since_gen == SINCE_NOW)
    since_gen = co.fail_gen;
  for (;;)
    {
      bool any, dirty;

      if (co.fail_gen != since_gen)
        {
          if (helped)
            co.urgent--;
          if (report)
            co.err_unreported = 0;
          e = first_err ? first_err : co.last_err;
          return e ? e : EIO;
        }
      owed_before (S, &any, &dirty);
      if (!any)
        break;
      if (dirty && co.mode == MODE_WRITETHROUGH && !co.wt_leader)
        {
          /* Group commit: one thread at a time writes back everything
           * that is dirty.  Writers arriving meanwhile wait, and the next
           * of them writes all of their data as one merged, ordered batch.
           */
          co.wt_leader = true;
          writeback_before (++co.seq, &first_err);
          co.wt_leader = false;
          pthread_cond_broadcast (&co.changed);
          continue;
        }
      if (dirty && co.mode == MODE_WRITEBACK)
        {
          /* The writer threads help, so that a flush of a full buffer
           * keeps several writes in flight (but not for a single piece,
           * e.g. one FUA write: waking them all would only cost context
           * switches).
           */
          if (!helped && co.threads > 1 && co.set.dirty_bytes > co.max_write)
            {
              helped = true;
              co.urgent++;
              pthread_cond_broadcast (&co.wake_bg);
            }
          writeback_before (S, &first_err);
          continue;
        }
      /* What is left is being written by others, copied in, or replaced
       * by a request still running: wait for it to settle.
       */
      buffer_wait_changed ();
    }
  if (helped)
    co.urgent--;
  *wgen = co.wgen;
  return 0;
}

/* The second half (lock taken here): count the flush below, which
 * covered the writes up to wgen, and take the unreported failure if
 * report.
 */
static int
flushed (bool do_flush, bool report, uint64_t wgen)
{
  int e;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  if (do_flush)
    {
      co.flushes_out++;
      if (co.can_flush == 1 && wgen > co.flushed_gen)
        co.flushed_gen = wgen;
    }
  e = report ? co.err_unreported : 0;
  if (report)
    co.err_unreported = 0;
  return e;
}

/* Make everything acknowledged so far reach the plugin and, if
 * do_flush, be flushed.  This is what NBD_CMD_FLUSH (report = true:
 * also return an unreported background failure), FUA and writethrough
 * writes wait for.  The request fails if a write-back fails after
 * since_gen (SINCE_NOW: from now on).  Returns 0 or -1 with *err set.
 */
int
writeback_sync (bool do_flush, bool report, uint64_t since_gen, int *err)
{
  uint64_t g = 0;
  int e;

  e = write_back_owed (report, since_gen, &g);
  if (e)
    {
      *err = e;
      return -1;
    }

  if (do_flush && co.can_flush == 1)
    {
      nbdkit_next *below = co.below;
      if (CALL_BELOW (below->flush (below, 0, err)) == -1)
        {
          if (report)
            {
              ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
              co.err_unreported = 0;
            }
          return -1;
        }
    }

  e = flushed (do_flush, report, g);
  if (e)
    {
      *err = e;
      return -1;
    }
  return 0;
}

/* A writer thread: writes back when the buffer passes the high-water
 * mark, when a flush asks for help, or when dirty data has waited
 * coalesce-delay ms; while the plugin fails, not before the back-off.
 */
static void *
bg_writer (void *arg)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  while (!co.stopping)
    {
      struct timespec t, deadline;
      bool due;

      now (&t);
      deadline = co.dirty_since;
      add_ms (&deadline, co.delay_ms);
      if (co.plugin_failing && ts_before (&deadline, &co.retry_after))
        deadline = co.retry_after;
      due = co.mode == MODE_WRITEBACK && co.set.dirty_bytes > 0
            && (!co.plugin_failing || !ts_before (&t, &co.retry_after))
            && (co.urgent > 0 || co.set.charged >= co.high_water
                || !ts_before (&t, &deadline));
      if (due)
        {
          int err = 0;
          uint64_t S = ++co.seq;
          /* Bring the other writers in: they take the next pieces. */
          pthread_cond_broadcast (&co.wake_bg);
          writeback_before (S, &err);
          /* Whatever is still dirty arrived during this pass (or failed). */
          if (co.set.dirty_bytes > 0)
            co.dirty_since = t;
          continue;
        }
      /* (Writethrough writers write their own data: nothing to time.) */
      if (co.mode == MODE_WRITEBACK && co.set.dirty_bytes > 0)
        pthread_cond_timedwait (&co.wake_bg, &co.lock, &deadline);
      else
        pthread_cond_wait (&co.wake_bg, &co.lock);
    }
  return NULL;
}

int
writeback_start (void)
{
  for (unsigned t = 0; t < co.threads; ++t)
    {
      int err = pthread_create (&co.bg_threads[t], NULL, bg_writer, NULL);
      if (err)
        {
          errno = err;
          nbdkit_error ("coalesce: pthread_create: %m");
          return -1;
        }
      co.bg_running++;
      /* Not nbdkit's name: the lifecycle filter tells nbdkit's own
       * connection threads, which keep it, from threads like these.
       */
      pthread_setname_np (co.bg_threads[t], "coalesce-wb");
    }
  return 0;
}

/* Stop the writers; a clean shutdown then writes and flushes
 * everything.
 */
void
writeback_stop (void)
{
  int err = 0;

  if (co.bg_running == 0)
    return;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
    co.stopping = true;
    pthread_cond_broadcast (&co.wake_bg);
  }
  while (co.bg_running > 0)
    pthread_join (co.bg_threads[--co.bg_running], NULL);

  if (writeback_sync (true, false, SINCE_NOW, &err) == -1 || co.set.len > 0)
    nbdkit_error ("coalesce: %" PRIu64 " buffered bytes could not be "
                  "written at shutdown: %s",
                  co.set.dirty_bytes, strerror (err ? err : EIO));
}
