/* nbdstack: concurrent sub-sector writes against one export.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   test-image-rmw URI CONNECTIONS ROUNDS [DUMP-FILE [SPAN]]
 *
 * With cache=none the image plugin patches partial sectors by
 * read-modify-write.  Two requests writing different bytes of the same
 * sector at the same time must both survive.  This client makes that
 * happen as often as possible: the export is cut into small "slots" of a
 * size that does not divide 512, slot k belongs to connection k % N, so
 * every sector is shared by several connections and many slots straddle
 * a sector boundary.  Each connection keeps up to 32 writes/zeroes in
 * flight into its own slots, in random order, and now and then reads a
 * slot back to check it.  At the end the whole export is compared with
 * the reference.  libnbd's alignment check is turned off: the point is
 * to send what the block size constraints advise against.
 *
 * Only [0, SPAN) is written (default: the whole export); the whole export
 * is compared.  Exits 0 when everything matches, after writing the verified
 * contents to DUMP-FILE if given (so the caller can compare the image file).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>

#include "prng.h"

#define SLOT 100 /* bytes; not a divisor of 512 */
#define IN_FLIGHT 32

static const char *uri;
static unsigned nconn;
static unsigned rounds;
static int64_t size;
static uint64_t nslots;
static int64_t span;       /* slots cover [0, span) */
static unsigned char *ref; /* expected contents */

struct worker
{
  unsigned id;
  pthread_t thread;
  uint64_t rng;
  int failed;
};

static struct nbd_handle *
connect_one (void)
{
  struct nbd_handle *h = nbd_create ();

  if (h == NULL
      || nbd_set_strict_mode (h, nbd_get_strict_mode (h) & ~LIBNBD_STRICT_ALIGN)
             == -1
      || nbd_connect_uri (h, uri) == -1)
    {
      fprintf (stderr, "test-image-rmw: %s\n", nbd_get_error ());
      exit (EXIT_FAILURE);
    }
  return h;
}

/* Slot k covers [k*SLOT, min((k+1)*SLOT, size)). */
static uint32_t
slot_len (uint64_t k)
{
  uint64_t off = k * SLOT;
  return span - off < SLOT ? span - off : SLOT;
}

struct op
{
  int64_t cookie; /* 0 = free */
  bool is_read;
  uint64_t slot;
  unsigned char buf[SLOT];
};

static void *
run_worker (void *arg)
{
  struct worker *w = arg;
  struct nbd_handle *h = connect_one ();
  struct op *ops = calloc (IN_FLIGHT, sizeof *ops);
  uint64_t mine = (nslots - w->id + nconn - 1) / nconn;
  uint64_t todo = mine * rounds;

  if (ops == NULL)
    {
      perror ("calloc");
      exit (EXIT_FAILURE);
    }
  if (mine < 2 * IN_FLIGHT)
    {
      fprintf (stderr, "test-image-rmw: export too small\n");
      exit (EXIT_FAILURE);
    }
  while (todo > 0 || nbd_aio_in_flight (h) > 0)
    {
      /* Fill free op slots with new requests. */
      for (unsigned i = 0; i < IN_FLIGHT && todo > 0; ++i)
        {
          struct op *op = &ops[i];
          uint64_t k, r, off;
          uint32_t len;

          if (op->cookie)
            continue;
          r = prng_next (&w->rng);
          k = (r % mine) * nconn + w->id;
          /* One request per slot at a time keeps the reference exact. */
          {
            bool busy = false;
            for (unsigned j = 0; j < IN_FLIGHT; ++j)
              if (ops[j].cookie && ops[j].slot == k)
                busy = true;
            if (busy)
              continue;
          }
          off = k * SLOT;
          len = slot_len (k);
          op->slot = k;
          op->is_read = (r >> 32) % 8 == 0;
          if (op->is_read)
            op->cookie
                = nbd_aio_pread (h, op->buf, len, off, NBD_NULL_COMPLETION, 0);
          else if ((r >> 32) % 8 == 1)
            {
              /* Zero, sometimes allowing holes: the plugin zeroes the
               * partial sectors through the same read-modify-write path.
               */
              memset (&ref[off], 0, len);
              op->cookie
                  = nbd_aio_zero (h, len, off, NBD_NULL_COMPLETION,
                                  (r >> 40) & 1 ? LIBNBD_CMD_FLAG_NO_HOLE : 0);
            }
          else
            {
              for (uint32_t j = 0; j < len; ++j)
                op->buf[j] = (unsigned char)(r >> ((j % 7) * 8)) ^ j ^ w->id;
              /* Only this connection touches these bytes of ref, and only
               * here, so no lock is needed.
               */
              memcpy (&ref[off], op->buf, len);
              op->cookie = nbd_aio_pwrite (
                  h, op->buf, len, off, NBD_NULL_COMPLETION,
                  (r >> 40) % 64 == 0 ? LIBNBD_CMD_FLAG_FUA : 0);
            }
          if (op->cookie == -1)
            {
              fprintf (stderr, "test-image-rmw: conn %u: %s\n", w->id,
                       nbd_get_error ());
              exit (EXIT_FAILURE);
            }
          --todo;
        }
      if (nbd_poll (h, -1) == -1)
        {
          fprintf (stderr, "test-image-rmw: poll: %s\n", nbd_get_error ());
          exit (EXIT_FAILURE);
        }
      for (unsigned i = 0; i < IN_FLIGHT; ++i)
        {
          struct op *op = &ops[i];
          int r;

          if (!op->cookie)
            continue;
          r = nbd_aio_command_completed (h, op->cookie);
          if (r == 0)
            continue;
          if (r == -1)
            {
              fprintf (stderr, "test-image-rmw: conn %u slot %" PRIu64 ": %s\n",
                       w->id, op->slot, nbd_get_error ());
              exit (EXIT_FAILURE);
            }
          /* Nothing else touched this slot while the read was in flight. */
          if (op->is_read
              && memcmp (op->buf, &ref[op->slot * SLOT], slot_len (op->slot))
                     != 0)
            {
              fprintf (stderr,
                       "test-image-rmw: conn %u: slot %" PRIu64
                       " (offset %" PRIu64 ") read back wrong data\n",
                       w->id, op->slot, op->slot * SLOT);
              w->failed = 1;
            }
          op->cookie = 0;
        }
    }
  if (nbd_flush (h, 0) == -1)
    {
      fprintf (stderr, "test-image-rmw: flush: %s\n", nbd_get_error ());
      exit (EXIT_FAILURE);
    }
  nbd_shutdown (h, 0);
  nbd_close (h);
  free (ops);
  return NULL;
}

int
main (int argc, char *argv[])
{
  struct nbd_handle *h;
  struct worker *workers;
  unsigned char *got;
  int failed = 0;

  if (argc < 4 || argc > 6)
    {
      fprintf (
          stderr,
          "usage: test-image-rmw URI CONNECTIONS ROUNDS [DUMP-FILE [SPAN]]\n");
      exit (EXIT_FAILURE);
    }
  uri = argv[1];
  nconn = atoi (argv[2]);
  rounds = atoi (argv[3]);
  if (nconn < 1 || rounds < 1)
    {
      fprintf (stderr, "test-image-rmw: bad CONNECTIONS or ROUNDS\n");
      exit (EXIT_FAILURE);
    }

  /* Initial contents become the reference. */
  h = connect_one ();
  size = nbd_get_size (h);
  if (size <= 0 || size > 256 * 1024 * 1024)
    {
      fprintf (stderr,
               "test-image-rmw: export size %" PRIi64
               " out of range (1..256M)\n",
               size);
      exit (EXIT_FAILURE);
    }
  span = argc == 6 ? atoll (argv[5]) : size;
  if (span <= 0 || span > size)
    span = size;
  nslots = (span + SLOT - 1) / SLOT;
  if (nslots < nconn)
    {
      fprintf (stderr, "test-image-rmw: export too small\n");
      exit (EXIT_FAILURE);
    }
  ref = malloc (size);
  got = malloc (size);
  if (ref == NULL || got == NULL)
    {
      perror ("malloc");
      exit (EXIT_FAILURE);
    }
  for (int64_t off = 0; off < size; off += 16 * 1024 * 1024)
    {
      int64_t n = size - off < 16 * 1024 * 1024 ? size - off : 16 * 1024 * 1024;
      if (nbd_pread (h, ref + off, n, off, 0) == -1)
        {
          fprintf (stderr, "test-image-rmw: %s\n", nbd_get_error ());
          exit (EXIT_FAILURE);
        }
    }

  workers = calloc (nconn, sizeof *workers);
  for (unsigned i = 0; i < nconn; ++i)
    {
      workers[i].id = i;
      workers[i].rng = 0x9e3779b97f4a7c15ULL * (i + 1);
      if (pthread_create (&workers[i].thread, NULL, run_worker, &workers[i])
          != 0)
        {
          perror ("pthread_create");
          exit (EXIT_FAILURE);
        }
    }
  for (unsigned i = 0; i < nconn; ++i)
    {
      pthread_join (workers[i].thread, NULL);
      failed |= workers[i].failed;
    }

  for (int64_t off = 0; off < size; off += 16 * 1024 * 1024)
    {
      int64_t n = size - off < 16 * 1024 * 1024 ? size - off : 16 * 1024 * 1024;
      if (nbd_pread (h, got + off, n, off, 0) == -1)
        {
          fprintf (stderr, "test-image-rmw: %s\n", nbd_get_error ());
          exit (EXIT_FAILURE);
        }
    }
  for (int64_t i = 0; i < size; ++i)
    if (got[i] != ref[i])
      {
        fprintf (stderr,
                 "test-image-rmw: first difference at byte %" PRIi64
                 " (slot %" PRIi64 ", sector %" PRIi64 "): got 0x%02x, "
                 "expected 0x%02x\n",
                 i, i / SLOT, i / 512, got[i], ref[i]);
        failed = 1;
        break;
      }
  nbd_shutdown (h, 0);
  nbd_close (h);
  free (workers);
  free (got);
  if (failed)
    exit (EXIT_FAILURE);
  if (argc >= 5 && strcmp (argv[4], "-") != 0)
    {
      FILE *fp = fopen (argv[4], "w");
      if (fp == NULL || fwrite (ref, 1, size, fp) != (size_t)size
          || fclose (fp) == EOF)
        {
          perror (argv[4]);
          exit (EXIT_FAILURE);
        }
    }
  printf ("test-image-rmw: OK: %u connections x %u rounds over %" PRIu64
          " slots\n",
          nconn, rounds, nslots);
  free (ref);
  return 0;
}
