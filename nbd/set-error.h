/* nbdstack-nbd: the one error message a parse step hands back.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef NBDSTACK_NBD_SET_ERROR_H
#define NBDSTACK_NBD_SET_ERROR_H

/* Replace *err with the formatted message (NULL if out of memory) and
 * return -1, so that callers can write 'return set_error (...)'.
 */
extern int set_error (char **err, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

#endif /* NBDSTACK_NBD_SET_ERROR_H */
