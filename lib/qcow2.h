/* nbdstack qcow2 library: public interface.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * No nbdkit dependency: the library reads the image through a host I/O
 * interface (qcow2-hostio.h) and reports errors in a caller-supplied
 * struct qcow2_error, so it can be unit-tested and fuzzed on an
 * in-memory file.  All read calls are thread-safe and run in parallel:
 * the only shared mutable state is the sharded L2 cache.
 */
#ifndef NBDSTACK_QCOW2_H
#define NBDSTACK_QCOW2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qcow2-hostio.h"

/* One error, filled by the first failing function.  The message is one
 * line without a trailing newline and without the file name (the caller
 * knows which file it opened).
 */
struct qcow2_error
{
  int errnum; /* positive errno */
  char msg[512];
};

extern void qcow2_set_error (struct qcow2_error *err, int errnum,
                             const char *fs, ...)
    __attribute__ ((format (printf, 3, 4)));

/* Block status bits: the same values as nbdkit's NBDKIT_EXTENT_*. */
#define QCOW2_STATUS_HOLE 1
#define QCOW2_STATUS_ZERO 2

/* What lies under an image: a backing file (raw or qcow2) as the reader
 * sees it.  Reads and status requests never go past 'size'.
 */
struct qcow2_layer_ops
{
  int (*pread) (void *opaque, void *buf, size_t count, uint64_t offset,
                struct qcow2_error *err);
  /* Status of [offset, offset+max): set *len (1..max) and *flags. */
  int (*block_status) (void *opaque, uint64_t offset, uint64_t max,
                       uint64_t *len, unsigned *flags, struct qcow2_error *err);
};

struct qcow2_open_options
{
  /* Bytes of L2 tables to cache; 0 means the default (enough for the
   * whole disk, at most 32 MiB, like qemu).
   */
  uint64_t l2_cache_size;
  /* Serve this internal snapshot (matched by ID first, then by name)
   * instead of the active layer; NULL for the active layer.
   */
  const char *snapshot;
  /* Open for writing (the hostio must be writable): see
   * lib/WRITING.md.
   */
  bool writable;
  /* Refcount blocks to cache when writable; 0 means the default. */
  unsigned refcount_cache_blocks;
  /* Where new clusters go when writable (lib/WRITING.md, "Allocation"). */
  enum qcow2_layout
  {
    /* Linear on a regular file that has the layout (made by us) or is
     * empty (it gets the layout now), compact otherwise.
     */
    QCOW2_LAYOUT_AUTO,
    /* Linear on a regular file, given the layout now if it has none
     * (even with data in it); refused on a device.
     */
    QCOW2_LAYOUT_LINEAR,
    QCOW2_LAYOUT_COMPACT,
  } layout;
  /* Writable: give back leaked clusters first (what qemu-img check -r
   * leaks does; refused for images with snapshots or bitmaps), and say
   * how many in *leaks_repaired if not NULL.
   */
  bool repair_leaks;
  uint64_t *leaks_repaired;
};

/* Does a file starting with these 'len' bytes claim to be qcow2?  Needs
 * QCOW2_PROBE_BYTES to say yes.  The parser and format detection use
 * it; it is common/image-magic.h's test of the magic, which nbd/probe.c
 * uses too.
 */
#define QCOW2_PROBE_BYTES 4
extern bool qcow2_probe (const void *buf, size_t len);

struct qcow2_image;

/* Create an empty version 3 image on 'io' (writable; a regular file
 * should be empty, a device is overwritten only where metadata goes).
 * 'linear' lays a regular file out for the linear allocation (guest
 * cluster g at a fixed host offset plus g): see lib/WRITING.md.
 */
struct qcow2_create_options
{
  uint64_t size;
  unsigned cluster_bits;  /* 9..21; 0: 16 (64 KiB) */
  unsigned refcount_bits; /* 1, 2, 4 ... 64; 0: 16 */
  bool linear;
  bool extended_l2; /* 16-byte L2 entries; clusters of 16 KiB or more */
  /* preallocation=metadata (linear only): every L2 table is written and
   * every guest cluster mapped to its home, which the sparse file reads
   * as zeroes, so that writes never change metadata.
   */
  bool preallocate;
};
extern int qcow2_create (struct qcow2_hostio *io,
                         const struct qcow2_create_options *opts,
                         struct qcow2_error *err);

/* Parse and validate the header of the image on 'io' and prepare it for
 * reading.  'io' stays owned by the caller and must outlive the image.
 * Returns NULL on error.
 */
extern struct qcow2_image *qcow2_open (struct qcow2_hostio *io,
                                       const struct qcow2_open_options *opts,
                                       struct qcow2_error *err);
/* Closing a writable image writes back what is cached and flushes;
 * qcow2_close_err reports whether that worked.
 */
extern void qcow2_close (struct qcow2_image *img);
extern int qcow2_close_err (struct qcow2_image *img, struct qcow2_error *err);

/* Facts about the open image. */
extern uint64_t qcow2_get_size (const struct qcow2_image *img);
extern uint32_t qcow2_get_version (const struct qcow2_image *img);
extern uint32_t qcow2_get_cluster_size (const struct qcow2_image *img);
extern bool qcow2_is_dirty (const struct qcow2_image *img);
/* Where new clusters go: "linear", "compact" ("" when read-only). */
extern const char *qcow2_layout_name (const struct qcow2_image *img);
/* NULL when the image has none. */
extern const char *qcow2_get_backing_file (const struct qcow2_image *img);
extern const char *qcow2_get_backing_format (const struct qcow2_image *img);
extern const char *qcow2_get_data_file (const struct qcow2_image *img);
/* Number of L2 tables the cache holds. */
extern unsigned qcow2_get_l2_cache_entries (const struct qcow2_image *img);

/* Attach the layer below (backing file) of 'size' bytes.  Without one,
 * unallocated clusters read as zeroes.  Call before any read.
 */
extern void qcow2_set_backing (struct qcow2_image *img,
                               const struct qcow2_layer_ops *ops, void *opaque,
                               uint64_t size);
/* Attach the external data file the image names.  'io' stays owned by
 * the caller.  Required (reads fail without it) when the image has one.
 */
extern void qcow2_set_data_file (struct qcow2_image *img,
                                 struct qcow2_hostio *io);

/* Read [offset, offset+count) of the virtual disk (must be inside it). */
extern int qcow2_pread (struct qcow2_image *img, void *buf, size_t count,
                        uint64_t offset, struct qcow2_error *err);

/* Write [offset, offset+count) of the virtual disk (inside it) on an
 * image opened writable.  Not durable until qcow2_flush returns.  Any
 * failure leaves the image failed: every later write and flush fails.
 */
extern int qcow2_pwrite (struct qcow2_image *img, const void *buf, size_t count,
                         uint64_t offset, struct qcow2_error *err);
/* Make [offset, offset+count) read as zeroes.  MAY_UNMAP releases the
 * host clusters; FAST fails with ENOTSUP, changing nothing, when data
 * would have to be written (partial clusters that are not zero yet,
 * version 2 over a backing file).
 */
#define QCOW2_ZERO_MAY_UNMAP 1
#define QCOW2_ZERO_FAST 2
extern int qcow2_zero (struct qcow2_image *img, uint64_t count, uint64_t offset,
                       unsigned flags, struct qcow2_error *err);
/* Release the whole clusters in [offset, offset+count); they then read
 * as zeroes, except on version 2 images over a backing file, which are
 * left as they are.  Partial clusters are left as they are.
 */
extern int qcow2_discard (struct qcow2_image *img, uint64_t count,
                          uint64_t offset, struct qcow2_error *err);

/* Make every completed write durable (a no-op when read-only). */
extern int qcow2_flush (struct qcow2_image *img, struct qcow2_error *err);

/* Status of the longest run starting at 'offset', at most 'max' bytes
 * (max > 0, inside the disk): sets *len and *flags (QCOW2_STATUS_*).
 */
extern int qcow2_block_status (struct qcow2_image *img, uint64_t offset,
                               uint64_t max, uint64_t *len, unsigned *flags,
                               struct qcow2_error *err);

/* Layer ops over a qcow2 image (opaque = struct qcow2_image *) and over
 * a raw file (opaque = struct qcow2_hostio *), to build backing chains.
 */
extern const struct qcow2_layer_ops qcow2_image_layer_ops;
extern const struct qcow2_layer_ops qcow2_raw_layer_ops;

#endif /* NBDSTACK_QCOW2_H */
