/* Turns a target_config into live objects: opens every backing store (bs_open_spec), builds one
 * SCSI target per node with its LUNs, and the iSCSI node the engine serves (portals, ACL,
 * session parameters). Also flushes and tears them down at shutdown. */
#include "daemon/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bs/bs.h"

void target_node_free(struct iscsi_node *n)
{
    if (!n)
        return;
    free(n->portals);
    free(n->allow);
    if (n->hosts)
        chap_wipe(n->hosts, n->nhosts * sizeof(*n->hosts));
    free(n->hosts);
    pthread_mutex_destroy(&n->access_lock);
    chap_wipe(&n->chap, sizeof(n->chap));
    free(n);
}

/* Each initiator of each entry (a group's members one by one) with the entry's CHAP. */
static int node_make_hosts(struct iscsi_node *n, const struct target_node_conf *c)
{
    unsigned total = 0;
    for (unsigned i = 0; i < c->nhosts; i++)
        total += c->hosts[i].ninitiators;
    if (!total)
        return 0;
    n->hosts = calloc(total, sizeof(*n->hosts));
    if (!n->hosts)
        return -1;
    for (unsigned i = 0; i < c->nhosts; i++)
        for (unsigned a = 0; a < c->hosts[i].ninitiators; a++) {
            struct iscsi_node_host *h = &n->hosts[n->nhosts++];
            snprintf(h->name, sizeof(h->name), "%s", c->hosts[i].initiators[a]);
            h->chap = c->hosts[i].chap;
        }
    return 0;
}

struct iscsi_node *target_node_make(const struct target_node_conf *c, struct scsi_target *scsi)
{
    struct iscsi_node *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    snprintf(n->name, sizeof(n->name), "%s", c->name);
    snprintf(n->alias, sizeof(n->alias), "%s", c->alias);
    iscsi_node_init_access(n);
    n->scsi = scsi;
    n->tpgt = target_alua_tpgt(c);
    n->params = c->params;
    n->chap = c->chap;
    n->warm_reset = c->warm_reset;
    n->cold_reset = c->cold_reset;
    n->portals = calloc(c->nportals ? c->nportals : 1, sizeof(*n->portals));
    n->allow = calloc(c->nallow ? c->nallow : 1, sizeof(*n->allow));
    if (!n->portals || !n->allow) {
        target_node_free(n);
        return NULL;
    }
    for (unsigned i = 0; i < c->nportals; i++) {
        snprintf(n->portals[i].text, sizeof(n->portals[i].text), "%s", c->portals[i].text);
        n->portals[i].tpgt = target_alua_tpgt(c);
    }
    n->nportals = c->nportals;
    if (c->nallow)
        memcpy(n->allow, c->allow, c->nallow * sizeof(*n->allow));
    n->nallow = c->nallow;
    if (node_make_hosts(n, c) < 0) {
        target_node_free(n);
        return NULL;
    }
    return n;
}

struct size_text {
    char s[32];
};

static struct size_text human_size(unsigned long long bytes)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    struct size_text t;
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(t.s, sizeof(t.s), u ? "%.4g %s" : "%.0f %s", v, units[u]);
    return t;
}

/* mkdir -p */
static int mkdir_p(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

struct bs *target_open_lun_store(const struct target_lun_conf *l, char *err, size_t errlen)
{
    return target_open_lun_store_ex(l, NULL, err, errlen);
}

struct bs *target_open_lun_store_ex(const struct target_lun_conf *l, bool *transient, char *err,
                                    size_t errlen)
{
    char reason[512] = "";
    char spec[1024];
    target_lun_open_spec(l, spec, sizeof(spec));
    struct bs *bs = bs_open_spec_ex(spec, transient, reason, sizeof(reason));
    if (!bs)
        snprintf(err, errlen, "%s: cannot open LUN %llu: %s", l->origin, (unsigned long long)l->lun,
                 reason[0] ? reason : "failed");
    return bs;
}

/* The LUN of scsi or of a target of built (NULL: none) whose NAA is naa; NULL if none. */
/* The LUN of the daemon, other than one on the medium `medium` (LUNs of one RBD image are one
 * LU, which every one of them names by the same NAA), that already has the NAA naa. */
static const struct scsi_lun *naa_holder(const struct scsi_target *scsi,
                                         const struct target_built *built, const uint8_t *naa,
                                         uint8_t len, const char *medium,
                                         const struct scsi_target **on)
{
    unsigned n = built ? built->n : 0;
    for (unsigned t = 0; t <= n; t++) {
        const struct scsi_target *tg = t < n ? built->scsi[t] : scsi;
        if (!tg || (t < n && tg == scsi))
            continue;
        for (uint32_t i = 0; i < tg->nluns; i++) {
            const struct scsi_lun *lu = scsi_target_lun((struct scsi_target *)tg, i);
            struct scsi_lun_info li;
            if (!lu)
                continue;
            scsi_lun_get_info(lu, &li);
            if (medium[0] && strcmp(li.medium_id, medium) == 0)
                continue;
            if (li.identity->naa_len == len && memcmp(li.identity->naa, naa, len) == 0) {
                *on = tg;
                return lu;
            }
        }
    }
    return NULL;
}

int target_add_lun_store(const char *state_dir, const char *target, const struct target_lun_conf *l,
                         struct bs *bs, struct scsi_target *scsi, const struct target_built *built,
                         char *err, size_t errlen)
{
    char reason[512] = "";
    char pr_path[512];
    if (state_dir)
        snprintf(pr_path, sizeof(pr_path), "%s/%s-lun%llu.pr", state_dir, target,
                 (unsigned long long)l->lun);
    struct scsi_lun_config lc = {.lun = l->lun,
                                 .bs = bs,
                                 .block_size = l->block_size,
                                 .read_only = l->read_only,
                                 .removable = l->removable,
                                 .phys_block_size = l->phys_block_size,
                                 .sanitize_rate = l->sanitize_rate,
                                 .pr_state_path = state_dir ? pr_path : NULL,
                                 .alua_state_set = l->alua_state_set,
                                 .alua_state = l->alua_state,
                                 .alua_npeers = l->alua_npeers,
                                 .identity = l->identity,
                                 .limits = l->limits};
    memcpy(lc.alua_peers, l->alua_peers, sizeof(lc.alua_peers));
    /* one NAA per LU in the daemon, whether set or made (a disk moved here with its old NAA
     * pinned, while a LUN still has it by default): hosts' multipath would join the two */
    uint8_t naa[16];
    uint8_t naa_len = scsi_lun_naa(scsi, &lc, naa);
    const struct scsi_target *on = NULL;
    const struct scsi_lun *holder = naa_holder(scsi, built, naa, naa_len, bs->medium_id, &on);
    if (holder) {
        struct scsi_lun_info li;
        scsi_lun_get_info(holder, &li);
        char hex[33];
        target_lun_naa_text(li.identity, hex, sizeof(hex));
        bs_close(bs);
        snprintf(err, errlen,
                 "%s: cannot add LUN %llu: its NAA %s (naa=) is already the NAA of target %s "
                 "LUN %llu: two LUNs may not share an NAA",
                 l->origin, (unsigned long long)l->lun, hex, on->name, (unsigned long long)li.lun);
        return -1;
    }
    int rc = scsi_target_add_lun(scsi, &lc, reason, sizeof(reason));
    if (rc < 0) {
        /* The LUN takes ownership of the store only on success. */
        bs_close(bs);
        snprintf(err, errlen, "%s: cannot add LUN %llu: %s", l->origin, (unsigned long long)l->lun,
                 reason[0] ? reason : strerror(-rc));
        return -1;
    }
    struct scsi_lun *lu = scsi_target_lun(scsi, l->lun);
    unsigned long long bytes = lu ? (unsigned long long)scsi_lun_size_bytes(lu) : 0;
    char pbs[48] = "";
    if (l->phys_block_size && l->phys_block_size != l->block_size)
        snprintf(pbs, sizeof(pbs), " (%u-byte physical)", l->phys_block_size);
    LOG_INFO("target %s: LUN %llu = %s, %llu bytes (%s), %u-byte blocks%s, %s%s", target,
             (unsigned long long)l->lun, l->bs_spec, bytes, human_size(bytes).s, l->block_size, pbs,
             l->read_only ? "read-only" : "read-write", l->removable ? ", removable" : "");
    return 0;
}

int target_build_lun_ex(const char *state_dir, const char *target, const struct target_lun_conf *l,
                        struct scsi_target *scsi, const struct target_built *built, bool *transient,
                        char *err, size_t errlen)
{
    struct bs *bs = target_open_lun_store_ex(l, transient, err, errlen);
    return bs ? target_add_lun_store(state_dir, target, l, bs, scsi, built, err, errlen) : -1;
}

int target_build_lun(const char *state_dir, const char *target, const struct target_lun_conf *l,
                     struct scsi_target *scsi, const struct target_built *built, char *err,
                     size_t errlen)
{
    return target_build_lun_ex(state_dir, target, l, scsi, built, NULL, err, errlen);
}

const char *target_state_dir(const struct target_config *cfg)
{
    /* APTPL needs somewhere to persist; without it the target refuses APTPL truthfully. */
    const char *state_dir = cfg->state_dir[0] ? cfg->state_dir : NULL;
    if (state_dir && mkdir_p(state_dir) < 0) {
        LOG_WARN("state directory %s: %s; persistent reservations will refuse APTPL", state_dir,
                 strerror(errno));
        state_dir = NULL;
    }
    return state_dir;
}

int target_build(const struct target_config *cfg, struct target_built *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof(*b));
    bool transient = false;
    const char *state_dir = target_state_dir(cfg);
    b->scsi = calloc(cfg->ntargets, sizeof(*b->scsi));
    b->nodes = calloc(cfg->ntargets, sizeof(*b->nodes));
    if (!b->scsi || !b->nodes) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (unsigned t = 0; t < cfg->ntargets; t++) {
        const struct target_node_conf *c = &cfg->targets[t];
        struct scsi_target *scsi = calloc(1, sizeof(*scsi));
        if (!scsi) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        int rc = scsi_target_init(scsi, c->name, target_alua_tpgt(c));
        if (rc < 0) {
            free(scsi);
            snprintf(err, errlen, "%s: cannot create target %s: %s", c->origin, c->name,
                     strerror(rc < -1 ? -rc : ENOMEM));
            goto fail;
        }
        target_alua_apply(c, scsi);
        b->scsi[t] = scsi;
        b->n = t + 1;
        char portals[512] = "";
        size_t off = 0;
        for (unsigned i = 0; i < c->nportals && off < sizeof(portals); i++)
            off += (size_t)snprintf(portals + off, sizeof(portals) - off, "%s%s", i ? " " : "",
                                    c->portals[i].text);
        LOG_INFO("target %s%s%s%s: portals %s, %u LUN%s, %s", c->name, c->alias[0] ? " (" : "",
                 c->alias, c->alias[0] ? ")" : "", portals, c->nluns, c->nluns == 1 ? "" : "s",
                 c->nhosts   ? "initiator entries"
                 : c->nallow ? "initiator allow-list"
                             : "open to every initiator");
        for (unsigned i = 0; i < c->nallow; i++)
            LOG_INFO("target %s: allow %s", c->name, c->allow[i]);
        for (unsigned i = 0; i < c->nhosts; i++)
            LOG_INFO("target %s: %s %s: %u initiator%s, %u LUN%s%s%s", c->name,
                     c->hosts[i].group ? "group" : "host",
                     c->hosts[i].group ? c->hosts[i].group_name : c->hosts[i].initiators[0],
                     c->hosts[i].ninitiators, c->hosts[i].ninitiators == 1 ? "" : "s",
                     c->hosts[i].nmaps, c->hosts[i].nmaps == 1 ? "" : "s",
                     c->hosts[i].chap.user[0] ? ", CHAP user " : "", c->hosts[i].chap.user);
        if (c->alua.group || c->alua.npeers) {
            char alua[512];
            target_alua_describe(c, alua, sizeof(alua));
            LOG_INFO("target %s: %s", c->name, alua);
        }
        for (unsigned i = 0; i < c->nluns; i++)
            if (target_build_lun_ex(state_dir, c->name, &c->luns[i], scsi, b, &transient, err,
                                    errlen) < 0)
                goto fail;
        if (target_hosts_apply(c, scsi, err, errlen) < 0)
            goto fail;
        b->nodes[t] = target_node_make(c, scsi);
        if (!b->nodes[t]) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    return 0;
fail:
    target_built_free(b);
    return transient ? -2 : -1;
}

int target_built_flush(struct target_built *b)
{
    int failed = 0;
    for (unsigned t = 0; t < b->n; t++) {
        struct scsi_target *s = b->scsi[t];
        for (uint32_t i = 0; s && i < s->nluns; i++) {
            if (!s->luns[i])
                continue;
            int rc = scsi_lun_flush_sync(s->luns[i]);
            if (rc < 0) {
                LOG_ERR("target %s: LUN %u: flush failed: %s", s->name, i, strerror(-rc));
                failed++;
            }
        }
    }
    return failed;
}

void target_built_free(struct target_built *b)
{
    for (unsigned t = 0; t < b->n; t++) {
        if (b->nodes)
            target_node_free(b->nodes[t]);
        if (b->scsi && b->scsi[t]) {
            scsi_target_destroy(b->scsi[t]);
            free(b->scsi[t]);
        }
    }
    free(b->nodes);
    free(b->scsi);
    memset(b, 0, sizeof(*b));
}
