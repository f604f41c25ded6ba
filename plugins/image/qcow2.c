/* nbdstack image plugin: qcow2 glue over lib/ (not yet implemented).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stddef.h>

#include "format.h"

/* Until qcow2 support exists, refuse qcow2 images outright: serving
 * one as raw would hand the client metadata instead of disk contents.
 */
static void *
qcow2_open (const struct image_options *opts)
{
  nbdkit_error ("%s: is a qcow2 image, which this build cannot serve yet "
                "(use format=raw to export the container file itself)",
                opts->file);
  return NULL;
}

const struct format_ops qcow2_format = {
  .name = "qcow2",
  .open = qcow2_open,
};
