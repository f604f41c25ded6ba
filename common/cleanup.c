/* nbdstack: out-of-line bodies for the cleanup attributes in cleanup.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include "cleanup.h"

void
cleanup_free (void *ptr)
{
  free (*(void **) ptr);
}

void
cleanup_mutex_unlock (pthread_mutex_t **ptr)
{
  pthread_mutex_unlock (*ptr);
}

void
cleanup_rwlock_unlock (pthread_rwlock_t **ptr)
{
  pthread_rwlock_unlock (*ptr);
}
