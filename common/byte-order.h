/* nbdstack common: big-endian fields of on-disk structures.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: every reader and writer here takes a pointer of any
 * alignment and touches exactly 2, 4 or 8 bytes at it, most significant
 * byte first (qcow2 and every other format we probe store big-endian).
 */
#ifndef NBDSTACK_COMMON_BYTE_ORDER_H
#define NBDSTACK_COMMON_BYTE_ORDER_H

#include <stdint.h>

/* The 16-bit big-endian value at p. */
static inline uint16_t
get_be16 (const void *p)
{
  const unsigned char *b = p;
  return (uint16_t)(b[0] << 8 | b[1]);
}

/* The 32-bit big-endian value at p. */
static inline uint32_t
get_be32 (const void *p)
{
  const unsigned char *b = p;
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8
         | b[3];
}

/* The 64-bit big-endian value at p. */
static inline uint64_t
get_be64 (const void *p)
{
  return (uint64_t)get_be32 (p) << 32 | get_be32 ((const char *)p + 4);
}

/* Store v at p, 16-bit big-endian. */
static inline void
put_be16 (void *p, uint16_t v)
{
  unsigned char *b = p;
  b[0] = v >> 8;
  b[1] = v;
}

/* Store v at p, 32-bit big-endian. */
static inline void
put_be32 (void *p, uint32_t v)
{
  unsigned char *b = p;
  b[0] = v >> 24;
  b[1] = v >> 16;
  b[2] = v >> 8;
  b[3] = v;
}

/* Store v at p, 64-bit big-endian. */
static inline void
put_be64 (void *p, uint64_t v)
{
  put_be32 (p, v >> 32);
  put_be32 ((char *)p + 4, (uint32_t)v);
}

#endif /* NBDSTACK_COMMON_BYTE_ORDER_H */
