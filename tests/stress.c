/* nbdstack tests: a concurrency and durability stress client.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 *   stress [OPTIONS] -- NBDKIT-ARGS...
 *
 * Starts "nbdkit -f -U SOCKET NBDKIT-ARGS..." (nbdkit is found in PATH,
 * so the sanitizer wrapper of tests/functions.sh applies), then runs
 * --conns libnbd connections, each keeping up to --depth random
 * requests in flight: writes (some FUA), zeroes (with and without
 * MAY_TRIM, FAST_ZERO, FUA), trims, flushes and verifying reads.
 *
 * Connections own interleaved stripes of the export: below --split,
 * 700-byte stripes (so that neighbours share every page of a buffer),
 * above it 20000-byte ones (large enough for writes that bypass a
 * buffer).  A connection never has two overlapping requests in flight,
 * so every byte has one total order of requests, which is what makes
 * both checks exact:
 *
 * --end=kill (repeated --kills times, from fresh contents of --image):
 *   SIGKILL the server at a random moment under load, then check the
 *   file.  Every byte that a request acknowledged before the *send* of
 *   the last flush answered OK (on any connection: needs multi-conn),
 *   or by a FUA request answered OK, wrote must hold that request's
 *   value or the value of a later request on that byte (anything after
 *   a trim).  --all-acked makes every acknowledged request count
 *   (writethrough); --control expects the check to fail (proves it can).
 *
 * --end=clean: stop after --secs, wait for every reply, flush (retrying
 *   while --errfile is in force), compare every byte through a fresh
 *   connection and, after SIGTERM, in --image.  Failed requests leave
 *   their bytes undefined (--errors-ok allows them).
 *
 * --before=CMD and --after=CMD (run by the shell, with the environment
 * variable IMAGE set to --image) let the server serve something else
 * than the raw --image: before each server start, once --image holds
 * the fresh contents, CMD can build the served image from it (say a
 * qcow2 made by qemu-img convert); after each kill (or SIGTERM), CMD
 * must write the served image's guest contents back into --image and
 * can check it (qemu-img check): a non-zero exit counts as a failure.
 *
 * --log=FILE collects the server's output (appended).
 *
 * --errfile=PATH is created once the connections run and removed before
 * the final check: nbdkit's error filter uses it as its trigger (it
 * re-reads it about once a second, so both steps wait 1.2 s).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libnbd.h>

#include "align.h"
#include "now.h"
#include "prng.h"

#define STRIPE_SMALL 700
#define STRIPE_LARGE 20000
#define MAX_ALLOWED 6
#define MAX_DEPTH 64

enum kind
{
  K_WRITE,
  K_ZERO,
  K_TRIM,
  K_READ,
  K_FLUSH
};

struct op
{
  enum kind kind;
  uint32_t flags;
  uint64_t off;
  uint32_t len;
  uint64_t id; /* seeds the written bytes */
  int64_t send_ns, ack_ns;
  bool done, ok;
  int err;
  struct conn *conn;
  unsigned slot;
  char *buf; /* read buffer, or the written data while in flight */
};

struct conn
{
  int index;
  struct nbd_handle *nbd;
  unsigned in_flight;
  struct op *slots[MAX_DEPTH];
  unsigned n_slots;
  struct op **ops; /* every request in issue order (flushes too) */
  size_t nops, cap;
  uint64_t rng;
  char error[256];
};

/* Options. */
static unsigned n_conns = 4, depth = 16, kills = 1;
static uint64_t size = 4 << 20, split;
static double secs = 1.0;
static uint64_t seed;
static const char *image, *errfile, *sock_path, *log_path;
static const char *before_cmd, *after_cmd;
static bool end_kill, all_acked, control, errors_ok;
static char **server_argv;
static unsigned w_write = 40, w_fua = 5, w_zero = 8, w_trim = 4, w_flush = 3,
                w_read = 40;

/* Per run. */
static pid_t server_pid;
static volatile bool stopping;
static int64_t kill_ns;
static uint8_t *init_data; /* the image's contents before the run */
static uint8_t *model;     /* what each byte holds (clean mode) */
static uint8_t *undefined; /* 1: no value expected (trim, failure) */
static struct conn *conns;
static uint64_t next_id;
static pthread_mutex_t id_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long total_checked_ops, total_checked_bytes;

/* The byte a write with this id puts at this offset: never 0, so a
 * lost write cannot pass for a zero, and different per write.
 */
static uint8_t
data_byte (uint64_t id, uint64_t off)
{
  uint64_t h = (id + 1) * UINT64_C (0x9E3779B97F4A7C15)
               ^ off * UINT64_C (0xff51afd7ed558ccd);
  h ^= h >> 29;
  h *= UINT64_C (0xbf58476d1ce4e5b9);
  h ^= h >> 32;
  return (h & 0xff) ? (h & 0xff) : 1;
}

static uint8_t
op_byte (const struct op *op, uint64_t off)
{
  return op->kind == K_ZERO ? 0 : data_byte (op->id, off);
}

static unsigned
owner_of (uint64_t off)
{
  if (off < split)
    return (off / STRIPE_SMALL) % n_conns;
  return ((off - split) / STRIPE_LARGE) % n_conns;
}

/* A random range inside one stripe that conn owns. */
static void
pick_range (struct conn *c, uint64_t *off, uint32_t *len)
{
  uint64_t lo, hi, n;

  if (split == size || prng_below (&c->rng, 10) < 6)
    {
      n = split / STRIPE_SMALL / n_conns;
      lo = (prng_below (&c->rng, n) * n_conns + c->index) * STRIPE_SMALL;
      hi = lo + STRIPE_SMALL;
    }
  else
    {
      n = (size - split) / STRIPE_LARGE / n_conns;
      lo = split
           + (prng_below (&c->rng, n) * n_conns + c->index) * STRIPE_LARGE;
      hi = lo + STRIPE_LARGE;
    }
  switch (prng_below (&c->rng, 3))
    {
    case 0: /* anywhere */
      *off = lo + prng_below (&c->rng, hi - lo);
      *len = 1 + prng_below (&c->rng, hi - *off);
      break;
    case 1: /* the whole stripe */
      *off = lo;
      *len = hi - lo;
      break;
    default: /* short */
      *len = 1 + prng_below (&c->rng, MIN (hi - lo, (uint64_t)5000));
      *off = lo + prng_below (&c->rng, hi - lo - *len + 1);
      break;
    }
}

static void
record (struct conn *c, struct op *op)
{
  if (c->nops == c->cap)
    {
      c->cap = c->cap ? c->cap * 2 : 1024;
      c->ops = realloc (c->ops, c->cap * sizeof *c->ops);
      if (c->ops == NULL)
        {
          perror ("realloc");
          exit (EXIT_FAILURE);
        }
    }
  c->ops[c->nops++] = op;
}

static bool
overlaps_in_flight (struct conn *c, uint64_t off, uint32_t len)
{
  for (unsigned i = 0; i < c->n_slots; ++i)
    {
      const struct op *o = c->slots[i];
      if (o && o->kind != K_FLUSH && o->off < off + len
          && off < o->off + o->len)
        return true;
    }
  return false;
}

/* Requests in flight sit in slots, so that the overlap check looks at
 * them and only them.
 */
static void
take_slot (struct conn *c, struct op *op)
{
  for (op->slot = 0; c->slots[op->slot]; ++op->slot)
    ;
  c->slots[op->slot] = op;
  if (op->slot == c->n_slots)
    c->n_slots++;
  c->in_flight++;
}

static void
release_slot (struct conn *c, struct op *op)
{
  c->slots[op->slot] = NULL;
  while (c->n_slots > 0 && c->slots[c->n_slots - 1] == NULL)
    c->n_slots--;
  c->in_flight--;
}

static void set_error (struct conn *c, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));
static void
set_error (struct conn *c, const char *fmt, ...)
{
  va_list ap;
  if (c->error[0])
    return;
  va_start (ap, fmt);
  vsnprintf (c->error, sizeof c->error, fmt, ap);
  va_end (ap);
}

/* Runs in the connection's own thread, from nbd_poll. */
static int
completed (void *user_data, int *error)
{
  struct op *op = user_data;
  struct conn *c = op->conn;
  uint64_t i;

  op->ack_ns = now_ns ();
  op->done = true;
  op->ok = *error == 0;
  op->err = *error;
  release_slot (c, op);
  if (stopping && end_kill)
    return 1; /* the server is being killed: replies prove nothing */

  switch (op->kind)
    {
    case K_READ:
      if (op->ok)
        for (i = 0; i < op->len; ++i)
          {
            uint64_t b = op->off + i;
            if (!undefined[b] && (uint8_t)op->buf[i] != model[b])
              {
                set_error (c,
                           "read mismatch at %" PRIu64 " (read of %" PRIu32
                           " at %" PRIu64 "): got 0x%02x, want 0x%02x",
                           b, op->len, op->off, (uint8_t)op->buf[i], model[b]);
                break;
              }
          }
      else
        set_error (c, "read at %" PRIu64 " failed: %s", op->off,
                   strerror (op->err));
      break;
    case K_WRITE:
    case K_ZERO:
    case K_TRIM:
      if (op->ok)
        {
          for (i = 0; i < op->len; ++i)
            model[op->off + i] = op_byte (op, op->off + i);
          memset (undefined + op->off, op->kind == K_TRIM, op->len);
        }
      else if (op->kind == K_ZERO && (op->flags & LIBNBD_CMD_FLAG_FAST_ZERO)
               && (op->err == ENOTSUP || op->err == EOPNOTSUPP))
        ; /* refused up front: nothing changed */
      else
        {
          if (!errors_ok)
            set_error (c, "%s of %" PRIu32 " at %" PRIu64 " failed: %s",
                       op->kind == K_WRITE  ? "write"
                       : op->kind == K_ZERO ? "zero"
                                            : "trim",
                       op->len, op->off, strerror (op->err));
          memset (undefined + op->off, 1, op->len);
        }
      break;
    case K_FLUSH:
      if (!op->ok && !errors_ok)
        set_error (c, "flush failed: %s", strerror (op->err));
      break;
    }
  free (op->buf);
  op->buf = NULL;
  return 1;
}

static void
issue (struct conn *c)
{
  const unsigned total = w_write + w_fua + w_zero + w_trim + w_flush + w_read;
  unsigned r = prng_below (&c->rng, total);
  struct op *op = calloc (1, sizeof *op);
  nbd_completion_callback cb;
  int64_t cookie;
  uint64_t i;

  if (op == NULL)
    {
      perror ("calloc");
      exit (EXIT_FAILURE);
    }
  op->conn = c;
  cb = (nbd_completion_callback){ .callback = completed, .user_data = op };

  if (r < w_flush)
    {
      op->kind = K_FLUSH;
      record (c, op);
      take_slot (c, op);
      op->send_ns = now_ns ();
      cookie = nbd_aio_flush (c->nbd, cb, 0);
      goto sent;
    }
  r -= w_flush;
  pick_range (c, &op->off, &op->len);
  if (overlaps_in_flight (c, op->off, op->len))
    {
      free (op);
      return;
    }
  if (r < w_write + w_fua)
    {
      op->kind = K_WRITE;
      if (r >= w_write)
        op->flags = LIBNBD_CMD_FLAG_FUA;
      pthread_mutex_lock (&id_lock);
      op->id = next_id++;
      pthread_mutex_unlock (&id_lock);
      op->buf = malloc (op->len);
      for (i = 0; i < op->len; ++i)
        op->buf[i] = data_byte (op->id, op->off + i);
    }
  else if ((r -= w_write + w_fua) < w_zero)
    {
      op->kind = K_ZERO;
      if (prng_below (&c->rng, 10) < 3)
        op->flags |= LIBNBD_CMD_FLAG_NO_HOLE;
      if (prng_below (&c->rng, 10) < 3 && nbd_can_fast_zero (c->nbd) == 1)
        op->flags |= LIBNBD_CMD_FLAG_FAST_ZERO;
      if (prng_below (&c->rng, 10) < 2)
        op->flags |= LIBNBD_CMD_FLAG_FUA;
    }
  else if ((r -= w_zero) < w_trim)
    {
      if (nbd_can_trim (c->nbd) != 1)
        {
          free (op);
          return;
        }
      op->kind = K_TRIM;
      if (prng_below (&c->rng, 10) < 2)
        op->flags |= LIBNBD_CMD_FLAG_FUA;
    }
  else
    {
      op->kind = K_READ;
      op->buf = malloc (op->len);
    }
  if (op->kind != K_ZERO && op->kind != K_TRIM && op->buf == NULL)
    {
      perror ("malloc");
      exit (EXIT_FAILURE);
    }
  record (c, op);
  take_slot (c, op);
  op->send_ns = now_ns ();
  switch (op->kind)
    {
    case K_WRITE:
      cookie
          = nbd_aio_pwrite (c->nbd, op->buf, op->len, op->off, cb, op->flags);
      break;
    case K_ZERO:
      cookie = nbd_aio_zero (c->nbd, op->len, op->off, cb, op->flags);
      break;
    case K_TRIM:
      cookie = nbd_aio_trim (c->nbd, op->len, op->off, cb, op->flags);
      break;
    default:
      cookie = nbd_aio_pread (c->nbd, op->buf, op->len, op->off, cb, 0);
      break;
    }
sent:
  if (cookie == -1)
    {
      /* Not sent: no callback will run. */
      release_slot (c, op);
      op->done = true;
      op->ok = false;
      op->send_ns = INT64_MAX;
      if (!stopping)
        set_error (c, "sending a request: %s", nbd_get_error ());
    }
}

static void *
worker (void *arg)
{
  struct conn *c = arg;

  while (!c->error[0])
    {
      if (stopping && (end_kill || c->in_flight == 0))
        break;
      if (!stopping && c->in_flight < depth)
        {
          issue (c);
          if (nbd_poll (c->nbd, 0) == -1 && !stopping)
            set_error (c, "poll: %s", nbd_get_error ());
          continue;
        }
      if (nbd_poll (c->nbd, 100) == -1)
        {
          if (!stopping || !end_kill)
            set_error (c, "poll: %s", nbd_get_error ());
          break;
        }
    }
  return NULL;
}

static void
write_file (const char *path, const uint8_t *data, uint64_t n)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd == -1 || pwrite (fd, data, n, 0) != (ssize_t)n || close (fd) == -1)
    {
      fprintf (stderr, "stress: writing %s: %m\n", path);
      exit (EXIT_FAILURE);
    }
}

static uint8_t *
read_file (const char *path)
{
  uint8_t *data = malloc (size);
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (data == NULL || fd == -1 || pread (fd, data, size, 0) != (ssize_t)size)
    {
      fprintf (stderr, "stress: reading %s: %m\n", path);
      exit (EXIT_FAILURE);
    }
  close (fd);
  return data;
}

/* --before/--after: 0 when CMD exited 0. */
static int
run_hook (const char *what, const char *cmd)
{
  int st;

  if (image)
    setenv ("IMAGE", image, 1);
  st = system (cmd);
  if (st == -1 || !WIFEXITED (st) || WEXITSTATUS (st) != 0)
    {
      fprintf (stderr, "stress: %s command failed (status %d): %s\n", what, st,
               cmd);
      return -1;
    }
  return 0;
}

static void
start_server (void)
{
  char **argv;
  unsigned n = 0, i;
  int tries;

  for (n = 0; server_argv[n]; ++n)
    ;
  argv = calloc (n + 5, sizeof *argv);
  argv[0] = "nbdkit";
  argv[1] = "-f";
  argv[2] = "-U";
  argv[3] = (char *)sock_path;
  for (i = 0; i < n; ++i)
    argv[4 + i] = server_argv[i];
  unlink (sock_path);
  server_pid = fork ();
  if (server_pid == -1)
    {
      perror ("fork");
      exit (EXIT_FAILURE);
    }
  if (server_pid == 0)
    {
      if (log_path)
        {
          int fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
          if (fd == -1)
            {
              perror (log_path);
              _exit (127);
            }
          dup2 (fd, 1);
          dup2 (fd, 2);
          close (fd);
        }
      execvp ("nbdkit", argv);
      perror ("nbdkit");
      _exit (127);
    }
  free (argv);
  for (tries = 0; tries < 600; ++tries)
    {
      struct nbd_handle *h;
      int status;

      if (waitpid (server_pid, &status, WNOHANG) == server_pid)
        {
          fprintf (stderr, "stress: nbdkit exited at start-up\n");
          exit (EXIT_FAILURE);
        }
      if (access (sock_path, F_OK) == 0 && (h = nbd_create ()) != NULL)
        {
          int r = nbd_connect_unix (h, sock_path);
          nbd_close (h);
          if (r == 0)
            return;
        }
      usleep (50000);
    }
  fprintf (stderr, "stress: nbdkit did not start in 30 s\n");
  kill (server_pid, SIGKILL);
  exit (EXIT_FAILURE);
}

static void
stop_server (int sig)
{
  int status;

  kill (server_pid, sig);
  waitpid (server_pid, &status, 0);
  if (sig == SIGTERM && !(WIFEXITED (status) && WEXITSTATUS (status) == 0))
    {
      fprintf (stderr, "stress: nbdkit did not exit cleanly on SIGTERM\n");
      exit (EXIT_FAILURE);
    }
}

static struct nbd_handle *
connect_one (void)
{
  struct nbd_handle *h = nbd_create ();

  if (h == NULL || nbd_connect_unix (h, sock_path) == -1)
    {
      fprintf (stderr, "stress: connect: %s\n", nbd_get_error ());
      exit (EXIT_FAILURE);
    }
  return h;
}

/* Clean mode without --image: give the export known contents. */
static void
fill_through_nbd (void)
{
  struct nbd_handle *h = connect_one ();
  uint64_t off;

  for (off = 0; off < size; off += 1 << 20)
    if (nbd_pwrite (h, init_data + off, MIN (size - off, (uint64_t)1 << 20),
                    off, 0)
        == -1)
      {
        fprintf (stderr, "stress: initial write: %s\n", nbd_get_error ());
        exit (EXIT_FAILURE);
      }
  if (nbd_flush (h, 0) == -1)
    {
      fprintf (stderr, "stress: initial flush: %s\n", nbd_get_error ());
      exit (EXIT_FAILURE);
    }
  nbd_shutdown (h, 0);
  nbd_close (h);
}

static unsigned long
compare_with_model (const uint8_t *got, const char *what)
{
  unsigned long bad = 0;
  uint64_t b, first = 0;

  for (b = 0; b < size; ++b)
    if (!undefined[b] && got[b] != model[b])
      {
        if (bad++ == 0)
          first = b;
      }
  if (bad)
    fprintf (stderr,
             "stress: %s: %lu bytes differ, first at %" PRIu64
             " (connection %u's): got 0x%02x, want 0x%02x\n",
             what, bad, first, owner_of (first), got[first], model[first]);
  return bad;
}

/* Kill mode: the durability check described at the top. */
struct allowed
{
  uint8_t n; /* 0: nothing required; 255: anything goes */
  uint8_t v[MAX_ALLOWED];
};

static void
allow (struct allowed *a, int value, bool reset)
{
  if (reset)
    a->n = 0;
  else if (a->n == 0)
    return; /* no required request on this byte yet */
  if (a->n == 255)
    return;
  if (value < 0 || a->n == MAX_ALLOWED)
    {
      a->n = 255;
      return;
    }
  for (unsigned i = 0; i < a->n; ++i)
    if (a->v[i] == value)
      return;
  a->v[a->n++] = value;
}

static unsigned long
check_durability (const uint8_t *disk)
{
  struct allowed *al = calloc (size, sizeof *al);
  int64_t floor_ns = INT64_MIN;
  unsigned long lost_bytes = 0, required = 0, shown = 0;
  unsigned ci;
  size_t k;
  uint64_t b;

  if (al == NULL)
    {
      perror ("calloc");
      exit (EXIT_FAILURE);
    }
  for (ci = 0; ci < n_conns; ++ci)
    for (k = 0; k < conns[ci].nops; ++k)
      {
        struct op *o = conns[ci].ops[k];
        if (o->kind == K_FLUSH && o->done && o->ok && o->ack_ns < kill_ns
            && o->send_ns > floor_ns)
          floor_ns = o->send_ns;
      }

  for (ci = 0; ci < n_conns; ++ci)
    for (k = 0; k < conns[ci].nops; ++k)
      {
        struct op *o = conns[ci].ops[k];
        bool acked = o->done && o->ok && o->ack_ns < kill_ns;
        bool req;

        if (o->kind == K_FLUSH || o->kind == K_READ)
          continue;
        req = acked
              && (all_acked || control || o->ack_ns < floor_ns
                  || (o->flags & LIBNBD_CMD_FLAG_FUA));
        required += req;
        for (b = o->off; b < o->off + o->len; ++b)
          allow (&al[b], o->kind == K_TRIM ? -1 : op_byte (o, b), req);
      }

  for (b = 0; b < size; ++b)
    {
      struct allowed *a = &al[b];
      bool ok = a->n == 0 || a->n == 255;
      for (unsigned i = 0; !ok && i < a->n; ++i)
        ok = a->v[i] == disk[b];
      if (a->n != 0 && a->n != 255)
        total_checked_bytes++;
      if (!ok)
        {
          if (shown++ < 3 && !control)
            fprintf (stderr,
                     "stress: byte %" PRIu64 " (connection %u's) holds 0x%02x "
                     "(initially 0x%02x), want one of %u acknowledged "
                     "value(s), first 0x%02x\n",
                     b, owner_of (b), disk[b], init_data[b], a->n, a->v[0]);
          lost_bytes++;
        }
    }
  total_checked_ops += required;
  free (al);
  return lost_bytes;
}

static void
free_run (void)
{
  for (unsigned ci = 0; ci < n_conns; ++ci)
    {
      struct conn *c = &conns[ci];
      if (c->nbd)
        nbd_close (c->nbd);
      for (size_t k = 0; k < c->nops; ++k)
        {
          free (c->ops[k]->buf);
          free (c->ops[k]);
        }
      free (c->ops);
    }
  memset (conns, 0, n_conns * sizeof *conns);
}

static void
sleep_s (double s)
{
  struct timespec ts
      = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (time_t)s) * 1e9) };
  nanosleep (&ts, NULL);
}

/* One server lifetime.  Returns the number of failures found. */
static unsigned long
run_once (unsigned run)
{
  uint64_t run_rng = seed * 1000003 + run;
  pthread_t threads[64];
  unsigned long failures = 0;
  unsigned ci;
  uint64_t b;

  for (b = 0; b < size; ++b)
    init_data[b] = data_byte (UINT64_MAX - run, b);
  memcpy (model, init_data, size);
  memset (undefined, 0, size);
  if (image)
    write_file (image, init_data, size);
  if (before_cmd && run_hook ("--before", before_cmd) != 0)
    exit (EXIT_FAILURE);
  start_server ();
  if (!image)
    fill_through_nbd ();

  stopping = false;
  for (ci = 0; ci < n_conns; ++ci)
    {
      struct conn *c = &conns[ci];
      c->index = ci;
      c->rng = prng_next (&run_rng) | 1;
      c->nbd = connect_one ();
      if (n_conns > 1 && nbd_can_multi_conn (c->nbd) != 1)
        {
          fprintf (stderr, "stress: the export is not multi-conn: a flush on "
                           "one connection proves nothing about another\n");
          exit (EXIT_FAILURE);
        }
    }
  for (ci = 0; ci < n_conns; ++ci)
    pthread_create (&threads[ci], NULL, worker, &conns[ci]);
  if (errfile)
    {
      write_file (errfile, (const uint8_t *)"", 0);
      sleep_s (1.2);
    }

  if (end_kill)
    {
      /* Somewhere in the second half of the run, at a random moment. */
      sleep_s (secs / 2
               + (double)prng_below (&run_rng, 1000000) / 1e6 * secs / 2);
      stopping = true;
      kill_ns = now_ns ();
      kill (server_pid, SIGKILL);
      for (ci = 0; ci < n_conns; ++ci)
        pthread_join (threads[ci], NULL);
      waitpid (server_pid, NULL, 0);
      for (ci = 0; ci < n_conns; ++ci)
        if (conns[ci].error[0])
          {
            fprintf (stderr, "stress: run %u: connection %u: %s\n", run, ci,
                     conns[ci].error);
            failures++;
          }
      if (after_cmd && run_hook ("--after", after_cmd) != 0)
        failures++;
      uint8_t *disk = read_file (image);
      unsigned long lost = check_durability (disk);
      free (disk);
      if (lost && !control)
        fprintf (stderr, "stress: run %u (seed %" PRIu64 "): %lu bytes lost\n",
                 run, seed, lost);
      failures += lost;
    }
  else
    {
      sleep_s (secs);
      stopping = true;
      for (ci = 0; ci < n_conns; ++ci)
        pthread_join (threads[ci], NULL);
      if (errfile)
        {
          unlink (errfile);
          sleep_s (1.2);
        }
      for (ci = 0; ci < n_conns; ++ci)
        {
          if (conns[ci].error[0])
            {
              fprintf (stderr, "stress: connection %u: %s\n", ci,
                       conns[ci].error);
              failures++;
            }
          /* nbdkit waits for its clients to leave before it exits. */
          nbd_shutdown (conns[ci].nbd, 0);
          nbd_close (conns[ci].nbd);
          conns[ci].nbd = NULL;
        }

      struct nbd_handle *h = connect_one ();
      uint8_t *got = malloc (size);
      int tries;
      for (tries = 0; tries < 20 && nbd_flush (h, 0) == -1; ++tries)
        {
          if (!errors_ok)
            break;
          sleep_s (0.1);
        }
      if (tries == 20 || (!errors_ok && tries > 0))
        {
          fprintf (stderr, "stress: final flush failed: %s\n",
                   nbd_get_error ());
          failures++;
        }
      for (b = 0; b < size; b += 1 << 20)
        if (nbd_pread (h, got + b, MIN (size - b, (uint64_t)1 << 20), b, 0)
            == -1)
          {
            fprintf (stderr, "stress: final read: %s\n", nbd_get_error ());
            exit (EXIT_FAILURE);
          }
      failures
          += compare_with_model (got, "read back through a new connection");
      free (got);
      nbd_shutdown (h, 0);
      nbd_close (h);
      stop_server (SIGTERM);
      if (after_cmd && run_hook ("--after", after_cmd) != 0)
        failures++;
      if (image)
        {
          uint8_t *disk = read_file (image);
          failures += compare_with_model (disk, "the image after SIGTERM");
          free (disk);
        }
    }
  free_run ();
  return failures;
}

static void
usage (void)
{
  fprintf (stderr,
           "usage: stress [--end=kill|clean] [--kills=N] [--secs=S] "
           "[--conns=N] [--depth=N] [--size=BYTES] [--split=BYTES] "
           "[--seed=N] [--image=FILE] [--errfile=FILE] [--errors-ok] "
           "[--all-acked] [--control] [--ops=W,FUA,ZERO,TRIM,FLUSH,READ] "
           "[--before=CMD] [--after=CMD] "
           "--socket=PATH [--log=FILE] -- NBDKIT-ARGS...\n");
  exit (EXIT_FAILURE);
}

int
main (int argc, char *argv[])
{
  static const struct option long_opts[] = {
    { "end", required_argument, NULL, 'e' },
    { "kills", required_argument, NULL, 'k' },
    { "secs", required_argument, NULL, 't' },
    { "conns", required_argument, NULL, 'c' },
    { "depth", required_argument, NULL, 'd' },
    { "size", required_argument, NULL, 's' },
    { "split", required_argument, NULL, 'S' },
    { "seed", required_argument, NULL, 'r' },
    { "image", required_argument, NULL, 'i' },
    { "errfile", required_argument, NULL, 'E' },
    { "errors-ok", no_argument, NULL, 'o' },
    { "all-acked", no_argument, NULL, 'a' },
    { "control", no_argument, NULL, 'C' },
    { "ops", required_argument, NULL, 'O' },
    { "socket", required_argument, NULL, 'u' },
    { "log", required_argument, NULL, 'l' },
    { "before", required_argument, NULL, 'B' },
    { "after", required_argument, NULL, 'A' },
    { NULL },
  };
  unsigned long failures = 0;
  unsigned run;
  int c;

  seed = (uint64_t)time (NULL) ^ (uint64_t)getpid () << 20;
  split = UINT64_MAX;
  while ((c = getopt_long (argc, argv, "", long_opts, NULL)) != -1)
    switch (c)
      {
      case 'e':
        if (strcmp (optarg, "kill") == 0)
          end_kill = true;
        else if (strcmp (optarg, "clean") != 0)
          usage ();
        break;
      case 'k':
        kills = strtoul (optarg, NULL, 0);
        break;
      case 't':
        secs = strtod (optarg, NULL);
        break;
      case 'c':
        n_conns = strtoul (optarg, NULL, 0);
        break;
      case 'd':
        depth = strtoul (optarg, NULL, 0);
        break;
      case 's':
        size = strtoull (optarg, NULL, 0);
        break;
      case 'S':
        split = strtoull (optarg, NULL, 0);
        break;
      case 'r':
        seed = strtoull (optarg, NULL, 0);
        break;
      case 'i':
        image = optarg;
        break;
      case 'E':
        errfile = optarg;
        break;
      case 'o':
        errors_ok = true;
        break;
      case 'a':
        all_acked = true;
        break;
      case 'C':
        control = true;
        break;
      case 'O':
        if (sscanf (optarg, "%u,%u,%u,%u,%u,%u", &w_write, &w_fua, &w_zero,
                    &w_trim, &w_flush, &w_read)
            != 6)
          usage ();
        break;
      case 'u':
        sock_path = optarg;
        break;
      case 'l':
        log_path = optarg;
        break;
      case 'B':
        before_cmd = optarg;
        break;
      case 'A':
        after_cmd = optarg;
        break;
      default:
        usage ();
      }
  if (split == UINT64_MAX)
    split = size / 2;
  if (optind >= argc || sock_path == NULL || n_conns < 1 || n_conns > 64
      || depth < 1 || depth > MAX_DEPTH || split > size
      || (end_kill && image == NULL) || split < (uint64_t)STRIPE_SMALL * n_conns
      || (split < size && size - split < (uint64_t)STRIPE_LARGE * n_conns)
      || w_write + w_fua + w_zero + w_trim + w_flush + w_read == 0)
    usage ();
  server_argv = &argv[optind];
  signal (SIGPIPE, SIG_IGN);

  init_data = malloc (size);
  model = malloc (size);
  undefined = malloc (size);
  conns = calloc (n_conns, sizeof *conns);
  if (!init_data || !model || !undefined || !conns)
    {
      perror ("malloc");
      exit (EXIT_FAILURE);
    }
  printf ("stress: seed %" PRIu64 ", %s, %u run(s), %u connections x %u\n",
          seed, end_kill ? "kill -9" : "clean end", end_kill ? kills : 1,
          n_conns, depth);
  fflush (stdout);

  for (run = 0; run < (end_kill ? kills : 1); ++run)
    {
      unsigned long f = run_once (run);
      failures += f;
      if (f && !control)
        break;
    }

  if (end_kill)
    printf ("stress: %u kill(s): %llu required requests, %llu bytes "
            "checked, %lu failure(s)\n",
            run, total_checked_ops, total_checked_bytes, failures);
  else
    printf ("stress: clean end: %lu failure(s)\n", failures);
  if (control)
    {
      /* Positive control: losing unflushed writes must be seen. */
      if (failures == 0)
        {
          fprintf (stderr, "stress: control: the check found nothing lost, "
                           "so it could not catch a real loss\n");
          return EXIT_FAILURE;
        }
      printf ("stress: control: the check saw %lu lost bytes, as it must\n",
              failures);
      return EXIT_SUCCESS;
    }
  return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
