/* PERSISTENT RESERVE OUT (SPC-4 §6.16): the service actions, applied to the state by a job
 * (pr.c) under the LUN lock or on a fresh copy of the shared state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/pr.h"
#include "scsi/pr_text.h"
#include "util/bytes.h"

/* ---------------- PERSISTENT RESERVE OUT (SPC-4 §6.16) ---------------- */

#define PROUT_PARAM_LEN 24
#define PROUT_TID_MAX 4096

scsi_sr pr_parse_out(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    unsigned sa = t->cdb[1] & 0x1f;
    unsigned scope = t->cdb[2] >> 4, type = t->cdb[2] & 0x0f;
    uint32_t pll = get_be32(t->cdb + 5);
    /* SCOPE and TYPE matter to these; REGISTER, REGISTER AND IGNORE and CLEAR ignore them */
    bool typed = sa == PRO_RESERVE || sa == PRO_RELEASE || sa == PRO_PREEMPT ||
                 sa == PRO_PREEMPT_ABORT || sa == PRO_REGISTER_MOVE;
    if (typed && scope != 0)
        return SR_CDB_FIELD(2, 7); /* only LU_SCOPE (§6.16.3.2) */
    if (typed && !type_valid(type))
        return SR_CDB_FIELD(2, 3);
    /* §6.16.3: the basic parameter list is 24 bytes; longer lists only come with SPEC_I_PT
     * (refused once the list is read) or with REGISTER AND MOVE's TransportID. */
    if (pll < PROUT_PARAM_LEN || pll > PROUT_PARAM_LEN + PROUT_TID_MAX)
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = pll;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

struct prout {
    struct scsi_task *t;
    struct pr_state *ps; /* the mirror, or a fresh copy of the shared state */
    const char *me;      /* the sender's nexus: initiator port */
    uint16_t tport;      /* and relative target port */
    int mine;            /* index of the sender's registration, -1 if not registered */
    uint64_t rk, sark;   /* RESERVATION KEY, SERVICE ACTION RESERVATION KEY */
    unsigned type;
    bool aptpl;
    const uint8_t *param;
    uint32_t pll;
    FILE *fx;   /* side effects (fx_*) */
    bool abort; /* PREEMPT AND ABORT: preempted nexuses lose their tasks */
};

static bool is_me(const struct prout *x, const struct pr_reg *rg)
{
    return nexus_is(rg->port, rg->tport, x->me, x->tport);
}

/* A registrant nexus other than the sender's is preempted: UA REGISTRATIONS PREEMPTED, and
 * for PREEMPT AND ABORT its tasks go. */
static void fx_preempted(const struct prout *x, const struct pr_reg *rg)
{
    pr_fx_ua(x->fx, rg->port, rg->tport, UA_REG_PREEMPTED);
    if (x->abort) {
        fputs("abort", x->fx);
        pr_field_nexus(x->fx, rg->port, rg->tport);
        fputc('\n', x->fx);
    }
}

/* Removes every registration with key, the sender's excepted when keep_me, each other nexus
 * preempted. Returns how many went. */
static unsigned remove_key(struct prout *x, uint64_t key, bool keep_me)
{
    struct pr_state *ps = x->ps;
    unsigned n = 0;
    for (unsigned i = 0; i < ps->nregs;) {
        struct pr_reg *rg = &ps->regs[i];
        if (rg->key != key || (keep_me && is_me(x, rg))) {
            i++;
            continue;
        }
        if (!is_me(x, rg))
            fx_preempted(x, rg);
        pr_reg_remove(ps, i); /* moves the last one into i */
        n++;
    }
    return n;
}

/* REGISTER / REGISTER AND IGNORE EXISTING KEY (§5.13.7) */
static scsi_sr pro_register(struct prout *x, bool ignore)
{
    struct pr_state *ps = x->ps;
    if (x->mine < 0) {
        if (!ignore && x->rk)
            return SR_RESERVATION_CONFLICT;
        if (!x->sark)
            return SR_OK; /* nothing to register, nothing changes */
        if (pr_reg_add(ps, x->me, x->tport, x->sark) < 0)
            return SR_INSUFFICIENT_RESOURCES;
        ps->aptpl = x->aptpl;
        ps->generation++;
        return SR_OK;
    }
    if (!ignore && x->rk != ps->regs[x->mine].key)
        return SR_RESERVATION_CONFLICT;
    if (x->sark) {
        ps->regs[x->mine].key = x->sark;
        ps->aptpl = x->aptpl;
    } else {
        /* unregistering: a registrants-only reservation its holder leaves is released, and
         * the other registrants hear of it (§5.13.11.2.3) */
        uint8_t type = ps->type;
        if (pr_reg_remove(ps, (unsigned)x->mine) && type_reg_only(type))
            pr_fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
    }
    ps->generation++;
    return SR_OK;
}

/* RESERVE (§5.13.9): the generation does not change. */
static scsi_sr pro_reserve(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (ps->type) {
        /* the holder asking again for the same thing succeeds; anything else conflicts */
        if (pr_is_holder(ps, x->me, x->tport) && ps->type == x->type)
            return SR_OK;
        return SR_RESERVATION_CONFLICT;
    }
    pr_set_holder(ps, x->type, x->me, x->tport);
    return SR_OK;
}

/* RELEASE (§5.13.11.2.2) */
static scsi_sr pro_release(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (!ps->type || !pr_is_holder(ps, x->me, x->tport))
        return SR_OK; /* nothing of ours to release: no-op */
    if (ps->type != x->type)
        return SR_INVALID_RELEASE_OF_PR;
    uint8_t type = ps->type;
    ps->type = 0;
    if (type_reg_only(type) || type_all_reg(type))
        pr_fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
    return SR_OK;
}

/* CLEAR (§5.13.11.2.6): every registration and the reservation go. */
static scsi_sr pro_clear(struct prout *x)
{
    struct pr_state *ps = x->ps;
    pr_fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_PREEMPTED);
    ps->nregs = 0;
    ps->type = 0;
    ps->generation++;
    return SR_OK;
}

/* PREEMPT / PREEMPT AND ABORT (§5.13.11.2.4, .5) */
static scsi_sr pro_preempt(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (!ps->type || (type_all_reg(ps->type) && x->sark)) {
        /* no reservation (or an all-registrants one and a key): remove registrations only */
        if (!x->sark)
            return SR_PARAM_FIELD(8, -1);
        if (!remove_key(x, x->sark, false))
            return SR_RESERVATION_CONFLICT;
    } else if (type_all_reg(ps->type)) {
        /* SARK 0 preempts an all-registrants reservation: everyone else is unregistered and
         * the sender holds the new one */
        for (unsigned i = 0; i < ps->nregs;) {
            if (is_me(x, &ps->regs[i])) {
                i++;
                continue;
            }
            fx_preempted(x, &ps->regs[i]);
            ps->regs[i] = ps->regs[--ps->nregs];
        }
        pr_set_holder(ps, x->type, x->me, x->tport);
    } else {
        int h = pr_reg_find(ps, ps->holder, ps->holder_tport);
        if (h >= 0 && ps->regs[h].key == x->sark) {
            /* preempting the reservation: its holder's key loses its registrations (the
             * sender's own excepted) and the sender holds a reservation of the new type */
            uint8_t old = ps->type;
            remove_key(x, x->sark, true);
            pr_set_holder(ps, x->type, x->me, x->tport);
            if (old != x->type)
                pr_fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
        } else {
            if (!x->sark)
                return SR_PARAM_FIELD(8, -1);
            if (!remove_key(x, x->sark, false))
                return SR_RESERVATION_CONFLICT;
        }
    }
    ps->generation++;
    return SR_OK;
}

/* The initiator port a TransportID (of the sender's transport) names, into port; a field the
 * transport refuses is pointed at in the parameter list, where the TransportID starts at byte
 * 24 (PROUT_PARAM_LEN). */
static scsi_sr parse_transport_id(struct scsi_task *t, const uint8_t *tid, uint32_t len, char *port,
                                  size_t portlen)
{
    uint32_t bad = 0;
    if (!t->nexus || t->nexus->transport->tid_parse(tid, len, port, portlen, &bad) < 0)
        return SR_PARAM_FIELD(PROUT_PARAM_LEN + bad, -1);
    return SR_OK;
}

/* Whether tport is a relative target port of the LU: this gateway's or another's (each
 * gateway's ALUA target port group is its one target port, alua.c). */
static bool tport_known(const struct scsi_lun *lu, uint16_t tport)
{
    if (tport == rel_port(lu->target))
        return true;
    for (unsigned i = 0; i < lu->alua_ngroups; i++)
        if (lu->alua[i].id == tport)
            return true;
    return false;
}

/* REGISTER AND MOVE (§5.13.8): the holder hands its reservation to another I_T nexus, the
 * TransportID's initiator port through the RELATIVE TARGET PORT IDENTIFIER's target port,
 * registering it with SARK, and may unregister itself (UNREG). */
static scsi_sr pro_register_move(struct prout *x)
{
    struct pr_state *ps = x->ps;
    const uint8_t *p = x->param;
    if (!ps->type || type_all_reg(ps->type) || !pr_is_holder(ps, x->me, x->tport))
        return SR_RESERVATION_CONFLICT;
    if (!x->sark)
        return SR_PARAM_FIELD(8, -1);
    uint16_t dtport = get_be16(p + 18);
    if (!tport_known(x->t->lu, dtport))
        return SR_PARAM_FIELD(18, -1); /* no such relative target port */
    uint32_t tidlen = get_be32(p + 20);
    if (tidlen > x->pll - PROUT_PARAM_LEN)
        return SR_PARAM_LIST_LENGTH;
    char dest[PR_PORT_MAX];
    scsi_sr sr = parse_transport_id(x->t, p + PROUT_PARAM_LEN, tidlen, dest, sizeof(dest));
    if (sr)
        return sr;
    if (nexus_is(dest, dtport, x->me, x->tport))
        return SR_PARAM_FIELD(24, -1); /* moving to itself */
    int d = pr_reg_find(ps, dest, dtport);
    if (d >= 0)
        ps->regs[d].key = x->sark;
    else if (pr_reg_add(ps, dest, dtport, x->sark) < 0)
        return SR_INSUFFICIENT_RESOURCES;
    pr_set_holder(ps, x->type, dest, dtport);
    if (p[17] & 0x02) { /* UNREG */
        int m = pr_reg_find(ps, x->me, x->tport);
        if (m >= 0)
            pr_reg_remove(ps, (unsigned)m);
    }
    ps->aptpl = p[17] & 0x01;
    ps->generation++;
    return SR_OK;
}

/* Checks the parameter list fields every service action shares (§6.16.3). */
static scsi_sr prout_param_check(const struct prout *x, unsigned sa)
{
    const uint8_t *p = x->param;
    if (sa == PRO_REGISTER_MOVE) {
        if ((p[17] & 0x01) && !x->ps->ptpl_c)
            return SR_PARAM_FIELD(17, 0); /* APTPL without PTPL_C */
        return SR_OK;
    }
    if (p[20] & 0x08)
        return SR_PARAM_FIELD(20, 3); /* SPEC_I_PT: SIP_C is 0 */
    if (x->pll != PROUT_PARAM_LEN)
        return SR_PARAM_LIST_LENGTH;
    bool reg = sa == PRO_REGISTER || sa == PRO_REGISTER_IGNORE;
    if (reg && (p[20] & 0x04))
        return SR_PARAM_FIELD(20, 2); /* ALL_TG_PT: ATP_C is 0 */
    if (reg && (p[20] & 0x01) && !x->ps->ptpl_c)
        return SR_PARAM_FIELD(20, 0); /* APTPL: PTPL_C is 0 */
    return SR_OK;
}

/* A PERSISTENT RESERVE OUT applied to ps (see job_apply). */
static scsi_sr prout_apply(struct scsi_task *t, struct pr_state *ps, FILE *fx)
{
    unsigned sa = t->cdb[1] & 0x1f;
    struct prout x = {
        .t = t,
        .ps = ps,
        .me = nexus_port(t),
        .tport = rel_port(t->target),
        .type = t->cdb[2] & 0x0f,
        .param = t->iov[0].iov_base,
        .pll = t->xfer_len,
        .fx = fx,
        .abort = sa == PRO_PREEMPT_ABORT,
    };
    x.rk = get_be64(x.param);
    x.sark = get_be64(x.param + 8);
    x.aptpl = x.param[20] & 0x01;
    scsi_sr sr = prout_param_check(&x, sa);
    x.mine = pr_reg_find(ps, x.me, x.tport);
    if (sr)
        return sr; /* refused before anything changes */
    if (sa == PRO_REGISTER || sa == PRO_REGISTER_IGNORE)
        return pro_register(&x, sa == PRO_REGISTER_IGNORE);
    /* every other service action needs the sender registered under that key */
    if (x.mine < 0 || x.rk != ps->regs[x.mine].key)
        return SR_RESERVATION_CONFLICT;
    switch (sa) {
    case PRO_RESERVE:
        return pro_reserve(&x);
    case PRO_RELEASE:
        return pro_release(&x);
    case PRO_CLEAR:
        return pro_clear(&x);
    case PRO_PREEMPT:
    case PRO_PREEMPT_ABORT:
        return pro_preempt(&x);
    case PRO_REGISTER_MOVE:
        return pro_register_move(&x);
    default:
        return SR_CDB_FIELD(1, 4);
    }
}

/* PREEMPT AND ABORT's aborts run once the change is committed (pr_fx_apply), on this gateway
 * through the transport's abort_nexus_tasks and on the others from the notify. */
void pr_exec_out(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    pr_job_run(t, PRJ_OUT, prout_apply, NULL);
}
