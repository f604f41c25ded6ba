/* nbdstack qcow2 library: where the header's tables lie.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Each table the header declares is checked against qemu's limits and
 * against the file before any memory is allocated for it or any offset
 * in it is trusted.  The refcount and snapshot tables are not needed to
 * read the active layer, but they are metadata that data clusters must
 * not overlap, and qemu refuses images where they are out of bounds.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>

#include "qcow2-internal.h"

int
qcow2_check_table (struct qcow2_image *img, const char *what, uint64_t offset,
                   uint64_t entries, uint64_t entry_bytes, uint64_t max_bytes,
                   struct qcow2_error *err)
{
  if (entries > max_bytes / entry_bytes)
    {
      qcow2_set_error (err, EFBIG,
                       "%s is too large (%" PRIu64 " entries, "
                       "limit %" PRIu64 " bytes)",
                       what, entries, max_bytes);
      return -1;
    }
  if (entries == 0)
    return 0;
  if (offset & (img->cluster_size - 1))
    {
      qcow2_set_error (err, EINVAL,
                       "%s offset %#" PRIx64 " is not aligned "
                       "to a cluster",
                       what, offset);
      return -1;
    }
  if (offset > img->file_size
      || entries * entry_bytes > img->file_size - offset)
    {
      qcow2_set_error (err, EINVAL,
                       "%s at %#" PRIx64 " (%" PRIu64 " bytes) "
                       "extends beyond the end of the file (%" PRIu64 " bytes)",
                       what, offset, entries * entry_bytes, img->file_size);
      return -1;
    }
  if (offset < img->cluster_size)
    {
      qcow2_set_error (err, EINVAL, "%s at %#" PRIx64 " overlaps the header",
                       what, offset);
      return -1;
    }
  return 0;
}

int
qcow2_check_tables (struct qcow2_image *img, uint32_t refcount_clusters,
                    struct qcow2_error *err)
{
  uint64_t l1_needed;

  if (refcount_clusters == 0)
    {
      qcow2_set_error (err, EINVAL, "image has no refcount table");
      return -1;
    }
  if (qcow2_check_table (img, "refcount table", img->reftable_offset,
                         refcount_clusters, img->cluster_size,
                         MAX_REFTABLE_BYTES, err)
      == -1)
    return -1;
  img->reftable_bytes = (uint64_t)refcount_clusters << img->cluster_bits;
  if (qcow2_meta_add_table (img, QCOW2_META_REFTABLE, img->reftable_offset,
                            img->reftable_bytes, err)
      == -1)
    return -1;

  if (img->nb_snapshots > MAX_SNAPSHOTS)
    {
      qcow2_set_error (err, EFBIG, "too many snapshots (%" PRIu32 ")",
                       img->nb_snapshots);
      return -1;
    }
  /* Only the entries' fixed parts can be bounded before reading them:
   * snapshot.c walks the table for its size.
   */
  if (qcow2_check_table (img, "snapshot table", img->snapshots_offset,
                         img->nb_snapshots, SNAPSHOT_HEADER_BYTES,
                         MAX_SNAPSHOTS_BYTES, err)
      == -1)
    return -1;

  /* Active L1 table: large enough for the disk, within limits. */
  l1_needed = l1_entries_needed (img, img->size);
  if (qcow2_check_table (img, "L1 table", img->l1_offset, img->l1_size, 8,
                         MAX_L1_BYTES, err)
      == -1)
    return -1;
  if (img->l1_size < l1_needed)
    {
      qcow2_set_error (err, EINVAL,
                       "L1 table is too small (%" PRIu32
                       " entries for a disk needing %" PRIu64 ")",
                       img->l1_size, l1_needed);
      return -1;
    }
  img->active_l1_offset = img->l1_offset;
  img->active_l1_bytes = (uint64_t)img->l1_size * 8;
  return qcow2_meta_add_table (img, QCOW2_META_ACTIVE_L1, img->active_l1_offset,
                               img->active_l1_bytes, err);
}
