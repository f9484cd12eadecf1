/* The config file parser: each line read (target_config_read_lines), sections opened and
 * checked when they end, each `key = value` set through the table of keys (conf_keys.h).
 * Every refusal names its origin: "FILE:LINE: reason". */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/conf_keys.h"

/* --- the config file --- */

struct cfg_parser {
    struct target_config *cfg;
    const char *path;
    unsigned line;
    char *err;
    size_t errlen;
    struct iscsi_params global_params;   /* session keys in the global section */
    struct target_alua_conf global_alua; /* alua-* keys in the global section */
    struct target_portal *global_portals;
    unsigned nglobal_portals;
    struct target_node_conf *node; /* current [target] section, NULL in the global section */
    struct target_host_conf *host; /* current [host] or [group] of that target, or NULL */
    unsigned node_line;
    uint64_t next_lun;
    unsigned seen[CONF_KEYS_MAX]; /* the line of each key in this section, 0: not yet */
};

static int cfg_fail(struct cfg_parser *ps, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cfg_fail(struct cfg_parser *ps, unsigned line, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "%s:%u: %s", ps->path, line, reason);
    return -1;
}

char *conf_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Checks when a [target] section ends. */
static int cfg_end_target(struct cfg_parser *ps)
{
    struct target_node_conf *n = ps->node;
    if (!n)
        return 0;
    if (n->nluns == 0)
        return cfg_fail(ps, ps->node_line, "target %s has no LUN (add 'lun = ram:1G')", n->name);
    if (n->nportals == 0) {
        if (ps->nglobal_portals == 0)
            return cfg_fail(ps, ps->node_line,
                            "target %s has no portal (add 'portal = 127.0.0.1:3260' here or in "
                            "the global section)",
                            n->name);
        for (unsigned i = 0; i < ps->nglobal_portals; i++)
            if (target_node_add_portal(n, &ps->global_portals[i]) < 0)
                return cfg_fail(ps, ps->node_line, "out of memory");
    }
    if (n->params.first_burst > n->params.max_burst)
        return cfg_fail(ps, ps->node_line,
                        "target %s: first-burst-length %u exceeds max-burst-length %u", n->name,
                        n->params.first_burst, n->params.max_burst);
    char reason[256];
    if (target_alua_check(&n->alua, reason, sizeof(reason)) < 0) {
        const struct conf_key *to = conf_key_find("failover-timeout");
        const struct conf_key *hb = conf_key_find("failover-heartbeat");
        unsigned line = ps->seen[to - conf_keys]   ? ps->seen[to - conf_keys]
                        : ps->seen[hb - conf_keys] ? ps->seen[hb - conf_keys]
                                                   : ps->node_line;
        return cfg_fail(ps, line, "target %s: %s", n->name, reason);
    }
    if (target_hosts_check(n, ps->path, ps->err, ps->errlen) < 0)
        return -1;
    ps->node = NULL;
    ps->host = NULL;
    return 0;
}

/* [host IQN] or [group NAME]: an entry of the [target] above it (host_conf.c). */
static int cfg_host_section(struct cfg_parser *ps, char *body)
{
    bool group = body[0] == 'g';
    char *name = conf_trim(body + (group ? 5 : 4));
    if (!ps->node)
        return cfg_fail(ps, ps->line, "[%s %s] belongs after the [target IQN] it is an entry of",
                        group ? "group" : "host", name);
    char reason[512];
    if (!group && target_check_iscsi_name(name, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    char origin[TARGET_ORIGIN_MAX];
    snprintf(origin, sizeof(origin), "%s:%u", ps->path, ps->line);
    ps->host = target_host_open(ps->node, group, name, origin, ps->line, reason, sizeof(reason));
    if (!ps->host)
        return cfg_fail(ps, ps->line, "%s", reason);
    memset(ps->seen, 0, sizeof(ps->seen));
    return 0;
}

static int cfg_section(struct cfg_parser *ps, char *s)
{
    size_t n = strlen(s);
    if (s[n - 1] != ']')
        return cfg_fail(ps, ps->line, "unterminated section header (missing ']')");
    s[n - 1] = '\0';
    char *body = conf_trim(s + 1);
    if ((strncmp(body, "host", 4) == 0 && isspace((unsigned char)body[4])) ||
        (strncmp(body, "group", 5) == 0 && isspace((unsigned char)body[5])))
        return cfg_host_section(ps, body);
    if (strncmp(body, "target", 6) != 0 || !isspace((unsigned char)body[6]))
        return cfg_fail(ps, ps->line,
                        "unknown section '[%s]': expected [target IQN], [host IQN] or "
                        "[group NAME]",
                        body);
    if (cfg_end_target(ps) < 0)
        return -1;
    char *name = conf_trim(body + 6);
    char reason[512];
    if (target_check_iscsi_name(name, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    for (unsigned i = 0; i < ps->cfg->ntargets; i++)
        if (strcmp(ps->cfg->targets[i].name, name) == 0)
            return cfg_fail(ps, ps->line, "duplicate target %s (first defined at %s)", name,
                            ps->cfg->targets[i].origin);
    char origin[TARGET_ORIGIN_MAX];
    snprintf(origin, sizeof(origin), "%s:%u", ps->path, ps->line);
    ps->node = target_config_add_node(ps->cfg, name, origin);
    if (!ps->node)
        return cfg_fail(ps, ps->line, "out of memory");
    ps->node->params = ps->global_params;
    ps->node->alua = ps->global_alua;
    ps->node_line = ps->line;
    ps->next_lun = 0;
    memset(ps->seen, 0, sizeof(ps->seen));
    return 0;
}

/* portal, lun and allow: the entries a section lists (CONF_LIST rows). */
static int cfg_portal(struct cfg_parser *ps, const char *val)
{
    struct target_portal p;
    char reason[512];
    if (target_parse_portal(val, &p, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    if (ps->node)
        return target_node_add_portal(ps->node, &p) < 0 ? cfg_fail(ps, ps->line, "out of memory")
                                                        : 0;
    struct target_portal *grown =
        realloc(ps->global_portals, (ps->nglobal_portals + 1) * sizeof(*grown));
    if (!grown)
        return cfg_fail(ps, ps->line, "out of memory");
    ps->global_portals = grown;
    grown[ps->nglobal_portals++] = p;
    return 0;
}

static int cfg_lun(struct cfg_parser *ps, const char *key, const char *val)
{
    struct target_lun_conf lun;
    char reason[768];
    memset(&lun, 0, sizeof(lun));
    lun.lun = ps->next_lun;
    if (key[3] == ' ') {
        uint64_t x;
        const char *num = key + 4;
        while (*num == ' ' || *num == '\t')
            num++;
        if (!isdigit((unsigned char)*num) || conf_parse_uint(num, 0, TARGET_LUN_MAX, &x) < 0)
            return cfg_fail(ps, ps->line, "bad LUN number '%s': expected 0..%d", num,
                            TARGET_LUN_MAX);
        lun.lun = x;
    }
    if (lun.lun > TARGET_LUN_MAX)
        return cfg_fail(ps, ps->line, "too many LUNs: at most %d", TARGET_LUN_MAX + 1);
    if (target_parse_lun_spec(val, &lun, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    /* rbd-timeout (global, so read before any target) is the default of timeout= */
    if (target_lun_rbd_timeout(&lun, ps->cfg->rbd_timeout_s) < 0) {
        free(lun.bs_spec);
        return cfg_fail(ps, ps->line, "out of memory");
    }
    snprintf(lun.origin, sizeof(lun.origin), "%s:%u", ps->path, ps->line);
    if (target_lun_naa_clash(ps->cfg, ps->node->name, &lun, reason, sizeof(reason)) < 0 ||
        target_node_add_lun(ps->node, &lun, reason, sizeof(reason)) < 0) {
        free(lun.bs_spec);
        return cfg_fail(ps, ps->line, "%s", reason);
    }
    ps->next_lun = lun.lun + 1;
    return 0;
}

static int cfg_list_key(struct cfg_parser *ps, const char *key, const char *val)
{
    char reason[512];
    if (strcmp(key, "map") == 0) {
        if (target_host_map_line(ps->host, val, ps->line, reason, sizeof(reason)) < 0)
            return cfg_fail(ps, ps->line, "%s", reason);
        return 0;
    }
    if (strcmp(key, "initiator") == 0) {
        if (!ps->host->group)
            return cfg_fail(ps, ps->line,
                            "'initiator' belongs in a [group NAME] (a [host IQN] names its one "
                            "initiator in its header)");
        if (target_check_iscsi_name(val, reason, sizeof(reason)) < 0 ||
            target_host_add_initiator(ps->host, val, ps->line, reason, sizeof(reason)) < 0)
            return cfg_fail(ps, ps->line, "%s", reason);
        return 0;
    }
    if (strcmp(key, "portal") == 0)
        return cfg_portal(ps, val);
    if (key[0] == 'l')
        return cfg_lun(ps, key, val);
    if (target_check_iscsi_name(val, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    if (target_node_add_allow(ps->node, val) < 0)
        return cfg_fail(ps, ps->line, "out of memory");
    return 0;
}

/* One `key = value` line: its row of the table (conf_keys_table.c), in the right section,
 * given once unless it is repeatable, then set. */
static int cfg_key(struct cfg_parser *ps, const char *key, const char *val)
{
    const struct conf_key *k = conf_key_find(key);
    struct target_node_conf *n = ps->node;
    struct target_host_conf *h = ps->host;
    if (!k)
        return n ? cfg_fail(ps, ps->line, "unknown key '%s' in [target %s]", key, n->name)
                 : cfg_fail(ps, ps->line, "unknown key '%s'", key);
    if (h && !(k->scope & CONF_HOST))
        return cfg_fail(ps, ps->line,
                        "'%s' cannot stand in a [%s] section (it takes map%s, chap-user, "
                        "chap-mutual-user and the caps iops, mbps, read-/write- forms, burst; "
                        "target keys go before the target's first entry)",
                        k->name, h->group ? "group" : "host", h->group ? ", initiator" : "");
    if (!h && (k->scope & CONF_BOTH) == 0)
        return cfg_fail(ps, ps->line, "'%s' belongs in a [host IQN] or [group NAME] section%s",
                        k->name, k->misplaced_hint ? k->misplaced_hint : "");
    if (n && !h && !(k->scope & CONF_TARGET))
        return cfg_fail(ps, ps->line, "'%s' belongs in the global section (before any [target])",
                        key);
    if (!n && !(k->scope & CONF_GLOBAL))
        return cfg_fail(ps, ps->line, "'%s' belongs in a [target IQN] section%s", k->name,
                        k->misplaced_hint ? k->misplaced_hint : "");
    /* A key given twice would keep its last value without a word: say so instead. */
    unsigned *first = &ps->seen[k - conf_keys];
    if (!k->repeatable && *first)
        return cfg_fail(ps, ps->line, "%s is given twice in this section (first at line %u)",
                        k->name, *first);
    *first = ps->line;
    if (k->type == CONF_LIST)
        return cfg_list_key(ps, key, val);
    struct conf_obj o = {.cfg = ps->cfg,
                         .node = n,
                         .params = n ? &n->params : &ps->global_params,
                         .alua = n ? &n->alua : &ps->global_alua,
                         .host = h};
    char reason[768];
    if (conf_key_set(k, &o, val, reason, sizeof(reason)) < 0)
        return cfg_fail(ps, ps->line, "%s", reason);
    return 0;
}

static int cfg_line(struct cfg_parser *ps, char *raw)
{
    /* '#' starts a comment at the start of a line or after white space, so that values such
     * as an alias "disk#2" survive. */
    for (char *p = raw; *p; p++) {
        if (*p == '#' && (p == raw || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            break;
        }
    }
    char *s = conf_trim(raw);
    if (!*s)
        return 0;
    if (*s == '[')
        return cfg_section(ps, s);
    char *eq = strchr(s, '=');
    if (!eq)
        return cfg_fail(ps, ps->line, "expected 'key = value' or '[target IQN]'");
    *eq = '\0';
    char *key = conf_trim(s);
    char *val = conf_trim(eq + 1);
    for (char *p = key; *p; p++) {
        if (*p == '_')
            *p = '-';
        *p = (char)tolower((unsigned char)*p);
    }
    size_t vl = strlen(val);
    if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
        val[vl - 1] = '\0';
        val++;
    }
    if (!*key)
        return cfg_fail(ps, ps->line, "missing key before '='");
    if (!*val)
        return cfg_fail(ps, ps->line, "missing value for '%s'", key);
    return cfg_key(ps, key, val);
}

int target_config_load(struct target_config *cfg, const char *path, char *err, size_t errlen)
{
    return target_config_load_defaults(cfg, path, NULL, err, errlen);
}

int target_config_read_lines(const char *path, target_line_fn fn, void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return TARGET_LINES_EOPEN;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&buf, &cap, f)) >= 0) {
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        rc = fn(arg, buf, (size_t)len, ++lineno);
    }
    if (rc == 0 && ferror(f))
        rc = TARGET_LINES_EREAD;
    int saved = errno; /* the read's, for the caller's message */
    free(buf);
    fclose(f);
    errno = saved;
    return rc;
}

/* One line of the file for target_config_read_lines. */
static int cfg_read_line(void *arg, char *line, size_t len, unsigned lineno)
{
    struct cfg_parser *ps = arg;
    ps->line = lineno;
    if (memchr(line, '\0', len))
        return cfg_fail(ps, ps->line, "NUL byte in config file");
    return cfg_line(ps, line);
}

int target_config_load_defaults(struct target_config *cfg, const char *path,
                                struct target_section_defaults *defs, char *err, size_t errlen)
{
    struct cfg_parser ps = {.cfg = cfg, .path = path, .err = err, .errlen = errlen};
    target_params_default(&ps.global_params);
    int rc = target_config_read_lines(path, cfg_read_line, &ps);
    if (rc == TARGET_LINES_EOPEN) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -1;
    }
    if (rc == TARGET_LINES_EREAD)
        rc = cfg_fail(&ps, ps.line, "read error: %s", strerror(errno));
    if (rc == 0)
        rc = cfg_end_target(&ps);
    if (rc == 0 && cfg->ntargets == 0)
        rc = cfg_fail(&ps, ps.line ? ps.line : 1, "no [target IQN] section: nothing to serve");
    if (rc == 0 && target_config_finish(cfg) < 0)
        rc = cfg_fail(&ps, ps.line, "out of memory");
    if (rc == 0)
        rc = target_chap_load(cfg, err, errlen);
    if (rc == 0 && defs) {
        defs->params = ps.global_params;
        defs->alua = ps.global_alua;
        defs->chap_algs = cfg->chap_algs;
    }
    free(ps.global_portals);
    return rc;
}
