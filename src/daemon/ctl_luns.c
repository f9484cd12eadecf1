/* LUNs added and removed at run time, by a request (ctl_cmds.c), a reload (ctl_reload.c) or a
 * target's removal (ctl_targets.c): built or detached under the target's lock
 * (scsi/lun_admin.c), recorded in the running configuration, and a detached LUN freed only
 * after every reactor has finished the loop turn it was in (a message to each, the barrier
 * below) and its last command let go (or later, ctl_reap_zombies). Control thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bs/bs.h"
#include "daemon/ctl_req.h"
#include "daemon/daemon.h"

#define BARRIER_TIMEOUT_S 5

struct ctl_zombie {
    struct ctl_zombie *next;
    struct scsi_lun *lu;
    char target[ISCSI_NAME_MAX + 1];
    uint64_t lun;
};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- the reactor barrier --- */

/* Every reactor runs one message after whatever turn it is in: code that looked a LUN up
 * before it was detached (on a reactor, synchronously) is done once all have answered. The
 * object is shared by the waiter and the messages and freed by the last of them, so a
 * reactor that answers after the waiter gave up finds it still there. */
struct barrier {
    atomic_int refs;
    sem_t sem;
    unsigned n;
    struct reactor_msg msgs[];
};

static void barrier_put(struct barrier *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        sem_destroy(&b->sem);
        free(b);
    }
}

static void barrier_hit(void *arg)
{
    struct barrier *b = arg;
    sem_post(&b->sem);
    barrier_put(b);
}

int ctl_reactors_barrier(struct daemon *d)
{
    struct barrier *b = calloc(1, sizeof(*b) + d->nreactors * sizeof(b->msgs[0]));
    if (!b)
        return -1;
    sem_init(&b->sem, 0, 0);
    b->n = d->nreactors;
    atomic_init(&b->refs, (int)b->n + 1);
    for (unsigned i = 0; i < b->n; i++)
        reactor_post(d->reactors[i], &b->msgs[i], barrier_hit, b);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += BARRIER_TIMEOUT_S;
    int rc = 0;
    for (unsigned i = 0; i < b->n; i++) {
        while (sem_timedwait(&b->sem, &ts) < 0) {
            if (errno != EINTR) {
                rc = -1;
                break;
            }
        }
        if (rc < 0)
            break;
    }
    barrier_put(b);
    return rc;
}

/* --- LUNs --- */

static void zombie_add(struct daemon *d, const char *target, uint64_t lun, struct scsi_lun *lu);

/* Record a LUN in the running configuration (what reload compares the file with): takes
 * l->bs_spec. */
static void conf_lun_add(struct daemon *d, unsigned t, struct target_lun_conf *l)
{
    char err[256];
    if (target_node_add_lun(&d->cfg.targets[t], l, err, sizeof(err)) < 0) {
        LOG_WARN("target %s: LUN %llu not recorded for reload: %s", d->cfg.targets[t].name,
                 (unsigned long long)l->lun, err);
        free(l->bs_spec);
    }
}

static void conf_lun_del(struct daemon *d, unsigned t, uint64_t lun)
{
    struct target_node_conf *c = &d->cfg.targets[t];
    struct target_lun_conf *l = ctl_conf_lun_find(d, t, lun);
    if (!l)
        return;
    free(l->bs_spec);
    size_t i = (size_t)(l - c->luns);
    memmove(l, l + 1, (c->nluns - i - 1) * sizeof(*l));
    c->nluns--;
}

int ctl_lun_add(struct daemon *d, unsigned t, struct target_lun_conf *l, struct bs *bs, char *err,
                size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    const char *state_dir = target_state_dir(&d->cfg);
    if (target_lun_naa_clash(&d->cfg, n->name, l, err, errlen) < 0) {
        if (bs)
            bs_close(bs);
        free(l->bs_spec);
        l->bs_spec = NULL;
        return -1;
    }
    int rc = bs ? target_add_lun_store(state_dir, n->name, l, bs, n->scsi, &d->built, err, errlen)
                : target_build_lun(state_dir, n->name, l, n->scsi, &d->built, err, errlen);
    if (rc < 0) {
        free(l->bs_spec);
        l->bs_spec = NULL;
        return -1;
    }
    /* SPC-4: the initiators learn of the new LUN by REPORTED LUNS DATA HAS CHANGED on the
     * LUNs they already use. */
    scsi_target_luns_changed(n->scsi, l->lun, scsi_target_lun(n->scsi, l->lun));
    char spec[2 * TARGET_ORIGIN_MAX + 3];
    LOG_INFO("event=lun-added target=%s lun=%llu spec=%s ro=%s", n->name,
             (unsigned long long)l->lun, log_quote(spec, sizeof(spec), l->bs_spec),
             l->read_only ? "yes" : "no");
    bool thin_ram = l->store == TARGET_STORE_RAM && !l->prealloc;
    conf_lun_add(d, t, l);
    if (thin_ram) /* as at start: thin RAM beyond memory is legal, and said */
        target_config_warn_thin_ram(&d->cfg);
    return 0;
}

static void zombie_add(struct daemon *d, const char *target, uint64_t lun, struct scsi_lun *lu)
{
    struct ctl_zombie *z = calloc(1, sizeof(*z));
    if (!z) {
        /* Leaking the LUN is the only safe answer: commands still use it. */
        LOG_ERR("target %s: LUN %llu: out of memory; its store stays open", target,
                (unsigned long long)lun);
        return;
    }
    z->lu = lu;
    z->lun = lun;
    snprintf(z->target, sizeof(z->target), "%s", target);
    z->next = d->zombies;
    d->zombies = z;
}

void ctl_reap_zombies(struct daemon *d, bool all)
{
    struct ctl_zombie **pp = &d->zombies;
    while (*pp) {
        struct ctl_zombie *z = *pp;
        if (all || scsi_lun_users(z->lu) == 0) {
            LOG_INFO("target %s: removed LUN %llu released by its last command; store closed",
                     z->target, (unsigned long long)z->lun);
            scsi_lun_free(z->lu);
            *pp = z->next;
            free(z);
        } else {
            pp = &z->next;
        }
    }
}

int ctl_lun_remove(struct daemon *d, unsigned t, uint64_t num, unsigned timeout_s,
                   struct ctl_removed *out)
{
    struct iscsi_node *n = d->built.nodes[t];
    struct scsi_lun *lu = scsi_target_detach_lun(n->scsi, num);
    if (!lu)
        return -1;
    conf_lun_del(d, t, num);
    uint64_t t0 = reactor_now_ms();
    /* New commands now fail LOGICAL UNIT NOT SUPPORTED; those that found it run on. */
    bool settled = ctl_reactors_barrier(d) == 0;
    uint64_t deadline = t0 + (uint64_t)timeout_s * 1000;
    while (settled && scsi_lun_users(lu) > 0 && reactor_now_ms() < deadline && !ctl_stopping(d))
        sleep_ms(10);
    long users = settled ? scsi_lun_users(lu) : -1;
    scsi_target_luns_changed(n->scsi, num, NULL);
    out->waited_ms = reactor_now_ms() - t0;
    out->left = users < 0 ? 0 : users;
    out->closed = users == 0;
    if (users == 0) {
        scsi_lun_free(lu); /* a file store makes written data stable first */
        LOG_INFO("event=lun-removed target=%s lun=%llu waited-ms=%llu commands-left=0", n->name,
                 (unsigned long long)num, (unsigned long long)out->waited_ms);
    } else {
        zombie_add(d, n->name, num, lu);
        /* Its store closes when they end (ctl_reap_zombies). */
        LOG_WARN("event=lun-removed target=%s lun=%llu waited-ms=%llu commands-left=%ld", n->name,
                 (unsigned long long)num, (unsigned long long)out->waited_ms, out->left);
    }
    return 0;
}
