/* What the table of keys (conf_keys_table.c) drives: finding a key, setting it from text,
 * writing it back, comparing two configurations for the reload, and listing the keys for
 * --help and --list-keys. */
#include "daemon/conf_keys.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/size.h"

const struct conf_key *conf_key_find(const char *name)
{
    /* "lun 3 = SPEC": the numbered form of lun */
    if (strncmp(name, "lun ", 4) == 0)
        name = "lun";
    for (size_t i = 0; i < conf_nkeys; i++)
        if (strcmp(conf_keys[i].name, name) == 0)
            return &conf_keys[i];
    return NULL;
}

const struct conf_key *conf_key_by_flag(const char *flag)
{
    for (size_t i = 0; i < conf_nkeys; i++)
        if (conf_keys[i].flag && strcmp(conf_keys[i].flag, flag) == 0)
            return &conf_keys[i];
    return NULL;
}

int conf_parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    for (unsigned i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

int conf_parse_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t x;
    if (size_parse(v, &x) < 0 || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* The object a row's value is in, or NULL when o has none (the global section's writer has
 * no session keys, for one). */
static void *base_of(const struct conf_key *k, const struct conf_obj *o)
{
    switch (k->where) {
    case CONF_IN_CFG:
        return o->cfg;
    case CONF_IN_LIMITS:
        return o->cfg ? &o->cfg->limits : NULL;
    case CONF_IN_PARAMS:
        return o->params;
    case CONF_IN_NODE:
        return o->node;
    case CONF_IN_NONE:
        break;
    }
    return NULL;
}

static uint64_t get_num(const struct conf_key *k, const void *base)
{
    const char *p = (const char *)base + k->off;
    switch (k->width) {
    case 1:
        return *(const bool *)p;
    case 4:
        return *(const uint32_t *)p;
    default:
        return *(const uint64_t *)p;
    }
}

static void put_num(const struct conf_key *k, void *base, uint64_t v)
{
    char *p = (char *)base + k->off;
    switch (k->width) {
    case 1:
        *(bool *)p = v != 0;
        break;
    case 4:
        *(uint32_t *)p = (uint32_t)v;
        break;
    default:
        *(uint64_t *)p = v;
        break;
    }
}

int conf_key_set(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                 size_t errlen)
{
    if (k->set)
        return k->set(k, o, val, err, errlen);
    void *base = base_of(k, o);
    if (!base) {
        snprintf(err, errlen, "'%s' cannot be set here", k->name);
        return -1;
    }
    if (k->type == CONF_BOOL) {
        bool b;
        if (conf_parse_bool(val, &b) < 0) {
            snprintf(err, errlen, "bad value '%s' for %s: expected yes or no", val, k->name);
            return -1;
        }
        put_num(k, base, b);
        return 0;
    }
    uint64_t x;
    if (conf_parse_uint(val, k->lo, k->hi, &x) < 0) {
        snprintf(err, errlen, "bad value '%s' for %s: expected %s%llu..%llu", val, k->name,
                 k->type == CONF_SECONDS ? "seconds, " : "", (unsigned long long)k->lo,
                 (unsigned long long)k->hi);
        return -1;
    }
    put_num(k, base, x);
    return 0;
}

void conf_key_text(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len)
{
    buf[0] = '\0';
    if (k->type == CONF_LIST)
        return;
    if (k->type == CONF_TEXT) {
        if (k->fmt && (k->where == CONF_IN_NONE || base_of(k, o)))
            k->fmt(k, o, buf, len);
        return;
    }
    const void *base = base_of(k, o);
    if (!base)
        return;
    uint64_t v = get_num(k, base);
    if (k->type == CONF_BOOL)
        snprintf(buf, len, "%s", v ? "yes" : "no");
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* The built-in defaults, as a daemon started without a file has them. */
struct conf_defaults {
    struct target_config cfg;
    struct target_node_conf node;
    struct conf_obj o;
};

static void defaults_init(struct conf_defaults *d)
{
    target_config_init(&d->cfg);
    memset(&d->node, 0, sizeof(d->node));
    target_params_default(&d->node.params);
    d->node.warm_reset = true;
    d->o = (struct conf_obj){
        .cfg = &d->cfg, .node = &d->node, .params = &d->node.params, .alua = &d->node.alua};
}

void conf_key_default_text(const struct conf_key *k, char *buf, size_t len)
{
    if (k->shown_default) {
        snprintf(buf, len, "%s", k->shown_default);
        return;
    }
    struct conf_defaults d;
    defaults_init(&d);
    if (k->type == CONF_SIZE)
        target_size_text(get_num(k, base_of(k, &d.o)), buf, len);
    else
        conf_key_text(k, &d.o, buf, len);
    target_config_free(&d.cfg);
}

/* A value as the loader reads it back (config.c cfg_line): '#' after white space, and so a
 * '#' first in a value written after "key = ", starts a comment, and one pair of quotes around
 * a value is taken off. A value that begins with '#' or a quote, or begins or ends with white
 * space (both kept only inside quotes), goes out quoted; no loaded value holds white space
 * followed by '#'. */
void conf_write_value(FILE *f, const char *v)
{
    size_t n = strlen(v);
    bool quote = n && (v[0] == '#' || v[0] == '"' || isspace((unsigned char)v[0]) ||
                       isspace((unsigned char)v[n - 1]));
    fprintf(f, quote ? "\"%s\"\n" : "%s\n", v);
}

void conf_keys_write(FILE *f, unsigned where_mask, const struct conf_obj *o,
                     const struct conf_obj *inh)
{
    for (size_t i = 0; i < conf_nkeys; i++) {
        const struct conf_key *k = &conf_keys[i];
        if (!(where_mask & (1u << k->where)))
            continue;
        char v[1200], dv[1200];
        conf_key_text(k, o, v, sizeof(v));
        conf_key_text(k, inh, dv, sizeof(dv));
        if (!v[0] || strcmp(v, dv) == 0)
            continue;
        fprintf(f, "%s = ", k->name);
        conf_write_value(f, v);
    }
}

void conf_keys_diff(unsigned scope, const struct conf_obj *run, const struct conf_obj *file,
                    void (*add)(void *arg, const char *note), void *arg)
{
    const char *noted[32];
    unsigned nnoted = 0;
    for (size_t i = 0; i < conf_nkeys; i++) {
        const struct conf_key *k = &conf_keys[i];
        if (k->reload != CONF_RESTART || !(k->scope & scope))
            continue;
        if (k->cli_off && *(const bool *)((const char *)run->cfg + k->cli_off))
            continue; /* the command line set it, over the file */
        char a[1200], b[1200];
        conf_key_text(k, run, a, sizeof(a));
        conf_key_text(k, file, b, sizeof(b));
        if (strcmp(a, b) == 0)
            continue;
        bool seen = false;
        for (unsigned j = 0; j < nnoted && !seen; j++)
            seen = strcmp(noted[j], k->note) == 0;
        if (seen)
            continue;
        if (nnoted < sizeof(noted) / sizeof(noted[0]))
            noted[nnoted++] = k->note;
        add(arg, k->note);
    }
}

void conf_keys_list(FILE *f)
{
    static const char *const reload[] = {"restart", "live", "own"};
    for (size_t i = 0; i < conf_nkeys; i++) {
        const struct conf_key *k = &conf_keys[i];
        char def[256];
        conf_key_default_text(k, def, sizeof(def));
        static const char *const scopes[] = {
            "-",    "global",      "target",      "global,target",
            "host", "global,host", "target,host", "global,target,host"};
        fprintf(f, "%s\t%s\t%s\t%s\t%s%s\n", k->name, scopes[k->scope & 7u], reload[k->reload],
                def[0] ? def : "-", k->flag ? "--" : "-", k->flag ? k->flag : "");
    }
}

void conf_keys_help(FILE *f)
{
    for (size_t i = 0; i < conf_nkeys; i++) {
        const struct conf_key *k = &conf_keys[i];
        if (!k->flag || !k->help)
            continue;
        char head[96];
        int n = snprintf(head, sizeof(head), "  --%s%s%s", k->flag, k->flag_arg ? " " : "",
                         k->flag_arg ? k->flag_arg : "");
        /* the text at column 25, or on the next line when the option is longer */
        fprintf(f, "%s", head);
        if (n >= 24)
            fprintf(f, "  ");
        else
            fprintf(f, "%*s", 25 - n, "");
        for (const char *p = k->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n')
                fprintf(f, "%25s", "");
        }
        fputc('\n', f);
    }
}
