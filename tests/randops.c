/* nbdstack: differential random-operation client.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Applies a seeded stream of random writes, zeroes (with and without
 * MAY_TRIM, optionally FAST_ZERO), trims, flushes and verifying reads at
 * unaligned offsets to an NBD export and to an in-memory reference, from
 * one or more concurrent connections, then reads the whole range back and
 * compares byte for byte.  Used by every component's tests.
 *
 * Concurrency without non-determinism: each connection owns a disjoint
 * slice of the range by default, so the reference is exact.  With
 * --interleave the slices are striped (stripe size --stripe) so that the
 * connections' requests land next to each other (what imageio's
 * connections and out-of-order clients do), still never overlapping.
 *
 * After a trim the NBD protocol allows the range to read as anything the
 * server likes (old data or zeroes), so trimmed bytes are tracked and
 * accept either their old value or zero, unless --trim-reads-zero.
 *
 * --allow-eio is for servers with injected I/O errors: a request may
 * fail with EIO (any other error still fails the run), and then what it
 * covered may hold anything it could have left (a failed write: old or
 * new bytes, so anything; a failed zero or trim: old or zero), while
 * every byte outside it, and every byte of every request that succeeded,
 * must still be exact.  The initial read, the final flush and the final
 * compare are retried.  It prints how many requests failed, which the
 * tests compare with the number of errors injected.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>

#include "align.h"
#include "prng.h"

enum byte_state
{
  EXACT = 0,
  TRIMMED = 1,
  UNKNOWN = 2
};

struct options
{
  const char *uri;
  unsigned connections;
  unsigned long ops;
  uint64_t seed;
  uint64_t range_start, range_len; /* 0 length = whole export */
  uint32_t max_len;
  uint32_t align;
  uint64_t stripe;
  bool interleave;
  bool use_zero, use_trim, use_flush, use_fua, use_fast_zero, use_read;
  bool trim_reads_zero;
  bool check_extents;
  bool zero_runs;
  bool unaligned;
  bool allow_eio;
  bool no_final_flush;
  const char *dump;
  bool verbose;
};

static struct options opt = {
  .connections = 1,
  .ops = 2000,
  .seed = 1,
  .max_len = 256 * 1024,
  .align = 1,
  .stripe = 1024 * 1024,
  .use_zero = true,
  .use_trim = true,
  .use_flush = true,
  .use_fua = true,
  .use_fast_zero = true,
  .use_read = true,
};

static int64_t export_size;
static unsigned char *ref;   /* expected contents of [0, export_size) */
static unsigned char *state; /* enum byte_state per byte */

struct counters
{
  unsigned long writes, zeroes, trims, flushes, reads, fast_zero_refused;
  /* --allow-eio: requests that failed with EIO, by kind. */
  unsigned long eio_writes, eio_zeroes, eio_trims, eio_flushes, eio_reads;
};

struct worker
{
  unsigned id;
  struct nbd_handle *nbd;
  uint64_t rng;
  struct counters n;
  bool can_trim, can_zero, can_flush, can_fua, can_fast_zero;
  int failed;
  pthread_t thread;
};

static void
fill_random (uint64_t *s, unsigned char *buf, size_t len)
{
  size_t i = 0;
  while (i < len)
    {
      uint64_t r = prng_next (s);
      size_t n = MIN (len - i, sizeof r);
      memcpy (buf + i, &r, n);
      i += n;
    }
}

/* --zero-runs: make written data look like a disk image, with runs of
 * zeroes inside writes (whole-block runs aligned to the absolute offset
 * at various granularities, stray zero bytes, or an all-zero write), so
 * that filters which split zeroes out of writes are exercised.
 */
static void
punch_zero_runs (struct worker *w, unsigned char *buf, uint64_t offset,
                 uint32_t len)
{
  static const uint32_t block_sizes[] = { 512, 4096, 65536 };
  uint32_t bs;
  uint64_t b;

  switch (prng_below (&w->rng, 4))
    {
    case 0: /* leave it all data */
      return;
    case 1: /* all zero */
      memset (buf, 0, len);
      return;
    default: /* aligned zero blocks, some partial edges */
      bs = block_sizes[prng_below (&w->rng, 3)];
      for (b = ROUND_DOWN (offset, bs); b < offset + len; b += bs)
        {
          uint64_t lo = MAX (b, offset), hi = MIN (b + bs, offset + len);
          if (prng_below (&w->rng, 2))
            memset (buf + (lo - offset), 0, hi - lo);
        }
      /* A single non-zero byte at a block edge must stay data. */
      if (len > 1 && prng_below (&w->rng, 2))
        buf[prng_below (&w->rng, 2) ? 0 : len - 1] = 0x5a;
      return;
    }
}

/* The [start, end) byte ranges connection 'id' may touch: with
 * --interleave, stripe k belongs to connection k % connections.  Calls
 * fn for each sub-range of [offset, offset+len) that belongs to it.
 */
static uint64_t
slice_start (unsigned id)
{
  uint64_t per = opt.range_len / opt.connections;
  return opt.range_start + id * per;
}

static uint64_t
slice_len (unsigned id)
{
  uint64_t per = opt.range_len / opt.connections;
  if (id == opt.connections - 1)
    return opt.range_len - per * id;
  return per;
}

/* Pick a random request inside what this worker owns. */
static bool
pick_range (struct worker *w, uint64_t *offset, uint32_t *len)
{
  uint64_t lo, hi, l;
  uint32_t maxl;

  if (opt.interleave)
    {
      uint64_t nstripes = DIV_ROUND_UP (opt.range_len, opt.stripe);
      uint64_t mine
          = nstripes / opt.connections + (w->id < nstripes % opt.connections);
      uint64_t k;
      if (mine == 0)
        return false;
      k = prng_below (&w->rng, mine) * opt.connections + w->id;
      lo = opt.range_start + k * opt.stripe;
      hi = MIN (lo + opt.stripe, opt.range_start + opt.range_len);
    }
  else
    {
      lo = slice_start (w->id);
      hi = lo + slice_len (w->id);
    }
  lo = ROUND_UP (lo, (uint64_t)opt.align);
  hi = ROUND_DOWN (hi, (uint64_t)opt.align);
  if (hi <= lo)
    return false;

  /* Mostly small requests, some large ones, like real clients. */
  switch (prng_below (&w->rng, 4))
    {
    case 0:
      maxl = 512;
      break;
    case 1:
      maxl = 4096;
      break;
    case 2:
      maxl = 65536;
      break;
    default:
      maxl = opt.max_len;
      break;
    }
  maxl = MIN (maxl, opt.max_len);
  l = 1 + prng_below (&w->rng, maxl);
  l = MAX (ROUND_UP (l, (uint64_t)opt.align), (uint64_t)opt.align);
  l = MIN (l, hi - lo);
  *offset
      = lo + prng_below (&w->rng, (hi - lo - l) / opt.align + 1) * opt.align;
  *len = l;
  return true;
}

static void
set_state (uint64_t offset, uint32_t len, enum byte_state s)
{
  memset (state + offset, s, len);
}

/* "Old or zero": bytes whose old value is not known stay unknown. */
static void
set_trimmed (uint64_t offset, uint32_t len)
{
  for (uint32_t i = 0; i < len; ++i)
    if (state[offset + i] == EXACT)
      state[offset + i] = TRIMMED;
}

/* --allow-eio: did the last request fail with an error we accept? */
static bool
allowed_error (void)
{
  return opt.allow_eio && nbd_get_errno () == EIO;
}

/* Retries of the main connection's reads and flush under --allow-eio. */
static unsigned long main_eio;

static int
nbd_fail (struct worker *w, const char *what, uint64_t offset, uint32_t len)
{
  fprintf (stderr,
           "randops: conn %u: %s offset=%" PRIu64 " len=%" PRIu32 ": %s\n",
           w->id, what, offset, len, nbd_get_error ());
  w->failed = 1;
  return -1;
}

/* Compare what the export returned with the reference; accept old-or-zero
 * for trimmed bytes.  On success the reference adopts what was read, so
 * later checks are exact.
 */
static int
check_bytes (unsigned id, const unsigned char *got, uint64_t offset,
             uint32_t len, const char *when)
{
  for (uint32_t i = 0; i < len; ++i)
    {
      uint64_t o = offset + i;
      unsigned char want = ref[o];
      if (got[i] == want)
        continue;
      if (state[o] == TRIMMED && got[i] == 0)
        continue;
      if (state[o] == UNKNOWN)
        continue;
      fprintf (stderr,
               "randops: conn %u: %s: mismatch at offset %" PRIu64
               " (0x%" PRIx64 "): expected 0x%02x%s, got 0x%02x\n",
               id, when, o, o, want,
               state[o] == TRIMMED ? " or 0x00 (trimmed)" : "", got[i]);
      return -1;
    }
  return 0;
}

static int
do_one_op (struct worker *w, unsigned char *buf)
{
  uint64_t offset;
  uint32_t len;
  unsigned kind = prng_below (&w->rng, 100);

  if (!pick_range (w, &offset, &len))
    return 0;

  if (kind < 45)
    { /* write */
      uint32_t flags = 0;
      if (w->can_fua && prng_below (&w->rng, 8) == 0)
        flags |= LIBNBD_CMD_FLAG_FUA;
      fill_random (&w->rng, buf, len);
      if (opt.zero_runs)
        punch_zero_runs (w, buf, offset, len);
      if (opt.verbose)
        fprintf (stderr, "conn %u: write %" PRIu64 "+%" PRIu32 " fua=%d\n",
                 w->id, offset, len, !!flags);
      if (nbd_pwrite (w->nbd, buf, len, offset, flags) == -1)
        {
          if (!allowed_error ())
            return nbd_fail (w, "write", offset, len);
          set_state (offset, len, UNKNOWN);
          w->n.eio_writes++;
          return 0;
        }
      memcpy (ref + offset, buf, len);
      set_state (offset, len, EXACT);
      w->n.writes++;
    }
  else if (kind < 65 && w->can_zero)
    { /* zero */
      uint32_t flags = 0;
      bool fast = false;
      if (prng_below (&w->rng, 2))
        flags |= LIBNBD_CMD_FLAG_NO_HOLE;
      if (w->can_fua && prng_below (&w->rng, 8) == 0)
        flags |= LIBNBD_CMD_FLAG_FUA;
      if (w->can_fast_zero && prng_below (&w->rng, 6) == 0)
        {
          flags |= LIBNBD_CMD_FLAG_FAST_ZERO;
          fast = true;
        }
      if (opt.verbose)
        fprintf (stderr, "conn %u: zero %" PRIu64 "+%" PRIu32 " flags=%u\n",
                 w->id, offset, len, flags);
      if (nbd_zero (w->nbd, len, offset, flags) == -1)
        {
          /* A fast zero may be refused (ENOTSUP) when it would be slow; then
           * it must not have changed anything.
           */
          if (fast && nbd_get_errno () == ENOTSUP)
            {
              w->n.fast_zero_refused++;
              return 0;
            }
          if (!allowed_error ())
            return nbd_fail (w, "zero", offset, len);
          /* Each byte was zeroed or not: old or zero, like a trim. */
          set_trimmed (offset, len);
          w->n.eio_zeroes++;
          return 0;
        }
      memset (ref + offset, 0, len);
      set_state (offset, len, EXACT);
      w->n.zeroes++;
    }
  else if (kind < 75 && w->can_trim)
    { /* trim */
      uint32_t flags = 0;
      if (w->can_fua && prng_below (&w->rng, 8) == 0)
        flags |= LIBNBD_CMD_FLAG_FUA;
      if (opt.verbose)
        fprintf (stderr, "conn %u: trim %" PRIu64 "+%" PRIu32 "\n", w->id,
                 offset, len);
      if (nbd_trim (w->nbd, len, offset, flags) == -1)
        {
          if (!allowed_error ())
            return nbd_fail (w, "trim", offset, len);
          set_trimmed (offset, len);
          w->n.eio_trims++;
          return 0;
        }
      if (opt.trim_reads_zero)
        {
          memset (ref + offset, 0, len);
          set_state (offset, len, EXACT);
        }
      else
        set_trimmed (offset, len);
      w->n.trims++;
    }
  else if (kind < 80 && w->can_flush)
    { /* flush */
      if (nbd_flush (w->nbd, 0) == -1)
        {
          if (!allowed_error ())
            return nbd_fail (w, "flush", 0, 0);
          w->n.eio_flushes++;
          return 0;
        }
      w->n.flushes++;
    }
  else if (opt.use_read)
    { /* verifying read */
      if (nbd_pread (w->nbd, buf, len, offset, 0) == -1)
        {
          if (!allowed_error ())
            return nbd_fail (w, "read", offset, len);
          w->n.eio_reads++;
          return 0;
        }
      if (check_bytes (w->id, buf, offset, len, "read during run") == -1)
        {
          w->failed = 1;
          return -1;
        }
      /* Pin trimmed (and unknown) bytes to what was read: the server must
       * now keep returning the same thing until the next write.
       */
      for (uint32_t i = 0; i < len; ++i)
        if (state[offset + i] != EXACT)
          {
            ref[offset + i] = buf[i];
            state[offset + i] = EXACT;
          }
      w->n.reads++;
    }
  return 0;
}

static struct nbd_handle *
connect_export (void)
{
  struct nbd_handle *nbd = nbd_create ();

  if (nbd == NULL)
    {
      fprintf (stderr, "randops: nbd_create: %s\n", nbd_get_error ());
      return NULL;
    }
  /* --unaligned: send requests that break the export's advertised
   * minimum block size, which libnbd refuses by default.  Servers must
   * still handle them (nbdkit 1.32 does not enforce block sizes).
   */
  if (opt.unaligned
      && nbd_set_strict_mode (nbd,
                              nbd_get_strict_mode (nbd) & ~LIBNBD_STRICT_ALIGN)
             == -1)
    {
      fprintf (stderr, "randops: nbd_set_strict_mode: %s\n", nbd_get_error ());
      nbd_close (nbd);
      return NULL;
    }
  if (nbd_add_meta_context (nbd, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1
      || nbd_connect_uri (nbd, opt.uri) == -1)
    {
      fprintf (stderr, "randops: %s: %s\n", opt.uri, nbd_get_error ());
      nbd_close (nbd);
      return NULL;
    }
  return nbd;
}

static void *
worker_run (void *arg)
{
  struct worker *w = arg;
  unsigned char *buf = malloc (opt.max_len);

  if (buf == NULL)
    {
      perror ("malloc");
      w->failed = 1;
      return NULL;
    }
  for (unsigned long i = 0; i < opt.ops && !w->failed; ++i)
    if (do_one_op (w, buf) == -1)
      break;
  free (buf);
  return NULL;
}

struct extent_check
{
  uint64_t next; /* where the next extent must start */
  int failed;
};

static int
extent_cb (void *user_data, const char *metacontext, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  struct extent_check *c = user_data;
  uint64_t o = offset;

  if (strcmp (metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  for (size_t i = 0; i + 1 < nr_entries; i += 2)
    {
      uint32_t len = entries[i], flags = entries[i + 1];
      uint64_t end = MIN (o + len, (uint64_t)export_size);
      if (flags & LIBNBD_STATE_ZERO)
        {
          for (uint64_t b = o; b < end; ++b)
            if (ref[b] != 0)
              {
                fprintf (stderr,
                         "randops: extents: [%" PRIu64 ", +%" PRIu32
                         ") reported as zero but byte %" PRIu64 " is 0x%02x\n",
                         o, len, b, ref[b]);
                c->failed = 1;
                return 0;
              }
        }
      o += len;
    }
  c->next = o;
  return 0;
}

/* Every range the server reports as reading zero must be zero. */
static int
check_extents (struct nbd_handle *nbd)
{
  uint64_t end = opt.range_start + opt.range_len;
  struct extent_check c = { .next = opt.range_start };

  if (!nbd_can_meta_context (nbd, LIBNBD_CONTEXT_BASE_ALLOCATION))
    {
      fprintf (stderr,
               "randops: --check-extents: export has no base:allocation\n");
      return -1;
    }
  while (c.next < end && !c.failed)
    {
      uint64_t at = c.next;
      uint32_t len = MIN (end - at, (uint64_t)64 * 1024 * 1024);
      if (nbd_block_status (
              nbd, len, at,
              (nbd_extent_callback){ .callback = extent_cb, .user_data = &c },
              0)
          == -1)
        {
          fprintf (stderr, "randops: block status: %s\n", nbd_get_error ());
          return -1;
        }
      if (c.next <= at)
        {
          fprintf (stderr,
                   "randops: block status made no progress at %" PRIu64 "\n",
                   at);
          return -1;
        }
    }
  return c.failed ? -1 : 0;
}

/* The main connection's reads and flush: under --allow-eio, retry an
 * injected EIO (it is random, so a retry gets through), counting it.
 */
#define MAIN_RETRIES 1000

static int
main_pread (struct nbd_handle *nbd, void *buf, uint32_t n, uint64_t o)
{
  for (unsigned i = 0; i < MAIN_RETRIES; ++i)
    {
      if (nbd_pread (nbd, buf, n, o, 0) == 0)
        return 0;
      if (!allowed_error ())
        return -1;
      main_eio++;
    }
  return -1;
}

static int
main_flush (struct nbd_handle *nbd)
{
  for (unsigned i = 0; i < MAIN_RETRIES; ++i)
    {
      if (nbd_flush (nbd, 0) == 0)
        return 0;
      if (!allowed_error ())
        return -1;
      main_eio++;
    }
  return -1;
}

static int
final_compare (struct nbd_handle *nbd)
{
  const uint32_t chunk = 4 * 1024 * 1024;
  unsigned char *buf = malloc (chunk);
  uint64_t end = opt.range_start + opt.range_len;

  if (buf == NULL)
    {
      perror ("malloc");
      return -1;
    }
  for (uint64_t o = opt.range_start; o < end; o += chunk)
    {
      uint32_t n = MIN ((uint64_t)chunk, end - o);
      if (main_pread (nbd, buf, n, o) == -1)
        {
          fprintf (stderr, "randops: final read at %" PRIu64 ": %s\n", o,
                   nbd_get_error ());
          free (buf);
          return -1;
        }
      if (check_bytes (0, buf, o, n, "final compare") == -1)
        {
          free (buf);
          return -1;
        }
      /* Trimmed bytes take whatever the export settled on, for --dump. */
      memcpy (ref + o, buf, n);
    }
  free (buf);
  return 0;
}

static int
dump_reference (const char *path)
{
  FILE *fp = fopen (path, "w");

  if (fp == NULL)
    {
      perror (path);
      return -1;
    }
  if (fwrite (ref, 1, export_size, fp) != (size_t)export_size
      || fclose (fp) == EOF)
    {
      perror (path);
      return -1;
    }
  return 0;
}

static void
usage (FILE *fp)
{
  fprintf (
      fp,
      "Usage: randops [OPTIONS] URI\n"
      "Apply random operations to an NBD export and to an in-memory "
      "reference,\n"
      "then compare them byte for byte.  Exit 0 when they match.\n"
      "\n"
      "The export's initial contents are read first, so it may hold data.\n"
      "\n"
      "  -c, --connections=N     concurrent connections (default 1)\n"
      "  -n, --ops=N             operations per connection (default 2000)\n"
      "  -s, --seed=N            random seed (default 1)\n"
      "      --range=START:LEN   only touch this range (default whole export)\n"
      "      --max-len=N         largest request in bytes (default 262144)\n"
      "      --align=N           align offsets and lengths to N (default 1)\n"
      "      --interleave        stripe connections' regions (see --stripe)\n"
      "      --stripe=N          stripe size with --interleave (default 1M)\n"
      "      --no-zero --no-trim --no-flush --no-fua --no-fast-zero --no-read\n"
      "                          leave out that kind of request\n"
      "      --trim-reads-zero   trimmed ranges must read back as zero\n"
      "      --check-extents     every range block status calls zero must be "
      "zero\n"
      "      --no-final-flush    do not flush before the final compare\n"
      "      --dump=FILE         write the verified contents to FILE at the "
      "end\n"
      "      --zero-runs         written data holds runs of zeroes, like disk "
      "images\n"
      "      --unaligned         ignore the export's minimum block size "
      "(libnbd\n"
      "                          strict alignment off), to test bounce paths\n"
      "      --allow-eio         requests may fail with EIO (injected "
      "faults);\n"
      "                          what a failed one touched may then read as\n"
      "                          anything it could have left; print the count\n"
      "  -v, --verbose           print every operation\n");
}

static uint64_t
parse_u64 (const char *what, const char *s)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (s, &end, 0);
  if (errno || end == s)
    {
      fprintf (stderr, "randops: %s: not a number: %s\n", what, s);
      exit (2);
    }
  switch (*end)
    {
    case 'k':
    case 'K':
      v <<= 10;
      end++;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      end++;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      end++;
      break;
    }
  if (*end && *end != ':')
    {
      fprintf (stderr, "randops: %s: not a number: %s\n", what, s);
      exit (2);
    }
  return v;
}

int
main (int argc, char *argv[])
{
  enum
  {
    OPT_RANGE = 256,
    OPT_MAX_LEN,
    OPT_ALIGN,
    OPT_INTERLEAVE,
    OPT_STRIPE,
    OPT_NO_ZERO,
    OPT_NO_TRIM,
    OPT_NO_FLUSH,
    OPT_NO_FUA,
    OPT_NO_FAST_ZERO,
    OPT_NO_READ,
    OPT_TRIM_ZERO,
    OPT_CHECK_EXTENTS,
    OPT_NO_FINAL_FLUSH,
    OPT_DUMP,
    OPT_ZERO_RUNS,
    OPT_UNALIGNED,
    OPT_ALLOW_EIO
  };
  static const struct option longopts[] = {
    { "connections", required_argument, NULL, 'c' },
    { "ops", required_argument, NULL, 'n' },
    { "seed", required_argument, NULL, 's' },
    { "range", required_argument, NULL, OPT_RANGE },
    { "max-len", required_argument, NULL, OPT_MAX_LEN },
    { "align", required_argument, NULL, OPT_ALIGN },
    { "interleave", no_argument, NULL, OPT_INTERLEAVE },
    { "stripe", required_argument, NULL, OPT_STRIPE },
    { "no-zero", no_argument, NULL, OPT_NO_ZERO },
    { "no-trim", no_argument, NULL, OPT_NO_TRIM },
    { "no-flush", no_argument, NULL, OPT_NO_FLUSH },
    { "no-fua", no_argument, NULL, OPT_NO_FUA },
    { "no-fast-zero", no_argument, NULL, OPT_NO_FAST_ZERO },
    { "no-read", no_argument, NULL, OPT_NO_READ },
    { "trim-reads-zero", no_argument, NULL, OPT_TRIM_ZERO },
    { "check-extents", no_argument, NULL, OPT_CHECK_EXTENTS },
    { "no-final-flush", no_argument, NULL, OPT_NO_FINAL_FLUSH },
    { "dump", required_argument, NULL, OPT_DUMP },
    { "zero-runs", no_argument, NULL, OPT_ZERO_RUNS },
    { "unaligned", no_argument, NULL, OPT_UNALIGNED },
    { "allow-eio", no_argument, NULL, OPT_ALLOW_EIO },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { NULL },
  };
  struct worker *workers;
  struct nbd_handle *main_nbd;
  struct counters total = { 0 };
  int c, failed = 0;
  const char *p;

  while ((c = getopt_long (argc, argv, "c:n:s:vh", longopts, NULL)) != -1)
    {
      switch (c)
        {
        case 'c':
          opt.connections = parse_u64 ("connections", optarg);
          break;
        case 'n':
          opt.ops = parse_u64 ("ops", optarg);
          break;
        case 's':
          opt.seed = parse_u64 ("seed", optarg);
          break;
        case 'v':
          opt.verbose = true;
          break;
        case 'h':
          usage (stdout);
          exit (0);
        case OPT_RANGE:
          opt.range_start = parse_u64 ("range", optarg);
          p = strchr (optarg, ':');
          if (p == NULL)
            {
              fprintf (stderr, "randops: --range=START:LEN\n");
              exit (2);
            }
          opt.range_len = parse_u64 ("range", p + 1);
          break;
        case OPT_MAX_LEN:
          opt.max_len = parse_u64 ("max-len", optarg);
          break;
        case OPT_ALIGN:
          opt.align = parse_u64 ("align", optarg);
          break;
        case OPT_INTERLEAVE:
          opt.interleave = true;
          break;
        case OPT_STRIPE:
          opt.stripe = parse_u64 ("stripe", optarg);
          break;
        case OPT_NO_ZERO:
          opt.use_zero = false;
          break;
        case OPT_NO_TRIM:
          opt.use_trim = false;
          break;
        case OPT_NO_FLUSH:
          opt.use_flush = false;
          break;
        case OPT_NO_FUA:
          opt.use_fua = false;
          break;
        case OPT_NO_FAST_ZERO:
          opt.use_fast_zero = false;
          break;
        case OPT_NO_READ:
          opt.use_read = false;
          break;
        case OPT_TRIM_ZERO:
          opt.trim_reads_zero = true;
          break;
        case OPT_CHECK_EXTENTS:
          opt.check_extents = true;
          break;
        case OPT_NO_FINAL_FLUSH:
          opt.no_final_flush = true;
          break;
        case OPT_DUMP:
          opt.dump = optarg;
          break;
        case OPT_ZERO_RUNS:
          opt.zero_runs = true;
          break;
        case OPT_UNALIGNED:
          opt.unaligned = true;
          break;
        case OPT_ALLOW_EIO:
          opt.allow_eio = true;
          break;
        default:
          usage (stderr);
          exit (2);
        }
    }
  if (optind != argc - 1)
    {
      usage (stderr);
      exit (2);
    }
  opt.uri = argv[optind];
  if (opt.connections < 1 || opt.max_len < 1 || opt.max_len > 32 << 20
      || !is_power_of_2 (opt.align) || opt.stripe < opt.align)
    {
      fprintf (stderr,
               "randops: bad --connections, --max-len, --align or --stripe\n");
      exit (2);
    }

  main_nbd = connect_export ();
  if (main_nbd == NULL)
    exit (1);
  export_size = nbd_get_size (main_nbd);
  if (export_size <= 0)
    {
      fprintf (stderr, "randops: export size: %s\n", nbd_get_error ());
      exit (1);
    }
  if (opt.range_len == 0)
    opt.range_len = export_size - opt.range_start;
  if (opt.range_start > (uint64_t)export_size
      || opt.range_len > (uint64_t)export_size - opt.range_start)
    {
      fprintf (stderr,
               "randops: --range is outside the export (size %" PRId64 ")\n",
               export_size);
      exit (2);
    }
  ref = malloc (export_size);
  state = calloc (export_size, 1);
  if (ref == NULL || state == NULL)
    {
      perror ("randops: reference buffer");
      exit (1);
    }
  /* Start from what the export holds now. */
  for (int64_t o = 0; o < export_size; o += 32 << 20)
    {
      uint32_t n = MIN ((int64_t)32 << 20, export_size - o);
      if (main_pread (main_nbd, ref + o, n, o) == -1)
        {
          fprintf (stderr, "randops: initial read: %s\n", nbd_get_error ());
          exit (1);
        }
    }

  workers = calloc (opt.connections, sizeof *workers);
  if (workers == NULL)
    {
      perror ("calloc");
      exit (1);
    }
  for (unsigned i = 0; i < opt.connections; ++i)
    {
      struct worker *w = &workers[i];
      w->id = i;
      w->rng = opt.seed * 0x9E3779B97F4A7C15ULL + i + 1;
      w->nbd = connect_export ();
      if (w->nbd == NULL)
        exit (1);
      w->can_trim = opt.use_trim && nbd_can_trim (w->nbd) == 1;
      w->can_zero = opt.use_zero && nbd_can_zero (w->nbd) == 1;
      w->can_flush = opt.use_flush && nbd_can_flush (w->nbd) == 1;
      w->can_fua = opt.use_fua && nbd_can_fua (w->nbd) == 1;
      w->can_fast_zero = opt.use_fast_zero && nbd_can_fast_zero (w->nbd) == 1;
    }
  for (unsigned i = 0; i < opt.connections; ++i)
    if (pthread_create (&workers[i].thread, NULL, worker_run, &workers[i]))
      {
        perror ("pthread_create");
        exit (1);
      }
  for (unsigned i = 0; i < opt.connections; ++i)
    {
      pthread_join (workers[i].thread, NULL);
      failed |= workers[i].failed;
      total.writes += workers[i].n.writes;
      total.zeroes += workers[i].n.zeroes;
      total.trims += workers[i].n.trims;
      total.flushes += workers[i].n.flushes;
      total.reads += workers[i].n.reads;
      total.fast_zero_refused += workers[i].n.fast_zero_refused;
      total.eio_writes += workers[i].n.eio_writes;
      total.eio_zeroes += workers[i].n.eio_zeroes;
      total.eio_trims += workers[i].n.eio_trims;
      total.eio_flushes += workers[i].n.eio_flushes;
      total.eio_reads += workers[i].n.eio_reads;
    }

  if (!failed && !opt.no_final_flush && nbd_can_flush (main_nbd) == 1
      && main_flush (main_nbd) == -1)
    {
      fprintf (stderr, "randops: final flush: %s\n", nbd_get_error ());
      failed = 1;
    }
  /* Verify on a connection that issued none of the writes: this also
   * checks that the server shares state between connections.
   */
  if (!failed && final_compare (main_nbd) == -1)
    failed = 1;
  if (!failed && opt.check_extents && check_extents (main_nbd) == -1)
    failed = 1;
  if (!failed && opt.dump && dump_reference (opt.dump) == -1)
    failed = 1;

  for (unsigned i = 0; i < opt.connections; ++i)
    nbd_close (workers[i].nbd);
  nbd_shutdown (main_nbd, 0);
  nbd_close (main_nbd);

  printf ("randops: %s: %u connection(s), %lu writes, %lu zeroes "
          "(%lu fast refused), %lu trims, %lu flushes, %lu reads, seed %" PRIu64
          "\n",
          failed ? "FAILED" : "OK", opt.connections, total.writes, total.zeroes,
          total.fast_zero_refused, total.trims, total.flushes, total.reads,
          opt.seed);
  if (opt.allow_eio)
    printf ("randops: %lu requests failed with EIO (%lu writes, %lu zeroes, "
            "%lu trims, %lu flushes, %lu reads, %lu retried by the main "
            "connection)\n",
            total.eio_writes + total.eio_zeroes + total.eio_trims
                + total.eio_flushes + total.eio_reads + main_eio,
            total.eio_writes, total.eio_zeroes, total.eio_trims,
            total.eio_flushes, total.eio_reads, main_eio);
  free (workers);
  free (ref);
  free (state);
  return failed ? 1 : 0;
}
