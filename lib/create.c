/* nbdstack qcow2 library: creating an image.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A version 3 image: the header (with our linear layout extension when
 * asked for), the refcount table, refcount blocks, and an empty L1
 * table, in that order from cluster 0.  For the linear layout the data
 * area starts past room for every L2 table the disk can need and for
 * every refcount block of the span, aligned to 2 MiB.  Only the blocks
 * for the metadata written here are made now; the others, when first
 * used (refcount.c puts those that would cover only homes where
 * metadata goes), so creating costs the same at any virtual size,
 * except for the L1 and refcount tables (8 bytes per 512 MiB and per
 * 2 GiB at 64 KiB clusters; zeroes, left as holes where the file can).
 * Metadata preallocation makes every block and L2 table.
 *
 * Metadata is written first and the header last, each followed by a
 * flush: a crash leaves either no image or a complete empty one.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "image-magic.h"
#include "qcow2-internal.h"

#define V3_HEADER_BYTES 104

/* [off, off+len) reads as zeroes: a hole where the host can make one
 * (then the last sector written, so that a new file reaches its end),
 * else zeroes written.
 */
static int
write_zero_clusters (struct qcow2_hostio *io, uint64_t off, uint64_t len,
                     const unsigned char *zero, uint64_t cs)
{
  uint64_t done;
  int r;

  if (len == 0)
    return 0;
  if (io->zero && io->zero (io, off, len, true) == 0)
    return qcow2_hostio_pwrite (io, zero, 512, off + len - 512);
  for (done = 0; done < len; done += cs)
    {
      r = qcow2_hostio_pwrite (io, zero, cs, off + done);
      if (r < 0)
        return r;
    }
  return 0;
}

/* Metadata preallocation: the L2 tables (one per L1 entry, in the room
 * reserved for them at meta_end), each guest cluster g mapped to its
 * home data_start + g; the L1 table (just below meta_end) pointing at
 * them; and the file extended to the end of the span.  'buf' is one
 * cluster.
 */
static int
preallocate (struct qcow2_hostio *io, const struct qcow2_create_options *o,
             uint64_t cs, uint64_t meta_end, uint64_t l1_entries,
             uint64_t l1_clusters, uint64_t data_start, uint64_t span,
             unsigned char *buf)
{
  const unsigned esize = o->extended_l2 ? 16 : 8;
  const uint64_t per_l2 = cs / esize;
  const uint64_t l1_off = (meta_end - l1_clusters) * cs;
  uint64_t t, j, g;
  int r;

  for (t = 0; t < l1_entries; ++t)
    {
      memset (buf, 0, cs);
      for (j = 0; j < per_l2 && (g = t * per_l2 + j) < span; ++j)
        {
          put_be64 (buf + j * esize, ((data_start + g) * cs) | OFLAG_COPIED);
          if (o->extended_l2) /* all 32 subclusters allocated */
            put_be64 (buf + j * esize + 8, 0x00000000ffffffffULL);
        }
      r = qcow2_hostio_pwrite (io, buf, cs, (meta_end + t) * cs);
      if (r < 0)
        return r;
    }
  for (t = 0; t < l1_clusters * (cs / 8); ++t)
    {
      if (t % (cs / 8) == 0)
        memset (buf, 0, cs);
      if (t < l1_entries)
        put_be64 (buf + (t % (cs / 8)) * 8,
                  ((meta_end + t) * cs) | OFLAG_COPIED);
      if ((t + 1) % (cs / 8) == 0)
        {
          r = qcow2_hostio_pwrite (io, buf, cs, l1_off + (t / (cs / 8)) * cs);
          if (r < 0)
            return r;
        }
    }
  /* The last home inside the file (its last sector: zeroes anyway). */
  memset (buf, 0, 512);
  return qcow2_hostio_pwrite (io, buf, 512, (data_start + span) * cs - 512);
}

int
qcow2_create (struct qcow2_hostio *io, const struct qcow2_create_options *o,
              struct qcow2_error *err)
{
  const unsigned cbits = o->cluster_bits ? o->cluster_bits : 16;
  const unsigned rbits = o->refcount_bits ? o->refcount_bits : 16;
  unsigned order = 0, i, rounds;
  uint64_t cs, per_block, l1_entries, l1_clusters, span = 0;
  uint64_t rt_clusters = 1, blocks = 1, meta_end, data_start = 0, total;
  uint64_t all_blocks = 1, later = 0; /* blocks in all; made on first use */
  unsigned char *buf = NULL, *zero = NULL;
  uint64_t c;
  int r;

  while ((1u << order) < rbits)
    order++;
  if (cbits < MIN_CLUSTER_BITS || cbits > MAX_CLUSTER_BITS
      || (1u << order) != rbits || order > MAX_REFCOUNT_ORDER)
    {
      qcow2_set_error (err, EINVAL,
                       "invalid cluster size or refcount width "
                       "(2^%u bytes, %u bits)",
                       cbits, rbits);
      return -1;
    }
  if (o->extended_l2 && cbits < 14)
    {
      /* As qemu: 32 subclusters of at least 512 bytes. */
      qcow2_set_error (err, EINVAL,
                       "extended L2 entries need clusters of at least "
                       "16 KiB");
      return -1;
    }
  if (o->preallocate && !o->linear)
    {
      /* The homes must read as zeroes: a new sparse file does. */
      qcow2_set_error (err, EINVAL,
                       "metadata preallocation needs the linear layout "
                       "(a regular file)");
      return -1;
    }
  if (io->pwritev == NULL)
    {
      qcow2_set_error (err, EROFS, "the file is not open for writing");
      return -1;
    }
  cs = 1ULL << cbits;
  per_block = cs * 8 >> order;
  if (o->size > (1ULL << 62)) /* the L1 limit below is far lower anyway */
    {
      qcow2_set_error (err, EFBIG, "size %" PRIu64 " is too large", o->size);
      return -1;
    }
  l1_entries = DIV_ROUND_UP (o->size, cs * (cs / (o->extended_l2 ? 16 : 8)));
  if (l1_entries == 0)
    l1_entries = 1;
  if (l1_entries * 8 > MAX_L1_BYTES)
    {
      qcow2_set_error (err, EFBIG,
                       "size %" PRIu64 " needs too large an L1 "
                       "table at this cluster size",
                       o->size);
      return -1;
    }
  l1_clusters = DIV_ROUND_UP (l1_entries * 8, cs);

  /* Table and block counts depend on each other and on where the data
   * starts: iterate to the fixed point (a few rounds; every count only
   * grows).  'blocks' are written now: all of them when preallocating
   * or compact, else those covering the metadata written here; room
   * for the 'later' ones is left below the data.
   */
  for (rounds = 0;; ++rounds)
    {
      uint64_t rt, b, ab, l;

      meta_end = 1 + rt_clusters + blocks + l1_clusters;
      if (o->linear)
        {
          uint64_t align = cs >= LINEAR_DATA_ALIGN ? 1 : LINEAR_DATA_ALIGN / cs;
          span = DIV_ROUND_UP (o->size, cs);
          data_start
              = DIV_ROUND_UP (meta_end + l1_entries + later, align) * align;
          total = data_start + span;
        }
      else
        total = meta_end;
      ab = DIV_ROUND_UP (total, per_block);
      b = o->linear && !o->preallocate ? DIV_ROUND_UP (meta_end, per_block)
                                       : ab;
      if (b < blocks)
        b = blocks;
      l = ab > b ? ab - b : 0;
      if (l < later)
        l = later;
      rt = DIV_ROUND_UP (ab * 8, cs);
      if (rt < rt_clusters)
        rt = rt_clusters;
      if ((b == blocks && rt == rt_clusters && l == later && ab == all_blocks)
          || rounds == 100)
        break;
      blocks = b;
      rt_clusters = rt;
      later = l;
      all_blocks = ab;
    }
  /* Host offsets in L2 entries have 56 bits, and a file cannot grow
   * past its file system's limit (ext4: 16 TiB).
   */
  if (o->linear
      && (total > (1ULL << 56) >> cbits
          || (io->max_size && total > io->max_size >> cbits)))
    {
      qcow2_set_error (
          err, EFBIG,
          "size %" PRIu64 " is too large for the linear "
          "layout%s (layout=compact makes it)",
          o->size, total > (1ULL << 56) >> cbits ? "" : " on this file system");
      return -1;
    }
  if (rt_clusters * cs > MAX_REFTABLE_BYTES)
    {
      qcow2_set_error (err, EFBIG,
                       "size %" PRIu64 " needs too large a "
                       "refcount table at these settings",
                       o->size);
      return -1;
    }
  if (io->fixed_size && meta_end * cs > (uint64_t)io->get_size (io))
    {
      qcow2_set_error (err, ENOSPC, "the device is too small");
      return -1;
    }

  buf = calloc (1, cs);
  zero = calloc (1, cs);
  if (buf == NULL || zero == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      goto fail_free;
    }

  /* Refcount table, then blocks (metadata clusters counted once). */
  for (i = 0; i < blocks; ++i)
    {
      uint64_t off = (1 + rt_clusters + i) * cs;
      put_be64 (buf + (i % (cs / 8)) * 8, off);
      if ((i + 1) % (cs / 8) == 0 || i + 1 == blocks)
        {
          r = qcow2_hostio_pwrite (io, buf, cs, (1 + i / (cs / 8)) * cs);
          if (r < 0)
            goto io_fail;
          memset (buf, 0, cs);
        }
    }
  i = (blocks + cs / 8 - 1) / (cs / 8);
  r = write_zero_clusters (io, (1 + i) * cs, (rt_clusters - i) * cs, zero, cs);
  if (r < 0)
    goto io_fail;
  for (i = 0; i < blocks; ++i)
    {
      memset (buf, 0, cs);
      for (c = i * per_block; c < (i + 1) * per_block && c < total; ++c)
        if (c < meta_end
            || (o->preallocate
                && (c < meta_end + l1_entries
                    || (c >= data_start && c < data_start + span))))
          qcow2_rc_entry_set (buf, order, c - i * per_block, 1);
      r = qcow2_hostio_pwrite (io, buf, cs, (1 + rt_clusters + i) * cs);
      if (r < 0)
        goto io_fail;
    }
  if (o->preallocate)
    r = preallocate (io, o, cs, meta_end, l1_entries, l1_clusters, data_start,
                     span, buf);
  else
    r = write_zero_clusters (io, (1 + rt_clusters + blocks) * cs,
                             l1_clusters * cs, zero, cs);
  if (r < 0 || (r = io->flush (io)) < 0)
    goto io_fail;

  /* The header last. */
  memset (buf, 0, cs);
  put_be32 (buf, QCOW2_MAGIC);
  put_be32 (buf + 4, 3);
  put_be32 (buf + 20, cbits);
  put_be64 (buf + 24, o->size);
  put_be32 (buf + 36, l1_entries);
  put_be64 (buf + 40, (1 + rt_clusters + blocks) * cs);
  put_be64 (buf + 48, cs);
  put_be32 (buf + 56, rt_clusters);
  if (o->extended_l2)
    put_be64 (buf + 72, INCOMPAT_EXTL2);
  put_be32 (buf + 96, order);
  put_be32 (buf + 100, V3_HEADER_BYTES);
  {
    unsigned char *e = buf + V3_HEADER_BYTES;
    if (o->linear)
      {
        put_be32 (e, QCOW2_EXT_LINEAR_LAYOUT);
        put_be32 (e + 4, 16);
        put_be64 (e + 8, data_start * cs);
        put_be64 (e + 16, span * cs);
        e += 24;
      }
    /* Then the end marker: eight zero bytes, already there. */
  }
  r = qcow2_hostio_pwrite (io, buf, cs, 0);
  if (r < 0 || (r = io->flush (io)) < 0)
    goto io_fail;
  free (buf);
  free (zero);
  return 0;

io_fail:
  qcow2_set_error (err, -r, "creating the image: %s", strerror (-r));
fail_free:
  free (buf);
  free (zero);
  return -1;
}
