/* The CHAP credentials of gateway.conf as its versions write them (ceph_auth.h). */
#include <stdlib.h>
#include <string.h>

#include "ctl/ceph_auth.h"

/* "USER/SECRET" (ceph-iscsi's `chap` and `chap_mutual`): false when empty (no CHAP). */
static bool chap_split(struct imp *i, const char *jp, const char *key, const char *s, char *user,
                       size_t ulen, const char **secret)
{
    if (!*s)
        return false;
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || (size_t)(slash - s) >= ulen) {
        imp_bad(i, jp, "'%s' is not USER/PASSWORD", key);
        return false;
    }
    snprintf(user, ulen, "%.*s", (int)(slash - s), s);
    *secret = slash + 1;
    return true;
}

/* ceph-iscsi's password_encryption_enabled: true (or a nonzero integer) */
static bool flag(json_t *e)
{
    return json_is_true(e) || (json_is_integer(e) && json_integer_value(e));
}

/* CHAP (m = 0) or mutual CHAP (m = 1) of an auth object: before version 8 one "USER/SECRET"
 * string (`chap`, `chap_mutual`); from version 8 separate `username` and `password` (`mutual_`
 * ones), the password perhaps encrypted with the gateways' RSA key (*encrypted). False when
 * there is none. */
static bool chap_pair(struct imp *i, int version, json_t *auth, const char *jp, int m, char *user,
                      size_t ulen, const char **secret, bool *encrypted)
{
    *encrypted = false;
    if (version < 8) {
        const char *key = m ? "chap_mutual" : "chap";
        json_t *v = imp_member(i, auth, jp, key, JSON_STRING, false);
        return v && chap_split(i, jp, key, json_string_value(v), user, ulen, secret);
    }
    const char *pre = m ? "mutual_" : "";
    char ku[64], kp[64], ke[64];
    snprintf(ku, sizeof(ku), "%susername", pre);
    snprintf(kp, sizeof(kp), "%spassword", pre);
    snprintf(ke, sizeof(ke), "%spassword_encryption_enabled", pre);
    json_t *u = imp_member(i, auth, jp, ku, JSON_STRING, false);
    json_t *p = imp_member(i, auth, jp, kp, JSON_STRING, false);
    json_t *e = imp_member(i, auth, jp, ke, JSON_TRUE, false);
    if (i->failed || !u || !*json_string_value(u))
        return false;
    if (!p || !*json_string_value(p) || strlen(json_string_value(u)) >= ulen) {
        imp_bad(i, jp, "'%s' without '%s' (or too long)", ku, kp);
        return false;
    }
    snprintf(user, ulen, "%s", json_string_value(u));
    *secret = json_string_value(p);
    *encrypted = flag(e);
    return true;
}

const char *ceph_chap_lines(struct imp *i, int version, json_t *auth, const char *jp, FILE *out,
                            const char *prefix, char user[256])
{
    static const char *const keys[2] = {"chap-user", "chap-mutual-user"};
    const char *first = NULL;
    for (int m = 0; m < 2; m++) {
        char u[256];
        const char *secret;
        bool enc;
        if (!chap_pair(i, version, auth, jp, m, u, sizeof(u), &secret, &enc))
            continue;
        if (m == 1 && !first) {
            imp_lost(i, true, "%s: mutual CHAP without CHAP: mutual CHAP needs CHAP first", jp);
            continue;
        }
        if (enc)
            /* ceph-iscsi encrypts with /etc/ceph/iscsi-gateway.pub (RSA OAEP, SHA-256, then
             * base64; client.py CHAP); linerate.conf names the user, the secret goes by hand */
            imp_lost(i, true,
                     "%s: the %sCHAP password of '%s' is encrypted with the gateways' key: not "
                     "carried; decrypt it on a gateway (base64 -d | openssl pkeyutl -decrypt "
                     "-inkey /etc/ceph/iscsi-gateway.key -pkeyopt rsa_padding_mode:oaep "
                     "-pkeyopt rsa_oaep_md:sha256 -pkeyopt rsa_mgf1_md:sha256) and add '%s "
                     "SECRET' to the secrets file; until then that login fails",
                     jp, m ? "mutual " : "", u, u);
        char key[64];
        snprintf(key, sizeof(key), "%s%s", prefix, keys[m]);
        imp_chap_line(i, jp, out, key, u, enc ? NULL : secret);
        if (i->failed)
            return NULL;
        if (m == 0) {
            snprintf(user, 256, "%s", u);
            first = user;
        }
    }
    return first;
}

char *ceph_auth_key(int version, json_t *client)
{
    json_t *a = json_object_get(client, "auth");
    bool v8 = version >= 8;
    char *s = NULL;
    const char *u = json_string_value(json_object_get(a, v8 ? "username" : "chap"));
    const char *m = json_string_value(json_object_get(a, v8 ? "mutual_username" : "chap_mutual"));
    u = u ? u : "", m = m ? m : "";
    if (!v8) { /* "USER/SECRET": the secret is in the key already */
        if (asprintf(&s, "%zu:%s%zu:%s", strlen(u), u, strlen(m), m) < 0)
            s = NULL;
        return s;
    }
    /* version 8 keeps the secrets apart: members with one user but different passwords (or one
     * encrypted) cannot share a [group]'s one CHAP user; lengths first so no two differ alike */
    const char *p = json_string_value(json_object_get(a, "password"));
    const char *mp = json_string_value(json_object_get(a, "mutual_password"));
    p = p ? p : "", mp = mp ? mp : "";
    if (asprintf(&s, "%zu:%s%zu:%s%d|%zu:%s%zu:%s%d", strlen(u), u, strlen(p), p,
                 flag(json_object_get(a, "password_encryption_enabled")), strlen(m), m, strlen(mp),
                 mp, flag(json_object_get(a, "mutual_password_encryption_enabled"))) < 0)
        s = NULL;
    return s;
}
