/* nbdstack image plugin: the qcow2 format's parameters.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: qcow2_params is written only here, during .config, and is
 * read-only once .config_complete has checked it; every key it takes is
 * listed in image-params.h.
 */
#include <config.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "format.h" /* <nbdkit-plugin.h> first */
#include "parse-enum-param.h"
#include "parse-size-param.h"
#include "qcow2-plugin.h"

struct qcow2_params qcow2_params = {
  .backing_mode = BACKING_REFUSE,
  .backing_max_depth = 16,
  .layout = QCOW2_LAYOUT_AUTO,
  .create_cluster_bits = 16,
};

static const struct enum_param_word backing_words[] = {
  { "refuse", BACKING_REFUSE },
  { "none", BACKING_NONE },
  { "follow", BACKING_FOLLOW },
};

enum preallocation
{
  PREALLOC_OFF,
  PREALLOC_METADATA
};
static const struct enum_param_word prealloc_words[] = {
  { "off", PREALLOC_OFF },
  { "metadata", PREALLOC_METADATA },
};

static const struct enum_param_word layout_words[] = {
  { "auto", QCOW2_LAYOUT_AUTO },
  { "linear", QCOW2_LAYOUT_LINEAR },
  { "compact", QCOW2_LAYOUT_COMPACT },
};

static int
config_l2_cache_size (const char *key, const char *value)
{
  qcow2_params.l2_cache_size = parse_size_param (key, value);
  if (qcow2_params.l2_cache_size == -1)
    return -1;
  if (qcow2_params.l2_cache_size == 0)
    {
      nbdkit_error ("l2-cache-size must be greater than 0");
      return -1;
    }
  return 1;
}

static int
config_backing_max_depth (const char *key, const char *value)
{
  if (nbdkit_parse_unsigned (key, value, &qcow2_params.backing_max_depth) == -1)
    return -1;
  if (qcow2_params.backing_max_depth > 255)
    {
      nbdkit_error ("backing-max-depth must be at most 255");
      return -1;
    }
  return 1;
}

static int
config_cluster_size (const char *key, const char *value)
{
  int64_t cs = parse_size_param (key, value);
  unsigned bits = 0;

  if (cs == -1)
    return -1;
  while (bits < 63 && (INT64_C (1) << bits) < cs)
    bits++;
  if (cs < 512 || cs > 2 * 1024 * 1024 || (INT64_C (1) << bits) != cs)
    {
      nbdkit_error ("cluster-size must be a power of 2 from 512 to 2M, "
                    "not %s",
                    value);
      return -1;
    }
  qcow2_params.create_cluster_bits = bits;
  qcow2_params.create_params_given = true;
  return 1;
}

/* A path or name parameter: a copy replaces the previous one. */
static int
config_string (char **dst, char *copy)
{
  if (copy == NULL)
    return -1;
  free (*dst);
  *dst = copy;
  return 1;
}

int
qcow2_config (const char *key, const char *value)
{
  int v;

  if (strcmp (key, "repair") == 0)
    {
      if (strcmp (value, "leaks") != 0)
        {
          nbdkit_error ("repair=%s: only repair=leaks is supported", value);
          return -1;
        }
      qcow2_params.repair_leaks = true;
      return 1;
    }
  if (strcmp (key, "l2-cache-size") == 0)
    return config_l2_cache_size (key, value);
  if (strcmp (key, "backing") == 0)
    {
      if (parse_enum_param (key, value, backing_words, &v) == -1)
        return -1;
      qcow2_params.backing_mode = v;
      return 1;
    }
  if (strcmp (key, "backing-dir") == 0)
    return config_string (&qcow2_params.backing_dir, nbdkit_realpath (value));
  if (strcmp (key, "backing-max-depth") == 0)
    return config_backing_max_depth (key, value);
  if (strcmp (key, "cluster-size") == 0)
    return config_cluster_size (key, value);
  if (strcmp (key, "extended-l2") == 0)
    {
      if (parse_bool_param (key, value, &qcow2_params.create_extended_l2) == -1)
        return -1;
      qcow2_params.create_params_given = true;
      return 1;
    }
  if (strcmp (key, "preallocation") == 0)
    {
      if (parse_enum_param (key, value, prealloc_words, &v) == -1)
        return -1;
      qcow2_params.create_preallocate = v == PREALLOC_METADATA;
      qcow2_params.create_params_given = true;
      return 1;
    }
  if (strcmp (key, "layout") == 0)
    {
      if (parse_enum_param (key, value, layout_words, &v) == -1)
        return -1;
      qcow2_params.layout = v;
      return 1;
    }
  if (strcmp (key, "snapshot") == 0)
    {
      char *copy = strdup (value);
      if (copy == NULL)
        nbdkit_error ("strdup: %m");
      return config_string (&qcow2_params.snapshot, copy);
    }
  return 0;
}

/* As nbdkit's file plugin checks its parameters: the create-only ones
 * without create= are a mistake.
 */
int
qcow2_config_complete (const struct image_options *opts)
{
  if (qcow2_params.create_params_given && !opts->create)
    {
      nbdkit_error ("cluster-size, extended-l2 and preallocation are only "
                    "used with create=true|force");
      return -1;
    }
  return 0;
}
