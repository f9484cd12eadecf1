/* LUNs changed while the target serves (linerate-ctl): detaching one for removal, counting the
 * commands that still hold it, write protection, growing, and the unit attentions that tell
 * initiators (SPC-4 REPORTED LUNS DATA HAS CHANGED, SBC-3 CAPACITY DATA HAS CHANGED, MODE
 * PARAMETERS CHANGED). Called from the daemon's control thread, never from a reactor. */
#include <inttypes.h>
#include <stdio.h>

#include "scsi/scsi_internal.h"

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

void scsi_target_luns_changed(struct scsi_target *t, const struct scsi_lun *except)
{
    for (uint32_t i = 0; i < t->nluns; i++) {
        struct scsi_lun *lu = __atomic_load_n(&t->luns[i], __ATOMIC_ACQUIRE);
        if (lu && lu != except)
            scsi_ua_raise_all(lu, NULL, UA_LUNS_CHANGED);
    }
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
        .users = scsi_lun_users(lu),
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
