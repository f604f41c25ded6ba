/* nbdstack-nbd: 'json:{...}' and --image-opts strings into flat options.
 * SPDX-License-Identifier: BSD-3-Clause
 *
 * qemu reads both into a dictionary and flattens nested objects into
 * dotted keys ({"file": {"filename": "a"}} is "file.filename" = "a"), so
 * the two spellings of one graph mean the same thing.  This does the
 * same, keeping each leaf's text and JSON type for the interpreter in
 * imagespec.c.  The JSON is qemu's dialect: standard JSON plus
 * single-quoted strings.
 */
#include <config.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "set-error.h"

struct parser
{
  const char *start;
  const char *p;
  struct flat_opts *out;
  char *err;
};

static int
json_error (struct parser *ps, const char *what)
{
  return set_error (&ps->err,
                    "Could not parse the JSON options: %s at byte %zu", what,
                    (size_t)(ps->p - ps->start));
}

static int
add_opt (struct flat_opts *out, char **err, const char *key, size_t keylen,
         const char *value, size_t valuelen, enum opt_type type)
{
  struct flat_opt *v;

  for (size_t i = 0; i < out->n; ++i)
    if (strlen (out->v[i].key) == keylen
        && memcmp (out->v[i].key, key, keylen) == 0)
      return set_error (err, "option '%.*s' is given twice", (int)keylen, key);

  v = realloc (out->v, (out->n + 1) * sizeof *v);
  if (v == NULL)
    return set_error (err, "out of memory");
  out->v = v;
  v = &out->v[out->n];
  v->key = strndup (key, keylen);
  v->value = strndup (value, valuelen);
  v->type = type;
  v->used = false;
  if (v->key == NULL || v->value == NULL)
    {
      free (v->key);
      free (v->value);
      return set_error (err, "out of memory");
    }
  out->n++;
  return 0;
}

void
flat_opts_free (struct flat_opts *opts)
{
  for (size_t i = 0; i < opts->n; ++i)
    {
      free (opts->v[i].key);
      free (opts->v[i].value);
    }
  free (opts->v);
  opts->v = NULL;
  opts->n = 0;
}

static void
skip_ws (struct parser *ps)
{
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

/* A growing byte buffer for decoded strings. */
struct buf
{
  char *s;
  size_t len, cap;
};

static int
buf_add (struct buf *b, const char *bytes, size_t n)
{
  if (b->len + n + 1 > b->cap)
    {
      size_t cap = b->cap ? b->cap * 2 : 64;
      char *s;

      while (cap < b->len + n + 1)
        cap *= 2;
      s = realloc (b->s, cap);
      if (s == NULL)
        return -1;
      b->s = s;
      b->cap = cap;
    }
  memcpy (b->s + b->len, bytes, n);
  b->len += n;
  b->s[b->len] = '\0';
  return 0;
}

static int
buf_add_utf8 (struct buf *b, unsigned long cp)
{
  char u[4];
  size_t n;

  if (cp < 0x80)
    {
      u[0] = cp;
      n = 1;
    }
  else if (cp < 0x800)
    {
      u[0] = 0xc0 | (cp >> 6);
      u[1] = 0x80 | (cp & 0x3f);
      n = 2;
    }
  else if (cp < 0x10000)
    {
      u[0] = 0xe0 | (cp >> 12);
      u[1] = 0x80 | ((cp >> 6) & 0x3f);
      u[2] = 0x80 | (cp & 0x3f);
      n = 3;
    }
  else
    {
      u[0] = 0xf0 | (cp >> 18);
      u[1] = 0x80 | ((cp >> 12) & 0x3f);
      u[2] = 0x80 | ((cp >> 6) & 0x3f);
      u[3] = 0x80 | (cp & 0x3f);
      n = 4;
    }
  return buf_add (b, u, n);
}

static int
hex4 (const char *p, unsigned long *out)
{
  *out = 0;
  for (int i = 0; i < 4; ++i)
    {
      int c = p[i];

      if (!isxdigit (c))
        return -1;
      *out = *out * 16 + (isdigit (c) ? c - '0' : tolower (c) - 'a' + 10);
    }
  return 0;
}

/* A quoted string (double or, as qemu allows, single quotes).  NUL
 * (\u0000) is refused: nothing downstream could carry it.
 */
static int
parse_string (struct parser *ps, struct buf *b)
{
  char quote = *ps->p++;

  b->len = 0;
  if (buf_add (b, "", 0) == -1)
    return set_error (&ps->err, "out of memory");
  for (;;)
    {
      char c = *ps->p;

      if (c == '\0')
        return json_error (ps, "unterminated string");
      if (c == quote)
        {
          ps->p++;
          return 0;
        }
      if ((unsigned char)c < 0x20)
        return json_error (ps, "control character in string");
      if (c != '\\')
        {
          if (buf_add (b, &c, 1) == -1)
            return set_error (&ps->err, "out of memory");
          ps->p++;
          continue;
        }
      ps->p++;
      c = *ps->p++;
      switch (c)
        {
        case '"':
        case '\'':
        case '\\':
        case '/':
          break;
        case 'b':
          c = '\b';
          break;
        case 'f':
          c = '\f';
          break;
        case 'n':
          c = '\n';
          break;
        case 'r':
          c = '\r';
          break;
        case 't':
          c = '\t';
          break;
        case 'u':
          {
            unsigned long cp, lo;

            if (hex4 (ps->p, &cp) == -1)
              return json_error (ps, "bad \\u escape");
            ps->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00)
              {
                if (ps->p[0] != '\\' || ps->p[1] != 'u'
                    || hex4 (ps->p + 2, &lo) == -1 || lo < 0xdc00
                    || lo > 0xdfff)
                  return json_error (ps, "bad surrogate pair");
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
              }
            else if (cp >= 0xdc00 && cp < 0xe000)
              return json_error (ps, "bad surrogate pair");
            if (cp == 0)
              return json_error (ps, "\\u0000 in string");
            if (buf_add_utf8 (b, cp) == -1)
              return set_error (&ps->err, "out of memory");
            continue;
          }
        default:
          ps->p--;
          return json_error (ps, "bad escape in string");
        }
      if (buf_add (b, &c, 1) == -1)
        return set_error (&ps->err, "out of memory");
    }
}

/* The JSON number grammar; the text is kept as it is. */
static int
scan_number (struct parser *ps)
{
  const char *p = ps->p;

  if (*p == '-')
    p++;
  if (*p == '0')
    p++;
  else if (isdigit ((unsigned char)*p))
    while (isdigit ((unsigned char)*p))
      p++;
  else
    return json_error (ps, "bad number");
  if (*p == '.')
    {
      p++;
      if (!isdigit ((unsigned char)*p))
        return json_error (ps, "bad number");
      while (isdigit ((unsigned char)*p))
        p++;
    }
  if (*p == 'e' || *p == 'E')
    {
      p++;
      if (*p == '+' || *p == '-')
        p++;
      if (!isdigit ((unsigned char)*p))
        return json_error (ps, "bad number");
      while (isdigit ((unsigned char)*p))
        p++;
    }
  ps->p = p;
  return 0;
}

static int parse_value (struct parser *ps, struct buf *key, int depth);

/* An object: each member's value is flattened under KEY + "." + name. */
static int
parse_object (struct parser *ps, struct buf *key, int depth)
{
  size_t base = key->len;
  struct buf name = { 0 };
  int r = -1;

  ps->p++; /* '{' */
  skip_ws (ps);
  if (*ps->p == '}')
    {
      ps->p++;
      return 0;
    }
  for (;;)
    {
      skip_ws (ps);
      if (*ps->p != '"' && *ps->p != '\'')
        {
          json_error (ps, "expected a member name");
          goto out;
        }
      if (parse_string (ps, &name) == -1)
        goto out;
      if (name.len == 0)
        {
          json_error (ps, "empty member name");
          goto out;
        }
      key->len = base;
      if ((base && buf_add (key, ".", 1) == -1)
          || buf_add (key, name.s, name.len) == -1)
        {
          set_error (&ps->err, "out of memory");
          goto out;
        }
      skip_ws (ps);
      if (*ps->p != ':')
        {
          json_error (ps, "expected ':'");
          goto out;
        }
      ps->p++;
      if (parse_value (ps, key, depth + 1) == -1)
        goto out;
      skip_ws (ps);
      if (*ps->p == ',')
        {
          ps->p++;
          continue;
        }
      if (*ps->p == '}')
        {
          ps->p++;
          break;
        }
      json_error (ps, "expected ',' or '}'");
      goto out;
    }
  r = 0;
out:
  key->len = base;
  if (key->s)
    key->s[base] = '\0';
  free (name.s);
  return r;
}

static int
parse_value (struct parser *ps, struct buf *key, int depth)
{
  const char *at;

  /* Each level is a layer of the block graph: nobody nests deeply. */
  if (depth > 32)
    return json_error (ps, "nested too deeply");
  skip_ws (ps);
  at = ps->p;
  switch (*ps->p)
    {
    case '{':
      return parse_object (ps, key, depth);
    case '[':
      return set_error (&ps->err, "option '%s': lists are not supported",
                        key->s ? key->s : "");
    case '"':
    case '\'':
      {
        struct buf s = { 0 };
        int r;

        if (parse_string (ps, &s) == -1)
          {
            free (s.s);
            return -1;
          }
        r = add_opt (ps->out, &ps->err, key->s, key->len, s.s, s.len,
                     OPT_STRING);
        free (s.s);
        return r;
      }
    case 't':
      if (strncmp (ps->p, "true", 4) != 0)
        break;
      ps->p += 4;
      return add_opt (ps->out, &ps->err, key->s, key->len, "true", 4, OPT_BOOL);
    case 'f':
      if (strncmp (ps->p, "false", 5) != 0)
        break;
      ps->p += 5;
      return add_opt (ps->out, &ps->err, key->s, key->len, "false", 5,
                      OPT_BOOL);
    case 'n':
      if (strncmp (ps->p, "null", 4) != 0)
        break;
      ps->p += 4;
      return add_opt (ps->out, &ps->err, key->s, key->len, "", 0, OPT_NULL);
    default:
      if (*ps->p == '-' || isdigit ((unsigned char)*ps->p))
        {
          if (scan_number (ps) == -1)
            return -1;
          return add_opt (ps->out, &ps->err, key->s, key->len, at, ps->p - at,
                          OPT_NUMBER);
        }
      break;
    }
  return json_error (ps, "unexpected character");
}

int
json_flatten (const char *text, struct flat_opts *out, char **err)
{
  struct parser ps = { .start = text, .p = text, .out = out };
  struct buf key = { 0 };
  int r = -1;

  *err = NULL;
  if (buf_add (&key, "", 0) == -1)
    return set_error (err, "out of memory");
  skip_ws (&ps);
  if (*ps.p != '{')
    json_error (&ps, "expected an object");
  else if (parse_value (&ps, &key, 0) == 0)
    {
      skip_ws (&ps);
      if (*ps.p != '\0')
        json_error (&ps, "trailing characters");
      else
        r = 0;
    }
  free (key.s);
  if (r == -1)
    {
      *err = ps.err;
      flat_opts_free (out);
    }
  return r;
}

/* QemuOpts syntax: comma-separated key=value, ",," stands for a comma
 * in a value.  As with qemu-nbd's --image-opts, a first item without
 * '=' is the value of the implied key "file", and a later one is a
 * flag: "key" means key=on, "nokey" key=off.
 */
int
image_opts_flatten (const char *text, struct flat_opts *out, char **err)
{
  const char *p = text;
  struct buf item = { 0 };
  int r = -1;

  *err = NULL;
  for (bool first = true; first || *p; first = false)
    {
      const char *eq;

      item.len = 0;
      if (buf_add (&item, "", 0) == -1)
        {
          set_error (err, "out of memory");
          goto out;
        }
      for (;;)
        {
          if (*p == '\0')
            break;
          if (*p == ',')
            {
              if (p[1] != ',')
                {
                  p++;
                  break;
                }
              p++; /* ",," is a comma */
            }
          if (buf_add (&item, p, 1) == -1)
            {
              set_error (err, "out of memory");
              goto out;
            }
          p++;
        }
      eq = strchr (item.s, '=');
      if (eq)
        {
          if (eq == item.s)
            {
              set_error (err, "Invalid parameter ''");
              goto out;
            }
          if (add_opt (out, err, item.s, eq - item.s, eq + 1, strlen (eq + 1),
                       OPT_STRING)
              == -1)
            goto out;
        }
      else if (first)
        {
          if (add_opt (out, err, "file", 4, item.s, item.len, OPT_STRING) == -1)
            goto out;
        }
      else if (item.len == 0)
        {
          set_error (err, "Invalid parameter ''");
          goto out;
        }
      else if (strncmp (item.s, "no", 2) == 0)
        {
          if (add_opt (out, err, item.s + 2, item.len - 2, "off", 3, OPT_STRING)
              == -1)
            goto out;
        }
      else if (add_opt (out, err, item.s, item.len, "on", 2, OPT_STRING) == -1)
        goto out;
    }
  r = 0;
out:
  free (item.s);
  if (r == -1)
    flat_opts_free (out);
  return r;
}
