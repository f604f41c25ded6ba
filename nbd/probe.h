/* nbdstack-nbd: look at the image before nbdkit is started.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * qemu-nbd opens the image before it serves anything, so a missing
 * file, a wrong format or a range beyond the end makes it exit 1 at
 * once.  nbdkit's offset filter only notices a bad range when a client
 * connects, and the image plugin serves anything that is not qcow2 as
 * raw; looking first keeps qemu-nbd's behaviour.
 */
#ifndef NBDSTACK_NBD_PROBE_H
#define NBDSTACK_NBD_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "imagespec.h"

struct image_info
{
  bool is_block_device;
  bool probed_raw;          /* no format given and not recognised */
  enum image_format format; /* FORMAT_RAW or FORMAT_QCOW2 */
  uint64_t size;            /* what the format layer serves */
  bool has_backing;         /* qcow2 whose header names a backing file */
};

/* Open SPEC->path read-only and fill INFO.  On error returns -1 and
 * sets *ERR to a malloc'd message.
 */
extern int probe_image (const struct image_spec *spec, struct image_info *info,
                        char **err);

/* Without -r qemu-nbd opens the image for writing and exits when it
 * cannot: can SPEC->path be opened for writing?  0, or -1 with a
 * malloc'd message in *ERR.
 */
extern int probe_writable (const struct image_spec *spec, char **err);

#endif /* NBDSTACK_NBD_PROBE_H */
