/* nbdstack coalesce filter: the ordered set of buffered byte ranges.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The buffer is a sorted array of disjoint half-open intervals
 * [start, end) of the export.  The bytes themselves live at the same
 * offsets in one large anonymous mapping (see coalesce.c), so this file
 * only keeps track of which ranges are buffered and in what state.
 *
 * A sorted array with binary search is enough: adjacent dirty writes
 * are merged on insertion, so the array stays short for sequential
 * streams (1000 x 512 B writes are one interval), and even a buffer
 * full of scattered 4 KiB writes (64 MiB / 4 KiB = 16k intervals)
 * costs only a memmove of a few hundred KiB per insertion.
 *
 * None of these functions lock: the caller holds the buffer lock.
 *
 * The bottom of the stack: intervals.c calls nothing else of the filter
 * and is nbdkit-free (tests/test-coalesce-intervals.c runs it alone).
 * Called by: buffer.c, writeback.c, coalesce.c (iv_charge).
 */
#ifndef NBDSTACK_COALESCE_INTERVALS_H
#define NBDSTACK_COALESCE_INTERVALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum iv_state
{
  IV_FILLING,  /* a client write is copying its payload in */
  IV_DIRTY,    /* acknowledged, waiting to be written below */
  IV_INFLIGHT, /* being written below right now */
  IV_ZOMBIE,   /* superseded by a zero/trim in progress: still served to
                * readers, never written, removed when the zero is done */
};

struct iv
{
  uint64_t start, end;
  /* Sequence number of the oldest acknowledged write whose bytes this
   * interval holds or replaces: a flush with sequence S waits until no
   * interval with oldest < S is left (merging keeps the minimum).
   * IV_NO_WRITE while a write that replaces nothing is being copied in.
   */
  uint64_t oldest;
  enum iv_state state;
};

struct ivset
{
  struct iv *v;
  size_t len, cap;
  uint64_t page_size;
  uint64_t charged;     /* page-rounded bytes held by all intervals */
  uint64_t dirty_bytes; /* bytes in IV_DIRTY intervals */
};

/* Bytes of memory an interval may keep resident: its span rounded out
 * to whole pages.  Two intervals sharing a page both count it, so the
 * sum over-estimates (never under-estimates) what is resident.
 */
extern uint64_t iv_charge (const struct ivset *s, uint64_t start, uint64_t end);

/* Index of the first interval with end > off (len if none). */
extern size_t ivset_find (const struct ivset *s, uint64_t off);

/* Make room for n more intervals so that the carve/insert sequence
 * that follows cannot fail half-way.  Returns -1 (errno set) on ENOMEM.
 */
extern int ivset_reserve (struct ivset *s, size_t n);

/* Insert at idx (caller keeps the order); capacity must be reserved. */
extern void ivset_insert (struct ivset *s, size_t idx, struct iv iv);
/* Remove the interval at idx, uncharging it. */
extern void ivset_remove (struct ivset *s, size_t idx);
/* Set the state of the interval at idx, keeping dirty_bytes right. */
extern void ivset_set_state (struct ivset *s, size_t idx, enum iv_state st);

/* True if any interval overlapping [a, b) is not IV_DIRTY. */
extern bool ivset_busy (const struct ivset *s, uint64_t a, uint64_t b);

/* Cut [a, b) out of the (all IV_DIRTY) intervals overlapping it,
 * keeping their parts outside [a, b).  The removed pieces are appended
 * to pieces[] (if non-NULL, room for all overlaps) and counted in
 * *npieces.  Returns the index where an interval starting at a now
 * belongs.  Needs 1 reserved slot.
 */
extern size_t ivset_carve (struct ivset *s, uint64_t a, uint64_t b,
                           struct iv *pieces, size_t *npieces);

/* Merge the IV_DIRTY interval at idx with IV_DIRTY neighbours that
 * touch it.  Returns the index of the merged interval.
 */
extern size_t ivset_merge (struct ivset *s, size_t idx);

/* Smallest 'oldest' of the intervals overlapping [a, b), or
 * IV_NO_WRITE if none: what a write replacing them must inherit.
 */
#define IV_NO_WRITE UINT64_MAX
extern uint64_t ivset_oldest (const struct ivset *s, uint64_t a, uint64_t b);

/* Number of intervals overlapping [a, b). */
extern size_t ivset_count_overlaps (const struct ivset *s, uint64_t a,
                                    uint64_t b);

#endif /* NBDSTACK_COALESCE_INTERVALS_H */
