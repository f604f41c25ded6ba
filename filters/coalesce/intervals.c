/* nbdstack coalesce filter: the ordered set of buffered byte ranges.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "intervals.h"

uint64_t
iv_charge (const struct ivset *s, uint64_t start, uint64_t end)
{
  return ROUND_UP (end, s->page_size) - ROUND_DOWN (start, s->page_size);
}

static void
account (struct ivset *s, const struct iv *iv, int sign)
{
  uint64_t c = iv_charge (s, iv->start, iv->end);

  if (sign > 0)
    {
      s->charged += c;
      if (iv->state == IV_DIRTY)
        s->dirty_bytes += iv->end - iv->start;
    }
  else
    {
      assert (s->charged >= c);
      s->charged -= c;
      if (iv->state == IV_DIRTY)
        {
          assert (s->dirty_bytes >= iv->end - iv->start);
          s->dirty_bytes -= iv->end - iv->start;
        }
    }
}

size_t
ivset_find (const struct ivset *s, uint64_t off)
{
  size_t lo = 0, hi = s->len;

  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;
      if (s->v[mid].end <= off)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo;
}

int
ivset_reserve (struct ivset *s, size_t n)
{
  size_t want = s->len + n;
  size_t cap;
  struct iv *nv;

  if (want <= s->cap)
    return 0;
  /* Geometric growth: the array is reallocated rarely, not per request. */
  cap = s->cap ? s->cap : 64;
  while (cap < want)
    cap *= 2;
  nv = realloc (s->v, cap * sizeof *nv);
  if (nv == NULL)
    return -1;
  s->v = nv;
  s->cap = cap;
  return 0;
}

void
ivset_insert (struct ivset *s, size_t idx, struct iv iv)
{
  assert (s->len < s->cap);
  assert (idx <= s->len);
  assert (iv.start < iv.end);
  assert (idx == 0 || s->v[idx - 1].end <= iv.start);
  assert (idx == s->len || iv.end <= s->v[idx].start);
  memmove (&s->v[idx + 1], &s->v[idx], (s->len - idx) * sizeof iv);
  s->v[idx] = iv;
  s->len++;
  account (s, &iv, +1);
}

void
ivset_remove (struct ivset *s, size_t idx)
{
  assert (idx < s->len);
  account (s, &s->v[idx], -1);
  memmove (&s->v[idx], &s->v[idx + 1], (s->len - idx - 1) * sizeof s->v[0]);
  s->len--;
}

void
ivset_set_state (struct ivset *s, size_t idx, enum iv_state st)
{
  account (s, &s->v[idx], -1);
  s->v[idx].state = st;
  account (s, &s->v[idx], +1);
}

bool
ivset_busy (const struct ivset *s, uint64_t a, uint64_t b)
{
  size_t i;

  for (i = ivset_find (s, a); i < s->len && s->v[i].start < b; ++i)
    if (s->v[i].state != IV_DIRTY)
      return true;
  return false;
}

uint64_t
ivset_oldest (const struct ivset *s, uint64_t a, uint64_t b)
{
  uint64_t r = IV_NO_WRITE;
  size_t i;

  for (i = ivset_find (s, a); i < s->len && s->v[i].start < b; ++i)
    r = MIN (r, s->v[i].oldest);
  return r;
}

size_t
ivset_count_overlaps (const struct ivset *s, uint64_t a, uint64_t b)
{
  size_t i, n = 0;

  for (i = ivset_find (s, a); i < s->len && s->v[i].start < b; ++i)
    n++;
  return n;
}

size_t
ivset_carve (struct ivset *s, uint64_t a, uint64_t b, struct iv *pieces,
             size_t *npieces)
{
  size_t i = ivset_find (s, a);
  size_t n = 0;

  while (i < s->len && s->v[i].start < b)
    {
      struct iv cur = s->v[i];

      assert (cur.state == IV_DIRTY);
      if (pieces)
        {
          pieces[n] = cur;
          pieces[n].start = MAX (cur.start, a);
          pieces[n].end = MIN (cur.end, b);
        }
      n++;
      ivset_remove (s, i);
      if (cur.start < a)
        {
          struct iv head = cur;
          head.end = a;
          ivset_insert (s, i, head);
          i++;
        }
      if (cur.end > b)
        {
          /* Only the last overlapping interval can stick out past b, and
           * the head above can only happen for the first one, so at most
           * one extra slot is ever needed.
           */
          struct iv tail = cur;
          tail.start = b;
          ivset_insert (s, i, tail);
          break;
        }
    }
  if (npieces)
    *npieces = n;
  return i;
}

size_t
ivset_merge (struct ivset *s, size_t idx)
{
  assert (s->v[idx].state == IV_DIRTY);
  if (idx + 1 < s->len && s->v[idx + 1].state == IV_DIRTY
      && s->v[idx + 1].start == s->v[idx].end)
    {
      struct iv m = s->v[idx];
      m.end = s->v[idx + 1].end;
      m.oldest = MIN (m.oldest, s->v[idx + 1].oldest);
      ivset_remove (s, idx + 1);
      ivset_remove (s, idx);
      ivset_insert (s, idx, m);
    }
  if (idx > 0 && s->v[idx - 1].state == IV_DIRTY
      && s->v[idx - 1].end == s->v[idx].start)
    {
      struct iv m = s->v[idx - 1];
      m.end = s->v[idx].end;
      m.oldest = MIN (m.oldest, s->v[idx].oldest);
      ivset_remove (s, idx);
      ivset_remove (s, idx - 1);
      ivset_insert (s, idx - 1, m);
      idx--;
    }
  return idx;
}
