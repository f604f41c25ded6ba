/* nbdstack image plugin: the raw format (files and block devices) over
 * the host-file layer.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: every byte goes through lib/hostfile (hostfile.h), which
 * this file only translates to nbdkit's callbacks and errors.  One
 * hostfile is shared by every connection and thread: its data path
 * takes no lock of its own beyond the read-modify-write of partial
 * O_DIRECT units.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "format.h"
#include "hostfile.h"

struct raw
{
  struct hostfile *hf;
  const char *file; /* for messages: the plugin's file= */
};

/* -D image.slowzero=1: behave as if the kernel refused every fast way of
 * zeroing and trimming (fallocate, BLKZEROOUT, BLKDISCARD), as on a
 * filesystem without them.  Lets the tests reach the FAST_ZERO refusal
 * and the write-zeroes fallback on any machine.
 */
NBDKIT_DLL_PUBLIC int image_debug_slowzero = 0;

/* Log a failed call (r: a negative errno) and give nbdkit the errno. */
static int
fail (const char *what, int r)
{
  errno = -r;
  nbdkit_error ("%s: %m", what);
  nbdkit_set_error (-r);
  return -1;
}

/* The current size of the open file or device, taken again (and the
 * tail with it).  0, or -1 after nbdkit_error.
 */
static int
take_size (struct raw *raw)
{
  int64_t r = hostfile_refresh_size (raw->hf);

  if (r >= 0)
    return 0;
  errno = -r;
  if (r == -EFBIG)
    nbdkit_error ("%s: size too large", raw->file);
  else if (raw->hf->is_blkdev)
    nbdkit_error ("%s: block device size (ioctl BLKGETSIZE64) "
                  "not supported: %m",
                  raw->file);
  else
    nbdkit_error ("%s: fstat: %m", raw->file);
  return -1;
}

static void raw_close (void *state);

static void *
raw_open (const struct image_options *opts)
{
  struct raw *raw = calloc (1, sizeof *raw);
  struct hostfile_error err;
  unsigned flags = 0;

  if (raw == NULL)
    {
      nbdkit_error ("calloc: %m");
      return NULL;
    }
  raw->file = opts->file;
  if (!opts->readonly)
    flags |= HOSTFILE_WRITE;
  if (opts->cache == CACHE_NONE)
    flags |= HOSTFILE_DIRECT;
  raw->hf = hostfile_open (opts->file, flags, &err);
  if (raw->hf == NULL)
    {
      errno = err.errnum;
      if (err.open_failed)
        nbdkit_error ("%s: cannot open: %m", opts->file);
      else
        nbdkit_error ("%s", err.msg);
      goto err;
    }
  /* A file we may only read is served read-only, and every connection
   * that is not read-only is refused (image_open), as qemu-nbd refuses
   * it without -r: never a read-only export in place of the writable
   * one asked for.
   */
  if (raw->hf->write_refused)
    image_note_unwritable (opts->file, raw->hf->write_refused);
  if (take_size (raw) == -1)
    goto err;
  if (image_debug_slowzero)
    hostfile_refuse_fast_zero (raw->hf);
  nbdkit_debug ("raw: %s: size %" PRIi64 " %s%s align %" PRIu32
                " mem_align %" PRIu32 "%s",
                opts->file, (int64_t)raw->hf->size,
                raw->hf->is_blkdev ? "block device" : "file",
                raw->hf->direct ? " O_DIRECT" : "", raw->hf->align,
                raw->hf->mem_align,
                raw->hf->blk_zeroes_fast ? " fast-zero" : "");
  return raw;

err:
  raw_close (raw);
  return NULL;
}

static void
raw_close (void *state)
{
  struct raw *raw = state;

  hostfile_close (raw->hf);
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
  return atomic_load_explicit (&raw->hf->size, memory_order_relaxed);
}

static int
raw_can_write (void *state)
{
  struct raw *raw = state;

  return raw->hf->writable;
}

static int
raw_can_flush (void *state)
{
  return 1;
}

/* Zero and trim work on every file and device: what the kernel refuses
 * is emulated (zero) or skipped (trim is only advisory).  FAST_ZERO is
 * refused with ENOTSUP whenever only the slow path is left, so
 * advertising it is always truthful.
 */
static int
raw_can_trim (void *state)
{
  return raw_can_write (state);
}

static int
raw_can_zero (void *state)
{
  return raw_can_write (state);
}

static int
raw_can_fast_zero (void *state)
{
  return raw_can_write (state);
}

static int
raw_can_fua (void *state)
{
  return raw_can_write (state) ? NBDKIT_FUA_NATIVE : NBDKIT_FUA_NONE;
}

/* SEEK_DATA/SEEK_HOLE only mean something for files. */
static int
raw_can_extents (void *state)
{
  struct raw *raw = state;

  return !raw->hf->is_blkdev;
}

static int
raw_can_cache (void *state)
{
  struct raw *raw = state;

  /* Read-ahead into a page cache that O_DIRECT bypasses is useless. */
  return raw->hf->direct ? NBDKIT_CACHE_NONE : NBDKIT_CACHE_NATIVE;
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
  *preferred = MAX (4096u, raw->hf->align);
  *maximum = 64 * 1024 * 1024;
  return 0;
}

static int
raw_pread (void *state, void *buf, uint32_t count, uint64_t offset,
           uint32_t flags)
{
  struct raw *raw = state;
  int r = hostfile_pread (raw->hf, buf, count, offset);

  return r < 0 ? fail ("pread", r) : 0;
}

static int
raw_pwrite (void *state, const void *buf, uint32_t count, uint64_t offset,
            uint32_t flags)
{
  struct raw *raw = state;
  int r
      = hostfile_pwrite (raw->hf, buf, count, offset, flags & NBDKIT_FLAG_FUA);

  return r < 0 ? fail ("pwrite", r) : 0;
}

static int
raw_flush (void *state, uint32_t flags)
{
  struct raw *raw = state;
  int r = hostfile_flush (raw->hf);

  return r < 0 ? fail ("fdatasync", r) : 0;
}

static int
raw_zero (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  unsigned zflags = 0;
  int r;

  if (flags & NBDKIT_FLAG_MAY_TRIM)
    zflags |= HOSTFILE_ZERO_MAY_TRIM;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    zflags |= HOSTFILE_ZERO_FAST;
  if (flags & NBDKIT_FLAG_FUA)
    zflags |= HOSTFILE_ZERO_FUA;
  r = hostfile_zero (raw->hf, offset, count, zflags);
  if (r == -ENOTSUP && (flags & NBDKIT_FLAG_FAST_ZERO))
    {
      /* Expected answer to FAST_ZERO, not worth a log line. */
      nbdkit_set_error (ENOTSUP);
      return -1;
    }
  return r < 0 ? fail ("zero", r) : 0;
}

static int
raw_trim (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  int r = hostfile_trim (raw->hf, offset, count, false);

  if (r < 0)
    return fail ("trim", r);
  if ((flags & NBDKIT_FLAG_FUA) && (r = hostfile_flush (raw->hf)) < 0)
    return fail ("trim: fdatasync", r);
  return 0;
}

/* The file's holes and data (SEEK_DATA/SEEK_HOLE). */
static int
raw_status (void *state, uint64_t offset, uint64_t max, uint64_t *len,
            uint32_t *type)
{
  struct raw *raw = state;
  bool hole;
  int r = hostfile_extent (raw->hf, offset, max, len, &hole);

  if (r < 0)
    return fail ("lseek SEEK_DATA/SEEK_HOLE", r);
  *type = hole ? NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO : 0;
  return 0;
}

static int
raw_extents (void *state, uint32_t count, uint64_t offset, uint32_t flags,
             struct nbdkit_extents *extents)
{
  return image_add_extents (state, raw_status, count, offset, flags, extents);
}

static int
raw_cache (void *state, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct raw *raw = state;
  int err;

  if (raw->hf->direct)
    return 0;
  err = posix_fadvise (raw->hf->fd, offset, count, POSIX_FADV_WILLNEED);
  return err ? fail ("posix_fadvise", -err) : 0;
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
