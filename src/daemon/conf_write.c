/* The configuration model written back as config file text (linerate-ctl save): a LUN as the
 * spec `lun = ...` takes, a whole [target] section with its [host] / [group] entries, and the
 * global keys of a daemon started without a file. What is written loads back (config.c) into the
 * same model: the only reader is target_config_load, so every line here is one it parses. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

#include "daemon/conf_keys.h"

static void write_algs(FILE *f, const struct target_node_conf *c)
{
    const struct conf_key *k = conf_key_find("chap-algorithms");
    struct conf_obj o = {.node = (struct target_node_conf *)c};
    char v[128];
    k->fmt(k, &o, v, sizeof(v)); /* the target's own set (o has no global one) */
    fprintf(f, "chap-algorithms = %s\n", v);
}

static void write_alua(FILE *f, const struct target_alua_conf *a)
{
    fprintf(f, "alua-group = %u\n", (unsigned)(a->group ? a->group : 1));
    fprintf(f, "alua-state = %s\n", scsi_alua_state_name(a->state));
    for (unsigned i = 0; i < a->npeers; i++)
        fprintf(f, "alua-peer = %u:%s\n", (unsigned)a->peers[i].id,
                scsi_alua_state_name((enum scsi_alua_state)a->peers[i].state));
    if (a->explicit_alua)
        fprintf(f, "alua-explicit = yes\n");
    if (a->failover)
        fprintf(f, "alua-mode = failover\n");
    if (a->failover_hb_ms)
        fprintf(f, "failover-heartbeat = %ums\n", a->failover_hb_ms);
    if (a->failover_timeout_ms)
        fprintf(f, "failover-timeout = %ums\n", a->failover_timeout_ms);
}

void target_conf_write_lun(FILE *f, const struct target_lun_conf *l)
{
    char *spec = target_lun_spec_dup(l);
    fprintf(f, "lun %llu = ", (unsigned long long)l->lun);
    if (spec)
        conf_write_value(f, spec);
    else
        fputs("\n", f); /* out of memory: an empty spec, which the reload check refuses */
    free(spec);
}

/* An entry's caps, one "key = value" line each (",iops=500,burst=100ms" split up) */
static void write_host_limits(FILE *f, const struct rate_limit_conf *c)
{
    char text[256];
    if (target_lun_limits_format(c, text, sizeof(text)) < 0)
        return;
    char *save = NULL;
    for (char *tok = strtok_r(text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq) {
            *eq = '\0';
            fprintf(f, "%s = %s\n", tok, eq + 1);
        }
    }
}

void target_conf_write_host(FILE *f, const struct target_host_conf *h)
{
    if (h->group) {
        fprintf(f, "[group %s]\n", h->group_name);
        for (unsigned k = 0; k < h->ninitiators; k++)
            fprintf(f, "initiator = %s\n", h->initiators[k]);
    } else {
        fprintf(f, "[host %s]\n", h->initiators[0]);
    }
    for (unsigned m = 0; m < h->nmaps; m++)
        fprintf(f, "map = %llu %llu%s\n", (unsigned long long)h->maps[m].host_lun,
                (unsigned long long)h->maps[m].lun, h->maps[m].read_only ? ",ro" : "");
    if (h->chap.user[0]) {
        fputs("chap-user = ", f);
        conf_write_value(f, h->chap.user);
    }
    if (h->chap.mutual_user[0]) {
        fputs("chap-mutual-user = ", f);
        conf_write_value(f, h->chap.mutual_user);
    }
    write_host_limits(f, &h->limits);
}

/* The [host] / [group] entries, last: every key after the first entry is the entry's. */
static void write_hosts(FILE *f, const struct target_node_conf *c)
{
    for (unsigned i = 0; i < c->nhosts; i++)
        target_conf_write_host(f, &c->hosts[i]);
}

void target_conf_write_section(FILE *f, const struct target_node_conf *c,
                               const struct target_section_defaults *inh)
{
    fprintf(f, "[target %s]\n", c->name);
    if (c->alias[0]) {
        fputs("alias = ", f);
        conf_write_value(f, c->alias);
    }
    for (unsigned i = 0; i < c->nportals; i++)
        fprintf(f, "portal = %s\n", c->portals[i].text);
    for (unsigned i = 0; i < c->nluns; i++)
        target_conf_write_lun(f, &c->luns[i]);
    for (unsigned i = 0; i < c->nallow; i++)
        fprintf(f, "allow = %s\n", c->allow[i]);
    if (c->chap.user[0]) {
        fputs("chap-user = ", f);
        conf_write_value(f, c->chap.user);
    }
    if (c->chap.mutual_user[0]) {
        fputs("chap-mutual-user = ", f);
        conf_write_value(f, c->chap.mutual_user);
    }
    /* a loaded target's set is never 0: the global one (or all) unless it names its own */
    if (c->chap.algs && c->chap.algs != (inh->chap_algs ? inh->chap_algs : CHAP_ALGS_ALL))
        write_algs(f, c);
    /* the session keys that differ from the section's defaults, then target-*-reset */
    struct target_node_conf def_node;
    memset(&def_node, 0, sizeof(def_node));
    def_node.warm_reset = true;
    struct conf_obj o = {.node = (struct target_node_conf *)c,
                         .params = (struct iscsi_params *)&c->params};
    struct conf_obj d = {.node = &def_node, .params = (struct iscsi_params *)&inh->params};
    conf_keys_write(f, CONF_MASK(CONF_IN_PARAMS), &o, &d);
    if (!target_alua_same(&c->alua, &inh->alua))
        write_alua(f, &c->alua);
    conf_keys_write(f, CONF_MASK(CONF_IN_NODE), &o, &d);
    write_hosts(f, c);
}

void target_conf_write_globals(FILE *f, const struct target_config *cfg, enum log_level level)
{
    struct target_config run = *cfg, def; /* (run: a shallow copy, never freed) */
    run.log_level = level;
    target_config_init(&def);
    struct conf_obj o = {.cfg = &run}, d = {.cfg = &def};
    conf_keys_write(f, CONF_MASK(CONF_IN_CFG) | CONF_MASK(CONF_IN_LIMITS), &o, &d);
    target_config_free(&def);
}
