/* nbdstack qcow2 library: host file I/O interface.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The format code never touches a file descriptor: it goes through this
 * table, so the same code runs over a real file (plugin) or a buffer in
 * memory (unit tests, fuzzer).
 */
#ifndef NBDSTACK_QCOW2_HOSTIO_H
#define NBDSTACK_QCOW2_HOSTIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
};

/* Over a file descriptor, which it then owns (closes on close). */
extern struct qcow2_hostio *qcow2_hostio_fd (int fd);

/* Over a memory buffer (not copied: it must outlive the hostio). */
extern struct qcow2_hostio *qcow2_hostio_mem (const void *buf, size_t len);

static inline void
qcow2_hostio_close (struct qcow2_hostio *io)
{
  if (io)
    io->close (io);
}

#endif /* NBDSTACK_QCOW2_HOSTIO_H */
