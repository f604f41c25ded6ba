/* nbdstack-nbd: the one-line messages of the command itself.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Every message starts with the program's name, as qemu-nbd's do; a
 * fatal one exits 1, qemu-nbd's status for anything it refuses.
 */
#ifndef NBDSTACK_NBD_DIE_H
#define NBDSTACK_NBD_DIE_H

/* "nbdstack-nbd", the name every message starts with. */
extern const char *const progname;

/* Print "PROGNAME: MESSAGE" on stderr and exit 1. */
extern void die (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2), noreturn));

/* Print "PROGNAME: warning: MESSAGE" on stderr. */
extern void warn (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

#endif /* NBDSTACK_NBD_DIE_H */
