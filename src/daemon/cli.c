/* The command line of linerate-target: options, --help, --version and the embedded default
 * (127.0.0.1:3260, iqn.2026-11.org.linerate:default, LUN 0 = ram:1G). Fills a target_config;
 * bad arguments are named and give exit code 2. */
#include "daemon/config.h"

#include "daemon/conf_keys.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/size.h"

#ifndef LINERATE_VERSION
#define LINERATE_VERSION "unknown"
#endif

/* --help: the options of no config key, then those of the keys (conf_keys_help), then this */
static const char usage_head[] =
    "Usage: linerate-target [OPTIONS]\n"
    "\n"
    "A user-space iSCSI target. With no options it serves one target,\n"
    "  " TARGET_DEFAULT_NAME ", LUN 0 = a 1 GiB RAM disk, on 127.0.0.1:3260\n"
    "and prints the iscsi:// URL of every LUN on stdout.\n"
    "\n"
    "Options:\n"
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
    "  --check                read the command line, the config file and the CHAP\n"
    "                         secrets, say what would be served and exit (0: good, 2:\n"
    "                         bad); stores are not opened and nothing is listened on\n"
    "  --list-keys            list every config key: name, section, whether a reload\n"
    "                         applies it, default and command-line option, and exit\n"
    "The options of the config keys of the same names (see linerate.conf(5)):\n";

static const char usage_tail[] =
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

/* The options of no config key; those of a key are OPT_KEY + its row (conf_keys_table.c). */
enum {
    OPT_TARGET_NAME = 256,
    OPT_LUN,
    OPT_CONFIG,
    OPT_INJECT,
    OPT_CHECK,
    OPT_LIST_KEYS,
    OPT_KEY = 512,
};

static const struct option fixed_opts[] = {
    {"target-name", required_argument, NULL, OPT_TARGET_NAME},
    {"lun", required_argument, NULL, OPT_LUN},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"inject", required_argument, NULL, OPT_INJECT},
    {"check", no_argument, NULL, OPT_CHECK},
    {"list-keys", no_argument, NULL, OPT_LIST_KEYS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
};
#define NFIXED (sizeof(fixed_opts) / sizeof(fixed_opts[0]))

/* getopt's table: the fixed options, then one per key with an option. */
static struct option long_opts[NFIXED + CONF_KEYS_MAX + 1];

static void opts_init(void)
{
    unsigned n = 0;
    for (; n < NFIXED; n++)
        long_opts[n] = fixed_opts[n];
    for (size_t i = 0; i < conf_nkeys; i++)
        if (conf_keys[i].flag)
            long_opts[n++] = (struct option){
                conf_keys[i].flag, conf_keys[i].flag_arg ? required_argument : no_argument, NULL,
                OPT_KEY + (int)i};
    long_opts[n] = (struct option){NULL, 0, NULL, 0};
}

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

/* A config key given as an option, in the order given (alua-peer and the lists repeat). */
struct cli_key {
    const struct conf_key *k;
    const char *val;
};

/* Options gathered before anything is built, so that --config can be checked against them. */
struct cli_args {
    const char *config;
    const char *target_name;
    char **luns;
    unsigned nluns;
    struct cli_key *keys;
    unsigned nkeys;
    bool any_target_key; /* one that describes the target, not allowed with --config */
    bool inject_given;
    struct inject_spec inject;
    bool check; /* --check: read everything, serve nothing */
    /* where the key options are tried as they come, so that a bad value is named at once */
    struct target_config probe;
    struct target_node_conf probe_node;
};

static int push_arg(void *arrp, unsigned *n, size_t elem, const void *v)
{
    char **arr = arrp;
    char *grown = realloc(*arr, (*n + 1) * elem);
    if (!grown)
        return -1;
    memcpy(grown + (*n)++ * elem, v, elem);
    *arr = grown;
    return 0;
}

/* Whether a key's option goes on the configuration (applied over a --config file's, which
 * its cli_off then records) rather than on the command line's target. */
static bool cli_global(const struct conf_key *k)
{
    return k->where == CONF_IN_CFG || k->where == CONF_IN_LIMITS;
}

/* The objects key k is set on: the configuration, or for the keys of a target (its session
 * keys, ALUA, CHAP user) the one target of the command line, n. */
static struct conf_obj cli_obj(const struct conf_key *k, struct target_config *cfg,
                               struct target_node_conf *n)
{
    return (struct conf_obj){
        .cfg = cfg, .node = cli_global(k) ? NULL : n, .params = &n->params, .alua = &n->alua};
}

/* A config key given as an option: checked now (on the probe), applied once the file or the
 * command-line target is there. -1 to go on, or the exit code (the message printed). */
static int cli_key(struct cli_args *a, const struct conf_key *k, const char *val)
{
    char err[768];
    if (!val)
        val = "syslog"; /* --syslog: log = syslog */
    for (unsigned i = 0; i < a->nkeys && !k->repeatable; i++)
        if (a->keys[i].k == k)
            return cli_fail("--%s given twice", k->flag);
    if (k->type == CONF_LIST) {
        struct target_portal p;
        bool listen = k->name[0] == 'p';
        if (listen ? target_parse_portal(val, &p, err, sizeof(err)) < 0
                   : target_check_iscsi_name(val, err, sizeof(err)) < 0)
            return cli_fail("--%s: %s", k->flag, err);
    } else if (k->type == CONF_UINT && k->where == CONF_IN_CFG) {
        /* a count on the command line is a plain number */
        uint64_t x;
        if (strpbrk(val, "kKmMgGtT") || conf_parse_uint(val, k->lo, k->hi, &x) < 0)
            return cli_fail("--%s: bad value '%s': expected %llu..%llu", k->flag, val,
                            (unsigned long long)k->lo, (unsigned long long)k->hi);
    } else if (strcmp(k->name, "chap-secrets") != 0) { /* a relative path is fine here */
        struct conf_obj o = cli_obj(k, &a->probe, &a->probe_node);
        if (conf_key_set(k, &o, val, err, sizeof(err)) < 0) {
            size_t kl = strlen(k->name); /* "metrics: bad address": the option says it */
            bool named = strncmp(err, k->name, kl) == 0 && err[kl] == ':';
            return cli_fail("--%s: %s", k->flag, named ? err + kl + 2 : err);
        }
    }
    if (!k->cli_off)
        a->any_target_key = true;
    struct cli_key ck = {k, val};
    if (push_arg(&a->keys, &a->nkeys, sizeof(ck), &ck) < 0)
        return cli_fail("out of memory");
    return -1;
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
            fputs(usage_head, stdout);
            conf_keys_help(stdout);
            fputs(usage_tail, stdout);
            return TARGET_EXIT_OK;
        case 'V':
            printf("linerate-target %s\n", LINERATE_VERSION);
            return TARGET_EXIT_OK;
        case OPT_LIST_KEYS:
            conf_keys_list(stdout);
            return TARGET_EXIT_OK;
        case OPT_TARGET_NAME:
            if (target_check_iscsi_name(optarg, err, sizeof(err)) < 0)
                return cli_fail("--target-name: %s", err);
            if (a->target_name)
                return cli_fail("--target-name given twice (one target per command line; use "
                                "--config for several)");
            a->target_name = optarg;
            a->any_target_key = true;
            break;
        case OPT_LUN: {
            struct target_lun_conf lun;
            if (target_parse_lun_spec(optarg, &lun, err, sizeof(err)) < 0)
                return cli_fail("--lun: %s", err);
            free(lun.bs_spec);
            if (push_arg(&a->luns, &a->nluns, sizeof(optarg), &optarg) < 0)
                return cli_fail("out of memory");
            a->any_target_key = true;
            break;
        }
        case OPT_CONFIG:
            if (a->config)
                return cli_fail("--config given twice");
            a->config = optarg;
            break;
        case OPT_CHECK:
            a->check = true;
            break;
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
            if (c >= OPT_KEY && (size_t)(c - OPT_KEY) < conf_nkeys) {
                int rc = cli_key(a, &conf_keys[c - OPT_KEY], optarg);
                if (rc >= 0)
                    return rc;
                break;
            }
            if (optopt && optopt < 256)
                return cli_fail("unknown option '-%c'", optopt);
            return cli_fail("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_fail("unexpected argument '%s'", argv[optind]);
    if (a->config && a->any_target_key)
        return cli_fail("--config cannot be combined with --listen, --target-name, --lun, "
                        "--allow, --chap-*, --alua-*, --target-*-reset or "
                        "--error-recovery-level: describe the targets in the config file");
    return -1;
}

/* The key options: those of the configuration over what the file (or the defaults) set,
 * noting that the command line set them; those of the target on node n (NULL with --config,
 * which has none of them). Checked as they came, so they cannot fail here but for memory. */
static int cli_apply_keys(struct target_config *cfg, struct target_node_conf *n,
                          const struct cli_args *a)
{
    char err[768];
    for (unsigned i = 0; i < a->nkeys; i++) {
        const struct conf_key *k = a->keys[i].k;
        const char *v = a->keys[i].val;
        if (!cli_global(k) != (n != NULL))
            continue;
        int rc = 0;
        struct target_portal p;
        struct conf_obj o = cli_obj(k, cfg, n ? n : &((struct cli_args *)a)->probe_node);
        if (strcmp(k->name, "chap-secrets") == 0) {
            if (strlen(v) >= sizeof(cfg->chap_secrets))
                return cli_fail("--chap-secrets: path too long");
            snprintf(cfg->chap_secrets, sizeof(cfg->chap_secrets), "%s", v);
        } else if (k->type == CONF_LIST && k->name[0] == 'p') {
            rc = target_parse_portal(v, &p, err, sizeof(err)) < 0 ? -1
                                                                  : target_node_add_portal(n, &p);
        } else if (k->type == CONF_LIST) {
            rc = target_node_add_allow(n, v);
        } else {
            rc = conf_key_set(k, &o, v, err, sizeof(err));
        }
        if (rc < 0)
            return cli_fail("--%s: out of memory", k->flag);
        if (k->cli_off)
            *(bool *)((char *)cfg + k->cli_off) = true;
    }
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
    int rc = cli_apply_keys(cfg, n, a);
    if (rc >= 0)
        return rc;
    if (n->nportals == 0) {
        struct target_portal p;
        if (target_parse_portal(TARGET_DEFAULT_PORTAL, &p, err, sizeof(err)) < 0 ||
            target_node_add_portal(n, &p) < 0)
            return cli_fail("out of memory");
    }
    if (target_config_finish(cfg) < 0)
        return cli_fail("out of memory");
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
    struct cli_args a = {0};
    target_config_init(&a.probe);
    target_params_default(&a.probe_node.params);
    opts_init();
    int rc = cli_collect(&a, argc, argv);
    if (rc < 0 && a.config) {
        char err[1024];
        if (target_config_load(cfg, a.config, err, sizeof(err)) < 0) {
            fprintf(stderr, "linerate-target: %s\n", err);
            rc = TARGET_EXIT_USAGE;
        }
        /* absolute, so a reload finds it whatever the cwd became */
        char *abs = rc < 0 ? realpath(a.config, NULL) : NULL;
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", abs ? abs : a.config);
        free(abs);
    } else if (rc < 0) {
        rc = cli_build_node(cfg, &a);
    }
    if (rc < 0)
        rc = cli_apply_keys(cfg, NULL, &a);
    if (rc < 0 && !a.config) {
        char err[1024];
        if (target_chap_load(cfg, err, sizeof(err)) < 0) {
            fprintf(stderr, "linerate-target: %s\n", err);
            rc = TARGET_EXIT_USAGE;
        }
    }
    if (rc < 0) {
        target_config_warn_thin_ram(cfg);
        cfg->inject = a.inject;
        if (a.check)
            rc = check_report(cfg, a.config);
    }
    target_config_free(&a.probe);
    chap_wipe(&a.probe_node, sizeof(a.probe_node));
    free(a.luns);
    free(a.keys);
    return rc;
}
