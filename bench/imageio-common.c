/* nbdstack bench: the region queue and the threads of the imageio-style
 * clients (see imageio-common.h).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "imageio-common.h"

const char *imageio_progname = "imageio";

static atomic_uint_fast64_t next_region;

void
imageio_die_nbd (const char *what)
{
  fprintf (stderr, "%s: %s: %s\n", imageio_progname, what, nbd_get_error ());
  exit (EXIT_FAILURE);
}

bool
imageio_next_region (uint64_t size, uint64_t region_size, uint64_t *start,
                     uint64_t *end)
{
  *start = atomic_fetch_add (&next_region, 1) * region_size;
  if (*start >= size)
    return false;
  *end = MIN (*start + region_size, size);
  return true;
}

void
imageio_run_workers (unsigned conns, void *(*worker) (void *))
{
  pthread_t *threads = calloc (conns, sizeof *threads);
  unsigned i;
  int err;

  if (threads == NULL)
    {
      perror ("calloc");
      exit (EXIT_FAILURE);
    }
  for (i = 0; i < conns; i++)
    if ((err = pthread_create (&threads[i], NULL, worker, NULL)) != 0)
      {
        fprintf (stderr, "%s: pthread_create: %s\n", imageio_progname,
                 strerror (err));
        exit (EXIT_FAILURE);
      }
  for (i = 0; i < conns; i++)
    pthread_join (threads[i], NULL);
  free (threads);
}
