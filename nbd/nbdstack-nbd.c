/* nbdstack-nbd: a qemu-nbd command line, served by nbdkit.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Pipelines (oVirt imageio, vdsm, scripts) start their NBD server as
 * qemu-nbd.  This command takes the same command line (cmdline.c),
 * translates it into an nbdkit command line with the image plugin and
 * our filters (plan.c), then runs nbdkit as its child and stays its
 * parent until it exits (supervise.c): it does not exec nbdkit, so
 * that to everyone outside this process is the server, signals and
 * the pid file included, and those pipelines switch by changing one
 * program name.  -L is a client instead (list.c).
 *
 * Invariant: what qemu-nbd refuses, this refuses (exit 1); what it
 * accepts is either served with the same meaning or refused with one
 * line naming the option.  Nothing is silently ignored.  See
 * nbdstack-nbd.pod for the table of options.
 *
 *   main -> cmdline    qemu-nbd's options
 *        -> plan       nbdkit's argv: -> settings, imagespec (-> json),
 *                      probe, locate, argv; cmdline_activation_fds and
 *                      supervise_control_fd
 *        -> supervise  nbdkit as our child
 *   (die: the messages, used by all of them)
 */
#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argv.h"
#include "cmdline.h"
#include "die.h"
#include "list.h"
#include "locate.h"
#include "plan.h"
#include "settings.h"
#include "supervise.h"

/* The qemu-nbd whose command line this implements.  The first line of
 * --version puts it where qemu-nbd puts its own version, because tools
 * parse it: imageio passes --allocation-depth and "backing": null only
 * to qemu-nbd >= 5.2.0, and fails to parse anything that is not a
 * dotted version.
 */
#define QEMU_NBD_COMPAT_VERSION "7.2.0"

/* Global rather than local, so that what is still allocated when the
 * supervisor exits is reachable, not a leak, to LeakSanitizer.
 */
static struct cmdline cmd;
static struct plan plan;

/* -V */
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

/* -L: list another server's exports; returns the exit status. */
static int
list_mode (void)
{
  if (cmdline_activation_fds ())
    die ("List mode is incompatible with socket activation");
  if (cmd.selinux_label && cmd.sockpath == NULL)
    die ("--selinux-label is not permitted without --socket");
  return list_exports (progname, cmd.sockpath, cmd.bind, cmd.port);
}

/* NBDSTACK_NBD_DRY_RUN set (and not 0): print nbdkit's command line
 * instead of running it.
 */
static bool
dry_run (void)
{
  const char *s = getenv ("NBDSTACK_NBD_DRY_RUN");

  return s && *s && strcmp (s, "0") != 0;
}

/* Start nbdkit and supervise it until it exits; the exit status. */
static int
serve (void)
{
  int ready_fd = -1;

  if (plan.nbdkit_debug)
    {
      fprintf (stderr, "%s: running: ", progname);
      if (plan.glibc_tunables)
        fprintf (stderr, "GLIBC_TUNABLES=%s ", plan.glibc_tunables);
      if (plan.ld_preload)
        fprintf (stderr, "LD_PRELOAD=%s ", plan.ld_preload);
      argv_print (stderr, plan.argv.v);
    }
  if (cmd.sockpath && plan.activation_fds == 0)
    supervise_remove_stale_socket (cmd.sockpath);
  if (cmd.fork_process)
    ready_fd = supervise_daemonize ();
  {
    struct supervise_opts o = {
      .argv = plan.argv.v,
      .glibc_tunables = plan.glibc_tunables,
      .ld_preload = plan.ld_preload,
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

int
main (int argc, char *argv[])
{
  switch (cmdline_parse (argc, argv, &cmd))
    {
    case CMDLINE_HELP:
      cmdline_usage ();
      settings_print_keys ();
      exit (EXIT_SUCCESS);
    case CMDLINE_VERSION:
      version ();
      exit (EXIT_SUCCESS);
    case CMDLINE_RUN:
      break;
    }
  if (cmd.list)
    exit (list_mode ());

  plan_make (&cmd, &plan);
  if (dry_run ())
    {
      argv_print (stdout, plan.argv.v);
      exit (EXIT_SUCCESS);
    }
  return serve ();
}
