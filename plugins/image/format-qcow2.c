/* nbdstack image plugin: the qcow2 format, glue over lib/.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: the format itself lives in lib/ (no nbdkit dependency);
 * this file only opens the chain (qcow2-chain.c), forwards each
 * callback to the top image and maps lib errors to nbdkit errors.
 * Parameters are qcow2-config.c's, creation qcow2-create.c's.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "align.h"
#include "qcow2-plugin.h"

static void *
qcow2_glue_open (const struct image_options *opts)
{
  struct q2 *q = qcow2_chain_open (opts);

  if (q == NULL)
    return NULL;
  nbdkit_debug ("%s: qcow2 v%u, cluster size %u, %u L2 cache entries, "
                "%u file(s) in the chain%s%s%s%s%s",
                opts->file, qcow2_get_version (q->layers[0].img),
                qcow2_get_cluster_size (q->layers[0].img),
                qcow2_get_l2_cache_entries (q->layers[0].img), q->nlayers,
                qcow2_is_dirty (q->layers[0].img) ? ", dirty" : "",
                q->writable ? ", writable" : ", read-only",
                q->writable ? ", layout " : "",
                qcow2_layout_name (q->layers[0].img),
                opts->cache == CACHE_NONE ? ", O_DIRECT" : "");
  return q;
}

static void
qcow2_glue_close (void *state)
{
  qcow2_chain_close (state);
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

/* Block status from the L1/L2 tables, through the backing chain (the
 * library's flags are nbdkit's extent types).
 */
static int
qcow2_glue_status (void *state, uint64_t offset, uint64_t max, uint64_t *len,
                   uint32_t *type)
{
  struct q2 *q = state;
  struct qcow2_error err = { 0 };
  unsigned t;

  if (qcow2_block_status (q->layers[0].img, offset, max, len, &t, &err) == -1)
    return report (q, &err);
  *type = t;
  return 0;
}

static int
qcow2_glue_extents (void *state, uint32_t count, uint64_t offset,
                    uint32_t flags, struct nbdkit_extents *extents)
{
  return image_add_extents (state, qcow2_glue_status, count, offset, flags,
                            extents);
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

const struct format_ops qcow2_format = {
  .name = "qcow2",
  .config = qcow2_config,
  .config_complete = qcow2_config_complete,
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
