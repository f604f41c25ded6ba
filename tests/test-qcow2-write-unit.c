/* Unit tests of the qcow2 library's write side, one layer per command:
 *   test-qcow2-write-unit hostio DIR
 *     the writable host I/O implementations (fd, growing memory) and
 *     the recording hostio's crash images.
 *   test-qcow2-write-unit refcount IMAGE.qcow2 LIST
 *     refcount entries at every width in memory; then, on an image made
 *     by qemu-img, claim and count clusters (in new refcount blocks and
 *     past the table, so it grows) and write "CLUSTER REFCOUNT" lines to
 *     LIST for the test script to compare with qemu-img check's leaks.
 *   test-qcow2-write-unit write IMAGE.qcow2 OUT.raw SEED OPS [L2-CACHE-BYTES
 *                          [BACKING.raw]]
 *     random writes (and flushes, reads, a close and reopen) through the
 *     library, checked against a reference in memory after every step;
 *     the reference is left in OUT.raw for qemu-img compare, and the
 *     image for qemu-img check.
 *   test-qcow2-write-unit wzero ... (as write)
 *     the same with zero requests (keeping or releasing clusters, fast
 *     or not) and discards mixed in.
 *   test-qcow2-write-unit crash IMAGE.qcow2 DIR SEED OPS IMAGES
 *     random writes and flushes through a recording hostio, then IMAGES
 *     images a power failure could have left at random points of the
 *     log: each must open and keep every byte the last completed flush
 *     made durable (bytes written after it may read old or new); they
 *     are left in DIR/crash-N.qcow2 for qemu-img check.
 *   test-qcow2-write-unit create IMAGE SIZE CLUSTER-BITS REFCOUNT-BITS
 *                          linear|compact
 *     create an empty image with the library.
 *   test-qcow2-write-unit shuffle IMAGE OUT.raw SEED [auto|linear|compact]
 *     write every cluster of the disk once, whole, in random order (the
 *     upload pattern the linear layout exists for), opened with that
 *     layout (default auto); OUT.raw as above.
 *   test-qcow2-write-unit group IMAGE.qcow2 DIR SEED IMAGES
 *     4 threads write their own clusters (interleaved, so they share L2
 *     tables and refcount blocks) and flush often, through a recording
 *     hostio whose flushes are slow: flushes must share commits (fewer
 *     commits than flush calls), every thread reads back what it
 *     wrote, and crash images keep each thread's flushed data
 *     (DIR/crash-N.qcow2 for qemu-img check).
 *   test-qcow2-write-unit parallel IMAGE.qcow2 DIR SEED IMAGES
 *     as group, but half the changes (writes and zeroes of pieces of
 *     128-byte units) go to clusters all threads share (walking them in
 *     the same order, so that they meet in unwritten ones), the other half
 *     to clusters of their own (writes, whole-cluster zeroes, discards:
 *     frees and reallocation under load); writes and reads of the file
 *     are slow, and 2 reader threads check that every byte they read is
 *     one some writer wrote there (or the value before).  Then a slow
 *     write must hold off a discard of its cluster, a slow read must
 *     keep its freed cluster from being reused (the reuse barrier), and
 *     4 threads writing different clusters must take < 0.6 of the time
 *     one thread takes for as many.
 *   test-qcow2-write-unit barrier-off IMAGE.qcow2
 *     the slow read with the reuse barrier switched off: it must see the
 *     reused cluster's new data (the test notices a missing barrier).
 *   test-qcow2-write-unit fault IMAGE.qcow2 DIR SEED IMAGES
 *     the same random writes, zeroes and flushes on copies of IMAGE,
 *     with the Nth write, zero or flush of the file failing (EIO) for
 *     IMAGES values of N: the request fails, and so does every later
 *     request (the image is failed); closing must not
 *     crash; reopened, the file keeps all data flushed before the
 *     failure.  The files are left in DIR/fault-N.qcow2 for qemu-img
 *     check.
 *   test-qcow2-write-unit openw IMAGE
 *     open writable and close; on failure print the library's message.
 * Each command exits non-zero with a message on the first failure.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "now.h"
#include "qcow2-internal.h"
#include "slurp.h"
#include "unit-check.h"

/* r == 0, else die naming the call. */
#define OK(call)                                                               \
  do                                                                           \
    {                                                                          \
      int r_ = (call);                                                         \
      if (r_ != 0)                                                             \
        die ("%s:%d: %s: %s", __FILE__, __LINE__, #call, strerror (-r_));      \
    }                                                                          \
  while (0)

static bool
all_bytes (const unsigned char *p, size_t len, unsigned char c)
{
  size_t i;

  for (i = 0; i < len; ++i)
    if (p[i] != c)
      return false;
  return true;
}

/* ---- hostio ---- */

/* What every writable hostio must do: grow on write past the end,
 * pwritev with several pieces, zero a range, flush.
 */
static void
hostio_contract (struct qcow2_hostio *io, const char *what)
{
  unsigned char a[1000], b[3000], got[5000];
  struct iovec iov[3];
  int r;

  memset (a, 0xaa, sizeof a);
  memset (b, 0xbb, sizeof b);
  CHECK (io->pwritev && io->flush && io->zero);
  CHECK (io->get_size (io) == 0);
  OK (qcow2_hostio_pwrite (io, a, sizeof a, 4096));
  if (io->get_size (io) != 5096)
    die ("%s: size %" PRId64 " after a write past the end", what,
         io->get_size (io));
  OK (io->pread (io, got, 4096, 0));
  CHECK (all_bytes (got, 4096, 0)); /* the gap reads as zeroes */
  iov[0] = (struct iovec){ a, 10 };
  iov[1] = (struct iovec){ b, sizeof b };
  iov[2] = (struct iovec){ a, 5 };
  OK (io->pwritev (io, iov, 3, 100));
  OK (io->pread (io, got, 3015, 100));
  CHECK (all_bytes (got, 10, 0xaa) && all_bytes (got + 10, 3000, 0xbb)
         && all_bytes (got + 3010, 5, 0xaa));
  r = io->zero (io, 1024, 2048, true);
  if (r == 0)
    {
      OK (io->pread (io, got, 4000, 0));
      CHECK (all_bytes (got + 1024, 2048, 0) && got[1023] == 0xbb
             && got[3072] == 0xbb);
    }
  else if (r != -EOPNOTSUPP)
    die ("%s: zero: %s", what, strerror (-r));
  OK (io->flush (io));
  CHECK (io->pread (io, got, 10, 5090) == -EIO); /* past the end */
}

static void *
hammer (void *arg)
{
  struct qcow2_hostio *io = arg;
  static unsigned counter;
  unsigned id = __atomic_fetch_add (&counter, 1, __ATOMIC_RELAXED);
  unsigned char buf[512];
  unsigned i;

  /* Thread 'id' owns sectors id, id+4, ...; the file grows under it. */
  memset (buf, 'A' + id, sizeof buf);
  for (i = 0; i < 2000; ++i)
    if (qcow2_hostio_pwrite (io, buf, sizeof buf, (i * 4 + id) * 512ULL) != 0)
      die ("concurrent write failed");
  return NULL;
}

static void
test_hostio (const char *dir)
{
  char path[4096];
  struct qcow2_hostio *io, *mem, *rec;
  unsigned char init[4096], buf[8192], *img;
  const unsigned char *contents;
  uint64_t size;
  size_t n, img_len, i, k;
  pthread_t th[4];
  unsigned seed = 1;
  int fd;

  /* fd over a regular file; a read-only descriptor cannot write. */
  snprintf (path, sizeof path, "%s/hostio.img", dir);
  fd = open (path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK (fd >= 0);
  io = qcow2_hostio_fd (fd);
  CHECK (io && !io->fixed_size);
  hostio_contract (io, "fd");
  qcow2_hostio_close (io);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  io = qcow2_hostio_fd (fd);
  CHECK (io && io->pwritev == NULL && io->flush == NULL);
  qcow2_hostio_close (io);

  /* Growing memory, and its limits. */
  io = qcow2_hostio_mem_rw (NULL, 0, 0, false);
  hostio_contract (io, "mem");
  qcow2_hostio_close (io);
  io = qcow2_hostio_mem_rw (NULL, 0, 8192, false);
  CHECK (qcow2_hostio_pwrite (io, buf, 100, 8100) == -ENOSPC);
  qcow2_hostio_close (io);
  memset (init, 7, sizeof init);
  io = qcow2_hostio_mem_rw (init, sizeof init, 0, true);
  CHECK (io->fixed_size && io->get_size (io) == 4096);
  CHECK (qcow2_hostio_pwrite (io, buf, 1, 4096) == -ENOSPC);
  OK (io->pread (io, buf, 4096, 0));
  CHECK (all_bytes (buf, 4096, 7));
  qcow2_hostio_close (io);

  /* Writers on 4 threads while the file grows: nothing lost. */
  io = qcow2_hostio_mem_rw (NULL, 0, 0, false);
  for (i = 0; i < 4; ++i)
    pthread_create (&th[i], NULL, hammer, io);
  for (i = 0; i < 4; ++i)
    pthread_join (th[i], NULL);
  contents = qcow2_hostio_mem_contents (io, &size);
  CHECK (size == 8000 * 512);
  for (i = 0; i < 8000; ++i)
    if (!all_bytes (contents + i * 512, 512, 'A' + i % 4))
      die ("concurrent writes: sector %zu is wrong", i);
  qcow2_hostio_close (io);

  /* Recording: a flush makes what completed before it durable in every
   * crash image; what came after may or may not be there.
   */
  mem = qcow2_hostio_mem_rw (init, sizeof init, 0, false);
  rec = qcow2_hostio_record (mem);
  memset (buf, 1, 1024);
  OK (qcow2_hostio_pwrite (rec, buf, 1024, 0)); /* event 0 */
  OK (rec->zero (rec, 2048, 512, false));       /* event 1 */
  OK (rec->flush (rec));                        /* event 2 */
  memset (buf, 2, sizeof buf);
  OK (qcow2_hostio_pwrite (rec, buf, sizeof buf, 3000)); /* event 3 */
  CHECK (qcow2_record_count (rec) == 4);
  CHECK (qcow2_record_get (rec, 2)->type == QCOW2_REC_FLUSH);
  CHECK (qcow2_record_get (rec, 2)->durable == 2);
  CHECK (qcow2_record_get (rec, 1)->data == NULL);
  {
    unsigned seen_lost = 0, seen_whole = 0, seen_torn = 0;
    for (k = 0; k < 200; ++k)
      {
        size_t torn = 0;
        OK (qcow2_record_crash_image (rec, init, sizeof init, 4, &seed, &img,
                                      &img_len));
        CHECK (all_bytes (img, 1024, 1) && all_bytes (img + 1024, 1024, 7)
               && all_bytes (img + 2048, 512, 0)
               && all_bytes (img + 2560, 440, 7));
        CHECK (img_len >= 4096 && img_len <= 3000 + sizeof buf);
        /* Each sector of the pending write is old or new, never mixed
           (past the old end: new or the zeroes of a gap). */
        for (n = 3000; n < 4096; ++n)
          {
            unsigned char c = img[n];
            CHECK (c == 2 || c == 7);
            if (n > 3000 && (n % 512) != 0 && c != img[n - 1])
              die ("crash image: a sector is half written");
            torn += c == 2;
          }
        if (img_len == 4096 && torn == 0)
          seen_lost++;
        else if (torn == 1096 && img_len > 4096
                 && all_bytes (img + 4096, img_len - 4096, 2))
          seen_whole++;
        else
          seen_torn++;
        free (img);
      }
    if (!seen_lost || !seen_whole || !seen_torn)
      die ("crash images: lost %u, whole %u, torn %u of 200", seen_lost,
           seen_whole, seen_torn);
  }
  /* Up to the end with everything flushed: the file itself. */
  OK (rec->flush (rec));
  OK (qcow2_record_crash_image (rec, init, sizeof init, 5, &seed, &img,
                                &img_len));
  contents = qcow2_hostio_mem_contents (mem, &size);
  CHECK (img_len == size && memcmp (img, contents, size) == 0);
  free (img);
  qcow2_hostio_close (rec);
  qcow2_hostio_close (mem);
  printf ("ok: hostio\n");
}

/* ---- refcounts ---- */

/* Every width: set entries to a pattern in a block, read them all back;
 * setting one entry changes no other.
 */
static void
test_widths (void)
{
  unsigned char block[512];
  unsigned order;

  for (order = 0; order <= 6; ++order)
    {
      uint64_t n = sizeof block * 8 >> order, i, j;
      uint64_t mask = order == 6 ? UINT64_MAX : (1ULL << (1u << order)) - 1;

      memset (block, 0, sizeof block);
      for (i = 0; i < n; ++i)
        qcow2_rc_entry_set (block, order, i,
                            (i * 0x9e3779b97f4a7c15ULL) & mask);
      for (i = 0; i < n; ++i)
        if (qcow2_rc_entry_get (block, order, i)
            != ((i * 0x9e3779b97f4a7c15ULL) & mask))
          die ("width %u: entry %" PRIu64 " reads back wrong", 1u << order, i);
      for (j = 0; j < n; j += n / 7)
        {
          qcow2_rc_entry_set (block, order, j, mask);
          for (i = 0; i < n; ++i)
            if (qcow2_rc_entry_get (block, order, i)
                != (i == j ? mask : (i * 0x9e3779b97f4a7c15ULL) & mask))
              die ("width %u: setting %" PRIu64 " changed %" PRIu64,
                   1u << order, j, i);
          qcow2_rc_entry_set (block, order, j,
                              (j * 0x9e3779b97f4a7c15ULL) & mask);
        }
    }
  /* The on-disk layout qemu uses: big-endian, sub-byte entries from the
   * least significant bit.
   */
  memset (block, 0, sizeof block);
  qcow2_rc_entry_set (block, 0, 9, 1);
  CHECK (block[1] == 0x02);
  qcow2_rc_entry_set (block, 2, 1, 0xa);
  CHECK (block[0] == 0xa0);
  qcow2_rc_entry_set (block, 4, 2, 0x1234);
  CHECK (block[4] == 0x12 && block[5] == 0x34);
}

static void
claim (struct qcow2_image *img, uint64_t cluster, FILE *list, uint64_t count)
{
  struct qcow2_error err;
  unsigned char *buf = malloc (img->cluster_size);
  uint64_t v;
  int r = qcow2_rc_claim (img, cluster, &err);

  if (r == -1)
    die ("claim %" PRIu64 ": %s", cluster, err.msg);
  if (r != 1)
    die ("claim %" PRIu64 ": not free", cluster);
  if (qcow2_rc_claim (img, cluster, &err) != 0)
    die ("claim %" PRIu64 " twice succeeded", cluster);
  if (count > 1 && qcow2_rc_update (img, cluster, count - 1, &err) == -1)
    die ("update %" PRIu64 ": %s", cluster, err.msg);
  /* Down and up again: decrements work too. */
  if (qcow2_rc_update (img, cluster, -1, &err) == -1
      || qcow2_rc_get (img, cluster, &v, &err) == -1 || v != count - 1
      || qcow2_rc_update (img, cluster, 1, &err) == -1)
    die ("update %" PRIu64 " down and up: %s", cluster, err.msg);
  /* qemu-img check counts only clusters inside the file. */
  memset (buf, 0x5a, img->cluster_size);
  OK (qcow2_hostio_pwrite (img->io, buf, img->cluster_size,
                           cluster << img->cluster_bits));
  fprintf (list, "%" PRIu64 " %" PRIu64 "\n", cluster, count);
  free (buf);
}

static void
test_refcount (const char *path, const char *list_path)
{
  struct qcow2_open_options opts
      = { .writable = true, .refcount_cache_blocks = 4 };
  struct qcow2_error err;
  struct qcow2_image *img;
  struct qcow2_hostio *io;
  FILE *list;
  uint64_t per_block, first, max, v, reftable0, i;
  int fd;

  test_widths ();

  fd = open (path, O_RDWR | O_CLOEXEC);
  CHECK (fd >= 0);
  io = qcow2_hostio_fd (fd);
  img = qcow2_open (io, &opts, &err);
  if (img == NULL)
    die ("%s: %s", path, err.msg);
  list = fopen (list_path, "w");
  CHECK (list);
  per_block = (uint64_t)img->cluster_size * 8 >> img->refcount_order;
  max = img->refcount_order == 6 ? UINT64_MAX
                                 : (1ULL << (1u << img->refcount_order)) - 1;
  first = img->host_end >> img->cluster_bits;
  reftable0 = img->reftable_offset;

  /* What qemu-img made is in use. */
  OK (qcow2_rc_get (img, 0, &v, &err));
  CHECK (v == 1);
  OK (qcow2_rc_get (img, img->reftable_offset >> img->cluster_bits, &v, &err));
  CHECK (v == 1);

  /* Next to what exists; the largest count the width holds; in the
   * next block's coverage (a new, self-describing block); then far past
   * what the table covers, three times, so that it grows.
   */
  claim (img, first + 2, list, 1);
  claim (img, first + 3, list, max < 3 ? max : 3);
  claim (img, first + 5, list, max < 65535 ? max : 65535);
  if (img->refcount_order == 6)
    claim (img, first + 6, list, (1ULL << 40) + 5); /* needs 64 bits */
  claim (img, (first / per_block + 1) * per_block + 7, list, 1);
  for (i = 1; i <= 3; ++i)
    {
      uint64_t idx = img->reftable_bytes / 8 + i * 3;
      claim (img, idx * per_block + per_block / 2, list, 1);
    }
  if (img->reftable_offset == reftable0)
    die ("the refcount table did not grow");
  /* Eviction and reload through the 4-slot cache kept every count. */
  {
    FILE *in = fopen (list_path, "r");
    uint64_t c, n;

    fflush (list);
    while (fscanf (in, "%" SCNu64 " %" SCNu64, &c, &n) == 2)
      {
        OK (qcow2_rc_get (img, c, &v, &err));
        if (v != n)
          die ("cluster %" PRIu64 ": refcount %" PRIu64 ", expected %" PRIu64,
               c, v, n);
      }
    fclose (in);
  }
  fclose (list);
  if (qcow2_close_err (img, &err) == -1)
    die ("close: %s", err.msg);
  qcow2_hostio_close (io);
  printf ("ok: refcount %s\n", path);
}

/* ---- writing ---- */

struct wtest
{
  const char *path;
  struct qcow2_open_options opts;
  struct qcow2_hostio *io, *backing_io;
  struct qcow2_image *img;
  unsigned char *ref;
  uint64_t size;
};

static void
wt_open (struct wtest *t)
{
  struct qcow2_error err;
  int fd = open (t->path, O_RDWR | O_CLOEXEC);

  CHECK (fd >= 0);
  t->io = qcow2_hostio_fd (fd);
  t->img = qcow2_open (t->io, &t->opts, &err);
  if (t->img == NULL)
    die ("%s: %s", t->path, err.msg);
  if (t->backing_io)
    qcow2_set_backing (t->img, &qcow2_raw_layer_ops, t->backing_io,
                       t->backing_io->get_size (t->backing_io));
}

static void
wt_close (struct wtest *t)
{
  struct qcow2_error err;

  if (qcow2_close_err (t->img, &err) == -1)
    die ("close: %s", err.msg);
  qcow2_hostio_close (t->io);
  t->img = NULL;
}

static void
wt_verify (struct wtest *t, uint64_t off, uint64_t len, const char *when)
{
  struct qcow2_error err;
  unsigned char *buf = malloc (len ? len : 1);
  uint64_t i;

  if (qcow2_pread (t->img, buf, len, off, &err) == -1)
    die ("%s: read %#" PRIx64 "+%" PRIu64 ": %s", when, off, len, err.msg);
  if (memcmp (buf, t->ref + off, len) != 0)
    {
      for (i = 0; i < len && buf[i] == t->ref[off + i]; ++i)
        ;
      die ("%s: data differs at %#" PRIx64, when, off + i);
    }
  free (buf);
}

static uint64_t
rnd64 (unsigned *seed)
{
  return (uint64_t)rand_r (seed) << 33 ^ (uint64_t)rand_r (seed) << 12
         ^ rand_r (seed);
}

/* Discard: which bytes of [off, off+len) now read as zeroes (whole
 * clusters, the disk's last one counting as whole; not on version 2
 * over a backing file).
 */
static void
model_discard (struct wtest *t, uint64_t off, uint64_t len, uint64_t cs)
{
  uint64_t end = off + len, c;
  uint64_t backing
      = t->backing_io ? t->backing_io->get_size (t->backing_io) : 0;

  for (c = (off + cs - 1) & ~(cs - 1); c < end; c += cs)
    {
      uint64_t n = t->size - c < cs ? t->size - c : cs;
      if (c + n > end)
        break;
      if (qcow2_get_version (t->img) < 3 && c < backing)
        continue;
      memset (t->ref + c, 0, n);
    }
}

/* A zero or discard request instead of a write. */
static void
zero_op (struct wtest *t, unsigned *seed, uint64_t off, uint64_t len,
         uint64_t cs, unsigned i)
{
  struct qcow2_error err;
  unsigned pick = rand_r (seed) % 4;

  if (pick == 3)
    {
      if (qcow2_discard (t->img, len, off, &err) == -1)
        die ("op %u: discard %#" PRIx64 "+%" PRIu64 ": %s", i, off, len,
             err.msg);
      model_discard (t, off, len, cs);
      return;
    }
  if (pick == 2) /* fast: may refuse, and then changes nothing */
    {
      if (qcow2_zero (t->img, len, off, QCOW2_ZERO_FAST, &err) == -1)
        {
          if (err.errnum != ENOTSUP)
            die ("op %u: fast zero: %s", i, err.msg);
          return;
        }
    }
  else if (qcow2_zero (t->img, len, off, pick ? QCOW2_ZERO_MAY_UNMAP : 0, &err)
           == -1)
    die ("op %u: zero %#" PRIx64 "+%" PRIu64 ": %s", i, off, len, err.msg);
  memset (t->ref + off, 0, len);
}

static void
test_write (int argc, char *argv[])
{
  const bool with_zero = strcmp (argv[1], "wzero") == 0;
  struct wtest t = { .path = argv[2] };
  struct qcow2_error err;
  unsigned seed = strtoul (argv[4], NULL, 0);
  unsigned ops = strtoul (argv[5], NULL, 0), i;
  uint64_t cs;
  unsigned char *data;
  FILE *fp;

  t.opts.writable = true;
  if (argc > 6)
    t.opts.l2_cache_size = strtoull (argv[6], NULL, 0);
  if (argc > 7)
    {
      int fd = open (argv[7], O_RDONLY | O_CLOEXEC);
      CHECK (fd >= 0);
      t.backing_io = qcow2_hostio_fd (fd);
    }
  wt_open (&t);
  t.size = qcow2_get_size (t.img);
  cs = qcow2_get_cluster_size (t.img);
  CHECK (t.size > 0);
  /* The reference starts as what the library reads (which the read
   * tests compare with qemu).
   */
  t.ref = malloc (t.size);
  data = malloc (4 * 1024 * 1024);
  CHECK (t.ref && data);
  if (qcow2_pread (t.img, t.ref, t.size, 0, &err) == -1)
    die ("initial read: %s", err.msg);

  for (i = 0; i < ops; ++i)
    {
      uint64_t off, len, j;
      unsigned kind = rand_r (&seed) % 100;

      /* Sizes: bytes, sub-cluster, a few clusters, whole aligned
       * clusters, large; offsets anywhere, near the end, or reused.
       */
      if (kind < 30)
        len = 1 + rand_r (&seed) % 700;
      else if (kind < 60)
        len = 1 + rand_r (&seed) % (3 * cs);
      else if (kind < 80)
        len = cs * (1 + rand_r (&seed) % 8);
      else
        len = 1 + rand_r (&seed) % (4 * 1024 * 1024);
      if (len > t.size)
        len = t.size;
      off = rnd64 (&seed) % (t.size - len + 1);
      if (kind >= 60 && kind < 80)
        off &= ~(cs - 1);
      if (rand_r (&seed) % 10 == 0)
        off = t.size - len;
      if (off + len > t.size)
        len = t.size - off;
      for (j = 0; j < len; ++j)
        data[j] = (unsigned char)(i * 31 + j / 512 + 1);
      if (with_zero && rand_r (&seed) % 4 == 0)
        zero_op (&t, &seed, off, len, cs, i);
      else
        {
          if (qcow2_pwrite (t.img, data, len, off, &err) == -1)
            die ("op %u: write %#" PRIx64 "+%" PRIu64 ": %s", i, off, len,
                 err.msg);
          memcpy (t.ref + off, data, len);
        }
      /* Around the write: the edges the copy-on-write filled in. */
      {
        uint64_t lo = off >= 2 * cs ? off - 2 * cs : 0;
        uint64_t hi = off + len + 2 * cs < t.size ? off + len + 2 * cs : t.size;
        wt_verify (&t, lo, hi - lo, "after a write");
      }
      if (rand_r (&seed) % 8 == 0 && qcow2_flush (t.img, &err) == -1)
        die ("flush: %s", err.msg);
      if (i == ops / 2)
        {
          /* What was written survives closing (all of it, flushed or
           * not: close commits).
           */
          wt_close (&t);
          wt_open (&t);
          wt_verify (&t, 0, t.size, "after reopening");
        }
    }
  wt_verify (&t, 0, t.size, "at the end");
  wt_close (&t);

  fp = fopen (argv[3], "wb");
  CHECK (fp && fwrite (t.ref, 1, t.size, fp) == t.size && fclose (fp) == 0);
  qcow2_hostio_close (t.backing_io);
  free (t.ref);
  free (data);
  printf ("ok: %s %s (%u ops)\n", argv[1], t.path, ops);
}

/* ---- crash images ---- */

struct crash_op
{
  size_t ev_start, ev_end; /* recorded events before and after the op */
  bool flush;
  uint64_t off, len;     /* a write */
  unsigned char *stable; /* flush: the disk as it was made durable */
};

static void
check_crash_image (const unsigned char *file, size_t len,
                   const struct crash_op *ops, size_t nops, size_t upto,
                   uint64_t size, const unsigned char *initial_disk,
                   const char *name)
{
  struct qcow2_open_options opts = { .l2_cache_size = 1 };
  struct qcow2_error err;
  struct qcow2_hostio *io = qcow2_hostio_mem (file, len);
  struct qcow2_image *img = qcow2_open (io, &opts, &err);
  const unsigned char *stable = initial_disk;
  unsigned char *disk = malloc (size), *unstable = calloc (size, 1);
  size_t i, last_flush = 0;
  uint64_t j;

  if (img == NULL)
    die ("%s: does not open: %s", name, err.msg);
  if (qcow2_pread (img, disk, size, 0, &err) == -1)
    die ("%s: does not read: %s", name, err.msg);
  /* The last flush that completed before the crash, and every write
   * that may have reached the disk after it started.
   */
  for (i = 0; i < nops && ops[i].ev_end <= upto; ++i)
    if (ops[i].flush)
      {
        stable = ops[i].stable;
        last_flush = i + 1;
      }
  for (i = last_flush; i < nops && ops[i].ev_start < upto; ++i)
    if (!ops[i].flush)
      memset (unstable + ops[i].off, 1, ops[i].len);
  /* A flush that had started covers nothing more than the one before
   * it for writes after it started; writes before it are in 'stable'
   * only if it completed, so an unfinished flush's writes stay
   * unstable (handled: they come after last_flush).
   */
  for (j = 0; j < size; ++j)
    if (!unstable[j] && disk[j] != stable[j])
      die ("%s: flushed byte %#" PRIx64 " reads %#x, expected %#x (crash "
           "after event %zu)",
           name, j, disk[j], stable[j], upto);
  qcow2_close (img);
  qcow2_hostio_close (io);
  free (disk);
  free (unstable);
}

static void
test_crash (char *argv[])
{
  const char *path = argv[2], *dir = argv[3];
  unsigned seed = strtoul (argv[4], NULL, 0);
  unsigned nops = strtoul (argv[5], NULL, 0);
  unsigned nimages = strtoul (argv[6], NULL, 0);
  struct qcow2_open_options opts
      = { .writable = true, .l2_cache_size = 1, .refcount_cache_blocks = 4 };
  struct qcow2_error err;
  struct qcow2_hostio *mem, *rec;
  struct qcow2_image *img;
  struct crash_op *ops = calloc (nops + 1, sizeof *ops);
  unsigned char *initial, *ref, *initial_disk, *data;
  size_t initial_len, nev, i;
  uint64_t size, cs;
  unsigned k, flushes = 0;

  initial = slurp (path, &initial_len);
  mem = qcow2_hostio_mem_rw (initial, initial_len, 0, false);
  rec = qcow2_hostio_record (mem);
  img = qcow2_open (rec, &opts, &err);
  if (img == NULL)
    die ("%s: %s", path, err.msg);
  size = qcow2_get_size (img);
  cs = qcow2_get_cluster_size (img);
  ref = malloc (size);
  initial_disk = malloc (size);
  data = malloc (8 * cs);
  if (qcow2_pread (img, ref, size, 0, &err) == -1)
    die ("initial read: %s", err.msg);
  memcpy (initial_disk, ref, size);

  for (i = 0; i < nops; ++i)
    {
      struct crash_op *op = &ops[i];

      op->ev_start = qcow2_record_count (rec);
      if (rand_r (&seed) % 6 == 0)
        {
          op->flush = true;
          if (qcow2_flush (img, &err) == -1)
            die ("flush: %s", err.msg);
          op->stable = malloc (size);
          memcpy (op->stable, ref, size);
          flushes++;
        }
      else
        {
          uint64_t j;
          op->len = 1 + rand_r (&seed) % (rand_r (&seed) % 2 ? 8 * cs : cs);
          if (op->len > size)
            op->len = size;
          op->off = rnd64 (&seed) % (size - op->len + 1);
          for (j = 0; j < op->len; ++j)
            data[j] = (unsigned char)(i * 7 + j / 512 + 1);
          switch (rand_r (&seed) % 8)
            {
            case 0: /* zero, releasing clusters */
            case 1: /* zero, keeping them */
              if (qcow2_zero (img, op->len, op->off,
                              (i & 1) ? QCOW2_ZERO_MAY_UNMAP : 0, &err)
                  == -1)
                die ("zero: %s", err.msg);
              memset (ref + op->off, 0, op->len);
              break;
            case 2: /* discard: whole clusters read as zeroes (no backing) */
              if (qcow2_discard (img, op->len, op->off, &err) == -1)
                die ("discard: %s", err.msg);
              for (j = (op->off + cs - 1) & ~(cs - 1); j < op->off + op->len;
                   j += cs)
                if (j + cs <= op->off + op->len || op->off + op->len == size)
                  memset (ref + j, 0, size - j < cs ? size - j : cs);
              break;
            default:
              if (qcow2_pwrite (img, data, op->len, op->off, &err) == -1)
                die ("write: %s", err.msg);
              memcpy (ref + op->off, data, op->len);
            }
        }
      op->ev_end = qcow2_record_count (rec);
    }
  nev = qcow2_record_count (rec);
  CHECK (flushes > 2 && nev > nops);

  for (k = 0; k < nimages; ++k)
    {
      /* Every point of the log is a possible crash; the last image is
       * the whole log, as close to the end as it gets.
       */
      size_t upto = k + 1 == nimages ? nev : rand_r (&seed) % (nev + 1);
      unsigned char *file;
      size_t len;
      char name[4096];
      FILE *fp;

      OK (qcow2_record_crash_image (rec, initial, initial_len, upto, &seed,
                                    &file, &len));
      snprintf (name, sizeof name, "%s/crash-%u.qcow2", dir, k);
      check_crash_image (file, len, ops, nops, upto, size, initial_disk, name);
      fp = fopen (name, "wb");
      CHECK (fp && fwrite (file, 1, len, fp) == len && fclose (fp) == 0);
      free (file);
    }
  qcow2_close (img);
  qcow2_hostio_close (rec);
  qcow2_hostio_close (mem);
  for (i = 0; i < nops; ++i)
    free (ops[i].stable);
  free (ops);
  free (initial);
  free (initial_disk);
  free (ref);
  free (data);
  printf ("ok: crash %s: %zu events, %u flushes, %u images\n", path, nev,
          flushes, nimages);
}

/* ---- create, shuffle ---- */

static void
test_create (char *argv[])
{
  struct qcow2_create_options o = {
    .size = strtoull (argv[3], NULL, 0),
    .cluster_bits = strtoul (argv[4], NULL, 0),
    .refcount_bits = strtoul (argv[5], NULL, 0),
    .linear = strcmp (argv[6], "linear") == 0,
  };
  /* auto would give a compact image the linear layout at this open. */
  struct qcow2_open_options opts = {
    .writable = true,
    .layout = o.linear ? QCOW2_LAYOUT_AUTO : QCOW2_LAYOUT_COMPACT,
  };
  struct qcow2_error err;
  struct qcow2_hostio *io;
  struct qcow2_image *img;
  int fd = open (argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

  CHECK (fd >= 0);
  io = qcow2_hostio_fd (fd);
  if (qcow2_create (io, &o, &err) == -1)
    die ("create: %s", err.msg);
  /* It opens writable, in the layout asked for. */
  img = qcow2_open (io, &opts, &err);
  if (img == NULL)
    die ("open after create: %s", err.msg);
  CHECK (qcow2_get_size (img) == o.size);
  CHECK (img->alloc_mode
         == (o.linear ? QCOW2_ALLOC_LINEAR : QCOW2_ALLOC_COMPACT));
  if (qcow2_close_err (img, &err) == -1)
    die ("close: %s", err.msg);
  qcow2_hostio_close (io);
  printf ("ok: create %s\n", argv[2]);
}

static void
test_shuffle (char *argv[])
{
  struct wtest t = { .path = argv[2] };
  struct qcow2_error err;
  unsigned seed = strtoul (argv[4], NULL, 0);
  uint64_t cs, n, i, *order;
  unsigned char *data;
  FILE *fp;

  t.opts.writable = true;
  if (argv[5] && strcmp (argv[5], "linear") == 0)
    t.opts.layout = QCOW2_LAYOUT_LINEAR;
  else if (argv[5] && strcmp (argv[5], "compact") == 0)
    t.opts.layout = QCOW2_LAYOUT_COMPACT;
  wt_open (&t);
  t.size = qcow2_get_size (t.img);
  cs = qcow2_get_cluster_size (t.img);
  n = (t.size + cs - 1) / cs;
  order = malloc (n * sizeof *order);
  t.ref = malloc (t.size);
  data = malloc (cs);
  CHECK (order && t.ref && data);
  for (i = 0; i < n; ++i)
    order[i] = i;
  for (i = n - 1; i > 0; --i)
    {
      uint64_t j = rnd64 (&seed) % (i + 1), tmp = order[i];
      order[i] = order[j];
      order[j] = tmp;
    }
  for (i = 0; i < n; ++i)
    {
      uint64_t off = order[i] * cs, len = t.size - off < cs ? t.size - off : cs;
      memset (data, (int)(order[i] % 251 + 1), len);
      if (qcow2_pwrite (t.img, data, len, off, &err) == -1)
        die ("write cluster %" PRIu64 ": %s", order[i], err.msg);
      memcpy (t.ref + off, data, len);
      if (i % 64 == 63 && qcow2_flush (t.img, &err) == -1)
        die ("flush: %s", err.msg);
    }
  wt_verify (&t, 0, t.size, "after the shuffled upload");
  wt_close (&t);
  fp = fopen (argv[3], "wb");
  CHECK (fp && fwrite (t.ref, 1, t.size, fp) == t.size && fclose (fp) == 0);
  free (order);
  free (t.ref);
  free (data);
  printf ("ok: shuffle %s\n", argv[2]);
}

/* ---- group commit ---- */

#define GROUP_THREADS 4
#define GROUP_OPS 150

struct gop
{
  size_t ev_start, ev_end;
  bool flush;
  uint64_t off, len;
  unsigned char *stable; /* flush: this thread's bytes at the call */
};

struct gthread
{
  unsigned id, seed;
  unsigned nshared; /* parallel: changes in the shared clusters so far */
  struct gop ops[GROUP_OPS];
};

static struct
{
  struct qcow2_image *img;
  struct qcow2_hostio *rec;
  unsigned char *ref, *initial_disk;
  uint64_t size, cs, nclusters;
  unsigned flush_calls;
  /* parallel: [0, shared_end) is owned in UNIT-byte pieces (so every
   * cluster there is written by all threads), the rest by cluster.
   */
  bool parallel;
  uint64_t shared_end;
  uint16_t *allowed; /* per byte: which values a reader may see */
  int stop_readers;
  /* Injected latency of the slow hostio (microseconds; 0: none). */
  unsigned read_delay, write_delay, flush_delay;
} g;

#define UNIT 128

/* The recording hostio, with flushes that take a while (as real ones
 * do), so that concurrent flushes can find a commit in progress.
 */
struct slow_io
{
  struct qcow2_hostio io;
  struct qcow2_hostio *below;
};

/* Calls that slept, and slow writes that completed; slow writes in
 * progress now, and the most ever in progress at once.
 */
static unsigned slow_calls, slow_writes_done, slow_writes_in, slow_writes_max;

static bool
delay (unsigned *what)
{
  unsigned us = __atomic_load_n (what, __ATOMIC_RELAXED);

  if (us)
    {
      __atomic_add_fetch (&slow_calls, 1, __ATOMIC_RELEASE);
      usleep (us);
    }
  return us != 0;
}

static int
slow_pread (struct qcow2_hostio *io, void *buf, size_t n, uint64_t off)
{
  struct slow_io *s = (struct slow_io *)io;
  delay (&g.read_delay);
  return s->below->pread (s->below, buf, n, off);
}

static int64_t
slow_get_size (struct qcow2_hostio *io)
{
  struct slow_io *s = (struct slow_io *)io;
  return s->below->get_size (s->below);
}

static int
slow_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int n,
              uint64_t off)
{
  struct slow_io *s = (struct slow_io *)io;
  unsigned in = __atomic_add_fetch (&slow_writes_in, 1, __ATOMIC_ACQ_REL);
  unsigned max = __atomic_load_n (&slow_writes_max, __ATOMIC_RELAXED);
  bool slept;
  int r;

  while (in > max
         && !__atomic_compare_exchange_n (&slow_writes_max, &max, in, false,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  slept = delay (&g.write_delay);
  r = s->below->pwritev (s->below, iov, n, off);
  __atomic_sub_fetch (&slow_writes_in, 1, __ATOMIC_ACQ_REL);
  if (slept)
    __atomic_add_fetch (&slow_writes_done, 1, __ATOMIC_RELEASE);
  return r;
}

static int
slow_zero (struct qcow2_hostio *io, uint64_t off, uint64_t len, bool punch)
{
  struct slow_io *s = (struct slow_io *)io;
  return s->below->zero (s->below, off, len, punch);
}

static int
slow_flush (struct qcow2_hostio *io)
{
  struct slow_io *s = (struct slow_io *)io;
  delay (&g.flush_delay);
  return s->below->flush (s->below);
}

static void
slow_close (struct qcow2_hostio *io)
{
  free (io);
}

/* Which thread's is guest byte 'b'? */
static unsigned
owner_of (uint64_t b)
{
  if (b < g.shared_end)
    return b / UNIT % GROUP_THREADS;
  return b / g.cs % GROUP_THREADS;
}

/* parallel: the byte a write of version v (0-7) puts at guest offset
 * p: different at every offset of a cluster and for every version, so
 * that a read finding another cluster's data (a reused cluster) sees
 * values nobody wrote there.
 */
static unsigned char
pat (uint64_t p, unsigned v)
{
  uint64_t h = (p + 1) * 0x9e3779b97f4a7c15ULL;
  return (unsigned char)((h >> 56) + v * 37);
}

#define ALLOW_ZERO (1u << 8)

static void
allow (uint64_t off, uint64_t len, unsigned bit)
{
  uint64_t j;

  for (j = off; j < off + len; ++j)
    __atomic_fetch_or (&g.allowed[j], (uint16_t)bit, __ATOMIC_RELAXED);
}

/* May a reader see byte 'c' at guest offset p? */
static bool
allowed (uint64_t p, unsigned char c)
{
  unsigned a = __atomic_load_n (&g.allowed[p], __ATOMIC_RELAXED), v;

  if (c == g.initial_disk[p] || (c == 0 && (a & ALLOW_ZERO)))
    return true;
  for (v = 0; v < 8; ++v)
    if ((a & (1u << v)) && pat (p, v) == c)
      return true;
  return false;
}

/* parallel: one change by thread t, modelled in g.ref (only t changes
 * its bytes, so the model is exact).  Half in the shared clusters: a
 * piece of one of t's units, written or zeroed (every thread writes
 * these clusters at once: partial writes fill around themselves with
 * what the others wrote, so a missing claim loses updates).  Half in
 * t's own clusters: written (partly or whole), zeroed whole (keeping or
 * releasing the cluster) or discarded, so clusters are freed and
 * reallocated while other requests run.
 */
static void
parallel_op (struct gthread *th, struct gop *op, unsigned char *data)
{
  const unsigned t = th->id;
  struct qcow2_error err;
  unsigned kind = rand_r (&th->seed) % 10, v = rand_r (&th->seed) % 8;
  uint64_t j;
  int r;

  if (rand_r (&th->seed) % 2)
    {
      /* Every thread walks the shared clusters in the same order, two
       * changes each: they meet in clusters not written yet, where
       * partial writes allocate and fill around themselves at once.
       */
      const uint64_t upc = g.cs / UNIT; /* units per cluster */
      uint64_t c = th->nshared++ / 2 % (g.shared_end / g.cs);
      uint64_t u = c * upc
                   + rand_r (&th->seed) % (upc / GROUP_THREADS) * GROUP_THREADS
                   + t;
      op->len = 1 + rand_r (&th->seed) % UNIT;
      op->off = u * UNIT + rand_r (&th->seed) % (UNIT - op->len + 1);
      kind = kind < 7 ? 0 : 1; /* write, zero */
    }
  else
    {
      uint64_t own = (g.nclusters - g.shared_end / g.cs) / GROUP_THREADS;
      uint64_t c
          = g.shared_end / g.cs + (rnd64 (&th->seed) % own) * GROUP_THREADS;
      c += (t + GROUP_THREADS - c % GROUP_THREADS) % GROUP_THREADS;
      CHECK (c < g.nclusters && owner_of (c * g.cs) == t);
      op->len = kind < 3 ? 1 + rand_r (&th->seed) % g.cs : g.cs;
      op->off = c * g.cs + rand_r (&th->seed) % (g.cs - op->len + 1);
      kind = kind < 6 ? 0 : kind < 8 ? 1 : 2; /* write, zero, discard */
    }
  if (kind == 0)
    {
      for (j = 0; j < op->len; ++j)
        data[j] = pat (op->off + j, v);
      allow (op->off, op->len, 1u << v);
      if (qcow2_pwrite (g.img, data, op->len, op->off, &err) == -1)
        die ("thread %u: write: %s", t, err.msg);
      memcpy (g.ref + op->off, data, op->len);
      return;
    }
  allow (op->off, op->len, ALLOW_ZERO);
  if (kind == 2)
    r = qcow2_discard (g.img, op->len, op->off, &err);
  else
    {
      unsigned flags = rand_r (&th->seed) % 4;
      r = qcow2_zero (g.img, op->len, op->off,
                      (flags & 1 ? QCOW2_ZERO_MAY_UNMAP : 0)
                          | (flags & 2 ? QCOW2_ZERO_FAST : 0),
                      &err);
      if (r == -1 && err.errnum == ENOTSUP && (flags & 2))
        return; /* a fast zero that would write: nothing changed */
    }
  if (r == -1)
    die ("thread %u: %s: %s", t, kind == 2 ? "discard" : "zero", err.msg);
  memset (g.ref + op->off, 0, op->len);
}

/* parallel: read random ranges while the writers run; every byte must
 * be one some writer put there (or the value before).
 */
static void *
reader (void *arg)
{
  unsigned seed = *(unsigned *)arg, n = 0;
  unsigned char *buf = malloc (2 * g.cs);
  struct qcow2_error err;

  CHECK (buf);
  while (!__atomic_load_n (&g.stop_readers, __ATOMIC_ACQUIRE) || n < 20)
    {
      uint64_t len = 1 + rand_r (&seed) % (2 * g.cs);
      uint64_t off = rnd64 (&seed) % (g.size - len + 1), j;

      if (qcow2_pread (g.img, buf, len, off, &err) == -1)
        die ("reader: %s", err.msg);
      for (j = 0; j < len; ++j)
        if (!allowed (off + j, buf[j]))
          die ("reader: guest byte %#" PRIx64 " reads %#x, which no writer "
               "wrote there",
               off + j, buf[j]);
      n++;
    }
  free (buf);
  *(unsigned *)arg = n;
  return NULL;
}

static void *
group_worker (void *arg)
{
  struct gthread *th = arg;
  struct qcow2_error err;
  unsigned char *data = malloc (g.cs), *got = malloc (g.cs);
  unsigned i;

  CHECK (data && got);
  for (i = 0; i < GROUP_OPS; ++i)
    {
      struct gop *op = &th->ops[i];
      uint64_t c, j;

      op->ev_start = qcow2_record_count (g.rec);
      if (rand_r (&th->seed) % 4 == 0)
        {
          op->flush = true;
          op->stable = malloc (g.size);
          CHECK (op->stable);
          for (c = 0; c < g.size; ++c)
            if (owner_of (c) == th->id)
              op->stable[c] = g.ref[c];
          if (qcow2_flush (g.img, &err) == -1)
            die ("thread %u: flush: %s", th->id, err.msg);
          __atomic_add_fetch (&g.flush_calls, 1, __ATOMIC_RELAXED);
        }
      else if (g.parallel)
        {
          parallel_op (th, op, data);
          if (qcow2_pread (g.img, got, op->len, op->off, &err) == -1
              || memcmp (got, g.ref + op->off, op->len) != 0)
            die ("thread %u: reading back its change failed", th->id);
        }
      else
        {
          /* Inside one of its own clusters: part of it, or all. */
          c = rnd64 (&th->seed) % (g.nclusters / GROUP_THREADS) * GROUP_THREADS
              + th->id;
          op->len
              = rand_r (&th->seed) % 2 ? g.cs : 1 + rand_r (&th->seed) % g.cs;
          op->off = c * g.cs + rand_r (&th->seed) % (g.cs - op->len + 1);
          for (j = 0; j < op->len; ++j)
            data[j] = (unsigned char)(th->id * 64 + i + 1);
          if (qcow2_pwrite (g.img, data, op->len, op->off, &err) == -1)
            die ("thread %u: write: %s", th->id, err.msg);
          memcpy (g.ref + op->off, data, op->len);
          if (qcow2_pread (g.img, got, op->len, op->off, &err) == -1
              || memcmp (got, data, op->len) != 0)
            die ("thread %u: reading back its write failed", th->id);
        }
      op->ev_end = qcow2_record_count (g.rec);
    }
  free (data);
  free (got);
  return NULL;
}

static void
check_group_image (const unsigned char *file, size_t len, struct gthread *th,
                   size_t upto, const char *name)
{
  struct qcow2_open_options opts = { .l2_cache_size = 1 };
  struct qcow2_error err;
  struct qcow2_hostio *io = qcow2_hostio_mem (file, len);
  struct qcow2_image *img = qcow2_open (io, &opts, &err);
  unsigned char *disk = malloc (g.size), *unstable = calloc (g.size, 1);
  unsigned t;
  uint64_t j;

  if (img == NULL)
    die ("%s: does not open: %s", name, err.msg);
  if (qcow2_pread (img, disk, g.size, 0, &err) == -1)
    die ("%s: does not read: %s", name, err.msg);
  for (t = 0; t < GROUP_THREADS; ++t)
    {
      const unsigned char *stable = g.initial_disk;
      size_t i, last = 0;

      for (i = 0; i < GROUP_OPS && th[t].ops[i].ev_end <= upto; ++i)
        if (th[t].ops[i].flush)
          {
            stable = th[t].ops[i].stable;
            last = i + 1;
          }
      memset (unstable, 0, g.size);
      for (i = last; i < GROUP_OPS && th[t].ops[i].ev_start < upto; ++i)
        if (!th[t].ops[i].flush)
          memset (unstable + th[t].ops[i].off, 1, th[t].ops[i].len);
      for (j = 0; j < g.size; ++j)
        if (owner_of (j) == t && !unstable[j] && disk[j] != stable[j])
          die ("%s: thread %u's flushed byte %#" PRIx64 " reads %#x, "
               "expected %#x (crash after event %zu)",
               name, t, j, disk[j], stable[j], upto);
    }
  qcow2_close (img);
  qcow2_hostio_close (io);
  free (disk);
  free (unstable);
}

static void
test_group (char *argv[], bool parallel)
{
  const char *path = argv[2], *dir = argv[3];
  unsigned seed = strtoul (argv[4], NULL, 0);
  unsigned nimages = strtoul (argv[5], NULL, 0);
  /* Caches large enough that only flushes commit. */
  struct qcow2_open_options opts = { .writable = true };
  struct qcow2_error err;
  struct qcow2_hostio *mem;
  struct slow_io *slow = calloc (1, sizeof *slow);
  struct gthread *th = calloc (GROUP_THREADS, sizeof *th);
  pthread_t tid[GROUP_THREADS], rtid[2];
  unsigned rseed[2] = { seed * 7 + 1, seed * 7 + 2 };
  unsigned char *initial;
  size_t initial_len, nev, i, syncs = 0;
  uint64_t commits;
  unsigned t, k;

  CHECK (slow && th);
  initial = slurp (path, &initial_len);
  mem = qcow2_hostio_mem_rw (initial, initial_len, 0, false);
  g.rec = qcow2_hostio_record (mem);
  slow->below = g.rec;
  slow->io = *g.rec;
  slow->io.pread = slow_pread;
  slow->io.get_size = slow_get_size;
  slow->io.pwritev = slow_pwritev;
  slow->io.zero = slow_zero;
  slow->io.flush = slow_flush;
  slow->io.close = slow_close;
  g.img = qcow2_open (&slow->io, &opts, &err);
  if (g.img == NULL)
    die ("%s: %s", path, err.msg);
  g.size = qcow2_get_size (g.img);
  g.cs = qcow2_get_cluster_size (g.img);
  g.nclusters = g.size / g.cs;
  CHECK (g.size % g.cs == 0 && g.nclusters >= 4 * GROUP_THREADS);
  g.ref = malloc (g.size);
  g.initial_disk = malloc (g.size);
  if (qcow2_pread (g.img, g.ref, g.size, 0, &err) == -1)
    die ("initial read: %s", err.msg);
  memcpy (g.initial_disk, g.ref, g.size);
  g.flush_delay = 5000;
  g.parallel = parallel;
  if (parallel)
    {
      /* Clusters shared by every thread: a quarter of the disk, at
       * most 32 (each is met by all threads about twice).
       */
      CHECK (g.cs >= GROUP_THREADS * UNIT);
      g.shared_end = (g.nclusters / 4 < 32 ? g.nclusters / 4 : 32) * g.cs;
      g.allowed = calloc (g.size, sizeof *g.allowed);
      CHECK (g.allowed && g.shared_end + 4 * GROUP_THREADS * g.cs <= g.size);
      g.write_delay = 300;
      g.read_delay = 100;
      for (t = 0; t < 2; ++t)
        pthread_create (&rtid[t], NULL, reader, &rseed[t]);
    }

  for (t = 0; t < GROUP_THREADS; ++t)
    {
      th[t].id = t;
      th[t].seed = seed * 100 + t;
      pthread_create (&tid[t], NULL, group_worker, &th[t]);
    }
  for (t = 0; t < GROUP_THREADS; ++t)
    pthread_join (tid[t], NULL);
  if (parallel)
    {
      __atomic_store_n (&g.stop_readers, 1, __ATOMIC_RELEASE);
      for (t = 0; t < 2; ++t)
        pthread_join (rtid[t], NULL);
      g.write_delay = g.read_delay = 0;
    }
  wt_verify (&(struct wtest){ .img = g.img, .ref = g.ref }, 0, g.size,
             "after the threads");

  nev = qcow2_record_count (g.rec);
  for (i = 0; i < nev; ++i)
    syncs += qcow2_record_get (g.rec, i)->type == QCOW2_REC_FLUSH;
  /* Commits, not fdatasyncs: making refcount blocks syncs too. */
  if (g.img->cut_seq >= g.flush_calls)
    die ("%" PRIu64 " commits for %u flush calls: flushes did not share "
         "commits",
         g.img->cut_seq, g.flush_calls);

  for (k = 0; k < nimages; ++k)
    {
      size_t upto = k + 1 == nimages ? nev : rand_r (&seed) % (nev + 1);
      unsigned char *file;
      size_t len;
      char name[4096];
      FILE *fp;

      OK (qcow2_record_crash_image (g.rec, initial, initial_len, upto, &seed,
                                    &file, &len));
      snprintf (name, sizeof name, "%s/crash-%u.qcow2", dir, k);
      check_group_image (file, len, th, upto, name);
      fp = fopen (name, "wb");
      CHECK (fp && fwrite (file, 1, len, fp) == len && fclose (fp) == 0);
      free (file);
    }
  commits = g.img->cut_seq;
  qcow2_close (g.img);
  qcow2_hostio_close (&slow->io);
  qcow2_hostio_close (g.rec);
  qcow2_hostio_close (mem);
  for (t = 0; t < GROUP_THREADS; ++t)
    for (i = 0; i < GROUP_OPS; ++i)
      free (th[t].ops[i].stable);
  free (th);
  free (initial);
  free (g.ref);
  free (g.initial_disk);
  free (g.allowed);
  printf ("ok: %s %s: %u flush calls, %" PRIu64 " commits, %zu "
          "fdatasyncs, %zu events, %u images",
          parallel ? "parallel" : "group", path, g.flush_calls, commits, syncs,
          nev, nimages);
  if (parallel)
    printf (", %u + %u concurrent reads", rseed[0], rseed[1]);
  printf ("\n");
}

/* ---- parallel: the reuse barrier, claims, concurrency ---- */

/* A writable image on a slow memory copy of 'path' (no recording). */
static struct qcow2_image *
open_slow_copy (const char *path, struct slow_io **slowp,
                struct qcow2_hostio **memp, unsigned char **filep)
{
  /* Compact: the late-I/O tests rely on freed clusters being reused. */
  struct qcow2_open_options opts
      = { .writable = true, .layout = QCOW2_LAYOUT_COMPACT };
  struct qcow2_error err;
  struct slow_io *slow = calloc (1, sizeof *slow);
  size_t len;
  struct qcow2_image *img;

  CHECK (slow);
  *filep = slurp (path, &len);
  *memp = qcow2_hostio_mem_rw (*filep, len, 0, false);
  slow->below = *memp;
  slow->io = **memp;
  slow->io.pread = slow_pread;
  slow->io.get_size = slow_get_size;
  slow->io.pwritev = slow_pwritev;
  slow->io.zero = slow_zero;
  slow->io.flush = slow_flush;
  slow->io.close = slow_close;
  img = qcow2_open (&slow->io, &opts, &err);
  if (img == NULL)
    die ("%s: %s", path, err.msg);
  *slowp = slow;
  g.img = img;
  g.cs = qcow2_get_cluster_size (img);
  g.size = qcow2_get_size (img);
  g.nclusters = g.size / g.cs;
  return img;
}

static void
close_slow_copy (struct slow_io *slow, struct qcow2_hostio *mem,
                 unsigned char *file)
{
  struct qcow2_error err;

  if (qcow2_close_err (g.img, &err) == -1)
    die ("close: %s", err.msg);
  g.img = NULL;
  qcow2_hostio_close (&slow->io);
  qcow2_hostio_close (mem);
  free (file);
}

static void
fill_pattern (unsigned char *buf, uint64_t off, uint64_t len, unsigned v)
{
  uint64_t j;

  for (j = 0; j < len; ++j)
    buf[j] = pat (off + j, v);
}

static void
expect_pattern (uint64_t off, uint64_t len, int v, const char *what)
{
  unsigned char *buf = malloc (len), *want = malloc (len);
  struct qcow2_error err;

  CHECK (buf && want);
  if (v < 0)
    memset (want, 0, len);
  else
    fill_pattern (want, off, len, v);
  if (qcow2_pread (g.img, buf, len, off, &err) == -1)
    die ("%s: read: %s", what, err.msg);
  if (memcmp (buf, want, len) != 0)
    die ("%s: guest %#" PRIx64 "+%" PRIu64 " does not read as expected", what,
         off, len);
  free (buf);
  free (want);
}

struct late
{
  uint64_t off;
  unsigned char *buf;
  bool write; /* else read */
  int done;
};

/* One cluster-sized request at 'off', in a thread of its own. */
static void *
late_request (void *arg)
{
  struct late *l = arg;
  struct qcow2_error err;
  int r = l->write ? qcow2_pwrite (g.img, l->buf, g.cs, l->off, &err)
                   : qcow2_pread (g.img, l->buf, g.cs, l->off, &err);

  if (r == -1)
    die ("late %s: %s", l->write ? "writer" : "reader", err.msg);
  __atomic_store_n (&l->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Wait until a request of another thread sleeps in the hostio. */
static void
wait_for_sleeper (void)
{
  while (__atomic_load_n (&slow_calls, __ATOMIC_ACQUIRE) == 0)
    usleep (1000);
}

/* A reader looks up cluster A, then its data read is slow; meanwhile A
 * is discarded, committed (its host cluster freed) and B written, on a
 * compact image where B takes the most recently freed cluster.  The
 * late read must still see A's data (or zeroes): with the reuse barrier
 * the freed cluster is held back until the reader ends.  Returns
 * whether the reader saw something else (B's data).
 */
static bool
late_read (const char *path)
{
  struct slow_io *slow;
  struct qcow2_hostio *mem;
  unsigned char *file, *data;
  struct qcow2_error err;
  struct late l;
  pthread_t tid;
  uint64_t a, b, j;
  bool zeroes = true, bad;

  open_slow_copy (path, &slow, &mem, &file);
  CHECK (g.img->alloc_mode == QCOW2_ALLOC_COMPACT);
  a = 1 * g.cs;
  b = 7 * g.cs;
  data = malloc (g.cs);
  l = (struct late){ .off = a, .buf = malloc (g.cs) };
  CHECK (data && l.buf);
  fill_pattern (data, a, g.cs, 1);
  OK (qcow2_pwrite (g.img, data, g.cs, a, &err));
  OK (qcow2_flush (g.img, &err));

  __atomic_store_n (&slow_calls, 0, __ATOMIC_RELEASE);
  g.read_delay = 1000000; /* 1 s: main's steps below fit in it */
  pthread_create (&tid, NULL, late_request, &l);
  wait_for_sleeper ();
  g.read_delay = 0;
  OK (qcow2_discard (g.img, g.cs, a, &err));
  OK (qcow2_flush (g.img, &err));
  fill_pattern (data, b, g.cs, 2);
  OK (qcow2_pwrite (g.img, data, g.cs, b, &err));
  OK (qcow2_flush (g.img, &err));
  CHECK (!__atomic_load_n (&l.done, __ATOMIC_ACQUIRE));
  pthread_join (tid, NULL);

  fill_pattern (data, a, g.cs, 1);
  for (j = 0; j < g.cs; ++j)
    zeroes &= l.buf[j] == 0;
  bad = !zeroes && memcmp (l.buf, data, g.cs) != 0;
  if (!bad)
    {
      expect_pattern (a, g.cs, -1, "late read: A after the discard");
      expect_pattern (b, g.cs, 2, "late read: B");
    }
  free (data);
  free (l.buf);
  close_slow_copy (slow, mem, file);
  return bad;
}

/* A write in place to cluster A is slow; a discard of A meanwhile must
 * wait for it (the claim), so that A's cluster, freed by the discard,
 * reused for B, never gets the late write.
 */
static void
late_write (const char *path)
{
  struct slow_io *slow;
  struct qcow2_hostio *mem;
  unsigned char *file, *data;
  struct qcow2_error err;
  struct late l;
  pthread_t tid;
  uint64_t a, b;

  open_slow_copy (path, &slow, &mem, &file);
  a = 2 * g.cs;
  b = 9 * g.cs;
  data = malloc (g.cs);
  l = (struct late){ .off = a, .buf = malloc (g.cs), .write = true };
  CHECK (data && l.buf);
  fill_pattern (data, a, g.cs, 1);
  OK (qcow2_pwrite (g.img, data, g.cs, a, &err));
  OK (qcow2_flush (g.img, &err));

  fill_pattern (l.buf, a, g.cs, 3); /* in place: A is ours alone */
  __atomic_store_n (&slow_calls, 0, __ATOMIC_RELEASE);
  __atomic_store_n (&slow_writes_done, 0, __ATOMIC_RELEASE);
  g.write_delay = 300000;
  pthread_create (&tid, NULL, late_request, &l);
  wait_for_sleeper ();
  g.write_delay = 0;
  OK (qcow2_discard (g.img, g.cs, a, &err));
  /* The write's data is on the file (its request may still be ending). */
  if (__atomic_load_n (&slow_writes_done, __ATOMIC_ACQUIRE) == 0)
    die ("late write: the discard of a cluster did not wait for a write "
         "to it");
  OK (qcow2_flush (g.img, &err));
  fill_pattern (data, b, g.cs, 2);
  OK (qcow2_pwrite (g.img, data, g.cs, b, &err));
  OK (qcow2_flush (g.img, &err));
  pthread_join (tid, NULL);
  expect_pattern (a, g.cs, -1, "late write: A after the discard");
  expect_pattern (b, g.cs, 2, "late write: B");
  free (data);
  free (l.buf);
  close_slow_copy (slow, mem, file);
}

struct speed
{
  uint64_t first, n;
};

static void *
speed_writer (void *arg)
{
  struct speed *sp = arg;
  unsigned char *data = malloc (g.cs);
  struct qcow2_error err;
  uint64_t c;

  CHECK (data);
  for (c = sp->first; c < sp->first + sp->n; ++c)
    {
      fill_pattern (data, c * g.cs, g.cs, 5);
      if (qcow2_pwrite (g.img, data, g.cs, c * g.cs, &err) == -1)
        die ("speed writer: %s", err.msg);
    }
  free (data);
  return NULL;
}

/* 4 threads writing different (new) clusters over a hostio whose
 * writes take 20 ms: nothing serializes the data writes, so at some
 * point two or more of those writes are in the hostio at once.  That
 * is counted, not timed (a loaded machine under ThreadSanitizer made a
 * time ratio fail with nothing serialized); the times are printed.
 */
static void
speedup (const char *path)
{
  const uint64_t per = 6;
  struct slow_io *slow;
  struct qcow2_hostio *mem;
  unsigned char *file;
  struct speed sp[GROUP_THREADS];
  pthread_t tid[GROUP_THREADS];
  double t0, serial, par;
  unsigned t;

  open_slow_copy (path, &slow, &mem, &file);
  CHECK (g.nclusters >= 2 * per * GROUP_THREADS);
  g.write_delay = 20000;
  sp[0] = (struct speed){ 0, per * GROUP_THREADS };
  t0 = now_s ();
  speed_writer (&sp[0]);
  serial = now_s () - t0;
  __atomic_store_n (&slow_writes_max, 0, __ATOMIC_RELEASE);
  t0 = now_s ();
  for (t = 0; t < GROUP_THREADS; ++t)
    {
      sp[t] = (struct speed){ (GROUP_THREADS + t) * per, per };
      pthread_create (&tid[t], NULL, speed_writer, &sp[t]);
    }
  for (t = 0; t < GROUP_THREADS; ++t)
    pthread_join (tid[t], NULL);
  par = now_s () - t0;
  g.write_delay = 0;
  expect_pattern (0, 2 * per * GROUP_THREADS * g.cs, 5, "speedup");
  close_slow_copy (slow, mem, file);
  if (__atomic_load_n (&slow_writes_max, __ATOMIC_ACQUIRE) < 2)
    die ("speedup %s: %u threads writing different clusters never had two "
         "writes in the host I/O at once: requests do not run in parallel "
         "(%.3f s, against %.3f s for one thread)",
         path, GROUP_THREADS, par, serial);
  printf ("ok: speedup %s: %" PRIu64 " cluster writes, up to %u at once; "
          "1 thread %.3f s, %u threads %.3f s (ratio %.2f)\n",
          path, per * GROUP_THREADS,
          __atomic_load_n (&slow_writes_max, __ATOMIC_ACQUIRE), serial,
          GROUP_THREADS, par, par / serial);
}

static void
test_parallel (char *argv[])
{
  const char *path = argv[2];

  test_group (argv, true);
  late_write (path);
  printf ("ok: late write %s: a discard waits for a write to its cluster\n",
          path);
  if (late_read (path))
    die ("late read %s: a read racing a discard saw data of a cluster "
         "written after the discard (freed cluster reused too early)",
         path);
  printf ("ok: late read %s: a freed cluster is not reused under a read\n",
          path);
  speedup (path);
}

/* The barrier off: the late read must see the reused cluster, else the
 * test above proves nothing.
 */
static int
test_barrier_off (const char *path)
{
  qcow2_test_no_reuse_barrier = true;
  if (!late_read (path))
    die ("barrier-off %s: the late read did not notice the missing reuse "
         "barrier",
         path);
  printf ("ok: barrier-off %s: without the barrier the late read saw "
          "another cluster's data\n",
          path);
  return 0;
}

/* ---- failures ---- */

struct fault_io
{
  struct qcow2_hostio io;
  struct qcow2_hostio *below;
  unsigned calls, fail_at; /* fail call number fail_at (from 1) */
};

static int
fault_next (struct fault_io *f)
{
  return ++f->calls == f->fail_at ? -EIO : 0;
}

static int
fault_pread (struct qcow2_hostio *io, void *buf, size_t n, uint64_t off)
{
  struct fault_io *f = (struct fault_io *)io;
  return f->below->pread (f->below, buf, n, off);
}

static int64_t
fault_get_size (struct qcow2_hostio *io)
{
  struct fault_io *f = (struct fault_io *)io;
  return f->below->get_size (f->below);
}

static int
fault_pwritev (struct qcow2_hostio *io, const struct iovec *iov, int n,
               uint64_t off)
{
  struct fault_io *f = (struct fault_io *)io;
  return fault_next (f) ?: f->below->pwritev (f->below, iov, n, off);
}

static int
fault_zero (struct qcow2_hostio *io, uint64_t off, uint64_t len, bool punch)
{
  struct fault_io *f = (struct fault_io *)io;

  /* Punching freed clusters is a hint whose failure is ignored by
   * design: no fault there.
   */
  if (punch)
    return f->below->zero (f->below, off, len, punch);
  return fault_next (f) ?: f->below->zero (f->below, off, len, punch);
}

static int
fault_flush (struct qcow2_hostio *io)
{
  struct fault_io *f = (struct fault_io *)io;
  return fault_next (f) ?: f->below->flush (f->below);
}

/* Calls the writable open made in the last run without faults. */
static unsigned fault_open_calls;

/* One run failing at call 'fail_at' (0: never).  Returns the number of
 * calls made, or dies.
 */
static unsigned
fault_run (const char *path, unsigned seed, unsigned fail_at)
{
  struct qcow2_open_options opts = { .writable = true, .l2_cache_size = 1 };
  struct qcow2_error err;
  struct fault_io f = { .fail_at = fail_at };
  struct qcow2_image *img;
  unsigned char *ref, *stable, *touched, *data, *got;
  uint64_t size, cs;
  unsigned i, calls;
  bool failed = false;
  int fd = open (path, O_RDWR | O_CLOEXEC);

  CHECK (fd >= 0);
  f.below = qcow2_hostio_fd (fd);
  f.io = *f.below;
  f.io.pread = fault_pread;
  f.io.get_size = fault_get_size;
  f.io.pwritev = fault_pwritev;
  f.io.zero = fault_zero;
  f.io.flush = fault_flush;
  f.io.block_status = NULL;
  /* The contents before: read without faults (a writable open may
   * change the file: it gives an empty image the linear layout).
   */
  {
    struct qcow2_open_options ro = { 0 };
    img = qcow2_open (f.below, &ro, &err);
    if (img == NULL)
      die ("%s: %s", path, err.msg);
    size = qcow2_get_size (img);
    cs = qcow2_get_cluster_size (img);
    ref = malloc (size);
    stable = malloc (size);
    touched = calloc (size, 1);
    data = malloc (4 * cs);
    got = malloc (size);
    if (qcow2_pread (img, ref, size, 0, &err) == -1)
      die ("initial read: %s", err.msg);
    memcpy (stable, ref, size);
    qcow2_close (img);
  }
  img = qcow2_open (&f.io, &opts, &err);
  if (img == NULL)
    {
      /* Failing at open (while laying the image out) is a failure like
       * any other: the file must reopen and read as before.
       */
      if (fail_at == 0 || err.errnum != EIO)
        die ("%s: %s", path, err.msg);
      failed = true;
    }
  if (fail_at == 0)
    fault_open_calls = f.calls;

  for (i = 0; i < 200 && !failed; ++i)
    {
      uint64_t len = 1 + rand_r (&seed) % (4 * cs), off;
      unsigned kind = rand_r (&seed) % 8;
      int r;

      if (len > size)
        len = size;
      off = rnd64 (&seed) % (size - len + 1);
      memset (data, (int)(i + 1), len);
      if (kind == 0)
        r = qcow2_flush (img, &err);
      else if (kind == 1)
        r = qcow2_zero (img, len, off, QCOW2_ZERO_MAY_UNMAP, &err);
      else
        r = qcow2_pwrite (img, data, len, off, &err);
      if (r == -1)
        {
          if (err.errnum != EIO)
            die ("fault at %u: error %d (%s), expected EIO", fail_at,
                 err.errnum, err.msg);
          failed = true;
          /* A failed request may have been done in part. */
          if (kind != 0)
            memset (touched + off, 1, len);
          break;
        }
      if (kind == 0)
        {
          memcpy (stable, ref, size);
          memset (touched, 0, size);
          continue;
        }
      if (kind == 1)
        memset (ref + off, 0, len);
      else
        memcpy (ref + off, data, len);
      memset (touched + off, 1, len);
    }
  if (fail_at && !failed)
    die ("fault at %u: nothing failed", fail_at);
  if (failed && img != NULL)
    {
      /* Failed for good, even though the file works again. */
      CHECK (qcow2_pwrite (img, data, 1, 0, &err) == -1 && err.errnum == EIO);
      CHECK (qcow2_zero (img, 1, 0, 0, &err) == -1 && err.errnum == EIO);
      CHECK (qcow2_flush (img, &err) == -1 && err.errnum == EIO);
      /* And reads: memory may no longer match the disk. */
      CHECK (qcow2_pread (img, got, 1, 0, &err) == -1 && err.errnum == EIO);
    }
  calls = f.calls; /* the open's and the requests', not closing's */
  if (img != NULL)
    qcow2_close (img); /* no error to report: must not crash */
  qcow2_hostio_close (f.below);

  /* Reopened: what the last successful flush made durable is there
   * (nothing was lost in the page cache: every write that completed is
   * visible, so only the commit's own writes can be missing).
   */
  {
    struct qcow2_open_options ro = { 0 };
    struct qcow2_hostio *io;
    fd = open (path, O_RDONLY | O_CLOEXEC);
    io = qcow2_hostio_fd (fd);
    img = qcow2_open (io, &ro, &err);
    if (img == NULL)
      die ("fault at %u: does not reopen: %s", fail_at, err.msg);
    if (qcow2_pread (img, got, size, 0, &err) == -1)
      die ("fault at %u: does not read: %s", fail_at, err.msg);
    if (!failed && memcmp (got, ref, size) != 0)
      die ("no fault: the data differs after closing");
    /* Bytes no request touched since the last flush must read as then;
     * the others may read as any value they had since.
     */
    {
      uint64_t j;
      for (j = 0; j < size; ++j)
        if (!touched[j] && got[j] != stable[j])
          die ("fault at %u: flushed byte %#" PRIx64 " reads %#x, expected "
               "%#x",
               fail_at, j, got[j], stable[j]);
    }
    qcow2_close (img);
    qcow2_hostio_close (io);
  }
  free (ref);
  free (stable);
  free (touched);
  free (data);
  free (got);
  return calls;
}

static void
test_fault (char *argv[])
{
  const char *path = argv[2], *dir = argv[3];
  unsigned seed = strtoul (argv[4], NULL, 0);
  unsigned nimages = strtoul (argv[5], NULL, 0), k, total;
  size_t len;
  unsigned char *orig = slurp (path, &len);
  char name[4096];
  FILE *fp;

  /* How many calls a run makes without faults. */
  snprintf (name, sizeof name, "%s/fault-none.qcow2", dir);
  fp = fopen (name, "wb");
  CHECK (fp && fwrite (orig, 1, len, fp) == len && fclose (fp) == 0);
  total = fault_run (name, seed, 0);
  CHECK (total > nimages);
  /* Every call of the open (laying the image out), then 'nimages'
   * spread over the whole run.
   */
  for (k = 0; k < fault_open_calls + nimages; ++k)
    {
      unsigned at
          = k < fault_open_calls
                ? 1 + k
                : 1 + (uint64_t)(k - fault_open_calls) * total / nimages;
      snprintf (name, sizeof name, "%s/fault-%s%u.qcow2", dir,
                k < fault_open_calls ? "open-" : "", at);
      fp = fopen (name, "wb");
      CHECK (fp && fwrite (orig, 1, len, fp) == len && fclose (fp) == 0);
      fault_run (name, seed, at);
    }
  free (orig);
  printf ("ok: fault %s: %u calls (%u at open), %u failure points\n", path,
          total, fault_open_calls, fault_open_calls + nimages);
}

static int
test_openw (const char *path)
{
  struct qcow2_open_options opts = { .writable = true };
  struct qcow2_error err;
  struct qcow2_hostio *io;
  struct qcow2_image *img;
  int fd = open (path, O_RDWR | O_CLOEXEC);

  CHECK (fd >= 0);
  io = qcow2_hostio_fd (fd);
  img = qcow2_open (io, &opts, &err);
  if (img == NULL || qcow2_close_err (img, &err) == -1)
    {
      fprintf (stderr, "%s: %s\n", path, err.msg);
      qcow2_hostio_close (io);
      return 1;
    }
  qcow2_hostio_close (io);
  return 0;
}

int
main (int argc, char *argv[])
{
  if (argc == 3 && strcmp (argv[1], "hostio") == 0)
    test_hostio (argv[2]);
  else if (argc == 4 && strcmp (argv[1], "refcount") == 0)
    test_refcount (argv[2], argv[3]);
  else if (argc >= 6 && argc <= 8
           && (strcmp (argv[1], "write") == 0
               || strcmp (argv[1], "wzero") == 0))
    test_write (argc, argv);
  else if (argc == 7 && strcmp (argv[1], "crash") == 0)
    test_crash (argv);
  else if (argc == 7 && strcmp (argv[1], "create") == 0)
    test_create (argv);
  else if ((argc == 5 || argc == 6) && strcmp (argv[1], "shuffle") == 0)
    test_shuffle (argv);
  else if (argc == 6 && strcmp (argv[1], "group") == 0)
    test_group (argv, false);
  else if (argc == 6 && strcmp (argv[1], "parallel") == 0)
    test_parallel (argv);
  else if (argc == 3 && strcmp (argv[1], "barrier-off") == 0)
    return test_barrier_off (argv[2]);
  else if (argc == 3 && strcmp (argv[1], "openw") == 0)
    return test_openw (argv[2]);
  else if (argc == 6 && strcmp (argv[1], "fault") == 0)
    test_fault (argv);
  else
    die ("usage: %s hostio DIR | refcount IMAGE LIST | write IMAGE OUT SEED "
         "OPS [L2-CACHE [BACKING]] | crash IMAGE DIR SEED OPS IMAGES | create "
         "IMAGE SIZE CLUSTER-BITS REFCOUNT-BITS linear|compact | shuffle "
         "IMAGE OUT SEED | group IMAGE DIR SEED IMAGES | parallel IMAGE DIR "
         "SEED IMAGES | barrier-off IMAGE | openw IMAGE | fault "
         "IMAGE DIR SEED IMAGES",
         argv[0]);
  return 0;
}
