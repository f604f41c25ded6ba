/* nbdstack image plugin: a byte range of a file as a qcow2 hostio.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: every call that reaches 'base' lies inside [start,
 * start+length) (or past start, for an open-ended range).
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "hostio-range.h"

struct range
{
  struct qcow2_hostio io; /* must be first */
  struct qcow2_hostio *base;
  uint64_t start;
  int64_t length; /* < 0: to the end of the file */
};

/* Is [offset, offset+count) inside a fixed range? */
static bool
inside (const struct range *r, uint64_t offset, uint64_t count)
{
  return r->length < 0
         || (offset <= (uint64_t)r->length
             && count <= (uint64_t)r->length - offset);
}

static int
range_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct range *r = (struct range *)io;

  if (!inside (r, offset, count))
    return -EIO;
  return r->base->pread (r->base, buf, count, r->start + offset);
}

static int64_t
range_get_size (struct qcow2_hostio *io)
{
  struct range *r = (struct range *)io;
  int64_t size;

  if (r->length >= 0)
    return r->length;
  size = r->base->get_size (r->base);
  if (size < 0)
    return size;
  return (uint64_t)size > r->start ? size - (int64_t)r->start : 0;
}

static int
range_block_status (struct qcow2_hostio *io, uint64_t offset, uint64_t max,
                    uint64_t *len, bool *hole)
{
  struct range *r = (struct range *)io;

  if (r->length >= 0)
    {
      if (offset >= (uint64_t)r->length)
        return -EIO;
      if (max > (uint64_t)r->length - offset)
        max = (uint64_t)r->length - offset;
    }
  return r->base->block_status (r->base, r->start + offset, max, len, hole);
}

static int
range_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
               uint64_t offset)
{
  struct range *r = (struct range *)io;
  uint64_t count = 0;

  for (int i = 0; i < iovcnt; ++i)
    count += iov[i].iov_len;
  if (!inside (r, offset, count))
    return -ENOSPC;
  return r->base->pwritev (r->base, iov, iovcnt, r->start + offset);
}

static int
range_flush (struct qcow2_hostio *io)
{
  struct range *r = (struct range *)io;

  return r->base->flush (r->base);
}

static int
range_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  struct range *r = (struct range *)io;

  if (!inside (r, offset, len))
    return -ENOSPC;
  return r->base->zero (r->base, r->start + offset, len, punch);
}

static void
range_close (struct qcow2_hostio *io)
{
  struct range *r = (struct range *)io;

  qcow2_hostio_close (r->base);
  free (r);
}

struct qcow2_hostio *
hostio_range (struct qcow2_hostio *base, uint64_t start, int64_t length)
{
  struct range *r = calloc (1, sizeof *r);

  if (r == NULL)
    {
      qcow2_hostio_close (base);
      return NULL;
    }
  r->base = base;
  r->start = start;
  r->length = length;
  r->io.pread = range_pread;
  r->io.get_size = range_get_size;
  r->io.close = range_close;
  if (base->block_status)
    r->io.block_status = range_block_status;
  if (base->pwritev)
    {
      r->io.pwritev = range_pwritev;
      r->io.flush = range_flush;
      r->io.zero = base->zero ? range_zero : NULL;
    }
  r->io.fixed_size = length >= 0 || base->fixed_size;
  r->io.max_size = base->max_size > start ? base->max_size - start : 0;
  return &r->io;
}
