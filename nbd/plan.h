/* nbdstack-nbd: what a qemu-nbd command line comes to, as nbdkit's.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: everything qemu-nbd checks before it serves (socket
 * activation, the settings, the image opened and probed, the byte
 * range, the nbdkit version) is checked here, in qemu-nbd's order, and
 * refused with one line and exit 1, so that nbdkit is only started on a
 * command line it will serve.  Nothing is started here.
 */
#ifndef NBDSTACK_NBD_PLAN_H
#define NBDSTACK_NBD_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "argv.h"
#include "cmdline.h"
#include "imagespec.h"
#include "probe.h"
#include "settings.h"

struct plan
{
  const struct cmdline *cmd;
  struct settings settings;
  struct image_spec spec;
  struct image_info info;
  unsigned activation_fds; /* sockets from systemd (LISTEN_FDS) */
  bool readonly;           /* -r, -l, or "read-only" in the image spec */
  bool coalesce;           /* the coalesce filter (the coalesce setting) */
  bool have_range;         /* the offset filter serves this byte range */
  uint64_t range_offset, range_size;
  bool nbdkit_debug; /* the nbdkit-debug setting */
  /* GLIBC_TUNABLES for nbdkit (the malloc-hugepages setting), or NULL
   * to leave the environment as it is.
   */
  char *glibc_tunables;
  /* LD_PRELOAD for nbdkit (the align-buffers setting), or NULL to leave
   * the environment as it is.
   */
  char *ld_preload;
  struct argv_list argv; /* nbdkit's command line */
};

/* Check C as qemu-nbd does before it serves and build nbdkit's command
 * line in P->argv; exits 1 with one line on anything refused.
 */
extern void plan_make (const struct cmdline *c, struct plan *p);

#endif /* NBDSTACK_NBD_PLAN_H */
