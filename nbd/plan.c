/* nbdstack-nbd: what a qemu-nbd command line comes to, as nbdkit's.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The stack, outermost first: nbdkit's multi-conn (-e 1 only),
 * exportname and blocksize-policy filters; our lifecycle filter (the
 * client limit, the exit after the last client, the drain on SIGTERM);
 * when writable, our coalesce (the coalesce setting), zerodetect
 * (--detect-zeroes) and discard filters and nbdkit's fua filter
 * (write-through and unsafe cache modes); nbdkit's offset filter for a
 * byte range; then the image plugin.
 */
#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argv.h"
#include "die.h"
#include "json.h"
#include "locate.h"
#include "plan.h"
#include "supervise.h"

/* What qemu-nbd checks after parsing, in its order. */
static void
plan_activation (struct plan *p)
{
  const struct cmdline *c = p->cmd;

  p->activation_fds = cmdline_activation_fds ();
  if (p->activation_fds)
    {
      if (c->sockpath)
        die ("Unix socket can't be set when using socket activation");
      if (c->bind)
        die ("The interface can't be set when using socket activation");
      if (c->port)
        die ("TCP port number can't be set when using socket activation");
      if (c->selinux_label)
        die ("SELinux label can't be set when using socket activation");
      if (p->activation_fds > 1)
        die ("qemu-nbd does not support socket activation with LISTEN_FDS "
             "> 1");
    }
  if (c->selinux_label && c->sockpath == NULL)
    die ("--selinux-label is not permitted without --socket");
}

/* The byte range: a raw node's offset/size, then -o on top of it (a
 * second raw node in qemu-nbd), folded into one offset filter.  Checked
 * here, as qemu-nbd checks it when it opens the image: nbdkit's offset
 * filter would only fail the clients.
 */
static void
plan_range (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  uint64_t size = p->info.size;

  if (p->spec.has_range)
    {
      if (p->spec.range_offset > size)
        die ("Failed to open '%s': Offset (%" PRIu64 ") cannot be greater "
             "than size of the containing file (%" PRIu64 ")",
             c->filename, p->spec.range_offset, size);
      if (p->spec.has_range_size
          && size - p->spec.range_offset < p->spec.range_size)
        die ("Failed to open '%s': The sum of offset (%" PRIu64 ") and size "
             "(%" PRIu64 ") has to be smaller or equal to the  actual size "
             "of the containing file (%" PRIu64 ")",
             c->filename, p->spec.range_offset, p->spec.range_size, size);
      p->have_range = true;
      p->range_offset = p->spec.range_offset;
      p->range_size = p->spec.has_range_size ? p->spec.range_size
                                             : size - p->spec.range_offset;
    }
  if (c->offset)
    {
      uint64_t below = p->have_range ? p->range_size : size;

      if (c->offset > below)
        die ("Offset (%" PRIu64 ") cannot be greater than size of the "
             "containing file (%" PRIu64 ")",
             c->offset, below);
      p->have_range = true;
      p->range_offset += c->offset;
      p->range_size = below - c->offset;
    }
}

/* The image, which qemu-nbd opens before it serves anything. */
static void
plan_image (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  char *err;

  if (image_spec_parse (c->filename, c->image_opts, c->format, &p->spec, &err)
      == -1)
    die ("Failed to open '%s': %s", c->filename, err ? err : "out of memory");
  if (probe_image (&p->spec, &p->info, &err) == -1)
    die ("Failed to open '%s': %s", c->filename, err ? err : "out of memory");
  if (c->aio_native && c->cache != CACHE_NONE && c->cache != CACHE_DIRECTSYNC)
    die ("Failed to open '%s': aio=native was specified, but it requires "
         "cache.direct=on, which was not specified.",
         c->filename);
  if (p->info.probed_raw)
    warn ("Image format was not specified for '%s' and probing guessed raw; "
          "writes that would make block 0 look like another format are "
          "refused: specify -f raw to remove the restriction",
          p->spec.path);
  p->readonly = c->readonly || p->spec.read_only;
  if (!p->readonly && probe_writable (&p->spec, &err) == -1)
    die ("Failed to open '%s': %s", c->filename, err ? err : "out of memory");
  if (c->snapshot && p->info.format != FORMAT_QCOW2)
    die ("Failed to load snapshot: '%s' is raw: only qcow2 images have "
         "internal snapshots",
         p->spec.path);
  plan_range (p);
}

/* nbdkit cannot offer qemu:allocation-depth.  A client that asks for it
 * on a layer served alone uses it to tell "not in this layer" from
 * "zero" (imageio's snapshot download and shallow upload), and without
 * it would take the backing chain's data for zeroes.
 */
static void
plan_alloc_depth (struct plan *p)
{
  const struct cmdline *c = p->cmd;

  if (c->alloc_depth && p->spec.backing_none && p->info.has_backing)
    die ("--allocation-depth with \"backing\": null: '%s' has a backing "
         "file, and the qemu:allocation-depth context that would tell its "
         "data from zeroes cannot be offered (nbdkit has no API for it); "
         "serve the whole chain or drop -A",
         p->spec.path);
  if (c->alloc_depth)
    warn ("--allocation-depth: the qemu:allocation-depth context is not "
          "offered (nbdkit has no API for it); clients read the whole "
          "backing chain as one disk and cannot tell which layer holds "
          "the data");
}

/* Off unless asked for: measured with these pipelines
 * (bench/nbd-vs-qemu-nbd.sh), the buffer cost time and CPU on raw
 * targets, and without it what a write acknowledged survives exactly
 * what it survives with qemu-nbd, including nbdkit being killed.
 */
static void
plan_coalesce (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  const char *s = settings_get (&p->settings, "coalesce");

  if (s == NULL)
    {
      /* Setting the buffer up asks for it. */
      p->coalesce = false;
      for (size_t i = 0; i < p->settings.n; ++i)
        p->coalesce |= p->settings.v[i].dest == DEST_COALESCE;
    }
  else if (strcmp (s, "off") == 0)
    p->coalesce = false;
  else if (strcmp (s, "on") == 0)
    p->coalesce = true;
  else
    die ("coalesce=%s: expected on or off", s);
  /* Write-through cache modes answer a write once it is durable: the
   * buffer must not answer it earlier.
   */
  s = settings_get (&p->settings, "coalesce-mode");
  if (s && strcmp (s, "writeback") == 0
      && (c->cache == CACHE_WRITETHROUGH || c->cache == CACHE_DIRECTSYNC))
    die ("coalesce-mode=writeback contradicts --cache=%s",
         c->cache == CACHE_WRITETHROUGH ? "writethrough" : "directsync");
}

/* The nbdkit-debug setting. */
static void
plan_nbdkit_debug (struct plan *p)
{
  const char *s = settings_get (&p->settings, "nbdkit-debug");

  if (s && strcmp (s, "on") == 0)
    p->nbdkit_debug = true;
  else if (s && strcmp (s, "off") != 0)
    die ("nbdkit-debug=%s: expected on or off", s);
}

/* Invariant: unless malloc-hugepages=off or GLIBC_TUNABLES already
 * names the tunable, nbdkit runs with glibc.malloc.hugetlb=1, which
 * makes glibc madvise(MADV_HUGEPAGE) the memory it maps for large
 * allocations.  nbdkit gives each worker thread a request buffer that it
 * grows and zeroes (memset) on first use: imageio's 8 MiB requests make
 * that 4 connections x 4 threads x 8 MiB of fresh pages per transfer,
 * and faulting them in 4 KiB at a time was 40% of the server's CPU in a
 * qcow2 download (perf, bench/imageio-rw.sh).  With huge pages, in three
 * interleaved runs, imageio's downloads took 5-35% less server CPU
 * (medians) and its uploads the same within noise.
 */
static void
plan_malloc (struct plan *p)
{
  const char *s = settings_get (&p->settings, "malloc-hugepages");
  const char *old = getenv ("GLIBC_TUNABLES");

  if (s && strcmp (s, "off") == 0)
    return;
  if (s && strcmp (s, "on") != 0)
    die ("malloc-hugepages=%s: expected on or off", s);
  if (old && strstr (old, "glibc.malloc.hugetlb=") != NULL)
    return;
  if (asprintf (&p->glibc_tunables, "%s%sglibc.malloc.hugetlb=1",
                old ? old : "", old && *old ? ":" : "")
      == -1)
    die ("malloc: %m");
}

/* Invariant: unless align-buffers=off, or the cache mode has the
 * plugin use the page cache, nbdkit runs with our nbdstack-alignbuf.so
 * at the end of LD_PRELOAD (after what the caller preloads, such as a
 * sanitizer's runtime, which must come first and then keeps its own
 * realloc).  It makes the request buffers nbdkit grows with realloc
 * start on a page, so the plugin's O_DIRECT reads and writes go to and
 * from them directly instead of through a bounce buffer
 * (nbd/alignbuf.c).
 */
static void
plan_alignbuf (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  const char *s = settings_get (&p->settings, "align-buffers");
  const char *old = getenv ("LD_PRELOAD");
  char *path;

  if (s && strcmp (s, "off") != 0 && strcmp (s, "on") != 0)
    die ("align-buffers=%s: expected on or off", s);
  if ((s && strcmp (s, "off") == 0)
      || (c->cache != CACHE_NONE && c->cache != CACHE_DIRECTSYNC))
    return;
  path = preload_path ("alignbuf");
  if (asprintf (&p->ld_preload, "%s%s%s", old ? old : "",
                old && *old ? ":" : "", path)
      == -1)
    die ("malloc: %m");
  free (path);
}

/* ---- the nbdkit command line */

/* Every setting that goes to DEST, as key=value. */
static void
add_settings (struct plan *p, enum setting_dest dest)
{
  const struct settings *s = &p->settings;

  for (size_t i = 0; i < s->n; ++i)
    if (s->v[i].dest == dest)
      argv_addf (&p->argv, "%s=%s", s->v[i].key, s->v[i].value);
}

/* Invariant: a connection's memory is about threads x (its largest
 * request + one 2 MiB bounce buffer) on top of nbdkit's 5 MiB, where
 * threads is the threads= setting, else ONE_CLIENT_THREADS when the
 * server takes one client at a time (--shared=1, qemu-nbd's default),
 * else SHARED_THREADS.  nbdkit gives each worker thread of a connection
 * its own request buffer, grown (and zeroed) to the largest request the
 * thread has served and kept until the connection closes, and a
 * client's requests go round all the threads.
 *
 * One client is qemu-img or nbdcopy with several requests in flight:
 * nbdkit's default of 16 threads made one qemu-img convert (2 MiB
 * requests, 8 in flight) 55 MiB against qemu-nbd's 24-27; 4 threads 23
 * MiB and as fast; 1 was 1.3-1.4x slower.
 *
 * Several clients at once is how vdsm runs the server for imageio
 * (--shared=8): 4 connections, one 8 MiB request in flight on each, so
 * every thread but the first only adds 8 MiB of fresh zeroed memory per
 * connection and transfer (4 threads: 143 MiB peak against qemu-nbd's
 * 50-70, and 1.1-1.2x its CPU downloading).  2 threads per connection
 * keep a single qemu-img convert into such a server as fast as 4 (1.19
 * against 1.20 s; 1 thread 1.60, qemu-nbd 1.49); bench/README.md has the
 * figures.  threads= wins.
 */
#define ONE_CLIENT_THREADS 4
#define SHARED_THREADS 2

/* nbdkit's own options. */
static void
add_server_options (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  const char *s;

  argv_add (&p->argv, nbdkit_program ());
  argv_add (&p->argv, "-f"); /* qemu-nbd does not fork unless --fork */
  argv_add (&p->argv, "--log=stderr");
  /* qemu-nbd -v shows nothing more while it serves a socket: nbdkit's
   * debug output (hundreds of lines per connection) is our own setting.
   */
  if (p->nbdkit_debug)
    argv_add (&p->argv, "-v");
  if (p->readonly)
    argv_add (&p->argv, "-r");
  if (p->activation_fds == 0)
    {
      if (c->sockpath)
        argv_addf (&p->argv, "--unix=%s", c->sockpath);
      else
        {
          argv_addf (&p->argv, "--ipaddr=%s", c->bind ? c->bind : "0.0.0.0");
          argv_addf (&p->argv, "--port=%s", c->port ? c->port : "10809");
        }
    }
  if (c->selinux_label)
    argv_addf (&p->argv, "--selinux-label=%s", c->selinux_label);
  /* nbdkit's worker threads per connection (see ONE_CLIENT_THREADS). */
  s = settings_get (&p->settings, "threads");
  if (s)
    argv_addf (&p->argv, "--threads=%s", s);
  else
    argv_addf (&p->argv, "--threads=%d",
               c->shared == 1 ? ONE_CLIENT_THREADS : SHARED_THREADS);
}

static void
add_our_filter (struct plan *p, const char *name)
{
  char *path = component_path ("filter", name);

  argv_addf (&p->argv, "--filter=%s", path);
  free (path);
}

/* The filters, outermost first. */
static void
add_filters (struct plan *p)
{
  const struct cmdline *c = p->cmd;

  /* qemu-nbd offers multi-conn only when it serves several clients:
   * with one, a client that opens several connections (nbdcopy) must
   * not try.
   */
  if (c->shared == 1)
    argv_add (&p->argv, "--filter=multi-conn");
  argv_add (&p->argv, "--filter=exportname");
  argv_add (&p->argv, "--filter=blocksize-policy");
  /* The client limit, the exit after the last client and the drain on
   * SIGTERM (supervise.c), above every layer that holds written data.
   */
  add_our_filter (p, "lifecycle");
  if (!p->readonly)
    {
      if (p->coalesce)
        add_our_filter (p, "coalesce");
      if (c->detect_zeroes != DZ_OFF)
        add_our_filter (p, "zerodetect");
      add_our_filter (p, "discard");
      if (c->cache == CACHE_WRITETHROUGH || c->cache == CACHE_DIRECTSYNC
          || c->cache == CACHE_UNSAFE)
        argv_add (&p->argv, "--filter=fua");
    }
  if (p->have_range)
    argv_add (&p->argv, "--filter=offset");
}

/* -l: ID_OR_NAME, or snapshot.id=ID / snapshot.name=NAME.  The plugin
 * matches by ID first, then by name, so only one of the two can be
 * passed on exactly.
 */
static void
add_snapshot_param (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  const char *id = NULL, *name = NULL;
  struct flat_opts o = { 0 };
  char *err;

  if (strncmp (c->snapshot, "snapshot.", 9) != 0)
    {
      argv_addf (&p->argv, "snapshot=%s", c->snapshot);
      return;
    }
  if (image_opts_flatten (c->snapshot, &o, &err) == -1)
    die ("Failed in parsing snapshot param `%s'", c->snapshot);
  for (size_t i = 0; i < o.n; ++i)
    {
      if (strcmp (o.v[i].key, "snapshot.id") == 0)
        id = o.v[i].value;
      else if (strcmp (o.v[i].key, "snapshot.name") == 0)
        name = o.v[i].value;
      else
        die ("Failed in parsing snapshot param `%s': Invalid parameter '%s'",
             c->snapshot, o.v[i].key);
    }
  if (id && name)
    die ("-l %s: give snapshot.id or snapshot.name, not both (the image "
         "plugin matches one of them)",
         c->snapshot);
  if (id == NULL && name == NULL)
    die ("Failed in parsing snapshot param `%s'", c->snapshot);
  argv_addf (&p->argv, "snapshot=%s", id ? id : name);
  flat_opts_free (&o);
}

/* The plugin and its parameters. */
static void
add_plugin (struct plan *p)
{
  const struct cmdline *c = p->cmd;
  char *path = component_path ("plugin", "image");

  argv_add (&p->argv, path);
  free (path);
  argv_addf (&p->argv, "file=%s", p->spec.path);
  /* A probed raw image is probed again by the plugin, which then keeps
   * its first sector raw as qemu-nbd does.
   */
  argv_add (&p->argv, p->info.format == FORMAT_QCOW2 ? "format=qcow2"
                      : p->info.probed_raw           ? "format=auto"
                                                     : "format=raw");
  argv_add (&p->argv, c->cache == CACHE_NONE || c->cache == CACHE_DIRECTSYNC
                          ? "cache=none"
                          : "cache=writeback");
  if (p->readonly)
    argv_add (&p->argv, "readonly=true");
  if (p->info.format == FORMAT_QCOW2)
    {
      /* qemu-nbd opens the backing chain unless told "backing": null. */
      argv_add (&p->argv,
                p->spec.backing_none ? "backing=none" : "backing=follow");
      if (p->spec.has_image_range)
        argv_addf (&p->argv, "image-offset=%" PRIu64, p->spec.image_offset);
      if (p->spec.has_image_length)
        argv_addf (&p->argv, "image-length=%" PRIu64, p->spec.image_length);
      if (c->snapshot)
        add_snapshot_param (p);
      add_settings (p, DEST_PLUGIN);
    }
}

/* The parameters of the filters every export has: lifecycle,
 * multi-conn, exportname, blocksize-policy.
 */
static void
add_export_parameters (struct plan *p)
{
  const struct cmdline *c = p->cmd;

  argv_addf (&p->argv, "lifecycle-limit=%d", c->shared);
  argv_add (&p->argv, c->persistent ? "lifecycle-exit-last=false"
                                    : "lifecycle-exit-last=true");
  if (c->sockpath && p->activation_fds == 0 && !c->persistent)
    argv_addf (&p->argv, "lifecycle-unlink=%s", c->sockpath);
  argv_addf (&p->argv, "lifecycle-control=%d",
             supervise_control_fd (p->activation_fds));
  argv_add (&p->argv,
            p->readonly ? "lifecycle-flush=false" : "lifecycle-flush=true");
  if (c->shared == 1)
    {
      argv_add (&p->argv, "multi-conn-mode=disable");
      argv_add (&p->argv, "multi-conn-track-dirty=off");
    }
  /* qemu-nbd serves exactly one name and lists it. */
  argv_add (&p->argv, "exportname-strict=true");
  argv_add (&p->argv, "exportname-list=explicit");
  argv_addf (&p->argv, "exportname=%s", c->export_name ? c->export_name : "");
  if (c->description)
    argv_addf (&p->argv, "exportdesc=fixed:%s", c->description);
  else
    argv_add (&p->argv, "exportdesc=none");
  /* qemu-nbd's largest request; nbdkit would advertise 4G - 1 and then
   * refuse requests over 64M.
   */
  argv_add (&p->argv, "blocksize-maximum=32M");
  /* qemu-nbd's preferred size, whatever the format: the image plugin
   * prefers a qcow2 image's cluster size, which qemu-nbd never says.
   */
  argv_add (&p->argv, "blocksize-preferred=4096");
}

/* The parameters of the filters only a writable export has. */
static void
add_write_parameters (struct plan *p)
{
  const struct cmdline *c = p->cmd;

  if (p->coalesce)
    {
      if (c->cache == CACHE_WRITETHROUGH || c->cache == CACHE_DIRECTSYNC)
        argv_add (&p->argv, "coalesce-mode=writethrough");
      add_settings (p, DEST_COALESCE);
    }
  if (c->detect_zeroes == DZ_ON)
    argv_add (&p->argv, "zerodetect=on");
  else if (c->detect_zeroes == DZ_UNMAP)
    argv_add (&p->argv, "zerodetect=unmap");
  if (c->detect_zeroes != DZ_OFF)
    add_settings (p, DEST_ZERODETECT);
  /* --discard=ignore: trim is advertised and does nothing, and zero
   * requests may not free space (qemu drops MAY_UNMAP without
   * BDRV_O_UNMAP).
   */
  if (c->discard_unmap)
    argv_add (&p->argv, "discard=pass");
  else
    {
      argv_add (&p->argv, "discard=ignore");
      argv_add (&p->argv, "discard-zero-trim=never");
    }
  add_settings (p, DEST_DISCARD);
  /* writethrough/directsync: every write durable before its reply.
   * unsafe: flushes are not passed on.
   */
  if (c->cache == CACHE_WRITETHROUGH || c->cache == CACHE_DIRECTSYNC)
    argv_add (&p->argv, "fuamode=force");
  else if (c->cache == CACHE_UNSAFE)
    argv_add (&p->argv, "fuamode=discard");
}

void
plan_make (const struct cmdline *c, struct plan *p)
{
  p->cmd = c;
  plan_activation (p);
  if (settings_load (&p->settings, DEFAULT_CONFIG) == -1)
    exit (EXIT_FAILURE);
  plan_image (p);
  plan_alloc_depth (p);
  plan_coalesce (p);
  plan_nbdkit_debug (p);
  plan_malloc (p);
  plan_alignbuf (p);
  /* Our filters only load into the nbdkit they were built for. */
  nbdkit_check_version ();

  add_server_options (p);
  add_filters (p);
  /* The plugin, then every parameter of the plugin and the filters. */
  add_plugin (p);
  add_export_parameters (p);
  if (!p->readonly)
    add_write_parameters (p);
  if (p->have_range)
    {
      argv_addf (&p->argv, "offset=%" PRIu64, p->range_offset);
      argv_addf (&p->argv, "range=%" PRIu64, p->range_size);
    }
}
