/* nbdstack: how a filter that splits one request into several pieces
 * honours the client's FUA.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: when the client asked for FUA, every piece sent down is
 * durable when the request returns, whatever FUA the layer below has:
 * native FUA on each piece, or (emulated FUA, which would flush after
 * every piece) one flush after the last piece.
 *
 * Include after <nbdkit-filter.h> (or <nbdkit-plugin.h> for
 * fua_plan_choose alone, as the unit test does).
 */
#ifndef NBDSTACK_FUA_PLAN_H
#define NBDSTACK_FUA_PLAN_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

struct fua_plan
{
  uint32_t piece_flags; /* NBDKIT_FLAG_FUA or 0 for each piece */
  bool flush_at_end;    /* emulated FUA: one flush after all pieces */
};

/* The plan for a request with flags, given the layer below's can_fua
 * and (needed only when can_fua is NBDKIT_FUA_EMULATE) can_flush.
 * Returns 0, or -1 with *err = EIO (can_fua failed) or EINVAL (FUA
 * cannot be honoured below).
 */
static inline int
fua_plan_choose (uint32_t flags, int can_fua, int can_flush,
                 struct fua_plan *plan, int *err)
{
  plan->piece_flags = 0;
  plan->flush_at_end = false;
  if (!(flags & NBDKIT_FLAG_FUA))
    return 0;
  if (can_fua == -1)
    {
      *err = EIO;
      return -1;
    }
  if (can_fua == NBDKIT_FUA_EMULATE && can_flush == 1)
    plan->flush_at_end = true;
  else if (can_fua > NBDKIT_FUA_NONE)
    plan->piece_flags = NBDKIT_FLAG_FUA;
  else
    {
      *err = EINVAL;
      return -1;
    }
  return 0;
}

#ifdef NBDKIT_FILTER_H
/* fua_plan_choose for the layer next, asking it only what the plan
 * needs: can_fua when the request has FUA, can_flush when FUA is
 * emulated.
 */
static inline int
fua_plan_make (nbdkit_next *next, uint32_t flags, struct fua_plan *plan,
               int *err)
{
  int can_fua, can_flush = 0;

  if (!(flags & NBDKIT_FLAG_FUA))
    return fua_plan_choose (flags, 0, 0, plan, err);
  can_fua = next->can_fua (next);
  if (can_fua == NBDKIT_FUA_EMULATE)
    can_flush = next->can_flush (next);
  return fua_plan_choose (flags, can_fua, can_flush, plan, err);
}
#endif

#endif /* NBDSTACK_FUA_PLAN_H */
