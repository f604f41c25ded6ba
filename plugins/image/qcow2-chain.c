/* nbdstack image plugin: the qcow2 top image and its backing chain.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant (containment): every file the top image refers to, backing
 * file or external data file, at any depth, resolves (as qemu resolves
 * it, relative to the image naming it) to a real path inside one
 * directory, backing-dir= or the top image's own, and appears in the
 * chain once (no loops), at most backing-max-depth deep.  Only the top
 * image may be writable; the rest is opened read-only.  Each file is a
 * hostfile (lib/hostfile) with HOSTFILE_GROW: the library may extend
 * the top image.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "hostfile.h"
#include "hostio-range.h"
#include "qcow2-plugin.h"

static void
free_layer (struct layer *l)
{
  qcow2_close (l->img);
  qcow2_hostio_close (l->data_io);
  qcow2_hostio_close (l->io);
  free (l->path);
}

void
qcow2_chain_close (struct q2 *q)
{
  unsigned i;

  /* A writable top image commits what is cached and flushes: say so
   * when that fails, the last writes may be lost.
   */
  if (q->nlayers > 0 && q->layers[0].img && q->writable)
    {
      struct qcow2_error err = { 0 };
      if (qcow2_close_err (q->layers[0].img, &err) == -1)
        nbdkit_error ("%s: closing the image: %s", q->layers[0].path, err.msg);
      q->layers[0].img = NULL;
    }

  /* Close from the top: an image points at the layer below it. */
  for (i = 0; i < q->nlayers; ++i)
    free_layer (&q->layers[i]);
  free (q->layers);
  free (q->root);
  free (q);
}

/* Resolve 'name' as qemu does (relative to the directory of the image
 * that names it), then require the real path to be inside q->root.
 * Returns a malloc'd real path, or NULL after nbdkit_error.
 */
static char *
resolve_contained (struct q2 *q, const char *referrer, const char *name,
                   const char *what)
{
  char *joined = NULL, *real;
  size_t rootlen = strlen (q->root);

  if (name[0] == '/')
    joined = strdup (name);
  else
    {
      const char *slash = strrchr (referrer, '/');
      int dirlen = slash ? (int)(slash - referrer) : 0;
      if (asprintf (&joined, "%.*s/%s", dirlen, referrer, name) == -1)
        joined = NULL;
    }
  if (joined == NULL)
    {
      nbdkit_error ("out of memory");
      return NULL;
    }
  real = realpath (joined, NULL);
  if (real == NULL)
    {
      nbdkit_error ("%s: %s '%s' cannot be opened: %m", referrer, what, name);
      free (joined);
      return NULL;
    }
  free (joined);
  if (!(strncmp (real, q->root, rootlen) == 0
        && (real[rootlen] == '/' || (rootlen == 1 && q->root[0] == '/'))))
    {
      nbdkit_error ("%s: %s '%s' resolves to %s, outside the allowed "
                    "directory %s (see backing-dir)",
                    referrer, what, name, real, q->root);
      free (real);
      return NULL;
    }
  return real;
}

/* Open 'path', for writing if '*writable'.  A top image we may only
 * read is opened read-only and *writable cleared; image_open then
 * refuses every connection that is not read-only (as qemu-nbd refuses
 * it without -r).  Backing and data files are never asked to be
 * writable.
 */
static struct hostfile *
open_file (const struct q2 *q, const char *path, bool *writable)
{
  unsigned flags = HOSTFILE_GROW;
  struct hostfile_error err;
  struct hostfile *hf;

  if (*writable)
    flags |= HOSTFILE_WRITE;
  if (q->opts->cache == CACHE_NONE)
    flags |= HOSTFILE_DIRECT;
  hf = hostfile_open (path, flags, &err);
  if (hf == NULL)
    {
      errno = err.errnum;
      if (err.open_failed)
        nbdkit_error ("%s: %m", path);
      else
        nbdkit_error ("%s", err.msg);
      return NULL;
    }
  if (hf->write_refused)
    {
      image_note_unwritable (path, hf->write_refused);
      *writable = false;
    }
  return hf;
}

int
qcow2_sniff (struct qcow2_hostio *io, bool *is_qcow2)
{
  char magic[QCOW2_PROBE_BYTES];

  *is_qcow2 = false;
  if (io->get_size (io) >= (int64_t)sizeof magic)
    {
      int r = io->pread (io, magic, sizeof magic, 0);
      if (r < 0)
        return r;
      *is_qcow2 = qcow2_probe (magic, sizeof magic);
    }
  return 0;
}

/* image-offset=, image-length=: the top image is a byte range of its
 * file.  The range must lie inside the file, as qemu's raw driver
 * checks its offset and size at open.
 */
static int
wrap_range (struct q2 *q, struct layer *l)
{
  const uint64_t image_offset = q->opts->image_offset;
  const int64_t image_length = q->opts->image_length;
  int64_t size = l->io->get_size (l->io);

  if (size < 0)
    {
      errno = -size;
      nbdkit_error ("%s: cannot get the size: %m", l->path);
      return -1;
    }
  if (image_offset > (uint64_t)size)
    {
      nbdkit_error ("%s: image-offset (%" PRIu64 ") is past the end of the "
                    "file (%" PRIi64 ")",
                    l->path, image_offset, size);
      return -1;
    }
  if (image_length >= 0 && (uint64_t)image_length > size - image_offset)
    {
      nbdkit_error ("%s: image-offset (%" PRIu64 ") + image-length (%" PRIi64
                    ") is past the end of the file (%" PRIi64 ")",
                    l->path, image_offset, image_length, size);
      return -1;
    }
  l->io = hostio_range (l->io, image_offset, image_length);
  if (l->io == NULL)
    {
      nbdkit_error ("out of memory");
      return -1;
    }
  return 0;
}

/* Open the qcow2 image in l's file (the top one with the plugin's
 * options); an image with an external data file the library cannot
 * write is served read-only.
 */
static int
open_qcow2_layer (struct layer *l, bool is_top, bool *writable)
{
  uint64_t leaks = 0;
  struct qcow2_open_options opts = {
    .l2_cache_size = qcow2_params.l2_cache_size,
    .snapshot = is_top ? qcow2_params.snapshot : NULL,
    .writable = *writable,
    .layout = qcow2_params.layout,
    .repair_leaks = qcow2_params.repair_leaks && is_top && *writable,
    .leaks_repaired = &leaks,
  };
  struct qcow2_error err = { 0 };

  l->img = qcow2_open (l->io, &opts, &err);
  if (l->img && opts.repair_leaks)
    nbdkit_debug ("%s: repair=leaks: %" PRIu64 " leaked clusters given "
                  "back",
                  l->path, leaks);
  if (l->img == NULL && *writable && err.errnum == ENOTSUP)
    {
      /* An external data file (the only ENOTSUP refusal): served
       * read-only, as before writing was supported.
       */
      struct qcow2_error err2 = { 0 };
      opts.writable = false;
      l->img = qcow2_open (l->io, &opts, &err2);
      if (l->img && qcow2_get_data_file (l->img))
        {
          nbdkit_error ("%s: served read-only: %s", l->path, err.msg);
          *writable = false;
        }
      else if (l->img)
        {
          qcow2_close (l->img);
          l->img = NULL;
        }
    }
  if (l->img == NULL)
    {
      nbdkit_error ("%s: %s", l->path, err.msg);
      return -1;
    }
  return 0;
}

/* Open the layer at 'path' (index q->nlayers) as qcow2 or raw ('format'
 * NULL: probed); only a top layer can be 'writable'.
 */
static int
open_layer (struct q2 *q, const char *path, bool is_top, bool *writable,
            const char *format)
{
  struct layer *l = &q->layers[q->nlayers];
  struct hostfile *hf;
  bool is_qcow2 = true;
  unsigned i;

  memset (l, 0, sizeof *l);
  l->path = strdup (path);
  if (l->path == NULL)
    {
      nbdkit_error ("out of memory");
      return -1;
    }
  q->nlayers++;
  hf = open_file (q, path, writable);
  if (hf == NULL)
    return -1;
  l->io = &hf->io;
  l->dev = hf->dev;
  l->ino = hf->ino;
  if (is_top && (q->opts->image_offset > 0 || q->opts->image_length >= 0)
      && wrap_range (q, l) == -1)
    return -1;
  for (i = 0; i + 1 < q->nlayers; ++i)
    {
      if (q->layers[i].dev == l->dev && q->layers[i].ino == l->ino)
        {
          nbdkit_error ("%s: backing chain loop: %s is already in the chain",
                        q->layers[0].path, path);
          return -1;
        }
    }

  if (format == NULL)
    {
      /* qemu also probes when the image does not record the format; a
       * read-only probe cannot be abused to write through a raw header.
       */
      if (qcow2_sniff (l->io, &is_qcow2) < 0)
        {
          nbdkit_error ("%s: cannot read: %m", path);
          return -1;
        }
    }
  else if (strcmp (format, "raw") == 0)
    is_qcow2 = false;
  else if (strcmp (format, "qcow2") != 0)
    {
      nbdkit_error ("%s: backing file format '%s' is not supported (only "
                    "raw and qcow2)",
                    path, format);
      return -1;
    }

  if (is_qcow2)
    return open_qcow2_layer (l, is_top, writable);
  return 0;
}
/* Open the external data file the image at layer 'i' names. */
static int
open_data_file (struct q2 *q, unsigned i)
{
  struct layer *l = &q->layers[i];
  const char *name = qcow2_get_data_file (l->img);
  CLEANUP_FREE char *real = NULL;
  struct hostfile *hf;
  bool no = false;

  if (name == NULL)
    return 0;
  real = resolve_contained (q, l->path, name, "external data file");
  if (real == NULL)
    return -1;
  hf = open_file (q, real, &no);
  if (hf == NULL)
    return -1;
  l->data_io = &hf->io;
  qcow2_set_data_file (l->img, l->data_io);
  return 0;
}

/* The directory everything the image refers to must resolve inside. */
static int
set_root (struct q2 *q, const char *file)
{
  if (qcow2_params.backing_dir)
    q->root = strdup (qcow2_params.backing_dir);
  else
    {
      char *real = realpath (file, NULL);
      char *slash = real ? strrchr (real, '/') : NULL;
      if (slash)
        *(slash == real ? slash + 1 : slash) = '\0';
      q->root = real;
    }
  if (q->root == NULL)
    {
      nbdkit_error ("%s: %m", file);
      return -1;
    }
  return 0;
}

/* Layer i (opened) reads through to the layer below it (opened next). */
static int
attach_below (struct q2 *q, unsigned i)
{
  struct layer *l = &q->layers[i], *below = &q->layers[i + 1];
  int64_t size;

  if (below->img)
    {
      qcow2_set_backing (l->img, &qcow2_image_layer_ops, below->img,
                         qcow2_get_size (below->img));
      return 0;
    }
  size = below->io->get_size (below->io);
  if (size < 0)
    {
      nbdkit_error ("%s: cannot get the size", below->path);
      return -1;
    }
  qcow2_set_backing (l->img, &qcow2_raw_layer_ops, below->io, size);
  return 0;
}

/* The files layer i refers to: its data file, and its backing file as
 * the next layer.  1: layer i is the bottom of the chain; 0: the next
 * layer is open; -1 after nbdkit_error.
 */
static int
open_below (struct q2 *q, unsigned i)
{
  struct layer *l = &q->layers[i];
  CLEANUP_FREE char *real = NULL;
  const char *name;
  bool no = false;

  if (l->img == NULL)
    return 1; /* raw: the bottom of the chain */
  if (open_data_file (q, i) == -1)
    return -1;
  name = qcow2_get_backing_file (l->img);
  if (name == NULL)
    return 1;
  if (qcow2_params.backing_mode == BACKING_REFUSE)
    {
      nbdkit_error ("%s: image has a backing file '%s'; refusing it (use "
                    "backing=follow [backing-dir=DIR] to open it, or "
                    "backing=none to serve this layer alone)",
                    l->path, name);
      return -1;
    }
  if (qcow2_params.backing_mode == BACKING_NONE)
    {
      nbdkit_debug ("%s: ignoring backing file '%s' (backing=none)", l->path,
                    name);
      return 1;
    }
  if (q->nlayers > qcow2_params.backing_max_depth)
    {
      nbdkit_error ("%s: backing chain is deeper than %u files (see "
                    "backing-max-depth)",
                    q->layers[0].path, qcow2_params.backing_max_depth);
      return -1;
    }
  real = resolve_contained (q, l->path, name, "backing file");
  if (real == NULL)
    return -1;
  if (open_layer (q, real, false, &no, qcow2_get_backing_format (l->img)) == -1)
    return -1;
  return attach_below (q, i);
}

struct q2 *
qcow2_chain_open (const struct image_options *opts)
{
  struct q2 *q = calloc (1, sizeof *q);
  unsigned i;
  int r = 0;

  if (q == NULL)
    {
      nbdkit_error ("calloc: %m");
      return NULL;
    }
  q->opts = opts;
  q->layers = calloc (qcow2_params.backing_max_depth + 1, sizeof *q->layers);
  if (q->layers == NULL)
    {
      nbdkit_error ("calloc: %m");
      goto fail;
    }
  /* Only the top image is opened for writing: not with readonly=true
   * (or nbdkit -r: then readonly is set too, see image.c), nor to serve
   * a snapshot.
   */
  q->writable = !opts->readonly && qcow2_params.snapshot == NULL;
  if (open_layer (q, opts->file, true, &q->writable, "qcow2") == -1
      || set_root (q, opts->file) == -1)
    goto fail;
  for (i = 0; r == 0 && i < q->nlayers; ++i)
    r = open_below (q, i);
  if (r == -1)
    goto fail;
  return q;

fail:
  qcow2_chain_close (q);
  return NULL;
}
