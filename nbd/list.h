/* nbdstack-nbd -L: list another server's exports, as qemu-nbd -L does.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_NBD_LIST_H
#define NBDSTACK_NBD_LIST_H

/* Connect to the server at SOCKPATH (a Unix socket), or else at HOST
 * and PORT, and print its exports on stdout in qemu-nbd 7.2's -L format.
 * Returns the exit status (1 with a message on stderr on failure).
 */
extern int list_exports (const char *progname, const char *sockpath,
                         const char *host, const char *port);

#endif /* NBDSTACK_NBD_LIST_H */
