/* nbdstack bench: queue-depth-1 sequential writes over NBD.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   smallwrites [-n COUNT] [-s SIZE] [-o OFFSET] [-p PASSES]
 *               [--fua | --flush-each] URI
 *
 * Writes COUNT x SIZE bytes sequentially from OFFSET, one request in
 * flight at a time (the `dd oflag=direct` pattern), then sends one
 * flush; with --fua every write carries FUA and no flush is sent (the
 * `dd oflag=dsync` pattern); with --flush-each every write is followed
 * by a flush (what a guest's O_DSYNC writes become through a client that
 * does not use FUA).  A SIZE above what the server accepts in
 * one request is sent as consecutive requests of the largest size it
 * allows (32M if it does not say), still one at a time, like dd with a
 * huge bs.  The whole sequence runs PASSES times over the same range
 * (the first pass also pays for allocation in the target) and the
 * median pass is printed as one line:
 *
 *   RESULT mb_s=... lat_us=... flush_us=... total_s=... passes=...
 *
 * lat_us is the mean time per write request; mb_s counts payload bytes
 * over the whole pass including the final flush.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libnbd.h>

#include "align.h"
#include "now.h"
#include "parse-size-arg.h"

struct pass
{
  double total_s, write_s, flush_s;
  uint64_t requests;
};

static int
cmp_pass (const void *a, const void *b)
{
  const struct pass *x = a, *y = b;
  return (x->total_s > y->total_s) - (x->total_s < y->total_s);
}

static void
usage (FILE *f)
{
  fprintf (f, "usage: smallwrites [-n COUNT] [-s SIZE] [-o OFFSET] "
              "[-p PASSES] [--fua | --flush-each] URI\n");
}

int
main (int argc, char *argv[])
{
  enum
  {
    OPT_FUA = 256,
    OPT_FLUSH_EACH
  };
  static const struct option longopts[]
      = { { "fua", no_argument, NULL, OPT_FUA },
          { "flush-each", no_argument, NULL, OPT_FLUSH_EACH },
          { "help", no_argument, NULL, 'h' },
          { NULL } };
  uint64_t count = 1000, size = 512, offset = 0;
  unsigned passes = 5, p;
  bool fua = false, flush_each = false;
  struct nbd_handle *h;
  int64_t maxreq, exportsize;
  char *buf;
  struct pass *res;
  int c;

  while ((c = getopt_long (argc, argv, "n:s:o:p:h", longopts, NULL)) != -1)
    {
      switch (c)
        {
        case 'n':
          count = parse_size_arg ("smallwrites", optarg, 0);
          break;
        case 's':
          size = parse_size_arg ("smallwrites", optarg, 0);
          break;
        case 'o':
          offset = parse_size_arg ("smallwrites", optarg, 0);
          break;
        case 'p':
          passes = parse_size_arg ("smallwrites", optarg, 0);
          break;
        case OPT_FUA:
          fua = true;
          break;
        case OPT_FLUSH_EACH:
          flush_each = true;
          break;
        case 'h':
          usage (stdout);
          exit (EXIT_SUCCESS);
        default:
          usage (stderr);
          exit (EXIT_FAILURE);
        }
    }
  if (optind != argc - 1 || count == 0 || size == 0 || passes == 0
      || (fua && flush_each))
    {
      usage (stderr);
      exit (EXIT_FAILURE);
    }

  h = nbd_create ();
  if (h == NULL || nbd_connect_uri (h, argv[optind]) == -1)
    {
      fprintf (stderr, "smallwrites: %s\n", nbd_get_error ());
      exit (EXIT_FAILURE);
    }
  exportsize = nbd_get_size (h);
  if (exportsize == -1 || offset + count * size > (uint64_t)exportsize)
    {
      fprintf (stderr,
               "smallwrites: export too small for %" PRIu64 " x %" PRIu64
               " at %" PRIu64 "\n",
               count, size, offset);
      exit (EXIT_FAILURE);
    }
  if (fua && nbd_can_fua (h) != 1)
    {
      fprintf (stderr, "smallwrites: server does not support FUA\n");
      exit (EXIT_FAILURE);
    }
  maxreq = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);
  if (maxreq <= 0)
    maxreq = 32 * 1024 * 1024;
  maxreq = MIN (maxreq, 32 * 1024 * 1024);

  buf = malloc (MIN (size, (uint64_t)maxreq));
  res = calloc (passes, sizeof *res);
  if (buf == NULL || res == NULL)
    {
      perror ("malloc");
      exit (EXIT_FAILURE);
    }
  /* Non-zero, non-repeating-per-request data so that nothing below can
   * detect zeroes or deduplicate.
   */
  for (size_t i = 0; i < MIN (size, (uint64_t)maxreq); ++i)
    buf[i] = (char)(i * 131 + 7);

  for (p = 0; p < passes; ++p)
    {
      double t0 = now_s (), t1;
      uint64_t i, reqs = 0;

      for (i = 0; i < count; ++i)
        {
          uint64_t off = offset + i * size, left = size;
          while (left > 0)
            {
              uint64_t n = MIN (left, (uint64_t)maxreq);
              buf[0] = (char)(p + i); /* every write differs */
              if (nbd_pwrite (h, buf, n, off, fua ? LIBNBD_CMD_FLAG_FUA : 0)
                  == -1)
                {
                  fprintf (stderr, "smallwrites: %s\n", nbd_get_error ());
                  exit (EXIT_FAILURE);
                }
              off += n;
              left -= n;
              reqs++;
            }
          if (flush_each && nbd_flush (h, 0) == -1)
            {
              fprintf (stderr, "smallwrites: %s\n", nbd_get_error ());
              exit (EXIT_FAILURE);
            }
        }
      t1 = now_s ();
      if (!fua && nbd_flush (h, 0) == -1)
        {
          fprintf (stderr, "smallwrites: %s\n", nbd_get_error ());
          exit (EXIT_FAILURE);
        }
      res[p].total_s = now_s () - t0;
      res[p].write_s = t1 - t0;
      res[p].flush_s = res[p].total_s - res[p].write_s;
      res[p].requests = reqs;
    }

  qsort (res, passes, sizeof *res, cmp_pass);
  {
    const struct pass *m = &res[passes / 2];
    printf ("RESULT mb_s=%.2f lat_us=%.1f flush_us=%.0f total_s=%.4f "
            "requests=%" PRIu64 " passes=%u min_s=%.4f max_s=%.4f\n",
            count * size / m->total_s / 1e6, m->write_s / m->requests * 1e6,
            m->flush_s * 1e6, m->total_s, m->requests, passes, res[0].total_s,
            res[passes - 1].total_s);
  }

  nbd_shutdown (h, 0);
  nbd_close (h);
  free (buf);
  free (res);
  return 0;
}
