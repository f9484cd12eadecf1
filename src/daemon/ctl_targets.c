/* Whole targets added and removed while the daemon serves (linerate-ctl add/remove target,
 * reload). A new target gets its listeners (opened on reactor 0 if no socket has its address
 * yet), its SCSI target and LUNs, its iSCSI node, and is published in the server's node table,
 * where logins and SendTargets find it. A removed target leaves the node table first (no new
 * login finds it), its sessions are asked to log out (or it is refused while it has any,
 * without force), its LUNs go as remove lun takes them, and its node and SCSI target are kept
 * until exit: a session that was ending may still point at them. A target that reload drops
 * while it has sessions drains instead: out of the node table at once, it stays in d->built
 * (its sessions carry on) until the last one ends, when ctl_reap_drained removes it. Control
 * thread only. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/daemon.h"

#define CLOSE_WAIT_MS 5000 /* after closing a removed target's sessions' connections */
/* A drained target's LUNs: its sessions are gone, so only commands of ended connections
 * (a few ms) can hold them. */
#define DRAIN_REMOVE_TIMEOUT_S 5

struct ctl_retired {
    struct ctl_retired *next;
    struct iscsi_node *node;
    struct scsi_target *scsi;
};

static int find_target(struct daemon *d, const char *name)
{
    for (unsigned i = 0; i < d->built.n; i++)
        if (strcasecmp(d->built.nodes[i]->name, name) == 0)
            return (int)i;
    return -1;
}

static unsigned node_sessions(struct daemon *d, const struct iscsi_node *n)
{
    pthread_mutex_lock(&d->srv.sessions_lock);
    unsigned k = n->nsessions;
    pthread_mutex_unlock(&d->srv.sessions_lock);
    return k;
}

static void nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void scsi_free(struct scsi_target *scsi)
{
    scsi_target_destroy(scsi);
    free(scsi);
}

bool ctl_portal_in_use(struct daemon *d, const char *text)
{
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct iscsi_node *n = d->built.nodes[t];
        for (unsigned i = 0; i < n->nportals; i++)
            if (strcmp(n->portals[i].text, text) == 0)
                return true;
    }
    return false;
}

int ctl_target_add(struct daemon *d, const struct target_node_conf *c, char *err, size_t errlen)
{
    if (find_target(d, c->name) >= 0) {
        snprintf(err, errlen, "target %s is served already", c->name);
        return -1;
    }
    if (c->nportals == 0) {
        snprintf(err, errlen, "%s: target %s has no portal", c->origin, c->name);
        return -1;
    }
    for (unsigned i = 0; i < c->nluns; i++)
        if (target_lun_naa_clash(&d->cfg, c->name, &c->luns[i], err, errlen) < 0)
            return -1;
    for (unsigned i = 0; i < c->nportals; i++)
        if (daemon_listen_portal(d, &c->portals[i], err, errlen) < 0)
            return -1;
    struct scsi_target *scsi = calloc(1, sizeof(*scsi));
    if (!scsi || scsi_target_init(scsi, c->name, target_alua_tpgt(c)) < 0) {
        free(scsi);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    target_alua_apply(c, scsi);
    const char *state_dir = target_state_dir(&d->cfg);
    for (unsigned i = 0; i < c->nluns; i++) {
        if (target_build_lun(state_dir, c->name, &c->luns[i], scsi, &d->built, err, errlen) < 0) {
            scsi_free(scsi);
            return -1;
        }
    }
    /* its entries' maps before any login can reach it */
    if (target_hosts_apply(c, scsi, err, errlen) < 0) {
        scsi_free(scsi);
        return -1;
    }
    struct iscsi_node *node = target_node_make(c, scsi);
    struct scsi_target **gs = realloc(d->built.scsi, (d->built.n + 1) * sizeof(*gs));
    if (gs)
        d->built.scsi = gs;
    struct iscsi_node **gn = realloc(d->built.nodes, (d->built.n + 1) * sizeof(*gn));
    if (gn)
        d->built.nodes = gn;
    if (!node || !gs || !gn || !target_config_copy_node(&d->cfg, c)) {
        target_node_free(node);
        scsi_free(scsi);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (iscsi_server_add_node(&d->srv, node) < 0) {
        target_config_remove_node(&d->cfg, d->cfg.ntargets - 1);
        target_node_free(node);
        scsi_free(scsi);
        snprintf(err, errlen, "the daemon serves %u targets already", ISCSI_NODES_MAX);
        return -1;
    }
    d->built.scsi[d->built.n] = scsi;
    d->built.nodes[d->built.n] = node;
    d->built.n++;
    target_config_finish(&d->cfg); /* the union of the portals, as at start */
    LOG_INFO("event=target-added target=%s luns=%u", c->name, c->nluns);
    return 0;
}

/* Which normal sessions of a node: all, those of one initiator, or those of initiators its
 * allow list does not let in now (left by a change made without force). */
struct sess_filter {
    const char *initiator; /* only this one's, unless NULL */
    bool disallowed;       /* only those iscsi_node_allows() refuses */
};

static bool sess_matches(struct iscsi_node *n, const struct iscsi_session_info *s,
                         const struct sess_filter *f)
{
    if (s->discovery || strcasecmp(s->target, n->name) != 0)
        return false;
    if (f->initiator && strcasecmp(s->initiator, f->initiator) != 0)
        return false;
    return !f->disallowed || !iscsi_node_allows(n, s->initiator);
}

/* The sessions of node n that f selects, in the table now. */
static unsigned count_sessions(struct daemon *d, struct iscsi_node *n, const struct sess_filter *f)
{
    if (!f->initiator && !f->disallowed)
        return node_sessions(d, n);
    struct iscsi_session_info *v;
    unsigned k, found = 0;
    if (iscsi_server_list_sessions(&d->srv, &v, &k) < 0)
        return node_sessions(d, n); /* out of memory: err on the side of waiting */
    for (unsigned i = 0; i < k; i++)
        found += sess_matches(n, &v[i], f);
    free(v);
    return found;
}

/* Ask, or (close) force, the matching sessions to end. */
static void each_session(struct daemon *d, struct iscsi_node *n, const struct sess_filter *f,
                         bool close, unsigned timeout_s, const char *why)
{
    struct iscsi_session_info *v;
    unsigned k;
    if (iscsi_server_list_sessions(&d->srv, &v, &k) < 0)
        return;
    for (unsigned i = 0; i < k; i++) {
        if (!sess_matches(n, &v[i], f))
            continue;
        if (close)
            iscsi_server_close_session(&d->srv, v[i].tsih, why);
        else
            iscsi_server_request_logout(&d->srv, v[i].tsih, timeout_s);
    }
    free(v);
}

static unsigned end_sessions(struct daemon *d, struct iscsi_node *n, const struct sess_filter *f,
                             unsigned timeout_s, const char *why)
{
    unsigned had = count_sessions(d, n, f);
    if (!had)
        return 0;
    each_session(d, n, f, false, timeout_s, why);
    for (unsigned ms = 0; count_sessions(d, n, f) && ms < timeout_s * 1000u && !ctl_stopping(d);
         ms += 20)
        nap_ms(20);
    if (!count_sessions(d, n, f))
        return had;
    each_session(d, n, f, true, timeout_s, why);
    for (unsigned ms = 0; count_sessions(d, n, f) && ms < CLOSE_WAIT_MS; ms += 20)
        nap_ms(20);
    return had;
}

unsigned ctl_end_sessions(struct daemon *d, struct iscsi_node *n, const char *initiator,
                          unsigned timeout_s, const char *why)
{
    const struct sess_filter f = {.initiator = initiator};
    return end_sessions(d, n, &f, timeout_s, why);
}

unsigned ctl_node_sessions(struct daemon *d, const struct iscsi_node *n)
{
    return node_sessions(d, n);
}

unsigned ctl_disallowed_sessions(struct daemon *d, struct iscsi_node *n)
{
    const struct sess_filter f = {.disallowed = true};
    return count_sessions(d, n, &f);
}

unsigned ctl_end_disallowed_sessions(struct daemon *d, struct iscsi_node *n, unsigned timeout_s)
{
    const struct sess_filter f = {.disallowed = true};
    return end_sessions(d, n, &f, timeout_s, "its initiator is no longer allowed");
}

int ctl_target_remove(struct daemon *d, const char *name, bool force, unsigned timeout_s,
                      struct ctl_target_removed *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    int t = find_target(d, name);
    if (t < 0) {
        snprintf(err, errlen, "no target named '%s'", name);
        return -ENOENT;
    }
    struct iscsi_node *n = d->built.nodes[t];
    unsigned nsess = node_sessions(d, n);
    if (nsess && !force) {
        snprintf(err, errlen,
                 "target %s has %u session%s: log %s out first (linerate-ctl logout session), or "
                 "use --force",
                 n->name, nsess, nsess == 1 ? "" : "s", nsess == 1 ? "it" : "them");
        return -EBUSY;
    }
    struct ctl_retired *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    /* No new login or SendTargets finds it from now on. */
    iscsi_server_remove_node(&d->srv, n);
    out->sessions = nsess;
    if (nsess)
        ctl_end_sessions(d, n, NULL, timeout_s, "its target was removed");
    struct scsi_target *scsi = d->built.scsi[t];
    for (uint64_t l = 0; l < scsi->nluns; l++) {
        struct ctl_removed lr;
        if (scsi_target_lun(scsi, l) && ctl_lun_remove(d, (unsigned)t, l, timeout_s, &lr) == 0) {
            out->luns++;
            out->commands_left += lr.left;
        }
    }
    r->node = n;
    r->scsi = scsi;
    r->next = d->retired;
    d->retired = r;
    memmove(&d->built.scsi[t], &d->built.scsi[t + 1],
            (d->built.n - (unsigned)t - 1) * sizeof(d->built.scsi[0]));
    memmove(&d->built.nodes[t], &d->built.nodes[t + 1],
            (d->built.n - (unsigned)t - 1) * sizeof(d->built.nodes[0]));
    d->built.n--;
    target_config_remove_node(&d->cfg, (unsigned)t);
    target_config_finish(&d->cfg);
    /* Its portals that no other target has stop listening (the node keeps its list). */
    for (unsigned i = 0; i < n->nportals; i++)
        if (!ctl_portal_in_use(d, n->portals[i].text))
            daemon_unlisten_portal(d, n->portals[i].text);
    /* `name` may have been the configuration's, freed just now: the node's stays */
    LOG_INFO("event=target-removed target=%s sessions-ended=%u luns=%u", n->name, nsess, out->luns);
    return 0;
}

/* Draining is no state of its own: a target in d->built whose node the server's table lacks
 * (every other one is in it from its start to its removal). */
bool ctl_target_draining(struct daemon *d, unsigned t)
{
    assert(t < d->built.n);
    const struct iscsi_node *n = d->built.nodes[t];
    return iscsi_server_find_node(&d->srv, n->name) != n;
}

unsigned ctl_target_drain(struct daemon *d, unsigned t)
{
    assert(t < d->built.n);
    struct iscsi_node *n = d->built.nodes[t];
    if (!ctl_target_draining(d, t)) {
        /* No new login or SendTargets finds it from now on; its sessions carry on. */
        iscsi_server_remove_node(&d->srv, n);
        unsigned k = node_sessions(d, n);
        if (k) /* (none: the caller removes it at once, which logs that) */
            LOG_INFO("event=target-draining target=%s sessions=%u", n->name, k);
        return k;
    }
    return node_sessions(d, n);
}

bool ctl_target_undrain(struct daemon *d, unsigned t)
{
    if (!ctl_target_draining(d, t))
        return false;
    struct iscsi_node *n = d->built.nodes[t];
    if (iscsi_server_add_node(&d->srv, n) < 0)
        return false; /* the table is full: it stays draining */
    LOG_INFO("event=target-undrained target=%s sessions=%u", n->name, node_sessions(d, n));
    return true;
}

void ctl_reap_drained(struct daemon *d)
{
    for (unsigned t = 0; t < d->built.n;) {
        struct iscsi_node *n = d->built.nodes[t];
        if (!ctl_target_draining(d, t) || node_sessions(d, n)) {
            t++;
            continue;
        }
        char name[ISCSI_NAME_MAX + 1], why[512];
        snprintf(name, sizeof(name), "%s", n->name);
        struct ctl_target_removed tr;
        int rc = ctl_target_remove(d, name, false, DRAIN_REMOVE_TIMEOUT_S, &tr, why, sizeof(why));
        if (rc == 0) {
            LOG_INFO("target %s: its last session ended; removed as the reload asked", name);
        } else {
            /* A login that found it just before it was hidden: wait for that one too. */
            LOG_DEBUG("target %s: still draining: %s", name, why);
            t++;
        }
    }
}

void ctl_free_retired(struct daemon *d)
{
    while (d->retired) {
        struct ctl_retired *r = d->retired;
        d->retired = r->next;
        target_node_free(r->node);
        scsi_free(r->scsi);
        free(r);
    }
}
