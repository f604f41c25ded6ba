/* Unit test of the qcow2 library's metadata map (lib/overlap.c):
 *  1. the hash set of single clusters against a model, through many
 *     random adds and removes (backward-shift deletion keeps every
 *     entry findable);
 *  2. the header's tables: overlapping ones are refused, a lookup finds
 *     each range and nothing between them;
 *  3. on images the library made and filled (compact and linear, 512
 *     byte and 64 KiB clusters, refcount blocks and L2 tables made on
 *     the way, the refcount table grown): the map names exactly the
 *     clusters a scan of the header, L1 and refcount table finds, and
 *     no data cluster;
 *  4. the guards against our own bugs: a data cluster the allocator
 *     hands out over an L2 table (its refcount dropped to 0 behind the
 *     library's back) fails the write with EIO and leaves the table
 *     alone; freeing an L2 table is refused.
 * Exits non-zero with a message on the first failure.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prng.h"
#include "qcow2-internal.h"
#include "unit-check.h"

static void
test_set (void)
{
  enum
  {
    N = 20000
  };
  struct qcow2_image img = { .cluster_bits = 9, .cluster_size = 512 };
  struct qcow2_error err;
  static unsigned char model[N]; /* 0 free, else kind + 1 */
  uint64_t s = 88172645463325252ULL, at;
  enum qcow2_meta_kind kind;
  size_t count = 0, i;
  unsigned round;

  CHECK (qcow2_meta_seal_tables (&img, &err) == 0); /* the header only */
  model[0] = QCOW2_META_HEADER + 1;
  for (round = 0; round < 400000; ++round)
    {
      /* Clustered keys, as metadata is: collisions in the probe chains. */
      uint64_t c = 1 + prng_next (&s) % (N - 1);
      if (model[c] == 0)
        {
          enum qcow2_meta_kind k
              = prng_next (&s) & 1 ? QCOW2_META_L2 : QCOW2_META_REFBLOCK;
          CHECK (qcow2_meta_add (&img, k, c, &err) == 0);
          model[c] = k + 1;
          count++;
        }
      else if (prng_next (&s) % 3 == 0)
        {
          /* Adding it twice is a collision: EIO, nothing changes. */
          CHECK (qcow2_meta_add (&img, QCOW2_META_L2, c, &err) == -1);
          CHECK (err.errnum == EIO);
        }
      else
        {
          qcow2_meta_remove (&img, c);
          model[c] = 0;
          count--;
        }
      if (round % 20000 == 0)
        for (i = 0; i < N; ++i)
          {
            bool hit = qcow2_meta_lookup (&img, i, 1, &kind, &at);
            CHECK (hit == (model[i] != 0));
            CHECK (!hit || (kind + 1u == model[i] && at == i * 512));
          }
    }
  CHECK (qcow2_meta_count (&img) == count);
  /* A range lookup finds the first metadata cluster in it. */
  for (i = 1; i + 8 < N; i += 97)
    {
      size_t j, first = 0;
      for (j = i; j < i + 8 && first == 0; ++j)
        if (model[j])
          first = j;
      CHECK (qcow2_meta_lookup (&img, i, 8, &kind, &at) == (first != 0));
      CHECK (first == 0 || at == first * 512);
    }
  qcow2_meta_free (&img);
  printf ("ok: set: %u random adds and removes, %zu left\n", round, count);
}

static void
test_tables (void)
{
  struct qcow2_image img = { .cluster_bits = 16, .cluster_size = 65536 };
  struct qcow2_error err;
  enum qcow2_meta_kind kind;
  uint64_t at, c;

  /* L1 at cluster 3, refcount table at clusters 1-2, snapshot L1 at 8
   * (24 bytes: one cluster), bitmap directory at 10-11 (a partial
   * second cluster counts whole).
   */
  CHECK (qcow2_meta_add_table (&img, QCOW2_META_ACTIVE_L1, 3 << 16, 64, &err)
         == 0);
  CHECK (
      qcow2_meta_add_table (&img, QCOW2_META_REFTABLE, 1 << 16, 2 << 16, &err)
      == 0);
  CHECK (qcow2_meta_add_table (&img, QCOW2_META_SNAPSHOT_L1, 8 << 16, 24, &err)
         == 0);
  CHECK (qcow2_meta_add_table (&img, QCOW2_META_BITMAPS, 10 << 16, 65536 + 100,
                               &err)
         == 0);
  CHECK (qcow2_meta_add_table (&img, QCOW2_META_SNAPSHOTS, 0, 0, &err) == 0);
  CHECK (qcow2_meta_seal_tables (&img, &err) == 0);
  {
    const int want[] = { QCOW2_META_HEADER,
                         QCOW2_META_REFTABLE,
                         QCOW2_META_REFTABLE,
                         QCOW2_META_ACTIVE_L1,
                         -1,
                         -1,
                         -1,
                         -1,
                         QCOW2_META_SNAPSHOT_L1,
                         -1,
                         QCOW2_META_BITMAPS,
                         QCOW2_META_BITMAPS,
                         -1,
                         -1 };
    for (c = 0; c < sizeof want / sizeof want[0]; ++c)
      {
        bool hit = qcow2_meta_lookup (&img, c, 1, &kind, &at);
        CHECK (hit == (want[c] >= 0));
        CHECK (!hit || (int)kind == want[c]);
      }
    CHECK (qcow2_meta_lookup (&img, 4, 4, &kind, &at) == false);
    CHECK (qcow2_meta_lookup (&img, 4, 5, &kind, &at) && at == 8 << 16);
  }
  /* The refcount table moves past the end: the old clusters are free. */
  CHECK (
      qcow2_meta_move_table (&img, QCOW2_META_REFTABLE, 20 << 16, 65536, &err)
      == 0);
  CHECK (!qcow2_meta_lookup (&img, 1, 2, &kind, &at));
  CHECK (qcow2_meta_lookup (&img, 20, 1, &kind, &at)
         && kind == QCOW2_META_REFTABLE);
  qcow2_meta_free (&img);

  /* Overlaps: the L1 at the refcount table's offset; a table in the
   * header; a snapshot's L1 inside the active one.
   */
  {
    static const struct
    {
      enum qcow2_meta_kind k1;
      uint64_t o1, b1;
      enum qcow2_meta_kind k2;
      uint64_t o2, b2;
      const char *msg;
    } bad[] = {
      { QCOW2_META_REFTABLE, 1 << 16, 65536, QCOW2_META_ACTIVE_L1, 1 << 16, 16,
        "overlaps the" },
      { QCOW2_META_SNAPSHOTS, 0, 40, QCOW2_META_ACTIVE_L1, 1 << 16, 16,
        "overlaps the header at 0" },
      { QCOW2_META_ACTIVE_L1, 4 << 16, 3 << 16, QCOW2_META_SNAPSHOT_L1, 6 << 16,
        8,
        "the snapshot L1 table at 0x60000 overlaps the active L1 "
        "table at 0x40000" },
    };
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i)
      {
        struct qcow2_image im = { .cluster_bits = 16, .cluster_size = 65536 };
        CHECK (qcow2_meta_add_table (&im, bad[i].k1, bad[i].o1, bad[i].b1, &err)
               == 0);
        CHECK (qcow2_meta_add_table (&im, bad[i].k2, bad[i].o2, bad[i].b2, &err)
               == 0);
        CHECK (qcow2_meta_seal_tables (&im, &err) == -1);
        CHECK (err.errnum == EINVAL);
        if (strstr (err.msg, bad[i].msg) == NULL)
          die ("overlap %zu: message '%s' lacks '%s'", i, err.msg, bad[i].msg);
        qcow2_meta_free (&im);
      }
  }
  printf ("ok: tables\n");
}

/* Every metadata cluster by a full scan, compared with the map. */
static void
compare_with_scan (struct qcow2_image *img, const char *what)
{
  const uint64_t cs = img->cluster_size;
  const uint64_t nclusters = (img->host_end + cs - 1) / cs;
  unsigned char *want = calloc (nclusters + 1, 1); /* kind + 1 */
  uint64_t i, n, at, data = 0, meta = 0;
  enum qcow2_meta_kind kind;

  CHECK (want);
  want[0] = QCOW2_META_HEADER + 1;
  for (i = 0; i < (img->reftable_bytes + cs - 1) / cs; ++i)
    want[img->reftable_offset / cs + i] = QCOW2_META_REFTABLE + 1;
  for (i = 0; i < (img->active_l1_bytes + cs - 1) / cs; ++i)
    want[img->active_l1_offset / cs + i] = QCOW2_META_ACTIVE_L1 + 1;
  n = img->reftable_bytes / 8;
  for (i = 0; i < n; ++i)
    if (qcow2_rc_block_at (img, i))
      {
        CHECK (qcow2_rc_block_at (img, i) / cs < nclusters);
        want[qcow2_rc_block_at (img, i) / cs] = QCOW2_META_REFBLOCK + 1;
      }
  for (i = 0; i < img->l1_size; ++i)
    if (img->l1[i] & L1E_OFFSET_MASK)
      {
        uint64_t l2 = img->l1[i] & L1E_OFFSET_MASK, j;
        struct l2_ref ref;

        CHECK (want[l2 / cs] == 0);
        want[l2 / cs] = QCOW2_META_L2 + 1;
        CHECK (l2_cache_get (img->l2, l2, &ref) == 0);
        for (j = 0; j < (1ULL << img->l2_bits); ++j)
          {
            uint64_t e
                = get_be64 ((const char *)ref.table + j * img->l2_entry_bytes);
            if (e & L2E_OFFSET_MASK)
              {
                CHECK (!qcow2_meta_lookup (img, (e & L2E_OFFSET_MASK) / cs, 1,
                                           &kind, &at));
                data++;
              }
          }
        l2_cache_put (&ref);
      }
  for (i = 0; i < nclusters; ++i)
    {
      bool hit = qcow2_meta_lookup (img, i, 1, &kind, &at);
      if (hit != (want[i] != 0) || (hit && kind != want[i] - 1u))
        die ("%s: cluster %" PRIu64 ": map says %s, the scan %s", what, i,
             hit ? qcow2_meta_name (kind) : "data",
             want[i] ? qcow2_meta_name (want[i] - 1) : "data");
      meta += hit;
    }
  free (want);
  printf ("ok: %s: %" PRIu64 " metadata clusters (%zu single), %" PRIu64
          " data clusters\n",
          what, meta, qcow2_meta_count (img), data);
}

static struct qcow2_image *
open_new (struct qcow2_hostio **io, uint64_t size, unsigned cbits,
          unsigned rbits, bool linear)
{
  struct qcow2_create_options o = { .size = size,
                                    .cluster_bits = cbits,
                                    .refcount_bits = rbits,
                                    .linear = linear };
  struct qcow2_open_options opts = {
    .writable = true,
    .layout = linear ? QCOW2_LAYOUT_LINEAR : QCOW2_LAYOUT_COMPACT,
    .refcount_cache_blocks = 4,
    .l2_cache_size = 8ULL << cbits,
  };
  struct qcow2_error err;
  struct qcow2_image *img;

  *io = qcow2_hostio_mem_rw (NULL, 0, 0, false);
  CHECK (*io);
  if (qcow2_create (*io, &o, &err) == -1)
    die ("create: %s", err.msg);
  img = qcow2_open (*io, &opts, &err);
  if (img == NULL)
    die ("open: %s", err.msg);
  return img;
}

static void
test_image (uint64_t size, unsigned cbits, unsigned rbits, bool linear)
{
  const uint64_t cs = 1ULL << cbits;
  struct qcow2_hostio *io;
  struct qcow2_image *img = open_new (&io, size, cbits, rbits, linear);
  struct qcow2_error err;
  unsigned char *buf = malloc (cs);
  uint64_t s = 0x1234567 + cbits + rbits, g, n = size / cs;
  const uint64_t rt_was = img->reftable_offset;
  char what[100];

  CHECK (buf);
  /* Every cluster, in random order (new L2 tables and refcount blocks
   * all the way, the refcount table growing at 1-bit refcounts), with
   * flushes.
   */
  for (g = 0; g < n; ++g)
    {
      uint64_t c = (g * 7919 + prng_next (&s) % 2) % n;
      memset (buf, 1 + (int)(c % 250), cs);
      if (qcow2_pwrite (img, buf, cs, c * cs, &err) == -1)
        die ("write: %s", err.msg);
      if (g % 97 == 0 && qcow2_flush (img, &err) == -1)
        die ("flush: %s", err.msg);
    }
  CHECK (qcow2_flush (img, &err) == 0);
  snprintf (what, sizeof what, "%s %" PRIu64 "K clusters=%u refcount=%u%s",
            linear ? "linear" : "compact", size >> 10, (unsigned)cs, rbits,
            img->reftable_offset != rt_was ? " (refcount table moved)" : "");
  compare_with_scan (img, what);
  CHECK (qcow2_close_err (img, &err) == 0);
  qcow2_hostio_close (io);
  free (buf);
}

/* The write path's guards, on a compact image with data in it. */
static void
test_guards (void)
{
  const uint64_t cs = 65536;
  struct qcow2_hostio *io;
  struct qcow2_image *img = open_new (&io, 64 << 20, 16, 16, false);
  struct qcow2_error err;
  unsigned char *buf = malloc (cs), before[512], after[512];
  uint64_t l2, size;

  CHECK (buf);
  memset (buf, 0x55, cs);
  CHECK (qcow2_pwrite (img, buf, cs, 0, &err) == 0);
  CHECK (qcow2_flush (img, &err) == 0);
  l2 = img->l1[0] & L1E_OFFSET_MASK;
  CHECK (l2);

  /* Direct checks: a data cluster is not metadata, 16 bytes inside
   * the L2 table are.
   */
  CHECK (qcow2_meta_check (img, img->host_end - cs, cs, "write", &err) == 0);
  CHECK (qcow2_meta_check (img, l2 + 8, 16, "write", &err) == -1);
  CHECK (err.errnum == EIO);
  CHECK (strstr (err.msg, "Preventing invalid write on metadata") != NULL);
  CHECK (strstr (err.msg, "active L2 table") != NULL);
  CHECK (img_failed (img));
  qcow2_close (img);
  qcow2_hostio_close (io);

  /* Our own bug, simulated: the L2 table's refcount dropped to 0 and
   * the cluster offered for reuse.  The next new data cluster would be
   * it: the write fails and the table is untouched.
   */
  img = open_new (&io, 64 << 20, 16, 16, false);
  CHECK (qcow2_pwrite (img, buf, cs, 0, &err) == 0);
  CHECK (qcow2_flush (img, &err) == 0);
  l2 = img->l1[0] & L1E_OFFSET_MASK;
  memcpy (before, qcow2_hostio_mem_contents (io, &size) + l2, 512);
  pthread_rwlock_wrlock (&img->lock);
  CHECK (qcow2_rc_update (img, l2 / cs, -1, &err) == 0);
  CHECK (qcow2_alloc_reuse (img, l2 / cs) == 0);
  pthread_rwlock_unlock (&img->lock);
  memset (buf, 0xaa, cs);
  CHECK (qcow2_pwrite (img, buf, cs, 5 * cs, &err) == -1);
  CHECK (err.errnum == EIO);
  CHECK (strstr (err.msg, "Preventing invalid write on metadata") != NULL);
  memcpy (after, qcow2_hostio_mem_contents (io, &size) + l2, 512);
  CHECK (memcmp (before, after, 512) == 0);
  CHECK (qcow2_pwrite (img, buf, cs, 6 * cs, &err) == -1); /* failed */
  qcow2_close (img);
  qcow2_hostio_close (io);

  /* Freeing an L2 table as if it were data is refused. */
  img = open_new (&io, 64 << 20, 16, 16, false);
  CHECK (qcow2_pwrite (img, buf, cs, 0, &err) == 0);
  l2 = img->l1[0] & L1E_OFFSET_MASK;
  pthread_rwlock_wrlock (&img->lock);
  CHECK (qcow2_free_entry (img, l2, false, 0, &err) == -1);
  pthread_rwlock_unlock (&img->lock);
  CHECK (err.errnum == EIO);
  CHECK (strstr (err.msg, "Preventing invalid free on metadata") != NULL);
  qcow2_close (img);
  qcow2_hostio_close (io);
  free (buf);
  printf ("ok: guards\n");
}

int
main (void)
{
  test_set ();
  test_tables ();
  test_image (16 << 20, 9, 16, false);
  test_image (4 << 20, 9, 1, false);
  test_image (4 << 20, 9, 16, true);
  test_image (64 << 20, 16, 16, false);
  test_image (64 << 20, 16, 16, true);
  test_guards ();
  return 0;
}
