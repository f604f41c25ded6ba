/* nbdstack qcow2 library: opening an image for writing.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * After the header has been validated for reading, a writable open
 * refuses what writing cannot handle yet or must not touch, clears the
 * autoclear bits (their extensions, such as dirty bitmaps, would go
 * stale under writes we do not track, and qemu drops them for us when
 * it sees the bit clear), loads the refcounts and finds where the
 * allocated part of the file ends.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "qcow2-internal.h"

#define HEADER_AUTOCLEAR 88
#define DEFAULT_REFCOUNT_CACHE_BLOCKS 32

static int
refuse (struct qcow2_image *img, const struct qcow2_open_options *opts,
        struct qcow2_error *err)
{
  if (img->io->pwritev == NULL)
    {
      qcow2_set_error (err, EROFS, "the file is not open for writing");
      return -1;
    }
  if (opts->snapshot)
    {
      qcow2_set_error (err, EINVAL, "a snapshot can only be served read-only");
      return -1;
    }
  if (img->incompat & INCOMPAT_DIRTY)
    {
      /* Its refcounts may be stale (lazy refcounts): allocating from
       * them could hand out clusters in use.
       */
      qcow2_set_error (err, EINVAL,
                       "the image is dirty: repair it with "
                       "qemu-img check -r all before writing to it");
      return -1;
    }
  if (img->data_file)
    {
      qcow2_set_error (err, ENOTSUP,
                       "writing images with an external data file is "
                       "not supported yet");
      return -1;
    }
  if (img->ext_l2)
    {
      qcow2_set_error (err, ENOTSUP,
                       "writing images with extended L2 entries is not "
                       "supported yet");
      return -1;
    }
  if (img->nb_snapshots > 0)
    {
      qcow2_set_error (err, ENOTSUP,
                       "writing images with internal snapshots is not "
                       "supported yet");
      return -1;
    }
  return 0;
}

int
qcow2_open_writable (struct qcow2_image *img,
                     const struct qcow2_open_options *opts,
                     struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  uint64_t highest;
  int r;

  if (refuse (img, opts, err) == -1)
    return -1;

  if (img->version >= 3 && img->autoclear != 0)
    {
      unsigned char zero[8] = { 0 };

      r = qcow2_hostio_pwrite (img->io, zero, sizeof zero, HEADER_AUTOCLEAR);
      if (r == 0)
        r = img->io->flush (img->io);
      if (r < 0)
        {
          qcow2_set_error (err, -r, "clearing the autoclear bits: %s",
                           strerror (-r));
          return -1;
        }
      img->autoclear = 0;
    }

  if (qcow2_rc_open (img,
                     opts->refcount_cache_blocks
                         ? opts->refcount_cache_blocks
                         : DEFAULT_REFCOUNT_CACHE_BLOCKS,
                     err)
      == -1)
    return -1;
  img->writable = true;

  /* Allocation starts past both the file and the last cluster in use
   * (a cluster may be counted but not yet written past the end).
   */
  if (qcow2_rc_highest_used (img, &highest, err) == -1)
    return -1;
  img->host_end = (img->file_size + cs - 1) & ~(cs - 1);
  if ((highest + 1) * cs > img->host_end)
    img->host_end = (highest + 1) * cs;
  return 0;
}

int
qcow2_close_writable (struct qcow2_image *img, struct qcow2_error *err)
{
  int r;

  if (img->rc == NULL)
    return 0;
  if (qcow2_rc_write_dirty (img, err) == -1)
    goto out;
  r = img->io->flush (img->io);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "flush: %s", strerror (-r));
      goto out;
    }
  qcow2_rc_close (img);
  return 0;
out:
  qcow2_rc_close (img);
  return -1;
}
