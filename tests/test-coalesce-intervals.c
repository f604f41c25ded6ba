/* Unit test of filters/coalesce/intervals.c (no nbdkit needed).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The edge cases first, by hand; then random operations, both the
 * sequences buffer.c and writeback.c use (carve, insert, set dirty,
 * merge; split for write-back) and arbitrary ones, checked after every
 * step against a byte map: for each byte of a small export, which
 * interval (if any) holds it, and for each interval its state and
 * 'oldest'.  From the map alone the test derives the intervals, what
 * every query must answer, and the charged and dirty_bytes totals.
 *
 *   test-coalesce-intervals [SEED [ROUNDS]]
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "intervals.h"
#include "prng.h"

static struct ivset
new_set (uint64_t page_size)
{
  struct ivset s = { .page_size = page_size };
  return s;
}

static struct iv
mk (uint64_t start, uint64_t end, enum iv_state state, uint64_t oldest)
{
  struct iv iv
      = { .start = start, .end = end, .oldest = oldest, .state = state };
  return iv;
}

/* Append (the caller keeps the order). */
static void
add (struct ivset *s, uint64_t start, uint64_t end, enum iv_state state,
     uint64_t oldest)
{
  assert (ivset_reserve (s, 1) == 0);
  ivset_insert (s, s->len, mk (start, end, state, oldest));
}

static void
expect_iv (const struct ivset *s, size_t i, uint64_t start, uint64_t end,
           enum iv_state state, uint64_t oldest)
{
  assert (i < s->len);
  if (s->v[i].start != start || s->v[i].end != end || s->v[i].state != state
      || s->v[i].oldest != oldest)
    {
      fprintf (stderr,
               "interval %zu is [%" PRIu64 ", %" PRIu64 ") state %d "
               "oldest %" PRIu64 ", expected [%" PRIu64 ", %" PRIu64 ") "
               "state %d oldest %" PRIu64 "\n",
               i, s->v[i].start, s->v[i].end, s->v[i].state, s->v[i].oldest,
               start, end, state, oldest);
      exit (1);
    }
}

/*---------------------------------------------------------------------
 * Edge cases.
 */

static void
test_charge (void)
{
  struct ivset s = new_set (4096);

  assert (iv_charge (&s, 0, 1) == 4096);
  assert (iv_charge (&s, 0, 4096) == 4096);
  assert (iv_charge (&s, 4095, 4097) == 8192);
  assert (iv_charge (&s, 4096, 8192) == 4096);
  assert (iv_charge (&s, 8191, 8192) == 4096);
  s.page_size = 1;
  assert (iv_charge (&s, 10, 17) == 7);
}

/* One interval cut in the middle: a head and a tail remain, with the
 * state and 'oldest' of the original, and one reserved slot is enough.
 */
static void
test_carve_head_and_tail (void)
{
  struct ivset s = new_set (16);
  struct iv pieces[1];
  size_t n = 99, idx;

  /* Exactly two slots: the carve's one extra interval must fit. */
  s.v = malloc (2 * sizeof *s.v);
  assert (s.v);
  s.cap = 2;
  ivset_insert (&s, 0, mk (100, 200, IV_DIRTY, 7));
  assert (s.charged == 208 - 96 && s.dirty_bytes == 100);

  idx = ivset_carve (&s, 120, 150, pieces, &n);
  assert (idx == 1);
  assert (n == 1);
  assert (pieces[0].start == 120 && pieces[0].end == 150);
  assert (pieces[0].state == IV_DIRTY && pieces[0].oldest == 7);
  assert (s.len == 2 && s.cap == 2);
  expect_iv (&s, 0, 100, 120, IV_DIRTY, 7);
  expect_iv (&s, 1, 150, 200, IV_DIRTY, 7);
  assert (s.charged == (128 - 96) + (208 - 144));
  assert (s.dirty_bytes == 20 + 50);

  /* What buffer.c does next: the new write goes where carve said. */
  assert (ivset_reserve (&s, 1) == 0);
  ivset_insert (&s, idx, mk (120, 150, IV_FILLING, 7));
  assert (s.dirty_bytes == 70);
  ivset_set_state (&s, idx, IV_DIRTY);
  assert (s.dirty_bytes == 100);
  assert (ivset_merge (&s, idx) == 0);
  assert (s.len == 1);
  expect_iv (&s, 0, 100, 200, IV_DIRTY, 7);
  assert (s.charged == 208 - 96 && s.dirty_bytes == 100);
  free (s.v);
}

static void
test_carve_several (void)
{
  struct ivset s = new_set (1);
  struct iv pieces[3];
  size_t n, idx;

  add (&s, 0, 10, IV_DIRTY, 1);
  add (&s, 20, 30, IV_DIRTY, 2);
  add (&s, 40, 50, IV_DIRTY, 3);
  add (&s, 60, 70, IV_INFLIGHT, 4);
  assert (ivset_count_overlaps (&s, 5, 45) == 3);
  assert (!ivset_busy (&s, 5, 45));
  assert (ivset_oldest (&s, 5, 45) == 1);
  assert (ivset_oldest (&s, 15, 45) == 2);

  idx = ivset_carve (&s, 5, 45, pieces, &n);
  assert (idx == 1 && n == 3);
  assert (pieces[0].start == 5 && pieces[0].end == 10 && pieces[0].oldest == 1);
  assert (pieces[1].start == 20 && pieces[1].end == 30
          && pieces[1].oldest == 2);
  assert (pieces[2].start == 40 && pieces[2].end == 45
          && pieces[2].oldest == 3);
  assert (s.len == 3);
  expect_iv (&s, 0, 0, 5, IV_DIRTY, 1);
  expect_iv (&s, 1, 45, 50, IV_DIRTY, 3);
  expect_iv (&s, 2, 60, 70, IV_INFLIGHT, 4);
  assert (s.charged == 5 + 5 + 10 && s.dirty_bytes == 10);

  /* Exactly one interval, on its boundaries: nothing is left of it. */
  idx = ivset_carve (&s, 45, 50, NULL, &n);
  assert (idx == 1 && n == 1 && s.len == 2);
  expect_iv (&s, 1, 60, 70, IV_INFLIGHT, 4);

  /* In a gap: nothing removed, the index where [a, b) belongs. */
  idx = ivset_carve (&s, 20, 30, pieces, &n);
  assert (idx == 1 && n == 0 && s.len == 2);
  idx = ivset_carve (&s, 80, 90, NULL, NULL);
  assert (idx == 2 && s.len == 2);
  /* Touching but not overlapping. */
  idx = ivset_carve (&s, 5, 60, NULL, &n);
  assert (idx == 1 && n == 0 && s.len == 2);
  assert (s.charged == 5 + 10 && s.dirty_bytes == 5);
  free (s.v);
}

static void
test_merge (void)
{
  struct ivset s = new_set (8);

  /* Both sides, the minimum 'oldest' taken from either. */
  add (&s, 0, 10, IV_DIRTY, 5);
  add (&s, 10, 20, IV_DIRTY, 6);
  add (&s, 20, 30, IV_DIRTY, 3);
  add (&s, 30, 35, IV_INFLIGHT, 1);
  assert (ivset_merge (&s, 1) == 0);
  assert (s.len == 2);
  expect_iv (&s, 0, 0, 30, IV_DIRTY, 3);
  expect_iv (&s, 1, 30, 35, IV_INFLIGHT, 1);
  assert (s.charged == 32 + (40 - 24) && s.dirty_bytes == 30);
  ivset_remove (&s, 1);
  ivset_remove (&s, 0);
  assert (s.len == 0 && s.charged == 0 && s.dirty_bytes == 0);

  add (&s, 0, 10, IV_DIRTY, 2);
  add (&s, 10, 20, IV_DIRTY, 8);
  add (&s, 20, 30, IV_DIRTY, 9);
  assert (ivset_merge (&s, 1) == 0);
  expect_iv (&s, 0, 0, 30, IV_DIRTY, 2);
  ivset_remove (&s, 0);

  /* Not across a gap, nor with an interval that is not dirty. */
  add (&s, 0, 10, IV_INFLIGHT, 1);
  add (&s, 10, 20, IV_DIRTY, 2);
  add (&s, 21, 30, IV_DIRTY, 3);
  assert (ivset_merge (&s, 1) == 1);
  assert (s.len == 3);
  expect_iv (&s, 1, 10, 20, IV_DIRTY, 2);
  /* Only the right side. */
  ivset_remove (&s, 2);
  add (&s, 20, 30, IV_DIRTY, 1);
  assert (ivset_merge (&s, 1) == 1);
  assert (s.len == 2);
  expect_iv (&s, 1, 10, 30, IV_DIRTY, 1);
  /* Only the left side, once the left one is dirty again. */
  ivset_set_state (&s, 0, IV_DIRTY);
  assert (s.dirty_bytes == 30);
  assert (ivset_merge (&s, 1) == 0);
  assert (s.len == 1);
  expect_iv (&s, 0, 0, 30, IV_DIRTY, 1);
  assert (s.charged == 32 && s.dirty_bytes == 30);
  free (s.v);
}

static void
test_queries (void)
{
  struct ivset s = new_set (1);

  assert (ivset_find (&s, 0) == 0);
  assert (ivset_oldest (&s, 0, 100) == IV_NO_WRITE);
  assert (!ivset_busy (&s, 0, 100));
  assert (ivset_count_overlaps (&s, 0, 100) == 0);

  add (&s, 10, 20, IV_DIRTY, 4);
  add (&s, 20, 30, IV_ZOMBIE, 2);
  add (&s, 40, 50, IV_FILLING, IV_NO_WRITE);
  assert (ivset_find (&s, 9) == 0 && ivset_find (&s, 19) == 0);
  assert (ivset_find (&s, 20) == 1 && ivset_find (&s, 35) == 2);
  assert (ivset_find (&s, 49) == 2 && ivset_find (&s, 50) == 3);
  assert (!ivset_busy (&s, 0, 20));
  assert (ivset_busy (&s, 19, 21));
  assert (!ivset_busy (&s, 30, 40));
  assert (ivset_busy (&s, 49, 60));
  assert (ivset_oldest (&s, 0, 15) == 4);
  assert (ivset_oldest (&s, 15, 25) == 2);
  assert (ivset_oldest (&s, 30, 40) == IV_NO_WRITE);
  assert (ivset_oldest (&s, 45, 46) == IV_NO_WRITE);
  assert (ivset_count_overlaps (&s, 0, 10) == 0);
  assert (ivset_count_overlaps (&s, 0, 11) == 1);
  assert (ivset_count_overlaps (&s, 19, 41) == 3);
  assert (ivset_count_overlaps (&s, 50, 60) == 0);
  assert (s.dirty_bytes == 10 && s.charged == 30);
  free (s.v);
}

/*---------------------------------------------------------------------
 * Random operations against the byte map.
 */

#define SPACE 2048

static uint64_t rng;

static uint64_t
rnd (uint64_t n)
{
  return (prng_next (&rng) >> 11) % n;
}

struct info
{
  enum iv_state state;
  uint64_t oldest;
};

static uint32_t owner[SPACE]; /* 0: not buffered, else an id */
static struct info *info;     /* by id */
static uint32_t next_id;
static size_t max_ids;

struct run
{
  uint64_t start, end;
  uint32_t id;
};
static struct run runs[SPACE];
static size_t nruns;

static uint32_t
new_id (enum iv_state state, uint64_t oldest)
{
  assert (next_id < max_ids);
  info[next_id].state = state;
  info[next_id].oldest = oldest;
  return next_id++;
}

/* The model's intervals: maximal runs of one id.  A carve leaves the
 * head and the tail of one interval with the same id; the tail gets a
 * new one here, so that every run is its own interval.
 */
static void
model_runs (void)
{
  nruns = 0;
  for (uint64_t i = 0; i < SPACE;)
    {
      uint64_t j = i;

      if (owner[i] == 0)
        {
          i++;
          continue;
        }
      while (j < SPACE && owner[j] == owner[i])
        j++;
      for (size_t k = 0; k < nruns; ++k)
        {
          if (runs[k].id == owner[i])
            {
              uint32_t id
                  = new_id (info[owner[i]].state, info[owner[i]].oldest);
              for (uint64_t b = i; b < j; ++b)
                owner[b] = id;
              break;
            }
        }
      runs[nruns].start = i;
      runs[nruns].end = j;
      runs[nruns].id = owner[i];
      nruns++;
      i = j;
    }
}

static size_t
model_find (uint64_t off)
{
  size_t n = 0;

  while (n < nruns && runs[n].end <= off)
    n++;
  return n;
}

static uint64_t
ref_charge (uint64_t page, uint64_t start, uint64_t end)
{
  return (end + page - 1) / page * page - start / page * page;
}

static void
check_set (const struct ivset *s)
{
  uint64_t charged = 0, dirty = 0;

  model_runs ();
  assert (s->len <= s->cap);
  if (s->len != nruns)
    {
      fprintf (stderr, "%zu intervals, the model has %zu\n", s->len, nruns);
      exit (1);
    }
  for (size_t i = 0; i < nruns; ++i)
    {
      const struct info *in = &info[runs[i].id];

      expect_iv (s, i, runs[i].start, runs[i].end, in->state, in->oldest);
      charged += ref_charge (s->page_size, runs[i].start, runs[i].end);
      if (in->state == IV_DIRTY)
        dirty += runs[i].end - runs[i].start;
    }
  assert (s->charged == charged);
  assert (s->dirty_bytes == dirty);
}

/* What the queries must answer for [a, b), a < b, from the runs. */
static void
check_queries (const struct ivset *s, uint64_t a, uint64_t b)
{
  bool busy = false;
  uint64_t oldest = IV_NO_WRITE;
  size_t count = 0;

  for (size_t i = 0; i < nruns; ++i)
    {
      if (runs[i].end <= a || runs[i].start >= b)
        continue;
      count++;
      if (info[runs[i].id].state != IV_DIRTY)
        busy = true;
      if (info[runs[i].id].oldest < oldest)
        oldest = info[runs[i].id].oldest;
    }
  assert (ivset_find (s, a) == model_find (a));
  assert (ivset_busy (s, a, b) == busy);
  assert (ivset_oldest (s, a, b) == oldest);
  assert (ivset_count_overlaps (s, a, b) == count);
}

static void
random_range (uint64_t *a, uint64_t *b)
{
  uint64_t len = rnd (8) == 0 ? 1 + rnd (600) : 1 + rnd (64);

  *a = rnd (SPACE);
  *b = *a + len > SPACE ? SPACE : *a + len;
}

static enum iv_state
random_state (void)
{
  static const enum iv_state states[]
      = { IV_DIRTY, IV_DIRTY, IV_FILLING, IV_INFLIGHT, IV_ZOMBIE };
  return states[rnd (sizeof states / sizeof states[0])];
}

/* An interval in a gap, anywhere (not only as buffer.c places them). */
static void
op_insert (struct ivset *s)
{
  uint64_t pos = rnd (SPACE), lo = pos, hi = pos + 1, a, b;
  enum iv_state st = random_state ();
  uint64_t oldest = st == IV_FILLING && rnd (2) ? IV_NO_WRITE : rnd (1000);
  uint32_t id;
  size_t idx;

  if (owner[pos])
    return;
  while (lo > 0 && owner[lo - 1] == 0)
    lo--;
  while (hi < SPACE && owner[hi] == 0)
    hi++;
  a = lo + rnd (pos - lo + 1);
  b = pos + 1 + rnd (hi - pos);
  idx = ivset_find (s, a);
  assert (idx == model_find (a));
  assert (ivset_reserve (s, 1) == 0);
  ivset_insert (s, idx, mk (a, b, st, oldest));
  id = new_id (st, oldest);
  for (uint64_t i = a; i < b; ++i)
    owner[i] = id;
}

/* ivset_merge at idx, and the same merge in the model: with each
 * neighbour that touches it and is dirty, keeping the smallest oldest.
 */
static void
op_merge_at (struct ivset *s, size_t idx)
{
  size_t first = idx, last = idx;
  uint64_t oldest;
  uint32_t id;

  model_runs ();
  assert (idx < nruns && info[runs[idx].id].state == IV_DIRTY);
  if (idx > 0 && runs[idx - 1].end == runs[idx].start
      && info[runs[idx - 1].id].state == IV_DIRTY)
    first = idx - 1;
  if (idx + 1 < nruns && runs[idx + 1].start == runs[idx].end
      && info[runs[idx + 1].id].state == IV_DIRTY)
    last = idx + 1;
  oldest = info[runs[first].id].oldest;
  for (size_t i = first; i <= last; ++i)
    if (info[runs[i].id].oldest < oldest)
      oldest = info[runs[i].id].oldest;
  id = new_id (IV_DIRTY, oldest);
  for (uint64_t b = runs[first].start; b < runs[last].end; ++b)
    owner[b] = id;

  assert (ivset_merge (s, idx) == first);
}

/* Carve [a, b) when nothing there is busy, checking the pieces. */
static void
op_carve (struct ivset *s, bool then_write, uint64_t seq)
{
  uint64_t a, b, inherited;
  struct iv *pieces;
  size_t n = 0, want = 0, idx;
  bool with_pieces = rnd (4) != 0, with_n = rnd (8) != 0;

  random_range (&a, &b);
  if (ivset_busy (s, a, b))
    return;
  inherited = ivset_oldest (s, a, b);
  pieces = malloc ((ivset_count_overlaps (s, a, b) + 1) * sizeof *pieces);
  assert (pieces);
  assert (ivset_reserve (s, 2) == 0);
  idx = ivset_carve (s, a, b, with_pieces ? pieces : NULL, with_n ? &n : NULL);

  for (size_t i = 0; i < nruns; ++i)
    {
      const struct run *r = &runs[i];

      if (r->end <= a || r->start >= b)
        continue;
      if (with_pieces)
        {
          assert (pieces[want].start == (r->start > a ? r->start : a));
          assert (pieces[want].end == (r->end < b ? r->end : b));
          assert (pieces[want].state == IV_DIRTY);
          assert (pieces[want].oldest == info[r->id].oldest);
        }
      want++;
    }
  assert (!with_n || n == want);
  free (pieces);
  for (uint64_t i = a; i < b; ++i)
    owner[i] = 0;
  model_runs ();
  assert (idx == model_find (a));

  /* The rest of a buffered write, as buffer.c does it: the new bytes
   * inherit the oldest write they replace, then become dirty and merge.
   */
  if (then_write)
    {
      uint64_t oldest = inherited < seq ? inherited : seq;
      uint32_t id = new_id (IV_FILLING, oldest);

      ivset_insert (s, idx, mk (a, b, IV_FILLING, oldest));
      for (uint64_t i = a; i < b; ++i)
        owner[i] = id;
      check_set (s);
      ivset_set_state (s, idx, IV_DIRTY);
      info[id].state = IV_DIRTY;
      check_set (s);
      op_merge_at (s, idx);
    }
}

static void
op_remove (struct ivset *s)
{
  size_t idx;

  model_runs ();
  if (nruns == 0)
    return;
  idx = rnd (nruns);
  for (uint64_t b = runs[idx].start; b < runs[idx].end; ++b)
    owner[b] = 0;
  ivset_remove (s, idx);
}

static void
op_set_state (struct ivset *s)
{
  size_t idx;
  enum iv_state st = random_state ();

  model_runs ();
  if (nruns == 0)
    return;
  idx = rnd (nruns);
  info[runs[idx].id].state = st;
  ivset_set_state (s, idx, st);
}

static void
op_merge (struct ivset *s)
{
  size_t idx;

  model_runs ();
  if (nruns == 0)
    return;
  idx = rnd (nruns);
  if (info[runs[idx].id].state == IV_DIRTY)
    op_merge_at (s, idx);
}

/* writeback.c: split a dirty interval in two in place (head, rest). */
static void
op_split (struct ivset *s)
{
  size_t idx;
  struct iv cur, head, rest;
  uint32_t id;

  model_runs ();
  if (nruns == 0)
    return;
  idx = rnd (nruns);
  cur = s->v[idx];
  if (cur.end - cur.start < 2)
    return;
  head = rest = cur;
  head.end = rest.start = cur.start + 1 + rnd (cur.end - cur.start - 1);
  assert (ivset_reserve (s, 1) == 0);
  ivset_remove (s, idx);
  ivset_insert (s, idx, head);
  ivset_insert (s, idx + 1, rest);
  id = new_id (cur.state, cur.oldest);
  for (uint64_t b = rest.start; b < rest.end; ++b)
    owner[b] = id;
}

/* The seed that failed, printed when an assertion aborts (assert's own
 * message cannot say it), so that SEED reproduces it alone.
 */
static uint64_t current_seed;

static void
say_seed (int sig)
{
  char buf[64], *p = buf + sizeof buf;
  uint64_t v = current_seed;
  static const char msg[] = "test-coalesce-intervals: failed with seed ";

  *--p = '\n';
  do
    *--p = '0' + v % 10;
  while ((v /= 10) != 0);
  if (write (2, msg, sizeof msg - 1) == -1
      || write (2, p, buf + sizeof buf - p) == -1)
    {
      /* Nothing more can be said. */
    }
  signal (sig, SIG_DFL);
  raise (sig);
}

static void
run_random (uint64_t seed, unsigned ops)
{
  static const uint64_t pages[] = { 1, 8, 64, 512, 4096 };
  struct ivset s = new_set (pages[seed % 5]);

  current_seed = seed;
  rng = seed * 0x9E3779B97F4A7C15ULL + 1;
  memset (owner, 0, sizeof owner);
  next_id = 1;
  nruns = 0;
  for (unsigned op = 0; op < ops; ++op)
    {
      uint64_t a, b;

      switch (rnd (16))
        {
        case 0 ... 3:
          op_insert (&s);
          break;
        case 4 ... 6:
          op_carve (&s, true, op);
          break;
        case 7:
          op_carve (&s, false, op);
          break;
        case 8 ... 9:
          op_remove (&s);
          break;
        case 10 ... 11:
          op_set_state (&s);
          break;
        case 12 ... 13:
          op_merge (&s);
          break;
        default:
          op_split (&s);
          break;
        }
      check_set (&s);
      for (int q = 0; q < 4; ++q)
        {
          random_range (&a, &b);
          check_queries (&s, a, b);
        }
      /* A full buffer now and then, so that carving and merging also
       * happen among many small intervals, then an empty one.
       */
      if (s.len > 300)
        {
          while (s.len)
            ivset_remove (&s, rnd (s.len));
          memset (owner, 0, sizeof owner);
          check_set (&s);
        }
    }
  free (s.v);
}

int
main (int argc, char *argv[])
{
  uint64_t first = 1, rounds = 40;
  const unsigned ops = 3000;

  if (argc > 1)
    {
      first = strtoull (argv[1], NULL, 0);
      rounds = 1;
    }
  if (argc > 2)
    rounds = strtoull (argv[2], NULL, 0);

  test_charge ();
  test_carve_head_and_tail ();
  test_carve_several ();
  test_merge ();
  test_queries ();

  /* Every op may add a few ids (new intervals, renamed tails). */
  max_ids = 8 * ops + SPACE + 16;
  info = malloc (max_ids * sizeof *info);
  assert (info);
  signal (SIGABRT, say_seed);
  for (uint64_t seed = first; seed < first + rounds; ++seed)
    run_random (seed, ops);
  free (info);
  printf ("PASS: coalesce intervals (seeds %" PRIu64 "..%" PRIu64 ")\n", first,
          first + rounds - 1);
  return 0;
}
