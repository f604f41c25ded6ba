/* nbdstack image plugin: qcow2 glue over lib/.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The format itself lives in lib/ (no nbdkit dependency).  This file
 * parses the qcow2 parameters, creates images (create=true), opens the
 * image with its backing chain and external data file under the
 * containment rules, serves reads and writes, and maps lib errors to
 * nbdkit errors.  Only the top image is ever written; backing and data
 * files are opened read-only.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef HAVE_LINUX_FS_H
#include <linux/fs.h>
#endif

#include "align.h"
#include "bounce.h"
#include "cleanup.h"
#include "format.h"
#include "hostio-range.h"
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
/* create=true only. */
static unsigned create_cluster_bits = 16;
static bool create_extended_l2;
static bool create_preallocate;
static bool create_params_given; /* one of them was set */
static bool created;             /* qcow2_glue_create ran */

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
  char *root;    /* real path of the allowed dir */
  bool writable; /* the top image is open for writing */
};

enum preallocation
{
  PREALLOC_OFF,
  PREALLOC_METADATA
};
static const struct enum_param_word prealloc_words[] = {
  { "off", PREALLOC_OFF },
  { "metadata", PREALLOC_METADATA },
};

static enum qcow2_layout layout = QCOW2_LAYOUT_AUTO;
static bool repair_leaks; /* repair=leaks */
static const struct enum_param_word layout_words[] = {
  { "auto", QCOW2_LAYOUT_AUTO },
  { "linear", QCOW2_LAYOUT_LINEAR },
  { "compact", QCOW2_LAYOUT_COMPACT },
};

static int
qcow2_config (const char *key, const char *value)
{
  if (strcmp (key, "repair") == 0)
    {
      if (strcmp (value, "leaks") != 0)
        {
          nbdkit_error ("repair=%s: only repair=leaks is supported", value);
          return -1;
        }
      repair_leaks = true;
      return 1;
    }
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
  if (strcmp (key, "cluster-size") == 0)
    {
      int64_t cs = nbdkit_parse_size (value);
      unsigned bits = 0;
      if (cs == -1)
        return -1;
      while (bits < 63 && (INT64_C (1) << bits) < cs)
        bits++;
      if (cs < 512 || cs > 2 * 1024 * 1024 || (INT64_C (1) << bits) != cs)
        {
          nbdkit_error ("cluster-size must be a power of 2 from 512 to 2M, "
                        "not %s",
                        value);
          return -1;
        }
      create_cluster_bits = bits;
      create_params_given = true;
      return 1;
    }
  if (strcmp (key, "extended-l2") == 0)
    {
      if (parse_bool_param (key, value, &create_extended_l2) == -1)
        return -1;
      create_params_given = true;
      return 1;
    }
  if (strcmp (key, "preallocation") == 0)
    {
      int r;
      if (parse_enum_param (key, value, prealloc_words, &r) == -1)
        return -1;
      create_preallocate = r == PREALLOC_METADATA;
      create_params_given = true;
      return 1;
    }
  if (strcmp (key, "layout") == 0)
    {
      int r;
      if (parse_enum_param (key, value, layout_words, &r) == -1)
        return -1;
      layout = r;
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

/* cache=none: a hostio over an O_DIRECT descriptor.  The library
 * writes and reads at any offset and length from any buffer (12-byte
 * header updates, 512-byte L1 sectors, the bytes of a request inside a
 * cluster), so every request that is not aligned goes through an
 * aligned bounce buffer, and its partial sectors at either end are
 * read, patched and written back under a lock chosen by sector number
 * (as raw-io.c does): the library may write different bytes of one
 * sector at once (a data write and an L2 table, with small clusters).
 * Bytes past the end of the file read as zeroes in a patched sector:
 * the write grows the file, to the end of that sector.  Flush, zero,
 * size and holes are the plain descriptor's.
 */
#define DIO_ALIGN 4096
#define DIO_LOCKS 64

/* Bounce buffers come from the shared pool (bounce.h): a request that
 * is not aligned goes through one, a chunk of at most BOUNCE_SIZE at a
 * time (a fresh buffer for every large request would cost an mmap, page
 * faults and an munmap each).
 */
static_assert (BOUNCE_ALIGN % DIO_ALIGN == 0 && BOUNCE_SIZE % DIO_ALIGN == 0,
               "pool buffers must suit O_DIRECT");

struct dio
{
  struct qcow2_hostio io; /* must be first */
  struct qcow2_hostio *base;
  int fd;
  pthread_mutex_t locks[DIO_LOCKS];
};

/* Read [offset, offset+count) aligned; bytes past the end of the file
 * are zero.  *got: how many bytes the file had.
 */
static int
dio_read_raw (struct dio *d, char *buf, size_t count, uint64_t offset,
              size_t *got)
{
  size_t done = 0;

  while (done < count)
    {
      ssize_t r = pread (d->fd, buf + done, count - done, offset + done);
      if (r == -1)
        {
          if (errno == EINTR)
            continue;
          return -errno;
        }
      if (r == 0)
        break;
      done += r;
    }
  memset (buf + done, 0, count - done);
  *got = done;
  return 0;
}

static int
dio_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct dio *d = (struct dio *)io;
  const uint64_t end = offset + count;
  uint64_t s = ROUND_DOWN (offset, DIO_ALIGN);
  const uint64_t e = ROUND_UP (end, DIO_ALIGN);
  char *p = buf, *b;
  size_t got;
  int r = 0;

  if (count == 0)
    return 0;
  if (s == offset && e == end && (uintptr_t)buf % DIO_ALIGN == 0)
    {
      r = dio_read_raw (d, buf, count, offset, &got);
      return r == 0 && got < count ? -EIO : r;
    }
  b = bounce_get ();
  if (b == NULL)
    return -ENOMEM;
  /* Chunk by chunk: [cs, ce) read aligned, its part of the request
   * copied out.
   */
  while (r == 0 && s < e)
    {
      uint64_t ce = e - s < BOUNCE_SIZE ? e : s + BOUNCE_SIZE;
      uint64_t ds = s > offset ? s : offset, de = ce < end ? ce : end;

      r = dio_read_raw (d, b, ce - s, s, &got);
      if (r == 0 && got < de - s)
        r = -EIO; /* callers never read past the end */
      if (r == 0)
        memcpy (p, b + (ds - s), de - ds);
      p += de - ds;
      s = ce;
    }
  bounce_put (b);
  return r;
}

/* Whether every piece of a write starts and ends on an alignment
 * boundary, in memory and on disk: then it needs no bounce buffer.
 * Requests arrive in nbdkit's buffers (at no particular alignment) or
 * in a filter's (the coalesce filter's are page-aligned).
 */
static bool
dio_aligned (const struct iovec *iov, int iovcnt, uint64_t offset)
{
  int i;

  if (offset % DIO_ALIGN)
    return false;
  for (i = 0; i < iovcnt; ++i)
    if ((uintptr_t)iov[i].iov_base % DIO_ALIGN || iov[i].iov_len % DIO_ALIGN)
      return false;
  return true;
}

/* Gathers a write's data, in order, into bounce chunks. */
struct iov_cursor
{
  const struct iovec *iov;
  int i;
  size_t off; /* in iov[i] */
};

static void
gather (struct iov_cursor *c, char *dst, size_t n)
{
  while (n > 0)
    {
      size_t k = c->iov[c->i].iov_len - c->off;
      if (k > n)
        k = n;
      memcpy (dst, (const char *)c->iov[c->i].iov_base + c->off, k);
      dst += k;
      n -= k;
      c->off += k;
      if (c->off == c->iov[c->i].iov_len)
        {
          c->i++;
          c->off = 0;
        }
    }
}

/* An unaligned write goes through a pool buffer, a chunk of at most
 * BOUNCE_SIZE at a time.
 */
static int
dio_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  struct dio *d = (struct dio *)io;
  struct iov_cursor cur = { .iov = iov };
  size_t count = 0, got, chunk;
  uint64_t s, e, cs, ce, end;
  unsigned l1, l2;
  bool head, tail;
  char *b;
  int i, r = 0;

  for (i = 0; i < iovcnt; ++i)
    count += iov[i].iov_len;
  if (count == 0)
    return 0;
  if (dio_aligned (iov, iovcnt, offset))
    return d->base->pwritev (d->base, iov, iovcnt, offset);
  end = offset + count;
  s = ROUND_DOWN (offset, DIO_ALIGN);
  e = ROUND_UP (end, DIO_ALIGN);
  head = s != offset;
  tail = e != end;
  chunk = e - s < BOUNCE_SIZE ? e - s : BOUNCE_SIZE;
  b = bounce_get ();
  if (b == NULL)
    return -ENOMEM;
  l1 = (s / DIO_ALIGN) % DIO_LOCKS;
  l2 = ((e - DIO_ALIGN) / DIO_ALIGN) % DIO_LOCKS;
  if (head || tail)
    {
      /* Lowest lock first: two writers never wait on each other. */
      unsigned a = head ? l1 : l2, z = tail ? l2 : l1;
      if (a > z)
        {
          unsigned t = a;
          a = z;
          z = t;
        }
      pthread_mutex_lock (&d->locks[a]);
      if (z != a)
        pthread_mutex_lock (&d->locks[z]);
    }
  for (cs = s; r == 0 && cs < e; cs = ce)
    {
      uint64_t ds, de;

      ce = e - cs < chunk ? e : cs + chunk;
      /* The partial blocks at either end: what the file has there. */
      if (head && cs == s)
        r = dio_read_raw (d, b, DIO_ALIGN, s, &got);
      if (r == 0 && tail && ce == e && (!head || e - s > DIO_ALIGN))
        r = dio_read_raw (d, b + (ce - cs) - DIO_ALIGN, DIO_ALIGN,
                          e - DIO_ALIGN, &got);
      if (r != 0)
        break;
      ds = cs > offset ? cs : offset;
      de = ce < end ? ce : end;
      gather (&cur, b + (ds - cs), de - ds);
      r = qcow2_hostio_pwrite (d->base, b, ce - cs, cs);
    }
  if (head || tail)
    {
      unsigned a = head ? l1 : l2, z = tail ? l2 : l1;
      pthread_mutex_unlock (&d->locks[a]);
      if (z != a)
        pthread_mutex_unlock (&d->locks[z]);
    }
  bounce_put (b);
  return r;
}

static int64_t
dio_get_size (struct qcow2_hostio *io)
{
  struct dio *d = (struct dio *)io;
  return d->base->get_size (d->base);
}

static int
dio_block_status (struct qcow2_hostio *io, uint64_t offset, uint64_t max,
                  uint64_t *len, bool *hole)
{
  struct dio *d = (struct dio *)io;
  return d->base->block_status (d->base, offset, max, len, hole);
}

static int
dio_flush (struct qcow2_hostio *io)
{
  struct dio *d = (struct dio *)io;
  return d->base->flush (d->base);
}

/* fallocate needs no alignment on an O_DIRECT descriptor. */
static int
dio_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  struct dio *d = (struct dio *)io;
  return d->base->zero (d->base, offset, len, punch);
}

static void
dio_close (struct qcow2_hostio *io)
{
  struct dio *d = (struct dio *)io;
  unsigned i;

  qcow2_hostio_close (d->base);
  for (i = 0; i < DIO_LOCKS; ++i)
    pthread_mutex_destroy (&d->locks[i]);
  free (d);
}

/* Takes over fd (closed on failure too). */
static struct qcow2_hostio *
hostio_direct (int fd)
{
  struct dio *d = calloc (1, sizeof *d);
  unsigned i;

  if (d == NULL || (d->base = qcow2_hostio_fd (fd)) == NULL)
    {
      free (d);
      close (fd);
      return NULL;
    }
  d->fd = fd;
  for (i = 0; i < DIO_LOCKS; ++i)
    pthread_mutex_init (&d->locks[i], NULL);
  d->io.pread = dio_pread;
  d->io.get_size = dio_get_size;
  d->io.close = dio_close;
  d->io.block_status = dio_block_status;
  if (d->base->pwritev)
    {
      d->io.pwritev = dio_pwritev;
      d->io.flush = dio_flush;
      d->io.zero = dio_zero;
    }
  d->io.fixed_size = d->base->fixed_size;
  d->io.max_size = d->base->max_size;
  return &d->io;
}

static enum image_cache_mode cache_mode;

/* Open 'path', for writing if '*writable'.  A top image we may only
 * read is opened read-only and *writable cleared; image_open then
 * refuses every connection that is not read-only (as qemu-nbd refuses
 * it without -r).  Backing and data files are never asked to be
 * writable.
 */
static struct qcow2_hostio *
open_file (const char *path, struct stat *st, bool *writable)
{
  int dflag = cache_mode == CACHE_NONE ? O_DIRECT : 0;
  int fd = -1;
  struct qcow2_hostio *io;

  if (*writable)
    {
      fd = open (path, O_RDWR | O_CLOEXEC | dflag);
      if (fd == -1 && (errno == EACCES || errno == EROFS || errno == EPERM))
        {
          image_note_unwritable (path, errno);
          *writable = false;
        }
      else if (fd == -1)
        goto open_error;
    }
  if (fd == -1)
    fd = open (path, O_RDONLY | O_CLOEXEC | dflag);
  if (fd == -1)
    {
    open_error:
      if (errno == EINVAL && dflag)
        nbdkit_error ("%s: cache=none: this filesystem does not support "
                      "O_DIRECT (use cache=writeback)",
                      path);
      else
        nbdkit_error ("%s: %m", path);
      return NULL;
    }
  if (fstat (fd, st) == -1)
    {
      nbdkit_error ("%s: fstat: %m", path);
      close (fd);
      return NULL;
    }
  if (dflag)
    io = hostio_direct (fd);
  else
    {
      io = qcow2_hostio_fd (fd);
      if (io == NULL)
        close (fd);
    }
  if (io == NULL)
    nbdkit_error ("out of memory");
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
/* image-offset=, image-length=: the top image is a byte range of its
 * file.  The range must lie inside the file, as qemu's raw driver
 * checks its offset and size at open.
 */
static uint64_t image_offset;
static int64_t image_length = -1;

static int
wrap_range (struct layer *l)
{
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

static int
open_layer (struct q2 *q, const char *path, bool is_top, bool *writable,
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
  l->io = open_file (path, &st, writable);
  if (l->io == NULL)
    return -1;
  if (is_top && (image_offset > 0 || image_length >= 0) && wrap_range (l) == -1)
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
      uint64_t leaks = 0;
      struct qcow2_open_options opts = {
        .l2_cache_size = l2_cache_size,
        .snapshot = is_top ? snapshot : NULL,
        .writable = *writable,
        .layout = layout,
        .repair_leaks = repair_leaks && is_top && *writable,
        .leaks_repaired = &leaks,
      };
      struct qcow2_error err = { 0 };

      l->img = qcow2_open (l->io, &opts, &err);
      if (l->img && opts.repair_leaks)
        nbdkit_debug ("%s: repair=leaks: %" PRIu64 " leaked clusters given "
                      "back", path, leaks);
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
              nbdkit_error ("%s: served read-only: %s", path, err.msg);
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
  {
    bool no = false;
    l->data_io = open_file (real, &st, &no);
  }
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
  if (create_params_given && !created)
    {
      nbdkit_error ("cluster-size, extended-l2 and preallocation are only "
                    "used with create=true|force");
      goto fail;
    }
  cache_mode = opts->cache;
  image_offset = opts->image_offset;
  image_length = opts->image_length;
  /* Only the top image is opened for writing: not with readonly=true
   * (or nbdkit -r: then readonly is set too, see image.c), nor to serve
   * a snapshot.
   */
  q->writable = !opts->readonly && snapshot == NULL;
  if (open_layer (q, opts->file, true, &q->writable, "qcow2") == -1)
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
      bool no = false;
      if (open_layer (q, real, false, &no, qcow2_get_backing_format (l->img))
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

  nbdkit_debug ("%s: qcow2 v%u, cluster size %u, %u L2 cache entries, "
                "%u file(s) in the chain%s%s%s%s%s",
                opts->file, qcow2_get_version (q->layers[0].img),
                qcow2_get_cluster_size (q->layers[0].img),
                qcow2_get_l2_cache_entries (q->layers[0].img), q->nlayers,
                qcow2_is_dirty (q->layers[0].img) ? ", dirty" : "",
                q->writable ? ", writable" : ", read-only",
                q->writable ? ", layout " : "",
                qcow2_layout_name (q->layers[0].img),
                cache_mode == CACHE_NONE ? ", O_DIRECT" : "");
  return q;

fail:
  qcow2_glue_close (q);
  return NULL;
}

/* qemu counts a qcow2 virtual size in whole 512-byte sectors and
 * ignores a partial last one (an image made by another tool may have
 * one): serve what qemu serves, so that no byte a client writes is
 * invisible to qemu.
 */
static int64_t
qcow2_glue_get_size (void *state)
{
  struct q2 *q = state;

  return ROUND_DOWN (qcow2_get_size (q->layers[0].img), 512);
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

static int
qcow2_glue_can_write (void *state)
{
  struct q2 *q = state;
  return q->writable;
}

/* A flush of a read-only image is a no-op, so always offered. */
static int
qcow2_glue_can_flush (void *state)
{
  return 1;
}

/* Zero and trim go through the library, which handles any range. */
static int
qcow2_glue_can_zero (void *state)
{
  struct q2 *q = state;
  return q->writable;
}

static int
qcow2_glue_can_trim (void *state)
{
  struct q2 *q = state;
  return q->writable;
}

/* qcow2_zero with QCOW2_ZERO_FAST fails with ENOTSUP before changing
 * anything when it would have to write data.
 */
static int
qcow2_glue_can_fast_zero (void *state)
{
  struct q2 *q = state;
  return q->writable;
}

/* FUA: the request, then an image-wide flush (group commit). */
static int
qcow2_glue_can_fua (void *state)
{
  struct q2 *q = state;
  return q->writable ? NBDKIT_FUA_NATIVE : NBDKIT_FUA_NONE;
}

/* Any request works (the library does the read-modify-write of
 * partial clusters); whole clusters avoid it.  The maximum is what
 * nbdkit accepts in one request, as for raw.
 */
static int
qcow2_glue_block_size (void *state, uint32_t *minimum, uint32_t *preferred,
                       uint32_t *maximum)
{
  struct q2 *q = state;
  uint32_t cs = qcow2_get_cluster_size (q->layers[0].img);

  *minimum = 1;
  *preferred = MAX (cs, 4096u);
  *maximum = 64 * 1024 * 1024;
  return 0;
}

static int
flush_if_fua (struct q2 *q, uint32_t flags)
{
  struct qcow2_error err = { 0 };

  if ((flags & NBDKIT_FLAG_FUA) && qcow2_flush (q->layers[0].img, &err) == -1)
    return report (q, &err);
  return 0;
}

static int
qcow2_glue_pwrite (void *state, const void *buf, uint32_t count,
                   uint64_t offset, uint32_t flags)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };

  if (qcow2_pwrite (q->layers[0].img, buf, count, offset, &err) == -1)
    return report (q, &err);
  return flush_if_fua (q, flags);
}

static int
qcow2_glue_flush (void *state, uint32_t flags)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };

  if (qcow2_flush (q->layers[0].img, &err) == -1)
    return report (q, &err);
  return 0;
}

static int
qcow2_glue_zero (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };
  unsigned zflags = 0;

  if (flags & NBDKIT_FLAG_MAY_TRIM)
    zflags |= QCOW2_ZERO_MAY_UNMAP;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    zflags |= QCOW2_ZERO_FAST;
  if (qcow2_zero (q->layers[0].img, count, offset, zflags, &err) == -1)
    {
      if (err.errnum == ENOTSUP && (flags & NBDKIT_FLAG_FAST_ZERO))
        {
          /* The expected answer to FAST_ZERO, not worth a log line. */
          nbdkit_set_error (ENOTSUP);
          return -1;
        }
      return report (q, &err);
    }
  return flush_if_fua (q, flags);
}

static int
qcow2_glue_trim (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };

  if (qcow2_discard (q->layers[0].img, count, offset, &err) == -1)
    return report (q, &err);
  return flush_if_fua (q, flags);
}

/* create=true|force format=qcow2: an empty v3 image, laid out for the
 * linear allocation on a regular file, compact on a block device.
 * create=true keeps an existing qcow2 image of that size (as raw keeps
 * a file of that size), refuses anything else; create=force replaces
 * it (a regular file is truncated first).
 */
static int
qcow2_glue_create (const char *file, int64_t size, bool force)
{
  const char *how = force ? "force" : "true";
  struct qcow2_create_options o = {
    .size = size,
    .cluster_bits = create_cluster_bits,
    .refcount_bits = 16,
    .extended_l2 = create_extended_l2,
    .preallocate = create_preallocate,
  };
  struct qcow2_error err = { 0 };
  struct qcow2_hostio *io;
  struct stat st;
  bool made = false, exists = false;
  int fd, r;

  created = true;
  if (stat (file, &st) == 0)
    {
      exists = true;
      if (!S_ISREG (st.st_mode) && !S_ISBLK (st.st_mode))
        {
          nbdkit_error ("%s: create=%s: exists and is not a regular file or "
                        "block device",
                        file, how);
          return -1;
        }
      if (!force)
        {
          /* Is it already the image asked for? */
          bool same = false, is_qcow2 = false;
          fd = open (file, O_RDONLY | O_CLOEXEC);
          io = fd >= 0 ? qcow2_hostio_fd (fd) : NULL;
          if (io == NULL && fd >= 0)
            close (fd);
          if (io && sniff_qcow2 (io, &is_qcow2) == 0 && is_qcow2)
            {
              struct qcow2_open_options ro = { 0 };
              struct qcow2_image *img = qcow2_open (io, &ro, &err);
              same = img && qcow2_get_size (img) == (uint64_t)size;
              qcow2_close (img);
            }
          qcow2_hostio_close (io);
          if (same)
            return 0;
          if (S_ISREG (st.st_mode) || is_qcow2)
            {
              nbdkit_error ("%s: already exists and is not a qcow2 image of "
                            "size %" PRIi64 " (use create=force to replace it)",
                            file, size);
              return -1;
            }
          /* A block device without a qcow2 header: create on it. */
        }
    }
  else if (errno != ENOENT)
    {
      nbdkit_error ("%s: %m", file);
      return -1;
    }

  /* O_EXCL: a file that appeared since the stat is not clobbered. */
  fd = open (file, O_RDWR | O_CLOEXEC | (exists ? 0 : O_CREAT | O_EXCL), 0644);
  if (fd == -1)
    {
      nbdkit_error ("%s: cannot create: %m", file);
      return -1;
    }
  if (fstat (fd, &st) == -1)
    {
      nbdkit_error ("%s: fstat: %m", file);
      close (fd);
      return -1;
    }
  made = !exists;
  if (S_ISREG (st.st_mode) && ftruncate (fd, 0) == -1)
    {
      nbdkit_error ("%s: truncate: %m", file);
      close (fd);
      return -1;
    }
  o.linear = S_ISREG (st.st_mode) && layout != QCOW2_LAYOUT_COMPACT;
  if (!S_ISREG (st.st_mode) && layout == QCOW2_LAYOUT_LINEAR)
    {
      nbdkit_error ("%s: layout=linear needs a regular file, not a device",
                    file);
      close (fd);
      if (made)
        unlink (file);
      return -1;
    }
  io = qcow2_hostio_fd (fd);
  if (io == NULL)
    {
      nbdkit_error ("out of memory");
      close (fd);
      r = -1;
    }
  else
    {
      r = qcow2_create (io, &o, &err);
      /* layout=auto: a disk too large for the linear layout here (the
       * file system's file size limit, or 56-bit offsets) is made
       * compact, as an image qemu-img made is kept compact at open.
       */
      if (r == -1 && err.errnum == EFBIG && o.linear
          && layout == QCOW2_LAYOUT_AUTO)
        {
          nbdkit_debug ("%s: %s: making it compact", file, err.msg);
          o.linear = false;
          r = qcow2_create (io, &o, &err);
        }
      if (r == -1)
        nbdkit_error ("%s: create=%s: %s", file, how, err.msg);
      qcow2_hostio_close (io);
    }
  if (r == -1 && made)
    unlink (file);
  if (r == 0)
    nbdkit_debug ("%s: created qcow2 v3, size %" PRIi64
                  ", cluster size %u%s%s, "
                  "%s layout",
                  file, size, 1u << create_cluster_bits,
                  create_extended_l2 ? ", extended L2" : "",
                  create_preallocate ? ", metadata preallocated" : "",
                  o.linear ? "linear" : "compact");
  return r;
}

const struct format_ops qcow2_format = {
  .name = "qcow2",
  .config = qcow2_config,
  .open = qcow2_glue_open,
  .close = qcow2_glue_close,
  .get_size = qcow2_glue_get_size,
  .create = qcow2_glue_create,
  .can_write = qcow2_glue_can_write,
  .can_flush = qcow2_glue_can_flush,
  .can_trim = qcow2_glue_can_trim,
  .can_zero = qcow2_glue_can_zero,
  .can_fast_zero = qcow2_glue_can_fast_zero,
  .can_fua = qcow2_glue_can_fua,
  .can_extents = qcow2_glue_can_extents,
  .block_size = qcow2_glue_block_size,
  .pread = qcow2_glue_pread,
  .pwrite = qcow2_glue_pwrite,
  .flush = qcow2_glue_flush,
  .trim = qcow2_glue_trim,
  .zero = qcow2_glue_zero,
  .extents = qcow2_glue_extents,
};
