/* nbdstack image plugin: byte-exact reads and writes for the raw format.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * With cache=writeback the page cache takes any offset and length, so a
 * request is one pread/pwrite loop.  With cache=none the fd is O_DIRECT,
 * which needs offset, length and buffer address aligned:
 *
 *  - aligned requests from aligned buffers go straight to the kernel;
 *  - aligned requests from unaligned buffers are copied through a
 *    bounce buffer from the shared pool (bounce.h; nbdkit's buffers are
 *    not aligned), in chunks of its size;
 *  - a partial sector (here: a unit of the O_DIRECT alignment,
 *    raw->align, the larger of the device's logical sector and what the
 *    file system asks for) at either end of a request is read, patched and
 *    written back under a lock chosen by sector number, so two requests
 *    touching different bytes of one sector cannot undo each other.  Only
 *    those edges take a lock; the aligned body of a request never does.
 *    (Requests whose bytes overlap have no defined result in NBD, so the
 *    lock only has to protect bytes the request does not own.)
 *  - a file whose size is not a multiple of the alignment cannot be
 *    written with O_DIRECT in its last partial sector without growing
 *    the file, so the last page(s) go through a second, buffered fd
 *    (raw->bfd).  No O_DIRECT request ever touches those pages, which
 *    keeps the page cache and direct I/O from colliding.
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
#include "raw.h"

/* Bounce buffers come from the shared pool (bounce.c); larger requests
 * are copied through one in chunks.  One sector of any alignment raw.c
 * accepts (at most RAW_MAX_ALIGN, 4 KiB) fits, and the buffer's own
 * alignment satisfies any memory alignment it accepts.
 */
static_assert (BOUNCE_SIZE >= RAW_MAX_ALIGN && BOUNCE_ALIGN >= RAW_MAX_ALIGN
                   && BOUNCE_SIZE % RAW_MAX_ALIGN == 0,
               "bounce buffer too small for the largest O_DIRECT alignment");

/* Source of zeroes for the slow zero path and for zeroing partial
 * sectors.  Never written; in .bss so it costs no file or RAM pages.
 */
#define ZERO_BUF_SIZE (1024 * 1024)
static char zero_buf[ZERO_BUF_SIZE] __attribute__ ((aligned (BOUNCE_ALIGN)));

/* A request takes at most one pool buffer, on first need, and gives it
 * back when it is done (bounce_put (NULL) is a no-op).
 */
static char *
need_bounce (char **bounce)
{
  if (*bounce == NULL)
    *bounce = bounce_get ();
  return *bounce;
}

/* Read exactly count bytes.  Reaching end of file is an error (EIO):
 * callers never read past the size they serve.
 */
static int
full_pread (int fd, void *buf, size_t count, uint64_t offset)
{
  char *p = buf;

  while (count > 0)
    {
      ssize_t r = pread (fd, p, count, offset);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -1;
        }
      if (r == 0)
        {
          errno = EIO;
          return -1;
        }
      p += r;
      count -= r;
      offset += r;
    }
  return 0;
}

/* Write exactly count bytes.  fua: per-write O_DSYNC (RWF_DSYNC) where
 * the kernel has it, else fdatasync afterwards.
 */
static int
full_pwrite (struct raw *raw, int fd, const void *buf, size_t count,
             uint64_t offset, bool fua)
{
  const char *p = buf;
  bool dsync = false;

#if defined(HAVE_PWRITEV2) && defined(RWF_DSYNC)
  dsync
      = fua && !atomic_load_explicit (&raw->no_rwf_dsync, memory_order_relaxed);
#endif

  while (count > 0)
    {
      ssize_t r;

#if defined(HAVE_PWRITEV2) && defined(RWF_DSYNC)
      if (dsync)
        {
          struct iovec iov = { .iov_base = (void *)p, .iov_len = count };
          r = pwritev2 (fd, &iov, 1, offset, RWF_DSYNC);
          if (r == -1 && raw_is_unsupported (errno))
            {
              atomic_store_explicit (&raw->no_rwf_dsync, true,
                                     memory_order_relaxed);
              dsync = false;
              continue;
            }
        }
      else
#endif
        r = pwrite (fd, p, count, offset);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -1;
        }
      p += r;
      count -= r;
      offset += r;
    }
  if (fua && !dsync && fdatasync (fd) == -1)
    return -1;
  return 0;
}

static inline bool
ptr_aligned (const struct raw *raw, const void *p)
{
  return IS_ALIGNED ((uintptr_t)p, raw->mem_align);
}

/* O_DIRECT read of whole sectors (offset and count aligned). */
static int
dio_read_aligned (struct raw *raw, char *buf, uint32_t count, uint64_t offset,
                  char **bounce)
{
  if (ptr_aligned (raw, buf))
    return full_pread (raw->fd, buf, count, offset);

  if (need_bounce (bounce) == NULL)
    return -1;
  while (count > 0)
    {
      uint32_t n = MIN (count, BOUNCE_SIZE);
      if (full_pread (raw->fd, *bounce, n, offset) == -1)
        return -1;
      memcpy (buf, *bounce, n);
      buf += n;
      count -= n;
      offset += n;
    }
  return 0;
}

/* O_DIRECT read of any range inside [0, tail_start). */
static int
dio_read (struct raw *raw, char *buf, uint32_t count, uint64_t offset,
          char **bounce)
{
  const uint32_t a = raw->align;
  uint64_t end = offset + count;

  if (IS_ALIGNED (offset, a) && IS_ALIGNED (end, a))
    return dio_read_aligned (raw, buf, count, offset, bounce);

  if (need_bounce (bounce) == NULL)
    return -1;

  if (!IS_ALIGNED (offset, a))
    {
      uint64_t s = ROUND_DOWN (offset, a);
      uint32_t n = MIN (end, s + a) - offset;

      if (full_pread (raw->fd, *bounce, a, s) == -1)
        return -1;
      memcpy (buf, *bounce + (offset - s), n);
      buf += n;
      offset += n;
      count -= n;
    }
  if (ROUND_DOWN (end, a) > offset)
    {
      uint32_t n = ROUND_DOWN (end, a) - offset;

      if (dio_read_aligned (raw, buf, n, offset, bounce) == -1)
        return -1;
      buf += n;
      offset += n;
      count -= n;
    }
  if (count > 0)
    {
      if (full_pread (raw->fd, *bounce, a, offset) == -1)
        return -1;
      memcpy (buf, *bounce, count);
    }
  return 0;
}

/* O_DIRECT write of whole sectors (offset and count aligned). */
static int
dio_write_aligned (struct raw *raw, const char *buf, uint32_t count,
                   uint64_t offset, bool fua, char **bounce)
{
  if (ptr_aligned (raw, buf))
    return full_pwrite (raw, raw->fd, buf, count, offset, fua);

  if (need_bounce (bounce) == NULL)
    return -1;
  while (count > 0)
    {
      uint32_t n = MIN (count, BOUNCE_SIZE);
      memcpy (*bounce, buf, n);
      if (full_pwrite (raw, raw->fd, *bounce, n, offset, fua) == -1)
        return -1;
      buf += n;
      count -= n;
      offset += n;
    }
  return 0;
}

/* Replace n bytes at byte 'skip' of the sector at 'sector_off' by src. */
static int
dio_rmw (struct raw *raw, uint64_t sector_off, const char *src, uint32_t skip,
         uint32_t n, bool fua, char **bounce)
{
  const uint32_t a = raw->align;
  pthread_mutex_t *lock
      = &raw->sector_locks[(sector_off / a) % RAW_SECTOR_LOCKS];
  int r, err;

  if (need_bounce (bounce) == NULL)
    return -1;
  pthread_mutex_lock (lock);
  r = full_pread (raw->fd, *bounce, a, sector_off);
  if (r == 0)
    {
      memcpy (*bounce + skip, src, n);
      r = full_pwrite (raw, raw->fd, *bounce, a, sector_off, fua);
    }
  err = errno;
  pthread_mutex_unlock (lock);
  errno = err;
  return r;
}

/* O_DIRECT write of any range inside [0, tail_start). */
static int
dio_write (struct raw *raw, const char *buf, uint32_t count, uint64_t offset,
           bool fua, char **bounce)
{
  const uint32_t a = raw->align;
  uint64_t end = offset + count;

  if (!IS_ALIGNED (offset, a))
    {
      uint64_t s = ROUND_DOWN (offset, a);
      uint32_t n = MIN (end, s + a) - offset;

      if (dio_rmw (raw, s, buf, offset - s, n, fua, bounce) == -1)
        return -1;
      buf += n;
      offset += n;
      count -= n;
    }
  if (ROUND_DOWN (end, a) > offset)
    {
      uint32_t n = ROUND_DOWN (end, a) - offset;

      if (dio_write_aligned (raw, buf, n, offset, fua, bounce) == -1)
        return -1;
      buf += n;
      offset += n;
      count -= n;
    }
  if (count > 0)
    return dio_rmw (raw, offset, buf, 0, count, fua, bounce);
  return 0;
}

/* The pool buffer a request took goes back, errno kept. */
static int
put_bounce (char *bounce, int r)
{
  int err = errno;

  bounce_put (bounce);
  errno = err;
  return r;
}

int
raw_read_bytes (struct raw *raw, void *buf, uint32_t count, uint64_t offset)
{
  char *p = buf;
  uint64_t tail;

  if (!raw->direct)
    return full_pread (raw->fd, buf, count, offset);
  tail = raw_tail_start (raw);

  if (offset < tail)
    {
      uint32_t n = MIN (offset + count, tail) - offset;
      char *bounce = NULL;
      int r = dio_read (raw, p, n, offset, &bounce);
      if (put_bounce (bounce, r) == -1)
        return -1;
      p += n;
      offset += n;
      count -= n;
    }
  if (count > 0)
    return full_pread (raw->bfd, p, count, offset);
  return 0;
}

int
raw_write_bytes (struct raw *raw, const void *buf, uint32_t count,
                 uint64_t offset, bool fua)
{
  const char *p = buf;
  uint64_t tail;

  if (!raw->direct)
    return full_pwrite (raw, raw->fd, buf, count, offset, fua);
  tail = raw_tail_start (raw);

  if (offset < tail)
    {
      uint32_t n = MIN (offset + count, tail) - offset;
      char *bounce = NULL;
      int r = dio_write (raw, p, n, offset, fua, &bounce);
      if (put_bounce (bounce, r) == -1)
        return -1;
      p += n;
      offset += n;
      count -= n;
    }
  if (count > 0)
    return full_pwrite (raw, raw->bfd, p, count, offset, fua);
  return 0;
}

int
raw_write_zeroes (struct raw *raw, uint64_t count, uint64_t offset, bool fua)
{
  while (count > 0)
    {
      uint32_t n = MIN (count, ZERO_BUF_SIZE);
      if (raw_write_bytes (raw, zero_buf, n, offset, false) == -1)
        return -1;
      count -= n;
      offset += n;
    }
  if (fua && fdatasync (raw->fd) == -1)
    return -1;
  return 0;
}
