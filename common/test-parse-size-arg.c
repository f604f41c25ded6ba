/* Unit test of common/parse-size-arg.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Good sizes come back scaled; each bad one must end the program with
 * status 1 and one line naming the program and the text (run in a child
 * whose stderr goes to a pipe).
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parse-size-arg.h"

static void
assert_refused (const char *s, uint64_t min)
{
  int fds[2];
  pid_t pid;
  int status;
  char expected[256], got[256] = "";
  ssize_t n;

  assert (pipe (fds) == 0);
  pid = fork ();
  assert (pid >= 0);
  if (pid == 0)
    {
      dup2 (fds[1], 2);
      parse_size_arg ("prog", s, min);
      _exit (0); /* accepted: the parent sees status 0 and fails */
    }
  close (fds[1]);
  n = read (fds[0], got, sizeof got - 1);
  close (fds[0]);
  assert (waitpid (pid, &status, 0) == pid);
  if (!WIFEXITED (status) || WEXITSTATUS (status) != EXIT_FAILURE)
    {
      fprintf (stderr, "\"%s\" (min %" PRIu64 ") was not refused\n", s, min);
      exit (EXIT_FAILURE);
    }
  assert (n > 0);
  snprintf (expected, sizeof expected, "prog: bad size: %s\n", s);
  assert (strcmp (got, expected) == 0);
}

int
main (void)
{
  assert (parse_size_arg ("prog", "0", 0) == 0);
  assert (parse_size_arg ("prog", "512", 1) == 512);
  assert (parse_size_arg ("prog", "0x200", 1) == 512);
  assert (parse_size_arg ("prog", "4k", 1) == 4096);
  assert (parse_size_arg ("prog", "8M", 1) == 8 << 20);
  assert (parse_size_arg ("prog", "4G", 1) == UINT64_C (4) << 30);
  assert (parse_size_arg ("prog", "3T", 1) == UINT64_C (3) << 40);
  assert (parse_size_arg ("prog", "2p", 1) == UINT64_C (2) << 50);
  assert (parse_size_arg ("prog", "15E", 1) == UINT64_C (15) << 60);
  assert (parse_size_arg ("prog", "77b", 1) == 77);
  assert (size_suffix_shift ('\0') == 0 && size_suffix_shift ('k') == 10
          && size_suffix_shift ('x') == -1);
  assert (parse_size_arg ("prog", "17179869183G", 1)
          == UINT64_C (17179869183) << 30);

  assert_refused ("", 0);
  assert_refused ("k", 0);
  assert_refused ("0", 1);
  assert_refused ("-1", 0);
  assert_refused ("12X", 0);
  assert_refused ("16E", 0); /* 2^64 */
  assert_refused ("12kb", 0);
  assert_refused ("1 M", 0);
  assert_refused ("17179869184G", 0); /* 2^64: does not fit */
  assert_refused ("99999999999999999999", 0);
  return 0;
}
