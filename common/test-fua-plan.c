/* Unit test of common/fua-plan.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Every combination of the request's FUA flag and the layer below's
 * FUA and flush support must give the plan zerodetect and discard used
 * to work out each on its own: nothing without FUA, native FUA on each
 * piece, one flush at the end for emulated FUA that can flush, and
 * EIO / EINVAL when FUA cannot be had.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <errno.h>
#include <stdio.h>

#include <nbdkit-plugin.h>

#include "fua-plan.h"

/* Run fua_plan_choose and check its result, plan and error. */
static void
check (uint32_t flags, int can_fua, int can_flush, int want_r,
       uint32_t want_piece_flags, bool want_flush, int want_err)
{
  struct fua_plan plan = { 0xdead, true };
  int err = 0;
  int r = fua_plan_choose (flags, can_fua, can_flush, &plan, &err);

  assert (r == want_r);
  assert (err == want_err);
  if (r == 0)
    {
      assert (plan.piece_flags == want_piece_flags);
      assert (plan.flush_at_end == want_flush);
    }
}

int
main (void)
{
  const uint32_t F = NBDKIT_FLAG_FUA;
  const int fuas[]
      = { -1, NBDKIT_FUA_NONE, NBDKIT_FUA_EMULATE, NBDKIT_FUA_NATIVE };

  /* Without FUA nothing is asked of the layer below and nothing added,
   * whatever it supports (even when asking it would fail).
   */
  for (size_t i = 0; i < sizeof fuas / sizeof fuas[0]; ++i)
    for (int flush = -1; flush <= 1; ++flush)
      {
        check (0, fuas[i], flush, 0, 0, false, 0);
        check (NBDKIT_FLAG_MAY_TRIM, fuas[i], flush, 0, 0, false, 0);
      }

  /* Native FUA: on every piece, no flush. */
  for (int flush = -1; flush <= 1; ++flush)
    check (F, NBDKIT_FUA_NATIVE, flush, 0, F, false, 0);

  /* Emulated FUA: one flush at the end if the layer can flush, else FUA
   * on every piece (the layer below emulates it as it can).
   */
  check (F, NBDKIT_FUA_EMULATE, 1, 0, 0, true, 0);
  check (F, NBDKIT_FUA_EMULATE, 0, 0, F, false, 0);
  check (F, NBDKIT_FUA_EMULATE, -1, 0, F, false, 0);

  /* No FUA below, or asking failed. */
  for (int flush = -1; flush <= 1; ++flush)
    {
      check (F, NBDKIT_FUA_NONE, flush, -1, 0, false, EINVAL);
      check (F, -1, flush, -1, 0, false, EIO);
    }

  /* Other flags do not change the plan. */
  check (F | NBDKIT_FLAG_MAY_TRIM, NBDKIT_FUA_EMULATE, 1, 0, 0, true, 0);

  printf ("PASS: fua-plan\n");
  return 0;
}
