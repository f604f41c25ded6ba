/* nbdstack zerodetect filter: its parameters, listed once
 * (param-table.h).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * PARAM_SETTING: nbdstack-nbd passes the key on from its settings
 * (zerodetect= it sets itself, from --detect-zeroes).  No nbdkit
 * dependency.
 */
#ifndef NBDSTACK_ZERODETECT_PARAMS_H
#define NBDSTACK_ZERODETECT_PARAMS_H

#include "param-table.h"

/* clang-format off */
#define ZERODETECT_PARAMS(P)                                                  \
  P ("zerodetect", "on|unmap|off", "Turn zero writes into zero requests "     \
     "(default on).", PARAM_PLAIN)                                            \
  P ("zerodetect-granularity", "SIZE", "Split writes at SIZE-aligned zero "   \
     "blocks (default 64K, 0 = whole requests only).", PARAM_SETTING)
/* clang-format on */

#endif /* NBDSTACK_ZERODETECT_PARAMS_H */
