/* nbdstack image plugin: parameters, format choice and dispatch.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "align.h"
#include "array-size.h"
#include "bounce.h"
#include "cleanup.h"
#include "format.h"
#include "image-magic.h"
#include "image-params.h"
#include "parse-enum-param.h"
#include "param-table.h"
#include "parse-size-param.h"
#include "qcow2.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

enum format_choice
{
  FORMAT_AUTO,
  FORMAT_RAW,
  FORMAT_QCOW2
};
enum create_mode
{
  CREATE_NO,
  CREATE_YES,
  CREATE_FORCE
};

static char *filename;
static enum format_choice format_choice = FORMAT_AUTO;
static struct image_options options
    = { .cache = CACHE_WRITEBACK, .image_length = -1 };
static bool image_range_given; /* image-offset= or image-length= */
static enum create_mode create_mode = CREATE_NO;
static int64_t create_size = -1;

static const struct format_ops *format;
static void *format_state;

/* format=auto found no other format's magic and chose raw.  Then, as
 * qemu does for a raw image whose format it probed, a write, zero or
 * trim may not make the first sector name another format: the next
 * probe (ours, qemu's, nbdstack-nbd's) would serve a different disk.
 * Changes that reach the first sector are checked and done under
 * sector0_lock, so two of them cannot build a header between them.
 */
static bool probed_raw;
/* Set by image_note_unwritable before serving, read-only after. */
static char *unwritable_path;
static int unwritable_errno;
static pthread_mutex_t sector0_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct format_ops *const all_formats[] = {
  &raw_format,
  &qcow2_format,
};

static const struct enum_param_word format_words[] = {
  { "auto", FORMAT_AUTO },
  { "raw", FORMAT_RAW },
  { "qcow2", FORMAT_QCOW2 },
};
static const struct enum_param_word cache_words[] = {
  { "writeback", CACHE_WRITEBACK },
  { "none", CACHE_NONE },
};
/* true and false also take the other boolean spellings. */
static const struct enum_param_word create_words[] = {
  { "true", CREATE_YES },
  { "false", CREATE_NO },
  { "force", CREATE_FORCE },
};

static const struct param_spec image_params[] = { IMAGE_PARAMS (PARAM_SPEC) };

static void
image_unload (void)
{
  unsigned made, freed;
  uint64_t taken;

  bounce_pool_free (&made, &freed, &taken);
  if (made > 0)
    nbdkit_debug ("bounce pool: %u buffer(s) of %u bytes made, %u freed "
                  "when the pool was full, taken %" PRIu64 " time(s)",
                  made, (unsigned)BOUNCE_SIZE, freed, taken);
  free (filename);
  free (unwritable_path);
}

/* Every key is in image-params.h; image.c takes the ones common to
 * all formats, and the formats theirs.
 */
static int
image_config (const char *key, const char *value)
{
  if (param_find (image_params, ARRAY_SIZE (image_params), key) == NULL)
    {
      nbdkit_error ("unknown parameter '%s'", key);
      return -1;
    }
  if (strcmp (key, "file") == 0)
    {
      free (filename);
      /* The file may not exist yet when create=true, so only make the path
       * absolute here; existence is checked in .config_complete.
       */
      filename = nbdkit_absolute_path (value);
      return filename ? 0 : -1;
    }
  if (strcmp (key, "format") == 0)
    {
      int r;
      if (parse_enum_param (key, value, format_words, &r) == -1)
        return -1;
      format_choice = r;
      return 0;
    }
  if (strcmp (key, "cache") == 0)
    {
      int r;
      if (parse_enum_param (key, value, cache_words, &r) == -1)
        return -1;
      options.cache = r;
      return 0;
    }
  if (strcmp (key, "readonly") == 0)
    return parse_bool_param (key, value, &options.readonly);
  if (strcmp (key, "create") == 0)
    {
      int r;
      if (parse_enum_param (key, value, create_words, &r) == -1)
        return -1;
      create_mode = r;
      return 0;
    }
  if (strcmp (key, "image-offset") == 0 || strcmp (key, "image-length") == 0)
    {
      int64_t v = parse_size_param (key, value);
      if (v == -1)
        return -1;
      if (strcmp (key, "image-offset") == 0)
        options.image_offset = v;
      else
        options.image_length = v;
      image_range_given = true;
      return 0;
    }
  if (strcmp (key, "size") == 0)
    {
      create_size = parse_size_param (key, value);
      if (create_size == -1)
        return -1;
      return 0;
    }

  for (size_t i = 0; i < ARRAY_SIZE (all_formats); ++i)
    {
      if (all_formats[i]->config)
        {
          int r = all_formats[i]->config (key, value);
          if (r != 0)
            return r == 1 ? 0 : -1;
        }
    }
  nbdkit_error ("unknown parameter '%s'", key);
  return -1;
}

/* create=true/force: make a sparse raw file of size=SIZE. */
static int
create_file (void)
{
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  int fd;

  if (create_size < 0)
    {
      nbdkit_error ("create=%s needs size=SIZE",
                    create_mode == CREATE_FORCE ? "force" : "true");
      return -1;
    }
  /* Never truncate or "resize" a device or anything else by accident. */
  {
    struct stat st;
    if (stat (filename, &st) == 0 && !S_ISREG (st.st_mode))
      {
        nbdkit_error ("%s: create=%s: exists and is not a regular file",
                      filename, create_mode == CREATE_FORCE ? "force" : "true");
        return -1;
      }
  }
  if (create_mode == CREATE_YES)
    flags |= O_EXCL;
  else
    flags |= O_TRUNC;
  fd = open (filename, flags, 0644);
  if (fd == -1)
    {
      if (errno == EEXIST)
        {
          /* Refusing to clobber is the point of create=true. */
          struct stat st;
          if (stat (filename, &st) == 0 && S_ISREG (st.st_mode)
              && st.st_size == create_size)
            return 0;
          nbdkit_error ("%s: already exists with a different size "
                        "(use create=force to replace it)",
                        filename);
          return -1;
        }
      nbdkit_error ("%s: cannot create: %m", filename);
      return -1;
    }
  if (ftruncate (fd, create_size) == -1)
    {
      nbdkit_error ("%s: cannot set size: %m", filename);
      close (fd);
      return -1;
    }
  if (close (fd) == -1)
    {
      nbdkit_error ("%s: close: %m", filename);
      return -1;
    }
  return 0;
}

/* format=auto: anything carrying the qcow2 magic is qcow2, never raw. */
static int
sniff_format (enum format_choice *choice)
{
  char magic[QCOW2_PROBE_BYTES];
  ssize_t r;
  int fd = open (filename, O_RDONLY | O_CLOEXEC);

  if (fd == -1)
    {
      nbdkit_error ("%s: %m", filename);
      return -1;
    }
  /* Nothing of the probe stays in the page cache (no read-ahead, the
   * page dropped after): cached pages over unwritten extents read as
   * data to SEEK_DATA on XFS, which would change the extents served.
   */
  posix_fadvise (fd, 0, sizeof magic, POSIX_FADV_RANDOM);
  r = pread (fd, magic, sizeof magic, 0);
  posix_fadvise (fd, 0, sizeof magic, POSIX_FADV_DONTNEED);
  close (fd);
  if (r == -1)
    {
      nbdkit_error ("%s: reading header: %m", filename);
      return -1;
    }
  *choice = qcow2_probe (magic, r) ? FORMAT_QCOW2 : FORMAT_RAW;
  return 0;
}

/* nbdkit calls a data callback only when its can_* answers yes, and a
 * format without that can_* answers no (FEATURE below), so the image_*
 * callbacks call the format's op unchecked: a format must provide every
 * op that one of its can_* can turn on.  Checked once, at start-up.
 */
static void
assert_format_complete (const struct format_ops *f)
{
  assert (f->open && f->close && f->get_size && f->pread);
  assert (!f->can_write || f->pwrite);
  assert (!f->can_flush || f->flush);
  assert (!f->can_fua || f->flush); /* emulated FUA is a flush */
  assert (!f->can_trim || f->trim);
  assert (!f->can_zero || f->zero);
  assert (!f->can_extents || f->extents);
  assert (!f->can_cache || f->cache);
}

/* image-offset= and image-length= are for format=qcow2, not create=. */
static int
check_range_params (void)
{
  if (!image_range_given)
    return 0;
  /* A byte range of a raw file is nbdkit's offset filter's job. */
  if (format_choice != FORMAT_QCOW2)
    {
      nbdkit_error ("image-offset and image-length need format=qcow2 "
                    "(for a byte range of a raw file use "
                    "nbdkit-offset-filter)");
      return -1;
    }
  if (create_mode != CREATE_NO)
    {
      nbdkit_error ("image-offset and image-length cannot be used with "
                    "create=%s",
                    create_mode == CREATE_FORCE ? "force" : "true");
      return -1;
    }
  return 0;
}

/* create=true|force: the image, made before anything opens it.  Only
 * an explicit format=qcow2 makes a qcow2 image.
 */
static int
create_image (void)
{
  if (format_choice != FORMAT_QCOW2)
    return create_file ();
  if (create_size < 0)
    {
      nbdkit_error ("create=%s needs size=SIZE",
                    create_mode == CREATE_FORCE ? "force" : "true");
      return -1;
    }
  /* qemu keeps a qcow2 virtual size in 512-byte sectors and drops a
   * partial last one when it opens the image; qemu-img create rounds
   * the size up, so do the same (bytes a client writes at the end would
   * otherwise vanish under qemu).
   */
  if (create_size % 512)
    {
      if (create_size > INT64_MAX - 511)
        {
          nbdkit_error ("size=%" PRIi64 " is too large", create_size);
          return -1;
        }
      nbdkit_debug ("create: size %" PRIi64 " rounded up to %" PRIi64
                    " (a multiple of 512, as qemu-img create does)",
                    create_size, ROUND_UP (create_size, 512));
      create_size = ROUND_UP (create_size, 512);
    }
  return qcow2_format.create (filename, create_size,
                              create_mode == CREATE_FORCE);
}

/* file= must now exist and be a regular file or a block device. */
static int
check_file_type (void)
{
  struct stat st;

  if (stat (filename, &st) == -1)
    {
      nbdkit_error ("%s: %m", filename);
      return -1;
    }
  if (S_ISDIR (st.st_mode))
    {
      nbdkit_error ("%s: is a directory, expected a file or block device",
                    filename);
      return -1;
    }
  if (!S_ISREG (st.st_mode) && !S_ISBLK (st.st_mode))
    {
      nbdkit_error ("%s: not a regular file or block device", filename);
      return -1;
    }
  return 0;
}

static int
image_config_complete (void)
{
  if (filename == NULL)
    {
      nbdkit_error ("you must supply the file=PATH parameter");
      return -1;
    }
  if (check_range_params () == -1)
    return -1;
  if (create_mode != CREATE_NO)
    {
      if (create_image () == -1)
        return -1;
    }
  else if (create_size >= 0)
    {
      nbdkit_error ("size=SIZE is only used with create=true");
      return -1;
    }
  if (check_file_type () == -1)
    return -1;
  if (format_choice == FORMAT_AUTO)
    {
      if (sniff_format (&format_choice) == -1)
        return -1;
      probed_raw = format_choice == FORMAT_RAW;
      if (probed_raw)
        nbdkit_debug ("%s: format=auto guessed raw: changes that would make "
                      "the first sector name another format are refused "
                      "(format=raw lifts this)",
                      filename);
    }
  format = format_choice == FORMAT_QCOW2 ? &qcow2_format : &raw_format;
  assert_format_complete (format);
  options.file = filename;
  options.create = create_mode != CREATE_NO;
  if (format->config_complete && format->config_complete (&options) == -1)
    return -1;
  return 0;
}

/* Open once, before serving, so that every error shows at start-up and
 * all connections share one set of file descriptors and caches.
 */
static int
image_get_ready (void)
{
  format_state = format->open (&options);
  return format_state ? 0 : -1;
}

static void
image_cleanup (void)
{
  if (format_state)
    format->close (format_state);
  format_state = NULL;
}

void
image_note_unwritable (const char *path, int err)
{
  free (unwritable_path);
  unwritable_path = strdup (path);
  unwritable_errno = err;
  nbdkit_debug ("%s: cannot open for writing (%s): only read-only "
                "connections (nbdkit -r) are served",
                path, strerror (err));
}

/* A connection that is not read-only on an image that could only be
 * opened read-only is refused: the client asked for a writable disk.
 * The plugin cannot see nbdkit -r before this point, so it cannot
 * refuse at start-up without breaking nbdkit -r (nbdstack-nbd refuses
 * at start-up itself, as qemu-nbd does).
 */
static void *
image_open (int readonly)
{
  if (!readonly && unwritable_path)
    {
      nbdkit_error ("%s: cannot open for writing: %s (readonly=true or "
                    "nbdkit -r serves it read-only)",
                    unwritable_path, strerror (unwritable_errno));
      return NULL;
    }
  return NBDKIT_HANDLE_NOT_NEEDED;
}

#define FEATURE(name, absent)                                                  \
  static int image_##name (void *handle)                                       \
  {                                                                            \
    return format->name ? format->name (format_state) : (absent);              \
  }
FEATURE (can_write, 0)
FEATURE (can_flush, 0)
FEATURE (can_trim, 0)
FEATURE (can_zero, 0)
FEATURE (can_fast_zero, 0)
FEATURE (can_fua, NBDKIT_FUA_NONE)
FEATURE (can_extents, 0)
FEATURE (can_cache, NBDKIT_CACHE_NONE)

static int64_t
image_get_size (void *handle)
{
  return format->get_size (format_state);
}

/* One image state serves every connection, so a flush on one connection
 * covers writes made on all of them.
 */
static int
image_can_multi_conn (void *handle)
{
  return 1;
}

static int
image_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                  uint32_t *maximum)
{
  if (format->block_size)
    return format->block_size (format_state, minimum, preferred, maximum);
  *minimum = *preferred = *maximum = 0;
  return 0;
}

static int
image_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags)
{
  return format->pread (format_state, buf, count, offset, flags);
}

enum sector0_change
{
  CHANGE_WRITE,
  CHANGE_ZERO,
  CHANGE_TRIM
};

/* A probed raw image: may this change of [offset, offset+count), which
 * reaches into the first sector, be made?  Called with sector0_lock
 * held (see sector0_change).  0 if it keeps the first sector raw; -1
 * with EPERM (or the read error) if not.  A trim is taken as zeroing,
 * since a punched hole reads as zeroes.
 */
static int
check_sector0 (enum sector0_change what, const void *buf, uint32_t count,
               uint64_t offset)
{
  unsigned char s[IMAGE_MAGIC_BYTES];
  int64_t size = format->get_size (format_state);
  size_t n, end;
  const char *name;

  if (size < 0)
    return -1;
  n = size < (int64_t)sizeof s ? (size_t)size : sizeof s;
  if (offset >= n)
    return 0; /* the file shrank since: nothing of the sector is changed */
  if (format->pread (format_state, s, n, 0, 0) == -1)
    return -1;
  end = offset + count < n ? offset + count : n;
  if (what == CHANGE_WRITE)
    memcpy (s + offset, buf, end - offset);
  else
    memset (s + offset, 0, end - offset);
  name = image_magic (s, n);
  if (name == NULL)
    return 0;
  nbdkit_error ("%s: refusing a %s at offset %" PRIu64 ": the image's format "
                "was probed as raw and the first sector would then name "
                "%s (use format=raw to allow it)",
                filename,
                what == CHANGE_WRITE  ? "write"
                : what == CHANGE_ZERO ? "zero"
                                      : "trim",
                offset, name);
  nbdkit_set_error (EPERM);
  return -1;
}

/* A change of a probed raw image that reaches into the first sector:
 * checked, then made, under sector0_lock.
 */
static int
sector0_change (enum sector0_change what, const void *buf, uint32_t count,
                uint64_t offset, uint32_t flags)
{
  int r;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&sector0_lock);
  r = check_sector0 (what, buf, count, offset);
  if (r == 0)
    {
      if (what == CHANGE_WRITE)
        r = format->pwrite (format_state, buf, count, offset, flags);
      else if (what == CHANGE_ZERO)
        r = format->zero (format_state, count, offset, flags);
      else
        r = format->trim (format_state, count, offset, flags);
    }
  return r;
}

static int
image_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  if (probed_raw && offset < IMAGE_MAGIC_BYTES)
    return sector0_change (CHANGE_WRITE, buf, count, offset, flags);
  return format->pwrite (format_state, buf, count, offset, flags);
}

static int
image_flush (void *handle, uint32_t flags)
{
  return format->flush (format_state, flags);
}

static int
image_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  if (probed_raw && offset < IMAGE_MAGIC_BYTES)
    return sector0_change (CHANGE_TRIM, NULL, count, offset, flags);
  return format->trim (format_state, count, offset, flags);
}

static int
image_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  if (probed_raw && offset < IMAGE_MAGIC_BYTES)
    return sector0_change (CHANGE_ZERO, NULL, count, offset, flags);
  return format->zero (format_state, count, offset, flags);
}

static int
image_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
               struct nbdkit_extents *extents)
{
  return format->extents (format_state, count, offset, flags, extents);
}

int
image_add_extents (void *state, image_status_fn status, uint32_t count,
                   uint64_t offset, uint32_t flags,
                   struct nbdkit_extents *extents)
{
  const uint64_t end = offset + count;

  while (offset < end)
    {
      uint64_t len;
      uint32_t type;

      if (status (state, offset, end - offset, &len, &type) == -1
          || nbdkit_add_extent (extents, offset, len, type) == -1)
        return -1;
      offset += len;
      if (flags & NBDKIT_FLAG_REQ_ONE)
        break;
    }
  return 0;
}

static int
image_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return format->cache (format_state, count, offset, flags);
}

#define image_config_help IMAGE_PARAMS (PARAM_HELP_LINE)

static struct nbdkit_plugin plugin = {
  .name = "image",
  .longname = "nbdstack image plugin (raw, block devices, qcow2)",
  .version = PACKAGE_VERSION,
  .unload = image_unload,
  .config = image_config,
  .config_complete = image_config_complete,
  .config_help = image_config_help,
  .magic_config_key = "file",
  .get_ready = image_get_ready,
  .cleanup = image_cleanup,
  .open = image_open,
  .get_size = image_get_size,
  .block_size = image_block_size,
  .can_write = image_can_write,
  .can_flush = image_can_flush,
  .can_trim = image_can_trim,
  .can_zero = image_can_zero,
  .can_fast_zero = image_can_fast_zero,
  .can_fua = image_can_fua,
  .can_extents = image_can_extents,
  .can_cache = image_can_cache,
  .can_multi_conn = image_can_multi_conn,
  .pread = image_pread,
  .pwrite = image_pwrite,
  .flush = image_flush,
  .trim = image_trim,
  .zero = image_zero,
  .extents = image_extents,
  .cache = image_cache,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)
