/* nbdstack-nbd -L: list another server's exports, as qemu-nbd -L does.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * With libnbd in option mode: NBD_OPT_LIST for the names and
 * descriptions, then for each export NBD_OPT_INFO (size, flags, block
 * sizes) and NBD_OPT_LIST_META_CONTEXT (every context the server
 * offers), printed line for line as qemu-nbd 7.2 prints them.  The
 * transmission flags are rebuilt from libnbd's can_* answers, bit by
 * bit as the protocol numbers them; libnbd does not report
 * NBD_FLAG_SEND_RESIZE, so "resize" is never shown.  qemu-nbd 8.2 and
 * later print one more line per export, "transaction size", which 7.2
 * does not.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>

#include "list.h"

struct export { char *name, *description; };

struct exports
{
  struct export *v;
  size_t n;
  bool oom;
};

static int
add_export (void *opaque, const char *name, const char *description)
{
  struct exports *e = opaque;
  struct export *v = realloc (e->v, (e->n + 1) * sizeof *v);

  if (v == NULL)
    {
      e->oom = true;
      return 0;
    }
  e->v = v;
  v[e->n].name = strdup (name);
  v[e->n].description = strdup (description);
  if (v[e->n].name == NULL || v[e->n].description == NULL)
    {
      free (v[e->n].name);
      free (v[e->n].description);
      e->oom = true;
      return 0;
    }
  e->n++;
  return 0;
}

struct contexts
{
  char **v;
  size_t n;
  bool oom;
};

static int
add_context (void *opaque, const char *name)
{
  struct contexts *c = opaque;
  char **v = realloc (c->v, (c->n + 1) * sizeof *v);

  if (v == NULL || (v[c->n] = strdup (name)) == NULL)
    {
      if (v)
        c->v = v;
      c->oom = true;
      return 0;
    }
  c->v = v;
  c->n++;
  return 0;
}

/* The transmission flags qemu-nbd prints, by protocol bit. */
static const char *const flag_names[] = {
  NULL,     "readonly", "flush", "fua",    "rotational", "trim",
  "zeroes", "df",       "multi", "resize", "cache",      "fast-zero",
};

static unsigned
flags_of (struct nbd_handle *h)
{
  int (*const tests[]) (struct nbd_handle *) = {
    NULL,         nbd_is_read_only,  nbd_can_flush,
    nbd_can_fua,  nbd_is_rotational, nbd_can_trim,
    nbd_can_zero, nbd_can_df,        nbd_can_multi_conn,
    NULL,         nbd_can_cache,     nbd_can_fast_zero,
  };
  unsigned flags = 1; /* NBD_FLAG_HAS_FLAGS */

  for (size_t bit = 1; bit < sizeof tests / sizeof tests[0]; ++bit)
    if (tests[bit] && tests[bit](h) == 1)
      flags |= 1u << bit;
  return flags;
}

/* NBD_OPT_INFO and the contexts of export E, printed. */
static int
print_export (struct nbd_handle *h, const struct export *e)
{
  struct contexts c = { 0 };
  nbd_context_callback cb = { .callback = add_context, .user_data = &c };
  int64_t size, min, pref, max;
  unsigned flags;
  int r = -1;

  if (nbd_set_export_name (h, e->name) == -1 || nbd_opt_info (h) == -1)
    return -1;
  size = nbd_get_size (h);
  if (size == -1)
    return -1;
  flags = flags_of (h);
  min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  pref = nbd_get_block_size (h, LIBNBD_SIZE_PREFERRED);
  max = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);
  if (nbd_opt_list_meta_context (h, cb) == -1)
    goto out;
  if (c.oom)
    {
      fprintf (stderr, "out of memory\n");
      goto out;
    }

  printf (" export: '%s'\n", e->name);
  if (*e->description)
    printf ("  description: %s\n", e->description);
  printf ("  size:  %" PRIi64 "\n", size);
  printf ("  flags: 0x%x (", flags);
  for (size_t bit = 0; bit < sizeof flag_names / sizeof flag_names[0]; ++bit)
    if (flag_names[bit] && (flags & (1u << bit)))
      printf (" %s", flag_names[bit]);
  printf (" )\n");
  if (min > 0)
    {
      printf ("  min block: %" PRIi64 "\n", min);
      printf ("  opt block: %" PRIi64 "\n", pref);
      printf ("  max block: %" PRIi64 "\n", max);
    }
  if (c.n)
    {
      printf ("  available meta contexts: %zu\n", c.n);
      for (size_t i = 0; i < c.n; ++i)
        printf ("   %s\n", c.v[i]);
    }
  r = 0;
out:
  for (size_t i = 0; i < c.n; ++i)
    free (c.v[i]);
  free (c.v);
  return r;
}

int
list_exports (const char *progname, const char *sockpath, const char *host,
              const char *port)
{
  struct exports e = { 0 };
  nbd_list_callback cb = { .callback = add_export, .user_data = &e };
  struct nbd_handle *h = nbd_create ();
  int r, ret = EXIT_FAILURE;

  if (h == NULL || nbd_set_opt_mode (h, true) == -1
      || nbd_set_full_info (h, true) == -1)
    {
      fprintf (stderr, "%s: %s\n", progname, nbd_get_error ());
      goto out;
    }
  if (!sockpath)
    {
      host = host ? host : "0.0.0.0";
      port = port ? port : "10809";
    }
  r = sockpath ? nbd_connect_unix (h, sockpath)
               : nbd_connect_tcp (h, host, port);
  if (r == -1)
    {
      int err = nbd_get_errno ();

      /* qemu-nbd's words when the server cannot be reached. */
      if (err && !nbd_aio_is_negotiating (h))
        {
          if (sockpath)
            fprintf (stderr, "%s: Failed to connect to '%s': %s\n", progname,
                     sockpath, strerror (err));
          else
            fprintf (stderr, "%s: Failed to connect to '%s:%s': %s\n", progname,
                     host, port, strerror (err));
        }
      else
        fprintf (stderr, "%s: %s\n", progname, nbd_get_error ());
      goto out;
    }
  if (nbd_opt_list (h, cb) == -1)
    {
      fprintf (stderr, "%s: %s\n", progname, nbd_get_error ());
      goto out;
    }
  if (e.oom)
    {
      fprintf (stderr, "%s: out of memory\n", progname);
      goto out;
    }
  printf ("exports available: %zu\n", e.n);
  for (size_t i = 0; i < e.n; ++i)
    if (print_export (h, &e.v[i]) == -1)
      {
        fflush (stdout);
        fprintf (stderr, "%s: %s\n", progname, nbd_get_error ());
        goto out;
      }
  nbd_opt_abort (h);
  ret = EXIT_SUCCESS;
out:
  for (size_t i = 0; i < e.n; ++i)
    {
      free (e.v[i].name);
      free (e.v[i].description);
    }
  free (e.v);
  nbd_close (h);
  return ret;
}
