/* nbdstack coalesce filter: the state shared by its parts.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The filter is one volatile write-back buffer for the whole server:
 *   coalesce.c   configuration, lifecycle and the nbdkit callbacks;
 *   buffer.c     the buffered bytes: inserting writes, taking ranges out
 *                for zero/trim/direct writes, overlaying reads;
 *   writeback.c  writing the buffer below: the writer threads, flushes,
 *                and what happens when the plugin fails;
 *   intervals.c  the sorted set of buffered ranges (no locking).
 *
 * Durability rule (what every part keeps true): each buffered interval
 * carries the sequence number of the oldest acknowledged write whose
 * bytes it stands for ("oldest").  A flush with sequence number S
 * returns only when no interval with oldest < S is left in any state.
 * Whatever replaces buffered bytes therefore inherits their number: an
 * overwrite keeps the smallest number of what it covers, and a zero,
 * trim or direct write keeps the covered pieces (as IV_ZOMBIE) until
 * it has reached the plugin, or puts them back if it failed.
 */
#ifndef NBDSTACK_COALESCE_H
#define NBDSTACK_COALESCE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "intervals.h"

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
  unsigned order_wait_ms;

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

  uint64_t order_waits, order_timeouts; /* atomic counters, see order.c */

  /* Connections with a write, zero or trim in progress (atomic, see
   * order_enter): while several write at once their requests
   * interleave, and only the buffer can put them back together.
   */
  unsigned writing_streams;

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

  /* Failures below (see writeback.c for the rules). */
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

/* Time helpers (CLOCK_MONOTONIC). */
static inline void
now (struct timespec *ts)
{
  clock_gettime (CLOCK_MONOTONIC, ts);
}

static inline uint64_t
ns_between (const struct timespec *a, const struct timespec *b)
{
  return (b->tv_sec - a->tv_sec) * UINT64_C (1000000000) + b->tv_nsec
         - a->tv_nsec;
}

static inline void
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

static inline bool
ts_before (const struct timespec *a, const struct timespec *b)
{
  return a->tv_sec < b->tv_sec
         || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* buffer.c (lock held unless said otherwise). */
extern void buffer_release_and_remove (size_t idx);
extern void buffer_log_removal (uint64_t a, uint64_t b);
extern size_t buffer_find_exact (uint64_t start);
extern void buffer_wait_changed (void);
extern bool buffer_touches (uint64_t a, uint64_t b);
extern void buffer_note_piece (uint64_t len);
/* Called without the lock: */
extern int buffer_write (const void *buf, uint32_t count, uint64_t offset,
                         uint64_t *fail_gen_at_ack, int *err);
extern int buffer_read (void *buf, uint32_t count, uint64_t offset, int *err);
extern int buffer_extents (uint32_t count, uint64_t offset, uint32_t flags,
                           struct nbdkit_extents *extents, int *err);

enum direct_op
{
  OP_ZERO,
  OP_TRIM,
  OP_WRITE
};
struct order_stream;
extern int buffer_direct (struct order_stream *stream, bool large,
                          enum direct_op op, const void *buf, uint32_t count,
                          uint64_t offset, uint32_t flags, int *err);

/* order.c (called without the lock): one stream per connection. */
extern struct order_stream *order_stream_new (void);
extern void order_stream_free (struct order_stream *s);
extern void order_enter (struct order_stream *s);
extern void order_leave (struct order_stream *s);
extern void order_note (struct order_stream *s, uint64_t offset, uint64_t end,
                        bool large, bool is_write);
extern bool order_follows_large (struct order_stream *s, uint64_t offset);
extern bool order_expects_neighbour (struct order_stream *s, uint64_t offset,
                                     uint64_t end);
extern void order_wait (struct order_stream *s, uint64_t offset, uint64_t end,
                        bool large);

/* writeback.c (called without the lock). */
extern int writeback_start (void);
extern int writeback_write_down (uint64_t a, uint64_t b, int *err);
extern void writeback_stop (void);
extern int writeback_sync (bool do_flush, bool report, uint64_t since_gen,
                           int *err);
#define SINCE_NOW UINT64_MAX
/* Lock held: a write below succeeded / failed. */
extern void writeback_note_success (void);
extern void writeback_note_failure (int err);

#endif /* NBDSTACK_COALESCE_H */
