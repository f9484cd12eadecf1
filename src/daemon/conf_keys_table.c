/* The table of configuration keys (conf_keys.h): one row per key of linerate.conf, with the
 * setters and formatters of the keys that are more than a number or a yes/no. A new key is a
 * row here, a line in man/linerate.conf.5 (the config-keys test checks it) and its use. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "daemon/conf_keys.h"

/* --- the keys that are not a plain number or yes/no --- */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int set_log_level(const struct conf_key *k, const struct conf_obj *o, const char *val,
                         char *err, size_t errlen)
{
    (void)k;
    int lvl = log_level_parse(val);
    if (lvl < 0) {
        snprintf(err, errlen, "bad value '%s' for log-level: expected error, warn, info or debug",
                 val);
        return -1;
    }
    o->cfg->log_level = (enum log_level)lvl;
    return 0;
}

static void fmt_log_level(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%s", level_names[o->cfg->log_level]);
}

static int set_log(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                   size_t errlen)
{
    (void)k;
    int dest = log_dest_parse(val);
    if (dest < 0) {
        snprintf(err, errlen, "bad value '%s' for log: expected stderr or syslog", val);
        return -1;
    }
    o->cfg->log_syslog = dest == LOG_DEST_SYSLOG;
    return 0;
}

static void fmt_log(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%s", o->cfg->log_syslog ? "syslog" : "");
}

static int set_state_dir(const struct conf_key *k, const struct conf_obj *o, const char *val,
                         char *err, size_t errlen)
{
    (void)k;
    if (val[0] != '/' || strlen(val) >= sizeof(o->cfg->state_dir)) {
        snprintf(err, errlen, "bad value '%s' for state-dir: expected an absolute path", val);
        return -1;
    }
    snprintf(o->cfg->state_dir, sizeof(o->cfg->state_dir), "%s", val);
    return 0;
}

static void fmt_state_dir(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%s", o->cfg->state_dir);
}

static int set_ctl_socket(const struct conf_key *k, const struct conf_obj *o, const char *val,
                          char *err, size_t errlen)
{
    char reason[256];
    if (target_set_ctl_socket(o->cfg, val, reason, sizeof(reason)) < 0) {
        snprintf(err, errlen, "%s: %s", k->name, reason);
        return -1;
    }
    return 0;
}

static void fmt_ctl_socket(const struct conf_key *k, const struct conf_obj *o, char *buf,
                           size_t len)
{
    (void)k;
    const struct target_config *c = o->cfg;
    snprintf(buf, len, "%s", !c->ctl_socket_set ? "" : c->ctl_socket[0] ? c->ctl_socket : "none");
}

static int set_metrics(const struct conf_key *k, const struct conf_obj *o, const char *val,
                       char *err, size_t errlen)
{
    char reason[256];
    if (target_set_metrics(o->cfg, val, reason, sizeof(reason)) < 0) {
        snprintf(err, errlen, "%s: %s", k->name, reason);
        return -1;
    }
    return 0;
}

static void fmt_metrics(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%s", o->cfg->metrics_on ? o->cfg->metrics.text : "");
}

/* iops, mbps, ..., burst of a [host] / [group] entry: as a LUN's ",iops=500" (lun_limits.c);
 * written by conf_write.c with the entry */
static int set_host_limit(const struct conf_key *k, const struct conf_obj *o, const char *val,
                          char *err, size_t errlen)
{
    char tok[64];
    snprintf(tok, sizeof(tok), "%s=%s", k->name, val);
    return target_lun_limits_opt(&o->host->limits, tok, tok, err, errlen) == 1 ? 0 : -1;
}

/* chap-secrets, discovery-chap-*, chap-user, chap-mutual-user, chap-algorithms (chap_conf.c) */
static int set_chap(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                    size_t errlen)
{
    if (o->host) /* chap-user / chap-mutual-user of a [host] or [group] */
        return target_chap_host_key(o->host, k->name, val, err, errlen) < 0 ? -1 : 0;
    return target_chap_key(o->cfg, o->node, k->name, val, err, errlen) < 0 ? -1 : 0;
}

static void fmt_chap(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    const struct target_config *c = o->cfg;
    const char *v = strcmp(k->name, "chap-secrets") == 0          ? c->chap_secrets
                    : strcmp(k->name, "discovery-chap-user") == 0 ? c->discovery_chap.user
                    : strcmp(k->name, "discovery-chap-mutual-user") == 0
                        ? c->discovery_chap.mutual_user
                    : !o->node                          ? ""
                    : strcmp(k->name, "chap-user") == 0 ? o->node->chap.user
                                                        : o->node->chap.mutual_user;
    snprintf(buf, len, "%s", v);
}

/* The global set; a target's own is written by conf_write.c (it inherits the global one). */
static void fmt_chap_algs(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    static const int order[] = {CHAP_ALG_SHA3_256, CHAP_ALG_SHA256, CHAP_ALG_MD5};
    unsigned algs = o->node ? o->node->chap.algs : o->cfg->chap_algs;
    size_t off = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < 3 && off < len; i++)
        if (algs & chap_alg_bit(order[i]))
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "," : "",
                                    chap_alg_name(order[i]));
}

static int set_alua(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                    size_t errlen)
{
    return target_alua_key(o->alua, k->name, val, err, errlen) < 0 ? -1 : 0;
}

static int set_alias(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                     size_t errlen)
{
    (void)k;
    if (strlen(val) > ISCSI_VALUE_MAX) {
        snprintf(err, errlen, "alias is longer than %d characters", ISCSI_VALUE_MAX);
        return -1;
    }
    snprintf(o->node->alias, sizeof(o->node->alias), "%s", val);
    return 0;
}

static void fmt_alias(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%s", o->node ? o->node->alias : "");
}

static int set_erl(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                   size_t errlen)
{
    (void)k;
    return target_parse_erl(val, &o->params->erl, err, errlen);
}

static void fmt_erl(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    (void)k;
    snprintf(buf, len, "%u", o->params->erl);
}

/* For the target these mean "CRC32C is acceptable": the initiator's offer decides. */
static int set_digest(const struct conf_key *k, const struct conf_obj *o, const char *val,
                      char *err, size_t errlen)
{
    bool *f = k->name[0] == 'h' ? &o->params->header_digest : &o->params->data_digest;
    if (strcasecmp(val, "none") == 0) {
        *f = false;
    } else if (strcasecmp(val, "crc32c") == 0 || strcasecmp(val, "any") == 0) {
        *f = true;
    } else {
        snprintf(err, errlen, "bad value '%s' for %s: expected none, crc32c or any", val, k->name);
        return -1;
    }
    return 0;
}

static void fmt_digest(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    bool on = k->name[0] == 'h' ? o->params->header_digest : o->params->data_digest;
    snprintf(buf, len, "%s", on ? "crc32c" : "none");
}

/* --- the table --- */

#define IN(obj, type, field)                                                                       \
    .where = CONF_IN_##obj, .off = offsetof(type, field), .width = sizeof(((type *)0)->field)
#define CFG(field) IN(CFG, struct target_config, field)
#define LIM(field) IN(LIMITS, struct iscsi_limits, field)
#define PAR(field) IN(PARAMS, struct iscsi_params, field)
#define NODE(field) IN(NODE, struct target_node_conf, field)
#define CLI(field) .cli_off = offsetof(struct target_config, field)
/* where: CFG for a global key `save` writes from the table, NONE for one written by code of
 * its own (alias, chap-user: conf_write.c) */
#define TEXT(w, s, f) .where = CONF_IN_##w, .set = (s), .fmt = (f)

/* RFC 7143 §13: the data segment and burst lengths. */
#define DSL_MIN 512u
#define DSL_MAX 16777215u
#define N_LIMITS "limits (max-*, discovery-idle-timeout, data-out-timeout)"
#define N_TIMERS "nop-interval, nop-timeout or login-timeout"
#define N_SESSION "session keys"
#define N_RESETS "target-warm-reset or target-cold-reset"

/* In the order `save` writes them (conf_write.c): the global keys, the limits, CHAP; then the
 * target keys and the session keys. */
const struct conf_key conf_keys[] = {
    {"log-level", CONF_TEXT, CONF_GLOBAL, CONF_LIVE, TEXT(CFG, set_log_level, fmt_log_level),
     .flag = "log-level", .flag_arg = "LEVEL", CLI(cli_log_level),
     .help = "error, warn, info (default) or debug"},
    {"log", CONF_TEXT, CONF_GLOBAL, CONF_RESTART, TEXT(CFG, set_log, fmt_log), .note = "log",
     .shown_default = "stderr", .flag = "syslog", CLI(cli_syslog),
     .help = "log to syslog (facility daemon) instead of stderr (also\n"
             "with --config, over its log key)"},
    {"threads", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 1, .hi = TARGET_THREADS_MAX,
     CFG(threads), .note = "threads", .shown_default = "online CPUs", .flag = "threads",
     .flag_arg = "N", CLI(cli_threads), .help = "reactor threads (default: number of online CPUs)"},
    {"poll-us", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = TARGET_POLL_US_MAX,
     CFG(poll_us), .note = "poll-us", .flag = "poll-us", .flag_arg = "N", CLI(cli_poll_us),
     .help = "after a turn with work, a reactor polls its sockets for up\n"
             "to N microseconds before it sleeps (0..10000, default 50;\n"
             "0 sleeps at once): small-block I/O skips the wake-up, an\n"
             "idle target still sleeps"},
    {"state-dir", CONF_TEXT, CONF_GLOBAL, CONF_RESTART, TEXT(CFG, set_state_dir, fmt_state_dir),
     .note = "state-dir", .flag = "state-dir", .flag_arg = "DIR", CLI(cli_state_dir),
     .help = "where persistent reservations with APTPL are kept across\n"
             "restarts (default " TARGET_DEFAULT_STATE_DIR ")"},
    {"ctl-socket", CONF_TEXT, CONF_GLOBAL, CONF_OWN, TEXT(CFG, set_ctl_socket, fmt_ctl_socket),
     .shown_default = TARGET_DEFAULT_CTL_SOCKET, .flag = "ctl-socket", .flag_arg = "PATH|none",
     CLI(cli_ctl_socket),
     .help = "the Unix socket linerate-ctl administers the daemon through\n"
             "(mode 0600; only root or this daemon's user may use it).\n"
             "Default " TARGET_DEFAULT_CTL_SOCKET ", skipped with a\n"
             "warning if it cannot be created or another daemon has it;\n"
             "a PATH given here must work. none: no control socket"},
    {"metrics", CONF_TEXT, CONF_GLOBAL, CONF_RESTART, TEXT(CFG, set_metrics, fmt_metrics),
     .note = "metrics", .shown_default = "none", .flag = "metrics", .flag_arg = "ADDR:PORT",
     CLI(cli_metrics),
     .help = "serve Prometheus metrics at http://ADDR:PORT/metrics (off by\n"
             "default; use a loopback address such as 127.0.0.1:9650\n"
             "unless the network is trusted: there is no authentication).\n"
             "Per LUN, session and portal: commands, bytes, latency\n"
             "histograms, errors by sense key; see linerate-ctl stats"},
    {"nop-interval", CONF_SECONDS, CONF_GLOBAL, CONF_RESTART, .lo = 1, .hi = 3600,
     CFG(nop_interval_s), .note = N_TIMERS},
    {"nop-timeout", CONF_SECONDS, CONF_GLOBAL, CONF_RESTART, .lo = 1, .hi = 3600,
     CFG(nop_timeout_s), .note = N_TIMERS},
    {"login-timeout", CONF_SECONDS, CONF_GLOBAL, CONF_RESTART, .lo = 1, .hi = 3600,
     CFG(login_timeout_s), .note = N_TIMERS},
    /* 0 (unset): the rbd store's own default, 30 s */
    {"rbd-timeout", CONF_SECONDS, CONF_GLOBAL, CONF_OWN, .lo = 1, .hi = 3600, CFG(rbd_timeout_s),
     .shown_default = "30"},
    /* The limits (docs/limits.md). 0 turns a limit off (for a benchmark or a closed network),
     * except max-tx-backlog, which is at least one largest reply so that any single answer can
     * be queued, max-task-buffers, at least the largest command (8 MiB of data and 8 MiB of
     * the medium's copy), and data-out-timeout, which is never off (ERL 0 has no other end
     * for a stalled write). */
    {"max-tx-backlog", CONF_SIZE, CONF_GLOBAL, CONF_RESTART, .lo = 64u << 10, .hi = 1ull << 32,
     LIM(max_tx_backlog), .note = N_LIMITS},
    {"max-pending-logins", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = 1u << 20,
     LIM(max_pending_logins), .note = N_LIMITS},
    {"max-pending-logins-per-address", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0,
     .hi = 1u << 20, LIM(max_pending_logins_per_addr), .note = N_LIMITS},
    {"max-sessions", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = 65535, LIM(max_sessions),
     .note = N_LIMITS},
    /* at most the target's I_T nexus slots (each session holds one) */
    {"max-sessions-per-target", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = SCSI_NEXUS_MAX,
     LIM(max_sessions_per_target), .note = N_LIMITS},
    {"max-discovery-sessions", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = 65535,
     LIM(max_discovery_sessions), .note = N_LIMITS},
    {"max-discovery-sessions-per-address", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0,
     .hi = 65535, LIM(max_discovery_sessions_per_addr), .note = N_LIMITS},
    {"discovery-idle-timeout", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 0, .hi = 86400,
     LIM(discovery_idle_timeout_s), .note = N_LIMITS},
    {"data-out-timeout", CONF_UINT, CONF_GLOBAL, CONF_RESTART, .lo = 1, .hi = 3600,
     LIM(data_out_timeout_s), .note = N_LIMITS, .flag = "data-out-timeout", .flag_arg = "SECONDS",
     CLI(cli_data_out_timeout),
     .help = "a write whose Data-Out stops for this long closes its\n"
             "connection at ErrorRecoveryLevel 0 (default 30, 1..3600;\n"
             "also with --config, over its key)"},
    {"max-task-buffers", CONF_SIZE, CONF_GLOBAL, CONF_RESTART, .lo = 16u << 20, .hi = 1ull << 40,
     LIM(max_task_buffers), .note = N_LIMITS, .flag = "max-task-buffers", .flag_arg = "SIZE",
     CLI(cli_max_task_buffers),
     .help = "data memory all commands together may hold (buffers,\n"
             "compare copies, ERL 2 orphans; default 1G, at least 16M);\n"
             "past it a command is answered TASK SET FULL or BUSY (also\n"
             "with --config, over its key)"},
    /* CHAP: compared by the reload's own code, which also sees the secrets */
    {"chap-secrets", CONF_TEXT, CONF_GLOBAL, CONF_OWN, TEXT(CFG, set_chap, fmt_chap),
     .flag = "chap-secrets", .flag_arg = "FILE",
     .help = "CHAP secrets, one 'NAME SECRET' per line (mode 600, owned\n"
             "by this user; secrets of 12 bytes or more)"},
    {"discovery-chap-user", CONF_TEXT, CONF_GLOBAL, CONF_OWN, TEXT(CFG, set_chap, fmt_chap),
     .flag = "discovery-chap-user", .flag_arg = "NAME",
     .help = "discovery sessions must log in with CHAP as NAME\n"
             "(a CHAP target is listed only to discovery sessions that\n"
             "authenticated as its own CHAP user)"},
    {"discovery-chap-mutual-user", CONF_TEXT, CONF_GLOBAL, CONF_OWN, TEXT(CFG, set_chap, fmt_chap),
     .flag = "discovery-chap-mutual-user", .flag_arg = "NAME",
     .help = "and the target answers them as NAME"},
    {"discovery-chap-match", CONF_BOOL, CONF_GLOBAL, CONF_RESTART, CFG(discovery_chap_match),
     .note = "discovery-chap-match", .shown_default = "yes"},
    {"chap-algorithms", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(CFG, set_chap, fmt_chap_algs),
     .shown_default = "all", .flag = "chap-algorithms", .flag_arg = "LIST",
     .help = "sha3-256,sha256,md5 (default: all; the strongest the\n"
             "initiator offers is used)"},
    {"portal", CONF_LIST, CONF_BOTH, CONF_LIVE, .repeatable = true, .flag = "listen",
     .flag_arg = "ADDR[:PORT]",
     .help = "listen on ADDR (repeatable): 127.0.0.1:3260, 0.0.0.0,\n"
             "[::1]:3260, [::]; the port defaults to 3260"},

    /* [target] keys */
    {"lun", CONF_LIST, CONF_TARGET, CONF_LIVE, .repeatable = true},
    {"allow", CONF_LIST, CONF_TARGET, CONF_LIVE, .repeatable = true, .flag = "allow",
     .flag_arg = "IQN",
     .help = "only these initiators may log in (repeatable;\ndefault: everyone)"},
    {"alias", CONF_TEXT, CONF_TARGET, CONF_RESTART, TEXT(NONE, set_alias, fmt_alias),
     .note = "alias"},
    {"chap-user", CONF_TEXT, CONF_TARGET | CONF_HOST, CONF_OWN, TEXT(NONE, set_chap, fmt_chap),
     .misplaced_hint = " (discovery-chap-user for discovery sessions)", .flag = "chap-user",
     .flag_arg = "NAME", .help = "initiators must log in with CHAP as NAME"},
    {"chap-mutual-user", CONF_TEXT, CONF_TARGET | CONF_HOST, CONF_OWN,
     TEXT(NONE, set_chap, fmt_chap),
     .misplaced_hint = " (discovery-chap-mutual-user for discovery sessions)",
     .flag = "chap-mutual-user", .flag_arg = "NAME",
     .help = "and the target answers their challenge as NAME"},
    /* [host IQN] / [group NAME] entries of a target (host_conf.c): what each initiator sees */
    {"map", CONF_LIST, CONF_HOST, CONF_LIVE, .repeatable = true},
    {"initiator", CONF_LIST, CONF_HOST, CONF_LIVE, .repeatable = true,
     .misplaced_hint = " (a [group NAME] after its [target])"},
    /* the entry's caps, compared and applied by ctl_hosts.c */
    {"iops", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "commands per second of all the entry's sessions together\n"
             "(a group's initiators share it; on this gateway; 0: none)"},
    {"read-iops", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "reads per second, as iops"},
    {"write-iops", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "writes per second, as iops"},
    {"mbps", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "MiB per second of all the entry's sessions together"},
    {"read-mbps", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "MiB read per second, as mbps"},
    {"write-mbps", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "MiB written per second, as mbps"},
    {"burst", CONF_TEXT, CONF_HOST, CONF_OWN, TEXT(NONE, set_host_limit, NULL),
     .help = "milliseconds' worth of the entry's caps an idle entry\n"
             "lets through at once (100ms, 1s)"},
    /* ALUA: one group, written and compared by alua_conf.c / conf_write.c */
    {"alua-group", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL), .shown_default = "1",
     .flag = "alua-group", .flag_arg = "ID",
     .help = "this gateway's ALUA target port group, also its TPGT and\n"
             "relative target port ID (1..65535, default 1)"},
    {"alua-state", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL),
     .shown_default = "active/optimized", .flag = "alua-state", .flag_arg = "STATE",
     .help = "its state for the LUNs: active/optimized (default),\n"
             "active/non-optimized or standby (per LUN: ,alua=STATE)"},
    {"alua-peer", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL), .repeatable = true,
     .flag = "alua-peer", .flag_arg = "ID:STATE",
     .help = "repeatable: another gateway exporting the same store, its\n"
             "group and state (per LUN: ,alua-peer=ID:STATE)"},
    {"alua-explicit", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL),
     .shown_default = "no", .flag = "alua-explicit", .flag_arg = "yes|no",
     .help = "explicit ALUA too: INQUIRY TPGS 11b and SET TARGET PORT\n"
             "GROUPS, for initiators that choose the paths (default no)"},
    {"alua-mode", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL),
     .shown_default = "all-active", .flag = "alua-mode", .flag_arg = "all-active|failover",
     .help = "all-active: the states as configured; failover: one gateway\n"
             "active/optimized per rbd LUN, taken over by a survivor"},
    {"failover-heartbeat", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL),
     .shown_default = "1s", .flag = "failover-heartbeat", .flag_arg = "TIME",
     .help = "alua-mode = failover: how often a gateway beats (1s)"},
    {"failover-timeout", CONF_TEXT, CONF_BOTH, CONF_OWN, TEXT(NONE, set_alua, NULL),
     .shown_default = "5s", .flag = "failover-timeout", .flag_arg = "TIME",
     .help = "alua-mode = failover: silence after which a gateway is\n"
             "fenced and replaced (5s)"},
    /* Whether an initiator's TARGET WARM / COLD RESET is done (it reaches every initiator of
     * the target) or answered "function rejected". */
    {"target-warm-reset", CONF_BOOL, CONF_TARGET, CONF_RESTART, NODE(warm_reset), .note = N_RESETS,
     .flag = "target-warm-reset", .flag_arg = "yes|no",
     .help = "whether an initiator's TARGET WARM RESET is done: it\n"
             "aborts every initiator's commands and resets every LUN\n"
             "for all (default yes; no: answered function rejected)"},
    {"target-cold-reset", CONF_BOOL, CONF_TARGET, CONF_RESTART, NODE(cold_reset), .note = N_RESETS,
     .flag = "target-cold-reset", .flag_arg = "yes|no",
     .help = "whether an initiator's TARGET COLD RESET is done: it\n"
             "also closes every initiator's connections (default no)"},

    /* Session keys (RFC 7143 §13): the target's side of the negotiation, global defaults or
     * per target; in the order conf_write.c writes them. */
    {"max-burst-length", CONF_SIZE, CONF_BOTH, CONF_RESTART, .lo = DSL_MIN, .hi = DSL_MAX,
     PAR(max_burst), .note = N_SESSION},
    {"first-burst-length", CONF_SIZE, CONF_BOTH, CONF_RESTART, .lo = DSL_MIN, .hi = DSL_MAX,
     PAR(first_burst), .note = N_SESSION},
    /* what a session really uses at most (login.c held larger values down silently) */
    {"max-recv-data-segment-length", CONF_SIZE, CONF_BOTH, CONF_RESTART, .lo = DSL_MIN,
     .hi = ISCSI_TARGET_MRDSL_MAX, PAR(max_recv_dsl), .note = N_SESSION},
    {"max-connections", CONF_UINT, CONF_BOTH, CONF_RESTART, .lo = 1, .hi = ISCSI_MAX_CONNECTIONS,
     PAR(max_connections), .note = N_SESSION},
    {"max-outstanding-r2t", CONF_UINT, CONF_BOTH, CONF_RESTART, .lo = 1, .hi = ISCSI_MAX_R2T,
     PAR(max_outstanding_r2t), .note = N_SESSION},
    /* RFC 7143 §13.15, §13.16: ERL 2 connection recovery waits this long before tasks are
     * reassigned, and keeps them this long after (0: nothing is kept) */
    {"default-time2wait", CONF_UINT, CONF_BOTH, CONF_RESTART, .lo = 0, .hi = 3600,
     PAR(default_time2wait), .note = N_SESSION},
    {"default-time2retain", CONF_UINT, CONF_BOTH, CONF_RESTART, .lo = 0, .hi = 3600,
     PAR(default_time2retain), .note = N_SESSION},
    {"error-recovery-level", CONF_TEXT, CONF_BOTH, CONF_RESTART, .where = CONF_IN_PARAMS,
     .set = set_erl, .fmt = fmt_erl, .note = N_SESSION, .flag = "error-recovery-level",
     .flag_arg = "N",
     .help = "the highest ErrorRecoveryLevel (RFC 7143 §7) offered;\n"
             "the initiator's offer and this are negotiated down to the\n"
             "smaller (default 0). 1 recovers digest errors and lost\n"
             "PDUs within the connection; 2 also keeps the tasks of a\n"
             "lost connection for TASK REASSIGN on another one for\n"
             "DefaultTime2Wait + DefaultTime2Retain seconds (2 + 20; with\n"
             "--config: default-time2wait, default-time2retain = 0..3600)"},
    {"immediate-data", CONF_BOOL, CONF_BOTH, CONF_RESTART, PAR(immediate_data), .note = N_SESSION},
    {"initial-r2t", CONF_BOOL, CONF_BOTH, CONF_RESTART, PAR(initial_r2t), .note = N_SESSION},
    {"header-digest", CONF_TEXT, CONF_BOTH, CONF_RESTART, .where = CONF_IN_PARAMS,
     .set = set_digest, .fmt = fmt_digest, .note = N_SESSION, .shown_default = "any"},
    {"data-digest", CONF_TEXT, CONF_BOTH, CONF_RESTART, .where = CONF_IN_PARAMS, .set = set_digest,
     .fmt = fmt_digest, .note = N_SESSION, .shown_default = "any"},
};

const size_t conf_nkeys = sizeof(conf_keys) / sizeof(conf_keys[0]);
_Static_assert(sizeof(conf_keys) / sizeof(conf_keys[0]) <= CONF_KEYS_MAX, "raise CONF_KEYS_MAX");
