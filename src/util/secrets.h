/* CHAP secrets files ("NAME SECRET" per line, '#' comment lines), shared by linerate-target
 * and linerate-bench. The file must be a regular file owned by the reader's user and closed
 * to group and others, so that secrets stay out of configs, command lines and `ps`. Only the
 * names asked for are kept; every buffer that held a line is wiped. Error messages name the
 * file, the line and the user, never a secret. */
#ifndef LR_UTIL_SECRETS_H
#define LR_UTIL_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRETS_MIN_LEN 12  /* RFC 7143 §12.1.3: at least 96 bits */
#define SECRETS_GOOD_LEN 16 /* 128 bits recommended: shorter ones are warned about */
#define SECRETS_MAX_LEN 255

struct secret_want {
    const char *name; /* the user whose secret is wanted */
    uint8_t *secret;  /* SECRETS_MAX_LEN bytes */
    size_t len;       /* set when found */
    bool found;
};

/* Read path and fill in the wanted secrets. Returns 0, or -1 with "PATH: reason" or
 * "PATH:LINE: reason" in err (a wanted name missing from the file is an error too). */
int secrets_load(const char *path, struct secret_want *want, unsigned nwant, char *err,
                 size_t errlen);

#endif
