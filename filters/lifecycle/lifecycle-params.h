/* nbdstack lifecycle filter: its parameters, listed once
 * (param-table.h).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * nbdstack-nbd sets every one itself (from -e, -t, -k), so none is
 * PARAM_SETTING.  No nbdkit dependency.
 */
#ifndef NBDSTACK_LIFECYCLE_PARAMS_H
#define NBDSTACK_LIFECYCLE_PARAMS_H

#include "param-table.h"

/* clang-format off */
#define LIFECYCLE_PARAMS(P)                                                   \
  P ("lifecycle-limit", "N", "At most N clients at once (0: no limit).",     \
     PARAM_PLAIN)                                                             \
  P ("lifecycle-exit-last", "BOOL", "Shut down when the last client "         \
     "leaves.", PARAM_PLAIN)                                                  \
  P ("lifecycle-unlink", "PATH", "Remove the socket PATH before that.",      \
     PARAM_PLAIN)                                                             \
  P ("lifecycle-control", "FD", "Socket to the supervisor (R, T, F).",       \
     PARAM_PLAIN)                                                             \
  P ("lifecycle-flush", "BOOL", "Flush when drained (default true).",        \
     PARAM_PLAIN)
/* clang-format on */

#endif /* NBDSTACK_LIFECYCLE_PARAMS_H */
