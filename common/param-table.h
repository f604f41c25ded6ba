/* nbdstack: each component's parameters, listed once.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: a parameter's name, the shape of its value and its help
 * line are written in exactly one place, the component's X-macro list
 * (<component>-params.h), and everything that names parameters is
 * expanded from it: the component's .config lookup, its .config_help
 * string, nbdstack-nbd's table of settings, and the test that checks
 * the man page and the README name every entry.
 *
 *   #define FOO_PARAMS(P)                                             \
 *     P ("foo-size", "SIZE", "buffer size (default 64M)", PARAM_SETTING) \
 *     P ("foo-debug", "BOOL", "log every request", PARAM_PLAIN)
 *
 *   .config_help = FOO_PARAMS (PARAM_HELP_LINE),      a string constant
 *   static const struct param_spec foo_params[] = { FOO_PARAMS (PARAM_SPEC) };
 *
 * No nbdkit dependency: nbd/ and tests include the lists too.
 */
#ifndef NBDSTACK_PARAM_TABLE_H
#define NBDSTACK_PARAM_TABLE_H

#include <stddef.h>
#include <string.h>

/* flags: PARAM_SETTING marks a parameter that nbdstack-nbd also takes
 * as a setting (NBDSTACK_OPTIONS, the config file) and passes on as it
 * is; PARAM_PLAIN one it does not (it sets it itself, or never).
 */
#define PARAM_PLAIN 0u
#define PARAM_SETTING 1u

struct param_spec
{
  const char *key;   /* as nbdkit takes it: key=value */
  const char *value; /* what the value looks like: SIZE, MS, a|b|c */
  const char *help;  /* one line */
  unsigned flags;    /* PARAM_* */
};

/* Expanders for a component's list. */
#define PARAM_SPEC(key, value, help, flags) { key, value, help, flags },
#define PARAM_HELP_LINE(key, value, help, flags) key "=" value "  " help "\n"

/* The entry for key in t[0, n), or NULL. */
static inline const struct param_spec *
param_find (const struct param_spec *t, size_t n, const char *key)
{
  for (size_t i = 0; i < n; ++i)
    if (strcmp (t[i].key, key) == 0)
      return &t[i];
  return NULL;
}

/* Define a filter's .config callback NAME: a key that TABLE (an array
 * of struct param_spec) lists is the filter's own and is set by
 * SET (key, value), which returns 0 or -1 after nbdkit_error; any other
 * key goes on to the next layer.  Expanded in the filter, so this
 * header still needs nothing of nbdkit.
 */
#define PARAM_FILTER_CONFIG(name, table, set)                                  \
  static int name (nbdkit_next_config *next, nbdkit_backend *nxdata,           \
                   const char *key, const char *value)                         \
  {                                                                            \
    if (param_find (table, sizeof table / sizeof table[0], key) == NULL)       \
      return next (nxdata, key, value);                                        \
    return set (key, value);                                                   \
  }

#endif /* NBDSTACK_PARAM_TABLE_H */
