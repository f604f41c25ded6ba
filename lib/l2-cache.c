/* nbdstack qcow2 library: the shared L2 table cache.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Readers on many threads look up L2 tables at once, so a single cache
 * lock would serialize the server.  Slots are split into shards by the
 * table's host offset; each shard has its own mutex, held only to find
 * or claim a slot.  A slot in use has refs > 0 and is never evicted, so
 * the table can be read after the lock is dropped.  A load marks the
 * slot 'loading' and does the I/O unlocked; other readers of the same
 * table wait on the shard's condition variable instead of loading twice.
 * If every slot of a shard is in use (more threads than slots), the
 * reader loads a private copy rather than waiting.
 *
 * Writers (holding the image's lock exclusively, so no reader is
 * looking at a table: readers hold it shared while they look up
 * entries) change tables in their slots and mark them dirty: a dirty slot is
 * never evicted until the commit writes it back, new tables (not yet pointed at
 * by anything on disk) in the commit's first phase and the others in its
 * second.  A writer that finds every slot of a shard dirty gets -EAGAIN and
 * commits first.  Tables are 4 KiB-aligned for O_DIRECT. A commit copies a
 * dirty table at its cut and writes the copy later, without the image lock:
 * until then the slot is pinned ('writeback'), since evicting it and reloading
 * the table from disk would read what the disk had before.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "qcow2-internal.h"

struct l2_slot
{
  uint64_t offset; /* host offset of the table */
  uint64_t *table; /* allocated on first use, then reused */
  uint64_t last_use;
  unsigned refs;
  bool valid;
  bool loading;
  bool dirty;
  bool is_new;    /* dirty, and its cluster was allocated this epoch */
  bool writeback; /* a commit is writing a copy: not evictable */
};

struct l2_shard
{
  pthread_mutex_t lock;
  pthread_cond_t loaded;
  uint64_t clock;
  unsigned nslots;
  struct l2_slot *slots;
} __attribute__ ((aligned (64))); /* no false sharing of locks */

struct l2_cache
{
  struct qcow2_hostio *io;
  uint32_t table_bytes;
  unsigned cluster_bits;
  unsigned nshards; /* power of two */
  unsigned entries;
  struct l2_shard *shards;
};

/* At most this many slots per shard, so a lookup scans a short array. */
#define SLOTS_PER_SHARD 8
#define MAX_SHARDS 4096

struct l2_cache *
l2_cache_new (struct qcow2_hostio *io, uint32_t table_bytes, unsigned entries)
{
  struct l2_cache *c = calloc (1, sizeof *c);
  unsigned nshards = 1, i;

  if (c == NULL)
    return NULL;
  if (entries < 1)
    entries = 1;
  while (nshards * 2 <= MAX_SHARDS && nshards * 2 * SLOTS_PER_SHARD <= entries)
    nshards *= 2;
  c->io = io;
  c->table_bytes = table_bytes;
  c->cluster_bits = __builtin_ctz (table_bytes);
  c->nshards = nshards;
  c->entries = entries;
  c->shards = aligned_alloc (64, sizeof *c->shards * nshards);
  if (c->shards == NULL)
    {
      free (c);
      return NULL;
    }
  for (i = 0; i < nshards; ++i)
    {
      struct l2_shard *s = &c->shards[i];
      unsigned n = entries / nshards + (i < entries % nshards);

      pthread_mutex_init (&s->lock, NULL);
      pthread_cond_init (&s->loaded, NULL);
      s->clock = 0;
      s->nslots = n;
      s->slots = calloc (n, sizeof *s->slots);
      if (s->slots == NULL)
        {
          c->nshards = i + 1;
          l2_cache_free (c);
          return NULL;
        }
    }
  return c;
}

void
l2_cache_free (struct l2_cache *c)
{
  unsigned i, j;

  if (c == NULL)
    return;
  for (i = 0; i < c->nshards; ++i)
    {
      struct l2_shard *s = &c->shards[i];
      if (s->slots)
        for (j = 0; j < s->nslots; ++j)
          free (s->slots[j].table);
      free (s->slots);
      pthread_mutex_destroy (&s->lock);
      pthread_cond_destroy (&s->loaded);
    }
  free (c->shards);
  free (c);
}

unsigned
l2_cache_entries (const struct l2_cache *c)
{
  return c->entries;
}

static struct l2_shard *
shard_of (struct l2_cache *c, uint64_t offset)
{
  /* Fibonacci hashing of the cluster number spreads neighbouring
   * tables (the usual case) over different shards.
   */
  uint64_t h = (offset >> c->cluster_bits) * 0x9e3779b97f4a7c15ULL;
  return &c->shards[(h >> 32) & (c->nshards - 1)];
}

static int
load_private (struct l2_cache *c, uint64_t offset, struct l2_ref *ref)
{
  uint64_t *t = malloc (c->table_bytes);
  int r;

  if (t == NULL)
    return -ENOMEM;
  r = c->io->pread (c->io, t, c->table_bytes, offset);
  if (r < 0)
    {
      free (t);
      return r;
    }
  ref->cache = c;
  ref->slot = NULL;
  ref->table = t;
  return 0;
}

/* May 'sl' be evicted, and is it a better victim than 'victim'? */
static bool
better_victim (const struct l2_slot *sl, const struct l2_slot *victim)
{
  return sl->refs == 0 && !sl->loading && !sl->dirty && !sl->writeback
         && (victim == NULL
             || (victim->valid
                 && (!sl->valid || sl->last_use < victim->last_use)));
}

/* Under s->lock: the slot of 'offset', referenced; else NULL, and in
 * *victim the slot taken for it (referenced, 'loading' if 'reading'),
 * or NULL if every slot is in use.  'reading' also matches a slot
 * being loaded, waiting until it is.
 */
static struct l2_slot *
find_locked (struct l2_shard *s, uint64_t offset, bool reading,
             struct l2_slot **victim)
{
  unsigned i;

again:
  *victim = NULL;
  for (i = 0; i < s->nslots; ++i)
    {
      struct l2_slot *sl = &s->slots[i];
      if ((sl->valid || (reading && sl->loading)) && sl->offset == offset)
        {
          if (sl->loading)
            {
              pthread_cond_wait (&s->loaded, &s->lock);
              goto again;
            }
          sl->refs++;
          sl->last_use = ++s->clock;
          return sl;
        }
      if (better_victim (sl, *victim))
        *victim = sl;
    }
  if (*victim)
    {
      struct l2_slot *v = *victim;
      v->valid = false;
      v->loading = reading;
      v->offset = offset;
      v->refs = 1;
      v->last_use = ++s->clock;
    }
  return NULL;
}

/* find_locked under the shard's lock; a hit is zeroed if 'fresh'. */
static struct l2_slot *
find (struct l2_cache *c, struct l2_shard *s, uint64_t offset, bool reading,
      bool fresh, struct l2_slot **victim)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  struct l2_slot *sl = find_locked (s, offset, reading, victim);

  if (sl && fresh)
    {
      memset (sl->table, 0, c->table_bytes);
      sl->dirty = sl->is_new = true;
    }
  return sl;
}

/* Without the lock: the table of taken slot 'v', zeroed if 'fresh',
 * else read.  0 or a negative errno.
 */
static int
fill_slot (struct l2_cache *c, struct l2_slot *v, uint64_t offset, bool fresh)
{
  if (v->table == NULL
      && posix_memalign ((void **)&v->table, 4096, c->table_bytes) != 0)
    {
      v->table = NULL;
      return -ENOMEM;
    }
  if (fresh)
    {
      memset (v->table, 0, c->table_bytes);
      return 0;
    }
  return c->io->pread (c->io, v->table, c->table_bytes, offset);
}

/* Under the shard's lock: slot 'v' was filled with result 'r'. */
static void
filled (struct l2_shard *s, struct l2_slot *v, int r, bool reading, bool fresh)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);

  v->loading = false;
  v->valid = r == 0;
  if (r < 0)
    v->refs = 0;
  else if (fresh)
    v->dirty = v->is_new = true;
  if (reading)
    pthread_cond_broadcast (&s->loaded);
}

/* l2_cache_get ('reading') and l2_cache_get_write. */
static int
get_slot (struct l2_cache *c, uint64_t offset, bool reading, bool fresh,
          struct l2_ref *ref)
{
  struct l2_shard *s = shard_of (c, offset);
  struct l2_slot *victim;
  struct l2_slot *sl = find (c, s, offset, reading, fresh, &victim);
  int r;

  if (sl == NULL && victim == NULL)
    /* Readers get a private copy; a writer commits, then retries. */
    return reading ? load_private (c, offset, ref) : -EAGAIN;
  if (sl == NULL)
    {
      r = fill_slot (c, victim, offset, fresh);
      filled (s, victim, r, reading, fresh);
      if (r < 0)
        return r;
      sl = victim;
    }
  ref->cache = c;
  ref->slot = sl;
  ref->table = sl->table;
  return 0;
}

int
l2_cache_get (struct l2_cache *c, uint64_t offset, struct l2_ref *ref)
{
  return get_slot (c, offset, true, false, ref);
}

void
l2_cache_put (struct l2_ref *ref)
{
  struct l2_slot *sl = ref->slot;

  if (sl == NULL)
    {
      free ((void *)ref->table);
    }
  else
    {
      struct l2_shard *s = shard_of (ref->cache, sl->offset);
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
      sl->refs--;
    }
  ref->table = NULL;
  ref->slot = NULL;
}

/* ---- writing (callers hold the image's lock exclusively) ---- */

int
l2_cache_get_write (struct l2_cache *c, uint64_t offset, bool fresh,
                    struct l2_ref *ref)
{
  return get_slot (c, offset, false, fresh, ref);
}

/* A table that is new (its cluster allocated, nothing on disk points
 * at it) became dirty and "new" when it was made, and stays so until a
 * cut writes it; a table marked dirty while clean is on disk already
 * (phase 2).  Deciding here from the caller's view instead would be
 * wrong now that a cut may run between a writer's lookup and its
 * relink: writing an already-linked table in phase 1 could put an entry
 * on disk before the data it points at.
 */
void
l2_cache_mark_dirty (struct l2_ref *ref)
{
  struct l2_slot *sl = ref->slot;

  if (!sl->dirty)
    sl->is_new = false;
  sl->dirty = true;
}

int
l2_cache_write_dirty (struct l2_cache *c, bool new_tables)
{
  unsigned i, j;

  for (i = 0; i < c->nshards; ++i)
    {
      struct l2_shard *s = &c->shards[i];
      for (j = 0; j < s->nslots; ++j)
        {
          struct l2_slot *sl = &s->slots[j];
          struct iovec iov = { sl->table, c->table_bytes };
          int r;

          if (!sl->dirty || sl->is_new != new_tables)
            continue;
          r = c->io->pwritev (c->io, &iov, 1, sl->offset);
          if (r < 0)
            return r;
          sl->dirty = sl->is_new = false;
        }
    }
  return 0;
}

int
l2_cache_cut (struct l2_cache *c, struct l2_copy **copies, size_t *n,
              size_t *cap)
{
  unsigned i, j;

  *n = 0;
  for (i = 0; i < c->nshards; ++i)
    {
      struct l2_shard *s = &c->shards[i];
      for (j = 0; j < s->nslots; ++j)
        {
          struct l2_slot *sl = &s->slots[j];
          struct l2_copy *cp;

          if (!sl->dirty)
            continue;
          if (*n == *cap)
            {
              size_t ncap = *cap ? *cap * 2 : 16;
              struct l2_copy *p = realloc (*copies, ncap * sizeof *p);
              if (p == NULL)
                return -ENOMEM;
              memset (p + *cap, 0, (ncap - *cap) * sizeof *p);
              *copies = p;
              *cap = ncap;
            }
          cp = &(*copies)[*n];
          /* The copy buffers are kept between commits: a pool. */
          if (cp->table == NULL
              && posix_memalign ((void **)&cp->table, 4096, c->table_bytes)
                     != 0)
            {
              cp->table = NULL;
              return -ENOMEM;
            }
          memcpy (cp->table, sl->table, c->table_bytes);
          cp->offset = sl->offset;
          sl->dirty = sl->is_new = false;
          sl->writeback = true;
          (*n)++;
        }
    }
  return 0;
}

void
l2_cache_unpin_all (struct l2_cache *c)
{
  unsigned i, j;

  for (i = 0; i < c->nshards; ++i)
    {
      struct l2_shard *s = &c->shards[i];
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
      for (j = 0; j < s->nslots; ++j)
        s->slots[j].writeback = false;
    }
}

unsigned
l2_cache_dirty_count (const struct l2_cache *c)
{
  unsigned i, j, n = 0;

  for (i = 0; i < c->nshards; ++i)
    for (j = 0; j < c->shards[i].nslots; ++j)
      n += c->shards[i].slots[j].dirty;
  return n;
}
