/* nbdstack bench: an upload client that writes the way oVirt imageio does.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   imageio-client [-c CONNS] [-r REGION] [-w WRITE] [-z ZERO] SRC URI
 *
 * Uploads the raw image SRC (a local file) to the NBD export URI with
 * CONNS connections (default 4), one thread each, one request in flight
 * per connection.  The image is cut into REGION-sized regions (default
 * 128M); each connection takes the next region nobody has taken yet and
 * copies it alone: the data extents of SRC (SEEK_DATA/SEEK_HOLE; an
 * allocated run of zeroes is data, as qemu-nbd's block status reports a
 * raw file) are read and written in WRITE-sized requests (default 8M),
 * the holes are sent as NBD_CMD_WRITE_ZEROES of at most ZERO bytes
 * (default 128M, so at most one per hole and region).  When no region is
 * left, each connection sends one flush and disconnects.  Prints nothing
 * on success; exits 1 with a message on any error.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libnbd.h>

#include "align.h"
#include "imageio-common.h"
#include "parse-size-arg.h"

static const char *src_path, *uri;
static int src_fd;
static uint64_t src_size, region_size = 128 << 20, write_size = 8 << 20,
                          zero_size = 128 << 20;

/* Copy [off, end) of SRC, all data (no hole inside). */
static void
copy_data (struct nbd_handle *h, char *buf, uint64_t off, uint64_t end)
{
  while (off < end)
    {
      size_t n = MIN (end - off, write_size), got = 0;
      while (got < n)
        {
          ssize_t r = pread (src_fd, buf + got, n - got, off + got);
          if (r <= 0)
            {
              fprintf (stderr, "imageio-client: read %s: %s\n", src_path,
                       r == 0 ? "unexpected end of file" : strerror (errno));
              exit (EXIT_FAILURE);
            }
          got += r;
        }
      if (nbd_pwrite (h, buf, n, off, 0) == -1)
        imageio_die_nbd ("write");
      off += n;
    }
}

static void
zero (struct nbd_handle *h, uint64_t off, uint64_t end)
{
  while (off < end)
    {
      uint64_t n = MIN (end - off, zero_size);
      if (nbd_zero (h, n, off, 0) == -1)
        imageio_die_nbd ("zero");
      off += n;
    }
}

static void *
worker (void *arg)
{
  struct nbd_handle *h = nbd_create ();
  char *buf = malloc (write_size);
  uint64_t start, end, off;

  (void)arg;
  if (h == NULL || buf == NULL)
    {
      fprintf (stderr, "imageio-client: out of memory\n");
      exit (EXIT_FAILURE);
    }
  if (nbd_connect_uri (h, uri) == -1)
    imageio_die_nbd ("connect");
  if ((uint64_t)nbd_get_size (h) < src_size)
    {
      fprintf (stderr, "imageio-client: export smaller than %s\n", src_path);
      exit (EXIT_FAILURE);
    }
  while (imageio_next_region (src_size, region_size, &start, &end))
    {
      for (off = start; off < end;)
        {
          off_t data = lseek (src_fd, off, SEEK_DATA), hole;
          if (data == -1 && errno != ENXIO)
            {
              perror ("imageio-client: lseek SEEK_DATA");
              exit (EXIT_FAILURE);
            }
          if (data == -1 || (uint64_t)data >= end)
            {
              zero (h, off, end);
              break;
            }
          zero (h, off, data);
          hole = lseek (src_fd, data, SEEK_HOLE);
          if (hole == -1)
            {
              perror ("imageio-client: lseek SEEK_HOLE");
              exit (EXIT_FAILURE);
            }
          copy_data (h, buf, data, MIN ((uint64_t)hole, end));
          off = MIN ((uint64_t)hole, end);
        }
    }
  if (nbd_flush (h, 0) == -1)
    imageio_die_nbd ("flush");
  if (nbd_shutdown (h, 0) == -1)
    imageio_die_nbd ("shutdown");
  nbd_close (h);
  free (buf);
  return NULL;
}

int
main (int argc, char *argv[])
{
  unsigned conns = 4;
  struct stat st;
  int c;

  imageio_progname = "imageio-client";
  while ((c = getopt (argc, argv, "c:r:w:z:h")) != -1)
    {
      switch (c)
        {
        case 'c':
          conns = parse_size_arg ("imageio-client", optarg, 1);
          break;
        case 'r':
          region_size = parse_size_arg ("imageio-client", optarg, 1);
          break;
        case 'w':
          write_size = parse_size_arg ("imageio-client", optarg, 1);
          break;
        case 'z':
          zero_size = parse_size_arg ("imageio-client", optarg, 1);
          break;
        default:
          fprintf (c == 'h' ? stdout : stderr,
                   "usage: imageio-client [-c CONNS] [-r REGION] [-w WRITE] "
                   "[-z ZERO] SRC URI\n");
          exit (c == 'h' ? EXIT_SUCCESS : EXIT_FAILURE);
        }
    }
  if (optind != argc - 2 || conns == 0 || conns > 64)
    {
      fprintf (stderr, "imageio-client: expected SRC URI (and 1..64 "
                       "connections)\n");
      exit (EXIT_FAILURE);
    }
  src_path = argv[optind];
  uri = argv[optind + 1];
  src_fd = open (src_path, O_RDONLY | O_CLOEXEC);
  if (src_fd == -1 || fstat (src_fd, &st) == -1)
    {
      fprintf (stderr, "imageio-client: %s: %s\n", src_path, strerror (errno));
      exit (EXIT_FAILURE);
    }
  src_size = st.st_size;

  imageio_run_workers (conns, worker);
  close (src_fd);
  return 0;
}
