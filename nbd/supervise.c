/* nbdstack-nbd: running nbdkit as qemu-nbd's server process would run.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit runs as a child of this process, which stays its parent for
 * its whole life and is, to everyone outside, the server: the pid file
 * names this process, and signals sent to it act as they act on
 * qemu-nbd.
 *
 *   SIGTERM, SIGINT, SIGHUP: qemu-nbd exits at once, clients connected
 *     or not, with everything written flushed.  nbdkit 1.32 on SIGTERM
 *     stops accepting, but serves the connected clients until they
 *     leave (its worker threads block in recv(2) and test the quit flag
 *     only between requests).  So the signal is not passed on: the
 *     lifecycle filter is told to drain (no request enters the stack
 *     any more, those inside finish, one flush goes down through the
 *     whole stack), and once it reports the flush done, nbdkit is
 *     killed with SIGKILL: clients see their connections drop with no
 *     reply to what they sent after the drain began.
 *   SIGKILL: nbdkit dies with us (the lifecycle filter sets SIGKILL as
 *     its parent-death signal, replacing the SIGTERM nbdkit 1.32 sets
 *     unasked), so nothing is left serving and no request in flight is
 *     answered, as when qemu-nbd is killed.
 *   SIGQUIT, SIGUSR1, SIGUSR2: passed on to nbdkit.
 *
 * nbdkit's stderr is a pipe to us.  We copy it to our stderr, without
 * the error lines nbdkit writes when a client hangs up during the
 * handshake (a probe connection is not an error; qemu-nbd says nothing),
 * and, after --fork has returned, to nowhere: the daemon then holds
 * none of the caller's descriptors.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervise.h"

int
supervise_control_fd (unsigned activation_fds)
{
  return 3 + activation_fds;
}

/* ---- nbdkit's stderr */

/* A line nbdkit writes when a client goes away during the handshake:
 * "nbdkit: PLUGIN[N]: error: CONTEXT: REASON", where the context is a
 * step of nbdkit 1.32's handshake ("write: sending newstyle handshake",
 * "reading initial client flags", "reading option", "read: NBD_OPT_..."
 * or "write: NBD_OPT_...", the queries of NBD_OPT_*_META_CONTEXT) and
 * the reason says that the peer hung up.
 */
static bool
is_handshake_hangup (const char *line)
{
  static const char *const steps[]
      = { "newstyle handshake", "initial client flags",      "reading option",
          ": NBD_OPT_",         "reading number of queries", "query string" };
  static const char *const reasons[]
      = { "Broken pipe", "Connection reset by peer", "end of file" };
  bool step = false, reason = false;

  if (strncmp (line, "nbdkit: ", 8) != 0 || strstr (line, ": error: ") == NULL)
    return false;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; ++i)
    step |= strstr (line, steps[i]) != NULL;
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; ++i)
    reason |= strstr (line, reasons[i]) != NULL;
  return step && reason;
}

struct relay
{
  char buf[8192];
  size_t len;
  bool raw;
};

static void
write_all (int fd, const char *p, size_t n)
{
  while (n > 0)
    {
      ssize_t r = write (fd, p, n);

      if (r == -1 && errno == EINTR)
        continue;
      if (r <= 0)
        return; /* the reader is gone: drop it */
      p += r;
      n -= r;
    }
}

/* Pass on the complete lines in R (all of it if FINAL). */
static void
relay_lines (struct relay *r, bool final)
{
  size_t start = 0;

  for (;;)
    {
      char *nl = memchr (r->buf + start, '\n', r->len - start);
      size_t end;

      if (nl == NULL)
        {
          /* An overlong line goes out in pieces. */
          if (!final && !(start == 0 && r->len == sizeof r->buf))
            break;
          end = r->len;
        }
      else
        end = nl - r->buf + 1;
      if (end == start)
        break;
      {
        char save = r->buf[end - 1];

        r->buf[end - 1] = '\0';
        if (r->raw || !is_handshake_hangup (r->buf + start))
          {
            r->buf[end - 1] = save;
            write_all (STDERR_FILENO, r->buf + start, end - start);
          }
      }
      start = end;
    }
  memmove (r->buf, r->buf + start, r->len - start);
  r->len -= start;
}

/* Read what there is; false at end of file. */
static bool
relay_read (struct relay *r, int fd)
{
  ssize_t n = read (fd, r->buf + r->len, sizeof r->buf - r->len);

  if (n == -1 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n <= 0)
    {
      relay_lines (r, true);
      return false;
    }
  r->len += n;
  relay_lines (r, false);
  return true;
}

/* ---- starting nbdkit */

static void
write_pid_file (const char *path, const char *progname)
{
  char tmp[4096];
  FILE *fp;

  /* Complete or absent, for whoever polls for it. */
  if (snprintf (tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid ())
      >= (int)sizeof tmp)
    {
      fprintf (stderr, "%s: %s: path too long\n", progname, path);
      return;
    }
  fp = fopen (tmp, "w");
  if (fp == NULL || fprintf (fp, "%ld\n", (long)getpid ()) < 0
      || fclose (fp) == EOF || rename (tmp, path) == -1)
    fprintf (stderr, "%s: Failed to write pid file '%s': %m\n", progname, path);
}

static __attribute__ ((noreturn)) void
exec_nbdkit (const struct supervise_opts *o, pid_t parent, int errfd, int ctlfd,
             const sigset_t *oldmask)
{
  int target = supervise_control_fd (o->activation_fds);

  /* Until the lifecycle filter sets it again (nbdkit resets it). */
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != parent)
    _exit (EXIT_FAILURE);
  if (dup2 (errfd, STDERR_FILENO) == -1)
    _exit (EXIT_FAILURE);
  if (ctlfd == target)
    fcntl (ctlfd, F_SETFD, 0);
  else if (dup2 (ctlfd, target) == -1)
    _exit (EXIT_FAILURE);
  signal (SIGPIPE, SIG_DFL);
  sigprocmask (SIG_SETMASK, oldmask, NULL);
  if (o->glibc_tunables)
    setenv ("GLIBC_TUNABLES", o->glibc_tunables, 1);
  if (o->ld_preload)
    setenv ("LD_PRELOAD", o->ld_preload, 1);
  /* nbdkit takes the sockets only if LISTEN_PID is its own pid. */
  if (o->activation_fds)
    {
      char buf[32];

      snprintf (buf, sizeof buf, "%ld", (long)getpid ());
      setenv ("LISTEN_PID", buf, 1);
    }
  execvp (o->argv[0], o->argv);
  fprintf (stderr, "%s: %s: %m\n", o->progname, o->argv[0]);
  _exit (EXIT_FAILURE);
}

void
supervise_remove_stale_socket (const char *path)
{
  struct stat st;

  if (lstat (path, &st) == 0 && S_ISSOCK (st.st_mode))
    unlink (path);
}

/* ---- the supervisor */

struct state
{
  const struct supervise_opts *o;
  pid_t child;
  int ctl;           /* our end of the control socket, -1 once closed */
  bool ready;        /* the filter said 'R' */
  bool draining;     /* we said 'T' */
  bool killed;       /* we killed nbdkit after the drain */
  bool flush_failed; /* the filter said 'E' */
  struct stat sock;  /* the socket, as nbdkit made it */
  bool have_sock;
  int errfd;        /* our end of nbdkit's stderr */
  int sfd;          /* the signalfd of the signals in handled[] */
  sigset_t oldmask; /* the caller's signal mask, restored at the end */
  bool exited;      /* nbdkit has been reaped, its status in status */
  int status;
};

static void
on_ready (struct state *s)
{
  const struct supervise_opts *o = s->o;

  s->ready = true;
  if (o->sockpath && lstat (o->sockpath, &s->sock) == 0)
    s->have_sock = true;
  if (o->pid_file)
    write_pid_file (o->pid_file, o->progname);
  if (o->ready_fd >= 0)
    {
      char c = 'R';

      write_all (o->ready_fd, &c, 1);
      close (o->ready_fd);
      /* qemu-nbd --fork: the caller's stderr is kept only with -v. */
      if (!o->keep_stderr)
        {
          int null = open ("/dev/null", O_WRONLY | O_CLOEXEC);

          if (null >= 0)
            {
              dup2 (null, STDERR_FILENO);
              close (null);
            }
        }
    }
}

static void
on_control (struct state *s)
{
  char c;
  ssize_t n = read (s->ctl, &c, 1);

  if (n == -1 && errno == EINTR)
    return;
  if (n <= 0)
    {
      close (s->ctl);
      s->ctl = -1;
      return;
    }
  switch (c)
    {
    case 'R':
      on_ready (s);
      break;
    case 'E':
      s->flush_failed = true;
      /* fallthrough */
    case 'F':
      kill (s->child, SIGKILL);
      s->killed = true;
      break;
    }
}

static void
on_signal (struct state *s, int sig)
{
  switch (sig)
    {
    case SIGTERM:
    case SIGINT:
    case SIGHUP:
      if (s->draining || s->killed)
        return;
      if (!s->ready || s->ctl == -1)
        {
          /* Still starting (nothing served yet), or the filter has
           * gone: nbdkit's own handling will do.
           */
          kill (s->child, sig);
          return;
        }
      s->draining = true;
      {
        char c = 'T';

        if (write (s->ctl, &c, 1) != 1)
          kill (s->child, sig);
      }
      return;
    default:
      kill (s->child, sig);
    }
}

/* The signals we read from the signalfd. */
static const int handled[]
    = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD };

/* Block our signals into S->sfd, make nbdkit's stderr pipe and the
 * control socket, and fork and exec nbdkit.  -1 with a message if any
 * of it fails.
 */
static int
start (struct state *s)
{
  const struct supervise_opts *o = s->o;
  sigset_t mask;
  int errp[2], ctl[2];
  pid_t parent = getpid ();

  signal (SIGPIPE, SIG_IGN);
  sigemptyset (&mask);
  for (size_t i = 0; i < sizeof handled / sizeof handled[0]; ++i)
    sigaddset (&mask, handled[i]);
  /* No signal may be lost between fork and the signalfd. */
  sigprocmask (SIG_BLOCK, &mask, &s->oldmask);
  /* A signal the caller blocked stays blocked, unread, as in qemu-nbd
   * (imageio blocks SIGINT and SIGHUP in its servers); SIGCHLD is ours.
   */
  for (size_t i = 0; i < sizeof handled / sizeof handled[0]; ++i)
    if (handled[i] != SIGCHLD && sigismember (&s->oldmask, handled[i]) == 1)
      sigdelset (&mask, handled[i]);
  if (pipe2 (errp, O_CLOEXEC) == -1
      || socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) == -1)
    {
      fprintf (stderr, "%s: pipe: %m\n", o->progname);
      return -1;
    }
  s->sfd = signalfd (-1, &mask, SFD_CLOEXEC);
  if (s->sfd == -1)
    {
      fprintf (stderr, "%s: signalfd: %m\n", o->progname);
      return -1;
    }
  fflush (NULL);
  s->child = fork ();
  if (s->child == -1)
    {
      fprintf (stderr, "%s: Failed to fork: %m\n", o->progname);
      return -1;
    }
  if (s->child == 0)
    exec_nbdkit (o, parent, errp[1], ctl[1], &s->oldmask);

  close (errp[1]);
  close (ctl[1]);
  s->errfd = errp[0];
  s->ctl = ctl[0];
  for (unsigned i = 0; i < o->activation_fds; ++i)
    close (3 + i);
  return 0;
}

/* One signal from the signalfd. */
static void
on_signalfd (struct state *s)
{
  struct signalfd_siginfo si;

  if (read (s->sfd, &si, sizeof si) != sizeof si)
    return;
  if (si.ssi_signo != SIGCHLD)
    {
      if (!s->exited)
        on_signal (s, si.ssi_signo);
      return;
    }
  if (!s->exited && waitpid (s->child, &s->status, WNOHANG) == s->child)
    s->exited = true;
}

/* Relay nbdkit's stderr, answer the control socket and the signals
 * until nbdkit has exited and its stderr is read.
 */
static void
run (struct state *s, struct relay *relay)
{
  bool err_open = true;

  while (!s->exited || err_open)
    {
      struct pollfd p[3] = {
        { .fd = s->sfd, .events = POLLIN },
        { .fd = err_open ? s->errfd : -1, .events = POLLIN },
        { .fd = s->exited ? -1 : s->ctl, .events = POLLIN },
      };

      /* Once nbdkit is gone, its stderr is read to the end (it is
       * closed then, unless something nbdkit started still holds it:
       * then wait no more than a moment).
       */
      if (poll (p, 3, s->exited ? 200 : -1) == -1)
        {
          if (errno == EINTR)
            continue;
          fprintf (stderr, "%s: poll: %m\n", s->o->progname);
          break;
        }
      if (s->exited && !(p[1].revents & (POLLIN | POLLHUP)))
        break;
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
        err_open = relay_read (relay, s->errfd);
      if (p[2].revents & (POLLIN | POLLHUP | POLLERR))
        on_control (s);
      if (p[0].revents & POLLIN)
        on_signalfd (s);
    }
  if (err_open)
    relay_lines (relay, true);
}

/* qemu-nbd removes its socket when it exits.  Only if it is still the
 * one nbdkit made: after the last client left, the lifecycle filter has
 * removed it already, and another server may have made a new one.
 */
static void
remove_own_socket (const struct state *s)
{
  struct stat st;

  if (s->o->sockpath && s->have_sock && lstat (s->o->sockpath, &st) == 0
      && S_ISSOCK (st.st_mode) && st.st_ino == s->sock.st_ino
      && st.st_dev == s->sock.st_dev)
    unlink (s->o->sockpath);
}

/* Our exit status, as qemu-nbd's would be. */
static int
exit_status (const struct state *s)
{
  if (s->killed)
    {
      /* Terminated by a signal, after the drain: qemu-nbd exits 0. */
      if (s->flush_failed)
        {
          fprintf (stderr,
                   "%s: the flush at exit failed: data written may "
                   "not be on disk\n",
                   s->o->progname);
          return EXIT_FAILURE;
        }
      return EXIT_SUCCESS;
    }
  if (WIFSIGNALED (s->status))
    {
      /* Die the same way, so our parent sees what happened. */
      signal (WTERMSIG (s->status), SIG_DFL);
      raise (WTERMSIG (s->status));
      return 128 + WTERMSIG (s->status);
    }
  return WEXITSTATUS (s->status);
}

int
supervise (const struct supervise_opts *o)
{
  struct state s = { .o = o, .ctl = -1 };
  struct relay relay = { .raw = o->raw_stderr };

  if (start (&s) == -1)
    return EXIT_FAILURE;
  run (&s, &relay);
  close (s.errfd);
  if (s.ctl >= 0)
    close (s.ctl);
  close (s.sfd);
  remove_own_socket (&s);
  sigprocmask (SIG_SETMASK, &s.oldmask, NULL);
  return exit_status (&s);
}

int
supervise_daemonize (void)
{
  int fds[2], status;
  pid_t pid;
  char c;
  ssize_t n;

  if (pipe2 (fds, O_CLOEXEC) == -1)
    {
      perror ("pipe");
      exit (EXIT_FAILURE);
    }
  fflush (NULL);
  pid = fork ();
  if (pid == -1)
    {
      perror ("Failed to fork");
      exit (EXIT_FAILURE);
    }
  if (pid == 0)
    {
      int null = open ("/dev/null", O_RDWR);

      /* Like qemu-nbd's daemon: a new session, stdin and stdout on
       * /dev/null, stderr kept until the server is ready (on_ready).
       */
      close (fds[0]);
      setsid ();
      if (null >= 0)
        {
          dup2 (null, STDIN_FILENO);
          dup2 (null, STDOUT_FILENO);
          if (null > STDERR_FILENO)
            close (null);
        }
      return fds[1];
    }

  close (fds[1]);
  while ((n = read (fds[0], &c, 1)) == -1 && errno == EINTR)
    ;
  if (n == 1)
    exit (EXIT_SUCCESS);
  /* The daemon exited before the server was ready: it said why. */
  while (waitpid (pid, &status, 0) == -1 && errno == EINTR)
    ;
  exit (EXIT_FAILURE);
}
