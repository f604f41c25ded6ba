/* nbdstack-nbd: which nbdkit runs, and where our plugin and filters are.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "die.h"
#include "locate.h"

const char *
nbdkit_program (void)
{
  const char *p = getenv ("NBDSTACK_NBDKIT");

  return p && *p ? p : "nbdkit";
}

/* "1.32.5" from `nbdkit --version`, or NULL if it cannot be run. */
char *
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

void
nbdkit_check_version (void)
{
  char *nv = nbdkit_version ();

  if (nv == NULL)
    die ("cannot run %s --version (is nbdkit installed? NBDSTACK_NBDKIT "
         "names it)",
         nbdkit_program ());
  if (strcmp (nv, NBDKIT_BUILD_VERSION) != 0)
    die ("nbdkit is %s but the nbdstack filters were built for %s: rebuild "
         "nbdstack",
         nv, NBDKIT_BUILD_VERSION);
  free (nv);
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

/* Where our plugin, filters and preload library are: the build tree
 * named by NBDSTACK_BUILDDIR, else the build tree this program was run
 * from (or NULL), else the directories they were installed into.  Our
 * filters are always named by path, so a private install does not
 * depend on nbdkit's own filterdir.
 */
static const char *
builddir (void)
{
  static char *dir;
  static bool looked;
  const char *env = getenv ("NBDSTACK_BUILDDIR");

  if (!looked)
    {
      looked = true;
      dir = env && *env ? strdup (env) : exe_builddir ();
    }
  return dir;
}

/* P if it is readable, else die naming it. */
static char *
readable (char *p)
{
  if (access (p, R_OK) == -1)
    die ("%s: %m (is nbdstack installed? NBDSTACK_BUILDDIR names a build "
         "tree)",
         p);
  return p;
}

char *
component_path (const char *kind, const char *name)
{
  const char *b = builddir ();
  char *p;
  int r;

  if (b)
    r = asprintf (&p, "%s/%ss/%s/.libs/nbdkit-%s-%s.so", b, kind, name, name,
                  kind);
  else
    r = asprintf (&p, "%s/nbdkit-%s-%s.so",
                  strcmp (kind, "plugin") == 0 ? PLUGINDIR : FILTERDIR, name,
                  kind);
  if (r == -1)
    die ("out of memory");
  return readable (p);
}

char *
preload_path (const char *name)
{
  const char *b = builddir ();
  char *p;
  int r;

  if (b)
    r = asprintf (&p, "%s/nbd/.libs/nbdstack-%s.so", b, name);
  else
    r = asprintf (&p, "%s/nbdstack-%s.so", PKGLIBDIR, name);
  if (r == -1)
    die ("out of memory");
  return readable (p);
}
