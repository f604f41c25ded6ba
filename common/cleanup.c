/* nbdstack: out-of-line bodies for the cleanup attributes in cleanup.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include "cleanup.h"

void
cleanup_free (void *ptr)
{
  free (*(void **)ptr);
}
