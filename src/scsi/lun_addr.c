/* A LUN as the rest of the core looks it up: by number on the data path (through the nexus's
 * host LUN map when its target has host entries), its size and number, and SAM-5 §4.7 LUN
 * addressing on the wire. */
#include <pthread.h>
#include <string.h>

#include "scsi/scsi_internal.h"

/* The data path's lookup: the slot array never moves, a LUN is published with release. Inline
 * here so that scsi_nexus_lun, once per command, makes no second call. */
static inline struct scsi_lun *target_lun(struct scsi_target *t, uint64_t lun)
{
    return lun < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE)
               ? __atomic_load_n(&t->luns[lun], __ATOMIC_ACQUIRE)
               : NULL;
}

struct scsi_lun *scsi_target_lun(struct scsi_target *t, uint64_t lun)
{
    return target_lun(t, lun);
}

uint64_t scsi_lun_size_bytes(const struct scsi_lun *lu)
{
    return lu->nblocks << lu->block_shift;
}

uint64_t scsi_lun_id(const struct scsi_lun *lu)
{
    return lu->id;
}

/* --- host LUN maps (host_map.c): no lock; a map read on a reactor stays allocated until the
 * end of that reactor's turn --- */

/* The LUN slot host_lun of map m names on t (NULL: none); *read_only set when it is. */
static struct scsi_lun *host_map_lun(const struct scsi_host_map *m, struct scsi_target *t,
                                     uint64_t host_lun, bool *read_only)
{
    unsigned s = host_lun < m->nslots ? m->slot[host_lun] : 0;
    if (!s)
        return NULL;
    if (read_only)
        *read_only = s & HOST_SLOT_RO;
    return target_lun(t, (s & HOST_SLOT_LUN) - 1);
}

struct scsi_lun *scsi_nexus_lun(struct scsi_nexus *n, uint64_t host_lun, bool *read_only)
{
    if (read_only)
        *read_only = false;
    /* a target without host entries pays this load and a branch per command */
    const struct scsi_host_map *m =
        atomic_load_explicit(&scsi_nexus_impl(n)->map, memory_order_acquire);
    if (__builtin_expect(m == NULL, 1))
        return target_lun(n->target, host_lun);
    return host_map_lun(m, n->target, host_lun, read_only);
}

struct iostats *scsi_task_host_stats(const struct scsi_task *t)
{
    if (!t->nexus)
        return NULL;
    /* without host entries: this load and a branch per command, nothing else */
    const struct scsi_host_map *m =
        atomic_load_explicit(&scsi_nexus_impl(t->nexus)->map, memory_order_acquire);
    if (__builtin_expect(m == NULL, 1))
        return NULL;
    const struct scsi_task_core *k = (const struct scsi_task_core *)t->core.bytes;
    unsigned s = t->lun < m->nslots ? m->slot[t->lun] : 0;
    /* the map may have changed since the command looked its LUN up: count it only where the
     * number still names the LUN it ran on */
    if (!s || !k->lu_held || (s & HOST_SLOT_LUN) - 1 != t->lu->id)
        return NULL;
    return m->stats[t->lun];
}

/* Under the target lock: PREEMPT AND ABORT through another gateway calls this on a store's
 * watch thread, not a reactor, so no reactor's turn keeps the map alive; under the lock the
 * map read is the current one, retired (and later freed) only under the lock too. Rare, so a
 * scan of at most 16384 slots. */
uint64_t scsi_nexus_host_lun(struct scsi_nexus *n, uint64_t lun, bool *read_only)
{
    struct scsi_target *t = n->target;
    if (read_only)
        *read_only = false;
    /* the pointer only, not what it points to: a target without entries takes no lock */
    if (!atomic_load_explicit(&scsi_nexus_impl(n)->map, memory_order_relaxed))
        return lun;
    uint64_t found = UINT64_MAX;
    pthread_mutex_lock(&t->lock);
    const struct scsi_host_map *m =
        atomic_load_explicit(&scsi_nexus_impl(n)->map, memory_order_acquire);
    for (uint32_t i = 0; m && i < m->nslots; i++) {
        unsigned s = m->slot[i];
        if (s && (s & HOST_SLOT_LUN) - 1 == lun) {
            if (read_only)
                *read_only = s & HOST_SLOT_RO;
            found = i;
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return m ? found : lun;
}

uint32_t scsi_nexus_report_luns(struct scsi_nexus *n, uint64_t *out, uint32_t max)
{
    struct scsi_target *t = n->target;
    const struct scsi_host_map *m =
        atomic_load_explicit(&scsi_nexus_impl(n)->map, memory_order_acquire);
    uint32_t k = 0;
    uint32_t end = m ? m->nslots : __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < end; i++) {
        if (!(m ? host_map_lun(m, t, i, NULL) : target_lun(t, i)))
            continue;
        if (out && k < max)
            out[k] = i;
        k++;
    }
    return k;
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
