/* nbdstack coalesce filter: the ordering gate for large writes.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * qemu-img convert -W keeps several 2M writes (and zero requests) in
 * flight and sends each as soon as its source read completes, so they
 * arrive a few places out of order.  Copying them into the buffer to
 * put them back in order costs a copy and page faults per byte: more
 * CPU than the plugin needs to write them.  Instead a large write that
 * arrives ahead of its connection's stream (the end of the contiguous
 * range that connection has passed on so far) waits a moment for the
 * requests before it, then goes straight down: the plugin sees the
 * writes in ascending order and no byte is copied.
 *
 * One stream per connection: a client that spreads its work over
 * several connections (nbdcopy, imageio) writes a region per
 * connection, and those regions must not wait for each other.  The wait
 * is bounded, because a client may skip holes and never fill a gap.
 *
 * A leaf (see order.h): everything it needs, the longest wait and the
 * counters, comes in the struct order_shared each stream is made with.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "cleanup.h"
#include "monotime.h"
#include "order.h"

/* A gap wider than this cannot be requests the client has in flight:
 * the write starts the stream anew instead of waiting.  Zero requests
 * for long holes can be tens of MiB each.
 */
#define ORDER_WINDOW (128 * 1024 * 1024)

/* More waiters than this do not wait (nbdkit runs 16 threads per
 * connection by default).
 */
#define ORDER_MAX_WAITERS 64

/* Requests passed on ahead of the stream (small writes, zeroes), kept
 * so that the stream can move past them when the gap before them fills.
 */
#define ORDER_MAX_AHEAD 64

/* When every request the connection has in flight is waiting here,
 * only a request the client has yet to send can fill the gap: wait
 * shared->grace_ms for it (ORDER_ALL_WAITING_MS: requests sent together
 * reach the filter a payload's receive time apart, about a millisecond
 * for 2M), not the whole coalesce-order-wait.  A client at queue depth
 * 1, or one that skips holes, pays at most this per gap.
 */

struct order_stream
{
  struct order_shared *shared;
  pthread_mutex_t lock;
  pthread_cond_t moved; /* end moved or a waiter left */
  uint64_t end;
  unsigned inflight;           /* atomic: writes, zeroes, trims being served */
  bool end_is_large;           /* end is where a large write ended */
  uint64_t small_lo, small_hi; /* the last write below SMALL_WRITE_MAX */
  unsigned nwaiting;
  uint64_t waiting_at[ORDER_MAX_WAITERS];
  unsigned nahead;
  struct
  {
    uint64_t start, end;
  } ahead[ORDER_MAX_AHEAD];
};

struct order_stream *
order_stream_new (struct order_shared *shared)
{
  struct order_stream *s = calloc (1, sizeof *s);
  pthread_condattr_t attr;

  if (s == NULL)
    return NULL;
  s->shared = shared;
  pthread_mutex_init (&s->lock, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&s->moved, &attr);
  pthread_condattr_destroy (&attr);
  return s;
}

void
order_stream_free (struct order_stream *s)
{
  if (s == NULL)
    return;
  pthread_cond_destroy (&s->moved);
  pthread_mutex_destroy (&s->lock);
  free (s);
}

/* The stream reached s->end: take in what was passed on ahead of it. */
static void
absorb_ahead (struct order_stream *s)
{
  bool moved;

  do
    {
      moved = false;
      for (unsigned i = 0; i < s->nahead;)
        if (s->ahead[i].start <= s->end)
          {
            if (s->ahead[i].end > s->end)
              {
                s->end = s->ahead[i].end;
                moved = true;
              }
            s->ahead[i] = s->ahead[--s->nahead];
          }
        else
          ++i;
    }
  while (moved);
}

/* The connection's count of requests in progress, and the server's
 * count of connections that have one (shared->writing_streams).
 */
void
order_enter (struct order_stream *s)
{
  if (s && __atomic_add_fetch (&s->inflight, 1, __ATOMIC_RELAXED) == 1)
    __atomic_add_fetch (&s->shared->writing_streams, 1, __ATOMIC_RELAXED);
}

void
order_leave (struct order_stream *s)
{
  if (s && __atomic_sub_fetch (&s->inflight, 1, __ATOMIC_RELAXED) == 0)
    __atomic_sub_fetch (&s->shared->writing_streams, 1, __ATOMIC_RELAXED);
}

/* [offset, end) was passed on: it continues the stream if it starts
 * within it, is remembered if it is a little ahead, and starts a new
 * pass if it is far behind.  Lock held.
 */
static void
advance (struct order_stream *s, uint64_t offset, uint64_t end)
{
  if (offset <= s->end)
    {
      if (end > s->end)
        {
          s->end = end;
          s->end_is_large = false;
          absorb_ahead (s);
          if (s->nwaiting > 0)
            pthread_cond_broadcast (&s->moved);
        }
      else if (offset + ORDER_WINDOW < s->end)
        {
          s->end = end;
          s->end_is_large = false;
          s->nahead = 0;
        }
    }
  else if (offset - s->end <= ORDER_WINDOW && s->nahead < ORDER_MAX_AHEAD)
    {
      s->ahead[s->nahead].start = offset;
      s->ahead[s->nahead].end = end;
      s->nahead++;
    }
}

/* The request is about to go down (or into the buffer): move the
 * stream, and remember it if it is a small write (small_write: a write
 * below SMALL_WRITE_MAX, not a zero or trim; see
 * order_expects_neighbour).  Called as late as possible, right before
 * the plugin sees the request, so that writes released by it do not
 * overtake it.
 */
void
order_note (struct order_stream *s, uint64_t offset, uint64_t end, bool large,
            bool small_write)
{
  if (s == NULL)
    return;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  advance (s, offset, end);
  if (small_write)
    {
      s->small_lo = offset;
      s->small_hi = end;
    }
  if (large)
    s->end_is_large = s->end == end;
}

/* True if a request at offset continues right where a large write
 * ended: the tail of a large copy, best passed on in order too.
 */
bool
order_follows_large (struct order_stream *s, uint64_t offset)
{
  if (s == NULL)
    return false;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  return s->end_is_large && offset == s->end;
}

/* True if a small write [offset, end) will probably have a neighbour
 * to merge with: it touches the connection's last small write (a run
 * of small writes, ascending or descending; not a zero: qemu-img
 * convert sends one for each hole between the data it writes), or
 * other requests are in flight on the connection and it lies ahead of
 * the stream, so they or the ones still to come may fill the gap before
 * it.
 */
bool
order_expects_neighbour (struct order_stream *s, uint64_t offset, uint64_t end)
{
  if (s == NULL)
    return false;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  return (s->small_lo < s->small_hi && offset <= s->small_hi
          && s->small_lo <= end)
         || (__atomic_load_n (&s->inflight, __ATOMIC_RELAXED) > 1
             && offset > s->end && offset - s->end <= ORDER_WINDOW);
}

bool
order_pipelined (struct order_stream *s)
{
  return s && __atomic_load_n (&s->inflight, __ATOMIC_RELAXED) > 1;
}

static bool
lowest_waiting (const struct order_stream *s, uint64_t offset)
{
  for (unsigned i = 0; i < s->nwaiting; ++i)
    if (s->waiting_at[i] < offset)
      return false;
  return true;
}

static void
unlist (struct order_stream *s, uint64_t offset)
{
  for (unsigned i = 0; i < s->nwaiting; ++i)
    if (s->waiting_at[i] == offset)
      {
        s->waiting_at[i] = s->waiting_at[--s->nwaiting];
        break;
      }
  pthread_cond_broadcast (&s->moved);
}

/* Called for a large write before it goes down; returns when it may
 * (its order_note then moves the stream past it).
 * A write waits until the stream reaches it or its time is up; from
 * then on it waits only for lower writes that are waiting too, so the
 * writes held up by a gap nobody fills go down in ascending order.
 */
void
order_wait (struct order_stream *s, uint64_t offset, uint64_t end, bool large)
{
  struct order_shared *shared;
  struct timespec tick, deadline;
  bool expired = false;

  if (s == NULL)
    return;
  shared = s->shared;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  /* A write that is not large does not wait while it is alone on its
   * connection: at queue depth 1 (random small writes) nothing fills
   * the gap.  A large one gives the requests sent with it a moment to
   * arrive.
   */
  if (offset <= s->end || offset - s->end > ORDER_WINDOW || shared->wait_ms == 0
      || s->nwaiting == ORDER_MAX_WAITERS
      || (!large && __atomic_load_n (&s->inflight, __ATOMIC_RELAXED) <= 1))
    {
      if (offset > s->end)
        s->end = offset; /* a jump: the gap is not coming */
      return;
    }

  now (&deadline);
  add_ms (&deadline, shared->wait_ms);
  s->waiting_at[s->nwaiting++] = offset;
  while (s->end < offset)
    {
      if (!expired)
        {
          /* Look every grace_ms whether all the connection's requests
           * are waiting: then only one the client has yet to send can
           * fill the gap, and it would have come by now.
           */
          now (&tick);
          add_ms (&tick, shared->grace_ms);
          if (pthread_cond_timedwait (&s->moved, &s->lock,
                                      ts_before (&tick, &deadline) ? &tick
                                                                   : &deadline)
              != ETIMEDOUT)
            continue;
          now (&tick);
          expired = !ts_before (&tick, &deadline)
                    || __atomic_load_n (&s->inflight, __ATOMIC_RELAXED)
                           <= s->nwaiting;
        }
      else if (lowest_waiting (s, offset))
        {
          /* Nothing before us is coming: skip the gap. */
          __atomic_add_fetch (&shared->timeouts, 1, __ATOMIC_RELAXED);
          s->end = offset;
        }
      else
        pthread_cond_wait (&s->moved, &s->lock);
    }
  unlist (s, offset);
  __atomic_add_fetch (&shared->waits, 1, __ATOMIC_RELAXED);
}
