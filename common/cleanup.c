/* nbdstack: out-of-line bodies for the cleanup attributes in cleanup.h.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include "cleanup.h"

/* free () what *ptr points at (NULL is fine). */
void
cleanup_free (void *ptr)
{
  free (*(void **)ptr);
}

/* Unlock the mutex *ptr names. */
void
cleanup_mutex_unlock (pthread_mutex_t **ptr)
{
  int r = pthread_mutex_unlock (*ptr);
  assert (r == 0);
  (void)r;
}

/* Unlock the read-write lock *ptr names. */
void
cleanup_rwlock_unlock (pthread_rwlock_t **ptr)
{
  int r = pthread_rwlock_unlock (*ptr);
  assert (r == 0);
  (void)r;
}
