/* linerate-ctl's verbs for a running target's [host] / [group] entries: add and remove an
 * entry, a group's initiators, a mapping, an entry's CHAP users. Each edits a copy of the
 * target's entries, checks it as a config file's would be checked, and applies it the way a
 * reload applies the file's (ctl_hosts.c): the SCSI maps first (the hosts whose map changed
 * get REPORTED LUNS DATA HAS CHANGED, 3Fh/0Eh, on their nexuses only), then who may log in.
 * Taking an initiator away follows `remove allow` (ctl_access.c): its sessions carry on,
 * seeing no LUN, and are counted in the answer; --force logs them out; the target's last
 * entry cannot go (without entries every initiator may log in and see every LUN). Save
 * writes what this changed (ctl_save.c). Control thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/ctl_req.h"

#define HOST_LOGOUT_S 10 /* as logout session: how long an initiator has to log out */
#define HOST_TIMEOUT_MAX_S 3600

/* Target t's entries, copied to be edited: s is the running target but for its entries. */
static int scratch_begin(struct daemon *d, unsigned t, struct target_node_conf *s)
{
    *s = d->cfg.targets[t];
    s->hosts = NULL;
    s->nhosts = 0;
    return target_hosts_copy(s, &d->cfg.targets[t]);
}

/* The entry named `name` (a group's name, or a host's IQN) of s, NULL if none. */
static struct target_host_conf *entry_find(struct target_node_conf *s, const char *name)
{
    for (unsigned i = 0; i < s->nhosts; i++) {
        struct target_host_conf *h = &s->hosts[i];
        if (h->group ? strcmp(h->group_name, name) == 0 : strcasecmp(h->initiators[0], name) == 0)
            return h;
    }
    return NULL;
}

/* The secrets of s's CHAP users from the chap-secrets file, as a start or a reload reads
 * them: 0, or -1 with a reason in err. */
static int chap_load(struct daemon *d, struct target_node_conf *s, char *err, size_t errlen)
{
    struct target_config c;
    target_config_init(&c);
    snprintf(c.chap_secrets, sizeof(c.chap_secrets), "%s", d->cfg.chap_secrets);
    c.chap_algs = d->cfg.chap_algs;
    struct target_node_conf *saved = c.targets;
    unsigned nsaved = c.ntargets;
    c.targets = s;
    c.ntargets = 1;
    int rc = target_chap_load(&c, err, errlen);
    c.targets = saved;
    c.ntargets = nsaved;
    target_config_free(&c);
    return rc;
}

/* The edit in s made live on target t: checked, applied, and the sessions it shut out counted
 * (ended with force). The answer, or NULL with e set. */
static json_t *commit(struct daemon *d, unsigned t, struct target_node_conf *s, bool chap,
                      json_t *params, const char *entry, struct req_err *e)
{
    char err[1024];
    uint64_t timeout = HOST_LOGOUT_S;
    if (ctl_param_uint(params, "timeout", HOST_TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    bool force = ctl_param_bool(params, "force");
    if (target_hosts_check(s, "linerate-ctl", err, sizeof(err)) < 0) {
        /* (a line number names a line of the file; what this request added has none) */
        const char *why = strncmp(err, "linerate-ctl:0: ", 16) == 0 ? err + 16
                          : strncmp(err, "linerate-ctl: ", 14) == 0 ? err + 14
                                                                    : err;
        return ctl_fail(e, ERR_FAILED, "%s", why);
    }
    if (chap && chap_load(d, s, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_FAILED, "%s", err);
    struct iscsi_node *n = d->built.nodes[t];
    json_t *applied = json_array(), *restart = json_array();
    /* (remove_host keeps the last entry: no force needed here) */
    ctl_hosts_apply(d, t, s, false, (unsigned)timeout, applied, restart);
    if (json_array_size(restart)) {
        const char *why = json_string_value(json_array_get(restart, 0));
        ctl_fail(e, ERR_FAILED, "%s", why ? why : "failed");
        json_decref(applied);
        json_decref(restart);
        return NULL;
    }
    json_decref(restart);
    unsigned sessions = force ? ctl_end_disallowed_sessions(d, n, (unsigned)timeout)
                              : ctl_disallowed_sessions(d, n);
    LOG_INFO("event=host-entry-changed target=%s entry=%s sessions-not-allowed=%u "
             "sessions-ended=%s",
             n->name, entry, sessions, force ? "yes" : "no");
    return json_pack("{s:s, s:s, s:o, s:i, s:b}", "target", n->name, "entry", entry, "applied",
                     applied, "sessions", (int)sessions, "sessions_ended", force);
}

/* One verb's request, on its way to being applied: the daemon, the request's target t and its
 * params, s (a copy of t's entries to edit), the entry the request names and h, that entry in
 * s (NULL when it has none), and e for the answer's error. */
struct edit_req {
    struct daemon *d;
    unsigned t;
    json_t *params;
    struct target_node_conf *s;
    struct target_host_conf *h;
    const char *entry;
    struct req_err *e;
};

/* One edit of s: 0, or -1 with r->e set. `variant` picks a verb's second form (a group rather
 * than a host, adding an initiator rather than removing one). */
typedef int (*edit_fn)(struct edit_req *r, bool variant);

/* How a verb runs: its edit, whether the entry must exist already, whether the CHAP secrets
 * are read again, and the edit's variant. */
struct verb {
    edit_fn fn;
    bool want_entry, chap, variant;
};

/* The request's target and entry ("target", "entry"), edited on a copy by the verb, then made
 * live (commit). */
static json_t *edit(struct daemon *d, json_t *params, struct req_err *e, const struct verb *v)
{
    struct edit_req r = {.d = d, .params = params, .e = e};
    if (!ctl_param_target(d, params, &r.t, e))
        return NULL;
    r.entry = ctl_param_str(params, "entry", true, e);
    if (!r.entry)
        return NULL;
    struct target_node_conf s;
    if (scratch_begin(d, r.t, &s) < 0)
        return ctl_fail(e, ERR_INTERNAL, "out of memory");
    r.s = &s;
    r.h = entry_find(&s, r.entry);
    json_t *out = NULL;
    if (v->want_entry && !r.h)
        ctl_fail(e, ERR_NOT_FOUND, "target %s has no host or group entry '%s'", s.name, r.entry);
    else if (v->fn(&r, v->variant) == 0)
        out = commit(d, r.t, &s, v->chap, params, r.entry, e);
    target_hosts_free(&s);
    return out;
}

/* An invalid request: the reason in err, unless e says it already. Returns -1. */
static int invalid(struct req_err *e, const char *err)
{
    if (!e->code)
        ctl_fail(e, ERR_INVALID_PARAMS, "%s", err);
    return -1;
}

/* Whether initiator iqn stands in an entry of s already (one initiator, one entry): e set. */
static bool in_an_entry(const struct target_node_conf *s, const char *iqn, struct req_err *e)
{
    const struct target_host_conf *o = target_host_find(s, iqn);
    if (o)
        ctl_fail(e, ERR_FAILED, "initiator %s is in %s %s of target %s already", iqn,
                 o->group ? "group" : "host entry", o->group ? o->group_name : o->initiators[0],
                 s->name);
    return o != NULL;
}

/* Initiator iqn into entry h of s: in no other entry, a valid iSCSI name. 0, or -1 with e
 * set. */
static int add_member(struct target_node_conf *s, struct target_host_conf *h, const char *iqn,
                      struct req_err *e)
{
    char err[512] = "";
    if (in_an_entry(s, iqn, e))
        return -1;
    if (target_check_iscsi_name(iqn, err, sizeof(err)) < 0 ||
        target_host_add_initiator(h, iqn, 0, err, sizeof(err)) < 0)
        return invalid(e, err);
    return 0;
}

/* add_host {target, entry: IQN} and (group) add_group {target, entry: NAME, initiators:
 * [IQN...]} */
static int add_entry(struct edit_req *r, bool group)
{
    json_t *inis = json_object_get(r->params, "initiators");
    char err[512];
    if (r->h) {
        ctl_fail(r->e, ERR_FAILED, "target %s has a %s entry '%s' already", r->s->name,
                 r->h->group ? "group" : "host", r->entry);
        return -1;
    }
    if (group && (!json_is_array(inis) || json_array_size(inis) == 0))
        return invalid(r->e, "a group needs its initiators (\"initiators\": [IQN...])");
    /* target_host_open appends to s->hosts (a group's name checked; an IQN is ours to check) */
    if (!group && in_an_entry(r->s, r->entry, r->e))
        return -1;
    struct target_host_conf *h = NULL;
    if ((!group && target_check_iscsi_name(r->entry, err, sizeof(err)) < 0) ||
        !(h = target_host_open(r->s, group, r->entry, "linerate-ctl", 0, err, sizeof(err))))
        return invalid(r->e, err);
    size_t i;
    json_t *v;
    json_array_foreach(group ? inis : NULL, i, v)
    {
        if (add_member(r->s, h, json_is_string(v) ? json_string_value(v) : "", r->e) < 0)
            return -1;
    }
    return 0;
}

/* remove_host {target, entry, force?, timeout?}: a host or a group */
static int remove_host(struct edit_req *r, bool variant)
{
    (void)variant;
    struct target_node_conf *s = r->s;
    if (s->nhosts == 1) {
        ctl_fail(r->e, ERR_FAILED,
                 "'%s' is the last entry of target %s: without entries every initiator may log "
                 "in and see every LUN; add another first (or drop the entries from the config "
                 "file and reload)",
                 r->entry, s->name);
        return -1;
    }
    /* the entry out of the copy: its arrays freed, the later ones moved down */
    free(r->h->initiators);
    free(r->h->initiator_lines);
    free(r->h->maps);
    unsigned at = (unsigned)(r->h - s->hosts);
    memmove(&s->hosts[at], &s->hosts[at + 1], (s->nhosts - at - 1) * sizeof(s->hosts[0]));
    s->nhosts--;
    return 0;
}

/* add_initiator (add) / remove_initiator {target, entry: GROUP, initiator} */
static int group_member(struct edit_req *r, bool add)
{
    struct target_host_conf *h = r->h;
    const char *iqn = ctl_param_str(r->params, "initiator", true, r->e);
    if (!iqn)
        return -1;
    if (!h->group) {
        ctl_fail(r->e, ERR_FAILED, "'%s' is a host entry, not a group", r->entry);
        return -1;
    }
    if (add)
        return add_member(r->s, h, iqn, r->e);
    unsigned k = 0;
    while (k < h->ninitiators && strcasecmp(h->initiators[k], iqn) != 0)
        k++;
    if (k == h->ninitiators) {
        ctl_fail(r->e, ERR_NOT_FOUND, "group %s has no initiator %s", r->entry, iqn);
        return -1;
    }
    if (h->ninitiators == 1) {
        ctl_fail(r->e, ERR_FAILED,
                 "%s is the last initiator of group %s: remove the group instead "
                 "(linerate-ctl remove host %s %s)",
                 iqn, r->entry, r->s->name, r->entry);
        return -1;
    }
    memmove(&h->initiators[k], &h->initiators[k + 1],
            (h->ninitiators - k - 1) * sizeof(h->initiators[0]));
    memmove(&h->initiator_lines[k], &h->initiator_lines[k + 1],
            (h->ninitiators - k - 1) * sizeof(h->initiator_lines[0]));
    h->ninitiators--;
    return 0;
}

/* The request's "host_lun" and the index of its mapping in h (h->nmaps when it has none):
 * -1 with e set when the parameter is missing or out of range. */
static int map_index(struct edit_req *r, uint64_t *host_lun, unsigned *k)
{
    if (ctl_param_uint_req(r->params, "host_lun", SCSI_LUN_SLOTS - 1, host_lun, r->e) < 0)
        return -1;
    *k = 0;
    while (*k < r->h->nmaps && r->h->maps[*k].host_lun != *host_lun)
        (*k)++;
    return 0;
}

/* unmap_lun {target, entry, host_lun} */
static int unmap_lun(struct edit_req *r, bool variant)
{
    (void)variant;
    struct target_host_conf *h = r->h;
    uint64_t host_lun;
    unsigned k;
    if (map_index(r, &host_lun, &k) < 0)
        return -1;
    if (k == h->nmaps) {
        ctl_fail(r->e, ERR_NOT_FOUND, "%s maps no host LUN %llu", r->entry,
                 (unsigned long long)host_lun);
        return -1;
    }
    memmove(&h->maps[k], &h->maps[k + 1], (h->nmaps - k - 1) * sizeof(h->maps[0]));
    h->nmaps--;
    return 0;
}

/* map_lun {target, entry, host_lun, lun, read_only?}: a host number mapped again is replaced */
static int map_lun(struct edit_req *r, bool variant)
{
    (void)variant;
    struct target_host_conf *h = r->h;
    uint64_t host_lun, lun;
    unsigned k;
    if (map_index(r, &host_lun, &k) < 0 ||
        ctl_param_uint_req(r->params, "lun", SCSI_LUN_SLOTS - 1, &lun, r->e) < 0)
        return -1;
    if (!ctl_conf_lun_find(r->d, r->t, lun)) {
        ctl_fail(r->e, ERR_NOT_FOUND, "target %s has no LUN %llu", r->s->name,
                 (unsigned long long)lun);
        return -1;
    }
    for (unsigned m = 0; m < h->nmaps; m++)
        if (m != k && h->maps[m].lun == lun) {
            ctl_fail(r->e, ERR_FAILED, "%s sees LUN %llu as host LUN %llu already (unmap it first)",
                     r->entry, (unsigned long long)lun, (unsigned long long)h->maps[m].host_lun);
            return -1;
        }
    if (k == h->nmaps) {
        struct target_host_map *a = realloc(h->maps, (h->nmaps + 1) * sizeof(*a));
        if (!a) {
            ctl_fail(r->e, ERR_INTERNAL, "out of memory");
            return -1;
        }
        h->maps = a;
        h->nmaps++;
    }
    h->maps[k] = (struct target_host_map){
        .host_lun = host_lun, .lun = lun, .read_only = ctl_param_bool(r->params, "read_only")};
    return 0;
}

/* set_host_chap {target, entry, user, mutual_user?}: the entry's CHAP is the pair given; a
 * user "" clears it (the target's CHAP then) */
static int set_chap(struct edit_req *r, bool variant)
{
    (void)variant;
    const char *user = ctl_param_str(r->params, "user", true, r->e);
    const char *mutual = user ? ctl_param_str(r->params, "mutual_user", false, r->e) : NULL;
    if (!user || r->e->code)
        return -1;
    char err[512];
    memset(&r->h->chap, 0, sizeof(r->h->chap));
    if ((user[0] && target_chap_host_key(r->h, "chap-user", user, err, sizeof(err)) < 0) ||
        (mutual && mutual[0] &&
         target_chap_host_key(r->h, "chap-mutual-user", mutual, err, sizeof(err)) < 0))
        return invalid(r->e, err);
    return 0;
}

/* The verbs, a row each: the method's function, its edit, whether its entry must exist,
 * whether it changes CHAP, and its variant. */
#define VERB(name, fn, want_entry, chap, variant)                                                  \
    json_t *name(struct daemon *d, json_t *params, struct req_err *e)                              \
    {                                                                                              \
        static const struct verb v = {fn, want_entry, chap, variant};                              \
        return edit(d, params, e, &v);                                                             \
    }
VERB(ctl_add_host, add_entry, false, false, false)
VERB(ctl_add_group, add_entry, false, false, true)
VERB(ctl_remove_host, remove_host, true, false, false)
VERB(ctl_add_initiator, group_member, true, false, true)
VERB(ctl_remove_initiator, group_member, true, false, false)
VERB(ctl_map_lun, map_lun, true, false, false)
VERB(ctl_unmap_lun, unmap_lun, true, false, false)
VERB(ctl_set_host_chap, set_chap, true, true, false)
