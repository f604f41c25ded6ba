/* nbdstack qcow2 library: where new clusters go.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Two layouts.  Linear (regular files): guest cluster g lives at host
 * cluster linear_start + g, so a disk uploaded in any order ends up in
 * guest order in the file (no fragmentation, and reads of neighbouring
 * guest data are neighbouring host reads); metadata goes below
 * linear_start while there is room, then past the span; when g's home
 * is taken, g goes past the span too.  Compact (block devices, and
 * images whose layout was not made by us): a bump pointer from the end
 * of what is in use, after the clusters freed since the open; a device
 * that is full wraps around once to look for free clusters below.
 *
 * Every cluster is taken with qcow2_rc_claim, which sets its refcount
 * to 1 if it was 0: the refcounts are the only record of what is free,
 * so no cluster can be handed out twice, and one that a new refcount
 * block took is skipped.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "qcow2-internal.h"

int
qcow2_alloc_init (struct qcow2_image *img, struct qcow2_error *err)
{
  img->bump = img->host_end >> img->cluster_bits;
  if (img->alloc_mode == QCOW2_ALLOC_LINEAR
      && img->bump < img->linear_start + img->linear_clusters)
    img->bump = img->linear_start + img->linear_clusters;
  return 0;
}

void
qcow2_alloc_free_state (struct qcow2_image *img)
{
  free (img->freed);
  img->freed = NULL;
  img->nfreed = img->freed_cap = 0;
}

int
qcow2_alloc_reuse (struct qcow2_image *img, uint64_t cluster)
{
  if (img->nfreed == img->freed_cap)
    {
      size_t cap = img->freed_cap ? img->freed_cap * 2 : 64;
      uint64_t *p = realloc (img->freed, cap * sizeof *p);
      if (p == NULL)
        return -1; /* only lost for reuse: it stays free on disk */
      img->freed = p;
      img->freed_cap = cap;
    }
  img->freed[img->nfreed++] = cluster;
  return 0;
}

/* Claim 'c': 1 taken, 0 in use, -1 error. */
static int
try_claim (struct qcow2_image *img, uint64_t c, struct qcow2_error *err)
{
  if (img->io->fixed_size && (c + 1) << img->cluster_bits > img->file_size)
    return 0;
  return qcow2_rc_claim (img, c, err);
}

static int
from_bump (struct qcow2_image *img, uint64_t *cluster, struct qcow2_error *err)
{
  const uint64_t end = img->file_size >> img->cluster_bits;
  bool wrapped = false;
  int r;

  for (;;)
    {
      if (img->io->fixed_size && img->bump >= end)
        {
          if (wrapped)
            break;
          /* Full: look once for clusters freed below. */
          wrapped = true;
          img->bump = 1;
        }
      r = try_claim (img, img->bump, err);
      if (r == -1)
        return -1;
      if (r == 1)
        {
          *cluster = img->bump++;
          return 0;
        }
      img->bump++;
    }
  qcow2_set_error (err, ENOSPC, "no free cluster left on the device");
  return -1;
}

int
qcow2_alloc_cluster (struct qcow2_image *img, bool metadata, uint64_t guest,
                     uint64_t *cluster, struct qcow2_error *err)
{
  int r;

  if (img->alloc_mode == QCOW2_ALLOC_LINEAR)
    {
      if (!metadata && guest < img->linear_clusters)
        {
          r = try_claim (img, img->linear_start + guest, err);
          if (r == -1)
            return -1;
          if (r == 1)
            {
              *cluster = img->linear_start + guest;
              return 0;
            }
        }
      while (metadata && img->meta_cursor < img->linear_start)
        {
          r = try_claim (img, img->meta_cursor, err);
          if (r == -1)
            return -1;
          if (r == 1)
            {
              *cluster = img->meta_cursor++;
              return 0;
            }
          img->meta_cursor++;
        }
    }

  /* Freed clusters first (never a linear home: those stay for their
   * guest cluster).
   */
  while (img->nfreed > 0)
    {
      uint64_t c = img->freed[--img->nfreed];

      if (img->alloc_mode == QCOW2_ALLOC_LINEAR && c >= img->linear_start
          && c < img->linear_start + img->linear_clusters)
        continue;
      r = try_claim (img, c, err);
      if (r == -1)
        return -1;
      if (r == 1)
        {
          *cluster = c;
          return 0;
        }
    }
  return from_bump (img, cluster, err);
}
