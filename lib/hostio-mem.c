/* nbdstack qcow2 library: host I/O over memory.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A read-only view of a caller's buffer (the fuzzer, the read unit
 * test) and a writable file that grows as it is written (the write unit
 * tests, and underneath the recording hostio for crash images).  The
 * writable one is used from several threads: accesses share a read-write
 * lock, and only a write that must move the buffer to grow it takes it
 * exclusively.  Writes to different bytes under the shared lock are
 * plain memcpys, as pwrite to different bytes of a file would be.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-hostio.h"

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

/* ---- writable, growing ---- */

struct memrw_io
{
  struct qcow2_hostio io; /* must be first */
  pthread_rwlock_t lock;
  unsigned char *buf;
  size_t len; /* file size */
  size_t cap; /* bytes allocated, >= len */
  uint64_t max;
};

static int
memrw_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct memrw_io *m = (struct memrw_io *)io;
  int r = 0;

  pthread_rwlock_rdlock (&m->lock);
  if (offset > m->len || count > m->len - offset)
    r = -EIO;
  else
    memcpy (buf, m->buf + offset, count);
  pthread_rwlock_unlock (&m->lock);
  return r;
}

static int64_t
memrw_get_size (struct qcow2_hostio *io)
{
  struct memrw_io *m = (struct memrw_io *)io;
  int64_t len;

  pthread_rwlock_rdlock (&m->lock);
  len = m->len;
  pthread_rwlock_unlock (&m->lock);
  return len;
}

/* Called with the lock held exclusively: make the file 'end' bytes
 * long, the new part zeroes.
 */
static int
memrw_grow (struct memrw_io *m, uint64_t end)
{
  if (end <= m->len)
    return 0;
  if (m->io.fixed_size || (m->max && end > m->max) || end > SIZE_MAX / 2)
    return -ENOSPC;
  if (end > m->cap)
    {
      size_t cap = m->cap ? m->cap : 65536;
      unsigned char *p;

      while (cap < end)
        cap *= 2;
      p = realloc (m->buf, cap);
      if (p == NULL)
        return -ENOMEM;
      m->buf = p;
      m->cap = cap;
    }
  memset (m->buf + m->len, 0, end - m->len);
  m->len = end;
  return 0;
}

static int
memrw_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
               uint64_t offset)
{
  struct memrw_io *m = (struct memrw_io *)io;
  uint64_t total = 0, end;
  int i, r = 0;

  for (i = 0; i < iovcnt; ++i)
    total += iov[i].iov_len;
  end = offset + total;
  if (end < offset)
    return -EINVAL;

  /* Exclusive: a read of bytes being written would be a data race in
   * memory (the library reads a cluster while another request
   * overwrites it in place, as NBD allows for overlapping requests; a
   * file's pread/pwrite make that well defined, memcpy does not).
   */
  pthread_rwlock_wrlock (&m->lock);
  if (end > m->len)
    r = memrw_grow (m, end);
  for (i = 0; r == 0 && i < iovcnt; ++i)
    {
      memcpy (m->buf + offset, iov[i].iov_base, iov[i].iov_len);
      offset += iov[i].iov_len;
    }
  pthread_rwlock_unlock (&m->lock);
  return r;
}

static int
memrw_flush (struct qcow2_hostio *io)
{
  return 0;
}

static int
memrw_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  struct memrw_io *m = (struct memrw_io *)io;
  int r = 0;

  pthread_rwlock_wrlock (&m->lock); /* exclusive, as writes */
  if (offset > m->len || len > m->len - offset)
    r = -EIO;
  else
    memset (m->buf + offset, 0, len);
  pthread_rwlock_unlock (&m->lock);
  return r;
}

static void
memrw_close (struct qcow2_hostio *io)
{
  struct memrw_io *m = (struct memrw_io *)io;

  pthread_rwlock_destroy (&m->lock);
  free (m->buf);
  free (m);
}

struct qcow2_hostio *
qcow2_hostio_mem_rw (const void *buf, size_t len, uint64_t max_size,
                     bool fixed_size)
{
  struct memrw_io *m = calloc (1, sizeof *m);

  if (m == NULL)
    return NULL;
  m->io.pread = memrw_pread;
  m->io.get_size = memrw_get_size;
  m->io.close = memrw_close;
  m->io.pwritev = memrw_pwritev;
  m->io.flush = memrw_flush;
  m->io.zero = memrw_zero;
  m->max = max_size;
  pthread_rwlock_init (&m->lock, NULL);
  if (memrw_grow (m, len) < 0)
    {
      memrw_close (&m->io);
      return NULL;
    }
  if (len > 0)
    memcpy (m->buf, buf, len);
  m->io.fixed_size = fixed_size;
  return &m->io;
}

const unsigned char *
qcow2_hostio_mem_contents (struct qcow2_hostio *io, uint64_t *size)
{
  struct memrw_io *m = (struct memrw_io *)io;

  *size = m->len;
  return m->buf;
}
