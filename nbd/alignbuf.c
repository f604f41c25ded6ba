/* nbdstack-alignbuf.so: page-aligned large reallocations, preloaded
 * into the nbdkit that nbdstack-nbd runs (setting align-buffers).
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: realloc (p, n) with n >= ALIGNBUF_MIN returns memory that
 * starts on an ALIGNBUF_ALIGN boundary and holds the first min (n, old
 * size) bytes of p, and frees p (or returns NULL with errno ENOMEM and
 * leaves p alone); every other call is the next realloc's (glibc's, or
 * a sanitizer's when one is preloaded first).  What it returns comes
 * from posix_memalign, which free and every later realloc accept.
 *
 * Why: nbdkit (1.32 to at least 1.42) keeps each worker thread's
 * request buffer in memory from realloc, which glibc places 16 bytes
 * past a page boundary for large sizes.  With cache=none the image
 * plugin writes and reads with O_DIRECT, which wants the memory aligned
 * too (512 bytes on virtio disks), so every byte of every request went
 * through a bounce buffer: the copy was 27% of the server's CPU in an
 * imageio download (perf, bench/imageio-rw.sh).  nbdkit's buffer is
 * grown by realloc only, so aligning large reallocations is enough.
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Reallocations this large are aligned: a request buffer that an
 * O_DIRECT transfer of a whole cluster or more would use.  Smaller ones
 * (strings, small vectors) keep glibc's in-place growth.
 */
#define ALIGNBUF_MIN (64 * 1024)
/* The largest O_DIRECT memory alignment the host-file layer accepts. */
#define ALIGNBUF_ALIGN 4096

typedef void *realloc_fn (void *, size_t);

static realloc_fn *next_realloc;

/* The realloc after ours in the lookup order, or NULL. */
static realloc_fn *
find_next (void)
{
  if (next_realloc == NULL)
    next_realloc = (realloc_fn *)dlsym (RTLD_NEXT, "realloc");
  return next_realloc;
}

__attribute__ ((constructor)) static void
alignbuf_init (void)
{
  find_next ();
}

/* Where nbdstack's tests look for the shim in a process. */
int nbdstack_alignbuf_loaded = 1;

void *
realloc (void *p, size_t n)
{
  realloc_fn *next = find_next ();
  void *q;
  size_t old;

  if (n < ALIGNBUF_MIN && next != NULL)
    return next (p, n);
  if (p != NULL && (uintptr_t)p % ALIGNBUF_ALIGN == 0)
    {
      /* Already aligned: keep it if it is big enough and would not
       * waste more than it holds.
       */
      old = malloc_usable_size (p);
      if (old >= n && old - n <= n)
        return p;
    }
  if (posix_memalign (&q, ALIGNBUF_ALIGN, n) != 0)
    {
      errno = ENOMEM;
      return NULL;
    }
  if (p != NULL)
    {
      old = malloc_usable_size (p);
      memcpy (q, p, old < n ? old : n);
      free (p);
    }
  return q;
}
