/* Logical unit and target resets (SAM-5 §6.3): the unit attention they raise, what each
 * per-LUN module does (scsi_lun_hooks.reset), and a reset through another gateway. */
#include <inttypes.h>
#include <stdlib.h>

#include "scsi/scsi_internal.h"
#include "util/log.h"

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

/* What a reset does here (ua: UA_BUS_DEVICE_RESET or UA_POWER_ON): its unit attention, then
 * each module's part (a shared LU's reservations tell the other gateways); w (NULL: nobody
 * waits) counts the modules that answer later. */
static void lun_reset_one(struct scsi_lun *lu, unsigned ua, struct reset_wait *w)
{
    scsi_ua_raise_all(lu, NULL, ua);
    /* SPC-4 §6.13: a logical unit reset ends medium removal prevention; SPC-2 §5.5.1: it
     * releases the SPC-2 reservation (persistent reservations survive, SPC-4 §5.13.1) */
    for (size_t k = 0; lu->modules[k]; k++) {
        const struct scsi_lun_hooks *m = lu->modules[k];
        if (!m->reset)
            continue;
        if (w) {
            w->left++;
            if (!m->reset(lu, ua, reset_wait_one, w))
                w->left--;
        } else {
            m->reset(lu, ua, NULL, NULL);
        }
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
    struct scsi_sync_wait *sw = scsi_sync_wait_new(lu);
    /* One live nexus at a time, held while its abort hook runs without the lock: no array of
     * SCSI_NEXUS_MAX pointers on this (store) thread's stack. */
    for (unsigned next = 0; t->abort_nexus_tasks;) {
        struct scsi_nexus *held = NULL;
        pthread_mutex_lock(&t->lock);
        while (next < SCSI_NEXUS_MAX && !held) {
            struct scsi_nexus_impl *ni = p->nexus[next++];
            if (ni && ni->refs > 0) {
                ni->refs++; /* held until the abort hook has run */
                held = &ni->pub;
            }
        }
        pthread_mutex_unlock(&t->lock);
        if (!held)
            break;
        t->abort_nexus_tasks(t, held, lu, scsi_sync_wait_join(sw));
        scsi_nexus_put(held);
    }
    /* the aborts are posted to the reactors before an initiator can see the UA */
    scsi_ua_raise_all(lu, NULL, ua);
    for (size_t k = 0; lu->modules[k]; k++)
        if (lu->modules[k]->reset_elsewhere)
            lu->modules[k]->reset_elsewhere(lu, ua); /* SPC-4 §6.13: prevention ends */
    /* The resetting gateway answers once this one acknowledges, after this returns: by then
     * none of the aborted writes may still be in the store (SAM-5 §7.1). Bounded below its
     * wait for the acknowledgement. */
    if (sw && !scsi_sync_wait_finish(sw, SCSI_ELSEWHERE_WAIT_MS))
        LOG_WARN("LUN %" PRIu64 " (%s): reset through another gateway: aborted commands still in "
                 "the store after %u ms; acknowledging anyway",
                 lu->id, lu->bs->desc, SCSI_ELSEWHERE_WAIT_MS);
}
