/* Unit attentions (SAM-5 §5.14): the per-(LUN, nexus) conditions the modules raise and the
 * first command of the nexus reports. */

#include "scsi/scsi_internal.h"

void scsi_ua_raise(struct scsi_lun *lu, unsigned slot, unsigned bits)
{
    /* A LUN being removed (out of the target's table, its commands still finishing) gets no
     * chunk for slots first used after it left: no nexus of those slots ever met it, and none
     * can address it now, so there is nothing to tell them. */
    if (!scsi_lun_nx(lu, slot))
        return;
    atomic_uint *w = scsi_lun_ua(lu, slot);
    if (bits & UA_RESETS) {
        /* A reset supersedes the conditions it found pending (SAM-5 §5.14: the reset UA is
         * reported and the older ones are cleared with the state they described). */
        atomic_store(w, bits);
        return;
    }
    if (bits & UA_NEXUS_LOSS) {
        /* A pending power-on or reset UA already tells the initiator that everything an I_T
         * nexus loss clears is gone (SAM-5 §6.3.1: a reset does all a nexus loss does and
         * more), so 29h/07h after it would report the same event twice. */
        unsigned v = atomic_load(w);
        do {
            if (v & UA_RESETS)
                return;
        } while (!atomic_compare_exchange_weak(w, &v, v | bits));
        return;
    }
    atomic_fetch_or(w, bits);
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
    atomic_uint *w = scsi_lun_ua(lu, scsi_nexus_slot(n));
    unsigned v = atomic_load_explicit(w, memory_order_acquire);
    while (v) {
        unsigned bit = v & -v;
        if (atomic_compare_exchange_weak(w, &v, v & ~bit))
            return ua_reason[__builtin_ctz(bit)];
    }
    return SR_OK;
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
    struct scsi_lun *lu = scsi_nexus_lun(n, lun, NULL); /* the number the initiator sent */
    if (lu)
        scsi_ua_raise(lu, scsi_nexus_slot(n), UA_ISCSI_CLEARED);
    pthread_mutex_unlock(&t->lock);
}
