/* Unit test of common/cleanup.h.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * CLEANUP_FREE must free on every way out of a scope.  What the
 * allocator holds is measured before and after: a pointer left behind
 * shows as bytes still allocated (and a wrong one freed as a crash).
 */
#include <config.h>

#undef NDEBUG
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

#if defined(__SANITIZE_ADDRESS__)
/* ASan replaces malloc, so ask its allocator.  Declared here: GCC does
 * not install <sanitizer/allocator_interface.h>, libasan has the function.
 */
extern size_t __sanitizer_get_current_allocated_bytes (void);
static size_t
allocated (void)
{
  return __sanitizer_get_current_allocated_bytes ();
}
#else
/* Bytes in mmapped chunks: main() makes every BIG allocation one, and
 * nothing else is that large.  The heap's own count would not do: glibc
 * counts chunks parked in its thread cache as in use.
 */
static size_t
allocated (void)
{
  return mallinfo2 ().hblkhd;
}
#endif

#define BIG (1024 * 1024)

/* Where each allocation is published, so that the compiler cannot drop
 * a malloc and free pair whose memory nothing reads.
 */
static void *volatile sink;

static char *
xmalloc (size_t n)
{
  char *p = malloc (n);

  assert (p);
  sink = p;
  return p;
}

static size_t
in_scope (void)
{
  CLEANUP_FREE char *p = xmalloc (BIG);

  memset (p, 1, BIG);
  return allocated ();
}

/* Returns from inside a loop, leaving two scopes at once. */
static int
early_return (int stop)
{
  for (int i = 0; i < 10; ++i)
    {
      CLEANUP_FREE char *p = xmalloc (BIG);

      if (i == stop)
        return i;
    }
  return -1;
}

/* The pointer's value when the scope ends is what is freed. */
static void
reassigned (void)
{
  CLEANUP_FREE char *p = xmalloc (16);

  p = realloc (p, BIG);
  assert (p);
  sink = p;
}

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;

/* Held inside the scope (trylock fails), given back on every way out. */
static int
locked_scope (int stop)
{
  for (int i = 0; i < 4; ++i)
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&mutex);
      assert (pthread_mutex_trylock (&mutex) == EBUSY);
      if (i == stop)
        return i;
    }
  return -1;
}

static void
rwlocked_scopes (void)
{
  {
    ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE (&rwlock);
    ACQUIRE_RDLOCK_FOR_CURRENT_SCOPE (&rwlock); /* shared: nests */
    assert (pthread_rwlock_trywrlock (&rwlock) == EBUSY);
  }
  {
    ACQUIRE_WRLOCK_FOR_CURRENT_SCOPE (&rwlock);
    assert (pthread_rwlock_tryrdlock (&rwlock) == EBUSY);
  }
}

static void
assert_unlocked (void)
{
  assert (pthread_mutex_trylock (&mutex) == 0);
  assert (pthread_mutex_unlock (&mutex) == 0);
  assert (pthread_rwlock_trywrlock (&rwlock) == 0);
  assert (pthread_rwlock_unlock (&rwlock) == 0);
}

static void
null_pointer (void)
{
  CLEANUP_FREE char *p = NULL;
  (void)p;
}

int
main (void)
{
  size_t before, during;

#if !defined(__SANITIZE_ADDRESS__)
  /* A fixed threshold: glibc would otherwise raise it to the size of
   * the first mmapped chunk freed, and serve the next BIG from the heap.
   */
  assert (mallopt (M_MMAP_THRESHOLD, BIG / 2) == 1);
#endif
  before = allocated ();
  during = in_scope ();
  assert (during >= before + BIG);
  assert (allocated () == before);

  assert (early_return (3) == 3);
  assert (allocated () == before);
  assert (early_return (99) == -1);
  assert (allocated () == before);

  reassigned ();
  assert (allocated () == before);

  null_pointer ();
  assert (allocated () == before);

  assert (locked_scope (2) == 2);
  assert_unlocked ();
  assert (locked_scope (99) == -1);
  assert_unlocked ();
  rwlocked_scopes ();
  assert_unlocked ();

  printf ("PASS: cleanup\n");
  return 0;
}
