/* nbdstack image plugin: the interface every image format implements.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * image.c parses parameters, picks a format and forwards each nbdkit
 * callback to the format's ops.  A format opens its host file(s) once in
 * .get_ready and serves every connection from that shared state, so all
 * ops must be thread-safe (the plugin runs in the PARALLEL thread model).
 */
#ifndef NBDSTACK_IMAGE_FORMAT_H
#define NBDSTACK_IMAGE_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

enum image_cache_mode
{
  CACHE_WRITEBACK,
  CACHE_NONE
};

/* Parameters common to all formats, filled by image.c. */
struct image_options
{
  const char *file; /* absolute path */
  enum image_cache_mode cache;
  bool readonly; /* readonly=true: never open for writing */
  /* image-offset=, image-length= (format=qcow2 only): the image is the
   * bytes [image_offset, image_offset+image_length) of the file, or
   * from image_offset to its end when image_length < 0.
   */
  uint64_t image_offset;
  int64_t image_length;
  bool create; /* create=true|force was given (the image is made first) */
};

struct format_ops
{
  const char *name;

  /* Optional: format-specific parameters.  Return 1 if the key was
   * consumed, 0 if unknown to this format, -1 on error (after
   * nbdkit_error).  Called for every key image.c does not know.
   */
  int (*config) (const char *key, const char *value);
  /* Optional: called from .config_complete for the chosen format, once
   * opts is complete: checks that the parameters fit together.  0, or
   * -1 after nbdkit_error.
   */
  int (*config_complete) (const struct image_options *opts);
  /* Optional: create=true|force size=SIZE for this format (image.c
   * makes a sparse raw file when NULL).  'force' replaces an existing
   * image; without it an existing image of that size is used as it is.
   * 0, or -1 after nbdkit_error.
   */
  int (*create) (const char *file, int64_t size, bool force);

  /* Open the image; on error call nbdkit_error and return NULL. */
  void *(*open) (const struct image_options *opts);
  void (*close) (void *state);

  int64_t (*get_size) (void *state);
  /* Feature queries: return values have nbdkit's meaning.  A NULL op
   * means "false" (or NBDKIT_FUA_NONE / NBDKIT_CACHE_NONE).  A format
   * that provides one must also provide the data ops it enables (image.c
   * asserts it): can_write pwrite, can_flush and can_fua flush, can_trim
   * trim, can_zero zero, can_extents extents, can_cache cache.
   */
  int (*can_write) (void *state);
  int (*can_flush) (void *state);
  int (*can_trim) (void *state);
  int (*can_zero) (void *state);
  int (*can_fast_zero) (void *state);
  int (*can_fua) (void *state);
  int (*can_extents) (void *state);
  int (*can_cache) (void *state);
  int (*block_size) (void *state, uint32_t *minimum, uint32_t *preferred,
                     uint32_t *maximum);

  /* Data ops: same contracts as the nbdkit plugin callbacks.  On error
   * they call nbdkit_error and nbdkit_set_error and return -1.
   */
  int (*pread) (void *state, void *buf, uint32_t count, uint64_t offset,
                uint32_t flags);
  int (*pwrite) (void *state, const void *buf, uint32_t count, uint64_t offset,
                 uint32_t flags);
  int (*flush) (void *state, uint32_t flags);
  int (*trim) (void *state, uint32_t count, uint64_t offset, uint32_t flags);
  int (*zero) (void *state, uint32_t count, uint64_t offset, uint32_t flags);
  int (*extents) (void *state, uint32_t count, uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents);
  int (*cache) (void *state, uint32_t count, uint64_t offset, uint32_t flags);
};

extern const struct format_ops raw_format;
extern const struct format_ops qcow2_format;

/* Called by a format's open when the image it was asked to open for
 * writing may only be read (EACCES, EPERM, EROFS): the format serves it
 * read-only, and image.c refuses every connection that is not
 * read-only (nbdkit -r) with one line naming the file and 'err'.
 */
void image_note_unwritable (const char *path, int err);

/* A format's block status: the run at offset (at most max bytes, *len
 * >= 1) and its NBDKIT_EXTENT_* type.  0, or -1 after nbdkit_error.
 */
typedef int (*image_status_fn) (void *state, uint64_t offset, uint64_t max,
                                uint64_t *len, uint32_t *type);
/* An extents op from a block status: [offset, offset+count) (or only
 * its first run with NBDKIT_FLAG_REQ_ONE), never an extent past it.
 */
int image_add_extents (void *state, image_status_fn status, uint32_t count,
                       uint64_t offset, uint32_t flags,
                       struct nbdkit_extents *extents);

#endif /* NBDSTACK_IMAGE_FORMAT_H */
