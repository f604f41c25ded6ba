/* nbdstack qcow2 library: knowing which host clusters hold metadata.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: every cluster of the qcow2 file that holds metadata we may
 * rely on is recorded here, so that guest data is never written over
 * it and it is never freed as a data cluster (qemu's overlap checks,
 * block/qcow2-refcount.c, "Preventing invalid write on metadata").
 *
 * Two kinds of records:
 *  - tables the header leads to (the header cluster with its
 *    extensions, the active L1, the refcount table, the snapshot table,
 *    every snapshot's L1 table, the bitmap directory): a few ranges of
 *    clusters, sorted once the header is parsed.  Two that overlap
 *    make the image refused at open, read-only too: no real image has
 *    them, and either table could be written over the other.
 *  - when writable, the active L2 tables and the refcount blocks: one
 *    cluster each, many, added and dropped as they are made and
 *    replaced, in an open-addressing hash set.  Loading them at open
 *    refuses an L1 or refcount table entry that names another table.
 *
 * Looking up a cluster is a binary search over the ranges and one
 * probe of the set: O(log n) and no table is scanned per request.
 * What qemu checks only in its "all" mode (snapshots' L2 tables) is not
 * recorded: reading every snapshot's L1 at open would cost time.
 * Callers hold the image lock exclusively when they change the set or
 * check a write (the set is only built for writable images); the ranges
 * change only at open and when the refcount table moves (under the lock).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qcow2-internal.h"

struct meta_range
{
  uint64_t first, end; /* clusters [first, end) */
  enum qcow2_meta_kind kind;
  uint64_t offset; /* of the table, for messages */
};

/* Hash slots: 0 empty, else (cluster + 1) | kind << KIND_SHIFT.  Host
 * offsets are below 2^56, so a cluster index + 1 fits below bit 56.
 */
#define KIND_SHIFT 56
#define CLUSTER_MASK ((1ULL << KIND_SHIFT) - 1)

struct qcow2_meta
{
  struct meta_range *ranges;
  size_t nranges, ranges_cap;
  bool sealed;
  uint64_t *slots;
  unsigned bits; /* 2^bits slots, or 0 before the first add */
  size_t count;
};

const char *
qcow2_meta_name (enum qcow2_meta_kind kind)
{
  switch (kind)
    {
    case QCOW2_META_HEADER:
      return "header";
    case QCOW2_META_ACTIVE_L1:
      return "active L1 table";
    case QCOW2_META_REFTABLE:
      return "refcount table";
    case QCOW2_META_SNAPSHOTS:
      return "snapshot table";
    case QCOW2_META_SNAPSHOT_L1:
      return "snapshot L1 table";
    case QCOW2_META_BITMAPS:
      return "bitmap directory";
    case QCOW2_META_L2:
      return "active L2 table";
    case QCOW2_META_REFBLOCK:
      return "refcount block";
    }
  return "metadata";
}

static struct qcow2_meta *
get_meta (struct qcow2_image *img, struct qcow2_error *err)
{
  if (img->meta == NULL)
    {
      img->meta = calloc (1, sizeof *img->meta);
      if (img->meta == NULL)
        qcow2_set_error (err, ENOMEM, "out of memory");
    }
  return img->meta;
}

void
qcow2_meta_free (struct qcow2_image *img)
{
  if (img->meta == NULL)
    return;
  free (img->meta->ranges);
  free (img->meta->slots);
  free (img->meta);
  img->meta = NULL;
}

/* ---- the header's tables ---- */

int
qcow2_meta_add_table (struct qcow2_image *img, enum qcow2_meta_kind kind,
                      uint64_t offset, uint64_t bytes, struct qcow2_error *err)
{
  struct qcow2_meta *m = get_meta (img, err);
  const uint64_t cs = img->cluster_size;

  if (m == NULL)
    return -1;
  /* Callers pass checked tables: aligned, below 2^56, within limits. */
  if (bytes == 0)
    return 0;
  if (m->nranges == m->ranges_cap)
    {
      size_t cap = m->ranges_cap ? m->ranges_cap * 2 : 8;
      struct meta_range *p = realloc (m->ranges, cap * sizeof *p);
      if (p == NULL)
        {
          qcow2_set_error (err, ENOMEM, "out of memory");
          return -1;
        }
      m->ranges = p;
      m->ranges_cap = cap;
    }
  m->ranges[m->nranges++] = (struct meta_range){
    .first = offset >> img->cluster_bits,
    .end = (offset + bytes + cs - 1) >> img->cluster_bits,
    .kind = kind,
    .offset = offset,
  };
  m->sealed = false;
  return 0;
}

static int
cmp_range (const void *a, const void *b)
{
  const struct meta_range *x = a, *y = b;

  /* At one offset, the header first: "the X overlaps the header". */
  if (x->first != y->first)
    return x->first < y->first ? -1 : 1;
  return (int)x->kind - (int)y->kind;
}

int
qcow2_meta_seal_tables (struct qcow2_image *img, struct qcow2_error *err)
{
  struct qcow2_meta *m;
  size_t i;

  if (qcow2_meta_add_table (img, QCOW2_META_HEADER, 0, img->cluster_size, err)
      == -1)
    return -1;
  m = img->meta;
  qsort (m->ranges, m->nranges, sizeof *m->ranges, cmp_range);
  for (i = 1; i < m->nranges; ++i)
    if (m->ranges[i].first < m->ranges[i - 1].end)
      {
        const struct meta_range *a = &m->ranges[i - 1], *b = &m->ranges[i];
        qcow2_set_error (err, EINVAL,
                         "the %s at %#" PRIx64 " overlaps the %s at %#" PRIx64,
                         qcow2_meta_name (b->kind), b->offset,
                         qcow2_meta_name (a->kind), a->offset);
        return -1;
      }
  m->sealed = true;
  return 0;
}

int
qcow2_meta_move_table (struct qcow2_image *img, enum qcow2_meta_kind kind,
                       uint64_t offset, uint64_t bytes, struct qcow2_error *err)
{
  struct qcow2_meta *m = img->meta;
  size_t i;

  for (i = 0; i < m->nranges; ++i)
    if (m->ranges[i].kind == kind)
      {
        m->ranges[i] = m->ranges[--m->nranges];
        break;
      }
  if (qcow2_meta_add_table (img, kind, offset, bytes, err) == -1)
    return -1;
  qsort (m->ranges, m->nranges, sizeof *m->ranges, cmp_range);
  m->sealed = true;
  return 0;
}

/* The range holding a cluster of [first, first + n), or NULL. */
static const struct meta_range *
find_range (const struct qcow2_meta *m, uint64_t first, uint64_t n)
{
  size_t lo = 0, hi = m->nranges;

  /* The first range ending after 'first'; ranges do not overlap, so
   * their ends are sorted too.
   */
  while (lo < hi)
    {
      size_t mid = lo + (hi - lo) / 2;
      if (m->ranges[mid].end <= first)
        lo = mid + 1;
      else
        hi = mid;
    }
  if (lo < m->nranges && m->ranges[lo].first < first + n)
    return &m->ranges[lo];
  return NULL;
}

/* ---- single clusters: L2 tables and refcount blocks ---- */

static size_t
hash (uint64_t cluster, unsigned bits)
{
  return (size_t)((cluster * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
}

/* The slot holding 'cluster', or the empty slot where it would go. */
static size_t
probe (const struct qcow2_meta *m, uint64_t cluster)
{
  const size_t mask = ((size_t)1 << m->bits) - 1;
  size_t i = hash (cluster, m->bits);

  while (m->slots[i] && (m->slots[i] & CLUSTER_MASK) != cluster + 1)
    i = (i + 1) & mask;
  return i;
}

static int
grow_set (struct qcow2_meta *m, struct qcow2_error *err)
{
  unsigned bits = m->bits ? m->bits + 1 : 10;
  uint64_t *old = m->slots;
  size_t n = m->bits ? (size_t)1 << m->bits : 0, i;

  m->slots = calloc ((size_t)1 << bits, sizeof *m->slots);
  if (m->slots == NULL)
    {
      m->slots = old;
      qcow2_set_error (err, ENOMEM, "out of memory for the metadata map");
      return -1;
    }
  m->bits = bits;
  for (i = 0; i < n; ++i)
    if (old[i])
      m->slots[probe (m, (old[i] & CLUSTER_MASK) - 1)] = old[i];
  free (old);
  return 0;
}

static bool
set_lookup (const struct qcow2_meta *m, uint64_t cluster,
            enum qcow2_meta_kind *kind)
{
  size_t i;

  if (m->count == 0)
    return false;
  i = probe (m, cluster);
  if (m->slots[i] == 0)
    return false;
  *kind = m->slots[i] >> KIND_SHIFT;
  return true;
}

bool
qcow2_meta_lookup (const struct qcow2_image *img, uint64_t first, uint64_t n,
                   enum qcow2_meta_kind *kind, uint64_t *at)
{
  const struct qcow2_meta *m = img->meta;
  const struct meta_range *r;
  uint64_t c;

  if (m == NULL || n == 0)
    return false;
  r = find_range (m, first, n);
  if (r)
    {
      *kind = r->kind;
      *at = (r->first > first ? r->first : first) << img->cluster_bits;
      return true;
    }
  for (c = first; c < first + n; ++c)
    if (set_lookup (m, c, kind))
      {
        *at = c << img->cluster_bits;
        return true;
      }
  return false;
}

int
qcow2_meta_add (struct qcow2_image *img, enum qcow2_meta_kind kind,
                uint64_t cluster, struct qcow2_error *err)
{
  struct qcow2_meta *m = get_meta (img, err);
  enum qcow2_meta_kind was;
  uint64_t at;
  size_t i;

  if (m == NULL)
    return -1;
  if (qcow2_meta_lookup (img, cluster, 1, &was, &at))
    {
      qcow2_set_error (err, EIO,
                       "the %s at %#" PRIx64 " would overlap the %s there "
                       "(the image is corrupt: check it with qemu-img check)",
                       qcow2_meta_name (kind), cluster << img->cluster_bits,
                       qcow2_meta_name (was));
      return -1;
    }
  if ((m->count + 1) * 2 > (m->bits ? (size_t)1 << m->bits : 0)
      && grow_set (m, err) == -1)
    return -1;
  i = probe (m, cluster);
  m->slots[i] = (cluster + 1) | (uint64_t)kind << KIND_SHIFT;
  m->count++;
  return 0;
}

void
qcow2_meta_remove (struct qcow2_image *img, uint64_t cluster)
{
  struct qcow2_meta *m = img->meta;
  size_t mask, i, j;

  if (m == NULL || m->count == 0)
    return;
  mask = ((size_t)1 << m->bits) - 1;
  i = probe (m, cluster);
  if (m->slots[i] == 0)
    return;
  /* Backward shift: keep every later entry of the chain reachable. */
  m->slots[i] = 0;
  m->count--;
  for (j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask)
    {
      size_t home = hash ((m->slots[j] & CLUSTER_MASK) - 1, m->bits);
      /* Move it if its home is not in (i, j] cyclically. */
      if ((j > i && (home <= i || home > j))
          || (j < i && home <= i && home > j))
        {
          m->slots[i] = m->slots[j];
          m->slots[j] = 0;
          i = j;
        }
    }
}

size_t
qcow2_meta_count (const struct qcow2_image *img)
{
  return img->meta ? img->meta->count : 0;
}

int
qcow2_meta_load (struct qcow2_image *img, struct qcow2_error *err)
{
  const uint64_t cs = img->cluster_size;
  uint64_t i;

  for (i = 0; i < img->l1_size; ++i)
    {
      uint64_t off = img->l1[i] & L1E_OFFSET_MASK;
      /* An unaligned one is refused when it is used (mapping.c). */
      if (off == 0 || (off & (cs - 1)))
        continue;
      if (qcow2_meta_add (img, QCOW2_META_L2, off >> img->cluster_bits, err)
          == -1)
        return -1;
    }
  return 0;
}

/* ---- the checks before a write or a free ---- */

int
qcow2_meta_check (struct qcow2_image *img, uint64_t offset, uint64_t len,
                  const char *what, struct qcow2_error *err)
{
  enum qcow2_meta_kind kind;
  uint64_t at;

  if (len == 0 || img->data_io != img->io)
    return 0; /* a data file holds no metadata */
  if (!qcow2_meta_lookup (img, offset >> img->cluster_bits,
                          ((offset + len - 1) >> img->cluster_bits)
                              - (offset >> img->cluster_bits) + 1,
                          &kind, &at))
    return 0;
  qcow2_set_error (err, EIO,
                   "Preventing invalid %s on metadata: host range "
                   "%#" PRIx64 "+%#" PRIx64 " overlaps the %s at %#" PRIx64
                   "; the image is now read-only (check it with qemu-img "
                   "check)",
                   what, offset, len, qcow2_meta_name (kind), at);
  img_set_failed (img);
  return -1;
}

int
qcow2_meta_check_entry (struct qcow2_image *img, uint64_t e, bool copied,
                        struct qcow2_error *err)
{
  if (e & OFLAG_COMPRESSED)
    {
      uint64_t coffset = e & img->coffset_mask;
      uint64_t nb = ((e >> img->csize_shift) & img->csize_mask) + 1;
      uint64_t start = coffset & ~511ULL;

      return qcow2_meta_check (img, start, nb * 512, "free", err);
    }
  if ((e & L2E_OFFSET_MASK) && (copied || !(e & OFLAG_COPIED)))
    return qcow2_meta_check (img, e & L2E_OFFSET_MASK, img->cluster_size,
                             "free", err);
  return 0;
}
