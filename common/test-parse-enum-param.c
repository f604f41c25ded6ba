/* Unit test of common/parse-enum-param.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdkit_error is stubbed to keep the message, which is checked word
 * for word: the tests of every component match these messages.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nbdkit-plugin.h>

#include "parse-enum-param.h"
#include "test-nbdkit-error.h"

enum colour
{
  RED = 10,
  GREEN = 20,
  BLUE = 30
};
static const struct enum_param_word colours[] = {
  { "red", RED },
  { "green", GREEN },
  { "blue", BLUE },
};

/* Parses, and checks that no error was reported. */
static int
good (const struct enum_param_word *words, size_t n, const char *value)
{
  unsigned e = errors;
  int r = -12345;

  assert (parse_enum_param_n ("key", value, words, n, &r) == 0);
  assert (errors == e);
  assert (r != -12345);
  return r;
}

/* Refused with exactly 'want', and *result left alone. */
static void
bad (const struct enum_param_word *words, size_t n, const char *key,
     const char *value, const char *want)
{
  unsigned e = errors;
  int r = -12345;

  assert (parse_enum_param_n (key, value, words, n, &r) == -1);
  assert (errors == e + 1);
  assert (r == -12345);
  if (strcmp (message, want) != 0)
    {
      fprintf (stderr, "got '%s'\nwant '%s'\n", message, want);
      exit (1);
    }
}

static void
test_words (void)
{
  /* The value comes from the table, not from the position. */
  assert (good (colours, 3, "red") == RED);
  assert (good (colours, 3, "green") == GREEN);
  assert (good (colours, 3, "blue") == BLUE);

  /* Exact: no case folding, no prefixes, no surrounding space. */
  bad (colours, 3, "colour", "RED", "colour=RED: expected red, green or blue");
  bad (colours, 3, "colour", "re", "colour=re: expected red, green or blue");
  bad (colours, 3, "colour", "reddish",
       "colour=reddish: expected red, green or blue");
  bad (colours, 3, "colour", " red",
       "colour= red: expected red, green or blue");
  bad (colours, 3, "colour", "", "colour=: expected red, green or blue");
  /* A table without true/false takes no boolean spelling. */
  bad (colours, 3, "colour", "true",
       "colour=true: expected red, green or blue");
  bad (colours, 3, "colour", "1", "colour=1: expected red, green or blue");
  /* A % in the value is printed, not interpreted. */
  bad (colours, 3, "colour", "%s%n",
       "colour=%s%n: expected red, green or blue");

  /* The list reads as English for every length. */
  bad (colours, 1, "k", "x", "k=x: expected red");
  bad (colours, 2, "k", "x", "k=x: expected red or green");
  {
    static const struct enum_param_word four[] = {
      { "pass", 0 },
      { "ignore", 1 },
      { "zero", 2 },
      { "refuse", 3 },
    };
    int r = -1;

    assert (good (four, ARRAY_SIZE (four), "refuse") == 3);
    bad (four, ARRAY_SIZE (four), "discard", "foo",
         "discard=foo: expected pass, ignore, zero or refuse");
    /* The macro takes the count from the table. */
    assert (parse_enum_param ("discard", "zero", four, &r) == 0 && r == 2);
    assert (parse_enum_param ("discard", "x", four, &r) == -1 && r == 2);
    assert (strcmp (message, "discard=x: expected pass, ignore, zero or refuse")
            == 0);
  }
}

/* on/off as enum words (zerodetect=on|unmap|off) are not booleans. */
static void
test_on_off_words (void)
{
  static const struct enum_param_word zd[] = {
    { "on", 0 },
    { "unmap", 1 },
    { "off", 2 },
  };

  assert (good (zd, 3, "on") == 0);
  assert (good (zd, 3, "off") == 2);
  bad (zd, 3, "zerodetect", "ON", "zerodetect=ON: expected on, unmap or off");
  bad (zd, 3, "zerodetect", "yes", "zerodetect=yes: expected on, unmap or off");
}

/* true/false plus other words, as create=true|false|force. */
static void
test_bool_with_words (void)
{
  static const struct enum_param_word create[] = {
    { "true", 1 },
    { "false", 0 },
    { "force", 2 },
  };
  static const char *const yes[]
      = { "true", "TRUE", "True", "yes", "YES", "on", "On", "1" };
  static const char *const no[]
      = { "false", "FALSE", "no", "No", "off", "OFF", "0" };

  for (size_t i = 0; i < ARRAY_SIZE (yes); ++i)
    assert (good (create, 3, yes[i]) == 1);
  for (size_t i = 0; i < ARRAY_SIZE (no); ++i)
    assert (good (create, 3, no[i]) == 0);
  assert (good (create, 3, "force") == 2);
  /* Only the boolean words fold case. */
  bad (create, 3, "create", "FORCE",
       "create=FORCE: expected true, false or force");
  bad (create, 3, "create", "maybe",
       "create=maybe: expected true, false or force");
  bad (create, 3, "create", "2", "create=2: expected true, false or force");
  bad (create, 3, "create", "", "create=: expected true, false or force");
  bad (create, 3, "create", "y", "create=y: expected true, false or force");
}

static void
test_bool (void)
{
  static const char *const yes[] = { "true", "TRUE", "yes", "on", "1" };
  static const char *const no[] = { "false", "no", "NO", "off", "0" };
  static const char *const neither[]
      = { "maybe", "", "2", "-1", "t", "yess", "true ", "enable" };
  bool b;

  for (size_t i = 0; i < ARRAY_SIZE (yes); ++i)
    {
      b = false;
      assert (parse_bool_param ("readonly", yes[i], &b) == 0 && b == true);
    }
  for (size_t i = 0; i < ARRAY_SIZE (no); ++i)
    {
      b = true;
      assert (parse_bool_param ("readonly", no[i], &b) == 0 && b == false);
    }
  for (size_t i = 0; i < ARRAY_SIZE (neither); ++i)
    {
      char want[128];
      unsigned e = errors;

      b = true;
      assert (parse_bool_param ("readonly", neither[i], &b) == -1);
      assert (errors == e + 1 && b == true);
      snprintf (want, sizeof want, "readonly=%s: expected true or false",
                neither[i]);
      assert (strcmp (message, want) == 0);
    }
}

/* A table whose list does not fit the message is a programming error,
 * caught by an assertion rather than a cut-off message.
 */
static void
test_list_too_long (void)
{
  char name[200];
  struct enum_param_word words[2] = { { name, 0 }, { name, 1 } };
  pid_t pid;
  int status, r;

  memset (name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  pid = fork ();
  assert (pid != -1);
  if (pid == 0)
    {
      if (freopen ("/dev/null", "w", stderr) == NULL)
        _exit (2);
      parse_enum_param_n ("k", "v", words, 2, &r);
      _exit (3);
    }
  assert (waitpid (pid, &status, 0) == pid);
  assert (WIFSIGNALED (status) && WTERMSIG (status) == SIGABRT);
}

int
main (void)
{
  test_words ();
  test_on_off_words ();
  test_bool_with_words ();
  test_bool ();
  test_list_too_long ();
  printf ("PASS: parse-enum-param\n");
  return 0;
}
