/* Unit test of common/image-magic.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "image-magic.h"

static const char *
magic_of (const void *prefix, size_t plen, size_t at, size_t n)
{
  static unsigned char h[IMAGE_MAGIC_BYTES];

  memset (h, 0, sizeof h);
  memcpy (h + at, prefix, plen);
  return image_magic (h, n);
}

static void
expect (const char *got, const char *want)
{
  if (got == want || (got && want && strcmp (got, want) == 0))
    return;
  fprintf (stderr, "image_magic: got %s, expected %s\n", got ? got : "raw",
           want ? want : "raw");
  assert (0);
}

int
main (void)
{
  /* Zeroes and text are raw. */
  expect (magic_of ("", 0, 0, 512), NULL);
  expect (magic_of ("hello world", 11, 0, 512), NULL);
  /* qcow2: any version from 2; 1 is qcow; 0 is raw. */
  expect (magic_of ("QFI\xfb\0\0\0\x02", 8, 0, 512), "qcow2");
  expect (magic_of ("QFI\xfb\0\0\0\x03", 8, 0, 512), "qcow2");
  expect (magic_of ("QFI\xfb\0\0\0\x04", 8, 0, 512), "qcow2");
  expect (magic_of ("QFI\xfb\x01\0\0\0", 8, 0, 512), "qcow2");
  expect (magic_of ("QFI\xfb\0\0\0\x01", 8, 0, 512), "qcow");
  expect (magic_of ("QFI\xfb\0\0\0\0", 8, 0, 512), NULL);
  /* A header cut short by the end of the file does not match. */
  expect (magic_of ("QFI\xfb\0\0\0\x03", 8, 0, 7), NULL);
  expect (magic_of ("QED\0", 4, 0, 512), "qed");
  expect (magic_of ("KDMV", 4, 0, 512), "vmdk");
  expect (magic_of ("# Disk DescriptorFile", 21, 0, 512), "vmdk");
  expect (magic_of ("\x7f\x10\xda\xbe", 4, 0x40, 512), "vdi");
  expect (magic_of ("\x7f\x10\xda\xbe", 4, 0x40, 0x43), NULL);
  expect (magic_of ("vhdxfile", 8, 0, 512), "vhdx");
  expect (magic_of ("conectix", 8, 0, 512), "vpc");
  expect (magic_of ("LUKS\xba\xbe", 6, 0, 512), "luks");
  expect (magic_of ("WithoutFreeSpace", 16, 0, 512), "parallels");
  expect (magic_of ("WithouFreSpacExt", 16, 0, 512), "parallels");
  expect (magic_of ("Bochs Virtual HD Image", 22, 0, 512), "bochs");
  expect (magic_of ("#!/bin/sh\n#V2.0 Format\n", 23, 0, 512), "cloop");
  /* Magic anywhere but its place is raw. */
  expect (magic_of ("QFI\xfb\0\0\0\x03", 8, 1, 512), NULL);
  return 0;
}
