/* nbdstack: scope-based cleanup helpers (GCC/Clang __attribute__((cleanup))).
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_CLEANUP_H
#define NBDSTACK_CLEANUP_H

#include <stdlib.h>

extern void cleanup_free (void *ptr);

/* free () the pointer when it goes out of scope, on every path. */
#define CLEANUP_FREE __attribute__ ((cleanup (cleanup_free)))

#endif /* NBDSTACK_CLEANUP_H */
