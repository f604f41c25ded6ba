/* nbdstack qcow2 library: the public entry points of an image (not to
 * be confused with plugins/image's qcow2 glue).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Open (header.c and the files it calls validate everything; here the
 * served L1 table is loaded and the L2 cache sized), close, the facts
 * the caller may ask about, and attaching the layers below.  Reading,
 * writing and zeroing are read.c, write.c and zero.c.  Invariant: an
 * image is either fully opened or closed again; qcow2_close frees
 * whatever qcow2_open got, at any point it failed.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

/* qemu's default: the L2 cache covers the whole disk, up to 32 MiB. */
#define DEFAULT_L2_CACHE_BYTES (32 * 1024 * 1024)

static uint64_t next_uid;

/* The image's locks and condition variables, before anything can
 * fail (qcow2_close destroys them).
 */
static void
init_locks (struct qcow2_image *img)
{
  pthread_rwlockattr_t attr;

  /* The lock is held briefly but often by readers: let a waiting
   * writer in (no reader takes it twice).
   */
  pthread_rwlockattr_init (&attr);
  pthread_rwlockattr_setkind_np (&attr,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init (&img->lock, &attr);
  pthread_rwlockattr_destroy (&attr);
  pthread_mutex_init (&img->claim_lock, NULL);
  pthread_cond_init (&img->claim_released, NULL);
  pthread_mutex_init (&img->epoch_lock, NULL);
  pthread_cond_init (&img->barrier_moved, NULL);
  pthread_mutex_init (&img->commit_lock, NULL);
  pthread_cond_init (&img->commit_done, NULL);
}

/* The served L1 table, in host order. */
static int
load_l1 (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_hostio *io = img->io;
  uint32_t i;
  int r;

  if (img->l1_size == 0)
    return 0;
  img->l1 = malloc ((size_t)img->l1_size * 8);
  if (img->l1 == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the L1 table");
      return -1;
    }
  r = io->pread (io, img->l1, (size_t)img->l1_size * 8, img->l1_offset);
  if (r < 0)
    return qcow2_io_error (err, r, "reading the L1 table");
  for (i = 0; i < img->l1_size; ++i)
    img->l1[i] = get_be64 (&img->l1[i]);
  return 0;
}

/* The L2 cache, bounded by the option, never by what the header says;
 * slots get their memory on first use.
 */
static int
open_l2_cache (struct qcow2_image *img, const struct qcow2_open_options *opts,
               struct qcow2_error *err)
{
  uint64_t entries, l1_needed, cache_bytes;

  l1_needed = l1_entries_needed (img, img->size);
  cache_bytes = opts && opts->l2_cache_size ? opts->l2_cache_size
                                            : DEFAULT_L2_CACHE_BYTES;
  entries = cache_bytes >> img->cluster_bits;
  if (opts == NULL || opts->l2_cache_size == 0)
    {
      if (entries > l1_needed)
        entries = l1_needed;
    }
  if (entries < 2)
    entries = 2;
  if (entries > 1u << 20)
    entries = 1u << 20;
  img->l2 = l2_cache_new (img->io, img->cluster_size, entries);
  if (img->l2 == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the L2 cache");
      return -1;
    }
  return 0;
}

struct qcow2_image *
qcow2_open (struct qcow2_hostio *io, const struct qcow2_open_options *opts,
            struct qcow2_error *err)
{
  struct qcow2_image *img = calloc (1, sizeof *img);

  if (img == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return NULL;
    }
  img->uid = __atomic_add_fetch (&next_uid, 1, __ATOMIC_RELAXED);
  init_locks (img);
  img->deferred_first_epoch = UINT64_MAX;
  img->io = img->data_io = io;
  if (qcow2_parse_header (img, opts, err) == -1)
    goto fail;
  img->data_file_size = img->file_size;
  if (load_l1 (img, err) == -1)
    goto fail;
  /* After the L1 table: choosing the layout looks at it. */
  if (opts && opts->writable && qcow2_open_writable (img, opts, err) == -1)
    goto fail;
  if (open_l2_cache (img, opts, err) == -1)
    goto fail;
  return img;

fail:
  qcow2_close (img);
  return NULL;
}

int
qcow2_close_err (struct qcow2_image *img, struct qcow2_error *err)
{
  int r = 0;

  if (img == NULL)
    return 0;
  if (img->writable)
    r = qcow2_close_writable (img, err);
  qcow2_close (img);
  return r;
}

void
qcow2_close (struct qcow2_image *img)
{
  if (img == NULL)
    return;
  if (img->writable)
    qcow2_close_writable (img, NULL);
  l2_cache_free (img->l2);
  qcow2_meta_free (img);
  free (img->l1);
  free (img->backing_file);
  free (img->backing_format);
  free (img->data_file);
  pthread_rwlock_destroy (&img->lock);
  pthread_mutex_destroy (&img->claim_lock);
  pthread_cond_destroy (&img->claim_released);
  pthread_mutex_destroy (&img->epoch_lock);
  pthread_cond_destroy (&img->barrier_moved);
  pthread_mutex_destroy (&img->commit_lock);
  pthread_cond_destroy (&img->commit_done);
  free (img);
}

uint64_t
qcow2_get_size (const struct qcow2_image *img)
{
  return img->size;
}

uint32_t
qcow2_get_version (const struct qcow2_image *img)
{
  return img->version;
}

uint32_t
qcow2_get_cluster_size (const struct qcow2_image *img)
{
  return img->cluster_size;
}

/* "linear", "compact", or "" when not writable. */
const char *
qcow2_layout_name (const struct qcow2_image *img)
{
  if (!img->writable)
    return "";
  return img->alloc_mode == QCOW2_ALLOC_LINEAR ? "linear" : "compact";
}

bool
qcow2_is_dirty (const struct qcow2_image *img)
{
  return (img->incompat & INCOMPAT_DIRTY) != 0;
}

const char *
qcow2_get_backing_file (const struct qcow2_image *img)
{
  return img->backing_file;
}

const char *
qcow2_get_backing_format (const struct qcow2_image *img)
{
  return img->backing_format;
}

const char *
qcow2_get_data_file (const struct qcow2_image *img)
{
  return img->data_file;
}

unsigned
qcow2_get_l2_cache_entries (const struct qcow2_image *img)
{
  return l2_cache_entries (img->l2);
}

void
qcow2_set_backing (struct qcow2_image *img, const struct qcow2_layer_ops *ops,
                   void *opaque, uint64_t size)
{
  img->backing_ops = ops;
  img->backing_opaque = opaque;
  img->backing_size = size;
}

void
qcow2_set_data_file (struct qcow2_image *img, struct qcow2_hostio *io)
{
  int64_t size = io->get_size (io);

  img->data_io = io;
  img->data_file_size = size > 0 ? size : 0;
}
