/* nbdstack host-file layer: byte-exact reads and writes, and flush.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant (see hostfile.h): in O_DIRECT mode, a request's aligned
 * units go to the kernel from the caller's memory when it is aligned,
 * else through one pooled bounce buffer, a chunk of BOUNCE_SIZE at a
 * time; only a partial unit at either end of a write is read, patched
 * and written back, under the lock of its unit, and the aligned body of
 * a request never takes a lock.  (Writes whose bytes overlap have no
 * defined result, so the lock only protects bytes a write does not
 * own.)  Bytes from tail_start on go through the buffered descriptor.
 *
 *   hostfile_pread / hostfile_pwritev
 *     -> buffered: read_upto / write_all on fd
 *     -> direct:   dio_pread / dio_write (rmw, write_body) on fd
 *     -> the tail: read_upto / write_tail on bfd
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "align.h"
#include "bounce.h"
#include "cleanup.h"
#include "hostfile.h"

/* One unit of any alignment accepted fits a pool buffer, whose own
 * alignment satisfies any memory alignment accepted.
 */
static_assert (BOUNCE_SIZE >= HOSTFILE_MAX_ALIGN
                   && BOUNCE_ALIGN >= HOSTFILE_MAX_ALIGN
                   && BOUNCE_SIZE % HOSTFILE_MAX_ALIGN == 0,
               "bounce buffer too small for the largest O_DIRECT alignment");

/* Source of zeroes for the slow zero path and for zeroing partial
 * units.  Never written; in .bss so it costs no file or RAM pages.
 */
#define ZERO_BUF_SIZE (1024 * 1024)
static char zero_buf[ZERO_BUF_SIZE] __attribute__ ((aligned (BOUNCE_ALIGN)));

/* Read up to count bytes at offset; what lies past the end of the file
 * reads as zeroes, and *got says how many bytes the file had.
 */
static int
read_upto (int fd, char *buf, size_t count, uint64_t offset, size_t *got)
{
  size_t done = 0;

  while (done < count)
    {
      ssize_t r = pread (fd, buf + done, count - done, offset + done);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -errno;
        }
      if (r == 0)
        break;
      done += r;
    }
  memset (buf + done, 0, count - done);
  *got = done;
  return 0;
}

/* Read exactly count bytes: the end of the file is -EIO (callers never
 * read past the size they serve; the file shrank under us).
 */
static int
read_full (int fd, char *buf, size_t count, uint64_t offset)
{
  size_t got;
  int r = read_upto (fd, buf, count, offset, &got);

  return r == 0 && got < count ? -EIO : r;
}

/* Drop the first n bytes of v[i, iovcnt) (v is a copy to change); the
 * index of the first piece with bytes left.
 */
static int
iov_advance (struct iovec *v, int iovcnt, int i, size_t n)
{
  while (i < iovcnt && n >= v[i].iov_len)
    n -= v[i++].iov_len;
  if (i < iovcnt)
    {
      v[i].iov_base = (char *)v[i].iov_base + n;
      v[i].iov_len -= n;
    }
  return i;
}

/* Write all of iov until done: a short write (a signal, a file system
 * splitting the request) continues where it stopped.  fua: RWF_DSYNC
 * where the kernel has it, else *need_sync is set for the caller's
 * fdatasync.
 */
static int
write_all (struct hostfile *hf, int fd, const struct iovec *iov, int iovcnt,
           uint64_t offset, bool fua, bool *need_sync)
{
  struct iovec local[8];
  struct iovec *v = local;
  int i = 0, r = 0, rwf = 0;

#if defined(HAVE_PWRITEV2) && defined(RWF_DSYNC)
  if (fua && !atomic_load_explicit (&hf->no_rwf_dsync, memory_order_relaxed))
    rwf = RWF_DSYNC;
#endif
  if (fua && rwf == 0)
    *need_sync = true;
  if (iovcnt > 8 && (v = malloc (sizeof *v * iovcnt)) == NULL)
    return -ENOMEM;
  memcpy (v, iov, sizeof *v * iovcnt);
  while (i < iovcnt)
    {
      ssize_t n;

      if (v[i].iov_len == 0)
        {
          i++;
          continue;
        }
#ifdef HAVE_PWRITEV2
      if (iovcnt - i > 1 || rwf)
        n = pwritev2 (fd, &v[i], iovcnt - i, offset, rwf);
      else
#endif
        n = iovcnt - i > 1 ? pwritev (fd, &v[i], iovcnt - i, offset)
                           : pwrite (fd, v[i].iov_base, v[i].iov_len, offset);
      if (n == -1 && errno == EINTR)
        continue;
      if (n == -1 && rwf && hostfile_is_unsupported (errno))
        {
          atomic_store_explicit (&hf->no_rwf_dsync, true, memory_order_relaxed);
          rwf = 0;
          *need_sync = true;
          continue;
        }
      if (n == -1)
        {
          r = -errno;
          break;
        }
      if (n == 0)
        {
          r = -ENOSPC; /* the end of a block device */
          break;
        }
      offset += n;
      i = iov_advance (v, iovcnt, i, n);
    }
  if (v != local)
    free (v);
  return r;
}

/* Where a write has got to in its caller's iovec. */
struct cursor
{
  const struct iovec *iov;
  int iovcnt;
  int i;
  size_t off; /* in iov[i] */
};

/* The next contiguous run of data at the cursor: its start, *n bytes. */
static const char *
cursor_piece (struct cursor *c, size_t *n)
{
  while (c->i < c->iovcnt && c->off == c->iov[c->i].iov_len)
    {
      c->i++;
      c->off = 0;
    }
  if (c->i == c->iovcnt)
    {
      *n = 0;
      return NULL;
    }
  *n = c->iov[c->i].iov_len - c->off;
  return (const char *)c->iov[c->i].iov_base + c->off;
}

/* Copy the next n bytes of data to dst (dst NULL: skip them). */
static void
gather (struct cursor *c, char *dst, size_t n)
{
  while (n > 0)
    {
      size_t k;
      const char *p = cursor_piece (c, &k);

      assert (p != NULL);
      k = MIN (k, n);
      if (dst)
        {
          memcpy (dst, p, k);
          dst += k;
        }
      n -= k;
      c->off += k;
    }
}

/* One write request in O_DIRECT mode. */
struct wreq
{
  struct hostfile *hf;
  struct cursor c;
  bool fua;
  bool need_sync; /* fua without RWF_DSYNC: fdatasync at the end */
  char *bounce;   /* taken on first need, given back at the end */
};

static char *
need_bounce (struct wreq *w)
{
  if (w->bounce == NULL)
    w->bounce = bounce_get ();
  return w->bounce;
}

static int
write_one (struct wreq *w, int fd, const char *buf, size_t n, uint64_t offset)
{
  struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };

  return write_all (w->hf, fd, &iov, 1, offset, w->fua, &w->need_sync);
}

/* Replace n bytes at byte 'skip' of the unit at unit_off by the next n
 * bytes of data, under the unit's lock.
 */
static int
rmw (struct wreq *w, uint64_t unit_off, uint32_t skip, uint32_t n)
{
  struct hostfile *hf = w->hf;
  const uint32_t a = hf->align;
  size_t got;
  int r;

  if (need_bounce (w) == NULL)
    return -ENOMEM;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (
      &hf->sector_locks[(unit_off / a) % HOSTFILE_SECTOR_LOCKS]);
  r = read_upto (hf->fd, w->bounce, a, unit_off, &got);
  if (r == 0 && got < a && !hf->grow)
    r = -EIO; /* a fixed-size file shrank under us */
  if (r != 0)
    return r;
  gather (&w->c, w->bounce + skip, n);
  return write_one (w, hf->fd, w->bounce, a, unit_off);
}

/* Whole units: from the caller's memory if it is aligned, else
 * through the bounce buffer in chunks.
 */
static int
write_body (struct wreq *w, uint64_t offset, uint64_t count)
{
  struct hostfile *hf = w->hf;
  size_t n;
  const char *p = cursor_piece (&w->c, &n);
  int r = 0;

  if (n >= count && IS_ALIGNED ((uintptr_t)p, hf->mem_align))
    {
      gather (&w->c, NULL, count);
      return write_one (w, hf->fd, p, count, offset);
    }
  if (need_bounce (w) == NULL)
    return -ENOMEM;
  while (r == 0 && count > 0)
    {
      n = MIN (count, BOUNCE_SIZE);
      gather (&w->c, w->bounce, n);
      r = write_one (w, hf->fd, w->bounce, n, offset);
      count -= n;
      offset += n;
    }
  return r;
}

/* Any range below tail_start: partial units at either end by rmw. */
static int
dio_write (struct wreq *w, uint64_t offset, uint64_t count)
{
  const uint32_t a = w->hf->align;
  const uint64_t end = offset + count;
  int r = 0;

  if (!IS_ALIGNED (offset, a))
    {
      uint64_t s = ROUND_DOWN (offset, a);
      uint32_t n = MIN (end, s + a) - offset;

      r = rmw (w, s, offset - s, n);
      offset += n;
    }
  if (r == 0 && ROUND_DOWN (end, a) > offset)
    {
      uint64_t n = ROUND_DOWN (end, a) - offset;

      r = write_body (w, offset, n);
      offset += n;
    }
  if (r == 0 && offset < end)
    r = rmw (w, offset, 0, end - offset);
  return r;
}

/* The bytes from tail_start on, through the buffered descriptor. */
static int
write_tail (struct wreq *w, uint64_t offset, uint64_t count)
{
  int r = 0;

  while (r == 0 && count > 0)
    {
      size_t n;
      const char *p = cursor_piece (&w->c, &n);

      n = MIN (n, count);
      r = write_one (w, w->hf->bfd, p, n, offset);
      gather (&w->c, NULL, n);
      count -= n;
      offset += n;
    }
  return r;
}

/* Can iov go to the kernel as it is (every piece whole units, from
 * aligned memory)?  The coalesce filter's buffers are page-aligned;
 * nbdkit's are not.
 */
static bool
dio_aligned (const struct hostfile *hf, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  if (!IS_ALIGNED (offset, hf->align))
    return false;
  for (int i = 0; i < iovcnt; ++i)
    if (!IS_ALIGNED ((uintptr_t)iov[i].iov_base, hf->mem_align)
        || !IS_ALIGNED (iov[i].iov_len, hf->align))
      return false;
  return true;
}

int
hostfile_pwritev (struct hostfile *hf, const struct iovec *iov, int iovcnt,
                  uint64_t offset, bool fua)
{
  struct wreq w
      = { .hf = hf, .c = { .iov = iov, .iovcnt = iovcnt }, .fua = fua };
  uint64_t count = 0, end, tail;
  int r = 0;

  for (int i = 0; i < iovcnt; ++i)
    count += iov[i].iov_len;
  end = offset + count;
  tail = hostfile_tail_start (hf);
  if (!hf->direct || (end <= tail && dio_aligned (hf, iov, iovcnt, offset)))
    r = write_all (hf, hf->fd, iov, iovcnt, offset, fua, &w.need_sync);
  else
    {
      if (offset < tail)
        {
          uint64_t n = MIN (end, tail) - offset;

          r = dio_write (&w, offset, n);
          offset += n;
        }
      if (r == 0 && offset < end)
        r = write_tail (&w, offset, end - offset);
      bounce_put (w.bounce);
    }
  if (r == 0 && w.need_sync && fdatasync (hf->fd) == -1)
    r = -errno;
  return r;
}

int
hostfile_pwrite (struct hostfile *hf, const void *buf, size_t count,
                 uint64_t offset, bool fua)
{
  struct iovec iov = { .iov_base = (void *)buf, .iov_len = count };

  return hostfile_pwritev (hf, &iov, 1, offset, fua);
}

int
hostfile_write_zeroes (struct hostfile *hf, uint64_t count, uint64_t offset)
{
  while (count > 0)
    {
      uint32_t n = MIN (count, ZERO_BUF_SIZE);
      int r = hostfile_pwrite (hf, zero_buf, n, offset, false);

      if (r < 0)
        return r;
      count -= n;
      offset += n;
    }
  return 0;
}

/* O_DIRECT read of any range below tail_start: straight into buf when
 * all is aligned, else whole units through the bounce buffer, a chunk
 * at a time, each chunk one read.
 */
static int
dio_pread (struct hostfile *hf, char *buf, size_t count, uint64_t offset)
{
  const uint32_t a = hf->align;
  const uint64_t end = offset + count;
  uint64_t s = ROUND_DOWN (offset, a);
  const uint64_t e = ROUND_UP (end, a);
  size_t got;
  char *b;
  int r = 0;

  if (s == offset && e == end && IS_ALIGNED ((uintptr_t)buf, hf->mem_align))
    return read_full (hf->fd, buf, count, offset);
  b = bounce_get ();
  if (b == NULL)
    return -ENOMEM;
  while (r == 0 && s < e)
    {
      uint64_t ce = e - s < BOUNCE_SIZE ? e : s + BOUNCE_SIZE;
      uint64_t ds = MAX (s, offset), de = MIN (ce, end);

      r = read_upto (hf->fd, b, ce - s, s, &got);
      if (r == 0 && got < de - s)
        r = -EIO; /* callers never read past the end */
      if (r == 0)
        memcpy (buf, b + (ds - s), de - ds);
      buf += de - ds;
      s = ce;
    }
  bounce_put (b);
  return r;
}

int
hostfile_pread (struct hostfile *hf, void *buf, size_t count, uint64_t offset)
{
  char *p = buf;
  uint64_t tail;

  if (count == 0)
    return 0;
  if (!hf->direct)
    return read_full (hf->fd, buf, count, offset);
  tail = hostfile_tail_start (hf);
  if (offset < tail)
    {
      size_t n = MIN (offset + count, tail) - offset;
      int r = dio_pread (hf, p, n, offset);

      if (r < 0)
        return r;
      p += n;
      offset += n;
      count -= n;
    }
  if (count > 0)
    return read_full (hf->bfd, p, count, offset);
  return 0;
}

int
hostfile_flush (struct hostfile *hf)
{
  return fdatasync (hf->fd) == -1 ? -errno : 0;
}
