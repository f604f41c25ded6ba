/* nbdstack image plugin: a byte range of a file as a qcow2 hostio.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * A qcow2 image stored inside another file (a disk inside an OVA,
 * which imageio opens as qemu's qcow2 over raw{offset, size}): every
 * offset the library uses is moved by 'start', and nothing outside
 * [start, start+length) is read or written.
 */
#ifndef NBDSTACK_IMAGE_HOSTIO_RANGE_H
#define NBDSTACK_IMAGE_HOSTIO_RANGE_H

#include <stdint.h>

#include "qcow2-hostio.h"

/* Over 'base', which it then owns (closes on close, and on failure).
 * length < 0: the range runs to the end of the file, which may grow as
 * the image is written.  length >= 0: a fixed range: its size is
 * length, reads past it fail with EIO, writes with ENOSPC (as qemu's
 * raw driver with a size), and the library treats it as a device that
 * cannot grow.  NULL: out of memory.
 */
extern struct qcow2_hostio *hostio_range (struct qcow2_hostio *base,
                                          uint64_t start, int64_t length);

#endif /* NBDSTACK_IMAGE_HOSTIO_RANGE_H */
