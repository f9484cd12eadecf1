/* The requests of the control socket (docs/ctl-protocol.md): JSON-RPC 2.0 parsed with jansson,
 * a table of methods, and what each does to the running daemon. Runs on the control thread.
 *
 * What it touches and how: targets and their nodes change only on this thread (ctl_targets.c;
 * a removed one is kept until exit), so reading them here needs no lock; sessions are copied
 * under the session table lock (iscsi/admin.c); LUNs are added and removed by ctl_luns.c. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bs/bs.h"
#include "daemon/ctl_req.h"
#include "daemon/daemon.h"
#include "util/size.h"

#ifndef LINERATE_VERSION
#define LINERATE_VERSION "unknown"
#endif

#define REMOVE_TIMEOUT_S 30 /* remove lun: how long to wait for the commands holding it */
#define LOGOUT_TIMEOUT_S 10 /* logout session: how long the initiator has before the drop */
#define TIMEOUT_MAX_S 3600

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- LUNs (ctl_luns.c adds and removes them) --- */

static json_t *m_add_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_target(d, params, &t, e);
    if (!n)
        return NULL;
    const char *spec = ctl_param_str(params, "spec", true, e);
    if (!spec)
        return NULL;
    uint64_t num = 0;
    int given = ctl_param_uint(params, "lun", SCSI_LUN_SLOTS - 1, &num, e);
    if (given < 0)
        return NULL;
    struct target_lun_conf l;
    memset(&l, 0, sizeof(l));
    char err[1024];
    if (target_parse_lun_spec(spec, &l, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS, "%s", err); /* it names the spec */
    if (target_lun_rbd_timeout(&l, d->cfg.rbd_timeout_s) < 0) {
        free(l.bs_spec);
        return ctl_fail(e, ERR_INTERNAL, "out of memory");
    }
    if (given) {
        if (scsi_target_lun(n->scsi, num)) {
            free(l.bs_spec);
            return ctl_fail(e, ERR_FAILED, "target %s already has LUN %llu", n->name,
                            (unsigned long long)num);
        }
    } else {
        /* The next free number: the lowest one without a LUN. */
        while (num < SCSI_LUN_SLOTS && scsi_target_lun(n->scsi, num))
            num++;
        if (num == SCSI_LUN_SLOTS) {
            free(l.bs_spec);
            return ctl_fail(e, ERR_FAILED, "target %s has no free LUN number", n->name);
        }
    }
    l.lun = num;
    snprintf(l.origin, sizeof(l.origin), "add lun '%s'", spec);
    if (ctl_lun_add(d, t, &l, NULL, err, sizeof(err)) < 0) {
        /* in the daemon's log too: the reason (a cluster that refused the gateway's key, a
         * missing file) is the operator's to fix, whoever ran linerate-ctl */
        LOG_WARN("target %s: LUN %llu not added: %s", n->name, (unsigned long long)num, err);
        return ctl_fail(e, ERR_FAILED, "%s", err);
    }
    return ctl_lun_json(d, t, scsi_target_lun(n->scsi, num));
}

static json_t *m_remove_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_lun_target(d, params, &t, e);
    if (!n)
        return NULL;
    uint64_t num, timeout = REMOVE_TIMEOUT_S;
    if (!ctl_param_lun(n, params, &num, e) ||
        ctl_param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    /* A target without LUNs can run but not be written to the config file, which refuses
     * one (config.c): say so now rather than at the next save (issue 34). */
    if (d->cfg.targets[t].nluns == 1 && d->cfg.targets[t].luns[0].lun == num &&
        !ctl_param_bool(params, "force"))
        return ctl_fail(e, ERR_FAILED,
                        "LUN %llu is the last LUN of target %s: a target without LUNs cannot be "
                        "saved to the config file (remove target %s instead, add another LUN "
                        "first, or remove it with --force and add one before the next save)",
                        (unsigned long long)num, n->name, n->name);
    /* The same for a LUN an entry maps: the file would refuse the map (host_conf.c). */
    const struct target_host_conf *h = target_host_mapping(&d->cfg.targets[t], num);
    if (h && !ctl_param_bool(params, "force"))
        return ctl_fail(e, ERR_FAILED,
                        "LUN %llu of target %s is mapped for %s %s: a map to a LUN the target "
                        "does not have cannot be saved to the config file (drop the map lines "
                        "from the file and reload first, or remove it with --force, which drops "
                        "the maps of it too)",
                        (unsigned long long)num, n->name, h->group ? "group" : "host",
                        h->group ? h->group_name : h->initiators[0]);
    /* With force, the maps go first, from the running configuration and the hosts' maps
     * (they are told REPORTED LUNS DATA HAS CHANGED): left behind, a LUN added later at that
     * number would show up, writable, to every host that mapped the old one. */
    int unmapped = 0;
    if (h) {
        char err[1024];
        if ((unmapped = ctl_hosts_drop_lun(d, t, num, err, sizeof(err))) < 0)
            return ctl_fail(e, ERR_FAILED, "LUN %llu of target %s: its maps: %s",
                            (unsigned long long)num, n->name, err);
        LOG_INFO("target %s: LUN %llu: %d map%s of it dropped (remove lun --force)", n->name,
                 (unsigned long long)num, unmapped, unmapped == 1 ? "" : "s");
    }
    struct ctl_removed r;
    if (ctl_lun_remove(d, t, num, (unsigned)timeout, &r) < 0)
        return ctl_fail(e, ERR_NOT_FOUND, "target %s has no LUN %llu", n->name,
                        (unsigned long long)num);
    return json_pack("{s:s, s:I, s:I, s:b, s:I, s:i}", "target", n->name, "lun", (json_int_t)num,
                     "waited_ms", (json_int_t)r.waited_ms, "closed", r.closed, "commands_left",
                     (json_int_t)r.left, "maps_dropped", unmapped);
}

static json_t *m_set_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_lun_target(d, params, &t, e);
    uint64_t num;
    struct scsi_lun *lu = n ? ctl_param_lun(n, params, &num, e) : NULL;
    if (!lu)
        return NULL;
    json_t *ro = json_object_get(params, "read_only");
    json_t *lim = json_object_get(params, "limits");
    if ((ro && !json_is_boolean(ro)) || (lim && !json_is_string(lim)) || (!ro && !lim))
        return ctl_fail(e, ERR_INVALID_PARAMS,
                        "parameter 'read_only' (true or false) or 'limits' (a string, e.g. "
                        "\"iops=500,mbps=100\" or \"none\") is required");
    char err[512];
    struct target_lun_conf *l = ctl_conf_lun_find(d, t, num);
    /* the caps named change, the others stay: "none" clears them all */
    struct rate_limit_conf caps;
    rate_limit_get(scsi_lun_rate_limit(lu), &caps);
    if (lim && target_lun_limits_parse(&caps, json_string_value(lim), err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS, "%s", err);
    if (ro && scsi_lun_set_read_only(lu, json_is_true(ro), err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_FAILED, "%s", err);
    if (ro) {
        if (l)
            l->read_only = json_is_true(ro);
        LOG_INFO("target %s: LUN %llu set %s by linerate-ctl", n->name, (unsigned long long)num,
                 json_is_true(ro) ? "read-only" : "read-write");
    }
    if (lim) {
        rate_limit_set(scsi_lun_rate_limit(lu), &caps);
        if (l)
            l->limits = caps;
        char text[256];
        target_lun_limits_format(&caps, text, sizeof(text));
        LOG_INFO("target %s: LUN %llu limits set to %s by linerate-ctl (this gateway)", n->name,
                 (unsigned long long)num, text[0] ? text + 1 : "none");
    }
    return ctl_lun_json(d, t, lu);
}

static void conf_lun_resized(struct daemon *d, unsigned t, uint64_t num, uint64_t bytes)
{
    struct target_lun_conf *l = ctl_conf_lun_find(d, t, num);
    if (l)
        target_lun_set_size(l, bytes);
}

static json_t *m_resize_lun(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_lun_target(d, params, &t, e);
    uint64_t num;
    struct scsi_lun *lu = n ? ctl_param_lun(n, params, &num, e) : NULL;
    if (!lu)
        return NULL;
    json_t *sz = json_object_get(params, "size");
    uint64_t bytes;
    if (sz && json_is_integer(sz) && json_integer_value(sz) > 0)
        bytes = (uint64_t)json_integer_value(sz);
    else if (!sz || !json_is_string(sz) || size_parse(json_string_value(sz), &bytes) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS,
                        "parameter 'size' must be a byte count or a size such as \"2G\"");
    char err[512];
    uint64_t was = scsi_lun_size_bytes(lu);
    if (scsi_lun_grow(lu, bytes, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_FAILED, "%s", err);
    conf_lun_resized(d, t, num, scsi_lun_size_bytes(lu));
    LOG_INFO("target %s: LUN %llu resized by linerate-ctl from %llu to %llu bytes", n->name,
             (unsigned long long)num, (unsigned long long)was, (unsigned long long)bytes);
    return ctl_lun_json(d, t, lu);
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
    ctl_fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be an array of strings", key);
    return -1;
}

static json_t *m_add_target(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *name = ctl_param_str(params, "target", true, e);
    json_t *portals, *luns, *allow;
    if (!name || param_strings(params, "portals", &portals, e) < 0 ||
        param_strings(params, "luns", &luns, e) < 0 ||
        param_strings(params, "allow", &allow, e) < 0)
        return NULL;
    const char *alias = ctl_param_str(params, "alias", false, e);
    if (e->code)
        return NULL;
    char err[1024];
    if (target_check_iscsi_name(name, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS, "target name: %s", err);
    if (!json_array_size(portals))
        return ctl_fail(e, ERR_INVALID_PARAMS, "a target needs at least one portal");
    /* A one-target configuration, checked as the command line's is, then served. */
    struct target_config tmp;
    target_config_init(&tmp);
    struct target_node_conf *c = target_config_add_node(&tmp, name, "linerate-ctl add target");
    json_t *res = NULL;
    size_t i;
    json_t *v;
    if (!c) {
        ctl_fail(e, ERR_INTERNAL, "out of memory");
        goto out;
    }
    if (alias && strlen(alias) >= sizeof(c->alias)) {
        ctl_fail(e, ERR_INVALID_PARAMS, "alias too long");
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
            ctl_fail(e, ERR_INVALID_PARAMS, "portal '%s': %s", json_string_value(v), err);
            goto out;
        }
    }
    json_array_foreach(allow, i, v)
    {
        if (target_check_iscsi_name(json_string_value(v), err, sizeof(err)) < 0 ||
            target_node_add_allow(c, json_string_value(v)) < 0) {
            ctl_fail(e, ERR_INVALID_PARAMS, "allow '%s': %s", json_string_value(v), err);
            goto out;
        }
    }
    json_array_foreach(luns, i, v)
    {
        struct target_lun_conf l;
        memset(&l, 0, sizeof(l));
        if (target_parse_lun_spec(json_string_value(v), &l, err, sizeof(err)) < 0) {
            ctl_fail(e, ERR_INVALID_PARAMS, "%s", err); /* it names the spec */
            goto out;
        }
        if (target_lun_rbd_timeout(&l, d->cfg.rbd_timeout_s) < 0) {
            free(l.bs_spec);
            ctl_fail(e, ERR_INTERNAL, "out of memory");
            goto out;
        }
        l.lun = i;
        snprintf(l.origin, sizeof(l.origin), "add target, LUN %zu '%s'", i, json_string_value(v));
        if (target_node_add_lun(c, &l, err, sizeof(err)) < 0) {
            free(l.bs_spec);
            ctl_fail(e, ERR_INVALID_PARAMS, "%s", err);
            goto out;
        }
    }
    if (ctl_target_add(d, c, err, sizeof(err)) < 0) {
        ctl_fail(e, ERR_FAILED, "%s", err);
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
    const char *name = ctl_param_str(params, "target", true, e);
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!name || ctl_param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    struct ctl_target_removed r;
    char err[512];
    int rc = ctl_target_remove(d, name, ctl_param_bool(params, "force"), (unsigned)timeout, &r, err,
                               sizeof(err));
    if (rc < 0)
        return ctl_fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:i, s:i, s:I}", "target", name, "sessions_ended", (int)r.sessions,
                     "luns_removed", (int)r.luns, "commands_left", (json_int_t)r.commands_left);
}

/* --- a running target's portals and allow list --- */

/* The `target` and `portal` parameters of add_portal / remove_portal: the node (its index in
 * *t) with the portal parsed into *p, or NULL with e filled in. */
static struct iscsi_node *param_target_portal(struct daemon *d, json_t *params, unsigned *t,
                                              struct target_portal *p, struct req_err *e)
{
    struct iscsi_node *n = ctl_param_target(d, params, t, e);
    const char *text = n ? ctl_param_str(params, "portal", true, e) : NULL;
    if (!text)
        return NULL;
    char err[512];
    if (target_parse_portal(text, p, err, sizeof(err)) < 0) {
        ctl_fail(e, ERR_INVALID_PARAMS, "%s", err);
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
        return ctl_fail(e, ERR_FAILED, "%s", err);
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
        return ctl_fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:b, s:i}", "target", n->name, "portal", p.text, "listener_closed",
                     closed, "sessions_on_it", (int)on_it);
}

static json_t *m_add_allow(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_target(d, params, &t, e);
    const char *iqn = n ? ctl_param_str(params, "initiator", true, e) : NULL;
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!iqn || ctl_param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    bool force = ctl_param_bool(params, "force");
    char err[512];
    if (target_check_iscsi_name(iqn, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS, "%s", err);
    bool was_open = n->nallow == 0;
    unsigned sessions;
    if (ctl_allow_add(d, t, iqn, force, (unsigned)timeout, &sessions, err, sizeof(err)) < 0)
        return ctl_fail(e, ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:b, s:i, s:b}", "target", n->name, "initiator", iqn, "was_open",
                     was_open, "sessions", (int)sessions, "sessions_ended", force);
}

static json_t *m_remove_allow(struct daemon *d, json_t *params, struct req_err *e)
{
    unsigned t;
    struct iscsi_node *n = ctl_param_target(d, params, &t, e);
    const char *iqn = n ? ctl_param_str(params, "initiator", true, e) : NULL;
    uint64_t timeout = LOGOUT_TIMEOUT_S;
    if (!iqn || ctl_param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    bool force = ctl_param_bool(params, "force");
    char err[512];
    unsigned sessions;
    int rc =
        ctl_allow_remove(d, t, iqn, false, force, (unsigned)timeout, &sessions, err, sizeof(err));
    if (rc < 0)
        return ctl_fail(e, rc == -ENOENT ? ERR_NOT_FOUND : ERR_FAILED, "%s", err);
    return json_pack("{s:s, s:s, s:i, s:b}", "target", n->name, "initiator", iqn, "sessions",
                     (int)sessions, "sessions_ended", force);
}

/* --- sessions --- */

static json_t *m_logout_session(struct daemon *d, json_t *params, struct req_err *e)
{
    uint64_t tsih, timeout = LOGOUT_TIMEOUT_S;
    if (ctl_param_uint_req(params, "tsih", 65535, &tsih, e) < 0 ||
        ctl_param_uint(params, "timeout", TIMEOUT_MAX_S, &timeout, e) < 0)
        return NULL;
    int asked = iscsi_server_request_logout(&d->srv, (uint16_t)tsih, (unsigned)timeout);
    if (asked < 0)
        return ctl_fail(e, ERR_NOT_FOUND, "no session with TSIH %llu", (unsigned long long)tsih);
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
    if (ctl_param_uint_req(params, "tsih", 65535, &tsih, e) < 0 ||
        ctl_param_uint_req(params, "cid", 65535, &cid, e) < 0)
        return NULL;
    int rc =
        iscsi_server_close_conn(&d->srv, (uint16_t)tsih, (uint16_t)cid, "dropped by linerate-ctl");
    if (rc == -ENOENT)
        return ctl_fail(e, ERR_NOT_FOUND, "no session with TSIH %llu", (unsigned long long)tsih);
    if (rc < 0)
        return ctl_fail(e, ERR_NOT_FOUND, "session TSIH %llu has no connection with CID %llu",
                        (unsigned long long)tsih, (unsigned long long)cid);
    return json_pack("{s:I, s:I}", "tsih", (json_int_t)tsih, "cid", (json_int_t)cid);
}

/* --- the rest --- */

static json_t *m_reload(struct daemon *d, json_t *params, struct req_err *e)
{
    char err[2048];
    json_t *r = ctl_reload(d, ctl_param_bool(params, "force"), err, sizeof(err));
    if (!r)
        return ctl_fail(e, ERR_FAILED, "%s", err);
    return r;
}

static json_t *m_save(struct daemon *d, json_t *params, struct req_err *e)
{
    const char *file = ctl_param_str(params, "file", false, e);
    if (e->code)
        return NULL;
    char err[2048];
    json_t *r = ctl_save(d, file, err, sizeof(err));
    return r ? r : ctl_fail(e, ERR_FAILED, "%s", err);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static json_t *m_set_log_level(struct daemon *d, json_t *params, struct req_err *e)
{
    (void)d;
    const char *name = ctl_param_str(params, "level", true, e);
    if (!name)
        return NULL;
    int lvl = log_level_parse(name);
    if (lvl < 0)
        return ctl_fail(e, ERR_INVALID_PARAMS,
                        "bad level '%s': expected error, warn, info or debug", name);
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
    {"show_targets", ctl_show_targets},
    {"show_luns", ctl_show_luns},
    {"show_portals", ctl_show_portals},
    {"show_hosts", ctl_show_hosts},
    {"stats", ctl_show_stats},
    {"show_sessions", ctl_show_sessions},
    {"show_connections", ctl_show_connections},
    {"add_lun", m_add_lun},
    {"remove_lun", m_remove_lun},
    {"set_lun", m_set_lun},
    {"resize_lun", m_resize_lun},
    {"set_alua", ctl_set_alua},
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
    {"add_host", ctl_add_host},
    {"add_group", ctl_add_group},
    {"remove_host", ctl_remove_host},
    {"add_initiator", ctl_add_initiator},
    {"remove_initiator", ctl_remove_initiator},
    {"map_lun", ctl_map_lun},
    {"unmap_lun", ctl_unmap_lun},
    {"set_host_chap", ctl_set_host_chap},
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
