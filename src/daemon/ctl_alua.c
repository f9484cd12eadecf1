/* ALUA states changed at run time (SPC-4 §5.16.2.2, implicit transitions made by the
 * operator): `linerate-ctl set alua` and a reload edit the running configuration (so that
 * `save` writes the new states), then the groups and LUNs the change names are brought to the
 * states that configuration gives them; the SCSI layer tells each I_T nexus with 2Ah/06h. Which
 * groups a LUN has is fixed when it is added: adding or removing a peer group still takes a restart
 * (or the LUN removed and added again). A state an initiator set with SET TARGET PORT GROUPS
 * (explicit ALUA, scsi/alua.c) is the SCSI layer's alone: shown, not saved, replaced by the next
 * change made here to that group (of that LUN); changes to other groups and LUNs leave it. Control
 * thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ctl_req.h"
#include "daemon/daemon.h"

/* The state the configuration gives group id of LUN l of target c; false if it names none. */
static bool conf_state(const struct target_node_conf *c, const struct target_lun_conf *l,
                       uint16_t id, enum scsi_alua_state *out)
{
    if (id == target_alua_tpgt(c)) {
        *out = l && l->alua_state_set ? l->alua_state : c->alua.state;
        return true;
    }
    for (unsigned i = 0; l && i < l->alua_npeers; i++)
        if (l->alua_peers[i].id == id) {
            *out = (enum scsi_alua_state)l->alua_peers[i].state;
            return true;
        }
    for (unsigned i = 0; i < c->alua.npeers; i++)
        if (c->alua.peers[i].id == id) {
            *out = (enum scsi_alua_state)c->alua.peers[i].state;
            return true;
        }
    return false;
}

/* Which (LUN, group) pairs a change brings to the configured state: one group (or all), on
 * one LUN (or all), and with `before` only those whose configured state differs from it. The
 * others keep what they have, states an initiator set with SET TARGET PORT GROUPS included:
 * linerate.conf(5) says such a state lasts until the operator changes that group's state. */
struct alua_scope {
    bool all_groups, all_luns;
    uint16_t group;
    uint64_t lun;
    const struct target_node_conf *before; /* its luns[] in the order of the running one's */
};

/* Bring the LUNs of target t in scope to the states of the running configuration: how many
 * LUNs changed. */
static unsigned apply_target(struct daemon *d, unsigned t, const struct alua_scope *sc)
{
    const struct target_node_conf *c = &d->cfg.targets[t];
    struct scsi_target *tg = d->built.nodes[t]->scsi;
    /* the defaults of LUNs added from now on */
    target_alua_apply(c, tg);
    unsigned changed = 0;
    for (unsigned i = 0; i < c->nluns; i++) {
        struct scsi_lun *lu = scsi_target_lun(tg, c->luns[i].lun);
        if (!lu || (!sc->all_luns && c->luns[i].lun != sc->lun))
            continue;
        struct scsi_alua_group g[SCSI_ALUA_GROUPS_MAX];
        unsigned n = scsi_lun_alua_get(lu, g, SCSI_ALUA_GROUPS_MAX);
        bool any = false;
        for (unsigned k = 0; k < n; k++) {
            enum scsi_alua_state st, was;
            if (!sc->all_groups && g[k].id != sc->group)
                continue;
            if (!conf_state(c, &c->luns[i], g[k].id, &st))
                continue;
            if (sc->before && conf_state(sc->before, &sc->before->luns[i], g[k].id, &was) &&
                was == st)
                continue;
            if (scsi_lun_alua_set(lu, k ? g[k].id : 0, st) > 0)
                any = true;
        }
        changed += any;
    }
    return changed;
}

/* Add or replace group id's state in a peer list of at most SCSI_ALUA_GROUPS_MAX - 1. */
static bool put_peer(struct scsi_alua_group *list, unsigned *n, uint16_t id,
                     enum scsi_alua_state st)
{
    for (unsigned i = 0; i < *n; i++)
        if (list[i].id == id) {
            list[i].state = (uint8_t)st;
            return true;
        }
    if (*n >= SCSI_ALUA_GROUPS_MAX - 1)
        return false;
    list[(*n)++] = (struct scsi_alua_group){.id = id, .state = (uint8_t)st};
    return true;
}

static void drop_peer(struct scsi_alua_group *list, unsigned *n, uint16_t id)
{
    for (unsigned i = 0; i < *n; i++)
        if (list[i].id == id) {
            memmove(&list[i], &list[i + 1], (*n - i - 1) * sizeof(*list));
            (*n)--;
            return;
        }
}

static bool lun_has_group(const struct scsi_lun *lu, uint16_t id)
{
    struct scsi_alua_group g[SCSI_ALUA_GROUPS_MAX];
    unsigned n = scsi_lun_alua_get(lu, g, SCSI_ALUA_GROUPS_MAX);
    for (unsigned k = 0; k < n; k++)
        if (g[k].id == id)
            return true;
    return false;
}

/* alua-mode = failover: the states follow the cluster's "ao" object (scsi/alua_failover.c), so
 * the one change an operator makes is handing the active/optimized role to this gateway (a
 * failback, or a planned move): it is written to the cluster and every gateway follows. */
static json_t *set_failover(struct daemon *d, struct iscsi_node *n, unsigned t, uint16_t id,
                            enum scsi_alua_state st, bool has_lun, uint64_t num, struct req_err *e)
{
    const struct target_node_conf *c = &d->cfg.targets[t];
    if (id != target_alua_tpgt(c) || st != SCSI_ALUA_ACTIVE_OPTIMIZED)
        return ctl_fail(e, ERR_FAILED,
                        "target %s has alua-mode = failover: its states follow the cluster; "
                        "only 'set alua %s active/optimized' on the gateway that is to take the "
                        "role",
                        n->name, n->name);
    unsigned claimed = 0, fenced = 0;
    for (unsigned i = 0; i < c->nluns; i++) {
        struct scsi_lun *lu = scsi_target_lun(n->scsi, c->luns[i].lun);
        int ret = lu && (!has_lun || c->luns[i].lun == num) ? scsi_lun_failover_claim(lu) : -1;
        claimed += ret == 0;
        fenced += ret == -ESHUTDOWN;
    }
    /* a fenced gateway's client is refused by the OSDs: claiming would do nothing */
    if (fenced)
        return ctl_fail(e, ERR_FAILED,
                        "target %s: this gateway was fenced (blocklisted by the cluster) on %u "
                        "LUN%s: it cannot take the role; restart it (a new Ceph client) first",
                        n->name, fenced, fenced == 1 ? "" : "s");
    if (!claimed)
        return ctl_fail(e, ERR_FAILED, "target %s: no LUN%s in failover (rbd: LUNs only)", n->name,
                        has_lun ? " of that number" : "");
    LOG_INFO("target %s: failover: group %u takes the active/optimized role of %u LUN%s by "
             "linerate-ctl",
             n->name, (unsigned)id, claimed, claimed == 1 ? "" : "s");
    return json_pack("{s:s, s:i, s:s, s:i}", "target", n->name, "group", (int)id, "state",
                     scsi_alua_state_name(st), "luns_claimed", (int)claimed);
}

/* set_alua {target, state, group?, lun?}: the state of group `group` (default: this gateway's)
 * for the whole target, which replaces what single LUNs had for that group, or for one LUN. */
json_t *ctl_set_alua(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_lun_target(d, params, &t, e);
    if (!n)
        return NULL;
    struct target_node_conf *c = &d->cfg.targets[t];
    const char *name = ctl_param_str(params, "state", true, e);
    enum scsi_alua_state st;
    if (!name)
        return NULL;
    if (scsi_alua_state_parse(name, &st) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS,
                        "bad state '%s': expected active/optimized, active/non-optimized or "
                        "standby",
                        name);
    uint64_t group = 0, num = 0;
    int has_group = ctl_param_uint(params, "group", 65535, &group, e);
    int has_lun = ctl_param_uint(params, "lun", SCSI_LUN_SLOTS - 1, &num, e);
    if (has_group < 0 || has_lun < 0)
        return NULL;
    uint16_t own = target_alua_tpgt(c);
    uint16_t id = has_group && group ? (uint16_t)group : own;
    if (c->alua.failover)
        return set_failover(d, n, t, id, st, has_lun, num, e);
    if (has_lun) {
        struct scsi_lun *lu = scsi_target_lun(n->scsi, num);
        struct target_lun_conf *l = ctl_conf_lun_find(d, t, num);
        if (!lu || !l)
            return ctl_fail(e, ERR_NOT_FOUND, "target %s has no LUN %llu", n->name,
                            (unsigned long long)num);
        if (!lun_has_group(lu, id))
            return ctl_fail(e, ERR_FAILED,
                            "LUN %llu of target %s has no ALUA group %u: peer groups are fixed "
                            "when a LUN is added (alua-peer, then a restart)",
                            (unsigned long long)num, n->name, (unsigned)id);
        if (id == own) {
            l->alua_state_set = true;
            l->alua_state = st;
        } else if (!put_peer(l->alua_peers, &l->alua_npeers, id, st)) {
            return ctl_fail(e, ERR_FAILED, "too many ALUA peer groups");
        }
    } else if (id == own) {
        c->alua.state = st;
        for (unsigned i = 0; i < c->nluns; i++)
            c->luns[i].alua_state_set = false;
    } else {
        bool known = false;
        for (unsigned i = 0; i < c->alua.npeers; i++)
            if (c->alua.peers[i].id == id) {
                c->alua.peers[i].state = (uint8_t)st;
                known = true;
            }
        if (!known)
            return ctl_fail(e, ERR_FAILED,
                            "target %s has no ALUA peer group %u (alua-peer, then a restart)",
                            n->name, (unsigned)id);
        for (unsigned i = 0; i < c->nluns; i++)
            drop_peer(c->luns[i].alua_peers, &c->luns[i].alua_npeers, id);
    }
    struct alua_scope sc = {.all_luns = !has_lun, .group = id, .lun = num};
    unsigned changed = apply_target(d, t, &sc);
    if (has_lun)
        LOG_INFO("target %s: LUN %llu: ALUA group %u %s by linerate-ctl", n->name,
                 (unsigned long long)num, (unsigned)id, scsi_alua_state_name(st));
    else
        LOG_INFO("target %s: ALUA group %u %s by linerate-ctl (%u LUN%s changed)", n->name,
                 (unsigned)id, scsi_alua_state_name(st), changed, changed == 1 ? "" : "s");
    return json_pack("{s:s, s:i, s:s, s:i}", "target", n->name, "group", (int)id, "state",
                     scsi_alua_state_name(st), "luns_changed", (int)changed);
}

void ctl_alua_reload(struct daemon *d, unsigned t, const struct target_node_conf *f,
                     json_t *applied)
{
    struct target_node_conf *c = &d->cfg.targets[t];
    /* Nothing of the target's ALUA changed in the file: what runs stays, states an initiator
     * set with SET TARGET PORT GROUPS included. */
    bool same = target_alua_same(&c->alua, &f->alua);
    for (unsigned i = 0; same && i < c->nluns; i++)
        for (unsigned k = 0; k < f->nluns; k++)
            if (f->luns[k].lun == c->luns[i].lun && !target_alua_lun_same(&c->luns[i], &f->luns[k]))
                same = false;
    if (same)
        return;
    /* alua-mode = failover: the states follow the cluster's "ao" object, which the failover
     * thread applies; a state set here would be undone at its next tick, or serve AO beside the
     * holder until then (the same refusal as ctl_set_alua). */
    if (c->alua.failover) {
        char what[ISCSI_NAME_MAX + 96];
        snprintf(what, sizeof(what),
                 "target %s: ALUA states not applied: alua-mode = failover (they follow the "
                 "cluster)",
                 c->name);
        json_array_append_new(applied, json_string(what));
        return;
    }
    /* what the configuration gave each LUN before: only the states this reload changes are
     * brought to the file's */
    struct target_node_conf before = *c;
    before.luns = c->nluns ? malloc(c->nluns * sizeof(*c->luns)) : NULL;
    if (c->nluns && !before.luns) {
        json_array_append_new(applied, json_string("ALUA states: out of memory, not applied"));
        return;
    }
    if (c->nluns)
        memcpy(before.luns, c->luns, c->nluns * sizeof(*c->luns));
    if (target_alua_same_groups(&c->alua, &f->alua)) {
        c->alua.state = f->alua.state;
        for (unsigned i = 0; i < c->alua.npeers; i++)
            for (unsigned k = 0; k < f->alua.npeers; k++)
                if (f->alua.peers[k].id == c->alua.peers[i].id)
                    c->alua.peers[i].state = f->alua.peers[k].state;
    }
    for (unsigned i = 0; i < c->nluns; i++) {
        struct target_lun_conf *rl = &c->luns[i];
        for (unsigned k = 0; k < f->nluns; k++) {
            const struct target_lun_conf *fl = &f->luns[k];
            if (fl->lun != rl->lun || !target_alua_lun_same_groups(rl, fl))
                continue;
            rl->alua_state_set = fl->alua_state_set;
            rl->alua_state = fl->alua_state;
            memcpy(rl->alua_peers, fl->alua_peers, sizeof(rl->alua_peers));
            rl->alua_npeers = fl->alua_npeers;
        }
    }
    struct alua_scope sc = {.all_groups = true, .all_luns = true, .before = &before};
    unsigned changed = apply_target(d, t, &sc);
    free(before.luns);
    if (changed) {
        char what[ISCSI_NAME_MAX + 64];
        snprintf(what, sizeof(what), "target %s: ALUA states (%u LUN%s changed)", c->name, changed,
                 changed == 1 ? "" : "s");
        json_array_append_new(applied, json_string(what));
    }
}
