/* Targets, LUNs and I_T nexuses: their lifetimes, the per-(LUN, nexus) unit attentions
 * (SAM-5 §5.14), the resets that raise them (SAM-5 §6.3), and SAM LUN addressing (§4.7). */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
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
    if (pr_lun_init(lu, cfg->pr_state_path, err, errlen) < 0) {
        pthread_mutex_destroy(&lu->quiesce_lock);
        pthread_mutex_destroy(&lu->lock);
        iostats_free(lu->stats);
        free(lu);
        return -EIO;
    }
    /* A store with an identity of its own (an RBD image id) names the LU by it, so every
     * gateway exporting that image reports the same NAA and serial (multipath joins the
     * paths); otherwise the target name and LUN number do. */
    uint64_t h =
        cfg->bs->medium_id[0] ? lun_hash(cfg->bs->medium_id, 0) : lun_hash(t->name, cfg->lun);
    lu->naa = (3ull << 60) | (h & 0x0fffffffffffffffull); /* NAA 3: locally assigned */
    snprintf(lu->serial, sizeof(lu->serial), "%016" PRIx64, h);
    alua_lun_init(lu, cfg);

    /* Every nexus already there meets this LUN for the first time. */
    struct scsi_target_priv *p = t->priv;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++)
        atomic_init(&lu->ua[s], p->nexus[s] ? UA_POWER_ON_RESET : 0);
    /* Published whole (release), then the bound that lets readers look at it. */
    __atomic_store_n(&t->luns[cfg->lun], lu, __ATOMIC_RELEASE);
    if (cfg->lun >= t->nluns)
        __atomic_store_n(&t->nluns, (uint32_t)cfg->lun + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&t->lock);
    /* an RBD image resized by someone else raises CAPACITY DATA HAS CHANGED */
    scsi_lun_resize_watch(lu);
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
        free(p);
        t->priv = NULL;
    }
    pthread_mutex_destroy(&t->lock);
}

void scsi_lun_free(struct scsi_lun *lu)
{
    scsi_lun_resize_stop(lu); /* its job uses the store and the LUN */
    pr_lun_drain(lu);         /* its helper-thread jobs use the store */
    bs_close(lu->bs);
    pr_lun_free(lu);
    scsi_rl_destroy(&lu->rl);
    assert(atomic_load(&lu->aborting) == 0 && !lu->quiesce_waiters);
    pthread_mutex_destroy(&lu->quiesce_lock);
    pthread_mutex_destroy(&lu->lock);
    iostats_free(lu->stats);
    free(lu);
}

/* The data path's lookup: the slot array never moves, a LUN is published with release. */
struct scsi_lun *scsi_target_lun(struct scsi_target *t, uint64_t lun)
{
    return lun < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE)
               ? __atomic_load_n(&t->luns[lun], __ATOMIC_ACQUIRE)
               : NULL;
}

uint64_t scsi_lun_size_bytes(const struct scsi_lun *lu)
{
    return lu->nblocks << lu->block_shift;
}

uint64_t scsi_lun_id(const struct scsi_lun *lu)
{
    return lu->id;
}

/* --- nexuses --- */

/* RFC 7143 §4.2.7.1: the initiator port name is "<iSCSI name>,i,0x<ISID in hex>". Nexuses are
 * kept after their last put so a reinstated session finds its UAs (and later its reservations)
 * again; a slot whose nexus has no references is recycled only when all slots are taken. */
struct scsi_nexus *scsi_nexus_get(struct scsi_target *t, const char *initiator_name,
                                  const uint8_t isid[6])
{
    struct scsi_target_priv *p = t->priv;
    char port[256];
    snprintf(port, sizeof(port), "%.200s,i,0x%02x%02x%02x%02x%02x%02x", initiator_name, isid[0],
             isid[1], isid[2], isid[3], isid[4], isid[5]);

    pthread_mutex_lock(&t->lock);
    int free_slot = -1, idle_slot = -1;
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        struct scsi_nexus_impl *n = p->nexus[s];
        if (!n) {
            if (free_slot < 0)
                free_slot = (int)s;
        } else if (strcmp(n->pub.initiator_port, port) == 0) {
            n->refs++;
            n->lost = false;
            pthread_mutex_unlock(&t->lock);
            return &n->pub;
        } else if (n->refs == 0 && idle_slot < 0) {
            idle_slot = (int)s;
        }
    }
    int slot = free_slot >= 0 ? free_slot : idle_slot;
    struct scsi_nexus_impl *n = NULL;
    if (slot >= 0) {
        if (p->nexus[slot]) {
            n = p->nexus[slot]; /* recycle the idle one: it forgets its state */
            memset(n, 0, sizeof(*n));
        } else {
            n = calloc(1, sizeof(*n));
        }
    }
    if (n) {
        n->slot = (unsigned)slot;
        snprintf(n->pub.initiator_port, sizeof(n->pub.initiator_port), "%s", port);
        snprintf(n->pub.initiator_name, sizeof(n->pub.initiator_name), "%s", initiator_name);
        n->pub.id = p->next_nexus_id++;
        n->refs = 1;
        n->pub.target = t;
        p->nexus[slot] = n;
        /* A new I_T nexus starts with a power-on/reset UA on every LUN (SAM-5 §5.14). */
        for (uint32_t i = 0; i < t->nluns; i++)
            if (t->luns[i])
                atomic_store(&t->luns[i]->ua[slot], UA_POWER_ON_RESET);
    }
    pthread_mutex_unlock(&t->lock);
    return n ? &n->pub : NULL;
}

/* With the target lock: whether I_T nexus loss is still to be done for n, which it now is. */
static bool nexus_loss_due_locked(struct scsi_nexus_impl *n)
{
    bool due = !n->lost;
    n->lost = true;
    return due;
}

void scsi_nexus_put(struct scsi_nexus *n)
{
    if (!n)
        return;
    struct scsi_target *t = n->target;
    pthread_mutex_lock(&t->lock);
    struct scsi_nexus_impl *ni = scsi_nexus_impl(n);
    bool due = --ni->refs == 0 && nexus_loss_due_locked(ni);
    pthread_mutex_unlock(&t->lock);
    if (due)
        scsi_nexus_lost(n);
}

void scsi_nexus_logout(struct scsi_nexus *n)
{
    struct scsi_target *t = n->target;
    pthread_mutex_lock(&t->lock);
    struct scsi_nexus_impl *ni = scsi_nexus_impl(n);
    bool due = ni->refs == 1 && nexus_loss_due_locked(ni);
    pthread_mutex_unlock(&t->lock);
    if (due)
        scsi_nexus_lost(n);
}

void scsi_nexus_lost(struct scsi_nexus *n)
{
    xcopy_nexus_lost(n);
    struct scsi_target *t = n->target;
    /* Without the target lock, on a reactor (the session's last put) while the control
     * thread adds and detaches LUNs: the slots are read as the data path reads them
     * (scsi_target_lun), and a detached LUN is freed only after every reactor's turn. */
    for (uint32_t i = 0; i < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE); i++) {
        struct scsi_lun *lu = scsi_target_lun(t, i);
        if (lu) {
            pr_spc2_release_nexus(lu, n);
            sbc_prevent_clear_nexus(lu, n); /* SPC-4 §6.13 */
        }
    }
}

void scsi_nexus_loss_ua(struct scsi_nexus *n)
{
    struct scsi_target *t = n->target;
    unsigned slot = scsi_nexus_slot(n);
    /* under the target lock, as scsi_target_add_lun sets a new LUN's UAs */
    pthread_mutex_lock(&t->lock);
    for (uint32_t i = 0; i < t->nluns; i++)
        if (t->luns[i])
            scsi_ua_raise(t->luns[i], slot, UA_NEXUS_LOSS);
    pthread_mutex_unlock(&t->lock);
}

/* --- unit attentions --- */

void scsi_ua_raise(struct scsi_lun *lu, unsigned slot, unsigned bits)
{
    if (bits & UA_RESETS) {
        /* A reset supersedes the conditions it found pending (SAM-5 §5.14: the reset UA is
         * reported and the older ones are cleared with the state they described). */
        atomic_store(&lu->ua[slot], bits);
        return;
    }
    if (bits & UA_NEXUS_LOSS) {
        /* A pending power-on or reset UA already tells the initiator that everything an I_T
         * nexus loss clears is gone (SAM-5 §6.3.1: a reset does all a nexus loss does and
         * more), so 29h/07h after it would report the same event twice. */
        unsigned v = atomic_load(&lu->ua[slot]);
        do {
            if (v & UA_RESETS)
                return;
        } while (!atomic_compare_exchange_weak(&lu->ua[slot], &v, v | bits));
        return;
    }
    atomic_fetch_or(&lu->ua[slot], bits);
}

void scsi_ua_raise_all(struct scsi_lun *lu, const struct scsi_nexus *skip, unsigned bits)
{
    struct scsi_target *t = lu->target;
    struct scsi_target_priv *p = t->priv;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        if (!p->nexus[s] || (skip && &p->nexus[s]->pub == skip))
            continue;
        scsi_ua_raise(lu, s, bits);
    }
    pthread_mutex_unlock(&t->lock);
}

/* by bit number of the UA_* bits */
static const scsi_sr ua_reason[] = {
    SR_UA_POWER_ON_RESET, SR_UA_POWER_ON,         SR_UA_BUS_DEVICE_RESET, SR_UA_NEXUS_LOSS,
    SR_UA_MODE_CHANGED,   SR_UA_CAPACITY_CHANGED, SR_UA_COMMANDS_CLEARED, SR_UA_LUNS_CHANGED,
    SR_UA_RESV_PREEMPTED, SR_UA_RESV_RELEASED,    SR_UA_REG_PREEMPTED,    SR_UA_ISCSI_CLEARED,
};

/* Lock-free: a compare-and-swap clears exactly the bit reported, so two connections of one
 * session (MC/S) racing here report it once. */
scsi_sr scsi_ua_take(struct scsi_lun *lu, const struct scsi_nexus *n)
{
    if (!n)
        return SR_OK;
    atomic_uint *w = &lu->ua[scsi_nexus_slot(n)];
    unsigned v = atomic_load_explicit(w, memory_order_acquire);
    while (v) {
        unsigned bit = v & -v;
        if (atomic_compare_exchange_weak(w, &v, v & ~bit))
            return ua_reason[__builtin_ctz(bit)];
    }
    return SR_OK;
}

/* A reset waited for by the transport: done once every LU it told other gateways of has
 * been acknowledged. All on the reactor that reset (the jobs come back there), so a plain
 * count: 1 for the resetting loop itself, 1 per LU told. */
struct reset_wait {
    unsigned left;
    void (*done)(void *arg);
    void *arg;
};

static void reset_wait_one(void *arg)
{
    struct reset_wait *w = arg;
    if (--w->left == 0) {
        w->done(w->arg);
        free(w);
    }
}

/* What a reset does here (ua: UA_BUS_DEVICE_RESET or UA_POWER_ON), then the other gateways of
 * a shared LU are told; w (NULL: nobody waits) counts them. */
static void lun_reset_one(struct scsi_lun *lu, unsigned ua, struct reset_wait *w)
{
    scsi_ua_raise_all(lu, NULL, ua);
    pr_spc2_release_all(lu); /* SPC-2 §5.5.1; persistent reservations survive (SPC-4 §5.13.1) */
    /* SPC-4 §6.13: a logical unit reset ends medium removal prevention */
    sbc_prevent_clear_all(lu);
    if (w) {
        w->left++;
        if (!pr_tell_reset(lu, ua, reset_wait_one, w))
            w->left--;
    } else {
        pr_tell_reset(lu, ua, NULL, NULL);
    }
}

/* true: done(arg) follows; false: nothing to wait for (w freed). */
static bool reset_wait_end(struct reset_wait *w)
{
    if (!w)
        return false;
    if (--w->left > 0)
        return true;
    free(w); /* every LU told finished already (no reactor), or none was told */
    return false;
}

/* SAM-5 §6.3.3: a logical unit reset establishes a UA for every I_T nexus, the requester's
 * included (LIO raises it device-wide too); BUS DEVICE RESET FUNCTION OCCURRED (29h/03h) is
 * the code SPC-4 gives a reset caused by a task management function. The I_T nexuses of the
 * LU are those of every gateway exporting it (they are target ports of one SCSI target
 * device: same LU designator, one target port group each), so a shared LU tells the others. */
bool scsi_lun_reset_wait(struct scsi_lun *lu, struct scsi_nexus *by, void (*done)(void *arg),
                         void *arg)
{
    (void)by;
    if (!lu)
        return false;
    struct reset_wait *w = done ? calloc(1, sizeof(*w)) : NULL;
    if (w)
        *w = (struct reset_wait){.left = 1, .done = done, .arg = arg};
    lun_reset_one(lu, UA_BUS_DEVICE_RESET, w);
    return reset_wait_end(w);
}

void scsi_lun_reset(struct scsi_lun *lu, struct scsi_nexus *by)
{
    scsi_lun_reset_wait(lu, by, NULL, NULL);
}

/* TARGET WARM RESET is a logical unit reset of every LUN (SAM-5 §6.3.2/§7.x), hence 29h/03h;
 * TARGET COLD RESET is a power-on condition: 29h/01h POWER ON OCCURRED. */
bool scsi_target_reset_wait(struct scsi_target *t, struct scsi_nexus *by, bool cold,
                            void (*done)(void *arg), void *arg)
{
    (void)by;
    struct reset_wait *w = done ? calloc(1, sizeof(*w)) : NULL;
    if (w)
        *w = (struct reset_wait){.left = 1, .done = done, .arg = arg};
    /* On a reactor, without the target lock: read as scsi_nexus_lost() reads them. */
    for (uint32_t i = 0; i < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE); i++) {
        struct scsi_lun *lu = scsi_target_lun(t, i);
        if (lu)
            lun_reset_one(lu, cold ? UA_POWER_ON : UA_BUS_DEVICE_RESET, w);
    }
    return reset_wait_end(w);
}

void scsi_target_reset(struct scsi_target *t, struct scsi_nexus *by, bool cold)
{
    scsi_target_reset_wait(t, by, cold, NULL, NULL);
}

/* The reset came through another gateway: the same unit attention, prevention ended, and
 * every task this gateway has on the LU aborted, as the resetting gateway aborts its own (the
 * task set is the LU's, SAM-5 §6.3.3). The SPC-2 reservation is shared state: the resetting
 * gateway released it in the cluster. */
void scsi_lun_reset_elsewhere(struct scsi_lun *lu, unsigned ua)
{
    if (!ua)
        return;
    struct scsi_target *t = lu->target;
    struct scsi_target_priv *p = t->priv;
    struct scsi_nexus *held[SCSI_NEXUS_MAX];
    unsigned n = 0;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX && t->abort_nexus_tasks; s++) {
        struct scsi_nexus_impl *ni = p->nexus[s];
        if (ni && ni->refs > 0) {
            ni->refs++; /* held until the abort hook has run */
            held[n++] = &ni->pub;
        }
    }
    pthread_mutex_unlock(&t->lock);
    struct scsi_sync_wait *sw = scsi_sync_wait_new(lu);
    for (unsigned i = 0; i < n; i++) {
        t->abort_nexus_tasks(t, held[i], lu, scsi_sync_wait_join(sw));
        scsi_nexus_put(held[i]);
    }
    /* the aborts are posted to the reactors before an initiator can see the UA */
    scsi_ua_raise_all(lu, NULL, ua);
    sbc_prevent_clear_all(lu);
    /* The resetting gateway answers once this one acknowledges, after this returns: by then
     * none of the aborted writes may still be in the store (SAM-5 §7.1). Bounded below its
     * wait for the acknowledgement. */
    if (sw && !scsi_sync_wait_finish(sw, SCSI_ELSEWHERE_WAIT_MS))
        LOG_WARN("LUN %" PRIu64 " (%s): reset through another gateway: aborted commands still in "
                 "the store after %u ms; acknowledging anyway",
                 lu->id, lu->bs->desc, SCSI_ELSEWHERE_WAIT_MS);
}

/* A nexus no session holds has no task (its tasks ended with its sessions): not told. */
void scsi_lun_tasks_cleared(struct scsi_lun *lu, const struct scsi_nexus *by)
{
    if (!lu)
        return;
    struct scsi_target *t = lu->target;
    struct scsi_target_priv *p = t->priv;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        struct scsi_nexus_impl *ni = p->nexus[s];
        if (ni && ni->refs > 0 && &ni->pub != by)
            scsi_ua_raise(lu, s, UA_COMMANDS_CLEARED);
    }
    pthread_mutex_unlock(&t->lock);
}

void scsi_nexus_tasks_terminated(struct scsi_nexus *n, uint64_t lun)
{
    struct scsi_target *t = n->target;
    /* under the target lock, so that the LUN is not detached meanwhile */
    pthread_mutex_lock(&t->lock);
    struct scsi_lun *lu = scsi_target_lun(t, lun);
    if (lu)
        scsi_ua_raise(lu, scsi_nexus_slot(n), UA_ISCSI_CLEARED);
    pthread_mutex_unlock(&t->lock);
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

/* --- SAM-5 §4.7 LUN addressing --- */

uint64_t scsi_lun_from_wire(const uint8_t w[8])
{
    switch (w[0] >> 6) {
    case 0: /* peripheral device addressing, bus 0 */
        return w[0] == 0 ? w[1] : UINT64_MAX;
    case 1: /* flat space addressing */
        return (uint64_t)(w[0] & 0x3f) << 8 | w[1];
    default:
        return UINT64_MAX; /* logical unit / extended addressing: no such LUN */
    }
}

void scsi_lun_to_wire(uint64_t lun, uint8_t w[8])
{
    memset(w, 0, 8);
    if (lun < 256) {
        w[1] = (uint8_t)lun;
    } else {
        w[0] = 0x40 | (uint8_t)((lun >> 8) & 0x3f);
        w[1] = (uint8_t)lun;
    }
}
