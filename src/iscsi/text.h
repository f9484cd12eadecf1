/* The key=value\0 text buffer and its iterator (RFC 7143 §6.1), text.c: what login and text
 * data segments are built in and read with; the key negotiation (keys.h) works on it. */
#ifndef LR_ISCSI_TEXT_H
#define LR_ISCSI_TEXT_H

#include <stdbool.h>
#include <stdint.h>

/* Text data is bounded so that a peer cannot make us allocate without limit: a whole login
 * or text exchange (all continuation PDUs together) is at most this many bytes. */
#define ISCSI_TEXT_MAX (64u * 1024u)
#define ISCSI_KEY_NAME_MAX 63 /* RFC 7143 §6.1 */

/* A growing key=value\0 buffer, capped at ISCSI_TEXT_MAX. */
struct iscsi_text {
    char *data;
    uint32_t len;
    uint32_t cap;
    bool overflow; /* an append did not fit */
};

void iscsi_text_init(struct iscsi_text *t);
void iscsi_text_free(struct iscsi_text *t);
void iscsi_text_reset(struct iscsi_text *t);
/* Append "key=value\0". Returns 0 or -1 (and sets overflow) if it would exceed the cap. */
int iscsi_text_add(struct iscsi_text *t, const char *key, const char *value);
int iscsi_text_addf(struct iscsi_text *t, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append raw bytes (continuation PDUs of one text). */
int iscsi_text_append(struct iscsi_text *t, const void *data, uint32_t len);

/* Walk a key=value\0 list. Returns 1 with key/value pointing into a scratch copy, 0 at the end,
 * -1 on a malformed pair (no '=', empty key, key too long, missing NUL terminator). */
struct iscsi_text_iter {
    const char *p, *end;
    char scratch[ISCSI_TEXT_MAX > 8192 ? 8192 : ISCSI_TEXT_MAX];
};
void iscsi_text_iter_init(struct iscsi_text_iter *it, const char *data, uint32_t len);
int iscsi_text_next(struct iscsi_text_iter *it, const char **key, const char **value);

#endif
