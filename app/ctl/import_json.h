/* What the importers (`linerate-ctl import lio`, `import ceph-iscsi`) share: reading a
 * foreign JSON configuration with messages that name the place ("targets[0].tpgs[1]: 'port'
 * is not an integer"), the report of what does not carry over, the texts linerate.conf can
 * hold, the CHAP secrets file and the all-or-nothing write of the results (import_write.c). */
#ifndef LR_CTL_IMPORT_JSON_H
#define LR_CTL_IMPORT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

/* One import's state for the helpers below. */
struct imp {
    const char *file; /* the input, named in messages */
    FILE *report;     /* one line per thing not carried */
    json_t *secrets;  /* CHAP user -> secret */
    bool lossy;       /* something a host sees was not carried */
    bool failed;      /* malformed input: nothing is written */
    char *err;
    size_t errlen;
};

/* Malformed input: "FILE: JSON-PATH: reason" into err (the first one only); sets failed. */
void imp_bad(struct imp *c, const char *jp, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A report line: "NOT CARRIED: ..." when a host would notice (sets lossy), else "note: ...". */
void imp_lost(struct imp *c, bool host_sees, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Member `key` of object `o` (at JSON path `jp`) of type `type` (JSON_TRUE: a boolean or an
 * integer); NULL when absent (imp_bad when `required`) or of another type (imp_bad). */
json_t *imp_member(struct imp *c, json_t *o, const char *jp, const char *key, json_type type,
                   bool required);
/* Whether `v` (at `jp`) is an object; imp_bad when it is not. */
bool imp_object(struct imp *c, json_t *v, const char *jp);
/* A name written as it is into a section header or a value of linerate.conf (an iSCSI name,
 * an address, an RBD pool/image): printable ASCII without [ ] # , = or space. */
bool imp_name_ok(const char *s);
/* An iSCSI name as linerate takes it: imp_name_ok, an "iqn.", "eui." or "naa." type prefix and
 * at most 223 bytes (RFC 7143 section 4.2.7.1). */
bool imp_iscsi_name_ok(const char *s);
/* A CHAP user and its secret into c->secrets (one secret per user name, 12..255 bytes, no
 * space or control character); false, reported, when it cannot be kept. */
bool imp_secret(struct imp *c, const char *jp, const char *user, const char *secret);
/* A "KEY = USER" line (`key` chap-user, chap-mutual-user or their discovery- forms) into
 * `out`, and the secret, when not NULL, into c->secrets (imp_secret). The line is written even
 * when the secret cannot be kept (reported): the initiator then cannot log in until the admin
 * adds it, rather than log in without CHAP; a user name the line cannot hold (one beginning
 * with '#' or '"' among them) refuses the import (imp_bad) for the same reason. */
void imp_chap_line(struct imp *c, const char *jp, FILE *out, const char *key, const char *user,
                   const char *secret);
/* The secrets file's text ("USER SECRET" lines) of c->secrets, malloc'ed. */
char *imp_secrets_text(struct imp *c);

/* Write every `paths[i]` with `texts[i]` and mode `modes[i]`, all or nothing: each goes to a
 * temporary file created new (never one that was there), and only when all are written are
 * they renamed into place; a failed rename takes back the ones renamed: the file that was at
 * such a path before is put back, a new one removed. The error is printed; 0 or -1. */
int imp_write_all(const char *const *paths, const char *const *texts, const mode_t *modes,
                  size_t n);
/* The path a config's `chap-secrets` line names for --secrets `secrets` (NULL: a placeholder):
 * absolute, as linerate.conf(5) wants it. 0, or -1 when it does not fit in `len` or a line of
 * linerate.conf cannot hold it (said on stderr). */
int imp_secrets_abs(const char *secrets, char *abs, size_t len);
/* On stderr: `src` has CHAP secrets and no --secrets was given, so nothing is written. */
void imp_no_secrets(const char *src);
/* On stderr, at the end of an import that was not refused: its report, and a last line when
 * some of what hosts see was not carried (lossy). */
void imp_report(const char *report, bool lossy);
/* `s` may be written into a line of linerate.conf (a value or a comment) and read back whole:
 * no control character, no " #", no blank at its end. */
bool imp_line_ok(const char *s);

#endif
