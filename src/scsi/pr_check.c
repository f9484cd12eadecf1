/* How reservations meet commands: the conflict check scsi_task_setup makes while anything is
 * reserved (SPC-4 §5.13.1 table 66, SBC-3 table 13), and SPC-2 RESERVE / RELEASE. */
#include "scsi/pr.h"

/* ---------------- the conflict check ---------------- */

/* SBC-3 table 13: START STOP UNIT is allowed only to start (START=1, LOEJ=0, no power
 * condition); PREVENT ALLOW MEDIUM REMOVAL only to allow. */
static bool cdb_allowed(const uint8_t *cdb)
{
    if (cdb[0] == 0x1b)
        return (cdb[4] & 0xf3) == 0x01;
    if (cdb[0] == 0x1e)
        return (cdb[4] & 0x03) == 0;
    return false;
}

scsi_sr pr_check(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c, unsigned resv)
{
    unsigned cls = c->pr;
    if (cls == PRC_DEFAULT)
        cls = (c->flags & CMD_NOLUN_OK) ? PRC_ANY : (c->flags & CMD_WRITES) ? PRC_WRITE : PRC_READ;
    if (cls == PRC_ANY)
        return SR_OK;
    /* registrations alone block nothing but SPC-2 RESERVE/RELEASE */
    if (!(resv & (RESV_SPC2 | RESV_PR)) && cls != PRC_SPC2)
        return SR_OK;

    struct pr_state *ps = lu->pr;
    const char *me = nexus_port(t); /* through this gateway's target port, ps->local */
    bool conflict = false;
    pthread_mutex_lock(&lu->lock);
    if (ps->stale) {
        /* shared state this gateway may have missed changes of: only the commands that go
         * to the cluster themselves (PERSISTENT RESERVE IN/OUT) and those no reservation
         * restricts pass until it has been re-read; the others end in ABORTED COMMAND /
         * TIMEOUT ON LOGICAL UNIT, which initiators retry */
        bool refuse = cls != PRC_PR && cls != PRC_ALLOW;
        pthread_mutex_unlock(&lu->lock);
        return refuse ? SR_LU_TIMEOUT : SR_OK;
    } else if (ps->spc2[0]) {
        /* SPC-2 §5.5.1: PERSISTENT RESERVE IN/OUT conflict whoever holds the RESERVE;
         * RESERVE/RELEASE decide for themselves; other commands pass only for the holder. */
        if (cls == PRC_PR)
            conflict = true;
        else if (cls != PRC_SPC2)
            conflict = !spc2_holds(ps, me, ps->local);
    } else if (cls == PRC_SPC2) {
        /* SPC-4 §5.13.3: RESERVE and RELEASE conflict while anything is registered */
        conflict = ps->nregs > 0 || ps->type;
    } else if (ps->type && cls != PRC_PR && cls != PRC_ALLOW && !pr_is_holder(ps, me, ps->local)) {
        /* SPC-4 §5.13.1 / table 66: registrants of a registrants-only or all-registrants
         * reservation have full access; everyone else meets the type's restrictions. */
        bool registered = pr_reg_find(ps, me, ps->local) >= 0;
        bool full = registered && (type_reg_only(ps->type) || type_all_reg(ps->type));
        if (!full) {
            if (cls == PRC_CDB)
                conflict = !cdb_allowed(t->cdb);
            else if (cls == PRC_WRITE)
                conflict = true;
            else
                conflict = type_excl_access(ps->type);
        }
    }
    pthread_mutex_unlock(&lu->lock);
    return conflict ? SR_RESERVATION_CONFLICT : SR_OK;
}

/* ---------------- SPC-2 RESERVE / RELEASE ---------------- */

/* RESERVE(6)/(10), RELEASE(6)/(10) (SPC-2 §7.21-7.24): logical unit reservations only; the
 * third-party and extent forms are refused by the usage masks. On shared state they hold
 * across gateways like persistent reservations (the holder is the "spc2" line). */
scsi_sr pr_parse_spc2(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)t, (void)c, (void)r;
    return SR_OK;
}

void pr_exec_reserve(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    pr_job_run(t, PRJ_RESERVE, NULL, NULL);
}

void pr_exec_release(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    pr_job_run(t, PRJ_RELEASE, NULL, NULL);
}
