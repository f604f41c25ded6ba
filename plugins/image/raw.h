/* nbdstack image plugin: state shared by the raw format's source files.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * raw.c        opening, feature queries, zero/trim/extents/cache/flush
 * raw-io.c     byte-exact read and write, buffered or O_DIRECT (with
 *              pooled bounce buffers, bounce.h, and read-modify-write of
 *              partial sectors)
 */
#ifndef NBDSTACK_IMAGE_RAW_H
#define NBDSTACK_IMAGE_RAW_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "format.h"

/* The largest O_DIRECT alignment (offset and memory) and logical sector
 * size raw.c accepts; raw-io.c's bounce buffers are sized for it.
 */
#define RAW_MAX_ALIGN 4096

/* Partial-sector read-modify-write in cache=none mode takes one of these
 * locks, chosen by sector number.  Aligned I/O never takes any.
 */
#define RAW_SECTOR_LOCKS 64

struct raw
{
  int fd;  /* O_DIRECT when direct */
  int bfd; /* buffered fd: the file's unaligned tail */
  bool writable;
  bool is_blkdev;
  bool direct;      /* cache=none */
  const char *file; /* for messages: the plugin's file= */
  /* Taken again at each connection's get_size (a file may grow or
   * shrink between connections, as with nbdkit's file plugin), so read
   * both with raw_tail_start/atomic loads: requests of connections that
   * saw different sizes run side by side.
   */
  _Atomic int64_t size;
  uint32_t align;     /* O_DIRECT offset/length alignment */
  uint32_t mem_align; /* O_DIRECT buffer alignment */
  uint32_t sector;    /* logical sector (block devices), else 1 */
  uint32_t preferred; /* preferred request size */
  /* cache=none with a size that is not a multiple of align: the bytes
   * from tail_start (page aligned) to size are served through bfd, so
   * no O_DIRECT request ever shares a page with them.  Otherwise
   * tail_start == size.  bfd is open for every cache=none file, since
   * a later size may not be aligned.
   */
  _Atomic int64_t tail_start;
  pthread_mutex_t sector_locks[RAW_SECTOR_LOCKS];

  /* Calls the kernel refused once with "unsupported"; never retried.
   * Lock-free: a stale false only costs one more refused syscall.
   */
  atomic_bool no_rwf_dsync;
  atomic_bool no_zero_range;
  atomic_bool no_punch_hole;
  atomic_bool no_blkzeroout;
  atomic_bool no_blkdiscard;
  /* Block devices: the device zeroes natively (WRITE ZEROES), so
   * BLKZEROOUT is fast; otherwise the kernel writes zero pages.
   */
  bool blk_zeroes_fast;
};

/* True for the errnos that mean "this call is not supported here". */
static inline bool
raw_is_unsupported (int err)
{
  return err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS || err == ENOTTY;
}

/* Where the bytes served through bfd begin (see tail_start). */
static inline uint64_t
raw_tail_start (struct raw *raw)
{
  return atomic_load_explicit (&raw->tail_start, memory_order_relaxed);
}

/* raw-io.c.  All return 0, or -1 with errno set (no nbdkit_error). */
extern int raw_read_bytes (struct raw *raw, void *buf, uint32_t count,
                           uint64_t offset);
extern int raw_write_bytes (struct raw *raw, const void *buf, uint32_t count,
                            uint64_t offset, bool fua);
/* Write zeroes by writing (the slow path, and partial sectors). */
extern int raw_write_zeroes (struct raw *raw, uint64_t count, uint64_t offset,
                             bool fua);

#endif /* NBDSTACK_IMAGE_RAW_H */
