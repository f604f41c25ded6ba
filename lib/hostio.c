/* nbdstack qcow2 library: host I/O over a file descriptor or memory.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void
fd_close (struct qcow2_hostio *io)
{
  struct fd_io *f = (struct fd_io *)io;

  close (f->fd);
  free (f);
}

struct qcow2_hostio *
qcow2_hostio_fd (int fd)
{
  struct fd_io *f = calloc (1, sizeof *f);

  if (f == NULL)
    return NULL;
  f->io.pread = fd_pread;
  f->io.get_size = fd_get_size;
  f->io.close = fd_close;
  f->io.block_status = fd_block_status;
  f->fd = fd;
  return &f->io;
}

struct mem_io
{
  struct qcow2_hostio io; /* must be first */
  const unsigned char *buf;
  size_t len;
};

static int
mem_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct mem_io *m = (struct mem_io *)io;

  if (offset > m->len || count > m->len - offset)
    return -EIO;
  memcpy (buf, m->buf + offset, count);
  return 0;
}

static int64_t
mem_get_size (struct qcow2_hostio *io)
{
  struct mem_io *m = (struct mem_io *)io;

  return m->len;
}

static void
mem_close (struct qcow2_hostio *io)
{
  free (io);
}

struct qcow2_hostio *
qcow2_hostio_mem (const void *buf, size_t len)
{
  struct mem_io *m = calloc (1, sizeof *m);

  if (m == NULL)
    return NULL;
  m->io.pread = mem_pread;
  m->io.get_size = mem_get_size;
  m->io.close = mem_close;
  m->buf = buf;
  m->len = len;
  return &m->io;
}
