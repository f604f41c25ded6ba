/* nbdstack-nbd: 'json:{...}' and --image-opts strings into flat options.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: both spellings of one graph of block nodes flatten to the
 * same list, as in qemu: nested objects become dotted keys
 * ({"file": {"filename": "a"}} is "file.filename" = "a"), and a key
 * given twice is an error.  imagespec.c interprets the list.
 */
#ifndef NBDSTACK_NBD_JSON_H
#define NBDSTACK_NBD_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum opt_type
{
  OPT_STRING,
  OPT_NUMBER,
  OPT_BOOL,
  OPT_NULL
};

/* One leaf of the flattened option tree. */
struct flat_opt
{
  char *key;   /* "file.filename" */
  char *value; /* text as given; "true"/"false" for JSON booleans */
  enum opt_type type;
  bool used; /* consumed by the interpreter */
};

struct flat_opts
{
  struct flat_opt *v;
  size_t n;
};

/* Parse the text after "json:" into OUT; -1 with a malloc'd *ERR. */
extern int json_flatten (const char *text, struct flat_opts *out, char **err);

/* Parse a QemuOpts string ("driver=raw,file.filename=a,,b") into OUT;
 * -1 with a malloc'd *ERR.
 */
extern int image_opts_flatten (const char *text, struct flat_opts *out,
                               char **err);

/* Free what OUT holds (not OUT itself). */
extern void flat_opts_free (struct flat_opts *opts);

#endif /* NBDSTACK_NBD_JSON_H */
