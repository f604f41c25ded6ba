/* nbdstack image plugin: create=true|force format=qcow2.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: an existing file is never clobbered by create=true unless
 * it is a block device without a qcow2 header; create=true keeps an
 * existing qcow2 image of the size asked for (as raw keeps a file of
 * that size) and refuses anything else; create=force replaces it (a
 * regular file is truncated first).  A file this run made is removed
 * again if making the image fails.  Runs in .config_complete, before
 * the image is opened to be served.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qcow2-plugin.h"

/* create=true and the file exists: 1 if it already is the image asked
 * for, 0 if it is a block device to create on, -1 after nbdkit_error.
 */
static int
check_existing (const char *file, const struct stat *st, int64_t size)
{
  struct qcow2_error err = { 0 };
  bool same = false, is_qcow2 = false;
  int fd = open (file, O_RDONLY | O_CLOEXEC);
  struct qcow2_hostio *io = fd >= 0 ? qcow2_hostio_fd (fd) : NULL;

  if (io && qcow2_sniff (io, &is_qcow2) == 0 && is_qcow2)
    {
      struct qcow2_open_options ro = { 0 };
      struct qcow2_image *img = qcow2_open (io, &ro, &err);
      same = img && qcow2_get_size (img) == (uint64_t)size;
      qcow2_close (img);
    }
  qcow2_hostio_close (io);
  if (same)
    return 1;
  if (S_ISREG (st->st_mode) || is_qcow2)
    {
      nbdkit_error ("%s: already exists and is not a qcow2 image of "
                    "size %" PRIi64 " (use create=force to replace it)",
                    file, size);
      return -1;
    }
  return 0; /* a block device without a qcow2 header: create on it */
}

/* Write the image over fd (which it closes), compact if the linear
 * layout does not fit (layout=auto).  0, or -1 after nbdkit_error.
 */
static int
write_image (const char *file, int fd, struct qcow2_create_options *o,
             const char *how)
{
  struct qcow2_error err = { 0 };
  struct qcow2_hostio *io = qcow2_hostio_fd (fd);
  int r;

  if (io == NULL)
    {
      nbdkit_error ("out of memory");
      return -1;
    }
  r = qcow2_create (io, o, &err);
  /* layout=auto: a disk too large for the linear layout here (the file
   * system's file size limit, or 56-bit offsets) is made compact, as an
   * image qemu-img made is kept compact at open.
   */
  if (r == -1 && err.errnum == EFBIG && o->linear
      && qcow2_params.layout == QCOW2_LAYOUT_AUTO)
    {
      nbdkit_debug ("%s: %s: making it compact", file, err.msg);
      o->linear = false;
      r = qcow2_create (io, o, &err);
    }
  if (r == -1)
    nbdkit_error ("%s: create=%s: %s", file, how, err.msg);
  qcow2_hostio_close (io);
  return r;
}

/* Open (making it unless it exists) and empty the file for the image.
 * The descriptor, or -1 after nbdkit_error; *st describes it.
 */
static int
open_target (const char *file, bool exists, struct stat *st)
{
  /* O_EXCL: a file that appeared since the stat is not clobbered. */
  int fd
      = open (file, O_RDWR | O_CLOEXEC | (exists ? 0 : O_CREAT | O_EXCL), 0644);

  if (fd == -1)
    {
      nbdkit_error ("%s: cannot create: %m", file);
      return -1;
    }
  if (fstat (fd, st) == -1)
    {
      nbdkit_error ("%s: fstat: %m", file);
      close (fd);
      return -1;
    }
  if (S_ISREG (st->st_mode) && ftruncate (fd, 0) == -1)
    {
      nbdkit_error ("%s: truncate: %m", file);
      close (fd);
      return -1;
    }
  return fd;
}

int
qcow2_glue_create (const char *file, int64_t size, bool force)
{
  const char *how = force ? "force" : "true";
  struct qcow2_create_options o = {
    .size = size,
    .cluster_bits = qcow2_params.create_cluster_bits,
    .refcount_bits = 16,
    .extended_l2 = qcow2_params.create_extended_l2,
    .preallocate = qcow2_params.create_preallocate,
  };
  struct stat st;
  bool exists = false;
  int fd, r;

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
      if (!force && (r = check_existing (file, &st, size)) != 0)
        return r == 1 ? 0 : -1;
    }
  else if (errno != ENOENT)
    {
      nbdkit_error ("%s: %m", file);
      return -1;
    }

  fd = open_target (file, exists, &st);
  if (fd == -1)
    return -1;
  o.linear
      = S_ISREG (st.st_mode) && qcow2_params.layout != QCOW2_LAYOUT_COMPACT;
  if (!S_ISREG (st.st_mode) && qcow2_params.layout == QCOW2_LAYOUT_LINEAR)
    {
      nbdkit_error ("%s: layout=linear needs a regular file, not a device",
                    file);
      close (fd);
      r = -1;
    }
  else
    r = write_image (file, fd, &o, how);
  if (r == -1 && !exists)
    unlink (file);
  if (r == 0)
    nbdkit_debug (
        "%s: created qcow2 v3, size %" PRIi64 ", cluster size %u%s%s, "
        "%s layout",
        file, size, 1u << o.cluster_bits, o.extended_l2 ? ", extended L2" : "",
        o.preallocate ? ", metadata preallocated" : "",
        o.linear ? "linear" : "compact");
  return r;
}
