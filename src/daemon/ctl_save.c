/* linerate-ctl save: the running configuration (with what add/remove/set/resize and reload
 * changed) written back in the config file format. The daemon's --config file is the layout:
 * a line whose entry still holds is kept as it is (comments, blank lines, spelling, order), a
 * changed entry's line is rewritten in place (its indentation and trailing comment kept), a
 * gone entry's line is dropped, a new entry goes after its kind's last line in the section,
 * and a new target gets a section at the end. Written atomically: a temporary file in the same
 * directory, with the old file's mode and owner, loaded back and compared with what runs
 * before it is renamed over the old one. Control thread only. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "util/atomic_file.h"

enum line_kind { L_OTHER, L_SECTION, L_KEY };

struct sline {
    char *text; /* as read, without the newline */
    enum line_kind kind;
    int sec; /* section index, -1 in the global part */
    char key[64];
    char *val;
    uint64_t lun; /* a lun line's number, as the parser gives it */
    bool numbered;
    bool dead;
    unsigned entry;    /* in the doc's entry-th [host] / [group] entry (from 1); 0: none */
    bool entry_header; /* that entry's [host] / [group] line */
    bool entry_key;    /* one of its key lines */
    char *repl;        /* the line rewritten */
    char *after;       /* lines inserted after it, each ending in '\n' */
};

struct ssec {
    char name[ISCSI_NAME_MAX + 1];
    unsigned header, last_key;
    const struct target_node_conf *file; /* its target in the loaded file */
};

struct doc {
    struct sline *l;
    unsigned n;
    struct ssec *s;
    unsigned ns;
    char *head; /* inserted before the first line */
    unsigned changed, added, removed;
    /* in a [host] or [group] entry of the last target: its lines are the target's (dropped
     * with it) but kept as they are, and no new key of the target goes among them */
    bool in_entry;
    unsigned nentries;
};

static void doc_free(struct doc *d)
{
    for (unsigned i = 0; i < d->n; i++) {
        free(d->l[i].text);
        free(d->l[i].val);
        free(d->l[i].repl);
        free(d->l[i].after);
    }
    free(d->l);
    free(d->s);
    free(d->head);
}

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

/* Append formatted text to a malloc'd string (NULL = empty). false when out of memory. */
static bool str_add(char **dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool str_add(char **dst, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *add = vfmt(fmt, ap);
    va_end(ap);
    if (!add)
        return false;
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(add);
    char *n = realloc(*dst, a + b + 1);
    if (!n) {
        free(add);
        return false;
    }
    memcpy(n + a, add, b + 1);
    *dst = n;
    free(add);
    return true;
}

/* Where a line's comment starts (as the parser sees it: '#' at the start or after white
 * space), or NULL. */
static const char *comment_of(const char *s)
{
    for (const char *p = s; *p; p++)
        if (*p == '#' && (p == s || isspace((unsigned char)p[-1])))
            return p;
    return NULL;
}

/* Classify one line the way config.c's parser reads it (the file loaded already, so it is
 * well formed). */
static int classify(struct doc *d, struct sline *l, uint64_t *next_lun)
{
    char *copy = strdup(l->text);
    if (!copy)
        return -1;
    const char *c = comment_of(copy);
    if (c)
        copy[c - copy] = '\0';
    char *s = conf_trim(copy);
    l->kind = L_OTHER;
    l->sec = (int)d->ns - 1;
    if (*s == '[' && d->ns && (strncmp(s + 1, "host", 4) == 0 || strncmp(s + 1, "group", 5) == 0) &&
        isspace((unsigned char)s[strncmp(s + 1, "host", 4) == 0 ? 5 : 6])) {
        d->in_entry = true;
        l->entry = ++d->nentries;
        l->entry_header = true;
    } else if (d->in_entry && *s != '[') {
        /* an entry's key: kept unless edit_hosts says otherwise */
        l->entry = d->nentries;
        l->entry_key = *s && strchr(s, '=');
    } else if (*s == '[') {
        d->in_entry = false;
        size_t n = strlen(s);
        if (n && s[n - 1] == ']')
            s[n - 1] = '\0';
        char *body = conf_trim(s + 1);
        char *name = conf_trim(body + (strncmp(body, "target", 6) == 0 ? 6 : 0));
        struct ssec *g = realloc(d->s, (d->ns + 1) * sizeof(*g));
        if (!g) {
            free(copy);
            return -1;
        }
        d->s = g;
        memset(&g[d->ns], 0, sizeof(g[0]));
        snprintf(g[d->ns].name, sizeof(g[d->ns].name), "%s", name);
        g[d->ns].header = g[d->ns].last_key = (unsigned)(l - d->l);
        d->ns++;
        l->kind = L_SECTION;
        l->sec = (int)d->ns - 1;
        *next_lun = 0;
    } else if (*s && strchr(s, '=')) {
        char *eq = strchr(s, '=');
        *eq = '\0';
        char *key = conf_trim(s), *val = conf_trim(eq + 1);
        for (char *p = key; *p; p++)
            *p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        l->kind = L_KEY;
        snprintf(l->key, sizeof(l->key), "%s", key);
        l->val = strdup(val);
        if (!l->val) {
            free(copy);
            return -1;
        }
        if (strcmp(key, "lun") == 0 || strncmp(key, "lun ", 4) == 0) {
            l->numbered = key[3] == ' ';
            l->lun = l->numbered ? strtoull(conf_trim(key + 4), NULL, 10) : *next_lun;
            *next_lun = l->lun + 1;
        }
        if (l->sec >= 0)
            d->s[l->sec].last_key = (unsigned)(l - d->l);
    }
    free(copy);
    return 0;
}

/* doc_read's progress through the file. */
struct doc_reader {
    struct doc *d;
    uint64_t next_lun;
};

static int doc_line(void *arg, char *line, size_t len, unsigned lineno)
{
    (void)len;
    (void)lineno;
    struct doc_reader *r = arg;
    struct doc *d = r->d;
    struct sline *g = realloc(d->l, (d->n + 1) * sizeof(*g));
    if (!g)
        return -1;
    d->l = g;
    struct sline *l = &d->l[d->n];
    memset(l, 0, sizeof(*l));
    l->text = strdup(line);
    if (!l->text)
        return -1;
    d->n++;
    return classify(d, l, &r->next_lun);
}

static int doc_read(struct doc *d, const char *path, char *err, size_t errlen)
{
    struct doc_reader r = {.d = d};
    int rc = target_config_read_lines(path, doc_line, &r);
    if (rc == TARGET_LINES_EOPEN || rc == TARGET_LINES_EREAD)
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else if (rc < 0)
        snprintf(err, errlen, "out of memory");
    return rc < 0 ? -1 : 0;
}

/* Rewrite line i as `key = value`, keeping its indentation and trailing comment. */
static bool rewrite(struct doc *d, unsigned i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool rewrite(struct doc *d, unsigned i, const char *fmt, ...)
{
    struct sline *l = &d->l[i];
    va_list ap;
    va_start(ap, fmt);
    char *body = vfmt(fmt, ap);
    va_end(ap);
    if (!body)
        return false;
    const char *t = l->text;
    size_t indent = strspn(t, " \t");
    const char *c = comment_of(t);
    free(l->repl);
    l->repl = NULL;
    /* the comment stays in its column if the new text leaves room */
    int pad = 2;
    if (c && (size_t)(c - t) > indent + strlen(body) + 1)
        pad = (int)((size_t)(c - t) - indent - strlen(body));
    bool ok = str_add(&l->repl, "%.*s%s%*s%s", (int)indent, t, body, c ? pad : 0, "", c ? c : "");
    free(body);
    if (!l->dead)
        d->changed++;
    return ok;
}

static void kill_line(struct doc *d, unsigned i)
{
    if (!d->l[i].dead)
        d->removed++;
    d->l[i].dead = true;
}

static bool insert_after(struct doc *d, unsigned i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool insert_after(struct doc *d, unsigned i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vfmt(fmt, ap);
    va_end(ap);
    if (!s)
        return false;
    bool ok = str_add(&d->l[i].after, "%s\n", s);
    free(s);
    d->added++;
    return ok;
}

static bool is_lun_key(const struct sline *l)
{
    return l->kind == L_KEY && (strcmp(l->key, "lun") == 0 || strncmp(l->key, "lun ", 4) == 0);
}

/* The last key line of section s for which `want` holds, or `fallback`. */
static unsigned last_line(const struct doc *d, unsigned s, bool (*want)(const struct sline *),
                          unsigned fallback)
{
    unsigned found = fallback;
    for (unsigned i = d->s[s].header + 1; i < d->n && d->l[i].kind != L_SECTION; i++)
        if (want(&d->l[i]))
            found = i;
    return found;
}

static bool is_portal(const struct sline *l)
{
    return l->kind == L_KEY && strcmp(l->key, "portal") == 0;
}

static bool is_allow(const struct sline *l)
{
    return l->kind == L_KEY && strcmp(l->key, "allow") == 0;
}

static bool is_alias(const struct sline *l)
{
    return l->kind == L_KEY && strcmp(l->key, "alias") == 0;
}

static bool is_alua_state(const struct sline *l)
{
    return l->kind == L_KEY && strcmp(l->key, "alua-state") == 0;
}

/* The last alua-peer line of section s for group id, or 0. */
static unsigned alua_peer_line(const struct doc *d, unsigned s, uint16_t id)
{
    unsigned found = 0;
    for (unsigned i = d->s[s].header + 1; i < d->n && d->l[i].kind != L_SECTION; i++) {
        const struct sline *l = &d->l[i];
        char *end;
        if (l->kind == L_KEY && strcmp(l->key, "alua-peer") == 0 &&
            strtoul(l->val, &end, 10) == id && *end == ':')
            found = i;
    }
    return found;
}

/* ALUA states changed live (ctl_alua.c; the groups cannot change live): the last line that
 * sets one rewritten, or a line after the header when the section inherits it (a section's
 * alua-state or alua-peer for one group overrides the global one for that group alone). */
static bool edit_alua(struct doc *d, unsigned s, const struct target_node_conf *r,
                      const struct target_node_conf *f)
{
    bool ok = true;
    unsigned hdr = d->s[s].header;
    if (r->alua.state != f->alua.state) {
        unsigned at = last_line(d, s, is_alua_state, 0);
        const char *name = scsi_alua_state_name(r->alua.state);
        ok = at ? rewrite(d, at, "alua-state = %s", name)
                : insert_after(d, hdr, "alua-state = %s", name);
    }
    for (unsigned i = 0; i < r->alua.npeers; i++) {
        const struct scsi_alua_group *g = &r->alua.peers[i];
        bool same = false;
        for (unsigned k = 0; k < f->alua.npeers; k++)
            same = same || (f->alua.peers[k].id == g->id && f->alua.peers[k].state == g->state);
        if (same)
            continue;
        unsigned at = alua_peer_line(d, s, g->id);
        const char *name = scsi_alua_state_name((enum scsi_alua_state)g->state);
        ok = ok && (at ? rewrite(d, at, "alua-peer = %u:%s", (unsigned)g->id, name)
                       : insert_after(d, hdr, "alua-peer = %u:%s", (unsigned)g->id, name));
    }
    return ok;
}

static const struct target_lun_conf *find_lun(const struct target_node_conf *c, uint64_t lun)
{
    for (unsigned i = 0; i < c->nluns; i++)
        if (c->luns[i].lun == lun)
            return &c->luns[i];
    return NULL;
}

/* The entry of c with h's kind and name, NULL if none. */
static const struct target_host_conf *entry_like(const struct target_node_conf *c,
                                                 const struct target_host_conf *h)
{
    for (unsigned i = 0; i < c->nhosts; i++) {
        const struct target_host_conf *o = &c->hosts[i];
        if (o->group == h->group &&
            (h->group ? strcmp(o->group_name, h->group_name) == 0
                      : strcasecmp(o->initiators[0], h->initiators[0]) == 0))
            return o;
    }
    return NULL;
}

static bool entry_same(const struct target_host_conf *a, const struct target_host_conf *b)
{
    struct target_node_conf x = {.hosts = (struct target_host_conf *)a, .nhosts = 1};
    struct target_node_conf y = {.hosts = (struct target_host_conf *)b, .nhosts = 1};
    return ctl_hosts_same(&x, &y);
}

/* h's lines inserted after line at, one by one, after a blank one. */
static bool insert_entry(struct doc *d, unsigned at, const struct target_host_conf *h)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return false;
    target_conf_write_host(m, h);
    if (fclose(m) != 0) {
        free(text);
        return false;
    }
    bool ok = insert_after(d, at, "%s", ""); /* a blank line before it, as between entries */
    char *p = text;
    for (char *nl; ok && (nl = strchr(p, '\n')); p = nl + 1) {
        *nl = '\0';
        ok = insert_after(d, at, "%s", p);
    }
    free(text);
    return ok;
}

/* Whether key line l of an entry still holds in re (the entry as it runs). */
static bool entry_line_holds(const struct sline *l, const struct target_host_conf *re,
                             bool *kept_map, bool *kept_ini, bool *kept_user, bool *kept_mutual)
{
    if (strcmp(l->key, "map") == 0) {
        unsigned long long hl, lun;
        if (sscanf(l->val, "%llu %llu", &hl, &lun) != 2)
            return false;
        bool ro = strstr(l->val, ",ro") != NULL;
        for (unsigned m = 0; m < re->nmaps; m++)
            if (re->maps[m].host_lun == hl && re->maps[m].lun == lun &&
                re->maps[m].read_only == ro && !kept_map[m])
                return kept_map[m] = true;
        return false;
    }
    if (strcmp(l->key, "initiator") == 0) {
        for (unsigned k = 0; k < re->ninitiators; k++)
            if (strcasecmp(re->initiators[k], l->val) == 0 && !kept_ini[k])
                return kept_ini[k] = true;
        return false;
    }
    if (strcmp(l->key, "chap-user") == 0 && re->chap.user[0] && !*kept_user &&
        strcmp(l->val, re->chap.user) == 0)
        return *kept_user = true;
    if (strcmp(l->key, "chap-mutual-user") == 0 && re->chap.mutual_user[0] && !*kept_mutual &&
        strcmp(l->val, re->chap.mutual_user) == 0)
        return *kept_mutual = true;
    return false;
}

/* An entry's key line read into l->key and l->val as the parser reads them (classify keeps
 * them only for target keys): false when out of memory. */
static bool entry_kv(struct sline *l)
{
    char key[64] = "", *eq = strchr(l->text, '=');
    const char *t = l->text + strspn(l->text, " \t");
    size_t kl = eq ? (size_t)(eq - t) : 0;
    while (kl && isspace((unsigned char)t[kl - 1]))
        kl--;
    snprintf(key, sizeof(key), "%.*s", (int)kl, t);
    for (char *p = key; *p; p++)
        *p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
    snprintf(l->key, sizeof(l->key), "%s", key);
    if (l->val || !eq)
        return true;
    char *v = strdup(eq + 1);
    if (!v)
        return false;
    const char *c = comment_of(v);
    if (c)
        v[c - v] = '\0';
    char *t2 = conf_trim(v);
    size_t vl = strlen(t2);
    if (vl >= 2 && t2[0] == '"' && t2[vl - 1] == '"') {
        t2[vl - 1] = '\0';
        t2++;
    }
    l->val = strdup(t2);
    free(v);
    return l->val != NULL;
}

/* A changed entry (its header at line i, the same entry running as re): each key line that
 * still holds kept as it is (its comment with it), the others dropped, what is missing after
 * the entry's last kept line. */
static bool edit_entry(struct doc *d, unsigned i, unsigned end, const struct target_host_conf *re)
{
    bool *kept_map = calloc(re->nmaps + 1, sizeof(bool));
    bool *kept_ini = calloc(re->ninitiators + 1, sizeof(bool));
    bool kept_user = false, kept_mutual = false, ok = kept_map && kept_ini;
    unsigned at = i;
    for (unsigned j = i + 1; ok && j < end && d->l[j].entry == d->l[i].entry; j++) {
        struct sline *l = &d->l[j];
        if (!l->entry_key)
            continue;
        ok = entry_kv(l);
        if (ok && entry_line_holds(l, re, kept_map, kept_ini, &kept_user, &kept_mutual))
            at = j;
        else
            kill_line(d, j);
    }
    for (unsigned k = 0; ok && re->group && k < re->ninitiators; k++)
        if (!kept_ini[k])
            ok = insert_after(d, at, "initiator = %s", re->initiators[k]);
    for (unsigned m = 0; ok && m < re->nmaps; m++)
        if (!kept_map[m])
            ok = insert_after(d, at, "map = %llu %llu%s", (unsigned long long)re->maps[m].host_lun,
                              (unsigned long long)re->maps[m].lun,
                              re->maps[m].read_only ? ",ro" : "");
    /* (quoted as conf_write_value would: a name may start with '#' or '"') */
    const char *u = re->chap.user, *mu = re->chap.mutual_user;
    const char *q = strchr("#\"", u[0]) && u[0] ? "\"" : "",
               *mq = strchr("#\"", mu[0]) && mu[0] ? "\"" : "";
    if (ok && u[0] && !kept_user)
        ok = insert_after(d, at, "chap-user = %s%s%s", q, u, q);
    if (ok && mu[0] && !kept_mutual)
        ok = insert_after(d, at, "chap-mutual-user = %s%s%s", mq, mu, mq);
    free(kept_map);
    free(kept_ini);
    return ok;
}

/* The [host] / [group] entries of section s (the file's f->hosts, in the file's order) brought
 * to what runs (r, changed by linerate-ctl): an unchanged entry's lines kept as they are, a
 * changed one edited line by line (edit_entry), a gone one's header and keys dropped (its
 * comments stay), a new one at the end of the section. Last of the section's edits, so that a
 * new entry comes after every line a new target key was put after. */
static bool edit_hosts(struct doc *d, unsigned s, const struct target_node_conf *r,
                       const struct target_node_conf *f)
{
    if (ctl_hosts_same(r, f))
        return true;
    bool ok = true;
    unsigned hdr = d->s[s].header, end = hdr + 1, k = 0, last = hdr;
    while (end < d->n && d->l[end].kind != L_SECTION)
        end++;
    for (unsigned i = hdr + 1; i < end; i++) {
        const struct sline *l = &d->l[i];
        if (l->kind != L_OTHER || l->entry || l->text[strspn(l->text, " \t")] != '\0')
            last = i;
        if (!l->entry_header || k >= f->nhosts)
            continue;
        const struct target_host_conf *fe = &f->hosts[k++], *re = entry_like(r, fe);
        if (re && entry_same(re, fe))
            continue;
        if (re) {
            ok = ok && edit_entry(d, i, end, re);
            continue;
        }
        for (unsigned j = i; j < end && d->l[j].entry == l->entry; j++)
            if (d->l[j].entry_key || d->l[j].entry_header)
                kill_line(d, j);
    }
    for (unsigned i = 0; i < r->nhosts; i++)
        if (!entry_like(f, &r->hosts[i]))
            ok = ok && insert_entry(d, last, &r->hosts[i]);
    return ok;
}

/* Bring section s (its target in the file: f) to what runs (r). */
/* A LUN line the same but for its ALUA options (,alua= ,alua-peer=, changed live): rewritten
 * whole. (Other changes to a LUN line are edit_section's.) */
static bool edit_alua_luns(struct doc *d, unsigned s, const struct target_node_conf *r,
                           const struct target_node_conf *f)
{
    bool ok = true;
    for (unsigned i = d->s[s].header + 1; i < d->n && d->l[i].kind != L_SECTION; i++) {
        struct sline *l = &d->l[i];
        if (!is_lun_key(l))
            continue;
        const struct target_lun_conf *rl = find_lun(r, l->lun), *fl = find_lun(f, l->lun);
        if (!rl || !fl || !ctl_lun_conf_same(rl, fl) || target_alua_lun_same(rl, fl))
            continue;
        size_t len = strlen(rl->bs_spec) + 4096;
        char *spec = malloc(len);
        ok = ok && spec && target_lun_spec_format(rl, spec, len) == 0 &&
             rewrite(d, i, "lun %llu = %s", (unsigned long long)rl->lun, spec);
        free(spec);
        l->numbered = true;
    }
    return ok;
}

static bool edit_section(struct doc *d, unsigned s, const struct target_node_conf *r,
                         const struct target_node_conf *f)
{
    bool ok = true;
    unsigned hdr = d->s[s].header, end = hdr + 1;
    while (end < d->n && d->l[end].kind != L_SECTION)
        end++;

    /* alias: the last alias line wins in the parser */
    if (strcmp(r->alias, f->alias) != 0) {
        unsigned last = last_line(d, s, is_alias, 0);
        for (unsigned i = hdr + 1; i < end; i++)
            if (is_alias(&d->l[i]) && (i != last || !r->alias[0]))
                kill_line(d, i);
        if (r->alias[0])
            ok = ok && (last ? rewrite(d, last, "alias = %s", r->alias)
                             : insert_after(d, hdr, "alias = %s", r->alias));
    }

    /* portals: a section without portal lines takes the global ones */
    bool own_portals = last_line(d, s, is_portal, 0) != 0;
    bool same = r->nportals == f->nportals;
    for (unsigned i = 0; same && i < r->nportals; i++)
        same = target_node_has_portal(f, r->portals[i].text);
    if (!same && !own_portals) {
        for (unsigned i = 0; i < r->nportals; i++)
            ok = ok && insert_after(d, hdr, "portal = %s", r->portals[i].text);
    } else if (!same) {
        unsigned anchor = last_line(d, s, is_portal, hdr);
        for (unsigned i = hdr + 1; i < end; i++) {
            struct target_portal p;
            char why[256];
            if (is_portal(&d->l[i]) &&
                (target_parse_portal(d->l[i].val, &p, why, sizeof(why)) < 0 ||
                 !target_node_has_portal(r, p.text)))
                kill_line(d, i);
        }
        for (unsigned i = 0; i < r->nportals; i++)
            if (!target_node_has_portal(f, r->portals[i].text))
                ok = ok && insert_after(d, anchor, "portal = %s", r->portals[i].text);
    }

    /* allow entries */
    unsigned anchor = last_line(d, s, is_allow, d->s[s].last_key);
    for (unsigned i = hdr + 1; i < end; i++)
        if (is_allow(&d->l[i]) && !target_node_has_allow(r, d->l[i].val))
            kill_line(d, i);
    for (unsigned i = 0; i < r->nallow; i++)
        if (!target_node_has_allow(f, r->allow[i]))
            ok = ok && insert_after(d, anchor, "allow = %s", r->allow[i]);

    if (target_alua_same_groups(&r->alua, &f->alua))
        ok = edit_alua(d, s, r, f) && ok;
    ok = edit_alua_luns(d, s, r, f) && ok;

    /* LUNs: gone ones dropped, changed ones rewritten, new ones after the last lun line */
    anchor = last_line(d, s, is_lun_key, d->s[s].last_key);
    for (unsigned i = hdr + 1; i < end; i++) {
        struct sline *l = &d->l[i];
        if (!is_lun_key(l))
            continue;
        const struct target_lun_conf *rl = find_lun(r, l->lun), *fl = find_lun(f, l->lun);
        if (!rl) {
            kill_line(d, i);
        } else if (!fl || !ctl_lun_conf_same(rl, fl)) {
            char *spec = target_lun_spec_dup(rl); /* whole: a cut one is another LUN */
            ok = ok && spec && rewrite(d, i, "lun %llu = %s", (unsigned long long)rl->lun, spec);
            free(spec);
            l->numbered = true;
        }
    }
    for (unsigned i = 0; i < r->nluns; i++) {
        if (find_lun(f, r->luns[i].lun))
            continue;
        char *spec = target_lun_spec_dup(&r->luns[i]);
        ok = ok && spec &&
             insert_after(d, anchor, "lun %llu = %s", (unsigned long long)r->luns[i].lun, spec);
        free(spec);
    }
    /* An unnumbered line takes the number after the line before it: once a line before it is
     * gone, it says its number. */
    uint64_t next = 0;
    for (unsigned i = hdr + 1; i < end; i++) {
        struct sline *l = &d->l[i];
        if (!is_lun_key(l) || l->dead)
            continue;
        if (!l->numbered && next != l->lun) {
            ok = ok && rewrite(d, i, "lun %llu = %s", (unsigned long long)l->lun, l->val);
            l->numbered = true;
        }
        next = l->lun + 1;
    }
    return edit_hosts(d, s, r, f) && ok;
}

/* The lines of section s, with the comment lines right above its header (its heading). */
static void drop_section(struct doc *d, unsigned s)
{
    unsigned start = d->s[s].header;
    while (start > 0 && d->l[start - 1].kind == L_OTHER) {
        const char *t = d->l[start - 1].text + strspn(d->l[start - 1].text, " \t");
        if (*t != '#')
            break;
        start--;
    }
    for (unsigned i = start; i <= d->s[s].last_key; i++)
        kill_line(d, i);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static bool edit_globals(struct doc *d, const struct target_config *run,
                         const struct target_config *file)
{
    enum log_level lvl = log_get_level();
    if (run->cli_log_level || lvl == file->log_level)
        return true;
    unsigned last = 0, last_global = 0;
    bool found = false, any = false;
    for (unsigned i = 0; i < d->n && d->l[i].sec < 0; i++) {
        if (d->l[i].kind != L_KEY)
            continue;
        any = true;
        last_global = i;
        if (strcmp(d->l[i].key, "log-level") == 0) {
            found = true;
            last = i;
        }
    }
    if (found)
        return rewrite(d, last, "log-level = %s", level_names[lvl]);
    if (any)
        return insert_after(d, last_global, "log-level = %s", level_names[lvl]);
    d->added++;
    return str_add(&d->head, "log-level = %s\n", level_names[lvl]);
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The text of the saved file: the layout's lines edited, then the sections of targets the
 * file does not have. */
static char *render(struct doc *d, struct daemon *dm, const struct target_config *file,
                    const struct target_section_defaults *defs, bool have_layout)
{
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    if (!m)
        return NULL;
    if (!have_layout) {
        fprintf(m, "# linerate-target configuration, written by linerate-ctl save\n");
        target_conf_write_globals(m, &dm->cfg, log_get_level());
    }
    if (d->head)
        fputs(d->head, m);
    bool blank = have_layout; /* the last line written is empty (or none is) */
    for (unsigned i = 0; i < d->n; i++) {
        if (!d->l[i].dead) {
            const char *t = d->l[i].repl ? d->l[i].repl : d->l[i].text;
            fprintf(m, "%s\n", t);
            blank = t[strspn(t, " \t")] == '\0';
        }
        if (d->l[i].after) {
            fputs(d->l[i].after, m);
            blank = false;
        }
    }
    for (unsigned t = 0; t < dm->cfg.ntargets; t++) {
        const struct target_node_conf *r = &dm->cfg.targets[t];
        bool there = false;
        for (unsigned i = 0; i < file->ntargets && !there; i++)
            there = strcasecmp(file->targets[i].name, r->name) == 0;
        if (there || ctl_target_draining(dm, t))
            continue;
        if (!blank)
            fputc('\n', m);
        blank = false;
        target_conf_write_section(m, r, defs);
        d->added += 1 + r->nportals + r->nluns + r->nallow;
    }
    if (fclose(m) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* Where save writes: path (absolute), else the --config file; a symbolic link stays one (the
 * file it points to is what gets replaced). 0 with dest filled and *st / *exists set, or -1. */
static int save_dest(struct daemon *dm, const char *path, char dest[PATH_MAX], struct stat *st,
                     bool *exists, char *err, size_t errlen)
{
    if (!path)
        path = dm->cfg.config_path[0] ? dm->cfg.config_path : NULL;
    if (!path) {
        snprintf(err, errlen,
                 "the daemon was started without --config: name the file to save to "
                 "(linerate-ctl save FILE)");
        return -1;
    }
    if (path[0] != '/') {
        snprintf(err, errlen, "'%s': the file must be an absolute path", path);
        return -1;
    }
    if (!realpath(path, dest))
        snprintf(dest, PATH_MAX, "%s", path);
    *exists = stat(dest, st) == 0;
    if (*exists && !S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", dest);
        return -1;
    }
    return 0;
}

/* The text to save: the --config file's lines (layout, loaded into file and defs) edited to
 * what runs, then the sections of targets it does not have. NULL with err set. */
static char *save_text(struct daemon *dm, const char *layout, struct doc *doc,
                       struct target_config *file, struct target_section_defaults *defs, char *err,
                       size_t errlen)
{
    if (layout) {
        if (target_config_load_defaults(file, layout, defs, err, errlen) < 0) {
            char why[1024];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, errlen,
                     "the config file no longer loads, so its layout cannot be kept: %s", why);
            return NULL;
        }
        if (doc_read(doc, layout, err, errlen) < 0)
            return NULL;
    }
    /* (without a layout, render writes every global key, the log level among them) */
    bool ok = !layout || edit_globals(doc, &dm->cfg, file);
    for (unsigned s = 0; ok && s < doc->ns; s++) {
        const struct target_node_conf *f = NULL, *r = NULL;
        for (unsigned i = 0; i < file->ntargets && !f; i++)
            if (strcasecmp(file->targets[i].name, doc->s[s].name) == 0)
                f = &file->targets[i];
        /* A draining target (a reload dropped it) is on its way out: not saved. */
        for (unsigned i = 0; i < dm->cfg.ntargets && !r; i++)
            if (strcasecmp(dm->cfg.targets[i].name, doc->s[s].name) == 0 &&
                !ctl_target_draining(dm, i))
                r = &dm->cfg.targets[i];
        if (!f)
            continue; /* cannot be: the file loaded */
        if (!r)
            drop_section(doc, s);
        else
            ok = edit_section(doc, s, r, f);
    }
    char *text = ok ? render(doc, dm, file, defs, layout != NULL) : NULL;
    if (!text)
        snprintf(err, errlen, "out of memory");
    return text;
}

/* Atomically: a temporary file beside dest (the naming of atomic_file.h, whose sweep first
 * removes what a save cut by a crash left), with the old file's mode and owner, written and
 * synced. 0 with its name in tmp, or -1 (tmp "" when none was made). */
static int save_tmp(const char *dest, const struct stat *st, bool exists, const char *text,
                    char tmp[PATH_MAX], char *err, size_t errlen)
{
    atomic_file_sweep(dest);
    char dircopy[PATH_MAX], basecopy[PATH_MAX];
    snprintf(dircopy, sizeof(dircopy), "%s", dest);
    snprintf(basecopy, sizeof(basecopy), "%s", dest);
    const char *dir = dirname(dircopy), *base = basename(basecopy);
    snprintf(tmp, PATH_MAX, "%s/.%s.XXXXXX", dir, base);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
        tmp[0] = '\0';
        return -1;
    }
    mode_t mode = exists ? st->st_mode & 07777 : 0644;
    if (fchmod(fd, mode) < 0 ||
        (exists && fchown(fd, st->st_uid, st->st_gid) < 0 && errno != EPERM) ||
        write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* What was written must load and match what runs, or the old file stays; then it replaces
 * dest. The differences that remain (save_text cannot write them) in *diffs. */
static int save_commit(struct daemon *dm, const char *layout, const char *dest, char *tmp,
                       json_t **diffs, char *err, size_t errlen)
{
    struct target_config saved;
    target_config_init(&saved);
    char why[1024];
    if (target_config_load(&saved, tmp, why, sizeof(why)) < 0) {
        target_config_free(&saved);
        /* The reason names the temporary file, which is gone by now: name the user's. */
        size_t tl = strlen(tmp);
        const char *rest = strncmp(why, tmp, tl) == 0 ? why + tl : NULL;
        if (rest)
            snprintf(err, errlen, "what runs cannot be saved: %s%s (as written); %s left as it was",
                     dest, rest, dest);
        else
            snprintf(err, errlen, "what runs cannot be saved: %s; %s left as it was", why, dest);
        return -1;
    }
    *diffs = json_array();
    ctl_config_diff(dm, &saved, *diffs);
    if (rename(tmp, dest) < 0) {
        target_config_free(&saved);
        snprintf(err, errlen, "cannot replace %s: %s", dest, strerror(errno));
        json_decref(*diffs);
        return -1;
    }
    tmp[0] = '\0';
    /* Saved into the --config file: what runs is in the file now, nothing of it is a live
     * change a reload would have to keep (ctl_reload.c). */
    char creal[PATH_MAX];
    if (layout && realpath(layout, creal) && strcmp(creal, dest) == 0) {
        target_config_free(&dm->file_cfg);
        dm->file_cfg = saved;
    } else {
        target_config_free(&saved);
    }
    char dircopy[PATH_MAX];
    snprintf(dircopy, sizeof(dircopy), "%s", dest);
    int dfd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* the rename itself survives a crash */
        close(dfd);
    }
    return 0;
}

json_t *ctl_save(struct daemon *dm, const char *path, char *err, size_t errlen)
{
    const char *layout = dm->cfg.config_path[0] ? dm->cfg.config_path : NULL;
    char dest[PATH_MAX];
    struct stat st;
    bool exists;
    if (save_dest(dm, path, dest, &st, &exists, err, errlen) < 0)
        return NULL;
    struct doc doc = {0};
    struct target_config file;
    struct target_section_defaults defs;
    target_config_init(&file);
    target_params_default(&defs.params);
    memset(&defs.alua, 0, sizeof(defs.alua));
    defs.chap_algs = dm->cfg.chap_algs;
    json_t *res = NULL, *diffs = NULL;
    char tmp[PATH_MAX] = "";
    char *text = save_text(dm, layout, &doc, &file, &defs, err, errlen);
    if (text && save_tmp(dest, &st, exists, text, tmp, err, errlen) == 0 &&
        save_commit(dm, layout, dest, tmp, &diffs, err, errlen) == 0) {
        unsigned kept = 0;
        for (unsigned i = 0; i < doc.n; i++)
            kept += !doc.l[i].dead && !doc.l[i].repl;
        res = json_pack("{s:s, s:i, s:i, s:i, s:i, s:o}", "file", dest, "lines_kept", (int)kept,
                        "lines_changed", (int)doc.changed, "lines_added", (int)doc.added,
                        "lines_removed", (int)doc.removed, "differences", diffs);
        char qfile[2 * PATH_MAX + 3];
        LOG_INFO("event=config-saved file=%s kept=%u changed=%u added=%u removed=%u",
                 log_quote(qfile, sizeof(qfile), dest), kept, doc.changed, doc.added, doc.removed);
        size_t i;
        json_t *v;
        json_array_foreach(diffs, i, v)
            LOG_WARN("save: %s still differs from what runs: %s", dest, json_string_value(v));
    }
    if (tmp[0])
        unlink(tmp);
    free(text);
    doc_free(&doc);
    target_config_free(&file);
    return res;
}
