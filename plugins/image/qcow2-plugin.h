/* nbdstack image plugin: what the qcow2 format's files share.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * format-qcow2.c  the format's ops: open, serve, close (the glue over
 *                 lib/, which has no nbdkit dependency)
 * qcow2-chain.c   opening the top image, its backing chain and data
 *                 files, under the containment rules
 * qcow2-create.c  create=true|force format=qcow2
 * qcow2-config.c  the qcow2 parameters and their .config_complete check
 *
 * One way: format-qcow2.c -> qcow2-chain.c -> qcow2-config.c, and
 * qcow2-create.c -> qcow2-config.c.  Only the top image is ever
 * written; backing and data files are opened read-only.
 */
#ifndef NBDSTACK_IMAGE_QCOW2_PLUGIN_H
#define NBDSTACK_IMAGE_QCOW2_PLUGIN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "format.h"
#include "qcow2.h"

/* qcow2-config.c: the parameters, set by .config, read-only after. */
enum backing_mode
{
  BACKING_REFUSE,
  BACKING_NONE,
  BACKING_FOLLOW
};
struct qcow2_params
{
  int64_t l2_cache_size; /* 0 = library default */
  enum backing_mode backing_mode;
  char *backing_dir; /* NULL = the image's directory */
  unsigned backing_max_depth;
  char *snapshot;
  enum qcow2_layout layout;
  bool repair_leaks; /* repair=leaks */
  /* create=true only. */
  unsigned create_cluster_bits;
  bool create_extended_l2;
  bool create_preallocate;
  bool create_params_given; /* one of them was set */
};
extern struct qcow2_params qcow2_params;
/* .config for the qcow2 keys: 1 consumed, 0 not ours, -1 error. */
extern int qcow2_config (const char *key, const char *value);
/* .config_complete: the parameters fit the options (create=). */
extern int qcow2_config_complete (const struct image_options *opts);

/* qcow2-chain.c: one file of the chain, the top image, a backing file
 * or a data file.
 */
struct layer
{
  char *path; /* real path */
  dev_t dev;
  ino_t ino;
  struct qcow2_hostio *io;
  struct qcow2_image *img;      /* NULL for a raw file */
  struct qcow2_hostio *data_io; /* external data file, or NULL */
};
struct q2
{
  struct layer *layers; /* [0] is the top image */
  unsigned nlayers;
  char *root;                       /* real path of the allowed dir */
  bool writable;                    /* the top image is open for writing */
  const struct image_options *opts; /* the plugin's, for the whole run */
};
/* Open opts->file and everything it refers to into a new q2; NULL after
 * nbdkit_error.
 */
extern struct q2 *qcow2_chain_open (const struct image_options *opts);
/* Commit and close the top image (saying so when that fails), then the
 * rest of the chain; free q.
 */
extern void qcow2_chain_close (struct q2 *q);
/* Does the file start with the qcow2 magic?  0 or a negative errno. */
extern int qcow2_sniff (struct qcow2_hostio *io, bool *is_qcow2);

/* qcow2-create.c: format_ops.create for qcow2. */
extern int qcow2_glue_create (const char *file, int64_t size, bool force);

#endif /* NBDSTACK_IMAGE_QCOW2_PLUGIN_H */
