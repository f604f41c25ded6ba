/* Unit test of common/is-zero.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "is-zero.h"

#define GUARD 32

/* Every length up to past the 16-byte prefix and the memcmp tail, at
 * every start alignment, with non-zero bytes just outside the range
 * (which must not be looked at) and one non-zero byte at each position
 * inside it (which must be found, whatever its value).
 */
static void
test_small (void)
{
  static unsigned char buf[GUARD + 300 + GUARD];
  static const unsigned char values[] = { 1, 0x80, 0xff };

  for (size_t off = 0; off < 16; ++off)
    for (size_t len = 0; len <= 300; ++len)
      {
        unsigned char *p = buf + GUARD + off;

        memset (buf, 0xff, sizeof buf);
        memset (p, 0, len);
        assert (is_zero (p, len));
        for (size_t i = 0; i < len; ++i)
          for (size_t v = 0; v < sizeof values; ++v)
            {
              p[i] = values[v];
              assert (!is_zero (p, len));
              p[i] = 0;
            }
        assert (is_zero (p, len));
      }
}

/* Large buffers, with the non-zero byte far from the start. */
static void
test_large (void)
{
  const size_t len = 8 * 1024 * 1024 + 3;
  unsigned char *p = calloc (1, len);
  const size_t where[]
      = { 0, 15, 16, 17, 4095, 4096, len / 2, len - 17, len - 16, len - 1 };

  assert (p);
  assert (is_zero (p, len));
  for (size_t i = 0; i < sizeof where / sizeof where[0]; ++i)
    {
      p[where[i]] = 1;
      assert (!is_zero (p, len));
      /* The range just before it is still zero. */
      assert (is_zero (p, where[i]));
      p[where[i]] = 0;
    }
  assert (is_zero (p, len));
  free (p);
}

int
main (void)
{
  test_small ();
  test_large ();
  printf ("PASS: is-zero\n");
  return 0;
}
