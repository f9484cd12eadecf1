/* The requests of the control socket (docs/ctl-protocol.md): JSON-RPC 2.0 parsed with jansson,
 * a table of methods, and what each does to the running daemon. Runs on the control thread.
 *
 * What it touches and how: the targets and their nodes are fixed once the daemon serves (only
 * LUNs come and go), so reading them needs nothing; sessions are copied under the session
 * table lock (iscsi/admin.c); a LUN is published and detached under its target's lock
 * (scsi/lun_admin.c), and a detached LUN is freed only after every reactor has finished the
 * loop turn it was in (a message to each, the barrier below) and its last command let go. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bs/bs.h"
#include "daemon/daemon.h"
#include "util/size.h"

#ifndef LINERATE_VERSION
#define LINERATE_VERSION "unknown"
#endif

/* JSON-RPC 2.0 error codes (§5.1) and ours (-32000..-32099 are the server's to define). */
enum {
    ERR_PARSE = -32700,
    ERR_INVALID_REQUEST = -32600,
    ERR_NO_METHOD = -32601,
    ERR_INVALID_PARAMS = -32602,
    ERR_INTERNAL = -32603,
    ERR_FAILED = -32000,    /* the action was refused or failed; message says why */
    ERR_NOT_FOUND = -32004, /* no such target, LUN, session or connection */
};

#define REMOVE_TIMEOUT_S 30 /* remove lun: how long to wait for the commands holding it */
#define LOGOUT_TIMEOUT_S 10 /* logout session: how long the initiator has before the drop */
#define BARRIER_TIMEOUT_S 5
#define TIMEOUT_MAX_S 3600

struct ctl_zombie {
    struct ctl_zombie *next;
    struct scsi_lun *lu;
    char target[ISCSI_NAME_MAX + 1];
    uint64_t lun;
};

struct req_err {
    int code;
    char msg[512];
};

static json_t *fail(struct req_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static json_t *fail(struct req_err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return NULL;
}

/* --- parameters --- */

static const char *param_str(json_t *params, const char *key, bool required, struct req_err *e)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v) {
        if (required)
            fail(e, ERR_INVALID_PARAMS, "missing parameter '%s'", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be a string", key);
        return NULL;
    }
    return json_string_value(v);
}

/* An unsigned integer parameter in [0, max]: 1 found, 0 absent, -1 bad (e set). */
static int param_uint(json_t *params, const char *key, uint64_t max, uint64_t *out,
                      struct req_err *e)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max) {
        fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be an integer from 0 to %llu", key,
             (unsigned long long)max);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static int param_uint_req(json_t *params, const char *key, uint64_t max, uint64_t *out,
                          struct req_err *e)
{
    int rc = param_uint(params, key, max, out, e);
    if (rc == 0)
        fail(e, ERR_INVALID_PARAMS, "missing parameter '%s'", key);
    return rc == 1 ? 0 : -1;
}

static bool param_bool(json_t *params, const char *key)
{
    return params && json_is_true(json_object_get(params, key));
}

static struct iscsi_node *find_node(struct daemon *d, const char *name, unsigned *idx)
{
    for (unsigned i = 0; i < d->built.n; i++) {
        if (strcasecmp(d->built.nodes[i]->name, name) == 0) {
            if (idx)
                *idx = i;
            return d->built.nodes[i];
        }
    }
    return NULL;
}

/* The target a request names by its "target" parameter, and its index (idx may be NULL). */
static struct iscsi_node *param_target(struct daemon *d, json_t *params, unsigned *idx,
                                       struct req_err *e)
{
    const char *name = param_str(params, "target", true, e);
    if (!name)
        return NULL;
    struct iscsi_node *n = find_node(d, name, idx);
    if (!n)
        fail(e, ERR_NOT_FOUND, "no target named '%s'", name);
    return n;
}

/* The target of a LUN verb: the one named, or, when the request names none (linerate-ctl set
 * lun N ro, the spelling), the daemon's only target. */
static struct iscsi_node *param_lun_target(struct daemon *d, json_t *params, unsigned *idx,
                                           struct req_err *e)
{
    if (params && json_object_get(params, "target"))
        return param_target(d, params, idx, e);
    if (d->built.n == 1) {
        *idx = 0;
        return d->built.nodes[0];
    }
    if (d->built.n == 0)
        fail(e, ERR_NOT_FOUND, "no target is served");
    else
        fail(e, ERR_INVALID_PARAMS, "several targets: name one (TARGET N)");
    return NULL;
}

static struct scsi_lun *param_lun(struct iscsi_node *n, json_t *params, uint64_t *num,
                                  struct req_err *e)
{
    if (param_uint_req(params, "lun", SCSI_LUN_SLOTS - 1, num, e) < 0)
        return NULL;
    struct scsi_lun *lu = scsi_target_lun(n->scsi, *num);
    if (!lu)
        fail(e, ERR_NOT_FOUND, "target %s has no LUN %llu", n->name, (unsigned long long)*num);
    return lu;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- the reactor barrier --- */

/* Every reactor runs one message after whatever turn it is in: code that looked a LUN up
 * before it was detached (on a reactor, synchronously) is done once all have answered. The
 * object is shared by the waiter and the messages and freed by the last of them, so a
 * reactor that answers after the waiter gave up finds it still there. */
struct barrier {
    atomic_int refs;
    sem_t sem;
    unsigned n;
    struct reactor_msg msgs[];
};

static void barrier_put(struct barrier *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        sem_destroy(&b->sem);
        free(b);
    }
}

static void barrier_hit(void *arg)
{
    struct barrier *b = arg;
    sem_post(&b->sem);
    barrier_put(b);
}

static int reactors_barrier(struct daemon *d)
{
    struct barrier *b = calloc(1, sizeof(*b) + d->nreactors * sizeof(b->msgs[0]));
    if (!b)
        return -1;
    sem_init(&b->sem, 0, 0);
    b->n = d->nreactors;
    atomic_init(&b->refs, (int)b->n + 1);
    for (unsigned i = 0; i < b->n; i++)
        reactor_post(d->reactors[i], &b->msgs[i], barrier_hit, b);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += BARRIER_TIMEOUT_S;
    int rc = 0;
    for (unsigned i = 0; i < b->n; i++) {
        while (sem_timedwait(&b->sem, &ts) < 0) {
            if (errno != EINTR) {
                rc = -1;
                break;
            }
        }
        if (rc < 0)
            break;
    }
    barrier_put(b);
    return rc;
}

/* --- show --- */

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

static json_t *m_show_targets(struct daemon *d, json_t *params, struct req_err *e)
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
        json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:i, s:o, s:b, s:i, s:b}", "name",
                                           n->name, "alias", n->alias, "portals", portal_list(n),
                                           "luns", (int)node_lun_count(n), "allow", allow, "chap",
                                           n->chap.user[0] != '\0', "sessions", (int)nsess,
                                           "draining", ctl_target_draining(d, i)));
    }
    return a;
}

static struct target_lun_conf *conf_lun_find(struct daemon *d, unsigned t, uint64_t lun)
{
    struct target_node_conf *c = &d->cfg.targets[t];
    for (unsigned i = 0; i < c->nluns; i++)
        if (c->luns[i].lun == lun)
            return &c->luns[i];
    return NULL;
}

/* LUN lu of target t. Its store as the configuration has it: what the LUN was opened with
 * until a resize, which writes the new size there (conf_lun_resized). */
static json_t *lun_json(struct daemon *d, unsigned t, const struct scsi_lun *lu)
{
    struct scsi_lun_info li;
    scsi_lun_get_info(lu, &li);
    const struct target_lun_conf *c = conf_lun_find(d, t, li.lun);
    const char *target = d->built.nodes[t]->name;
    return json_pack("{s:s, s:I, s:s, s:I, s:i, s:i, s:b, s:b, s:b, s:I}", "target", target, "lun",
                     (json_int_t)li.lun, "store", c ? c->bs_spec : li.store, "bytes",
                     (json_int_t)li.bytes, "block_size", (int)li.block_size, "physical_block_size",
                     (int)li.phys_block_size, "read_only", li.read_only, "removable", li.removable,
                     "thin", li.thin, "commands", (json_int_t)li.users);
}

static json_t *m_show_luns(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *only = param_str(params, "target", false, e);
    if (e->code)
        return NULL;
    if (only && !find_node(d, only, NULL))
        return fail(e, ERR_NOT_FOUND, "no target named '%s'", only);
    json_t *a = json_array();
    for (unsigned i = 0; i < d->built.n; i++) {
        const struct iscsi_node *n = d->built.nodes[i];
        if (only && strcasecmp(n->name, only) != 0)
            continue;
        for (uint64_t l = 0; l < n->scsi->nluns; l++) {
            struct scsi_lun *lu = scsi_target_lun(n->scsi, l);
            if (lu)
                json_array_append_new(a, lun_json(d, i, lu));
        }
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
static json_t *m_stats(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    if (!IOSTATS_ENABLED)
        return fail(e, ERR_FAILED, "%s", STATS_NONE_MSG);
    json_t *r = stats_json(d);
    return r ? r : fail(e, ERR_INTERNAL, "out of memory");
}

/* The listeners are fixed but for those added with a target, which only this thread adds. */
static json_t *m_show_portals(struct daemon *d, json_t *params, struct req_err *e)
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
        return fail(e, ERR_INTERNAL, "out of memory");
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

static json_t *m_show_sessions(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    return sessions_or_conns(d, false, e);
}

static json_t *m_show_connections(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    return sessions_or_conns(d, true, e);
}

/* --- LUNs --- */

static void zombie_add(struct daemon *d, const char *target, uint64_t lun, struct scsi_lun *lu);

/* Record a LUN in the running configuration (what reload compares the file with): takes
 * l->bs_spec. */
static void conf_lun_add(struct daemon *d, unsigned t, struct target_lun_conf *l)
{
    char err[256];
    if (target_node_add_lun(&d->cfg.targets[t], l, err, sizeof(err)) < 0) {
        LOG_WARN("target %s: LUN %llu not recorded for reload: %s", d->cfg.targets[t].name,
                 (unsigned long long)l->lun, err);
        free(l->bs_spec);
    }
}

static void conf_lun_del(struct daemon *d, unsigned t, uint64_t lun)
{
    struct target_node_conf *c = &d->cfg.targets[t];
    struct target_lun_conf *l = conf_lun_find(d, t, lun);
    if (!l)
        return;
    free(l->bs_spec);
    size_t i = (size_t)(l - c->luns);
    memmove(l, l + 1, (c->nluns - i - 1) * sizeof(*l));
    c->nluns--;
}

int ctl_lun_add(struct daemon *d, unsigned t, struct target_lun_conf *l, struct bs *bs, char *err,
                size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    const char *state_dir = target_state_dir(&d->cfg);
    int rc = bs ? target_add_lun_store(state_dir, n->name, l, bs, n->scsi, err, errlen)
                : target_build_lun(state_dir, n->name, l, n->scsi, err, errlen);
    if (rc < 0) {
        free(l->bs_spec);
        l->bs_spec = NULL;
        return -1;
    }
    /* SPC-4: the initiators learn of the new LUN by REPORTED LUNS DATA HAS CHANGED on the
     * LUNs they already use. */
    scsi_target_luns_changed(n->scsi, scsi_target_lun(n->scsi, l->lun));
    char spec[2 * TARGET_ORIGIN_MAX + 3];
    LOG_INFO("event=lun-added target=%s lun=%llu spec=%s ro=%s", n->name,
             (unsigned long long)l->lun, log_quote(spec, sizeof(spec), l->bs_spec),
             l->read_only ? "yes" : "no");
    conf_lun_add(d, t, l);
    return 0;
}

static json_t *m_add_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_target(d, params, &t, e);
    if (!n)
        return NULL;
    const char *spec = param_str(params, "spec", true, e);
    if (!spec)
        return NULL;
    uint64_t num = 0;
    int given = param_uint(params, "lun", SCSI_LUN_SLOTS - 1, &num, e);
    if (given < 0)
        return NULL;
    struct target_lun_conf l;
    memset(&l, 0, sizeof(l));
    char err[1024];
    if (target_parse_lun_spec(spec, &l, err, sizeof(err)) < 0)
        return fail(e, ERR_INVALID_PARAMS, "%s", err); /* it names the spec */
    if (target_lun_rbd_timeout(&l, d->cfg.rbd_timeout_s) < 0) {
        free(l.bs_spec);
        return fail(e, ERR_INTERNAL, "out of memory");
    }
    if (given) {
        if (scsi_target_lun(n->scsi, num)) {
            free(l.bs_spec);
            return fail(e, ERR_FAILED, "target %s already has LUN %llu", n->name,
                        (unsigned long long)num);
        }
    } else {
        /* The next free number: the lowest one without a LUN. */
        while (num < SCSI_LUN_SLOTS && scsi_target_lun(n->scsi, num))
            num++;
        if (num == SCSI_LUN_SLOTS) {
            free(l.bs_spec);
            return fail(e, ERR_FAILED, "target %s has no free LUN number", n->name);
        }
    }
    l.lun = num;
    snprintf(l.origin, sizeof(l.origin), "add lun '%s'", spec);
    if (ctl_lun_add(d, t, &l, NULL, err, sizeof(err)) < 0) {
        /* in the daemon's log too: the reason (a cluster that refused the gateway's key, a
         * missing file) is the operator's to fix, whoever ran linerate-ctl */
        LOG_WARN("target %s: LUN %llu not added: %s", n->name, (unsigned long long)num, err);
        return fail(e, ERR_FAILED, "%s", err);
    }
    return lun_json(d, t, scsi_target_lun(n->scsi, num));
}

static void zombie_add(struct daemon *d, const char *target, uint64_t lun, struct scsi_lun *lu)
{
    struct ctl_zombie *z = calloc(1, sizeof(*z));
    if (!z) {
        /* Leaking the LUN is the only safe answer: commands still use it. */
        LOG_ERR("target %s: LUN %llu: out of memory; its store stays open", target,
                (unsigned long long)lun);
        return;
    }
    z->lu = lu;
    z->lun = lun;
    snprintf(z->target, sizeof(z->target), "%s", target);
    z->next = d->zombies;
    d->zombies = z;
}

void ctl_reap_zombies(struct daemon *d, bool all)
{
    struct ctl_zombie **pp = &d->zombies;
    while (*pp) {
        struct ctl_zombie *z = *pp;
        if (all || scsi_lun_users(z->lu) == 0) {
            LOG_INFO("target %s: removed LUN %llu released by its last command; store closed",
                     z->target, (unsigned long long)z->lun);
            scsi_lun_free(z->lu);
            *pp = z->next;
            free(z);
        } else {
            pp = &z->next;
        }
    }
}

int ctl_lun_remove(struct daemon *d, unsigned t, uint64_t num, unsigned timeout_s,
                   struct ctl_removed *out)
{
    struct iscsi_node *n = d->built.nodes[t];
    struct scsi_lun *lu = scsi_target_detach_lun(n->scsi, num);
    if (!lu)
        return -1;
    conf_lun_del(d, t, num);
    uint64_t t0 = reactor_now_ms();
    /* New commands now fail LOGICAL UNIT NOT SUPPORTED; those that found it run on. */
    bool settled = reactors_barrier(d) == 0;
    uint64_t deadline = t0 + (uint64_t)timeout_s * 1000;
    while (settled && scsi_lun_users(lu) > 0 && reactor_now_ms() < deadline && !ctl_stopping(d))
        sleep_ms(10);
    long users = settled ? scsi_lun_users(lu) : -1;
    scsi_target_luns_changed(n->scsi, NULL);
    out->waited_ms = reactor_now_ms() - t0;
    out->left = users < 0 ? 0 : users;
    out->closed = users == 0;
    if (users == 0) {
        scsi_lun_free(lu); /* a file store makes written data stable first */
        LOG_INFO("event=lun-removed target=%s lun=%llu waited-ms=%llu commands-left=0", n->name,
                 (unsigned long long)num, (unsigned long long)out->waited_ms);
    } else {
        zombie_add(d, n->name, num, lu);
        /* Its store closes when they end (ctl_reap_zombies). */
        LOG_WARN("event=lun-removed target=%s lun=%llu waited-ms=%llu commands-left=%ld", n->name,
                 (unsigned long long)num, (unsigned long long)out->waited_ms, out->left);
    }
    return 0;
}

static json_t *m_remove_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_lun_target(d, params, &t, e);
    if (!n)
        return NULL;
    uint64_t num, timeout = REMOVE_TIMEOUT_S;
    if (!param_lun(n, params, &num, e) ||
        param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    /* A target without LUNs can run but not be written to the config file, which refuses
     * one (config.c): say so now rather than at the next save (issue 34). */
    if (d->cfg.targets[t].nluns == 1 && d->cfg.targets[t].luns[0].lun == num &&
        !param_bool(params, "force"))
        return fail(e, ERR_FAILED,
                    "LUN %llu is the last LUN of target %s: a target without LUNs cannot be "
                    "saved to the config file (remove target %s instead, add another LUN "
                    "first, or remove it with --force and add one before the next save)",
                    (unsigned long long)num, n->name, n->name);
    struct ctl_removed r;
    if (ctl_lun_remove(d, t, num, (unsigned)timeout, &r) < 0)
        return fail(e, ERR_NOT_FOUND, "target %s has no LUN %llu", n->name,
                    (unsigned long long)num);
    return json_pack("{s:s, s:I, s:I, s:b, s:I}", "target", n->name, "lun", (json_int_t)num,
                     "waited_ms", (json_int_t)r.waited_ms, "closed", r.closed, "commands_left",
                     (json_int_t)r.left);
}

static json_t *m_set_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_lun_target(d, params, &t, e);
    uint64_t num;
    struct scsi_lun *lu = n ? param_lun(n, params, &num, e) : NULL;
    if (!lu)
        return NULL;
    json_t *ro = json_object_get(params, "read_only");
    if (!ro || !json_is_boolean(ro))
        return fail(e, ERR_INVALID_PARAMS, "parameter 'read_only' (true or false) is required");
    char err[512];
    if (scsi_lun_set_read_only(lu, json_is_true(ro), err, sizeof(err)) < 0)
        return fail(e, ERR_FAILED, "%s", err);
    struct target_lun_conf *l = conf_lun_find(d, t, num);
    if (l)
        l->read_only = json_is_true(ro);
    LOG_INFO("target %s: LUN %llu set %s by linerate-ctl", n->name, (unsigned long long)num,
             json_is_true(ro) ? "read-only" : "read-write");
    return lun_json(d, t, lu);
}

static void conf_lun_resized(struct daemon *d, unsigned t, uint64_t num, uint64_t bytes)
{
    struct target_lun_conf *l = conf_lun_find(d, t, num);
    if (l)
        target_lun_set_size(l, bytes);
}

static json_t *m_resize_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_lun_target(d, params, &t, e);
    uint64_t num;
    struct scsi_lun *lu = n ? param_lun(n, params, &num, e) : NULL;
    if (!lu)
        return NULL;
    json_t *sz = json_object_get(params, "size");
    uint64_t bytes;
    if (sz && json_is_integer(sz) && json_integer_value(sz) > 0)
        bytes = (uint64_t)json_integer_value(sz);
    else if (!sz || !json_is_string(sz) || size_parse(json_string_value(sz), &bytes) < 0)
        return fail(e, ERR_INVALID_PARAMS,
                    "parameter 'size' must be a byte count or a size such as \"2G\"");
    char err[512];
    uint64_t was = scsi_lun_size_bytes(lu);
    if (scsi_lun_grow(lu, bytes, err, sizeof(err)) < 0)
        return fail(e, ERR_FAILED, "%s", err);
    conf_lun_resized(d, t, num, scsi_lun_size_bytes(lu));
    LOG_INFO("target %s: LUN %llu resized by linerate-ctl from %llu to %llu bytes", n->name,
             (unsigned long long)num, (unsigned long long)was, (unsigned long long)bytes);
    return lun_json(d, t, lu);
}

/* --- targets --- */

/* The strings of an optional array parameter; -1 (e set) if it is not an array of strings. */
static int param_strings(json_t *params, const char *key, json_t **out, struct req_err *e)
{
    json_t *a = params ? json_object_get(params, key) : NULL;
    *out = a;
    if (!a)
        return 0;
    size_t i;
    json_t *v;
    if (!json_is_array(a))
        goto bad;
    json_array_foreach(a, i, v) if (!json_is_string(v)) goto bad;
    return 0;
bad:
    fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be an array of strings", key);
    return -1;
}

static json_t *m_add_target(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *name = param_str(params, "target", true, e);
    json_t *portals, *luns, *allow;
    if (!name || param_strings(params, "portals", &portals, e) < 0 ||
        param_strings(params, "luns", &luns, e) < 0 ||
        param_strings(params, "allow", &allow, e) < 0)
        return NULL;
    const char *alias = param_str(params, "alias", false, e);
    if (e->code)
        return NULL;
    char err[1024];
    if (target_check_iscsi_name(name, err, sizeof(err)) < 0)
        return fail(e, ERR_INVALID_PARAMS, "target name: %s", err);
    if (!json_array_size(portals))
        return fail(e, ERR_INVALID_PARAMS, "a target needs at least one portal");
    /* A one-target configuration, checked as the command line's is, then served. */
    struct target_config tmp;
    target_config_init(&tmp);
    struct target_node_conf *c = target_config_add_node(&tmp, name, "linerate-ctl add target");
    json_t *res = NULL;
    size_t i;
    json_t *v;
    if (!c) {
        fail(e, ERR_INTERNAL, "out of memory");
        goto out;
    }
    if (alias && strlen(alias) >= sizeof(c->alias)) {
        fail(e, ERR_INVALID_PARAMS, "alias too long");
        goto out;
    }
    snprintf(c->alias, sizeof(c->alias), "%s", alias ? alias : "");
    /* as a loaded target has it: the global CHAP algorithms (no CHAP user here anyway) */
    c->chap.algs = d->cfg.chap_algs ? d->cfg.chap_algs : CHAP_ALGS_ALL;
    json_array_foreach(portals, i, v)
    {
        struct target_portal p;
        if (target_parse_portal(json_string_value(v), &p, err, sizeof(err)) < 0 ||
            target_node_add_portal(c, &p) < 0) {
            fail(e, ERR_INVALID_PARAMS, "portal '%s': %s", json_string_value(v), err);
            goto out;
        }
    }
    json_array_foreach(allow, i, v)
    {
        if (target_check_iscsi_name(json_string_value(v), err, sizeof(err)) < 0 ||
            target_node_add_allow(c, json_string_value(v)) < 0) {
            fail(e, ERR_INVALID_PARAMS, "allow '%s': %s", json_string_value(v), err);
            goto out;
        }
    }
    json_array_foreach(luns, i, v)
    {
        struct target_lun_conf l;
        memset(&l, 0, sizeof(l));
        if (target_parse_lun_spec(json_string_value(v), &l, err, sizeof(err)) < 0) {
            fail(e, ERR_INVALID_PARAMS, "%s", err); /* it names the spec */
            goto out;
        }
        if (target_lun_rbd_timeout(&l, d->cfg.rbd_timeout_s) < 0) {
            free(l.bs_spec);
            fail(e, ERR_INTERNAL, "out of memory");
            goto out;
        }
        l.lun = i;
        snprintf(l.origin, sizeof(l.origin), "add target, LUN %zu '%s'", i, json_string_value(v));
        if (target_node_add_lun(c, &l, err, sizeof(err)) < 0) {
            free(l.bs_spec);
            fail(e, ERR_INVALID_PARAMS, "%s", err);
            goto out;
        }
    }
    if (ctl_target_add(d, c, err, sizeof(err)) < 0) {
        fail(e, ERR_FAILED, "%s", err);
        goto out;
    }
    res = json_pack("{s:s, s:o, s:i}", "target", name, "portals", json_deep_copy(portals), "luns",
                    (int)json_array_size(luns));
out:
    target_config_free(&tmp);
    return res;
}

static json_t *m_remove_target(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *name = param_str(params, "target", true, e);
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!name || param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    struct ctl_target_removed r;
    char err[512];
    int rc = ctl_target_remove(d, name, param_bool(params, "force"), (unsigned)timeout, &r, err,
                               sizeof(err));
    if (rc < 0)
        return fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:i, s:i, s:I}", "target", name, "sessions_ended", (int)r.sessions,
                     "luns_removed", (int)r.luns, "commands_left", (json_int_t)r.commands_left);
}

/* --- a running target's portals and allow list --- */

/* The `target` and `portal` parameters of add_portal / remove_portal: the node (its index in
 * *t) with the portal parsed into *p, or NULL with e filled in. */
static struct iscsi_node *param_target_portal(struct daemon *d, json_t *params, unsigned *t,
                                              struct target_portal *p, struct req_err *e)
{
    struct iscsi_node *n = param_target(d, params, t, e);
    const char *text = n ? param_str(params, "portal", true, e) : NULL;
    if (!text)
        return NULL;
    char err[512];
    if (target_parse_portal(text, p, err, sizeof(err)) < 0) {
        fail(e, ERR_INVALID_PARAMS, "%s", err);
        return NULL;
    }
    return n;
}

static json_t *m_add_portal(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct target_portal p;
    struct iscsi_node *n = param_target_portal(d, params, &t, &p, e);
    if (!n)
        return NULL;
    char err[512];
    if (ctl_portal_add(d, t, &p, err, sizeof(err)) < 0)
        return fail(e, ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:b}", "target", n->name, "portal", p.text, "listening", true);
}

static json_t *m_remove_portal(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct target_portal p;
    struct iscsi_node *n = param_target_portal(d, params, &t, &p, e);
    if (!n)
        return NULL;
    char err[512];
    /* sessions already on it carry on: count them for the answer */
    unsigned on_it = 0;
    struct iscsi_session_info *v;
    unsigned k;
    if (iscsi_server_list_sessions(&d->srv, &v, &k) == 0) {
        for (unsigned i = 0; i < k; i++) {
            bool here = false;
            for (unsigned c = 0; c < v[i].nconns && !here; c++)
                here = strcmp(v[i].conns[c].portal, p.text) == 0;
            on_it += here && strcasecmp(v[i].target, n->name) == 0;
        }
        free(v);
    }
    bool closed;
    int rc = ctl_portal_remove(d, t, p.text, false, &closed, err, sizeof(err));
    if (rc < 0)
        return fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:b, s:i}", "target", n->name, "portal", p.text, "listener_closed",
                     closed, "sessions_on_it", (int)on_it);
}

static json_t *m_add_allow(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_target(d, params, &t, e);
    const char *iqn = n ? param_str(params, "initiator", true, e) : NULL;
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!iqn || param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    bool force = param_bool(params, "force");
    char err[512];
    if (target_check_iscsi_name(iqn, err, sizeof(err)) < 0)
        return fail(e, ERR_INVALID_PARAMS, "%s", err);
    bool was_open = n->nallow == 0;
    unsigned sessions;
    if (ctl_allow_add(d, t, iqn, force, (unsigned)timeout, &sessions, err, sizeof(err)) < 0)
        return fail(e, ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:b, s:i, s:b}", "target", n->name, "initiator", iqn, "was_open",
                     was_open, "sessions", (int)sessions, "sessions_ended", force);
}

static json_t *m_remove_allow(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = param_target(d, params, &t, e);
    const char *iqn = n ? param_str(params, "initiator", true, e) : NULL;
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!iqn || param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    bool force = param_bool(params, "force");
    char err[512];
    unsigned sessions;
    int rc =
        ctl_allow_remove(d, t, iqn, false, force, (unsigned)timeout, &sessions, err, sizeof(err));
    if (rc < 0)
        return fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:i, s:b}", "target", n->name, "initiator", iqn, "sessions",
                     (int)sessions, "sessions_ended", force);
}

/* --- sessions --- */

static json_t *m_logout_session(struct daemon *d, json_t *params, struct req_err *e)
{
    uint64_t tsih, timeout = LOGOUT_TIMEOUT_S;
    if (param_uint_req(params, "tsih", 65535, &tsih, e) < 0 ||
        param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    int asked = iscsi_server_request_logout(&d->srv, (uint16_t)tsih, (unsigned)timeout);
    if (asked < 0)
        return fail(e, ERR_NOT_FOUND, "no session with TSIH %llu", (unsigned long long)tsih);
    uint64_t t0 = reactor_now_ms(), deadline = t0 + timeout * 1000;
    while (iscsi_server_session_alive(&d->srv, (uint16_t)tsih) && reactor_now_ms() < deadline &&
           !ctl_stopping(d))
        sleep_ms(20);
    bool forced = false;
    if (iscsi_server_session_alive(&d->srv, (uint16_t)tsih)) {
        /* The initiator did not log out in time: its connections are dropped (§6.3). */
        forced = iscsi_server_close_session(&d->srv, (uint16_t)tsih,
                                            "closed by linerate-ctl logout session") == 0;
    }
    LOG_INFO("session TSIH %llu: logout requested by linerate-ctl%s", (unsigned long long)tsih,
             forced ? "; not done in time, connections closed" : "");
    return json_pack("{s:I, s:i, s:b, s:I}", "tsih", (json_int_t)tsih, "connections_asked", asked,
                     "forced", forced, "waited_ms", (json_int_t)(reactor_now_ms() - t0));
}

static json_t *m_drop_connection(struct daemon *d, json_t *params, struct req_err *e)
{
    uint64_t tsih, cid;
    if (param_uint_req(params, "tsih", 65535, &tsih, e) < 0 ||
        param_uint_req(params, "cid", 65535, &cid, e) < 0)
        return NULL;
    int rc =
        iscsi_server_close_conn(&d->srv, (uint16_t)tsih, (uint16_t)cid, "dropped by linerate-ctl");
    if (rc == -ENOENT)
        return fail(e, ERR_NOT_FOUND, "no session with TSIH %llu", (unsigned long long)tsih);
    if (rc < 0)
        return fail(e, ERR_NOT_FOUND, "session TSIH %llu has no connection with CID %llu",
                    (unsigned long long)tsih, (unsigned long long)cid);
    return json_pack("{s:I, s:I}", "tsih", (json_int_t)tsih, "cid", (json_int_t)cid);
}

/* --- the rest --- */

static json_t *m_reload(struct daemon *d, json_t *params, struct req_err *e)
{
    char err[2048];
    json_t *r = ctl_reload(d, param_bool(params, "force"), err, sizeof(err));
    if (!r)
        return fail(e, ERR_FAILED, "%s", err);
    return r;
}

static json_t *m_save(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *file = param_str(params, "file", false, e);
    if (e->code)
        return NULL;
    char err[2048];
    json_t *r = ctl_save(d, file, err, sizeof(err));
    return r ? r : fail(e, ERR_FAILED, "%s", err);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static json_t *m_set_log_level(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)d;
    const char *name = param_str(params, "level", true, e);
    if (!name)
        return NULL;
    int lvl = log_level_parse(name);
    if (lvl < 0)
        return fail(e, ERR_INVALID_PARAMS, "bad level '%s': expected error, warn, info or debug",
                    name);
    enum log_level was = log_get_level();
    log_set_level((enum log_level)lvl);
    LOG_INFO("log level %s -> %s (linerate-ctl)", level_names[was], name);
    return json_pack("{s:s, s:s}", "level", name, "was", level_names[was]);
}

static json_t *m_version(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)params;
    (void)e;
    return json_pack("{s:s, s:i, s:i, s:s}", "version", LINERATE_VERSION, "pid", (int)getpid(),
                     "reactors", (int)d->nreactors, "log_level", level_names[log_get_level()]);
}

struct method {
    const char *name;
    json_t *(*fn)(struct daemon *d, json_t *params, struct req_err *e);
};

static const struct method methods[] = {
    {"version", m_version},
    {"show_targets", m_show_targets},
    {"show_luns", m_show_luns},
    {"show_portals", m_show_portals},
    {"stats", m_stats},
    {"show_sessions", m_show_sessions},
    {"show_connections", m_show_connections},
    {"add_lun", m_add_lun},
    {"remove_lun", m_remove_lun},
    {"set_lun", m_set_lun},
    {"resize_lun", m_resize_lun},
    {"logout_session", m_logout_session},
    {"drop_connection", m_drop_connection},
    {"set_log_level", m_set_log_level},
    {"reload", m_reload},
    {"save", m_save},
    {"add_target", m_add_target},
    {"remove_target", m_remove_target},
    {"add_portal", m_add_portal},
    {"remove_portal", m_remove_portal},
    {"add_allow", m_add_allow},
    {"remove_allow", m_remove_allow},
};

/* --- the envelope --- */

static char *dump(json_t *resp)
{
    char *s = resp ? json_dumps(resp, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(resp);
    return s;
}

static json_t *error_obj(json_t *id, int code, const char *message)
{
    return json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code", code,
                     "message", message);
}

char *ctl_error_line(int code, const char *message)
{
    return dump(error_obj(NULL, code, message));
}

char *ctl_request(struct daemon *d, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req) {
        char msg[256];
        snprintf(msg, sizeof(msg), "parse error at column %d: %s", jerr.column, jerr.text);
        return ctl_error_line(ERR_PARSE, msg);
    }
    json_t *id = json_object_get(req, "id"); /* NULL for a non-object: answered with null */
    json_t *ver = json_object_get(req, "jsonrpc");
    json_t *method = json_object_get(req, "method");
    json_t *params = json_object_get(req, "params");
    char *out;
    if (!json_is_object(req) || !ver || !json_is_string(ver) ||
        strcmp(json_string_value(ver), "2.0") != 0 || !json_is_string(method) ||
        (id && !json_is_string(id) && !json_is_integer(id) && !json_is_null(id))) {
        out = dump(error_obj(id, ERR_INVALID_REQUEST,
                             "not a JSON-RPC 2.0 request: want {\"jsonrpc\":\"2.0\", \"id\":..., "
                             "\"method\":\"...\", \"params\":{...}}"));
    } else if (params && !json_is_object(params)) {
        out = dump(error_obj(id, ERR_INVALID_PARAMS, "params must be an object (by name)"));
    } else {
        const char *name = json_string_value(method);
        const struct method *m = NULL;
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
            if (strcmp(methods[i].name, name) == 0)
                m = &methods[i];
        if (!m) {
            char msg[160];
            snprintf(msg, sizeof(msg), "unknown method '%.100s'", name);
            out = dump(error_obj(id, ERR_NO_METHOD, msg));
        } else {
            struct req_err e = {0};
            json_t *result = m->fn(d, params, &e);
            if (result)
                out = dump(
                    json_pack("{s:s, s:O?, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
            else
                out = dump(error_obj(id, e.code ? e.code : ERR_INTERNAL,
                                     e.code ? e.msg : "out of memory"));
        }
    }
    json_decref(req);
    return out;
}
