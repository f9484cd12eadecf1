/* The reservation state of a LU: registrations, the holder, the fast-path summary lu->resv,
 * and the unit attentions a change raises on this gateway's nexuses (SPC-4 §5.13). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/pr_state.h"

int pr_reg_find(const struct pr_state *ps, const char *port, uint16_t tport)
{
    for (unsigned i = 0; i < ps->nregs; i++)
        if (nexus_is(ps->regs[i].port, ps->regs[i].tport, port, tport))
            return (int)i;
    return -1;
}

bool pr_is_holder(const struct pr_state *ps, const char *port, uint16_t tport)
{
    if (!ps->type)
        return false;
    if (type_all_reg(ps->type)) /* every registrant nexus holds it (SPC-4 §5.13.10) */
        return pr_reg_find(ps, port, tport) >= 0;
    return nexus_is(ps->holder, ps->holder_tport, port, tport);
}

/* A reservation of type for the nexus (port, tport): nobody in particular for the
 * all-registrants types. */
void pr_set_holder(struct pr_state *ps, unsigned type, const char *port, uint16_t tport)
{
    ps->type = (uint8_t)type;
    snprintf(ps->holder, sizeof(ps->holder), "%s", type_all_reg(type) ? "" : port);
    ps->holder_tport = type_all_reg(type) ? 0 : tport;
}

int pr_reg_add(struct pr_state *ps, const char *port, uint16_t tport, uint64_t key)
{
    if (ps->nregs == ps->cap) {
        unsigned cap = ps->cap ? ps->cap * 2 : 8;
        struct pr_reg *r = realloc(ps->regs, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        ps->regs = r;
        ps->cap = cap;
    }
    struct pr_reg *r = &ps->regs[ps->nregs++];
    r->key = key;
    snprintf(r->port, sizeof(r->port), "%s", port);
    r->tport = tport;
    return 0;
}

/* Drops registration i. The reservation goes with its holder's registration, or with the last
 * registration of an all-registrants type (SPC-4 §5.13.11.2.3). Returns whether it went. */
bool pr_reg_remove(struct pr_state *ps, unsigned i)
{
    bool released = false;
    if (ps->type && !type_all_reg(ps->type) &&
        nexus_is(ps->holder, ps->holder_tport, ps->regs[i].port, ps->regs[i].tport))
        released = true;
    ps->regs[i] = ps->regs[--ps->nregs];
    if (ps->type && type_all_reg(ps->type) && ps->nregs == 0)
        released = true;
    if (released)
        ps->type = 0;
    return released;
}

void pr_resv_update(struct scsi_lun *lu)
{
    const struct pr_state *ps = lu->pr;
    /* a stale mirror sends every command through pr_check, which refuses them */
    unsigned v = (ps->spc2[0] ? RESV_SPC2 : 0) | (ps->type || ps->stale ? RESV_PR : 0) |
                 (ps->nregs ? RESV_REGS : 0);
    atomic_store_explicit(&lu->resv, v, memory_order_release);
}

/* Whether the nexus (port, tport) can be one of this gateway's: tport is its own, or 0 (a
 * notify from a gateway that names initiator ports only: every nexus of the port). */
bool pr_tport_here(const struct scsi_lun *lu, uint16_t tport)
{
    return !tport || tport == rel_port(lu->target);
}

/* Unit attention to the nexus (port, tport), if it exists here (registrations outlive
 * sessions; a port that never logged in since a restart has nothing to report to; another
 * gateway's target port is that gateway's to tell). */
void pr_ua_port(struct scsi_lun *lu, const char *port, uint16_t tport, unsigned bits)
{
    struct scsi_target *t = lu->target;
    struct scsi_target_priv *p = t->priv;
    if (!pr_tport_here(lu, tport))
        return;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        if (p->nexus[s] && strcmp(p->nexus[s]->pub.initiator_port, port) == 0) {
            scsi_ua_raise(lu, s, bits);
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
}
