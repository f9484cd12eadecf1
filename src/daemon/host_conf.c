/* The initiator entries of a target in the configuration (issue 29): a [host IQN] section for
 * one initiator, a [group NAME] section for several that share one map, each with its `map`
 * lines (which target LUN the host sees under which number, read-only or not) and its own CHAP
 * user. The sections follow their [target]; the checks that need the whole target (a map to a
 * LUN it lacks, a number twice, one initiator in two entries) run when it ends. Names are
 * checked by the caller (target_check_iscsi_name). */
#include "daemon/config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scsi/scsi.h"

struct target_host_conf *target_host_open(struct target_node_conf *n, bool group, const char *name,
                                          const char *origin, unsigned line, char *err,
                                          size_t errlen)
{
    if (group) {
        size_t len = strlen(name);
        bool ok = len > 0 && len <= TARGET_GROUP_NAME_MAX;
        for (size_t i = 0; ok && i < len; i++)
            ok = isalnum((unsigned char)name[i]) || strchr("-_.:", name[i]);
        if (!ok) {
            snprintf(err, errlen,
                     "bad group name '%s': 1..%d letters, digits and - _ . : characters", name,
                     TARGET_GROUP_NAME_MAX);
            return NULL;
        }
        for (unsigned i = 0; i < n->nhosts; i++)
            if (n->hosts[i].group && strcasecmp(n->hosts[i].group_name, name) == 0) {
                snprintf(err, errlen, "group %s is defined twice in target %s (first at %s)", name,
                         n->name, n->hosts[i].origin);
                return NULL;
            }
    }
    struct target_host_conf *grown = realloc(n->hosts, (n->nhosts + 1) * sizeof(*grown));
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n->hosts = grown;
    struct target_host_conf *h = &grown[n->nhosts++];
    memset(h, 0, sizeof(*h));
    h->group = group;
    snprintf(h->origin, sizeof(h->origin), "%s", origin);
    if (group) {
        snprintf(h->group_name, sizeof(h->group_name), "%s", name);
        return h;
    }
    if (target_host_add_initiator(h, name, line, err, errlen) < 0) {
        n->nhosts--;
        return NULL;
    }
    return h;
}

int target_host_add_initiator(struct target_host_conf *h, const char *iqn, unsigned line, char *err,
                              size_t errlen)
{
    char(*names)[ISCSI_NAME_MAX + 1] =
        realloc(h->initiators, (h->ninitiators + 1) * sizeof(*names));
    if (names)
        h->initiators = names;
    unsigned *lines = realloc(h->initiator_lines, (h->ninitiators + 1) * sizeof(*lines));
    if (lines)
        h->initiator_lines = lines;
    if (!names || !lines) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(names[h->ninitiators], sizeof(names[0]), "%s", iqn);
    lines[h->ninitiators++] = line;
    return 0;
}

/* A LUN number of the map line: digits only, 0..SCSI_LUN_SLOTS-1. */
static int map_number(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t x = 0;
    if (!isdigit((unsigned char)*s))
        return -1;
    for (; isdigit((unsigned char)*s); s++) {
        x = x * 10 + (uint64_t)(*s - '0');
        if (x >= SCSI_LUN_SLOTS)
            return -1;
    }
    *out = x;
    *p = s;
    return 0;
}

int target_host_map_line(struct target_host_conf *h, const char *val, unsigned line, char *err,
                         size_t errlen)
{
    struct target_host_map m = {.line = line};
    const char *p = val;
    bool ok = map_number(&p, &m.host_lun) == 0 && (*p == ' ' || *p == '\t');
    while (ok && (*p == ' ' || *p == '\t'))
        p++;
    ok = ok && map_number(&p, &m.lun) == 0;
    if (ok && strcmp(p, ",ro") == 0)
        m.read_only = true;
    else if (ok && *p)
        ok = false;
    if (!ok) {
        snprintf(err, errlen,
                 "bad map '%s': expected 'HOST-LUN TARGET-LUN' or 'HOST-LUN TARGET-LUN,ro' "
                 "(numbers 0..%u)",
                 val, SCSI_LUN_SLOTS - 1);
        return -1;
    }
    for (unsigned i = 0; i < h->nmaps; i++)
        if (h->maps[i].host_lun == m.host_lun) {
            snprintf(err, errlen, "host LUN %llu is mapped twice (first at line %u)",
                     (unsigned long long)m.host_lun, h->maps[i].line);
            return -1;
        }
    /* one number per LUN and host: a host seeing one logical unit twice takes the two for two
     * disks and writes each as if the other did not exist (scsi_target_host_map refuses it) */
    for (unsigned i = 0; i < h->nmaps; i++)
        if (h->maps[i].lun == m.lun) {
            snprintf(err, errlen, "LUN %llu is mapped twice for this entry (as %llu at line %u)",
                     (unsigned long long)m.lun, (unsigned long long)h->maps[i].host_lun,
                     h->maps[i].line);
            return -1;
        }
    struct target_host_map *grown = realloc(h->maps, (h->nmaps + 1) * sizeof(*grown));
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->maps = grown;
    grown[h->nmaps++] = m;
    return 0;
}

static bool node_has_lun(const struct target_node_conf *n, uint64_t lun)
{
    for (unsigned i = 0; i < n->nluns; i++)
        if (n->luns[i].lun == lun)
            return true;
    return false;
}

static const char *entry_name(const struct target_host_conf *h)
{
    return h->group ? h->group_name : h->initiators[0];
}

int target_hosts_check(const struct target_node_conf *n, const char *path, char *err, size_t errlen)
{
    /* The SCSI target's bounds (scsi.h): one entry per initiator, and a group's rows once per
     * member. Checked here so that what is admitted, saved and started with also maps. */
    unsigned long entries = 0, rows = 0;
    for (unsigned i = 0; i < n->nhosts; i++) {
        entries += n->hosts[i].ninitiators;
        rows += (unsigned long)n->hosts[i].ninitiators * n->hosts[i].nmaps;
    }
    if (entries > SCSI_HOST_ENTRIES_MAX || rows > SCSI_HOST_ROWS_MAX) {
        snprintf(err, errlen,
                 "%s: target %s: %lu initiators with entries and %lu mappings (a group's once "
                 "per member); the most a target has is %u and %u",
                 path, n->name, entries, rows, SCSI_HOST_ENTRIES_MAX, SCSI_HOST_ROWS_MAX);
        return -1;
    }
    for (unsigned i = 0; i < n->nhosts; i++) {
        const struct target_host_conf *h = &n->hosts[i];
        if (h->ninitiators == 0) {
            snprintf(err, errlen, "%s: group %s has no initiator (add 'initiator = IQN')",
                     h->origin, h->group_name);
            return -1;
        }
        for (unsigned m = 0; m < h->nmaps; m++)
            if (!node_has_lun(n, h->maps[m].lun)) {
                snprintf(err, errlen, "%s:%u: %s %s maps LUN %llu, which target %s does not have",
                         path, h->maps[m].line, h->group ? "group" : "host", entry_name(h),
                         (unsigned long long)h->maps[m].lun, n->name);
                return -1;
            }
        /* One initiator, one entry: two maps for one name would leave it to chance which
         * one the host gets. */
        for (unsigned a = 0; a < h->ninitiators; a++) {
            const char *iqn = h->initiators[a];
            for (unsigned j = 0; j <= i; j++) {
                const struct target_host_conf *o = &n->hosts[j];
                unsigned end = j == i ? a : o->ninitiators;
                for (unsigned b = 0; b < end; b++)
                    if (strcasecmp(o->initiators[b], iqn) == 0) {
                        snprintf(err, errlen,
                                 "%s:%u: initiator %s is in two entries of target %s (first "
                                 "at line %u)",
                                 path, h->initiator_lines[a], iqn, n->name, o->initiator_lines[b]);
                        return -1;
                    }
            }
            /* allow and entries both admit: an entry the allow list shuts out is a mistake */
            bool allowed = n->nallow == 0;
            for (unsigned k = 0; !allowed && k < n->nallow; k++)
                allowed = strcasecmp(n->allow[k], iqn) == 0;
            if (!allowed) {
                snprintf(err, errlen,
                         "%s:%u: initiator %s has an entry but target %s's allow list does not "
                         "admit it (add 'allow = %s', or drop the allow lines: the entries "
                         "alone admit their initiators)",
                         path, h->initiator_lines[a], iqn, n->name, iqn);
                return -1;
            }
        }
    }
    return 0;
}

const struct target_host_conf *target_host_find(const struct target_node_conf *n, const char *iqn)
{
    for (unsigned i = 0; i < n->nhosts; i++)
        for (unsigned a = 0; a < n->hosts[i].ninitiators; a++)
            if (strcasecmp(n->hosts[i].initiators[a], iqn) == 0)
                return &n->hosts[i];
    return NULL;
}

const struct target_host_conf *target_host_mapping(const struct target_node_conf *n, uint64_t lun)
{
    for (unsigned i = 0; i < n->nhosts; i++)
        for (unsigned m = 0; m < n->hosts[i].nmaps; m++)
            if (n->hosts[i].maps[m].lun == lun)
                return &n->hosts[i];
    return NULL;
}

static void host_free(struct target_host_conf *h)
{
    free(h->initiators);
    free(h->initiator_lines);
    free(h->maps);
    chap_wipe(&h->chap, sizeof(h->chap));
}

void target_hosts_free(struct target_node_conf *n)
{
    for (unsigned i = 0; i < n->nhosts; i++)
        host_free(&n->hosts[i]);
    free(n->hosts);
    n->hosts = NULL;
    n->nhosts = 0;
}

int target_hosts_copy(struct target_node_conf *dst, const struct target_node_conf *src)
{
    target_hosts_free(dst);
    if (!src->nhosts)
        return 0;
    dst->hosts = calloc(src->nhosts, sizeof(*dst->hosts));
    if (!dst->hosts)
        return -1;
    for (unsigned i = 0; i < src->nhosts; i++) {
        const struct target_host_conf *s = &src->hosts[i];
        struct target_host_conf *d = &dst->hosts[i];
        *d = *s;
        d->initiators = malloc((s->ninitiators ? s->ninitiators : 1) * sizeof(*d->initiators));
        d->initiator_lines =
            malloc((s->ninitiators ? s->ninitiators : 1) * sizeof(*d->initiator_lines));
        d->maps = malloc((s->nmaps ? s->nmaps : 1) * sizeof(*d->maps));
        dst->nhosts = i + 1;
        if (!d->initiators || !d->initiator_lines || !d->maps) {
            target_hosts_free(dst);
            return -1;
        }
        memcpy(d->initiators, s->initiators, s->ninitiators * sizeof(*d->initiators));
        memcpy(d->initiator_lines, s->initiator_lines,
               s->ninitiators * sizeof(*d->initiator_lines));
        if (s->nmaps)
            memcpy(d->maps, s->maps, s->nmaps * sizeof(*d->maps));
    }
    return 0;
}

int target_hosts_apply(const struct target_node_conf *n, struct scsi_target *scsi, char *err,
                       size_t errlen)
{
    char reason[256];
    for (unsigned i = 0; i < n->nhosts; i++) {
        const struct target_host_conf *h = &n->hosts[i];
        /* a group: each member with the group's map (scsi.h leaves groups to the caller) */
        for (unsigned a = 0; a < h->ninitiators; a++) {
            const char *iqn = h->initiators[a];
            if (scsi_target_host_add(scsi, iqn, reason, sizeof(reason)) < 0)
                goto fail;
            for (unsigned m = 0; m < h->nmaps; m++)
                if (scsi_target_host_map(scsi, iqn, h->maps[m].host_lun, h->maps[m].lun,
                                         h->maps[m].read_only, reason, sizeof(reason)) < 0)
                    goto fail;
        }
        continue;
    fail:
        snprintf(err, errlen, "%s: %s", h->origin, reason);
        return -1;
    }
    return 0;
}
