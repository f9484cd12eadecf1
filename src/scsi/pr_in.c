/* PERSISTENT RESERVE IN (SPC-4 §6.15): READ KEYS, READ RESERVATION, REPORT CAPABILITIES,
 * READ FULL STATUS. */
#include <stdlib.h>
#include <string.h>

#include "scsi/pr.h"
#include "util/bytes.h"

/* ---------------- PERSISTENT RESERVE IN (SPC-4 §6.15) ---------------- */

scsi_sr pr_parse_in(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    r->xfer_len = get_be16(t->cdb + 7);
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Builds the reply with the LUN lock held; returns a malloc'd buffer and its length. */
static uint8_t *prin_build(struct scsi_task *t, uint32_t *len)
{
    const struct pr_state *ps = t->lu->pr;
    /* a task of no I_T nexus has no transport to name ports in: no TransportIDs */
    const struct scsi_transport *tp = t->nexus ? t->nexus->transport : NULL;
    unsigned sa = t->cdb[1] & 0x1f;
    size_t cap = 8;
    if (sa == 0)
        cap += 8 * (size_t)ps->nregs;
    else if (sa == 1)
        cap += 16;
    else if (sa == 3)
        for (unsigned i = 0; i < ps->nregs; i++)
            cap += 24 + (tp ? tp->tid_len(ps->regs[i].port) : 0);
    uint8_t *d = calloc(1, cap);
    if (!d)
        return NULL;
    uint8_t *p = d + 8;
    switch (sa) {
    case 0: /* READ KEYS (§6.15.2) */
        put_be32(d, ps->generation);
        for (unsigned i = 0; i < ps->nregs; i++, p += 8)
            put_be64(p, ps->regs[i].key);
        put_be32(d + 4, 8 * ps->nregs); /* the whole list, whatever the allocation length */
        break;
    case 1: /* READ RESERVATION (§6.15.3) */
        put_be32(d, ps->generation);
        if (ps->type) {
            /* an all-registrants reservation reports key 0 (§6.15.3.2) */
            int h = type_all_reg(ps->type) ? -1 : pr_reg_find(ps, ps->holder, ps->holder_tport);
            put_be64(p, h >= 0 ? ps->regs[h].key : 0);
            p[13] = ps->type; /* SCOPE 0h: logical unit */
            p += 16;
            put_be32(d + 4, 16);
        }
        break;
    case 2: /* REPORT CAPABILITIES (§6.15.4) */
        put_be16(d, 8);
        /* CRH 0, SIP_C 0, ATP_C 0 (SPEC_I_PT and ALL_TG_PT are refused); PTPL_C when there
         * is a state file or shared state */
        d[2] = ps->ptpl_c ? 0x01 : 0;
        /* TMV 1; ALLOW COMMANDS 001b: TEST UNIT READY passes WE and EA reservations */
        d[3] = 0x80 | (1u << 4) | (ps->aptpl ? 0x01 : 0);
        d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02; /* WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX */
        d[5] = 0x01;                             /* EX_AC_AR */
        break;
    case 3: /* READ FULL STATUS (§6.15.5) */
        put_be32(d, ps->generation);
        for (unsigned i = 0; i < ps->nregs; i++) {
            const struct pr_reg *rg = &ps->regs[i];
            bool holder = pr_is_holder(ps, rg->port, rg->tport);
            put_be64(p, rg->key);
            p[12] = holder ? 0x01 : 0; /* ALL_TG_PT 0, R_HOLDER */
            p[13] = holder ? ps->type : 0;
            put_be16(p + 18, rg->tport); /* the registrant nexus's own target port */
            uint32_t tidlen = tp ? tp->tid_len(rg->port) : 0;
            put_be32(p + 20, tidlen);
            if (tp)
                tp->tid_put(p + 24, rg->port);
            p += 24 + tidlen;
        }
        put_be32(d + 4, (uint32_t)(p - d - 8));
        break;
    }
    *len = sa == 2 ? 8 : (uint32_t)(p - d);
    return d;
}

void pr_exec_in(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    if (lu->pr->shared) {
        /* re-read the cluster's state first: one round trip, on the helper thread */
        pr_job_run(t, PRJ_IN, NULL, prin_build);
        return;
    }
    uint32_t len = 0;
    pthread_mutex_lock(&lu->lock);
    uint8_t *d = prin_build(t, &len);
    pthread_mutex_unlock(&lu->lock);
    if (!d) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    scsi_task_put_data(t, d, len);
    free(d);
}
