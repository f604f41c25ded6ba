/* nbdstack qcow2 library: a host I/O that records, for crash tests.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Killing a process cannot show what a power failure does: the page
 * cache survives it and every completed write reaches the disk.  This
 * hostio passes every call to the one below and logs each completed
 * write (with its data) and each completed flush, so that a test can
 * build the images a crash could have left at any point of the log.
 *
 * What a flush makes durable is what had completed when it started:
 * a write still in flight may land before or after it.  So a flush
 * event records how many events had completed at its start, and a
 * crash after event k keeps everything before the last such count,
 * plus any subset of the later writes, each possibly torn at 512-byte
 * sector boundaries (sectors are the unit disks write atomically).
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-hostio.h"

struct record_io
{
  struct qcow2_hostio io; /* must be first */
  struct qcow2_hostio *below;
  pthread_mutex_t lock;
  struct qcow2_record_event *ev;
  size_t nev, cap;
};

static int
append (struct record_io *r, const struct qcow2_record_event *e)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&r->lock);
  int ret = 0;

  if (r->nev == r->cap)
    {
      size_t cap = r->cap ? r->cap * 2 : 256;
      struct qcow2_record_event *p = realloc (r->ev, cap * sizeof *p);
      if (p == NULL)
        ret = -ENOMEM;
      else
        {
          r->ev = p;
          r->cap = cap;
        }
    }
  if (ret == 0)
    r->ev[r->nev++] = *e;
  return ret;
}

static size_t
count_events (struct record_io *r)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&r->lock);

  return r->nev;
}

static int
rec_pread (struct qcow2_hostio *io, void *buf, size_t count, uint64_t offset)
{
  struct record_io *r = (struct record_io *)io;
  return r->below->pread (r->below, buf, count, offset);
}

static int64_t
rec_get_size (struct qcow2_hostio *io)
{
  struct record_io *r = (struct record_io *)io;
  return r->below->get_size (r->below);
}

static int
rec_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  struct record_io *r = (struct record_io *)io;
  struct qcow2_record_event e = { .type = QCOW2_REC_WRITE, .offset = offset };
  unsigned char *data;
  int i, ret;

  for (i = 0; i < iovcnt; ++i)
    e.len += iov[i].iov_len;
  data = malloc (e.len ? e.len : 1);
  if (data == NULL)
    return -ENOMEM;
  e.len = 0;
  for (i = 0; i < iovcnt; ++i)
    {
      memcpy (data + e.len, iov[i].iov_base, iov[i].iov_len);
      e.len += iov[i].iov_len;
    }
  e.data = data;
  ret = r->below->pwritev (r->below, iov, iovcnt, offset);
  if (ret == 0)
    ret = append (r, &e);
  if (ret < 0)
    free (data);
  return ret;
}

static int
rec_zero (struct qcow2_hostio *io, uint64_t offset, uint64_t len, bool punch)
{
  struct record_io *r = (struct record_io *)io;
  struct qcow2_record_event e
      = { .type = QCOW2_REC_WRITE, .offset = offset, .len = len };
  int ret = r->below->zero (r->below, offset, len, punch);

  /* data == NULL: zeroes. */
  return ret == 0 ? append (r, &e) : ret;
}

static int
rec_flush (struct qcow2_hostio *io)
{
  struct record_io *r = (struct record_io *)io;
  struct qcow2_record_event e = { .type = QCOW2_REC_FLUSH };
  int ret;

  e.durable = count_events (r);
  ret = r->below->flush (r->below);
  return ret == 0 ? append (r, &e) : ret;
}

static void
rec_close (struct qcow2_hostio *io)
{
  struct record_io *r = (struct record_io *)io;
  size_t i;

  for (i = 0; i < r->nev; ++i)
    free ((void *)r->ev[i].data);
  free (r->ev);
  pthread_mutex_destroy (&r->lock);
  free (r);
}

struct qcow2_hostio *
qcow2_hostio_record (struct qcow2_hostio *below)
{
  struct record_io *r = calloc (1, sizeof *r);

  if (r == NULL)
    return NULL;
  r->below = below;
  r->io.pread = rec_pread;
  r->io.get_size = rec_get_size;
  r->io.close = rec_close;
  r->io.block_status = NULL;
  if (below->pwritev)
    {
      r->io.pwritev = rec_pwritev;
      r->io.flush = rec_flush;
      r->io.zero = rec_zero;
    }
  r->io.fixed_size = below->fixed_size;
  r->io.max_size = below->max_size;
  pthread_mutex_init (&r->lock, NULL);
  return &r->io;
}

size_t
qcow2_record_count (struct qcow2_hostio *io)
{
  return count_events ((struct record_io *)io);
}

const struct qcow2_record_event *
qcow2_record_get (struct qcow2_hostio *io, size_t i)
{
  struct record_io *r = (struct record_io *)io;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&r->lock);

  return i < r->nev ? &r->ev[i] : NULL;
}

/* Apply bytes [from, to) of write 'e' to the image in *buf. */
static int
apply (unsigned char **buf, size_t *len, const struct qcow2_record_event *e,
       uint64_t from, uint64_t to)
{
  uint64_t end = e->offset + to;

  if (end > *len)
    {
      unsigned char *p = realloc (*buf, end);
      if (p == NULL)
        return -ENOMEM;
      memset (p + *len, 0, end - *len);
      *buf = p;
      *len = end;
    }
  if (e->data)
    memcpy (*buf + e->offset + from, e->data + from, to - from);
  else
    memset (*buf + e->offset + from, 0, to - from);
  return 0;
}

/* Apply to *buf what a power failure after event 'upto' could leave
 * of the events: 0 or a negative errno.
 */
static int
replay (struct record_io *r, size_t upto, unsigned *seed, unsigned char **bufp,
        size_t *lenp)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&r->lock);
  unsigned char *buf = *bufp;
  size_t durable = 0, i, len = *lenp;
  int ret = 0;

  if (upto > r->nev)
    upto = r->nev;
  for (i = 0; i < upto; ++i)
    if (r->ev[i].type == QCOW2_REC_FLUSH && r->ev[i].durable > durable)
      durable = r->ev[i].durable;
  for (i = 0; ret == 0 && i < upto; ++i)
    {
      const struct qcow2_record_event *e = &r->ev[i];
      unsigned pick;

      if (e->type != QCOW2_REC_WRITE)
        continue;
      if (i < durable)
        {
          ret = apply (&buf, &len, e, 0, e->len);
          continue;
        }
      /* Pending: lost, written, or torn at sector boundaries. */
      pick = rand_r (seed) % 4;
      if (pick == 0 || pick == 1)
        ret = pick ? apply (&buf, &len, e, 0, e->len) : 0;
      else
        {
          uint64_t s = 0;
          while (ret == 0 && s < e->len)
            {
              /* A sector is the 512-byte-aligned unit of the file. */
              uint64_t next = ((e->offset + s) | 511) + 1 - e->offset;
              if (next > e->len)
                next = e->len;
              if (rand_r (seed) % 2)
                ret = apply (&buf, &len, e, s, next);
              s = next;
            }
        }
    }
  *bufp = buf;
  *lenp = len;
  return ret;
}

int
qcow2_record_crash_image (struct qcow2_hostio *io, const void *initial,
                          size_t initial_len, size_t upto, unsigned *seed,
                          unsigned char **out, size_t *out_len)
{
  struct record_io *r = (struct record_io *)io;
  size_t len = initial_len;
  unsigned char *buf = malloc (initial_len ? initial_len : 1);
  int ret;

  if (buf == NULL)
    return -ENOMEM;
  memcpy (buf, initial, initial_len);
  ret = replay (r, upto, seed, &buf, &len);
  if (ret < 0)
    {
      free (buf);
      return ret;
    }
  *out = buf;
  *out_len = len;
  return 0;
}
