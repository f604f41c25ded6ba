/* nbdstack zerodetect filter: its parameters, listed once.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The filter's .config and .config_help, nbdstack-nbd's settings and
 * the documentation test are all expanded from this list (see
 * common/param-table.h).  nbdkit-free.  zerodetect= itself is not a
 * setting: nbdstack-nbd sets it from --detect-zeroes.
 */
#ifndef NBDSTACK_ZERODETECT_PARAMS_H
#define NBDSTACK_ZERODETECT_PARAMS_H

#include "param-table.h"

#define ZERODETECT_PARAMS(P)                                                   \
  P ("zerodetect", "on|unmap|off",                                             \
     "Turn zero writes into zero requests (default on).", PARAM_PLAIN)         \
  P ("zerodetect-granularity", "SIZE",                                         \
     "Split writes at SIZE-aligned zero blocks (default 64K, 0 = whole "       \
     "requests only).",                                                        \
     PARAM_SETTING)

#endif /* NBDSTACK_ZERODETECT_PARAMS_H */
