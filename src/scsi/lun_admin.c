/* LUNs changed while the target serves (linerate-ctl): detaching one for removal, counting the
 * commands that still hold it, write protection, growing, and the unit attentions that tell
 * initiators (SPC-4 REPORTED LUNS DATA HAS CHANGED, SBC-3 CAPACITY DATA HAS CHANGED, MODE
 * PARAMETERS CHANGED). Called from the daemon's control thread, never from a reactor; a medium
 * resized by someone else (an RBD image after `rbd resize`) is taken up on the SCSI core's
 * helper thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/log.h"

/* A thread's shard of every LUN's user count: threads are spread round-robin as they first
 * set up a command. */
static atomic_uint next_shard;
static _Thread_local int my_shard = -1;

static unsigned user_shard(void)
{
    if (my_shard < 0)
        my_shard = (int)(atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) %
                         SCSI_LUN_USER_SHARDS);
    return (unsigned)my_shard;
}

void scsi_lun_user_get(struct scsi_lun *lu)
{
    atomic_fetch_add_explicit(&lu->users[user_shard()].n, 1, memory_order_relaxed);
}

/* Release: whatever the task did to the LUN happens before the remover sees the count drop. */
void scsi_lun_user_put(struct scsi_lun *lu)
{
    atomic_fetch_sub_explicit(&lu->users[user_shard()].n, 1, memory_order_release);
}

long scsi_lun_users(const struct scsi_lun *lu)
{
    long sum = 0;
    for (unsigned i = 0; i < SCSI_LUN_USER_SHARDS; i++)
        sum += atomic_load_explicit(&((struct scsi_lun *)lu)->users[i].n, memory_order_acquire);
    return sum;
}

struct scsi_lun *scsi_target_detach_lun(struct scsi_target *t, uint64_t lun)
{
    pthread_mutex_lock(&t->lock);
    struct scsi_lun *lu = lun < t->nluns ? t->luns[lun] : NULL;
    if (lu)
        __atomic_store_n(&t->luns[lun], NULL, __ATOMIC_RELEASE);
    /* nluns stays: it bounds the slots, and the slot may be used again */
    pthread_mutex_unlock(&t->lock);
    return lu;
}

/* SPC-4 §6.33 REPORT LUNS: the inventory that changed is the one a nexus is shown, so a host
 * whose map does not show `lun` is not told (issue 29 item 3). */
void scsi_target_luns_changed(struct scsi_target *t, uint64_t lun, const struct scsi_lun *except)
{
    struct scsi_target_priv *p = t->priv;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        if (!p->nexus[s] || !scsi_host_map_shows_locked(p->nexus[s], lun))
            continue;
        for (uint32_t i = 0; i < t->nluns; i++) {
            struct scsi_lun *lu = t->luns[i];
            if (lu && lu != except)
                scsi_ua_raise(lu, s, UA_LUNS_CHANGED);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

int scsi_lun_set_read_only(struct scsi_lun *lu, bool ro, char *err, size_t errlen)
{
    if (!ro && lu->bs->read_only) {
        snprintf(err, errlen,
                 "LUN %" PRIu64 ": its store %s was opened read-only; remove the LUN and add it "
                 "again without ,ro",
                 lu->id, lu->bs->desc);
        return -1;
    }
    if (atomic_exchange(&lu->read_only, ro) != ro)
        scsi_ua_raise_all(lu, NULL, UA_MODE_CHANGED);
    return 0;
}

int scsi_lun_grow(struct scsi_lun *lu, uint64_t bytes, char *err, size_t errlen)
{
    uint64_t now = scsi_lun_size_bytes(lu);
    if (bytes % lu->block_size) {
        snprintf(err, errlen,
                 "LUN %" PRIu64 ": %" PRIu64 " bytes is not a whole number of %u-byte blocks",
                 lu->id, bytes, lu->block_size);
        return -1;
    }
    if (bytes < now) {
        snprintf(err, errlen,
                 "LUN %" PRIu64 ": cannot shrink from %" PRIu64 " to %" PRIu64
                 " bytes (data would be lost)",
                 lu->id, now, bytes);
        return -1;
    }
    if (bytes == now)
        return 0;
    if (bs_grow(lu->bs, bytes, err, errlen) < 0)
        return -1;
    /* The store is there before any command may address it. */
    atomic_store(&lu->nblocks, bytes >> lu->block_shift);
    scsi_ua_raise_all(lu, NULL, UA_CAPACITY_CHANGED);
    return 0;
}

void scsi_lun_get_info(const struct scsi_lun *lu, struct scsi_lun_info *out)
{
    *out = (struct scsi_lun_info){
        .lun = lu->id,
        .bytes = scsi_lun_size_bytes(lu),
        .block_size = lu->block_size,
        .phys_block_size = lu->block_size << lu->phys_exp,
        .read_only = atomic_load(&((struct scsi_lun *)lu)->read_only),
        .removable = lu->removable,
        .thin = lu->bs->thin,
        .store = lu->bs->desc,
        .medium_id = lu->bs->medium_id,
        .users = scsi_lun_users(lu),
        .identity = &lu->ident,
    };
}

struct iostats *scsi_lun_stats(const struct scsi_lun *lu)
{
    return lu->stats;
}

struct iostats *scsi_task_lun_stats(const struct scsi_task *t)
{
    const struct scsi_task_core *k = (const struct scsi_task_core *)t->core.bytes;
    return k->lu_held ? t->lu->stats : NULL;
}

/* ---- the medium resized under the LUN ------------------------------------------------- */

struct scsi_lun_resize {
    struct scsi_offload off; /* first: the job is the offload */
    struct scsi_lun *lu;
    bool pending; /* the store called back since the job last read the size */
    bool busy;    /* the job is queued or running */
    bool closing; /* scsi_lun_resize_stop waits: no new job */
    pthread_cond_t idle;
};

/* The capacity follows the medium, then every nexus hears of it (SBC-3 §4.9: CAPACITY DATA HAS
 * CHANGED when the capacity changed other than by a command of that nexus). A shrunk medium is
 * taken too: the initiator must learn that the blocks past the new end are gone. */
static void resize_apply(struct scsi_lun *lu, uint64_t bytes)
{
    uint64_t nb = bytes >> lu->block_shift;
    if (nb == 0) {
        LOG_ERR("LUN %" PRIu64 " (%s): the medium shrank to %" PRIu64
                " bytes, less than a block: keeping the old capacity (commands past the "
                "medium fail)",
                lu->id, lu->bs->desc, bytes);
        return;
    }
    uint64_t old = atomic_exchange(&lu->nblocks, nb);
    if (old == nb)
        return;
    LOG_INFO("LUN %" PRIu64 " (%s): the medium was resized from %" PRIu64 " to %" PRIu64
             " bytes: CAPACITY DATA HAS CHANGED",
             lu->id, lu->bs->desc, old << lu->block_shift, nb << lu->block_shift);
    if (bytes % lu->block_size)
        LOG_WARN("LUN %" PRIu64 " (%s): the last %" PRIu64 " bytes are not a whole block: not "
                 "exported",
                 lu->id, lu->bs->desc, bytes % lu->block_size);
    scsi_ua_raise_all(lu, NULL, UA_CAPACITY_CHANGED);
}

/* On the helper thread: read the size until no callback came in meanwhile. */
static void resize_work(struct scsi_offload *o)
{
    struct scsi_lun_resize *rz = (struct scsi_lun_resize *)o;
    struct scsi_lun *lu = rz->lu;
    for (;;) {
        pthread_mutex_lock(&lu->lock);
        bool go = rz->pending && !rz->closing;
        rz->pending = false;
        pthread_mutex_unlock(&lu->lock);
        if (!go)
            return;
        uint64_t bytes = 0;
        int ret = lu->bs->ops->size_refresh(lu->bs, &bytes);
        if (ret == 0)
            resize_apply(lu, bytes);
        else if (ret != -ESHUTDOWN) /* fenced: the store said so once, and refuses all */
            LOG_WARN("LUN %" PRIu64 " (%s): the medium changed but its size cannot be read: "
                     "%s",
                     lu->id, lu->bs->desc, strerror(-ret));
    }
}

/* Detached, so also on the helper thread. A callback between the job's last look and here
 * queues the job again. */
static void resize_done(struct scsi_offload *o)
{
    struct scsi_lun_resize *rz = (struct scsi_lun_resize *)o;
    struct scsi_lun *lu = rz->lu;
    pthread_mutex_lock(&lu->lock);
    bool again = rz->pending && !rz->closing;
    rz->busy = again;
    if (!again)
        pthread_cond_broadcast(&rz->idle);
    pthread_mutex_unlock(&lu->lock);
    if (again)
        scsi_offload_submit(&rz->off);
}

/* The store's thread (librbd's): never blocks, never touches the LUN beyond its lock. */
static void resize_notified(void *arg)
{
    struct scsi_lun_resize *rz = arg;
    struct scsi_lun *lu = rz->lu;
    pthread_mutex_lock(&lu->lock);
    bool start = !rz->busy && !rz->closing;
    rz->pending = true;
    rz->busy |= start;
    pthread_mutex_unlock(&lu->lock);
    if (start)
        scsi_offload_submit(&rz->off);
}

static void resize_watch(struct scsi_lun *lu)
{
    const struct bs_ops *o = lu->bs->ops;
    if (!o->size_watch || !o->size_refresh)
        return;
    struct scsi_lun_resize *rz = calloc(1, sizeof(*rz));
    if (!rz) {
        LOG_WARN("LUN %" PRIu64 " (%s): out of memory: a resize of the medium will go unnoticed",
                 lu->id, lu->bs->desc);
        return;
    }
    rz->lu = lu;
    rz->off.work = resize_work;
    rz->off.done = resize_done;
    rz->off.detached = true; /* submitted from the store's thread: never block it */
    pthread_cond_init(&rz->idle, NULL);
    lu->resize = rz;
    int ret = o->size_watch(lu->bs, resize_notified, rz);
    if (ret < 0) {
        LOG_WARN("LUN %" PRIu64 " (%s): cannot watch the medium for resizes (%s): a resize "
                 "will go unnoticed",
                 lu->id, lu->bs->desc, strerror(-ret));
        lu->resize = NULL;
        pthread_cond_destroy(&rz->idle);
        free(rz);
    }
}

static void resize_stop(struct scsi_lun *lu)
{
    struct scsi_lun_resize *rz = lu->resize;
    if (!rz)
        return;
    lu->bs->ops->size_watch(lu->bs, NULL, NULL); /* no callback after this */
    pthread_mutex_lock(&lu->lock);
    rz->closing = true;
    while (rz->busy)
        pthread_cond_wait(&rz->idle, &lu->lock);
    pthread_mutex_unlock(&lu->lock);
    pthread_cond_destroy(&rz->idle);
    free(rz);
    lu->resize = NULL;
}

/* an RBD image resized by someone else raises CAPACITY DATA HAS CHANGED; the job uses the
 * store and the LUN */
const struct scsi_lun_hooks scsi_lun_resize_hooks = {
    .name = "resize watch", .start = resize_watch, .stop = resize_stop};
