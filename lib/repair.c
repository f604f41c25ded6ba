/* nbdstack qcow2 library: giving leaked clusters back at a writable
 * open (repair=leaks), as `qemu-img check -r leaks` does.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A kill or a crash leaves clusters counted that nothing points at:
 * counted before their entry was durable, or freed in memory after a
 * commit whose decrements were never written.  Each open that follows
 * an unclean end adds some (nothing on disk says the image was closed
 * uncleanly: we never set the dirty bit), so this is asked for.
 *
 * Every reference on disk is counted first: the header cluster, the
 * refcount table and blocks, the L1 table, each L2 table and each data
 * cluster (a compressed one: every host cluster its sectors touch).
 * Then each cluster counted more often than it is referenced gets its
 * count lowered to its references; one referenced more often than
 * counted means corruption, refused (qemu-img check -r all).  Images
 * with snapshots or bitmaps (more tables to walk) are refused with one
 * line.  Lowering an unreferenced count is safe at any time: the open
 * reads the tables from the disk, and nothing else may use the image.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

#define REFT_OFFSET_MASK 0xfffffffffffffe00ULL

struct walk
{
  struct qcow2_image *img;
  uint32_t *refs;
  uint64_t n; /* clusters up to the highest counted one */
};

static void
mark (struct walk *w, uint64_t off, uint64_t len)
{
  uint64_t c;

  if (len == 0)
    return;
  for (c = off >> w->img->cluster_bits;
       c <= (off + len - 1) >> w->img->cluster_bits && c < w->n; ++c)
    if (w->refs[c] < UINT32_MAX)
      w->refs[c]++;
}

static int
walk_l2 (struct walk *w, uint64_t l2_off, unsigned char *buf,
         struct qcow2_error *err)
{
  struct qcow2_image *img = w->img;
  const uint64_t entries = 1ULL << img->l2_bits;
  uint64_t i;
  int r = img->io->pread (img->io, buf, img->cluster_size, l2_off);

  if (r < 0)
    {
      qcow2_set_error (err, -r,
                       "repair: reading the L2 table at %#" PRIx64 ": %s",
                       l2_off, strerror (-r));
      return -1;
    }
  for (i = 0; i < entries; ++i)
    {
      uint64_t e = get_be64 (buf + i * img->l2_entry_bytes);

      if (e & OFLAG_COMPRESSED)
        {
          uint64_t coffset = e & img->coffset_mask;
          uint64_t nb = ((e >> img->csize_shift) & img->csize_mask) + 1;
          uint64_t start = coffset & ~511ULL;
          mark (w, start, nb * 512);
        }
      else if (e & L2E_OFFSET_MASK)
        mark (w, e & L2E_OFFSET_MASK, img->cluster_size);
    }
  return 0;
}

int
qcow2_repair_leaks (struct qcow2_image *img, uint64_t *leaked,
                    struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  struct walk w = { img, NULL, 0 };
  unsigned char *buf = NULL, *rt = NULL;
  uint64_t i, v;
  int ret = -1, r;

  *leaked = 0;
  /* Clusters above the highest counted one cannot be leaked. */
  if (qcow2_rc_highest_used (img, &w.n, err) == -1)
    return -1;
  w.n++;
  if (img->nb_snapshots > 0 || img->has_bitmaps)
    {
      qcow2_set_error (err, ENOTSUP,
                       "repair=leaks: the image has snapshots or bitmaps: "
                       "use qemu-img check -r leaks");
      return -1;
    }
  w.refs = calloc (w.n ? w.n : 1, sizeof *w.refs);
  buf = malloc (cs);
  rt = malloc (img->reftable_bytes);
  if (w.refs == NULL || buf == NULL || rt == NULL)
    {
      qcow2_set_error (err, ENOMEM, "repair: out of memory");
      goto out;
    }
  mark (&w, 0, cs);
  mark (&w, img->reftable_offset, img->reftable_bytes);
  r = img->io->pread (img->io, rt, img->reftable_bytes, img->reftable_offset);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "repair: reading the refcount table: %s",
                       strerror (-r));
      goto out;
    }
  for (i = 0; i < img->reftable_bytes / 8; ++i)
    mark (&w, get_be64 (rt + i * 8) & REFT_OFFSET_MASK, cs);
  mark (&w, img->active_l1_offset, img->active_l1_bytes);
  mark (&w, img->snapshots_offset, img->snapshots_bytes);
  for (i = 0; i < img->l1_size; ++i)
    {
      uint64_t l2 = img->l1[i] & L1E_OFFSET_MASK;

      if (l2 == 0)
        continue;
      if (qcow2_check_l2_offset (img, l2, i, err) == -1)
        goto out;
      mark (&w, l2, cs);
      if (walk_l2 (&w, l2, buf, err) == -1)
        goto out;
    }

  for (i = 1; i < w.n; ++i)
    {
      if (qcow2_rc_get (img, i, &v, err) == -1)
        goto out;
      if (v < w.refs[i])
        {
          qcow2_set_error (err, EIO,
                           "repair: cluster %#" PRIx64 " has %" PRIu32
                           " references but a refcount of %" PRIu64
                           " (the image is corrupt: repair it with "
                           "qemu-img check -r all)",
                           i * cs, w.refs[i], v);
          goto out;
        }
      if (v > w.refs[i])
        {
          if (qcow2_rc_update (img, i, -(int64_t)(v - w.refs[i]), err) == -1)
            goto out;
          if (w.refs[i] == 0)
            (*leaked)++;
        }
    }
  if (qcow2_rc_write_dirty (img, err) == -1)
    goto out;
  r = img->io->flush (img->io);
  if (r < 0)
    {
      qcow2_set_error (err, -r, "repair: flush: %s", strerror (-r));
      goto out;
    }
  ret = 0;
out:
  free (w.refs);
  free (buf);
  free (rt);
  return ret;
}
