/* The key=value\0 text buffer and its iterator (RFC 7143 §6.1): building login/text data
 * segments under a hard cap, and walking a peer's data segment without trusting it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/text.h"

void iscsi_text_init(struct iscsi_text *t)
{
    memset(t, 0, sizeof(*t));
}

void iscsi_text_free(struct iscsi_text *t)
{
    free(t->data);
    memset(t, 0, sizeof(*t));
}

void iscsi_text_reset(struct iscsi_text *t)
{
    t->len = 0;
    t->overflow = false;
}

/* Make room for `need` more bytes; grows geometrically but never past ISCSI_TEXT_MAX. */
static int text_reserve(struct iscsi_text *t, size_t need)
{
    if (need > ISCSI_TEXT_MAX || t->len + need > ISCSI_TEXT_MAX) {
        t->overflow = true;
        return -1;
    }
    uint32_t want = t->len + (uint32_t)need;
    if (want <= t->cap)
        return 0;
    uint32_t cap = t->cap ? t->cap : 512;
    while (cap < want)
        cap *= 2;
    if (cap > ISCSI_TEXT_MAX)
        cap = ISCSI_TEXT_MAX;
    char *p = realloc(t->data, cap);
    if (!p) {
        t->overflow = true;
        return -1;
    }
    t->data = p;
    t->cap = cap;
    return 0;
}

int iscsi_text_add(struct iscsi_text *t, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    if (text_reserve(t, kl + vl + 2) < 0)
        return -1;
    memcpy(t->data + t->len, key, kl);
    t->data[t->len + kl] = '=';
    memcpy(t->data + t->len + kl + 1, value, vl);
    t->data[t->len + kl + 1 + vl] = '\0';
    t->len += (uint32_t)(kl + vl + 2);
    return 0;
}

int iscsi_text_addf(struct iscsi_text *t, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->overflow = true;
        return -1;
    }
    size_t kl = strlen(key);
    if (text_reserve(t, kl + (size_t)n + 2) < 0)
        return -1;
    char *p = t->data + t->len;
    memcpy(p, key, kl);
    p[kl] = '=';
    va_start(ap, fmt);
    vsnprintf(p + kl + 1, (size_t)n + 1, fmt, ap); /* writes the terminating NUL too */
    va_end(ap);
    t->len += (uint32_t)(kl + (size_t)n + 2);
    return 0;
}

int iscsi_text_append(struct iscsi_text *t, const void *data, uint32_t len)
{
    if (len == 0)
        return 0;
    if (text_reserve(t, len) < 0)
        return -1;
    memcpy(t->data + t->len, data, len);
    t->len += len;
    return 0;
}

void iscsi_text_iter_init(struct iscsi_text_iter *it, const char *data, uint32_t len)
{
    it->p = data;
    it->end = data ? data + len : data;
}

/* RFC 7143 §6.1: every pair is "key=value" followed by one NUL. A data segment is padded
 * to 4 bytes with zeros, so NULs between or after pairs are skipped rather than taken as
 * empty pairs. Only the first '=' splits: values may contain '=' (e.g. base64 CHAP values). */
int iscsi_text_next(struct iscsi_text_iter *it, const char **key, const char **value)
{
    while (it->p < it->end && *it->p == '\0')
        it->p++;
    if (it->p >= it->end)
        return 0;
    const char *nul = memchr(it->p, '\0', (size_t)(it->end - it->p));
    if (!nul) {
        it->p = it->end; /* a trailing pair without its NUL: malformed */
        return -1;
    }
    size_t n = (size_t)(nul - it->p);
    const char *start = it->p;
    it->p = nul + 1;
    if (n >= sizeof(it->scratch))
        return -1;
    memcpy(it->scratch, start, n + 1);
    char *eq = memchr(it->scratch, '=', n);
    if (!eq || eq == it->scratch || eq - it->scratch > ISCSI_KEY_NAME_MAX)
        return -1;
    *eq = '\0';
    *key = it->scratch;
    *value = eq + 1;
    return 1;
}
