/* nbdstack coalesce filter: the state shared by its parts.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Durability rule (what every part keeps true): each buffered interval
 * carries the sequence number of the oldest acknowledged write whose
 * bytes it stands for ("oldest").  A flush with sequence number S
 * returns only when no interval with oldest < S is left in any state.
 * Whatever replaces buffered bytes therefore inherits their number: an
 * overwrite keeps the smallest number of what it covers, and a zero,
 * trim or direct write keeps the covered pieces (as IV_ZOMBIE) until
 * it has reached the plugin, or puts them back if it failed.
 *
 * The filter is one volatile write-back buffer for the whole server,
 * a stack in which each file calls only the ones below it (as nbdkit's
 * cache filter: cache.c -> blk.c -> lru.c):
 *   coalesce.c   configuration, lifecycle and the nbdkit callbacks:
 *                decides what is buffered and what goes down directly;
 *   direct.c     requests that go down uncopied (zero, trim, large or
 *                unmergeable writes), ordered after the buffered data
 *                they replace (direct.h);
 *   writeback.c  writing the buffer below: the writer threads, flushes
 *                (sync) and the failure state (writeback.h);
 *   buffer.c     the buffered bytes: copying writes in, taking ranges
 *                out, overlaying reads; never calls up (buffer.h);
 *   intervals.c  the sorted set of buffered ranges, no locking
 *                (intervals.h).
 * order.c, the ordering gate for large writes, is a leaf beside them:
 * it is given what it needs (order.h) and reads nothing here.
 *
 * This header: the shared state (struct coalesce), the parameters'
 * limits and CALL_BELOW.  Its fields are each written by one part, as
 * the comments say; the lock protects the ones below it.
 */
#ifndef NBDSTACK_COALESCE_H
#define NBDSTACK_COALESCE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "intervals.h"
#include "monotime.h"
#include "order.h"

enum coalesce_mode
{
  MODE_WRITEBACK,
  MODE_WRITETHROUGH
};

/* Writes below this size are cheap to copy and dear to send alone: on
 * one connection they are buffered when a neighbour is there or is
 * expected (see serve_pwrite); larger ones only when several
 * connections write at once.
 */
#define SMALL_WRITE_MAX (64 * 1024)

/* coalesce-order-wait when not given, in front of a plugin declared to
 * allocate in arrival order (coalesce-interleaved=buffer); 0 otherwise.
 */
#define ORDER_WAIT_DEFAULT_MS 20

/* The page size of a buffer backed by transparent huge pages. */
#define HUGE_PAGE (2 * 1024 * 1024)

#define BG_THREADS_DEFAULT 8
#define BG_THREADS_MAX 64

/* Reads look below without the lock and then overlay the buffer; a
 * range that left the buffer in between would be missed, so removals
 * are logged and such a read is retried.
 */
#define REMOVAL_LOG 256

struct coalesce
{
  /* Parameters. */
  enum coalesce_mode mode;
  uint64_t buffer_limit;
  unsigned delay_ms;
  uint64_t max_write_param;
  int use_hugepages; /* -1 auto, 0 off, 1 on */
  unsigned threads;
  /* coalesce-interleaved=buffer: while several connections write, copy
   * every write, to hand a plugin that lays data out in arrival order
   * each region in one ascending pass.  direct (false): writes of
   * SMALL_WRITE_MAX and more that touch nothing buffered go down
   * uncopied even then.  Fixed in .get_ready; until then interleaved
   * holds the parameter (-1 auto, 0 direct, 1 buffer), and auto means
   * buffer exactly when a cache=none parameter passed through .config
   * to the plugin (O_DIRECT below, where merged writes are faster).
   */
  int interleaved;
  bool below_cache_none;
  bool buffer_interleaved;

  /* Set when the stack below is not PARALLEL: every call down then
   * holds below_lock (see CALL_BELOW).
   */
  bool serialize_below;
  pthread_mutex_t below_lock;

  /* Set up in .after_fork, read-only afterwards. */
  nbdkit_next *below; /* shared context used for all I/O below */
  uint64_t export_size;
  char *map;      /* export_size bytes at their own offsets, sparse */
  char *map_base; /* what mmap returned (map is aligned) */
  size_t map_len;
  uint32_t max_write; /* effective merge/chunk limit */
  int can_write, can_flush, can_trim, can_zero, can_fua, can_fast_zero,
      can_extents;
  uint64_t high_water; /* wake the writers above this charge */

  /* What order.c is given: coalesce-order-wait, its counters, and the
   * connections with a write, zero or trim in progress
   * (order.writing_streams): while several write at once their
   * requests interleave, and only the buffer can put small pieces (or,
   * with buffer_interleaved, all of them) back together.
   */
  struct order_shared order;
  /* coalesce-order-wait, or -1 if not given: then the gate waits
   * ORDER_WAIT_DEFAULT_MS in front of a plugin declared to allocate in
   * arrival order (an explicit coalesce-interleaved=buffer) and not at
   * all otherwise (see coalesce_get_ready).
   */
  int order_wait_param;

  /* Page policy (coalesce-hugepages unset): huge pages while write-back
   * takes pieces large enough to fill them, small pages otherwise (see
   * buffer_pick_pages).  What the last pieces written back were like:
   */
  bool adaptive_pages;
  uint64_t small_page; /* the system's page size */
  uint64_t pol_pieces, pol_bytes;
  uint64_t page_switches;

  /* Everything below is protected by lock. */
  pthread_mutex_t lock;
  pthread_cond_t changed; /* an interval changed state or left */
  pthread_cond_t wake_bg; /* work for the writer threads */
  struct ivset set;
  uint64_t seq;                /* write/flush sequence numbers */
  unsigned busy_waiters;       /* threads waiting on 'changed' */
  struct timespec dirty_since; /* oldest time dirty data may date from */
  bool stopping;
  unsigned urgent; /* flushes in progress: writers write back now */
  bool wt_leader;  /* writethrough: a group commit is running */

  /* Failures below (see writeback.c for the rules): written by
   * writeback.c; buffer.c reads plugin_failing and last_err (a full
   * buffer does not wait for a failing plugin).
   */
  uint64_t fail_gen;           /* bumped on every failed write-back */
  int last_err;                /* errno of the latest failure */
  bool plugin_failing;         /* the latest write below failed */
  int err_unreported;          /* a write-back failure no flush returned yet */
  struct timespec retry_after; /* writers back off until then */

  /* Writes completed below (wgen) and how many of them the last
   * successful flush below covered (flushed_gen); direct operations in
   * progress.  Together they tell when nothing waits to be flushed.
   */
  uint64_t wgen, flushed_gen;
  unsigned direct_inflight;

  /* The write that arrived last, from any connection (see
   * merges_likely).
   */
  uint64_t last_lo, last_hi;

  /* Pages freed last, not yet given back (see buffer_release_and_remove):
   * resident memory is at most coalesce-size plus this range.
   */
  uint64_t kept_lo, kept_hi;

  struct
  {
    uint64_t start, end;
  } removals[REMOVAL_LOG];
  uint64_t removal_gen;

  /* Counters, logged at exit. */
  uint64_t writes_in, bytes_in, writes_out, bytes_out;
  uint64_t flushes_in, flushes_out, zeroes_dropped_bytes;
  /* Writes that went down uncopied, and of those the ones that had
   * nothing to merge with (the rest: at least 1M, their tails, FUA with
   * nothing buffered, too large for the buffer).
   */
  uint64_t direct_writes, direct_bytes, unmerged_writes, unmerged_bytes;
  uint64_t backpressure_ns;
  uint64_t pages_recycled; /* huge pages moved, not faulted in (buffer.c) */

  /* Writer threads (not protected: started and joined by one thread). */
  pthread_t bg_threads[BG_THREADS_MAX];
  unsigned bg_running;
};

extern struct coalesce co;

/* -D coalesce.verbose=1 logs every write-back. */
extern int coalesce_debug_verbose;

/* -D coalesce.buffer_all=1 buffers every write below 1M, as the filter
 * did before it sent unmergeable writes down directly (tests of the
 * writers).
 */
extern int coalesce_debug_buffer_all;

/* Every call to the plugin below goes through this (see
 * serialize_below).  The lock is taken only sometimes, so it is a
 * manual lock around the one call, not a scope lock.
 */
#define CALL_BELOW(call)                                                       \
  ({                                                                           \
    int r_;                                                                    \
    if (co.serialize_below)                                                    \
      pthread_mutex_lock (&co.below_lock);                                     \
    r_ = (call);                                                               \
    if (co.serialize_below)                                                    \
      pthread_mutex_unlock (&co.below_lock);                                   \
    r_;                                                                        \
  })

#endif /* NBDSTACK_COALESCE_H */
