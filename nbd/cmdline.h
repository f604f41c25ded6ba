/* nbdstack-nbd: qemu-nbd's command line, parsed as qemu-nbd 7.2 parses it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: the getopt_long table is exactly qemu-nbd's, and options
 * are checked in its order with its outcome: what qemu-nbd refuses is
 * refused here (exit 1, its message); what it accepts and we cannot
 * honour is remembered and refused after parsing with one line naming
 * the option, so that --help and --version still work on any command
 * line, as they do there.  Nothing here looks at the image or the
 * environment, except for the socket activation variables.
 */
#ifndef NBDSTACK_NBD_CMDLINE_H
#define NBDSTACK_NBD_CMDLINE_H

#include <stdbool.h>
#include <stdint.h>

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

/* What the command line asks for. */
enum cmdline_action
{
  CMDLINE_RUN,    /* serve c->filename, or -L (c->list) */
  CMDLINE_HELP,   /* -h: print cmdline_usage and the settings, exit 0 */
  CMDLINE_VERSION /* -V: print the version, exit 0 */
};

/* Parse ARGV into C, as qemu-nbd does; exits 1 with its message on
 * anything it refuses, and on an option we cannot honour.
 */
extern enum cmdline_action cmdline_parse (int argc, char *argv[],
                                          struct cmdline *c);

/* Print --help's text, up to the list of settings. */
extern void cmdline_usage (void);

/* The number of sockets passed by systemd socket activation (LISTEN_FDS
 * for our pid, as qemu-nbd detects it), or 0.
 */
extern unsigned cmdline_activation_fds (void);

#endif /* NBDSTACK_NBD_CMDLINE_H */
