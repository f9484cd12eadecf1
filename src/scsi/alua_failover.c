/* Automatic failover between gateways (a target with alua-mode = failover, docs/gateways.md):
 * for each LUN on a store that shares objects through the cluster (rbd), one gateway is
 * active/optimized and the others standby; the gateways know each other only through the
 * image's shared objects, so no gateway needs a path to another.
 *
 *   "<image>.linerate-hb-<group>"  each gateway's heartbeat: a counter it bumps every period and
 *                                  the client address the cluster knows it by;
 *   "<image>.linerate-ao"          which group is active/optimized, and an epoch bumped at each
 *                                  change; written only with compare-and-swap on its version,
 *                                  so two gateways never both win a takeover.
 *
 * A thread per LUN beats, reads the others' heartbeats (a counter that did not move for
 * failover-timeout, by this gateway's own clock, is a gateway gone) and sets the ALUA states
 * the "ao" object says (implicit transitions, SPC-4 §5.16.2.2: 2Ah/06h to every nexus). When
 * the active/optimized gateway is gone, the lowest group still beating FIRST blocklists the
 * address the lost one published (a gateway that comes back from a hang or a partition then
 * cannot write with a stale view: the OSDs refuse its client, for ten years, bs_rbd.c), THEN
 * takes the role.
 * A gateway whose own heartbeat write is refused as blocklisted gives the LUN up: standby, and
 * the store fails every command (bs_rbd.c). The role is also a lease (lu->alua_lease_ms): each
 * tick that wrote our beat and read "ao" naming us extends it to that beat plus the timeout;
 * once past, the own group answers standby (alua_gate) until a tick confirms the role, so a
 * gateway resumed after a stop or a partition refuses I/O at once, before it learns of the
 * fence. The own group starts standby too (alua.c), the role only from the cluster. With no
 * "ao" object one failover-timeout after the start (the gateway configured active/optimized is
 * down), the lowest group beating creates it (fo_orphan). Failback
 * happens only on the operator's word: scsi_lun_failover_claim (linerate-ctl set alua TARGET
 * active/optimized on that gateway). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scsi/scsi_internal.h"
#include "util/log.h"

#define FO_ADDR_MAX 128

struct fo_peer {
    uint16_t id;
    uint64_t seq;        /* the last counter read */
    uint64_t changed_ms; /* when it last moved (or when watching began) */
    bool seen, lost;
    char addr[FO_ADDR_MAX];
};

struct scsi_failover {
    struct scsi_lun *lu;
    pthread_t thread;
    pthread_mutex_t m; /* stop, claim, and the fields show reads */
    pthread_cond_t cv;
    bool stop, claim;
    unsigned hb_ms, timeout_ms;
    uint16_t own;
    char addr[FO_ADDR_MAX];
    uint64_t hb_seq, hb_ver;
    struct fo_peer peers[SCSI_ALUA_GROUPS_MAX];
    unsigned npeers;
    uint16_t ao; /* 0: no "ao" object yet */
    uint64_t epoch, ao_ver;
    uint64_t mine_ver;       /* the version of "ao" this process last wrote, 0 none */
    bool ao_mine;            /* "ao" as last read is the one this process wrote */
    uint64_t serve_after_ms; /* a failback: AO only from then on (fo_tick) */
    uint64_t last_tick_ms;
    uint64_t start_ms; /* when this thread began watching (fo_orphan) */
    bool fenced;
    unsigned failovers;       /* takeovers done by this gateway */
    uint64_t last_failover_s; /* CLOCK_REALTIME of the last one, 0 none */
    uint16_t last_failover_from;
};

/* The lease and the peers' silence count on CLOCK_BOOTTIME, as alua_gate does: unlike
 * CLOCK_MONOTONIC it keeps counting while this kernel is suspended, so a host resumed from
 * suspend sees its lease expired. A VM paused by its hypervisor is covered only if the guest
 * kernel counts the pause; the stall rule of fo_tick and the fence cover the rest. The thread's
 * sleep stays on CLOCK_MONOTONIC (condition variables take no other): it is only the period. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const char *lun_desc(const struct scsi_failover *f)
{
    return f->lu->bs->desc;
}

/* Every group's state from the "ao" object: the one it names active/optimized, the others
 * standby. Only states that change raise 2Ah/06h (alua.c). */
static void fo_apply(struct scsi_failover *f)
{
    struct scsi_lun *lu = f->lu;
    for (unsigned i = 0; i < lu->alua_ngroups; i++) {
        enum scsi_alua_state st =
            !f->fenced && lu->alua[i].id == f->ao ? SCSI_ALUA_ACTIVE_OPTIMIZED : SCSI_ALUA_STANDBY;
        if (f->fenced && i > 0)
            continue; /* a fenced gateway knows nothing current of the others */
        scsi_lun_alua_set(lu, i ? lu->alua[i].id : 0, st);
    }
}

/* The cluster refused this client: it was fenced. Standby from now on, said once. */
static void fo_fenced(struct scsi_failover *f)
{
    if (f->fenced)
        return;
    pthread_mutex_lock(&f->m);
    f->fenced = true;
    pthread_mutex_unlock(&f->m);
    LOG_ERR("LUN %" PRIu64 " (%s): failover: this gateway (group %u) was blocklisted by the "
            "cluster: standby, every command refused; restart it (a new client) to serve again",
            f->lu->id, lun_desc(f), (unsigned)f->own);
    fo_apply(f);
}

static int fo_beat(struct scsi_failover *f)
{
    const struct bs_ops *o = f->lu->bs->ops;
    char name[32], buf[FO_ADDR_MAX + 64];
    snprintf(name, sizeof(name), "hb-%u", (unsigned)f->own);
    f->hb_seq++;
    int n = snprintf(buf, sizeof(buf), "seq %" PRIu64 " addr %s\n", f->hb_seq, f->addr);
    uint64_t nv = 0;
    int ret = o->obj_write(f->lu->bs, name, buf, (size_t)n, f->hb_ver, &nv);
    if (ret == -ECANCELED) {
        /* our previous run's object, or the first beat: take its version and write again */
        char *old = NULL;
        size_t len = 0;
        ret = o->obj_read(f->lu->bs, name, &old, &len, &f->hb_ver);
        free(old);
        if (ret == 0)
            ret = o->obj_write(f->lu->bs, name, buf, (size_t)n, f->hb_ver, &nv);
    }
    if (ret == 0)
        f->hb_ver = nv;
    return ret;
}

/* Read peer p's heartbeat; its counter moving is the sign of life. */
static int fo_read_peer(struct scsi_failover *f, struct fo_peer *p, uint64_t now)
{
    char name[32], *buf = NULL;
    size_t len = 0;
    uint64_t ver = 0;
    snprintf(name, sizeof(name), "hb-%u", (unsigned)p->id);
    int ret = f->lu->bs->ops->obj_read(f->lu->bs, name, &buf, &len, &ver);
    if (ret < 0)
        return ret;
    uint64_t seq = 0;
    char addr[FO_ADDR_MAX];
    int end = 0;
    /* an address longer than FO_ADDR_MAX is taken as no heartbeat: a truncated one would
     * fence some other client, or none */
    if (buf && sscanf(buf, "seq %" SCNu64 " addr %127s%n", &seq, addr, &end) == 2 &&
        (buf[end] == '\0' || buf[end] == '\n')) {
        /* the address too: a restarted gateway counts from 1 again, and may well be at the
         * number its previous life was last seen at; its new client is what to fence */
        if (!p->seen || seq != p->seq || strcmp(addr, p->addr) != 0) {
            if (p->lost)
                LOG_INFO("LUN %" PRIu64 " (%s): failover: heartbeat of group %u back (%s)",
                         f->lu->id, lun_desc(f), (unsigned)p->id, addr);
            p->seen = true;
            p->lost = false;
            p->seq = seq;
            p->changed_ms = now;
            snprintf(p->addr, sizeof(p->addr), "%s", addr);
        }
    }
    free(buf);
    return 0;
}

static struct fo_peer *fo_peer(struct scsi_failover *f, uint16_t id);

static int fo_read_ao(struct scsi_failover *f, uint64_t now)
{
    char *buf = NULL;
    size_t len = 0;
    uint64_t ver = 0;
    int ret = f->lu->bs->ops->obj_read(f->lu->bs, "ao", &buf, &len, &ver);
    if (ret < 0)
        return ret;
    unsigned g = 0;
    uint64_t e = 0;
    if (buf && sscanf(buf, "group %u epoch %" SCNu64, &g, &e) == 2 && g && g <= 65535) {
        /* a new holder of the role was alive when it wrote it: its silence counts from now
         * (its heartbeat may not have been read yet, after a restart and a failback) */
        struct fo_peer *p = e != f->epoch ? fo_peer(f, (uint16_t)g) : NULL;
        if (p) {
            p->changed_ms = now;
            p->lost = false;
        }
        pthread_mutex_lock(&f->m);
        f->ao = (uint16_t)g;
        f->epoch = e;
        pthread_mutex_unlock(&f->m);
    }
    f->ao_ver = buf ? ver : 0;
    f->ao_mine = buf && f->mine_ver && ver == f->mine_ver;
    free(buf);
    return 0;
}

/* Compare-and-swap the "ao" object to this group: 0, -ECANCELED (someone changed it first:
 * read again), or -errno. */
static int fo_write_ao(struct scsi_failover *f)
{
    char buf[64];
    int n =
        snprintf(buf, sizeof(buf), "group %u epoch %" PRIu64 "\n", (unsigned)f->own, f->epoch + 1);
    uint64_t nv = 0;
    int ret = f->lu->bs->ops->obj_write(f->lu->bs, "ao", buf, (size_t)n, f->ao_ver, &nv);
    if (ret == 0) {
        pthread_mutex_lock(&f->m);
        f->ao = f->own;
        f->epoch++;
        pthread_mutex_unlock(&f->m);
        f->ao_ver = f->mine_ver = nv;
        f->ao_mine = true;
    }
    return ret;
}

static struct fo_peer *fo_peer(struct scsi_failover *f, uint16_t id)
{
    for (unsigned i = 0; i < f->npeers; i++)
        if (f->peers[i].id == id)
            return &f->peers[i];
    return NULL;
}

/* The active/optimized group ao is gone: whether this gateway is the one to take over, the
 * lowest group still beating (so two survivors never both try; the compare-and-swap settles
 * it if their views differ). */
static bool fo_my_turn(const struct scsi_failover *f, uint16_t ao)
{
    for (unsigned i = 0; i < f->npeers; i++)
        if (f->peers[i].id != ao && !f->peers[i].lost && f->peers[i].seen &&
            f->peers[i].id < f->own)
            return false;
    return true;
}

/* Fence, then take the role. */
static void fo_takeover(struct scsi_failover *f, struct fo_peer *p, uint64_t now)
{
    char err[256] = "";
    if (!p->addr[0]) {
        LOG_ERR("LUN %" PRIu64 " (%s): failover: group %u is gone but never published its "
                "address: cannot fence it, not taking over",
                f->lu->id, lun_desc(f), (unsigned)p->id);
        return;
    }
    LOG_WARN("LUN %" PRIu64 " (%s): failover: fencing group %u: ceph osd blocklist add %s",
             f->lu->id, lun_desc(f), (unsigned)p->id, p->addr);
    int ret = f->lu->bs->ops->fence(f->lu->bs, p->addr, err, sizeof(err));
    if (ret < 0) {
        if (ret == -ESHUTDOWN)
            fo_fenced(f);
        else
            LOG_ERR("LUN %" PRIu64 " (%s): failover: fencing group %u (%s) failed: %s (%s): "
                    "not taking over, trying again",
                    f->lu->id, lun_desc(f), (unsigned)p->id, p->addr, strerror(-ret), err);
        return;
    }
    ret = fo_write_ao(f);
    if (ret < 0) {
        if (ret == -ESHUTDOWN)
            fo_fenced(f);
        else
            LOG_WARN("LUN %" PRIu64 " (%s): failover: taking over from group %u: %s", f->lu->id,
                     lun_desc(f), (unsigned)p->id,
                     ret == -ECANCELED ? "another gateway changed the role first" : strerror(-ret));
        return;
    }
    pthread_mutex_lock(&f->m);
    f->failovers++;
    f->last_failover_s = (uint64_t)time(NULL);
    f->last_failover_from = p->id;
    pthread_mutex_unlock(&f->m);
    LOG_WARN("LUN %" PRIu64 " (%s): failover: group %u takes over from group %u: "
             "active/optimized (epoch %" PRIu64 ", %" PRIu64 " ms after its last heartbeat)",
             f->lu->id, lun_desc(f), (unsigned)f->own, (unsigned)p->id, f->epoch,
             now - p->changed_ms);
}

/* No "ao" object one failover-timeout after this gateway began watching: no gateway
 * configured active/optimized came up (it creates the object on its first tick), so without
 * this nobody would serve until a person started it. The lowest group beating creates it;
 * the create is exclusive (version 0: the object must not exist), so a configured gateway
 * starting at the same moment, or another survivor, cannot both win. Nobody held the role, so
 * nobody is fenced: a configured gateway that starts later finds the object and stays standby. */
static bool fo_orphan(const struct scsi_failover *f, uint64_t now)
{
    return f->ao == 0 && now - f->start_ms >= f->timeout_ms && fo_my_turn(f, 0);
}

static void fo_tick(struct scsi_failover *f)
{
    uint64_t now = now_ms();
    /* This thread did not run for a while (the process was stopped, the host stalled): the
     * others had no chance to be seen meanwhile, so their silence counts from now. */
    if (f->last_tick_ms && now - f->last_tick_ms > 2ull * f->hb_ms + 1000)
        for (unsigned i = 0; i < f->npeers; i++)
            f->peers[i].changed_ms = now;
    f->last_tick_ms = now;
    /* Our own beat first: a fenced gateway learns it here, before it looks at anyone. */
    int ret = fo_beat(f);
    if (ret == -ESHUTDOWN) {
        fo_fenced(f);
        return;
    }
    if (ret < 0) {
        LOG_WARN("LUN %" PRIu64 " (%s): failover: heartbeat: %s", f->lu->id, lun_desc(f),
                 strerror(-ret));
        return;
    }
    for (unsigned i = 0; i < f->npeers; i++)
        if (fo_read_peer(f, &f->peers[i], now) == -ESHUTDOWN) {
            fo_fenced(f);
            return;
        }
    ret = fo_read_ao(f, now);
    if (ret == -ESHUTDOWN) {
        fo_fenced(f);
        return;
    }
    if (ret < 0)
        return;
    pthread_mutex_lock(&f->m);
    bool claim = f->claim;
    f->claim = false;
    pthread_mutex_unlock(&f->m);
    bool orphan = !f->lu->alua_configured_ao && fo_orphan(f, now);
    if ((f->ao == 0 && f->lu->alua_configured_ao) || orphan || (claim && f->ao != f->own)) {
        /* the first gateway configured active/optimized creates the object; or the operator
         * hands the role here (failback): the one that had it sees the change and steps down */
        uint16_t from = f->ao;
        ret = fo_write_ao(f);
        /* A failback: the former holder serves until its next tick reads the change, or until
         * its lease ends if it stalls; its lease began before this write, so one timeout from
         * now it has ended on any clock running at the same rate. */
        if (ret == 0 && from)
            f->serve_after_ms = now_ms() + f->timeout_ms;
        if (ret == 0 && orphan && !from)
            LOG_WARN("LUN %" PRIu64 " (%s): failover: no gateway configured active/optimized "
                     "came up within the failover-timeout (%u ms): group %u takes the role",
                     f->lu->id, lun_desc(f), f->timeout_ms, (unsigned)f->own);
        else if (ret == 0)
            LOG_INFO("LUN %" PRIu64 " (%s): failover: group %u active/optimized (%s, epoch "
                     "%" PRIu64 ")%s",
                     f->lu->id, lun_desc(f), (unsigned)f->own,
                     from ? "by linerate-ctl" : "first of the target", f->epoch,
                     from ? "; serving in one failover-timeout, when the former holder has "
                            "surely stepped down"
                          : "");
        else if (ret == -ESHUTDOWN)
            fo_fenced(f);
        if (ret < 0)
            return;
    } else if (f->ao == f->own && !f->ao_mine) {
        /* "ao" names this group but an earlier life of this gateway wrote it (a restart): a
         * survivor may be taking over right now, having fenced only the old client. Rewrite it
         * by compare-and-swap first; if the survivor wrote first this fails, and the role is
         * the survivor's (the next tick reads it). */
        ret = fo_write_ao(f);
        if (ret == 0)
            LOG_INFO("LUN %" PRIu64 " (%s): failover: group %u keeps active/optimized after a "
                     "restart (epoch %" PRIu64 ")",
                     f->lu->id, lun_desc(f), (unsigned)f->own, f->epoch);
        else if (ret == -ESHUTDOWN)
            fo_fenced(f);
        if (ret < 0)
            return;
    }
    for (unsigned i = 0; i < f->npeers; i++) {
        struct fo_peer *p = &f->peers[i];
        if (!p->lost && now - p->changed_ms >= f->timeout_ms) {
            p->lost = true;
            LOG_WARN("LUN %" PRIu64 " (%s): failover: lost the heartbeat of group %u (none for "
                     "%" PRIu64 " ms)%s",
                     f->lu->id, lun_desc(f), (unsigned)p->id, now - p->changed_ms,
                     p->id == f->ao ? ": it is active/optimized" : "");
        }
    }
    struct fo_peer *aop = f->ao && f->ao != f->own ? fo_peer(f, f->ao) : NULL;
    if (aop && aop->lost && fo_my_turn(f, f->ao))
        fo_takeover(f, aop, now);
    /* The role confirmed by this tick (our beat written, "ao" read or won): it holds until
     * the others could call us gone, timeout after the beat as they see it, and beat began
     * at now. Renewed before the state is applied, so a standby-to-AO change opens at once.
     * Only an "ao" this process wrote counts (above), and after a failback only once the
     * former holder has surely stepped down: till then the states stay as they were. */
    bool waiting = f->ao == f->own && now < f->serve_after_ms;
    if (f->ao == f->own && f->ao_mine && !waiting && !f->fenced)
        atomic_store_explicit(&f->lu->alua_lease_ms, now + f->timeout_ms, memory_order_release);
    if (f->ao && !waiting)
        fo_apply(f);
}

static void *fo_thread(void *arg)
{
    struct scsi_failover *f = arg;
    pthread_mutex_lock(&f->m);
    while (!f->stop) {
        pthread_mutex_unlock(&f->m);
        if (!f->fenced)
            fo_tick(f);
        pthread_mutex_lock(&f->m);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)f->hb_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!f->stop && !f->claim && pthread_cond_timedwait(&f->cv, &f->m, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&f->m);
    return NULL;
}

/* alua_lun_init set the own group standby with an expired lease; it stays so. Putting back
 * the configured active/optimized instead would let this gateway serve beside the holder the
 * others elect, without a heartbeat or a fence between them: the split brain the mode is
 * there to prevent. Standby loses paths, not data; the log says so, and how to recover. */
static void fo_not_started(struct scsi_lun *lu, const char *why)
{
    LOG_ERR("LUN %" PRIu64 " (%s): failover not started (%s): the LUN is held standby on this "
            "gateway until the daemon is restarted",
            lu->id, lu->bs->desc, why);
}

static void fo_start(struct scsi_lun *lu)
{
    const struct scsi_target *tg = lu->target;
    const struct bs_ops *o = lu->bs->ops;
    if (!tg->alua_failover)
        return;
    if (!o->obj_read || !o->obj_write || !o->fence || !o->client_addr) {
        LOG_WARN("LUN %" PRIu64 " (%s): alua-mode = failover needs a store shared through the "
                 "cluster (rbd:): its states stay as configured",
                 lu->id, lu->bs->desc);
        return;
    }
    struct scsi_failover *f = calloc(1, sizeof(*f));
    if (!f) {
        fo_not_started(lu, "out of memory");
        return;
    }
    f->lu = lu;
    f->own = lu->alua[0].id;
    f->hb_ms = tg->failover_hb_ms ? tg->failover_hb_ms : 1000;
    f->timeout_ms = tg->failover_timeout_ms ? tg->failover_timeout_ms : 5000;
    int ret = o->client_addr(lu->bs, f->addr, sizeof(f->addr));
    if (ret < 0 || strchr(f->addr, ' ')) {
        fo_not_started(lu, ret < 0 ? strerror(-ret) : "a space in the client address");
        free(f);
        return;
    }
    uint64_t now = now_ms();
    f->start_ms = now;
    for (unsigned i = 1; i < lu->alua_ngroups; i++)
        f->peers[f->npeers++] = (struct fo_peer){.id = lu->alua[i].id, .changed_ms = now};
    pthread_mutex_init(&f->m, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&f->thread, NULL, fo_thread, f) != 0) {
        fo_not_started(lu, "cannot start the failover thread");
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->m);
        free(f);
        return;
    }
    LOG_INFO("LUN %" PRIu64 " (%s): failover: group %u, heartbeat %u ms, timeout %u ms, "
             "client %s",
             lu->id, lu->bs->desc, (unsigned)f->own, f->hb_ms, f->timeout_ms, f->addr);
    lu->failover = f;
}

static void fo_stop(struct scsi_lun *lu)
{
    struct scsi_failover *f = lu->failover;
    if (!f)
        return;
    pthread_mutex_lock(&f->m);
    f->stop = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->m);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->m);
    lu->failover = NULL;
    free(f);
}

int scsi_lun_failover_claim(struct scsi_lun *lu)
{
    struct scsi_failover *f = lu->failover;
    if (!f)
        return -1;
    pthread_mutex_lock(&f->m);
    if (f->fenced) {
        pthread_mutex_unlock(&f->m);
        return -ESHUTDOWN;
    }
    f->claim = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->m);
    return 0;
}

bool scsi_lun_failover_get(struct scsi_lun *lu, struct scsi_failover_info *out)
{
    struct scsi_failover *f = lu->failover;
    if (!f)
        return false;
    pthread_mutex_lock(&f->m);
    *out = (struct scsi_failover_info){.ao = f->ao,
                                       .epoch = f->epoch,
                                       .fenced = f->fenced,
                                       .failovers = f->failovers,
                                       .last_failover_s = f->last_failover_s,
                                       .last_failover_from = f->last_failover_from};
    pthread_mutex_unlock(&f->m);
    return true;
}

/* uses the store: stopped before it closes */
const struct scsi_lun_hooks alua_failover_lun_hooks = {
    .name = "alua failover", .start = fo_start, .stop = fo_stop};
