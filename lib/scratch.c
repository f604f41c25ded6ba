/* nbdstack qcow2 library: cluster-sized scratch buffers, reused.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A write that covers part of a cluster over backing or compressed
 * data copies the rest of the cluster from where it reads now, and a
 * zero of part of a cluster reads that part to see whether it is zero
 * already: each needs one cluster of memory for the length of one
 * request.  Taking it from malloc every time costs a large allocation
 * (and, past glibc's mmap threshold, fresh pages) per request; these
 * slots keep a few buffers for the next request instead.
 *
 * The slots are taken and given back with an atomic exchange, not a
 * lock: a slot holds a buffer or NULL, whoever exchanges a buffer out
 * owns it, and a buffer given back goes into the first empty slot or,
 * when all are full, back to the allocator.  Buffers are page-aligned
 * so that O_DIRECT host I/O can use them without a copy.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "qcow2-internal.h"

unsigned char *
qcow2_scratch_get (struct qcow2_image *img, struct qcow2_error *err)
{
  unsigned char *buf;
  size_t i;

  for (i = 0; i < QCOW2_SCRATCH_SLOTS; ++i)
    {
      buf = __atomic_exchange_n (&img->scratch[i], NULL, __ATOMIC_ACQUIRE);
      if (buf != NULL)
        return buf;
    }
  if (posix_memalign ((void **)&buf, 4096, img->cluster_size) != 0)
    {
      qcow2_set_error (err, ENOMEM, "out of memory");
      return NULL;
    }
  return buf;
}

void
qcow2_scratch_put (struct qcow2_image *img, unsigned char *buf)
{
  size_t i;

  if (buf == NULL)
    return;
  for (i = 0; i < QCOW2_SCRATCH_SLOTS; ++i)
    {
      unsigned char *empty = NULL;

      if (__atomic_compare_exchange_n (&img->scratch[i], &empty, buf, false,
                                       __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        return;
    }
  free (buf);
}

/* At close: no request is running. */
void
qcow2_scratch_free (struct qcow2_image *img)
{
  size_t i;

  for (i = 0; i < QCOW2_SCRATCH_SLOTS; ++i)
    {
      free (img->scratch[i]);
      img->scratch[i] = NULL;
    }
}
