/* nbdstack: size parameters with an error that names the parameter.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * Include after <nbdkit-plugin.h> or <nbdkit-filter.h>.
 */
#ifndef NBDSTACK_PARSE_SIZE_PARAM_H
#define NBDSTACK_PARSE_SIZE_PARAM_H

#include <stdint.h>
#include <string.h>

/* nbdkit_parse_size's own message does not name the parameter, so
 * reject malformed values here first with one line that does (digits,
 * then at most one unit letter).  Returns -1 after nbdkit_error.
 */
static inline int64_t
parse_size_param (const char *key, const char *value)
{
  size_t n = strspn (value, "0123456789");

  if (n == 0
      || (value[n] != '\0'
          && (value[n + 1] != '\0'
              || strchr ("bBkKmMgGtTpPeE", value[n]) == NULL)))
    {
      nbdkit_error ("%s=%s: expected a size such as 4096, 64K or 1M", key,
                    value);
      return -1;
    }
  return nbdkit_parse_size (value);
}

#endif /* NBDSTACK_PARSE_SIZE_PARAM_H */
