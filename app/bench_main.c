/* linerate-bench: the seed table as a program. Parses the options, runs every cell
 * (size x rw x digest x connections) with --sessions worker threads, measures MB/s, IOPS,
 * latency and CPU per KB (bench and --target-pid), and prints table/csv/json and an SVG. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "util/log.h"
#include "util/secrets.h"
#include "util/size.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: linerate-bench [options] iscsi://[USER%%SECRET@]HOST[:PORT]/IQN/LUN\n"
            "  --portal LIST        more portals of the same LUN (HOST[:PORT], comma-separated\n"
            "                       or repeated; at most 7): each session becomes a multipath\n"
            "                       device, one session per portal, the URL's first. Paths\n"
            "                       are chosen by ALUA state (REPORT TARGET PORT GROUPS at\n"
            "                       login, on 2Ah/06h and on a lost path): active/optimized,\n"
            "                       else active/non-optimized, never standby; a command whose\n"
            "                       path's session died, or that a standby path refused, is\n"
            "                       issued again on another (within 60 s); a lost path logs\n"
            "                       in again by itself. One connection\n"
            "                       per path, all of a session's paths on one thread; not\n"
            "                       with --connections above 1 or --inject. Each session's\n"
            "                       paths, their commands and the longest I/O pause are\n"
            "                       printed at the end\n"
            "  --sizes LIST         block sizes (default 512,1k,2k,4k,8k,16k,64k,128k,256k)\n"
            "  --rw LIST            read,write,randread,randwrite,mixed (default read,write)\n"
            "  --digest LIST        off,on: HeaderDigest+DataDigest CRC32C (default off)\n"
            "  --connections LIST   MC/S connections per session (default 1)\n"
            "  --sessions N         independent sessions in parallel (default 1)\n"
            "                       (sessions and connections share one thread per CPU)\n"
            "  --qd N               outstanding commands per session (default 32)\n"
            "  --seconds S          time per cell (default 5)\n"
            "  --verify             write stamped blocks, read them back, fail on the first bad\n"
            "  --verify-midway CMD  a testing aid: once half of the first session's --verify\n"
            "                       writes are acknowledged, run CMD (sh -c) with the rest\n"
            "                       in flight and I/O held until it returns (e.g. kill a\n"
            "                       gateway, to verify through a failover)\n"
            "  --verify-paths N     a testing aid with --portal: before --verify reads back,\n"
            "                       wait (at most 60 s) until N paths are up, so a path that\n"
            "                       came back (failback) carries the reads\n"
            "  --cmd-timeout MS     each command's timeout in the initiator (default 15000):\n"
            "                       a testing aid, with --verify-midway stopping a target\n"
            "  --format FMT         table (default), csv or json\n"
            "  --svg FILE           draw MB/s against block size\n"
            "  --target-pid PID     measure the target's CPU per KB from /proc/PID/stat\n"
            "  --chap-user NAME     log in with CHAP as NAME (or USER%%SECRET@ in the URL)\n"
            "  --chap-mutual-user NAME  mutual CHAP: the target must prove itself as NAME\n"
            "  --chap-secrets FILE  the secrets of those users ('NAME SECRET' lines, mode 600)\n"
            "                       or LINERATE_CHAP_SECRET / LINERATE_CHAP_MUTUAL_SECRET\n"
            "                       (LINERATE_CHAP_USER, LINERATE_CHAP_MUTUAL_USER for names)\n"
            "  --erl N              ask for ErrorRecoveryLevel N (RFC 7143 §7; default 0).\n"
            "                       At ERL 0 a lost connection or a digest error fails the\n"
            "                       commands it carried, and the bench counts them; at ERL 1\n"
            "                       digest errors and lost PDUs are recovered (SNACK, retry,\n"
            "                       recovery R2T), a lost connection still fails its\n"
            "                       commands; at ERL 2 those move to another connection\n"
            "                       (Logout for recovery, TASK REASSIGN) and the lost one\n"
            "                       logs in again. With kill-connection at ERL 2 each cut's\n"
            "                       stall is printed (cut to the first completion of a\n"
            "                       command carried over) with a summary at the end\n"
            "  --inject LIST        faults to inject, a testing aid; comma-separated:\n"
            "                         kill-connection=SECONDS  cut one connection of each\n"
            "                           session that often, in every cell and during\n"
            "                           --verify (round robin over its connections;\n"
            "                           0.01..3600), each cut once a command has completed\n"
            "                           since the one before and every connection is up\n"
            "                         digest-error=RATE  corrupt that fraction of the data\n"
            "                           digests sent (0 <= RATE < 1)\n"
            "                         drop-pdu=RATE      leave that fraction of the SCSI\n"
            "                           Command and Data-Out PDUs unsent\n"
            "                       e.g. --inject kill-connection=1 (digests are corrupted\n"
            "                       only with --digest on). Without recovery (ERL 0) a cut\n"
            "                       connection, a lost command or a corrupted digest fails\n"
            "                       the commands it carried (a lost command after the\n"
            "                       command timeout): the bench counts the failed\n"
            "                       commands, reports them with what was injected,\n"
            "                       exits 1, and logs in again between cells once a session\n"
            "                       has no connection left\n"
            "  --log-level LEVEL    the initiator's log on stderr: error, warn (default),\n"
            "                       info (logins, recovery steps) or debug\n"
            "  --initiator-name IQN log in as IQN (default iqn.2026-01.org.linerate:bench;\n"
            "                       every session of the run uses it)\n"
            "  --help               this text\n"
            "Progress goes to stderr, results to stdout.\n");
}

static int parse_list(const char *arg, const char *what, int (*one)(const char *, void *),
                      void *ctx)
{
    char *copy = strdup(arg);
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (one(tok, ctx) < 0) {
            fprintf(stderr, "linerate-bench: bad %s value '%s'\n", what, tok);
            rc = -1;
            break;
        }
    }
    free(copy);
    return rc;
}

static int one_size(const char *tok, void *ctx)
{
    struct bench_opts *o = ctx;
    uint64_t v;
    if (size_parse(tok, &v) < 0 || v < 512 || v > (16u << 20) || o->nsizes >= BENCH_MAX_LIST)
        return -1;
    o->sizes[o->nsizes++] = (uint32_t)v;
    return 0;
}

static int one_rw(const char *tok, void *ctx)
{
    struct bench_opts *o = ctx;
    for (int i = 0; i < RW_COUNT; i++)
        if (!strcmp(tok, bench_rw_name((enum bench_rw)i))) {
            if (o->nrws >= RW_COUNT)
                return -1;
            o->rws[o->nrws++] = (enum bench_rw)i;
            return 0;
        }
    return -1;
}

static int one_digest(const char *tok, void *ctx)
{
    struct bench_opts *o = ctx;
    if (o->ndigests >= 2 || (strcmp(tok, "on") && strcmp(tok, "off")))
        return -1;
    o->digests[o->ndigests++] = !strcmp(tok, "on");
    return 0;
}

static int one_conn(const char *tok, void *ctx)
{
    struct bench_opts *o = ctx;
    char *end;
    unsigned long v = strtoul(tok, &end, 10);
    if (*end || v < 1 || v > LR_MAX_CONNECTIONS || o->nconns >= BENCH_MAX_LIST)
        return -1;
    o->conns[o->nconns++] = (uint32_t)v;
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v == 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

static int copy_name(char *dst, const char *src, const char *what)
{
    if (strlen(src) >= 256 || !src[0]) {
        fprintf(stderr, "linerate-bench: bad %s\n", what);
        return -1;
    }
    strcpy(dst, src);
    return 0;
}

/* CHAP credentials: names from the URL, options or environment; secrets from the URL, a
 * secrets file (same rules as the target's) or the environment, never echoed. */
static int chap_setup(struct bench_opts *o, const char *user, const char *mutual, const char *file)
{
    if (!o->url.chap_user[0] && user && copy_name(o->url.chap_user, user, "--chap-user") < 0)
        return -1;
    if (mutual && copy_name(o->chap_mutual_user, mutual, "--chap-mutual-user") < 0)
        return -1;
    if (o->chap_mutual_user[0] && !o->url.chap_user[0]) {
        fprintf(stderr, "linerate-bench: mutual CHAP needs a CHAP user too\n");
        return -1;
    }
    uint8_t sec[2][SECRETS_MAX_LEN + 1];
    struct secret_want want[2];
    unsigned n = 0;
    if (file) {
        if (o->url.chap_user[0] && !o->url.chap_secret[0])
            want[n++] = (struct secret_want){.name = o->url.chap_user, .secret = sec[0]};
        if (o->chap_mutual_user[0])
            want[n++] = (struct secret_want){.name = o->chap_mutual_user, .secret = sec[1]};
        char err[512];
        if (n && secrets_load(file, want, n, err, sizeof(err)) < 0) {
            fprintf(stderr, "linerate-bench: %s\n", err);
            explicit_bzero(sec, sizeof(sec));
            return -1;
        }
        for (unsigned i = 0; i < n; i++) {
            char *dst = want[i].secret == sec[0] ? o->url.chap_secret : o->chap_mutual_secret;
            memcpy(dst, want[i].secret, want[i].len);
            dst[want[i].len] = '\0';
        }
        explicit_bzero(sec, sizeof(sec));
    }
    const char *env;
    if (o->url.chap_user[0] && !o->url.chap_secret[0] && (env = getenv("LINERATE_CHAP_SECRET")) &&
        strlen(env) < sizeof(o->url.chap_secret))
        strcpy(o->url.chap_secret, env);
    if (o->chap_mutual_user[0] && !o->chap_mutual_secret[0] &&
        (env = getenv("LINERATE_CHAP_MUTUAL_SECRET")) &&
        strlen(env) < sizeof(o->chap_mutual_secret))
        strcpy(o->chap_mutual_secret, env);
    if (o->url.chap_user[0] && !o->url.chap_secret[0]) {
        fprintf(stderr,
                "linerate-bench: no CHAP secret for user %s (URL, --chap-secrets or "
                "LINERATE_CHAP_SECRET)\n",
                o->url.chap_user);
        return -1;
    }
    if (o->chap_mutual_user[0] && !o->chap_mutual_secret[0]) {
        fprintf(stderr,
                "linerate-bench: no CHAP secret for mutual user %s (--chap-secrets or "
                "LINERATE_CHAP_MUTUAL_SECRET)\n",
                o->chap_mutual_user);
        return -1;
    }
    return 0;
}

/* What the options name before it is read into bench_opts: the lists are parsed once all
 * options are in, the CHAP names are checked against the URL's. */
struct opt_words {
    const char *sizes, *rws, *digests, *conns;
    const char *chap_user, *chap_mutual, *chap_file;
};

/* The defaults, before any option: what linerate-bench(1) says a run does without options. */
static void opts_defaults(struct bench_opts *o, struct opt_words *w)
{
    memset(o, 0, sizeof(*o));
    o->sessions = 1;
    o->qd = 32;
    o->seconds = 5;
    o->log_level = LOG_LVL_WARN;
    *w = (struct opt_words){
        .sizes = "512,1k,2k,4k,8k,16k,64k,128k,256k",
        .rws = "read,write",
        .digests = "off",
        .conns = "1",
        .chap_user = getenv("LINERATE_CHAP_USER"),
        .chap_mutual = getenv("LINERATE_CHAP_MUTUAL_USER"),
    };
}

static int bad_value(const char *arg)
{
    fprintf(stderr, "linerate-bench: bad option value '%s'\n", arg);
    return -1;
}

static int read_erl(const char *arg, struct bench_opts *o)
{
    if (strlen(arg) != 1 || arg[0] < '0' || arg[0] > '2') {
        fprintf(stderr, "linerate-bench: bad --erl value '%s': expected 0, 1 or 2\n", arg);
        return -1;
    }
    o->erl = (uint32_t)(arg[0] - '0');
    if (o->erl > lr_erl_max()) {
        fprintf(stderr,
                "linerate-bench: --erl %u is not implemented yet (the highest this "
                "build performs is %u)\n",
                o->erl, lr_erl_max());
        return -1;
    }
    return 0;
}

static int read_inject(const char *arg, struct bench_opts *o)
{
    char why[256];
    if (inject_parse(arg, &o->inject, why, sizeof(why)) < 0 ||
        inject_check_available(&o->inject, why, sizeof(why)) < 0) {
        fprintf(stderr, "linerate-bench: --inject: %s\n", why);
        return -1;
    }
    if (o->inject.store_delay_ms > 0) {
        fprintf(stderr, "linerate-bench: --inject: store-delay slows the target's own "
                        "file and rbd LUNs: give it to linerate-target\n");
        return -1;
    }
    return 0;
}

static int read_format(const char *arg, struct bench_opts *o)
{
    if (!strcmp(arg, "table"))
        o->fmt = FMT_TABLE;
    else if (!strcmp(arg, "csv"))
        o->fmt = FMT_CSV;
    else if (!strcmp(arg, "json"))
        o->fmt = FMT_JSON;
    else
        return bad_value(arg);
    return 0;
}

/* One option as getopt_long returned it: its value checked on its own and stored. */
static int read_option(int c, const char *arg, struct bench_opts *o, struct opt_words *w)
{
    unsigned long v;
    char *end;
    switch (c) {
    case 's':
        w->sizes = arg;
        break;
    case 'r':
        w->rws = arg;
        break;
    case 'd':
        w->digests = arg;
        break;
    case 'c':
        w->conns = arg;
        break;
    case 'S':
        if (parse_uint(arg, 256, &v) < 0)
            return bad_value(arg);
        o->sessions = (unsigned)v;
        break;
    case 'q':
        if (parse_uint(arg, 4096, &v) < 0)
            return bad_value(arg);
        o->qd = (unsigned)v;
        break;
    case 't':
        o->seconds = strtod(arg, &end);
        if (*end || !(o->seconds > 0) || o->seconds > 3600)
            return bad_value(arg);
        break;
    case 'v':
        o->verify = true;
        break;
    case 'f':
        return read_format(arg, o);
    case 'g':
        o->svg = arg;
        break;
    case 'p':
        if (parse_uint(arg, 1u << 30, &v) < 0)
            return bad_value(arg);
        o->target_pid = (pid_t)v;
        break;
    case 'U':
        w->chap_user = arg;
        break;
    case 'M':
        w->chap_mutual = arg;
        break;
    case 'K':
        w->chap_file = arg;
        break;
    case 'E':
        return read_erl(arg, o);
    case 'I':
        return read_inject(arg, o);
    case 'L':
        o->log_level = log_level_parse(arg);
        if (o->log_level < 0) {
            fprintf(stderr,
                    "linerate-bench: bad --log-level value '%s': expected error, warn, info "
                    "or debug\n",
                    arg);
            return -1;
        }
        break;
    case 'N':
        o->initiator_name = arg;
        break;
    case 'P':
        return bench_portal_add(o, arg);
    case 'm':
        o->verify_midway = arg;
        break;
    case 'W':
        if (parse_uint(arg, LR_MPATH_MAX_PATHS, &v) < 0)
            return bad_value(arg);
        o->verify_paths = (unsigned)v;
        break;
    case 'T':
        if (parse_uint(arg, 3600000, &v) < 0)
            return bad_value(arg);
        o->cmd_timeout_ms = (uint32_t)v;
        break;
    case 'h':
        usage(stdout);
        exit(0);
    default:
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The one positional argument, the URL of the LUN. */
static int read_url(char *url, struct bench_opts *o)
{
    if (lr_url_parse(url, &o->url) < 0) {
        /* the URL may hold a secret: not echoed */
        fprintf(stderr,
                "linerate-bench: bad URL (want iscsi://[USER%%SECRET@]HOST[:PORT]/IQN/LUN)\n");
        return -1;
    }
    /* a secret given in the URL leaves the command line that `ps` shows */
    char *at = strchr(url, '@');
    if (o->url.chap_secret[0] && at)
        for (char *p = strchr(url, '%'); p && p < at; p++)
            *p = 'x';
    return 0;
}

/* Defaults, then each option on its own, then the lists and the URL, then what the options
 * must agree on with each other and the URL (CHAP names and secrets). */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longs[] = {
        {"sizes", required_argument, NULL, 's'},
        {"rw", required_argument, NULL, 'r'},
        {"digest", required_argument, NULL, 'd'},
        {"connections", required_argument, NULL, 'c'},
        {"sessions", required_argument, NULL, 'S'},
        {"qd", required_argument, NULL, 'q'},
        {"seconds", required_argument, NULL, 't'},
        {"verify", no_argument, NULL, 'v'},
        {"format", required_argument, NULL, 'f'},
        {"svg", required_argument, NULL, 'g'},
        {"target-pid", required_argument, NULL, 'p'},
        {"chap-user", required_argument, NULL, 'U'},
        {"chap-mutual-user", required_argument, NULL, 'M'},
        {"chap-secrets", required_argument, NULL, 'K'},
        {"erl", required_argument, NULL, 'E'},
        {"inject", required_argument, NULL, 'I'},
        {"log-level", required_argument, NULL, 'L'},
        {"initiator-name", required_argument, NULL, 'N'},
        {"portal", required_argument, NULL, 'P'},
        {"verify-midway", required_argument, NULL, 'm'},
        {"verify-paths", required_argument, NULL, 'W'},
        {"cmd-timeout", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct opt_words w;
    opts_defaults(o, &w);
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1)
        if (read_option(c, optarg, o, &w) < 0)
            return -1;
    if (parse_list(w.sizes, "--sizes", one_size, o) < 0 ||
        parse_list(w.rws, "--rw", one_rw, o) < 0 ||
        parse_list(w.digests, "--digest", one_digest, o) < 0 ||
        parse_list(w.conns, "--connections", one_conn, o) < 0)
        return -1;
    if (optind + 1 != argc) {
        usage(stderr);
        return -1;
    }
    if (read_url(argv[optind], o) < 0)
        return -1;
    if (o->nportals && (o->nconns != 1 || o->conns[0] != 1 || o->inject.kill_conn_s > 0 ||
                        o->inject.digest_error > 0 || o->inject.drop_pdu > 0)) {
        fprintf(stderr, "linerate-bench: --portal takes one connection per path, and no "
                        "--inject\n");
        return -1;
    }
    if (o->verify_midway && !o->verify) {
        fprintf(stderr, "linerate-bench: --verify-midway needs --verify\n");
        return -1;
    }
    if (o->verify_paths && (!o->verify || !o->nportals)) {
        fprintf(stderr, "linerate-bench: --verify-paths needs --verify and --portal\n");
        return -1;
    }
    return chap_setup(o, w.chap_user, w.chap_mutual, w.chap_file);
}

/* ---- CPU accounting: netperf's service demand, user+system per KB moved ---- */

static double self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* utime and stime are fields 14 and 15 of /proc/PID/stat, in clock ticks; the command name
 * (field 2) may hold spaces, so count from the last ')'. */
static double pid_cpu_us(pid_t pid)
{
    if (!pid)
        return NAN;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return NAN;
    unsigned long long ut = 0, st = 0;
    /* after ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

/* With a target on this machine and no --target-pid, find the process that listens on the
 * URL's port: its socket inode in /proc/net/tcp{,6}, then which /proc/PID/fd points at it. */
static unsigned long listen_inode(const char *table, uint16_t port)
{
    FILE *f = fopen(table, "r");
    if (!f)
        return 0;
    char line[512];
    unsigned long found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char local[128];
        unsigned st;
        unsigned long inode;
        /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*u %*u %lu", local, &st, &inode) != 3)
            continue;
        char *colon = strrchr(local, ':');
        if (st == 0x0a && colon && strtoul(colon + 1, NULL, 16) == port)
            found = inode;
    }
    fclose(f);
    return found;
}

static pid_t find_local_target(const struct lr_url *u)
{
    if (strncmp(u->host, "127.", 4) && strcmp(u->host, "localhost") && strcmp(u->host, "::1"))
        return 0;
    unsigned long ino = listen_inode("/proc/net/tcp", u->port);
    if (!ino)
        ino = listen_inode("/proc/net/tcp6", u->port);
    if (!ino)
        return 0;
    char want[64];
    snprintf(want, sizeof(want), "socket:[%lu]", ino);
    DIR *proc = opendir("/proc");
    if (!proc)
        return 0;
    pid_t pid = 0;
    struct dirent *de;
    while (!pid && (de = readdir(proc)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || atoi(de->d_name) == getpid())
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/%s/fd", de->d_name);
        DIR *fds = opendir(path);
        if (!fds)
            continue;
        struct dirent *fe;
        while ((fe = readdir(fds)) != NULL) {
            char link[600], target[64];
            snprintf(link, sizeof(link), "%s/%s", path, fe->d_name);
            ssize_t n = readlink(link, target, sizeof(target) - 1);
            if (n > 0) {
                target[n] = '\0';
                if (!strcmp(target, want)) {
                    pid = (pid_t)atoi(de->d_name);
                    break;
                }
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return pid;
}

/* ---- orchestration ---- */

struct run {
    const struct bench_opts *o;
    struct worker *w[256];
    unsigned n;
    struct bench_loop *loops[256];
    unsigned nloops;
    sem_t done;
    /* --inject kill-connection: every session's cut stalls over the run */
    struct bench_stall *stalls;
    unsigned nstalls;
    uint64_t cuts_unmeasured, recovered;
};

static void wait_done(struct run *R, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        while (sem_wait(&R->done) < 0 && errno == EINTR)
            ;
}

static void wait_all(struct run *R)
{
    wait_done(R, R->n);
}

/* Connections logging in at once. A target bounds the connections of one address that have
 * not logged in yet (linerate-target's max-pending-logins-per-address, 64 by default, closes
 * the ones past it at accept): 256 sessions started together from one address were refused. */
#define BENCH_LOGINS_IN_FLIGHT 32u

static unsigned total_cells(const struct bench_opts *o)
{
    return o->nsizes * o->nrws * o->ndigests * o->nconns;
}

static void percentiles(const struct bench_stats *st, unsigned n, double *p50, double *p99)
{
    uint64_t hist[BENCH_HIST_BUCKETS] = {0}, total = 0;
    for (unsigned i = 0; i < n; i++)
        for (unsigned b = 0; b < BENCH_HIST_BUCKETS; b++)
            hist[b] += st[i].hist[b];
    for (unsigned b = 0; b < BENCH_HIST_BUCKETS; b++)
        total += hist[b];
    *p50 = *p99 = NAN;
    if (!total)
        return;
    uint64_t acc = 0, k50 = (total + 1) / 2, k99 = (total * 99 + 99) / 100;
    for (unsigned b = 0; b < BENCH_HIST_BUCKETS; b++) {
        acc += hist[b];
        if (isnan(*p50) && acc >= k50)
            *p50 = bench_hist_value_us(b);
        if (acc >= k99) {
            *p99 = bench_hist_value_us(b);
            break;
        }
    }
}

static void run_cell(struct run *R, struct bench_cell *cell, unsigned idx, unsigned total,
                     double left_s)
{
    const struct bench_opts *o = R->o;
    fprintf(stderr,
            "linerate-bench: [%u/%u] %u %s, digest %s, %u connection%s, qd %u: %.1f s (about "
            "%.0f s left)\n",
            idx, total, cell->size, bench_rw_name(cell->rw), cell->digest ? "on" : "off",
            cell->conns, cell->conns == 1 ? "" : "s", o->qd, o->seconds, left_s);
    double c0 = self_cpu_us(), t0 = pid_cpu_us(o->target_pid);
    for (unsigned i = 0; i < R->n; i++)
        worker_post_cell(R->w[i], cell->size, cell->rw);
    wait_all(R);
    double c1 = self_cpu_us(), t1 = pid_cpu_us(o->target_pid);
    struct bench_stats st[256];
    uint64_t bytes = 0, ops = 0, errors = 0, elapsed = 0;
    uint32_t up = UINT32_MAX;
    for (unsigned i = 0; i < R->n; i++) {
        st[i] = *worker_stats(R->w[i]);
        bytes += st[i].bytes;
        ops += st[i].ops;
        errors += st[i].errors;
        cell->conns_cut += st[i].conns_cut;
        cell->digests_corrupted += st[i].digests_corrupted;
        cell->pdus_dropped += st[i].pdus_dropped;
        elapsed = st[i].elapsed_ns > elapsed ? st[i].elapsed_ns : elapsed;
        uint32_t u = worker_conns_up(R->w[i]);
        up = u < up ? u : up;
    }
    double secs = elapsed / 1e9;
    cell->ran = true;
    cell->errors = errors;
    cell->mb_per_s = secs > 0 ? bytes / secs / 1e6 : 0;
    cell->iops = secs > 0 ? ops / secs : 0;
    percentiles(st, R->n, &cell->p50_us, &cell->p99_us);
    double kb = bytes / 1024.0;
    cell->ini_us_per_kb = kb > 0 ? (c1 - c0) / kb : NAN;
    cell->tgt_us_per_kb = kb > 0 && !isnan(t0) && !isnan(t1) ? (t1 - t0) / kb : NAN;
    if (up < cell->conns)
        fprintf(stderr, "linerate-bench: %u of %u connections left at the end of the cell\n", up,
                cell->conns);
    if (cell->conns_cut)
        fprintf(stderr, "linerate-bench: --inject: %llu connection%s cut in this cell\n",
                (unsigned long long)cell->conns_cut, cell->conns_cut == 1 ? "" : "s");
    if (errors)
        fprintf(stderr, "linerate-bench: %llu commands failed in this cell\n",
                (unsigned long long)errors);
}

/* The CPUs this process may run on: under `taskset -c 1` (the pinned benchmarks) one thread,
 * not one per online CPU all sharing that CPU. */
static long usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

/* Log in one configuration's sessions; returns the connections logged in per session, or 0
 * when a session could not log in. */
static uint32_t start_config(struct run *R, bool digest, uint32_t conns)
{
    const struct bench_opts *o = R->o;
    R->n = 0;
    /* One reactor thread per CPU at most; sessions, and the connections of an MC/S session,
     * are spread over them round robin (connection j of session i on thread i + j). */
    long cpus = usable_cpus();
    unsigned total = o->sessions * conns;
    unsigned want = total < (unsigned)(cpus > 0 ? cpus : 1) ? total : (unsigned)cpus;
    for (R->nloops = 0; R->nloops < want; R->nloops++)
        if (!(R->loops[R->nloops] = bench_loop_start((int)R->nloops)))
            break;
    if (!R->nloops) {
        fprintf(stderr, "linerate-bench: cannot start a reactor thread\n");
        return 0;
    }
    unsigned logged = 0; /* logins completed (or failed): sem posts taken */
    unsigned window = conns < BENCH_LOGINS_IN_FLIGHT ? BENCH_LOGINS_IN_FLIGHT / conns : 1;
    for (unsigned i = 0; i < o->sessions; i++) {
        if (R->n - logged >= window) {
            wait_done(R, 1);
            logged++;
        }
        struct reactor *conn_r[LR_MAX_CONNECTIONS];
        for (unsigned j = 0; j < conns && j < LR_MAX_CONNECTIONS; j++)
            conn_r[j] = bench_loop_reactor(R->loops[(i + j) % R->nloops]);
        struct worker *w = worker_start((int)i, o, digest, conns, &R->done, conn_r);
        if (!w) {
            fprintf(stderr, "linerate-bench: cannot set up session %u\n", i);
            break;
        }
        R->w[R->n++] = w;
        worker_post_login(w);
    }
    wait_done(R, R->n - logged);
    uint32_t up = UINT32_MAX;
    for (unsigned i = 0; i < R->n; i++) {
        const char *e = worker_error(R->w[i]);
        if (e) {
            fprintf(stderr, "linerate-bench: session %u: %s\n", i, e);
            return 0;
        }
        uint32_t u = worker_conns_up(R->w[i]);
        up = u < up ? u : up;
    }
    if (R->n == 0)
        return 0;
    uint32_t granted = worker_conns_granted(R->w[0]);
    if (digest && !worker_digests(R->w[0]))
        fprintf(stderr, "linerate-bench: the target refused CRC32C digests; these cells run "
                        "without digests (reported as digest off)\n");
    if (conns > 1 && up < conns)
        fprintf(stderr,
                "linerate-bench: asked for %u connections per session, the target granted "
                "MaxConnections=%u; falling back to %u connection%s%s\n",
                conns, granted, up, up == 1 ? "" : "s", up == 1 ? " (no MC/S)" : "");
    fprintf(stderr,
            "linerate-bench: %u session%s logged in, %u connection%s each, block size %u, "
            "on %u initiator thread%s\n",
            R->n, R->n == 1 ? "" : "s", up, up == 1 ? "" : "s", worker_block_size(R->w[0]),
            R->nloops, R->nloops == 1 ? "" : "s");
    return up;
}

static void stop_config(struct run *R)
{
    for (unsigned i = 0; i < R->n; i++)
        worker_post_logout(R->w[i]);
    wait_all(R);
    for (unsigned i = 0; i < R->nloops; i++)
        bench_loop_stop(R->loops[i]);
    R->nloops = 0;
    for (unsigned i = 0; i < R->n; i++) {
        unsigned n;
        uint64_t unmeasured, recovered;
        const struct bench_stall *st = worker_stalls(R->w[i], &n, &unmeasured, &recovered);
        struct bench_stall *all = n ? realloc(R->stalls, (R->nstalls + n) * sizeof(*all)) : NULL;
        if (all) {
            memcpy(all + R->nstalls, st, n * sizeof(*st));
            R->stalls = all;
            R->nstalls += n;
        }
        R->cuts_unmeasured += unmeasured;
        R->recovered += recovered;
    }
    for (unsigned i = 0; i < R->n; i++)
        worker_mpath_report(R->w[i], stderr);
    for (unsigned i = 0; i < R->n; i++)
        worker_free(R->w[i]);
    R->n = 0;
}

static bool sessions_down(const struct run *R)
{
    for (unsigned i = 0; i < R->n; i++)
        if (worker_conns_up(R->w[i]) == 0)
            return true;
    return false;
}

static int run_verify(struct run *R)
{
    for (unsigned i = 0; i < R->n; i++)
        worker_post_verify(R->w[i]);
    wait_all(R);
    int bad = 0;
    uint64_t blocks = 0, cross = 0, cut = 0;
    for (unsigned i = 0; i < R->n; i++) {
        cross += worker_verify_cross(R->w[i]);
        cut += worker_stats(R->w[i])->conns_cut;
        const char *e = worker_error(R->w[i]);
        const char *f = worker_verify_failure(R->w[i]);
        blocks += worker_verify_blocks(R->w[i]);
        if (f || e) {
            fprintf(stderr, "linerate-bench: verify FAILED in session %u: %s\n", i, f ? f : e);
            bad = 1;
        }
    }
    if (R->o->inject.kill_conn_s > 0)
        fprintf(stderr, "linerate-bench: --inject: %llu connection%s cut during --verify\n",
                (unsigned long long)cut, cut == 1 ? "" : "s");
    if (!bad)
        fprintf(stderr,
                "linerate-bench: verify passed: %llu blocks written and read back "
                "(%llu chunks read over another %s than they were written on)\n",
                (unsigned long long)blocks, (unsigned long long)cross,
                R->o->nportals ? "path" : "connection");
    return bad;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    if (parse_opts(argc, argv, &o) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    log_set_level((enum log_level)o.log_level);
    if (!o.target_pid) {
        o.target_pid = find_local_target(&o.url);
        if (o.target_pid)
            fprintf(stderr,
                    "linerate-bench: target CPU from pid %d (listens on port %u; "
                    "--target-pid overrides)\n",
                    (int)o.target_pid, o.url.port);
    }
    unsigned total = total_cells(&o);
    struct bench_cell *cells = calloc(total, sizeof(*cells));
    struct run R = {.o = &o};
    sem_init(&R.done, 0, 0);
    unsigned idx = 0;
    int rc = 0;
    for (unsigned d = 0; d < o.ndigests; d++) {
        for (unsigned c = 0; c < o.nconns; c++) {
            uint32_t up = start_config(&R, o.digests[d], o.conns[c]);
            unsigned base = idx;
            for (unsigned r = 0; r < o.nrws; r++)
                for (unsigned s = 0; s < o.nsizes; s++) {
                    struct bench_cell *cell = &cells[idx++];
                    cell->size = o.sizes[s];
                    cell->rw = o.rws[r];
                    cell->digest_asked = o.digests[d];
                    cell->digest = up && worker_digests(R.w[0]);
                    cell->conns_asked = o.conns[c];
                    cell->conns = up;
                    cell->qd = o.qd;
                    cell->mb_per_s = cell->iops = cell->p50_us = cell->p99_us = NAN;
                    cell->ini_us_per_kb = cell->tgt_us_per_kb = NAN;
                }
            if (!up) {
                rc = 1;
                stop_config(&R);
                continue;
            }
            if (o.verify && run_verify(&R)) {
                stop_config(&R);
                free(cells);
                return 1;
            }
            uint32_t bs = worker_block_size(R.w[0]);
            for (unsigned k = base; k < idx; k++) {
                if (cells[k].size % bs) {
                    fprintf(stderr,
                            "linerate-bench: skipping %u-byte cells: the LUN's block "
                            "size is %u\n",
                            cells[k].size, bs);
                    continue;
                }
                double left = (double)(total - k) * o.seconds;
                run_cell(&R, &cells[k], k + 1, total, left);
                if (cells[k].errors)
                    rc = 1;
                if (k + 1 < idx && sessions_down(&R)) {
                    /* A session lost every connection: log in again for the next cells. */
                    fprintf(stderr, "linerate-bench: a session has no connection left; logging "
                                    "in again\n");
                    stop_config(&R);
                    up = start_config(&R, o.digests[d], o.conns[c]);
                    if (!up)
                        break;
                    for (unsigned j = k + 1; j < idx; j++)
                        cells[j].conns = up;
                }
            }
            stop_config(&R);
        }
    }
    bench_report(&o, cells, total);
    if (o.inject.kill_conn_s > 0 && o.erl >= 2) {
        fputs("linerate-bench: ", stderr);
        bench_stall_summary(stderr, R.stalls, R.nstalls, R.cuts_unmeasured, R.recovered);
    }
    if (o.svg && bench_svg(o.svg, &o, cells, total) < 0) {
        fprintf(stderr, "linerate-bench: cannot write %s: %s\n", o.svg, strerror(errno));
        rc = 1;
    }
    sem_destroy(&R.done);
    free(R.stalls);
    free(cells);
    return rc;
}
