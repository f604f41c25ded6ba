/* nbdstack image plugin: raw files and block devices.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"

struct raw {
  int fd;
  bool writable;
  int64_t size;
};

static void *
raw_open (const struct image_options *opts)
{
  struct raw *raw = calloc (1, sizeof *raw);
  struct stat st;

  if (raw == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  raw->fd = -1;
  if (!opts->readonly) {
    raw->fd = open (opts->file, O_RDWR | O_CLOEXEC);
    raw->writable = raw->fd >= 0;
  }
  if (raw->fd == -1)
    raw->fd = open (opts->file, O_RDONLY | O_CLOEXEC);
  if (raw->fd == -1) {
    nbdkit_error ("%s: %m", opts->file);
    free (raw);
    return NULL;
  }
  if (fstat (raw->fd, &st) == -1) {
    nbdkit_error ("%s: fstat: %m", opts->file);
    close (raw->fd);
    free (raw);
    return NULL;
  }
  raw->size = st.st_size;
  return raw;
}

static void
raw_close (void *state)
{
  struct raw *raw = state;

  close (raw->fd);
  free (raw);
}

static int64_t
raw_get_size (void *state)
{
  struct raw *raw = state;

  return raw->size;
}

static int
raw_can_write (void *state)
{
  struct raw *raw = state;

  return raw->writable;
}

static int
raw_can_flush (void *state)
{
  return 1;
}

static int
raw_pread (void *state, void *buf, uint32_t count, uint64_t offset,
           uint32_t flags)
{
  struct raw *raw = state;
  char *p = buf;

  while (count > 0) {
    ssize_t r = pread (raw->fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("pread: %m");
      return -1;
    }
    if (r == 0) {
      nbdkit_error ("pread: unexpected end of file");
      nbdkit_set_error (EIO);
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

static int
raw_pwrite (void *state, const void *buf, uint32_t count, uint64_t offset,
            uint32_t flags)
{
  struct raw *raw = state;
  const char *p = buf;

  while (count > 0) {
    ssize_t r = pwrite (raw->fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("pwrite: %m");
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

static int
raw_flush (void *state, uint32_t flags)
{
  struct raw *raw = state;

  if (fdatasync (raw->fd) == -1) {
    nbdkit_error ("fdatasync: %m");
    return -1;
  }
  return 0;
}

const struct format_ops raw_format = {
  .name = "raw",
  .open = raw_open,
  .close = raw_close,
  .get_size = raw_get_size,
  .can_write = raw_can_write,
  .can_flush = raw_can_flush,
  .pread = raw_pread,
  .pwrite = raw_pwrite,
  .flush = raw_flush,
};
