/* nbdstack image plugin: every parameter, listed once (param-table.h).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Expanded into image.c's .config lookup and .config_help, and into
 * nbdstack-nbd's settings (PARAM_SETTING: the keys it takes as settings
 * and passes to the plugin as they are).  The formats' own keys are
 * here too: image.c refuses a key that is not listed before any format
 * sees it.  No nbdkit dependency.
 */
#ifndef NBDSTACK_IMAGE_PARAMS_H
#define NBDSTACK_IMAGE_PARAMS_H

#include "param-table.h"

#define IMAGE_PARAMS(P)                                                        \
  P ("file", "PATH", "(required) Image file or block device.", PARAM_PLAIN)    \
  P ("format", "auto|raw|qcow2", "Image format (default auto: sniffed).",      \
     PARAM_PLAIN)                                                              \
  P ("cache", "writeback|none", "Host page cache use (none = O_DIRECT).",      \
     PARAM_PLAIN)                                                              \
  P ("readonly", "true", "Never open the image for writing.", PARAM_PLAIN)     \
  P ("create", "true|force",                                                   \
     "Create the image first (a sparse raw file, or with format=qcow2 an "     \
     "empty qcow2 v3).",                                                       \
     PARAM_PLAIN)                                                              \
  P ("size", "SIZE", "create: the size of the image.", PARAM_PLAIN)            \
  P ("image-offset", "OFFSET",                                                 \
     "qcow2: the image starts at OFFSET in the file.", PARAM_PLAIN)            \
  P ("image-length", "LENGTH",                                                 \
     "qcow2: and is LENGTH bytes long (default: to the end of the file).",     \
     PARAM_PLAIN)                                                              \
  P ("backing", "refuse|none|follow",                                          \
     "qcow2: what to do with a backing file.", PARAM_PLAIN)                    \
  P ("backing-dir", "DIR", "qcow2: backing/data files must be inside.",        \
     PARAM_SETTING)                                                            \
  P ("backing-max-depth", "N", "qcow2: longest backing chain (default 16).",   \
     PARAM_SETTING)                                                            \
  P ("l2-cache-size", "SIZE", "qcow2: bytes of L2 cache (default <= 32M).",    \
     PARAM_SETTING)                                                            \
  P ("snapshot", "NAME|ID", "qcow2: serve this internal snapshot.",            \
     PARAM_PLAIN)                                                              \
  P ("layout", "auto|linear|compact",                                          \
     "qcow2: where new clusters go (default auto).", PARAM_SETTING)            \
  P ("repair", "leaks", "qcow2: give leaked clusters back at the open.",       \
     PARAM_PLAIN)                                                              \
  P ("cluster-size", "SIZE", "qcow2 create: 512 to 2M (default 64K).",         \
     PARAM_PLAIN)                                                              \
  P ("extended-l2", "on|off", "qcow2 create: subcluster allocation.",          \
     PARAM_PLAIN)                                                              \
  P ("preallocation", "off|metadata", "qcow2 create: allocate every cluster.", \
     PARAM_PLAIN)

#endif /* NBDSTACK_IMAGE_PARAMS_H */
