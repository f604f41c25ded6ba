/* nbdstack discard filter: make trim (discard) do what the operator chose.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   discard=pass     trim goes down as trim (default)
 *   discard=ignore   trim is advertised and succeeds without touching data
 *   discard=zero     trim becomes a zero request with MAY_TRIM, so that
 *                    reads after a trim are guaranteed to return zeroes
 *   discard=refuse   trim is not advertised
 *
 *   discard-granularity=G   trims are shrunk inward to G-aligned ranges;
 *                           the unaligned head and tail are dropped (in zero
 *                           mode they are zeroed without MAY_TRIM instead)
 *   discard-max=M           trims longer than M are split into M-sized
 *                           pieces, so one request never ties up the device
 *                           for long
 *   discard-zero-trim=keep|never|always
 *                           what zero requests sent down may do: keep the
 *                           MAY_TRIM flag as it is, never allow it (thick
 *                           targets stay allocated) or always set it
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "discard-params.h"
#include "fua-plan.h"
#include "parse-enum-param.h"
#include "parse-size-param.h"
#include "stat-counter.h"

enum discard_mode
{
  DISCARD_PASS,
  DISCARD_IGNORE,
  DISCARD_ZERO,
  DISCARD_REFUSE
};
enum zero_trim
{
  ZERO_TRIM_KEEP,
  ZERO_TRIM_NEVER,
  ZERO_TRIM_ALWAYS
};

/* Indexed by value, so that the exit summary can name the setting. */
static const struct enum_param_word mode_words[] = {
  [DISCARD_PASS] = { "pass", DISCARD_PASS },
  [DISCARD_IGNORE] = { "ignore", DISCARD_IGNORE },
  [DISCARD_ZERO] = { "zero", DISCARD_ZERO },
  [DISCARD_REFUSE] = { "refuse", DISCARD_REFUSE },
};
static const struct enum_param_word zero_trim_words[] = {
  [ZERO_TRIM_KEEP] = { "keep", ZERO_TRIM_KEEP },
  [ZERO_TRIM_NEVER] = { "never", ZERO_TRIM_NEVER },
  [ZERO_TRIM_ALWAYS] = { "always", ZERO_TRIM_ALWAYS },
};

static enum discard_mode mode = DISCARD_PASS;
static enum zero_trim zero_trim = ZERO_TRIM_KEEP;
static uint64_t granularity; /* 0: no alignment */
static uint64_t max_piece;   /* 0: no limit */

/* Statistics, updated with relaxed atomics (no lock on the data path)
 * and logged when the server exits.
 */
static struct
{
  uint64_t trims;            /* trim requests seen */
  uint64_t trim_bytes;       /* bytes in them */
  uint64_t trim_reqs;        /* trim requests sent down */
  uint64_t trimmed_bytes;    /* bytes sent down as trim */
  uint64_t zeroed_reqs;      /* zero requests sent down for trims */
  uint64_t zeroed_bytes;     /* bytes sent down as zero for trims */
  uint64_t dropped_bytes;    /* trimmed bytes not sent down at all */
  uint64_t zeroes;           /* zero requests seen */
  uint64_t zero_bytes;       /* bytes in them */
  uint64_t may_trim_cleared; /* zero requests whose MAY_TRIM we removed */
  uint64_t may_trim_set;     /* zero requests whose MAY_TRIM we added */
} stats;

static void
discard_unload (void)
{
  nbdkit_debug (
      "discard: mode=%s granularity=%" PRIu64 " max=%" PRIu64 " zero-trim=%s"
      " trims=%" PRIu64 " trim_bytes=%" PRIu64 " trim_reqs=%" PRIu64
      " trimmed_bytes=%" PRIu64 " zeroed_reqs=%" PRIu64 " zeroed_bytes=%" PRIu64
      " dropped_bytes=%" PRIu64 " zeroes=%" PRIu64 " zero_bytes=%" PRIu64
      " may_trim_cleared=%" PRIu64 " may_trim_set=%" PRIu64,
      mode_words[mode].name, granularity, max_piece,
      zero_trim_words[zero_trim].name, stat_get (&stats.trims),
      stat_get (&stats.trim_bytes), stat_get (&stats.trim_reqs),
      stat_get (&stats.trimmed_bytes), stat_get (&stats.zeroed_reqs),
      stat_get (&stats.zeroed_bytes), stat_get (&stats.dropped_bytes),
      stat_get (&stats.zeroes), stat_get (&stats.zero_bytes),
      stat_get (&stats.may_trim_cleared), stat_get (&stats.may_trim_set));
}

#define MIN_SIZE 512
#define MAX_GRANULARITY (1024 * 1024 * 1024)

static const struct param_spec discard_params[]
    = { DISCARD_PARAMS (PARAM_SPEC) };

/* Set one of the parameters in discard_params. */
static int
set_param (const char *key, const char *value)
{
  int choice;
  int64_t r;

  if (strcmp (key, "discard") == 0)
    {
      if (parse_enum_param (key, value, mode_words, &choice) == -1)
        return -1;
      mode = choice;
      return 0;
    }
  if (strcmp (key, "discard-zero-trim") == 0)
    {
      if (parse_enum_param (key, value, zero_trim_words, &choice) == -1)
        return -1;
      zero_trim = choice;
      return 0;
    }
  if (strcmp (key, "discard-granularity") == 0)
    {
      r = parse_size_param (key, value);
      if (r == -1)
        return -1;
      if (r != 0 && (r < MIN_SIZE || r > MAX_GRANULARITY || !is_power_of_2 (r)))
        {
          nbdkit_error ("discard-granularity=%s: must be 0 or a power of 2 "
                        "between 512 and 1G",
                        value);
          return -1;
        }
      granularity = r;
      return 0;
    }
  if (strcmp (key, "discard-max") == 0)
    {
      r = parse_size_param (key, value);
      if (r == -1)
        return -1;
      if (r != 0 && r < MIN_SIZE)
        {
          nbdkit_error ("discard-max=%s: must be 0 (no limit) or at least 512",
                        value);
          return -1;
        }
      max_piece = r;
      return 0;
    }
  abort (); /* a key in DISCARD_PARAMS without a case here */
}

/* Ours if DISCARD_PARAMS lists it, else the next layer's. */
PARAM_FILTER_CONFIG (discard_config, discard_params, set_param)

static int
discard_config_complete (nbdkit_next_config_complete *next,
                         nbdkit_backend *nxdata)
{
  /* Pieces of a split trim start at G-aligned offsets; they only stay
   * aligned if M is a multiple of G.
   */
  if (granularity && max_piece && max_piece % granularity != 0)
    {
      nbdkit_error ("discard-max=%" PRIu64 " must be a multiple of "
                    "discard-granularity=%" PRIu64,
                    max_piece, granularity);
      return -1;
    }
  return next (nxdata);
}

#define discard_config_help DISCARD_PARAMS (PARAM_HELP_LINE)

static int
discard_can_trim (nbdkit_next *next, void *handle)
{
  int r;

  switch (mode)
    {
    case DISCARD_PASS:
      return next->can_trim (next);
    case DISCARD_IGNORE:
      /* Nothing is ever sent down, so whatever the layer below can do. */
      return 1;
    case DISCARD_ZERO:
      /* The server only calls this on a writable connection; trims become
       * zero requests, which need the layer below to accept them at all.
       */
      r = next->can_zero (next);
      if (r == -1)
        return -1;
      return r > NBDKIT_ZERO_NONE;
    case DISCARD_REFUSE:
      return 0;
    }
  abort ();
}

/* Apply discard-zero-trim to the flags of a zero request sent down. */
static uint32_t
zero_flags (uint32_t flags)
{
  switch (zero_trim)
    {
    case ZERO_TRIM_KEEP:
      break;
    case ZERO_TRIM_NEVER:
      if (flags & NBDKIT_FLAG_MAY_TRIM)
        stat_add (&stats.may_trim_cleared, 1);
      flags &= ~NBDKIT_FLAG_MAY_TRIM;
      break;
    case ZERO_TRIM_ALWAYS:
      if (!(flags & NBDKIT_FLAG_MAY_TRIM))
        stat_add (&stats.may_trim_set, 1);
      flags |= NBDKIT_FLAG_MAY_TRIM;
      break;
    }
  return flags;
}

/* Send [start, end) down as trim or zero requests of at most max_piece
 * bytes each.  'flags' is FUA or 0; 'zero_flag' is the MAY_TRIM flag for
 * zero requests before discard-zero-trim is applied.
 */
static int
send_range (nbdkit_next *next, uint64_t start, uint64_t end, bool as_zero,
            uint32_t flags, uint32_t may_trim, int *err)
{
  while (start < end)
    {
      uint64_t len = end - start;
      int r;

      if (max_piece && len > max_piece)
        len = max_piece;
      if (as_zero)
        {
          stat_add (&stats.zeroed_reqs, 1);
          stat_add (&stats.zeroed_bytes, len);
          r = next->zero (next, len, start, zero_flags (flags | may_trim), err);
        }
      else
        {
          stat_add (&stats.trim_reqs, 1);
          stat_add (&stats.trimmed_bytes, len);
          r = next->trim (next, len, start, flags, err);
        }
      if (r == -1)
        return -1;
      start += len;
    }
  return 0;
}

static int
discard_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
              uint32_t flags, int *err)
{
  const uint64_t end = offset + count;
  uint64_t mid_start, mid_end;
  struct fua_plan plan;
  bool sent = false;
  bool as_zero = mode == DISCARD_ZERO;
  int r;

  stat_add (&stats.trims, 1);
  stat_add (&stats.trim_bytes, count);

  switch (mode)
    {
    case DISCARD_IGNORE:
      /* Nothing changes, so there is nothing FUA would have to persist. */
      stat_add (&stats.dropped_bytes, count);
      return 0;
    case DISCARD_REFUSE:
      /* Not advertised, so the server rejects trims before they get here. */
      *err = EINVAL;
      return -1;
    case DISCARD_PASS:
    case DISCARD_ZERO:
      break;
    }

  /* An emulated FUA would flush after every piece: flush once instead. */
  if (fua_plan_make (next, flags, &plan, err) == -1)
    return -1;

  /* The aligned middle [mid_start, mid_end).  When no whole G block fits,
   * the request is all head.
   */
  mid_start = offset;
  mid_end = end;
  if (granularity)
    {
      mid_start = ROUND_UP (offset, granularity);
      mid_end = ROUND_DOWN (end, granularity);
      if (mid_start >= mid_end)
        mid_start = mid_end = end;
    }

  /* Unaligned head and tail: a trim there could not free whole
   * allocation units, so drop it, or in zero mode write zeroes without
   * permission to punch (partial holes only fragment the target).
   */
  if (as_zero)
    {
      r = send_range (next, offset, mid_start, true, plan.piece_flags, 0, err);
      if (r == -1)
        return -1;
      sent |= offset < mid_start;
    }
  else
    stat_add (&stats.dropped_bytes, mid_start - offset);

  r = send_range (next, mid_start, mid_end, as_zero, plan.piece_flags,
                  NBDKIT_FLAG_MAY_TRIM, err);
  if (r == -1)
    return -1;
  sent |= mid_start < mid_end;

  if (as_zero)
    {
      r = send_range (next, mid_end, end, true, plan.piece_flags, 0, err);
      if (r == -1)
        return -1;
      sent |= mid_end < end;
    }
  else
    stat_add (&stats.dropped_bytes, end - mid_end);

  if (plan.flush_at_end && sent)
    return next->flush (next, 0, err);
  return 0;
}

static int
discard_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
              uint32_t flags, int *err)
{
  stat_add (&stats.zeroes, 1);
  stat_add (&stats.zero_bytes, count);
  return next->zero (next, count, offset, zero_flags (flags), err);
}

static struct nbdkit_filter filter = {
  .name = "discard",
  .longname = "nbdstack discard filter",
  .unload = discard_unload,
  .config = discard_config,
  .config_complete = discard_config_complete,
  .config_help = discard_config_help,
  .can_trim = discard_can_trim,
  .trim = discard_trim,
  .zero = discard_zero,
};

NBDKIT_REGISTER_FILTER (filter)
