/* nbdstack-nbd: qemu-nbd's command line, parsed as qemu-nbd 7.2 parses it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Options are parsed with the same getopt_long table as qemu-nbd 7.2,
 * and checked in the same order with the same outcome (cmdline.h).
 * See nbdstack-nbd.pod for the table of every option.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmdline.h"
#include "die.h"

/* qemu's NBD_MAX_STRING_SIZE: longer names and descriptions are
 * refused by qemu-nbd, and by the NBD protocol.
 */
#define NBD_MAX_STRING 4096

/* Remember the first option we cannot honour.  It is reported after
 * parsing, as qemu-nbd reports its own late errors, so that --help and
 * --version still work on any command line, as they do there.
 */
static __attribute__ ((format (printf, 2, 3))) void
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

/* ---- --help */

void
cmdline_usage (void)
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

/* -n and --cache=MODE. */
static void
parse_cache (struct cmdline *c, const char *arg)
{
  if (c->seen_cache)
    die ("-n and --cache can only be specified once");
  c->seen_cache = true;
  if (strcmp (arg, "none") == 0 || strcmp (arg, "off") == 0)
    c->cache = CACHE_NONE;
  else if (strcmp (arg, "directsync") == 0)
    c->cache = CACHE_DIRECTSYNC;
  else if (strcmp (arg, "writeback") == 0)
    c->cache = CACHE_WRITEBACK;
  else if (strcmp (arg, "unsafe") == 0)
    c->cache = CACHE_UNSAFE;
  else if (strcmp (arg, "writethrough") == 0)
    c->cache = CACHE_WRITETHROUGH;
  else
    die ("Invalid cache mode `%s'", arg);
}

/* --aio=MODE: accepted, remembered only for the native check. */
static void
parse_aio (struct cmdline *c, const char *arg)
{
  if (c->seen_aio)
    die ("--aio can only be specified once");
  c->seen_aio = true;
  if (strcmp (arg, "native") == 0)
    c->aio_native = true;
  else if (strcmp (arg, "threads") != 0 && strcmp (arg, "io_uring") != 0)
    die ("Invalid aio mode '%s'", arg);
}

/* --discard=MODE. */
static void
parse_discard (struct cmdline *c, const char *arg)
{
  if (c->seen_discard)
    die ("--discard can only be specified once");
  c->seen_discard = true;
  if (strcmp (arg, "off") == 0 || strcmp (arg, "ignore") == 0)
    c->discard_unmap = false;
  else if (strcmp (arg, "on") == 0 || strcmp (arg, "unmap") == 0)
    c->discard_unmap = true;
  else
    die ("Invalid discard mode `%s'", arg);
}

/* --detect-zeroes=MODE. */
static void
parse_detect_zeroes (struct cmdline *c, const char *arg)
{
  if (strcmp (arg, "off") == 0)
    c->detect_zeroes = DZ_OFF;
  else if (strcmp (arg, "on") == 0)
    c->detect_zeroes = DZ_ON;
  else if (strcmp (arg, "unmap") == 0)
    c->detect_zeroes = DZ_UNMAP;
  else
    die ("Failed to parse detect_zeroes mode: Parameter "
         "'detect-zeroes' does not accept value '%s'",
         arg);
  /* Checked here, as qemu-nbd does: so --discard=unmap must come first
   * on the command line.
   */
  if (c->detect_zeroes == DZ_UNMAP && !c->discard_unmap)
    die ("setting detect-zeroes to unmap is not allowed without "
         "setting discard operation to unmap");
}

/* The options qemu-nbd takes and we cannot honour: remembered by
 * refuse ().  False if CH is not one of them.
 */
static bool
refused_option (struct cmdline *c, int ch, const char *arg)
{
  switch (ch)
    {
    case 's':
      refuse (c, "-s/--snapshot: not supported: nbdstack-nbd has no "
                 "temporary overlay (write to a copy, or use nbdkit's cow "
                 "filter)");
      return true;
    case 'B':
      refuse (c, "-B/--bitmap: not supported: nbdkit cannot offer the "
                 "qemu:dirty-bitmap metadata context");
      return true;
    case 'd':
      refuse (c, "-d/--disconnect: not supported: nbdstack-nbd has no "
                 "kernel NBD client side (use nbd-client -d)");
      return true;
    case 'c':
      if (access (arg, F_OK) == -1)
        refuse (c,
                "-c/--connect: %s: %m: the kernel NBD client is "
                "missing (and nbdstack-nbd does not connect devices)",
                arg);
      else
        refuse (c, "-c/--connect: not supported: nbdstack-nbd serves "
                   "sockets only (connect the device with nbd-client)");
      return true;
    case OPT_OBJECT:
      refuse (c, "--object: not supported: nbdstack-nbd maps no qemu "
                 "objects (secrets, TLS credentials)");
      return true;
    case OPT_TLSCREDS:
      refuse (c, "--tls-creds: not supported: TLS is not mapped (run "
                 "nbdkit with --tls directly)");
      return true;
    case OPT_TLSHOSTNAME:
      refuse (c, "--tls-hostname: not supported: TLS is not mapped (use "
                 "nbdinfo --list with a TLS URI)");
      return true;
    case OPT_TLSAUTHZ:
      refuse (c, "--tls-authz: not supported: TLS is not mapped (run "
                 "nbdkit with --tls directly)");
      return true;
    case 'T':
      refuse (c, "-T/--trace: not supported: nbdkit has no qemu trace "
                 "events (use -v, or nbdkit's log filter)");
      return true;
    default:
      return false;
    }
}

/* The options about the image and how it is served.  False if CH is
 * not one of them.
 */
static bool
image_option (struct cmdline *c, int ch, const char *arg)
{
  switch (ch)
    {
    case 'n':
      parse_cache (c, "none");
      return true;
    case OPT_CACHE:
      parse_cache (c, arg);
      return true;
    case OPT_AIO:
      parse_aio (c, arg);
      return true;
    case OPT_DISCARD:
      parse_discard (c, arg);
      return true;
    case OPT_DETECT_ZEROES:
      parse_detect_zeroes (c, arg);
      return true;
    case 'o':
      if (parse_u64 (arg, &c->offset) == -1)
        die ("Invalid offset '%s'", arg);
      return true;
    case 'l':
      /* A snapshot is served read-only. */
      c->snapshot = arg;
      c->readonly = true;
      return true;
    case 'r':
      c->readonly = true;
      return true;
    case 'A':
      c->alloc_depth = true;
      return true;
    case 'f':
      c->format = arg;
      return true;
    case OPT_IMAGE_OPTS:
      c->image_opts = true;
      return true;
    default:
      return false;
    }
}

/* The options about the server: sockets, clients, the process. */
static void
server_option (struct cmdline *c, int ch, const char *arg)
{
  switch (ch)
    {
    case 'b':
      c->bind = arg;
      break;
    case 'p':
      c->port = arg;
      break;
    case 'k':
      c->sockpath = arg;
      if (arg[0] != '/')
        die ("socket path must be absolute");
      break;
    case 'e':
      if (parse_int (arg, &c->shared) == -1 || c->shared < 0)
        die ("Invalid shared device number '%s'", arg);
      break;
    case 't':
      c->persistent = true;
      break;
    case 'x':
      c->export_name = arg;
      if (strlen (arg) > NBD_MAX_STRING)
        die ("export name '%s' too long", arg);
      break;
    case 'D':
      c->description = arg;
      if (strlen (arg) > NBD_MAX_STRING)
        die ("export description '%s' too long", arg);
      break;
    case 'v':
      c->verbose = true;
      break;
    case OPT_FORK:
      c->fork_process = true;
      break;
    case 'L':
      c->list = true;
      break;
    case OPT_PID_FILE:
      c->pid_file = arg;
      break;
    case OPT_SELINUX_LABEL:
      c->selinux_label = arg;
      break;
    default:
      abort ();
    }
}

/* What qemu-nbd checks once the options are read. */
static void
check_operands (int argc, char *argv[], struct cmdline *c)
{
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

enum cmdline_action
cmdline_parse (int argc, char *argv[], struct cmdline *c)
{
  int ch;

  c->shared = 1;
  c->cache = CACHE_WRITEBACK;
  while ((ch = getopt_long (argc, argv, short_options, long_options, NULL))
         != -1)
    {
      /* -V and -h act at once, whatever follows, as in qemu-nbd. */
      if (ch == 'V')
        return CMDLINE_VERSION;
      if (ch == 'h')
        return CMDLINE_HELP;
      if (ch == '?')
        try_help ();
      if (!refused_option (c, ch, optarg) && !image_option (c, ch, optarg))
        server_option (c, ch, optarg);
    }
  check_operands (argc, argv, c);
  return CMDLINE_RUN;
}

/* ---- systemd socket activation, as qemu-nbd detects it */

unsigned
cmdline_activation_fds (void)
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
