/* nbdstack-nbd: a qemu-nbd command line, served by nbdkit.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Pipelines (oVirt imageio, vdsm, scripts) start their NBD server as
 * qemu-nbd.  This command takes the same command line, translates it
 * into an nbdkit command line with the image plugin and our filters,
 * and runs nbdkit as its child (supervise.c), so that the server is
 * nbdkit and those pipelines switch by changing one program name.
 * -L is a client instead (list.c).
 *
 * Options are parsed with the same getopt_long table as qemu-nbd 7.2,
 * and checked in the same order with the same outcome: what qemu-nbd
 * refuses, this refuses (exit 1); what it accepts is either served
 * with the same meaning or refused with one line naming the option.
 * Nothing is silently ignored.  See nbdstack-nbd.pod for the table.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "imagespec.h"
#include "list.h"
#include "probe.h"
#include "settings.h"
#include "supervise.h"

/* The qemu-nbd whose command line this implements.  The first line of
 * --version puts it where qemu-nbd puts its own version, because tools
 * parse it: imageio passes --allocation-depth and "backing": null only
 * to qemu-nbd >= 5.2.0, and fails to parse anything that is not a
 * dotted version.
 */
#define QEMU_NBD_COMPAT_VERSION "7.2.0"

/* qemu's NBD_MAX_STRING_SIZE: longer names and descriptions are
 * refused by qemu-nbd, and by the NBD protocol.
 */
#define NBD_MAX_STRING 4096

static const char *progname = "nbdstack-nbd";

static void __attribute__ ((format (printf, 1, 2), noreturn))
die (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: ", progname);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

static __attribute__ ((format (printf, 1, 2))) void
warn (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: warning: ", progname);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

enum cache_mode
{
  CACHE_WRITEBACK,
  CACHE_NONE,
  CACHE_WRITETHROUGH,
  CACHE_DIRECTSYNC,
  CACHE_UNSAFE
};

enum detect_zeroes
{
  DZ_OFF,
  DZ_ON,
  DZ_UNMAP
};

/* The parsed command line. */
struct cmdline
{
  const char *bind, *port, *sockpath;
  const char *export_name, *description;
  int shared;
  bool persistent, verbose;
  uint64_t offset; /* -o; 0 means none, as in qemu-nbd */
  bool readonly;
  const char *snapshot; /* -l */
  const char *format;
  bool image_opts;
  bool seen_cache;
  enum cache_mode cache;
  bool seen_aio, aio_native;
  bool seen_discard, discard_unmap;
  enum detect_zeroes detect_zeroes;
  bool alloc_depth;
  bool fork_process;
  bool list; /* -L */
  const char *pid_file;
  const char *selinux_label;
  const char *filename;
  char *refusal; /* the first option we cannot honour, and why */
};

/* Remember the first option we cannot honour.  It is reported after
 * parsing, as qemu-nbd reports its own late errors, so that --help and
 * --version still work on any command line, as they do there.
 */
static void __attribute__ ((format (printf, 2, 3)))
refuse (struct cmdline *c, const char *fmt, ...)
{
  va_list ap;

  if (c->refusal)
    return;
  va_start (ap, fmt);
  if (vasprintf (&c->refusal, fmt, ap) == -1)
    c->refusal = NULL;
  va_end (ap);
  if (c->refusal == NULL)
    die ("out of memory");
}

/* ---- nbdkit itself */

static const char *
nbdkit_program (void)
{
  const char *p = getenv ("NBDSTACK_NBDKIT");

  return p && *p ? p : "nbdkit";
}

/* "1.32.5" from `nbdkit --version`, or NULL if it cannot be run. */
static char *
nbdkit_version (void)
{
  int fds[2], status;
  char buf[256], *v = NULL, *sp;
  size_t len = 0;
  ssize_t n;
  pid_t pid;

  if (pipe2 (fds, O_CLOEXEC) == -1)
    return NULL;
  pid = fork ();
  if (pid == -1)
    {
      close (fds[0]);
      close (fds[1]);
      return NULL;
    }
  if (pid == 0)
    {
      int null = open ("/dev/null", O_RDWR);

      dup2 (fds[1], STDOUT_FILENO);
      if (null >= 0)
        dup2 (null, STDERR_FILENO);
      execlp (nbdkit_program (), nbdkit_program (), "--version", NULL);
      _exit (127);
    }
  close (fds[1]);
  while (len < sizeof buf - 1
         && (n = read (fds[0], buf + len, sizeof buf - 1 - len)) != 0)
    {
      if (n == -1)
        {
          if (errno == EINTR)
            continue;
          break;
        }
      len += n;
    }
  buf[len] = '\0';
  close (fds[0]);
  while (waitpid (pid, &status, 0) == -1 && errno == EINTR)
    ;
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    return NULL;
  /* "nbdkit 1.32.5\n" */
  sp = strchr (buf, ' ');
  if (sp == NULL)
    return NULL;
  sp++;
  sp[strcspn (sp, " \n")] = '\0';
  if (*sp)
    v = strdup (sp);
  return v;
}

/* The build tree this executable was run from, or NULL: the program is
 * BUILDDIR/nbd/nbdstack-nbd (or, under a libtool wrapper,
 * BUILDDIR/nbd/.libs/...), and the build tree has the image plugin.
 * Found from /proc/self/exe, as nbdkit's ./nbdkit wrapper finds its
 * own tree from where it is.
 */
static char *
exe_builddir (void)
{
  char exe[PATH_MAX], *dir, *p;
  ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);

  if (n <= 0)
    return NULL;
  exe[n] = '\0';
  for (int up = 0; up < 2; ++up)
    {
      /* Strip the last component: EXE's directory, then its parent. */
      p = strrchr (exe, '/');
      if (p == NULL || p == exe)
        return NULL;
      *p = '\0';
      if (up == 0)
        {
          p = strrchr (exe, '/');
          if (p && strcmp (p, "/.libs") == 0)
            *p = '\0';
        }
    }
  if (asprintf (&dir, "%s/plugins/image/.libs/nbdkit-image-plugin.so", exe)
      == -1)
    return NULL;
  if (access (dir, R_OK) == -1)
    {
      free (dir);
      return NULL;
    }
  free (dir);
  return strdup (exe);
}

/* Where our plugin and filters are: the build tree named by
 * NBDSTACK_BUILDDIR, else the build tree this program was run from,
 * else the directories they were installed into.  Our filters are
 * always named by path, so a private install does not depend on
 * nbdkit's own filterdir.
 */
static char *
component_path (const char *kind, const char *name)
{
  static char *builddir;
  static bool looked;
  const char *env = getenv ("NBDSTACK_BUILDDIR");
  char *p;
  int r;

  if (!looked)
    {
      looked = true;
      builddir = env && *env ? strdup (env) : exe_builddir ();
    }
  if (builddir)
    r = asprintf (&p, "%s/%ss/%s/.libs/nbdkit-%s-%s.so", builddir, kind, name,
                  name, kind);
  else
    r = asprintf (&p, "%s/nbdkit-%s-%s.so",
                  strcmp (kind, "plugin") == 0 ? PLUGINDIR : FILTERDIR, name,
                  kind);
  if (r == -1)
    die ("out of memory");
  if (access (p, R_OK) == -1)
    die ("%s: %m (is nbdstack installed? NBDSTACK_BUILDDIR names a build "
         "tree)",
         p);
  return p;
}

/* ---- help and version */

static void
usage (void)
{
  /* clang-format off */
  printf (
"Usage: %s [OPTIONS] FILE\n"
"  or:  %s -L [OPTIONS]\n"
"A qemu-nbd compatible command: serves FILE with nbdkit, the nbdstack image\n"
"plugin and the nbdstack filters.  The command line is qemu-nbd's.\n"
"\n"
"Connection properties:\n"
"  -p, --port=PORT           port to listen on (default `10809')\n"
"  -b, --bind=IFACE          interface to bind to (default `0.0.0.0')\n"
"  -k, --socket=PATH         path to the unix socket\n"
"  -e, --shared=NUM          serve at most NUM clients at once (default 1,\n"
"                            0 for no limit); more are refused, not queued\n"
"  -t, --persistent          don't exit when the last client leaves\n"
"  -v, --verbose             with --fork, keep stderr open (as qemu-nbd);\n"
"                            nbdkit's debug output is nbdkit-debug=on\n"
"  -x, --export-name=NAME    the export's name (default is empty string)\n"
"  -D, --description=TEXT    the export's description\n"
"  --fork                    fork off the server and exit once it is ready\n"
"  --pid-file=PATH           store the server's (nbdkit's) process ID there\n"
"  --selinux-label=LABEL     nbdkit --selinux-label (needs --socket)\n"
"  systemd socket activation (LISTEN_FDS=1) is passed to nbdkit\n"
"\n"
"The image:\n"
"  FILE                      a file or block device, file:PATH,\n"
"                            host_device:PATH, or json:{...} with drivers\n"
"                            raw (offset, size), qcow2 (\"backing\": null),\n"
"                            file, host_device\n"
"  --image-opts              FILE is driver=...,file.filename=... instead\n"
"  -f, --format=FORMAT       raw or qcow2 (default: probed)\n"
"  -r, --read-only           export read-only\n"
"  -o, --offset=OFFSET       offset into the image\n"
"  -l, --load-snapshot=SNAPSHOT_PARAM\n"
"                            serve a qcow2 internal snapshot, read-only:\n"
"                            ID_OR_NAME, snapshot.id=ID or snapshot.name=NAME\n"
"\n"
"Behaviour:\n"
"  -n, --nocache             same as --cache=none\n"
"      --cache=MODE          none, directsync (O_DIRECT), writeback (default),\n"
"                            writethrough, unsafe: qemu's meaning of each\n"
"      --aio=MODE            native, io_uring or threads: accepted, no effect\n"
"      --discard=MODE        ignore (default) or unmap\n"
"      --detect-zeroes=MODE  off (default), on or unmap (needs --discard=unmap)\n"
"  -A, --allocation-depth    accepted with a warning: qemu:allocation-depth\n"
"                            is not offered (nbdkit has no way to)\n"
"\n"
"Refused with exit status 1 (see nbdstack-nbd(1) for why):\n"
"  -s/--snapshot, -c/--connect, -d/--disconnect, -B/--bitmap,\n"
"  -T/--trace, --object, --tls-creds, --tls-authz, --tls-hostname\n"
"\n"
"  -L, --list                list the exports of the server at -k, or -b/-p\n"
"                            (qemu-nbd's output; with libnbd)\n"
"\n"
"  -h, --help                display this help and exit\n"
"  -V, --version             output version information and exit\n"
"\n"
"Environment: NBDSTACK_NBDKIT, the nbdkit to run (default: nbdkit from PATH).\n"
"Our own settings, key=value, come from NBDSTACK_OPTIONS (blank-separated)\n"
"over the config file NBDSTACK_CONFIG (default %s):\n",
          progname, progname, DEFAULT_CONFIG);
  /* clang-format on */
  settings_print_keys ();
}

static void
version (void)
{
  char *nv = nbdkit_version ();

  printf ("%s %s (nbdstack %s, nbdkit %s)\n", progname, QEMU_NBD_COMPAT_VERSION,
          PACKAGE_VERSION, nv ? nv : "not found");
  printf ("The qemu-nbd %s command line, served by nbdkit (%s).\n",
          QEMU_NBD_COMPAT_VERSION, nbdkit_program ());
  printf ("nbdstack %s, filters built for nbdkit %s.\n", PACKAGE_VERSION,
          NBDKIT_BUILD_VERSION);
  free (nv);
}

/* ---- option parsing, as qemu-nbd does it */

enum
{
  OPT_CACHE = 256,
  OPT_AIO,
  OPT_DISCARD,
  OPT_DETECT_ZEROES,
  OPT_OBJECT,
  OPT_TLSCREDS,
  OPT_IMAGE_OPTS,
  OPT_FORK,
  OPT_TLSAUTHZ,
  OPT_PID_FILE,
  OPT_SELINUX_LABEL,
  OPT_TLSHOSTNAME
};

/* Exactly qemu-nbd 7.2's tables.  An option of ours added here would
 * change which abbreviations (--pers, --exp) getopt_long accepts.
 */
static const char short_options[] = "hVb:o:p:rsnc:dvk:e:f:tl:x:T:D:AB:L";
static const struct option long_options[]
    = { { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "bind", required_argument, NULL, 'b' },
        { "port", required_argument, NULL, 'p' },
        { "socket", required_argument, NULL, 'k' },
        { "offset", required_argument, NULL, 'o' },
        { "read-only", no_argument, NULL, 'r' },
        { "allocation-depth", no_argument, NULL, 'A' },
        { "bitmap", required_argument, NULL, 'B' },
        { "connect", required_argument, NULL, 'c' },
        { "disconnect", no_argument, NULL, 'd' },
        { "list", no_argument, NULL, 'L' },
        { "snapshot", no_argument, NULL, 's' },
        { "load-snapshot", required_argument, NULL, 'l' },
        { "nocache", no_argument, NULL, 'n' },
        { "cache", required_argument, NULL, OPT_CACHE },
        { "aio", required_argument, NULL, OPT_AIO },
        { "discard", required_argument, NULL, OPT_DISCARD },
        { "detect-zeroes", required_argument, NULL, OPT_DETECT_ZEROES },
        { "shared", required_argument, NULL, 'e' },
        { "format", required_argument, NULL, 'f' },
        { "persistent", no_argument, NULL, 't' },
        { "verbose", no_argument, NULL, 'v' },
        { "object", required_argument, NULL, OPT_OBJECT },
        { "export-name", required_argument, NULL, 'x' },
        { "description", required_argument, NULL, 'D' },
        { "tls-creds", required_argument, NULL, OPT_TLSCREDS },
        { "tls-hostname", required_argument, NULL, OPT_TLSHOSTNAME },
        { "tls-authz", required_argument, NULL, OPT_TLSAUTHZ },
        { "image-opts", no_argument, NULL, OPT_IMAGE_OPTS },
        { "trace", required_argument, NULL, 'T' },
        { "fork", no_argument, NULL, OPT_FORK },
        { "pid-file", required_argument, NULL, OPT_PID_FILE },
        { "selinux-label", required_argument, NULL, OPT_SELINUX_LABEL },
        { NULL, 0, NULL, 0 } };

/* qemu_strtoi (base 0, the whole string, in range). */
static int
parse_int (const char *s, int *out)
{
  char *end;
  long v;

  errno = 0;
  v = strtol (s, &end, 0);
  if (end == s || *end != '\0' || errno == ERANGE || v < INT_MIN || v > INT_MAX)
    return -1;
  *out = v;
  return 0;
}

/* qemu_strtou64 (base 0): a leading '-' is accepted and wraps, as
 * strtoull does, and the range check then refuses it.
 */
static int
parse_u64 (const char *s, uint64_t *out)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (s, &end, 0);
  if (end == s || *end != '\0' || errno == ERANGE)
    return -1;
  *out = v;
  return 0;
}

static __attribute__ ((noreturn)) void
try_help (void)
{
  fprintf (stderr, "%s: Try `%s --help' for more information.\n", progname,
           progname);
  exit (EXIT_FAILURE);
}

static void
parse_cmdline (int argc, char *argv[], struct cmdline *c)
{
  int ch;

  c->shared = 1;
  c->cache = CACHE_WRITEBACK;
  while ((ch = getopt_long (argc, argv, short_options, long_options, NULL))
         != -1)
    {
      switch (ch)
        {
        case 's':
          refuse (c, "-s/--snapshot: not supported: nbdstack-nbd has no "
                     "temporary overlay (write to a copy, or use nbdkit's cow "
                     "filter)");
          break;
        case 'n':
          optarg = (char *)"none";
          /* fallthrough */
        case OPT_CACHE:
          if (c->seen_cache)
            die ("-n and --cache can only be specified once");
          c->seen_cache = true;
          if (strcmp (optarg, "none") == 0 || strcmp (optarg, "off") == 0)
            c->cache = CACHE_NONE;
          else if (strcmp (optarg, "directsync") == 0)
            c->cache = CACHE_DIRECTSYNC;
          else if (strcmp (optarg, "writeback") == 0)
            c->cache = CACHE_WRITEBACK;
          else if (strcmp (optarg, "unsafe") == 0)
            c->cache = CACHE_UNSAFE;
          else if (strcmp (optarg, "writethrough") == 0)
            c->cache = CACHE_WRITETHROUGH;
          else
            die ("Invalid cache mode `%s'", optarg);
          break;
        case OPT_AIO:
          if (c->seen_aio)
            die ("--aio can only be specified once");
          c->seen_aio = true;
          if (strcmp (optarg, "native") == 0)
            c->aio_native = true;
          else if (strcmp (optarg, "threads") != 0
                   && strcmp (optarg, "io_uring") != 0)
            die ("Invalid aio mode '%s'", optarg);
          break;
        case OPT_DISCARD:
          if (c->seen_discard)
            die ("--discard can only be specified once");
          c->seen_discard = true;
          if (strcmp (optarg, "off") == 0 || strcmp (optarg, "ignore") == 0)
            c->discard_unmap = false;
          else if (strcmp (optarg, "on") == 0 || strcmp (optarg, "unmap") == 0)
            c->discard_unmap = true;
          else
            die ("Invalid discard mode `%s'", optarg);
          break;
        case OPT_DETECT_ZEROES:
          if (strcmp (optarg, "off") == 0)
            c->detect_zeroes = DZ_OFF;
          else if (strcmp (optarg, "on") == 0)
            c->detect_zeroes = DZ_ON;
          else if (strcmp (optarg, "unmap") == 0)
            c->detect_zeroes = DZ_UNMAP;
          else
            die ("Failed to parse detect_zeroes mode: Parameter "
                 "'detect-zeroes' does not accept value '%s'",
                 optarg);
          /* Checked here, as qemu-nbd does: so --discard=unmap must come
           * first on the command line.
           */
          if (c->detect_zeroes == DZ_UNMAP && !c->discard_unmap)
            die ("setting detect-zeroes to unmap is not allowed without "
                 "setting discard operation to unmap");
          break;
        case 'b':
          c->bind = optarg;
          break;
        case 'p':
          c->port = optarg;
          break;
        case 'o':
          if (parse_u64 (optarg, &c->offset) == -1)
            die ("Invalid offset '%s'", optarg);
          break;
        case 'l':
          /* A snapshot is served read-only. */
          c->snapshot = optarg;
          /* fallthrough */
        case 'r':
          c->readonly = true;
          break;
        case 'A':
          c->alloc_depth = true;
          break;
        case 'B':
          refuse (c, "-B/--bitmap: not supported: nbdkit cannot offer the "
                     "qemu:dirty-bitmap metadata context");
          break;
        case 'k':
          c->sockpath = optarg;
          if (optarg[0] != '/')
            die ("socket path must be absolute");
          break;
        case 'd':
          refuse (c, "-d/--disconnect: not supported: nbdstack-nbd has no "
                     "kernel NBD client side (use nbd-client -d)");
          break;
        case 'c':
          if (access (optarg, F_OK) == -1)
            refuse (c,
                    "-c/--connect: %s: %m: the kernel NBD client is "
                    "missing (and nbdstack-nbd does not connect devices)",
                    optarg);
          else
            refuse (c, "-c/--connect: not supported: nbdstack-nbd serves "
                       "sockets only (connect the device with nbd-client)");
          break;
        case 'e':
          if (parse_int (optarg, &c->shared) == -1 || c->shared < 0)
            die ("Invalid shared device number '%s'", optarg);
          break;
        case 'f':
          c->format = optarg;
          break;
        case 't':
          c->persistent = true;
          break;
        case 'x':
          c->export_name = optarg;
          if (strlen (optarg) > NBD_MAX_STRING)
            die ("export name '%s' too long", optarg);
          break;
        case 'D':
          c->description = optarg;
          if (strlen (optarg) > NBD_MAX_STRING)
            die ("export description '%s' too long", optarg);
          break;
        case 'v':
          c->verbose = true;
          break;
        case 'V':
          version ();
          exit (EXIT_SUCCESS);
        case 'h':
          usage ();
          exit (EXIT_SUCCESS);
        case '?':
          try_help ();
        case OPT_OBJECT:
          refuse (c, "--object: not supported: nbdstack-nbd maps no qemu "
                     "objects (secrets, TLS credentials)");
          break;
        case OPT_TLSCREDS:
          refuse (c, "--tls-creds: not supported: TLS is not mapped (run "
                     "nbdkit with --tls directly)");
          break;
        case OPT_TLSHOSTNAME:
          refuse (c, "--tls-hostname: not supported: TLS is not mapped (use "
                     "nbdinfo --list with a TLS URI)");
          break;
        case OPT_TLSAUTHZ:
          refuse (c, "--tls-authz: not supported: TLS is not mapped (run "
                     "nbdkit with --tls directly)");
          break;
        case OPT_IMAGE_OPTS:
          c->image_opts = true;
          break;
        case 'T':
          refuse (c, "-T/--trace: not supported: nbdkit has no qemu trace "
                     "events (use -v, or nbdkit's log filter)");
          break;
        case OPT_FORK:
          c->fork_process = true;
          break;
        case 'L':
          c->list = true;
          break;
        case OPT_PID_FILE:
          c->pid_file = optarg;
          break;
        case OPT_SELINUX_LABEL:
          c->selinux_label = optarg;
          break;
        default:
          abort ();
        }
    }

  /* Refused options are named before anything else is said about the
   * command line (-L, for one, takes no FILE).
   */
  if (c->refusal)
    die ("%s", c->refusal);
  if (c->list)
    {
      /* qemu-nbd's checks, in its order. */
      if (argc != optind)
        die ("List mode is incompatible with a file name");
      if (c->export_name || c->description || c->offset || c->format
          || c->snapshot || c->alloc_depth || c->seen_aio || c->seen_discard
          || c->seen_cache)
        die ("List mode is incompatible with per-device settings");
      if (c->fork_process)
        die ("List mode is incompatible with forking");
      return;
    }
  if (argc - optind != 1)
    {
      fprintf (stderr, "%s: Invalid number of arguments\n", progname);
      try_help ();
    }
  c->filename = argv[optind];
}

/* ---- systemd socket activation, as qemu-nbd detects it */

static unsigned
socket_activation_fds (void)
{
  const char *s;
  char *end;
  unsigned long pid, n;

  s = getenv ("LISTEN_PID");
  if (s == NULL)
    return 0;
  errno = 0;
  pid = strtoul (s, &end, 10);
  if (errno || end == s || *end || pid != (unsigned long)getpid ())
    return 0;
  s = getenv ("LISTEN_FDS");
  if (s == NULL)
    return 0;
  errno = 0;
  n = strtoul (s, &end, 10);
  if (errno || end == s || *end || n > UINT_MAX)
    return 0;
  return n;
}

/* ---- the nbdkit command line */

struct argv_list
{
  char **v;
  size_t n, cap;
};

static void
add (struct argv_list *a, const char *s)
{
  if (a->n + 2 > a->cap)
    {
      a->cap = a->cap ? a->cap * 2 : 64;
      a->v = realloc (a->v, a->cap * sizeof *a->v);
      if (a->v == NULL)
        die ("out of memory");
    }
  a->v[a->n] = strdup (s);
  if (a->v[a->n] == NULL)
    die ("out of memory");
  a->v[++a->n] = NULL;
}

static void __attribute__ ((format (printf, 2, 3)))
addf (struct argv_list *a, const char *fmt, ...)
{
  va_list ap;
  char *s;
  int r;

  va_start (ap, fmt);
  r = vasprintf (&s, fmt, ap);
  va_end (ap);
  if (r == -1)
    die ("out of memory");
  add (a, s);
  free (s);
}

static void
add_settings (struct argv_list *a, const struct settings *s,
              enum setting_dest dest)
{
  for (size_t i = 0; i < s->n; ++i)
    if (s->v[i].dest == dest)
      addf (a, "%s=%s", s->v[i].key, s->v[i].value);
}

/* Print ARGV as one shell-quoted line. */
static void
print_argv (FILE *fp, char **argv)
{
  for (size_t i = 0; argv[i]; ++i)
    {
      const char *s = argv[i];

      if (i)
        fputc (' ', fp);
      if (*s
          && strspn (s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789-_=+./:,@%")
                 == strlen (s))
        fputs (s, fp);
      else
        {
          fputc ('\'', fp);
          for (; *s; ++s)
            {
              if (*s == '\'')
                fputs ("'\\''", fp);
              else
                fputc (*s, fp);
            }
          fputc ('\'', fp);
        }
    }
  fputc ('\n', fp);
}

/* ---- what the command line and the image come to */

/* Global rather than local, so that what is still allocated when the
 * supervisor exits is reachable, not a leak, to LeakSanitizer.
 */
static struct cmdline cmd;
static struct settings settings;
static struct image_spec spec;
static struct argv_list a;

static struct
{
  struct image_info info;
  unsigned activation_fds;
  bool readonly;
  bool coalesce;
  bool have_range;
  uint64_t range_offset, range_size;
  bool nbdkit_debug; /* the nbdkit-debug setting */
} plan;

/* The byte range: a raw node's offset/size, then -o on top of it (a
 * second raw node in qemu-nbd), folded into one offset filter.  Checked
 * here, as qemu-nbd checks it when it opens the image: nbdkit's offset
 * filter would only fail the clients.
 */
static void
plan_range (void)
{
  uint64_t size = plan.info.size;

  if (spec.has_range)
    {
      if (spec.range_offset > size)
        die ("Failed to open '%s': Offset (%" PRIu64 ") cannot be greater "
             "than size of the containing file (%" PRIu64 ")",
             cmd.filename, spec.range_offset, size);
      if (spec.has_range_size && size - spec.range_offset < spec.range_size)
        die ("Failed to open '%s': The sum of offset (%" PRIu64 ") and size "
             "(%" PRIu64 ") has to be smaller or equal to the  actual size "
             "of the containing file (%" PRIu64 ")",
             cmd.filename, spec.range_offset, spec.range_size, size);
      plan.have_range = true;
      plan.range_offset = spec.range_offset;
      plan.range_size
          = spec.has_range_size ? spec.range_size : size - spec.range_offset;
    }
  if (cmd.offset)
    {
      uint64_t below = plan.have_range ? plan.range_size : size;

      if (cmd.offset > below)
        die ("Offset (%" PRIu64 ") cannot be greater than size of the "
             "containing file (%" PRIu64 ")",
             cmd.offset, below);
      plan.have_range = true;
      plan.range_offset += cmd.offset;
      plan.range_size = below - cmd.offset;
    }
}

/* Off unless asked for: measured with these pipelines
 * (bench/nbd-vs-qemu-nbd.sh), the buffer cost time and CPU on raw
 * targets, and without it what a write acknowledged survives exactly
 * what it survives with qemu-nbd, including nbdkit being killed.
 */
static void
plan_coalesce (void)
{
  const char *s = settings_get (&settings, "coalesce");

  if (s == NULL)
    {
      /* Setting the buffer up asks for it. */
      plan.coalesce = false;
      for (size_t i = 0; i < settings.n; ++i)
        plan.coalesce |= settings.v[i].dest == DEST_COALESCE;
    }
  else if (strcmp (s, "off") == 0)
    plan.coalesce = false;
  else if (strcmp (s, "on") == 0)
    plan.coalesce = true;
  else
    die ("coalesce=%s: expected on or off", s);
  /* Write-through cache modes answer a write once it is durable: the
   * buffer must not answer it earlier.
   */
  s = settings_get (&settings, "coalesce-mode");
  if (s && strcmp (s, "writeback") == 0
      && (cmd.cache == CACHE_WRITETHROUGH || cmd.cache == CACHE_DIRECTSYNC))
    die ("coalesce-mode=writeback contradicts --cache=%s",
         cmd.cache == CACHE_WRITETHROUGH ? "writethrough" : "directsync");
}

/* nbdkit's own options. */
static void
add_server_options (void)
{
  const char *s;

  add (&a, nbdkit_program ());
  add (&a, "-f"); /* qemu-nbd does not fork unless --fork */
  add (&a, "--log=stderr");
  /* qemu-nbd -v shows nothing more while it serves a socket: nbdkit's
   * debug output (hundreds of lines per connection) is our own setting.
   */
  if (plan.nbdkit_debug)
    add (&a, "-v");
  if (plan.readonly)
    add (&a, "-r");
  if (plan.activation_fds == 0)
    {
      if (cmd.sockpath)
        addf (&a, "--unix=%s", cmd.sockpath);
      else
        {
          addf (&a, "--ipaddr=%s", cmd.bind ? cmd.bind : "0.0.0.0");
          addf (&a, "--port=%s", cmd.port ? cmd.port : "10809");
        }
    }
  if (cmd.selinux_label)
    addf (&a, "--selinux-label=%s", cmd.selinux_label);
  s = settings_get (&settings, "threads");
  if (s)
    addf (&a, "--threads=%s", s);
}

static void
add_our_filter (const char *name)
{
  char *p = component_path ("filter", name);

  addf (&a, "--filter=%s", p);
  free (p);
}

/* The filters, outermost first. */
static void
add_filters (void)
{
  /* qemu-nbd offers multi-conn only when it serves several clients:
   * with one, a client that opens several connections (nbdcopy) must
   * not try.
   */
  if (cmd.shared == 1)
    add (&a, "--filter=multi-conn");
  add (&a, "--filter=exportname");
  add (&a, "--filter=blocksize-policy");
  /* The client limit, the exit after the last client and the drain on
   * SIGTERM (supervise.c), above every layer that holds written data.
   */
  add_our_filter ("lifecycle");
  if (!plan.readonly)
    {
      if (plan.coalesce)
        add_our_filter ("coalesce");
      if (cmd.detect_zeroes != DZ_OFF)
        add_our_filter ("zerodetect");
      add_our_filter ("discard");
      if (cmd.cache == CACHE_WRITETHROUGH || cmd.cache == CACHE_DIRECTSYNC
          || cmd.cache == CACHE_UNSAFE)
        add (&a, "--filter=fua");
    }
  if (plan.have_range)
    add (&a, "--filter=offset");
}

/* -l: ID_OR_NAME, or snapshot.id=ID / snapshot.name=NAME.  The plugin
 * matches by ID first, then by name, so only one of the two can be
 * passed on exactly.
 */
static void
add_snapshot_param (void)
{
  const char *id = NULL, *name = NULL;
  struct flat_opts o = { 0 };
  char *err;

  if (strncmp (cmd.snapshot, "snapshot.", 9) != 0)
    {
      addf (&a, "snapshot=%s", cmd.snapshot);
      return;
    }
  if (image_opts_flatten (cmd.snapshot, &o, &err) == -1)
    die ("Failed in parsing snapshot param `%s'", cmd.snapshot);
  for (size_t i = 0; i < o.n; ++i)
    {
      if (strcmp (o.v[i].key, "snapshot.id") == 0)
        id = o.v[i].value;
      else if (strcmp (o.v[i].key, "snapshot.name") == 0)
        name = o.v[i].value;
      else
        die ("Failed in parsing snapshot param `%s': Invalid parameter '%s'",
             cmd.snapshot, o.v[i].key);
    }
  if (id && name)
    die ("-l %s: give snapshot.id or snapshot.name, not both (the image "
         "plugin matches one of them)",
         cmd.snapshot);
  if (id == NULL && name == NULL)
    die ("Failed in parsing snapshot param `%s'", cmd.snapshot);
  addf (&a, "snapshot=%s", id ? id : name);
  flat_opts_free (&o);
}

/* The plugin, then every parameter of the plugin and the filters. */
static void
add_parameters (void)
{
  char *p = component_path ("plugin", "image");

  add (&a, p);
  free (p);
  addf (&a, "file=%s", spec.path);
  /* A probed raw image is probed again by the plugin, which then keeps
   * its first sector raw as qemu-nbd does.
   */
  add (&a, plan.info.format == FORMAT_QCOW2 ? "format=qcow2"
           : plan.info.probed_raw           ? "format=auto"
                                            : "format=raw");
  add (&a, cmd.cache == CACHE_NONE || cmd.cache == CACHE_DIRECTSYNC
               ? "cache=none"
               : "cache=writeback");
  if (plan.readonly)
    add (&a, "readonly=true");
  if (plan.info.format == FORMAT_QCOW2)
    {
      /* qemu-nbd opens the backing chain unless told "backing": null. */
      add (&a, spec.backing_none ? "backing=none" : "backing=follow");
      if (spec.has_image_range)
        addf (&a, "image-offset=%" PRIu64, spec.image_offset);
      if (spec.has_image_length)
        addf (&a, "image-length=%" PRIu64, spec.image_length);
      if (cmd.snapshot)
        add_snapshot_param ();
      add_settings (&a, &settings, DEST_PLUGIN);
    }

  addf (&a, "lifecycle-limit=%d", cmd.shared);
  add (&a, cmd.persistent ? "lifecycle-exit-last=false"
                          : "lifecycle-exit-last=true");
  if (cmd.sockpath && plan.activation_fds == 0 && !cmd.persistent)
    addf (&a, "lifecycle-unlink=%s", cmd.sockpath);
  addf (&a, "lifecycle-control=%d",
        supervise_control_fd (plan.activation_fds));
  add (&a, plan.readonly ? "lifecycle-flush=false" : "lifecycle-flush=true");
  if (cmd.shared == 1)
    {
      add (&a, "multi-conn-mode=disable");
      add (&a, "multi-conn-track-dirty=off");
    }
  /* qemu-nbd serves exactly one name and lists it. */
  add (&a, "exportname-strict=true");
  add (&a, "exportname-list=explicit");
  addf (&a, "exportname=%s", cmd.export_name ? cmd.export_name : "");
  if (cmd.description)
    addf (&a, "exportdesc=fixed:%s", cmd.description);
  else
    add (&a, "exportdesc=none");
  /* qemu-nbd's largest request; nbdkit would advertise 4G - 1 and then
   * refuse requests over 64M.
   */
  add (&a, "blocksize-maximum=32M");
  /* qemu-nbd's preferred size, whatever the format: the image plugin
   * prefers a qcow2 image's cluster size, which qemu-nbd never says.
   */
  add (&a, "blocksize-preferred=4096");

  if (!plan.readonly)
    {
      if (plan.coalesce)
        {
          if (cmd.cache == CACHE_WRITETHROUGH || cmd.cache == CACHE_DIRECTSYNC)
            add (&a, "coalesce-mode=writethrough");
          add_settings (&a, &settings, DEST_COALESCE);
        }
      if (cmd.detect_zeroes == DZ_ON)
        add (&a, "zerodetect=on");
      else if (cmd.detect_zeroes == DZ_UNMAP)
        add (&a, "zerodetect=unmap");
      if (cmd.detect_zeroes != DZ_OFF)
        add_settings (&a, &settings, DEST_ZERODETECT);
      /* --discard=ignore: trim is advertised and does nothing, and zero
       * requests may not free space (qemu drops MAY_UNMAP without
       * BDRV_O_UNMAP).
       */
      if (cmd.discard_unmap)
        add (&a, "discard=pass");
      else
        {
          add (&a, "discard=ignore");
          add (&a, "discard-zero-trim=never");
        }
      add_settings (&a, &settings, DEST_DISCARD);
      /* writethrough/directsync: every write durable before its reply.
       * unsafe: flushes are not passed on.
       */
      if (cmd.cache == CACHE_WRITETHROUGH || cmd.cache == CACHE_DIRECTSYNC)
        add (&a, "fuamode=force");
      else if (cmd.cache == CACHE_UNSAFE)
        add (&a, "fuamode=discard");
    }
  if (plan.have_range)
    {
      addf (&a, "offset=%" PRIu64, plan.range_offset);
      addf (&a, "range=%" PRIu64, plan.range_size);
    }
}

/* ---- main */

int
main (int argc, char *argv[])
{
  int ready_fd = -1;
  const char *s;
  char *err, *nv;

  parse_cmdline (argc, argv, &cmd);
  if (cmd.list)
    {
      if (socket_activation_fds ())
        die ("List mode is incompatible with socket activation");
      if (cmd.selinux_label && cmd.sockpath == NULL)
        die ("--selinux-label is not permitted without --socket");
      exit (list_exports (progname, cmd.sockpath, cmd.bind, cmd.port));
    }

  /* What qemu-nbd checks after parsing, in its order. */
  plan.activation_fds = socket_activation_fds ();
  if (plan.activation_fds)
    {
      if (cmd.sockpath)
        die ("Unix socket can't be set when using socket activation");
      if (cmd.bind)
        die ("The interface can't be set when using socket activation");
      if (cmd.port)
        die ("TCP port number can't be set when using socket activation");
      if (cmd.selinux_label)
        die ("SELinux label can't be set when using socket activation");
      if (plan.activation_fds > 1)
        die ("qemu-nbd does not support socket activation with LISTEN_FDS "
             "> 1");
    }
  if (cmd.selinux_label && cmd.sockpath == NULL)
    die ("--selinux-label is not permitted without --socket");

  if (settings_load (&settings, DEFAULT_CONFIG) == -1)
    exit (EXIT_FAILURE);

  /* The image, which qemu-nbd opens before it serves anything. */
  if (image_spec_parse (cmd.filename, cmd.image_opts, cmd.format, &spec, &err)
      == -1)
    die ("Failed to open '%s': %s", cmd.filename, err ? err : "out of memory");
  if (probe_image (&spec, &plan.info, &err) == -1)
    die ("Failed to open '%s': %s", cmd.filename, err ? err : "out of memory");
  if (cmd.aio_native && cmd.cache != CACHE_NONE
      && cmd.cache != CACHE_DIRECTSYNC)
    die ("Failed to open '%s': aio=native was specified, but it requires "
         "cache.direct=on, which was not specified.",
         cmd.filename);
  if (plan.info.probed_raw)
    warn ("Image format was not specified for '%s' and probing guessed raw; "
          "writes that would make block 0 look like another format are "
          "refused: specify -f raw to remove the restriction",
          spec.path);
  plan.readonly = cmd.readonly || spec.read_only;
  if (!plan.readonly && probe_writable (&spec, &err) == -1)
    die ("Failed to open '%s': %s", cmd.filename, err ? err : "out of memory");
  if (cmd.snapshot && plan.info.format != FORMAT_QCOW2)
    die ("Failed to load snapshot: '%s' is raw: only qcow2 images have "
         "internal snapshots",
         spec.path);
  plan_range ();

  /* nbdkit cannot offer qemu:allocation-depth.  A client that asks for
   * it on a layer served alone uses it to tell "not in this layer"
   * from "zero" (imageio's snapshot download and shallow upload), and
   * without it would take the backing chain's data for zeroes.
   */
  if (cmd.alloc_depth && spec.backing_none && plan.info.has_backing)
    die ("--allocation-depth with \"backing\": null: '%s' has a backing "
         "file, and the qemu:allocation-depth context that would tell its "
         "data from zeroes cannot be offered (nbdkit has no API for it); "
         "serve the whole chain or drop -A",
         spec.path);
  if (cmd.alloc_depth)
    warn ("--allocation-depth: the qemu:allocation-depth context is not "
          "offered (nbdkit has no API for it); clients read the whole "
          "backing chain as one disk and cannot tell which layer holds "
          "the data");
  plan_coalesce ();
  s = settings_get (&settings, "nbdkit-debug");
  if (s && strcmp (s, "on") == 0)
    plan.nbdkit_debug = true;
  else if (s && strcmp (s, "off") != 0)
    die ("nbdkit-debug=%s: expected on or off", s);

  /* Our filters only load into the nbdkit they were built for: say so
   * in one line instead of nbdkit's dlopen error.
   */
  nv = nbdkit_version ();
  if (nv == NULL)
    die ("cannot run %s --version (is nbdkit installed? NBDSTACK_NBDKIT "
         "names it)",
         nbdkit_program ());
  if (strcmp (nv, NBDKIT_BUILD_VERSION) != 0)
    die ("nbdkit is %s but the nbdstack filters were built for %s: rebuild "
         "nbdstack",
         nv, NBDKIT_BUILD_VERSION);
  free (nv);

  add_server_options ();
  add_filters ();
  add_parameters ();

  s = getenv ("NBDSTACK_NBD_DRY_RUN");
  if (s && *s && strcmp (s, "0") != 0)
    {
      print_argv (stdout, a.v);
      exit (EXIT_SUCCESS);
    }
  if (plan.nbdkit_debug)
    {
      fprintf (stderr, "%s: running: ", progname);
      print_argv (stderr, a.v);
    }

  /* qemu-nbd replaces a leftover socket; nbdkit would fail with
   * "Address already in use".  Only sockets are removed.
   */
  if (cmd.sockpath && plan.activation_fds == 0)
    {
      struct stat st;

      if (lstat (cmd.sockpath, &st) == 0 && S_ISSOCK (st.st_mode))
        unlink (cmd.sockpath);
    }

  if (cmd.fork_process)
    ready_fd = supervise_daemonize ();
  {
    struct supervise_opts o = {
      .argv = a.v,
      .activation_fds = plan.activation_fds,
      .sockpath = plan.activation_fds == 0 ? cmd.sockpath : NULL,
      .pid_file = cmd.pid_file,
      .ready_fd = ready_fd,
      .keep_stderr = cmd.verbose,
      .raw_stderr = plan.nbdkit_debug,
      .progname = progname,
    };

    return supervise (&o);
  }
}
