/* nbdstack coalesce filter: a volatile write-back buffer that turns many
 * small or out-of-order writes into few large ascending ones.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Design (why it looks like this):
 *
 * - One buffer per server, shared by every connection, so that imageio's
 *   four interleaved connections or qemu-img's out-of-order requests
 *   merge with each other.  All I/O below goes through one "shared"
 *   context opened in .after_fork (nbdkit_next_context_open with
 *   shared=1): the background writer needs a context that outlives any
 *   connection, and using the same context for reads, flushes and
 *   write-back means a flush covers everything we wrote even when the
 *   plugin below is not multi-conn consistent.
 *
 * - The buffered bytes live at their own export offset inside one
 *   anonymous MAP_NORESERVE mapping as large as the export.  Any run of
 *   adjacent buffered ranges is therefore contiguous in memory, so
 *   merged ranges go down with a single pwrite straight from the buffer:
 *   the payload is copied exactly once (client buffer -> mapping), no
 *   per-request malloc, no gather copy.  Only touched pages become
 *   resident; pages are returned with MADV_DONTNEED once written, and
 *   resident memory is bounded by charging every interval its span in
 *   whole pages against coalesce-size (back-pressure when full).  The
 *   pages are transparent huge pages when the buffer is big enough
 *   (see coalesce_after_fork for why).
 *
 * - Write-back is done by coalesce-threads background threads (and by
 *   flushing clients), each taking the lowest dirty piece of at most
 *   coalesce-max-write bytes; a ticket keeps their calls to the plugin
 *   in ascending order while the writes themselves overlap.
 *
 * - The lock protects only the interval array and counters.  It is
 *   never held across a call to the plugin: ranges being written are
 *   marked IV_INFLIGHT instead, and a later write, zero or trim that
 *   overlaps them waits for them to finish, so an older write can never
 *   land after a newer one.
 *
 * - Ordering of flushes uses sequence numbers: each acknowledged write
 *   gets one; a flush takes the next one, S, writes back every interval
 *   whose oldest write is < S, waits for others' in-flight writes of
 *   such intervals, then flushes below.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "intervals.h"

#define HUGE_PAGE (2 * 1024 * 1024)

/* Debug flag: -D coalesce.verbose=1 logs every write-back. */
NBDKIT_DLL_PUBLIC int coalesce_debug_verbose = 0;

enum mode
{
  MODE_WRITEBACK,
  MODE_WRITETHROUGH
};

/* Parameters. */
static enum mode mode = MODE_WRITEBACK;
static uint64_t buffer_limit = 64 * 1024 * 1024;
static unsigned delay_ms = 50;
static uint64_t max_write_param = 4 * 1024 * 1024;
static int use_hugepages = -1; /* -1 auto, 0 off, 1 on */

/* Set in .get_ready when the plugin or a filter below is not PARALLEL:
 * then every call down, from any thread, holds below_lock, because
 * nbdkit's own serialization does not cover our background threads.
 */
static bool serialize_below;
static pthread_mutex_t below_lock = PTHREAD_MUTEX_INITIALIZER;

#define CALL_BELOW(call)                                                    \
  ({                                                                        \
    int r_;                                                                 \
    if (serialize_below)                                                    \
      pthread_mutex_lock (&below_lock);                                     \
    r_ = (call);                                                            \
    if (serialize_below)                                                    \
      pthread_mutex_unlock (&below_lock);                                   \
    r_;                                                                     \
  })

/* Set up in .after_fork. */
static nbdkit_next *bg; /* shared context used for all I/O below */
static uint64_t export_size;
static char *map;      /* export_size bytes, sparse */
static char *map_base; /* what mmap returned (map is aligned) */
static size_t map_len;
static uint32_t max_write; /* effective merge/chunk limit */
static int bg_can_write, bg_can_flush, bg_can_trim, bg_can_zero, bg_can_fua;
static int bg_can_fast_zero, bg_can_extents;
static uint64_t high_water; /* wake the writer above this charge */

/* Everything below is protected by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed; /* an interval completed or was removed */
static pthread_cond_t wake_bg; /* work for the background writer */
static struct ivset set;
static uint64_t seq;                /* write/flush sequence numbers */
static uint64_t fail_gen;           /* bumped on every failed write-back */
static int err_pending;             /* errno of an unresolved failure */
static bool err_reported;           /* err_pending already returned once */
static struct timespec dirty_since; /* oldest time dirty data may date from */
static struct timespec retry_after; /* background backoff after failure */
static bool stopping;
/* Background writers: several, so that write-back keeps a few requests
 * in flight (a remote or O_DIRECT plugin is slow at queue depth 1);
 * they take pieces in ascending order.
 */
#define BG_THREADS 8
#define BG_THREADS_MAX 64
static unsigned bg_running;
static unsigned urgent; /* flushes in progress: write back now */
static unsigned bg_threads_param = BG_THREADS;
static pthread_cond_t turn; /* issue_turn moved */
static uint64_t next_ticket, issue_turn;
static unsigned busy_waiters; /* threads waiting for a range to settle */
/* Writes completed below (wgen) and how many of them the last
 * successful flush below covered (flushed_gen); direct operations in
 * progress.  Together they tell when nothing is waiting to be flushed.
 */
static uint64_t wgen, flushed_gen;
static unsigned direct_inflight;
static bool wt_leader; /* writethrough: a group commit is running */
static pthread_t bg_threads[BG_THREADS_MAX];

/* Reads look below without the lock and then overlay the buffer; a
 * range that left the buffer in between would be missed, so removals
 * are logged here and such a read is retried.
 */
#define REMOVAL_LOG 256
static struct
{
  uint64_t start, end;
} removals[REMOVAL_LOG];
static uint64_t removal_gen;

/* Counters, logged at exit. */
static uint64_t writes_in, bytes_in, writes_out, bytes_out;
static uint64_t flushes_in, flushes_out, zeroes_dropped_bytes;
static uint64_t direct_writes;
static uint64_t backpressure_ns;

static void
now (struct timespec *ts)
{
  clock_gettime (CLOCK_MONOTONIC, ts);
}

static uint64_t
ns_between (const struct timespec *a, const struct timespec *b)
{
  return (b->tv_sec - a->tv_sec) * UINT64_C (1000000000) + b->tv_nsec
         - a->tv_nsec;
}

static void
add_ms (struct timespec *ts, unsigned ms)
{
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000;
  if (ts->tv_nsec >= 1000000000)
    {
      ts->tv_sec++;
      ts->tv_nsec -= 1000000000;
    }
}

static bool
ts_before (const struct timespec *a, const struct timespec *b)
{
  return a->tv_sec < b->tv_sec
         || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/*---------------------------------------------------------------------
 * Configuration.
 */

static int
coalesce_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                 const char *key, const char *value)
{
  if (strcmp (key, "coalesce-mode") == 0)
    {
      if (strcmp (value, "writeback") == 0)
        mode = MODE_WRITEBACK;
      else if (strcmp (value, "writethrough") == 0)
        mode = MODE_WRITETHROUGH;
      else
        {
          nbdkit_error ("coalesce-mode=%s: expected writeback or writethrough",
                        value);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "coalesce-size") == 0)
    {
      int64_t r = nbdkit_parse_size (value);
      if (r == -1)
        return -1;
      if (r < 1024 * 1024)
        {
          nbdkit_error ("coalesce-size=%s: must be at least 1M", value);
          return -1;
        }
      buffer_limit = r;
      return 0;
    }
  if (strcmp (key, "coalesce-delay") == 0)
    {
      if (nbdkit_parse_unsigned ("coalesce-delay", value, &delay_ms) == -1)
        return -1;
      if (delay_ms > 3600 * 1000)
        {
          nbdkit_error ("coalesce-delay=%s: at most 3600000 (one hour)", value);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "coalesce-hugepages") == 0)
    {
      int r = nbdkit_parse_bool (value);
      if (r == -1)
        return -1;
      use_hugepages = r;
      return 0;
    }
  if (strcmp (key, "coalesce-threads") == 0)
    {
      if (nbdkit_parse_unsigned ("coalesce-threads", value, &bg_threads_param)
          == -1)
        return -1;
      if (bg_threads_param < 1 || bg_threads_param > BG_THREADS_MAX)
        {
          nbdkit_error ("coalesce-threads=%s: must be between 1 and %d", value,
                        BG_THREADS_MAX);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "coalesce-max-write") == 0)
    {
      int64_t r = nbdkit_parse_size (value);
      if (r == -1)
        return -1;
      if (r < 4096 || r > 32 * 1024 * 1024)
        {
          nbdkit_error ("coalesce-max-write=%s: must be between 4K and 32M",
                        value);
          return -1;
        }
      max_write_param = r;
      return 0;
    }
  return next (nxdata, key, value);
}

#define coalesce_config_help                                                   \
  "coalesce-mode=writeback|writethrough  Buffering mode (default "             \
  "writeback).\n"                                                              \
  "coalesce-size=SIZE           Buffer memory limit (default 64M).\n"          \
  "coalesce-delay=MS            Write back data older than this (default "     \
  "50).\n"                                                                     \
  "coalesce-max-write=SIZE      Largest merged write (default 4M).\n"          \
  "coalesce-threads=N           Background writers (default 8).\n"             \
  "coalesce-hugepages=BOOL      Use 2M pages (default: if size >= 32M)."

/* True if transparent huge pages can be had with MADV_HUGEPAGE. */
static bool
thp_available (void)
{
  char buf[128] = "";
  FILE *f = fopen ("/sys/kernel/mm/transparent_hugepage/enabled", "r");

  if (f == NULL)
    return false;
  if (fgets (buf, sizeof buf, f) == NULL)
    buf[0] = 0;
  fclose (f);
  return strstr (buf, "[always]") || strstr (buf, "[madvise]");
}

static int
coalesce_get_ready (int thread_model)
{
  /* Our threads call the plugin through the shared context without the
   * server's per-connection request locks.  Over a stack that allows
   * parallel requests that is fine; over a serialized one we serialize
   * our own calls down instead (see CALL_BELOW), so the filter still
   * works over any plugin, at the speed that plugin allows.
   */
  serialize_below = thread_model != NBDKIT_THREAD_MODEL_PARALLEL;
  if (serialize_below)
    nbdkit_debug ("coalesce: the stack below is not parallel: "
                  "serializing every request sent to it");
  return 0;
}

/*---------------------------------------------------------------------
 * Buffer helpers (lock held).
 */

/* Give back the pages of interval idx that no neighbour shares, then
 * drop the interval.  Readers are told through the removal log.
 */
static void
release_and_remove (size_t idx)
{
  const uint64_t pg = set.page_size;
  uint64_t a = set.v[idx].start, b = set.v[idx].end;
  uint64_t lo = ROUND_DOWN (a, pg), hi = ROUND_UP (b, pg);

  if (idx > 0 && set.v[idx - 1].end > lo)
    lo = ROUND_UP (a, pg);
  if (idx + 1 < set.len && set.v[idx + 1].start < hi)
    hi = ROUND_DOWN (b, pg);
  if (lo < hi)
    madvise (map + lo, hi - lo, MADV_DONTNEED);

  removals[removal_gen % REMOVAL_LOG].start = a;
  removals[removal_gen % REMOVAL_LOG].end = b;
  removal_gen++;
  ivset_remove (&set, idx);
  pthread_cond_broadcast (&changed);
}

/* True if something overlapping [a, b) left the buffer since gen. */
static bool
removed_since (uint64_t gen, uint64_t a, uint64_t b)
{
  uint64_t g;

  if (removal_gen - gen >= REMOVAL_LOG)
    return true;
  for (g = gen; g < removal_gen; ++g)
    {
      if (removals[g % REMOVAL_LOG].start < b
          && a < removals[g % REMOVAL_LOG].end)
        return true;
    }
  return false;
}

static void
wait_not_busy (uint64_t a, uint64_t b)
{
  while (ivset_busy (&set, a, b))
    {
      busy_waiters++;
      pthread_cond_wait (&changed, &lock);
      busy_waiters--;
    }
}

/* Find interval by start offset after the lock was dropped (intervals
 * in states other than DIRTY are never moved by others).
 */
static size_t
find_exact (uint64_t start)
{
  size_t i = ivset_find (&set, start);

  assert (i < set.len && set.v[i].start == start);
  return i;
}

static void
mark_dirty (size_t idx)
{
  if (set.dirty_bytes == 0)
    {
      now (&dirty_since);
      pthread_cond_signal (&wake_bg);
    }
  ivset_set_state (&set, idx, IV_DIRTY);
  ivset_merge (&set, idx);
  if (set.charged >= high_water)
    pthread_cond_signal (&wake_bg);
  /* Someone may wait for this range to stop being IV_FILLING.  Only
   * broadcast then: this is the hot path of every small write.
   */
  if (busy_waiters > 0)
    pthread_cond_broadcast (&changed);
}

/*---------------------------------------------------------------------
 * Write-back.
 */

/* Write [a, b) from the buffer below, in chunks of max_write. */
static int
write_down (uint64_t a, uint64_t b, int *err)
{
  uint64_t chunks = 0;
  uint64_t off;

  for (off = a; off < b;)
    {
      uint32_t n = MIN (b - off, (uint64_t)max_write);
      if (CALL_BELOW (bg->pwrite (bg, map + off, n, off, 0, err)) == -1)
        return -1;
      off += n;
      chunks++;
    }
  pthread_mutex_lock (&lock);
  writes_out += chunks;
  wgen++;
  bytes_out += b - a;
  pthread_mutex_unlock (&lock);
  if (coalesce_debug_verbose)
    nbdkit_debug ("coalesce: wrote %" PRIu64 " bytes at %" PRIu64 " in %" PRIu64
                  " request(s)",
                  b - a, a, chunks);
  return 0;
}

/* Write back, in ascending order, every dirty interval whose oldest
 * write has a sequence number below S.  Called with the lock held;
 * drops it around each write.  Returns the number of failures.
 */
static unsigned
writeback_before (uint64_t S, int *first_err)
{
  uint64_t cursor = 0;
  unsigned failures = 0;

  for (;;)
    {
      size_t i;
      uint64_t a, b;
      int err = 0, r;

      for (i = ivset_find (&set, cursor); i < set.len; ++i)
        if (set.v[i].state == IV_DIRTY && set.v[i].oldest < S)
          break;
      if (i == set.len)
        return failures;

      a = set.v[i].start;
      b = set.v[i].end;
      /* Take at most max_write bytes, so that the other writers can
       * take the following pieces of a long interval in parallel (still
       * issued in ascending order).
       */
      if (b - a > max_write && ivset_reserve (&set, 1) == 0)
        {
          struct iv head = set.v[i], rest = set.v[i];
          head.end = rest.start = a + max_write;
          ivset_remove (&set, i);
          ivset_insert (&set, i, head);
          ivset_insert (&set, i + 1, rest);
          b = head.end;
        }
      ivset_set_state (&set, i, IV_INFLIGHT);
      /* Several writers: pieces were taken in ascending order, so also
       * call the plugin in that order (a qcow2 target allocates clusters
       * in arrival order).  Only the call order is kept; the writes
       * themselves run in parallel.
       */
      {
        uint64_t ticket = next_ticket++;
        while (issue_turn != ticket)
          pthread_cond_wait (&turn, &lock);
        issue_turn++;
        pthread_cond_broadcast (&turn);
      }
      pthread_mutex_unlock (&lock);
      r = write_down (a, b, &err);
      pthread_mutex_lock (&lock);
      i = find_exact (a);
      assert (set.v[i].end == b && set.v[i].state == IV_INFLIGHT);
      if (r == 0)
        release_and_remove (i);
      else
        {
          failures++;
          if (!*first_err)
            *first_err = err;
          fail_gen++;
          if (mode == MODE_WRITETHROUGH)
            {
              /* Every writer waiting for this data gets the error back, so
               * nothing acknowledged is lost by dropping it.
               */
              release_and_remove (i);
            }
          else
            {
              /* Keep the data for a retry; the next flush reports it. */
              nbdkit_error ("coalesce: writing %" PRIu64
                            " bytes at offset %" PRIu64
                            " failed: %s (data kept, will retry)",
                            b - a, a, strerror (err));
              err_pending = err;
              err_reported = false;
              ivset_set_state (&set, i, IV_DIRTY);
              i = ivset_merge (&set, i);
              b = MAX (b, set.v[i].end);
              now (&retry_after);
              add_ms (&retry_after, delay_ms > 1000 ? delay_ms : 1000);
              pthread_cond_broadcast (&changed);
            }
        }
      cursor = b;
    }
}

/* True while an interval holding writes older than S is in flight. */
static bool
inflight_before (uint64_t S)
{
  size_t i;

  for (i = 0; i < set.len; ++i)
    if (set.v[i].state == IV_INFLIGHT && set.v[i].oldest < S)
      return true;
  return false;
}

/* True while an interval holding writes older than S is not written. */
static bool
pending_before (uint64_t S)
{
  size_t i;

  for (i = 0; i < set.len; ++i)
    if ((set.v[i].state == IV_INFLIGHT || set.v[i].state == IV_DIRTY)
        && set.v[i].oldest < S)
      return true;
  return false;
}

/* Make everything acknowledged so far reach the plugin and, if
 * do_flush, be flushed.  Returns 0 or -1 with *err set.  This is what
 * NBD_CMD_FLUSH, FUA and writethrough writes wait for.
 */
static int
sync_all (bool do_flush, int *err)
{
  uint64_t S, F0;
  int e0, first_err = 0;
  bool rep0;
  unsigned failures;

  pthread_mutex_lock (&lock);
  S = ++seq;
  F0 = fail_gen;
  e0 = err_pending;
  rep0 = err_reported;
  if (mode == MODE_WRITETHROUGH)
    {
      /* Group commit: one thread at a time writes back everything that
       * is dirty.  Writers arriving meanwhile wait, and the next of
       * them writes all of their data as one merged, ordered batch.
       */
      failures = 0;
      while (wt_leader && fail_gen == F0 && pending_before (S))
        pthread_cond_wait (&changed, &lock);
      if (fail_gen == F0 && pending_before (S))
        {
          wt_leader = true;
          failures = writeback_before (++seq, &first_err);
          wt_leader = false;
          pthread_cond_broadcast (&changed);
        }
    }
  else
    {
      /* The background writers help, so that a flush of a full buffer
       * keeps several writes in flight.
       */
      /* (Not for a single piece, e.g. one FUA write: waking them all
       * would only cost context switches.)
       */
      bool helped = bg_threads_param > 1 && set.dirty_bytes > max_write;
      if (helped)
        {
          urgent++;
          pthread_cond_broadcast (&wake_bg);
        }
      failures = writeback_before (S, &first_err);
      if (helped)
        urgent--;
    }
  /* Others may be writing older data right now: wait for them. */
  while (failures == 0 && fail_gen == F0 && inflight_before (S))
    pthread_cond_wait (&changed, &lock);
  if (failures || fail_gen != F0)
    {
      if (mode == MODE_WRITEBACK)
        err_reported = true;
      pthread_mutex_unlock (&lock);
      *err = first_err ? first_err : (err_pending ? err_pending : EIO);
      return -1;
    }
  uint64_t g = wgen;
  pthread_mutex_unlock (&lock);

  if (do_flush && bg_can_flush == 1)
    {
      if (CALL_BELOW (bg->flush (bg, 0, err)) == -1)
        {
          pthread_mutex_lock (&lock);
          if (mode == MODE_WRITEBACK)
            {
              err_pending = *err;
              err_reported = true;
            }
          pthread_mutex_unlock (&lock);
          return -1;
        }
    }

  pthread_mutex_lock (&lock);
  if (do_flush)
    {
      flushes_out++;
      if (bg_can_flush == 1 && g > flushed_gen)
        flushed_gen = g;
    }
  /* This flush succeeded completely: everything acknowledged before
   * it is on stable storage, so an older failure is resolved.  If no
   * flush has reported that failure yet, report it now, once.
   */
  if (do_flush && fail_gen == F0 && err_pending == e0)
    {
      err_pending = 0;
      if (e0 && !rep0)
        {
          err_reported = true;
          pthread_mutex_unlock (&lock);
          *err = e0;
          return -1;
        }
    }
  pthread_mutex_unlock (&lock);
  return 0;
}

/* The background writer: writes back when the buffer passes the
 * high-water mark or when dirty data has waited coalesce-delay ms.
 */
static void *
bg_writer (void *arg)
{
  pthread_mutex_lock (&lock);
  while (!stopping)
    {
      struct timespec t, deadline;
      bool due;

      now (&t);
      deadline = dirty_since;
      add_ms (&deadline, delay_ms);
      if (ts_before (&deadline, &retry_after))
        deadline = retry_after;
      due = mode == MODE_WRITEBACK && set.dirty_bytes > 0
            && ts_before (&retry_after, &t)
            && (urgent > 0 || set.charged >= high_water
                || !ts_before (&t, &deadline));
      if (due)
        {
          int err = 0;
          uint64_t S = ++seq;
          /* Bring the other writers in: they take the next pieces. */
          pthread_cond_broadcast (&wake_bg);
          writeback_before (S, &err);
          /* Whatever is still dirty arrived during this pass (or failed). */
          if (set.dirty_bytes > 0)
            dirty_since = t;
          continue;
        }
      /* (Writethrough writers write their own data: nothing to time.) */
      if (mode == MODE_WRITEBACK && set.dirty_bytes > 0)
        pthread_cond_timedwait (&wake_bg, &lock, &deadline);
      else
        pthread_cond_wait (&wake_bg, &lock);
    }
  pthread_mutex_unlock (&lock);
  return NULL;
}

/*---------------------------------------------------------------------
 * Lifecycle.
 */

static int
coalesce_after_fork (nbdkit_backend *backend)
{
  pthread_condattr_t attr;
  uint32_t minimum = 0, preferred = 0, maximum = 0;
  int64_t size;
  int err;

  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&wake_bg, &attr);
  pthread_cond_init (&changed, &attr);
  pthread_cond_init (&turn, &attr);
  pthread_condattr_destroy (&attr);

  set.page_size = sysconf (_SC_PAGESIZE);

  bg = nbdkit_next_context_open (backend, 0, "", 1);
  if (bg == NULL)
    {
      nbdkit_error ("coalesce: cannot open the plugin for background writes");
      return -1;
    }
  if (bg->prepare (bg) == -1)
    return -1;
  size = bg->get_size (bg);
  if (size == -1)
    return -1;
  export_size = size;
  bg_can_write = bg->can_write (bg);
  bg_can_flush = bg->can_flush (bg);
  bg_can_trim = bg->can_trim (bg);
  bg_can_zero = bg->can_zero (bg);
  bg_can_fast_zero = bg->can_fast_zero (bg);
  bg_can_extents = bg->can_extents (bg);
  bg_can_fua = bg->can_fua (bg);
  if (bg_can_write == -1 || bg_can_flush == -1 || bg_can_trim == -1
      || bg_can_zero == -1 || bg_can_fast_zero == -1 || bg_can_extents == -1)
    return -1;
  if (bg->block_size (bg, &minimum, &preferred, &maximum) == -1)
    return -1;

  max_write = max_write_param;
  if (maximum > 0 && maximum < max_write)
    max_write = ROUND_DOWN (maximum, minimum ? minimum : 1);
  high_water = buffer_limit / 2;

  if (export_size > 0 && bg_can_write == 1)
    {
      /* Every byte of an upload lands on a page never touched before
       * (the buffer is indexed by offset), so with 4K pages the kernel
       * takes one fault per 4K: measured here at about 3 s of CPU per
       * GiB, more than everything else the filter does.  Transparent
       * huge pages cut that 512-fold.  The price is that memory is then
       * accounted in 2M units (a 512-byte write holds 2M of the
       * buffer), so huge pages are used only when the buffer has room
       * for at least 16 of them.
       */
      bool huge = use_hugepages != 0 && buffer_limit >= 16 * HUGE_PAGE
                  && thp_available ();
      if (use_hugepages == 1 && !huge)
        nbdkit_debug ("coalesce: not using huge pages (unavailable or "
                      "coalesce-size below 32M)");
      if (huge)
        set.page_size = HUGE_PAGE;
      map_len = ROUND_UP (export_size, set.page_size) + set.page_size;
      map_base = mmap (NULL, map_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (map_base == MAP_FAILED)
        {
          map_base = NULL;
          nbdkit_error ("coalesce: cannot reserve %" PRIu64 " bytes of address "
                        "space for the buffer: %m",
                        export_size);
          return -1;
        }
      /* Align so that accounting units are real (huge) pages. */
      map = (char *)ROUND_UP ((uintptr_t)map_base, set.page_size);
      madvise (map, map_len - set.page_size,
               huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);

      for (unsigned t = 0; t < bg_threads_param; ++t)
        {
          err = pthread_create (&bg_threads[t], NULL, bg_writer, NULL);
          if (err)
            {
              errno = err;
              nbdkit_error ("coalesce: pthread_create: %m");
              return -1;
            }
          bg_running++;
        }
    }
  nbdkit_debug ("coalesce: mode=%s size=%" PRIu64 " delay=%ums "
                "max-write=%" PRIu32 " export-size=%" PRIu64 " page=%" PRIu64,
                mode == MODE_WRITEBACK ? "writeback" : "writethrough",
                buffer_limit, delay_ms, max_write, export_size, set.page_size);
  return 0;
}

static void
coalesce_cleanup (nbdkit_backend *backend)
{
  int err = 0;

  if (bg_running)
    {
      pthread_mutex_lock (&lock);
      stopping = true;
      pthread_cond_broadcast (&wake_bg);
      pthread_mutex_unlock (&lock);
      while (bg_running > 0)
        pthread_join (bg_threads[--bg_running], NULL);

      /* A clean shutdown writes everything. */
      if (sync_all (true, &err) == -1 || set.len > 0)
        nbdkit_error ("coalesce: %" PRIu64 " buffered bytes could not be "
                      "written at shutdown: %s",
                      set.dirty_bytes, strerror (err ? err : EIO));
    }

  nbdkit_debug (
      "coalesce: writes in %" PRIu64 " (%" PRIu64 " bytes), "
      "writes out %" PRIu64 " (%" PRIu64 " bytes), "
      "average merged write %" PRIu64 " bytes, "
      "direct writes %" PRIu64 ", flushes in %" PRIu64 " out %" PRIu64
      ", zeroed while buffered %" PRIu64 " bytes, back-pressure wait %.3f s",
      writes_in, bytes_in, writes_out, bytes_out,
      writes_out ? bytes_out / writes_out : 0, direct_writes, flushes_in,
      flushes_out, zeroes_dropped_bytes, backpressure_ns / 1e9);

  if (bg)
    {
      bg->finalize (bg);
      nbdkit_next_context_close (bg);
      bg = NULL;
    }
  if (map)
    {
      munmap (map_base, map_len);
      map = NULL;
    }
  free (set.v);
  set.v = NULL;
  set.len = set.cap = 0;
}

/*---------------------------------------------------------------------
 * Feature negotiation.
 */

static int
coalesce_can_write (nbdkit_next *next, void *handle)
{
  int r = next->can_write (next);

  if (r == 1 && (bg_can_write != 1 || map == NULL))
    return 0;
  return r;
}

/* Flush is always advertised: it at least writes the buffer back. */
static int
coalesce_can_flush (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
coalesce_can_fua (nbdkit_next *next, void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

/* One buffer and one context below serve every connection, so a flush
 * on any connection covers writes made on all of them.
 */
static int
coalesce_can_multi_conn (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
coalesce_can_trim (nbdkit_next *next, void *handle)
{
  return bg_can_trim;
}

static int
coalesce_can_zero (nbdkit_next *next, void *handle)
{
  return bg_can_zero > NBDKIT_ZERO_NONE ? NBDKIT_ZERO_NATIVE
                                        : NBDKIT_ZERO_EMULATE;
}

static int
coalesce_can_fast_zero (nbdkit_next *next, void *handle)
{
  return bg_can_zero > NBDKIT_ZERO_NONE ? bg_can_fast_zero : 0;
}

static int
coalesce_can_extents (nbdkit_next *next, void *handle)
{
  return bg_can_extents;
}

/*---------------------------------------------------------------------
 * Data path.
 */

static int
coalesce_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  const uint64_t end = offset + count;
  int tries;

  if (map == NULL)
    return CALL_BELOW (bg->pread (bg, buf, count, offset, 0, err));

  for (tries = 0;; tries++)
    {
      uint64_t gen, covered = 0;
      size_t i, first;
      bool locked_read = tries >= 8;

      pthread_mutex_lock (&lock);
      first = ivset_find (&set, offset);
      for (i = first; i < set.len && set.v[i].start < end; ++i)
        covered += MIN (set.v[i].end, end) - MAX (set.v[i].start, offset);
      if (covered < count)
        {
          gen = removal_gen;
          /* After repeated races with write-back (only under a sustained
           * stream of completions over this very range) read below with the
           * lock held, which cannot race.
           */
          if (!locked_read)
            pthread_mutex_unlock (&lock);
          if (CALL_BELOW (bg->pread (bg, buf, count, offset, 0, err)) == -1)
            {
              if (locked_read)
                pthread_mutex_unlock (&lock);
              return -1;
            }
          if (!locked_read)
            {
              pthread_mutex_lock (&lock);
              if (removed_since (gen, offset, end))
                {
                  pthread_mutex_unlock (&lock);
                  continue;
                }
            }
          first = ivset_find (&set, offset);
        }
      /* Overlay the newest data. */
      for (i = first; i < set.len && set.v[i].start < end; ++i)
        {
          uint64_t a = MAX (set.v[i].start, offset);
          uint64_t b = MIN (set.v[i].end, end);
          memcpy ((char *)buf + (a - offset), map + a, b - a);
        }
      pthread_mutex_unlock (&lock);
      return 0;
    }
}

/* Zero, trim, or a write too big to buffer: take the buffered data in
 * [a, b) out of write-back (it must never land after this request),
 * call fn below, then drop it.  Readers keep seeing it until then.
 */
enum direct_op
{
  OP_ZERO,
  OP_TRIM,
  OP_WRITE
};

static int
direct (enum direct_op op, const void *buf, uint32_t count, uint64_t offset,
        uint32_t flags, int *err)
{
  const uint64_t a = offset, b = offset + count;
  size_t i, n, idx;
  struct iv *pieces = NULL;
  int r;

  pthread_mutex_lock (&lock);
  wait_not_busy (a, b);
  n = ivset_count_overlaps (&set, a, b);
  if (n > 0)
    {
      pieces = malloc (n * sizeof *pieces);
      if (pieces == NULL || ivset_reserve (&set, n + 1) == -1)
        {
          *err = ENOMEM;
          pthread_mutex_unlock (&lock);
          free (pieces);
          return -1;
        }
      idx = ivset_carve (&set, a, b, pieces, &n);
      for (i = 0; i < n; ++i)
        {
          pieces[i].state = IV_ZOMBIE;
          ivset_insert (&set, idx + i, pieces[i]);
          zeroes_dropped_bytes += pieces[i].end - pieces[i].start;
        }
    }
  if (op == OP_WRITE)
    {
      writes_in++;
      bytes_in += count;
      direct_writes++;
    }
  direct_inflight++;
  pthread_mutex_unlock (&lock);

  switch (op)
    {
    case OP_ZERO:
      r = CALL_BELOW (bg->zero (bg, count, offset, flags, err));
      break;
    case OP_TRIM:
      r = CALL_BELOW (bg->trim (bg, count, offset, flags, err));
      break;
    default:
      r = 0;
      for (uint64_t off = a; off < b && r == 0;)
        {
          uint32_t c = MIN (b - off, (uint64_t)max_write);
          r = CALL_BELOW (bg->pwrite (bg, (const char *)buf + (off - a), c,
                                      off, flags & NBDKIT_FLAG_FUA, err));
          off += c;
        }
      break;
    }

  pthread_mutex_lock (&lock);
  direct_inflight--;
  if (r == 0 && !(flags & NBDKIT_FLAG_FUA))
    wgen++;
  for (i = 0; i < n; ++i)
    {
      idx = find_exact (pieces[i].start);
      assert (set.v[idx].state == IV_ZOMBIE);
      if (r == 0)
        release_and_remove (idx);
      else
        {
          /* Failed (e.g. a FAST_ZERO refused): nothing changed below, so the
           * buffered data is still the newest and stays.
           */
          ivset_set_state (&set, idx, IV_DIRTY);
          ivset_merge (&set, idx);
        }
    }
  if (r == 0 && n == 0)
    {
      /* A read that looked below before this changed the plugin must not
       * mix old plugin data with nothing: log the range as changed.
       */
      removals[removal_gen % REMOVAL_LOG].start = a;
      removals[removal_gen % REMOVAL_LOG].end = b;
      removal_gen++;
    }
  pthread_cond_broadcast (&changed);
  pthread_mutex_unlock (&lock);
  free (pieces);
  return r;
}

static int
coalesce_pwrite (nbdkit_next *next, void *handle, const void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  const uint64_t a = offset, b = offset + count;
  uint64_t charge;
  size_t idx;

  if (map == NULL)
    {
      *err = EROFS;
      return -1;
    }

  /* FUA with nothing buffered and nothing written since the last flush
   * below (typical of a client that writes with FUA every time): there
   * is nothing older to flush, so pass the write down with the plugin's
   * own FUA, which can be much cheaper than a write and a full flush.
   */
  if ((flags & NBDKIT_FLAG_FUA) && mode == MODE_WRITEBACK
      && bg_can_fua == NBDKIT_FUA_NATIVE)
    {
      bool clean;
      pthread_mutex_lock (&lock);
      clean = set.len == 0 && direct_inflight == 0 && wgen == flushed_gen
              && err_pending == 0;
      pthread_mutex_unlock (&lock);
      if (clean)
        return direct (OP_WRITE, buf, count, offset, NBDKIT_FLAG_FUA, err);
    }

  /* A write that is already as large as a merged write would be gains
   * nothing from the buffer but would pay for a copy and page faults,
   * and one that could not fit next to anything else must not wait
   * for the whole buffer: both go straight down (still ordered after
   * older buffered data of the same range, see direct()).
   */
  charge = iv_charge (&set, a, b);
  if (count >= max_write || charge > buffer_limit / 2)
    {
      if (direct (OP_WRITE, buf, count, offset, 0, err) == -1)
        return -1;
      goto done;
    }

  pthread_mutex_lock (&lock);
  /* Back-pressure: never grow past coalesce-size.  Both conditions
   * must hold at once, and waiting for either drops the lock.
   */
  for (;;)
    {
      if (set.charged + charge > buffer_limit)
        {
          struct timespec t0, t1;
          if (err_pending && mode == MODE_WRITEBACK)
            {
              /* The plugin is failing and the buffer is full: waiting could
               * be forever, so fail this write instead of hanging.
               */
              *err = err_pending;
              pthread_mutex_unlock (&lock);
              return -1;
            }
          now (&t0);
          pthread_cond_signal (&wake_bg);
          pthread_cond_wait (&changed, &lock);
          now (&t1);
          backpressure_ns += ns_between (&t0, &t1);
          continue;
        }
      if (ivset_busy (&set, a, b))
        {
          busy_waiters++;
          pthread_cond_wait (&changed, &lock);
          busy_waiters--;
          continue;
        }
      break;
    }
  if (ivset_reserve (&set, 2) == -1)
    {
      *err = ENOMEM;
      pthread_mutex_unlock (&lock);
      return -1;
    }
  idx = ivset_carve (&set, a, b, NULL, NULL);
  ivset_insert (&set, idx,
                (struct iv){ .start = a, .end = b, .state = IV_FILLING });

  /* Copy the payload without the lock: the range is IV_FILLING, so no
   * one else writes it and its pages cannot be released.
   */
  if (count >= 65536)
    {
      pthread_mutex_unlock (&lock);
      memcpy (map + a, buf, count);
      pthread_mutex_lock (&lock);
      idx = find_exact (a);
    }
  else
    memcpy (map + a, buf, count);

  writes_in++;
  bytes_in += count;
  set.v[idx].oldest = ++seq;
  mark_dirty (idx);
  pthread_mutex_unlock (&lock);

done:
  if (mode == MODE_WRITETHROUGH)
    return sync_all (flags & NBDKIT_FLAG_FUA, err);
  if (flags & NBDKIT_FLAG_FUA)
    return sync_all (true, err);
  return 0;
}

static int
coalesce_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  pthread_mutex_lock (&lock);
  flushes_in++;
  pthread_mutex_unlock (&lock);
  if (map == NULL)
    return bg_can_flush == 1 ? CALL_BELOW (bg->flush (bg, 0, err)) : 0;
  return sync_all (true, err);
}

static int
coalesce_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  uint32_t f = flags & (NBDKIT_FLAG_MAY_TRIM | NBDKIT_FLAG_FAST_ZERO);

  if (bg_can_zero <= NBDKIT_ZERO_NONE)
    {
      *err = EOPNOTSUPP; /* only reached for FAST_ZERO; we advertise none */
      return -1;
    }
  if ((f & NBDKIT_FLAG_FAST_ZERO) && bg_can_fast_zero != 1)
    {
      *err = EOPNOTSUPP;
      return -1;
    }
  if (direct (OP_ZERO, NULL, count, offset, f, err) == -1)
    return -1;
  if (flags & NBDKIT_FLAG_FUA)
    return sync_all (true, err);
  return 0;
}

static int
coalesce_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  if (direct (OP_TRIM, NULL, count, offset, 0, err) == -1)
    return -1;
  if (flags & NBDKIT_FLAG_FUA)
    return sync_all (true, err);
  return 0;
}

/* Buffered ranges are data, whatever the plugin says about them now.
 * The buffer is looked at before asking below: data that leaves the
 * buffer meanwhile has been written, so one of the two sees it.
 */
static int
coalesce_extents (nbdkit_next *next, void *handle, uint32_t count,
                  uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents, int *err)
{
  const uint64_t end = offset + count;
  struct nbdkit_extents *below = NULL;
  struct iv *snap = NULL;
  size_t n = 0, i, j = 0;
  int r = -1;

  pthread_mutex_lock (&lock);
  n = ivset_count_overlaps (&set, offset, end);
  if (n > 0)
    {
      snap = malloc (n * sizeof *snap);
      if (snap == NULL)
        {
          pthread_mutex_unlock (&lock);
          *err = ENOMEM;
          return -1;
        }
      memcpy (snap, &set.v[ivset_find (&set, offset)], n * sizeof *snap);
    }
  pthread_mutex_unlock (&lock);

  below = nbdkit_extents_new (offset, end);
  if (below == NULL)
    {
      *err = errno;
      goto out;
    }
  if (CALL_BELOW (bg->extents (bg, count, offset, flags, below, err)) == -1)
    goto out;

  for (i = 0; i < nbdkit_extents_count (below); ++i)
    {
      struct nbdkit_extent e = nbdkit_get_extent (below, i);
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
  nbdkit_extents_free (below);
  free (snap);
  return r;
}

static struct nbdkit_filter filter = {
  .name = "coalesce",
  .longname = "nbdkit coalesce filter",
  .config = coalesce_config,
  .config_help = coalesce_config_help,
  .get_ready = coalesce_get_ready,
  .after_fork = coalesce_after_fork,
  .cleanup = coalesce_cleanup,
  .can_write = coalesce_can_write,
  .can_flush = coalesce_can_flush,
  .can_fua = coalesce_can_fua,
  .can_multi_conn = coalesce_can_multi_conn,
  .can_trim = coalesce_can_trim,
  .can_zero = coalesce_can_zero,
  .can_fast_zero = coalesce_can_fast_zero,
  .can_extents = coalesce_can_extents,
  .pread = coalesce_pread,
  .pwrite = coalesce_pwrite,
  .flush = coalesce_flush,
  .zero = coalesce_zero,
  .trim = coalesce_trim,
  .extents = coalesce_extents,
};

NBDKIT_REGISTER_FILTER (filter)
