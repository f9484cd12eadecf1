/* The daemon's configuration model (targets, portals, LUNs, ACLs, session defaults) and the
 * validators of its values shared by the config file, the command line and linerate-ctl
 * (portals, iSCSI names, the control socket, the metrics address, the recovery level). */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/config.h"

/* "64M" rather than "67108864" where the size is a whole number of a unit. */
void target_size_text(uint64_t bytes, char *buf, size_t len)
{
    static const char units[] = "kMGT";
    int u = -1;
    while (u < 3 && bytes && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)bytes, units[u]);
}

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
    cfg->discovery_chap_match = true;
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
    target_hosts_free(n);
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
    ok = ok && target_hosts_copy(n, src) == 0;
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
    if (target_node_naa_clash(n, n->name, lun, err, errlen) < 0)
        return -1;
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
