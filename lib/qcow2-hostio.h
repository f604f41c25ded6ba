/* nbdstack qcow2 library: host file I/O interface.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The format code never touches a file descriptor: it goes through this
 * table, so the same code runs over a real file (plugin) or a buffer in
 * memory (unit tests, fuzzer).  A hostio that can be written has the
 * pwritev, flush and zero members; a read-only one leaves them NULL and
 * the library refuses to open it writable.
 */
#ifndef NBDSTACK_QCOW2_HOSTIO_H
#define NBDSTACK_QCOW2_HOSTIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct qcow2_hostio
{
  /* All return 0 on success or a negative errno.  pread of a range not
   * entirely inside the file fails with -EIO: callers clip first.
   */
  int (*pread) (struct qcow2_hostio *io, void *buf, size_t count,
                uint64_t offset);
  /* Current size of the file in bytes, or a negative errno. */
  int64_t (*get_size) (struct qcow2_hostio *io);
  void (*close) (struct qcow2_hostio *io);
  /* Optional (may be NULL): is [offset, offset+max) of the file a hole?
   * Sets *len (1..max) to the length of the run at offset that is all
   * hole (*hole = true) or all data.  0 or a negative errno.
   */
  int (*block_status) (struct qcow2_hostio *io, uint64_t offset, uint64_t max,
                       uint64_t *len, bool *hole);

  /* Writing (NULL when read-only).  A write past the end grows the file
   * unless 'fixed_size'.  No write is durable before a later flush
   * (fdatasync) returns: the library orders its writes with flushes
   * and never relies on one write reaching the disk before another.
   */
  int (*pwritev) (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
                  uint64_t offset);
  int (*flush) (struct qcow2_hostio *io);
  /* Make [offset, offset+len) (inside the file) read as zeroes, without
   * changing the size; 'punch' allows deallocating it.  -EOPNOTSUPP
   * when that cannot be done cheaply: the caller writes zeroes itself
   * or, for a hint such as punching a freed cluster, does nothing.
   */
  int (*zero) (struct qcow2_hostio *io, uint64_t offset, uint64_t len,
               bool punch);
  /* A block device: the size cannot change, and nothing past it can be
   * allocated.
   */
  bool fixed_size;
  /* The largest size the file can grow to (the file system's limit on
   * a file's size, ext4's 16 TiB say); 0: no limit known.  Layouts that
   * put data at fixed offsets (linear) must end below it.
   */
  uint64_t max_size;
};

/* Over a file descriptor (a regular file or block device), which it
 * then owns (closes on close, and on failure: NULL with errno set).  It
 * can be written if the descriptor was opened for writing.  The
 * host-file layer implements it (lib/hostfile/hostio.c, libhostfile.la).
 */
extern struct qcow2_hostio *qcow2_hostio_fd (int fd);

/* Over a memory buffer, read-only (not copied: it must outlive the
 * hostio).
 */
extern struct qcow2_hostio *qcow2_hostio_mem (const void *buf, size_t len);

/* A writable file in memory that starts as a copy of buf[0, len) and
 * grows as it is written (never beyond 'max_size', -ENOSPC; 0 means
 * no limit; 'fixed_size' pretends to be a block device of 'len' bytes).
 * qcow2_hostio_mem_contents returns the current contents and size,
 * valid until the next write.
 */
extern struct qcow2_hostio *qcow2_hostio_mem_rw (const void *buf, size_t len,
                                                 uint64_t max_size,
                                                 bool fixed_size);
extern const unsigned char *qcow2_hostio_mem_contents (struct qcow2_hostio *io,
                                                       uint64_t *size);

/* Recording, for crash tests (hostio-record.c): every call passes to
 * 'below' (which the recorder does not own), and each completed write
 * (data copied; data NULL for zeroing) and flush is logged.  A flush
 * records 'durable', the number of events that had completed when it
 * started: only those are certain to be on disk after it.
 */
enum qcow2_record_type
{
  QCOW2_REC_WRITE,
  QCOW2_REC_FLUSH
};
struct qcow2_record_event
{
  enum qcow2_record_type type;
  uint64_t offset, len;
  const unsigned char *data; /* NULL: zeroes */
  size_t durable;            /* flush */
};
extern struct qcow2_hostio *qcow2_hostio_record (struct qcow2_hostio *below);
extern size_t qcow2_record_count (struct qcow2_hostio *io);
extern const struct qcow2_record_event *
qcow2_record_get (struct qcow2_hostio *io, size_t i);
/* An image a power failure after the first 'upto' events could leave,
 * starting from 'initial' (the file when recording started): every
 * write a completed flush made durable, and each later write lost,
 * whole or torn at 512-byte sectors as *seed picks.  *out is malloc'd.
 * 0 or a negative errno.
 */
extern int qcow2_record_crash_image (struct qcow2_hostio *io,
                                     const void *initial, size_t initial_len,
                                     size_t upto, unsigned *seed,
                                     unsigned char **out, size_t *out_len);

/* Write helper: one buffer. */
static inline int
qcow2_hostio_pwrite (struct qcow2_hostio *io, const void *buf, size_t count,
                     uint64_t offset)
{
  struct iovec iov = { .iov_base = (void *)buf, .iov_len = count };
  return io->pwritev (io, &iov, 1, offset);
}

static inline void
qcow2_hostio_close (struct qcow2_hostio *io)
{
  if (io)
    io->close (io);
}

#endif /* NBDSTACK_QCOW2_HOSTIO_H */
