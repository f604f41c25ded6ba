/* nbdstack-nbd: the nbdkit command line, as it is built.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Invariant: v is always NULL-terminated (v[n] == NULL once anything
 * has been added), so it can be passed to execvp as it is.
 */
#ifndef NBDSTACK_NBD_ARGV_H
#define NBDSTACK_NBD_ARGV_H

#include <stddef.h>
#include <stdio.h>

struct argv_list
{
  char **v;
  size_t n, cap;
};

/* Append a copy of S (dies if out of memory). */
extern void argv_add (struct argv_list *a, const char *s);

/* Append the formatted string (dies if out of memory). */
extern void argv_addf (struct argv_list *a, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

/* Print ARGV on FP as one shell-quoted line. */
extern void argv_print (FILE *fp, char **argv);

#endif /* NBDSTACK_NBD_ARGV_H */
