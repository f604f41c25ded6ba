/* nbdstack qcow2 library: the fixed header, and the order of opening.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Everything here is untrusted input.  The header, its extensions and
 * the backing file name all live in the first cluster, which is read
 * once; each field is checked before anything is derived from it, and
 * all arithmetic is done on values already known to be small enough not
 * to overflow.  qcow2_parse_header then hands over to features.c,
 * tables.c and snapshot.c, so an image is refused for its most
 * fundamental problem first.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "image-magic.h"
#include "qcow2-internal.h"

#define V2_HEADER_BYTES 72
#define V3_HEADER_BYTES 104

bool
qcow2_probe (const void *buf, size_t len)
{
  return len >= QCOW2_PROBE_BYTES && image_has_qcow2_magic (buf, len);
}

static void
bad_magic (struct qcow2_error *err)
{
  qcow2_set_error (err, EINVAL, "not a qcow2 image (bad magic)");
}

/* Read what the file has of the first cluster: at most 2 MiB, since the
 * cluster size is not known yet.  Sets img->file_size.
 */
static unsigned char *
read_first_cluster (struct qcow2_image *img, size_t *len,
                    struct qcow2_error *err)
{
  unsigned char *hdr;
  int64_t fsize;
  int r;

  fsize = img->io->get_size (img->io);
  if (fsize < 0)
    {
      qcow2_set_error (err, (int)-fsize, "cannot get the file size: %s",
                       strerror ((int)-fsize));
      return NULL;
    }
  img->file_size = fsize;
  if (img->file_size < V2_HEADER_BYTES)
    {
      /* A short file that is not qcow2 at all gets the clearer error. */
      unsigned char m[QCOW2_PROBE_BYTES];

      if (img->file_size >= sizeof m
          && img->io->pread (img->io, m, sizeof m, 0) == 0
          && !qcow2_probe (m, sizeof m))
        bad_magic (err);
      else
        qcow2_set_error (err, EINVAL,
                         "file is too small (%" PRIu64 " bytes) "
                         "to be a qcow2 image",
                         img->file_size);
      return NULL;
    }
  *len = img->file_size < (1u << MAX_CLUSTER_BITS) ? img->file_size
                                                   : (1u << MAX_CLUSTER_BITS);
  hdr = malloc (*len);
  if (hdr == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return NULL;
    }
  r = img->io->pread (img->io, hdr, *len, 0);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "reading the header: %s", strerror (-r));
      free (hdr);
      return NULL;
    }
  if (!qcow2_probe (hdr, *len))
    {
      bad_magic (err);
      free (hdr);
      return NULL;
    }
  return hdr;
}

/* Fields of the fixed header that only opening needs. */
struct fixed_header
{
  uint64_t backing_offset;
  uint32_t backing_size;
  uint32_t crypt_method;
  uint32_t refcount_clusters;
  size_t length; /* the extensions start here */
};

static int
parse_fixed_header (struct qcow2_image *img, const unsigned char *hdr,
                    size_t hdr_len, struct fixed_header *h,
                    struct qcow2_error *err)
{
  uint32_t refcount_order;

  img->version = get_be32 (hdr + 4);
  if (img->version != 2 && img->version != 3)
    {
      qcow2_set_error (err, ENOTSUP,
                       "unsupported qcow2 version %" PRIu32
                       " (only 2 and 3 are supported)",
                       img->version);
      return -1;
    }
  h->backing_offset = get_be64 (hdr + 8);
  h->backing_size = get_be32 (hdr + 16);
  img->cluster_bits = get_be32 (hdr + 20);
  img->size = get_be64 (hdr + 24);
  h->crypt_method = get_be32 (hdr + 32);
  img->l1_size = get_be32 (hdr + 36);
  img->l1_offset = get_be64 (hdr + 40);
  img->reftable_offset = get_be64 (hdr + 48);
  h->refcount_clusters = get_be32 (hdr + 56);
  img->nb_snapshots = get_be32 (hdr + 60);
  img->snapshots_offset = get_be64 (hdr + 64);

  if (img->cluster_bits < MIN_CLUSTER_BITS
      || img->cluster_bits > MAX_CLUSTER_BITS)
    {
      qcow2_set_error (err, ENOTSUP,
                       "unsupported cluster size 2^%" PRIu32
                       " (512 bytes to 2 MiB are supported)",
                       (uint32_t)img->cluster_bits);
      return -1;
    }
  img->cluster_size = 1ULL << img->cluster_bits;

  if (img->version == 2)
    {
      h->length = V2_HEADER_BYTES; /* the file has that much */
      img->refcount_order = 4;     /* v2 refcounts are 16 bits */
      return 0;
    }
  if (hdr_len < V3_HEADER_BYTES)
    {
      qcow2_set_error (err, EINVAL,
                       "file is too small for a version 3 "
                       "header");
      return -1;
    }
  img->incompat = get_be64 (hdr + 72);
  img->autoclear = get_be64 (hdr + 88);
  refcount_order = get_be32 (hdr + 96);
  h->length = get_be32 (hdr + 100);
  if (h->length < V3_HEADER_BYTES || h->length % 8 != 0
      || h->length > img->cluster_size || h->length > hdr_len)
    {
      qcow2_set_error (err, EINVAL, "invalid header length %zu", h->length);
      return -1;
    }
  if (refcount_order > MAX_REFCOUNT_ORDER)
    {
      qcow2_set_error (err, ENOTSUP,
                       "unsupported refcount width 2^%" PRIu32
                       " bits (1 to 64 bits are supported)",
                       refcount_order);
      return -1;
    }
  img->refcount_order = refcount_order;
  if (h->length > V3_HEADER_BYTES)
    img->compression_type = hdr[104];
  return 0;
}

/* The backing file name lies in the first cluster after the extensions,
 * and so also ends them: set *ext_end.
 */
static int
read_backing_name (struct qcow2_image *img, const unsigned char *hdr,
                   size_t hdr_len, const struct fixed_header *h,
                   size_t *ext_end, struct qcow2_error *err)
{
  if (h->backing_offset == 0)
    {
      *ext_end = img->cluster_size < hdr_len ? img->cluster_size : hdr_len;
      return 0;
    }
  if (h->backing_offset > img->cluster_size
      || h->backing_size > img->cluster_size - h->backing_offset
      || h->backing_offset < h->length)
    {
      qcow2_set_error (err, EINVAL,
                       "invalid backing file name offset %#" PRIx64,
                       h->backing_offset);
      return -1;
    }
  if (h->backing_size > MAX_BACKING_NAME)
    {
      qcow2_set_error (err, EINVAL,
                       "backing file name is too long (%" PRIu32 " bytes)",
                       h->backing_size);
      return -1;
    }
  if (h->backing_offset + h->backing_size > hdr_len)
    {
      qcow2_set_error (err, EINVAL,
                       "backing file name extends beyond the "
                       "end of the file");
      return -1;
    }
  if (h->backing_size > 0)
    {
      img->backing_file = qcow2_header_string (
          hdr + h->backing_offset, h->backing_size, "backing file name", err);
      if (img->backing_file == NULL)
        return -1;
    }
  *ext_end = h->backing_offset;
  return 0;
}

/* What the mapping derives from the cluster size and extended L2. */
static void
set_geometry (struct qcow2_image *img)
{
  img->l2_entry_bytes = img->ext_l2 ? 16 : 8;
  img->l2_bits = img->cluster_bits - (img->ext_l2 ? 4 : 3);
  img->sc_bits = img->ext_l2 ? img->cluster_bits - 5 : img->cluster_bits;
  img->csize_shift = 62 - (img->cluster_bits - 8);
  img->csize_mask = (1ULL << (img->cluster_bits - 8)) - 1;
  img->coffset_mask = (1ULL << img->csize_shift) - 1;
}

int
qcow2_parse_header (struct qcow2_image *img,
                    const struct qcow2_open_options *opts,
                    struct qcow2_error *err)
{
  struct fixed_header h = { 0 };
  unsigned char *hdr;
  size_t hdr_len = 0, ext_end = 0;
  int r;

  hdr = read_first_cluster (img, &hdr_len, err);
  if (hdr == NULL)
    return -1;
  r = parse_fixed_header (img, hdr, hdr_len, &h, err);
  if (r == 0)
    r = read_backing_name (img, hdr, hdr_len, &h, &ext_end, err);
  if (r == 0)
    r = qcow2_parse_features (img, hdr, h.length, ext_end, h.crypt_method, err);
  free (hdr);
  if (r == -1)
    return -1;

  set_geometry (img);
  if (img->size > INT64_MAX)
    {
      qcow2_set_error (err, EFBIG, "virtual size %" PRIu64 " is too large",
                       img->size);
      return -1;
    }
  if (qcow2_check_tables (img, h.refcount_clusters, err) == -1)
    return -1;
  if (qcow2_read_snapshots (img, opts ? opts->snapshot : NULL, err) == -1)
    return -1;
  return qcow2_meta_seal_tables (img, err);
}
