/* Primary commands (SPC-4) every LUN answers: INQUIRY with its VPD pages, REPORT LUNS, TEST UNIT
 * READY, REQUEST SENSE and REPORT SUPPORTED OPERATION CODES (built from the opcode table).
 * Mode pages live in mode.c. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

scsi_sr spc_parse_none(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)t, (void)c, (void)r;
    return SR_OK;
}

void spc_exec_good(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    scsi_task_complete(t, SR_OK);
}

void spc_exec_tur(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    scsi_task_complete(t, SR_OK); /* setup refused it if the medium is out */
}

/* --- INQUIRY (SPC-4 §6.6) --- */

/* The pages answered, ascending: SUPPORTED VPD PAGES lists exactly these (SPC-4 §7.8.13).
 * Block Limits Extension (B7h) is not among them: its fields describe stream writes (SBC-4
 * WRITE STREAM), which are not offered. */
static const uint8_t vpd_pages[] = {0x00, 0x80, 0x83, 0x86, 0x8f, 0xb0, 0xb1, 0xb2};

scsi_sr spc_parse_inquiry(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    bool evpd = t->cdb[1] & 1;
    uint8_t page = t->cdb[2];
    if (!evpd && page)
        return SR_CDB_FIELD(2, -1); /* a page code needs EVPD=1 */
    if (evpd && !memchr(vpd_pages, page, sizeof(vpd_pages)))
        return SR_CDB_FIELD(2, -1);
    r->xfer_len = get_be16(t->cdb + 3);
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Peripheral qualifier/device type: 000b/00h for a disk, 011b/1Fh where no LUN is (§6.6.2). */
static uint8_t peripheral(const struct scsi_task *t)
{
    return t->lu ? 0x00 : 0x7f;
}

static void pad_copy(uint8_t *dst, const char *s, size_t n)
{
    size_t k = strlen(s);
    memset(dst, ' ', n);
    memcpy(dst, s, k < n ? k : n);
}

static uint32_t inquiry_standard(const struct scsi_task *t, uint8_t *d)
{
    memset(d, 0, 96);
    d[0] = peripheral(t);
    if (t->lu && t->lu->removable) /* RMB: removable medium */
        d[1] = 0x80;
    d[2] = 0x06;        /* VERSION: SPC-4 */
    d[3] = 0x10 | 0x02; /* HISUP, RESPONSE DATA FORMAT 2 */
    d[4] = 96 - 5;      /* ADDITIONAL LENGTH */
    /* 3PC: EXTENDED COPY (xcopy.c); TPGS 01b: implicit ALUA (alua.c, SPC-4 §5.16), 11b: and
     * explicit, SET TARGET PORT GROUPS (alua-explicit) */
    d[5] = 0x08 | (t->lu && t->lu->target->alua_explicit ? 0x30 : 0x10);
    d[7] = 0x02; /* CMDQUE */
    /* the LU's identity (target.c); where no LUN is, the defaults' words */
    const struct scsi_lun_identity *id = t->lu ? &t->lu->ident : NULL;
    pad_copy(d + 8, id ? id->vendor : "LINERATE", 8);
    pad_copy(d + 16, id ? id->product : "linerate", 16);
    pad_copy(d + 32, id ? id->revision : "0001", 4);
    /* version descriptors (§6.6.2 table 146): SAM-5, the transport's (of the task's nexus),
     * SPC-4, SBC-3 */
    static const uint16_t ours[] = {0x00a0, 0, 0x0460, 0x04c0};
    uint8_t *v = d + 58;
    for (unsigned i = 0; i < 4; i++) {
        uint16_t vd = i == 1 ? (t->nexus ? t->nexus->transport->version_descriptor : 0) : ours[i];
        if (vd) {
            put_be16(v, vd);
            v += 2;
        }
    }
    return 96;
}

/* One designation descriptor (SPC-4 §7.8.6.1): protocol/code set, PIV/association/type. */
static uint8_t *designator(uint8_t *p, uint8_t proto_codeset, uint8_t piv_assoc_type,
                           const void *id, uint8_t len)
{
    p[0] = proto_codeset;
    p[1] = piv_assoc_type;
    p[2] = 0;
    p[3] = len;
    memcpy(p + 4, id, len);
    return p + 4 + len;
}

/* A SCSI name string designator of protocol proto: UTF-8, NUL-terminated, padded to a multiple
 * of 4 (§7.8.6.11) */
static uint8_t *name_designator(uint8_t *p, uint8_t proto, uint8_t piv_assoc, const char *name)
{
    uint8_t s[256] = {0};
    size_t n = strlen(name);
    if (n > 251)
        n = 251;
    memcpy(s, name, n);
    uint8_t len = (uint8_t)((n + 1 + 3) & ~3u);
    return designator(p, (uint8_t)(proto << 4 | 0x3), piv_assoc | 0x08, s, len);
}

/* The port designators LIO and tcmu-runner end VPD 83h with: the relative target port and the
 * target port group (linerate's, which REPORT TARGET PORT GROUPS agrees with), with LIO the
 * logical unit group it puts every device in (default_lu_gp, id 0, SPC-4 §7.8.6.9), then the
 * target port's and the target device's SCSI name strings. A task of no nexus gets the two
 * port designators without a protocol (PIV=0) and no names. */
static uint8_t *port_designators(const struct scsi_task *t, uint8_t *p, bool lu_group)
{
    const struct scsi_transport *tp = t->nexus ? t->nexus->transport : NULL;
    uint8_t piv = tp ? 0x80 : 0, proto = tp ? tp->protocol_id : 0;
    uint8_t binary = (uint8_t)(proto << 4 | 0x1);
    uint16_t port = t->target->tpgt ? t->target->tpgt : 1;
    uint8_t rel[4] = {0, 0, (uint8_t)(port >> 8), (uint8_t)port};
    p = designator(p, binary, piv | 0x10 | 0x04, rel, 4); /* relative target port */
    p = designator(p, binary, piv | 0x10 | 0x05, rel, 4); /* target port group */
    static const uint8_t group0[4] = {0};
    if (lu_group)
        p = designator(p, 0x01, 0x06, group0, 4); /* binary, LU, logical unit group 0 */
    if (tp) {
        char name[256];
        tp->target_port_name(name, sizeof(name), t->target->name, port);
        p = name_designator(p, proto, piv | 0x10, name);
        p = name_designator(p, proto, piv | 0x20, t->target->name);
    }
    return p;
}

/* VPD 83h as LIO's target_core answers it (spc_emulate_evpd_83() in the kernel's
 * drivers/target/target_core_spc.c), for a LUN imported from LIO (docs/migrate.md): the NAA; the
 * T10 vendor ID designator with "PRODUCT:SERIAL" and a NUL counted in its length; the port
 * designators with the logical unit group (LIO's default target port group is 0). */
static uint32_t vpd_device_id_lio(const struct scsi_task *t, uint8_t *d)
{
    const struct scsi_lun_identity *id = &t->lu->ident;
    uint8_t *p = designator(d + 4, 0x01, 0x03, id->naa, id->naa_len); /* binary, LU, NAA */
    uint8_t t10[8 + sizeof(id->product) + 1 + SCSI_SERIAL_MAX + 1] = {0};
    pad_copy(t10, id->vendor, 8);
    int n = snprintf((char *)t10 + 8, sizeof(t10) - 8, "%s:%s", id->product, id->serial);
    assert(n > 0 && (size_t)n < sizeof(t10) - 8);
    p = designator(p, 0x02, 0x01, t10, (uint8_t)(8 + n + 1)); /* ASCII, LU, T10 vendor ID */
    p = port_designators(t, p, true);
    return (uint32_t)(p - d);
}

/* VPD 83h as tcmu-runner answers it for a LIO user: object such as a ceph-iscsi disk
 * (tcmu_emulate_evpd_inquiry() in its api.c; docs/migrate.md): the T10 vendor ID designator
 * first, the bare serial after the vendor and a NUL counted in its length (no product, unlike
 * LIO's); the NAA; a vendor specific designator (type 0h, association 00b) with the handler's
 * config string and its NUL; then the port designators without a logical unit group, which
 * tcmu-runner adds only when the device has ALUA groups (as a ceph-iscsi disk has), and
 * linerate always reports target port groups (TPGS, SPC-4 §5.16). */
static uint32_t vpd_device_id_tcmu(const struct scsi_task *t, uint8_t *d)
{
    const struct scsi_lun_identity *id = &t->lu->ident;
    uint8_t t10[8 + SCSI_SERIAL_MAX + 1] = {0};
    size_t n = strlen(id->serial);
    pad_copy(t10, id->vendor, 8);
    memcpy(t10 + 8, id->serial, n);
    uint8_t *p = designator(d + 4, 0x02, 0x01, t10, (uint8_t)(8 + n + 1)); /* ASCII, T10 */
    p = designator(p, 0x01, 0x03, id->naa, id->naa_len);                   /* binary, LU, NAA */
    size_t c = strlen(id->tcmu_config);
    assert(c <= SCSI_TCMU_CONFIG_MAX);
    p = designator(p, 0x02, 0x00, id->tcmu_config, (uint8_t)(c + 1)); /* ASCII, vendor specific */
    p = port_designators(t, p, false);
    return (uint32_t)(p - d);
}

static uint32_t vpd_device_id(const struct scsi_task *t, uint8_t *d)
{
    if (t->lu && t->lu->ident.vpd_style == SCSI_VPD_LIO)
        return vpd_device_id_lio(t, d);
    if (t->lu && t->lu->ident.vpd_style == SCSI_VPD_TCMU)
        return vpd_device_id_tcmu(t, d);
    const struct scsi_target *tg = t->target;
    const struct scsi_lun *lu = t->lu;
    uint8_t *p = d + 4;
    if (lu) {
        const struct scsi_lun_identity *id = &lu->ident;
        p = designator(p, 0x01, 0x03, id->naa, id->naa_len); /* binary, LU, NAA */
        /* T10 VENDOR IDENTIFICATION and the serial as its vendor specific identifier
         * (§7.8.6.4) */
        uint8_t t10[8 + SCSI_SERIAL_MAX];
        size_t n = strlen(id->serial);
        pad_copy(t10, id->vendor, 8);
        memcpy(t10 + 8, id->serial, n);
        p = designator(p, 0x02, 0x01, t10, (uint8_t)(8 + n)); /* ASCII, LU, T10 vendor ID */
    }
    /* The target port, association 01b, in the protocol of the task's nexus (PIV=1, §7.8.6;
     * its name as the transport spells it, RFC 7143 §13.7 for iSCSI); a task of no nexus
     * gets the relative port and its group without a protocol (PIV=0). */
    const struct scsi_transport *tp = t->nexus ? t->nexus->transport : NULL;
    uint8_t piv = tp ? 0x80 : 0, proto = tp ? tp->protocol_id : 0;
    uint16_t port = tg->tpgt ? tg->tpgt : 1;
    if (tp) {
        char name[256];
        tp->target_port_name(name, sizeof(name), tg->name, port);
        p = name_designator(p, proto, piv | 0x10, name);
    }
    uint8_t rel[4] = {0, 0, (uint8_t)(port >> 8), (uint8_t)port};
    uint8_t binary = (uint8_t)(proto << 4 | 0x1);
    p = designator(p, binary, piv | 0x10 | 0x04, rel, 4); /* relative target port */
    p = designator(p, binary, piv | 0x10 | 0x05, rel, 4); /* target port group */
    /* SCSI target device name: association 10b */
    if (tp)
        p = name_designator(p, proto, piv | 0x20, tg->name);
    return (uint32_t)(p - d);
}

/* Extended INQUIRY Data (SPC-4 §7.8.7): no protection information (SPT, GRD_CHK, APP_CHK,
 * REF_CHK 0); task attribute SIMPLE only (SIMPSUP): the transport never reads the attribute,
 * so every command runs as SIMPLE, which is what HEADSUP 0 and ORDSUP 0 tell (such a device
 * server treats HEAD OF QUEUE and ORDERED as SIMPLE; CmdSN order orders delivery only, not
 * execution or completion); V_SUP when the store has a volatile write cache (the caching mode
 * page's WCE, SYNCHRONIZE CACHE and FUA matter), NV_SUP 0; no microcode download, self-test,
 * referrals or priorities. */
static uint32_t vpd_extended_inquiry(const struct scsi_lun *lu, uint8_t *d)
{
    d[5] = 0x01; /* SIMPSUP */
    if (lu && lu->bs->write_cache)
        d[6] = 0x01; /* V_SUP */
    return 64;
}

/* Block limits (SBC-3 §6.5.3): the transfer bound is SCSI_MAX_XFER_BYTES; 4 KiB granularity. */
static uint32_t vpd_block_limits(const struct scsi_lun *lu, uint8_t *d)
{
    uint32_t bsz = lu ? lu->block_size : 512;
    put_be16(d + 2, 0x3c);
    uint32_t granularity = bsz < 4096 ? 4096 / bsz : 1; /* OPTIMAL TRANSFER LENGTH GRANULARITY */
    if (lu && (1u << lu->phys_exp) > granularity)
        granularity = 1u << lu->phys_exp;
    put_be16(d + 6, (uint16_t)granularity);
    put_be32(d + 8, SCSI_MAX_XFER_BYTES / bsz);
    put_be32(d + 12, SCSI_MAX_XFER_BYTES / bsz);
    /* byte 4 WSNZ 0: WRITE SAME with 0 blocks runs to the end of the medium (if that is within
     * MAXIMUM WRITE SAME LENGTH, which keeps one command well inside an initiator's timeout) */
    d[5] = lu ? sbc_caw_max_blocks(lu) : SBC_MAX_CAW_BLOCKS; /* MAXIMUM COMPARE AND WRITE LENGTH */
    put_be64(d + 36, SBC_MAX_WRITE_SAME_BLOCKS);
    if (lu && sbc_thin(lu)) {
        put_be32(d + 20, SBC_MAX_UNMAP_BLOCKS); /* MAXIMUM UNMAP LBA COUNT */
        put_be32(d + 24, SBC_MAX_UNMAP_DESCRIPTORS);
        /* OPTIMAL UNMAP GRANULARITY: the unit the store allocates in, so that an initiator
         * unmaps what can be given back (and GET LBA STATUS then says deallocated) */
        uint64_t unit = lu->bs->unmap_unit ? lu->bs->unmap_unit : SBC_PROVISIONING_UNIT;
        uint64_t gran = unit / bsz;
        put_be32(d + 28, (uint32_t)(gran == 0 ? 1 : gran > UINT32_MAX ? UINT32_MAX : gran));
        d[32] = 0x80; /* UGAVALID, UNMAP GRANULARITY ALIGNMENT 0 */
    }
    /* WRITE ATOMIC(16), where the store writes atomically (sbc_atomic_max_bytes; 0: not
     * offered, which Linux then tells applications): ordered against every READ and writer
     * by the range lock; no alignment or granularity rules (ATOMIC ALIGNMENT and ATOMIC
     * TRANSFER LENGTH GRANULARITY 0) */
    put_be32(d + 44, lu ? sbc_atomic_max_bytes(lu) / bsz : 0);
    return 64;
}

/* Logical block provisioning (SBC-4 §6.6.6): a thin LUN offers UNMAP and WRITE SAME 10/16 with
 * UNMAP (LBPU, LBPWS, LBPWS10), its unmapped blocks read as zeros (LBPRZ 001b), and it is thin
 * provisioned (PROVISIONING TYPE 010b). A fully provisioned store says none of it. */
static uint32_t vpd_provisioning(const struct scsi_lun *lu, uint8_t *d)
{
    if (lu && sbc_thin(lu)) {
        d[5] = 0x80 | 0x40 | 0x20 | 0x04;
        d[6] = 0x02;
    }
    return 8;
}

static void spc_inquiry_vpd(struct scsi_task *t, uint8_t page, uint8_t *d, uint32_t *len)
{
    d[0] = peripheral(t);
    d[1] = page;
    switch (page) {
    case 0x00:
        memcpy(d + 4, vpd_pages, sizeof(vpd_pages));
        *len = 4 + sizeof(vpd_pages);
        break;
    case 0x80: {
        const char *sn = t->lu ? t->lu->ident.serial : "";
        size_t n = strlen(sn);
        memcpy(d + 4, sn, n);
        /* LIO counts the serial's terminating NUL in the page (spc_emulate_evpd_80()), and
         * so does tcmu-runner (tcmu_emulate_evpd_inquiry()) */
        bool nul = t->lu && t->lu->ident.vpd_style != SCSI_VPD_LINERATE;
        *len = 4 + (uint32_t)n + nul;
        break;
    }
    case 0x83:
        *len = vpd_device_id(t, d);
        break;
    case 0x86:
        *len = vpd_extended_inquiry(t->lu, d);
        break;
    case 0x8f: /* third-party copy: the copy manager of xcopy.c */
        *len = 4 + xcopy_vpd_descriptors(d + 4);
        break;
    case 0xb0:
        *len = vpd_block_limits(t->lu, d);
        break;
    case 0xb1: /* block device characteristics (SBC-3 §6.5.2) */
        /* MEDIUM ROTATION RATE: 1 non-rotating (the default), else nominal rpm */
        put_be16(d + 4, t->lu ? t->lu->ident.rotation : 1);
        /* WABEREQ 01b: after a SANITIZE BLOCK ERASE reads succeed (and return zeros) */
        d[7] = 0x40;
        *len = 64;
        break;
    case 0xb2:
        *len = vpd_provisioning(t->lu, d);
        break;
    }
    put_be16(d + 2, (uint16_t)(*len - 4));
}

void spc_exec_inquiry(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    uint8_t d[1024] = {0};
    uint32_t len = 4;
    if (t->cdb[1] & 1)
        spc_inquiry_vpd(t, t->cdb[2], d, &len);
    else
        len = inquiry_standard(t, d);
    scsi_task_put_data(t, d, len);
}

/* --- REPORT LUNS (SPC-4 §6.33) --- */

/* The LUNs t's initiator sees: through its nexus's map when the target has host entries (the
 * host's numbers, scsi_target_host_map), else every LUN of the target. */
static uint32_t count_luns(const struct scsi_task *t, uint8_t select)
{
    if (select == 1) /* well-known logical units only: there are none */
        return 0;
    if (t->nexus)
        return scsi_nexus_report_luns(t->nexus, NULL, 0);
    const struct scsi_target *tg = t->target;
    uint32_t n = 0;
    for (uint32_t i = 0; i < tg->nluns; i++)
        n += tg->luns[i] != NULL;
    return n;
}

scsi_sr spc_parse_report_luns(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    uint8_t select = t->cdb[2];
    if (select > 2)
        return SR_CDB_FIELD(2, -1);
    uint32_t alloc = get_be32(t->cdb + 6);
    if (alloc < 16)
        return SR_CDB_FIELD(6, -1);
    uint64_t full = 8 + 8ull * count_luns(t, select);
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

void spc_exec_report_luns(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    const struct scsi_target *tg = t->target;
    uint8_t select = t->cdb[2];
    uint32_t n = count_luns(t, select);
    uint8_t *d = calloc(1, 8 + 8 * (size_t)n);
    uint64_t *nums = t->nexus && n ? calloc(n, sizeof(*nums)) : NULL;
    if (!d || (t->nexus && n && !nums)) {
        free(d);
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    put_be32(d, 8 * n);
    uint32_t k = 0;
    if (nums) { /* the same turn as count_luns: the same map, the same LUNs */
        uint32_t have = scsi_nexus_report_luns(t->nexus, nums, n);
        for (; k < n && k < have; k++)
            scsi_lun_to_wire(nums[k], d + 8 + 8 * k);
        free(nums);
    }
    for (uint32_t i = 0; !t->nexus && select != 1 && i < tg->nluns && k < n; i++)
        if (tg->luns[i])
            scsi_lun_to_wire(i, d + 8 + 8 * k++);
    scsi_task_put_data(t, d, 8 + 8 * n);
    free(d);
}

/* --- REQUEST SENSE (SPC-4 §6.39) --- */

scsi_sr spc_parse_request_sense(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    if (t->cdb[1] & 1) /* DESC=1: descriptor format is not offered */
        return SR_CDB_FIELD(1, 0);
    r->xfer_len = t->cdb[4] < 18 ? t->cdb[4] : 18;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Returns (and clears) a pending UA as parameter data with GOOD status; no LUN: LOGICAL UNIT
 * NOT SUPPORTED; otherwise NO SENSE. */
void spc_exec_request_sense(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    uint8_t d[18];
    scsi_sr sr = SR_NO_SENSE;
    if (!t->lu)
        sr = SR_LUN_NOT_SUPPORTED;
    else if (t->nexus) {
        scsi_sr ua = scsi_ua_take(t->lu, t->nexus);
        if (ua)
            sr = ua;
    }
    uint8_t n = scsi_sense_build(d, sr, false, 0);
    scsi_task_put_data(t, d, n);
}

/* --- REPORT SUPPORTED OPERATION CODES (SPC-4 §6.35) --- */

static const struct scsi_cmd *opcode_row(uint8_t opcode)
{
    for (size_t i = 0; i < scsi_ncmds; i++)
        if (scsi_cmds[i].opcode == opcode)
            return &scsi_cmds[i];
    return NULL;
}

/* Sizes the reply so setup allocates just that much. */
static uint32_t rsoc_len(const uint8_t *cdb)
{
    bool rctd = cdb[2] & 0x80;
    uint8_t opts = cdb[2] & 7;
    if (opts == 0)
        return 4 + (uint32_t)scsi_ncmds * (8 + (rctd ? 12 : 0));
    bool known;
    const struct scsi_cmd *c = scsi_cmd_lookup(cdb[3], (uint8_t)get_be16(cdb + 4), &known);
    if (opts == 2 && c && get_be16(cdb + 4) != c->sa)
        c = NULL;
    return 4 + (c ? c->cdb_len + (rctd ? 12 : 0) : 0);
}

scsi_sr spc_parse_rsoc(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    const uint8_t *cdb = t->cdb;
    uint8_t opts = cdb[2] & 7;
    if (opts > 2)
        return SR_CDB_FIELD(2, 2);
    const struct scsi_cmd *row = opcode_row(cdb[3]);
    bool sa = row && (row->flags & CMD_SA);
    if (opts == 1 && sa) /* a service-action opcode is asked for with option 2 */
        return SR_CDB_FIELD(3, -1);
    if (opts == 2 && row && !sa)
        return SR_CDB_FIELD(3, -1);
    uint32_t alloc = get_be32(cdb + 6);
    uint32_t full = rsoc_len(cdb);
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Command timeouts descriptor (§6.35.4) */
static uint8_t *put_timeouts(uint8_t *p, const struct scsi_cmd *c)
{
    memset(p, 0, 12);
    put_be16(p, 0x0a);
    put_be32(p + 4, c->timeout_s);
    put_be32(p + 8, c->timeout_s);
    return p + 12;
}

void spc_exec_rsoc(struct scsi_task *t, const struct scsi_cmd *self)
{
    (void)self;
    const uint8_t *cdb = t->cdb;
    bool rctd = cdb[2] & 0x80;
    uint8_t opts = cdb[2] & 7;
    uint8_t d[2048] = {0};
    uint8_t *p = d;

    if (opts == 0) {
        p += 4;
        for (size_t i = 0; i < scsi_ncmds; i++) {
            const struct scsi_cmd *c = &scsi_cmds[i];
            if (!scsi_cmd_offered(t->lu, c))
                continue;
            p[0] = c->opcode;
            put_be16(p + 2, c->sa);
            p[5] = (rctd ? 0x02 : 0) | ((c->flags & CMD_SA) ? 0x01 : 0); /* CTDP, SERVACTV */
            put_be16(p + 6, c->cdb_len);
            p += 8;
            if (rctd)
                p = put_timeouts(p, c);
        }
        put_be32(d, (uint32_t)(p - d - 4));
    } else {
        bool known;
        uint16_t sa = get_be16(cdb + 4);
        const struct scsi_cmd *c = scsi_cmd_lookup(cdb[3], (uint8_t)sa, &known);
        if ((opts == 2 && c && sa != c->sa) || (c && !scsi_cmd_offered(t->lu, c)))
            c = NULL;
        if (!c) {
            d[1] = 0x01; /* SUPPORT 001b: not supported */
            p += 4;
        } else {
            d[1] = (rctd ? 0x80 : 0) | 0x03; /* CTDP, SUPPORT 011b: as the standard says */
            put_be16(d + 2, c->cdb_len);
            memcpy(d + 4, c->usage, c->cdb_len);
            if (c->flags & CMD_SA) /* the SERVICE ACTION bits carry the value reported */
                d[5] = (uint8_t)((c->usage[1] & ~0x1fu) | c->sa);
            p = d + 4 + c->cdb_len;
            if (rctd)
                p = put_timeouts(p, c);
        }
    }
    scsi_task_put_data(t, d, (uint32_t)(p - d));
}
