/* nbdstack image plugin: qcow2 glue over lib/ (read-only for now).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The format itself lives in lib/ (no nbdkit dependency).  This file
 * parses the qcow2 parameters, opens the image with its backing chain
 * and external data file under the containment rules, and maps lib
 * errors to nbdkit errors.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "format.h"
#include "parse-enum-param.h"
#include "qcow2.h"

enum backing_mode
{
  BACKING_REFUSE,
  BACKING_NONE,
  BACKING_FOLLOW
};

/* Parameters. */
static int64_t l2_cache_size; /* 0 = library default */
static enum backing_mode backing_mode = BACKING_REFUSE;
static char *backing_dir; /* NULL = the image's directory */
static unsigned backing_max_depth = 16;
static char *snapshot;

static const struct enum_param_word backing_words[] = {
  { "refuse", BACKING_REFUSE },
  { "none", BACKING_NONE },
  { "follow", BACKING_FOLLOW },
};

/* One file of the chain: the top image, a backing file or a data file. */
struct layer
{
  char *path; /* real path */
  dev_t dev;
  ino_t ino;
  struct qcow2_hostio *io;
  struct qcow2_image *img;      /* NULL for a raw file */
  struct qcow2_hostio *data_io; /* external data file, or NULL */
};

struct q2
{
  struct layer *layers; /* [0] is the top image */
  unsigned nlayers;
  char *root; /* real path of the allowed dir */
};

static int
qcow2_config (const char *key, const char *value)
{
  if (strcmp (key, "l2-cache-size") == 0)
    {
      l2_cache_size = nbdkit_parse_size (value);
      if (l2_cache_size == -1)
        return -1;
      if (l2_cache_size == 0)
        {
          nbdkit_error ("l2-cache-size must be greater than 0");
          return -1;
        }
      return 1;
    }
  if (strcmp (key, "backing") == 0)
    {
      int r;
      if (parse_enum_param (key, value, backing_words, &r) == -1)
        return -1;
      backing_mode = r;
      return 1;
    }
  if (strcmp (key, "backing-dir") == 0)
    {
      free (backing_dir);
      backing_dir = nbdkit_realpath (value);
      return backing_dir ? 1 : -1;
    }
  if (strcmp (key, "backing-max-depth") == 0)
    {
      if (nbdkit_parse_unsigned ("backing-max-depth", value, &backing_max_depth)
          == -1)
        return -1;
      if (backing_max_depth > 255)
        {
          nbdkit_error ("backing-max-depth must be at most 255");
          return -1;
        }
      return 1;
    }
  if (strcmp (key, "snapshot") == 0)
    {
      free (snapshot);
      snapshot = strdup (value);
      if (snapshot == NULL)
        {
          nbdkit_error ("strdup: %m");
          return -1;
        }
      return 1;
    }
  return 0;
}

static void
free_layer (struct layer *l)
{
  qcow2_close (l->img);
  qcow2_hostio_close (l->data_io);
  qcow2_hostio_close (l->io);
  free (l->path);
}

static void
qcow2_glue_close (void *state)
{
  struct q2 *q = state;
  unsigned i;

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

/* lib/ can write qcow2, but the plugin serves it only once the whole
 * write path is done and tested (lib/WRITING.md): until then every file
 * is opened read-only.  When writes are served, only the top image is
 * opened for writing; backing and data files never are.
 */
static const bool serve_writes = false;

static struct qcow2_hostio *
open_file (const char *path, struct stat *st, bool writable)
{
  int fd = open (path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  struct qcow2_hostio *io;

  if (fd == -1)
    {
      nbdkit_error ("%s: %m", path);
      return NULL;
    }
  if (fstat (fd, st) == -1)
    {
      nbdkit_error ("%s: fstat: %m", path);
      close (fd);
      return NULL;
    }
  io = qcow2_hostio_fd (fd);
  if (io == NULL)
    {
      nbdkit_error ("out of memory");
      close (fd);
    }
  return io;
}

/* Does the file start with the qcow2 magic? */
static int
sniff_qcow2 (struct qcow2_hostio *io, bool *is_qcow2)
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

/* Open the layer at 'path' (index q->nlayers) as qcow2 or raw; only
 * a top layer can be 'writable'.
 */
static int
open_layer (struct q2 *q, const char *path, bool is_top, bool writable,
            const char *format)
{
  struct layer *l = &q->layers[q->nlayers];
  struct stat st;
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
  l->io = open_file (path, &st, is_top && writable);
  if (l->io == NULL)
    return -1;
  l->dev = st.st_dev;
  l->ino = st.st_ino;
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
      if (sniff_qcow2 (l->io, &is_qcow2) < 0)
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
    {
      struct qcow2_open_options opts = {
        .l2_cache_size = l2_cache_size,
        .snapshot = is_top ? snapshot : NULL,
        .writable = is_top && writable,
      };
      struct qcow2_error err = { 0 };

      l->img = qcow2_open (l->io, &opts, &err);
      if (l->img == NULL)
        {
          nbdkit_error ("%s: %s", path, err.msg);
          return -1;
        }
    }
  return 0;
}

/* Open the external data file the image at layer 'i' names. */
static int
open_data_file (struct q2 *q, unsigned i)
{
  struct layer *l = &q->layers[i];
  const char *name = qcow2_get_data_file (l->img);
  CLEANUP_FREE char *real = NULL;
  struct stat st;

  if (name == NULL)
    return 0;
  real = resolve_contained (q, l->path, name, "external data file");
  if (real == NULL)
    return -1;
  l->data_io = open_file (real, &st, false);
  if (l->data_io == NULL)
    return -1;
  qcow2_set_data_file (l->img, l->data_io);
  return 0;
}

static void *
qcow2_glue_open (const struct image_options *opts)
{
  struct q2 *q = calloc (1, sizeof *q);
  unsigned i;

  if (q == NULL)
    {
      nbdkit_error ("calloc: %m");
      return NULL;
    }
  q->layers = calloc (backing_max_depth + 1, sizeof *q->layers);
  if (q->layers == NULL)
    {
      nbdkit_error ("calloc: %m");
      goto fail;
    }
  if (open_layer (q, opts->file, true, serve_writes && !opts->readonly, "qcow2")
      == -1)
    goto fail;

  /* Everything the image refers to must resolve inside this directory. */
  if (backing_dir)
    q->root = strdup (backing_dir);
  else
    {
      char *real = realpath (opts->file, NULL);
      char *slash = real ? strrchr (real, '/') : NULL;
      if (slash)
        *(slash == real ? slash + 1 : slash) = '\0';
      q->root = real;
    }
  if (q->root == NULL)
    {
      nbdkit_error ("%s: %m", opts->file);
      goto fail;
    }

  for (i = 0; i < q->nlayers; ++i)
    {
      struct layer *l = &q->layers[i];
      const char *name;
      CLEANUP_FREE char *real = NULL;
      struct layer *below;

      if (l->img == NULL)
        break; /* raw: the bottom of the chain */
      if (open_data_file (q, i) == -1)
        goto fail;
      name = qcow2_get_backing_file (l->img);
      if (name == NULL)
        break;
      if (backing_mode == BACKING_REFUSE)
        {
          nbdkit_error ("%s: image has a backing file '%s'; refusing it (use "
                        "backing=follow [backing-dir=DIR] to open it, or "
                        "backing=none to serve this layer alone)",
                        l->path, name);
          goto fail;
        }
      if (backing_mode == BACKING_NONE)
        {
          nbdkit_debug ("%s: ignoring backing file '%s' (backing=none)",
                        l->path, name);
          break;
        }
      if (q->nlayers > backing_max_depth)
        {
          nbdkit_error ("%s: backing chain is deeper than %u files (see "
                        "backing-max-depth)",
                        opts->file, backing_max_depth);
          goto fail;
        }
      real = resolve_contained (q, l->path, name, "backing file");
      if (real == NULL)
        goto fail;
      if (open_layer (q, real, false, false, qcow2_get_backing_format (l->img))
          == -1)
        goto fail;
      l = &q->layers[i];
      below = &q->layers[i + 1];
      if (below->img)
        qcow2_set_backing (l->img, &qcow2_image_layer_ops, below->img,
                           qcow2_get_size (below->img));
      else
        {
          int64_t size = below->io->get_size (below->io);
          if (size < 0)
            {
              nbdkit_error ("%s: cannot get the size", below->path);
              goto fail;
            }
          qcow2_set_backing (l->img, &qcow2_raw_layer_ops, below->io, size);
        }
    }

  /* Writing qcow2 comes later; say so instead of failing writes.  Not
   * an error, but nbdkit_debug is silent without -v, and the operator
   * who expected a writable export must see this line.
   */
  nbdkit_error ("%s: qcow2 images are served read-only "
                "(qcow2 writing is not supported yet)",
                opts->file);
  nbdkit_debug ("%s: qcow2 v%u, cluster size %u, %u L2 cache entries, "
                "%u file(s) in the chain%s",
                opts->file, qcow2_get_version (q->layers[0].img),
                qcow2_get_cluster_size (q->layers[0].img),
                qcow2_get_l2_cache_entries (q->layers[0].img), q->nlayers,
                qcow2_is_dirty (q->layers[0].img) ? ", dirty" : "");
  return q;

fail:
  qcow2_glue_close (q);
  return NULL;
}

static int64_t
qcow2_glue_get_size (void *state)
{
  struct q2 *q = state;

  return qcow2_get_size (q->layers[0].img);
}

static int
qcow2_glue_can_extents (void *state)
{
  return 1;
}

static int
report (struct q2 *q, const struct qcow2_error *err)
{
  nbdkit_error ("%s: %s", q->layers[0].path, err->msg);
  nbdkit_set_error (err->errnum ? err->errnum : EIO);
  return -1;
}

static int
qcow2_glue_pread (void *state, void *buf, uint32_t count, uint64_t offset,
                  uint32_t flags)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };

  if (qcow2_pread (q->layers[0].img, buf, count, offset, &err) == -1)
    return report (q, &err);
  return 0;
}

/* Extents from the L1/L2 tables (through the backing chain), clipped to
 * the request so no extent ever ends past offset+count.
 */
static int
qcow2_glue_extents (void *state, uint32_t count, uint64_t offset,
                    uint32_t flags, struct nbdkit_extents *extents)
{
  struct q2 *q = state;
  uint64_t end = offset + count;

  while (offset < end)
    {
      struct qcow2_error err = { 0 };
      uint64_t len;
      unsigned type;

      if (qcow2_block_status (q->layers[0].img, offset, end - offset, &len,
                              &type, &err)
          == -1)
        return report (q, &err);
      if (nbdkit_add_extent (extents, offset, len, type) == -1)
        return -1;
      offset += len;
      if (flags & NBDKIT_FLAG_REQ_ONE)
        break;
    }
  return 0;
}

const struct format_ops qcow2_format = {
  .name = "qcow2",
  .config = qcow2_config,
  .open = qcow2_glue_open,
  .close = qcow2_glue_close,
  .get_size = qcow2_glue_get_size,
  .can_extents = qcow2_glue_can_extents,
  .pread = qcow2_glue_pread,
  .extents = qcow2_glue_extents,
};
