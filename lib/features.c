/* nbdstack qcow2 library: header extensions and feature bits.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Whether this reader can serve the image at all.  The extensions
 * (between the fixed header and the backing file name, in the first
 * cluster) name the backing format and external data file, and may name
 * the feature bits; then encryption, unknown or corrupt feature bits and
 * inconsistent compression or extended L2 settings are refused, most
 * fundamental first, each with its own one-line reason.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

char *
qcow2_header_string (const unsigned char *p, size_t len, const char *what,
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

/* Header extension types. */
#define EXT_END 0
#define EXT_BACKING_FORMAT 0xe2792acaU
#define EXT_FEATURE_NAMES 0x6803f857U
#define EXT_BITMAPS 0x23852875U
#define EXT_DATA_FILE 0x44415441U

#define FEATURE_NAME_ENTRY 48

/* Extensions are type, length, data padded to 8 bytes, up to an end
 * marker or 'end'.  Sets *names to the feature name table, if any.
 */
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
      if (type == EXT_END)
        {
          /* Where another extension could go (adopt.c): up to the
           * backing file name or the end of the cluster.
           */
          img->ext_end_marker = off;
          img->ext_room_end = end;
          return 0;
        }
      off += 8;
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
              = qcow2_header_string (data, len, "backing file format", err);
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
            if (qcow2_check_table (img, "bitmap directory", dir_offset,
                                   dir_size, 1, MAX_BITMAP_DIRECTORY_BYTES, err)
                == -1)
              return -1;
            /* Bitmaps do not change what the disk reads: nothing more,
             * but guest data must not overwrite the directory (and
             * repair=leaks would have to walk their tables).
             */
            img->has_bitmaps = true;
            if (qcow2_meta_add_table (img, QCOW2_META_BITMAPS, dir_offset,
                                      dir_size, err)
                == -1)
              return -1;
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
          img->data_file
              = qcow2_header_string (data, len, "external data file name", err);
          if (img->data_file == NULL)
            return -1;
          break;
        case QCOW2_EXT_LINEAR_LAYOUT:
          {
            /* Our own layout hint (create.c).  Wrong values only lose
             * the layout: ignore them rather than refuse the image.
             */
            uint64_t lstart, lsize, cs = img->cluster_size;

            if (len != 16)
              break;
            lstart = get_be64 (data);
            lsize = get_be64 (data + 8);
            if ((lstart & (cs - 1)) || (lsize & (cs - 1)) || lstart < cs
                || lstart > (1ULL << 56) || lsize > (1ULL << 56) - lstart)
              break;
            img->linear_start = lstart >> img->cluster_bits;
            img->linear_clusters = lsize >> img->cluster_bits;
            break;
          }
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

/* Name the incompatible bits we do not support, from the image's own
 * feature name table when it has one.
 */
static void
refuse_unknown_incompat (uint64_t unknown, const unsigned char *names,
                         size_t names_len, struct qcow2_error *err)
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

int
qcow2_parse_features (struct qcow2_image *img, const unsigned char *hdr,
                      size_t start, size_t end, uint32_t crypt_method,
                      struct qcow2_error *err)
{
  const unsigned char *names = NULL;
  size_t names_len = 0;
  uint64_t unknown;

  if (parse_extensions (img, hdr, start, end, &names, &names_len, err) == -1)
    return -1;

  if (crypt_method == 1)
    {
      qcow2_set_error (err, ENOTSUP,
                       "encrypted images are not supported "
                       "(AES encryption)");
      return -1;
    }
  if (crypt_method == 2)
    {
      qcow2_set_error (err, ENOTSUP,
                       "encrypted images are not supported "
                       "(LUKS encryption)");
      return -1;
    }
  if (crypt_method != 0)
    {
      qcow2_set_error (err, ENOTSUP, "unknown encryption method %" PRIu32,
                       crypt_method);
      return -1;
    }
  unknown = img->incompat & ~INCOMPAT_KNOWN;
  if (unknown)
    {
      refuse_unknown_incompat (unknown, names, names_len, err);
      return -1;
    }
  if (img->incompat & INCOMPAT_CORRUPT)
    {
      qcow2_set_error (err, EIO,
                       "image is marked corrupt (repair it with "
                       "qemu-img check -r all)");
      return -1;
    }
  if (img->compression_type > 1)
    {
      qcow2_set_error (err, ENOTSUP, "unknown compression type %u",
                       img->compression_type);
      return -1;
    }
  if ((img->compression_type != 0) != !!(img->incompat & INCOMPAT_COMPRESSION))
    {
      qcow2_set_error (err, EINVAL,
                       "compression type %u does not match "
                       "the compression type feature bit",
                       img->compression_type);
      return -1;
    }
  if ((img->incompat & INCOMPAT_DATA_FILE) && img->data_file == NULL)
    {
      qcow2_set_error (err, EINVAL,
                       "image uses an external data file but "
                       "does not name it");
      return -1;
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
      return -1;
    }
  return 0;
}
