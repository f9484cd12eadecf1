/* linerate-ctl's verbs (as linerate-ctl(8) spells them) and the JSON-RPC request each becomes; the
 * methods and their params are those of docs/ctl-protocol.md. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/ctl.h"

static int usage_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int usage_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A non-negative integer argument. */
static int num_arg(const char *s, const char *what, unsigned long long max, json_int_t *out,
                   char *err, size_t errlen)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (!*s || *end || s[0] == '-' || v > max)
        return usage_err(err, errlen, "bad %s '%s': expected a number from 0 to %llu", what, s,
                         max);
    *out = (json_int_t)v;
    return 0;
}

/* The options a verb may take after its positional arguments. */
enum verb_opt {
    OPT_TIMEOUT = 1 << 0, /* --timeout S */
    OPT_LUN = 1 << 1,     /* --lun N */
    OPT_FORCE = 1 << 2,   /* --force */
    OPT_GROUP = 1 << 3,   /* --group ID */
};

/* The one parser of options after the positional arguments of a verb: each verb names the
 * options it takes in `allowed`, anything else is an unexpected argument. */
static int verb_opts(int argc, char **argv, int first, json_t *params, unsigned allowed, char *err,
                     size_t errlen)
{
    for (int i = first; i < argc; i++) {
        json_int_t v = 0;
        if ((allowed & OPT_TIMEOUT) && strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (num_arg(argv[++i], "timeout", 3600, &v, err, errlen) < 0)
                return -1;
            json_object_set_new(params, "timeout", json_integer(v));
        } else if ((allowed & OPT_LUN) && strcmp(argv[i], "--lun") == 0 && i + 1 < argc) {
            if (num_arg(argv[++i], "LUN", 16383, &v, err, errlen) < 0)
                return -1;
            json_object_set_new(params, "lun", json_integer(v));
        } else if ((allowed & OPT_GROUP) && strcmp(argv[i], "--group") == 0 && i + 1 < argc) {
            if (num_arg(argv[++i], "group", 65535, &v, err, errlen) < 0)
                return -1;
            json_object_set_new(params, "group", json_integer(v));
        } else if ((allowed & OPT_FORCE) && strcmp(argv[i], "--force") == 0) {
            json_object_set_new(params, "force", json_true());
        } else {
            return usage_err(err, errlen, "unexpected argument '%s'", argv[i]);
        }
    }
    return 0;
}

static bool is(const char *a, const char *b)
{
    return a && strcmp(a, b) == 0;
}

/* One verb of linerate-ctl: its words, the request it becomes and how its arguments are read.
 * The driver matches `verb` and `object` (NULL: any second word, the verb reads it itself),
 * answers `usage` when fewer than `min_argc` words are given, sets `method` and `kind`, then
 * calls `build` for the params. */
struct verb {
    const char *verb;
    const char *object;
    int min_argc;
    const char *method;
    const char *kind;
    unsigned opts; /* the verb_opt options it takes after its positional arguments */
    const char *usage;
    int (*build)(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                 size_t errlen);
};

static int usage_of(const struct verb *v, char *err, size_t errlen)
{
    return usage_err(err, errlen, "%s", v->usage);
}

/* VERB [options]: no positional argument. */
static int build_plain(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                       size_t errlen)
{
    return verb_opts(argc, argv, 1, req->params, v->opts, err, errlen);
}

/* reload takes nothing else, so its usage says more than "unexpected argument". */
static int build_reload(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                        size_t errlen)
{
    if (verb_opts(argc, argv, 1, req->params, v->opts, err, errlen) < 0)
        return usage_of(v, err, errlen);
    return 0;
}

/* show targets|luns [TARGET]|sessions|connections|portals|hosts [TARGET] */
static int build_show(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    static const char *const things[] = {"targets",     "luns",    "sessions",
                                         "connections", "portals", "hosts"};
    static const char *const meth[] = {"show_targets",     "show_luns",    "show_sessions",
                                       "show_connections", "show_portals", "show_hosts"};
    const char *what = argc > 1 ? argv[1] : NULL;
    for (int i = 0; i < 6; i++) {
        if (!is(what, things[i]))
            continue;
        req->method = meth[i];
        req->kind = things[i];
        bool named = (i == 1 || i == 5) && argc > 2; /* show luns|hosts TARGET */
        if (named)
            json_object_set_new(req->params, "target", json_string(argv[2]));
        return verb_opts(argc, argv, named ? 3 : 2, req->params, 0, err, errlen);
    }
    return usage_of(v, err, errlen);
}

/* VERB OBJECT TARGET [options] */
static int build_target(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                        size_t errlen)
{
    json_object_set_new(req->params, "target", json_string(argv[2]));
    return verb_opts(argc, argv, 3, req->params, v->opts, err, errlen);
}

/* add lun TARGET SPEC [--lun N] */
static int build_add_lun(const struct verb *v, int argc, char **argv, struct ctl_req *req,
                         char *err, size_t errlen)
{
    json_object_set_new(req->params, "target", json_string(argv[2]));
    json_object_set_new(req->params, "spec", json_string(argv[3]));
    return verb_opts(argc, argv, 4, req->params, v->opts, err, errlen);
}

/* remove lun [TARGET] N, set lun [TARGET] N ro|rw, resize lun [TARGET] N SIZE */
static int build_lun_number(const struct verb *v, int argc, char **argv, struct ctl_req *req,
                            char *err, size_t errlen)
{
    json_t *p = req->params;
    bool set = is(v->verb, "set"), resize = is(v->verb, "resize");
    /* The spellings name no target (set lun N ro|rw, resize lun N SIZE): the
     * daemon then takes its only one. Naming it stays allowed and is needed with several:
     * the target form has one more word before the options. */
    int words = set || resize ? 2 : 1; /* after "VERB lun": N [ro|rw|SIZE] */
    int pos = 0;
    while (2 + pos < argc && argv[2 + pos][0] != '-')
        pos++;
    bool named = pos > words;
    int at = named ? 3 : 2; /* index of N */
    int need = at + words;
    if (argc < need || pos < words)
        return usage_of(v, err, errlen);
    if (named)
        json_object_set_new(p, "target", json_string(argv[2]));
    json_int_t n = 0;
    if (num_arg(argv[at], "LUN", 16383, &n, err, errlen) < 0)
        return -1;
    json_object_set_new(p, "lun", json_integer(n));
    if (set) {
        const char *mode = argv[at + 1];
        if (strchr(mode, '=') || is(mode, "none")) /* caps: the daemon parses them */
            json_object_set_new(p, "limits", json_string(mode));
        else if (!is(mode, "ro") && !is(mode, "rw"))
            return usage_err(err, errlen,
                             "set lun [TARGET] N ro|rw|LIMITS: '%s' is neither ro, rw nor "
                             "LIMITS (e.g. iops=500,mbps=100,burst=100ms, or none)",
                             mode);
        else
            json_object_set_new(p, "read_only", json_boolean(is(mode, "ro")));
    } else if (resize) {
        json_object_set_new(p, "size", json_string(argv[at + 1]));
    }
    return verb_opts(argc, argv, need, p, v->opts, err, errlen);
}

/* set alua TARGET STATE [--lun N] [--group ID]: the daemon checks the state. */
static int build_alua(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    json_object_set_new(req->params, "target", json_string(argv[2]));
    json_object_set_new(req->params, "state", json_string(argv[3]));
    return verb_opts(argc, argv, 4, req->params, v->opts, err, errlen);
}

/* logout session TSIH [--timeout S] */
static int build_logout(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                        size_t errlen)
{
    json_int_t tsih = 0;
    if (num_arg(argv[2], "TSIH", 65535, &tsih, err, errlen) < 0)
        return -1;
    json_object_set_new(req->params, "tsih", json_integer(tsih));
    return verb_opts(argc, argv, 3, req->params, v->opts, err, errlen);
}

/* drop connection TSIH CID */
static int build_drop(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    json_int_t tsih = 0, cid = 0;
    if (num_arg(argv[2], "TSIH", 65535, &tsih, err, errlen) < 0)
        return -1;
    json_object_set_new(req->params, "tsih", json_integer(tsih));
    if (num_arg(argv[3], "CID", 65535, &cid, err, errlen) < 0)
        return -1;
    json_object_set_new(req->params, "cid", json_integer(cid));
    return verb_opts(argc, argv, 4, req->params, v->opts, err, errlen);
}

/* set log-level LEVEL: the daemon checks the level. */
static int build_log_level(const struct verb *v, int argc, char **argv, struct ctl_req *req,
                           char *err, size_t errlen)
{
    json_object_set_new(req->params, "level", json_string(argv[2]));
    return verb_opts(argc, argv, 3, req->params, v->opts, err, errlen);
}

/* add|remove portal TARGET ADDR[:PORT], add|remove allow TARGET INITIATOR-IQN [options] */
static int build_portal_allow(const struct verb *v, int argc, char **argv, struct ctl_req *req,
                              char *err, size_t errlen)
{
    const char *key = is(v->object, "portal") ? "portal" : "initiator";
    json_object_set_new(req->params, "target", json_string(argv[2]));
    json_object_set_new(req->params, key, json_string(argv[3]));
    return verb_opts(argc, argv, 4, req->params, v->opts, err, errlen);
}

/* Initiator entries of a running target, ENTRY a host's IQN or a group's name:
 * add host TARGET IQN, add group TARGET NAME IQN..., remove host TARGET ENTRY [options],
 * add|remove initiator TARGET GROUP IQN [options], map lun TARGET ENTRY HOST-LUN LUN [--ro],
 * unmap lun TARGET ENTRY HOST-LUN [options], set chap TARGET ENTRY USER|none [MUTUAL-USER] */
static int build_host(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    json_t *p = req->params;
    json_object_set_new(p, "target", json_string(argv[2]));
    json_object_set_new(p, "entry", json_string(argv[3]));
    int at = 4;
    json_int_t n = 0;
    if (is(v->method, "add_group")) {
        json_t *inis = json_array();
        json_object_set_new(p, "initiators", inis);
        for (; at < argc && argv[at][0] != '-'; at++)
            json_array_append_new(inis, json_string(argv[at]));
    } else if (is(v->method, "add_initiator") || is(v->method, "remove_initiator")) {
        json_object_set_new(p, "initiator", json_string(argv[at++]));
    } else if (is(v->method, "map_lun") || is(v->method, "unmap_lun")) {
        if (num_arg(argv[at++], "host LUN", 16383, &n, err, errlen) < 0)
            return -1;
        json_object_set_new(p, "host_lun", json_integer(n));
        if (is(v->method, "map_lun")) {
            if (num_arg(argv[at++], "LUN", 16383, &n, err, errlen) < 0)
                return -1;
            json_object_set_new(p, "lun", json_integer(n));
            if (at < argc && (is(argv[at], "--ro") || is(argv[at], "ro"))) {
                json_object_set_new(p, "read_only", json_true());
                at++;
            }
        }
    } else if (is(v->method, "set_host_chap")) {
        json_object_set_new(p, "user", json_string(is(argv[at], "none") ? "" : argv[at]));
        at++;
        if (at < argc && argv[at][0] != '-')
            json_object_set_new(p, "mutual_user", json_string(argv[at++]));
    }
    return verb_opts(argc, argv, at, p, v->opts, err, errlen);
}

/* save [FILE] */
static int build_save(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    if (argc > 2)
        return usage_of(v, err, errlen);
    if (argc < 2)
        return 0;
    /* The daemon has its own working directory: a relative FILE is the caller's. */
    char *abs = NULL;
    if (argv[1][0] == '/') {
        abs = strdup(argv[1]);
    } else {
        char *cwd = getcwd(NULL, 0);
        if (cwd && asprintf(&abs, "%s/%s", cwd, argv[1]) < 0)
            abs = NULL;
        free(cwd);
    }
    if (!abs)
        return usage_err(err, errlen, "save: cannot make '%s' an absolute path", argv[1]);
    json_object_set_new(req->params, "file", json_string(abs));
    free(abs);
    return 0;
}

/* add target IQN --portal ADDR[:PORT]... [--lun SPEC]... [--allow IQN]... [--alias TEXT] */
static int build_add_target(const struct verb *v, int argc, char **argv, struct ctl_req *req,
                            char *err, size_t errlen)
{
    (void)v;
    json_t *p = req->params;
    json_object_set_new(p, "target", json_string(argv[2]));
    json_t *portals = json_array(), *luns = json_array(), *allow = json_array();
    json_object_set_new(p, "portals", portals);
    json_object_set_new(p, "luns", luns);
    json_object_set_new(p, "allow", allow);
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc)
            return usage_err(err, errlen, "'%s' needs a value", argv[i]);
        if (is(argv[i], "--portal"))
            json_array_append_new(portals, json_string(argv[++i]));
        else if (is(argv[i], "--lun"))
            json_array_append_new(luns, json_string(argv[++i]));
        else if (is(argv[i], "--allow"))
            json_array_append_new(allow, json_string(argv[++i]));
        else if (is(argv[i], "--alias"))
            json_object_set_new(p, "alias", json_string(argv[++i]));
        else
            return usage_err(err, errlen, "unexpected argument '%s'", argv[i]);
    }
    return 0;
}

/* call METHOD [PARAMS-JSON-OBJECT]: any method, for scripts and new methods. */
static int build_call(const struct verb *v, int argc, char **argv, struct ctl_req *req, char *err,
                      size_t errlen)
{
    if (argc < 2 || argc > 3)
        return usage_of(v, err, errlen);
    req->method = argv[1];
    if (argc == 3) {
        json_error_t je;
        json_t *o = json_loads(argv[2], 0, &je);
        if (!json_is_object(o)) {
            json_decref(o);
            return usage_err(err, errlen, "call: PARAMS must be a JSON object");
        }
        json_decref(req->params);
        req->params = o;
    }
    return 0;
}

/* Adding a verb is a row here (and its builder, when none of these reads its words). */
static const struct verb verbs[] = {
    {"version", NULL, 0, "version", "version", 0, NULL, build_plain},
    {"show", NULL, 0, NULL, NULL, 0,
     "show what? targets, luns [TARGET], sessions, connections, portals or hosts [TARGET]",
     build_show},
    {"add", "lun", 4, "add_lun", "lun", OPT_LUN, "usage: add lun TARGET SPEC [--lun N]",
     build_add_lun},
    {"remove", "lun", 0, "remove_lun", "removed", OPT_TIMEOUT | OPT_FORCE,
     "usage: remove lun [TARGET] N [--timeout S] [--force]", build_lun_number},
    {"set", "lun", 0, "set_lun", "lun", 0, "usage: set lun [TARGET] N ro|rw|LIMITS",
     build_lun_number},
    {"resize", "lun", 0, "resize_lun", "lun", 0, "usage: resize lun [TARGET] N SIZE",
     build_lun_number},
    {"set", "alua", 4, "set_alua", "alua", OPT_LUN | OPT_GROUP,
     "usage: set alua TARGET active/optimized|active/non-optimized|standby [--lun N] "
     "[--group ID]",
     build_alua},
    {"logout", "session", 3, "logout_session", "logout", OPT_TIMEOUT,
     "usage: logout session TSIH [--timeout S]", build_logout},
    {"drop", "connection", 4, "drop_connection", "dropped", 0, "usage: drop connection TSIH CID",
     build_drop},
    {"set", "log-level", 3, "set_log_level", "log-level", 0,
     "usage: set log-level error|warn|info|debug", build_log_level},
    {"reload", NULL, 0, "reload", "reload", OPT_FORCE, "usage: reload [--force]", build_reload},
    {"add", "portal", 4, "add_portal", "add_portal", 0, "usage: add portal TARGET ADDR[:PORT]",
     build_portal_allow},
    {"remove", "portal", 4, "remove_portal", "remove_portal", 0,
     "usage: remove portal TARGET ADDR[:PORT]", build_portal_allow},
    {"add", "allow", 4, "add_allow", "add_allow", OPT_FORCE | OPT_TIMEOUT,
     "usage: add allow TARGET INITIATOR-IQN [--force] [--timeout S]", build_portal_allow},
    {"remove", "allow", 4, "remove_allow", "remove_allow", OPT_FORCE | OPT_TIMEOUT,
     "usage: remove allow TARGET INITIATOR-IQN [--force] [--timeout S]", build_portal_allow},
    {"add", "host", 4, "add_host", "host", 0, "usage: add host TARGET INITIATOR-IQN", build_host},
    {"add", "group", 5, "add_group", "host", 0, "usage: add group TARGET NAME INITIATOR-IQN...",
     build_host},
    {"remove", "host", 4, "remove_host", "host", OPT_FORCE | OPT_TIMEOUT,
     "usage: remove host TARGET IQN|GROUP [--force] [--timeout S]", build_host},
    {"add", "initiator", 5, "add_initiator", "host", 0,
     "usage: add initiator TARGET GROUP INITIATOR-IQN", build_host},
    {"remove", "initiator", 5, "remove_initiator", "host", OPT_FORCE | OPT_TIMEOUT,
     "usage: remove initiator TARGET GROUP INITIATOR-IQN [--force] [--timeout S]", build_host},
    {"map", "lun", 6, "map_lun", "host", 0, "usage: map lun TARGET IQN|GROUP HOST-LUN LUN [--ro]",
     build_host},
    {"unmap", "lun", 5, "unmap_lun", "host", 0, "usage: unmap lun TARGET IQN|GROUP HOST-LUN",
     build_host},
    {"set", "chap", 5, "set_host_chap", "host", 0,
     "usage: set chap TARGET IQN|GROUP USER|none [MUTUAL-USER]", build_host},
    {"save", NULL, 0, "save", "saved", 0, "usage: save [FILE]", build_save},
    {"add", "target", 3, "add_target", "target-added", 0,
     "usage: add target IQN --portal ADDR[:PORT]... [--lun SPEC]... [--allow IQN]... "
     "[--alias TEXT]",
     build_add_target},
    {"remove", "target", 3, "remove_target", "target-removed", OPT_FORCE | OPT_TIMEOUT,
     "usage: remove target IQN [--force] [--timeout S]", build_target},
    {"call", NULL, 0, NULL, "generic", 0, "usage: call METHOD [PARAMS-JSON-OBJECT]", build_call},
};

int ctl_req_from_argv(int argc, char **argv, struct ctl_req *req, char *err, size_t errlen)
{
    const char *verb = argc > 0 ? argv[0] : NULL;
    const char *what = argc > 1 ? argv[1] : NULL;
    req->params = json_object();
    req->kind = "generic";
    if (!verb)
        return usage_err(err, errlen, "no command given");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        const struct verb *v = &verbs[i];
        if (!is(verb, v->verb) || (v->object && !is(what, v->object)))
            continue;
        if (argc < v->min_argc)
            return usage_of(v, err, errlen);
        if (v->method)
            req->method = v->method;
        if (v->kind)
            req->kind = v->kind;
        return v->build(v, argc, argv, req, err, errlen);
    }
    return usage_err(err, errlen, "unknown command '%s%s%s' (see --help)", verb, what ? " " : "",
                     what ? what : "");
}
