/* Unit test of common/align.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Built with ALIGN_BAD_CONSTANT=N (see common.mk), this file must NOT
 * compile: case N uses a constant alignment that is not a power of 2.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "align.h"

#ifdef ALIGN_BAD_CONSTANT
int
main (void)
{
  volatile uint64_t x = 5;
#if ALIGN_BAD_CONSTANT == 1
  return ROUND_UP (x, 3) != 0;
#elif ALIGN_BAD_CONSTANT == 2
  return ROUND_DOWN (x, 0) != 0;
#elif ALIGN_BAD_CONSTANT == 3
  return IS_ALIGNED (x, 4096 + 512);
#else
#error unknown case
#endif
}
#else

static unsigned calls;

static uint64_t
counted (uint64_t v)
{
  calls++;
  return v;
}

static void
test_min_max (void)
{
  int i = 5, j = 7;

  assert (MIN (3, 4) == 3 && MIN (4, 3) == 3 && MIN (-1, 1) == -1);
  assert (MAX (3, 4) == 4 && MAX (4, 3) == 4 && MAX (-1, 1) == 1);
  assert (MIN (UINT64_MAX, (uint64_t)1) == 1);
  assert (MAX ((uint64_t)UINT32_MAX + 1, (uint64_t)UINT32_MAX)
          == (uint64_t)UINT32_MAX + 1);
  /* Mixed widths compare in the common type, as the plain ?: did. */
  assert (MIN ((uint32_t)7, (uint64_t)1 << 40) == 7);
  assert (MAX ((uint32_t)7, (uint64_t)1 << 40) == (uint64_t)1 << 40);
  assert (sizeof MIN ((uint32_t)1, (uint64_t)2) == sizeof (uint64_t));

  /* Each argument once, whichever one is returned. */
  calls = 0;
  assert (MIN (counted (1), counted (2)) == 1 && calls == 2);
  calls = 0;
  assert (MAX (counted (1), counted (2)) == 2 && calls == 2);
  assert (MIN (i++, j++) == 5 && i == 6 && j == 8);
  assert (MAX (i++, j++) == 8 && i == 7 && j == 9);

  /* Nesting compiles under -Wshadow -Werror and is right. */
  assert (MIN (MIN (9, 4), MAX (2, 3)) == 3);
  assert (MAX (MAX (1, MIN (8, 6)), MIN (5, MAX (0, 7))) == 6);
}

/* x rounded by plain arithmetic, for any alignment. */
static uint64_t
ref_down (uint64_t x, uint64_t a)
{
  return x / a * a;
}

static void
test_rounding (void)
{
  /* volatile: the alignment is not a constant here, so the run-time
   * path is the one tested.
   */
  for (volatile uint64_t a = 1; a <= 4096; a *= 2)
    for (uint64_t x = 0; x < 3 * 4096; ++x)
      {
        uint64_t down = ref_down (x, a);
        uint64_t up = x % a ? down + a : down;

        assert (ROUND_DOWN (x, a) == down);
        assert (ROUND_UP (x, a) == up);
        assert (IS_ALIGNED (x, a) == (x % a == 0));
      }
  /* And with constants, which take the compile-time check. */
  for (uint64_t x = 0; x < 3 * 4096; ++x)
    {
      assert (ROUND_DOWN (x, 512) == ref_down (x, 512));
      assert (ROUND_UP (x, 4096) == ref_down (x + 4095, 4096));
      assert (IS_ALIGNED (x, 1) && IS_ALIGNED (x, 64) == (x % 64 == 0));
    }

  /* Top of the range: a 32-bit mask must be widened before ~, or the
   * high half of x is lost.
   */
  assert (ROUND_DOWN (UINT64_MAX, 4096u) == UINT64_MAX - 4095);
  assert (ROUND_DOWN (UINT64_MAX, (uint32_t)1 << 31)
          == UINT64_MAX - (((uint64_t)1 << 31) - 1));
  assert (ROUND_UP ((uint64_t)1 << 63, 512) == (uint64_t)1 << 63);
  assert (ROUND_UP (((uint64_t)1 << 63) + 1, 512) == ((uint64_t)1 << 63) + 512);
  assert (IS_ALIGNED ((uint64_t)1 << 40, (uint64_t)1 << 40));
  assert (!IS_ALIGNED (((uint64_t)1 << 40) + 4096, (uint64_t)1 << 40));
  /* A 32-bit x rounded up to a 64-bit alignment does not wrap. */
  assert (ROUND_UP ((uint32_t)1, (uint64_t)1 << 32) == (uint64_t)1 << 32);
  assert (ROUND_UP (UINT32_MAX, (uint64_t)4096) == (uint64_t)1 << 32);
  /* The types stay those of the old macros. */
  assert (sizeof ROUND_DOWN ((uint32_t)5, (uint64_t)4) == sizeof (uint32_t));
  assert (sizeof ROUND_UP ((uint32_t)5, (uint64_t)4) == sizeof (uint64_t));

  /* Each argument once. */
  {
    uint64_t x = 4097, a = 4096;
    assert (ROUND_UP (x++, a) == 8192 && x == 4098);
    assert (ROUND_DOWN (x++, a) == 4096 && x == 4099);
    assert (!IS_ALIGNED (x++, a) && x == 4100);
    calls = 0;
    assert (ROUND_UP (counted (1), counted (512)) == 512 && calls == 2);
    calls = 0;
    assert (ROUND_DOWN (counted (1023), counted (512)) == 512 && calls == 2);
    calls = 0;
    assert (IS_ALIGNED (counted (1024), counted (512)) && calls == 2);
  }

  /* Nesting. */
  assert (ROUND_UP (ROUND_DOWN (5000, 4096), 512) == 4096);
  assert (ROUND_DOWN (ROUND_UP (5000, 4096) + 1, 4096) == 8192);
}

static void
test_div_round_up (void)
{
  unsigned n = 10;

  assert (DIV_ROUND_UP (0, 3) == 0);
  assert (DIV_ROUND_UP (1, 3) == 1);
  assert (DIV_ROUND_UP (3, 3) == 1);
  assert (DIV_ROUND_UP (4, 3) == 2);
  assert (DIV_ROUND_UP ((uint64_t)1 << 40, 1000) == 1099511628);
  assert (DIV_ROUND_UP (n++, 4) == 3 && n == 11);
  calls = 0;
  assert (DIV_ROUND_UP (counted (7), counted (7)) == 1 && calls == 2);
}

static void
test_constexpr_detection (void)
{
  volatile uint64_t v = 8;
  uint64_t w = v;

  /* The static check relies on telling these apart. */
  static_assert (IS_CONSTEXPR (4096), "a literal is constant");
  static_assert (IS_CONSTEXPR ((uint64_t)1 << 20), "constant");
  assert (!IS_CONSTEXPR (v));
  assert (!IS_CONSTEXPR (w));
  assert (!IS_CONSTEXPR (w * 0 + 8));
  assert (is_power_of_2 (1) && is_power_of_2 (2) && is_power_of_2 (1ULL << 63));
  assert (!is_power_of_2 (0) && !is_power_of_2 (3) && !is_power_of_2 (6));
  assert (!is_power_of_2 (UINT64_MAX) && !is_power_of_2 ((1ULL << 63) + 1));
}

/* A variable alignment that is not a power of 2 must abort, not give a
 * wrong answer.
 */
static void
expect_abort (int which, uint64_t align)
{
  pid_t pid = fork ();
  int status;

  assert (pid != -1);
  if (pid == 0)
    {
      volatile uint64_t a = align, x = 12345, r = 0;

      /* Keep the expected assertion message out of the test log. */
      if (freopen ("/dev/null", "w", stderr) == NULL)
        _exit (2);
      switch (which)
        {
        case 0:
          r = ROUND_UP (x, a);
          break;
        case 1:
          r = ROUND_DOWN (x, a);
          break;
        default:
          r = IS_ALIGNED (x, a);
          break;
        }
      _exit (r == 0 ? 3 : 4);
    }
  assert (waitpid (pid, &status, 0) == pid);
  if (!WIFSIGNALED (status) || WTERMSIG (status) != SIGABRT)
    {
      fprintf (stderr,
               "macro %d, alignment %" PRIu64 ": status %#x, "
               "expected an abort\n",
               which, align, status);
      exit (1);
    }
}

static void
test_bad_alignment_aborts (void)
{
  for (int which = 0; which < 3; ++which)
    {
      expect_abort (which, 0);
      expect_abort (which, 3);
      expect_abort (which, 4096 + 512);
      expect_abort (which, UINT64_MAX);
    }
}

int
main (void)
{
  test_min_max ();
  test_rounding ();
  test_div_round_up ();
  test_constexpr_detection ();
  test_bad_alignment_aborts ();
  printf ("PASS: align\n");
  return 0;
}
#endif
