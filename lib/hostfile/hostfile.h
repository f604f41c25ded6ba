/* nbdstack host-file layer: one file or block device, as both image
 * formats use it.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: every byte of the file reaches the kernel through exactly
 * one path.  Buffered (cache=writeback): the one descriptor takes any
 * offset, length and buffer.  O_DIRECT (cache=none): whole units of
 * 'align' from buffers aligned to 'mem_align' go straight to the
 * kernel; anything else goes through a pooled bounce buffer (bounce.h),
 * and a partial unit at either end of a write is read, patched and
 * written back under a lock chosen by unit number, so two writes of
 * different bytes of one unit cannot undo each other.  A file opened
 * without HOSTFILE_GROW keeps its size: its unaligned tail, from
 * tail_start on, goes through a second, buffered descriptor and no
 * O_DIRECT request ever touches those pages.  With HOSTFILE_GROW
 * (qcow2) there is no tail: a partial unit past the end of the file
 * reads as zeroes and a write there grows the file to the unit's end.
 *
 * The files, each one job, in the order they depend on each other:
 *   hostio.c   the qcow2_hostio table over a hostfile, qcow2_hostio_fd
 *   zero.c     zero (punch, ZERO_RANGE, BLKZEROOUT, writing) and trim
 *   extents.c  SEEK_DATA/SEEK_HOLE
 *   io.c       pread, pwritev (direct, bounce, read-modify-write,
 *              tail), flush
 *   open.c     open, alignment, size, the size limit, close
 *   bounce.c   the pool of aligned bounce buffers
 *
 * No nbdkit dependency.  All functions returning int return 0 or a
 * negative errno.  Every function is safe to call from many threads at
 * once on one hostfile, except open and close.
 */
#ifndef NBDSTACK_HOSTFILE_H
#define NBDSTACK_HOSTFILE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "qcow2-hostio.h"

/* The largest O_DIRECT alignment (offset and memory) and logical sector
 * accepted; bounce buffers are sized for it.
 */
#define HOSTFILE_MAX_ALIGN 4096
/* Read-modify-write of a partial unit takes one of these, by unit. */
#define HOSTFILE_SECTOR_LOCKS 64

/* hostfile_open flags. */
#define HOSTFILE_WRITE 1u  /* open for writing if allowed, else read-only */
#define HOSTFILE_DIRECT 2u /* O_DIRECT (cache=none) */
#define HOSTFILE_GROW 4u   /* writes may extend the file (see above) */

/* hostfile_zero flags. */
#define HOSTFILE_ZERO_MAY_TRIM 1u /* may deallocate */
#define HOSTFILE_ZERO_FAST 2u     /* -ENOTSUP rather than write zeroes */
#define HOSTFILE_ZERO_FUA 4u      /* durable when it returns */

struct hostfile
{
  struct qcow2_hostio io; /* must be first: the qcow2 library's view */
  int fd;                 /* O_DIRECT when direct */
  int bfd;                /* buffered: the unaligned tail; or -1 */
  bool writable;
  bool is_blkdev;
  bool direct;
  bool grow;
  /* HOSTFILE_WRITE fell back to read-only: the errno (EACCES, EPERM,
   * EROFS) of the refused open; else 0.
   */
  int write_refused;
  dev_t dev;
  ino_t ino;
  uint32_t align;     /* O_DIRECT unit; the sector of a buffered device */
  uint32_t mem_align; /* O_DIRECT buffer alignment */
  uint32_t sector;    /* logical sector of a block device, else 1 */
  /* Block devices: the device zeroes natively (WRITE ZEROES), so
   * BLKZEROOUT is fast; otherwise the kernel writes zero pages.
   */
  bool blk_zeroes_fast;
  /* Set by hostfile_refresh_size; read with atomic loads: requests of
   * connections that saw different sizes run side by side.
   */
  _Atomic int64_t size;
  _Atomic int64_t tail_start; /* INT64_MAX with HOSTFILE_GROW */
  pthread_mutex_t sector_locks[HOSTFILE_SECTOR_LOCKS];
  /* Calls the kernel refused once as unsupported; never retried.  A
   * stale false only costs one more refused call.
   */
  atomic_bool no_rwf_dsync;
  atomic_bool no_zero_range;
  atomic_bool no_punch_hole;
  atomic_bool no_blkzeroout;
  atomic_bool no_blkdiscard;
  atomic_bool no_fiemap;
};

/* Why hostfile_open failed: msg is a whole message naming the file,
 * except when open_failed (open(2) refused the path with errnum): the
 * caller words that one itself.
 */
struct hostfile_error
{
  int errnum;
  bool open_failed;
  char msg[256];
};

/* open.c */
/* Open path (a regular file or block device) with HOSTFILE_* flags; NULL
 * after filling *err.
 */
extern struct hostfile *hostfile_open (const char *path, unsigned flags,
                                       struct hostfile_error *err);
/* The same over an open descriptor, which it owns from then on (closed
 * on failure too); writable if fd was opened for writing.  Without
 * HOSTFILE_GROW, hostfile_refresh_size must run before the first I/O.
 */
extern struct hostfile *hostfile_adopt (int fd, const char *path,
                                        unsigned flags,
                                        struct hostfile_error *err);
/* Close the descriptors and free (NULL: no-op). */
extern void hostfile_close (struct hostfile *hf);
/* The file's or device's size now (no state changed), or -errno. */
extern int64_t hostfile_current_size (struct hostfile *hf);
/* Take the size again and set size and tail_start; the size, or -errno
 * (-EFBIG: too large to serve).
 */
extern int64_t hostfile_refresh_size (struct hostfile *hf);
/* The file system's limit on the file's size; 0: none known. */
extern uint64_t hostfile_max_size (struct hostfile *hf);
/* Behave as if the kernel refused every fast zero and trim. */
extern void hostfile_refuse_fast_zero (struct hostfile *hf);

/* io.c */
/* Read exactly count bytes; past the end of the file -EIO. */
extern int hostfile_pread (struct hostfile *hf, void *buf, size_t count,
                           uint64_t offset);
/* Write all of iov at offset; fua: durable when it returns (RWF_DSYNC,
 * else fdatasync).
 */
extern int hostfile_pwritev (struct hostfile *hf, const struct iovec *iov,
                             int iovcnt, uint64_t offset, bool fua);
/* One buffer. */
extern int hostfile_pwrite (struct hostfile *hf, const void *buf, size_t count,
                            uint64_t offset, bool fua);
/* Write count zero bytes at offset (the slow zero path). */
extern int hostfile_write_zeroes (struct hostfile *hf, uint64_t count,
                                  uint64_t offset);
/* fdatasync: everything written so far is durable. */
extern int hostfile_flush (struct hostfile *hf);

/* extents.c */
/* The run at offset (at most max bytes, *len >= 1) that is all hole
 * (*hole) or all data.
 */
extern int hostfile_extent (struct hostfile *hf, uint64_t offset, uint64_t max,
                            uint64_t *len, bool *hole);

/* zero.c */
/* Make [offset, offset+len) read as zeroes with HOSTFILE_ZERO_* flags;
 * -ENOTSUP (nothing changed) when FAST and only writing is left.
 */
extern int hostfile_zero (struct hostfile *hf, uint64_t offset, uint64_t len,
                          unsigned flags);
/* Discard the whole units of [offset, offset+len), if the file or
 * device can (advisory: refusals are not errors); fua as above.
 */
extern int hostfile_trim (struct hostfile *hf, uint64_t offset, uint64_t len,
                          bool fua);

/* hostio.c */
/* Fill hf->io, the qcow2_hostio over hf (close closes hf). */
extern void hostfile_init_hostio (struct hostfile *hf);

/* The errnos that mean "this call is not supported here". */
static inline bool
hostfile_is_unsupported (int err)
{
  return err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS || err == ENOTTY
         || err == ENODEV;
}

/* Where the bytes served through bfd begin. */
static inline uint64_t
hostfile_tail_start (struct hostfile *hf)
{
  return atomic_load_explicit (&hf->tail_start, memory_order_relaxed);
}

#endif /* NBDSTACK_HOSTFILE_H */
