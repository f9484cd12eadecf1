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

int ctl_req_from_argv(int argc, char **argv, struct ctl_req *req, char *err, size_t errlen)
{
    const char *verb = argc > 0 ? argv[0] : NULL;
    const char *what = argc > 1 ? argv[1] : NULL;
    json_t *p = json_object();
    req->params = p;
    req->kind = "generic";
    json_int_t v = 0;
    if (!verb)
        return usage_err(err, errlen, "no command given");
    if (is(verb, "version")) {
        req->method = "version";
        req->kind = "version";
        return verb_opts(argc, argv, 1, p, 0, err, errlen);
    }
    if (is(verb, "show")) {
        static const char *const things[] = {"targets", "luns", "sessions", "connections",
                                             "portals"};
        static const char *const meth[] = {"show_targets", "show_luns", "show_sessions",
                                           "show_connections", "show_portals"};
        for (int i = 0; i < 5; i++) {
            if (!is(what, things[i]))
                continue;
            req->method = meth[i];
            req->kind = things[i];
            if (i == 1 && argc > 2) /* show luns TARGET */
                json_object_set_new(p, "target", json_string(argv[2]));
            return verb_opts(argc, argv, i == 1 && argc > 2 ? 3 : 2, p, 0, err, errlen);
        }
        return usage_err(err, errlen,
                         "show what? targets, luns [TARGET], sessions, connections or portals");
    }
    if (is(verb, "add") && is(what, "lun")) {
        if (argc < 4)
            return usage_err(err, errlen, "usage: add lun TARGET SPEC [--lun N]");
        req->method = "add_lun";
        req->kind = "lun";
        json_object_set_new(p, "target", json_string(argv[2]));
        json_object_set_new(p, "spec", json_string(argv[3]));
        return verb_opts(argc, argv, 4, p, OPT_LUN, err, errlen);
    }
    if ((is(verb, "remove") || is(verb, "set") || is(verb, "resize")) && is(what, "lun")) {
        bool set = is(verb, "set"), resize = is(verb, "resize");
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
            return usage_err(err, errlen, "usage: %s",
                             set      ? "set lun [TARGET] N ro|rw"
                             : resize ? "resize lun [TARGET] N SIZE"
                                      : "remove lun [TARGET] N "
                                        "[--timeout S] [--force]");
        if (named)
            json_object_set_new(p, "target", json_string(argv[2]));
        if (num_arg(argv[at], "LUN", 16383, &v, err, errlen) < 0)
            return -1;
        json_object_set_new(p, "lun", json_integer(v));
        if (set) {
            const char *mode = argv[at + 1];
            if (!is(mode, "ro") && !is(mode, "rw"))
                return usage_err(err, errlen, "set lun [TARGET] N ro|rw: '%s' is neither", mode);
            json_object_set_new(p, "read_only", json_boolean(is(mode, "ro")));
            req->method = "set_lun";
            req->kind = "lun";
        } else if (resize) {
            json_object_set_new(p, "size", json_string(argv[at + 1]));
            req->method = "resize_lun";
            req->kind = "lun";
        } else {
            req->method = "remove_lun";
            req->kind = "removed";
        }
        return verb_opts(argc, argv, need, p, set || resize ? 0 : OPT_TIMEOUT | OPT_FORCE, err,
                         errlen);
    }
    if (is(verb, "logout") && is(what, "session")) {
        if (argc < 3)
            return usage_err(err, errlen, "usage: logout session TSIH [--timeout S]");
        if (num_arg(argv[2], "TSIH", 65535, &v, err, errlen) < 0)
            return -1;
        json_object_set_new(p, "tsih", json_integer(v));
        req->method = "logout_session";
        req->kind = "logout";
        return verb_opts(argc, argv, 3, p, OPT_TIMEOUT, err, errlen);
    }
    if (is(verb, "drop") && is(what, "connection")) {
        if (argc < 4)
            return usage_err(err, errlen, "usage: drop connection TSIH CID");
        if (num_arg(argv[2], "TSIH", 65535, &v, err, errlen) < 0)
            return -1;
        json_object_set_new(p, "tsih", json_integer(v));
        if (num_arg(argv[3], "CID", 65535, &v, err, errlen) < 0)
            return -1;
        json_object_set_new(p, "cid", json_integer(v));
        req->method = "drop_connection";
        req->kind = "dropped";
        return verb_opts(argc, argv, 4, p, 0, err, errlen);
    }
    if (is(verb, "set") && is(what, "log-level")) {
        if (argc < 3)
            return usage_err(err, errlen, "usage: set log-level error|warn|info|debug");
        json_object_set_new(p, "level", json_string(argv[2]));
        req->method = "set_log_level";
        req->kind = "log-level";
        return verb_opts(argc, argv, 3, p, 0, err, errlen);
    }
    if (is(verb, "reload")) {
        req->method = "reload";
        req->kind = "reload";
        /* reload takes nothing else, so its usage says more than "unexpected argument". */
        if (verb_opts(argc, argv, 1, p, OPT_FORCE, err, errlen) < 0)
            return usage_err(err, errlen, "usage: reload [--force]");
        return 0;
    }
    if ((is(verb, "add") || is(verb, "remove")) && (is(what, "portal") || is(what, "allow"))) {
        bool add = is(verb, "add"), portal = is(what, "portal");
        if (argc < 4)
            return usage_err(err, errlen, "usage: %s %s TARGET %s%s", verb, what,
                             portal ? "ADDR[:PORT]" : "INITIATOR-IQN",
                             !portal ? " [--force] [--timeout S]" : "");
        static const char *const meth[2][2] = {{"remove_allow", "remove_portal"},
                                               {"add_allow", "add_portal"}};
        req->method = meth[add][portal];
        req->kind = req->method;
        json_object_set_new(p, "target", json_string(argv[2]));
        json_object_set_new(p, portal ? "portal" : "initiator", json_string(argv[3]));
        return verb_opts(argc, argv, 4, p, !portal ? OPT_FORCE | OPT_TIMEOUT : 0, err, errlen);
    }
    if (is(verb, "save")) {
        if (argc > 2)
            return usage_err(err, errlen, "usage: save [FILE]");
        req->method = "save";
        req->kind = "saved";
        if (argc == 2) {
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
            json_object_set_new(p, "file", json_string(abs));
            free(abs);
        }
        return 0;
    }
    if (is(verb, "add") && is(what, "target")) {
        if (argc < 3)
            return usage_err(err, errlen,
                             "usage: add target IQN --portal ADDR[:PORT]... [--lun SPEC]... "
                             "[--allow IQN]... [--alias TEXT]");
        req->method = "add_target";
        req->kind = "target-added";
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
    if (is(verb, "remove") && is(what, "target")) {
        if (argc < 3)
            return usage_err(err, errlen, "usage: remove target IQN [--force] [--timeout S]");
        req->method = "remove_target";
        req->kind = "target-removed";
        json_object_set_new(p, "target", json_string(argv[2]));
        return verb_opts(argc, argv, 3, p, OPT_FORCE | OPT_TIMEOUT, err, errlen);
    }
    if (is(verb, "call")) { /* any method, params as JSON: for scripts and new methods */
        if (argc < 2 || argc > 3)
            return usage_err(err, errlen, "usage: call METHOD [PARAMS-JSON-OBJECT]");
        req->method = argv[1];
        if (argc == 3) {
            json_error_t je;
            json_t *o = json_loads(argv[2], 0, &je);
            if (!json_is_object(o)) {
                json_decref(o);
                return usage_err(err, errlen, "call: PARAMS must be a JSON object");
            }
            json_decref(p);
            req->params = o;
        }
        return 0;
    }
    return usage_err(err, errlen, "unknown command '%s%s%s' (see --help)", verb, what ? " " : "",
                     what ? what : "");
}
