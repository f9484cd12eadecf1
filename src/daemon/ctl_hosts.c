/* A reload's changes to a target's [host] / [group] entries, applied live: the SCSI target's
 * host maps first (an entry added, a mapping changed: its hosts' nexuses see the new map, with
 * REPORTED LUNS DATA HAS CHANGED, scsi.h), then who may log in and with which CHAP user (the
 * iSCSI node's entries, swapped whole under its locks, each with its entry's limiter: the one
 * it had, set to the new caps, so that sessions logged in are paced by them at once), then the
 * entries that went. A removed entry's sessions carry on, seeing no LUN, under its last caps,
 * as sessions of a removed allow entry carry on; reload --force logs them out (ctl_reload.c).
 * Control thread only. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/daemon.h"

bool ctl_chap_same(const struct chap_creds *a, const struct chap_creds *b)
{
    return strcmp(a->user, b->user) == 0 && strcmp(a->mutual_user, b->mutual_user) == 0 &&
           a->algs == b->algs && a->secret_len == b->secret_len &&
           memcmp(a->secret, b->secret, a->secret_len) == 0 &&
           a->mutual_secret_len == b->mutual_secret_len &&
           memcmp(a->mutual_secret, b->mutual_secret, a->mutual_secret_len) == 0;
}

static bool same_maps(const struct target_host_conf *a, const struct target_host_conf *b)
{
    if (a->nmaps != b->nmaps)
        return false;
    for (unsigned i = 0; i < a->nmaps; i++) {
        bool found = false;
        for (unsigned j = 0; j < b->nmaps && !found; j++)
            found = a->maps[i].host_lun == b->maps[j].host_lun &&
                    a->maps[i].lun == b->maps[j].lun &&
                    a->maps[i].read_only == b->maps[j].read_only;
        if (!found)
            return false;
    }
    return true;
}

static bool same_limits(const struct target_host_conf *a, const struct target_host_conf *b)
{
    return rate_limit_conf_same(&a->limits, &b->limits);
}

/* Whether each initiator of a has the same entry (maps, CHAP, caps) in b. */
static bool covered(const struct target_node_conf *a, const struct target_node_conf *b)
{
    for (unsigned i = 0; i < a->nhosts; i++)
        for (unsigned k = 0; k < a->hosts[i].ninitiators; k++) {
            const struct target_host_conf *o = target_host_find(b, a->hosts[i].initiators[k]);
            if (!o || !same_maps(&a->hosts[i], o) || !ctl_chap_same(&a->hosts[i].chap, &o->chap) ||
                !same_limits(&a->hosts[i], o))
                return false;
        }
    return true;
}

bool ctl_hosts_same(const struct target_node_conf *a, const struct target_node_conf *b)
{
    return covered(a, b) && covered(b, a);
}

/* initiator's SCSI map to h's (its entry made if it has none): rows h does not have at their
 * number unmapped first (so that a LUN moving to another number is never mapped twice), then
 * h's rows mapped (one already as it is changes nothing). */
static int scsi_sync(struct scsi_target *scsi, const char *iqn, const struct target_host_conf *h,
                     char *err, size_t errlen)
{
    struct scsi_host_mapping one;
    int n = scsi_target_host_maps(scsi, iqn, &one, 0);
    if (n < 0 && scsi_target_host_add(scsi, iqn, err, errlen) < 0)
        return -1;
    struct scsi_host_mapping *rows = malloc((n > 0 ? (size_t)n : 1) * sizeof(*rows));
    if (!rows) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* (the control thread is the one writer: n rows still) */
    n = n > 0 ? scsi_target_host_maps(scsi, iqn, rows, (unsigned)n) : 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        bool keep = false;
        for (unsigned m = 0; m < h->nmaps && !keep; m++)
            keep = h->maps[m].host_lun == rows[i].host_lun && h->maps[m].lun == rows[i].lun;
        if (!keep)
            rc = scsi_target_host_unmap(scsi, iqn, rows[i].host_lun, err, errlen);
    }
    free(rows);
    for (unsigned m = 0; m < h->nmaps && rc == 0; m++)
        rc = scsi_target_host_map(scsi, iqn, h->maps[m].host_lun, h->maps[m].lun,
                                  h->maps[m].read_only, err, errlen);
    return rc;
}

/* Whether a and b are one entry: the same group, or the [host] of the same initiator. */
static bool same_identity(const struct target_host_conf *a, const struct target_host_conf *b)
{
    if (a->group != b->group)
        return false;
    return a->group ? strcasecmp(a->group_name, b->group_name) == 0
                    : strcasecmp(a->initiators[0], b->initiators[0]) == 0;
}

/* Whether initiator iqn's limiter is the one entry h of f should take: first pass, iqn was in
 * the running entry (in r) that h is (its group, its host); second pass, iqn is one of h's
 * initiators and its running entry is none that f still has (that one keeps its limiter). */
static bool limit_candidate(const struct target_node_conf *r, const struct target_node_conf *f,
                            const struct target_host_conf *h, const char *iqn, bool identity)
{
    const struct target_host_conf *o = target_host_find(r, iqn);
    if (identity)
        return o && same_identity(o, h);
    for (unsigned i = 0; o && i < f->nhosts; i++)
        if (&f->hosts[i] != h && same_identity(o, &f->hosts[i]))
            return false;
    for (unsigned j = 0; j < h->ninitiators; j++)
        if (strcasecmp(h->initiators[j], iqn) == 0)
            return true;
    return false;
}

/* The limiter entry h of the new array gets: the one its entry had in r, the running
 * configuration (so that an entry keeps its own limiter when members move), else the one one
 * of its initiators had (so its sessions, which hold it, are paced by the new caps at once,
 * rate_limit_set), unless an entry before it in a[0..k) took that one already; else a new
 * one. With a reference. */
static struct iscsi_host_limit *entry_limit(const struct iscsi_node *n,
                                            const struct target_node_conf *r,
                                            const struct target_node_conf *f,
                                            const struct iscsi_node_host *a, unsigned k,
                                            const struct target_host_conf *h)
{
    for (int pass = 0; pass < 2; pass++)
        for (unsigned o = 0; o < n->nhosts; o++) {
            struct iscsi_host_limit *l = n->hosts[o].limit;
            if (!l || !limit_candidate(r, f, h, n->hosts[o].name, pass == 0))
                continue;
            bool taken = false;
            for (unsigned m = 0; m < k && !taken; m++)
                taken = a[m].limit == l;
            if (taken)
                continue;
            struct rate_limit_conf now;
            rate_limit_get(&l->limit, &now);
            if (!rate_limit_conf_same(&now, &h->limits))
                rate_limit_set(&l->limit, &h->limits);
            iscsi_host_limit_get(l);
            return l;
        }
    return iscsi_host_limit_new(&h->limits);
}

static void hosts_put(struct iscsi_node_host *a, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        iscsi_host_limit_put(a[i].limit);
}

/* The node's entries as the file has them: a new array swapped in under both locks its
 * readers take (logins: access_lock for the names and limiters, chap_lock for the
 * credentials). The old array's references to limiters go after; sessions keep theirs. */
static int node_swap(struct daemon *d, unsigned t, const struct target_node_conf *f)
{
    struct iscsi_node *n = d->built.nodes[t];
    unsigned total = 0;
    for (unsigned i = 0; i < f->nhosts; i++)
        total += f->hosts[i].ninitiators;
    struct iscsi_node_host *a = total ? calloc(total, sizeof(*a)) : NULL;
    if (total && !a)
        return -1;
    unsigned k = 0;
    for (unsigned i = 0; i < f->nhosts; i++) {
        struct iscsi_host_limit *l = f->hosts[i].ninitiators
                                         ? entry_limit(n, &d->cfg.targets[t], f, a, k, &f->hosts[i])
                                         : NULL;
        if (f->hosts[i].ninitiators && !l) {
            hosts_put(a, k);
            free(a);
            return -1;
        }
        for (unsigned j = 0; j < f->hosts[i].ninitiators; j++, k++) {
            snprintf(a[k].name, sizeof(a[k].name), "%s", f->hosts[i].initiators[j]);
            a[k].chap = f->hosts[i].chap;
            if (j)
                iscsi_host_limit_get(l);
            a[k].limit = l;
        }
    }
    pthread_mutex_lock(&d->srv.chap_lock);
    pthread_mutex_lock(&n->access_lock);
    struct iscsi_node_host *old = n->hosts;
    unsigned nold = n->nhosts;
    n->hosts = a;
    n->nhosts = total;
    pthread_mutex_unlock(&n->access_lock);
    pthread_mutex_unlock(&d->srv.chap_lock);
    hosts_put(old, nold);
    if (old)
        chap_wipe(old, nold * sizeof(*old));
    free(old);
    return 0;
}

/* The SCSI maps of f's initiators back to r's: each as its entry in r has it, or its SCSI
 * entry removed when r has none (best effort: what fails stays as it is). */
static void hosts_rollback(struct scsi_target *scsi, const struct target_node_conf *r,
                           const struct target_node_conf *f)
{
    char why[512];
    for (unsigned i = 0; i < f->nhosts; i++)
        for (unsigned k = 0; k < f->hosts[i].ninitiators; k++) {
            const char *iqn = f->hosts[i].initiators[k];
            const struct target_host_conf *o = target_host_find(r, iqn);
            if (o && same_maps(o, &f->hosts[i]))
                continue;
            if (o)
                (void)scsi_sync(scsi, iqn, o, why, sizeof(why));
            else
                (void)scsi_target_host_remove(scsi, iqn, why, sizeof(why));
        }
}

bool ctl_hosts_apply(struct daemon *d, unsigned t, const struct target_node_conf *f, bool force,
                     unsigned timeout_s, json_t *applied, json_t *restart)
{
    struct target_node_conf *r = &d->cfg.targets[t];
    if (ctl_hosts_same(r, f))
        return false;
    struct iscsi_node *n = d->built.nodes[t];
    /* A target without entries shows every LUN, writable, to every session (scsi.h): the
     * sessions of the entries going, which saw their map or (removed earlier) no LUN, must not
     * see that. Without force the entries stay as they run; with force they are logged out
     * before the maps go. */
    if (f->nhosts == 0 && r->nhosts > 0) {
        unsigned live = ctl_node_sessions(d, n);
        if (live && !force) {
            json_array_append_new(
                restart, json_sprintf("target %s: host entries: left as they run: without "
                                      "entries its %u session%s would see every LUN, writable "
                                      "(log them out first, or reload --force, which does)",
                                      r->name, live, live == 1 ? "" : "s"));
            return false;
        }
        if (live)
            ctl_end_sessions(d, n, NULL, timeout_s, "the target's last host entry removed");
    }
    char why[512];
    unsigned added = 0, changed = 0, removed = 0, capped = 0;
    for (unsigned i = 0; i < f->nhosts; i++) {
        const struct target_host_conf *o = target_host_find(r, f->hosts[i].initiators[0]);
        capped += !(o ? same_limits(o, &f->hosts[i]) : !rate_limit_conf_any(&f->hosts[i].limits));
    }
    bool failed = false;
    for (unsigned i = 0; i < f->nhosts && !failed; i++)
        for (unsigned k = 0; k < f->hosts[i].ninitiators && !failed; k++) {
            const char *iqn = f->hosts[i].initiators[k];
            const struct target_host_conf *o = target_host_find(r, iqn);
            if (o && same_maps(o, &f->hosts[i]))
                continue;
            if (scsi_sync(n->scsi, iqn, &f->hosts[i], why, sizeof(why)) < 0) {
                json_array_append_new(restart,
                                      json_sprintf("target %s: host %s: %s", r->name, iqn, why));
                failed = true;
                continue;
            }
            o ? changed++ : added++;
        }
    /* All or nothing: a map that failed leaves the maps as they were and neither who may log
     * in nor the running configuration changes, so that what is admitted, listed and saved is
     * what the hosts see. */
    if (failed || node_swap(d, t, f) < 0) {
        hosts_rollback(n->scsi, r, f);
        if (!failed)
            json_array_append_new(restart,
                                  json_sprintf("target %s: host entries: out of memory", r->name));
        if (ctl_reactors_barrier(d) == 0)
            scsi_host_maps_free(scsi_target_host_retired_take(n->scsi));
        return false;
    }
    for (unsigned i = 0; i < r->nhosts; i++)
        for (unsigned k = 0; k < r->hosts[i].ninitiators; k++) {
            const char *iqn = r->hosts[i].initiators[k];
            if (target_host_find(f, iqn))
                continue;
            if (scsi_target_host_remove(n->scsi, iqn, why, sizeof(why)) == 0)
                removed++;
        }
    /* replaced maps are freed once no reactor can still be reading one (a turn has passed) */
    if (ctl_reactors_barrier(d) == 0)
        scsi_host_maps_free(scsi_target_host_retired_take(n->scsi));
    if (target_hosts_copy(r, f) < 0)
        json_array_append_new(restart,
                              json_sprintf("target %s: host entries: out of memory", r->name));
    json_array_append_new(applied, json_sprintf("target %s: host entries: %u initiator%s added, "
                                                "%u with a new map, %u removed, %u entr%s with "
                                                "new caps (CHAP as the file says for new logins)",
                                                r->name, added, added == 1 ? "" : "s", changed,
                                                removed, capped, capped == 1 ? "y" : "ies"));
    return true;
}

int ctl_hosts_drop_lun(struct daemon *d, unsigned t, uint64_t lun, char *err, size_t errlen)
{
    struct target_node_conf s = d->cfg.targets[t];
    s.hosts = NULL;
    s.nhosts = 0;
    if (target_hosts_copy(&s, &d->cfg.targets[t]) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int dropped = 0;
    for (unsigned i = 0; i < s.nhosts; i++) {
        struct target_host_conf *h = &s.hosts[i];
        unsigned k = 0;
        for (unsigned m = 0; m < h->nmaps; m++)
            if (h->maps[m].lun != lun)
                h->maps[k++] = h->maps[m];
        dropped += (int)(h->nmaps - k);
        h->nmaps = k;
    }
    int rc = dropped;
    if (dropped) {
        json_t *applied = json_array(), *restart = json_array();
        ctl_hosts_apply(d, t, &s, false, 0, applied, restart);
        if (json_array_size(restart)) {
            const char *why = json_string_value(json_array_get(restart, 0));
            snprintf(err, errlen, "%s", why ? why : "failed");
            rc = -1;
        }
        json_decref(applied);
        json_decref(restart);
    }
    target_hosts_free(&s);
    return rc;
}
