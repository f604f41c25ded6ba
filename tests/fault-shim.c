/* nbdstack tests: fault injection into the image plugin's file I/O.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Preloaded into nbdkit (LD_PRELOAD) by test-image-faults.sh.  It wraps
 * the calls the raw format makes on its image (check with nm -D on the
 * plugin: pread, pwrite, pwritev2, fallocate, ioctl; preadv2 too, in
 * case it is ever used) and makes them fail or come up short, but only
 * on file descriptors opened with exactly the path in FAULT_PATH, so that
 * nbdkit's sockets, the plugin's /sys reads and anything else in the
 * process are left alone.  Everything is off unless asked for:
 *
 *   FAULT_PATH=PATH       the image (file or block device), as opened
 *   FAULT_SEED=N          seed of the random choices (default 1)
 *   FAULT_EIO=PCT         pread/pwrite/preadv2/pwritev2 fail with EIO,
 *   FAULT_EINTR=PCT       ... with EINTR,
 *   FAULT_SHORT=PCT       ... or transfer fewer bytes than asked, in
 *                         PCT percent of the calls (decimals allowed);
 *                         nothing is transferred by a failed call
 *   FAULT_DSYNC=ERRNO     pwritev2 with RWF_DSYNC always fails with ERRNO
 *   FAULT_FALLOCATE=KIND=ERRNO[@PCT],...   fallocate of KIND (punch:
 *                         PUNCH_HOLE, zero: ZERO_RANGE, alloc: other
 *                         modes) fails with ERRNO, in PCT percent of the
 *                         calls (default 100)
 *   FAULT_IOCTL=KIND=ERRNO[@PCT],...       the same for the ioctls
 *                         BLKZEROOUT (zeroout) and BLKDISCARD (discard)
 *   FAULT_PREAD_DELAY_MS=N  every pread of the image sleeps N ms first
 *                         (a slow disk under a read-then-write sequence,
 *                         to widen a race window)
 *   FAULT_LOG=FILE        at exit, append one line of counters to FILE
 *
 * ERRNO is a name: EIO, EINTR, EOPNOTSUPP, ENOTSUP, ENOTTY, ENOSYS,
 * EINVAL or ENOSPC.  Short transfers on an O_DIRECT fd are multiples of
 * its O_DIRECT alignment (statx STATX_DIOALIGN; 4096 if unknown), as the
 * kernel's are, so that the rest stays aligned; a transfer of one unit
 * on such an fd is never shortened.
 *
 * The counter line (fault-shim pid=N name=count ...) counts the calls
 * seen on the image and the faults injected, so a test can tell that
 * faults really happened.  nbdkit forks into the background after
 * opening the image; the child starts from zero and each process writes
 * its own line, so the lines add up.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "prng.h"

#define MAX_FD 65536
#define DIO_UNIT_UNKNOWN 4096
#define MAX_IOV 64
/* Probabilities are in units of 1/1000 of a percent. */
#define ROLL_RANGE 100000

enum counter
{
  C_OPENS,
  C_PREAD,
  C_PWRITE,
  C_PREADV2,
  C_PWRITEV2,
  C_FALLOCATE,
  C_IOCTL,
  C_EIO_READ,
  C_EIO_WRITE,
  C_EINTR,
  C_SHORT,
  C_DSYNC,
  C_FALLOC_PUNCH,
  C_FALLOC_ZERO,
  C_FALLOC_ALLOC,
  C_IOCTL_ZEROOUT,
  C_IOCTL_DISCARD,
  NR_COUNTERS
};
static const char *const counter_names[NR_COUNTERS] = {
  "opens",         "pread",       "pwrite",       "preadv2",
  "pwritev2",      "fallocate",   "ioctl",        "eio_read",
  "eio_write",     "eintr",       "short",        "dsync",
  "falloc_punch",  "falloc_zero", "falloc_alloc", "ioctl_zeroout",
  "ioctl_discard",
};
static atomic_ulong counters[NR_COUNTERS];

/* One fault an fallocate or ioctl kind may get. */
struct call_fault
{
  int err; /* 0: none */
  unsigned prob;
};
enum
{
  K_PUNCH,
  K_ZERO,
  K_ALLOC,
  K_ZEROOUT,
  K_DISCARD,
  NR_KINDS
};
static const char *const kind_names[NR_KINDS]
    = { "punch", "zero", "alloc", "zeroout", "discard" };
static const int kind_counter[NR_KINDS]
    = { C_FALLOC_PUNCH, C_FALLOC_ZERO, C_FALLOC_ALLOC, C_IOCTL_ZEROOUT,
        C_IOCTL_DISCARD };

static struct
{
  const char *path;
  uint64_t seed;
  unsigned eio, eintr, short_io; /* probabilities */
  int dsync_err;
  struct call_fault kinds[NR_KINDS];
  const char *log;
  unsigned pread_delay_ms;
} cfg;

/* Per fd: FD_TRACKED, and FD_DIRECT if opened with O_DIRECT, with the
 * fd's O_DIRECT alignment in dio_unit[].
 */
#define FD_TRACKED 1
#define FD_DIRECT 2
static atomic_uchar fds[MAX_FD];
static atomic_uint dio_unit[MAX_FD];

static atomic_uint_fast64_t roll_count;

static ssize_t (*real_pread) (int, void *, size_t, off_t);
static ssize_t (*real_pwrite) (int, const void *, size_t, off_t);
static ssize_t (*real_preadv2) (int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev2) (int, const struct iovec *, int, off_t, int);
static int (*real_fallocate) (int, int, off_t, off_t);
static int (*real_ioctl) (int, unsigned long, ...);
static int (*real_open) (const char *, int, ...);
static int (*real_open64) (const char *, int, ...);
static int (*real_openat) (int, const char *, int, ...);
static int (*real_openat64) (int, const char *, int, ...);
static int (*real___open_2) (const char *, int);
static int (*real___open64_2) (const char *, int);
static int (*real_close) (int);

static void
die (const char *msg, const char *arg)
{
  fprintf (stderr, "fault-shim: %s%s\n", msg, arg ? arg : "");
  _exit (2);
}

static void *
next_symbol (const char *name)
{
  void *p = dlsym (RTLD_NEXT, name);

  if (p == NULL)
    die ("cannot find ", name);
  return p;
}

static int
parse_errno (const char *s, size_t len)
{
  static const struct
  {
    const char *name;
    int err;
  } names[] = {
    { "EIO", EIO },         { "EINTR", EINTR },   { "EOPNOTSUPP", EOPNOTSUPP },
    { "ENOTSUP", ENOTSUP }, { "ENOTTY", ENOTTY }, { "ENOSYS", ENOSYS },
    { "EINVAL", EINVAL },   { "ENOSPC", ENOSPC },
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
    if (strlen (names[i].name) == len && strncmp (s, names[i].name, len) == 0)
      return names[i].err;
  die ("unknown errno name in ", s);
  return 0;
}

/* "2.5" percent -> 2500 (of ROLL_RANGE). */
static unsigned
parse_prob (const char *s)
{
  char *end;
  double pct = strtod (s, &end);

  if (end == s || pct < 0 || pct > 100 || (*end && *end != ','))
    die ("bad percentage: ", s);
  return (unsigned)(pct * (ROLL_RANGE / 100) + 0.5);
}

static unsigned
env_prob (const char *name)
{
  const char *s = getenv (name);

  return s && *s ? parse_prob (s) : 0;
}

/* KIND=ERRNO[@PCT],... for the kinds in [first, last). */
static void
parse_kinds (const char *var, int first, int last)
{
  const char *s = getenv (var);

  while (s && *s)
    {
      const char *eq = strchr (s, '='), *end = strchrnul (s, ',');
      const char *at;
      int k;

      if (eq == NULL || eq > end)
        die ("expected KIND=ERRNO[@PCT] in ", s);
      for (k = first; k < last; ++k)
        if (strlen (kind_names[k]) == (size_t)(eq - s)
            && strncmp (s, kind_names[k], eq - s) == 0)
          break;
      if (k == last)
        die ("unknown kind in ", s);
      at = memchr (eq, '@', end - eq);
      cfg.kinds[k].err = parse_errno (eq + 1, (at ? at : end) - (eq + 1));
      cfg.kinds[k].prob = at ? parse_prob (at + 1) : ROLL_RANGE;
      s = *end ? end + 1 : end;
    }
}

/* The child of nbdkit's fork counts only what it does itself. */
static void
reset_counters (void)
{
  for (int i = 0; i < NR_COUNTERS; ++i)
    atomic_store (&counters[i], 0);
}

/* Resolved on first use, which may come before our constructor runs
 * (from another preloaded library's).
 */
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void
resolve (void)
{
  real_pread = next_symbol ("pread");
  real_pwrite = next_symbol ("pwrite");
  real_preadv2 = next_symbol ("preadv2");
  real_pwritev2 = next_symbol ("pwritev2");
  real_fallocate = next_symbol ("fallocate");
  real_ioctl = next_symbol ("ioctl");
  real_open = next_symbol ("open");
  real_open64 = next_symbol ("open64");
  real_openat = next_symbol ("openat");
  real_openat64 = next_symbol ("openat64");
  real___open_2 = next_symbol ("__open_2");
  real___open64_2 = next_symbol ("__open64_2");
  real_close = next_symbol ("close");
}

#define RESOLVE() pthread_once (&resolve_once, resolve)

__attribute__ ((constructor)) static void
init (void)
{
  const char *s;

  RESOLVE ();
  cfg.path = getenv ("FAULT_PATH");
  if (cfg.path && !*cfg.path)
    cfg.path = NULL;
  s = getenv ("FAULT_SEED");
  cfg.seed = s ? strtoull (s, NULL, 0) : 1;
  cfg.eio = env_prob ("FAULT_EIO");
  cfg.eintr = env_prob ("FAULT_EINTR");
  cfg.short_io = env_prob ("FAULT_SHORT");
  if ((uint64_t)cfg.eio + cfg.eintr + cfg.short_io > ROLL_RANGE)
    die ("FAULT_EIO + FAULT_EINTR + FAULT_SHORT exceed 100%", NULL);
  s = getenv ("FAULT_DSYNC");
  cfg.dsync_err = s && *s ? parse_errno (s, strlen (s)) : 0;
  parse_kinds ("FAULT_FALLOCATE", K_PUNCH, K_ZEROOUT);
  parse_kinds ("FAULT_IOCTL", K_ZEROOUT, NR_KINDS);
  cfg.log = getenv ("FAULT_LOG");
  s = getenv ("FAULT_PREAD_DELAY_MS");
  cfg.pread_delay_ms = s ? (unsigned)strtoul (s, NULL, 10) : 0;
  pthread_atfork (NULL, NULL, reset_counters);
}

__attribute__ ((destructor)) static void
report (void)
{
  char line[1024];
  int len, fd;

  if (cfg.log == NULL || real_open == NULL)
    return;
  len = snprintf (line, sizeof line, "fault-shim pid=%d", (int)getpid ());
  for (int i = 0; i < NR_COUNTERS && len < (int)sizeof line; ++i)
    len += snprintf (line + len, sizeof line - len, " %s=%lu", counter_names[i],
                     atomic_load (&counters[i]));
  if (len >= (int)sizeof line - 1)
    len = sizeof line - 2;
  line[len++] = '\n';
  /* One write in append mode: lines of several processes never mix. */
  fd = real_open (cfg.log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd == -1 || write (fd, line, len) != len)
    fprintf (stderr, "fault-shim: %s: %m\n", cfg.log);
  if (fd >= 0)
    real_close (fd);
}

static inline void
count (enum counter c)
{
  atomic_fetch_add_explicit (&counters[c], 1, memory_order_relaxed);
}

/* splitmix64 of a shared counter: thread-safe, no locks. */
static uint64_t
random64 (void)
{
  return prng_mix (cfg.seed
                   + (atomic_fetch_add (&roll_count, 1) + 1)
                         * 0x9e3779b97f4a7c15ULL);
}

static unsigned
fd_flags (int fd)
{
  return fd >= 0 && fd < MAX_FD ? atomic_load (&fds[fd]) : 0;
}

/* The unit of short O_DIRECT transfers on fd: its offset alignment. */
static unsigned
direct_unit (int fd)
{
  struct statx stx;

  if (statx (fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0
      && (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0)
    return stx.stx_dio_offset_align;
  return DIO_UNIT_UNKNOWN;
}

static int
track (int fd, const char *path, int flags)
{
  if (fd >= 0 && fd < MAX_FD)
    {
      unsigned char f = 0;
      if (cfg.path && path && strcmp (path, cfg.path) == 0)
        {
          f = FD_TRACKED;
          if (flags & O_DIRECT)
            {
              f |= FD_DIRECT;
              atomic_store (&dio_unit[fd], direct_unit (fd));
            }
          count (C_OPENS);
        }
      atomic_store (&fds[fd], f);
    }
  return fd;
}

/* What to do with a read or write of count bytes on a tracked fd:
 * returns -1 with errno set to fail it, else the (maybe smaller) count
 * to transfer.
 */
static ssize_t
io_fault (int fd, unsigned flags, size_t count_, bool is_write)
{
  uint64_t r = random64 ();
  unsigned roll = r % ROLL_RANGE;

  if (roll < cfg.eio)
    {
      count (is_write ? C_EIO_WRITE : C_EIO_READ);
      errno = EIO;
      return -1;
    }
  roll -= cfg.eio;
  if (roll < cfg.eintr)
    {
      count (C_EINTR);
      errno = EINTR;
      return -1;
    }
  roll -= cfg.eintr;
  if (roll < cfg.short_io)
    {
      size_t n = count_;
      r >>= 20;
      if (flags & FD_DIRECT)
        {
          size_t unit = atomic_load (&dio_unit[fd]);
          if (count_ > unit)
            n = unit * (1 + r % ((count_ - 1) / unit));
        }
      else if (count_ > 1)
        n = 1 + r % (count_ - 1);
      if (n < count_)
        count (C_SHORT);
      return n;
    }
  return count_;
}

ssize_t
pread (int fd, void *buf, size_t n, off_t offset)
{
  unsigned f = fd_flags (fd);
  ssize_t m;

  RESOLVE ();
  if (!(f & FD_TRACKED))
    return real_pread (fd, buf, n, offset);
  count (C_PREAD);
  if (cfg.pread_delay_ms)
    usleep (cfg.pread_delay_ms * 1000);
  m = io_fault (fd, f, n, false);
  return m == -1 ? -1 : real_pread (fd, buf, m, offset);
}

ssize_t
pwrite (int fd, const void *buf, size_t n, off_t offset)
{
  unsigned f = fd_flags (fd);
  ssize_t m;

  RESOLVE ();
  if (!(f & FD_TRACKED))
    return real_pwrite (fd, buf, n, offset);
  count (C_PWRITE);
  m = io_fault (fd, f, n, true);
  return m == -1 ? -1 : real_pwrite (fd, buf, m, offset);
}

/* Shorten an iovec array to n bytes in total, into out[]. */
static int
trim_iov (const struct iovec *iov, int iovcnt, size_t n, struct iovec *out)
{
  int i;

  for (i = 0; i < iovcnt && n > 0; ++i)
    {
      out[i] = iov[i];
      if (out[i].iov_len > n)
        out[i].iov_len = n;
      n -= out[i].iov_len;
    }
  return i;
}

static ssize_t
vec_io (int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags,
        bool is_write)
{
  unsigned f = fd_flags (fd);
  struct iovec copy[MAX_IOV];
  size_t total = 0;
  ssize_t m;

  RESOLVE ();
  if (f & FD_TRACKED)
    {
      count (is_write ? C_PWRITEV2 : C_PREADV2);
      if (is_write && cfg.dsync_err && (flags & RWF_DSYNC))
        {
          count (C_DSYNC);
          errno = cfg.dsync_err;
          return -1;
        }
      if (iovcnt > 0 && iovcnt <= MAX_IOV)
        {
          for (int i = 0; i < iovcnt; ++i)
            total += iov[i].iov_len;
          m = io_fault (fd, f, total, is_write);
          if (m == -1)
            return -1;
          if ((size_t)m < total)
            {
              iovcnt = trim_iov (iov, iovcnt, m, copy);
              iov = copy;
            }
        }
    }
  return is_write ? real_pwritev2 (fd, iov, iovcnt, offset, flags)
                  : real_preadv2 (fd, iov, iovcnt, offset, flags);
}

ssize_t
preadv2 (int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
  return vec_io (fd, iov, iovcnt, offset, flags, false);
}

ssize_t
pwritev2 (int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
  return vec_io (fd, iov, iovcnt, offset, flags, true);
}

/* Fail a call of this kind now? */
static bool
call_fault (int kind)
{
  const struct call_fault *c = &cfg.kinds[kind];

  if (c->err == 0 || random64 () % ROLL_RANGE >= c->prob)
    return false;
  count (kind_counter[kind]);
  errno = c->err;
  return true;
}

int
fallocate (int fd, int mode, off_t offset, off_t len)
{
  RESOLVE ();
  if (fd_flags (fd) & FD_TRACKED)
    {
      int kind = (mode & FALLOC_FL_PUNCH_HOLE)   ? K_PUNCH
                 : (mode & FALLOC_FL_ZERO_RANGE) ? K_ZERO
                                                 : K_ALLOC;
      count (C_FALLOCATE);
      if (call_fault (kind))
        return -1;
    }
  return real_fallocate (fd, mode, offset, len);
}

int
ioctl (int fd, unsigned long request, ...)
{
  va_list ap;
  void *arg;

  RESOLVE ();
  va_start (ap, request);
  arg = va_arg (ap, void *);
  va_end (ap);
  if (fd_flags (fd) & FD_TRACKED)
    {
      count (C_IOCTL);
      if ((request == BLKZEROOUT && call_fault (K_ZEROOUT))
          || (request == BLKDISCARD && call_fault (K_DISCARD)))
        return -1;
    }
  return real_ioctl (fd, request, arg);
}

/* open (2) takes a mode only with O_CREAT or O_TMPFILE. */
#define GET_MODE(flags, mode)                                                  \
  do                                                                           \
    {                                                                          \
      if ((flags) & (O_CREAT | __O_TMPFILE))                                   \
        {                                                                      \
          va_list ap;                                                          \
          va_start (ap, flags);                                                \
          mode = va_arg (ap, mode_t);                                          \
          va_end (ap);                                                         \
        }                                                                      \
    }                                                                          \
  while (0)

int
open (const char *path, int flags, ...)
{
  mode_t mode = 0;

  RESOLVE ();
  GET_MODE (flags, mode);
  return track (real_open (path, flags, mode), path, flags);
}

int
open64 (const char *path, int flags, ...)
{
  mode_t mode = 0;

  RESOLVE ();
  GET_MODE (flags, mode);
  return track (real_open64 (path, flags, mode), path, flags);
}

int
openat (int dirfd, const char *path, int flags, ...)
{
  mode_t mode = 0;

  RESOLVE ();
  GET_MODE (flags, mode);
  return track (real_openat (dirfd, path, flags, mode), path, flags);
}

int
openat64 (int dirfd, const char *path, int flags, ...)
{
  mode_t mode = 0;

  RESOLVE ();
  GET_MODE (flags, mode);
  return track (real_openat64 (dirfd, path, flags, mode), path, flags);
}

/* With _FORTIFY_SOURCE (Debian's package builds), open without a mode
 * argument compiles to a call of __open_2 or __open64_2 instead.
 */
int
__open_2 (const char *path, int flags)
{
  RESOLVE ();
  return track (real___open_2 (path, flags), path, flags);
}

int
__open64_2 (const char *path, int flags)
{
  RESOLVE ();
  return track (real___open64_2 (path, flags), path, flags);
}

int
close (int fd)
{
  RESOLVE ();
  /* Forget the fd first: once closed, its number may be reused by a
   * socket at any moment.
   */
  if (fd >= 0 && fd < MAX_FD)
    atomic_store (&fds[fd], 0);
  return real_close (fd);
}
