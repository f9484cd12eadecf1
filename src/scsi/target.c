/* Targets, LUNs and I_T nexuses: their lifetimes, the per-(LUN, nexus) unit attentions
 * (SAM-5 §5.14), the resets that raise them (SAM-5 §6.3), and SAM LUN addressing (§4.7). */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"
#include "util/log.h"

int scsi_target_init(struct scsi_target *t, const char *name, uint16_t tpgt)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->tpgt = tpgt;
    struct scsi_target_priv *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->next_nexus_id = 1;
    p->modules = scsi_lun_modules;
    t->priv = p;
    /* Every LUN number has its slot from the start, so a LUN added at run time never moves
     * the array under a reactor reading it (128 KiB of address space; pages are touched only
     * where LUNs are). */
    t->luns = calloc(SCSI_LUN_SLOTS, sizeof(*t->luns));
    if (!t->luns) {
        free(p);
        t->priv = NULL;
        return -ENOMEM;
    }
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

/* FNV-1a over target name and LUN: a stable identity for VPD 0x80/0x83, so an initiator's
 * multipath sees the same device across restarts. */
static uint64_t lun_hash(const char *name, uint64_t lun)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint8_t)(lun >> (8 * i))) * 0x100000001b3ull;
    return h;
}

static uint64_t lun_default_hash(const struct scsi_target *t, const struct scsi_lun_config *cfg)
{
    return cfg->bs->medium_id[0] ? lun_hash(cfg->bs->medium_id, 0) : lun_hash(t->name, cfg->lun);
}

uint8_t scsi_lun_naa(const struct scsi_target *t, const struct scsi_lun_config *cfg,
                     uint8_t naa[16])
{
    const struct scsi_lun_identity *id = &cfg->identity;
    assert(id->naa_len == 0 || id->naa_len == 8 || id->naa_len == 16);
    if (id->naa_len) {
        memcpy(naa, id->naa, id->naa_len);
        return id->naa_len;
    }
    uint64_t h = lun_default_hash(t, cfg);
    put_be64(naa, (3ull << 60) | (h & 0x0fffffffffffffffull)); /* NAA 3h: locally assigned */
    return 8;
}

/* What the LU tells hosts it is: the admin's identity, each field not set taking its default. A
 * store with an identity of its own (an RBD image id) names the LU by it, so every gateway
 * exporting that image reports the same NAA and serial (multipath joins the paths); otherwise
 * the target name and LUN number do. */
static void lun_identity(struct scsi_lun *lu, const struct scsi_target *t,
                         const struct scsi_lun_config *cfg)
{
    struct scsi_lun_identity *id = &lu->ident;
    *id = cfg->identity;
    uint64_t h = lun_default_hash(t, cfg);
    id->naa_len = scsi_lun_naa(t, cfg, id->naa);
    if (!id->serial[0])
        snprintf(id->serial, sizeof(id->serial), "%016" PRIx64, h);
    if (!id->vendor[0])
        snprintf(id->vendor, sizeof(id->vendor), "LINERATE");
    /* the store names the product (a RAM, null or file LUN says so) */
    if (!id->product[0])
        snprintf(id->product, sizeof(id->product), "%s",
                 cfg->bs->ops->product ? cfg->bs->ops->product : "linerate");
    if (!id->revision[0])
        snprintf(id->revision, sizeof(id->revision), "0001");
    if (!id->rotation)
        id->rotation = 1; /* non-rotating */
}

/* Each module's init in order; on a refusal, the ones before it are freed again. */
static int modules_init(struct scsi_lun *lu, const struct scsi_lun_config *cfg, char *err,
                        size_t errlen)
{
    const struct scsi_lun_hooks *const *m = lu->modules;
    for (size_t i = 0; m[i]; i++) {
        if (m[i]->init && m[i]->init(lu, cfg, err, errlen) < 0) {
            while (i-- > 0)
                if (m[i]->free)
                    m[i]->free(lu);
            return -1;
        }
    }
    return 0;
}

/* With the target lock: lu is no longer being added (scsi_target_priv.adding). */
static void adding_remove(struct scsi_target_priv *p, struct scsi_lun *lu)
{
    struct scsi_lun **pp = &p->adding;
    while (*pp != lu)
        pp = &(*pp)->adding_next;
    *pp = lu->adding_next;
    lu->adding_next = NULL;
}

int scsi_target_add_lun(struct scsi_target *t, const struct scsi_lun_config *cfg, char *err,
                        size_t errlen)
{
    uint32_t bsz = cfg->block_size ? cfg->block_size : 512;
    if (!cfg->bs) {
        snprintf(err, errlen, "LUN %" PRIu64 ": no backing store", cfg->lun);
        return -EINVAL;
    }
    if (bsz != 512 && bsz != 4096) {
        snprintf(err, errlen, "LUN %" PRIu64 ": block size %u (want 512 or 4096)", cfg->lun, bsz);
        return -EINVAL;
    }
    uint32_t pbs = cfg->phys_block_size;
    if (pbs && (pbs < bsz || pbs > 65536 || (pbs & (pbs - 1)))) {
        snprintf(err, errlen,
                 "LUN %" PRIu64 ": physical block size %u (want a power of two from %u to 65536)",
                 cfg->lun, pbs, bsz);
        return -EINVAL;
    }
    if (cfg->lun >= SCSI_LUN_SLOTS) {
        snprintf(err, errlen, "LUN %" PRIu64 ": above 16383 (flat space addressing)", cfg->lun);
        return -EINVAL;
    }
    if (cfg->bs->size < bsz) {
        snprintf(err, errlen, "LUN %" PRIu64 ": store smaller than one block", cfg->lun);
        return -EINVAL;
    }
    if (cfg->lun < t->nluns && t->luns[cfg->lun]) {
        snprintf(err, errlen, "LUN %" PRIu64 ": already configured", cfg->lun);
        return -EEXIST;
    }
    struct scsi_lun *lu = calloc(1, sizeof(*lu));
    if (!lu)
        goto nomem;
    lu->target = t;
    lu->id = cfg->lun;
    lu->bs = cfg->bs;
    lu->block_size = bsz;
    lu->block_shift = bsz == 4096 ? 12 : 9;
    lu->nblocks = cfg->bs->size >> lu->block_shift;
    lu->read_only = cfg->read_only;
    lu->removable = cfg->removable;
    lu->phys_exp = pbs ? (uint8_t)__builtin_ctz(pbs / bsz) : 0; /* a power of two, checked above */
    lu->sanitize_rate = cfg->sanitize_rate;
    rate_limit_init(&lu->limit, &cfg->limits);
    lu->stats = iostats_new(); /* NULL: the LUN works, its metrics read 0 */
    atomic_init(&lu->medium_absent, false);
    lu->mapped = bs_map_read(cfg->bs, 0, bsz) != NULL;
    atomic_init(&lu->wce, cfg->bs->write_cache);
    pthread_mutex_init(&lu->lock, NULL);
    scsi_rl_init(&lu->rl);
    atomic_init(&lu->aborting, 0);
    pthread_mutex_init(&lu->quiesce_lock, NULL);
    atomic_init(&lu->swp, false);
    atomic_init(&lu->sanitize, SANITIZE_IDLE);
    lun_identity(lu, t, cfg);
    struct scsi_target_priv *p = t->priv;
    lu->modules = p->modules;
    /* Listed as being added, with the per-nexus chunks of every slot used so far: a login
     * meanwhile gives it the chunk its slot needs too (nexus.c). */
    pthread_mutex_lock(&t->lock);
    int rc = scsi_lun_nexus_chunks(lu, p->nchunks);
    lu->adding_next = p->adding;
    p->adding = lu;
    pthread_mutex_unlock(&t->lock);
    if (rc < 0 || modules_init(lu, cfg, err, errlen) < 0) {
        pthread_mutex_lock(&t->lock);
        adding_remove(p, lu);
        pthread_mutex_unlock(&t->lock);
        scsi_lun_nexus_chunks_free(lu);
        pthread_mutex_destroy(&lu->quiesce_lock);
        pthread_mutex_destroy(&lu->lock);
        iostats_free(lu->stats);
        free(lu);
        if (rc < 0)
            goto nomem;
        return -EIO;
    }

    /* Every nexus already there meets this LUN for the first time. */
    pthread_mutex_lock(&t->lock);
    adding_remove(p, lu);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++)
        if (p->nexus[s])
            atomic_store_explicit(scsi_lun_ua(lu, s), UA_POWER_ON_RESET, memory_order_relaxed);
    /* Published whole (release), then the bound that lets readers look at it. */
    __atomic_store_n(&t->luns[cfg->lun], lu, __ATOMIC_RELEASE);
    if (cfg->lun >= t->nluns)
        __atomic_store_n(&t->nluns, (uint32_t)cfg->lun + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&t->lock);
    for (const struct scsi_lun_hooks *const *m = lu->modules; *m; m++)
        if ((*m)->start)
            (*m)->start(lu);
    return 0;
nomem:
    snprintf(err, errlen, "LUN %" PRIu64 ": out of memory", cfg->lun);
    return -ENOMEM;
}

void scsi_target_destroy(struct scsi_target *t)
{
    for (uint32_t i = 0; t->luns && i < t->nluns; i++)
        if (t->luns[i])
            scsi_lun_free(t->luns[i]);
    free(t->luns);
    t->luns = NULL;
    t->nluns = 0;
    struct scsi_target_priv *p = t->priv;
    if (p) {
        for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++)
            free(p->nexus[s]);
        scsi_host_table_free(t);
        free(p);
        t->priv = NULL;
    }
    pthread_mutex_destroy(&t->lock);
}

void scsi_lun_free(struct scsi_lun *lu)
{
    const struct scsi_lun_hooks *const *m = lu->modules;
    size_t n = 0;
    while (m[n])
        n++;
    for (size_t i = n; i-- > 0;) /* their work on the helper thread uses the store */
        if (m[i]->stop)
            m[i]->stop(lu);
    bs_close(lu->bs);
    for (size_t i = n; i-- > 0;)
        if (m[i]->free)
            m[i]->free(lu);
    scsi_rl_destroy(&lu->rl);
    assert(atomic_load(&lu->aborting) == 0 && !lu->quiesce_waiters);
    pthread_mutex_destroy(&lu->quiesce_lock);
    pthread_mutex_destroy(&lu->lock);
    iostats_free(lu->stats);
    scsi_lun_nexus_chunks_free(lu);
    free(lu);
}

/* --- blocking flush for shutdown --- */

struct flush_wait {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool done;
    int err;
};

static void flush_done(struct bs_io *io, int err)
{
    struct flush_wait *w = io->arg;
    pthread_mutex_lock(&w->m);
    w->done = true;
    w->err = err;
    pthread_cond_signal(&w->c);
    pthread_mutex_unlock(&w->m);
}

int scsi_lun_flush_sync(struct scsi_lun *lu)
{
    struct flush_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
    struct bs_io io = {.op = BS_FLUSH, .done = flush_done, .arg = &w};
    bs_submit(lu->bs, &io);
    pthread_mutex_lock(&w.m);
    while (!w.done)
        pthread_cond_wait(&w.c, &w.m);
    pthread_mutex_unlock(&w.m);
    return w.err;
}
