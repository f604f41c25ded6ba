/* nbdstack: fast all-zero test for buffers.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_IS_ZERO_H
#define NBDSTACK_IS_ZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Return true iff every byte of buf[0..len) is zero.
 *
 * Checking a short prefix byte by byte first makes random data fail
 * almost immediately.  For the rest we compare the buffer with itself
 * shifted by 16 bytes: once the first 16 bytes are known to be zero, the
 * whole buffer is zero iff buf[i] == buf[i+16] for all i.  memcmp is
 * vectorised by glibc, so this runs at memory bandwidth without us
 * writing any SIMD code, and it stops at the first differing byte.
 */
static inline bool
is_zero (const void *buf, size_t len)
{
  const unsigned char *p = buf;
  const size_t prefix = 16;
  size_t i;

  for (i = 0; i < prefix && i < len; ++i)
    if (p[i] != 0)
      return false;
  if (len <= prefix)
    return true;
  return memcmp (p, p + prefix, len - prefix) == 0;
}

#endif /* NBDSTACK_IS_ZERO_H */
