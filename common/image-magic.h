/* nbdstack common: which image format the first sector of a file names.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The magic tests of qemu's format probes, for the formats qemu
 * recognises from the first 512 bytes of a file.  A file none of them
 * matches is what qemu probes as raw.  Used to refuse serving another
 * format as raw (nbd/probe.c) and to keep a client from turning a
 * probed raw image into one (plugins/image/image.c).
 */
#ifndef NBDSTACK_COMMON_IMAGE_MAGIC_H
#define NBDSTACK_COMMON_IMAGE_MAGIC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* How many leading bytes image_magic looks at (qemu's probe buffer). */
#define IMAGE_MAGIC_BYTES 512

static inline uint32_t
image_magic_be32 (const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8
         | p[3];
}

/* The format named by H[0, N) (N is at most IMAGE_MAGIC_BYTES bytes of
 * the file's start; fewer if the file is shorter), or NULL: raw.  qcow2
 * is any version from 2 on, as qemu's probe takes it (qemu then refuses
 * the versions it cannot open).
 */
static inline const char *
image_magic (const unsigned char *h, size_t n)
{
  if (n >= 8 && memcmp (h, "QFI\xfb", 4) == 0)
    {
      uint32_t v = image_magic_be32 (h + 4);
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
