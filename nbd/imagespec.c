/* nbdstack-nbd: interpret qemu-nbd's FILE argument.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * See imagespec.h for the graphs that are accepted.  The messages for
 * inputs qemu refuses too follow qemu's wording, so that a log reads
 * the same whichever server produced it.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imagespec.h"
#include "json.h"
#include "parse-size-arg.h"
#include "set-error.h"

int
parse_qemu_size (const char *text, uint64_t *out)
{
  char *end;
  unsigned long long v;
  int shift;

  /* strtoull would take "-1" and leading blanks; qemu refuses both
   * here.
   */
  if (text[0] < '0' || text[0] > '9')
    return -1;
  errno = 0;
  v = strtoull (text, &end, 10);
  if (errno)
    return -1;
  shift = size_suffix_shift (*end);
  if (shift < 0)
    return -1;
  if (*end)
    end++;
  if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
    return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* The options of one graph, and which of them have been looked at. */
struct interp
{
  struct flat_opts *opts;
  struct image_spec *spec;
  char **err;
};

static struct flat_opt *
find (struct interp *in, const char *prefix, const char *name)
{
  size_t plen = strlen (prefix);

  for (size_t i = 0; i < in->opts->n; ++i)
    {
      struct flat_opt *o = &in->opts->v[i];

      if (strncmp (o->key, prefix, plen) == 0
          && strcmp (o->key + plen, name) == 0)
        return o;
    }
  return NULL;
}

/* Is any option under PREFIX + NAME + "." given? */
static bool
has_child (struct interp *in, const char *prefix, const char *name)
{
  size_t plen = strlen (prefix), nlen = strlen (name);

  for (size_t i = 0; i < in->opts->n; ++i)
    {
      const char *k = in->opts->v[i].key;

      if (strncmp (k, prefix, plen) == 0 && strncmp (k + plen, name, nlen) == 0
          && k[plen + nlen] == '.')
        return true;
    }
  return false;
}

/* Take a string option (JSON numbers and booleans are accepted as
 * their text, as qemu's keyval does).
 */
static const char *
take_string (struct interp *in, const char *prefix, const char *name)
{
  struct flat_opt *o = find (in, prefix, name);

  if (o == NULL)
    return NULL;
  o->used = true;
  return o->value;
}

static int
take_uint (struct interp *in, const char *prefix, const char *name,
           bool *present, uint64_t *out)
{
  struct flat_opt *o = find (in, prefix, name);

  *present = false;
  if (o == NULL)
    return 0;
  o->used = true;
  if (o->type == OPT_NUMBER)
    {
      /* JSON: an integer, or a float with an integral value (qemu
       * takes 1024.0 as 1024).
       */
      char *end;
      double d;

      if (strpbrk (o->value, ".eE") == NULL && o->value[0] != '-'
          && parse_qemu_size (o->value, out) == 0)
        {
          *present = true;
          return 0;
        }
      errno = 0;
      d = strtod (o->value, &end);
      if (errno == 0 && *end == '\0' && d >= 0 && d < 0x1p63
          && (double)(uint64_t)d == d)
        {
          *out = (uint64_t)d;
          *present = true;
          return 0;
        }
    }
  else if (o->type == OPT_STRING && parse_qemu_size (o->value, out) == 0)
    {
      *present = true;
      return 0;
    }
  return set_error (in->err,
                    "Parameter '%s%s' expects a non-negative "
                    "integer",
                    prefix, name);
}

static int
take_bool (struct interp *in, const char *prefix, const char *name, bool *out)
{
  struct flat_opt *o = find (in, prefix, name);

  if (o == NULL)
    return 0;
  o->used = true;
  if (strcmp (o->value, "true") == 0 || strcmp (o->value, "on") == 0)
    *out = true;
  else if (strcmp (o->value, "false") == 0 || strcmp (o->value, "off") == 0)
    *out = false;
  else
    return set_error (in->err, "Parameter '%s%s' expects 'on' or 'off'", prefix,
                      name);
  return 0;
}

enum layer_kind
{
  LAYER_PROTOCOL,
  LAYER_FORMAT,
  LAYER_RANGE
};

/* Drivers qemu has that this command does not serve: named, so that
 * the refusal says it is a choice, not a typo.
 */
static const char *const known_drivers[] = { "blkdebug",
                                             "blklogwrites",
                                             "blkreplay",
                                             "blkverify",
                                             "bochs",
                                             "cloop",
                                             "compress",
                                             "copy-before-write",
                                             "copy-on-read",
                                             "dmg",
                                             "ftp",
                                             "ftps",
                                             "gluster",
                                             "host_cdrom",
                                             "http",
                                             "https",
                                             "iscsi",
                                             "luks",
                                             "nbd",
                                             "nfs",
                                             "null-aio",
                                             "null-co",
                                             "nvme",
                                             "parallels",
                                             "preallocate",
                                             "qcow",
                                             "qed",
                                             "quorum",
                                             "rbd",
                                             "replication",
                                             "snapshot-access",
                                             "ssh",
                                             "throttle",
                                             "vdi",
                                             "vhdx",
                                             "vmdk",
                                             "vpc",
                                             "vvfat",
                                             NULL };

static int
unsupported_driver (struct interp *in, const char *driver)
{
  for (size_t i = 0; known_drivers[i]; ++i)
    if (strcmp (driver, known_drivers[i]) == 0)
      return set_error (in->err,
                        "driver '%s' is not supported by nbdstack-nbd "
                        "(raw, qcow2, file and host_device are)",
                        driver);
  return set_error (in->err, "Unknown driver '%s'", driver);
}

static int interpret_layer (struct interp *in, const char *prefix,
                            const char *fmt, enum layer_kind *kind);

/* A protocol node at PREFIX (driver file or host_device). */
static int
protocol_layer (struct interp *in, const char *prefix, const char *driver,
                enum layer_kind *kind)
{
  struct image_spec *spec = in->spec;
  const char *filename = take_string (in, prefix, "filename");

  if (filename == NULL)
    return set_error (in->err, "Parameter '%sfilename' is required", prefix);
  spec->path = strdup (filename);
  if (spec->path == NULL)
    return set_error (in->err, "out of memory");
  spec->protocol = driver[0] == 'f' ? PROTOCOL_FILE : PROTOCOL_HOST_DEVICE;
  /* A protocol node alone is served byte for byte, unprobed. */
  if (*prefix == '\0')
    spec->format = FORMAT_RAW;
  *kind = LAYER_PROTOCOL;
  return 0;
}

/* A qcow2 node's "backing": only null is taken. */
static int
take_backing (struct interp *in, const char *prefix)
{
  struct flat_opt *o = find (in, prefix, "backing");

  if (o == NULL)
    return 0;
  o->used = true;
  if (o->type != OPT_NULL && o->value[0] != '\0')
    return set_error (in->err,
                      "%sbacking='%s': only \"backing\": null is "
                      "supported (the image's own backing chain "
                      "is followed without it)",
                      prefix, o->value);
  in->spec->backing_none = true;
  return 0;
}

/* qcow2 over raw over a protocol node: the raw node's byte range (if
 * any) is where the qcow2 image lies in the file.  Makes *CHILD_KIND
 * LAYER_PROTOCOL if it folds the range.
 */
static void
fold_image_range (struct interp *in, const char *child,
                  enum layer_kind *child_kind)
{
  struct image_spec *spec = in->spec;
  const char *cd = take_string (in, child, "driver");

  if (cd && strcmp (cd, "raw") == 0)
    {
      spec->has_image_range = spec->has_range;
      spec->image_offset = spec->range_offset;
      spec->has_image_length = spec->has_range_size;
      spec->image_length = spec->range_size;
      spec->has_range = spec->has_range_size = false;
      spec->range_offset = spec->range_size = 0;
      *child_kind = LAYER_PROTOCOL;
    }
}

/* A format node at PREFIX (qcow2, or probed when DRIVER is NULL) over
 * CHILD, which must be the file: the plugin opens a path.
 */
static int
format_layer (struct interp *in, const char *prefix, const char *child,
              const char *driver, enum layer_kind *kind)
{
  struct image_spec *spec = in->spec;
  enum layer_kind child_kind;

  if (driver && take_backing (in, prefix) == -1)
    return -1;
  if (interpret_layer (in, child, NULL, &child_kind) == -1)
    return -1;
  if (driver && child_kind != LAYER_PROTOCOL && spec->format == FORMAT_RAW
      && !spec->has_image_range)
    fold_image_range (in, child, &child_kind);
  if (child_kind != LAYER_PROTOCOL)
    {
      if (driver)
        return set_error (in->err,
                          "%s over a raw node over another format is not "
                          "supported (only over a file or a byte range of "
                          "one)",
                          driver);
      return set_error (in->err, "a probed format over a raw node is not "
                                 "supported (name the driver: qcow2 or raw)");
    }
  spec->format = driver ? FORMAT_QCOW2 : FORMAT_PROBE;
  *kind = LAYER_FORMAT;
  return 0;
}

/* A raw node at PREFIX: a byte range of CHILD, which may be a file or a
 * format.
 */
static int
range_layer (struct interp *in, const char *prefix, const char *child,
             enum layer_kind *kind)
{
  struct image_spec *spec = in->spec;
  enum layer_kind child_kind;
  bool has_offset, has_size;
  uint64_t offset = 0, size = 0;

  if (take_uint (in, prefix, "offset", &has_offset, &offset) == -1
      || take_uint (in, prefix, "size", &has_size, &size) == -1)
    return -1;
  if (interpret_layer (in, child, NULL, &child_kind) == -1)
    return -1;
  if (child_kind == LAYER_RANGE)
    return set_error (in->err, "a raw node over another raw node is not "
                               "supported");
  if (child_kind == LAYER_PROTOCOL)
    spec->format = FORMAT_RAW;
  if (!has_offset && !has_size)
    {
      *kind = child_kind == LAYER_PROTOCOL ? LAYER_FORMAT : child_kind;
      return 0;
    }
  /* qemu refuses sizes that are not whole sectors, so that rounding up
   * cannot leak bytes beyond the range.
   */
  if (has_size && size % 512 != 0)
    return set_error (in->err, "Specified size is not multiple of 512");
  spec->has_range = true;
  spec->range_offset = offset;
  spec->has_range_size = has_size;
  spec->range_size = size;
  *kind = LAYER_RANGE;
  return 0;
}

/* A node without a driver of its own kind: a reference to another node
 * (refused), {"file": {"filename": ...}} (the protocol picked from the
 * filename, as qemu does), or one with no "file" child (refused).  1 if
 * it is none of these, and the node is a format or range over its
 * "file" child.
 */
static int
childless_layer (struct interp *in, const char *prefix, const char *driver,
                 enum layer_kind *kind)
{
  struct image_spec *spec = in->spec;
  struct flat_opt *o = find (in, prefix, "file");

  if (o)
    {
      o->used = true;
      if (o->type == OPT_NULL)
        return set_error (in->err, "Parameter '%sfile' cannot be null", prefix);
      return set_error (in->err,
                        "%sfile='%s': references to other block nodes are "
                        "not supported",
                        prefix, o->value);
    }
  if (driver == NULL && *prefix != '\0' && find (in, prefix, "filename"))
    {
      spec->path = strdup (take_string (in, prefix, "filename"));
      if (spec->path == NULL)
        return set_error (in->err, "out of memory");
      spec->protocol = PROTOCOL_ANY;
      *kind = LAYER_PROTOCOL;
      return 0;
    }
  if (!has_child (in, prefix, "file"))
    {
      if (driver == NULL)
        return set_error (in->err, "Must specify either driver or file");
      if (strcmp (driver, "raw") == 0 || strcmp (driver, "qcow2") == 0)
        return set_error (in->err,
                          "A block device must be specified for "
                          "\"%sfile\"",
                          prefix);
      return unsupported_driver (in, driver);
    }
  if (driver && strcmp (driver, "raw") != 0 && strcmp (driver, "qcow2") != 0)
    return unsupported_driver (in, driver);
  return 1;
}

/* The node at PREFIX ("" or "file." or "file.file."...). */
static int
interpret_layer (struct interp *in, const char *prefix, const char *fmt,
                 enum layer_kind *kind)
{
  struct flat_opt *o;
  const char *driver;
  char *child;
  bool ro = false;
  int r;

  if (take_bool (in, prefix, "read-only", &ro) == -1)
    return -1;
  in->spec->read_only |= ro;

  o = find (in, prefix, "driver");
  driver = take_string (in, prefix, "driver");
  if (o && o->type != OPT_STRING)
    return set_error (in->err, "Parameter '%sdriver' expects a string", prefix);
  if (fmt && *prefix == '\0')
    {
      if (driver && strcmp (driver, fmt) != 0)
        return set_error (in->err, "Cannot specify both -f %s and driver '%s'",
                          fmt, driver);
      driver = fmt;
    }

  if (driver
      && (strcmp (driver, "file") == 0 || strcmp (driver, "host_device") == 0))
    return protocol_layer (in, prefix, driver, kind);
  /* Every other node is a format (or range) over a "file" child. */
  r = childless_layer (in, prefix, driver, kind);
  if (r != 1)
    return r;
  if (asprintf (&child, "%sfile.", prefix) == -1)
    return set_error (in->err, "out of memory");
  if (driver == NULL || strcmp (driver, "qcow2") == 0)
    r = format_layer (in, prefix, child, driver, kind);
  else
    r = range_layer (in, prefix, child, kind);
  free (child);
  return r;
}

/* qemu's path_has_protocol: "proto:rest" with no '/' before the ':'. */
static const char *
protocol_prefix_end (const char *filename)
{
  size_t n = strcspn (filename, ":/");

  return filename[n] == ':' ? filename + n : NULL;
}

static int
interpret_opts (struct flat_opts *opts, const char *format,
                struct image_spec *spec, char **err)
{
  struct interp in = { .opts = opts, .spec = spec, .err = err };
  enum layer_kind kind;

  if (interpret_layer (&in, "", format, &kind) == -1)
    return -1;
  for (size_t i = 0; i < opts->n; ++i)
    if (!opts->v[i].used)
      return set_error (err, "option '%s' is not supported by nbdstack-nbd",
                        opts->v[i].key);
  return 0;
}

int
image_spec_parse (const char *filename, bool image_opts, const char *format,
                  struct image_spec *spec, char **err)
{
  struct flat_opts opts = { 0 };
  const char *colon;
  int r;

  *err = NULL;
  memset (spec, 0, sizeof *spec);

  if (image_opts)
    {
      if (format)
        return set_error (err, "--image-opts and -f are mutually exclusive");
      if (image_opts_flatten (filename, &opts, err) == -1)
        return -1;
      r = interpret_opts (&opts, NULL, spec, err);
      flat_opts_free (&opts);
      return r;
    }

  if (strncmp (filename, "json:", 5) == 0)
    {
      if (json_flatten (filename + 5, &opts, err) == -1)
        return -1;
      r = interpret_opts (&opts, format, spec, err);
      flat_opts_free (&opts);
      return r;
    }

  /* A plain filename, maybe with a protocol prefix. */
  spec->protocol = PROTOCOL_ANY;
  colon = protocol_prefix_end (filename);
  if (colon)
    {
      size_t n = colon - filename;

      if (n == 4 && strncmp (filename, "file", 4) == 0)
        spec->protocol = PROTOCOL_FILE;
      else if (n == 11 && strncmp (filename, "host_device", 11) == 0)
        spec->protocol = PROTOCOL_HOST_DEVICE;
      else
        {
          for (size_t i = 0; known_drivers[i]; ++i)
            if (strlen (known_drivers[i]) == n
                && strncmp (filename, known_drivers[i], n) == 0)
              return set_error (err,
                                "protocol '%.*s' is not supported by "
                                "nbdstack-nbd (local files and block "
                                "devices are)",
                                (int)n, filename);
          return set_error (err, "Unknown protocol '%.*s'", (int)n, filename);
        }
      filename = colon + 1;
    }
  spec->path = strdup (filename);
  if (spec->path == NULL)
    return set_error (err, "out of memory");
  if (format == NULL)
    spec->format = FORMAT_PROBE;
  else if (strcmp (format, "raw") == 0)
    spec->format = FORMAT_RAW;
  else if (strcmp (format, "qcow2") == 0)
    spec->format = FORMAT_QCOW2;
  else if (strcmp (format, "file") == 0 || strcmp (format, "host_device") == 0)
    {
      spec->format = FORMAT_RAW;
      spec->protocol = format[0] == 'f' ? PROTOCOL_FILE : PROTOCOL_HOST_DEVICE;
    }
  else
    {
      struct interp in = { .spec = spec, .err = err };

      return unsupported_driver (&in, format);
    }
  return 0;
}

void
image_spec_free (struct image_spec *spec)
{
  free (spec->path);
  spec->path = NULL;
}
