/* nbdstack qcow2 library: giving an image we did not create the linear
 * layout.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Upload targets are usually made by someone else (qemu-img create, an
 * oVirt host) and are empty when the upload opens them.  create.c lays
 * out the images it makes for the linear allocation; this does the same
 * for an existing image on a regular file, once, at its first writable
 * open: the data area (guest cluster g at host cluster D + g) starts past
 * everything in use plus room for every L2 table the disk can need and
 * every refcount block for [0, D + span), aligned to 2 MiB; the table
 * grows now if it cannot point at all those blocks, but the blocks are
 * made on first use (refcount.c keeps them off the homes), so the open
 * costs the same at any virtual size.  Last, our header extension
 * records D and the span, so later opens (ours) find the layout again;
 * qemu keeps extensions it does not know, and allocates from the free
 * clusters as it likes (a home it takes sends that guest cluster past the
 * span, as in any linear image qemu wrote to).
 *
 * Nothing here can corrupt the image if it stops half way: a grown
 * table is durable before the header points at it, and the
 * extension is written in two steps, its body after the end marker
 * first, then the type and length over the marker (8 bytes in one
 * sector), each followed by a flush.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "qcow2-internal.h"

#define EXT_BYTES 24 /* type, length, two be64 */

static bool
image_is_empty (const struct qcow2_image *img)
{
  uint32_t i;

  if (img->nb_snapshots > 0)
    return false;
  for (i = 0; i < img->l1_size; ++i)
    if (img->l1[i] & L1E_OFFSET_MASK)
      return false;
  return true;
}

/* Is there room for our extension after the end marker, and are those
 * bytes unused (zero)?  0 yes, 1 no room, -1 error.
 */
static int
header_has_room (struct qcow2_image *img, struct qcow2_error *err)
{
  const size_t m = img->ext_end_marker;
  unsigned char buf[EXT_BYTES + 8];
  size_t i;
  int r;

  if (m == 0 || img->ext_room_end < m + sizeof buf
      || img->ext_room_end > img->cluster_size)
    return 1;
  r = img->io->pread (img->io, buf, sizeof buf, m);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading the header: %s", strerror (-r));
      return -1;
    }
  for (i = 0; i < sizeof buf; ++i)
    if (buf[i])
      return 1;
  return 0;
}

/* A synced write of header bytes. */
static int
write_header_sync (struct qcow2_image *img, const void *buf, size_t len,
                   uint64_t off, struct qcow2_error *err)
{
  int r = qcow2_write_sync (img->io, buf, len, off);

  return r < 0 ? qcow2_io_error (err, r, "writing the header") : 0;
}

/* Where the data area starts: past everything in use, room for every L2
 * table and for 'blocks' refcount blocks, aligned.
 */
static uint64_t
data_start (const struct qcow2_image *img, uint64_t blocks)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t align = cs < LINEAR_DATA_ALIGN ? LINEAR_DATA_ALIGN / cs : 1;
  uint64_t end
      = img->host_end / cs + l1_entries_needed (img, img->size) + blocks;

  return DIV_ROUND_UP (end, align) * align;
}

int
qcow2_adopt_linear (struct qcow2_image *img, bool only_if_empty,
                    struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t span = DIV_ROUND_UP (img->size, cs);
  uint64_t per_block, blocks = 0, d, n;
  unsigned char ext[EXT_BYTES];
  int r;

  if (span == 0 || (only_if_empty && !image_is_empty (img)))
    return 0;
  r = header_has_room (img, err);
  if (r != 0)
    return r == 1 ? 0 : -1;

  /* The data area depends on how many blocks go below it, and those on
   * where it ends; the table may have to grow first, which moves the
   * end of what is in use.  Both converge: a block covers many clusters.
   */
  per_block = qcow2_rc_block_clusters (img);
  for (;;)
    {
      d = data_start (img, blocks);
      n = DIV_ROUND_UP (d + span, per_block);
      if (n > blocks)
        {
          blocks = n;
          continue;
        }
      /* A table past our limit (huge disks with tiny clusters and wide
       * refcounts): no layout, the image stays compact.
       */
      /* Host offsets in L2 entries have 56 bits, and the file cannot
       * grow past its file system's limit (ext4: 16 TiB): a layout
       * whose homes lie beyond would fail writes there, so no layout.
       */
      if (d + span > (1ULL << 56) >> img->cluster_bits
          || (img->io->max_size
              && d + span > img->io->max_size >> img->cluster_bits))
        return 0;
      if (qcow2_rc_cover (img, d + span, err) == -1)
        return err->errnum == EFBIG ? 0 : -1;
      if (data_start (img, blocks) == d)
        break;
    }

  /* The extension: body and a new end marker after the old marker, then
   * type and length over it.
   */
  memset (ext, 0, sizeof ext);
  put_be32 (ext, QCOW2_EXT_LINEAR_LAYOUT);
  put_be32 (ext + 4, 16);
  put_be64 (ext + 8, d * cs);
  put_be64 (ext + 16, span * cs);
  {
    unsigned char body[EXT_BYTES]; /* ext's data, then 8 zero bytes */

    memcpy (body, ext + 8, 16);
    memset (body + 16, 0, 8);
    if (write_header_sync (img, body, sizeof body, img->ext_end_marker + 8, err)
            == -1
        || write_header_sync (img, ext, 8, img->ext_end_marker, err) == -1)
      return -1;
  }
  img->ext_end_marker += EXT_BYTES;
  img->linear_start = d;
  img->linear_clusters = span;
  return 1;
}
