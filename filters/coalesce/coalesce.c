/* nbdstack coalesce filter: a volatile write-back buffer that turns many
 * small or out-of-order writes into few large ascending ones.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * This file: configuration, lifecycle and the nbdkit callbacks, which
 * decide what is buffered (buffer.c), what goes down directly
 * (direct.c) and when it must reach the plugin (writeback.c).  The top
 * of the stack: it may call every other part, and none calls it.  See
 * coalesce.h for how the parts fit together.
 *
 * One buffer serves the whole server, shared by every connection, so
 * that imageio's four interleaved connections or qemu-img's
 * out-of-order requests merge with each other.  All I/O below goes
 * through one "shared" context opened in .after_fork
 * (nbdkit_next_context_open with shared=1): the writer threads need a
 * context that outlives any connection, and using the same context for
 * reads, flushes and write-back means a flush covers everything we
 * wrote even when the plugin below is not multi-conn consistent.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "align.h"
#include "buffer.h"
#include "cleanup.h"
#include "coalesce-params.h"
#include "coalesce.h"
#include "direct.h"
#include "order.h"
#include "parse-enum-param.h"
#include "parse-size-param.h"
#include "writeback.h"

/* qemu-img convert writes up to 2M at a time: such writes go down as
 * they are, put in order by a short wait instead of a copy (order.c).
 * nbdcopy's 256K requests, which arrive interleaved from several
 * connections, stay buffered.
 */
#define LARGE_WRITE_MIN (1024 * 1024)

NBDKIT_DLL_PUBLIC int coalesce_debug_verbose = 0;
NBDKIT_DLL_PUBLIC int coalesce_debug_buffer_all = 0;

/* -D coalesce.order_grace_ms=N replaces ORDER_ALL_WAITING_MS (tests on
 * a loaded machine).
 */
NBDKIT_DLL_PUBLIC int coalesce_debug_order_grace_ms = ORDER_ALL_WAITING_MS;

struct coalesce co = {
  .mode = MODE_WRITEBACK,
  .buffer_limit = 64 * 1024 * 1024,
  .delay_ms = 50,
  .max_write_param = 4 * 1024 * 1024,
  .use_hugepages = -1,
  .interleaved = -1,
  .threads = BG_THREADS_DEFAULT,
  .order_wait_param = -1,
  .below_lock = PTHREAD_MUTEX_INITIALIZER,
  .lock = PTHREAD_MUTEX_INITIALIZER,
};

/*---------------------------------------------------------------------
 * Configuration.
 */

static const struct param_spec coalesce_params[]
    = { COALESCE_PARAMS (PARAM_SPEC) };

/* Set one of the parameters in coalesce_params. */
static int
set_param (const char *key, const char *value)
{
  if (strcmp (key, "coalesce-mode") == 0)
    {
      static const struct enum_param_word mode_words[] = {
        { "writeback", MODE_WRITEBACK },
        { "writethrough", MODE_WRITETHROUGH },
      };
      int r;

      if (parse_enum_param (key, value, mode_words, &r) == -1)
        return -1;
      co.mode = r;
      return 0;
    }
  if (strcmp (key, "coalesce-interleaved") == 0)
    {
      static const struct enum_param_word interleaved_words[] = {
        { "auto", -1 },
        { "direct", 0 },
        { "buffer", 1 },
      };
      int r;

      if (parse_enum_param (key, value, interleaved_words, &r) == -1)
        return -1;
      co.interleaved = r;
      return 0;
    }
  if (strcmp (key, "coalesce-size") == 0)
    {
      int64_t r = parse_size_param (key, value);
      if (r == -1)
        return -1;
      if (r < 1024 * 1024)
        {
          nbdkit_error ("coalesce-size=%s: must be at least 1M", value);
          return -1;
        }
      co.buffer_limit = r;
      return 0;
    }
  if (strcmp (key, "coalesce-delay") == 0)
    {
      if (nbdkit_parse_unsigned ("coalesce-delay", value, &co.delay_ms) == -1)
        return -1;
      if (co.delay_ms > 3600 * 1000)
        {
          nbdkit_error ("coalesce-delay=%s: at most 3600000 (one hour)", value);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "coalesce-hugepages") == 0)
    {
      bool b;

      /* nbdkit_parse_bool's error would not name the parameter. */
      if (parse_bool_param (key, value, &b) == -1)
        return -1;
      co.use_hugepages = b;
      return 0;
    }
  if (strcmp (key, "coalesce-threads") == 0)
    {
      if (nbdkit_parse_unsigned ("coalesce-threads", value, &co.threads) == -1)
        return -1;
      if (co.threads < 1 || co.threads > BG_THREADS_MAX)
        {
          nbdkit_error ("coalesce-threads=%s: must be between 1 and %d", value,
                        BG_THREADS_MAX);
          return -1;
        }
      return 0;
    }
  if (strcmp (key, "coalesce-order-wait") == 0)
    {
      unsigned ms;
      if (nbdkit_parse_unsigned ("coalesce-order-wait", value, &ms) == -1)
        return -1;
      if (ms > 1000)
        {
          nbdkit_error ("coalesce-order-wait=%s: must be between 0 and 1000",
                        value);
          return -1;
        }
      co.order_wait_param = ms;
      return 0;
    }
  if (strcmp (key, "coalesce-max-write") == 0)
    {
      int64_t r = parse_size_param (key, value);
      if (r == -1)
        return -1;
      if (r < 4096 || r > 32 * 1024 * 1024)
        {
          nbdkit_error ("coalesce-max-write=%s: must be between 4K and 32M",
                        value);
          return -1;
        }
      co.max_write_param = r;
      return 0;
    }
  abort (); /* a key in COALESCE_PARAMS without a case here */
}

/* Ours if COALESCE_PARAMS lists it, else the next layer's. */
PARAM_FILTER_CONFIG (config_own_or_next, coalesce_params, set_param)

/* As config_own_or_next, noting on the way whether the layers below
 * were given cache=none (the image and file plugins' parameter; see
 * coalesce-interleaved=auto).  The last one given counts, as in the
 * plugin.
 */
static int
coalesce_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                 const char *key, const char *value)
{
  if (strcmp (key, "cache") == 0)
    co.below_cache_none = strcmp (value, "none") == 0;
  return config_own_or_next (next, nxdata, key, value);
}

#define coalesce_config_help COALESCE_PARAMS (PARAM_HELP_LINE)

/* True if transparent huge pages can be had with MADV_HUGEPAGE. */
static bool
thp_available (void)
{
  char buf[128] = "";
  FILE *f = fopen ("/sys/kernel/mm/transparent_hugepage/enabled", "r");

  if (f == NULL)
    return false;
  if (fgets (buf, sizeof buf, f) == NULL)
    buf[0] = 0;
  fclose (f);
  return strstr (buf, "[always]") || strstr (buf, "[madvise]");
}

static int
coalesce_get_ready (int thread_model)
{
  /* Our threads call the plugin through the shared context without the
   * server's per-connection request locks.  Over a stack that allows
   * parallel requests that is fine; over a serialized one we serialize
   * our own calls down instead (see CALL_BELOW), so the filter still
   * works over any plugin, at the speed that plugin allows.
   */
  co.serialize_below = thread_model != NBDKIT_THREAD_MODEL_PARALLEL;
  co.buffer_interleaved
      = co.interleaved == -1 ? co.below_cache_none : co.interleaved == 1;
  /* Holding a large write back for the ones before it pays only where
   * the plugin lays data out in the order writes arrive, which is what
   * an explicit coalesce-interleaved=buffer declares.  Behind the page
   * cache, or the image plugin (which places qcow2 clusters in guest
   * order, and whose raw files came out as fragmented without it), the
   * wait only costs time: 1.02-1.07x the plugin's wall time for
   * qemu-img convert -W of a used disk's sample into cache=none raw,
   * against 0.95-1.00x without it.
   */
  co.order.wait_ms = co.order_wait_param >= 0 ? (unsigned)co.order_wait_param
                     : co.interleaved == 1    ? ORDER_WAIT_DEFAULT_MS
                                              : 0;
  co.order.grace_ms
      = MIN ((unsigned)coalesce_debug_order_grace_ms, co.order.wait_ms);
  if (co.serialize_below)
    nbdkit_debug ("coalesce: the stack below is not parallel: "
                  "serializing every request sent to it");
  return 0;
}

/*---------------------------------------------------------------------
 * Lifecycle.
 */

static int
coalesce_after_fork (nbdkit_backend *backend)
{
  pthread_condattr_t attr;
  uint32_t minimum = 0, preferred = 0, maximum = 0;
  int64_t size;

  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&co.wake_bg, &attr);
  pthread_cond_init (&co.changed, &attr);
  pthread_condattr_destroy (&attr);

  co.set.page_size = sysconf (_SC_PAGESIZE);

  co.below = nbdkit_next_context_open (backend, 0, "", 1);
  if (co.below == NULL)
    {
      nbdkit_error ("coalesce: cannot open the plugin for background writes");
      return -1;
    }
  if (co.below->prepare (co.below) == -1)
    return -1;
  size = co.below->get_size (co.below);
  if (size == -1)
    return -1;
  co.export_size = size;
  co.can_write = co.below->can_write (co.below);
  co.can_flush = co.below->can_flush (co.below);
  co.can_trim = co.below->can_trim (co.below);
  co.can_zero = co.below->can_zero (co.below);
  co.can_fast_zero = co.below->can_fast_zero (co.below);
  co.can_extents = co.below->can_extents (co.below);
  co.can_fua = co.below->can_fua (co.below);
  if (co.can_write == -1 || co.can_flush == -1 || co.can_trim == -1
      || co.can_zero == -1 || co.can_fast_zero == -1 || co.can_extents == -1)
    return -1;
  if (co.below->block_size (co.below, &minimum, &preferred, &maximum) == -1)
    return -1;

  co.max_write = co.max_write_param;
  if (maximum > 0 && maximum < co.max_write)
    co.max_write = ROUND_DOWN (maximum, minimum ? minimum : 1);
  co.high_water = co.buffer_limit / 2;

  if (co.export_size > 0 && co.can_write == 1)
    {
      /* Every byte of an upload lands on a page never touched before
       * (the buffer is indexed by offset), so with 4K pages the kernel
       * takes one fault per 4K: measured here at about 3 s of CPU per
       * GiB, more than everything else the filter does.  Transparent
       * huge pages cut that 512-fold.  The price is that memory is then
       * accounted in 2M units (a 512-byte write holds 2M of the
       * buffer), so huge pages are used only when the buffer has room
       * for at least 16 of them, and, unless coalesce-hugepages is set,
       * only while the buffer gets data that fills them (see
       * buffer_note_piece).  The mapping is aligned to 2M either way,
       * so that the policy can change.
       */
      bool huge = co.use_hugepages != 0 && co.buffer_limit >= 16 * HUGE_PAGE
                  && thp_available ();
      if (co.use_hugepages == 1 && !huge)
        nbdkit_debug ("coalesce: not using huge pages (unavailable or "
                      "coalesce-size below 32M)");
      co.small_page = co.set.page_size;
      co.adaptive_pages = huge && co.use_hugepages == -1;
      if (huge)
        co.set.page_size = HUGE_PAGE;
      co.map_len = ROUND_UP (co.export_size, HUGE_PAGE) + HUGE_PAGE;
      co.map_base = mmap (NULL, co.map_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (co.map_base == MAP_FAILED)
        {
          co.map_base = NULL;
          nbdkit_error ("coalesce: cannot reserve %" PRIu64 " bytes of address "
                        "space for the buffer: %m",
                        co.export_size);
          return -1;
        }
      /* Align so that accounting units are real (huge) pages. */
      co.map = (char *)ROUND_UP ((uintptr_t)co.map_base, HUGE_PAGE);
      madvise (co.map, co.map_len - HUGE_PAGE,
               huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);

      if (writeback_start () == -1)
        return -1;
    }
  nbdkit_debug ("coalesce: mode=%s size=%" PRIu64 " delay=%ums "
                "max-write=%" PRIu32 " export-size=%" PRIu64 " page=%" PRIu64
                " interleaved=%s%s order-wait=%ums",
                co.mode == MODE_WRITEBACK ? "writeback" : "writethrough",
                co.buffer_limit, co.delay_ms, co.max_write, co.export_size,
                co.set.page_size, co.buffer_interleaved ? "buffer" : "direct",
                co.interleaved != -1  ? ""
                : co.below_cache_none ? " (auto: cache=none below)"
                                      : " (auto)",
                co.order.wait_ms);
  return 0;
}

static void
coalesce_cleanup (nbdkit_backend *backend)
{
  writeback_stop ();

  /* One line, parsed by tests and bench scripts: keep the words. */
  nbdkit_debug (
      "coalesce: writes in %" PRIu64 " (%" PRIu64 " bytes), "
      "buffered %" PRIu64 " (%" PRIu64 " bytes), "
      "writes out %" PRIu64 " (%" PRIu64 " bytes), "
      "average merged write %" PRIu64 " bytes, "
      "direct writes %" PRIu64 " (%" PRIu64 " bytes, "
      "nothing to merge with %" PRIu64 " (%" PRIu64 " bytes)), "
      "flushes in %" PRIu64 " out %" PRIu64 ", zeroed while buffered %" PRIu64
      " bytes, back-pressure wait %.3f s, large writes that waited "
      "for order %" PRIu64 " (gave up %" PRIu64 "), "
      "page size %" PRIu64 " (switched %" PRIu64 " times), "
      "huge pages recycled %" PRIu64,
      co.writes_in, co.bytes_in, co.writes_in - co.direct_writes,
      co.bytes_in - co.direct_bytes, co.writes_out, co.bytes_out,
      co.writes_out ? co.bytes_out / co.writes_out : 0, co.direct_writes,
      co.direct_bytes, co.unmerged_writes, co.unmerged_bytes, co.flushes_in,
      co.flushes_out, co.zeroes_dropped_bytes, co.backpressure_ns / 1e9,
      co.order.waits, co.order.timeouts, co.set.page_size, co.page_switches,
      co.pages_recycled);

  if (co.below)
    {
      co.below->finalize (co.below);
      nbdkit_next_context_close (co.below);
      co.below = NULL;
    }
  if (co.map)
    {
      munmap (co.map_base, co.map_len);
      co.map = NULL;
    }
  free (co.set.v);
  co.set.v = NULL;
  co.set.len = co.set.cap = 0;
}

/*---------------------------------------------------------------------
 * Feature negotiation.
 */

/* The handle is the connection's write stream (see order.c). */
static void *
coalesce_open (nbdkit_next_open *next, nbdkit_context *nxdata, int readonly,
               const char *exportname, int is_tls)
{
  struct order_stream *s;

  if (next (nxdata, readonly, exportname) == -1)
    return NULL;
  s = order_stream_new (&co.order);
  if (s == NULL)
    nbdkit_error ("coalesce: %m");
  return s;
}

static void
coalesce_close (void *handle)
{
  order_stream_free (handle);
}

static int
coalesce_can_write (nbdkit_next *next, void *handle)
{
  int r = next->can_write (next);

  if (r == 1 && (co.can_write != 1 || co.map == NULL))
    return 0;
  return r;
}

/* Flush is always advertised: it at least writes the buffer back. */
static int
coalesce_can_flush (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
coalesce_can_fua (nbdkit_next *next, void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

/* One buffer and one context below serve every connection, so a flush
 * on any connection covers writes made on all of them.
 */
static int
coalesce_can_multi_conn (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
coalesce_can_trim (nbdkit_next *next, void *handle)
{
  return co.can_trim;
}

static int
coalesce_can_zero (nbdkit_next *next, void *handle)
{
  return co.can_zero > NBDKIT_ZERO_NONE ? NBDKIT_ZERO_NATIVE
                                        : NBDKIT_ZERO_EMULATE;
}

static int
coalesce_can_fast_zero (nbdkit_next *next, void *handle)
{
  return co.can_zero > NBDKIT_ZERO_NONE ? co.can_fast_zero : 0;
}

static int
coalesce_can_extents (nbdkit_next *next, void *handle)
{
  return co.can_extents;
}

/*---------------------------------------------------------------------
 * Data path.
 */

static int
coalesce_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  if (co.map == NULL)
    return CALL_BELOW (co.below->pread (co.below, buf, count, offset, 0, err));
  return buffer_read (buf, count, offset, err);
}

/* FUA with nothing buffered and nothing written since the last flush
 * below (typical of a client that writes with FUA every time): there
 * is nothing older to flush, so the write can go down with the
 * plugin's own FUA, which can be much cheaper than a write and a full
 * flush.
 */
static bool
fua_alone_suffices (void)
{
  if (co.mode != MODE_WRITEBACK || co.can_fua != NBDKIT_FUA_NATIVE)
    return false;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
  return co.set.len == 0 && co.direct_inflight == 0
         && co.wgen == co.flushed_gen;
}

/* Whether a write below 1M will merge with something if buffered:
 * - while several connections write at once (their requests
 *   interleave: nbdcopy, several qemu-img or fio jobs): a small one
 *   (below SMALL_WRITE_MAX) always, a larger one only if it touches or
 *   overlaps data already buffered or, with coalesce-interleaved=buffer,
 *   if its connection has other requests in flight (nbdcopy's: its
 *   neighbours are on their way, and a plugin that allocates in arrival
 *   order or writes with O_DIRECT gets each region in one ascending
 *   pass); one at queue depth 1 on its connection (imageio's pieces of
 *   a fragmented image, separated by holes) merges with nothing and
 *   would only pay the copy;
 * - one that ends where the write before it (on any connection) began:
 *   a descending run, which the buffer turns around;
 * - a small one (below SMALL_WRITE_MAX) next to or over data already
 *   buffered, or next to its connection's last small write, or ahead
 *   of its connection's stream while other requests are in flight (see
 *   order_expects_neighbour).
 * A larger write on its own connection that continues the ones before
 * it in order gains little from a merge and would pay a copy: qemu-img
 * convert's 4K-1M writes.
 */
static bool
merges_likely (struct order_stream *s, uint64_t offset, uint32_t count)
{
  const uint64_t end = offset + count;
  bool descending, touches = false;

  if (coalesce_debug_buffer_all)
    return true;
  if (__atomic_load_n (&co.order.writing_streams, __ATOMIC_RELAXED) > 1)
    {
      if (count < SMALL_WRITE_MAX
          || (co.buffer_interleaved && order_pipelined (s)))
        return true;
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
      return buffer_touches (offset, end);
    }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
    descending = end == co.last_lo && co.last_lo < co.last_hi;
    co.last_lo = offset;
    co.last_hi = end;
    if (!descending && count < SMALL_WRITE_MAX)
      touches = buffer_touches (offset, end);
  }
  if (descending || touches)
    return true;
  return count < SMALL_WRITE_MAX && order_expects_neighbour (s, offset, end);
}

static int
serve_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count,
              uint64_t offset, uint32_t flags, int *err)
{
  const bool fua = flags & NBDKIT_FLAG_FUA;
  uint64_t since_gen = SINCE_NOW;
  bool large;

  if (co.map == NULL)
    {
      *err = EROFS;
      return -1;
    }

  if (fua && fua_alone_suffices ())
    {
      return direct_request (handle, false, OP_WRITE, buf, count, offset,
                             NBDKIT_FLAG_FUA, err);
    }

  /* Only writes that will merge with something are copied into the
   * buffer (merges_likely); every other one goes straight down,
   * uncopied, still ordered after older buffered data of the same range
   * (direct_request).  Always direct: one already as large as a merged
   * write, a large one (a client copying: order.c puts it in order
   * without a copy) and the smaller tail right after it, and one that
   * could not fit next to anything else and must not wait for the
   * whole buffer.
   */
  large = count >= LARGE_WRITE_MIN;
  if (large && count < co.max_write)
    order_wait (handle, offset, offset + count, true);
  if (large || count >= co.max_write || order_follows_large (handle, offset)
      || iv_charge (&co.set, offset, offset + count) > co.buffer_limit / 2)
    {
      if (direct_request (handle, large, OP_WRITE, buf, count, offset, 0, err)
          == -1)
        return -1;
    }
  else if (merges_likely (handle, offset, count))
    {
      order_note (handle, offset, offset + count, false,
                  count < SMALL_WRITE_MAX);
      if (buffer_write (buf, count, offset, &since_gen, err) == -1)
        return -1;
    }
  else
    {
      /* Ahead of its connection's earlier requests: wait for them as a
       * large write does, rather than copy.
       */
      order_wait (handle, offset, offset + count, false);
      __atomic_add_fetch (&co.unmerged_writes, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch (&co.unmerged_bytes, count, __ATOMIC_RELAXED);
      if (direct_request (handle, false, OP_WRITE, buf, count, offset, 0, err)
          == -1)
        return -1;
    }

  if (co.mode == MODE_WRITETHROUGH)
    return writeback_sync (fua, false, since_gen, err);
  if (fua)
    return writeback_sync (true, false, SINCE_NOW, err);
  return 0;
}

/* Counted: order.c needs to know what else the connection has in flight. */
static int
coalesce_pwrite (nbdkit_next *next, void *handle, const void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  int r;

  order_enter (handle);
  r = serve_pwrite (next, handle, buf, count, offset, flags, err);
  order_leave (handle);
  return r;
}

static int
coalesce_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&co.lock);
    co.flushes_in++;
  }
  if (co.map == NULL)
    return co.can_flush == 1 ? CALL_BELOW (co.below->flush (co.below, 0, err))
                             : 0;
  return writeback_sync (true, true, SINCE_NOW, err);
}

static int
serve_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  uint32_t f = flags & (NBDKIT_FLAG_MAY_TRIM | NBDKIT_FLAG_FAST_ZERO);

  if (co.can_zero <= NBDKIT_ZERO_NONE)
    {
      *err = EOPNOTSUPP; /* only reached for FAST_ZERO; we advertise none */
      return -1;
    }
  if ((f & NBDKIT_FLAG_FAST_ZERO) && co.can_fast_zero != 1)
    {
      *err = EOPNOTSUPP;
      return -1;
    }
  if (direct_request (handle, false, OP_ZERO, NULL, count, offset, f, err)
      == -1)
    return -1;
  if (flags & NBDKIT_FLAG_FUA)
    return writeback_sync (true, false, SINCE_NOW, err);
  return 0;
}

static int
coalesce_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  int r;

  order_enter (handle);
  r = serve_zero (next, handle, count, offset, flags, err);
  order_leave (handle);
  return r;
}

static int
serve_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  if (direct_request (handle, false, OP_TRIM, NULL, count, offset, 0, err)
      == -1)
    return -1;
  if (flags & NBDKIT_FLAG_FUA)
    return writeback_sync (true, false, SINCE_NOW, err);
  return 0;
}

static int
coalesce_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  int r;

  order_enter (handle);
  r = serve_trim (next, handle, count, offset, flags, err);
  order_leave (handle);
  return r;
}

static int
coalesce_extents (nbdkit_next *next, void *handle, uint32_t count,
                  uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents, int *err)
{
  return buffer_extents (count, offset, flags, extents, err);
}

static struct nbdkit_filter filter = {
  .name = "coalesce",
  .longname = "nbdkit coalesce filter",
  .config = coalesce_config,
  .config_help = coalesce_config_help,
  .get_ready = coalesce_get_ready,
  .after_fork = coalesce_after_fork,
  .cleanup = coalesce_cleanup,
  .open = coalesce_open,
  .close = coalesce_close,
  .can_write = coalesce_can_write,
  .can_flush = coalesce_can_flush,
  .can_fua = coalesce_can_fua,
  .can_multi_conn = coalesce_can_multi_conn,
  .can_trim = coalesce_can_trim,
  .can_zero = coalesce_can_zero,
  .can_fast_zero = coalesce_can_fast_zero,
  .can_extents = coalesce_can_extents,
  .pread = coalesce_pread,
  .pwrite = coalesce_pwrite,
  .flush = coalesce_flush,
  .zero = coalesce_zero,
  .trim = coalesce_trim,
  .extents = coalesce_extents,
};

NBDKIT_REGISTER_FILTER (filter)
