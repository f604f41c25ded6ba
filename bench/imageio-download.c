/* nbdstack bench: a download client that reads the way oVirt imageio does.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   imageio-download [-c CONNS] [-r REGION] [-R READ] URI DST
 *
 * Downloads the NBD export URI into the local file DST (created or
 * truncated to the export's size, sparse) with CONNS connections
 * (default 4), one thread each, one request in flight per connection.
 * The export is cut into REGION-sized regions (default 128M); each
 * connection takes the next region nobody has taken yet, asks for its
 * extents (base:allocation block status) and reads the extents that are
 * not zero in READ-sized requests (default 8M), writing them into DST;
 * zero extents are skipped (they stay holes in DST).  Prints nothing on
 * success; exits 1 with a message on any error.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libnbd.h>

#include "align.h"
#include "imageio-common.h"
#include "parse-size-arg.h"

static const char *dst_path, *uri;
static int dst_fd;
static uint64_t size, region_size = 128 << 20, read_size = 8 << 20;

/* Read [off, end) of the export into DST. */
static void
copy_data (struct nbd_handle *h, char *buf, uint64_t off, uint64_t end)
{
  while (off < end)
    {
      size_t n = MIN (end - off, read_size), done = 0;
      if (nbd_pread (h, buf, n, off, 0) == -1)
        imageio_die_nbd ("read");
      while (done < n)
        {
          ssize_t r = pwrite (dst_fd, buf + done, n - done, off + done);
          if (r <= 0)
            {
              fprintf (stderr, "imageio-download: write %s: %s\n", dst_path,
                       strerror (errno));
              exit (EXIT_FAILURE);
            }
          done += r;
        }
      off += n;
    }
}

/* The extents of one region, as block status returns them. */
struct extents
{
  uint64_t start, pos;
  uint64_t *list; /* length, flags pairs */
  size_t n, cap;
};

static int
extent_cb (void *opaque, const char *metacontext, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  struct extents *x = opaque;

  if (strcmp (metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  for (size_t i = 0; i + 1 < nr_entries; i += 2)
    {
      if (x->n + 2 > x->cap)
        {
          x->cap = x->cap ? 2 * x->cap : 64;
          x->list = realloc (x->list, x->cap * sizeof *x->list);
          if (x->list == NULL)
            {
              perror ("realloc");
              exit (EXIT_FAILURE);
            }
        }
      x->list[x->n++] = entries[i];
      x->list[x->n++] = entries[i + 1];
    }
  return 0;
}

static void *
worker (void *arg)
{
  struct nbd_handle *h = nbd_create ();
  char *buf = malloc (read_size);
  struct extents x = { 0 };
  uint64_t start, end, off;

  (void)arg;
  if (h == NULL || buf == NULL)
    {
      fprintf (stderr, "imageio-download: out of memory\n");
      exit (EXIT_FAILURE);
    }
  if (nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1
      || nbd_connect_uri (h, uri) == -1)
    imageio_die_nbd ("connect");
  while (imageio_next_region (size, region_size, &start, &end))
    {
      for (off = start; off < end;)
        {
          x.n = 0;
          if (nbd_block_status (h, end - off, off,
                                (nbd_extent_callback){ .callback = extent_cb,
                                                       .user_data = &x },
                                0)
              == -1)
            imageio_die_nbd ("block status");
          if (x.n == 0)
            {
              fprintf (stderr, "imageio-download: no extents at %" PRIu64 "\n",
                       off);
              exit (EXIT_FAILURE);
            }
          for (size_t i = 0; i < x.n && off < end; i += 2)
            {
              uint64_t e = MIN (off + x.list[i], end);
              if (!(x.list[i + 1] & LIBNBD_STATE_ZERO))
                copy_data (h, buf, off, e);
              off = e;
            }
        }
    }
  if (nbd_shutdown (h, 0) == -1)
    imageio_die_nbd ("shutdown");
  nbd_close (h);
  free (x.list);
  free (buf);
  return NULL;
}

int
main (int argc, char *argv[])
{
  unsigned conns = 4;
  struct nbd_handle *h;
  int c;

  imageio_progname = "imageio-download";
  while ((c = getopt (argc, argv, "c:r:R:h")) != -1)
    {
      switch (c)
        {
        case 'c':
          conns = parse_size_arg ("imageio-download", optarg, 1);
          break;
        case 'r':
          region_size = parse_size_arg ("imageio-download", optarg, 1);
          break;
        case 'R':
          read_size = parse_size_arg ("imageio-download", optarg, 1);
          break;
        default:
          fprintf (c == 'h' ? stdout : stderr,
                   "usage: imageio-download [-c CONNS] [-r REGION] [-R READ] "
                   "URI DST\n");
          exit (c == 'h' ? EXIT_SUCCESS : EXIT_FAILURE);
        }
    }
  if (optind != argc - 2 || conns == 0 || conns > 64)
    {
      fprintf (stderr, "imageio-download: expected URI DST (and 1..64 "
                       "connections)\n");
      exit (EXIT_FAILURE);
    }
  uri = argv[optind];
  dst_path = argv[optind + 1];

  /* The size, from a connection of its own. */
  h = nbd_create ();
  if (h == NULL || nbd_connect_uri (h, uri) == -1)
    imageio_die_nbd ("connect");
  if (nbd_get_size (h) < 0)
    imageio_die_nbd ("size");
  size = nbd_get_size (h);
  nbd_shutdown (h, 0);
  nbd_close (h);

  dst_fd = open (dst_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (dst_fd == -1 || ftruncate (dst_fd, size) == -1)
    {
      fprintf (stderr, "imageio-download: %s: %s\n", dst_path,
               strerror (errno));
      exit (EXIT_FAILURE);
    }

  imageio_run_workers (conns, worker);
  if (close (dst_fd) == -1)
    {
      fprintf (stderr, "imageio-download: %s: %s\n", dst_path,
               strerror (errno));
      exit (EXIT_FAILURE);
    }
  return 0;
}
