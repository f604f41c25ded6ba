/* nbdstack-nbd: format, kind and size of the image.
 * SPDX-License-Identifier: BSD-3-Clause
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
#include <unistd.h>

#ifdef HAVE_LINUX_FS_H
#include <linux/fs.h>
#endif

#include "byte-order.h"
#include "image-magic.h"
#include "probe.h"
#include "set-error.h"

static bool
is_qcow2 (const unsigned char *h, size_t n)
{
  return n >= 8 && image_has_qcow2_magic (h, n)
         && (get_be32 (h + 4) == 2 || get_be32 (h + 4) == 3);
}

int
probe_image (const struct image_spec *spec, struct image_info *info, char **err)
{
  unsigned char h[512];
  struct stat st;
  ssize_t n;
  int fd, r = -1;

  *err = NULL;
  memset (info, 0, sizeof *info);
  fd = open (spec->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd == -1)
    return set_error (err, "Could not open '%s': %m", spec->path);
  if (fstat (fd, &st) == -1)
    {
      set_error (err, "%s: fstat: %m", spec->path);
      goto out;
    }

  /* Which kinds each of qemu's protocol drivers takes. */
  if (spec->protocol == PROTOCOL_FILE && !S_ISREG (st.st_mode))
    {
      set_error (err, "'file' driver requires '%s' to be a regular file",
                 spec->path);
      goto out;
    }
  if (spec->protocol == PROTOCOL_HOST_DEVICE && !S_ISBLK (st.st_mode)
      && !S_ISCHR (st.st_mode))
    {
      set_error (err,
                 "'host_device' driver requires '%s' to be either a "
                 "character or block device",
                 spec->path);
      goto out;
    }
  if (S_ISDIR (st.st_mode))
    {
      set_error (err, "Could not open '%s': Is a directory", spec->path);
      goto out;
    }
  if (!S_ISREG (st.st_mode) && !S_ISBLK (st.st_mode))
    {
      set_error (err,
                 "'%s': only regular files and block devices are "
                 "supported by nbdstack-nbd",
                 spec->path);
      goto out;
    }

  info->is_block_device = S_ISBLK (st.st_mode);
  if (info->is_block_device)
    {
#ifdef BLKGETSIZE64
      if (ioctl (fd, BLKGETSIZE64, &info->size) == -1)
        {
          set_error (err, "%s: BLKGETSIZE64: %m", spec->path);
          goto out;
        }
#else
      set_error (err, "%s: block devices are not supported here", spec->path);
      goto out;
#endif
    }
  else
    info->size = st.st_size;

  if (spec->has_image_range)
    {
      /* qcow2 over raw{offset, size}: qemu's raw driver checks the
       * range when it opens, with these words.
       */
      if (spec->image_offset > info->size)
        {
          set_error (err,
                     "Offset (%" PRIu64 ") cannot be greater than size of "
                     "the containing file (%" PRIu64 ")",
                     spec->image_offset, info->size);
          goto out;
        }
      if (spec->has_image_length
          && info->size - spec->image_offset < spec->image_length)
        {
          set_error (err,
                     "The sum of offset (%" PRIu64 ") and size (%" PRIu64
                     ") has to be smaller or equal to the  actual size of "
                     "the containing file (%" PRIu64 ")",
                     spec->image_offset, spec->image_length, info->size);
          goto out;
        }
      info->size = spec->has_image_length ? spec->image_length
                                          : info->size - spec->image_offset;
    }

  /* The probe leaves nothing in the page cache: no read-ahead, and the
   * header page dropped after.  Cached pages over unwritten extents
   * read as data to SEEK_DATA on XFS, so a probe would change the
   * extents the server reports later (imageio's
   * test_base_allocation_many_extents on XFS).
   */
  {
    const off_t at = spec->has_image_range ? (off_t)spec->image_offset : 0;

    posix_fadvise (fd, at, sizeof h, POSIX_FADV_RANDOM);
    n = pread (fd, h, info->size < sizeof h ? (size_t)info->size : sizeof h,
               at);
    if (n == -1)
      {
        set_error (err, "Could not read '%s': %m", spec->path);
        goto out;
      }
    posix_fadvise (fd, at, sizeof h, POSIX_FADV_DONTNEED);
  }

  switch (spec->format)
    {
    case FORMAT_PROBE:
      if (is_qcow2 (h, n))
        info->format = FORMAT_QCOW2;
      else if (image_magic (h, n) && strcmp (image_magic (h, n), "qcow2") == 0)
        {
          set_error (err, "'%s': Unsupported qcow2 version %" PRIu32,
                     spec->path, get_be32 (h + 4));
          goto out;
        }
      else if (image_magic (h, n))
        {
          /* Serving another format as raw would hand the client the
           * container instead of the disk.
           */
          set_error (err,
                     "'%s' is a %s image: that format is not supported "
                     "by nbdstack-nbd (raw and qcow2 are)",
                     spec->path, image_magic (h, n));
          goto out;
        }
      else
        {
          info->format = FORMAT_RAW;
          info->probed_raw = true;
        }
      break;
    case FORMAT_QCOW2:
      if (!is_qcow2 (h, n))
        {
          set_error (err, "'%s': Image is not in qcow2 format", spec->path);
          goto out;
        }
      info->format = FORMAT_QCOW2;
      break;
    case FORMAT_RAW:
      info->format = FORMAT_RAW;
      break;
    }

  /* The guest-visible size; the plugin checks the rest of the header. */
  if (info->format == FORMAT_QCOW2)
    {
      if (n < 32)
        {
          set_error (err, "'%s': qcow2 header is truncated", spec->path);
          goto out;
        }
      info->size = get_be64 (h + 24);
      /* backing_file_offset and backing_file_size, as qemu reads them. */
      info->has_backing = get_be64 (h + 8) != 0 && get_be32 (h + 16) != 0;
    }
  r = 0;
out:
  close (fd);
  return r;
}

int
probe_writable (const struct image_spec *spec, char **err)
{
  int fd;

  *err = NULL;
  fd = open (spec->path, O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd == -1)
    return set_error (err, "Could not open '%s': %m", spec->path);
  close (fd);
  return 0;
}
