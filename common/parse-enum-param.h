/* nbdstack: enum and boolean parameters, with one error message style.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Include after <nbdkit-plugin.h> or <nbdkit-filter.h>.
 *
 * Every component refuses a bad word with the same line,
 * "KEY=VALUE: expected a, b or c", which names the parameter (as
 * nbdkit_parse_bool's "could not decipher boolean" does not) and lists
 * what would have been accepted, from the same table that is matched.
 */
#ifndef NBDSTACK_PARSE_ENUM_PARAM_H
#define NBDSTACK_PARSE_ENUM_PARAM_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "array-size.h"

struct enum_param_word
{
  const char *name;
  int value;
};

/* Set *result to the value of the word in words[0..n) that 'value' is.
 * Words match exactly (zerodetect=ON is refused), except that a table
 * holding "true" and "false" takes them in every spelling
 * nbdkit_parse_bool takes (yes/no, on/off, 1/0, any case), so that a
 * boolean, or a boolean with extra words such as create=true|false|force,
 * reads like nbdkit's own.  Returns -1 after nbdkit_error otherwise;
 * the message lists the words in table order.
 */
static inline int
parse_enum_param_n (const char *key, const char *value,
                    const struct enum_param_word *words, size_t n, int *result)
{
  static const char *const true_words[] = { "true", "yes", "on", "1" };
  static const char *const false_words[] = { "false", "no", "off", "0" };
  const char *as_bool = NULL;
  char list[256];
  size_t len = 0;

  assert (n > 0);
  for (size_t i = 0; i < n; ++i)
    {
      if (strcmp (value, words[i].name) == 0)
        {
          *result = words[i].value;
          return 0;
        }
    }
  for (size_t i = 0; i < ARRAY_SIZE (true_words); ++i)
    {
      if (strcasecmp (value, true_words[i]) == 0)
        as_bool = "true";
      if (strcasecmp (value, false_words[i]) == 0)
        as_bool = "false";
    }
  for (size_t i = 0; as_bool && i < n; ++i)
    {
      if (strcmp (as_bool, words[i].name) == 0)
        {
          *result = words[i].value;
          return 0;
        }
    }

  for (size_t i = 0; i < n; ++i)
    {
      const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";
      int r = snprintf (list + len, sizeof list - len, "%s%s", sep,
                        words[i].name);

      /* The tables are constants: one too long to list is a bug here. */
      assert (r >= 0 && (size_t)r < sizeof list - len);
      len += r;
    }
  nbdkit_error ("%s=%s: expected %s", key, value, list);
  return -1;
}

/* The usual call: 'words' is a table (an array), whose size is known. */
#define parse_enum_param(key, value, words, result)                            \
  parse_enum_param_n ((key), (value), (words), ARRAY_SIZE (words), (result))

/* A boolean parameter: nbdkit_parse_bool's spellings, and on error
 * "KEY=VALUE: expected true or false".
 */
static inline int
parse_bool_param (const char *key, const char *value, bool *result)
{
  static const struct enum_param_word words[] = {
    { "true", true },
    { "false", false },
  };
  int r;

  if (parse_enum_param (key, value, words, &r) == -1)
    return -1;
  *result = r;
  return 0;
}

#endif /* NBDSTACK_PARSE_ENUM_PARAM_H */
