/* nbdstack host-file layer: which parts of the file are holes.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a run reported as a hole reads as zeroes (SEEK_DATA and
 * SEEK_HOLE say so); anything the kernel cannot tell is data.  A raw
 * image's block status and a raw backing file's holes (reported as
 * zeroes, as qemu does) both come from here.
 */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "align.h"
#include "hostfile.h"

int
hostfile_extent (struct hostfile *hf, uint64_t offset, uint64_t max,
                 uint64_t *len, bool *hole)
{
  off_t data, end;

  data = lseek (hf->fd, offset, SEEK_DATA);
  if (data == -1)
    {
      if (errno != ENXIO)
        return -errno;
      /* No data after offset: a hole to the end. */
      *hole = true;
      *len = max;
      return 0;
    }
  if ((uint64_t)data > offset)
    {
      *hole = true;
      *len = MIN ((uint64_t)data - offset, max);
      return 0;
    }
  end = lseek (hf->fd, offset, SEEK_HOLE);
  if (end == -1)
    return -errno;
  *hole = false;
  /* end <= offset: the file changed under us (truncated?); say data. */
  *len = (uint64_t)end <= offset ? max : MIN ((uint64_t)end - offset, max);
  return 0;
}
