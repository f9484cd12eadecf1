/* The configuration model written back as config file text (linerate-ctl save): a LUN as the
 * spec `lun = ...` takes, a whole [target] section, and the global keys of a daemon started
 * without a file. What is written loads back (config.c) into the same model: the only reader
 * is target_config_load, so every line here is one it parses. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

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

int target_lun_spec_format(const struct target_lun_conf *l, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "%s", l->bs_spec);
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (off < len)                                                                             \
            off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__);                            \
    } while (0)
    if (l->read_only)
        ADD(",ro");
    if (l->removable)
        ADD(",removable");
    if (l->block_size != 512)
        ADD(",bs=%u", l->block_size);
    if (l->phys_block_size)
        ADD(",pbs=%u", l->phys_block_size);
    if (l->sanitize_rate != TARGET_DEFAULT_SANITIZE_RATE) {
        char s[32];
        target_size_text(l->sanitize_rate, s, sizeof(s));
        ADD(",sanitize-rate=%s", s);
    }
    if (l->alua_state_set)
        ADD(",alua=%s", scsi_alua_state_name(l->alua_state));
    for (unsigned i = 0; i < l->alua_npeers; i++)
        ADD(",alua-peer=%u:%s", (unsigned)l->alua_peers[i].id,
            scsi_alua_state_name((enum scsi_alua_state)l->alua_peers[i].state));
#undef ADD
    return off < len ? 0 : -1;
}

static void write_algs(FILE *f, unsigned algs)
{
    static const int order[] = {CHAP_ALG_SHA3_256, CHAP_ALG_SHA256, CHAP_ALG_MD5};
    fprintf(f, "chap-algorithms = ");
    bool first = true;
    for (unsigned i = 0; i < 3; i++) {
        if (!(algs & chap_alg_bit(order[i])))
            continue;
        fprintf(f, "%s%s", first ? "" : ",", chap_alg_name(order[i]));
        first = false;
    }
    fputc('\n', f);
}

/* The session keys of p that differ from those the section inherits. */
static void write_params(FILE *f, const struct iscsi_params *p, const struct iscsi_params *inh)
{
    const struct {
        const char *name;
        uint32_t v, inh;
    } nums[] = {
        {"max-burst-length", p->max_burst, inh->max_burst},
        {"first-burst-length", p->first_burst, inh->first_burst},
        {"max-recv-data-segment-length", p->max_recv_dsl, inh->max_recv_dsl},
        {"max-connections", p->max_connections, inh->max_connections},
        {"max-outstanding-r2t", p->max_outstanding_r2t, inh->max_outstanding_r2t},
        {"default-time2wait", p->default_time2wait, inh->default_time2wait},
        {"default-time2retain", p->default_time2retain, inh->default_time2retain},
        {"error-recovery-level", p->erl, inh->erl},
    };
    for (unsigned i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
        if (nums[i].v != nums[i].inh)
            fprintf(f, "%s = %u\n", nums[i].name, nums[i].v);
    if (p->immediate_data != inh->immediate_data)
        fprintf(f, "immediate-data = %s\n", p->immediate_data ? "yes" : "no");
    if (p->initial_r2t != inh->initial_r2t)
        fprintf(f, "initial-r2t = %s\n", p->initial_r2t ? "yes" : "no");
    if (p->header_digest != inh->header_digest)
        fprintf(f, "header-digest = %s\n", p->header_digest ? "crc32c" : "none");
    if (p->data_digest != inh->data_digest)
        fprintf(f, "data-digest = %s\n", p->data_digest ? "crc32c" : "none");
}

static void write_alua(FILE *f, const struct target_alua_conf *a)
{
    fprintf(f, "alua-group = %u\n", (unsigned)(a->group ? a->group : 1));
    fprintf(f, "alua-state = %s\n", scsi_alua_state_name(a->state));
    for (unsigned i = 0; i < a->npeers; i++)
        fprintf(f, "alua-peer = %u:%s\n", (unsigned)a->peers[i].id,
                scsi_alua_state_name((enum scsi_alua_state)a->peers[i].state));
}

/* A value as the loader reads it back (config.c cfg_line): '#' after white space, and so a
 * '#' first in a value written after "key = ", starts a comment, and one pair of quotes around
 * a value is taken off. A value that begins with '#' or a quote, or begins or ends with white
 * space (both kept only inside quotes), goes out quoted; no loaded value holds white space
 * followed by '#'. */
static void write_value(FILE *f, const char *v)
{
    size_t n = strlen(v);
    bool quote = n && (v[0] == '#' || v[0] == '"' || isspace((unsigned char)v[0]) ||
                       isspace((unsigned char)v[n - 1]));
    fprintf(f, quote ? "\"%s\"\n" : "%s\n", v);
}

void target_conf_write_lun(FILE *f, const struct target_lun_conf *l)
{
    char spec[2048];
    if (target_lun_spec_format(l, spec, sizeof(spec)) < 0)
        snprintf(spec, sizeof(spec), "%s", l->bs_spec); /* cannot happen: specs are short */
    fprintf(f, "lun %llu = ", (unsigned long long)l->lun);
    write_value(f, spec);
}

void target_conf_write_section(FILE *f, const struct target_node_conf *c,
                               const struct target_section_defaults *inh)
{
    fprintf(f, "[target %s]\n", c->name);
    if (c->alias[0]) {
        fputs("alias = ", f);
        write_value(f, c->alias);
    }
    for (unsigned i = 0; i < c->nportals; i++)
        fprintf(f, "portal = %s\n", c->portals[i].text);
    for (unsigned i = 0; i < c->nluns; i++)
        target_conf_write_lun(f, &c->luns[i]);
    for (unsigned i = 0; i < c->nallow; i++)
        fprintf(f, "allow = %s\n", c->allow[i]);
    if (c->chap.user[0]) {
        fputs("chap-user = ", f);
        write_value(f, c->chap.user);
    }
    if (c->chap.mutual_user[0]) {
        fputs("chap-mutual-user = ", f);
        write_value(f, c->chap.mutual_user);
    }
    /* a loaded target's set is never 0: the global one (or all) unless it names its own */
    if (c->chap.algs && c->chap.algs != (inh->chap_algs ? inh->chap_algs : CHAP_ALGS_ALL))
        write_algs(f, c->chap.algs);
    write_params(f, &c->params, &inh->params);
    if (!target_alua_same(&c->alua, &inh->alua))
        write_alua(f, &c->alua);
    if (!c->warm_reset)
        fprintf(f, "target-warm-reset = no\n");
    if (c->cold_reset)
        fprintf(f, "target-cold-reset = yes\n");
}

void target_conf_write_globals(FILE *f, const struct target_config *cfg, enum log_level level)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    struct target_config def;
    target_config_init(&def);
    if (level != def.log_level)
        fprintf(f, "log-level = %s\n", levels[level]);
    if (cfg->log_syslog)
        fprintf(f, "log = syslog\n");
    if (cfg->threads)
        fprintf(f, "threads = %u\n", cfg->threads);
    if (cfg->poll_us != def.poll_us)
        fprintf(f, "poll-us = %u\n", cfg->poll_us);
    if (strcmp(cfg->state_dir, def.state_dir) != 0) {
        fputs("state-dir = ", f);
        write_value(f, cfg->state_dir);
    }
    if (cfg->ctl_socket_set)
        fprintf(f, "ctl-socket = %s\n", cfg->ctl_socket[0] ? cfg->ctl_socket : "none");
    if (cfg->metrics_on)
        fprintf(f, "metrics = %s\n", cfg->metrics.text);
    if (cfg->nop_interval_s != def.nop_interval_s)
        fprintf(f, "nop-interval = %u\n", cfg->nop_interval_s);
    if (cfg->nop_timeout_s != def.nop_timeout_s)
        fprintf(f, "nop-timeout = %u\n", cfg->nop_timeout_s);
    if (cfg->login_timeout_s != def.login_timeout_s)
        fprintf(f, "login-timeout = %u\n", cfg->login_timeout_s);
    if (cfg->rbd_timeout_s)
        fprintf(f, "rbd-timeout = %u\n", cfg->rbd_timeout_s);
    target_limits_write(f, &cfg->limits);
    if (cfg->chap_secrets[0]) {
        fputs("chap-secrets = ", f);
        write_value(f, cfg->chap_secrets);
    }
    if (cfg->discovery_chap.user[0]) {
        fputs("discovery-chap-user = ", f);
        write_value(f, cfg->discovery_chap.user);
    }
    if (cfg->discovery_chap.mutual_user[0]) {
        fputs("discovery-chap-mutual-user = ", f);
        write_value(f, cfg->discovery_chap.mutual_user);
    }
    if (cfg->chap_algs)
        write_algs(f, cfg->chap_algs);
    target_config_free(&def);
}
