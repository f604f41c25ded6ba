/* nbdstack qcow2 library: the internal snapshot table.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Entries have variable lengths (extra data, ID and name follow a fixed
 * part), so the table's size is only known by walking all of them.  Like
 * qemu, every open walks it: its true extent is metadata that data
 * clusters must not overlap, while clusters qemu allocated after it (L2
 * tables, guest data, other L1 tables) are not.  With snapshot=, the
 * entry it names (by ID first, then by name) replaces the active L1
 * table and disk size.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

/* The table as far as it has been read: in growing pieces, never past
 * qemu's limit or the end of the file.
 */
struct snapshot_table
{
  struct qcow2_image *img;
  unsigned char *buf;
  uint64_t len; /* bytes of the table in buf */
};

/* Make the first 'end' bytes of the table readable in t->buf. */
static int
snapshot_table_need (struct snapshot_table *t, uint64_t end,
                     struct qcow2_error *err)
{
  struct qcow2_image *img = t->img;
  uint64_t avail = img->file_size - img->snapshots_offset;
  uint64_t want;
  unsigned char *p;
  int r;

  if (end <= t->len)
    return 0;
  if (end > MAX_SNAPSHOTS_BYTES)
    {
      qcow2_set_error (err, EFBIG,
                       "snapshot table is too large (more than %u bytes)",
                       MAX_SNAPSHOTS_BYTES);
      return -1;
    }
  if (end > avail)
    {
      qcow2_set_error (err, EINVAL, "snapshot table is truncated");
      return -1;
    }
  /* Grow geometrically: a table of many small entries is then read in
   * a few large preads rather than one per entry.
   */
  want = t->len * 2 > end ? t->len * 2 : end;
  if (want < 4096)
    want = 4096;
  if (want > MAX_SNAPSHOTS_BYTES)
    want = MAX_SNAPSHOTS_BYTES;
  if (want > avail)
    want = avail;
  p = realloc (t->buf, want);
  if (p == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory for the snapshot table");
      return -1;
    }
  t->buf = p;
  r = img->io->pread (img->io, p + t->len, want - t->len,
                      img->snapshots_offset + t->len);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading the snapshot table: %s",
                       strerror (-r));
      return -1;
    }
  t->len = want;
  return 0;
}

/* What serving one snapshot needs from its entry. */
struct snapshot
{
  bool found;
  uint64_t l1_offset;
  uint32_t l1_size;
  uint64_t disk_size;
};

/* Walk every entry: set img->snapshots_bytes, and find the entry 'want'
 * names (NULL: none), by ID first, then by name.
 */
static int
walk_snapshots (struct qcow2_image *img, const char *want,
                struct snapshot *found, struct qcow2_error *err)
{
  struct snapshot_table t = { .img = img };
  struct snapshot by_name = { .found = false };
  size_t want_len = want ? strlen (want) : 0;
  uint64_t off = 0;
  uint32_t i;

  found->found = false;
  for (i = 0; i < img->nb_snapshots; ++i)
    {
      const unsigned char *e;
      const char *id, *name;
      uint32_t extra;
      uint16_t id_len, name_len;
      struct snapshot s = { .found = true };

      /* Entries start 8-byte aligned.  snapshot_table_need keeps 'off'
       * within 64 MiB, so nothing here can overflow.
       */
      off = (off + 7) & ~7ULL;
      if (snapshot_table_need (&t, off + SNAPSHOT_HEADER_BYTES, err) == -1)
        goto fail;
      e = t.buf + off;
      extra = get_be32 (e + 36);
      if (extra > MAX_SNAPSHOT_EXTRA)
        {
          qcow2_set_error (err, EINVAL,
                           "snapshot %" PRIu32 " has too much "
                           "extra data (%" PRIu32 " bytes)",
                           i, extra);
          goto fail;
        }
      id_len = get_be16 (e + 12);
      name_len = get_be16 (e + 14);
      if (snapshot_table_need (
              &t, off + SNAPSHOT_HEADER_BYTES + extra + id_len + name_len, err)
          == -1)
        goto fail;
      e = t.buf + off; /* the buffer may have moved */
      s.l1_offset = get_be64 (e);
      s.l1_size = get_be32 (e + 8);
      /* Metadata that guest data must not overwrite, when it is a
       * table at all (a bad one is refused only if served).
       */
      if (s.l1_offset && !(s.l1_offset & (img->cluster_size - 1))
          && s.l1_offset < img->file_size && s.l1_size <= MAX_L1_BYTES / 8
          && qcow2_meta_add_table (img, QCOW2_META_SNAPSHOT_L1, s.l1_offset,
                                   (uint64_t)s.l1_size * 8, err)
                 == -1)
        goto fail;
      /* Older entries have no disk size: the snapshot has the disk's. */
      s.disk_size
          = extra >= 16 ? get_be64 (e + SNAPSHOT_HEADER_BYTES + 8) : img->size;
      id = (const char *)e + SNAPSHOT_HEADER_BYTES + extra;
      name = id + id_len;
      if (want && !found->found && want_len == id_len
          && memcmp (want, id, id_len) == 0)
        *found = s;
      if (want && !by_name.found && want_len == name_len
          && memcmp (want, name, name_len) == 0)
        by_name = s;
      off += SNAPSHOT_HEADER_BYTES + extra + id_len + name_len;
    }
  free (t.buf);
  img->snapshots_bytes = off;
  if (qcow2_meta_add_table (img, QCOW2_META_SNAPSHOTS, img->snapshots_offset,
                            img->snapshots_bytes, err)
      == -1)
    return -1;
  if (!found->found)
    *found = by_name;
  return 0;

fail:
  free (t.buf);
  return -1;
}

int
qcow2_read_snapshots (struct qcow2_image *img, const char *want,
                      struct qcow2_error *err)
{
  struct snapshot s = { .found = false };

  if (want && img->nb_snapshots == 0)
    {
      qcow2_set_error (err, ENOENT,
                       "snapshot '%s' not found (the image "
                       "has no snapshots)",
                       want);
      return -1;
    }
  if (walk_snapshots (img, want, &s, err) == -1)
    return -1;
  if (want == NULL)
    return 0;
  if (!s.found)
    {
      qcow2_set_error (err, ENOENT, "snapshot '%s' not found", want);
      return -1;
    }
  if (s.disk_size > INT64_MAX)
    {
      qcow2_set_error (err, EFBIG, "snapshot '%s' has an invalid disk size",
                       want);
      return -1;
    }
  if (qcow2_check_table (img, "snapshot L1 table", s.l1_offset, s.l1_size, 8,
                         MAX_L1_BYTES, err)
      == -1)
    return -1;
  img->l1_offset = s.l1_offset;
  img->l1_size = s.l1_size;
  img->size = s.disk_size;
  if (img->l1_size < l1_entries_needed (img, img->size))
    {
      qcow2_set_error (err, EINVAL, "snapshot L1 table is too small");
      return -1;
    }
  return 0;
}
