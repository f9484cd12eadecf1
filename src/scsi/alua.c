/* Implicit asymmetric logical unit access (ALUA, SPC-4 §5.16): several gateways export the
 * same LUNs, each gateway is one target port in a target port group of its own, and every
 * group has an access state per LUN, fixed by configuration. INQUIRY reports TPGS=01b
 * (implicit only, so SET TARGET PORT GROUPS is not offered), REPORT TARGET PORT GROUPS lists
 * every group, and a standby port refuses what §5.16.2.4.5 does not allow. A gateway knows
 * the other groups only from its configuration: the states it reports for them are what the
 * operator wrote, identically, on every gateway. The operator changes a state live
 * (scsi_lun_alua_set: linerate-ctl or a reload): an implicit transition as §5.16.2.2 has it,
 * with ASYMMETRIC ACCESS STATE CHANGED for every I_T nexus. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

static const struct {
    const char *name;
    enum scsi_alua_state state;
} state_names[] = {
    {"active/optimized", SCSI_ALUA_ACTIVE_OPTIMIZED},
    {"ao", SCSI_ALUA_ACTIVE_OPTIMIZED},
    {"optimized", SCSI_ALUA_ACTIVE_OPTIMIZED},
    {"active/non-optimized", SCSI_ALUA_ACTIVE_NON_OPTIMIZED},
    {"an", SCSI_ALUA_ACTIVE_NON_OPTIMIZED},
    {"non-optimized", SCSI_ALUA_ACTIVE_NON_OPTIMIZED},
    {"standby", SCSI_ALUA_STANDBY},
    {"sb", SCSI_ALUA_STANDBY},
};

int scsi_alua_state_parse(const char *s, enum scsi_alua_state *out)
{
    for (size_t i = 0; i < sizeof(state_names) / sizeof(state_names[0]); i++)
        if (strcasecmp(s, state_names[i].name) == 0) {
            *out = state_names[i].state;
            return 0;
        }
    return -1;
}

const char *scsi_alua_state_name(enum scsi_alua_state s)
{
    switch (s) {
    case SCSI_ALUA_ACTIVE_OPTIMIZED:
        return "active/optimized";
    case SCSI_ALUA_ACTIVE_NON_OPTIMIZED:
        return "active/non-optimized";
    case SCSI_ALUA_STANDBY:
        return "standby";
    }
    return "?";
}

static struct scsi_alua_port *find_group(struct scsi_lun *lu, uint16_t id)
{
    for (unsigned i = 0; i < lu->alua_ngroups; i++)
        if (lu->alua[i].id == id)
            return &lu->alua[i];
    return NULL;
}

static void add_group(struct scsi_lun *lu, const struct scsi_alua_group *g)
{
    struct scsi_alua_port *p = &lu->alua[lu->alua_ngroups++];
    p->id = g->id;
    atomic_init(&p->state, g->state);
}

static int alua_lun_init(struct scsi_lun *lu, const struct scsi_lun_config *cfg, char *err,
                         size_t errlen)
{
    (void)err;
    (void)errlen;
    const struct scsi_target *tg = lu->target;
    lu->alua_ngroups = 0;
    /* own group: its id as VPD 0x83 reports it */
    add_group(lu, &(struct scsi_alua_group){
                      .id = tg->tpgt ? tg->tpgt : 1,
                      .state = (uint8_t)(cfg->alua_state_set ? cfg->alua_state : tg->alua_state)});
    /* alua-mode = failover on a store the failover thread can run on (alua_failover.c): the
     * role is the cluster's to give, so the own group starts standby, before the LUN is
     * published, and an expired lease; the configured state only says whether to create the
     * role's object. A restarted former holder thus serves nothing from its configuration. */
    const struct bs_ops *o = lu->bs->ops;
    if (tg->alua_failover && o->obj_read && o->obj_write && o->fence && o->client_addr) {
        lu->alua_configured_ao = lu->alua[0].state == SCSI_ALUA_ACTIVE_OPTIMIZED;
        atomic_store(&lu->alua[0].state, SCSI_ALUA_STANDBY);
        atomic_store(&lu->alua_lease_ms, 1);
    }
    for (unsigned i = 0; i < tg->alua_npeers && lu->alua_ngroups < SCSI_ALUA_GROUPS_MAX; i++)
        if (!find_group(lu, tg->alua_peers[i].id))
            add_group(lu, &tg->alua_peers[i]);
    for (unsigned i = 0; i < cfg->alua_npeers; i++) {
        struct scsi_alua_port *g = find_group(lu, cfg->alua_peers[i].id);
        if (g && g != &lu->alua[0])
            atomic_store_explicit(&g->state, cfg->alua_peers[i].state, memory_order_relaxed);
        else if (!g && lu->alua_ngroups < SCSI_ALUA_GROUPS_MAX)
            add_group(lu, &cfg->alua_peers[i]);
    }
    return 0;
}

/* The state first, then the unit attention: a nexus that reports 2Ah/06h and then asks
 * REPORT TARGET PORT GROUPS reads the new state. Every nexus but skip (the one that sent SET
 * TARGET PORT GROUPS, §5.16.2.3). */
static int alua_set(struct scsi_lun *lu, struct scsi_alua_port *g, enum scsi_alua_state st,
                    const struct scsi_nexus *skip)
{
    if (atomic_exchange(&g->state, (unsigned char)st) == st)
        return 0;
    scsi_ua_raise_all(lu, skip, UA_ALUA_CHANGED);
    return 1;
}

int scsi_lun_alua_set(struct scsi_lun *lu, uint16_t group, enum scsi_alua_state st)
{
    struct scsi_alua_port *g = group ? find_group(lu, group) : &lu->alua[0];
    /* an implicit transition (§5.16.2.2): no command of any nexus asked for it */
    return g ? alua_set(lu, g, st, NULL) : -1;
}

unsigned scsi_lun_alua_get(const struct scsi_lun *lu, struct scsi_alua_group *out, unsigned max)
{
    struct scsi_lun *l = (struct scsi_lun *)lu;
    unsigned n = 0;
    for (; n < l->alua_ngroups && n < max; n++) {
        out[n].id = l->alua[n].id;
        out[n].state = atomic_load_explicit(&l->alua[n].state, memory_order_relaxed);
    }
    return n;
}

const struct scsi_lun_hooks alua_lun_hooks = {.name = "alua", .init = alua_lun_init};

/* --- REPORT TARGET PORT GROUPS (SPC-4 §6.27) --- */

#define RTPG_FORMAT(cdb) ((cdb)[1] >> 5)

static uint32_t rtpg_len(const struct scsi_lun *lu, uint8_t format)
{
    /* header, then per group an 8-byte descriptor plus one 4-byte target port descriptor */
    return (format == 1 ? 8 : 4) + 12u * lu->alua_ngroups;
}

scsi_sr alua_parse_rtpg(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    if (!t->lu)
        return SR_LUN_NOT_SUPPORTED;
    uint8_t format = RTPG_FORMAT(t->cdb);
    if (format > 1) /* 000b length only, 001b extended header; the rest reserved */
        return SR_CDB_FIELD(1, 5 + (31 - __builtin_clz(format)));
    uint32_t alloc = get_be32(t->cdb + 6);
    uint32_t full = rtpg_len(t->lu, format);
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

void alua_exec_rtpg(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    const struct scsi_lun *lu = t->lu;
    uint8_t format = RTPG_FORMAT(t->cdb);
    uint8_t d[8 + 12 * SCSI_ALUA_GROUPS_MAX] = {0};
    uint8_t *p = d + 4;
    if (format == 1) {
        d[4] = 0x10; /* FORMAT TYPE 001b */
        d[5] = 0;    /* IMPLICIT TRANSITION TIME: a change is immediate (no transitioning state) */
        p = d + 8;
    }
    /* In ascending group order, so every gateway returns the same bytes for the LUN. */
    uint32_t last = 0;
    for (unsigned k = 0; k < lu->alua_ngroups; k++) {
        const struct scsi_alua_port *g = NULL;
        for (unsigned i = 0; i < lu->alua_ngroups; i++)
            if (lu->alua[i].id > last && (!g || lu->alua[i].id < g->id))
                g = &lu->alua[i];
        assert(g); /* ids are distinct (alua_lun_init) */
        last = g->id;
        /* PREF 0; the state as it is now (a change made after this load is another UA) */
        p[0] = atomic_load_explicit(&((struct scsi_alua_port *)g)->state, memory_order_relaxed);
        p[1] = 0x04 | 0x02 | 0x01; /* S_SUP, AN_SUP, AO_SUP: the states configurable here */
        put_be16(p + 2, g->id);
        p[5] = 0x00;                /* STATUS CODE: no status available */
        p[7] = 1;                   /* TARGET PORT COUNT: a gateway is one target port */
        put_be16(p + 8 + 2, g->id); /* RELATIVE TARGET PORT IDENTIFIER = group id */
        p += 12;
    }
    uint32_t len = (uint32_t)(p - d);
    /* RETURN DATA LENGTH: the length of the list of target port groups, in either format
     * (the extended header's four extra bytes are not counted) */
    put_be32(d, len - (format == 1 ? 8 : 4));
    scsi_task_put_data(t, d, len);
}

/* --- SET TARGET PORT GROUPS (SPC-4 §6.36), explicit ALUA targets only --- */

/* a 4-byte header, then 4-byte descriptors: one per group at most is all that can mean
 * anything, a few repeats tolerated */
#define STPG_MAX_LEN (4u + 4u * 4u * SCSI_ALUA_GROUPS_MAX)

scsi_sr alua_parse_stpg(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    if (!t->lu)
        return SR_LUN_NOT_SUPPORTED;
    uint32_t len = get_be32(t->cdb + 6);
    if (len > STPG_MAX_LEN || (len && (len < 4 || (len - 4) % 4)))
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = len;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

void alua_exec_stpg(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    const uint8_t *d = t->xfer_len ? t->iov[0].iov_base : NULL;
    /* every descriptor checked before any applies: a bad one changes nothing */
    for (uint32_t off = 4; off < t->xfer_len; off += 4) {
        uint8_t st = d[off] & 0x0f;
        if (st > SCSI_ALUA_STANDBY) { /* the supported states (RTPG: AO, AN, S) */
            scsi_task_complete(t, SR_PARAM_FIELD(off, 3));
            return;
        }
        if (!find_group(lu, get_be16(d + off + 2))) {
            scsi_task_complete(t, SR_PARAM_FIELD(off + 2, 7));
            return;
        }
    }
    for (uint32_t off = 4; off < t->xfer_len; off += 4)
        alua_set(lu, find_group(lu, get_be16(d + off + 2)), (enum scsi_alua_state)(d[off] & 0x0f),
                 t->nexus);
    scsi_task_complete(t, SR_OK);
}
