/* The daemon's configuration model (targets, portals, LUNs, ACLs, session defaults), the
 * validators shared with the command line (portals, iSCSI names, LUN specs) and the config
 * file parser. Every refusal names its origin: "FILE:LINE: reason". */
#include "daemon/config.h"

#include "daemon/conf_keys.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/size.h"

void target_params_default(struct iscsi_params *p)
{
    iscsi_params_default(p);
    p->max_recv_dsl = 256u * 1024;
    p->max_burst = 1024u * 1024;
    p->first_burst = 256u * 1024;
    p->immediate_data = true;
    p->initial_r2t = false;
    p->max_connections = 8;
    p->max_outstanding_r2t = 8;
    /* For the target these mean "CRC32C is acceptable": the initiator's offer decides. */
    p->header_digest = true;
    p->data_digest = true;
}

void target_config_init(struct target_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->log_level = LOG_LVL_INFO;
    cfg->nop_interval_s = 15;
    cfg->nop_timeout_s = 30;
    cfg->login_timeout_s = 15;
    cfg->poll_us = TARGET_POLL_US_DEFAULT;
    iscsi_limits_default(&cfg->limits);
    snprintf(cfg->state_dir, sizeof(cfg->state_dir), "%s", TARGET_DEFAULT_STATE_DIR);
    snprintf(cfg->ctl_socket, sizeof(cfg->ctl_socket), "%s", TARGET_DEFAULT_CTL_SOCKET);
}

int target_set_ctl_socket(struct target_config *cfg, const char *val, char *err, size_t errlen)
{
    if (strcmp(val, "none") == 0) {
        cfg->ctl_socket[0] = '\0';
    } else if (val[0] != '/' || strlen(val) >= sizeof(cfg->ctl_socket)) {
        snprintf(err, errlen, "bad value '%s': expected an absolute path under %d bytes, or none",
                 val, TARGET_CTL_PATH_MAX);
        return -1;
    } else {
        snprintf(cfg->ctl_socket, sizeof(cfg->ctl_socket), "%s", val);
    }
    cfg->ctl_socket_set = true;
    return 0;
}

static void node_conf_free(struct target_node_conf *n)
{
    for (unsigned i = 0; i < n->nluns; i++)
        free(n->luns[i].bs_spec);
    free(n->luns);
    free(n->portals);
    free(n->allow);
    chap_wipe(&n->chap, sizeof(n->chap));
}

void target_config_free(struct target_config *cfg)
{
    for (unsigned i = 0; i < cfg->ntargets; i++)
        node_conf_free(&cfg->targets[i]);
    free(cfg->targets);
    free(cfg->listen);
    chap_wipe(cfg, sizeof(*cfg));
}

/* Grow an array by one zeroed element; returns the new element or NULL. */
static void *array_push(void *arrp, unsigned *n, size_t elem)
{
    void **arr = arrp;
    void *grown = realloc(*arr, (*n + 1) * elem);
    if (!grown)
        return NULL;
    *arr = grown;
    void *e = (char *)grown + (*n)++ * elem;
    memset(e, 0, elem);
    return e;
}

struct target_node_conf *target_config_add_node(struct target_config *cfg, const char *name,
                                                const char *origin)
{
    struct target_node_conf *n = array_push(&cfg->targets, &cfg->ntargets, sizeof(*n));
    if (!n)
        return NULL;
    snprintf(n->name, sizeof(n->name), "%s", name);
    snprintf(n->origin, sizeof(n->origin), "%s", origin);
    target_params_default(&n->params);
    n->warm_reset = true;
    n->cold_reset = false;
    return n;
}

void target_config_remove_node(struct target_config *cfg, unsigned idx)
{
    node_conf_free(&cfg->targets[idx]);
    memmove(&cfg->targets[idx], &cfg->targets[idx + 1],
            (cfg->ntargets - idx - 1) * sizeof(cfg->targets[0]));
    cfg->ntargets--;
}

struct target_node_conf *target_config_copy_node(struct target_config *cfg,
                                                 const struct target_node_conf *src)
{
    struct target_node_conf *n = target_config_add_node(cfg, src->name, src->origin);
    if (!n)
        return NULL;
    snprintf(n->alias, sizeof(n->alias), "%s", src->alias);
    n->params = src->params;
    n->chap = src->chap;
    n->alua = src->alua;
    n->warm_reset = src->warm_reset;
    n->cold_reset = src->cold_reset;
    bool ok = true;
    for (unsigned i = 0; ok && i < src->nportals; i++)
        ok = target_node_add_portal(n, &src->portals[i]) == 0;
    for (unsigned i = 0; ok && i < src->nallow; i++)
        ok = target_node_add_allow(n, src->allow[i]) == 0;
    for (unsigned i = 0; ok && i < src->nluns; i++) {
        struct target_lun_conf l = src->luns[i];
        char err[256];
        l.bs_spec = strdup(src->luns[i].bs_spec);
        ok = l.bs_spec && target_node_add_lun(n, &l, err, sizeof(err)) == 0;
        if (!ok)
            free(l.bs_spec);
    }
    if (!ok) {
        target_config_remove_node(cfg, cfg->ntargets - 1);
        return NULL;
    }
    return n;
}

int target_node_add_portal(struct target_node_conf *n, const struct target_portal *p)
{
    for (unsigned i = 0; i < n->nportals; i++)
        if (strcmp(n->portals[i].text, p->text) == 0)
            return 0;
    struct target_portal *e = array_push(&n->portals, &n->nportals, sizeof(*e));
    if (!e)
        return -1;
    *e = *p;
    return 0;
}

int target_node_add_allow(struct target_node_conf *n, const char *iqn)
{
    for (unsigned i = 0; i < n->nallow; i++)
        if (strcmp(n->allow[i], iqn) == 0)
            return 0;
    char(*e)[ISCSI_NAME_MAX + 1] = array_push(&n->allow, &n->nallow, sizeof(*e));
    if (!e)
        return -1;
    snprintf(*e, sizeof(*e), "%s", iqn);
    return 0;
}

bool target_node_has_portal(const struct target_node_conf *n, const char *text)
{
    for (unsigned i = 0; i < n->nportals; i++)
        if (strcmp(n->portals[i].text, text) == 0)
            return true;
    return false;
}

bool target_node_has_allow(const struct target_node_conf *n, const char *iqn)
{
    for (unsigned i = 0; i < n->nallow; i++)
        if (strcasecmp(n->allow[i], iqn) == 0)
            return true;
    return false;
}

void target_node_remove_portal(struct target_node_conf *n, const char *text)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n->nportals; i++)
        if (strcmp(n->portals[i].text, text) != 0)
            n->portals[k++] = n->portals[i];
    n->nportals = k;
}

void target_node_remove_allow(struct target_node_conf *n, const char *iqn)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n->nallow; i++)
        if (strcasecmp(n->allow[i], iqn) != 0)
            memmove(n->allow[k++], n->allow[i], sizeof(n->allow[0]));
    n->nallow = k;
}

/* Takes ownership of lun->bs_spec on success. */
int target_node_add_lun(struct target_node_conf *n, struct target_lun_conf *lun, char *err,
                        size_t errlen)
{
    for (unsigned i = 0; i < n->nluns; i++) {
        if (n->luns[i].lun == lun->lun) {
            snprintf(err, errlen, "LUN %llu is defined twice (first at %s)",
                     (unsigned long long)lun->lun, n->luns[i].origin);
            return -1;
        }
    }
    struct target_lun_conf *e = array_push(&n->luns, &n->nluns, sizeof(*e));
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *e = *lun;
    return 0;
}

int target_config_finish(struct target_config *cfg)
{
    free(cfg->listen);
    cfg->listen = NULL;
    cfg->nlisten = 0;
    for (unsigned t = 0; t < cfg->ntargets; t++) {
        const struct target_node_conf *n = &cfg->targets[t];
        for (unsigned i = 0; i < n->nportals; i++) {
            bool seen = false;
            for (unsigned j = 0; j < cfg->nlisten && !seen; j++)
                seen = strcmp(cfg->listen[j].text, n->portals[i].text) == 0;
            if (seen)
                continue;
            struct target_portal *e = array_push(&cfg->listen, &cfg->nlisten, sizeof(*e));
            if (!e)
                return -1;
            *e = n->portals[i];
        }
    }
    return 0;
}

/* --- validators --- */

static int parse_port(const char *s, uint16_t *port)
{
    if (!*s)
        return -1;
    unsigned long v = 0;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -1;
    }
    if (v == 0)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

int target_set_metrics(struct target_config *cfg, const char *val, char *err, size_t errlen)
{
    if (strcmp(val, "none") == 0 || strcmp(val, "off") == 0) {
        cfg->metrics_on = false;
        return 0;
    }
    const char *colon = strrchr(val, ':');
    const char *bracket = strrchr(val, ']');
    if (!colon || (bracket && colon < bracket) || (!bracket && strchr(val, ':') != colon)) {
        snprintf(err, errlen, "bad address '%s': expected ADDR:PORT (127.0.0.1:9650, [::1]:9650)",
                 val);
        return -1;
    }
    if (target_parse_portal(val, &cfg->metrics, err, errlen) < 0)
        return -1;
    cfg->metrics_on = true;
    return 0;
}

/* "127.0.0.1:3260", "127.0.0.1", "[::1]:3260", "[::1]", "::1". Numeric addresses only: a
 * portal is what SendTargets tells initiators, so it must not depend on name resolution. */
int target_parse_portal(const char *s, struct target_portal *p, char *err, size_t errlen)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *port_s = NULL;
    memset(p, 0, sizeof(*p));
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (size_t)(close - s - 1) >= sizeof(host)) {
            snprintf(err, errlen, "bad portal '%s': expected [IPv6]:PORT", s);
            return -1;
        }
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        if (close[1] == ':')
            port_s = close + 2;
        else if (close[1] != '\0') {
            snprintf(err, errlen, "bad portal '%s': expected [IPv6]:PORT", s);
            return -1;
        }
    } else {
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':')) {
            /* Several colons: a bare IPv6 address without a port. */
            if (strlen(s) >= sizeof(host)) {
                snprintf(err, errlen, "bad portal '%s'", s);
                return -1;
            }
            strcpy(host, s);
        } else {
            size_t hl = colon ? (size_t)(colon - s) : strlen(s);
            if (hl >= sizeof(host)) {
                snprintf(err, errlen, "bad portal '%s'", s);
                return -1;
            }
            memcpy(host, s, hl);
            host[hl] = '\0';
            if (colon)
                port_s = colon + 1;
        }
    }
    uint16_t port = TARGET_DEFAULT_PORT;
    if (port_s && parse_port(port_s, &port) < 0) {
        snprintf(err, errlen, "bad port in portal '%s': expected 1..65535", s);
        return -1;
    }
    char canon[INET6_ADDRSTRLEN];
    struct sockaddr_in *sin = (struct sockaddr_in *)&p->addr;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&p->addr;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        p->addrlen = sizeof(*sin);
        inet_ntop(AF_INET, &sin->sin_addr, canon, sizeof(canon));
        snprintf(p->text, sizeof(p->text), "%s:%u", canon, port);
    } else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        p->addrlen = sizeof(*sin6);
        inet_ntop(AF_INET6, &sin6->sin6_addr, canon, sizeof(canon));
        snprintf(p->text, sizeof(p->text), "[%s]:%u", canon, port);
    } else {
        snprintf(err, errlen,
                 "bad portal '%s': '%s' is not a numeric IPv4 or IPv6 address "
                 "(use 127.0.0.1:3260 or [::1]:3260)",
                 s, host);
        return -1;
    }
    return 0;
}

static bool all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return s[n] == '\0';
}

/* RFC 7143 §4.2.7.4: iqn.YYYY-MM.reversed.domain[:anything], eui.<16 hex>, naa.<16|32 hex>.
 * Names compare case-insensitively (stringprep lower-cases them), so upper case is accepted;
 * beyond that only the ASCII subset of what stringprep allows: letters, digits, - . : */
int target_check_iscsi_name(const char *s, char *err, size_t errlen)
{
    size_t len = strlen(s);
    if (len == 0 || len > ISCSI_NAME_MAX) {
        snprintf(err, errlen, "bad iSCSI name '%s': must be 1..%d characters", s, ISCSI_NAME_MAX);
        return -1;
    }
    if (strncasecmp(s, "eui.", 4) == 0) {
        if (len == 4 + 16 && all_hex(s + 4, 16))
            return 0;
        snprintf(err, errlen, "bad iSCSI name '%s': eui. takes 16 hex digits", s);
        return -1;
    }
    if (strncasecmp(s, "naa.", 4) == 0) {
        if ((len == 4 + 16 && all_hex(s + 4, 16)) || (len == 4 + 32 && all_hex(s + 4, 32)))
            return 0;
        snprintf(err, errlen, "bad iSCSI name '%s': naa. takes 16 or 32 hex digits", s);
        return -1;
    }
    if (strncasecmp(s, "iqn.", 4) != 0) {
        snprintf(err, errlen,
                 "bad iSCSI name '%s': expected iqn.YYYY-MM.domain[:id], eui.HEX or naa.HEX", s);
        return -1;
    }
    const char *d = s + 4;
    bool date_ok = len > 4 + 8 && isdigit((unsigned char)d[0]) && isdigit((unsigned char)d[1]) &&
                   isdigit((unsigned char)d[2]) && isdigit((unsigned char)d[3]) && d[4] == '-' &&
                   isdigit((unsigned char)d[5]) && isdigit((unsigned char)d[6]) && d[7] == '.' &&
                   d[8] != '\0' && d[8] != ':';
    int month = date_ok ? (d[5] - '0') * 10 + (d[6] - '0') : 0;
    if (!date_ok || month < 1 || month > 12) {
        snprintf(err, errlen, "bad iSCSI name '%s': expected iqn.YYYY-MM.reversed.domain[:id]", s);
        return -1;
    }
    for (const char *p = d + 8; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalpha(c) || isdigit(c) || c == '-' || c == '.' || c == ':')) {
            snprintf(err, errlen, "bad iSCSI name '%s': character '%c' is not allowed", s, c);
            return -1;
        }
    }
    return 0;
}

/* RFC 7143 §13.20: 0, 1 or 2. A level above ISCSI_ERL_IMPLEMENTED is refused, not lowered:
 * whoever asks for recovery must learn that this build cannot give it. */
int target_parse_erl(const char *val, uint32_t *out, char *err, size_t errlen)
{
    if (val[0] < '0' || val[0] > '2' || val[1] != '\0') {
        snprintf(err, errlen, "bad value '%s' for error-recovery-level: expected 0, 1 or 2", val);
        return -1;
    }
    uint32_t x = (uint32_t)(val[0] - '0');
    if (x > ISCSI_ERL_IMPLEMENTED) {
        snprintf(err, errlen,
                 "error-recovery-level %u is not implemented yet (the highest this build "
                 "performs is %u)",
                 x, ISCSI_ERL_IMPLEMENTED);
        return -1;
    }
    *out = x;
    return 0;
}

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

static char *trim(char *s)
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
    ps->node = NULL;
    return 0;
}

static int cfg_section(struct cfg_parser *ps, char *s)
{
    size_t n = strlen(s);
    if (s[n - 1] != ']')
        return cfg_fail(ps, ps->line, "unterminated section header (missing ']')");
    s[n - 1] = '\0';
    char *body = trim(s + 1);
    if (strncmp(body, "target", 6) != 0 || !isspace((unsigned char)body[6]))
        return cfg_fail(ps, ps->line, "unknown section '[%s]': expected [target IQN]", body);
    if (cfg_end_target(ps) < 0)
        return -1;
    char *name = trim(body + 6);
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
    struct target_portal *e = array_push(&ps->global_portals, &ps->nglobal_portals, sizeof(*e));
    if (!e)
        return cfg_fail(ps, ps->line, "out of memory");
    *e = p;
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
    if (target_node_add_lun(ps->node, &lun, reason, sizeof(reason)) < 0) {
        free(lun.bs_spec);
        return cfg_fail(ps, ps->line, "%s", reason);
    }
    ps->next_lun = lun.lun + 1;
    return 0;
}

static int cfg_list_key(struct cfg_parser *ps, const char *key, const char *val)
{
    if (strcmp(key, "portal") == 0)
        return cfg_portal(ps, val);
    if (key[0] == 'l')
        return cfg_lun(ps, key, val);
    char reason[512];
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
    if (!k)
        return n ? cfg_fail(ps, ps->line, "unknown key '%s' in [target %s]", key, n->name)
                 : cfg_fail(ps, ps->line, "unknown key '%s'", key);
    if (n && !(k->scope & CONF_TARGET))
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
                         .alua = n ? &n->alua : &ps->global_alua};
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
    char *s = trim(raw);
    if (!*s)
        return 0;
    if (*s == '[')
        return cfg_section(ps, s);
    char *eq = strchr(s, '=');
    if (!eq)
        return cfg_fail(ps, ps->line, "expected 'key = value' or '[target IQN]'");
    *eq = '\0';
    char *key = trim(s);
    char *val = trim(eq + 1);
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
