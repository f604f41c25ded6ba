/* nbdstack coalesce filter: requests that go down uncopied.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Zero and trim requests, and writes that are not worth copying into
 * the buffer (large ones, their tails, unmergeable ones, FUA writes
 * with nothing buffered), are sent to the plugin as they are.  What the
 * buffer holds of their range is older than they are: it is taken out
 * of write-back first (buffer_take_out: IV_ZOMBIE, still served to
 * readers, still owed to flushes), the request goes down, and then the
 * pieces are dropped, or made dirty again if the request failed and so
 * changed nothing below (buffer_settle).  See direct.h.
 */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "buffer.h"
#include "cleanup.h"
#include "coalesce.h"
#include "direct.h"
#include "writeback.h"

/* Take the buffered pieces of [a, b) out and count the request as in
 * flight (lock taken here).
 */
static int
direct_begin (enum direct_op op, uint64_t a, uint64_t b, struct iv **pieces,
              size_t *n, int *err)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  if (buffer_take_out (a, b, pieces, n, err) == -1)
    return -1;
  if (op == OP_WRITE)
    {
      co.writes_in++;
      co.bytes_in += b - a;
      co.direct_writes++;
      co.direct_bytes += b - a;
    }
  co.direct_inflight++;
  return 0;
}

/* Send the request to the plugin (without the lock). */
static int
send_below (enum direct_op op, const struct iv *pieces, size_t n,
            const void *buf, uint32_t count, uint64_t offset, uint32_t flags,
            int *err)
{
  nbdkit_next *below = co.below;
  const uint64_t a = offset, b = offset + count;
  int r = 0;

  switch (op)
    {
    case OP_ZERO:
      return CALL_BELOW (below->zero (below, count, offset, flags, err));
    case OP_TRIM:
      /* A plugin may trim only whole blocks and leave the edges of the
       * range as they are; those edges must then hold the newest data,
       * as they would without the buffer.  So the buffered pieces go
       * down first (trims of buffered data are rare: a client does not
       * write what it is about to discard).
       */
      for (size_t i = 0; i < n && r == 0; ++i)
        r = writeback_write_down (pieces[i].start, pieces[i].end, err);
      if (r == 0)
        r = CALL_BELOW (below->trim (below, count, offset, flags, err));
      return r;
    case OP_WRITE:
      break;
    }
  for (uint64_t off = a; off < b && r == 0;)
    {
      uint32_t c = MIN (b - off, (uint64_t)co.max_write);
      r = CALL_BELOW (below->pwrite (below, (const char *)buf + (off - a), c,
                                     off, flags & NBDKIT_FLAG_FUA, err));
      off += c;
    }
  return r;
}

/* The request is done (r: its result): settle the pieces and the
 * failure state (lock taken here).
 */
static void
direct_end (enum direct_op op, int r, uint64_t a, uint64_t b,
            const struct iv *pieces, size_t n, uint32_t flags, const int *err)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  co.direct_inflight--;
  if (r == 0 && !(flags & NBDKIT_FLAG_FUA))
    co.wgen++;
  if (op == OP_WRITE)
    {
      if (r == 0)
        writeback_note_success ();
      else
        writeback_note_failure (*err);
    }
  buffer_settle (a, b, pieces, n, r == 0);
}

int
direct_request (struct order_stream *stream, bool large, enum direct_op op,
                const void *buf, uint32_t count, uint64_t offset,
                uint32_t flags, int *err)
{
  const uint64_t a = offset, b = offset + count;
  CLEANUP_FREE struct iv *pieces = NULL;
  size_t n;
  int r;

  if (direct_begin (op, a, b, &pieces, &n, err) == -1)
    return -1;
  order_note (stream, a, b, large, op == OP_WRITE && count < SMALL_WRITE_MAX);
  r = send_below (op, pieces, n, buf, count, offset, flags, err);
  direct_end (op, r, a, b, pieces, n, flags, err);
  return r;
}
