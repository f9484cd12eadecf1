/* The reservation state of a LU (SPC-4 §5.13) as the pr*.c files share it: registrations, the
 * persistent and the SPC-2 reservation, and the helpers that read and change them (pr_state.c). */
#ifndef LR_SCSI_PR_STATE_H
#define LR_SCSI_PR_STATE_H

#include <string.h>

#include "scsi/scsi_internal.h"

#define PR_PORT_MAX 256 /* sizeof(struct scsi_nexus.initiator_port) */

/* SPC-4 §6.15.3 table 171: persistent reservation types */
enum {
    PR_WE = 1,
    PR_EA = 3,
    PR_WE_RO = 5,
    PR_EA_RO = 6,
    PR_WE_AR = 7,
    PR_EA_AR = 8,
};

/* PERSISTENT RESERVE OUT service actions (SPC-4 §6.16.2) */
enum {
    PRO_REGISTER,
    PRO_RESERVE,
    PRO_RELEASE,
    PRO_CLEAR,
    PRO_PREEMPT,
    PRO_PREEMPT_ABORT,
    PRO_REGISTER_IGNORE,
    PRO_REGISTER_MOVE,
};

struct pr_reg {
    uint64_t key;
    char port[PR_PORT_MAX]; /* as the transport names it (scsi_transport.port_name) */
    uint16_t tport;         /* relative target port identifier (ALL_TG_PT is not supported) */
};

struct pr_state {
    struct pr_reg *regs;
    unsigned nregs, cap;
    uint32_t generation;      /* PRGENERATION (SPC-4 §6.15.2) */
    uint8_t type;             /* PR_*; 0: no persistent reservation */
    char holder[PR_PORT_MAX]; /* holder's port; unused for all-registrants types */
    uint16_t holder_tport;    /* and its relative target port */
    bool aptpl;               /* activate persist through power loss is in force */
    char spc2[PR_PORT_MAX];   /* SPC-2 RESERVE holder; "" when none */
    uint16_t spc2_tport;      /* and its relative target port */
    /* not part of the state itself: */
    uint16_t local;     /* this gateway's relative target port: state text without one */
    char *path;         /* APTPL state file; NULL: none */
    bool ptpl_c;        /* APTPL can be honoured (a state file or the shared object) */
    bool shared;        /* the state lives in the store's shared object (see the top) */
    bool stale;         /* shared: the watch broke; the mirror may be behind until re-read */
    uint64_t version;   /* shared: the object version the mirror holds */
    uint64_t token;     /* shared: names this gateway in its notifies */
    unsigned jobs;      /* shared: helper-thread jobs in flight (lu->lock) */
    bool closing;       /* shared: pr_lun_drain waits; a failing re-read stops retrying */
    bool reload_queued; /* shared: a re-read job waits for the helper thread */
    pthread_cond_t idle;
};

static inline bool type_valid(unsigned type)
{
    return type == PR_WE || type == PR_EA || (type >= PR_WE_RO && type <= PR_EA_AR);
}

static inline bool type_all_reg(unsigned type)
{
    return type == PR_WE_AR || type == PR_EA_AR;
}

static inline bool type_reg_only(unsigned type)
{
    return type == PR_WE_RO || type == PR_EA_RO;
}

static inline bool type_excl_access(unsigned type)
{
    return type == PR_EA || type == PR_EA_RO || type == PR_EA_AR;
}

static inline const char *nexus_port(const struct scsi_task *t)
{
    return t->nexus ? t->nexus->initiator_port : "";
}

/* The relative target port identifier of a gateway: its TPGT, as VPD 0x83 reports it. */
static inline uint16_t rel_port(const struct scsi_target *tg)
{
    return tg->tpgt ? tg->tpgt : 1;
}

/* Whether (port, tport) and (port2, tport2) name the same I_T nexus. */
static inline bool nexus_is(const char *port, uint16_t tport, const char *port2, uint16_t tport2)
{
    return tport == tport2 && strcmp(port, port2) == 0;
}

/* Whether the SPC-2 reservation is held by the nexus (port, tport). */
static inline bool spc2_holds(const struct pr_state *ps, const char *port, uint16_t tport)
{
    return ps->spc2[0] && nexus_is(ps->spc2, ps->spc2_tport, port, tport);
}

int pr_reg_find(const struct pr_state *ps, const char *port, uint16_t tport);
bool pr_is_holder(const struct pr_state *ps, const char *port, uint16_t tport);
void pr_set_holder(struct pr_state *ps, unsigned type, const char *port, uint16_t tport);
int pr_reg_add(struct pr_state *ps, const char *port, uint16_t tport, uint64_t key);
bool pr_reg_remove(struct pr_state *ps, unsigned i);
void pr_resv_update(struct scsi_lun *lu);
bool pr_tport_here(const struct scsi_lun *lu, uint16_t tport);
void pr_ua_port(struct scsi_lun *lu, const char *port, uint16_t tport, unsigned bits);

#endif
