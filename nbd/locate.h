/* nbdstack-nbd: which nbdkit runs, and where our plugin and filters are.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: our filters are always named by path (never looked up in
 * nbdkit's own filterdir), and only run in the nbdkit version they were
 * built for (nbdkit_check_version).
 */
#ifndef NBDSTACK_NBD_LOCATE_H
#define NBDSTACK_NBD_LOCATE_H

/* The nbdkit to run: NBDSTACK_NBDKIT, else "nbdkit" from PATH. */
extern const char *nbdkit_program (void);

/* "1.32.5" from `nbdkit --version` (malloc'd), or NULL if it fails. */
extern char *nbdkit_version (void);

/* Exit with one line unless nbdkit runs and is the version we were
 * built for (instead of nbdkit's dlopen error later).
 */
extern void nbdkit_check_version (void);

/* The malloc'd path of our KIND ("plugin" or "filter") NAME, from the
 * build tree or the install directories; dies if it is not there.
 */
extern char *component_path (const char *kind, const char *name);

/* The malloc'd path of our preload library NAME ("alignbuf"), from the
 * build tree or the install directory; dies if it is not there.
 */
extern char *preload_path (const char *name);

#endif /* NBDSTACK_NBD_LOCATE_H */
