/* nbdstack tests: every component's parameter list, one line each.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Prints "COMPONENT KEY setting|plain" for every entry of every
 * <component>-params.h (common/param-table.h), for
 * test-build-params.sh, which checks that each key is documented.  A
 * component whose list is added must be added here too.
 */
#include <config.h>

#include <stdio.h>

#include "filters/coalesce/coalesce-params.h"
#include "filters/discard/discard-params.h"
#include "filters/lifecycle/lifecycle-params.h"
#include "filters/zerodetect/zerodetect-params.h"
#include "plugins/image/image-params.h"

static const struct param_spec image[] = { IMAGE_PARAMS (PARAM_SPEC) };
static const struct param_spec coalesce[] = { COALESCE_PARAMS (PARAM_SPEC) };
static const struct param_spec zerodetect[]
    = { ZERODETECT_PARAMS (PARAM_SPEC) };
static const struct param_spec discard[] = { DISCARD_PARAMS (PARAM_SPEC) };
static const struct param_spec lifecycle[] = { LIFECYCLE_PARAMS (PARAM_SPEC) };

/* clang-format 14 and 19 disagree on a brace list in a macro. */
/* clang-format off */
#define COMPONENT(t) { #t, t, sizeof t / sizeof t[0] }
/* clang-format on */

static const struct
{
  const char *name;
  const struct param_spec *params;
  size_t n;
} components[] = {
  COMPONENT (image),   COMPONENT (coalesce),  COMPONENT (zerodetect),
  COMPONENT (discard), COMPONENT (lifecycle),
};

int
main (void)
{
  for (size_t c = 0; c < sizeof components / sizeof components[0]; ++c)
    for (size_t i = 0; i < components[c].n; ++i)
      printf ("%s %s %s\n", components[c].name, components[c].params[i].key,
              components[c].params[i].flags & PARAM_SETTING ? "setting"
                                                            : "plain");
  return 0;
}
