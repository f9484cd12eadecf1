/* Removable medium (a LUN configured with ",removable"): START STOP UNIT with LOEJ=1 ejects
 * and loads the medium (SBC-3 §5.20), PREVENT ALLOW MEDIUM REMOVAL holds it per I_T nexus
 * (SPC-4 §6.13, SBC-3 §5.12). While the medium is out, setup answers every command that needs
 * it NOT READY, MEDIUM NOT PRESENT (sbc_medium_gate, from the opcode table's CMD_MEDIUM and
 * CMD_NEEDS_MEDIUM flags). The store stays open: "ejecting" only withdraws it from the
 * initiators, and loading gives the same data back. Fixed LUNs keep the old behaviour: START
 * STOP UNIT and PREVENT ALLOW change nothing and answer GOOD. */
#include <string.h>

#include "scsi/scsi_internal.h"

/* POWER CONDITION (byte 4 bits 7:4) other than 0h (START_VALID) makes START and LOEJ ignored
 * (SBC-3 table 86). */
#define SSU_POWER_COND(cdb) ((cdb)[4] >> 4)
#define SSU_NO_FLUSH 0x04
#define SSU_LOEJ 0x02
#define SSU_START 0x01

static void eject_flushed(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    scsi_task_complete(t, err ? sbc_io_reason(BS_FLUSH, err) : SR_OK);
}

void sbc_exec_start_stop(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    const uint8_t *cdb = t->cdb;
    if (!lu->removable || SSU_POWER_COND(cdb) != 0 || !(cdb[4] & SSU_LOEJ)) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    /* Ejecting or loading changes the LU for every host: refused through a read-only host
     * mapping as a write is (CMD_LU_STATE; scsi_target_host_map). Only LOEJ=1 moves it, so
     * the row keeps START STOP UNIT open to such a host otherwise. */
    bool map_ro = false;
    if (t->nexus)
        scsi_nexus_lun(t->nexus, t->lun, &map_ro);
    if (map_ro) {
        scsi_task_complete(t, SR_WRITE_PROTECTED);
        return;
    }
    bool load = cdb[4] & SSU_START;
    /* Any nexus holding the medium keeps it where it is, whichever way LOEJ would move it
     * (libiscsi's PreventAllow.Eject expects a load refused too). */
    pthread_mutex_lock(&lu->lock);
    bool prevented = lu->nprevent > 0;
    bool was_absent = atomic_load(&lu->medium_absent);
    if (!prevented)
        atomic_store(&lu->medium_absent, !load);
    pthread_mutex_unlock(&lu->lock);
    if (prevented) {
        scsi_task_complete(t, SR_REMOVAL_PREVENTED);
        return;
    }
    if (load || was_absent || (cdb[4] & SSU_NO_FLUSH)) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    /* Stopping with NO_FLUSH=0 writes the cache back first (SBC-3 §5.20); new writes are
     * already refused, so whatever reached the store before the eject is what is flushed. */
    scsi_core(t)->io = (struct bs_io){.op = BS_FLUSH, .done = eject_flushed, .arg = t};
    bs_submit(lu->bs, &scsi_core(t)->io);
}

/* The word of the prevent bitmap that holds slot's bit (a nexus's slot: its chunk is there). */
static uint64_t *prevent_word(struct scsi_lun *lu, unsigned slot)
{
    return &scsi_lun_nx(lu, slot)->prevent[slot % SCSI_NEXUS_CHUNK / 64];
}

void sbc_exec_prevent_allow(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    /* PREVENT 01b prevents, 00b allows; 1xb are the obsolete medium changer forms, whose
     * low bit is read the same way. */
    bool prevent = t->cdb[4] & 0x01;
    if (lu->removable && t->nexus) {
        unsigned slot = scsi_nexus_slot(t->nexus);
        pthread_mutex_lock(&lu->lock);
        uint64_t *word = prevent_word(lu, slot), bit = 1ull << (slot % 64);
        if (!!(*word & bit) != prevent) {
            *word ^= bit;
            lu->nprevent = (uint16_t)(prevent ? lu->nprevent + 1 : lu->nprevent - 1);
        }
        pthread_mutex_unlock(&lu->lock);
    }
    scsi_task_complete(t, SR_OK);
}

static void prevent_clear_nexus(struct scsi_lun *lu, const struct scsi_nexus *n)
{
    if (!lu->removable)
        return;
    unsigned slot = scsi_nexus_slot(n);
    pthread_mutex_lock(&lu->lock);
    uint64_t *word = prevent_word(lu, slot), bit = 1ull << (slot % 64);
    if (*word & bit) {
        *word &= ~bit;
        lu->nprevent--;
    }
    pthread_mutex_unlock(&lu->lock);
}

static void prevent_clear_all(struct scsi_lun *lu)
{
    if (!lu->removable)
        return;
    pthread_mutex_lock(&lu->lock);
    for (unsigned c = 0; c < SCSI_NEXUS_CHUNKS; c++) {
        struct scsi_lun_nexus_chunk *ch = scsi_lun_nx(lu, c * SCSI_NEXUS_CHUNK);
        if (ch)
            memset(ch->prevent, 0, sizeof(ch->prevent));
    }
    lu->nprevent = 0;
    pthread_mutex_unlock(&lu->lock);
}

static bool prevent_reset(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg)
{
    (void)ua;
    (void)done;
    (void)arg;
    prevent_clear_all(lu);
    return false;
}

static void prevent_reset_elsewhere(struct scsi_lun *lu, unsigned ua)
{
    (void)ua;
    prevent_clear_all(lu);
}

/* SPC-4 §6.13: I_T nexus loss ends that nexus's prevention, a logical unit reset (here or
 * through another gateway) every nexus's. */
const struct scsi_lun_hooks sbc_removable_lun_hooks = {
    .name = "removable medium",
    .lun_nexus_lost = prevent_clear_nexus,
    .reset = prevent_reset,
    .reset_elsewhere = prevent_reset_elsewhere,
};
