/* nbdstack host-file layer: zeroing and trimming.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a zero either makes the whole range read as zeroes or
 * fails; with HOSTFILE_ZERO_FAST it fails with -ENOTSUP before changing
 * anything whenever only writing zeroes is left.  In O_DIRECT mode and
 * on block devices only whole units are deallocated or zeroed by the
 * file system or the device; partial units (and a direct file's tail)
 * are written as zeroes through io.c, so they take the same locks as
 * any read-modify-write of their unit.  The middle goes first, so that
 * a refused FAST zero has not written anything.  Trim is advisory:
 * what the kernel refuses is skipped, and partial units are left.
 * A call the kernel refused as unsupported is not tried again.  A
 * range of a regular file with no extent at all (a hole) already reads
 * as zeroes: a zero that may trim, or a trim, leaves it as it is.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>

#ifdef HAVE_LINUX_FS_H
#include <linux/fs.h>
#endif
#ifdef HAVE_LINUX_FALLOC_H
#include <linux/falloc.h>
#endif
#ifdef HAVE_LINUX_FIEMAP_H
#include <linux/fiemap.h>
#endif
#include <string.h>

#include "align.h"
#include "hostfile.h"

/* The outcome of one attempt: done, refused as unsupported, or failed. */
enum attempt
{
  DONE = 0,
  REFUSED = 1
};

/* The outcome of a call that returned r (0, or -1 with errno set):
 * "unsupported" is remembered in *refused.  DONE, REFUSED, or a
 * negative errno.
 */
static int
outcome (int r, atomic_bool *refused)
{
  if (r == 0)
    return DONE;
  if (hostfile_is_unsupported (errno))
    {
      atomic_store_explicit (refused, true, memory_order_relaxed);
      return REFUSED;
    }
  return -errno;
}

/* fallocate, unless it was refused before. */
static int
try_fallocate (struct hostfile *hf, atomic_bool *refused, int mode,
               uint64_t offset, uint64_t len)
{
  if (atomic_load_explicit (refused, memory_order_relaxed))
    return REFUSED;
  return outcome (fallocate (hf->fd, mode, offset, len), refused);
}

/* The same for a block device ioctl taking a {offset, len} range. */
static int
try_blkioctl (struct hostfile *hf, atomic_bool *refused, unsigned long req,
              uint64_t offset, uint64_t len)
{
  uint64_t range[2] = { offset, len };

  if (atomic_load_explicit (refused, memory_order_relaxed))
    return REFUSED;
  return outcome (ioctl (hf->fd, req, range), refused);
}

static int
punch (struct hostfile *hf, uint64_t offset, uint64_t len)
{
  return try_fallocate (hf, &hf->no_punch_hole,
                        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                        len);
}

/* Whether [offset, offset+len) of a regular file has no extent at all:
 * no data, no preallocated (unwritten) blocks, no delayed allocation of
 * page-cache data (FIEMAP reports those).  Such a range reads as
 * zeroes and frees nothing when punched, so a zero that may trim, or a
 * trim, can leave it.  One ioctl is cheaper than a punch of a hole,
 * which takes the inode's locks and walks the page cache: a client
 * zeroing a huge sparse disk sends one request per 32 MiB of it.
 * SEEK_DATA would not do: it calls preallocated blocks a hole, and
 * those must still be freed.  Anything the kernel cannot tell is
 * "allocated".
 */
static bool
unallocated (struct hostfile *hf, uint64_t offset, uint64_t len)
{
#ifdef FS_IOC_FIEMAP
  struct
  {
    struct fiemap fm;
    struct fiemap_extent fe[1];
  } q;

  if (hf->is_blkdev
      || atomic_load_explicit (&hf->no_fiemap, memory_order_relaxed))
    return false;
  memset (&q, 0, sizeof q);
  q.fm.fm_start = offset;
  q.fm.fm_length = len;
  q.fm.fm_extent_count = 1;
  if (ioctl (hf->fd, FS_IOC_FIEMAP, &q.fm) == -1)
    {
      if (hostfile_is_unsupported (errno))
        atomic_store_explicit (&hf->no_fiemap, true, memory_order_relaxed);
      return false;
    }
  return q.fm.fm_mapped_extents == 0;
#else
  return false;
#endif
}

/* What is left when the kernel zeroes nothing cheaply. */
static int
zero_by_writing (struct hostfile *hf, uint64_t offset, uint64_t len,
                 unsigned flags)
{
  if (flags & HOSTFILE_ZERO_FAST)
    return -ENOTSUP;
  return hostfile_write_zeroes (hf, len, offset);
}

/* A regular file, when punching is not allowed or was refused:
 * fallocate, else writing.
 */
static int
zero_file (struct hostfile *hf, uint64_t offset, uint64_t len, unsigned flags)
{
  int r;

  r = try_fallocate (hf, &hf->no_zero_range,
                     FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, offset, len);
  if (r != REFUSED)
    return r;
  if (!(flags & HOSTFILE_ZERO_MAY_TRIM))
    {
      /* No ZERO_RANGE here: punch, then allocate again because the
       * caller asked for no hole.  A failed re-allocation still reads
       * as zeroes, so it is not an error.
       */
      r = punch (hf, offset, len);
      if (r < 0)
        return r;
      if (r == DONE)
        {
          (void)fallocate (hf->fd, FALLOC_FL_KEEP_SIZE, offset, len);
          return 0;
        }
    }
  return zero_by_writing (hf, offset, len, flags);
}

/* A sector-aligned range of a block device, the same way. */
static int
zero_blkdev (struct hostfile *hf, uint64_t offset, uint64_t len, unsigned flags)
{
  int r;

  /* BLKZEROOUT falls back to writing zero pages in the kernel when the
   * device cannot zero by itself.
   */
  if ((flags & HOSTFILE_ZERO_FAST) && !hf->blk_zeroes_fast)
    return -ENOTSUP;
  r = try_blkioctl (hf, &hf->no_blkzeroout, BLKZEROOUT, offset, len);
  if (r != REFUSED)
    return r;
  return zero_by_writing (hf, offset, len, flags);
}

/* MAY_TRIM: a punched hole first, on files and block devices alike
 * (on a block device "zero, unmapping if the device can, and never
 * fall back to writing", so always fast); then the ladder of each.
 */
static int
zero_range (struct hostfile *hf, uint64_t offset, uint64_t len, unsigned flags)
{
  if (flags & HOSTFILE_ZERO_MAY_TRIM)
    {
      int r = punch (hf, offset, len);
      if (r != REFUSED)
        return r;
    }
  return hf->is_blkdev ? zero_blkdev (hf, offset, len, flags)
                       : zero_file (hf, offset, len, flags);
}

/* Whole units by the kernel, partial ones by writing. */
static int
zero_units (struct hostfile *hf, uint64_t offset, uint64_t len, unsigned flags)
{
  const uint64_t end = offset + len;
  const uint64_t m0 = ROUND_UP (offset, hf->align);
  const uint64_t m1
      = ROUND_DOWN (MIN (end, hostfile_tail_start (hf)), hf->align);
  int r;

  if (m0 >= m1)
    /* Less than one aligned unit: always cheap to write. */
    return hostfile_write_zeroes (hf, len, offset);
  r = zero_range (hf, m0, m1 - m0, flags);
  if (r == 0 && offset < m0)
    r = hostfile_write_zeroes (hf, m0 - offset, offset);
  if (r == 0 && m1 < end)
    r = hostfile_write_zeroes (hf, end - m1, m1);
  return r;
}

int
hostfile_zero (struct hostfile *hf, uint64_t offset, uint64_t len,
               unsigned flags)
{
  int r;

  if (len == 0)
    return 0;
  if ((flags & HOSTFILE_ZERO_MAY_TRIM) && unallocated (hf, offset, len))
    return (flags & HOSTFILE_ZERO_FUA) ? hostfile_flush (hf) : 0;
  if (!hf->is_blkdev && !hf->direct)
    /* A buffered file: fallocate takes any byte range. */
    r = zero_range (hf, offset, len, flags);
  else
    r = zero_units (hf, offset, len, flags);
  if (r == 0 && (flags & HOSTFILE_ZERO_FUA))
    r = hostfile_flush (hf);
  return r;
}

int
hostfile_trim (struct hostfile *hf, uint64_t offset, uint64_t len, bool fua)
{
  uint64_t m0 = offset, m1 = offset + len;
  int r = 0;

  /* Only whole units can be discarded by ioctl or O_DIRECT-safely
   * punched.
   */
  if (hf->is_blkdev || hf->direct)
    {
      m0 = ROUND_UP (m0, hf->align);
      m1 = ROUND_DOWN (MIN (m1, hostfile_tail_start (hf)), hf->align);
    }
  if (m0 < m1 && !unallocated (hf, m0, m1 - m0))
    r = hf->is_blkdev
            ? try_blkioctl (hf, &hf->no_blkdiscard, BLKDISCARD, m0, m1 - m0)
            : punch (hf, m0, m1 - m0);
  if (r < 0)
    return r;
  return fua ? hostfile_flush (hf) : 0;
}
