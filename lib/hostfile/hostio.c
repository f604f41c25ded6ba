/* nbdstack host-file layer: the qcow2 library's hostio over a hostfile.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: each member passes straight to the layer (the same code
 * serves the raw format), with the qcow2_hostio contract's conventions:
 * zero never writes data it could skip (it is called as
 * HOSTFILE_ZERO_FAST) and answers -EOPNOTSUPP when only writing is left,
 * so the library writes zeroes itself or, for a hint, does nothing.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "hostfile.h"

static struct hostfile *
hf_of (struct qcow2_hostio *io)
{
  return (struct hostfile *)io; /* io is the first member */
}

static int
hio_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  return hostfile_pread (hf_of (io), buf, count, offset);
}

static int64_t
hio_get_size (struct qcow2_hostio *io)
{
  return hostfile_current_size (hf_of (io));
}

static void
hio_close (struct qcow2_hostio *io)
{
  hostfile_close (hf_of (io));
}

static int
hio_block_status (struct qcow2_hostio *io, uint64_t offset, uint64_t max,
                  uint64_t *len, bool *hole)
{
  return hostfile_extent (hf_of (io), offset, max, len, hole);
}

static int
hio_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  return hostfile_pwritev (hf_of (io), iov, iovcnt, offset, false);
}

static int
hio_flush (struct qcow2_hostio *io)
{
  return hostfile_flush (hf_of (io));
}

static int
hio_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  unsigned flags = HOSTFILE_ZERO_FAST | (punch ? HOSTFILE_ZERO_MAY_TRIM : 0);
  int r = hostfile_zero (hf_of (io), offset, len, flags);

  if (r == -ENOTSUP || r == -EINVAL || (r < 0 && hostfile_is_unsupported (-r)))
    return -EOPNOTSUPP; /* the caller writes zeroes */
  return r;
}

void
hostfile_init_hostio (struct hostfile *hf)
{
  hf->io.pread = hio_pread;
  hf->io.get_size = hio_get_size;
  hf->io.close = hio_close;
  hf->io.block_status = hio_block_status;
  if (hf->writable)
    {
      hf->io.pwritev = hio_pwritev;
      hf->io.flush = hio_flush;
      hf->io.zero = hio_zero;
      if (!hf->is_blkdev)
        hf->io.max_size = hostfile_max_size (hf);
    }
  hf->io.fixed_size = hf->is_blkdev;
}

struct qcow2_hostio *
qcow2_hostio_fd (int fd)
{
  struct hostfile_error err;
  struct hostfile *hf = hostfile_adopt (fd, "(fd)", HOSTFILE_GROW, &err);

  if (hf == NULL)
    {
      errno = err.errnum;
      return NULL;
    }
  return &hf->io;
}
