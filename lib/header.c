/* nbdstack qcow2 library: header, extensions and table validation.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Everything here is untrusted input.  Each table the header declares is
 * checked against qemu's limits and against the file size before any
 * memory is allocated for it, and all arithmetic is done on values
 * already known to be small enough not to overflow.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

#define V2_HEADER_BYTES 72
#define V3_HEADER_BYTES 104
#define SNAPSHOT_HEADER_BYTES 40
#define FEATURE_NAME_ENTRY 48

/* Check a table of 'bytes' bytes at 'offset' in the file. */
static int
check_table (struct qcow2_image *img, const char *what, uint64_t offset,
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

/* Name the incompatible bits we do not support, from the image's own
 * feature name table when it has one.
 */
static void
refuse_unknown_incompat (struct qcow2_image *img, uint64_t unknown,
                         const unsigned char *names, size_t names_len,
                         struct qcow2_error *err)
{
  char list[400] = "";
  size_t used = 0;
  unsigned bit;

  for (bit = 0; bit < 64; ++bit)
    {
      char name[47] = "";
      size_t i;
      int n;

      if (!(unknown & (1ULL << bit)))
        continue;
      for (i = 0; names && i + FEATURE_NAME_ENTRY <= names_len;
           i += FEATURE_NAME_ENTRY)
        {
          if (names[i] == 0 && names[i + 1] == bit)
            {
              memcpy (name, &names[i + 2], 46);
              name[46] = '\0';
              break;
            }
        }
      if (name[0])
        n = snprintf (list + used, sizeof list - used, "%s%s (bit %u)",
                      used ? ", " : "", name, bit);
      else
        n = snprintf (list + used, sizeof list - used, "%sbit %u",
                      used ? ", " : "", bit);
      if (n < 0 || (size_t)n >= sizeof list - used)
        break;
      used += n;
    }
  qcow2_set_error (err, ENOTSUP, "unsupported incompatible feature: %s", list);
}

/* Copy a name out of the header cluster, refusing embedded NULs. */
static char *
dup_name (const unsigned char *p, size_t len, const char *what,
          struct qcow2_error *err)
{
  char *s;

  if (memchr (p, '\0', len))
    {
      qcow2_set_error (err, EINVAL, "%s contains a NUL byte", what);
      return NULL;
    }
  s = malloc (len + 1);
  if (s == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return NULL;
    }
  memcpy (s, p, len);
  s[len] = '\0';
  return s;
}

static int
parse_extensions (struct qcow2_image *img, const unsigned char *hdr,
                  size_t start, size_t end, const unsigned char **names,
                  size_t *names_len, struct qcow2_error *err)
{
  size_t off = start;

  while (off < end)
    {
      uint32_t type, len;
      const unsigned char *data;

      if (end - off < 8)
        {
          qcow2_set_error (err, EINVAL,
                           "header extension at %#zx is "
                           "truncated",
                           off);
          return -1;
        }
      type = get_be32 (hdr + off);
      len = get_be32 (hdr + off + 4);
      off += 8;
      if (type == EXT_END)
        return 0;
      if (len > end - off)
        {
          qcow2_set_error (err, EINVAL,
                           "header extension %#x is too large "
                           "(%" PRIu32 " bytes)",
                           type, len);
          return -1;
        }
      data = hdr + off;
      switch (type)
        {
        case EXT_BACKING_FORMAT:
          if (len > 16)
            {
              qcow2_set_error (err, EINVAL,
                               "backing file format name is too "
                               "long (%" PRIu32 " bytes)",
                               len);
              return -1;
            }
          free (img->backing_format);
          img->backing_format
              = dup_name (data, len, "backing file format", err);
          if (img->backing_format == NULL)
            return -1;
          break;
        case EXT_FEATURE_NAMES:
          *names = data;
          *names_len = len;
          break;
        case EXT_BITMAPS:
          {
            uint32_t nb;
            uint64_t dir_size, dir_offset;

            if (img->version < 3)
              break; /* qemu ignores it in v2 too */
            if (len != 24)
              {
                qcow2_set_error (err, EINVAL,
                                 "bitmaps extension has length %" PRIu32
                                 ", expected 24",
                                 len);
                return -1;
              }
            nb = get_be32 (data);
            dir_size = get_be64 (data + 8);
            dir_offset = get_be64 (data + 16);
            if (get_be32 (data + 4) != 0)
              {
                qcow2_set_error (err, EINVAL,
                                 "bitmaps extension has a non-zero "
                                 "reserved field");
                return -1;
              }
            if (nb == 0 || nb > MAX_BITMAPS)
              {
                qcow2_set_error (err, EINVAL,
                                 "bitmaps extension declares %" PRIu32
                                 " bitmaps (1 to %u allowed)",
                                 nb, MAX_BITMAPS);
                return -1;
              }
            if (dir_size > MAX_BITMAP_DIRECTORY_BYTES)
              {
                qcow2_set_error (err, EFBIG,
                                 "bitmap directory is too large (%" PRIu64
                                 " bytes)",
                                 dir_size);
                return -1;
              }
            if (check_table (img, "bitmap directory", dir_offset, dir_size, 1,
                             MAX_BITMAP_DIRECTORY_BYTES, err)
                == -1)
              return -1;
            /* Bitmaps do not change what the disk reads: nothing more. */
            break;
          }
        case EXT_DATA_FILE:
          if (len == 0 || len > MAX_DATA_FILE_NAME)
            {
              qcow2_set_error (err, EINVAL,
                               "external data file name has "
                               "invalid length %" PRIu32,
                               len);
              return -1;
            }
          free (img->data_file);
          img->data_file = dup_name (data, len, "external data file name", err);
          if (img->data_file == NULL)
            return -1;
          break;
        default:
          /* Unknown extensions may be ignored, as may the encryption
           * header: encrypted images are refused below anyway.
           */
          break;
        }
      /* Extension data is padded to 8 bytes; 'len' <= end - off so the
       * rounded value cannot overflow size_t.
       */
      off += (len + 7) & ~(size_t)7;
    }
  return 0;
}

/* The snapshot table as far as it has been read.  Its size is only known
 * once every entry has been walked (entries have variable lengths), so
 * it is read in growing pieces, never past qemu's limit or the file.
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

/* Walk the whole snapshot table, as qemu does at open: it sets the
 * table's true size (metadata that data clusters must not overlap;
 * anything after it, L2 tables included, is not), and finds the entry
 * 'want' names (NULL: none), by ID first, then by name.
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

      /* Entries start 8-byte aligned; 'off' stays below 64 MiB + 128 KiB,
       * so nothing here can overflow.
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
  if (!found->found)
    *found = by_name;
  return 0;

fail:
  free (t.buf);
  return -1;
}

/* Size the snapshot table, and switch img->l1_* and img->size to the
 * snapshot 'want' when there is one.
 */
static int
read_snapshots (struct qcow2_image *img, const char *want,
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
  if (check_table (img, "snapshot L1 table", s.l1_offset, s.l1_size, 8,
                   MAX_L1_BYTES, err)
      == -1)
    return -1;
  img->l1_offset = s.l1_offset;
  img->l1_size = s.l1_size;
  img->size = s.disk_size;
  return 0;
}

int
qcow2_parse_header (struct qcow2_image *img,
                    const struct qcow2_open_options *opts,
                    struct qcow2_error *err)
{
  /* The header and its extensions live in the first cluster (at most 2
   * MiB); read what the file has of it.
   */
  unsigned char *hdr = NULL;
  size_t hdr_len, ext_end, header_length;
  uint64_t backing_offset, l1_needed, shift, unknown;
  uint32_t backing_size, crypt_method, refcount_clusters;
  const unsigned char *names = NULL;
  size_t names_len = 0;
  int64_t fsize;
  int r;

  fsize = img->io->get_size (img->io);
  if (fsize < 0)
    {
      qcow2_set_error (err, (int)-fsize, "cannot get the file size: %s",
                       strerror ((int)-fsize));
      return -1;
    }
  img->file_size = fsize;
  if (img->file_size < V2_HEADER_BYTES)
    {
      if (img->file_size >= 4)
        {
          unsigned char m[4];
          if (img->io->pread (img->io, m, 4, 0) == 0
              && get_be32 (m) != QCOW2_MAGIC)
            goto bad_magic;
        }
      qcow2_set_error (err, EINVAL,
                       "file is too small (%" PRIu64 " bytes) "
                       "to be a qcow2 image",
                       img->file_size);
      return -1;
    }
  hdr_len = img->file_size < (1u << MAX_CLUSTER_BITS)
                ? img->file_size
                : (1u << MAX_CLUSTER_BITS);
  hdr = malloc (hdr_len);
  if (hdr == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return -1;
    }
  r = img->io->pread (img->io, hdr, hdr_len, 0);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading the header: %s", strerror (-r));
      goto fail;
    }
  if (get_be32 (hdr) != QCOW2_MAGIC)
    {
      free (hdr);
      goto bad_magic;
    }
  img->version = get_be32 (hdr + 4);
  if (img->version != 2 && img->version != 3)
    {
      qcow2_set_error (err, ENOTSUP,
                       "unsupported qcow2 version %" PRIu32
                       " (only 2 and 3 are supported)",
                       img->version);
      goto fail;
    }
  backing_offset = get_be64 (hdr + 8);
  backing_size = get_be32 (hdr + 16);
  img->cluster_bits = get_be32 (hdr + 20);
  img->size = get_be64 (hdr + 24);
  crypt_method = get_be32 (hdr + 32);
  img->l1_size = get_be32 (hdr + 36);
  img->l1_offset = get_be64 (hdr + 40);
  img->reftable_offset = get_be64 (hdr + 48);
  refcount_clusters = get_be32 (hdr + 56);
  img->nb_snapshots = get_be32 (hdr + 60);
  img->snapshots_offset = get_be64 (hdr + 64);

  if (img->cluster_bits < MIN_CLUSTER_BITS
      || img->cluster_bits > MAX_CLUSTER_BITS)
    {
      qcow2_set_error (err, ENOTSUP,
                       "unsupported cluster size 2^%" PRIu32
                       " (512 bytes to 2 MiB are supported)",
                       (uint32_t)img->cluster_bits);
      goto fail;
    }
  img->cluster_size = 1ULL << img->cluster_bits;

  if (img->version == 2)
    {
      img->refcount_order = 4;
      header_length = V2_HEADER_BYTES;
    }
  else
    {
      if (hdr_len < V3_HEADER_BYTES)
        {
          qcow2_set_error (err, EINVAL,
                           "file is too small for a version 3 "
                           "header");
          goto fail;
        }
      img->incompat = get_be64 (hdr + 72);
      img->refcount_order = get_be32 (hdr + 96);
      header_length = get_be32 (hdr + 100);
      if (header_length < V3_HEADER_BYTES || header_length % 8 != 0
          || header_length > img->cluster_size || header_length > hdr_len)
        {
          qcow2_set_error (err, EINVAL, "invalid header length %zu",
                           header_length);
          goto fail;
        }
      if (img->refcount_order > MAX_REFCOUNT_ORDER)
        {
          qcow2_set_error (err, ENOTSUP,
                           "unsupported refcount width 2^%u "
                           "bits (1 to 64 bits are supported)",
                           img->refcount_order);
          goto fail;
        }
      if (header_length > V3_HEADER_BYTES)
        img->compression_type = hdr[104];
    }
  if (header_length > hdr_len)
    {
      qcow2_set_error (err, EINVAL, "header is truncated");
      goto fail;
    }

  /* Extensions run from the end of the header to the backing file name
   * (or to the end of the first cluster).
   */
  if (backing_offset)
    {
      if (backing_offset > img->cluster_size
          || backing_size > img->cluster_size - backing_offset
          || backing_offset < header_length)
        {
          qcow2_set_error (err, EINVAL,
                           "invalid backing file name offset %#" PRIx64,
                           backing_offset);
          goto fail;
        }
      if (backing_size > MAX_BACKING_NAME)
        {
          qcow2_set_error (err, EINVAL,
                           "backing file name is too long (%" PRIu32 " bytes)",
                           backing_size);
          goto fail;
        }
      if (backing_offset + backing_size > hdr_len)
        {
          qcow2_set_error (err, EINVAL,
                           "backing file name extends beyond the "
                           "end of the file");
          goto fail;
        }
      if (backing_size > 0)
        {
          img->backing_file = dup_name (hdr + backing_offset, backing_size,
                                        "backing file name", err);
          if (img->backing_file == NULL)
            goto fail;
        }
      ext_end = backing_offset;
    }
  else
    ext_end = img->cluster_size < hdr_len ? img->cluster_size : hdr_len;
  if (parse_extensions (img, hdr, header_length, ext_end, &names, &names_len,
                        err)
      == -1)
    goto fail;

  /* Refusals, most fundamental first. */
  if (crypt_method == 1)
    {
      qcow2_set_error (err, ENOTSUP,
                       "encrypted images are not supported "
                       "(AES encryption)");
      goto fail;
    }
  if (crypt_method == 2)
    {
      qcow2_set_error (err, ENOTSUP,
                       "encrypted images are not supported "
                       "(LUKS encryption)");
      goto fail;
    }
  if (crypt_method != 0)
    {
      qcow2_set_error (err, ENOTSUP, "unknown encryption method %" PRIu32,
                       crypt_method);
      goto fail;
    }
  unknown = img->incompat & ~INCOMPAT_KNOWN;
  if (unknown)
    {
      refuse_unknown_incompat (img, unknown, names, names_len, err);
      goto fail;
    }
  if (img->incompat & INCOMPAT_CORRUPT)
    {
      qcow2_set_error (err, EIO,
                       "image is marked corrupt (repair it with "
                       "qemu-img check -r all)");
      goto fail;
    }
  if (img->compression_type > 1)
    {
      qcow2_set_error (err, ENOTSUP, "unknown compression type %u",
                       img->compression_type);
      goto fail;
    }
  if ((img->compression_type != 0) != !!(img->incompat & INCOMPAT_COMPRESSION))
    {
      qcow2_set_error (err, EINVAL,
                       "compression type %u does not match "
                       "the compression type feature bit",
                       img->compression_type);
      goto fail;
    }
  if ((img->incompat & INCOMPAT_DATA_FILE) && img->data_file == NULL)
    {
      qcow2_set_error (err, EINVAL,
                       "image uses an external data file but "
                       "does not name it");
      goto fail;
    }
  if (!(img->incompat & INCOMPAT_DATA_FILE))
    {
      free (img->data_file); /* stale extension: qemu ignores it */
      img->data_file = NULL;
    }

  img->ext_l2 = (img->incompat & INCOMPAT_EXTL2) != 0;
  if (img->ext_l2 && img->cluster_bits < 14)
    {
      qcow2_set_error (err, EINVAL,
                       "extended L2 entries need a cluster "
                       "size of at least 16 KiB");
      goto fail;
    }
  img->l2_entry_bytes = img->ext_l2 ? 16 : 8;
  img->l2_bits = img->cluster_bits - (img->ext_l2 ? 4 : 3);
  img->sc_bits = img->ext_l2 ? img->cluster_bits - 5 : img->cluster_bits;
  img->csize_shift = 62 - (img->cluster_bits - 8);
  img->csize_mask = (1ULL << (img->cluster_bits - 8)) - 1;
  img->coffset_mask = (1ULL << img->csize_shift) - 1;

  if (img->size > INT64_MAX)
    {
      qcow2_set_error (err, EFBIG, "virtual size %" PRIu64 " is too large",
                       img->size);
      goto fail;
    }

  /* Refcount table: not used for reading, but it is metadata that data
   * clusters must not overlap, and qemu refuses these images too.
   */
  if (refcount_clusters == 0)
    {
      qcow2_set_error (err, EINVAL, "image has no refcount table");
      goto fail;
    }
  if (check_table (img, "refcount table", img->reftable_offset,
                   refcount_clusters, img->cluster_size, MAX_REFTABLE_BYTES,
                   err)
      == -1)
    goto fail;
  img->reftable_bytes = (uint64_t)refcount_clusters << img->cluster_bits;

  if (img->nb_snapshots > MAX_SNAPSHOTS)
    {
      qcow2_set_error (err, EFBIG, "too many snapshots (%" PRIu32 ")",
                       img->nb_snapshots);
      goto fail;
    }
  if (check_table (img, "snapshot table", img->snapshots_offset,
                   img->nb_snapshots, SNAPSHOT_HEADER_BYTES,
                   MAX_SNAPSHOTS_BYTES, err)
      == -1)
    goto fail;

  /* Active L1 table: large enough for the disk, within limits. */
  shift = img->cluster_bits + img->l2_bits;
  l1_needed = img->size == 0 ? 0 : ((img->size - 1) >> shift) + 1;
  if (check_table (img, "L1 table", img->l1_offset, img->l1_size, 8,
                   MAX_L1_BYTES, err)
      == -1)
    goto fail;
  if (img->l1_size < l1_needed)
    {
      qcow2_set_error (err, EINVAL,
                       "L1 table is too small (%" PRIu32
                       " entries for a disk needing %" PRIu64 ")",
                       img->l1_size, l1_needed);
      goto fail;
    }
  img->active_l1_offset = img->l1_offset;
  img->active_l1_bytes = (uint64_t)img->l1_size * 8;

  free (hdr);
  hdr = NULL;

  if (read_snapshots (img, opts ? opts->snapshot : NULL, err) == -1)
    return -1;
  if (opts && opts->snapshot)
    {
      l1_needed = img->size == 0 ? 0 : ((img->size - 1) >> shift) + 1;
      if (img->l1_size < l1_needed)
        {
          qcow2_set_error (err, EINVAL, "snapshot L1 table is too small");
          return -1;
        }
    }
  return 0;

bad_magic:
  qcow2_set_error (err, EINVAL, "not a qcow2 image (bad magic)");
  return -1;
fail:
  free (hdr);
  return -1;
}
