/* nbdstack qcow2 library: compressed clusters (deflate and zstd).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Each thread keeps its own decompression contexts and input buffer,
 * created on first use and freed when the thread exits, so reading a
 * compressed cluster neither allocates nor takes a lock.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#include "qcow2-internal.h"

struct tls
{
  z_stream z;
  bool z_ready;
  ZSTD_DCtx *zstd;
  unsigned char *in;
  size_t in_cap;
  /* The last cluster decompressed for a partial read, so that reading a
   * compressed cluster in small pieces decompresses it once.
   */
  unsigned char *out;
  size_t out_cap;
  uint64_t out_uid; /* image it belongs to, 0 = none */
  uint64_t out_l2e;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_error; /* pthread_key_create's result */
static __thread struct tls *tls;

static void
tls_free (void *p)
{
  struct tls *t = p;

  if (t->z_ready)
    inflateEnd (&t->z);
  ZSTD_freeDCtx (t->zstd);
  free (t->in);
  free (t->out);
  free (t);
}

static void
tls_init_key (void)
{
  tls_key_error = pthread_key_create (&tls_key, tls_free);
}

/* This thread's buffers and contexts.  Without the key they could never
 * be freed at thread exit, so reading a compressed cluster fails instead.
 */
static struct tls *
get_tls (struct qcow2_error *err)
{
  int r;

  if (tls)
    return tls;
  pthread_once (&tls_once, tls_init_key);
  if (tls_key_error)
    {
      qcow2_set_error (err, tls_key_error,
                       "cannot create the decompression thread key: %s",
                       strerror (tls_key_error));
      return NULL;
    }
  tls = calloc (1, sizeof *tls);
  if (tls == NULL)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return NULL;
    }
  r = pthread_setspecific (tls_key, tls);
  if (r != 0)
    {
      free (tls);
      tls = NULL;
      qcow2_set_error (err, r, "cannot set the decompression thread key: %s",
                       strerror (r));
      return NULL;
    }
  return tls;
}

/* qemu writes raw deflate (no zlib header); the output must fill the
 * cluster exactly, and anything after the stream end is padding.
 */
static int
inflate_cluster (struct tls *t, const void *in, size_t in_len, void *out,
                 size_t out_len)
{
  int r;

  if (!t->z_ready)
    {
      memset (&t->z, 0, sizeof t->z);
      /* -15: raw deflate with the largest window, which also accepts the
       * smaller window qemu uses.
       */
      if (inflateInit2 (&t->z, -15) != Z_OK)
        return -1;
      t->z_ready = true;
    }
  else if (inflateReset (&t->z) != Z_OK)
    return -1;
  t->z.next_in = (Bytef *)in;
  t->z.avail_in = in_len;
  t->z.next_out = out;
  t->z.avail_out = out_len;
  r = inflate (&t->z, Z_FINISH);
  if ((r == Z_STREAM_END || r == Z_BUF_ERROR) && t->z.avail_out == 0)
    return 0;
  return -1;
}

static int
zstd_cluster (struct tls *t, const void *in, size_t in_len, void *out,
              size_t out_len)
{
  ZSTD_inBuffer ib = { in, in_len, 0 };
  ZSTD_outBuffer ob = { out, out_len, 0 };
  size_t r = 0;

  if (t->zstd == NULL)
    {
      t->zstd = ZSTD_createDCtx ();
      if (t->zstd == NULL)
        return -1;
    }
  else
    ZSTD_DCtx_reset (t->zstd, ZSTD_reset_session_only);
  /* The compressed area may end with padding, and a cluster may be
   * stored as several frames: decode until the cluster is full.
   */
  while (ob.pos < ob.size)
    {
      size_t before_in = ib.pos, before_out = ob.pos;
      r = ZSTD_decompressStream (t->zstd, &ob, &ib);
      if (ZSTD_isError (r))
        return -1;
      if (ib.pos == before_in && ob.pos == before_out)
        return -1; /* no progress: truncated input */
    }
  /* A frame still unfinished when the cluster is full means the data
   * decompresses to more than a cluster: damaged, as qemu also says.
   */
  if (r > 0)
    return -1;
  return 0;
}

/* Decompress the whole cluster whose L2 entry is 'l2e' into 'out'
 * (cluster_size bytes).
 */
static int
read_compressed (struct qcow2_image *img, uint64_t l2e, void *out,
                 struct qcow2_error *err)
{
  struct tls *t = get_tls (err);
  uint64_t coffset = l2e & img->coffset_mask;
  uint64_t nb_sectors = ((l2e >> img->csize_shift) & img->csize_mask) + 1;
  uint64_t csize = nb_sectors * 512 - (coffset & 511);
  uint64_t avail;
  int r;

  if (t == NULL)
    return -1;
  if (img->data_io != img->io)
    {
      qcow2_set_error (err, EIO,
                       "compressed cluster in an image with an "
                       "external data file (L2 entry %#" PRIx64 ")",
                       l2e);
      return -1;
    }
  uint64_t file_size = __atomic_load_n (&img->file_size, __ATOMIC_RELAXED);

  if (coffset < img->cluster_size || coffset >= file_size)
    {
      qcow2_set_error (err, EIO,
                       "compressed cluster offset %#" PRIx64
                       " is outside the image data",
                       coffset);
      return -1;
    }
  if (ranges_overlap (coffset, csize, img->active_l1_offset,
                      img->active_l1_bytes)
      || ranges_overlap (coffset, csize, img->reftable_offset,
                         img->reftable_bytes))
    {
      qcow2_set_error (err, EIO,
                       "compressed cluster at %#" PRIx64 " overlaps metadata",
                       coffset);
      return -1;
    }
  /* The last compressed cluster may end before its last sector does:
   * the file is not padded, so take what the file has.
   */
  avail = file_size - coffset;
  if (csize > avail)
    csize = avail;
  if (t->in_cap < csize)
    {
      /* At most 2 cluster sizes (2^(cluster_bits-8) sectors): the buffer
       * only grows a few times per thread.
       */
      unsigned char *p = realloc (t->in, csize);
      if (p == NULL)
        {
          qcow2_set_error (err, ENOMEM, "out of memory");
          return -1;
        }
      t->in = p;
      t->in_cap = csize;
    }
  r = img->io->pread (img->io, t->in, csize, coffset);
  if (r < 0)
    {
      qcow2_set_error (err, -r,
                       "reading compressed cluster at %#" PRIx64 ": %s",
                       coffset, strerror (-r));
      return -1;
    }
  if (img->compression_type == 0)
    r = inflate_cluster (t, t->in, csize, out, img->cluster_size);
  else
    r = zstd_cluster (t, t->in, csize, out, img->cluster_size);
  if (r == -1)
    {
      qcow2_set_error (err, EIO,
                       "cannot decompress the %s cluster at %#" PRIx64
                       " (%" PRIu64 " bytes)",
                       img->compression_type == 0 ? "deflate" : "zstd", coffset,
                       csize);
      return -1;
    }
  return 0;
}

int
qcow2_read_compressed_part (struct qcow2_image *img, uint64_t l2e, void *buf,
                            uint64_t in_cluster, size_t len,
                            struct qcow2_error *err)
{
  struct tls *t;

  if (in_cluster == 0 && len == img->cluster_size)
    return read_compressed (img, l2e, buf, err);

  t = get_tls (err);
  if (t == NULL)
    return -1;
  if (t->out_uid != img->uid || t->out_l2e != l2e)
    {
      if (t->out_cap < img->cluster_size)
        {
          unsigned char *p = realloc (t->out, img->cluster_size);
          if (p == NULL)
            {
              qcow2_set_error (err, ENOMEM, "out of memory");
              return -1;
            }
          t->out = p;
          t->out_cap = img->cluster_size;
        }
      t->out_uid = 0;
      if (read_compressed (img, l2e, t->out, err) == -1)
        return -1;
      t->out_uid = img->uid;
      t->out_l2e = l2e;
    }
  memcpy (buf, t->out + in_cluster, len);
  return 0;
}
