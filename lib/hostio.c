/* nbdstack qcow2 library: host I/O over a file descriptor.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Regular files and block devices alike: writes go through pwritev,
 * flushes are fdatasync (the library orders metadata only by flushes),
 * and zeroing uses fallocate, which Linux also implements for block
 * devices (PUNCH_HOLE as discard-and-zero, ZERO_RANGE as write-zeroes).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "qcow2-hostio.h"

struct fd_io
{
  struct qcow2_hostio io; /* must be first */
  int fd;
};

static int
fd_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct fd_io *f = (struct fd_io *)io;
  char *p = buf;

  while (count > 0)
    {
      ssize_t r = pread (f->fd, p, count, offset);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -errno;
        }
      if (r == 0) /* the file shrank under us */
        return -EIO;
      p += r;
      count -= r;
      offset += r;
    }
  return 0;
}

static int64_t
fd_get_size (struct qcow2_hostio *io)
{
  struct fd_io *f = (struct fd_io *)io;
  struct stat st;
  off_t end;

  if (fstat (f->fd, &st) == -1)
    return -errno;
  if (S_ISREG (st.st_mode))
    return st.st_size;
  /* Block devices report 0 in st_size. */
  end = lseek (f->fd, 0, SEEK_END);
  return end == -1 ? -errno : end;
}

/* SEEK_DATA/SEEK_HOLE: lets a sparse raw backing file report its holes
 * as zeroes, as qemu does.
 */
static int
fd_block_status (struct qcow2_hostio *io, uint64_t offset, uint64_t max,
                 uint64_t *len, bool *hole)
{
  struct fd_io *f = (struct fd_io *)io;
  off_t data, end;

  data = lseek (f->fd, offset, SEEK_DATA);
  if (data == -1)
    {
      if (errno == ENXIO)
        { /* only a hole up to the end of file */
          *hole = true;
          *len = max;
          return 0;
        }
      *hole = false; /* no SEEK_DATA here: say data */
      *len = max;
      return 0;
    }
  if ((uint64_t)data > offset)
    {
      *hole = true;
      *len = (uint64_t)data - offset < max ? (uint64_t)data - offset : max;
      return 0;
    }
  end = lseek (f->fd, offset, SEEK_HOLE);
  *hole = false;
  if (end == -1 || (uint64_t)end <= offset)
    *len = max;
  else
    *len = (uint64_t)end - offset < max ? (uint64_t)end - offset : max;
  return 0;
}

/* pwritev until everything is written: a short write (signal, or a
 * filesystem splitting the request) continues where it stopped.
 */
static int
fd_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
            uint64_t offset)
{
  struct fd_io *f = (struct fd_io *)io;
  struct iovec local[8];
  struct iovec *v = local;
  int i, r = 0;

  if (iovcnt > 8)
    {
      v = malloc (sizeof *v * iovcnt);
      if (v == NULL)
        return -ENOMEM;
    }
  memcpy (v, iov, sizeof *v * iovcnt);
  i = 0;
  while (i < iovcnt)
    {
      ssize_t n = pwritev (f->fd, &v[i], iovcnt - i, offset);
      if (n == -1)
        {
          if (errno == EINTR)
            continue;
          r = -errno;
          break;
        }
      if (n == 0)
        {
          r = -ENOSPC; /* the end of a block device */
          break;
        }
      offset += n;
      while (i < iovcnt && (size_t)n >= v[i].iov_len)
        n -= v[i++].iov_len;
      if (i < iovcnt)
        {
          v[i].iov_base = (char *)v[i].iov_base + n;
          v[i].iov_len -= n;
        }
    }
  if (v != local)
    free (v);
  return r;
}

static int
fd_flush (struct qcow2_hostio *io)
{
  struct fd_io *f = (struct fd_io *)io;

  return fdatasync (f->fd) == -1 ? -errno : 0;
}

static int
fd_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  struct fd_io *f = (struct fd_io *)io;
  int mode = FALLOC_FL_KEEP_SIZE;

  mode |= punch ? FALLOC_FL_PUNCH_HOLE : FALLOC_FL_ZERO_RANGE;
  if (fallocate (f->fd, mode, offset, len) == 0)
    return 0;
  if (punch && (errno == EOPNOTSUPP || errno == ENODEV))
    {
      mode = FALLOC_FL_KEEP_SIZE | FALLOC_FL_ZERO_RANGE;
      if (fallocate (f->fd, mode, offset, len) == 0)
        return 0;
    }
  if (errno == EOPNOTSUPP || errno == ENODEV || errno == EINVAL)
    return -EOPNOTSUPP; /* the caller writes zeroes */
  return -errno;
}

static void
fd_close (struct qcow2_hostio *io)
{
  struct fd_io *f = (struct fd_io *)io;

  close (f->fd);
  free (f);
}

/* The file system's limit on this file's size, found without changing
 * anything: lseek past it fails with EINVAL (the kernel checks offsets
 * against the superblock's s_maxbytes), so bisect over the offsets.
 * 0 when lseek does not tell (every offset accepted).
 */
static uint64_t
fd_max_size (int fd)
{
  uint64_t lo = 0, hi = INT64_MAX; /* lo accepted; hi refused, or the top */

  if (lseek (fd, INT64_MAX, SEEK_SET) != -1)
    return 0;
  while (hi - lo > 1)
    {
      const uint64_t mid = lo + (hi - lo) / 2;

      if (lseek (fd, mid, SEEK_SET) != -1)
        lo = mid;
      else
        hi = mid;
    }
  return lo;
}

struct qcow2_hostio *
qcow2_hostio_fd (int fd)
{
  struct fd_io *f = calloc (1, sizeof *f);
  struct stat st;
  int fl = fcntl (fd, F_GETFL);

  if (f == NULL)
    return NULL;
  f->io.pread = fd_pread;
  f->io.get_size = fd_get_size;
  f->io.close = fd_close;
  f->io.block_status = fd_block_status;
  if (fl != -1 && (fl & O_ACCMODE) != O_RDONLY)
    {
      f->io.pwritev = fd_pwritev;
      f->io.flush = fd_flush;
      f->io.zero = fd_zero;
    }
  f->io.fixed_size = fstat (fd, &st) == 0 && S_ISBLK (st.st_mode);
  if (!f->io.fixed_size)
    f->io.max_size = fd_max_size (fd);
  f->fd = fd;
  return &f->io;
}
