/* reload (linerate-ctl reload, SIGHUP): re-read the --config file and apply the difference with
 * what runs. What can change at run time is applied: targets added and removed (one with
 * sessions only with force, which logs them out), LUNs added (the file's number), removed
 * (their commands finish first, as remove lun does) and write-protected or not, portals and
 * allow entries, CHAP users and secrets (for new logins) and the log level. The rest (a running
 * target's alias, session keys; threads, limits) is listed as needing a restart, not half
 * applied. What linerate-ctl added and the file never had is not dropped without force. A file that
 * does not load, or a new store that cannot be opened, changes nothing: every new store is opened
 * before anything changes. */
#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bs/bs.h"
#include "daemon/conf_keys.h"
#include "daemon/daemon.h"
#include "util/sdnotify.h"

#define RELOAD_REMOVE_TIMEOUT_S 30

static void note(json_t *list, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(json_t *list, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_array_append_new(list, json_string(buf));
}

static const struct target_node_conf *find_conf(const struct target_config *c, const char *name)
{
    for (unsigned i = 0; i < c->ntargets; i++)
        if (strcasecmp(c->targets[i].name, name) == 0)
            return &c->targets[i];
    return NULL;
}

static const struct target_lun_conf *find_lun(const struct target_node_conf *n, uint64_t lun)
{
    for (unsigned i = 0; i < n->nluns; i++)
        if (n->luns[i].lun == lun)
            return &n->luns[i];
    return NULL;
}

/* Everything of a LUN but its write protection and its caps, which change in place; its
 * identity too
 * (a host would see its disk change under it). */
static bool same_store(const struct target_lun_conf *a, const struct target_lun_conf *b)
{
    return strcmp(a->bs_spec, b->bs_spec) == 0 && a->block_size == b->block_size &&
           a->removable == b->removable && a->phys_block_size == b->phys_block_size &&
           /* ALUA states change in place too (ctl_alua.c), the groups do not */
           a->sanitize_rate == b->sanitize_rate && target_alua_lun_same_groups(a, b) &&
           target_lun_identity_same(&a->identity, &b->identity);
}

/* Portals and allow entries are sets: the order of their lines changes nothing a login sees
 * (SendTargets lists the portals in the order they were added). */
static bool same_portals(const struct target_node_conf *a, const struct target_node_conf *b)
{
    for (unsigned i = 0; i < a->nportals; i++)
        if (!target_node_has_portal(b, a->portals[i].text))
            return false;
    for (unsigned i = 0; i < b->nportals; i++)
        if (!target_node_has_portal(a, b->portals[i].text))
            return false;
    return true;
}

static bool same_allow(const struct target_node_conf *a, const struct target_node_conf *b)
{
    for (unsigned i = 0; i < a->nallow; i++)
        if (!target_node_has_allow(b, a->allow[i]))
            return false;
    for (unsigned i = 0; i < b->nallow; i++)
        if (!target_node_has_allow(a, b->allow[i]))
            return false;
    return true;
}

bool ctl_lun_conf_same(const struct target_lun_conf *a, const struct target_lun_conf *b)
{
    return a->lun == b->lun && same_store(a, b) && a->read_only == b->read_only &&
           rate_limit_conf_same(&a->limits, &b->limits);
}

static void note_global(void *arg, const char *what)
{
    note(arg, "%s", what);
}

/* A target's "needs a restart" line. */
struct target_note {
    json_t *list;
    const char *name;
};

static void note_target(void *arg, const char *what)
{
    struct target_note *t = arg;
    note(t->list, "target %s: %s", t->name, what);
}

/* Settings outside the LUNs that differ: each becomes a "needs a restart" line. The keys a
 * reload cannot apply come from the table (conf_keys_table.c); CHAP and ALUA are compared
 * here, as a group each (the secrets are no key). */
static void diff_fixed(const struct target_config *run, const struct target_config *file,
                       json_t *restart)
{
    struct conf_obj ro = {.cfg = (struct target_config *)run},
                    fo = {.cfg = (struct target_config *)file};
    conf_keys_diff(CONF_GLOBAL, &ro, &fo, note_global, restart);
    if (strcmp(run->chap_secrets, file->chap_secrets) != 0 ||
        !ctl_chap_same(&run->discovery_chap, &file->discovery_chap) ||
        run->chap_algs != file->chap_algs)
        note(restart, "chap-secrets, discovery CHAP or chap-algorithms");
    for (unsigned i = 0; i < run->ntargets; i++) {
        struct target_node_conf *r = &run->targets[i];
        struct target_node_conf *f = (struct target_node_conf *)find_conf(file, r->name);
        if (!f)
            continue; /* removed as a whole, below */
        struct conf_obj rt = {.cfg = ro.cfg, .node = r, .params = &r->params},
                        ft = {.cfg = fo.cfg, .node = f, .params = &f->params};
        struct target_note tn = {restart, r->name};
        conf_keys_diff(CONF_TARGET, &rt, &ft, note_target, &tn);
        if (!ctl_chap_same(&r->chap, &f->chap))
            note(restart, "target %s: CHAP", r->name);
        /* the states change live (ctl_alua.c), the groups do not */
        if (!target_alua_same_groups(&r->alua, &f->alua))
            note(restart, "target %s: ALUA groups (alua-group, alua-peer, alua-explicit)", r->name);
    }
}

/* A running target's portals and allow list that differ from the file's. */
static void diff_access(const struct target_config *run, const struct target_config *file,
                        json_t *list)
{
    for (unsigned i = 0; i < run->ntargets; i++) {
        const struct target_node_conf *r = &run->targets[i];
        const struct target_node_conf *f = find_conf(file, r->name);
        if (f && !same_portals(r, f))
            note(list, "target %s: portals", r->name);
        if (f && !same_allow(r, f))
            note(list, "target %s: allow", r->name);
        if (f && !ctl_hosts_same(r, f))
            note(list, "target %s: host entries", r->name);
    }
}

void ctl_config_diff(const struct daemon *d, const struct target_config *file, json_t *out)
{
    const struct target_config *run = &d->cfg;
    diff_fixed(run, file, out);
    diff_access(run, file, out);
    for (unsigned i = 0; i < run->ntargets; i++) {
        const struct target_node_conf *f = find_conf(file, run->targets[i].name);
        if (f && target_alua_same_groups(&run->targets[i].alua, &f->alua) &&
            !target_alua_same(&run->targets[i].alua, &f->alua))
            note(out, "target %s: ALUA states", run->targets[i].name);
    }
    for (unsigned i = 0; i < run->ntargets; i++) {
        const struct target_node_conf *r = &run->targets[i];
        const struct target_node_conf *f = find_conf(file, r->name);
        if (!f) {
            note(out, "target %s: not in the file", r->name);
            continue;
        }
        for (unsigned k = 0; k < r->nluns; k++) {
            const struct target_lun_conf *fl = find_lun(f, r->luns[k].lun);
            if (!fl)
                note(out, "target %s: LUN %llu not in the file", r->name,
                     (unsigned long long)r->luns[k].lun);
            else if (!ctl_lun_conf_same(&r->luns[k], fl) || !target_alua_lun_same(&r->luns[k], fl))
                note(out, "target %s: LUN %llu differs (%s%s in the file, %s%s running)", r->name,
                     (unsigned long long)fl->lun, fl->bs_spec, fl->read_only ? ",ro" : "",
                     r->luns[k].bs_spec, r->luns[k].read_only ? ",ro" : "");
        }
        for (unsigned k = 0; k < f->nluns; k++)
            if (!find_lun(r, f->luns[k].lun))
                note(out, "target %s: LUN %llu only in the file", r->name,
                     (unsigned long long)f->luns[k].lun);
    }
    for (unsigned i = 0; i < file->ntargets; i++)
        if (!find_conf(run, file->targets[i].name))
            note(out, "target %s: only in the file", file->targets[i].name);
    if (!run->cli_log_level && file->log_level != log_get_level())
        note(out, "log-level");
}

/* Bring running target t's portals and allow list to the file's f: additions first, so that
 * the target is never without a portal, nor open to everyone while one name replaces another.
 * Sessions through a removed portal carry on; those of initiators the new list does not let
 * in (a removed entry's, or everyone else's when the file closes an open target) too, unless
 * force logs them out: once, with the whole list in place, so that a name the file adds later
 * than another is never taken for one no longer allowed (and with force even when the list is
 * unchanged, for the sessions an earlier reload without force left). */
static void apply_access(struct daemon *d, unsigned t, const struct target_node_conf *f, bool force,
                         json_t *applied, json_t *restart)
{
    char name[ISCSI_NAME_MAX + 1], why[512];
    snprintf(name, sizeof(name), "%s", d->cfg.targets[t].name);
    for (unsigned i = 0; i < f->nportals; i++) {
        if (target_node_has_portal(&d->cfg.targets[t], f->portals[i].text))
            continue;
        if (ctl_portal_add(d, t, &f->portals[i], why, sizeof(why)) == 0)
            note(applied, "target %s: portal %s added", name, f->portals[i].text);
        else
            note(restart, "target %s: portal %s: %s", name, f->portals[i].text, why);
    }
    /* Iterate over a copy: removing edits the running list. */
    struct target_node_conf run;
    memset(&run, 0, sizeof(run));
    for (unsigned i = 0; i < d->cfg.targets[t].nportals; i++)
        target_node_add_portal(&run, &d->cfg.targets[t].portals[i]);
    for (unsigned i = 0; i < d->cfg.targets[t].nallow; i++)
        target_node_add_allow(&run, d->cfg.targets[t].allow[i]);
    for (unsigned i = 0; i < run.nportals; i++) {
        const char *p = run.portals[i].text;
        bool closed;
        if (target_node_has_portal(f, p))
            continue;
        if (ctl_portal_remove(d, t, p, true, &closed, why, sizeof(why)) == 0)
            note(applied, "target %s: portal %s removed%s", name, p,
                 closed ? " (its listener closed; sessions on it carry on)"
                        : " (sessions on it carry on)");
        else
            note(restart, "target %s: portal %s: %s", name, p, why);
    }
    /* the [host] / [group] entries also say who may log in */
    bool allow_changed = ctl_hosts_apply(d, t, f, force, RELOAD_REMOVE_TIMEOUT_S, applied, restart);
    for (unsigned i = 0; i < f->nallow; i++) {
        if (target_node_has_allow(&d->cfg.targets[t], f->allow[i]))
            continue;
        if (ctl_allow_add(d, t, f->allow[i], false, 0, NULL, why, sizeof(why)) == 0) {
            note(applied, "target %s: allow %s added", name, f->allow[i]);
            allow_changed = true;
        } else {
            note(restart, "target %s: allow %s: %s", name, f->allow[i], why);
        }
    }
    for (unsigned i = 0; i < run.nallow; i++) {
        const char *iqn = run.allow[i];
        if (target_node_has_allow(f, iqn))
            continue;
        if (ctl_allow_remove(d, t, iqn, true, false, 0, NULL, why, sizeof(why)) == 0) {
            note(applied, "target %s: allow %s removed", name, iqn);
            allow_changed = true;
        } else {
            note(restart, "target %s: allow %s: %s", name, iqn, why);
        }
    }
    /* Counted after a change; with force ended even without one, as what an earlier reload
     * without force left running is what the next one with force is for. */
    if (allow_changed || force) {
        struct iscsi_node *n = d->built.nodes[t];
        unsigned sessions = force ? ctl_end_disallowed_sessions(d, n, RELOAD_REMOVE_TIMEOUT_S)
                                  : ctl_disallowed_sessions(d, n);
        if (sessions)
            note(applied, "target %s: %u session%s of initiators no longer allowed %s", name,
                 sessions, sessions == 1 ? "" : "s",
                 force           ? "logged out"
                 : sessions == 1 ? "carries on; reload --force logs it out"
                                 : "carry on; reload --force logs them out");
    }
    free(run.portals);
    free(run.allow);
}

/* What the reload would take away that linerate-ctl added and the file never had (since the
 * daemon last read or saved it): a target, a LUN, a portal, an allow entry. Dropping them
 * silently loses what an admin did live (a RAM LUN's data with it), so without force the
 * reload is refused and says what, and how to keep it (issue 34). */
static void live_only(struct daemon *d, const struct target_config *file, json_t *lost)
{
    const struct target_config *base = &d->file_cfg;
    for (unsigned t = 0; t < d->cfg.ntargets; t++) {
        const struct target_node_conf *r = &d->cfg.targets[t];
        const struct target_node_conf *f = find_conf(file, r->name), *b = find_conf(base, r->name);
        if (ctl_target_draining(d, t))
            continue; /* an earlier reload dropped it already */
        if (!f) {
            if (!b)
                note(lost, "target %s", r->name);
            continue;
        }
        /* By number: a LUN the file had and linerate-ctl resized is still the file's. */
        for (unsigned i = 0; i < r->nluns; i++) {
            const struct target_lun_conf *rl = &r->luns[i];
            if (!find_lun(f, rl->lun) && !(b && find_lun(b, rl->lun)))
                note(lost, "target %s: LUN %llu (%s)", r->name, (unsigned long long)rl->lun,
                     rl->bs_spec);
        }
        for (unsigned i = 0; i < r->nportals; i++) {
            const char *p = r->portals[i].text;
            if (!target_node_has_portal(f, p) && !(b && target_node_has_portal(b, p)))
                note(lost, "target %s: portal %s", r->name, p);
        }
        for (unsigned i = 0; i < r->nallow; i++) {
            const char *iqn = r->allow[i];
            if (!target_node_has_allow(f, iqn) && !(b && target_node_has_allow(b, iqn)))
                note(lost, "target %s: allow %s", r->name, iqn);
        }
        /* an initiator entry linerate-ctl added (add host, add group, add initiator) */
        for (unsigned i = 0; i < r->nhosts; i++)
            for (unsigned k = 0; k < r->hosts[i].ninitiators; k++) {
                const char *iqn = r->hosts[i].initiators[k];
                if (!target_host_find(f, iqn) && !(b && target_host_find(b, iqn)))
                    note(lost, "target %s: host entry %s", r->name, iqn);
            }
    }
}

/* err: "reload would drop ...: A, B; ...". -1 if something would be lost. */
static int refuse_live_loss(struct daemon *d, const struct target_config *file, char *err,
                            size_t errlen)
{
    json_t *lost = json_array();
    live_only(d, file, lost);
    size_t n = json_array_size(lost);
    if (n == 0) {
        json_decref(lost);
        return 0;
    }
    int off = snprintf(
        err, errlen,
        "reload would drop what linerate-ctl added and %s does not have: ", d->cfg.config_path);
    size_t i;
    json_t *v;
    json_array_foreach(lost, i, v)
    {
        if (off >= 0 && (size_t)off < errlen)
            off += snprintf(err + off, errlen - (size_t)off, "%s%s", i ? ", " : "",
                            json_string_value(v));
    }
    if (off >= 0 && (size_t)off < errlen)
        snprintf(err + off, errlen - (size_t)off,
                 ". To keep %s, put %s in the file, or run `linerate-ctl save` (which writes "
                 "what runs into it) and make your edit again, then reload; `linerate-ctl "
                 "reload --force` drops %s. Nothing changed",
                 n == 1 ? "it" : "them", n == 1 ? "it" : "them", n == 1 ? "it" : "them");
    json_decref(lost);
    return -1;
}

/* CHAP: the file's users and secrets (the secrets file read again with it) for the logins
 * that begin from now on; a login under way finishes with the credentials it began with
 * (iscsi_auth keeps a copy) and sessions logged in carry on, as they authenticated once
 * (RFC 7143 §12.1.3 asks nothing more of them). */
static void apply_chap(struct daemon *d, const struct target_config *file, json_t *applied)
{
    pthread_mutex_lock(&d->srv.chap_lock);
    if (!ctl_chap_same(&d->cfg.discovery_chap, &file->discovery_chap)) {
        d->srv.discovery_chap = file->discovery_chap;
        d->cfg.discovery_chap = file->discovery_chap;
        note(applied, "discovery CHAP: new logins use the file's (sessions logged in carry on)");
    }
    for (unsigned t = 0; t < d->built.n; t++) {
        struct target_node_conf *r = &d->cfg.targets[t];
        const struct target_node_conf *f = find_conf(file, r->name);
        if (!f || ctl_chap_same(&r->chap, &f->chap))
            continue;
        d->built.nodes[t]->chap = f->chap;
        r->chap = f->chap;
        note(applied, "target %s: CHAP: new logins use the file's (sessions logged in carry on)",
             r->name);
    }
    pthread_mutex_unlock(&d->srv.chap_lock);
    snprintf(d->cfg.chap_secrets, sizeof(d->cfg.chap_secrets), "%s", file->chap_secrets);
    d->cfg.chap_algs = file->chap_algs;
}

/* A LUN to add, its store opened ahead. */
struct pending_add {
    const char *target;       /* the file's name for it (whole targets go first: indexes move) */
    struct target_lun_conf l; /* bs_spec owned */
    struct bs *bs;
};

/* A new target's stores can be opened (then closed again: the real opening comes with the
 * target), so that a file naming one that cannot changes nothing. */
static int check_new_target(const struct target_node_conf *c, char *err, size_t errlen)
{
    for (unsigned i = 0; i < c->nluns; i++) {
        struct bs *bs = target_open_lun_store(&c->luns[i], err, errlen);
        if (!bs)
            return -1;
        bs_close(bs);
    }
    return 0;
}

/* The reload proper; ctl_reload brackets it for the service manager. */
static json_t *reload(struct daemon *d, bool force, char *err, size_t errlen);

json_t *ctl_reload(struct daemon *d, bool force, char *err, size_t errlen)
{
    if (!d->cfg.config_path[0]) {
        snprintf(err, errlen, "the daemon was started without --config: nothing to reload");
        return NULL;
    }
    /* sd_notify(3), systemd 253 and later: RELOADING=1 with the CLOCK_MONOTONIC time it began
     * (a Type=notify-reload unit waits for it), READY=1 once done, whether or not the file
     * was taken. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    sd_notifyf_lr("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading %s",
                  (unsigned long long)now.tv_sec * 1000000ull +
                      (unsigned long long)now.tv_nsec / 1000,
                  d->cfg.config_path);
    json_t *r = reload(d, force, err, errlen);
    char note[1200];
    if (r)
        snprintf(note, sizeof(note), "reloaded %s", d->cfg.config_path);
    else
        snprintf(note, sizeof(note), "reload refused: %s", err);
    daemon_notify_ready(d, note);
    return r;
}

/* The LUNs a reload adds to running targets, their stores opened ahead. */
struct reload_plan {
    struct pending_add *adds;
    unsigned nadds;
};

/* Step 1: open the store of every LUN the file adds to a running target, so that one that
 * cannot be opened refuses the reload before anything changed; a LUN whose store the file
 * changes is listed as needing a restart. */
static int plan_lun_adds(struct daemon *d, const struct target_config *file, struct reload_plan *p,
                         json_t *restart, char *err, size_t errlen)
{
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct target_node_conf *run = &d->cfg.targets[t];
        const struct target_node_conf *f = find_conf(file, run->name);
        for (unsigned i = 0; f && i < f->nluns; i++) {
            const struct target_lun_conf *fl = &f->luns[i];
            const struct target_lun_conf *rl = find_lun(run, fl->lun);
            if (rl && same_store(rl, fl))
                continue;
            if (rl) {
                /* the whole specs: the change may be in the options (an identity) alone */
                char was[1024], now[1024];
                target_lun_spec_format(rl, was, sizeof(was));
                target_lun_spec_format(fl, now, sizeof(now));
                note(restart,
                     "target %s: LUN %llu changed its store (%s -> %s): remove it and add it "
                     "again, or restart",
                     run->name, (unsigned long long)fl->lun, was, now);
                continue;
            }
            if (scsi_target_lun(d->built.nodes[t]->scsi, fl->lun)) {
                note(restart, "target %s: LUN %llu is still being removed", run->name,
                     (unsigned long long)fl->lun);
                continue;
            }
            struct pending_add *grown = realloc(p->adds, (p->nadds + 1) * sizeof(*p->adds));
            if (!grown) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            p->adds = grown;
            struct pending_add *a = &p->adds[p->nadds];
            a->target = f->name;
            a->l = *fl;
            a->bs = target_open_lun_store(fl, err, errlen);
            if (!a->bs)
                return -1; /* err names FILE:LINE */
            a->l.bs_spec = strdup(fl->bs_spec);
            if (!a->l.bs_spec) {
                bs_close(a->bs);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            p->nadds++;
        }
    }
    return 0;
}

/* Step 2: the new targets' stores can be opened, and a running target's new portals are
 * listened on now, so that an address that cannot be bound refuses the reload before
 * anything changed (the listener alone changes nothing: no target is served through it yet). */
static int plan_targets_portals(struct daemon *d, const struct target_config *file, char *err,
                                size_t errlen)
{
    for (unsigned i = 0; i < file->ntargets; i++)
        if (!find_conf(&d->cfg, file->targets[i].name) &&
            check_new_target(&file->targets[i], err, errlen) < 0)
            return -1;
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct target_node_conf *f = find_conf(file, d->cfg.targets[t].name);
        for (unsigned i = 0; f && i < f->nportals; i++) {
            char why[512];
            if (!target_node_has_portal(&d->cfg.targets[t], f->portals[i].text) &&
                daemon_listen_portal(d, &f->portals[i], why, sizeof(why)) < 0) {
                snprintf(err, errlen, "%s: %s", f->origin, why);
                return -1;
            }
        }
    }
    return 0;
}

/* A refused reload: the listeners it opened closed, the stores it opened closed. */
static void plan_abort(struct daemon *d, const struct target_config *file, struct reload_plan *p)
{
    for (unsigned i = 0; i < file->ntargets; i++)
        for (unsigned k = 0; k < file->targets[i].nportals; k++)
            if (!ctl_portal_in_use(d, file->targets[i].portals[k].text))
                daemon_unlisten_portal(d, file->targets[i].portals[k].text);
    for (unsigned i = 0; i < p->nadds; i++) {
        bs_close(p->adds[i].bs);
        free(p->adds[i].l.bs_spec);
    }
    free(p->adds);
}

/* Apply: the LUNs of running target t gone from the file f, and write protection. */
static void apply_lun_changes(struct daemon *d, unsigned t, const struct target_node_conf *f,
                              json_t *applied, json_t *restart)
{
    /* Iterate over a copy of the numbers: removing edits the running list. */
    unsigned n = d->cfg.targets[t].nluns;
    uint64_t *nums = calloc(n ? n : 1, sizeof(*nums));
    for (unsigned i = 0; nums && i < n; i++)
        nums[i] = d->cfg.targets[t].luns[i].lun;
    for (unsigned i = 0; nums && i < n; i++) {
        const struct target_lun_conf *fl = find_lun(f, nums[i]);
        struct target_lun_conf *rl = NULL;
        for (unsigned k = 0; k < d->cfg.targets[t].nluns; k++)
            if (d->cfg.targets[t].luns[k].lun == nums[i])
                rl = &d->cfg.targets[t].luns[k];
        if (!rl)
            continue;
        if (!fl) {
            struct ctl_removed r;
            if (ctl_lun_remove(d, t, nums[i], RELOAD_REMOVE_TIMEOUT_S, &r) == 0)
                note(applied, "target %s: LUN %llu removed%s", f->name, (unsigned long long)nums[i],
                     r.closed ? "" : " (commands still hold it; its store closes later)");
        } else if (same_store(rl, fl) && rl->read_only != fl->read_only) {
            struct scsi_lun *lu = scsi_target_lun(d->built.nodes[t]->scsi, nums[i]);
            char why[512];
            if (lu && scsi_lun_set_read_only(lu, fl->read_only, why, sizeof(why)) == 0) {
                rl->read_only = fl->read_only;
                note(applied, "target %s: LUN %llu %s", f->name, (unsigned long long)nums[i],
                     fl->read_only ? "read-only" : "read-write");
            } else {
                note(restart, "target %s: LUN %llu: %s", f->name, (unsigned long long)nums[i],
                     lu ? why : "not there");
            }
        }
        if (fl && same_store(rl, fl) && !rate_limit_conf_same(&rl->limits, &fl->limits)) {
            struct scsi_lun *lu = scsi_target_lun(d->built.nodes[t]->scsi, nums[i]);
            if (lu) {
                rate_limit_set(scsi_lun_rate_limit(lu), &fl->limits);
                rl->limits = fl->limits;
                char text[256];
                target_lun_limits_format(&fl->limits, text, sizeof(text));
                note(applied, "target %s: LUN %llu limits %s", f->name, (unsigned long long)nums[i],
                     text[0] ? text + 1 : "none");
            }
        }
    }
    free(nums);
}

/* Apply: the planned LUNs (their stores are open already). */
static void apply_lun_adds(struct daemon *d, struct reload_plan *p, json_t *applied,
                           json_t *restart)
{
    for (unsigned i = 0; i < p->nadds; i++) {
        struct pending_add *a = &p->adds[i];
        /* the file has the target, so the reload did not remove it */
        const struct target_node_conf *run = find_conf(&d->cfg, a->target);
        assert(run);
        unsigned t = (unsigned)(run - d->cfg.targets);
        const char *name = run->name;
        uint64_t num = a->l.lun;
        char spec[256];
        snprintf(spec, sizeof(spec), "%s", a->l.bs_spec);
        char why[1024];
        if (ctl_lun_add(d, t, &a->l, a->bs, why, sizeof(why)) == 0)
            note(applied, "target %s: LUN %llu added (%s)", name, (unsigned long long)num, spec);
        else
            note(restart, "target %s: LUN %llu: %s", name, (unsigned long long)num, why);
    }
    free(p->adds);
}

/* Apply: the targets gone from the file, before the LUNs added to the others, so that a LUN
 * moved out of a removed target with its NAA pinned (naa=) is not refused as a duplicate of
 * itself (build.c, naa_holder: it sees what runs). Removing renumbers the running targets.
 * One that still has sessions drains without force: hidden from new logins and SendTargets
 * now, removed when its last session ends (ctl_reap_drained), its LUNs meanwhile still its
 * own, NAAs included; force logs them out and removes it now. */
static void apply_target_removes(struct daemon *d, const struct target_config *file, bool force,
                                 json_t *applied, json_t *restart)
{
    for (unsigned t = 0; t < d->cfg.ntargets;) {
        char name[ISCSI_NAME_MAX + 1];
        snprintf(name, sizeof(name), "%s", d->cfg.targets[t].name);
        if (find_conf(file, name)) {
            if (ctl_target_undrain(d, t))
                note(applied, "target %s served again (it was draining)", name);
            t++;
            continue;
        }
        unsigned nsess = force ? 0 : ctl_target_drain(d, t);
        struct ctl_target_removed tr;
        char why[512];
        int trc = nsess ? -EBUSY
                        : ctl_target_remove(d, name, force, RELOAD_REMOVE_TIMEOUT_S, &tr, why,
                                            sizeof(why));
        if (trc == 0) {
            note(applied, "target %s removed (%u session%s ended)", name, tr.sessions,
                 tr.sessions == 1 ? "" : "s");
            continue;
        }
        if (trc == -EBUSY && !force) {
            /* (a login that found it before it was hidden is waited for the same way) */
            nsess = ctl_target_drain(d, t);
            note(applied,
                 "target %s draining: no new login finds it; removed when its %u session%s "
                 "end%s%s (reload --force logs them out)",
                 name, nsess, nsess == 1 ? "" : "s", nsess == 1 ? "s" : "",
                 d->ctl ? "" : ", at the next reload (no control thread runs)");
        } else {
            note(restart, "%s", why);
        }
        t++;
    }
}

/* Apply: the file's new targets, last. */
static void apply_target_adds(struct daemon *d, const struct target_config *file, json_t *applied,
                              json_t *restart)
{
    for (unsigned i = 0; i < file->ntargets; i++) {
        const struct target_node_conf *f = &file->targets[i];
        if (find_conf(&d->cfg, f->name))
            continue;
        char why[1024];
        if (ctl_target_add(d, f, why, sizeof(why)) == 0)
            note(applied, "target %s added (%u LUN%s)", f->name, f->nluns,
                 f->nluns == 1 ? "" : "s");
        else
            note(restart, "target %s not added: %s", f->name, why);
    }
}

/* The log level, then the file becomes what the next reload compares with; the answer. */
static json_t *reload_done(struct daemon *d, struct target_config *file, json_t *applied,
                           json_t *restart)
{
    if (!d->cfg.cli_log_level && file->log_level != log_get_level()) {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        log_set_level(file->log_level);
        d->cfg.log_level = file->log_level;
        note(applied, "log-level %s", names[file->log_level]);
    }
    target_config_free(&d->file_cfg);
    d->file_cfg = *file;
    size_t i;
    json_t *v;
    json_array_foreach(applied, i, v) LOG_INFO("reload: %s", json_string_value(v));
    json_array_foreach(restart, i, v)
        LOG_WARN("reload: not applied, needs a restart: %s", json_string_value(v));
    LOG_INFO("reload of %s: %zu change%s applied, %zu needing a restart", d->cfg.config_path,
             json_array_size(applied), json_array_size(applied) == 1 ? "" : "s",
             json_array_size(restart));
    return json_pack("{s:s, s:o, s:o}", "config", d->cfg.config_path, "applied", applied,
                     "needs_restart", restart);
}

static json_t *reload(struct daemon *d, bool force, char *err, size_t errlen)
{
    struct target_config file;
    target_config_init(&file);
    if (target_config_load(&file, d->cfg.config_path, err, errlen) < 0) {
        target_config_free(&file);
        return NULL; /* err: "FILE:LINE: reason"; nothing changed */
    }
    if (!force && refuse_live_loss(d, &file, err, errlen) < 0) {
        target_config_free(&file);
        return NULL;
    }
    json_t *applied = json_array(), *restart = json_array();
    /* Plan: everything that can fail the reload, before anything changes. */
    struct reload_plan plan = {0};
    if (plan_lun_adds(d, &file, &plan, restart, err, errlen) < 0 ||
        plan_targets_portals(d, &file, err, errlen) < 0) {
        plan_abort(d, &file, &plan);
        json_decref(applied);
        json_decref(restart);
        target_config_free(&file);
        return NULL;
    }
    /* Nothing can fail the reload from here on: apply. CHAP first, then what still differs
     * and cannot change is listed; LUNs gone from the file, and write protection, the targets
     * gone from it, then the new LUNs, the portals and allow lists, the new targets: every
     * removal before the adds, whose NAA check sees what runs. */
    apply_chap(d, &file, applied);
    diff_fixed(&d->cfg, &file, restart);
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct target_node_conf *f = find_conf(&file, d->cfg.targets[t].name);
        if (f) {
            apply_lun_changes(d, t, f, applied, restart);
            ctl_alua_reload(d, t, f, applied);
        }
    }
    apply_target_removes(d, &file, force, applied, restart);
    apply_lun_adds(d, &plan, applied, restart);
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct target_node_conf *f = find_conf(&file, d->cfg.targets[t].name);
        if (f)
            apply_access(d, t, f, force, applied, restart);
    }
    apply_target_adds(d, &file, applied, restart);
    return reload_done(d, &file, applied, restart);
}
