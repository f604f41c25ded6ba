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
#include <stdlib.h>
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
  return 0;
}

static void free_write_state (struct qcow2_image *img);

/* An entry of the refcount or L1 table names another table (EIO from
 * overlap.c): say that this is why the image is not written.  -1.
 */
static int
refuse_metadata (struct qcow2_error *err)
{
  if (err && err->errnum == EIO)
    {
      char why[sizeof err->msg];
      memcpy (why, err->msg, sizeof why);
      qcow2_set_error (err, EIO, "refusing to write this image: %s", why);
    }
  return -1;
}

/* Version 3 with unknown autoclear bits (or the bitmaps bit): clear
 * them with a synced header write before anything else changes.
 */
static int
clear_autoclear (struct qcow2_image *img, struct qcow2_error *err)
{
  unsigned char zero[8] = { 0 };
  int r;

  if (img->version < 3 || img->autoclear == 0)
    return 0;
  r = qcow2_write_sync (img->io, zero, sizeof zero, HEADER_AUTOCLEAR);
  if (r < 0)
    return qcow2_io_error (err, r, "clearing the autoclear bits");
  img->autoclear = 0;
  return 0;
}

/* Allocation starts past both the file and the last cluster in use (a
 * cluster may be counted but not yet written past the end).
 */
static int
find_host_end (struct qcow2_image *img, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  uint64_t highest;

  if (qcow2_rc_highest_used (img, &highest, err) == -1)
    return -1;
  img->host_end = (img->file_size + cs - 1) & ~(cs - 1);
  /* A device's size says nothing about what is in use. */
  if (img->io->fixed_size)
    img->host_end = 0;
  if ((highest + 1) * cs > img->host_end)
    img->host_end = (highest + 1) * cs;
  return 0;
}

/* The dirty-L1 bitmap and the cluster of zeroes. */
static int
alloc_write_buffers (struct qcow2_image *img, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  uint64_t sectors = ((uint64_t)img->l1_size + 63) / 64;

  img->l1_dirty = calloc ((sectors + 63) / 64 + 1, 8);
  /* Aligned: O_DIRECT host I/O can write it without a copy. */
  if (posix_memalign ((void **)&img->zero_buf, 4096, cs) == 0)
    memset (img->zero_buf, 0, cs);
  else
    img->zero_buf = NULL;
  if (img->l1_dirty == NULL || img->zero_buf == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return -1;
    }
  return 0;
}

/* Linear where the image has the layout (create.c, adopt.c) or can be
 * given it, and never on a device (which cannot hold a sparse span).
 */
static int
choose_layout (struct qcow2_image *img, const struct qcow2_open_options *opts,
               struct qcow2_error *err)
{
  img->alloc_mode = QCOW2_ALLOC_COMPACT;
  if (img->io->fixed_size)
    {
      if (opts->layout == QCOW2_LAYOUT_LINEAR)
        {
          qcow2_set_error (err, EINVAL,
                           "the linear layout needs a regular file, not a "
                           "device");
          return -1;
        }
    }
  else if (opts->layout != QCOW2_LAYOUT_COMPACT)
    {
      if (img->linear_clusters == 0
          && qcow2_adopt_linear (img, opts->layout == QCOW2_LAYOUT_AUTO, err)
                 == -1)
        return -1;
      if (img->linear_clusters == 0 && opts->layout == QCOW2_LAYOUT_LINEAR)
        {
          qcow2_set_error (err, ENOSPC,
                           "the image cannot have the linear layout (no "
                           "room in its header for the extension, or a "
                           "refcount table too large)");
          return -1;
        }
    }
  if (img->linear_clusters > 0 && opts->layout != QCOW2_LAYOUT_COMPACT
      && !img->io->fixed_size)
    {
      img->alloc_mode = QCOW2_ALLOC_LINEAR;
      img->meta_cursor = 1;
    }
  return 0;
}

static int
open_writable (struct qcow2_image *img, const struct qcow2_open_options *opts,
               struct qcow2_error *err)
{
  if (refuse (img, opts, err) == -1 || clear_autoclear (img, err) == -1)
    return -1;
  if (qcow2_rc_open (img,
                     opts->refcount_cache_blocks
                         ? opts->refcount_cache_blocks
                         : DEFAULT_REFCOUNT_CACHE_BLOCKS,
                     err)
      == -1)
    return -1;
  if (qcow2_rc_record_blocks (img, err) == -1
      || qcow2_meta_load (img, err) == -1)
    return refuse_metadata (err);
  img->writable = true;

  if (opts->repair_leaks)
    {
      uint64_t leaked;

      if (qcow2_repair_leaks (img, &leaked, err) == -1)
        return -1;
      if (opts->leaks_repaired)
        *opts->leaks_repaired = leaked;
    }
  if (find_host_end (img, err) == -1 || alloc_write_buffers (img, err) == -1
      || choose_layout (img, opts, err) == -1)
    return -1;
  return qcow2_alloc_init (img, err);
}

int
qcow2_open_writable (struct qcow2_image *img,
                     const struct qcow2_open_options *opts,
                     struct qcow2_error *err)
{
  if (open_writable (img, opts, err) == 0)
    return 0;
  free_write_state (img);
  return -1;
}

static void
free_write_state (struct qcow2_image *img)
{
  qcow2_rc_close (img);
  qcow2_alloc_free_state (img);
  free (img->l1_dirty);
  free (img->pending);
  free (img->zero_buf);
  img->zero_buf = NULL;
  qcow2_scratch_free (img);
  qcow2_commit_free (img);
  qcow2_inflight_free (img);
  img->l1_dirty = img->pending = NULL;
  img->writable = false;
}

/* A last commit, then the decrements it applied (written by a second
 * round of the refcount blocks).  A failed image writes nothing more.
 */
int
qcow2_close_writable (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_error ignored = { 0 };
  int r = -1;

  if (err == NULL) /* qcow2_close: nobody to tell */
    err = &ignored;

  if (img->rc == NULL)
    {
      free_write_state (img);
      return 0;
    }
  if (img_failed (img))
    qcow2_failed_error (err, false);
  else if (qcow2_commit (img, err) == 0 && qcow2_rc_write_dirty (img, err) == 0)
    {
      r = img->io->flush (img->io);
      if (r < 0)
        qcow2_set_error (err, -r, "flush: %s", strerror (-r));
      r = r < 0 ? -1 : 0;
    }
  free_write_state (img);
  return r;
}
