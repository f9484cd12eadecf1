/* linerate-ctl: administers a running linerate-target through its control socket. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/lio.h"

#ifndef LINERATE_VERSION
#define LINERATE_VERSION "unknown"
#endif

#define DEFAULT_SOCKET "/run/linerate/ctl.sock"

static const char usage_text[] =
    "Usage: linerate-ctl [--socket PATH] [--json] [--wait SECONDS] COMMAND ...\n"
    "\n"
    "Administers a running linerate-target through its control socket (root, or the\n"
    "daemon's own user, only). Tables by default; --json prints the daemon's answer.\n"
    "\n"
    "Commands:\n"
    "  show targets                  targets, portals, LUN and session counts, access\n"
    "  show luns [TARGET]            LUNs: size, block size, ro/rw, commands in flight\n"
    "  show sessions                 initiator, ISID/TSIH, age, commands in flight,\n"
    "                                negotiated parameters, connections (addresses,\n"
    "                                reactor thread, digests)\n"
    "  show connections              one line per connection\n"
    "  show portals                  listening addresses and their targets\n"
    "  show hosts [TARGET]           initiator entries: host or group, initiators, maps,\n"
    "                                CHAP users\n"
    "  add lun TARGET SPEC [--lun N] a new LUN (the lowest free number unless --lun);\n"
    "                                SPEC as linerate-target --lun, e.g. ram:64M or\n"
    "                                file:/srv/b.img,size=10G; initiators get REPORTED\n"
    "                                LUNS DATA HAS CHANGED\n"
    "  remove lun [TARGET] N [--timeout S] [--force]  new commands to it fail at once;\n"
    "                                commands in flight complete first (up to S seconds,\n"
    "                                default 30; after that its store closes when they\n"
    "                                end); a target's last LUN only with --force (a target\n"
    "                                without LUNs cannot be saved)\n"
    "  set lun [TARGET] N ro|rw      write-protect it, or not (MODE PARAMETERS CHANGED)\n"
    "  resize lun [TARGET] N SIZE    grow a ram, null, file or rbd LUN to SIZE (k, M, G, T\n"
    "                                suffixes); initiators get CAPACITY DATA HAS CHANGED\n"
    "                                (the LUN verbs may leave TARGET out when the daemon\n"
    "                                serves one target)\n"
    "  set alua TARGET STATE [--lun N] [--group ID]  the ALUA state (active/optimized,\n"
    "                                active/non-optimized, standby) of this gateway's target\n"
    "                                port group, or of peer group ID, for the whole target\n"
    "                                or LUN N; every initiator gets ASYMMETRIC ACCESS STATE\n"
    "                                CHANGED and REPORT TARGET PORT GROUPS the new state\n"
    "  logout session TSIH [--timeout S]  ask the initiator to log out (Async Message);\n"
    "                                after S seconds (default 10) its connections close\n"
    "  drop connection TSIH CID      close one connection at once\n"
    "  set log-level LEVEL           error, warn, info or debug\n"
    "  add target IQN --portal ADDR[:PORT]... [--lun SPEC]... [--allow IQN]...\n"
    "             [--alias TEXT]     serve a new target (LUNs numbered from 0; default\n"
    "                                session keys, no CHAP: use the config file and\n"
    "                                reload for those); a new portal address is listened on\n"
    "  remove target IQN [--force] [--timeout S]  stop serving it: refused while it has\n"
    "                                sessions, unless --force asks them to log out (closed\n"
    "                                after S seconds, default 10); then its LUNs go\n"
    "  add portal TARGET ADDR[:PORT] serve the target there too (a new address is\n"
    "                                listened on)\n"
    "  remove portal TARGET ADDR[:PORT]  new logins through it no longer reach the target;\n"
    "                                sessions on it carry on; the listener closes once no\n"
    "                                target has it (not the target's last portal)\n"
    "  add allow TARGET INITIATOR [--force] [--timeout S]  let the initiator log in (the\n"
    "                                first entry closes an open target to the others; their\n"
    "                                sessions carry on unless --force logs them out)\n"
    "  remove allow TARGET INITIATOR [--force] [--timeout S]  refuse its new logins\n"
    "                                (0202h); its sessions carry on unless --force logs them\n"
    "                                out (closed after S seconds, default 10); not the last\n"
    "                                entry (an empty list lets everyone in)\n"
    "  add host TARGET IQN, add group TARGET NAME IQN...  an initiator entry without a\n"
    "                                map (a target with entries admits only theirs)\n"
    "  add|remove initiator TARGET GROUP IQN  a group's members\n"
    "  map lun TARGET ENTRY HOST-LUN LUN [--ro]  the entry's hosts see LUN as HOST-LUN\n"
    "                                (ENTRY: a host's IQN or a group's name); they alone\n"
    "                                get REPORTED LUNS DATA HAS CHANGED\n"
    "  unmap lun TARGET ENTRY HOST-LUN  take a number out of the entry's map\n"
    "  set chap TARGET ENTRY USER|none [MUTUAL-USER]  the entry's CHAP users (secrets\n"
    "                                from chap-secrets), for the logins that follow\n"
    "  remove host TARGET ENTRY [--force] [--timeout S]  as remove allow: its sessions\n"
    "                                carry on unless --force; not the last entry\n"
    "  reload [--force]              re-read the daemon's --config file and apply the\n"
    "                                difference (as SIGHUP does): targets added and removed\n"
    "                                (one with sessions only with --force), LUNs added,\n"
    "                                removed, ro/rw, portals and allow entries, the log\n"
    "                                level, CHAP secrets (new logins); other changes are\n"
    "                                listed as needing a restart. A file with an error\n"
    "                                changes nothing and the answer says FILE:LINE; so does\n"
    "                                one that would drop what linerate-ctl added and the\n"
    "                                file lacks, unless --force (save first keeps it)\n"
    "  save [FILE]                   write the running configuration (with every change\n"
    "                                made at run time) to FILE, default the daemon's\n"
    "                                --config file: lines of unchanged entries are kept\n"
    "                                with their comments; written atomically\n"
    "  stats [--watch S [--count N]] [--interval S] [--json] [--raw]\n"
    "                                per LUN and per session: IOPS, read and write MB/s,\n"
    "                                p50/p99 latency, commands in flight (QD) and errors\n"
    "                                over an interval (default 1 s; --watch: a table every\n"
    "                                S seconds until interrupted, or N of them); --raw:\n"
    "                                the daemon's raw counters (method stats)\n"
    "  import lio FILE [-o OUT] [--secrets SECRETS] | --check\n"
    "                                LIO's saveconfig.json as a linerate.conf (printed, or\n"
    "                                written to OUT) and its CHAP secrets (mode 600); each\n"
    "                                LUN keeps LIO's identity; what does not carry over is\n"
    "                                listed (exit 1); needs no daemon (docs/migrate.md).\n"
    "                                --check: list what a host would see differently\n"
    "                                in the running linerate\n"
    "  import ceph-iscsi [POOL/OBJECT | FILE] [--gateway HOST] [-o OUT] [--secrets SECRETS]\n"
    "                                ceph-iscsi's gateway.conf (versions 3, 4; through\n"
    "                                librados, default rbd/gateway.conf, or a file) as one\n"
    "                                linerate.conf per gateway (HA gateways, LIO's identity\n"
    "                                on every LUN) and the CHAP secrets (mode 600); what\n"
    "                                does not carry over is listed (exit 1)\n"
    "  version                       the daemon's version, pid and reactor threads\n"
    "  call METHOD [PARAMS-JSON]     any method of docs/ctl-protocol.md\n"
    "  (ls and list are taken for show; rm, del and delete for remove)\n"
    "\n"
    "Options:\n"
    "  --socket PATH   the daemon's control socket (default $LINERATE_CTL_SOCKET, else\n"
    "                  " DEFAULT_SOCKET ")\n"
    "  --json          print the result as JSON (one object or array)\n"
    "                  (these three options may also follow the command)\n"
    "  --wait SECONDS  how long to wait for the answer (default 120)\n"
    "  -h, --help      this help;  -V, --version  linerate-ctl's version\n"
    "\n"
    "Examples:\n"
    "  linerate-ctl show sessions\n"
    "  linerate-ctl stats --watch 2\n"
    "  linerate-ctl add lun iqn.2026-11.org.linerate:default ram:64M\n"
    "  linerate-ctl resize lun iqn.2026-11.org.linerate:default 1 128M\n"
    "  linerate-ctl --json show luns | jq '.[].bytes'\n"
    "\n"
    "Exit codes: 0 done, 1 the daemon refused or failed (its message on stderr), 2 bad\n"
    "command line, 3 no daemon or no valid answer.\n";

/* The habits of other tools' verbs, taken as ours. */
static const char *verb_alias(const char *v)
{
    static const char *const alias[][2] = {{"ls", "show"},
                                           {"list", "show"},
                                           {"rm", "remove"},
                                           {"delete", "remove"},
                                           {"del", "remove"}};
    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
        if (strcmp(v, alias[i][0]) == 0)
            return alias[i][1];
    return v;
}

/* --json, --socket PATH and --wait S after the command words too ("show luns --json", as
 * "stats --json" takes it): taken out of the command's arguments. 0, or -1 (message printed)
 * for a bad --wait or one without its value. */
static int late_opts(int *argc, char **argv, const char **path, bool *json, unsigned *wait_s)
{
    int out = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            *json = true;
            continue;
        }
        bool sock = strcmp(a, "--socket") == 0, wait = strcmp(a, "--wait") == 0;
        if (sock || wait) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "linerate-ctl: %s needs a value\n", a);
                return -1;
            }
            const char *v = argv[++i];
            if (sock) {
                *path = v;
                continue;
            }
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            if (!*v || *end || n < 1 || n > 86400) {
                fprintf(stderr, "linerate-ctl: --wait: expected 1..86400 seconds\n");
                return -1;
            }
            *wait_s = (unsigned)n;
            continue;
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"wait", required_argument, NULL, 'w'},   {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
    };
    const char *path = getenv("LINERATE_CTL_SOCKET");
    if (!path || !*path)
        path = DEFAULT_SOCKET;
    bool json = false;
    unsigned wait_s = 120;
    int c;
    /* '+': options end at the first command word, so "--lun N" belongs to the command. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            path = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'w': {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (!*optarg || *end || v < 1 || v > 86400) {
                fprintf(stderr, "linerate-ctl: --wait: expected 1..86400 seconds\n");
                return CTL_EXIT_USAGE;
            }
            wait_s = (unsigned)v;
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            return CTL_EXIT_OK;
        case 'V':
            printf("linerate-ctl %s\n", LINERATE_VERSION);
            return CTL_EXIT_OK;
        default:
            fprintf(stderr, "linerate-ctl: bad option (see --help)\n");
            return CTL_EXIT_USAGE;
        }
    }
    if (optind < argc && strcmp(argv[optind], "import") == 0)
        return ctl_import_main(path, wait_s, argc - optind, argv + optind);
    if (optind < argc && strcmp(argv[optind], "stats") == 0)
        return ctl_stats_main(path, json, wait_s, argc - optind, argv + optind);
    int nargs = argc - optind;
    char **args = argv + optind;
    static char *ls_all[] = {"show", "targets", NULL};
    if (nargs == 1 && (strcmp(args[0], "ls") == 0 || strcmp(args[0], "list") == 0))
        args = ls_all, nargs = 2; /* what `ls` alone shows elsewhere: everything at the top */
    if (nargs > 0)
        args[0] = (char *)verb_alias(args[0]);
    /* (call's PARAMS-JSON is one word and never an option) */
    if (late_opts(&nargs, args, &path, &json, &wait_s) < 0)
        return CTL_EXIT_USAGE;
    struct ctl_req req = {0};
    char err[512];
    if (ctl_req_from_argv(nargs, args, &req, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl: %s\n", err);
        json_decref(req.params);
        return CTL_EXIT_USAGE;
    }
    json_t *resp;
    if (ctl_call(path, req.method, req.params, wait_s, &resp, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl: %s\n", err);
        json_decref(req.params);
        return CTL_EXIT_NO_DAEMON;
    }
    json_decref(req.params);
    int rc = CTL_EXIT_OK;
    json_t *error = json_object_get(resp, "error");
    json_t *result = json_object_get(resp, "result");
    if (error) {
        const char *msg = json_string_value(json_object_get(error, "message"));
        if (json) {
            char *s = json_dumps(error, JSON_INDENT(2));
            printf("%s\n", s ? s : "");
            free(s);
        }
        fprintf(stderr, "linerate-ctl: %s\n", msg ? msg : "error");
        rc = CTL_EXIT_FAILED;
    } else if (!result) {
        fprintf(stderr, "linerate-ctl: the answer has neither result nor error\n");
        rc = CTL_EXIT_NO_DAEMON;
    } else if (json) {
        char *s = json_dumps(result, JSON_INDENT(2) | JSON_ENCODE_ANY);
        printf("%s\n", s ? s : "");
        free(s);
    } else {
        ctl_print_result(stdout, req.kind, result);
    }
    json_decref(resp);
    return rc;
}
