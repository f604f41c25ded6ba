/* nbdstack image plugin: raw files and block devices.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One fd (plus a buffered one for an unaligned tail with cache=none, see
 * raw-io.c) is shared by every connection and thread: pread/pwrite,
 * fallocate and the block-device ioctls are all safe to call
 * concurrently on one fd, so the data path takes no lock.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifdef HAVE_LINUX_FS_H
#include <linux/fs.h>
#endif
#ifdef HAVE_LINUX_FALLOC_H
#include <linux/falloc.h>
#endif

#include "align.h"
#include "raw.h"

/* -D image.slowzero=1: behave as if the kernel refused every fast way of
 * zeroing and trimming (fallocate, BLKZEROOUT, BLKDISCARD), as on a
 * filesystem without them.  Lets the tests reach the FAST_ZERO refusal
 * and the write-zeroes fallback on any machine.
 */
NBDKIT_DLL_PUBLIC int image_debug_slowzero = 0;

/* Set errno from a failed call, log it, and give nbdkit the errno. */
static int
fail (const char *what)
{
  int err = errno;

  nbdkit_error ("%s: %m", what);
  nbdkit_set_error (err);
  return -1;
}

/* Block devices: does the device zero natively (so BLKZEROOUT is fast)?
 * A partition's sysfs directory has no queue/, its parent disk's has.
 */
static bool
blk_zeroes_natively (dev_t rdev)
{
  static const char *const paths[] = {
    "/sys/dev/block/%u:%u/queue/write_zeroes_max_bytes",
    "/sys/dev/block/%u:%u/../queue/write_zeroes_max_bytes",
  };
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i)
    {
      char path[128];
      unsigned long long v;
      FILE *fp;
      int n;

      snprintf (path, sizeof path, paths[i], major (rdev), minor (rdev));
      fp = fopen (path, "re");
      if (fp == NULL)
        continue;
      n = fscanf (fp, "%llu", &v);
      fclose (fp);
      if (n == 1)
        return v > 0;
    }
  return false;
}

/* cache=none: the offset/length and memory alignment O_DIRECT needs. */
static int
direct_alignment (struct raw *raw, const char *file)
{
#ifdef STATX_DIOALIGN
  struct statx stx;

  if (statx (raw->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0
      && (stx.stx_mask & STATX_DIOALIGN))
    {
      if (stx.stx_dio_offset_align == 0)
        {
          nbdkit_error ("%s: cache=none: O_DIRECT is not supported for this "
                        "file (use cache=writeback)",
                        file);
          return -1;
        }
      raw->align = MAX (stx.stx_dio_offset_align, raw->sector);
      raw->mem_align = MAX (stx.stx_dio_mem_align, 1);
      goto check;
    }
#endif
  /* Without statx: a block device needs its logical sector; a file the
   * sector of a device we cannot see, so take the largest usual one.
   */
  raw->align = raw->is_blkdev ? raw->sector : 4096;
  raw->mem_align = raw->align;

check:
  if (!is_power_of_2 (raw->align) || raw->align > RAW_MAX_ALIGN
      || !is_power_of_2 (raw->mem_align) || raw->mem_align > RAW_MAX_ALIGN)
    {
      nbdkit_error ("%s: cache=none: unsupported O_DIRECT alignment "
                    "(offset %" PRIu32 ", memory %" PRIu32 ")",
                    file, raw->align, raw->mem_align);
      return -1;
    }
  return 0;
}

static void raw_close (void *state);

/* The current size of the open file or device, checked against the
 * largest size served; sets raw->size and raw->tail_start.  0, or -1
 * after nbdkit_error.
 */
static int
take_size (struct raw *raw)
{
  int64_t size, tail;

  if (raw->is_blkdev)
    {
      uint64_t bytes;
      if (ioctl (raw->fd, BLKGETSIZE64, &bytes) == -1)
        {
          nbdkit_error ("%s: block device size (ioctl BLKGETSIZE64) "
                        "not supported: %m",
                        raw->file);
          return -1;
        }
      if (bytes > INT64_MAX)
        bytes = INT64_MAX;
      size = bytes;
    }
  else
    {
      struct stat st;
      if (fstat (raw->fd, &st) == -1)
        {
          nbdkit_error ("%s: fstat: %m", raw->file);
          return -1;
        }
      size = st.st_size;
    }
  if (size > INT64_MAX - 2 * RAW_MAX_ALIGN)
    {
      nbdkit_error ("%s: size too large", raw->file);
      return -1;
    }
  tail = size;
  if (raw->direct && !IS_ALIGNED (size, raw->align))
    tail
        = ROUND_DOWN (size, MAX ((uint64_t)sysconf (_SC_PAGESIZE), raw->align));
  atomic_store_explicit (&raw->size, size, memory_order_relaxed);
  atomic_store_explicit (&raw->tail_start, tail, memory_order_relaxed);
  return 0;
}

static void *
raw_open (const struct image_options *opts)
{
  struct raw *raw;
  struct stat st;
  int dflag = opts->cache == CACHE_NONE ? O_DIRECT : 0;

  raw = calloc (1, sizeof *raw);
  if (raw == NULL)
    {
      nbdkit_error ("calloc: %m");
      return NULL;
    }
  raw->fd = raw->bfd = -1;
  raw->direct = opts->cache == CACHE_NONE;
  raw->sector = 1;
  raw->align = raw->mem_align = 1;
  for (size_t i = 0; i < RAW_SECTOR_LOCKS; ++i)
    pthread_mutex_init (&raw->sector_locks[i], NULL);

  if (!opts->readonly)
    {
      raw->fd = open (opts->file, O_RDWR | O_CLOEXEC | dflag);
      raw->writable = raw->fd >= 0;
      /* A file we may only read is opened read-only, and every
       * connection that is not read-only is refused (image_open), as
       * qemu-nbd refuses it without -r: never a read-only export in
       * place of the writable one asked for.
       */
      if (raw->fd == -1
          && (errno == EACCES || errno == EROFS || errno == EPERM))
        image_note_unwritable (opts->file, errno);
      else if (raw->fd == -1)
        goto open_error;
    }
  if (raw->fd == -1)
    raw->fd = open (opts->file, O_RDONLY | O_CLOEXEC | dflag);
  if (raw->fd == -1)
    {
    open_error:
      if (errno == EINVAL && dflag)
        nbdkit_error ("%s: cache=none: this filesystem does not support "
                      "O_DIRECT (use cache=writeback)",
                      opts->file);
      else
        nbdkit_error ("%s: cannot open: %m", opts->file);
      goto err;
    }
  if (fstat (raw->fd, &st) == -1)
    {
      nbdkit_error ("%s: fstat: %m", opts->file);
      goto err;
    }

  raw->file = opts->file;
  if (S_ISBLK (st.st_mode))
    {
      int sector;

      raw->is_blkdev = true;
      if (ioctl (raw->fd, BLKSSZGET, &sector) == -1)
        {
          nbdkit_error ("%s: block device sector size (ioctl BLKSSZGET) "
                        "not supported: %m",
                        opts->file);
          goto err;
        }
      if (sector < 512 || sector > RAW_MAX_ALIGN || !is_power_of_2 (sector))
        {
          nbdkit_error ("%s: unsupported logical sector size %d", opts->file,
                        sector);
          goto err;
        }
      raw->sector = sector;
      raw->blk_zeroes_fast = blk_zeroes_natively (st.st_rdev);
    }
  else if (!S_ISREG (st.st_mode))
    {
      nbdkit_error ("%s: not a regular file or block device", opts->file);
      goto err;
    }

  if (raw->direct)
    {
      if (direct_alignment (raw, opts->file) == -1)
        goto err;
      /* A block device's size is whole sectors; a file's may become
       * unaligned at any connection.
       */
      if (!raw->is_blkdev)
        {
          raw->bfd = open (opts->file,
                           (raw->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
          if (raw->bfd == -1)
            {
              nbdkit_error ("%s: cannot open: %m", opts->file);
              goto err;
            }
        }
    }
  else if (raw->is_blkdev)
    /* Buffered block devices take any offset, but zero and trim have
     * to split at sectors for the ioctls.
     */
    raw->align = raw->sector;

  if (take_size (raw) == -1)
    goto err;
  raw->preferred = MAX (4096u, raw->align);
  if (image_debug_slowzero)
    {
      raw->no_zero_range = raw->no_punch_hole = true;
      raw->no_blkzeroout = raw->no_blkdiscard = true;
      raw->blk_zeroes_fast = false;
    }
  nbdkit_debug ("raw: %s: size %" PRIi64 " %s%s align %" PRIu32
                " mem_align %" PRIu32 "%s",
                opts->file, (int64_t)raw->size,
                raw->is_blkdev ? "block device" : "file",
                raw->direct ? " O_DIRECT" : "", raw->align, raw->mem_align,
                raw->blk_zeroes_fast ? " fast-zero" : "");
  return raw;

err:
  raw_close (raw);
  return NULL;
}

static void
raw_close (void *state)
{
  struct raw *raw = state;

  if (raw->fd >= 0)
    close (raw->fd);
  if (raw->bfd >= 0)
    close (raw->bfd);
  for (size_t i = 0; i < RAW_SECTOR_LOCKS; ++i)
    pthread_mutex_destroy (&raw->sector_locks[i]);
  free (raw);
}

/* nbdkit asks once per connection, as the connection opens: the size
 * is taken from the file or device then, so a connection sees the file
 * as it is when it connects (nbdkit's file plugin does the same).
 */
static int64_t
raw_get_size (void *state)
{
  struct raw *raw = state;

  if (take_size (raw) == -1)
    return -1;
  return atomic_load_explicit (&raw->size, memory_order_relaxed);
}

static int
raw_can_write (void *state)
{
  struct raw *raw = state;

  return raw->writable;
}

static int
raw_can_flush (void *state)
{
  return 1;
}

/* Zero and trim work on every file and device: what the kernel refuses
 * is emulated (zero) or skipped (trim is only advisory).
 */
static int
raw_can_trim (void *state)
{
  struct raw *raw = state;

  return raw->writable;
}

static int
raw_can_zero (void *state)
{
  struct raw *raw = state;

  return raw->writable;
}

/* raw_zero fails FAST_ZERO requests with ENOTSUP whenever only the slow
 * path is left, so advertising it is always truthful.
 */
static int
raw_can_fast_zero (void *state)
{
  struct raw *raw = state;

  return raw->writable;
}

static int
raw_can_fua (void *state)
{
  struct raw *raw = state;

  return raw->writable ? NBDKIT_FUA_NATIVE : NBDKIT_FUA_NONE;
}

/* SEEK_DATA/SEEK_HOLE only mean something for files. */
static int
raw_can_extents (void *state)
{
  struct raw *raw = state;

  return !raw->is_blkdev;
}

static int
raw_can_cache (void *state)
{
  struct raw *raw = state;

  /* Read-ahead into a page cache that O_DIRECT bypasses is useless. */
  return raw->direct ? NBDKIT_CACHE_NONE : NBDKIT_CACHE_NATIVE;
}

static int
raw_block_size (void *state, uint32_t *minimum, uint32_t *preferred,
                uint32_t *maximum)
{
  struct raw *raw = state;

  /* Unaligned requests work in every mode (with O_DIRECT through bounce
   * buffers and a read-modify-write of the partial sectors), so the
   * minimum is 1.  Advertising the O_DIRECT alignment as the minimum
   * would make strict clients (libnbd's default: nbdsh, nbdcopy) refuse
   * every unaligned request themselves, and the unaligned tail of a
   * file whose size is not a multiple of it could not be reached at all.
   * The alignment's cost is what the preferred size is for.  The
   * maximum is what nbdkit accepts in one read or write (its
   * MAX_REQUEST_SIZE): strict clients split larger ones themselves
   * instead of having them refused.
   */
  *minimum = 1;
  *preferred = raw->preferred;
  *maximum = 64 * 1024 * 1024;
  return 0;
}

static int
raw_pread (void *state, void *buf, uint32_t count, uint64_t offset,
           uint32_t flags)
{
  struct raw *raw = state;

  if (raw_read_bytes (raw, buf, count, offset) == -1)
    return fail ("pread");
  return 0;
}

static int
raw_pwrite (void *state, const void *buf, uint32_t count, uint64_t offset,
            uint32_t flags)
{
  struct raw *raw = state;

  if (raw_write_bytes (raw, buf, count, offset, flags & NBDKIT_FLAG_FUA) == -1)
    return fail ("pwrite");
  return 0;
}

static int
raw_flush (void *state, uint32_t flags)
{
  struct raw *raw = state;

  if (fdatasync (raw->fd) == -1)
    return fail ("fdatasync");
  return 0;
}

/* fallocate that records "unsupported" in *refused.  Returns 0 on
 * success, 1 if unsupported, -1 on other errors (errno set).
 */
static int
try_fallocate (struct raw *raw, atomic_bool *refused, int mode, uint64_t offset,
               uint64_t len)
{
  if (atomic_load_explicit (refused, memory_order_relaxed))
    return 1;
  if (fallocate (raw->fd, mode, offset, len) == 0)
    return 0;
  if (raw_is_unsupported (errno))
    {
      atomic_store_explicit (refused, true, memory_order_relaxed);
      return 1;
    }
  return -1;
}

static int
try_blkioctl (struct raw *raw, atomic_bool *refused, unsigned long req,
              uint64_t offset, uint64_t len)
{
  uint64_t range[2] = { offset, len };

  if (atomic_load_explicit (refused, memory_order_relaxed))
    return 1;
  if (ioctl (raw->fd, req, range) == 0)
    return 0;
  if (raw_is_unsupported (errno))
    {
      atomic_store_explicit (refused, true, memory_order_relaxed);
      return 1;
    }
  return -1;
}

/* Zero [offset, offset+len) of a regular file with fallocate, or with
 * writes unless FAST_ZERO.  In cache=none mode the range is aligned.
 */
static int
zero_file (struct raw *raw, uint64_t offset, uint64_t len, uint32_t flags)
{
  const int keep = FALLOC_FL_KEEP_SIZE;
  int r;

  if (flags & NBDKIT_FLAG_MAY_TRIM)
    {
      r = try_fallocate (raw, &raw->no_punch_hole, FALLOC_FL_PUNCH_HOLE | keep,
                         offset, len);
      if (r <= 0)
        return r;
    }
  r = try_fallocate (raw, &raw->no_zero_range, FALLOC_FL_ZERO_RANGE | keep,
                     offset, len);
  if (r <= 0)
    return r;
  if (!(flags & NBDKIT_FLAG_MAY_TRIM))
    {
      /* No ZERO_RANGE here: punch, then allocate again because the
       * client asked for no hole.  A failed re-allocation still reads as
       * zeroes, so it is not an error.
       */
      r = try_fallocate (raw, &raw->no_punch_hole, FALLOC_FL_PUNCH_HOLE | keep,
                         offset, len);
      if (r == -1)
        return -1;
      if (r == 0)
        {
          if (fallocate (raw->fd, keep, offset, len) == -1)
            nbdkit_debug ("zero: re-allocating after punch: %m");
          return 0;
        }
    }
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    {
      errno = ENOTSUP;
      return -1;
    }
  return raw_write_zeroes (raw, len, offset, false);
}

/* Zero a sector-aligned range of a block device. */
static int
zero_blkdev (struct raw *raw, uint64_t offset, uint64_t len, uint32_t flags)
{
  int r;

  if (flags & NBDKIT_FLAG_MAY_TRIM)
    {
      /* On a block device this is "zero, unmapping if the device can,
       * and never fall back to writing", so it is always fast.
       */
      r = try_fallocate (raw, &raw->no_punch_hole,
                         FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                         len);
      if (r <= 0)
        return r;
    }
  /* BLKZEROOUT falls back to writing zero pages in the kernel when the
   * device cannot zero by itself.
   */
  if ((flags & NBDKIT_FLAG_FAST_ZERO) && !raw->blk_zeroes_fast)
    {
      errno = ENOTSUP;
      return -1;
    }
  r = try_blkioctl (raw, &raw->no_blkzeroout, BLKZEROOUT, offset, len);
  if (r <= 0)
    return r;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    {
      errno = ENOTSUP;
      return -1;
    }
  return raw_write_zeroes (raw, len, offset, false);
}

static int
raw_zero (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  uint64_t end = offset + count;
  bool fua = flags & NBDKIT_FLAG_FUA;
  int r;

  if (!raw->is_blkdev && !raw->direct)
    /* Buffered file: fallocate takes any byte range. */
    r = zero_file (raw, offset, count, flags);
  else
    {
      /* Sector-aligned middle by fallocate/ioctl; partial sectors (and a
       * cache=none file's unaligned tail) are written as zeroes, through
       * the locked read-modify-write path.  The middle goes first so that
       * a refused FAST_ZERO has not written anything.
       */
      uint64_t m0 = ROUND_UP (offset, raw->align);
      uint64_t m1 = ROUND_DOWN (MIN (end, raw_tail_start (raw)), raw->align);

      if (m0 < m1)
        {
          r = raw->is_blkdev ? zero_blkdev (raw, m0, m1 - m0, flags)
                             : zero_file (raw, m0, m1 - m0, flags);
          if (r == 0 && offset < m0)
            r = raw_write_zeroes (raw, m0 - offset, offset, false);
          if (r == 0 && m1 < end)
            r = raw_write_zeroes (raw, end - m1, m1, false);
        }
      else
        /* Less than one aligned sector: always cheap to write. */
        r = raw_write_zeroes (raw, count, offset, false);
    }
  if (r == 0 && fua && fdatasync (raw->fd) == -1)
    r = -1;
  if (r == -1)
    {
      if (errno == ENOTSUP && (flags & NBDKIT_FLAG_FAST_ZERO))
        {
          /* Expected answer to FAST_ZERO, not worth a log line. */
          nbdkit_set_error (ENOTSUP);
          return -1;
        }
      return fail ("zero");
    }
  return 0;
}

static int
raw_trim (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  uint64_t m0 = offset, m1 = offset + count;
  int r = 0;

  /* Only whole sectors can be discarded by ioctl or O_DIRECT-safely
   * punched; trim is advisory, so partial sectors are left alone.
   */
  if (raw->is_blkdev || raw->direct)
    {
      m0 = ROUND_UP (m0, raw->align);
      m1 = ROUND_DOWN (MIN (m1, raw_tail_start (raw)), raw->align);
    }
  if (m0 < m1)
    {
      if (raw->is_blkdev)
        r = try_blkioctl (raw, &raw->no_blkdiscard, BLKDISCARD, m0, m1 - m0);
      else
        r = try_fallocate (raw, &raw->no_punch_hole,
                           FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, m0,
                           m1 - m0);
    }
  if (r == -1)
    return fail ("trim");
  if ((flags & NBDKIT_FLAG_FUA) && fdatasync (raw->fd) == -1)
    return fail ("trim: fdatasync");
  return 0;
}

/* SEEK_DATA/SEEK_HOLE, reporting only [offset, offset+count). */
static int
raw_extents (void *state, uint32_t count, uint64_t offset, uint32_t flags,
             struct nbdkit_extents *extents)
{
  struct raw *raw = state;
  const bool req_one = flags & NBDKIT_FLAG_REQ_ONE;
  uint64_t pos = offset, end = offset + count;

  while (pos < end)
    {
      off_t data, hole;

      data = lseek (raw->fd, pos, SEEK_DATA);
      if (data == -1)
        {
          if (errno != ENXIO)
            return fail ("lseek SEEK_DATA");
          /* No data after pos: a hole to the end. */
          data = end;
        }
      if ((uint64_t)data > pos)
        {
          uint64_t n = MIN ((uint64_t)data, end) - pos;
          if (nbdkit_add_extent (extents, pos, n,
                                 NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO)
              == -1)
            return -1;
          pos += n;
          if (req_one || pos >= end)
            break;
        }
      hole = lseek (raw->fd, pos, SEEK_HOLE);
      if (hole == -1)
        return fail ("lseek SEEK_HOLE");
      if ((uint64_t)hole <= pos)
        {
          /* The file changed under us (truncated?); report data. */
          hole = end;
        }
      {
        uint64_t n = MIN ((uint64_t)hole, end) - pos;
        if (nbdkit_add_extent (extents, pos, n, 0) == -1)
          return -1;
        pos += n;
      }
      if (req_one)
        break;
    }
  return 0;
}

static int
raw_cache (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  int err;

  if (raw->direct)
    return 0;
  err = posix_fadvise (raw->fd, offset, count, POSIX_FADV_WILLNEED);
  if (err)
    {
      errno = err;
      return fail ("posix_fadvise");
    }
  return 0;
}

const struct format_ops raw_format = {
  .name = "raw",
  .open = raw_open,
  .close = raw_close,
  .get_size = raw_get_size,
  .can_write = raw_can_write,
  .can_flush = raw_can_flush,
  .can_trim = raw_can_trim,
  .can_zero = raw_can_zero,
  .can_fast_zero = raw_can_fast_zero,
  .can_fua = raw_can_fua,
  .can_extents = raw_can_extents,
  .can_cache = raw_can_cache,
  .block_size = raw_block_size,
  .pread = raw_pread,
  .pwrite = raw_pwrite,
  .flush = raw_flush,
  .trim = raw_trim,
  .zero = raw_zero,
  .extents = raw_extents,
  .cache = raw_cache,
};
