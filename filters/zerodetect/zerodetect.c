/* nbdstack zerodetect filter: turn written zeroes into zero requests.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Clients such as `qemu-img convert -S 0` or a guest wiping its disk send
 * runs of zeroes as ordinary data.  Writing them costs disk bandwidth and,
 * on sparse or thin targets, space.  This filter scans each write and
 * sends the all-zero parts down as NBD zero requests instead:
 *
 *   zerodetect=on      zero requests without MAY_TRIM (space stays allocated)
 *   zerodetect=unmap   zero requests with MAY_TRIM (the plugin may punch holes)
 *   zerodetect=off     pass writes through unchanged (for A/B comparisons)
 *
 * With zerodetect-granularity=G (default 64K), a write that is not zero
 * as a whole is split at G-aligned boundaries (aligned to the absolute
 * offset, so pieces match the target's own allocation units): aligned
 * G-sized zero blocks become zero requests, everything else is written as
 * data, and neighbouring pieces of the same kind are merged.  Data pieces
 * are sub-ranges of the client's buffer, so nothing is copied.  G=0 only
 * looks at whole requests, as qemu's detect-zeroes does.
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
#include "fua-plan.h"
#include "is-zero.h"
#include "parse-enum-param.h"
#include "parse-size-param.h"
#include "stat-counter.h"
#include "zerodetect-params.h"

enum zd_mode
{
  ZD_ON,
  ZD_UNMAP,
  ZD_OFF
};

/* Indexed by value, so that the exit summary can name the setting. */
static const struct enum_param_word mode_words[] = {
  [ZD_ON] = { "on", ZD_ON },
  [ZD_UNMAP] = { "unmap", ZD_UNMAP },
  [ZD_OFF] = { "off", ZD_OFF },
};

static enum zd_mode mode = ZD_ON;
static uint32_t granularity = 65536;

/* Statistics.  Updated with relaxed atomics so that the data path never
 * takes a lock; they are only read once, when the server exits.
 */
static struct
{
  uint64_t writes;      /* pwrite requests seen */
  uint64_t write_bytes; /* bytes in them */
  uint64_t passed;      /* writes passed through unchanged */
  uint64_t whole_zero;  /* writes that became exactly one zero request */
  uint64_t split;       /* writes split into several pieces */
  uint64_t zero_reqs;   /* zero requests sent down */
  uint64_t zero_bytes;  /* bytes sent down as zero requests */
  uint64_t data_reqs;   /* write requests sent down after scanning */
  uint64_t data_bytes;  /* bytes written as data after scanning */
} stats;

static void
zerodetect_unload (void)
{
  nbdkit_debug ("zerodetect: mode=%s granularity=%" PRIu32 " writes=%" PRIu64
                " write_bytes=%" PRIu64 " passed=%" PRIu64
                " whole_zero=%" PRIu64 " split=%" PRIu64 " zero_reqs=%" PRIu64
                " zero_bytes=%" PRIu64 " data_reqs=%" PRIu64
                " data_bytes=%" PRIu64,
                mode_words[mode].name, granularity, stat_get (&stats.writes),
                stat_get (&stats.write_bytes), stat_get (&stats.passed),
                stat_get (&stats.whole_zero), stat_get (&stats.split),
                stat_get (&stats.zero_reqs), stat_get (&stats.zero_bytes),
                stat_get (&stats.data_reqs), stat_get (&stats.data_bytes));
}

/* Smallest and largest granularity accepted.  Below 512 the per-piece
 * overhead dominates; above the server's 64M request limit no write could
 * contain an aligned block anyway.
 */
#define MIN_GRANULARITY 512
#define MAX_GRANULARITY (64 * 1024 * 1024)

static const struct param_spec zerodetect_params[]
    = { ZERODETECT_PARAMS (PARAM_SPEC) };

/* Set one of the parameters in zerodetect_params. */
static int
set_param (const char *key, const char *value)
{
  if (strcmp (key, "zerodetect") == 0)
    {
      int r;
      if (parse_enum_param (key, value, mode_words, &r) == -1)
        return -1;
      mode = r;
      return 0;
    }
  if (strcmp (key, "zerodetect-granularity") == 0)
    {
      int64_t r = parse_size_param (key, value);
      if (r == -1)
        return -1;
      if (r != 0
          && (r < MIN_GRANULARITY || r > MAX_GRANULARITY || !is_power_of_2 (r)))
        {
          nbdkit_error ("zerodetect-granularity=%s: must be 0 or a power of 2 "
                        "between 512 and 64M",
                        value);
          return -1;
        }
      granularity = r;
      return 0;
    }
  abort (); /* a key in ZERODETECT_PARAMS without a case here */
}

/* Ours if ZERODETECT_PARAMS lists it, else the next layer's. */
PARAM_FILTER_CONFIG (zerodetect_config, zerodetect_params, set_param)

#define zerodetect_config_help ZERODETECT_PARAMS (PARAM_HELP_LINE)

/* How FUA on the client's request is honoured for the pieces we send
 * (common/fua-plan.h).  When the layer below only emulates FUA it would
 * flush after every piece; one flush after the last piece gives the
 * same guarantee.
 */
static int
plan_fua (nbdkit_next *next, uint32_t flags, struct fua_plan *plan, int *err)
{
  if (fua_plan_make (next, flags, plan, err) == -1)
    {
      /* EINVAL cannot happen: we advertise the layer below's FUA
       * support, so the server never hands us FUA it cannot honour.
       */
      if (*err == EINVAL)
        nbdkit_error ("zerodetect: FUA requested but not supported below");
      return -1;
    }
  return 0;
}

/* Send down one piece [start, start+len) of the client's write, which
 * begins at 'offset' in 'buf'.
 */
static int
send_piece (nbdkit_next *next, const unsigned char *buf, uint64_t offset,
            uint64_t start, uint64_t len, bool zero,
            const struct fua_plan *plan, int *err)
{
  /* Pieces are never empty and always lie inside the client's request,
   * which the server has already checked against the export size.
   */
  if (len == 0)
    return 0;
  if (zero)
    {
      uint32_t flags = plan->piece_flags;
      if (mode == ZD_UNMAP)
        flags |= NBDKIT_FLAG_MAY_TRIM;
      stat_add (&stats.zero_reqs, 1);
      stat_add (&stats.zero_bytes, len);
      return next->zero (next, len, start, flags, err);
    }
  stat_add (&stats.data_reqs, 1);
  stat_add (&stats.data_bytes, len);
  return next->pwrite (next, buf + (start - offset), len, start,
                       plan->piece_flags, err);
}

static int
zerodetect_pwrite (nbdkit_next *next, void *handle, const void *buf,
                   uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  const unsigned char *p = buf;
  const uint64_t end = offset + count;
  const uint64_t g = granularity;
  struct fua_plan plan;
  uint64_t pos, first_data, run_start;
  bool run_zero;
  int r;

  stat_add (&stats.writes, 1);
  stat_add (&stats.write_bytes, count);

  /* Zero requests only help when the layer below implements them; if it
   * would emulate them by writing zeroes we would only add a scan.
   */
  if (mode == ZD_OFF || next->can_zero (next) != NBDKIT_ZERO_NATIVE)
    {
      stat_add (&stats.passed, 1);
      return next->pwrite (next, buf, count, offset, flags, err);
    }

  /* Find the first piece holding data.  Pieces end at G-aligned absolute
   * offsets; the first and last may be partial.  Without a granularity
   * the whole request is one piece.
   */
  pos = offset;
  while (pos < end)
    {
      uint64_t piece_end = g ? MIN (ROUND_DOWN (pos, g) + g, end) : end;
      if (!is_zero (p + (pos - offset), piece_end - pos))
        break;
      pos = piece_end;
    }
  first_data = pos;

  if (plan_fua (next, flags, &plan, err) == -1)
    return -1;

  if (first_data == end)
    {
      /* All zero: one zero request, whatever its alignment. */
      stat_add (&stats.whole_zero, 1);
      r = send_piece (next, p, offset, offset, count, true, &plan, err);
      goto out;
    }
  if (g == 0)
    {
      stat_add (&stats.passed, 1);
      r = send_piece (next, p, offset, offset, count, false, &plan, err);
      goto out;
    }

  /* Walk the pieces again, classifying each one: only full aligned
   * blocks of zeroes become zero requests (partial blocks at the edges
   * are written as data, so that a zero request never covers part of an
   * allocation unit).  Pieces before first_data are known to be zero and
   * are not scanned twice.  Runs of the same kind are merged and sent
   * when the kind changes.
   */
  run_start = offset;
  run_zero = false;
  r = 0;
  for (pos = offset; pos < end;)
    {
      uint64_t piece_end = MIN (ROUND_DOWN (pos, g) + g, end);
      bool full = piece_end - pos == g;
      bool zero;

      if (!full || pos == first_data)
        zero = false;
      else if (pos < first_data)
        zero = true;
      else
        zero = is_zero (p + (pos - offset), g);

      if (pos == offset)
        run_zero = zero;
      else if (zero != run_zero)
        {
          r = send_piece (next, p, offset, run_start, pos - run_start, run_zero,
                          &plan, err);
          if (r == -1)
            goto out;
          stat_add (&stats.split, run_start == offset);
          run_start = pos;
          run_zero = zero;
        }
      pos = piece_end;
    }
  r = send_piece (next, p, offset, run_start, end - run_start, run_zero, &plan,
                  err);
  if (run_start == offset)
    stat_add (&stats.passed, 1);

out:
  if (r == 0 && plan.flush_at_end)
    r = next->flush (next, 0, err);
  return r;
}

static struct nbdkit_filter filter = {
  .name = "zerodetect",
  .longname = "nbdstack zerodetect filter",
  .unload = zerodetect_unload,
  .config = zerodetect_config,
  .config_help = zerodetect_config_help,
  .pwrite = zerodetect_pwrite,
};

NBDKIT_REGISTER_FILTER (filter)
