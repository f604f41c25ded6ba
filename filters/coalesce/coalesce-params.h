/* nbdstack coalesce filter: its parameters, listed once.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The filter's .config and .config_help, nbdstack-nbd's settings and
 * the documentation test are all expanded from this list (see
 * common/param-table.h).  nbdkit-free.
 */
#ifndef NBDSTACK_COALESCE_PARAMS_H
#define NBDSTACK_COALESCE_PARAMS_H

#include "param-table.h"

#define COALESCE_PARAMS(P)                                                     \
  P ("coalesce-mode", "writeback|writethrough",                                \
     "Buffering mode (default writeback).", PARAM_SETTING)                     \
  P ("coalesce-size", "SIZE", "Buffer memory limit (default 64M).",            \
     PARAM_SETTING)                                                            \
  P ("coalesce-delay", "MS", "Write back data older than this (default 50).",  \
     PARAM_SETTING)                                                            \
  P ("coalesce-max-write", "SIZE", "Largest merged write (default 4M).",       \
     PARAM_SETTING)                                                            \
  P ("coalesce-threads", "N", "Background writers (default 8).",               \
     PARAM_SETTING)                                                            \
  P ("coalesce-order-wait", "MS",                                              \
     "Wait for the writes before a large one (default 20 with "                \
     "coalesce-interleaved=buffer, else 0).",                                  \
     PARAM_SETTING)                                                            \
  P ("coalesce-hugepages", "BOOL", "Use 2M pages (default: if size >= 32M).",  \
     PARAM_SETTING)                                                            \
  P ("coalesce-interleaved", "auto|direct|buffer",                             \
     "Writes of 64K+ from several connections (default auto).", PARAM_SETTING)

#endif /* NBDSTACK_COALESCE_PARAMS_H */
