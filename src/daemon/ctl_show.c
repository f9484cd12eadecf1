/* The control requests that only read the running daemon: show targets, LUNs, host entries,
 * portals, sessions and connections, and stats (docs/ctl-protocol.md). Control thread only. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/ctl_req.h"

/* {group, state, groups: [{group, state}..]}: LUN lu's ALUA states of the moment (they change
 * live, ctl_alua.c and SET TARGET PORT GROUPS); this gateway's group first. */
static json_t *alua_json(const struct target_node_conf *c, const struct scsi_lun *lu)
{
    struct scsi_alua_group g[SCSI_ALUA_GROUPS_MAX];
    unsigned n = scsi_lun_alua_get(lu, g, SCSI_ALUA_GROUPS_MAX);
    json_t *groups = json_array();
    for (unsigned k = 0; k < n; k++)
        json_array_append_new(groups,
                              json_pack("{s:i, s:s}", "group", (int)g[k].id, "state",
                                        scsi_alua_state_name((enum scsi_alua_state)g[k].state)));
    /* (the own group is always there, scsi/alua.c) */
    json_t *o = json_pack("{s:i, s:s, s:o, s:s}", "group", (int)target_alua_tpgt(c), "state",
                          n ? scsi_alua_state_name((enum scsi_alua_state)g[0].state) : "?",
                          "groups", groups, "mode", c->alua.failover ? "failover" : "all-active");
    /* failover: who the cluster says is active/optimized, and this gateway's takeovers */
    struct scsi_failover_info fi;
    if (o && scsi_lun_failover_get((struct scsi_lun *)lu, &fi))
        json_object_set_new(o, "failover",
                            json_pack("{s:i, s:I, s:b, s:i, s:I, s:i}", "ao", (int)fi.ao, "epoch",
                                      (json_int_t)fi.epoch, "fenced", fi.fenced, "failovers",
                                      (int)fi.failovers, "last_failover",
                                      (json_int_t)fi.last_failover_s, "last_failover_from",
                                      (int)fi.last_failover_from));
    return o;
}

static json_t *portal_list(const struct iscsi_node *n)
{
    json_t *a = json_array();
    for (unsigned i = 0; i < n->nportals; i++)
        json_array_append_new(a, json_string(n->portals[i].text));
    return a;
}

static unsigned node_lun_count(const struct iscsi_node *n)
{
    unsigned k = 0;
    for (uint64_t i = 0; i < n->scsi->nluns; i++)
        k += scsi_target_lun(n->scsi, i) != NULL;
    return k;
}

json_t *ctl_show_targets(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    (void)e;
    json_t *a = json_array();
    for (unsigned i = 0; i < d->built.n; i++) {
        const struct iscsi_node *n = d->built.nodes[i];
        pthread_mutex_lock(&d->srv.sessions_lock);
        unsigned nsess = n->nsessions;
        pthread_mutex_unlock(&d->srv.sessions_lock);
        json_t *allow = json_array();
        for (unsigned k = 0; k < n->nallow; k++)
            json_array_append_new(allow, json_string(n->allow[k]));
        json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:i, s:o, s:i, s:b, s:i, s:b}", "name",
                                           n->name, "alias", n->alias, "portals", portal_list(n),
                                           "luns", (int)node_lun_count(n), "allow", allow,
                                           "host_entries", (int)d->cfg.targets[i].nhosts, "chap",
                                           n->chap.user[0] != '\0', "sessions", (int)nsess,
                                           "draining", ctl_target_draining(d, i)));
    }
    return a;
}

/* The optional `target` of a show request into *only (NULL: every target): 0, or -1 with e
 * set when it is malformed or names no target. */
static int show_only(struct daemon *d, json_t *params, struct req_err *e, const char **only)
{
    *only = ctl_param_str(params, "target", false, e);
    if (e->code)
        return -1;
    if (*only && !ctl_find_node(d, *only, NULL)) {
        ctl_fail(e, ERR_NOT_FOUND, "no target named '%s'", *only);
        return -1;
    }
    return 0;
}

json_t *ctl_show_luns(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *only;
    if (show_only(d, params, e, &only) < 0)
        return NULL;
    json_t *a = json_array();
    for (unsigned i = 0; i < d->built.n; i++) {
        const struct iscsi_node *n = d->built.nodes[i];
        if (only && strcasecmp(n->name, only) != 0)
            continue;
        for (uint64_t l = 0; l < n->scsi->nluns; l++) {
            struct scsi_lun *lu = scsi_target_lun(n->scsi, l);
            if (!lu)
                continue;
            json_t *o = ctl_lun_json(d, i, lu);
            json_object_set_new(o, "alua", alua_json(&d->cfg.targets[i], lu));
            json_array_append_new(a, o);
        }
    }
    return a;
}

/* One [host] / [group] entry of target t, its maps as the SCSI target has them (what the hosts
 * see). */
static json_t *host_json(struct daemon *d, unsigned t, const struct target_host_conf *h)
{
    json_t *inis = json_array(), *maps = json_array();
    for (unsigned k = 0; k < h->ninitiators; k++)
        json_array_append_new(inis, json_string(h->initiators[k]));
    struct scsi_target *scsi = d->built.nodes[t]->scsi;
    struct scsi_host_mapping one;
    int n = scsi_target_host_maps(scsi, h->initiators[0], &one, 0);
    struct scsi_host_mapping *rows = malloc((n > 0 ? (size_t)n : 1) * sizeof(*rows));
    n = rows && n > 0 ? scsi_target_host_maps(scsi, h->initiators[0], rows, (unsigned)n) : 0;
    for (int k = 0; k < n; k++)
        json_array_append_new(
            maps, json_pack("{s:I, s:I, s:b}", "host_lun", (json_int_t)rows[k].host_lun, "lun",
                            (json_int_t)rows[k].lun, "read_only", rows[k].read_only));
    free(rows);
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:s}", "target", d->cfg.targets[t].name,
                          "kind", h->group ? "group" : "host", "name",
                          h->group ? h->group_name : h->initiators[0], "initiators", inis, "maps",
                          maps, "chap_user", h->chap.user, "chap_mutual_user", h->chap.mutual_user);
    /* the entry's caps as in force (one limiter for all its initiators) */
    const struct iscsi_host_limit *l =
        iscsi_node_host_limit_peek(d->built.nodes[t], h->initiators[0]);
    if (l)
        json_object_set_new(o, "limits", ctl_limits_json(&l->limit));
    return o;
}

json_t *ctl_show_hosts(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *only;
    if (show_only(d, params, e, &only) < 0)
        return NULL;
    json_t *a = json_array();
    for (unsigned i = 0; i < d->built.n; i++) {
        const struct target_node_conf *c = &d->cfg.targets[i];
        if (only && strcasecmp(c->name, only) != 0)
            continue;
        for (unsigned k = 0; k < c->nhosts; k++)
            json_array_append_new(a, host_json(d, i, &c->hosts[k]));
    }
    return a;
}

static json_t *portal_json(struct daemon *d, const struct listener *l)
{
    json_t *targets = json_array();
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct iscsi_node *n = d->built.nodes[t];
        for (unsigned p = 0; p < n->nportals; p++)
            if (strcmp(n->portals[p].text, l->portal.text) == 0)
                json_array_append_new(targets, json_string(n->name));
    }
    return json_pack("{s:s, s:i, s:b, s:o}", "portal", l->portal.text, "tpgt", (int)l->portal.tpgt,
                     "listening", l->fd >= 0, "targets", targets);
}

/* The raw counters (stats.c): linerate-ctl stats turns two of them into rates. */
json_t *ctl_show_stats(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    if (!IOSTATS_ENABLED)
        return ctl_fail(e, ERR_FAILED, "%s", STATS_NONE_MSG);
    json_t *r = stats_json(d);
    return r ? r : ctl_fail(e, ERR_INTERNAL, "out of memory");
}

/* The listeners are fixed but for those added with a target, which only this thread adds. */
json_t *ctl_show_portals(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    (void)e;
    json_t *a = json_array();
    /* A listener closed because no target has its portal any more is kept only for the
     * connections that came through it (daemon.h): not shown as a portal. */
    for (unsigned i = 0; i < d->nlisteners; i++)
        if (d->listeners[i].fd >= 0)
            json_array_append_new(a, portal_json(d, &d->listeners[i]));
    for (const struct listener *l = d->extra_listeners; l; l = l->next)
        if (l->fd >= 0)
            json_array_append_new(a, portal_json(d, l));
    return a;
}

static void isid_text(const uint8_t isid[6], char out[16])
{
    snprintf(out, 16, "0x%02x%02x%02x%02x%02x%02x", isid[0], isid[1], isid[2], isid[3], isid[4],
             isid[5]);
}

static json_t *params_json(const struct iscsi_params *p)
{
    return json_pack("{s:b, s:b, s:i, s:b, s:b, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:b, s:b, s:i}",
                     "header_digest", p->header_digest, "data_digest", p->data_digest,
                     "max_connections", (int)p->max_connections, "initial_r2t", p->initial_r2t,
                     "immediate_data", p->immediate_data, "max_recv_data_segment_length",
                     (json_int_t)p->max_recv_dsl, "initiator_max_recv_data_segment_length",
                     (json_int_t)p->peer_max_recv_dsl, "max_burst_length", (json_int_t)p->max_burst,
                     "first_burst_length", (json_int_t)p->first_burst, "default_time2wait",
                     (int)p->default_time2wait, "default_time2retain", (int)p->default_time2retain,
                     "max_outstanding_r2t", (int)p->max_outstanding_r2t, "data_pdu_in_order",
                     p->data_pdu_in_order, "data_sequence_in_order", p->data_sequence_in_order,
                     "error_recovery_level", (int)p->erl);
}

static json_t *conn_json(const struct iscsi_conn_info *c)
{
    return json_pack(
        "{s:i, s:s, s:s, s:i, s:s, s:s, s:I, s:I}", "cid", (int)c->cid, "peer", c->peer, "portal",
        c->portal, "reactor", c->reactor, "header_digest", c->header_digest ? "CRC32C" : "None",
        "data_digest", c->data_digest ? "CRC32C" : "None", "max_recv_data_segment_length",
        (json_int_t)c->max_recv_dsl, "max_send_data_segment_length", (json_int_t)c->max_send_dsl);
}

static json_t *sessions_or_conns(struct daemon *d, bool conns, struct req_err *e)
{
    struct iscsi_session_info *v;
    unsigned n;
    if (iscsi_server_list_sessions(&d->srv, &v, &n) < 0)
        return ctl_fail(e, ERR_INTERNAL, "out of memory");
    json_t *a = json_array();
    for (unsigned i = 0; i < n; i++) {
        const struct iscsi_session_info *s = &v[i];
        char isid[16];
        isid_text(s->isid, isid);
        if (conns) {
            for (unsigned k = 0; k < s->nconns; k++) {
                json_t *c = conn_json(&s->conns[k]);
                json_object_set_new(c, "tsih", json_integer(s->tsih));
                json_object_set_new(c, "initiator", json_string(s->initiator));
                json_object_set_new(c, "target", json_string(s->target));
                json_array_append_new(a, c);
            }
            continue;
        }
        json_t *cl = json_array();
        for (unsigned k = 0; k < s->nconns; k++)
            json_array_append_new(cl, conn_json(&s->conns[k]));
        json_array_append_new(
            a,
            json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:f, s:I, s:o, s:o}", "tsih", (int)s->tsih,
                      "isid", isid, "initiator", s->initiator, "chap_user", s->chap_user, "target",
                      s->target, "type", s->discovery ? "discovery" : "normal", "age_seconds",
                      (double)s->age_ms / 1000.0, "commands_in_flight", (json_int_t)s->in_flight,
                      "connections", cl, "parameters", params_json(&s->params)));
    }
    free(v);
    return a;
}

json_t *ctl_show_sessions(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    return sessions_or_conns(d, false, e);
}

json_t *ctl_show_connections(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    return sessions_or_conns(d, true, e);
}
