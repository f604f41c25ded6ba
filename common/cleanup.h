/* nbdstack: scope-based cleanup helpers (GCC/Clang __attribute__((cleanup))).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: whatever a macro here takes (memory, a lock) is given back
 * when the scope that took it ends, on every path out of it: return,
 * break, goto out of the block.  Nothing is given back twice.
 */
#ifndef NBDSTACK_CLEANUP_H
#define NBDSTACK_CLEANUP_H

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "unique-name.h"

/* Bodies of the attributes below (cleanup.c). */
extern void cleanup_free (void *ptr);
extern void cleanup_mutex_unlock (pthread_mutex_t **ptr);
extern void cleanup_rwlock_unlock (pthread_rwlock_t **ptr);

/* free () the pointer when it goes out of scope, on every path. */
#define CLEANUP_FREE __attribute__ ((cleanup (cleanup_free)))

/* Lock MUTEX now and unlock it when the enclosing scope ends (nbdkit's
 * idiom).  A failure to lock is a bug (EDEADLK, EINVAL): it asserts.
 */
#define ACQUIRE_LOCK_FOR_CURRENT_SCOPE(mutex)                                  \
  ACQUIRE_LOCK_1 (UNIQUE_NAME (scope_lock_), (mutex))
#define ACQUIRE_LOCK_1(name, mutex)                                            \
  __attribute__ ((cleanup (cleanup_mutex_unlock))) pthread_mutex_t *name       \
      = (mutex);                                                               \
  do                                                                           \
    {                                                                          \
      int lock_r_ = pthread_mutex_lock (name);                                 \
      assert (lock_r_ == 0);                                                   \
      (void)lock_r_;                                                           \
    }                                                                          \
  while (0)

/* The same for a read-write lock, shared or exclusive. */
#define ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE(rwlock)                               \
  ACQUIRE_RWLOCK_1 (UNIQUE_NAME (scope_rwlock_), (rwlock),                     \
                    pthread_rwlock_rdlock)
#define ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE(rwlock)                               \
  ACQUIRE_RWLOCK_1 (UNIQUE_NAME (scope_rwlock_), (rwlock),                     \
                    pthread_rwlock_wrlock)
#define ACQUIRE_RWLOCK_1(name, rwlock, take)                                   \
  __attribute__ ((cleanup (cleanup_rwlock_unlock))) pthread_rwlock_t *name     \
      = (rwlock);                                                              \
  do                                                                           \
    {                                                                          \
      int lock_r_ = take (name);                                               \
      assert (lock_r_ == 0);                                                   \
      (void)lock_r_;                                                           \
    }                                                                          \
  while (0)

#endif /* NBDSTACK_CLEANUP_H */
