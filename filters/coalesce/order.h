/* nbdstack coalesce filter: the ordering gate for large writes (order.c).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a request waits here only for requests of its own
 * connection (its stream), and never longer than order_shared.wait_ms.
 *
 * A leaf: order.c calls nothing else of the filter and reads no state
 * but its streams and the order_shared it is given; nbdkit-free.  May
 * call: monotime.h.  Called by: coalesce.c, direct.c.  All functions are
 * called without the buffer lock; a NULL stream does nothing.
 */
#ifndef NBDSTACK_COALESCE_ORDER_H
#define NBDSTACK_COALESCE_ORDER_H

#include <stdbool.h>
#include <stdint.h>

/* When every request a connection has in flight is waiting, the wait
 * for the gap is cut to this many ms (see order.c).
 */
#define ORDER_ALL_WAITING_MS 5

/* What every stream of the server shares: set before the first stream
 * is made, counters updated with relaxed atomics.
 */
struct order_shared
{
  unsigned wait_ms;  /* coalesce-order-wait: the longest wait */
  unsigned grace_ms; /* the wait when all requests are waiting (<= wait_ms) */
  unsigned writing_streams; /* atomic: streams with a request in progress */
  uint64_t waits, timeouts; /* atomic: writes that waited / gave up */
};

/* One stream per connection. */
struct order_stream;

/* A new stream sharing *shared, or NULL (errno set). */
extern struct order_stream *order_stream_new (struct order_shared *shared);
/* Free s (NULL is fine). */
extern void order_stream_free (struct order_stream *s);
/* A write, zero or trim starts on s's connection (counted). */
extern void order_enter (struct order_stream *s);
/* ... and ends. */
extern void order_leave (struct order_stream *s);
/* [offset, end) is about to reach the plugin or the buffer: move the
 * stream; small_write: a write below SMALL_WRITE_MAX, remembered.
 */
extern void order_note (struct order_stream *s, uint64_t offset, uint64_t end,
                        bool large, bool small_write);
/* True if offset is right where a large write ended the stream. */
extern bool order_follows_large (struct order_stream *s, uint64_t offset);
/* True if a small write [offset, end) will probably get a neighbour. */
extern bool order_expects_neighbour (struct order_stream *s, uint64_t offset,
                                     uint64_t end);
/* True if s's connection has another request in flight besides the
 * caller's (a pipelining client: its neighbours may be on their way).
 */
extern bool order_pipelined (struct order_stream *s);
/* Wait (bounded) until the stream reaches offset; returns when the write
 * may go down.
 */
extern void order_wait (struct order_stream *s, uint64_t offset, uint64_t end,
                        bool large);

#endif /* NBDSTACK_COALESCE_ORDER_H */
