/* CHAP in the daemon's configuration: the config keys (chap-secrets, discovery-chap-user,
 * discovery-chap-mutual-user, chap-user, chap-mutual-user, chap-algorithms), and loading the
 * secrets of the configured users from the secrets file once everything is parsed, with the
 * checks RFC 7143 §12.1.3 asks for (length; a secret used to authenticate initiators is not
 * also the target's own). Secrets are never in the config or on the command line. */
#include "daemon/config.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/secrets.h"

static int set_name(char *dst, const char *val, const char *key, char *err, size_t errlen)
{
    size_t n = strlen(val);
    if (n == 0 || n > CHAP_NAME_MAX || strpbrk(val, " \t")) {
        snprintf(err, errlen,
                 "bad value for %s: a CHAP user name of 1..%d characters without "
                 "spaces",
                 key, CHAP_NAME_MAX);
        return -1;
    }
    memcpy(dst, val, n + 1);
    return 1;
}

int target_chap_key(struct target_config *cfg, struct target_node_conf *node, const char *key,
                    const char *val, char *err, size_t errlen)
{
    if (strcmp(key, "chap-algorithms") == 0) {
        unsigned algs;
        char reason[256];
        if (chap_algs_parse(val, &algs, reason, sizeof(reason)) < 0 || !algs) {
            snprintf(err, errlen, "bad value '%s' for chap-algorithms: %s", val, reason);
            return -1;
        }
        if (node)
            node->chap.algs = algs;
        else
            cfg->chap_algs = algs;
        return 1;
    }
    if (node) {
        if (strcmp(key, "chap-user") == 0)
            return set_name(node->chap.user, val, key, err, errlen);
        if (strcmp(key, "chap-mutual-user") == 0)
            return set_name(node->chap.mutual_user, val, key, err, errlen);
        if (strcmp(key, "chap-secrets") == 0 || strncmp(key, "discovery-chap-", 15) == 0) {
            snprintf(err, errlen, "'%s' belongs in the global section (before any [target])", key);
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "chap-secrets") == 0) {
        if (val[0] != '/' || strlen(val) >= sizeof(cfg->chap_secrets)) {
            snprintf(err, errlen, "bad value '%s' for chap-secrets: expected an absolute path",
                     val);
            return -1;
        }
        snprintf(cfg->chap_secrets, sizeof(cfg->chap_secrets), "%s", val);
        return 1;
    }
    if (strcmp(key, "discovery-chap-user") == 0)
        return set_name(cfg->discovery_chap.user, val, key, err, errlen);
    if (strcmp(key, "discovery-chap-mutual-user") == 0)
        return set_name(cfg->discovery_chap.mutual_user, val, key, err, errlen);
    if (strcmp(key, "chap-user") == 0 || strcmp(key, "chap-mutual-user") == 0) {
        snprintf(err, errlen,
                 "'%s' belongs in a [target IQN] section (discovery-%s for "
                 "discovery sessions)",
                 key, key);
        return -1;
    }
    return 0;
}

int target_chap_host_key(struct target_host_conf *h, const char *key, const char *val, char *err,
                         size_t errlen)
{
    if (strcmp(key, "chap-user") == 0)
        return set_name(h->chap.user, val, key, err, errlen);
    if (strcmp(key, "chap-mutual-user") == 0)
        return set_name(h->chap.mutual_user, val, key, err, errlen);
    snprintf(err, errlen, "'%s' cannot be set in a [host] or [group] section", key);
    return -1;
}

/* The secrets of one set of credentials, read with the others in one pass. */
struct creds_ref {
    struct chap_creds *c;
    const char *what;   /* "target IQN", "host IQN", "group NAME" or "discovery" */
    const char *origin; /* where it was configured, for errors */
    int user_idx, mutual_idx;
};

static int want_name(struct secret_want *want, unsigned *n, const char *name, uint8_t *buf)
{
    for (unsigned i = 0; i < *n; i++)
        if (strcmp(want[i].name, name) == 0)
            return (int)i;
    want[*n] = (struct secret_want){.name = name, .secret = buf};
    return (int)(*n)++;
}

/* Every set of credentials of cfg: the targets', then their entries' (which take the
 * target's algorithms), then discovery's. NULL on ENOMEM. */
static struct creds_ref *creds_refs(struct target_config *cfg, unsigned *nref)
{
    unsigned n = cfg->ntargets + 1;
    for (unsigned i = 0; i < cfg->ntargets; i++)
        n += cfg->targets[i].nhosts;
    struct creds_ref *refs = calloc(n, sizeof(*refs));
    if (!refs)
        return NULL;
    unsigned k = 0;
    for (unsigned i = 0; i < cfg->ntargets; i++) {
        struct target_node_conf *t = &cfg->targets[i];
        if (!t->chap.algs)
            t->chap.algs = cfg->chap_algs ? cfg->chap_algs : CHAP_ALGS_ALL;
        refs[k++] = (struct creds_ref){.c = &t->chap, .what = t->name, .origin = t->origin};
    }
    for (unsigned i = 0; i < cfg->ntargets; i++) {
        struct target_node_conf *t = &cfg->targets[i];
        for (unsigned j = 0; j < t->nhosts; j++) {
            struct target_host_conf *h = &t->hosts[j];
            h->chap.algs = t->chap.algs;
            refs[k++] = (struct creds_ref){.c = &h->chap,
                                           .what = h->group ? h->group_name : h->initiators[0],
                                           .origin = h->origin};
        }
    }
    if (!cfg->discovery_chap.algs)
        cfg->discovery_chap.algs = cfg->chap_algs ? cfg->chap_algs : CHAP_ALGS_ALL;
    refs[k++] = (struct creds_ref){.c = &cfg->discovery_chap, .what = "discovery"};
    assert(k == n);
    *nref = n;
    return refs;
}

int target_chap_load(struct target_config *cfg, char *err, size_t errlen)
{
    unsigned nref = 0, nwant = 0;
    /* two names per set at most; secrets read into one buffer each (on the heap: a config
     * may have many targets) */
    struct creds_ref *refs = creds_refs(cfg, &nref);
    struct secret_want *want = calloc(2 * (nref ? nref : 1), sizeof(*want));
    uint8_t(*bufs)[SECRETS_MAX_LEN] = calloc(2 * (nref ? nref : 1), sizeof(*bufs));
    unsigned used = 0;
    int rc = -1;
    if (!refs || !want || !bufs) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (unsigned i = 0; i < nref; i++) {
        struct chap_creds *c = refs[i].c;
        refs[i].user_idx = refs[i].mutual_idx = -1;
        bool disc = refs[i].origin == NULL;
        if (c->mutual_user[0] && !c->user[0]) {
            snprintf(err, errlen,
                     "%s: %s has a CHAP mutual user but no CHAP user (mutual CHAP "
                     "needs one-way CHAP first)",
                     disc ? "discovery-chap-mutual-user" : refs[i].origin, refs[i].what);
            goto out;
        }
        if (!c->user[0])
            continue;
        if (!cfg->chap_secrets[0]) {
            snprintf(err, errlen, "%s: CHAP user %s is configured but no chap-secrets file",
                     disc ? "discovery-chap-user" : refs[i].origin, c->user);
            goto out;
        }
        refs[i].user_idx = want_name(want, &nwant, c->user, bufs[used]);
        used = nwant;
        if (c->mutual_user[0]) {
            refs[i].mutual_idx = want_name(want, &nwant, c->mutual_user, bufs[used]);
            used = nwant;
        }
    }
    rc = nwant ? secrets_load(cfg->chap_secrets, want, nwant, err, errlen) : 0;
    for (unsigned i = 0; rc == 0 && i < nref; i++) {
        struct chap_creds *c = refs[i].c;
        if (refs[i].user_idx < 0)
            continue;
        const struct secret_want *u = &want[refs[i].user_idx];
        memcpy(c->secret, u->secret, u->len);
        c->secret_len = u->len;
        if (refs[i].mutual_idx >= 0) {
            const struct secret_want *m = &want[refs[i].mutual_idx];
            /* RFC 7143 §12.1.3: a secret that authenticates initiators MUST NOT also
             * authenticate a target (else a reflection proves the target to itself) */
            if (m->len == u->len && memcmp(m->secret, u->secret, u->len) == 0) {
                snprintf(err, errlen,
                         "%s: %s: the mutual user %s has the same secret as the user %s; "
                         "RFC 7143 12.1.3 requires different secrets",
                         cfg->chap_secrets, refs[i].what, c->mutual_user, c->user);
                rc = -1;
                break;
            }
            memcpy(c->mutual_secret, m->secret, m->len);
            c->mutual_secret_len = m->len;
        }
        LOG_INFO("%s%s: CHAP user %s%s%s", i < cfg->ntargets ? "target " : "", refs[i].what,
                 c->user, c->mutual_user[0] ? ", mutual as " : "", c->mutual_user);
    }
out:
    if (bufs)
        chap_wipe(bufs, 2 * (nref ? nref : 1) * sizeof(*bufs));
    free(bufs);
    free(want);
    free(refs);
    return rc;
}
