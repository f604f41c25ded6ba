/* nbdstack-nbd: what qemu-nbd's FILE argument names.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * qemu-nbd takes a plain filename, a 'json:{...}' pseudo-filename or,
 * with --image-opts, a 'key=value,...' list.  The last two describe a
 * graph of block nodes; qemu flattens it into dotted keys
 * ("file.filename") before it looks at it, and so do we.  Only the
 * graphs the image plugin and the offset filter can serve are accepted:
 *
 *   [raw (offset, size)] over [qcow2 | raw | probed format] over
 *   file | host_device
 *   [raw (offset, size)] over qcow2 over raw (offset, size) over
 *   file | host_device
 *
 * Anything else is refused with one line that names the option.
 */
#ifndef NBDSTACK_NBD_IMAGESPEC_H
#define NBDSTACK_NBD_IMAGESPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum image_format
{
  FORMAT_PROBE, /* look at the file, as qemu does without -f */
  FORMAT_RAW,
  FORMAT_QCOW2
};

enum image_protocol
{
  PROTOCOL_ANY,        /* plain filename: a file or a block device */
  PROTOCOL_FILE,       /* must be a regular file */
  PROTOCOL_HOST_DEVICE /* must be a block device */
};

struct image_spec
{
  char *path;
  enum image_protocol protocol;
  enum image_format format;
  bool backing_none; /* "backing": null */
  bool read_only;    /* "read-only": true on some layer */

  /* qcow2 over a raw layer with offset and/or size over the file (a
   * disk inside an OVA): the image is that byte range of the file
   * (plugin image-offset=, image-length=).
   */
  bool has_image_range;
  uint64_t image_offset;
  bool has_image_length;
  uint64_t image_length;

  /* A raw layer with offset and/or size above the format layer. */
  bool has_range;
  uint64_t range_offset;
  bool has_range_size;
  uint64_t range_size;
};

/* Interpret FILENAME (with IMAGE_OPTS set: a --image-opts string) and
 * the -f FORMAT (or NULL).  On error returns -1 and sets *ERR.
 */
extern int image_spec_parse (const char *filename, bool image_opts,
                             const char *format, struct image_spec *spec,
                             char **err);

/* Free what SPEC holds (not SPEC itself). */
extern void image_spec_free (struct image_spec *spec);

/* qemu's size syntax: a number with an optional K, M, G, T, P or E
 * suffix (powers of 1024).  Returns -1 if TEXT is not one.
 */
extern int parse_qemu_size (const char *text, uint64_t *out);

#endif /* NBDSTACK_NBD_IMAGESPEC_H */
