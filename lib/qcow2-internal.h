/* nbdstack qcow2 library: internal definitions shared by the library sources.
 * SPDX-License-Identifier: BSD-3-Clause
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

/* ---- L2 cache (l2-cache.c) ----
 *
 * A fixed number of slots, each holding one L2 table as it is on disk
 * (big-endian), split into shards that each have their own lock: a hit
 * takes one uncontended mutex for a few instructions, and the table is
 * then used without any lock because it holds a reference.  Loads happen
 * outside the lock.
 */
struct l2_cache;
struct l2_ref
{
  struct l2_cache *cache;
  void *slot; /* NULL: 'table' is a private copy */
  const uint64_t *table;
};

extern struct l2_cache *l2_cache_new (struct qcow2_hostio *io,
                                      uint32_t table_bytes, unsigned entries);
extern void l2_cache_free (struct l2_cache *cache);
extern unsigned l2_cache_entries (const struct l2_cache *cache);
/* Get the table at host 'offset' (already validated).  Returns 0 or a
 * negative errno.
 */
extern int l2_cache_get (struct l2_cache *cache, uint64_t offset,
                         struct l2_ref *ref);
extern void l2_cache_put (struct l2_ref *ref);
/* Writing, under the image's lock (exclusive): a table in a slot (never
 * a private copy) to change in place; 'fresh' zeroes it instead of
 * reading (a new table, not on disk yet: dirty and "new" from here until
 * a commit's cut writes it in phase 1).  -EAGAIN when every slot it
 * could use is dirty: commit, then retry.
 */
extern int l2_cache_get_write (struct l2_cache *cache, uint64_t offset,
                               bool fresh, struct l2_ref *ref);
/* An entry of the table changed (under the lock, exclusive). */
extern void l2_cache_mark_dirty (struct l2_ref *ref);
/* Write back the dirty new tables, or the other dirty ones (no flush). */
extern int l2_cache_write_dirty (struct l2_cache *cache, bool new_tables);
extern unsigned l2_cache_dirty_count (const struct l2_cache *cache);
/* A commit's cut: copy every dirty table into copies[0, *n) (the array
 * and its buffers are reused from one commit to the next), mark them
 * clean and pin them until l2_cache_unpin_all.
 */
struct l2_copy
{
  uint64_t offset;
  uint64_t *table;
};
extern int l2_cache_cut (struct l2_cache *cache, struct l2_copy **copies,
                         size_t *n, size_t *cap);
extern void l2_cache_unpin_all (struct l2_cache *cache);

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

/* Parallel requests (see lib/WRITING.md, "Locking").
 *
 * A write, zero or discard claims the guest clusters it touches, all at
 * once (no request holds one claim while waiting for another, so there
 * is no deadlock), before it looks at their entries; a request meeting
 * a claimed cluster waits.  So nothing else changes a claimed cluster's
 * entry, and the claimer may do its data I/O without the image lock.
 */
struct qcow2_claim
{
  uint64_t first, last; /* guest clusters, inclusive */
  struct qcow2_claim *next;
};
extern void qcow2_claim_range (struct qcow2_image *img,
                               struct qcow2_claim *claim, uint64_t offset,
                               uint64_t count);
extern void qcow2_unclaim (struct qcow2_image *img, struct qcow2_claim *claim);

/* Every request of a writable image (reads and block status too) is
 * registered while it runs, with the epoch (number of commit cuts) at
 * its start, in a list in start order (epochs never decrease along it).
 * A cluster whose reference commit N removed is decremented (and maybe
 * reused) only once every request registered with an epoch below N has
 * ended: a request that may have seen the old entry can no longer read
 * or write the cluster (the reuse barrier).
 */
struct qcow2_req
{
  struct qcow2_req *prev, *next;
  uint64_t epoch;
};
extern void qcow2_req_begin (struct qcow2_image *img, struct qcow2_req *req);
/* Ends the request; applies the frees it was holding back, if any (a
 * failure there fails the image).
 */
extern void qcow2_req_end (struct qcow2_image *img, struct qcow2_req *req);
/* Tests only: no barrier (frees applied at the commit, as if no request
 * were in flight), to show that the tests notice.
 */
extern bool qcow2_test_no_reuse_barrier;

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

/* ---- the image ---- */
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

/* Opening: qcow2_parse_header (header.c) reads the first cluster and
 * the fixed header, then calls the others in this order; each refuses
 * what cannot be served with a one-line error.
 *   features.c  header extensions, encryption and feature bits
 *   tables.c    where the refcount, snapshot and L1 tables lie
 *   snapshot.c  the snapshot table's true size, and the snapshot served
 */
extern int qcow2_parse_header (struct qcow2_image *img,
                               const struct qcow2_open_options *opts,
                               struct qcow2_error *err);
/* A string of 'len' bytes from the header cluster, NUL-terminated and
 * malloc'd; NULL (after setting err) if it holds a NUL byte.
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
/* A table of 'entries' entries of 'entry_bytes' at 'offset' must be
 * within 'max_bytes', cluster-aligned, after the header and inside the
 * file.
 */
extern int qcow2_check_table (struct qcow2_image *img, const char *what,
                              uint64_t offset, uint64_t entries,
                              uint64_t entry_bytes, uint64_t max_bytes,
                              struct qcow2_error *err);
extern int qcow2_check_tables (struct qcow2_image *img,
                               uint32_t refcount_clusters,
                               struct qcow2_error *err);
/* Size the snapshot table; serve snapshot 'want' (ID or name) if not
 * NULL.
 */
extern int qcow2_read_snapshots (struct qcow2_image *img, const char *want,
                                 struct qcow2_error *err);

/* read.c: the checks a table or data cluster offset from an L1 or L2
 * entry must pass before it is used; reading inside a request that is
 * already registered (qcow2_req_begin), without holding the image lock
 * (it is taken, shared, around each lookup): for the writer's
 * copy-on-write.
 */
extern int qcow2_check_l2_offset (const struct qcow2_image *img,
                                  uint64_t l2_off, uint64_t l1_idx,
                                  struct qcow2_error *err);
extern int qcow2_check_data_cluster (const struct qcow2_image *img,
                                     uint64_t host, uint64_t vofs,
                                     struct qcow2_error *err);
extern int qcow2_pread_unlocked (struct qcow2_image *img, void *buf,
                                 size_t count, uint64_t offset,
                                 struct qcow2_error *err);

/* compress.c: read 'len' bytes at 'in_cluster' of the compressed
 * cluster whose L2 entry is 'l2e' into 'buf'.  Uses per-thread buffers
 * and contexts.
 */
extern int qcow2_read_compressed_part (struct qcow2_image *img, uint64_t l2e,
                                       void *buf, uint64_t in_cluster,
                                       size_t len, struct qcow2_error *err);

/* open-write.c: what a writable open adds (refusals, autoclear bits,
 * refcounts, where allocation starts); closing writes back and flushes.
 */
/* Give an image without the linear layout the layout (on a regular
 * file, writable, refcounts loaded), if it is empty or not
 * 'only_if_empty' and its header has room for the extension: 1 given,
 * 0 left as it was, -1 error.
 */
extern int qcow2_adopt_linear (struct qcow2_image *img, bool only_if_empty,
                               struct qcow2_error *err);
/* repair.c: at a writable open (refcounts loaded),
 * lower every count above the references on disk to them; 'leaked'
 * says how many clusters were referenced by nothing.  Refuses images
 * with snapshots or bitmaps, and counts below the references.
 */
extern int qcow2_repair_leaks (struct qcow2_image *img, uint64_t *leaked,
                               struct qcow2_error *err);
extern int qcow2_open_writable (struct qcow2_image *img,
                                const struct qcow2_open_options *opts,
                                struct qcow2_error *err);
extern int qcow2_close_writable (struct qcow2_image *img,
                                 struct qcow2_error *err);

/* ---- metadata overlap checks (overlap.c) ----
 *
 * Which host clusters hold metadata: the header's tables as ranges
 * (refused at open if two overlap), and when writable the active L2
 * tables and refcount blocks one by one, kept up to date by the code
 * that makes and replaces them.  A lookup is O(log tables) + O(1) per
 * cluster.  Changes and write checks happen under the image lock
 * (exclusive).  Functions returning int return 0 or -1 after setting err.
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
extern const char *qcow2_meta_name (enum qcow2_meta_kind kind);
/* At open: a table the header leads to (checked: aligned, in limits). */
extern int qcow2_meta_add_table (struct qcow2_image *img,
                                 enum qcow2_meta_kind kind, uint64_t offset,
                                 uint64_t bytes, struct qcow2_error *err);
/* At the end of parsing: add the header cluster, sort, and refuse (EINVAL)
 * tables that overlap one another or the header.
 */
extern int qcow2_meta_seal_tables (struct qcow2_image *img,
                                   struct qcow2_error *err);
/* The one table of 'kind' is now at [offset, offset+bytes). */
extern int qcow2_meta_move_table (struct qcow2_image *img,
                                  enum qcow2_meta_kind kind, uint64_t offset,
                                  uint64_t bytes, struct qcow2_error *err);
/* At a writable open, the refcounts loaded: record the refcount blocks
 * and the active L2 tables, refusing (EIO) an entry that names another
 * table.
 */
extern int qcow2_meta_load (struct qcow2_image *img, struct qcow2_error *err);
/* A new L2 table or refcount block at 'cluster'; EIO if that cluster
 * already is metadata (a corrupt image, or a bug of ours).
 */
extern int qcow2_meta_add (struct qcow2_image *img, enum qcow2_meta_kind kind,
                           uint64_t cluster, struct qcow2_error *err);
/* 'cluster' no longer holds an L2 table or refcount block. */
extern void qcow2_meta_remove (struct qcow2_image *img, uint64_t cluster);
/* Is a cluster of [first, first+n) metadata?  Its kind and offset. */
extern bool qcow2_meta_lookup (const struct qcow2_image *img, uint64_t first,
                               uint64_t n, enum qcow2_meta_kind *kind,
                               uint64_t *at);
extern size_t qcow2_meta_count (const struct qcow2_image *img);
/* Before writing or freeing host bytes [offset, offset+len) as guest
 * data ('what': "write", "free"): -1 with EIO if they touch metadata,
 * the image then failed (read-only) and the message says so, as
 * qemu's "Preventing invalid write on metadata".
 */
extern int qcow2_meta_check (struct qcow2_image *img, uint64_t offset,
                             uint64_t len, const char *what,
                             struct qcow2_error *err);
/* The same for the host clusters L2 entry 'e' holds (a COPIED cluster's
 * only if 'copied'), before they are freed.
 */
extern int qcow2_meta_check_entry (struct qcow2_image *img, uint64_t e,
                                   bool copied, struct qcow2_error *err);
extern void qcow2_meta_free (struct qcow2_image *img);

/* ---- refcounts (refcount.c) ----
 *
 * Not thread-safe: callers hold the image's lock exclusively.  Functions
 * returning int return 0 (or what they say) or -1 after setting err.
 */
extern int qcow2_rc_open (struct qcow2_image *img, unsigned cache_blocks,
                          struct qcow2_error *err);
extern void qcow2_rc_close (struct qcow2_image *img);
extern int qcow2_rc_get (struct qcow2_image *img, uint64_t cluster,
                         uint64_t *value, struct qcow2_error *err);
/* Add 'delta' to a cluster's refcount, making its block if needed (and
 * growing the table); out of range (below 0, above the width) is -1
 * with EIO: the image is inconsistent.
 */
extern int qcow2_rc_update (struct qcow2_image *img, uint64_t cluster,
                            int64_t delta, struct qcow2_error *err);
/* Take a free cluster: 1 if its refcount was 0 and is now 1, 0 if it
 * is in use (possibly by a refcount block just made for it).
 */
extern int qcow2_rc_claim (struct qcow2_image *img, uint64_t cluster,
                           struct qcow2_error *err);
/* Write every dirty block (no flush). */
extern int qcow2_rc_write_dirty (struct qcow2_image *img,
                                 struct qcow2_error *err);
extern unsigned qcow2_rc_dirty_blocks (const struct qcow2_image *img);
/* The highest cluster with a non-zero refcount (0 if none). */
extern int qcow2_rc_highest_used (struct qcow2_image *img, uint64_t *cluster,
                                  struct qcow2_error *err);
/* Entry 'i' of a refcount block of width 2^order bits. */
/* The linear layout (adopt.c, and blocks kept off the homes).  Clusters
 * one refcount block covers; grow the table (as qemu does) so that it
 * can point at blocks for clusters [0, end_cluster); install empty
 * blocks for table indexes idx[] at clusters at[] (already claimed),
 * each durable before its entry.
 */
extern uint64_t qcow2_rc_block_clusters (const struct qcow2_image *img);
extern int qcow2_rc_cover (struct qcow2_image *img, uint64_t end_cluster,
                           struct qcow2_error *err);
extern int qcow2_rc_install_blocks (struct qcow2_image *img,
                                    const uint64_t *idx, const uint64_t *at,
                                    size_t n, struct qcow2_error *err);
/* Host offset of the refcount block of table index idx (0: none). */
extern uint64_t qcow2_rc_block_at (const struct qcow2_image *img, uint64_t idx);
extern uint64_t qcow2_rc_entry_get (const void *block, unsigned order,
                                    uint64_t i);
extern void qcow2_rc_entry_set (void *block, unsigned order, uint64_t i,
                                uint64_t v);

/* ---- allocation (alloc.c) ---- */
extern int qcow2_alloc_init (struct qcow2_image *img, struct qcow2_error *err);
extern void qcow2_alloc_free_state (struct qcow2_image *img);
/* A free host cluster, its refcount set to 1: for guest cluster 'guest'
 * (data), or for metadata ('guest' ignored).
 */
extern int qcow2_alloc_cluster (struct qcow2_image *img, bool metadata,
                                uint64_t guest, uint64_t *cluster,
                                struct qcow2_error *err);
/* A cluster whose refcount dropped to 0 after a commit: reusable. */
extern int qcow2_alloc_reuse (struct qcow2_image *img, uint64_t cluster);
/* L2 entry 'e' of guest cluster 'guest' (UINT64_MAX: not a data entry)
 * is dropped after the next commit: if it is that cluster's linear
 * home, the guest cluster may take it back before the drop is applied.
 */
extern void qcow2_alloc_note_drop (struct qcow2_image *img, uint64_t e,
                                   uint64_t guest);
/* A dropped reference to 'cluster' is applied: true if it is to be
 * skipped (its home was taken back meanwhile).
 */
extern bool qcow2_alloc_skip_drop (struct qcow2_image *img, uint64_t cluster);

/* ---- committing (commit.c) ---- */
/* Drop a reference to 'cluster' once the next commit is durable. */
extern int qcow2_free_after_commit (struct qcow2_image *img, uint64_t cluster,
                                    struct qcow2_error *err);
extern void qcow2_l1_mark_dirty (struct qcow2_image *img, uint64_t l1_idx);
/* Make every change completed before the call durable, in crash-safe
 * order, sharing one commit with concurrent callers.  Called WITHOUT
 * the image lock; on failure the image is failed.  Never waits for
 * requests in flight (their frees are held back instead), so a request
 * may commit in its middle.
 */
extern int qcow2_commit (struct qcow2_image *img, struct qcow2_error *err);
/* Under 'lock' (exclusive): decrement the held-back frees whose
 * barrier passed; those reaching 0 are punched and reusable.
 */
extern int qcow2_apply_deferred (struct qcow2_image *img,
                                 struct qcow2_error *err);
extern void qcow2_commit_free (struct qcow2_image *img);
extern uint64_t qcow2_next_epoch (struct qcow2_image *img);
extern void qcow2_req_wait_older (struct qcow2_image *img, struct qcow2_req *req);
extern int qcow2_defer_frees (struct qcow2_image *img, uint64_t epoch,
                   const uint64_t *frees, size_t n, struct qcow2_error *err);
extern void qcow2_inflight_free (struct qcow2_image *img);
extern bool qcow2_alloc_frees_waiting (const struct qcow2_image *img);
extern void qcow2_alloc_after_reclaim (struct qcow2_image *img);

/* scratch.c */
extern unsigned char *qcow2_scratch_get (struct qcow2_image *img,
                                         struct qcow2_error *err);
extern void qcow2_scratch_put (struct qcow2_image *img, unsigned char *buf);
extern void qcow2_scratch_free (struct qcow2_image *img);

/* Before a write or zero (write.c): writable, and inside the disk? */
extern int qcow2_check_change (struct qcow2_image *img, uint64_t count,
                               uint64_t offset, const char *what,
                               struct qcow2_error *err);

/* ---- writing (write.c) ---- */
/* Returned when every L2 cache slot a request could use is dirty: the
 * caller drops the lock, commits (qcow2_commit) and retries.
 */
#define QCOW2_RETRY 1
/* Under the lock (exclusive): the L2 table of L1 index 'l1_idx' in a
 * cache slot to change, made if missing.  0, QCOW2_RETRY or -1.  Once
 * it returned 0, the L1 entry stays (COPIED, the same table) for as
 * long as the image is open.
 */
extern int qcow2_get_l2_for_write (struct qcow2_image *img, uint64_t l1_idx,
                                   struct l2_ref *ref, struct qcow2_error *err);
/* WITHOUT the lock, in registered request 'req' that claimed the range:
 * write [off, off+count) from data.  0 or -1 (committing itself when
 * the cache is full of dirty tables, and reclaiming frees before
 * ENOSPC; ENOSPC leaves the image usable).
 */
extern int qcow2_write_claimed (struct qcow2_image *img,
                                struct qcow2_req *req, const char *data,
                                uint64_t off, uint64_t count,
                                struct qcow2_error *err);
/* Drop, after the next commit, the host references of L2 entry 'e' of
 * guest cluster 'guest' (of a COPIED cluster too if 'copied').
 */
extern int qcow2_free_entry (struct qcow2_image *img, uint64_t e, bool copied,
                             uint64_t guest, struct qcow2_error *err);

/* Table entry bits. */
#define L1E_OFFSET_MASK 0x00fffffffffffe00ULL
#define L2E_OFFSET_MASK 0x00fffffffffffe00ULL
#define OFLAG_COPIED (1ULL << 63)
#define OFLAG_COMPRESSED (1ULL << 62)
#define OFLAG_ZERO 1ULL
/* Extended L2 subcluster bitmaps: bits 0-31 allocated, 32-63 zero. */
#define BITMAP_ALL_ALLOC 0xffffffffULL
#define BITMAP_ALL_ZERO 0xffffffff00000000ULL

/* ---- errors (errors.c) ---- */
/* "WHAT: strerror(-r)", errno -r; returns -1. */
extern int qcow2_io_error (struct qcow2_error *err, int r, const char *what);
/* "WHAT at OFF: strerror(-r)", errno -r; returns -1. */
extern int qcow2_io_error_at (struct qcow2_error *err, int r, const char *what,
                              uint64_t off);
/* EIO "the image failed earlier" (and "is read-only" if 'changing'). */
extern int qcow2_failed_error (struct qcow2_error *err, bool changing);

/* Write 'len' bytes at 'off' and flush: 0 or a negative errno. */
static inline int
qcow2_write_sync (struct qcow2_hostio *io, const void *buf, size_t len,
                  uint64_t off)
{
  int r = qcow2_hostio_pwrite (io, buf, len, off);

  return r < 0 ? r : io->flush (io);
}

static inline bool
img_failed (struct qcow2_image *img)
{
  return __atomic_load_n (&img->failed, __ATOMIC_ACQUIRE);
}

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

#endif /* NBDSTACK_QCOW2_INTERNAL_H */
