/* Unit test of common/param-table.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One list expanded both ways must give a table and a help string that
 * agree entry for entry, and param_find must find exactly the keys in
 * the list.
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "array-size.h"
#include "param-table.h"

#define TEST_PARAMS(P)                                                         \
  P ("alpha", "SIZE", "the first", PARAM_SETTING)                              \
  P ("beta", "on|off", "the second", PARAM_PLAIN)                              \
  P ("gamma-delta", "N", "the third", PARAM_SETTING)

static const struct param_spec table[] = { TEST_PARAMS (PARAM_SPEC) };
static const char help[] = TEST_PARAMS (PARAM_HELP_LINE);

int
main (void)
{
  char line[128];
  const char *p = help;

  assert (ARRAY_SIZE (table) == 3);
  for (size_t i = 0; i < ARRAY_SIZE (table); ++i)
    {
      const char *nl = strchr (p, '\n');

      assert (nl);
      snprintf (line, sizeof line, "%s=%s  %s", table[i].key, table[i].value,
                table[i].help);
      assert (strlen (line) == (size_t)(nl - p));
      assert (strncmp (line, p, nl - p) == 0);
      p = nl + 1;
      assert (param_find (table, ARRAY_SIZE (table), table[i].key)
              == &table[i]);
    }
  assert (*p == '\0');
  assert (table[0].flags == PARAM_SETTING && table[1].flags == PARAM_PLAIN);
  assert (param_find (table, ARRAY_SIZE (table), "gamma") == NULL);
  assert (param_find (table, ARRAY_SIZE (table), "") == NULL);
  assert (param_find (table, ARRAY_SIZE (table), "alphax") == NULL);
  printf ("PASS: param-table\n");
  return 0;
}
