/* The importers' shared reading of foreign JSON and their report (import_json.h). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ctl/import_json.h"

void imp_bad(struct imp *c, const char *jp, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    int n = snprintf(c->err, c->errlen, "%s: %s: ", c->file, jp);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen)
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

void imp_lost(struct imp *c, bool host_sees, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(host_sees ? "NOT CARRIED: " : "note: ", c->report);
    vfprintf(c->report, fmt, ap);
    fputc('\n', c->report);
    va_end(ap);
    c->lossy |= host_sees;
}

json_t *imp_member(struct imp *c, json_t *o, const char *jp, const char *key, json_type type,
                   bool required)
{
    static const char *const names[] = {"an object", "an array", "a string", "an integer",
                                        "a number",  "true",     "false",    "null"};
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (required)
            imp_bad(c, jp, "'%s' is missing", key);
        return NULL;
    }
    if (json_typeof(v) != type &&
        !(type == JSON_TRUE && (json_is_boolean(v) || json_is_integer(v)))) {
        imp_bad(c, jp, "'%s' is not %s", key, type == JSON_TRUE ? "a boolean" : names[type]);
        return NULL;
    }
    return v;
}

bool imp_object(struct imp *c, json_t *v, const char *jp)
{
    if (!json_is_object(v))
        imp_bad(c, jp, "not an object");
    return json_is_object(v);
}

/* RFC 7143 section 4.2.7.2: iSCSI names use none of the characters linerate.conf(5) reads as
 * syntax ('[' ']' a section, '#' a comment, ',' an option, '=' a key, ' ' the end of a word),
 * so a crafted string can never become lines or keys of its own. */
bool imp_name_ok(const char *s)
{
    if (!*s || strlen(s) > 4096)
        return false;
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e || strchr("[]#,=", *s))
            return false;
    return true;
}

bool imp_iscsi_name_ok(const char *s)
{
    return imp_name_ok(s) && strlen(s) <= 223 &&
           (strncasecmp(s, "iqn.", 4) == 0 || strncasecmp(s, "eui.", 4) == 0 ||
            strncasecmp(s, "naa.", 4) == 0);
}

/* A secrets file line is "USER SECRET": neither may hold a space or a control character. */
static bool secret_word(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

bool imp_secret(struct imp *c, const char *jp, const char *user, const char *secret)
{
    if (!secret_word(user) || !secret_word(secret)) {
        imp_lost(c, true,
                 "%s: CHAP user or secret with characters the secrets file cannot hold: add "
                 "'%s SECRET' by hand (until then that login fails)",
                 jp, user);
        return false;
    }
    json_t *had = json_object_get(c->secrets, user);
    if (had && strcmp(json_string_value(had), secret) != 0) {
        imp_lost(c, true,
                 "%s: CHAP user '%s' has another secret elsewhere; linerate keeps one secret per "
                 "user name: rename one user on the initiator",
                 jp, user);
        return false;
    }
    /* Kept even when too short: linerate-target then refuses to start (docs/security.md)
     * rather than serve the host without CHAP. */
    size_t n = strlen(secret);
    if (n < 12 && !had)
        imp_lost(c, true,
                 "%s: CHAP user '%s' has a secret of %zu bytes; linerate takes 12 to 255 (RFC "
                 "7143 §12.1.3) and will not start with it: set a longer secret on the initiator "
                 "and in the secrets file",
                 jp, user, n);
    json_object_set_new(c->secrets, user, json_string(secret));
    return true;
}

char *imp_secrets_text(struct imp *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    const char *k;
    json_t *v;
    json_object_foreach(c->secrets, k, v) fprintf(f, "%s %s\n", k, json_string_value(v));
    fclose(f);
    return buf;
}

void imp_chap_line(struct imp *c, const char *jp, FILE *out, const char *key, const char *user,
                   const char *secret)
{
    /* linerate.conf takes ',' and '#' in a value, not a '[' ']' or '='; a value beginning
     * with '#' is a comment and one in quotes loses them (config.c cfg_line), and a secrets
     * file line beginning with '#' is a comment (util/secrets.c): such a user is refused
     * rather than written as another name or none. */
    if (!secret_word(user) || strpbrk(user, "[]=") || user[0] == '#' || user[0] == '"') {
        imp_bad(c, jp,
                "CHAP user '%s' cannot be written into linerate.conf, and without it that "
                "initiator would log in without CHAP",
                user);
        return;
    }
    if (secret)
        imp_secret(c, jp, user, secret);
    fprintf(out, "%s = %s\n", key, user);
}
