/* nbdstack common: which image format the first sector of a file names.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The magic tests of qemu's format probes, for the formats qemu
 * recognises from the first 512 bytes of a file.  A file none of them
 * matches is what qemu probes as raw.  Used to refuse serving another
 * format as raw (nbd/probe.c) and to keep a client from turning a
 * probed raw image into one (plugins/image/image.c).  The qcow2 magic
 * is tested here only (image_has_qcow2_magic), for lib/ (qcow2_probe,
 * the parser, create) and nbd/probe.c alike.
 */
#ifndef NBDSTACK_COMMON_IMAGE_MAGIC_H
#define NBDSTACK_COMMON_IMAGE_MAGIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "byte-order.h"

/* How many leading bytes image_magic looks at (qemu's probe buffer). */
#define IMAGE_MAGIC_BYTES 512

/* The first 4 bytes of every qcow file (qcow and qcow2): "QFI\xfb". */
#define QCOW2_MAGIC 0x514649fbU

/* Do H[0, N) start with the qcow magic?  Any version (1 is qcow). */
static inline bool
image_has_qcow2_magic (const void *h, size_t n)
{
  return n >= 4 && get_be32 (h) == QCOW2_MAGIC;
}

/* The format named by H[0, N) (N is at most IMAGE_MAGIC_BYTES bytes of
 * the file's start; fewer if the file is shorter), or NULL: raw.  qcow2
 * is any version from 2 on, as qemu's probe takes it (qemu then refuses
 * the versions it cannot open).
 */
static inline const char *
image_magic (const unsigned char *h, size_t n)
{
  if (n >= 8 && image_has_qcow2_magic (h, n))
    {
      uint32_t v = get_be32 (h + 4);
      if (v >= 2)
        return "qcow2";
      if (v == 1)
        return "qcow";
    }
  if (n >= 4 && memcmp (h, "QED\0", 4) == 0)
    return "qed";
  if (n >= 4 && memcmp (h, "KDMV", 4) == 0)
    return "vmdk";
  if (n >= 21 && memcmp (h, "# Disk DescriptorFile", 21) == 0)
    return "vmdk";
  /* vdi: a little-endian signature at 0x40. */
  if (n >= 0x44 && h[0x40] == 0x7f && h[0x41] == 0x10 && h[0x42] == 0xda
      && h[0x43] == 0xbe)
    return "vdi";
  if (n >= 8 && memcmp (h, "vhdxfile", 8) == 0)
    return "vhdx";
  if (n >= 8 && memcmp (h, "conectix", 8) == 0)
    return "vpc";
  if (n >= 6 && memcmp (h, "LUKS\xba\xbe", 6) == 0)
    return "luks";
  if (n >= 16
      && (memcmp (h, "WithoutFreeSpace", 16) == 0
          || memcmp (h, "WithouFreSpacExt", 16) == 0))
    return "parallels";
  if (n >= 22 && memcmp (h, "Bochs Virtual HD Image", 22) == 0)
    return "bochs";
  if (n >= 23 && memcmp (h, "#!/bin/sh\n#V2.0 Format\n", 23) == 0)
    return "cloop";
  return NULL;
}

#endif /* NBDSTACK_COMMON_IMAGE_MAGIC_H */
