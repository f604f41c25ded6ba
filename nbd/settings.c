/* nbdstack-nbd: NBDSTACK_OPTIONS and the config file.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filters/coalesce/coalesce-params.h"
#include "filters/discard/discard-params.h"
#include "filters/zerodetect/zerodetect-params.h"
#include "plugins/image/image-params.h"
#include "settings.h"

/* Every key there is: our own, then the components' parameters marked
 * PARAM_SETTING, expanded from their lists (param-table.h) so that a
 * parameter added to a component is a setting without a line here.
 * Values are checked by whoever receives them (nbdkit, the plugin, the
 * filter), which then refuses to start with a message naming the
 * parameter; only the key is checked here, so that a typo is not
 * silently ignored.
 */
struct known_key
{
  const char *key;
  const char *value; /* printed by --help after "key=" */
  unsigned flags;    /* PARAM_SETTING, or the key is not taken */
  enum setting_dest dest;
};

/* clang-format off */
#define KNOWN_PLUGIN(key, value, help, flags)                                  \
  { key, value, flags, DEST_PLUGIN },
#define KNOWN_COALESCE(key, value, help, flags)                                \
  { key, value, flags, DEST_COALESCE },
#define KNOWN_ZERODETECT(key, value, help, flags)                              \
  { key, value, flags, DEST_ZERODETECT },
#define KNOWN_DISCARD(key, value, help, flags)                                 \
  { key, value, flags, DEST_DISCARD },

static const struct known_key known[] = {
  { "coalesce", "on|off: the coalesce filter (default off)", PARAM_SETTING,
    DEST_SELF },
  COALESCE_PARAMS (KNOWN_COALESCE)
  ZERODETECT_PARAMS (KNOWN_ZERODETECT)
  DISCARD_PARAMS (KNOWN_DISCARD)
  IMAGE_PARAMS (KNOWN_PLUGIN)
  { "threads", "N: nbdkit -t, worker threads per connection (default 4; 2 "
    "with --shared other than 1)",
    PARAM_SETTING, DEST_NBDKIT },
  { "nbdkit-debug", "on|off: nbdkit -v, all of nbdkit's stderr", PARAM_SETTING,
    DEST_SELF },
  { "align-buffers",
    "on|off: nbdkit's request buffers page-aligned for O_DIRECT (default on)",
    PARAM_SETTING, DEST_SELF },
  { "malloc-hugepages",
    "on|off: nbdkit's large allocations on huge pages (default on)",
    PARAM_SETTING, DEST_SELF },
};
/* clang-format on */

#define N_KNOWN (sizeof known / sizeof known[0])

void
settings_print_keys (void)
{
  for (size_t i = 0; i < N_KNOWN; ++i)
    if (known[i].flags & PARAM_SETTING)
      printf ("  %s=%s\n", known[i].key, known[i].value);
}

const char *
settings_get (const struct settings *s, const char *key)
{
  for (size_t i = 0; i < s->n; ++i)
    if (strcmp (s->v[i].key, key) == 0)
      return s->v[i].value;
  return NULL;
}

/* Set KEY=VALUE (KEYLEN bytes of key), replacing an earlier value. */
static int
set (struct settings *s, const char *origin, unsigned line, const char *key,
     size_t keylen, const char *value, size_t valuelen)
{
  struct setting *v;
  size_t k;

  for (k = 0; k < N_KNOWN; ++k)
    if ((known[k].flags & PARAM_SETTING) && strlen (known[k].key) == keylen
        && strncmp (known[k].key, key, keylen) == 0)
      break;
  if (k == N_KNOWN)
    {
      if (line)
        fprintf (stderr, "nbdstack-nbd: %s:%u: unknown setting '%.*s'\n",
                 origin, line, (int)keylen, key);
      else
        fprintf (stderr, "nbdstack-nbd: %s: unknown setting '%.*s'\n", origin,
                 (int)keylen, key);
      return -1;
    }
  if (valuelen == 0)
    {
      fprintf (stderr, "nbdstack-nbd: %s: %s= needs a value\n", origin,
               known[k].key);
      return -1;
    }

  for (size_t i = 0; i < s->n; ++i)
    if (strcmp (s->v[i].key, known[k].key) == 0)
      {
        char *nv = strndup (value, valuelen);

        if (nv == NULL)
          goto oom;
        free (s->v[i].value);
        s->v[i].value = nv;
        s->v[i].origin = origin;
        return 0;
      }

  v = realloc (s->v, (s->n + 1) * sizeof *v);
  if (v == NULL)
    goto oom;
  s->v = v;
  v = &s->v[s->n];
  v->key = strdup (known[k].key);
  v->value = strndup (value, valuelen);
  v->dest = known[k].dest;
  v->origin = origin;
  if (v->key == NULL || v->value == NULL)
    goto oom;
  s->n++;
  return 0;
oom:
  fprintf (stderr, "nbdstack-nbd: out of memory\n");
  return -1;
}

/* One "key=value" word or line; LINE is 0 for NBDSTACK_OPTIONS. */
static int
set_item (struct settings *s, const char *origin, unsigned line,
          const char *item, size_t len)
{
  const char *eq = memchr (item, '=', len);
  size_t klen, vstart;

  if (eq == NULL)
    {
      if (line)
        fprintf (stderr, "nbdstack-nbd: %s:%u: expected key=value\n", origin,
                 line);
      else
        fprintf (stderr, "nbdstack-nbd: %s: expected key=value, not '%.*s'\n",
                 origin, (int)len, item);
      return -1;
    }
  klen = eq - item;
  while (klen > 0 && isspace ((unsigned char)item[klen - 1]))
    klen--;
  vstart = eq - item + 1;
  while (vstart < len && isspace ((unsigned char)item[vstart]))
    vstart++;
  while (len > vstart && isspace ((unsigned char)item[len - 1]))
    len--;
  return set (s, origin, line, item, klen, item + vstart, len - vstart);
}

static int
load_file (struct settings *s, const char *path, bool must_exist)
{
  FILE *fp = fopen (path, "re");
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  unsigned lineno = 0;
  int r = 0;

  if (fp == NULL)
    {
      if (errno == ENOENT && !must_exist)
        return 0;
      fprintf (stderr, "nbdstack-nbd: %s: %m\n", path);
      return -1;
    }
  while ((len = getline (&line, &cap, fp)) != -1)
    {
      char *p = line;

      lineno++;
      while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
      while (isspace ((unsigned char)*p))
        p++;
      if (*p == '\0' || *p == '#')
        continue;
      if (set_item (s, path, lineno, p, strlen (p)) == -1)
        {
          r = -1;
          break;
        }
    }
  free (line);
  fclose (fp);
  return r;
}

int
settings_load (struct settings *s, const char *default_config)
{
  const char *config = getenv ("NBDSTACK_CONFIG");
  const char *env = getenv ("NBDSTACK_OPTIONS");

  /* An explicitly named file must be there; the default one may not. */
  if (config && *config)
    {
      if (load_file (s, config, true) == -1)
        return -1;
    }
  else if (load_file (s, default_config, false) == -1)
    return -1;

  if (env)
    {
      const char *p = env;

      for (;;)
        {
          size_t n;

          while (isspace ((unsigned char)*p))
            p++;
          if (*p == '\0')
            break;
          n = strcspn (p, " \t\n");
          if (set_item (s, "NBDSTACK_OPTIONS", 0, p, n) == -1)
            return -1;
          p += n;
        }
    }
  return 0;
}
