/* nbdstack discard filter: its parameters, listed once (param-table.h).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * PARAM_SETTING: nbdstack-nbd passes the key on from its settings
 * (discard= and discard-zero-trim= it sets itself, from --discard).
 * No nbdkit dependency.
 */
#ifndef NBDSTACK_DISCARD_PARAMS_H
#define NBDSTACK_DISCARD_PARAMS_H

#include "param-table.h"

/* clang-format off */
#define DISCARD_PARAMS(P)                                                     \
  P ("discard", "pass|ignore|zero|refuse", "What trim does (default "         \
     "pass).", PARAM_PLAIN)                                                   \
  P ("discard-granularity", "SIZE", "Shrink trims to SIZE-aligned ranges.",  \
     PARAM_SETTING)                                                           \
  P ("discard-max", "SIZE", "Split trims longer than SIZE.", PARAM_SETTING)  \
  P ("discard-zero-trim", "keep|never|always", "MAY_TRIM on zero requests "   \
     "(default keep).", PARAM_PLAIN)
/* clang-format on */

#endif /* NBDSTACK_DISCARD_PARAMS_H */
