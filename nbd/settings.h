/* nbdstack-nbd: our own choices, which qemu-nbd has no options for.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * The command line must stay exactly qemu-nbd's (pipelines pass it
 * unchanged, and every extra long option would change which
 * abbreviations getopt_long accepts), so the rest comes from a config
 * file and from NBDSTACK_OPTIONS, both "key=value" lists.
 */
#ifndef NBDSTACK_NBD_SETTINGS_H
#define NBDSTACK_NBD_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

/* Where a setting goes. */
enum setting_dest
{
  DEST_SELF,       /* interpreted here (coalesce=on|off) */
  DEST_NBDKIT,     /* an nbdkit option (threads) */
  DEST_PLUGIN,     /* an image plugin parameter */
  DEST_COALESCE,   /* a coalesce filter parameter */
  DEST_ZERODETECT, /* a zerodetect filter parameter */
  DEST_DISCARD     /* a discard filter parameter */
};

struct setting
{
  char *key;
  char *value;
  enum setting_dest dest;
  const char *origin; /* "NBDSTACK_OPTIONS" or the config file's path */
};

struct settings
{
  struct setting *v;
  size_t n;
};

/* Read the config file (NBDSTACK_CONFIG, or the default path if it
 * exists), then NBDSTACK_OPTIONS, which overrides it.  On error prints
 * one line and returns -1.
 */
extern int settings_load (struct settings *s, const char *default_config);

/* The value of KEY, or NULL. */
extern const char *settings_get (const struct settings *s, const char *key);

/* Print the known keys, "  key=VALUE" a line, for --help: ours, then
 * the components' PARAM_SETTING parameters (their <component>-params.h).
 */
extern void settings_print_keys (void);

#endif /* NBDSTACK_NBD_SETTINGS_H */
