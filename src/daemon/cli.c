/* The command line of linerate-target: options, --help, --version and the embedded default
 * (127.0.0.1:3260, iqn.2026-11.org.linerate:default, LUN 0 = ram:1G). Fills a target_config;
 * bad arguments are named and give exit code 2. */
#include "daemon/config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/size.h"

#ifndef LINERATE_VERSION
#define LINERATE_VERSION "unknown"
#endif

static const char usage_text[] =
    "Usage: linerate-target [OPTIONS]\n"
    "\n"
    "A user-space iSCSI target. With no options it serves one target,\n"
    "  " TARGET_DEFAULT_NAME ", LUN 0 = a 1 GiB RAM disk, on 127.0.0.1:3260\n"
    "and prints the iscsi:// URL of every LUN on stdout.\n"
    "\n"
    "Options:\n"
    "  --listen ADDR[:PORT]   listen on ADDR (repeatable): 127.0.0.1:3260, 0.0.0.0,\n"
    "                         [::1]:3260, [::]; the port defaults to 3260\n"
    "  --target-name IQN      name of the target (default " TARGET_DEFAULT_NAME ")\n"
    "  --lun SPEC             add a LUN (repeatable; numbered from 0 in order). SPEC is\n"
    "                           ram:SIZE[,prealloc]      memory, allocated as written (thin:\n"
    "                                                    the first write to a page pays a\n"
    "                                                    page fault, UNMAP gives it back);\n"
    "                                                    prealloc: all SIZE allocated and\n"
    "                                                    touched at start (huge pages where\n"
    "                                                    available): no faults later, but the\n"
    "                                                    memory is held from the start and\n"
    "                                                    the LUN is not thin (no UNMAP)\n"
    "                           null:SIZE                reads zeros, discards writes\n"
    "                           file:PATH[,size=SIZE][,direct]\n"
    "                                                    file or block device; size=\n"
    "                                                    creates/extends a file, direct\n"
    "                                                    uses O_DIRECT\n"
    "                         followed by LUN options: ,ro (read-only) ,bs=512|4096\n"
    "                         ,removable (START STOP UNIT ejects and loads the medium;\n"
    "                         PREVENT ALLOW MEDIUM REMOVAL holds it)\n"
    "                         ,pbs=SIZE (physical block size told to initiators, a\n"
    "                         power-of-two multiple of bs up to 64k, e.g. 4k for 512e)\n"
    "                         ,sanitize-rate=SIZE (bytes/s a SANITIZE writes at most;\n"
    "                         default 200M, 0 = no limit)\n"
    "                         SIZE takes k, M, G, T suffixes (powers of 1024).\n"
    "                         Default: one LUN, " TARGET_DEFAULT_LUN "\n"
    "  --allow IQN            only these initiators may log in (repeatable;\n"
    "                         default: everyone)\n"
    "  --chap-secrets FILE    CHAP secrets, one 'NAME SECRET' per line (mode 600, owned\n"
    "                         by this user; secrets of 12 bytes or more)\n"
    "  --chap-user NAME       initiators must log in with CHAP as NAME\n"
    "  --chap-mutual-user NAME  and the target answers their challenge as NAME\n"
    "  --discovery-chap-user NAME  discovery sessions must log in with CHAP as NAME\n"
    "                         (a CHAP target is listed only to discovery sessions that\n"
    "                         authenticated as its own CHAP user)\n"
    "  --discovery-chap-mutual-user NAME  and the target answers them as NAME\n"
    "  --chap-algorithms LIST sha3-256,sha256,md5 (default: all; the strongest the\n"
    "                         initiator offers is used)\n"
    "  --error-recovery-level N  the highest ErrorRecoveryLevel (RFC 7143 §7) offered;\n"
    "                         the initiator's offer and this are negotiated down to the\n"
    "                         smaller (default 0). 1 recovers digest errors and lost\n"
    "                         PDUs within the connection; 2 also keeps the tasks of a\n"
    "                         lost connection for TASK REASSIGN on another one for\n"
    "                         DefaultTime2Wait + DefaultTime2Retain seconds (2 + 20; with\n"
    "                         --config: default-time2wait, default-time2retain = 0..3600)\n"
    "  --alua-group ID        this gateway's ALUA target port group, also its TPGT and\n"
    "                         relative target port ID (1..65535, default 1)\n"
    "  --alua-state STATE     its state for the LUNs: active/optimized (default),\n"
    "                         active/non-optimized or standby (per LUN: ,alua=STATE)\n"
    "  --alua-peer ID:STATE   repeatable: another gateway exporting the same store, its\n"
    "                         group and state (per LUN: ,alua-peer=ID:STATE)\n"
    "  --target-warm-reset yes|no  whether an initiator's TARGET WARM RESET is done: it\n"
    "                         aborts every initiator's commands and resets every LUN\n"
    "                         for all (default yes; no: answered function rejected)\n"
    "  --target-cold-reset yes|no  whether an initiator's TARGET COLD RESET is done: it\n"
    "                         also closes every initiator's connections (default no)\n"
    "  --threads N            reactor threads (default: number of online CPUs)\n"
    "  --poll-us N            after a turn with work, a reactor polls its sockets for up\n"
    "                         to N microseconds before it sleeps (0..10000, default 50;\n"
    "                         0 sleeps at once): small-block I/O skips the wake-up, an\n"
    "                         idle target still sleeps\n"
    "  --inject LIST          a testing aid, never for production: faults the target\n"
    "                         causes itself (also with --config). LIST is comma-separated:\n"
    "                           kill-connection=SECONDS  close one logged-in connection\n"
    "                             (of any normal session) that often (0.01..3600)\n"
    "                           digest-error=RATE  corrupt that fraction of the data\n"
    "                             digests sent (0 <= RATE < 1)\n"
    "                           drop-pdu=RATE      leave that fraction of the Data-In\n"
    "                             and SCSI Response PDUs unsent\n"
    "                           store-delay=MS     file and rbd LUNs start a request\n"
    "                             MS ms per MiB it moves late (1..10000): aborts meet\n"
    "                             writes still in the store\n"
    "                         (digests only once DataDigest is negotiated). At\n"
    "                         ErrorRecoveryLevel 0 the commands of a closed connection\n"
    "                         fail, a Data-In lost or corrupted fails its command\n"
    "  --config FILE          serve the targets described in FILE instead (see\n"
    "                         examples/linerate.conf); --threads, --poll-us, --log-level,\n"
    "                         --syslog, --state-dir, --ctl-socket and --metrics still\n"
    "                         apply (over the file), --listen/--target-name/--lun/\n"
    "                         --allow/--alua-*/--target-*-reset may not be used\n"
    "  --log-level LEVEL      error, warn, info (default) or debug\n"
    "  --syslog               log to syslog (facility daemon) instead of stderr (also\n"
    "                         with --config, over its log key)\n"
    "  --state-dir DIR        where persistent reservations with APTPL are kept across\n"
    "                         restarts (default " TARGET_DEFAULT_STATE_DIR ")\n"
    "  --ctl-socket PATH|none the Unix socket linerate-ctl administers the daemon through\n"
    "                         (mode 0600; only root or this daemon's user may use it).\n"
    "                         Default " TARGET_DEFAULT_CTL_SOCKET ", skipped with a\n"
    "                         warning if it cannot be created or another daemon has it;\n"
    "                         a PATH given here must work. none: no control socket\n"
    "  --metrics ADDR:PORT    serve Prometheus metrics at http://ADDR:PORT/metrics (off by\n"
    "                         default; use a loopback address such as 127.0.0.1:9650\n"
    "                         unless the network is trusted: there is no authentication).\n"
    "                         Per LUN, session and portal: commands, bytes, latency\n"
    "                         histograms, errors by sense key; see linerate-ctl stats\n"
    "  --check                read the command line, the config file and the CHAP\n"
    "                         secrets, say what would be served and exit (0: good, 2:\n"
    "                         bad); stores are not opened and nothing is listened on\n"
    "  --max-task-buffers SIZE  data memory all commands together may hold (buffers,\n"
    "                         compare copies, ERL 2 orphans; default 1G, at least 16M);\n"
    "                         past it a command is answered TASK SET FULL or BUSY\n"
    "  --data-out-timeout SECONDS  a write whose Data-Out stops for this long closes its\n"
    "                         connection at ErrorRecoveryLevel 0 (default 30, 1..3600)\n"
    "                         (both also with --config, over its keys)\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show the version and exit\n"
    "\n"
    "Examples:\n"
    "  linerate-target\n"
    "  linerate-target --listen 127.0.0.1:3270 --lun ram:512M --lun file:/srv/disk.img\n"
    "  linerate-target --listen [::]:3260 --lun file:/srv/a.img,size=10G,direct,bs=4096\n"
    "  linerate-target --config /etc/linerate.conf --threads 4\n"
    "\n"
    "Connect with, for example:\n"
    "  iscsi-ls iscsi://127.0.0.1:3260\n"
    "  qemu-img info iscsi://127.0.0.1:3260/" TARGET_DEFAULT_NAME "/0\n"
    "  iscsiadm -m discovery -t st -p 127.0.0.1:3260\n"
    "\n"
    "While it runs, linerate-ctl shows sessions and LUNs and adds, removes, resizes and\n"
    "write-protects LUNs (see linerate-ctl --help). SIGHUP (or linerate-ctl reload)\n"
    "re-reads --config and applies what changed in the LUNs and the log level.\n"
    "\n"
    "SIGTERM or SIGINT stops accepting, closes every connection, flushes file LUNs and\n"
    "exits 0. Exit codes: 0 ok, 1 runtime error (e.g. address in use), 2 bad argument or\n"
    "bad config.\n";

enum {
    OPT_LISTEN = 256,
    OPT_TARGET_NAME,
    OPT_LUN,
    OPT_ALLOW,
    OPT_THREADS,
    OPT_POLL_US,
    OPT_CONFIG,
    OPT_LOG_LEVEL,
    OPT_STATE_DIR,
    OPT_CHAP_SECRETS,
    OPT_CHAP_USER,
    OPT_CHAP_MUTUAL_USER,
    OPT_DISC_CHAP_USER,
    OPT_DISC_CHAP_MUTUAL_USER,
    OPT_CHAP_ALGS,
    OPT_ERL,
    OPT_INJECT,
    OPT_CTL_SOCKET,
    OPT_ALUA_GROUP,
    OPT_ALUA_STATE,
    OPT_ALUA_PEER,
    OPT_SYSLOG,
    OPT_WARM_RESET,
    OPT_COLD_RESET,
    OPT_METRICS,
    OPT_CHECK,
    OPT_MAX_TASK_BUFFERS,
    OPT_DATA_OUT_TIMEOUT,
};

static const struct option long_opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"target-name", required_argument, NULL, OPT_TARGET_NAME},
    {"lun", required_argument, NULL, OPT_LUN},
    {"allow", required_argument, NULL, OPT_ALLOW},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"poll-us", required_argument, NULL, OPT_POLL_US},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"chap-secrets", required_argument, NULL, OPT_CHAP_SECRETS},
    {"chap-user", required_argument, NULL, OPT_CHAP_USER},
    {"chap-mutual-user", required_argument, NULL, OPT_CHAP_MUTUAL_USER},
    {"discovery-chap-user", required_argument, NULL, OPT_DISC_CHAP_USER},
    {"discovery-chap-mutual-user", required_argument, NULL, OPT_DISC_CHAP_MUTUAL_USER},
    {"chap-algorithms", required_argument, NULL, OPT_CHAP_ALGS},
    {"error-recovery-level", required_argument, NULL, OPT_ERL},
    {"inject", required_argument, NULL, OPT_INJECT},
    {"ctl-socket", required_argument, NULL, OPT_CTL_SOCKET},
    {"alua-group", required_argument, NULL, OPT_ALUA_GROUP},
    {"alua-state", required_argument, NULL, OPT_ALUA_STATE},
    {"alua-peer", required_argument, NULL, OPT_ALUA_PEER},
    {"syslog", no_argument, NULL, OPT_SYSLOG},
    {"target-warm-reset", required_argument, NULL, OPT_WARM_RESET},
    {"target-cold-reset", required_argument, NULL, OPT_COLD_RESET},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"check", no_argument, NULL, OPT_CHECK},
    {"max-task-buffers", required_argument, NULL, OPT_MAX_TASK_BUFFERS},
    {"data-out-timeout", required_argument, NULL, OPT_DATA_OUT_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("linerate-target: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see --help)\n", stderr);
    va_end(ap);
    return TARGET_EXIT_USAGE;
}

static const char *opt_name(int val)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == val)
            return o->name;
    return "?";
}

/* Options gathered before anything is built, so that --config can be checked against them. */
struct cli_args {
    const char *config;
    const char *target_name;
    char **listen;
    unsigned nlisten;
    char **luns;
    unsigned nluns;
    char **allow;
    unsigned nallow;
    int threads;   /* -1: not given */
    int poll_us;   /* -1: not given */
    int log_level; /* -1: not given */
    const char *state_dir;
    int erl; /* -1: not given */
    const char *ctl_socket;
    bool syslog;
    const char *metrics;
    /* --max-task-buffers, --data-out-timeout: the limit keys of the same names, checked as
     * they come and applied over the config file's */
    const char *max_task_buffers, *data_out_timeout;
    bool inject_given;
    struct inject_spec inject;
    /* CHAP, indexed by OPT_CHAP_SECRETS.. OPT_CHAP_ALGS */
    const char *chap[OPT_CHAP_ALGS - OPT_CHAP_SECRETS + 1];
    bool any_chap;
    /* --alua-group, --alua-state, --alua-peer: checked as they come, applied to the node */
    struct target_alua_conf alua;
    bool any_alua;
    /* --target-warm-reset, --target-cold-reset: checked as they come, applied to the node */
    struct target_node_conf resets;
    bool any_reset;
    bool check; /* --check: read everything, serve nothing */
};

static int push_arg(char ***arr, unsigned *n, char *v)
{
    char **grown = realloc(*arr, (*n + 1) * sizeof(**arr));
    if (!grown)
        return -1;
    grown[(*n)++] = v;
    *arr = grown;
    return 0;
}

static int cli_collect(struct cli_args *a, int argc, char **argv)
{
    opterr = 0;
    optind = 1;
    int c;
    char err[512];
    while ((c = getopt_long(argc, argv, ":hV", long_opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage_text, stdout);
            return TARGET_EXIT_OK;
        case 'V':
            printf("linerate-target %s\n", LINERATE_VERSION);
            return TARGET_EXIT_OK;
        case OPT_LISTEN: {
            struct target_portal p;
            if (target_parse_portal(optarg, &p, err, sizeof(err)) < 0)
                return cli_fail("--listen: %s", err);
            if (push_arg(&a->listen, &a->nlisten, optarg) < 0)
                return cli_fail("out of memory");
            break;
        }
        case OPT_TARGET_NAME:
            if (target_check_iscsi_name(optarg, err, sizeof(err)) < 0)
                return cli_fail("--target-name: %s", err);
            if (a->target_name)
                return cli_fail("--target-name given twice (one target per command line; use "
                                "--config for several)");
            a->target_name = optarg;
            break;
        case OPT_LUN: {
            struct target_lun_conf lun;
            if (target_parse_lun_spec(optarg, &lun, err, sizeof(err)) < 0)
                return cli_fail("--lun: %s", err);
            free(lun.bs_spec);
            if (push_arg(&a->luns, &a->nluns, optarg) < 0)
                return cli_fail("out of memory");
            break;
        }
        case OPT_ALUA_GROUP:
        case OPT_ALUA_STATE:
        case OPT_ALUA_PEER:
        case OPT_WARM_RESET:
        case OPT_COLD_RESET: {
            /* the config keys of the same names, for the one target */
            bool reset = c == OPT_WARM_RESET || c == OPT_COLD_RESET;
            int r = reset ? target_reset_key(&a->resets, opt_name(c), optarg, err, sizeof(err))
                          : target_alua_key(&a->alua, opt_name(c), optarg, err, sizeof(err));
            if (r < 0)
                return cli_fail("--%s: %s", opt_name(c), err);
            *(reset ? &a->any_reset : &a->any_alua) = true;
            break;
        }
        case OPT_ALLOW:
            if (target_check_iscsi_name(optarg, err, sizeof(err)) < 0)
                return cli_fail("--allow: %s", err);
            if (push_arg(&a->allow, &a->nallow, optarg) < 0)
                return cli_fail("out of memory");
            break;
        case OPT_THREADS: {
            uint64_t n;
            if (size_parse(optarg, &n) < 0 || n < 1 || n > TARGET_THREADS_MAX ||
                strpbrk(optarg, "kKmMgGtT"))
                return cli_fail("--threads: bad value '%s': expected 1..%d", optarg,
                                TARGET_THREADS_MAX);
            a->threads = (int)n;
            break;
        }
        case OPT_POLL_US: {
            uint64_t n;
            if (size_parse(optarg, &n) < 0 || n > TARGET_POLL_US_MAX || strpbrk(optarg, "kKmMgGtT"))
                return cli_fail("--poll-us: bad value '%s': expected 0..%d", optarg,
                                TARGET_POLL_US_MAX);
            a->poll_us = (int)n;
            break;
        }
        case OPT_CONFIG:
            if (a->config)
                return cli_fail("--config given twice");
            a->config = optarg;
            break;
        case OPT_LOG_LEVEL:
            a->log_level = log_level_parse(optarg);
            if (a->log_level < 0)
                return cli_fail("--log-level: bad value '%s': expected error, warn, info or debug",
                                optarg);
            break;
        case OPT_STATE_DIR:
            if (optarg[0] != '/' ||
                strlen(optarg) >= sizeof(((struct target_config *)0)->state_dir))
                return cli_fail("--state-dir: bad value '%s': expected an absolute path", optarg);
            a->state_dir = optarg;
            break;
        case OPT_CHAP_SECRETS:
        case OPT_CHAP_USER:
        case OPT_CHAP_MUTUAL_USER:
        case OPT_DISC_CHAP_USER:
        case OPT_DISC_CHAP_MUTUAL_USER:
        case OPT_CHAP_ALGS:
            if (a->chap[c - OPT_CHAP_SECRETS])
                return cli_fail("--%s given twice", opt_name(c));
            a->chap[c - OPT_CHAP_SECRETS] = optarg;
            a->any_chap = true;
            break;
        case OPT_ERL: {
            uint32_t erl;
            if (target_parse_erl(optarg, &erl, err, sizeof(err)) < 0)
                return cli_fail("--error-recovery-level: %s", err);
            a->erl = (int)erl;
            break;
        }
        case OPT_CTL_SOCKET: {
            struct target_config probe;
            memset(&probe, 0, sizeof(probe));
            if (target_set_ctl_socket(&probe, optarg, err, sizeof(err)) < 0)
                return cli_fail("--ctl-socket: %s", err);
            a->ctl_socket = optarg;
            break;
        }
        case OPT_SYSLOG:
            a->syslog = true;
            break;
        case OPT_CHECK:
            a->check = true;
            break;
        case OPT_METRICS: {
            struct target_config probe;
            memset(&probe, 0, sizeof(probe));
            if (target_set_metrics(&probe, optarg, err, sizeof(err)) < 0)
                return cli_fail("--metrics: %s", err);
            a->metrics = optarg;
            break;
        }
        case OPT_MAX_TASK_BUFFERS:
        case OPT_DATA_OUT_TIMEOUT: {
            struct iscsi_limits probe;
            iscsi_limits_default(&probe);
            if (target_limits_key(&probe, opt_name(c), optarg, err, sizeof(err)) < 0)
                return cli_fail("--%s: %s", opt_name(c), err);
            *(c == OPT_MAX_TASK_BUFFERS ? &a->max_task_buffers : &a->data_out_timeout) = optarg;
            break;
        }
        case OPT_INJECT:
            if (a->inject_given)
                return cli_fail("--inject given twice (put every fault in one list)");
            if (inject_parse(optarg, &a->inject, err, sizeof(err)) < 0 ||
                inject_check_available(&a->inject, err, sizeof(err)) < 0)
                return cli_fail("--inject: %s", err);
            a->inject_given = true;
            break;
        case ':':
            if (optopt >= 256)
                return cli_fail("option '--%s' needs a value", opt_name(optopt));
            return cli_fail("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt && optopt < 256)
                return cli_fail("unknown option '-%c'", optopt);
            return cli_fail("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_fail("unexpected argument '%s'", argv[optind]);
    if (a->config && (a->nlisten || a->nluns || a->nallow || a->target_name || a->any_chap ||
                      a->erl >= 0 || a->any_alua || a->any_reset))
        return cli_fail("--config cannot be combined with --listen, --target-name, --lun, "
                        "--allow, --chap-*, --alua-*, --target-*-reset or "
                        "--error-recovery-level: describe the targets in the config file");
    return -1;
}

/* The command-line target: one node on every --listen address. */
static int cli_build_node(struct target_config *cfg, const struct cli_args *a)
{
    char err[768];
    struct target_node_conf *n = target_config_add_node(
        cfg, a->target_name ? a->target_name : TARGET_DEFAULT_NAME, "--target-name");
    if (!n)
        return cli_fail("out of memory");
    unsigned nlisten = a->nlisten;
    for (unsigned i = 0; i < (nlisten ? nlisten : 1); i++) {
        struct target_portal p;
        const char *s = nlisten ? a->listen[i] : TARGET_DEFAULT_PORTAL;
        if (target_parse_portal(s, &p, err, sizeof(err)) < 0 || target_node_add_portal(n, &p) < 0)
            return cli_fail("--listen: %s", err);
    }
    unsigned nluns = a->nluns;
    for (unsigned i = 0; i < (nluns ? nluns : 1); i++) {
        struct target_lun_conf lun;
        const char *spec = nluns ? a->luns[i] : TARGET_DEFAULT_LUN;
        memset(&lun, 0, sizeof(lun));
        if (target_parse_lun_spec(spec, &lun, err, sizeof(err)) < 0)
            return cli_fail("--lun: %s", err);
        lun.lun = i;
        snprintf(lun.origin, sizeof(lun.origin), "--lun '%s'", spec);
        if (target_node_add_lun(n, &lun, err, sizeof(err)) < 0) {
            free(lun.bs_spec);
            return cli_fail("--lun: %s", err);
        }
    }
    for (unsigned i = 0; i < a->nallow; i++)
        if (target_node_add_allow(n, a->allow[i]) < 0)
            return cli_fail("out of memory");
    if (a->erl >= 0)
        n->params.erl = (uint32_t)a->erl;
    n->alua = a->alua;
    n->warm_reset = a->resets.warm_reset;
    n->cold_reset = a->resets.cold_reset;
    if (target_config_finish(cfg) < 0)
        return cli_fail("out of memory");
    /* CHAP options map onto the config keys of the same names (target or global). */
    static const char *const keys[] = {"chap-secrets",
                                       "chap-user",
                                       "chap-mutual-user",
                                       "discovery-chap-user",
                                       "discovery-chap-mutual-user",
                                       "chap-algorithms"};
    for (int i = 0; i <= OPT_CHAP_ALGS - OPT_CHAP_SECRETS; i++) {
        const char *v = a->chap[i];
        if (!v)
            continue;
        if (i == 0) { /* a relative path is fine on the command line */
            if (strlen(v) >= sizeof(cfg->chap_secrets))
                return cli_fail("--chap-secrets: path too long");
            snprintf(cfg->chap_secrets, sizeof(cfg->chap_secrets), "%s", v);
            continue;
        }
        bool target_key = i == 1 || i == 2;
        if (target_chap_key(cfg, target_key ? n : NULL, keys[i], v, err, sizeof(err)) < 0)
            return cli_fail("--%s: %s", keys[i], err);
    }
    if (target_chap_load(cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-target: %s\n", err);
        return TARGET_EXIT_USAGE;
    }
    return -1;
}

/* --check: what was read, so an admin (and the test of every documented example) sees the
 * file is taken before a restart; opening stores and listening are left to the real start. */
static int check_report(const struct target_config *cfg, const char *config)
{
    unsigned nluns = 0;
    for (unsigned i = 0; i < cfg->ntargets; i++)
        nluns += cfg->targets[i].nluns;
    printf("%s: OK: %u target%s, %u LUN%s, %u portal%s\n", config ? config : "command line",
           cfg->ntargets, cfg->ntargets == 1 ? "" : "s", nluns, nluns == 1 ? "" : "s", cfg->nlisten,
           cfg->nlisten == 1 ? "" : "s");
    return TARGET_EXIT_OK;
}

int target_cli_parse(struct target_config *cfg, int argc, char **argv)
{
    struct cli_args a = {
        .threads = -1, .poll_us = -1, .log_level = -1, .erl = -1, .resets = {.warm_reset = true}};
    int rc = cli_collect(&a, argc, argv);
    if (rc < 0) {
        if (a.config) {
            char err[1024];
            if (target_config_load(cfg, a.config, err, sizeof(err)) < 0) {
                fprintf(stderr, "linerate-target: %s\n", err);
                rc = TARGET_EXIT_USAGE;
            }
        } else {
            rc = cli_build_node(cfg, &a);
        }
    }
    if (rc < 0) {
        if (a.threads > 0)
            cfg->threads = (unsigned)a.threads;
        if (a.log_level >= 0)
            cfg->log_level = (enum log_level)a.log_level;
        if (a.state_dir)
            snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s", a.state_dir);
        cfg->cli_threads = a.threads > 0;
        if (a.poll_us >= 0)
            cfg->poll_us = (unsigned)a.poll_us;
        cfg->cli_poll_us = a.poll_us >= 0;
        cfg->cli_log_level = a.log_level >= 0;
        cfg->cli_state_dir = a.state_dir != NULL;
        if (a.syslog)
            cfg->log_syslog = true;
        cfg->cli_syslog = a.syslog;
        if (a.config) { /* absolute, so a reload finds it whatever the cwd became */
            char *abs = realpath(a.config, NULL);
            snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", abs ? abs : a.config);
            free(abs);
        }
        if (a.ctl_socket) { /* the command line wins over the config file's ctl-socket */
            char err[256];
            target_set_ctl_socket(cfg, a.ctl_socket, err, sizeof(err));
        }
        if (a.metrics) { /* likewise over the file's metrics */
            char err[256];
            target_set_metrics(cfg, a.metrics, err, sizeof(err));
            cfg->cli_metrics = true;
        }
        char err[256]; /* checked at parse: these cannot fail here */
        if (a.max_task_buffers)
            target_limits_key(&cfg->limits, "max-task-buffers", a.max_task_buffers, err,
                              sizeof(err));
        if (a.data_out_timeout)
            target_limits_key(&cfg->limits, "data-out-timeout", a.data_out_timeout, err,
                              sizeof(err));
        cfg->cli_max_task_buffers = a.max_task_buffers != NULL;
        cfg->cli_data_out_timeout = a.data_out_timeout != NULL;
        cfg->inject = a.inject;
        if (a.check)
            rc = check_report(cfg, a.config);
    }
    free(a.listen);
    free(a.luns);
    free(a.allow);
    return rc;
}
