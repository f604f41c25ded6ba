/* nbdstack: scope-based cleanup helpers (GCC/Clang __attribute__((cleanup))).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_CLEANUP_H
#define NBDSTACK_CLEANUP_H

#include <pthread.h>
#include <stdlib.h>

extern void cleanup_free (void *ptr);
extern void cleanup_mutex_unlock (pthread_mutex_t **ptr);
extern void cleanup_rwlock_unlock (pthread_rwlock_t **ptr);

#define CLEANUP_FREE __attribute__ ((cleanup (cleanup_free)))

#define CLEANUP_CONCAT2(a, b) a##b
#define CLEANUP_CONCAT(a, b) CLEANUP_CONCAT2 (a, b)
#define CLEANUP_UNIQUE(name) CLEANUP_CONCAT (name, __LINE__)

/* Hold 'mutex' until the end of the enclosing scope. */
#define ACQUIRE_LOCK_FOR_CURRENT_SCOPE(mutex)                               \
  __attribute__ ((cleanup (cleanup_mutex_unlock))) pthread_mutex_t          \
      *CLEANUP_UNIQUE (_lock) = (mutex);                                    \
  pthread_mutex_lock (CLEANUP_UNIQUE (_lock))

#define ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE(rwlock)                            \
  __attribute__ ((cleanup (cleanup_rwlock_unlock))) pthread_rwlock_t        \
      *CLEANUP_UNIQUE (_rwlock) = (rwlock);                                 \
  pthread_rwlock_rdlock (CLEANUP_UNIQUE (_rwlock))

#define ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE(rwlock)                            \
  __attribute__ ((cleanup (cleanup_rwlock_unlock))) pthread_rwlock_t        \
      *CLEANUP_UNIQUE (_rwlock) = (rwlock);                                 \
  pthread_rwlock_wrlock (CLEANUP_UNIQUE (_rwlock))

#endif /* NBDSTACK_CLEANUP_H */
