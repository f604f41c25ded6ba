/* Unit test of common/byte-order.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <string.h>

#include "byte-order.h"

int
main (void)
{
  unsigned char b[9] = { 0 };
  const unsigned char src[9] = { 0xaa, 1, 2, 3, 4, 5, 6, 7, 8 };

  /* Unaligned reads, most significant byte first. */
  assert (get_be16 (src + 1) == 0x0102);
  assert (get_be32 (src + 1) == 0x01020304);
  assert (get_be64 (src + 1) == 0x0102030405060708ULL);
  assert (get_be32 ("QFI\xfb") == 0x514649fbU);

  /* Writes touch exactly their bytes and read back. */
  memset (b, 0xee, sizeof b);
  put_be16 (b + 1, 0xbeef);
  assert (b[0] == 0xee && b[1] == 0xbe && b[2] == 0xef && b[3] == 0xee);
  put_be32 (b + 1, 0xdeadbeefU);
  assert (get_be32 (b + 1) == 0xdeadbeefU && b[5] == 0xee);
  put_be64 (b + 1, 0x8000000000000001ULL);
  assert (get_be64 (b + 1) == 0x8000000000000001ULL);
  assert (b[0] == 0xee && b[1] == 0x80 && b[8] == 0x01);
  return 0;
}
