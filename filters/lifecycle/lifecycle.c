/* nbdstack lifecycle filter: the server's life as qemu-nbd lives it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdstack-nbd runs nbdkit under a supervisor (nbd/supervise.c).  This
 * filter is the supervisor's hand inside nbdkit, for what nbdkit 1.32
 * cannot be told from outside:
 *
 *   lifecycle-limit=N       at most N clients at once (0: no limit),
 *                           counting only connections that are still
 *                           open: one that has disconnected stops
 *                           counting when its teardown starts
 *                           (.finalize), not when it ends (.close), and
 *                           a client over the limit is given a short
 *                           grace for a closing connection to finish
 *                           before it is refused
 *   lifecycle-exit-last=BOOL  shut the server down when the last client
 *                           leaves (qemu-nbd without -t)
 *   lifecycle-unlink=PATH   ...and remove the Unix socket PATH first, so
 *                           that a client connecting then finds no socket
 *                           rather than one that refuses it
 *   lifecycle-control=FD    a socket to the supervisor: the filter writes
 *                           'R' once nbdkit is listening; on reading 'T'
 *                           it drains and flushes (below), then writes 'F'
 *                           (or 'E' if the flush failed)
 *   lifecycle-flush=BOOL    whether a drain ends with a flush (false for
 *                           a read-only server)
 *
 * The drain is how SIGTERM stops the server at once with idle clients
 * connected, which nbdkit 1.32 cannot do (it waits for every client to
 * leave): from 'T' on, no request enters the layers below; once those
 * already inside have finished, one flush through a context of our own
 * makes everything acknowledged durable (the coalesce buffer, the
 * image's metadata, the file).  Requests that arrive after 'T' are
 * never answered.  The supervisor then kills nbdkit, so clients see
 * their connections drop, as they do when qemu-nbd exits.
 *
 * The data path costs two atomic operations per request and no lock.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "cleanup.h"
#include "lifecycle-params.h"

/* How long a client over the limit waits for a closing connection. */
#define LIMIT_GRACE_MS 1000

/* How long the exit after the last client waits for connection threads
 * nbdkit has not counted (see wait_late_connections).
 */
#define LATE_THREADS_WAIT_MS 5000

static unsigned limit;
static bool exit_last;
static char *unlink_path;
static int control_fd = -1;
static bool want_flush = true;

/* Connections counted against the limit, under count_lock. */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t count_changed = PTHREAD_COND_INITIALIZER;
static unsigned open_count;
static bool shutting_down; /* exit-last fired, or a drain started */

/* The gate: requests inside the layers below, and whether the gate is
 * closed.  Both sequentially consistent, so that a request either sees
 * the gate closed or is seen by the drain (see gate_enter).
 */
static atomic_uint inside;
static atomic_bool closed;

/* Our own context for the drain's flush, opened in .after_fork. */
static nbdkit_next *below;
static pthread_t control_thread;
static bool control_thread_started;

struct handle
{
  bool counted; /* still counted in open_count */
};

static void
lifecycle_unload (void)
{
  free (unlink_path);
}

static const struct param_spec lifecycle_params[]
    = { LIFECYCLE_PARAMS (PARAM_SPEC) };

/* Set one of the parameters in lifecycle_params. */
static int
set_param (const char *key, const char *value)
{
  int r;

  if (strcmp (key, "lifecycle-limit") == 0)
    {
      if (nbdkit_parse_unsigned ("lifecycle-limit", value, &limit) == -1)
        return -1;
      return 0;
    }
  if (strcmp (key, "lifecycle-exit-last") == 0)
    {
      if ((r = nbdkit_parse_bool (value)) == -1)
        return -1;
      exit_last = r;
      return 0;
    }
  if (strcmp (key, "lifecycle-flush") == 0)
    {
      if ((r = nbdkit_parse_bool (value)) == -1)
        return -1;
      want_flush = r;
      return 0;
    }
  if (strcmp (key, "lifecycle-unlink") == 0)
    {
      free (unlink_path);
      unlink_path = strdup (value);
      if (unlink_path == NULL)
        {
          nbdkit_error ("strdup: %m");
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "lifecycle-control") == 0)
    {
      if (nbdkit_parse_int ("lifecycle-control", value, &control_fd) == -1)
        return -1;
      if (control_fd < 0)
        {
          nbdkit_error ("lifecycle-control=%s: not a file descriptor", value);
          return -1;
        }
      /* nbdkit 1.32 sets SIGTERM as its parent-death signal whether or
       * not it was given --exit-with-parent, and answers the requests
       * in flight with ESHUTDOWN when it arrives.  A supervisor that is
       * killed must take the server with it, as if they were one
       * process: with no reply to anything.  .config runs on nbdkit's
       * main thread, after nbdkit's own prctl, and the setting belongs
       * to that thread, so this replaces it.
       */
      if (prctl (PR_SET_PDEATHSIG, SIGKILL) == -1)
        {
          nbdkit_error ("lifecycle: prctl (PR_SET_PDEATHSIG): %m");
          return -1;
        }
      if (getppid () == 1)
        {
          nbdkit_error ("lifecycle: the supervisor has already gone");
          return -1;
        }
      return 0;
    }
  abort (); /* a key in LIFECYCLE_PARAMS without a case here */
}

/* Ours if LIFECYCLE_PARAMS lists it, else the next layer's. */
PARAM_FILTER_CONFIG (lifecycle_config, lifecycle_params, set_param)

#define lifecycle_config_help LIFECYCLE_PARAMS (PARAM_HELP_LINE)

/*---------------------------------------------------------------------
 * The gate and the drain.
 */

/* Requests wait here forever once the gate is closed: the supervisor
 * kills the server without answering them.
 */
static __attribute__ ((noreturn)) void
wait_forever (void)
{
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&m);
  for (;;)
    pthread_cond_wait (&never, &m);
}

/* Enter the layers below, or never return if the gate is closed.  The
 * increment comes before the check, and the drain closes the gate
 * before it reads the count: whichever order the two threads run in,
 * either the request sees the gate closed or the drain sees it inside.
 */
static void
gate_enter (void)
{
  atomic_fetch_add (&inside, 1);
  if (atomic_load (&closed))
    {
      atomic_fetch_sub (&inside, 1);
      wait_forever ();
    }
}

static void
gate_leave (void)
{
  atomic_fetch_sub (&inside, 1);
}

static void
reply (char c)
{
  while (write (control_fd, &c, 1) == -1 && errno == EINTR)
    ;
}

/* Close the gate, wait until no request is inside, flush, and tell the
 * supervisor.
 */
static void
drain (void)
{
  struct timespec tick = { 0, 1000 * 1000 };
  int err = 0;
  bool ok = true;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&count_lock);
    shutting_down = true;
    pthread_cond_broadcast (&count_changed);
  }
  atomic_store (&closed, true);
  while (atomic_load (&inside) > 0)
    nanosleep (&tick, NULL);
  if (below)
    {
      int can = below->can_flush (below);

      if (can == -1)
        ok = false;
      else if (can == 1 && below->flush (below, 0, &err) == -1)
        ok = false;
    }
  if (!ok)
    nbdkit_error ("lifecycle: the flush at shutdown failed: %s",
                  err ? strerror (err) : "unknown error");
  nbdkit_debug ("lifecycle: drained%s", below ? " and flushed" : "");
  reply (ok ? 'F' : 'E');
}

/* Reads the supervisor's requests until it goes away. */
static void *
control_loop (void *arg)
{
  char c;
  ssize_t n;

  for (;;)
    {
      n = read (control_fd, &c, 1);
      if (n == -1 && errno == EINTR)
        continue;
      if (n <= 0)
        return NULL; /* the supervisor is gone: it kills us */
      if (c == 'T')
        {
          drain ();
          return NULL;
        }
    }
}

static int
lifecycle_after_fork (nbdkit_backend *backend)
{
  int r;

  if (control_fd == -1)
    return 0;
  if (want_flush)
    {
      below = nbdkit_next_context_open (backend, 0, "", 1);
      if (below == NULL)
        {
          nbdkit_error ("lifecycle: cannot open the plugin for the flush at "
                        "shutdown");
          return -1;
        }
      if (below->prepare (below) == -1)
        return -1;
    }
  r = pthread_create (&control_thread, NULL, control_loop, NULL);
  if (r != 0)
    {
      nbdkit_error ("lifecycle: pthread_create: %s", strerror (r));
      return -1;
    }
  control_thread_started = true;
  /* nbdkit calls .after_fork once it listens (and has written its pid
   * file): the supervisor reports the server ready on this.
   */
  reply ('R');
  return 0;
}

/*---------------------------------------------------------------------
 * The exit after the last client.
 *
 * nbdkit 1.32 waits, before it unloads the plugin and the filters, for
 * the connection threads it has counted; but a thread counts itself
 * only once it runs.  A connection accepted just before the shutdown
 * (a client probing the socket as the last one leaves) whose thread
 * has not run yet is not waited for: it runs while the layers are
 * unloaded and walks them as it frees its connection, a segfault at
 * exit seen about once in 300 such exits on a loaded machine.  Every
 * connection thread keeps the name nbdkit's main thread has (threads
 * of ours are named otherwise, as coalesce's writers are), so .cleanup,
 * which nbdkit calls after its own wait and before unloading anything,
 * waits until no thread but the main one has that name, and
 * .preconnect sends such a late connection away before its handshake.
 */

/* Read the name of thread TID into COMM (at least 32 bytes).  Returns
 * false if it is gone.
 */
static bool
thread_name (const char *tid, char *comm)
{
  char path[64];
  ssize_t n;
  int fd;

  snprintf (path, sizeof path, "/proc/self/task/%s/comm", tid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    return false;
  n = read (fd, comm, 31);
  close (fd);
  if (n <= 0)
    return false;
  comm[n] = '\0';
  return true;
}

/* The number of threads but the main one that have its name: nbdkit's
 * connection and worker threads (0 if /proc cannot tell).
 */
static unsigned
connection_threads (void)
{
  char self[32], main_name[32], name[32];
  struct dirent *e;
  unsigned n = 0;
  DIR *dir;

  snprintf (self, sizeof self, "%ld", (long)getpid ());
  if (!thread_name (self, main_name))
    return 0;
  dir = opendir ("/proc/self/task");
  if (dir == NULL)
    return 0;
  while ((e = readdir (dir)) != NULL)
    if (e->d_name[0] != '.' && strcmp (e->d_name, self) != 0
        && thread_name (e->d_name, name) && strcmp (name, main_name) == 0)
      n++;
  closedir (dir);
  return n;
}

/* Wait, up to LATE_THREADS_WAIT_MS, for the connection threads nbdkit
 * did not wait for to end.
 */
static void
wait_late_connections (void)
{
  const struct timespec tick = { .tv_nsec = 1000000 };
  struct timespec start, t;
  unsigned first = connection_threads (), n = first;
  long ms = 0;

  clock_gettime (CLOCK_MONOTONIC, &start);
  while (n > 0 && ms < LATE_THREADS_WAIT_MS)
    {
      nanosleep (&tick, NULL);
      n = connection_threads ();
      clock_gettime (CLOCK_MONOTONIC, &t);
      ms = (t.tv_sec - start.tv_sec) * 1000
           + (t.tv_nsec - start.tv_nsec) / 1000000;
    }
  if (first > 0)
    nbdkit_debug ("lifecycle: waited %ld ms for %u connection threads nbdkit "
                  "had not counted (%u left)",
                  ms, first, n);
}

/* A connection that arrives once the server is shutting down is sent
 * away before its handshake, as it would be at .open, but at once.
 */
static int
lifecycle_preconnect (nbdkit_next_preconnect *next, nbdkit_backend *nxdata,
                      int readonly)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&count_lock);
    if (shutting_down)
      {
        nbdkit_debug ("lifecycle: the server is shutting down: connection "
                      "closed");
        return -1;
      }
  }
  return next (nxdata, readonly);
}

static void
lifecycle_cleanup (nbdkit_backend *backend)
{
  /* A normal exit (the last client left): wake the thread, which is
   * waiting for the supervisor, and wait for it, so that it neither
   * uses our context while it is closed below nor runs in this module
   * once nbdkit has unloaded it.
   */
  if (control_thread_started)
    {
      shutdown (control_fd, SHUT_RD);
      pthread_join (control_thread, NULL);
      control_thread_started = false;
    }
  if (exit_last)
    wait_late_connections ();
  if (below)
    {
      below->finalize (below);
      nbdkit_next_context_close (below);
      below = NULL;
    }
}

/*---------------------------------------------------------------------
 * Counting clients.
 */

/* Why admit refused a client. */
enum refusal
{
  ADMITTED,
  REFUSED_SHUTTING_DOWN,
  REFUSED_LIMIT
};

/* Count a new connection against the limit, after a grace for a
 * closing one to finish if the limit is reached.
 */
static enum refusal
admit (struct handle *h)
{
  struct timespec deadline;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&count_lock);
  clock_gettime (CLOCK_REALTIME, &deadline);
  deadline.tv_nsec += (LIMIT_GRACE_MS % 1000) * 1000000L;
  deadline.tv_sec += LIMIT_GRACE_MS / 1000 + deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  while (!shutting_down && limit > 0 && open_count >= limit)
    if (pthread_cond_timedwait (&count_changed, &count_lock, &deadline)
        == ETIMEDOUT)
      break;
  if (shutting_down)
    return REFUSED_SHUTTING_DOWN;
  if (limit > 0 && open_count >= limit)
    return REFUSED_LIMIT;
  open_count++;
  h->counted = true;
  return ADMITTED;
}

static void *
lifecycle_open (nbdkit_next_open *next, nbdkit_context *context, int readonly,
                const char *exportname, int is_tls)
{
  struct handle *h;

  if (next (context, readonly, exportname) == -1)
    return NULL;
  h = calloc (1, sizeof *h);
  if (h == NULL)
    {
      nbdkit_error ("calloc: %m");
      return NULL;
    }

  switch (admit (h))
    {
    case ADMITTED:
      return h;
    case REFUSED_SHUTTING_DOWN:
      nbdkit_error ("lifecycle: the server is shutting down");
      break;
    case REFUSED_LIMIT:
      nbdkit_error ("lifecycle: too many clients connected (%u): connection "
                    "rejected",
                    limit);
      break;
    }
  free (h);
  return NULL;
}

/* The connection stops counting against the limit (once). */
static void
uncount (struct handle *h)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&count_lock);
  if (h->counted)
    {
      h->counted = false;
      open_count--;
      pthread_cond_broadcast (&count_changed);
    }
}

static int
lifecycle_finalize (nbdkit_next *next, void *handle)
{
  /* The client has gone (or said NBD_CMD_DISC) and the connection is
   * being torn down: it no longer holds a place under the limit, so a
   * client that reconnects at once (qemu-img convert does) is served.
   */
  uncount (handle);
  return next->finalize (next);
}

/* When the last client has gone and the server exits with its last
 * client, remove the socket and shut down.  Done here, as nbdkit's
 * exitlast filter does it, and not in .finalize: nbdkit 1.32 skips the
 * .close of every layer once shutdown has been asked for.
 */
static void
lifecycle_close (void *handle)
{
  bool last;

  uncount (handle);
  free (handle);

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&count_lock);
    last = exit_last && open_count == 0 && !shutting_down;
    if (last)
      shutting_down = true;
    pthread_cond_broadcast (&count_changed);
  }
  if (last)
    {
      /* Before nbdkit stops accepting: a client connecting now gets
       * ENOENT, as it does once qemu-nbd has gone, rather than
       * ECONNREFUSED from a socket that is still there.
       */
      if (unlink_path)
        unlink (unlink_path);
      nbdkit_debug ("lifecycle: the last client has left: shutting down");
      nbdkit_shutdown ();
    }
}

/*---------------------------------------------------------------------
 * The data path: every request passes the gate.
 */

static int
lifecycle_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->pread (next, buf, count, offset, flags, err);
  gate_leave ();
  return r;
}

static int
lifecycle_pwrite (nbdkit_next *next, void *handle, const void *buf,
                  uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->pwrite (next, buf, count, offset, flags, err);
  gate_leave ();
  return r;
}

static int
lifecycle_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->flush (next, flags, err);
  gate_leave ();
  return r;
}

static int
lifecycle_trim (nbdkit_next *next, void *handle, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->trim (next, count, offset, flags, err);
  gate_leave ();
  return r;
}

static int
lifecycle_zero (nbdkit_next *next, void *handle, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->zero (next, count, offset, flags, err);
  gate_leave ();
  return r;
}

static int
lifecycle_extents (nbdkit_next *next, void *handle, uint32_t count,
                   uint64_t offset, uint32_t flags,
                   struct nbdkit_extents *extents, int *err)
{
  int r;

  gate_enter ();
  r = next->extents (next, count, offset, flags, extents, err);
  gate_leave ();
  return r;
}

static int
lifecycle_cache (nbdkit_next *next, void *handle, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err)
{
  int r;

  gate_enter ();
  r = next->cache (next, count, offset, flags, err);
  gate_leave ();
  return r;
}

static struct nbdkit_filter filter = {
  .name = "lifecycle",
  .longname = "nbdstack lifecycle filter (client limit, exit, drain)",
  .unload = lifecycle_unload,
  .config = lifecycle_config,
  .config_help = lifecycle_config_help,
  .after_fork = lifecycle_after_fork,
  .cleanup = lifecycle_cleanup,
  .preconnect = lifecycle_preconnect,
  .open = lifecycle_open,
  .finalize = lifecycle_finalize,
  .close = lifecycle_close,
  .pread = lifecycle_pread,
  .pwrite = lifecycle_pwrite,
  .flush = lifecycle_flush,
  .trim = lifecycle_trim,
  .zero = lifecycle_zero,
  .extents = lifecycle_extents,
  .cache = lifecycle_cache,
};

NBDKIT_REGISTER_FILTER (filter)
