/* nbdstack lifecycle filter: its parameters, listed once.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The filter's .config and .config_help and the documentation test are
 * expanded from this list (see common/param-table.h).  nbdkit-free.
 * None is a setting: nbdstack-nbd sets them all itself, from --shared,
 * --persistent and its supervisor.
 */
#ifndef NBDSTACK_LIFECYCLE_PARAMS_H
#define NBDSTACK_LIFECYCLE_PARAMS_H

#include "param-table.h"

#define LIFECYCLE_PARAMS(P)                                                    \
  P ("lifecycle-limit", "N", "At most N clients at once (0: no limit).",       \
     PARAM_PLAIN)                                                              \
  P ("lifecycle-exit-last", "BOOL", "Shut down when the last client leaves.",  \
     PARAM_PLAIN)                                                              \
  P ("lifecycle-unlink", "PATH", "Remove the socket PATH before that.",        \
     PARAM_PLAIN)                                                              \
  P ("lifecycle-control", "FD", "Socket to the supervisor (R, T, F).",         \
     PARAM_PLAIN)                                                              \
  P ("lifecycle-flush", "BOOL", "Flush when drained (default true).",          \
     PARAM_PLAIN)

#endif /* NBDSTACK_LIFECYCLE_PARAMS_H */
