/* nbdstack-nbd: running nbdkit as qemu-nbd's server process would run.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_NBD_SUPERVISE_H
#define NBDSTACK_NBD_SUPERVISE_H

#include <stdbool.h>

struct supervise_opts
{
  char **argv;                /* nbdkit's command line */
  const char *glibc_tunables; /* for nbdkit, or NULL: ours */
  const char *ld_preload;     /* for nbdkit, or NULL: ours */
  unsigned activation_fds;    /* sockets at fds 3.. passed on (LISTEN_FDS) */
  const char *sockpath; /* the Unix socket to remove at the end, or NULL */
  const char *pid_file; /* where to write our pid once ready, or NULL */
  int ready_fd;         /* --fork: told once ready (supervise_daemonize) */
  bool keep_stderr;     /* -v: keep stderr open after --fork */
  bool raw_stderr;      /* pass nbdkit's stderr on unfiltered (debug) */
  const char *progname; /* for our own messages */
};

/* The descriptor number at which nbdkit finds the control socket of
 * the lifecycle filter (lifecycle-control=), after the activation
 * sockets.
 */
extern int supervise_control_fd (unsigned activation_fds);

/* Remove PATH if it is a socket left over by an earlier server, as
 * qemu-nbd replaces it (nbdkit would fail with "Address already in
 * use"); anything else at PATH is left alone.
 */
extern void supervise_remove_stale_socket (const char *path);

/* Run nbdkit (O->argv) as our child and stay its parent until it is
 * gone: SIGTERM, SIGINT and SIGHUP drain and flush it through the
 * lifecycle filter and then kill it; our death kills it; its stderr
 * comes to ours through a filter of lines.  Returns the status to exit
 * with.
 */
extern int supervise (const struct supervise_opts *o);

/* --fork: the caller goes into the background.  Returns, in the
 * background process only, the descriptor to pass as ready_fd; the
 * foreground process exits 0 once the server is ready, 1 if it fails
 * first.
 */
extern int supervise_daemonize (void);

#endif /* NBDSTACK_NBD_SUPERVISE_H */
