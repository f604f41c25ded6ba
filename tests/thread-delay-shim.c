/* nbdstack tests: threads that start late, preloaded into nbdkit.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Preloaded (LD_PRELOAD) by test-lifecycle-late-connections.sh.  It
 * wraps pthread_create: a thread that the process's main thread creates
 * (nbdkit's connection threads; not the worker threads a connection
 * starts) sleeps before its start routine runs, as a thread does that a
 * loaded machine schedules late.  nbdkit counts a connection thread only
 * once it runs, so this widens the window in which a connection
 * accepted just before a shutdown is not waited for.
 *
 *   THREAD_DELAY_MS=N   the sleep, drawn in [0, N] ms per thread
 *                       (default 0: the shim does nothing)
 *   THREAD_DELAY_SEED=N seed of the draws (default 1)
 *
 * Threads created before THREAD_DELAY_MS is read (at load) are not
 * delayed; nothing else in the process is changed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prng.h"

typedef int (*create_fn) (pthread_t *, const pthread_attr_t *,
                          void *(*)(void *), void *);

static create_fn real_create;
static unsigned delay_ms;
static uint64_t seed = 1;
static uint64_t draws; /* atomic: one draw per delayed thread */

struct start
{
  void *(*fn) (void *);
  void *arg;
  unsigned ms;
};

__attribute__ ((constructor)) static void
init (void)
{
  const char *s;

  real_create = (create_fn)dlsym (RTLD_NEXT, "pthread_create");
  if ((s = getenv ("THREAD_DELAY_MS")) != NULL)
    delay_ms = (unsigned)strtoul (s, NULL, 10);
  if ((s = getenv ("THREAD_DELAY_SEED")) != NULL)
    seed = strtoull (s, NULL, 10);
}

/* The thread's start: sleep, then run what the caller asked for. */
static void *
late_start (void *p)
{
  struct start st = *(struct start *)p;
  struct timespec ts
      = { .tv_sec = st.ms / 1000, .tv_nsec = (long)(st.ms % 1000) * 1000000L };

  free (p);
  nanosleep (&ts, NULL);
  return st.fn (st.arg);
}

int
pthread_create (pthread_t *thread, const pthread_attr_t *attr,
                void *(*fn) (void *), void *arg)
{
  struct start *st;
  uint64_t n;
  int r;

  if (delay_ms == 0 || syscall (SYS_gettid) != getpid ())
    return real_create (thread, attr, fn, arg);
  st = malloc (sizeof *st);
  if (st == NULL)
    return real_create (thread, attr, fn, arg);
  n = __atomic_fetch_add (&draws, 1, __ATOMIC_RELAXED);
  st->fn = fn;
  st->arg = arg;
  st->ms = (unsigned)(prng_mix (seed ^ (n * 0x9E3779B97F4A7C15u))
                      % (delay_ms + 1));
  r = real_create (thread, attr, late_start, st);
  if (r != 0)
    free (st);
  return r;
}
