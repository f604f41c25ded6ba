/* nbdstack coalesce filter: its parameters, listed once (param-table.h).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * PARAM_SETTING: nbdstack-nbd passes the key on from its settings.
 * No nbdkit dependency.
 */
#ifndef NBDSTACK_COALESCE_PARAMS_H
#define NBDSTACK_COALESCE_PARAMS_H

#include "param-table.h"

/* clang-format off */
#define COALESCE_PARAMS(P)                                                    \
  P ("coalesce-mode", "writeback|writethrough", "Buffering mode (default "    \
     "writeback).", PARAM_SETTING)                                            \
  P ("coalesce-size", "SIZE", "Buffer memory limit (default 64M).",          \
     PARAM_SETTING)                                                           \
  P ("coalesce-delay", "MS", "Write back data older than this (default "      \
     "50).", PARAM_SETTING)                                                   \
  P ("coalesce-max-write", "SIZE", "Largest merged write (default 4M).",     \
     PARAM_SETTING)                                                           \
  P ("coalesce-threads", "N", "Background writers (default 8).",             \
     PARAM_SETTING)                                                           \
  P ("coalesce-order-wait", "MS", "Wait for the writes before a large one "   \
     "(default 20).", PARAM_SETTING)                                          \
  P ("coalesce-hugepages", "BOOL", "Use 2M pages (default: if size >= 32M).", \
     PARAM_SETTING)
/* clang-format on */

#endif /* NBDSTACK_COALESCE_PARAMS_H */
