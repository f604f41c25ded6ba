/* nbdstack qcow2 library: internal definitions shared by the library sources.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * One section per file, BOTTOM UP: each file calls only the sections
 * above its own (the exceptions are named where they are).  The layers:
 *
 *   request operations   read.c, write.c, zero.c (and image.c, create.c:
 *                        the public entry points, with the opening files)
 *   mapping              mapping.c  (L1/L2 lookup, tables for writing, freeing
 *                        entries: qemu's qcow2-cluster.c)
 *   commit               commit.c
 *   in flight            inflight.c (claims, epochs, the reuse barrier)
 *   allocation           alloc.c
 *   metadata stores      l2-cache.c, refcount.c, overlap.c, compress.c,
 *                        scratch.c
 *   errors               errors.c
 *   host I/O             struct qcow2_hostio (qcow2-hostio.h)
 *
 * Opening sits beside the request operations, on the same layers:
 * header.c -> features.c, tables.c, snapshot.c; open-write.c -> adopt.c,
 * repair.c.  Functions returning int return 0 (or what they say) or -1
 * after setting err, unless they say otherwise.
 */
#ifndef NBDSTACK_QCOW2_INTERNAL_H
#define NBDSTACK_QCOW2_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "byte-order.h"
#include "qcow2.h"

#define MIN_CLUSTER_BITS 9
#define MAX_CLUSTER_BITS 21
#define MAX_REFCOUNT_ORDER 6

/* Defence limits, the same as qemu's (block/qcow2.h). */
#define MAX_L1_BYTES (32 * 1024 * 1024)
#define MAX_REFTABLE_BYTES (8 * 1024 * 1024)

/* Where the linear layout's data area starts is a multiple of this:
 * guest offsets aligned to 2 MiB stay so on the host, and the page
 * cache can then hold an uploaded file in 2 MiB folios.  With 1 MiB a
 * writeback upload (qemu-img convert -W) cost the server 8-10% more CPU
 * than the same upload at 2 MiB (measured through nbdkit's offset
 * filter on a raw file).
 */
#define LINEAR_DATA_ALIGN (2 * 1024 * 1024)

/* Scratch buffers kept per image (scratch.c): enough for the partial
 * clusters of several requests at once.
 */
#define QCOW2_SCRATCH_SLOTS 8
#define MAX_SNAPSHOTS 65536
#define MAX_SNAPSHOTS_BYTES (64 * 1024 * 1024)
#define MAX_SNAPSHOT_EXTRA 1024
#define MAX_BITMAPS 65535
#define MAX_BITMAP_DIRECTORY_BYTES (1024 * 65535)
#define MAX_BACKING_NAME 1023
#define MAX_DATA_FILE_NAME 4095

/* Incompatible feature bits. */
#define INCOMPAT_DIRTY (1ULL << 0)
#define INCOMPAT_CORRUPT (1ULL << 1)
#define INCOMPAT_DATA_FILE (1ULL << 2)
#define INCOMPAT_COMPRESSION (1ULL << 3)
#define INCOMPAT_EXTL2 (1ULL << 4)
#define INCOMPAT_KNOWN 0x1fULL

/* Header extension of our own: where create.c put the linear layout's
 * data area (be64 host offset of guest offset 0, be64 bytes covered).
 * qemu keeps unknown extensions when it rewrites the header.
 */
#define QCOW2_EXT_LINEAR_LAYOUT 0x6e627374U /* "nbst" */

/* Fixed part of a snapshot table entry. */
#define SNAPSHOT_HEADER_BYTES 40

/* Table entry bits. */
#define L1E_OFFSET_MASK 0x00fffffffffffe00ULL
#define L2E_OFFSET_MASK 0x00fffffffffffe00ULL
#define OFLAG_COPIED (1ULL << 63)
#define OFLAG_COMPRESSED (1ULL << 62)
#define OFLAG_ZERO 1ULL
/* Extended L2 subcluster bitmaps: bits 0-31 allocated, 32-63 zero. */
#define BITMAP_ALL_ALLOC 0xffffffffULL
#define BITMAP_ALL_ZERO 0xffffffff00000000ULL

/* ---- the state the layers share ----
 *
 * Each layer's own part of struct qcow2_image is named in it; the
 * types of those parts come first.
 */

/* A reference to an L2 table (l2-cache.c): held, the table is used
 * without any lock.
 */
struct l2_cache;
struct l2_ref
{
  struct l2_cache *cache;
  void *slot; /* NULL: 'table' is a private copy */
  const uint64_t *table;
};

/* A dirty L2 table copied at a commit's cut (l2-cache.c, commit.c). */
struct l2_copy
{
  uint64_t offset;
  uint64_t *table;
};

/* What a commit (commit.c) carries from its cut to its end; the
 * buffers are kept for the next commit.
 */
struct qcow2_commit
{
  struct l2_copy *l2;
  size_t nl2, l2_cap;
  uint64_t *l1_buf;    /* 64 big-endian entries per dirty sector */
  uint64_t *l1_sector; /* which sector each is */
  size_t nl1, l1_cap;
  uint64_t *frees; /* references to drop after the commit */
  size_t nfrees, frees_cap;
};

/* A request's claim on guest clusters (inflight.c). */
struct qcow2_claim
{
  uint64_t first, last; /* guest clusters, inclusive */
  struct qcow2_claim *next;
};

/* A request in flight (inflight.c): in the list from begin to end. */
struct qcow2_req
{
  struct qcow2_req *prev, *next;
  uint64_t epoch;
};

/* A reference to drop once the requests older than 'epoch' ended. */
struct qcow2_deferred
{
  uint64_t cluster, epoch;
};

enum qcow2_alloc_mode
{
  QCOW2_ALLOC_COMPACT,
  QCOW2_ALLOC_LINEAR
};

/* The image: one per open (image.c), every layer's state in it. */
struct qcow2_image
{
  uint64_t uid;                 /* unique per open, never 0 */
  struct qcow2_hostio *io;      /* the qcow2 file (metadata) */
  struct qcow2_hostio *data_io; /* guest data: io, or the data file */
  uint64_t file_size;           /* of io, at open */
  uint64_t data_file_size;      /* of data_io */

  uint32_t version;
  unsigned cluster_bits;
  uint64_t cluster_size;
  unsigned l2_bits;        /* log2 of entries per L2 table */
  unsigned l2_entry_bytes; /* 8, or 16 with extended L2 */
  bool ext_l2;
  unsigned sc_bits; /* log2 of the subcluster size */
  uint64_t size;    /* virtual size of the served layer */
  uint64_t incompat;
  uint64_t autoclear;
  unsigned refcount_order;
  unsigned compression_type; /* 0 deflate, 1 zstd */

  /* Compressed cluster descriptors. */
  unsigned csize_shift;
  uint64_t csize_mask;
  uint64_t coffset_mask;

  /* The L1 table being served (active layer or a snapshot), host order. */
  uint64_t *l1;
  uint32_t l1_size;
  uint64_t l1_offset;
  /* Metadata areas a data cluster must never overlap. */
  uint64_t active_l1_offset, active_l1_bytes;
  uint64_t reftable_offset, reftable_bytes;
  uint64_t snapshots_offset, snapshots_bytes;
  uint32_t nb_snapshots;
  /* Every metadata cluster, for the overlap checks (overlap.c). */
  struct qcow2_meta *meta;
  bool has_bitmaps; /* a bitmaps extension (its tables hold clusters) */

  char *backing_file;
  char *backing_format;
  char *data_file;

  struct l2_cache *l2;

  const struct qcow2_layer_ops *backing_ops;
  void *backing_opaque;
  uint64_t backing_size;

  /* Writing (see lib/WRITING.md); all NULL/0 when read-only. */
  bool writable;
  /* The short lock on metadata (only when writable): exclusive to
   * change L1/L2 entries, refcounts, allocation and a commit's cut;
   * shared by readers while they look up entries.  Never held across
   * data I/O (metadata I/O - loading an L2 table or refcount block, a
   * new refcount block - does happen under it).
   */
  pthread_rwlock_t lock;
  /* A failed commit or metadata update: every later write and flush
   * fails, since what is in memory may no longer match the disk.
   * Accessed atomically (img_failed, img_set_failed).
   */
  bool failed;
  /* Claimed guest clusters (struct qcow2_claim), under claim_lock. */
  pthread_mutex_t claim_lock;
  pthread_cond_t claim_released;
  struct qcow2_claim *claims;
  /* The reuse barrier, under epoch_lock ('lock' is taken before it when
   * both are held): requests in flight in start order, the current
   * epoch (incremented at each cut) and the epoch of the first deferred
   * free (UINT64_MAX if none).
   */
  pthread_mutex_t epoch_lock;
  struct qcow2_req *req_head, *req_tail;
  uint64_t epoch, deferred_first_epoch;
  /* Broadcast when a request ends (qcow2_reclaim waits on it). */
  pthread_cond_t barrier_moved;
  unsigned barrier_waiters;
  /* Frees held back by the barrier, in epoch order; under 'lock'. */
  struct qcow2_deferred *deferred;
  size_t ndeferred, deferred_cap;
  struct refcounts *rc;
  /* End of everything allocated, cluster-aligned: may pass file_size
   * while a new cluster is not yet written.
   */
  uint64_t host_end;
  /* L1 sectors (512 bytes, 64 entries) changed since the last commit. */
  uint64_t *l1_dirty;
  /* Allocation (alloc.c).  Linear: guest cluster g lives at host
   * cluster linear_start + g when that is free; metadata goes below
   * linear_start from meta_cursor, then past the span.  Compact: from
   * the bump pointer, reusing freed clusters first.
   */
  enum qcow2_alloc_mode alloc_mode;
  /* The header extensions' end marker, and where the space after it
   * ends (the backing file name, or the end of cluster 0); 0 if the
   * extensions have no end marker.
   */
  size_t ext_end_marker, ext_room_end;
  uint64_t linear_start, linear_clusters; /* in clusters */
  uint64_t meta_cursor, bump;             /* cluster indexes */
  uint64_t *freed;                        /* reusable cluster indexes */
  size_t nfreed, freed_cap;
  /* Compact: the bump pointer stays below soft_end (a fully allocated
   * image's size, or what was in use at the open) while frees wait;
   * 'scan' is where the one look below it continues, 'scanned' once it
   * found nothing.  alloc_strict (set by the writer around an
   * allocation, under the lock): ENOSPC rather than going past soft_end
   * while frees wait, so that the writer reclaims them first.
   */
  uint64_t soft_end, scan;
  bool scanned, alloc_strict;
  /* Linear homes dropped by their guest cluster and maybe taken back
   * before the drop was applied (alloc.c).
   */
  struct qcow2_home *homes;
  size_t nhomes, homes_cap;
  /* Clusters whose reference the next commit removes: decremented
   * only once that removal is durable.
   */
  uint64_t *pending;
  size_t npending, pending_cap;
  unsigned char *zero_buf; /* one cluster of zeroes (read only) */
  /* Cluster-sized buffers kept for the next request (scratch.c);
   * taken and given back atomically.
   */
  unsigned char *scratch[QCOW2_SCRATCH_SLOTS];
  /* Group commit: cut_seq counts cuts, done_seq is the last cut whose
   * commit completed; one commit runs at a time ('committing').
   * Protected by commit_lock, which is never held while taking 'lock'.
   */
  pthread_mutex_t commit_lock;
  pthread_cond_t commit_done;
  uint64_t cut_seq, done_seq;
  bool committing;
  int commit_errno; /* sticky: a commit failed */
  struct qcow2_commit commit;
};

/* True once the image failed (atomic: read without the lock). */
static inline bool
img_failed (struct qcow2_image *img)
{
  return __atomic_load_n (&img->failed, __ATOMIC_ACQUIRE);
}

/* Fail the image: every later write and flush (and read) fails. */
static inline void
img_set_failed (struct qcow2_image *img)
{
  __atomic_store_n (&img->failed, true, __ATOMIC_RELEASE);
}

/* L1 entries a disk of 'size' bytes needs. */
static inline uint64_t
l1_entries_needed (const struct qcow2_image *img, uint64_t size)
{
  return size == 0 ? 0 : ((size - 1) >> (img->cluster_bits + img->l2_bits)) + 1;
}

/* Does [off, off+len) intersect [start, start+size)?  No overflow: all
 * values were checked to be below 2^63 at open.
 */
static inline bool
ranges_overlap (uint64_t off, uint64_t len, uint64_t start, uint64_t size)
{
  return size > 0 && len > 0 && off < start + size && start < off + len;
}

/* ---- host I/O (struct qcow2_hostio, qcow2-hostio.h) ---- */

/* Write 'len' bytes at 'off' and flush: 0 or a negative errno. */
static inline int
qcow2_write_sync (struct qcow2_hostio *io, const void *buf, size_t len,
                  uint64_t off)
{
  int r = qcow2_hostio_pwrite (io, buf, len, off);

  return r < 0 ? r : io->flush (io);
}

/* ---- errors (errors.c) ----
 *
 * qcow2_set_error is public (qcow2.h).  Each returns -1.
 */
/* "WHAT: strerror(-r)", errno -r. */
extern int qcow2_io_error (struct qcow2_error *err, int r, const char *what);
/* "WHAT at OFF: strerror(-r)", errno -r. */
extern int qcow2_io_error_at (struct qcow2_error *err, int r, const char *what,
                              uint64_t off);
/* EIO "the image failed earlier" (and "is read-only" if 'changing'). */
extern int qcow2_failed_error (struct qcow2_error *err, bool changing);

/* ---- scratch buffers (scratch.c) ----
 *
 * Cluster-sized buffers kept per image; taken and given back atomically.
 */
/* A cluster-sized buffer (kept or new): NULL after ENOMEM. */
extern unsigned char *qcow2_scratch_get (struct qcow2_image *img,
                                         struct qcow2_error *err);
/* Give 'buf' (NULL allowed) back for the next request. */
extern void qcow2_scratch_put (struct qcow2_image *img, unsigned char *buf);
/* Free the kept buffers (at close). */
extern void qcow2_scratch_free (struct qcow2_image *img);

/* ---- compressed clusters (compress.c) ----
 *
 * Per-thread buffers and contexts; no lock.
 */
/* Read 'len' bytes at 'in_cluster' of the compressed cluster of L2
 * entry 'l2e' into 'buf'.
 */
extern int qcow2_read_compressed_part (struct qcow2_image *img, uint64_t l2e,
                                       void *buf, uint64_t in_cluster,
                                       size_t len, struct qcow2_error *err);

/* ---- metadata overlap checks (overlap.c) ----
 *
 * Which host clusters hold metadata: the header's tables as ranges
 * (refused at open if two overlap), and when writable the active L2
 * tables and refcount blocks one by one, kept up to date by the code
 * that makes and replaces them.  A lookup is O(log tables) + O(1) per
 * cluster.  Changes and write checks happen under the image lock
 * (exclusive).
 */
enum qcow2_meta_kind
{
  QCOW2_META_HEADER,
  QCOW2_META_ACTIVE_L1,
  QCOW2_META_REFTABLE,
  QCOW2_META_SNAPSHOTS,
  QCOW2_META_SNAPSHOT_L1,
  QCOW2_META_BITMAPS,
  QCOW2_META_L2,
  QCOW2_META_REFBLOCK,
};
/* The name of a kind, for messages. */
extern const char *qcow2_meta_name (enum qcow2_meta_kind kind);
/* At open: a table the header leads to (checked: aligned, in limits). */
extern int qcow2_meta_add_table (struct qcow2_image *img,
                                 enum qcow2_meta_kind kind, uint64_t offset,
                                 uint64_t bytes, struct qcow2_error *err);
/* End of parsing: add the header, sort, refuse (EINVAL) overlaps. */
extern int qcow2_meta_seal_tables (struct qcow2_image *img,
                                   struct qcow2_error *err);
/* The one table of 'kind' is now at [offset, offset+bytes). */
extern int qcow2_meta_move_table (struct qcow2_image *img,
                                  enum qcow2_meta_kind kind, uint64_t offset,
                                  uint64_t bytes, struct qcow2_error *err);
/* Writable open, after the refcount blocks: record the active L2
 * tables (EIO if an entry names another table).
 */
extern int qcow2_meta_load (struct qcow2_image *img, struct qcow2_error *err);
/* A new L2 table or refcount block at 'cluster' (EIO if already metadata). */
extern int qcow2_meta_add (struct qcow2_image *img, enum qcow2_meta_kind kind,
                           uint64_t cluster, struct qcow2_error *err);
/* 'cluster' no longer holds an L2 table or refcount block. */
extern void qcow2_meta_remove (struct qcow2_image *img, uint64_t cluster);
/* Is a cluster of [first, first+n) metadata?  Its kind and offset. */
extern bool qcow2_meta_lookup (const struct qcow2_image *img, uint64_t first,
                               uint64_t n, enum qcow2_meta_kind *kind,
                               uint64_t *at);
/* How many metadata clusters are recorded one by one. */
extern size_t qcow2_meta_count (const struct qcow2_image *img);
/* Before writing or freeing host bytes as guest data ('what': "write",
 * "free"): EIO if they touch metadata, and the image fails (qemu's
 * "Preventing invalid write on metadata").
 */
extern int qcow2_meta_check (struct qcow2_image *img, uint64_t offset,
                             uint64_t len, const char *what,
                             struct qcow2_error *err);
/* qcow2_meta_check of the clusters L2 entry 'e' holds (a COPIED one's
 * only if 'copied'), before they are freed.
 */
extern int qcow2_meta_check_entry (struct qcow2_image *img, uint64_t e,
                                   bool copied, struct qcow2_error *err);
/* Free the map (at close). */
extern void qcow2_meta_free (struct qcow2_image *img);

/* ---- refcounts (refcount.c) ----
 *
 * Not thread-safe: callers hold the image's lock exclusively.
 * Invariant: in-memory counts are never below what the disk may
 * reference, so any dirty block may be written back at any time.
 * Calls up: a new block covering linear homes takes a metadata cluster
 * from alloc.c (one level of recursion at most).
 */
/* Load the table, with an LRU cache of 'cache_blocks' blocks. */
extern int qcow2_rc_open (struct qcow2_image *img, unsigned cache_blocks,
                          struct qcow2_error *err);
/* Free the refcounts (dirty blocks are lost: write them first). */
extern void qcow2_rc_close (struct qcow2_image *img);
/* The refcount of 'cluster' in *value. */
extern int qcow2_rc_get (struct qcow2_image *img, uint64_t cluster,
                         uint64_t *value, struct qcow2_error *err);
/* Add 'delta', making the block if needed (EIO when out of range). */
extern int qcow2_rc_update (struct qcow2_image *img, uint64_t cluster,
                            int64_t delta, struct qcow2_error *err);
/* Take a free cluster: 1 if its count went 0 -> 1, 0 if it is in use. */
extern int qcow2_rc_claim (struct qcow2_image *img, uint64_t cluster,
                           struct qcow2_error *err);
/* Write every dirty block (no flush). */
extern int qcow2_rc_write_dirty (struct qcow2_image *img,
                                 struct qcow2_error *err);
/* How many blocks are dirty. */
extern unsigned qcow2_rc_dirty_blocks (const struct qcow2_image *img);
/* The highest cluster with a non-zero refcount (0 if none). */
extern int qcow2_rc_highest_used (struct qcow2_image *img, uint64_t *cluster,
                                  struct qcow2_error *err);
/* Clusters one refcount block covers. */
extern uint64_t qcow2_rc_block_clusters (const struct qcow2_image *img);
/* Grow the table (as qemu) to reach blocks for [0, end_cluster). */
extern int qcow2_rc_cover (struct qcow2_image *img, uint64_t end_cluster,
                           struct qcow2_error *err);
/* Install empty blocks for table indexes idx[] at claimed clusters
 * at[], each durable before its entry (the linear layout).
 */
extern int qcow2_rc_install_blocks (struct qcow2_image *img,
                                    const uint64_t *idx, const uint64_t *at,
                                    size_t n, struct qcow2_error *err);
/* Writable open: record every refcount block in overlap.c (EIO if one
 * is another table).
 */
extern int qcow2_rc_record_blocks (struct qcow2_image *img,
                                   struct qcow2_error *err);
/* Host offset of the block of table index idx (0: none). */
extern uint64_t qcow2_rc_block_at (const struct qcow2_image *img, uint64_t idx);
/* Entry 'i' of a refcount block of width 2^order bits. */
extern uint64_t qcow2_rc_entry_get (const void *block, unsigned order,
                                    uint64_t i);
/* Set entry 'i' of a refcount block of width 2^order bits. */
extern void qcow2_rc_entry_set (void *block, unsigned order, uint64_t i,
                                uint64_t v);

/* ---- L2 cache (l2-cache.c) ----
 *
 * A fixed number of slots, each holding one L2 table as it is on disk
 * (big-endian), split into shards that each have their own lock: a hit
 * takes one uncontended mutex for a few instructions, and the table is
 * then used without any lock because it holds a reference.  Loads
 * happen outside the lock.  Dirty slots are never evicted.
 */
/* A cache of 'entries' slots of 'table_bytes' over 'io' (NULL: ENOMEM). */
extern struct l2_cache *l2_cache_new (struct qcow2_hostio *io,
                                      uint32_t table_bytes, unsigned entries);
/* Free the cache and its tables. */
extern void l2_cache_free (struct l2_cache *cache);
/* How many slots it has. */
extern unsigned l2_cache_entries (const struct l2_cache *cache);
/* The table at host 'offset' (validated): 0 or a negative errno. */
extern int l2_cache_get (struct l2_cache *cache, uint64_t offset,
                         struct l2_ref *ref);
/* Let go of a reference from l2_cache_get or l2_cache_get_write. */
extern void l2_cache_put (struct l2_ref *ref);
/* Under the image's lock (exclusive): the table in a slot to change in
 * place ('fresh': zeroed, dirty and "new" until a cut writes it);
 * -EAGAIN when every slot it could use is dirty (commit, retry).
 */
extern int l2_cache_get_write (struct l2_cache *cache, uint64_t offset,
                               bool fresh, struct l2_ref *ref);
/* An entry of the table changed (under the lock, exclusive). */
extern void l2_cache_mark_dirty (struct l2_ref *ref);
/* Write back the dirty new tables, or the other dirty ones (no flush). */
extern int l2_cache_write_dirty (struct l2_cache *cache, bool new_tables);
/* How many slots are dirty. */
extern unsigned l2_cache_dirty_count (const struct l2_cache *cache);
/* A cut: copy every dirty table into copies[0, *n) (reused buffers),
 * mark them clean and pin them until l2_cache_unpin_all.
 */
extern int l2_cache_cut (struct l2_cache *cache, struct l2_copy **copies,
                         size_t *n, size_t *cap);
/* Unpin what the last cut pinned. */
extern void l2_cache_unpin_all (struct l2_cache *cache);

/* ---- allocation (alloc.c) ----
 *
 * Under the image's lock (exclusive).  Linear: guest cluster g at host
 * cluster linear_start + g when free; compact: freed clusters first,
 * then a bump pointer up to soft_end.
 */
/* Choose where allocation starts (writable open, refcounts loaded). */
extern int qcow2_alloc_init (struct qcow2_image *img, struct qcow2_error *err);
/* Free the allocator's state (at close). */
extern void qcow2_alloc_free_state (struct qcow2_image *img);
/* A free host cluster, its refcount set to 1: for guest cluster
 * 'guest' (data), or for metadata ('guest' ignored).
 */
extern int qcow2_alloc_cluster (struct qcow2_image *img, bool metadata,
                                uint64_t guest, uint64_t *cluster,
                                struct qcow2_error *err);
/* A cluster whose refcount dropped to 0 after a commit: reusable. */
extern int qcow2_alloc_reuse (struct qcow2_image *img, uint64_t cluster);
/* L2 entry 'e' of guest cluster 'guest' (UINT64_MAX: no data entry) is
 * dropped after the next commit: its linear home may be taken back.
 */
extern void qcow2_alloc_note_drop (struct qcow2_image *img, uint64_t e,
                                   uint64_t guest);
/* A dropped reference to 'cluster' is applied: true to skip it (its
 * home was taken back meanwhile).
 */
extern bool qcow2_alloc_skip_drop (struct qcow2_image *img, uint64_t cluster);
/* Are there frees a commit and the reuse barrier would make reusable? */
extern bool qcow2_alloc_frees_waiting (const struct qcow2_image *img);
/* After a reclaim: if nothing came free, let the bump pointer go on. */
extern void qcow2_alloc_after_reclaim (struct qcow2_image *img);

/* ---- requests in flight (inflight.c) ----
 *
 * Claims: a write, zero or discard claims every guest cluster it
 * touches at once, before it looks at an entry; only the claimer
 * changes a claimed cluster's entry.  The reuse barrier: every request
 * of a writable image (reads too) is registered with the epoch (number
 * of commit cuts) at its start; a cluster freed by commit N is
 * decremented only once every request with an epoch below N ended.
 * Lock order: 'lock' before epoch_lock; claim_lock alone.
 */
/* Wait until no other request claims [offset, offset+count), claim it. */
extern void qcow2_claim_range (struct qcow2_image *img,
                               struct qcow2_claim *claim, uint64_t offset,
                               uint64_t count);
/* Release a claim (wakes the waiters). */
extern void qcow2_unclaim (struct qcow2_image *img, struct qcow2_claim *claim);
/* Register 'req' at the current epoch. */
extern void qcow2_req_begin (struct qcow2_image *img, struct qcow2_req *req);
/* End 'req'; apply the frees it held back (a failure fails the image). */
extern void qcow2_req_end (struct qcow2_image *img, struct qcow2_req *req);
/* A commit's cut: the new epoch (requests registered from now on see
 * the entries as of the cut).
 */
extern uint64_t qcow2_next_epoch (struct qcow2_image *img);
/* WITHOUT 'lock', 'req' holding no entry looked up before: re-register
 * it now and wait until every request older than that ended.
 */
extern void qcow2_req_wait_older (struct qcow2_image *img,
                                  struct qcow2_req *req);
/* Under 'lock': hold frees[0, n) of commit 'epoch' back until the
 * barrier passes it.
 */
extern int qcow2_defer_frees (struct qcow2_image *img, uint64_t epoch,
                              const uint64_t *frees, size_t n,
                              struct qcow2_error *err);
/* Under 'lock': decrement the held-back frees whose barrier passed;
 * those reaching 0 are punched and reusable.
 */
extern int qcow2_apply_deferred (struct qcow2_image *img,
                                 struct qcow2_error *err);
/* Free the held-back frees' array (at close). */
extern void qcow2_inflight_free (struct qcow2_image *img);
/* Tests only: no barrier (frees applied at the commit). */
extern bool qcow2_test_no_reuse_barrier;

/* ---- committing (commit.c) ---- */
/* Under 'lock': drop a reference to 'cluster' after the next commit. */
extern int qcow2_free_after_commit (struct qcow2_image *img, uint64_t cluster,
                                    struct qcow2_error *err);
/* Under 'lock': L1 entry 'l1_idx' changed (its sector goes in the next
 * commit).
 */
extern void qcow2_l1_mark_dirty (struct qcow2_image *img, uint64_t l1_idx);
/* WITHOUT 'lock': make every change completed before the call durable,
 * in crash-safe order, sharing one commit with concurrent callers; on
 * failure the image is failed.  Never waits for requests in flight.
 */
extern int qcow2_commit (struct qcow2_image *img, struct qcow2_error *err);
/* Under 'lock' (exclusive, every cache slot dirty): drop it, commit,
 * take it again; -1 also if the image failed meanwhile.
 */
extern int qcow2_commit_relock (struct qcow2_image *img,
                                struct qcow2_error *err);
/* Free the commit's buffers (at close). */
extern void qcow2_commit_free (struct qcow2_image *img);

/* ---- the mapping (mapping.c) ----
 *
 * L1/L2 lookup and change, as qemu's qcow2-cluster.c.  Every offset
 * from an entry is checked before it is used.
 */
/* How one (sub)cluster reads, like qemu's QCOW2_SUBCLUSTER_* types. */
enum qcow2_sc_type
{
  SC_UNALLOCATED, /* goes to the backing file, or zeroes */
  SC_ZERO_PLAIN,  /* zeroes, no host cluster */
  SC_ZERO_ALLOC,  /* zeroes, host cluster kept */
  SC_NORMAL,      /* data at a host offset */
  SC_COMPRESSED,  /* the cluster is compressed */
};
/* A run of the virtual disk that reads the same way. */
struct qcow2_run
{
  enum qcow2_sc_type type;
  uint64_t len;
  uint64_t host; /* SC_NORMAL: host offset of the start;
                  * SC_COMPRESSED: the L2 entry */
};
/* Returned when every L2 cache slot a request could use is dirty: the
 * caller drops the lock, commits (qcow2_commit) and retries.
 */
#define QCOW2_RETRY 1
/* EIO unless the L2 table offset of L1 entry 'l1_idx' may be used. */
extern int qcow2_check_l2_offset (const struct qcow2_image *img,
                                  uint64_t l2_off, uint64_t l1_idx,
                                  struct qcow2_error *err);
/* EIO unless data cluster 'host' (for guest 'vofs') may be used. */
extern int qcow2_check_data_cluster (const struct qcow2_image *img,
                                     uint64_t host, uint64_t vofs,
                                     struct qcow2_error *err);
/* The entry of guest cluster 'gc' in the table 'ref' holds. */
extern uint64_t *qcow2_l2_entry (const struct qcow2_image *img,
                                 const struct l2_ref *ref, uint64_t gc);
/* The run at guest 'off' (at most 'max' bytes), looked up under 'lock'
 * (shared) when writable.
 */
extern int qcow2_map_run (struct qcow2_image *img, uint64_t off, uint64_t max,
                          struct qcow2_run *run, struct qcow2_error *err);
/* Takes 'lock' (shared): is guest cluster at 'goff' compressed? */
extern int qcow2_map_compressed (struct qcow2_image *img, uint64_t goff,
                                 bool *compressed, struct qcow2_error *err);
/* Under 'lock' (exclusive): the L2 table of 'l1_idx' in a cache slot
 * to change, made (or copied from a snapshot's) if needed: 0,
 * QCOW2_RETRY or -1; once 0, the L1 entry stays while the image is open.
 */
extern int qcow2_get_l2_for_write (struct qcow2_image *img, uint64_t l1_idx,
                                   struct l2_ref *ref, struct qcow2_error *err);
/* Under 'lock' (exclusive): drop, after the next commit, the host
 * references of L2 entry 'e' of guest cluster 'guest' (a COPIED
 * cluster's too if 'copied').
 */
extern int qcow2_free_entry (struct qcow2_image *img, uint64_t e, bool copied,
                             uint64_t guest, struct qcow2_error *err);

/* ---- reading (read.c) ----
 *
 * qcow2_pread, qcow2_block_status and the layer ops are public.
 */
/* Read inside a registered request, taking 'lock' (shared) around each
 * lookup only: for the writer's copy-on-write and zero's edge checks.
 */
extern int qcow2_pread_unlocked (struct qcow2_image *img, void *buf,
                                 size_t count, uint64_t offset,
                                 struct qcow2_error *err);

/* ---- writing (write.c) ----
 *
 * qcow2_pwrite and qcow2_flush are public.
 */
/* Start a write or zero ('what', for the message) of [offset,
 * offset+count): -1 unless writable (EROFS), inside the disk (EINVAL)
 * and not failed; 0 if count is 0; 1 with the range claimed and 'req'
 * registered, for qcow2_change_end.
 */
extern int qcow2_change_begin (struct qcow2_image *img,
                               struct qcow2_claim *claim, struct qcow2_req *req,
                               uint64_t offset, uint64_t count,
                               const char *what, struct qcow2_error *err);
/* End it: 'r' -1 (unless ENOSPC in err) fails the image. */
extern void qcow2_change_end (struct qcow2_image *img,
                              struct qcow2_claim *claim, struct qcow2_req *req,
                              int r, const struct qcow2_error *err);
/* WITHOUT 'lock', in registered request 'req' that claimed the range:
 * write [off, off+count) from data (committing when the cache is full
 * of dirty tables, reclaiming frees before ENOSPC; ENOSPC leaves the
 * image usable).
 */
extern int qcow2_write_claimed (struct qcow2_image *img, struct qcow2_req *req,
                                const char *data, uint64_t off, uint64_t count,
                                struct qcow2_error *err);

/* ---- zero and discard (zero.c) ----
 *
 * qcow2_zero and qcow2_discard are public; nothing internal.
 */

/* ---- opening: where the tables lie (tables.c) ---- */
/* A table of 'entries' of 'entry_bytes' at 'offset': within
 * 'max_bytes', cluster-aligned, after the header, inside the file.
 */
extern int qcow2_check_table (struct qcow2_image *img, const char *what,
                              uint64_t offset, uint64_t entries,
                              uint64_t entry_bytes, uint64_t max_bytes,
                              struct qcow2_error *err);
/* Check the refcount, snapshot and L1 tables and record them. */
extern int qcow2_check_tables (struct qcow2_image *img,
                               uint32_t refcount_clusters,
                               struct qcow2_error *err);

/* ---- opening: extensions and feature bits (features.c) ---- */
/* 'len' bytes of the header cluster, NUL-terminated and malloc'd; NULL
 * (err set) if they hold a NUL byte.
 */
extern char *qcow2_header_string (const unsigned char *p, size_t len,
                                  const char *what, struct qcow2_error *err);
/* Parse the extensions in hdr[start, end), then refuse encryption,
 * unknown or corrupt feature bits, a bad compression type, an unnamed
 * data file and extended L2 with small clusters.
 */
extern int qcow2_parse_features (struct qcow2_image *img,
                                 const unsigned char *hdr, size_t start,
                                 size_t end, uint32_t crypt_method,
                                 struct qcow2_error *err);

/* ---- opening: snapshots (snapshot.c) ---- */
/* Size the snapshot table; serve snapshot 'want' (ID or name) if not
 * NULL.
 */
extern int qcow2_read_snapshots (struct qcow2_image *img, const char *want,
                                 struct qcow2_error *err);

/* ---- opening: the header (header.c) ----
 *
 * qcow2_parse_header reads the first cluster and the fixed header,
 * then calls features.c, tables.c and snapshot.c (above) in this order; each
 * refuses what cannot be served with a one-line error.  qcow2_probe is
 * public.
 */
/* Parse and validate the header and everything it leads to. */
extern int qcow2_parse_header (struct qcow2_image *img,
                               const struct qcow2_open_options *opts,
                               struct qcow2_error *err);

/* ---- opening: the linear layout for an existing image (adopt.c) ---- */
/* Give an image without the linear layout the layout (regular file,
 * writable, refcounts loaded) if it is empty or not 'only_if_empty' and
 * the header has room: 1 given, 0 left as it was, -1 error.
 */
extern int qcow2_adopt_linear (struct qcow2_image *img, bool only_if_empty,
                               struct qcow2_error *err);

/* ---- opening: leaks (repair.c) ---- */
/* Writable open, refcounts loaded: lower every count above the
 * references on disk ('leaked': how many clusters nothing referenced);
 * refuses snapshots, bitmaps and counts below the references.
 */
extern int qcow2_repair_leaks (struct qcow2_image *img, uint64_t *leaked,
                               struct qcow2_error *err);

/* ---- opening for writing (open-write.c) ---- */
/* What a writable open adds: refusals, autoclear bits, refcounts,
 * where allocation starts.
 */
extern int qcow2_open_writable (struct qcow2_image *img,
                                const struct qcow2_open_options *opts,
                                struct qcow2_error *err);
/* Commit, write the last decrements, flush, free the writing state. */
extern int qcow2_close_writable (struct qcow2_image *img,
                                 struct qcow2_error *err);

/* ---- the public entry points (image.c, create.c) ----
 *
 * qcow2_open, qcow2_close and the getters (image.c), qcow2_create
 * (create.c): declared in qcow2.h; nothing internal.
 */

#endif /* NBDSTACK_QCOW2_INTERNAL_H */
