/* The metrics as the control thread reads them: every LUN's, session's and portal's counters
 * (util/iostats.h, merged across reactors), as JSON for the `stats` method of the control
 * socket and as the Prometheus text format (version 0.0.4) for the metrics endpoint.
 *
 * Runs on the control thread only, so it sees LUNs, targets and listeners as ctl_cmds.c does:
 * a LUN removed at run time is freed by this same thread, never under it. The values are
 * monotonic counters; rates and percentiles over an interval are the client's business
 * (linerate-ctl stats takes two snapshots), as Prometheus' rate() and histogram_quantile(). */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"

/* --- collecting --- */

enum st_kind { ST_LUN, ST_SESSION, ST_PORTAL, ST_HOST };

struct st_entry {
    enum st_kind kind;
    char target[ISCSI_NAME_MAX + 1];
    char initiator[ISCSI_NAME_MAX + 1];
    char portal[80];
    uint64_t lun;
    uint16_t tsih;
    char isid[16];
    bool group;        /* ST_HOST: `initiator` names a [group NAME], else a [host IQN] */
    uint64_t host_lun; /* ST_HOST: the number the entry's hosts know `lun` by */
    uint64_t queue_depth;
    /* a LUN's caps: commands waiting under them now, and those that waited (and how long) */
    uint64_t throttled, delayed, delayed_ns;
    struct iostats_values v;
};

struct st_snap {
    struct st_entry *e;
    unsigned n, cap;
    uint64_t time_ns;
};

static struct st_entry *snap_add(struct st_snap *s, enum st_kind kind)
{
    if (s->n == s->cap) {
        unsigned cap = s->cap ? 2 * s->cap : 16;
        struct st_entry *e = realloc(s->e, cap * sizeof(*e));
        if (!e)
            return NULL;
        s->e = e;
        s->cap = cap;
    }
    struct st_entry *e = &s->e[s->n++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    return e;
}

static void portal_add(struct st_snap *s, const struct listener *l)
{
    struct st_entry *e = snap_add(s, ST_PORTAL);
    if (!e)
        return;
    snprintf(e->portal, sizeof(e->portal), "%s", l->portal.text);
    iostats_read(l->portal.stats, &e->v);
    /* the portal's own gauge (util/iostats.h: iostats_queue), as the session's in_flight */
    e->queue_depth = e->v.in_flight;
}

/* Per configured entry and LUN it maps: a [host] entry's counters, a [group]'s summed over its
 * members (one label value per group, however many initiators it has). The label values are
 * bounded by the configuration: an initiator without an entry gets none, and no ISID or
 * session ever becomes a label here. */
static int hosts_add(struct st_snap *s, const struct target_node_conf *c, struct scsi_target *t)
{
    for (unsigned i = 0; i < c->nhosts; i++) {
        const struct target_host_conf *h = &c->hosts[i];
        for (unsigned m = 0; m < h->nmaps; m++) {
            struct st_entry *e = snap_add(s, ST_HOST);
            if (!e)
                return -1;
            snprintf(e->target, sizeof(e->target), "%s", c->name);
            snprintf(e->initiator, sizeof(e->initiator), "%s",
                     h->group ? h->group_name : h->initiators[0]);
            e->group = h->group;
            e->lun = h->maps[m].lun;
            e->host_lun = h->maps[m].host_lun;
            for (unsigned k = 0; k < h->ninitiators; k++)
                scsi_target_host_stats(t, h->initiators[k], e->lun, &e->v);
        }
    }
    return 0;
}

static int snap_take(struct daemon *d, struct st_snap *s)
{
    memset(s, 0, sizeof(*s));
    s->time_ns = iostats_now_ns();
    for (unsigned i = 0; i < d->built.n; i++) {
        const struct iscsi_node *n = d->built.nodes[i];
        for (uint64_t l = 0; l < n->scsi->nluns; l++) {
            struct scsi_lun *lu = scsi_target_lun(n->scsi, l);
            if (!lu)
                continue;
            struct st_entry *e = snap_add(s, ST_LUN);
            if (!e)
                return -1;
            snprintf(e->target, sizeof(e->target), "%s", n->name);
            e->lun = l;
            long users = scsi_lun_users(lu);
            e->queue_depth = users > 0 ? (uint64_t)users : 0;
            iostats_read(scsi_lun_stats(lu), &e->v);
            const struct rate_limit *rl = scsi_lun_rate_limit(lu);
            e->throttled = scsi_lun_throttled(lu);
            e->delayed = atomic_load_explicit(&rl->delayed, memory_order_relaxed);
            e->delayed_ns = atomic_load_explicit(&rl->delayed_ns, memory_order_relaxed);
        }
    }
    struct iscsi_session_info *si = NULL;
    unsigned ns = 0;
    if (d->srv_ready && iscsi_server_list_sessions(&d->srv, &si, &ns) < 0)
        return -1;
    for (unsigned i = 0; i < ns; i++) {
        if (si[i].discovery)
            continue;
        struct st_entry *e = snap_add(s, ST_SESSION);
        if (!e) {
            free(si);
            return -1;
        }
        snprintf(e->target, sizeof(e->target), "%s", si[i].target);
        snprintf(e->initiator, sizeof(e->initiator), "%s", si[i].initiator);
        snprintf(e->isid, sizeof(e->isid), "0x%02x%02x%02x%02x%02x%02x", si[i].isid[0],
                 si[i].isid[1], si[i].isid[2], si[i].isid[3], si[i].isid[4], si[i].isid[5]);
        e->tsih = si[i].tsih;
        e->queue_depth = si[i].in_flight;
        e->v = si[i].stats;
    }
    free(si);
    for (unsigned i = 0; i < d->built.n && i < d->cfg.ntargets; i++)
        if (hosts_add(s, &d->cfg.targets[i], d->built.nodes[i]->scsi) < 0)
            return -1;
    for (unsigned i = 0; i < d->nlisteners; i++)
        portal_add(s, &d->listeners[i]);
    for (const struct listener *l = d->extra_listeners; l; l = l->next)
        portal_add(s, l);
    return 0;
}

/* --- JSON (the `stats` method, docs/ctl-protocol.md) --- */

static json_t *u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *op_json(const struct iostats_values *v, unsigned op)
{
    json_t *b = json_array();
    for (unsigned i = 0; i < IOSTATS_LAT_BUCKETS; i++)
        json_array_append_new(b, u64(v->lat[op][i]));
    return json_pack("{s:o, s:o, s:o, s:o}", "commands", u64(v->cmds[op]), "bytes",
                     u64(v->bytes[op]), "latency_sum_ns", u64(v->lat_sum_ns[op]), "latency_buckets",
                     b);
}

static json_t *values_json(const struct iostats_values *v)
{
    json_t *err = json_object();
    for (unsigned i = 0; i < IOSTATS_ERR_SLOTS; i++)
        if (v->errors[i])
            json_object_set_new(err, iostats_err_name(i), u64(v->errors[i]));
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "read", op_json(v, IOSTATS_READ),
                     "write", op_json(v, IOSTATS_WRITE), "other", op_json(v, IOSTATS_OTHER),
                     "errors", err, "digest_errors", u64(v->digest_errors), "r2ts", u64(v->r2ts),
                     "aborts", u64(v->aborts), "resets", u64(v->resets));
}

json_t *stats_json(struct daemon *d)
{
    struct st_snap s;
    if (snap_take(d, &s) < 0) {
        free(s.e);
        return NULL;
    }
    json_t *bounds = json_array();
    for (unsigned i = 0; i + 1 < IOSTATS_LAT_BUCKETS; i++)
        json_array_append_new(bounds, json_real(iostats_lat_bound_s(i)));
    json_t *luns = json_array(), *sessions = json_array(), *portals = json_array();
    json_t *hosts = json_array();
    for (unsigned i = 0; i < s.n; i++) {
        const struct st_entry *e = &s.e[i];
        json_t *o;
        switch (e->kind) {
        case ST_LUN:
            o = json_pack("{s:s, s:o, s:o, s:{s:o, s:o, s:o}}", "target", e->target, "lun",
                          u64(e->lun), "queue_depth", u64(e->queue_depth), "throttle", "waiting",
                          u64(e->throttled), "delayed", u64(e->delayed), "delayed_ms",
                          u64(e->delayed_ns / 1000000));
            json_array_append_new(luns, o);
            break;
        case ST_SESSION:
            o = json_pack("{s:i, s:s, s:s, s:s, s:o}", "tsih", (int)e->tsih, "isid", e->isid,
                          "initiator", e->initiator, "target", e->target, "queue_depth",
                          u64(e->queue_depth));
            json_array_append_new(sessions, o);
            break;
        case ST_HOST:
            o = json_pack("{s:s, s:s, s:s, s:o, s:o}", "target", e->target,
                          e->group ? "group" : "host", e->initiator, "kind",
                          e->group ? "group" : "host", "lun", u64(e->lun), "host_lun",
                          u64(e->host_lun));
            json_array_append_new(hosts, o);
            break;
        case ST_PORTAL:
        default:
            o = json_pack("{s:s, s:o}", "portal", e->portal, "queue_depth", u64(e->queue_depth));
            json_array_append_new(portals, o);
            break;
        }
        json_object_set_new(o, "counters", values_json(&e->v));
    }
    free(s.e);
    json_t *caps = json_array();
    for (unsigned t = 0; t < d->built.n; t++) {
        const struct target_node_conf *c = &d->cfg.targets[t];
        for (unsigned k = 0; k < c->nhosts; k++) {
            const struct target_host_conf *h = &c->hosts[k];
            const struct iscsi_host_limit *l =
                iscsi_node_host_limit_peek(d->built.nodes[t], h->initiators[0]);
            if (!l)
                continue;
            uint64_t ns = atomic_load_explicit(&l->limit.delayed_ns, memory_order_relaxed);
            json_array_append_new(
                caps, json_pack("{s:s, s:s, s:s, s:{s:o, s:o}}", "target", c->name, "kind",
                                h->group ? "group" : "host", "name",
                                h->group ? h->group_name : h->initiators[0], "throttle", "delayed",
                                u64(atomic_load_explicit(&l->limit.delayed, memory_order_relaxed)),
                                "delayed_ms", u64(ns / 1000000)));
        }
    }
    /* latency_bounds_s: the upper bound of each bucket but the last (+Inf) */
    /* host_limits: the initiator entries' caps, each entry's commands together */
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "time_ns", u64(s.time_ns),
                     "latency_bounds_s", bounds, "luns", luns, "sessions", sessions, "portals",
                     portals, "hosts", hosts, "host_limits", caps);
}

/* --- Prometheus text format --- */

struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bprintf(struct buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 16384;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* A label value: backslash, double quote and newline escaped (exposition format). */
static void esc(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            bprintf(b, "\\%c", *s);
        else if (*s == '\n')
            bprintf(b, "\\n");
        else
            bprintf(b, "%c", *s);
    }
}

static const char *const kind_prefix[] = {"linerate_lun", "linerate_session", "linerate_portal",
                                          "linerate_host"};
static const char *const kind_noun[] = {"LUN", "session", "portal", "host entry and LUN"};
static const char *const op_names[IOSTATS_NOPS] = {"read", "write", "other"};

/* The entry's identifying labels, without braces or a trailing comma. */
static void labels(struct buf *b, const struct st_entry *e)
{
    switch (e->kind) {
    case ST_LUN:
        bprintf(b, "target=\"");
        esc(b, e->target);
        bprintf(b, "\",lun=\"%" PRIu64 "\"", e->lun);
        return;
    case ST_SESSION:
        bprintf(b, "target=\"");
        esc(b, e->target);
        bprintf(b, "\",initiator=\"");
        esc(b, e->initiator);
        bprintf(b, "\",isid=\"%s\",tsih=\"%u\"", e->isid, (unsigned)e->tsih);
        return;
    case ST_PORTAL:
        bprintf(b, "portal=\"");
        esc(b, e->portal);
        bprintf(b, "\"");
        return;
    case ST_HOST:
        /* the lun label is the target's number, as linerate_lun's, so the two join */
        bprintf(b, "target=\"");
        esc(b, e->target);
        bprintf(b, "\",%s=\"", e->group ? "group" : "host");
        esc(b, e->initiator);
        bprintf(b, "\",lun=\"%" PRIu64 "\"", e->lun);
        return;
    }
}

enum field { F_READ_BYTES, F_WRITE_BYTES, F_DIGEST, F_R2TS, F_ABORTS, F_RESETS };

static uint64_t field(const struct iostats_values *v, enum field f)
{
    switch (f) {
    case F_READ_BYTES:
        return v->bytes[IOSTATS_READ];
    case F_WRITE_BYTES:
        return v->bytes[IOSTATS_WRITE];
    case F_DIGEST:
        return v->digest_errors;
    case F_R2TS:
        return v->r2ts;
    case F_ABORTS:
        return v->aborts;
    case F_RESETS:
    default:
        return v->resets;
    }
}

static void family(struct buf *b, enum st_kind k, const char *suffix, const char *type,
                   const char *help)
{
    bprintf(b, "# HELP %s_%s %s\n# TYPE %s_%s %s\n", kind_prefix[k], suffix, help, kind_prefix[k],
            suffix, type);
}

static void simple_counter(struct buf *b, const struct st_snap *s, enum st_kind k, enum field f,
                           const char *suffix, const char *help)
{
    family(b, k, suffix, "counter", help);
    for (unsigned i = 0; i < s->n; i++) {
        if (s->e[i].kind != k)
            continue;
        bprintf(b, "%s_%s{", kind_prefix[k], suffix);
        labels(b, &s->e[i]);
        bprintf(b, "} %" PRIu64 "\n", field(&s->e[i].v, f));
    }
}

static void kind_metrics(struct buf *b, const struct st_snap *s, enum st_kind k)
{
    char help[160];
    const char *noun = kind_noun[k];
    snprintf(help, sizeof(help), "SCSI commands answered per %s, by op (read, write, other).",
             noun);
    family(b, k, "commands_total", "counter", help);
    for (unsigned i = 0; i < s->n; i++) {
        if (s->e[i].kind != k)
            continue;
        for (unsigned op = 0; op < IOSTATS_NOPS; op++) {
            bprintf(b, "%s_commands_total{", kind_prefix[k]);
            labels(b, &s->e[i]);
            bprintf(b, ",op=\"%s\"} %" PRIu64 "\n", op_names[op], s->e[i].v.cmds[op]);
        }
    }
    snprintf(help, sizeof(help), "Bytes read by READ commands (Data-In sent) per %s.", noun);
    simple_counter(b, s, k, F_READ_BYTES, "read_bytes_total", help);
    snprintf(help, sizeof(help), "Bytes written by WRITE commands (stored, GOOD) per %s.", noun);
    simple_counter(b, s, k, F_WRITE_BYTES, "write_bytes_total", help);

    snprintf(help, sizeof(help),
             "Command latency from the command PDU to its response per %s, by op.", noun);
    family(b, k, "latency_seconds", "histogram", help);
    for (unsigned i = 0; i < s->n; i++) {
        const struct st_entry *e = &s->e[i];
        if (e->kind != k)
            continue;
        for (unsigned op = 0; op < IOSTATS_NOPS; op++) {
            /* _count is the buckets' sum, so the histogram is consistent in itself even when
             * the snapshot raced with completions (util/iostats.h) */
            uint64_t cum = 0;
            for (unsigned j = 0; j < IOSTATS_LAT_BUCKETS; j++) {
                cum += e->v.lat[op][j];
                bprintf(b, "%s_latency_seconds_bucket{", kind_prefix[k]);
                labels(b, e);
                if (j + 1 < IOSTATS_LAT_BUCKETS)
                    bprintf(b, ",op=\"%s\",le=\"%.12g\"} %" PRIu64 "\n", op_names[op],
                            iostats_lat_bound_s(j), cum);
                else
                    bprintf(b, ",op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", op_names[op], cum);
            }
            bprintf(b, "%s_latency_seconds_sum{", kind_prefix[k]);
            labels(b, e);
            bprintf(b, ",op=\"%s\"} %.9f\n", op_names[op], (double)e->v.lat_sum_ns[op] / 1e9);
            bprintf(b, "%s_latency_seconds_count{", kind_prefix[k]);
            labels(b, e);
            bprintf(b, ",op=\"%s\"} %" PRIu64 "\n", op_names[op], cum);
        }
    }

    snprintf(help, sizeof(help),
             "Commands answered with an error per %s, by sense key (none: a status without "
             "sense such as RESERVATION CONFLICT or TASK SET FULL).",
             noun);
    family(b, k, "errors_total", "counter", help);
    for (unsigned i = 0; i < s->n; i++) {
        if (s->e[i].kind != k)
            continue;
        for (unsigned j = 0; j < IOSTATS_ERR_SLOTS; j++) {
            if (!s->e[i].v.errors[j])
                continue;
            bprintf(b, "%s_errors_total{", kind_prefix[k]);
            labels(b, &s->e[i]);
            bprintf(b, ",sense_key=\"%s\"} %" PRIu64 "\n", iostats_err_name(j),
                    s->e[i].v.errors[j]);
        }
    }
    if (k == ST_HOST) /* commands only: events and gauges are the LUN's and the session's */
        return;
    if (k == ST_LUN) /* scsi_lun_users: at ERL >= 1 until the answer is acknowledged */
        snprintf(help, sizeof(help), "Commands holding the LUN now (received, not yet released).");
    else
        snprintf(help, sizeof(help), "Commands received and not yet answered per %s now.", noun);
    family(b, k, "queue_depth", "gauge", help);
    for (unsigned i = 0; i < s->n; i++) {
        if (s->e[i].kind != k)
            continue;
        bprintf(b, "%s_queue_depth{", kind_prefix[k]);
        labels(b, &s->e[i]);
        bprintf(b, "} %" PRIu64 "\n", s->e[i].queue_depth);
    }
    if (k == ST_LUN)
        /* a header digest error, or one in data no command owns, names no LUN */
        snprintf(help, sizeof(help),
                 "Data digest errors in the data of a command per LUN (ERL >= 1; header digest "
                 "errors count per session and portal only).");
    else
        snprintf(help, sizeof(help), "Header and data digest errors received per %s.", noun);
    simple_counter(b, s, k, F_DIGEST, "digest_errors_total", help);
    snprintf(help, sizeof(help), "R2T PDUs sent per %s.", noun);
    simple_counter(b, s, k, F_R2TS, "r2ts_total", help);
    snprintf(help, sizeof(help), "Tasks aborted by task management functions per %s.", noun);
    simple_counter(b, s, k, F_ABORTS, "aborts_total", help);
    snprintf(help, sizeof(help), "LOGICAL UNIT and TARGET resets received per %s.", noun);
    simple_counter(b, s, k, F_RESETS, "resets_total", help);
}

char *stats_prometheus(struct daemon *d, size_t *len)
{
    struct st_snap s;
    struct buf b = {0};
    if (snap_take(d, &s) < 0) {
        free(s.e);
        return NULL;
    }
    for (enum st_kind k = ST_LUN; k <= ST_HOST; k++)
        kind_metrics(&b, &s, k);
    /* Daemon-wide errors by sense key: every command passes a portal, LUN or not. */
    struct iostats_values all;
    memset(&all, 0, sizeof(all));
    for (unsigned i = 0; i < s.n; i++)
        if (s.e[i].kind == ST_PORTAL)
            iostats_add(&all, &s.e[i].v);
    bprintf(&b, "# HELP linerate_errors_total Commands answered with an error, by sense key.\n"
                "# TYPE linerate_errors_total counter\n");
    for (unsigned j = 0; j < IOSTATS_ERR_SLOTS; j++)
        bprintf(&b, "linerate_errors_total{sense_key=\"%s\"} %" PRIu64 "\n", iostats_err_name(j),
                all.errors[j]);
    /* The task data memory budget (max-task-buffers): what is held, the bound, and the
     * commands turned away for it. */
    bprintf(&b,
            "# HELP linerate_task_buffer_bytes Data memory held by tasks (buffers, compare "
            "copies, ERL 2 orphans).\n"
            "# TYPE linerate_task_buffer_bytes gauge\n"
            "linerate_task_buffer_bytes %" PRIu64 "\n"
            "# HELP linerate_task_buffer_limit_bytes max-task-buffers.\n"
            "# TYPE linerate_task_buffer_limit_bytes gauge\n"
            "linerate_task_buffer_limit_bytes %" PRIu64 "\n"
            "# HELP linerate_task_buffer_refused_total Commands answered TASK SET FULL or BUSY "
            "for max-task-buffers.\n"
            "# TYPE linerate_task_buffer_refused_total counter\n"
            "linerate_task_buffer_refused_total %" PRIu64 "\n",
            atomic_load(&d->srv.task_mem), d->srv.limits.max_task_buffers,
            atomic_load(&d->srv.task_mem_refused));
    free(s.e);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
