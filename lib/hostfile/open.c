/* nbdstack host-file layer: opening, alignment discovery, size, close.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a hostfile that open or adopt returns is a regular file or
 * a block device whose O_DIRECT alignment (when direct) is a power of 2
 * of at most HOSTFILE_MAX_ALIGN, with its tail descriptor open whenever
 * a later size could leave an unaligned tail (direct, a file, and not
 * HOSTFILE_GROW).  Nothing here does I/O on the file's data.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
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

#include "align.h"
#include "hostfile.h"

static struct hostfile *fail (struct hostfile *hf, struct hostfile_error *err,
                              int errnum, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

/* Fill *err (errno as errnum, for %m in fmt), close hf, return NULL. */
static struct hostfile *
fail (struct hostfile *hf, struct hostfile_error *err, int errnum,
      const char *fmt, ...)
{
  va_list ap;

  err->errnum = errnum;
  err->open_failed = false;
  errno = errnum;
  va_start (ap, fmt);
  vsnprintf (err->msg, sizeof err->msg, fmt, ap);
  va_end (ap);
  hostfile_close (hf);
  return NULL;
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

/* O_DIRECT: the offset/length and memory alignment it needs.  0, or
 * -1 with the reason in *why.
 */
static int
direct_alignment (struct hostfile *hf, const char **why)
{
#ifdef STATX_DIOALIGN
  struct statx stx;

  if (statx (hf->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0
      && (stx.stx_mask & STATX_DIOALIGN))
    {
      if (stx.stx_dio_offset_align == 0)
        {
          *why = "unsupported";
          return -1;
        }
      hf->align = MAX (stx.stx_dio_offset_align, hf->sector);
      hf->mem_align = MAX (stx.stx_dio_mem_align, 1);
      goto check;
    }
#endif
  /* Without statx: a block device needs its logical sector; a file the
   * sector of a device we cannot see, so take the largest usual one.
   */
  hf->align = hf->is_blkdev ? hf->sector : 4096;
  hf->mem_align = hf->align;

check:
  if (!is_power_of_2 (hf->align) || hf->align > HOSTFILE_MAX_ALIGN
      || !is_power_of_2 (hf->mem_align) || hf->mem_align > HOSTFILE_MAX_ALIGN)
    {
      *why = "alignment";
      return -1;
    }
  return 0;
}

/* The file system's limit on this file's size, found without changing
 * anything: lseek past it fails with EINVAL (the kernel checks offsets
 * against the superblock's s_maxbytes), so bisect over the offsets.
 * 0 when lseek does not tell (every offset accepted).
 */
static uint64_t
find_max_size (int fd)
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

/* A block device's logical sector and zeroing speed. */
static struct hostfile *
probe_blkdev (struct hostfile *hf, const char *path, dev_t rdev,
              struct hostfile_error *err)
{
  int sector;

  hf->is_blkdev = true;
  if (ioctl (hf->fd, BLKSSZGET, &sector) == -1)
    return fail (hf, err, errno,
                 "%s: block device sector size (ioctl BLKSSZGET) "
                 "not supported: %m",
                 path);
  if (sector < 512 || sector > HOSTFILE_MAX_ALIGN || !is_power_of_2 (sector))
    return fail (hf, err, EINVAL, "%s: unsupported logical sector size %d",
                 path, sector);
  hf->sector = sector;
  hf->blk_zeroes_fast = blk_zeroes_natively (rdev);
  return hf;
}

/* O_DIRECT: the alignment, and the buffered descriptor for a tail. */
static struct hostfile *
setup_direct (struct hostfile *hf, const char *path, struct hostfile_error *err)
{
  const char *why = NULL;

  if (direct_alignment (hf, &why) == -1)
    {
      if (strcmp (why, "unsupported") == 0)
        return fail (hf, err, EINVAL,
                     "%s: cache=none: O_DIRECT is not supported for this "
                     "file (use cache=writeback)",
                     path);
      return fail (hf, err, EINVAL,
                   "%s: cache=none: unsupported O_DIRECT alignment "
                   "(offset %" PRIu32 ", memory %" PRIu32 ")",
                   path, hf->align, hf->mem_align);
    }
  /* A block device's size is whole sectors; a file's may become
   * unaligned at any connection.
   */
  if (!hf->is_blkdev && !hf->grow)
    {
      hf->bfd = open (path, (hf->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
      if (hf->bfd == -1)
        return fail (hf, err, errno, "%s: cannot open: %m", path);
    }
  return hf;
}

struct hostfile *
hostfile_adopt (int fd, const char *path, unsigned flags,
                struct hostfile_error *err)
{
  struct hostfile *hf = calloc (1, sizeof *hf);
  struct stat st;
  int fl;

  if (hf == NULL)
    {
      close (fd);
      return fail (NULL, err, ENOMEM, "%s: out of memory", path);
    }
  hf->fd = fd;
  hf->bfd = -1;
  for (size_t i = 0; i < HOSTFILE_SECTOR_LOCKS; ++i)
    pthread_mutex_init (&hf->sector_locks[i], NULL);
  fl = fcntl (fd, F_GETFL);
  hf->writable = fl != -1 && (fl & O_ACCMODE) != O_RDONLY;
  hf->direct = (flags & HOSTFILE_DIRECT) != 0;
  hf->grow = (flags & HOSTFILE_GROW) != 0;
  hf->sector = 1;
  hf->align = hf->mem_align = 1;
  if (fstat (fd, &st) == -1)
    return fail (hf, err, errno, "%s: fstat: %m", path);
  hf->dev = st.st_dev;
  hf->ino = st.st_ino;
  if (S_ISBLK (st.st_mode))
    {
      if (probe_blkdev (hf, path, st.st_rdev, err) == NULL)
        return NULL;
    }
  else if (!S_ISREG (st.st_mode))
    return fail (hf, err, EINVAL, "%s: not a regular file or block device",
                 path);

  if (hf->direct)
    {
      if (setup_direct (hf, path, err) == NULL)
        return NULL;
    }
  else if (hf->is_blkdev)
    /* Buffered block devices take any offset, but zero and trim have
     * to split at sectors for the ioctls.
     */
    hf->align = hf->sector;
  if (hf->grow)
    hf->tail_start = INT64_MAX;
  hostfile_init_hostio (hf);
  return hf;
}

struct hostfile *
hostfile_open (const char *path, unsigned flags, struct hostfile_error *err)
{
  const int dflag = (flags & HOSTFILE_DIRECT) ? O_DIRECT : 0;
  int fd = -1, refused = 0;
  struct hostfile *hf;

  if (flags & HOSTFILE_WRITE)
    {
      fd = open (path, O_RDWR | O_CLOEXEC | dflag);
      /* A file we may only read is opened read-only: the caller decides
       * what to serve (raw and qcow2 refuse writable connections).
       */
      if (fd == -1 && (errno == EACCES || errno == EROFS || errno == EPERM))
        refused = errno;
    }
  if (fd == -1 && (refused || !(flags & HOSTFILE_WRITE)))
    fd = open (path, O_RDONLY | O_CLOEXEC | dflag);
  if (fd == -1)
    {
      if (errno == EINVAL && dflag)
        return fail (NULL, err, EINVAL,
                     "%s: cache=none: this filesystem does not support "
                     "O_DIRECT (use cache=writeback)",
                     path);
      fail (NULL, err, errno, "%s: cannot open: %m", path);
      err->open_failed = true;
      return NULL;
    }
  hf = hostfile_adopt (fd, path, flags, err);
  if (hf)
    hf->write_refused = refused;
  return hf;
}

void
hostfile_close (struct hostfile *hf)
{
  if (hf == NULL)
    return;
  if (hf->fd >= 0)
    close (hf->fd);
  if (hf->bfd >= 0)
    close (hf->bfd);
  for (size_t i = 0; i < HOSTFILE_SECTOR_LOCKS; ++i)
    pthread_mutex_destroy (&hf->sector_locks[i]);
  free (hf);
}

int64_t
hostfile_current_size (struct hostfile *hf)
{
  if (hf->is_blkdev)
    {
      uint64_t bytes;
      if (ioctl (hf->fd, BLKGETSIZE64, &bytes) == -1)
        return -errno;
      return bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes;
    }
  else
    {
      struct stat st;
      if (fstat (hf->fd, &st) == -1)
        return -errno;
      return st.st_size;
    }
}

int64_t
hostfile_refresh_size (struct hostfile *hf)
{
  int64_t size = hostfile_current_size (hf), tail;

  if (size < 0)
    return size;
  if (size > INT64_MAX - 2 * HOSTFILE_MAX_ALIGN)
    return -EFBIG;
  tail = size;
  if (hf->grow)
    tail = INT64_MAX;
  else if (hf->direct && !IS_ALIGNED (size, hf->align))
    tail = ROUND_DOWN (size, MAX ((uint64_t)sysconf (_SC_PAGESIZE), hf->align));
  atomic_store_explicit (&hf->size, size, memory_order_relaxed);
  atomic_store_explicit (&hf->tail_start, tail, memory_order_relaxed);
  return size;
}

uint64_t
hostfile_max_size (struct hostfile *hf)
{
  return hf->is_blkdev ? 0 : find_max_size (hf->fd);
}

void
hostfile_refuse_fast_zero (struct hostfile *hf)
{
  hf->no_zero_range = hf->no_punch_hole = true;
  hf->no_blkzeroout = hf->no_blkdiscard = true;
  hf->blk_zeroes_fast = false;
}
