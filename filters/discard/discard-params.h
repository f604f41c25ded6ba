/* nbdstack discard filter: its parameters, listed once.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The filter's .config and .config_help, nbdstack-nbd's settings and
 * the documentation test are all expanded from this list (see
 * common/param-table.h).  nbdkit-free.  discard= and discard-zero-trim=
 * are not settings: nbdstack-nbd sets them from --discard and
 * --detect-zeroes.
 */
#ifndef NBDSTACK_DISCARD_PARAMS_H
#define NBDSTACK_DISCARD_PARAMS_H

#include "param-table.h"

#define DISCARD_PARAMS(P)                                                      \
  P ("discard", "pass|ignore|zero|refuse", "What trim does (default pass).",   \
     PARAM_PLAIN)                                                              \
  P ("discard-granularity", "SIZE", "Shrink trims to SIZE-aligned ranges.",    \
     PARAM_SETTING)                                                            \
  P ("discard-max", "SIZE", "Split trims longer than SIZE.", PARAM_SETTING)    \
  P ("discard-zero-trim", "keep|never|always",                                 \
     "MAY_TRIM on zero requests (default keep).", PARAM_PLAIN)

#endif /* NBDSTACK_DISCARD_PARAMS_H */
