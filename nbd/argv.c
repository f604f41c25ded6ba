/* nbdstack-nbd: the nbdkit command line, as it is built.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argv.h"
#include "die.h"

void
argv_add (struct argv_list *a, const char *s)
{
  if (a->n + 2 > a->cap)
    {
      a->cap = a->cap ? a->cap * 2 : 64;
      a->v = realloc (a->v, a->cap * sizeof *a->v);
      if (a->v == NULL)
        die ("out of memory");
    }
  a->v[a->n] = strdup (s);
  if (a->v[a->n] == NULL)
    die ("out of memory");
  a->v[++a->n] = NULL;
}

void
argv_addf (struct argv_list *a, const char *fmt, ...)
{
  va_list ap;
  char *s;
  int r;

  va_start (ap, fmt);
  r = vasprintf (&s, fmt, ap);
  va_end (ap);
  if (r == -1)
    die ("out of memory");
  argv_add (a, s);
  free (s);
}

void
argv_print (FILE *fp, char **argv)
{
  for (size_t i = 0; argv[i]; ++i)
    {
      const char *s = argv[i];

      if (i)
        fputc (' ', fp);
      if (*s
          && strspn (s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789-_=+./:,@%")
                 == strlen (s))
        fputs (s, fp);
      else
        {
          fputc ('\'', fp);
          for (; *s; ++s)
            {
              if (*s == '\'')
                fputs ("'\\''", fp);
              else
                fputc (*s, fp);
            }
          fputc ('\'', fp);
        }
    }
  fputc ('\n', fp);
}
