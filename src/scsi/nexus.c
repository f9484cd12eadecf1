/* I_T nexuses: one per initiator port of a target, kept across sessions so that a reinstated
 * session finds its unit attentions again; I_T nexus loss (SAM-5 §6.3.4). */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"

int scsi_lun_nexus_chunks(struct scsi_lun *lu, unsigned nchunks)
{
    assert(nchunks <= SCSI_NEXUS_CHUNKS);
    for (unsigned c = 0; c < nchunks; c++) {
        if (lu->nx[c])
            continue;
        struct scsi_lun_nexus_chunk *ch = calloc(1, sizeof(*ch));
        if (!ch)
            return -ENOMEM;
        /* published whole: a reactor reads it once a nexus of its slots exists */
        __atomic_store_n(&lu->nx[c], ch, __ATOMIC_RELEASE);
    }
    return 0;
}

void scsi_lun_nexus_chunks_free(struct scsi_lun *lu)
{
    for (unsigned c = 0; c < SCSI_NEXUS_CHUNKS; c++) {
        free(lu->nx[c]);
        lu->nx[c] = NULL;
    }
}

/* With the target lock: slot's chunk of per-nexus state on every LUN, those being added
 * included, before a nexus takes the slot. Slots are taken lowest first, so a target with few
 * initiators never grows its LUNs past the first chunk. 0 or -ENOMEM. */
static int nexus_chunk_ensure(struct scsi_target *t, unsigned slot)
{
    struct scsi_target_priv *p = t->priv;
    unsigned need = slot / SCSI_NEXUS_CHUNK + 1;
    if (need <= p->nchunks)
        return 0;
    for (uint32_t i = 0; i < t->nluns; i++)
        if (t->luns[i] && scsi_lun_nexus_chunks(t->luns[i], need) < 0)
            return -ENOMEM;
    for (struct scsi_lun *lu = p->adding; lu; lu = lu->adding_next)
        if (scsi_lun_nexus_chunks(lu, need) < 0)
            return -ENOMEM;
    p->nchunks = need;
    return 0;
}

/* Nexuses are kept after their last put so a reinstated session finds its unit attentions
 * again (reservations need no nexus: pr.c keeps them by port name); a slot whose nexus has no
 * references is recycled only when all slots are taken. */
struct scsi_nexus *scsi_nexus_get(struct scsi_target *t, const struct scsi_transport *tp,
                                  const char *initiator_name, const void *port_id)
{
    struct scsi_target_priv *p = t->priv;
    char port[256];
    tp->port_name(port, sizeof(port), initiator_name, port_id);

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
    if (slot >= 0 && nexus_chunk_ensure(t, (unsigned)slot) < 0)
        slot = -1; /* out of memory: refused as when every slot is held */
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
        n->pub.transport = tp;
        p->nexus[slot] = n;
        scsi_host_map_bind_locked(t, n); /* what its LUN numbers mean */
        /* A new I_T nexus starts with a power-on/reset UA on every LUN (SAM-5 §5.14). */
        for (uint32_t i = 0; i < t->nluns; i++)
            if (t->luns[i])
                atomic_store(scsi_lun_ua(t->luns[i], (unsigned)slot), UA_POWER_ON_RESET);
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
    struct scsi_target *t = n->target;
    const struct scsi_lun_hooks *const *m = ((struct scsi_target_priv *)t->priv)->modules;
    for (size_t k = 0; m[k]; k++)
        if (m[k]->nexus_lost)
            m[k]->nexus_lost(n);
    /* Without the target lock, on a reactor (the session's last put) while the control
     * thread adds and detaches LUNs: the slots are read as the data path reads them
     * (scsi_target_lun), and a detached LUN is freed only after every reactor's turn. */
    for (uint32_t i = 0; i < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE); i++) {
        struct scsi_lun *lu = scsi_target_lun(t, i);
        for (size_t k = 0; lu && lu->modules[k]; k++)
            if (lu->modules[k]->lun_nexus_lost)
                lu->modules[k]->lun_nexus_lost(lu, n); /* SPC-2 reservations, prevention */
    }
}
