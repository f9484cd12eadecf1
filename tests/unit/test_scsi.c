/* The SCSI core driven without sockets: CDB in, status/sense/data out, checked byte for byte
 * against SPC-4/SBC-3 as an initiator (or libiscsi's iscsi-test-cu) would check them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h" /* struct scsi_lun: to check where the data went */
#include "util/bytes.h"

#include "scsi_fixture.h"
#include "iscsi/scsi_port.h"

/* --- fixture: LUN 0 ram 64M/512, LUN 1 test store 1M (volatile cache), LUN 2 read-only ram,
 * LUN 3 ram 16M/4096; two nexuses with their power-on UAs already cleared --- */
#define TGT_NAME "iqn.2024-01.io.linerate:unit"
struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1, *n2;
    struct sfx_store *m; /* LUN 1: FUA and FLUSH observable */
    struct scsi_task t;
};

/* Runs one command: setup, data-out copied in, exec. Returns the status; t stays set up for
 * inspection until the next run or teardown. */
static int run(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb,
               const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, n, lun, cdb, out, out_len, 0, SFX_CHECK_DONE | SFX_CHECK_REFUSAL);
}

static const uint8_t *data(struct fx *f)
{
    return f->t.iov[0].iov_base;
}

static void assert_sense(const struct scsi_task *t, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(t, SFX_SENSE_LEN | SFX_SENSE_FIXED, key, asc, ascq);
}

/* INVALID FIELD IN CDB with the field pointer at byte (SPC-4 §4.5.2.4.2) */
static void assert_cdb_field(const struct scsi_task *t, unsigned byte)
{
    assert_sense(t, 0x5, 0x24, 0x00);
    sfx_assert_field_pointer(t, 0xc0, byte); /* SKSV, C/D=1 */
}

static const uint8_t TUR[16] = {0x00};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[128];
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    sfx_add_lun(&f->tg, 0, bs_open_spec("ram:64M", err, sizeof(err)), 512, false);
    sfx_add_lun(&f->tg, 1, sfx_store_open(1 << 20, true, &f->m), 512, false);
    sfx_add_lun(&f->tg, 2, bs_open_spec("ram:1M", err, sizeof(err)), 512, true);
    sfx_add_lun(&f->tg, 3, bs_open_spec("ram:16M", err, sizeof(err)), 4096, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    f->n2 = sfx_nexus_get(&f->tg, 2);
    for (uint64_t lun = 0; lun < 4; lun++) {
        run(f, f->n1, lun, TUR, NULL, 0);
        run(f, f->n2, lun, TUR, NULL, 0);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->tg, &f->t, f->n1, f->n2, NULL);
    free(f);
    return 0;
}

/* --- INQUIRY --- */

static void test_inquiry_standard(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 0, 0, 0, 96};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 96);
    assert_int_equal(d[0], 0x00);        /* qualifier 000b, direct access block device */
    assert_int_equal(d[2], 0x06);        /* SPC-4 */
    assert_int_equal(d[3], 0x12);        /* HISUP, response data format 2 */
    assert_int_equal(d[4], 91);          /* additional length */
    assert_int_equal(d[7] & 0x02, 0x02); /* CMDQUE */
    assert_memory_equal(d + 8, "LINERATE", 8);
    assert_memory_equal(d + 16, "RAMDISK         ", 16);
    assert_memory_equal(d + 32, "0001", 4);

    cdb[4] = 36; /* allocation length truncates */
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_int_equal(f->t.data_len, 36);
    assert_int_equal(f->t.xfer_len, 36);
}

static void test_inquiry_missing_lun(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 0, 0, 0, 36};
    assert_int_equal(run(f, f->n1, 9, cdb, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[0], 0x7f); /* qualifier 011b, type 1Fh */
}

static void test_inquiry_bad_fields(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 0, 0x80, 0, 36}; /* page code without EVPD */
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_cdb_field(&f->t, 2);
    uint8_t cdb2[16] = {0x12, 1, 0x99, 0, 255}; /* no such VPD page */
    run(f, f->n1, 0, cdb2, NULL, 0);
    assert_cdb_field(&f->t, 2);
    uint8_t cdb3[16] = {0x12, 2, 0, 0, 36}; /* CMDDT (obsolete) */
    run(f, f->n1, 0, cdb3, NULL, 0);
    assert_cdb_field(&f->t, 1);
}

/* SUPPORTED VPD PAGES (SPC-4 §7.8.13) lists exactly the pages answered, ascending: each one
 * listed answers with its own page code and a length that matches, on a LUN and where no LUN
 * is; every page code not listed is INVALID FIELD IN CDB. */
static void test_inquiry_vpd_list_exact(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 1, 0x00, 0, 255};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t list[256];
    unsigned n = get_be16(data(f) + 2);
    memcpy(list, data(f) + 4, n);
    bool listed[256] = {false};
    for (unsigned i = 0; i < n; i++) {
        if (i)
            assert_true(list[i] > list[i - 1]);
        listed[list[i]] = true;
    }
    for (unsigned lun = 0; lun < 10; lun += 9) { /* LUN 0, and LUN 9 which is not there */
        for (unsigned pg = 0; pg < 256; pg++) {
            cdb[2] = (uint8_t)pg;
            int st = run(f, f->n1, lun, cdb, NULL, 0);
            if (!listed[pg]) {
                assert_cdb_field(&f->t, 2);
                continue;
            }
            assert_int_equal(st, SCSI_STATUS_GOOD);
            assert_int_equal(data(f)[0], lun ? 0x7f : 0x00);
            assert_int_equal(data(f)[1], pg);
            assert_int_equal(f->t.data_len, 4 + get_be16(data(f) + 2));
        }
    }
}

/* Extended INQUIRY Data (86h, SPC-4 §7.8.7): SIMPLE task attribute only, no protection
 * information; V_SUP only where the store has a volatile write cache (LUN 1's test store). */
static void test_inquiry_vpd_extended(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 1, 0x86, 0, 255};
    for (uint64_t lun = 0; lun < 2; lun++) {
        assert_int_equal(run(f, f->n1, lun, cdb, NULL, 0), SCSI_STATUS_GOOD);
        const uint8_t *d = data(f);
        assert_int_equal(f->t.data_len, 64);
        assert_int_equal(get_be16(d + 2), 0x3c);
        assert_int_equal(d[4], 0x00); /* no SPT, GRD_CHK, APP_CHK, REF_CHK */
        assert_int_equal(d[5], 0x01); /* SIMPSUP; not HEADSUP, ORDSUP, GROUP_SUP, UASK_SUP */
        assert_int_equal(d[6], lun == 1 ? 0x01 : 0x00); /* V_SUP */
        for (unsigned i = 7; i < 64; i++)
            assert_int_equal(d[i], 0);
    }
}

/* One third-party copy descriptor of page 8Fh by type; NULL if absent. */
static const uint8_t *tpc_descriptor(const uint8_t *d, uint16_t type)
{
    uint32_t end = 4 + get_be16(d + 2);
    for (uint32_t off = 4; off + 4 <= end; off += 4 + get_be16(d + off + 2)) {
        assert_int_equal(get_be16(d + off + 2) % 4, 0); /* each a multiple of 4 bytes */
        if (get_be16(d + off) == type)
            return d + off;
    }
    return NULL;
}

/* Third-party Copy (8Fh, SPC-4 §7.8.17): what xcopy.c takes, the same limits RECEIVE COPY
 * RESULTS (OPERATING PARAMETERS) reports, and no ROD token descriptors. */
static void test_inquiry_vpd_third_party_copy(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 1, 0x8f, 0, 255};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t d[256];
    memcpy(d, data(f), f->t.data_len);
    assert_int_equal(f->t.data_len, 4 + get_be16(d + 2));
    assert_null(tpc_descriptor(d, 0x0000)); /* no block device ROD token limits */
    assert_null(tpc_descriptor(d, 0x0106));
    assert_null(tpc_descriptor(d, 0x0108));

    const uint8_t *sc = tpc_descriptor(d, 0x0001); /* supported commands */
    assert_non_null(sc);
    static const uint8_t cmds[] = {0x83, 1, 0x00, 0x84, 3, 0x00, 0x03, 0x04};
    assert_int_equal(sc[4], sizeof(cmds));
    assert_memory_equal(sc + 5, cmds, sizeof(cmds));

    const uint8_t *sd = tpc_descriptor(d, 0x0008); /* supported descriptors */
    assert_non_null(sd);
    assert_int_equal(sd[4], 2);
    assert_int_equal(sd[5], 0x02); /* block device to block device segment */
    assert_int_equal(sd[6], 0xe4); /* identification CSCD descriptor */

    uint8_t op[16] = {0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64}; /* OPERATING PARAMETERS */
    assert_int_equal(run(f, f->n1, 0, op, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *o = data(f);
    const uint8_t *pd = tpc_descriptor(d, 0x0004); /* parameter data */
    assert_non_null(pd);
    assert_int_equal(get_be16(pd + 2), 28);
    assert_int_equal(get_be16(pd + 8), get_be16(o + 8));   /* MAXIMUM CSCD DESCRIPTOR COUNT */
    assert_int_equal(get_be16(pd + 10), get_be16(o + 10)); /* MAXIMUM SEGMENT DESCRIPTOR COUNT */
    assert_int_equal(get_be32(pd + 12), get_be32(o + 12)); /* MAXIMUM DESCRIPTOR LIST LENGTH */
    assert_int_equal(get_be32(pd + 16), get_be32(o + 20)); /* MAXIMUM INLINE DATA LENGTH */
    const uint8_t *gco = tpc_descriptor(d, 0x8001);        /* general copy operations */
    assert_non_null(gco);
    assert_int_equal(get_be16(gco + 2), 32);
    assert_int_equal(get_be32(gco + 4), get_be16(o + 34));  /* TOTAL CONCURRENT COPIES */
    assert_int_equal(get_be32(gco + 8), o[36]);             /* MAXIMUM (IDENTIFIED) CONCURRENT */
    assert_int_equal(get_be32(gco + 12), get_be32(o + 16)); /* MAXIMUM SEGMENT LENGTH */
    assert_int_equal(get_be16(o + 8), 16);
    assert_int_equal(get_be16(o + 10), 32);
    assert_int_equal(get_be32(o + 16), 32u << 20);
}

static const uint8_t *find_designator(const uint8_t *d, uint8_t assoc_type)
{
    uint32_t len = 4 + get_be16(d + 2);
    for (uint32_t off = 4; off < len; off += 4 + d[off + 3])
        if ((d[off + 1] & 0x3f) == assoc_type)
            return d + off;
    return NULL;
}

static void test_inquiry_vpd(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 1, 0x00, 0, 255};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    static const uint8_t pages[] = {0,    0x00, 0x00, 8,    0x00, 0x80,
                                    0x83, 0x86, 0x8f, 0xb0, 0xb1, 0xb2};
    assert_int_equal(f->t.data_len, sizeof(pages));
    assert_memory_equal(data(f), pages, sizeof(pages));

    cdb[2] = 0x80;
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_int_equal(data(f)[1], 0x80);
    assert_int_equal(get_be16(data(f) + 2), 16);
    char serial0[17] = {0};
    memcpy(serial0, data(f) + 4, 16);

    cdb[2] = 0x83;
    run(f, f->n1, 0, cdb, NULL, 0);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 4 + get_be16(d + 2));
    const uint8_t *naa = find_designator(d, 0x03); /* LU, NAA */
    assert_non_null(naa);
    assert_int_equal(naa[0], 0x01);
    assert_int_equal(naa[3], 8);
    assert_int_equal(naa[4] >> 4, 3);
    uint64_t naa0 = get_be64(naa + 4);
    const uint8_t *t10 = find_designator(d, 0x01);
    assert_non_null(t10);
    assert_memory_equal(t10 + 4, "LINERATE", 8);
    const uint8_t *port = find_designator(d, 0x18); /* target port, SCSI name string */
    assert_non_null(port);
    assert_int_equal(port[0], 0x53); /* iSCSI, UTF-8 */
    assert_int_equal(port[1] & 0x80, 0x80);
    assert_int_equal(port[3] % 4, 0);
    assert_string_equal((const char *)port + 4, TGT_NAME ",t,0x0001");
    const uint8_t *rel = find_designator(d, 0x14);
    assert_non_null(rel);
    assert_int_equal(rel[0], 0x51);
    assert_int_equal(get_be16(rel + 6), 1);
    assert_non_null(find_designator(d, 0x15)); /* target port group */
    const uint8_t *dev = find_designator(d, 0x28);
    assert_non_null(dev);
    assert_string_equal((const char *)dev + 4, TGT_NAME);

    /* deterministic per (target, LUN), different per LUN */
    run(f, f->n1, 3, cdb, NULL, 0);
    assert_int_not_equal(get_be64(find_designator(data(f), 0x03) + 4), naa0);
    struct scsi_target tg2;
    char err[64];
    scsi_target_init(&tg2, TGT_NAME, 1);
    struct scsi_lun_config c = {.lun = 0, .bs = bs_open_spec("null:1M", err, sizeof(err))};
    assert_int_equal(scsi_target_add_lun(&tg2, &c, err, sizeof(err)), 0);
    struct scsi_target saved = f->tg;
    f->tg = tg2;
    run(f, NULL, 0, cdb, NULL, 0);
    assert_int_equal(get_be64(find_designator(data(f), 0x03) + 4), naa0);
    cdb[2] = 0x80;
    run(f, NULL, 0, cdb, NULL, 0);
    assert_memory_equal(data(f) + 4, serial0, 16);
    cdb[1] = 0;
    cdb[2] = 0;
    run(f, NULL, 0, cdb, NULL, 0);
    assert_memory_equal(data(f) + 16, "NULLDISK", 8);
    scsi_task_release(&f->t);
    tg2 = f->tg;
    f->tg = saved;
    scsi_target_destroy(&tg2);
}

static void test_inquiry_vpd_block(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0x12, 1, 0xb0, 0, 255};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(get_be16(d + 2), 0x3c);
    assert_int_equal(get_be16(d + 6), 8);                         /* 4 KiB granularity */
    assert_int_equal(get_be32(d + 8), SCSI_MAX_XFER_BYTES / 512); /* max transfer length */
    run(f, f->n1, 3, cdb, NULL, 0);
    assert_int_equal(get_be32(data(f) + 8), SCSI_MAX_XFER_BYTES / 4096);

    cdb[2] = 0xb1;
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_int_equal(get_be16(data(f) + 4), 1); /* non-rotating */
    cdb[2] = 0xb2;
    run(f, f->n1, 1, cdb, NULL, 0); /* the test store is not thin */
    assert_int_equal(f->t.data_len, 8);
    assert_int_equal(data(f)[5], 0);     /* LBPU=0, LBPWS=0 */
    assert_int_equal(data(f)[6] & 7, 0); /* fully provisioned */
    run(f, f->n1, 0, cdb, NULL, 0);      /* RAM is (test_sbc_extra.c checks the rest) */
    assert_int_equal(data(f)[6] & 7, 2);
}

/* --- REPORT LUNS, TUR, unknown opcodes, reserved bits --- */

static void test_report_luns(void **state)
{
    struct fx *f = *state;
    uint8_t cdb[16] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    assert_int_equal(run(f, f->n1, 0, cdb, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 8 + 4 * 8);
    assert_int_equal(get_be32(d), 32);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(d[8 + 8 * i], 0);
        assert_int_equal(d[8 + 8 * i + 1], i);
    }
    /* on a LUN that does not exist, too */
    assert_int_equal(run(f, f->n1, 42, cdb, NULL, 0), SCSI_STATUS_GOOD);
    cdb[2] = 1; /* well-known LUs only: none */
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_int_equal(get_be32(data(f)), 0);
    cdb[2] = 3;
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_cdb_field(&f->t, 2);
    cdb[2] = 0;
    cdb[9] = 15; /* allocation length < 16 */
    cdb[8] = 0;
    run(f, f->n1, 0, cdb, NULL, 0);
    assert_cdb_field(&f->t, 6);
}

static void test_missing_lun_and_opcodes(void **state)
{
    struct fx *f = *state;
    run(f, f->n1, 7, TUR, NULL, 0);
    assert_sense(&f->t, 0x5, 0x25, 0x00);
    uint8_t bad[16] = {0xff};
    run(f, f->n1, 0, bad, NULL, 0);
    assert_sense(&f->t, 0x5, 0x20, 0x00);
    run(f, f->n1, 7, bad, NULL, 0);
    assert_sense(&f->t, 0x5, 0x25, 0x00);
    uint8_t sai[16] = {0x9e, 0x11}; /* SERVICE ACTION IN(16) with an unknown action */
    run(f, f->n1, 0, sai, NULL, 0);
    assert_cdb_field(&f->t, 1);
    uint8_t tur[16] = {0x00, 0x01};
    run(f, f->n1, 0, tur, NULL, 0);
    assert_cdb_field(&f->t, 1);
    assert_int_equal(f->t.sense[15] & 0x0f, 0x08 | 0); /* BPV, bit 0 */
    uint8_t naca[16] = {0x00, 0, 0, 0, 0, 0x04};
    run(f, f->n1, 0, naca, NULL, 0);
    assert_cdb_field(&f->t, 5);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t ssu[16] = {0x1b, 0, 0, 0, 0x01};
    assert_int_equal(run(f, f->n1, 0, ssu, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t pamr[16] = {0x1e, 0, 0, 0, 0x01};
    assert_int_equal(run(f, f->n1, 0, pamr, NULL, 0), SCSI_STATUS_GOOD);
}

/* --- unit attentions --- */

static void test_ua_new_nexus(void **state)
{
    struct fx *f = *state;
    const uint8_t isid[6] = {0x40, 1, 2, 3, 4, 5};
    struct scsi_nexus *n =
        scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:new", isid);
    assert_non_null(n);
    assert_string_equal(n->initiator_port, "iqn.2024-01.test:new,i,0x400102030405");
    assert_ptr_equal(scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:new", isid),
                     n);
    scsi_nexus_put(n);

    /* INQUIRY and REPORT LUNS run and leave the UA pending (SAM-5 §5.14) */
    uint8_t inq[16] = {0x12, 0, 0, 0, 36};
    assert_int_equal(run(f, n, 0, inq, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t rl[16] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    assert_int_equal(run(f, n, 0, rl, NULL, 0), SCSI_STATUS_GOOD);
    run(f, n, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x00);
    assert_int_equal(run(f, n, 0, TUR, NULL, 0), SCSI_STATUS_GOOD); /* reported once */

    /* per LUN: LUN 3 still has its own; REQUEST SENSE returns it as data and clears it */
    uint8_t rs[16] = {0x03, 0, 0, 0, 18};
    assert_int_equal(run(f, n, 3, rs, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 18);
    assert_int_equal(data(f)[0], 0x70);
    assert_int_equal(data(f)[2], 0x6);
    assert_int_equal(data(f)[12], 0x29);
    assert_int_equal(run(f, n, 3, TUR, NULL, 0), SCSI_STATUS_GOOD);
    run(f, n, 3, rs, NULL, 0);
    assert_int_equal(data(f)[2], 0x0); /* NO SENSE */
    assert_int_equal(data(f)[12], 0x0);

    /* session reinstatement: the same port name finds the same nexus and its state */
    scsi_nexus_put(n);
    struct scsi_nexus *again =
        scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:new", isid);
    assert_ptr_equal(again, n);
    assert_int_equal(run(f, again, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    scsi_nexus_put(again);

    /* REQUEST SENSE on a LUN that is not there: the reason as data, status GOOD */
    assert_int_equal(run(f, f->n1, 12, rs, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[2], 0x5);
    assert_int_equal(data(f)[12], 0x25);
    uint8_t rsd[16] = {0x03, 1, 0, 0, 18}; /* DESC=1 */
    run(f, f->n1, 0, rsd, NULL, 0);
    assert_cdb_field(&f->t, 1);
}

static void test_ua_resets(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    scsi_lun_reset(lu, f->n1);
    run(f, f->n1, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    run(f, f->n2, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, f->n2, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, f->n1, 1, TUR, NULL, 0), SCSI_STATUS_GOOD); /* other LUN: none */

    scsi_target_reset(&f->tg, f->n1, true);
    for (uint64_t lun = 0; lun < 4; lun++) {
        run(f, f->n2, lun, TUR, NULL, 0);
        assert_sense(&f->t, 0x6, 0x29, 0x01);
        run(f, f->n1, lun, TUR, NULL, 0);
        assert_sense(&f->t, 0x6, 0x29, 0x01);
    }
    scsi_target_reset(&f->tg, f->n1, false);
    run(f, f->n2, 2, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    for (uint64_t lun = 0; lun < 4; lun++) {
        run(f, f->n1, lun, TUR, NULL, 0);
        run(f, f->n2, lun, TUR, NULL, 0);
    }
}

/* CLEAR TASK SET sent by n1 (SAM-5 §7.4, TAS 0): COMMANDS CLEARED BY ANOTHER INITIATOR
 * (2Fh/00h) to every other nexus with a session, on that LUN only; none to the requester, none
 * to a nexus whose sessions are all gone. */
static void test_ua_tasks_cleared(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    struct scsi_nexus *n3 = sfx_nexus_get(&f->tg, 3);
    run(f, n3, 0, TUR, NULL, 0); /* its power-on UA */
    scsi_nexus_put(n3);          /* gone: no session, no tasks */
    scsi_lun_tasks_cleared(lu, f->n1);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, f->n2, 1, TUR, NULL, 0), SCSI_STATUS_GOOD); /* other LUN */
    uint8_t rc[16] = {0x25};
    run(f, f->n2, 0, rc, NULL, 0); /* any command but INQUIRY/REPORT LUNS/REQUEST SENSE */
    assert_sense(&f->t, 0x6, 0x2f, 0x00);
    assert_int_equal(run(f, f->n2, 0, rc, NULL, 0), SCSI_STATUS_GOOD);
    n3 = sfx_nexus_get(&f->tg, 3); /* back: whatever it is told, it is not 2Fh */
    for (int i = 0; i < 4 && run(f, n3, 0, TUR, NULL, 0) != SCSI_STATUS_GOOD; i++)
        assert_int_not_equal(f->t.sense[12], 0x2f);
    assert_int_equal(f->t.status, SCSI_STATUS_GOOD);
    scsi_nexus_put(n3);
}

/* I_T nexus loss (SAM-5 §6.3.4): 29h/07h on every LUN for that initiator port only, once;
 * not over a pending reset UA, which a later reset replaces; ahead of other UAs. */
static void test_ua_nexus_loss(void **state)
{
    struct fx *f = *state;
    scsi_nexus_loss_ua(f->n1);
    uint8_t inq[16] = {0x12, 0, 0, 0, 36};
    assert_int_equal(run(f, f->n1, 0, inq, NULL, 0), SCSI_STATUS_GOOD); /* left pending */
    for (uint64_t lun = 0; lun < 4; lun++) {
        assert_int_equal(run(f, f->n2, lun, TUR, NULL, 0), SCSI_STATUS_GOOD);
        run(f, f->n1, lun, TUR, NULL, 0);
        assert_sense(&f->t, 0x6, 0x29, 0x07);
        assert_int_equal(run(f, f->n1, lun, TUR, NULL, 0), SCSI_STATUS_GOOD);
    }

    /* a reset UA pending: the loss adds nothing; a loss pending: a reset replaces it */
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    scsi_lun_reset(lu, f->n2);
    scsi_nexus_loss_ua(f->n1);
    run(f, f->n1, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    run(f, f->n1, 1, TUR, NULL, 0); /* LUN 1 had no reset: the loss is reported there */
    assert_sense(&f->t, 0x6, 0x29, 0x07);
    run(f, f->n2, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    scsi_nexus_loss_ua(f->n1);
    scsi_lun_reset(lu, f->n2);
    run(f, f->n1, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x03);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    run(f, f->n2, 0, TUR, NULL, 0);
    for (uint64_t lun = 1; lun < 4; lun++)
        run(f, f->n1, lun, TUR, NULL, 0);

    /* other UAs stay, reported after it */
    scsi_lun_tasks_cleared(lu, f->n2);
    scsi_nexus_loss_ua(f->n1);
    run(f, f->n1, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x07);
    run(f, f->n1, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x2f, 0x00);
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);

    /* a nexus new to the target has its power-on UA: a loss before it is cleared adds none */
    const uint8_t isid[6] = {0x40, 9, 9, 9, 9, 9};
    struct scsi_nexus *n =
        scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:lossy", isid);
    scsi_nexus_loss_ua(n);
    scsi_nexus_put(n);
    n = scsi_nexus_get(&f->tg, &iscsi_scsi_transport, "iqn.2024-01.test:lossy",
                       isid); /* the initiator is back */
    run(f, n, 2, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x29, 0x00);
    assert_int_equal(run(f, n, 2, TUR, NULL, 0), SCSI_STATUS_GOOD);
    scsi_nexus_put(n);
}

/* --- READ CAPACITY --- */

static void test_read_capacity(void **state)
{
    struct fx *f = *state;
    uint8_t rc10[16] = {0x25};
    assert_int_equal(run(f, f->n1, 0, rc10, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 8);
    assert_int_equal(get_be32(data(f)), (64u << 20) / 512 - 1);
    assert_int_equal(get_be32(data(f) + 4), 512);
    run(f, f->n1, 3, rc10, NULL, 0);
    assert_int_equal(get_be32(data(f)), (16u << 20) / 4096 - 1);
    assert_int_equal(get_be32(data(f) + 4), 4096);
    uint8_t bad[16] = {0x25, 0, 0, 0, 0, 1}; /* LBA without PMI */
    run(f, f->n1, 0, bad, NULL, 0);
    assert_cdb_field(&f->t, 2);

    uint8_t rc16[16] = {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32};
    assert_int_equal(run(f, f->n1, 0, rc16, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 32);
    assert_int_equal(get_be64(data(f)), (64u << 20) / 512 - 1);
    assert_int_equal(get_be32(data(f) + 8), 512);
    assert_int_equal(data(f)[12], 0);           /* no protection */
    assert_int_equal(data(f)[13], 0);           /* every logical block is a physical one */
    assert_int_equal(data(f)[14] & 0x80, 0x80); /* LBPME: RAM is thin (test_sbc_extra.c) */
    rc16[13] = 12;
    run(f, f->n1, 0, rc16, NULL, 0);
    assert_int_equal(f->t.data_len, 12);
}

/* A LUN given a physical block size (512e) says so in READ CAPACITY 16 and VPD 0xB0; sizes
 * that are not a power-of-two multiple of the block size are refused when the LUN is added. */
static void test_physical_block_size(void **state)
{
    struct fx *f = *state;
    char err[160];
    struct scsi_lun_config c = {.lun = 6,
                                .bs = bs_open_spec("ram:1M", err, sizeof(err)),
                                .block_size = 512,
                                .phys_block_size = 4096};
    assert_int_equal(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)), 0);
    uint8_t rc16[16] = {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32};
    run(f, f->n1, 6, rc16, NULL, 0); /* the new LUN's power-on unit attention */
    sfx_assert_sense(&f->t, 1, 0x06, 0x29, 0x00);
    assert_int_equal(run(f, f->n1, 6, rc16, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[13], 3); /* 2^3 logical blocks per physical block */
    uint8_t b0[16] = {0x12, 1, 0xb0, 0, 64};
    assert_int_equal(run(f, f->n1, 6, b0, NULL, 0), SCSI_STATUS_GOOD);
    assert_true(get_be16(data(f) + 6) % 8 == 0); /* OPTIMAL TRANSFER LENGTH GRANULARITY */

    static const uint32_t bad[] = {256, 3072, 131072};
    for (unsigned i = 0; i < 3; i++) {
        struct bs *bs = bs_open_spec("ram:1M", err, sizeof(err));
        struct scsi_lun_config b = {
            .lun = 7, .bs = bs, .block_size = 512, .phys_block_size = bad[i]};
        err[0] = '\0';
        assert_int_equal(scsi_target_add_lun(&f->tg, &b, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "physical block size"));
        bs_close(bs); /* not taken on failure */
    }
}

/* --- READ/WRITE --- */

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 7 + (i >> 9));
}

static void test_rw_ram(void **state)
{
    struct fx *f = *state;
    static uint8_t out[8192], back[8192];
    fill(out, sizeof(out), 3);
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 10, 0, 0, 16};
    assert_int_equal(run(f, f->n1, 0, w10, out, sizeof(out)), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.dir, SCSI_DIR_WRITE);
    assert_int_equal(f->t.xfer_len, 8192);
    /* received into a buffer of the task's own and copied into the RAM LUN, so the LUN never
     * holds part of it */
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    assert_int_equal(f->t.iovcnt, 1);
    assert_true(f->t.buffered);
    assert_memory_equal(bs_map_read(lu->bs, 10 * 512, 8192), out, 8192);

    /* and read by copying out of it (under the RAM LUN's send-min, 4 KiB by default: larger
     * READs are sent in place): what the transport sends, nobody else writes */
    uint8_t r16[16] = {0x88, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 4};
    assert_int_equal(run(f, f->n1, 0, r16, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 2048);
    assert_true(f->t.buffered);
    assert_ptr_not_equal(f->t.iov[0].iov_base, bs_map_read(lu->bs, 10 * 512, 2048));
    memcpy(back, data(f), 2048);
    assert_memory_equal(back, out, 2048);

    /* READ(12) and READ(6) at an offset see the same bytes */
    uint8_t r12[16] = {0xa8, 0, 0, 0, 0, 12, 0, 0, 0, 2};
    run(f, f->n1, 0, r12, NULL, 0);
    assert_memory_equal(data(f), out + 1024, 1024);
    uint8_t r6[16] = {0x08, 0, 0, 11, 1};
    run(f, f->n1, 0, r6, NULL, 0);
    assert_memory_equal(data(f), out + 512, 512);
    /* WRITE(6)/READ(6) transfer length 0 is 256 blocks */
    r6[4] = 0;
    run(f, f->n1, 0, r6, NULL, 0);
    assert_int_equal(f->t.xfer_len, 256 * 512);
    /* READ(10) transfer length 0 moves nothing and is GOOD */
    uint8_t r10[16] = {0x28, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(run(f, f->n1, 0, r10, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.xfer_len, 0);
    assert_int_equal(f->t.dir, SCSI_DIR_NONE);
    assert_int_equal(f->t.data_len, 0);
    /* 4096-byte blocks */
    uint8_t w4[16] = {0x2a, 0, 0, 0, 0, 1, 0, 0, 2};
    run(f, f->n1, 3, w4, out, sizeof(out));
    assert_int_equal(f->t.xfer_len, 8192);
    uint8_t r4[16] = {0x28, 0, 0, 0, 0, 2, 0, 0, 1};
    run(f, f->n1, 3, r4, NULL, 0);
    assert_memory_equal(data(f), out + 4096, 4096);
}

static void test_rw_refusals(void **state)
{
    struct fx *f = *state;
    static uint8_t out[1024];
    uint32_t last = (64u << 20) / 512 - 1;
    uint8_t r10[16] = {0x28, 0, 0, 0, 0, 0, 0, 0, 2};
    put_be32(r10 + 2, last); /* two blocks from the last one */
    run(f, f->n1, 0, r10, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    r10[8] = 1; /* the last block itself is fine */
    assert_int_equal(run(f, f->n1, 0, r10, NULL, 0), SCSI_STATUS_GOOD);
    put_be32(r10 + 2, last + 2); /* zero blocks past the end */
    r10[8] = 0;
    run(f, f->n1, 0, r10, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    uint8_t r16[16] = {0x88, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2};
    run(f, f->n1, 0, r16, NULL, 0); /* LBA + length wraps */
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    uint8_t big[16] = {0x88, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 1};
    run(f, f->n1, 0, big, NULL, 0); /* above SCSI_MAX_XFER_BYTES */
    assert_cdb_field(&f->t, 10);
    uint8_t prot[16] = {0x28, 0x20, 0, 0, 0, 0, 0, 0, 1};
    run(f, f->n1, 0, prot, NULL, 0); /* RDPROTECT without protection information */
    assert_cdb_field(&f->t, 1);
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1};
    run(f, f->n1, 2, w10, out, sizeof(out)); /* read-only LUN */
    assert_sense(&f->t, 0x7, 0x27, 0x00);
    uint8_t r2[16] = {0x28, 0, 0, 0, 0, 0, 0, 0, 1};
    assert_int_equal(run(f, f->n1, 2, r2, NULL, 0), SCSI_STATUS_GOOD);
}

/* EDTL below the CDB's transfer length (RFC 7143 §11.4.5.1 overflow): whole blocks of EDTL are
 * stored, GOOD, the rest of the range untouched; EDTL cutting a block is refused with 0Eh/03h
 * and nothing stored (FCP-4 §9.4.2 a) and b), libiscsi iSCSIResiduals.Write10Residuals). */
static void test_write_edtl_short(void **state)
{
    struct fx *f = *state;
    static uint8_t a[1024], b[1024];
    memset(a, 'a', sizeof(a));
    memset(b, 'b', sizeof(b));
    for (uint64_t lun = 0; lun < 2; lun++) { /* mapped RAM, then the submit path */
        uint8_t w2[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 2};
        assert_int_equal(run(f, f->n1, lun, w2, a, sizeof(a)), SCSI_STATUS_GOOD);
        assert_int_equal(run(f, f->n1, lun, w2, b, 512), SCSI_STATUS_GOOD);
        assert_int_equal(f->t.xfer_len, 1024); /* the transport's residual is 512 overflow */
        uint8_t w1[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1};
        run(f, f->n1, lun, w1, b, 200); /* < 1 block */
        assert_sense(&f->t, 0x5, 0x0e, 0x03);
        assert_int_equal(f->t.xfer_len, 512); /* the transport's residual is 312 overflow */
        uint8_t w1b[16] = {0x2a, 0, 0, 0, 0, 1, 0, 0, 1}; /* LBA 1 */
        run(f, f->n1, lun, w1b, b, 200);
        assert_sense(&f->t, 0x5, 0x0e, 0x03);
        assert_int_equal(run(f, f->n1, lun, w1, NULL, 0), SCSI_STATUS_GOOD); /* no W bit */
        uint8_t r2[16] = {0x28, 0, 0, 0, 0, 0, 0, 0, 2};
        run(f, f->n1, lun, r2, NULL, 0);
        assert_memory_equal(data(f), b, 512);
        assert_memory_equal(data(f) + 512, a, 512);
    }
    /* a parameter list cut short is refused instead */
    uint8_t sel[16] = {0x15, 0x10, 0, 0, 24};
    static uint8_t list[24];
    run(f, f->n1, 0, sel, list, 12);
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
}

static void test_rw_submit_path(void **state)
{
    struct fx *f = *state;
    static uint8_t out[4096];
    fill(out, sizeof(out), 11);
    uint8_t w16[16] = {0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 8};
    assert_int_equal(run(f, f->n1, 1, w16, out, sizeof(out)), SCSI_STATUS_GOOD);
    assert_true(f->t.buffered); /* no map(): a task buffer and a submitted bs_io */
    assert_int_equal(f->m->writes, 1);
    assert_false(f->m->last_fua); /* WCE=1 (volatile cache) and no FUA */
    assert_memory_equal(f->m->mem + 5 * 512, out, 4096);
    w16[1] = 0x08; /* FUA */
    run(f, f->n1, 1, w16, out, sizeof(out));
    assert_true(f->m->last_fua);

    uint8_t r10[16] = {0x28, 0, 0, 0, 0, 6, 0, 0, 3};
    assert_int_equal(run(f, f->n1, 1, r10, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 1536);
    assert_memory_equal(data(f), out + 512, 1536);

    /* WRITE AND VERIFY is written through */
    uint8_t wv[16] = {0x2e, 0, 0, 0, 0, 5, 0, 0, 1};
    assert_int_equal(run(f, f->n1, 1, wv, out, sizeof(out)), SCSI_STATUS_GOOD);
    assert_true(f->m->last_fua);

    uint8_t sc10[16] = {0x35, 0x02, 0, 0, 0, 0, 0, 0, 0}; /* IMMED, whole LUN */
    int flushes = f->m->flushes;
    assert_int_equal(run(f, f->n1, 1, sc10, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->m->flushes, flushes + 1);
    uint8_t sc16[16] = {0x91, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1};
    run(f, f->n1, 1, sc16, NULL, 0); /* beyond the 2048 blocks */
    assert_sense(&f->t, 0x5, 0x21, 0x00);
}

/* --- VERIFY --- */

static void verify_on(struct fx *f, uint64_t lun)
{
    static uint8_t out[2048];
    fill(out, sizeof(out), 29);
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 20, 0, 0, 4};
    assert_int_equal(run(f, f->n1, lun, w10, out, sizeof(out)), SCSI_STATUS_GOOD);

    uint8_t v10[16] = {0x2f, 0, 0, 0, 0, 20, 0, 0, 4};
    assert_int_equal(run(f, f->n1, lun, v10, NULL, 0), SCSI_STATUS_GOOD); /* BYTCHK=0 */
    assert_int_equal(f->t.xfer_len, 0);
    v10[1] = 0x02; /* BYTCHK=1 */
    assert_int_equal(run(f, f->n1, lun, v10, out, sizeof(out)), SCSI_STATUS_GOOD);
    static uint8_t bad[2048];
    memcpy(bad, out, sizeof(bad));
    bad[700] ^= 0x5a;
    run(f, f->n1, lun, v10, bad, sizeof(bad));
    assert_sense(&f->t, 0xe, 0x1d, 0x00);
    assert_int_equal(f->t.sense[0] & 0x80, 0x80); /* VALID: INFORMATION holds the offset */
    assert_int_equal(get_be32(f->t.sense + 3), 700);

    uint8_t v16[16] = {0x8f, 0x06, 0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 3}; /* BYTCHK=11b */
    static uint8_t blk[512];
    memset(blk, 0xa5, sizeof(blk));
    uint8_t wfill[16] = {0x2a, 0, 0, 0, 0, 40, 0, 0, 3};
    static uint8_t three[1536];
    memset(three, 0xa5, sizeof(three));
    run(f, f->n1, lun, wfill, three, sizeof(three));
    assert_int_equal(run(f, f->n1, lun, v16, blk, sizeof(blk)), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.xfer_len, 512);
    blk[3] = 0;
    run(f, f->n1, lun, v16, blk, sizeof(blk));
    assert_sense(&f->t, 0xe, 0x1d, 0x00);
    assert_int_equal(get_be32(f->t.sense + 3), 3);
    uint8_t v12[16] = {0xaf, 0x04, 0, 0, 0, 0, 0, 0, 0, 1}; /* BYTCHK=10b reserved */
    run(f, f->n1, lun, v12, NULL, 0);
    assert_cdb_field(&f->t, 1);
}

static void test_verify(void **state)
{
    struct fx *f = *state;
    verify_on(f, 0); /* mapped RAM */
    verify_on(f, 1); /* submit path */
}

/* --- MODE SENSE / MODE SELECT --- */

static void test_mode_sense(void **state)
{
    struct fx *f = *state;
    uint8_t ms6[16] = {0x1a, 0, 0x3f, 0, 255};
    assert_int_equal(run(f, f->n1, 0, ms6, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 4 + 8 + 20 + 12 + 12);
    assert_int_equal(d[0], f->t.data_len - 1);
    assert_int_equal(d[2], 0x10); /* DPOFUA, not write protected */
    assert_int_equal(d[3], 8);
    assert_int_equal(get_be32(d + 4), (64u << 20) / 512);
    assert_int_equal(get_be24(d + 9), 512);
    const uint8_t *p = d + 12;
    assert_int_equal(p[0], 0x08);
    assert_int_equal(p[1], 0x12);
    assert_int_equal(p[2] & 0x04, 0); /* ram has no volatile cache: WCE=0 */
    p += 20;
    assert_int_equal(p[0], 0x0a);
    assert_int_equal(p[1], 0x0a);
    p += 12;
    assert_int_equal(p[0], 0x1c);
    assert_int_equal(p[1], 0x0a);

    uint8_t wp[16] = {0x1a, 0x08, 0x08, 0, 255}; /* DBD, caching page, read-only LUN */
    run(f, f->n1, 2, wp, NULL, 0);
    assert_int_equal(data(f)[2] & 0x80, 0x80);
    assert_int_equal(data(f)[3], 0);
    assert_int_equal(f->t.data_len, 4 + 20);
    run(f, f->n1, 1, wp, NULL, 0);
    assert_int_equal(data(f)[4 + 2] & 0x04, 0x04); /* volatile cache: WCE=1 */

    uint8_t chg[16] = {0x1a, 0x08, 0x48, 0, 255}; /* changeable values */
    run(f, f->n1, 0, chg, NULL, 0);
    assert_int_equal(data(f)[4 + 2], 0x04);
    uint8_t saved[16] = {0x1a, 0, 0xc8, 0, 255};
    run(f, f->n1, 0, saved, NULL, 0);
    assert_sense(&f->t, 0x5, 0x39, 0x00);
    uint8_t nopage[16] = {0x1a, 0, 0x19, 0, 255};
    run(f, f->n1, 0, nopage, NULL, 0);
    assert_cdb_field(&f->t, 2);
    uint8_t sub[16] = {0x1a, 0, 0x08, 0x01, 255};
    run(f, f->n1, 0, sub, NULL, 0);
    assert_cdb_field(&f->t, 3);

    /* MODE SENSE(10) with LLBAA: the long block descriptor */
    uint8_t ms10[16] = {0x5a, 0x10, 0x0a, 0, 0, 0, 0, 1, 0};
    assert_int_equal(run(f, f->n1, 0, ms10, NULL, 0), SCSI_STATUS_GOOD);
    d = data(f);
    assert_int_equal(f->t.data_len, 8 + 16 + 12);
    assert_int_equal(get_be16(d), f->t.data_len - 2);
    assert_int_equal(d[4] & 1, 1);
    assert_int_equal(get_be16(d + 6), 16);
    assert_int_equal(get_be64(d + 8), (64u << 20) / 512);
    assert_int_equal(get_be32(d + 20), 512);
    assert_int_equal(d[24], 0x0a);

    ms6[4] = 4; /* truncated by the allocation length */
    run(f, f->n1, 0, ms6, NULL, 0);
    assert_int_equal(f->t.data_len, 4);
    assert_int_equal(data(f)[0], 4 + 8 + 20 + 12 + 12 - 1);
}

static void test_mode_select(void **state)
{
    struct fx *f = *state;
    /* read the current caching page, set WCE on the RAM LUN, write it back */
    uint8_t ms[16] = {0x1a, 0x08, 0x08, 0, 255};
    run(f, f->n1, 0, ms, NULL, 0);
    uint8_t list[24];
    memcpy(list, data(f), 24);
    list[0] = 0;
    list[2] = 0;
    list[4 + 2] |= 0x04;
    uint8_t sel[16] = {0x15, 0x10, 0, 0, 24};
    assert_int_equal(run(f, f->n1, 0, sel, list, sizeof(list)), SCSI_STATUS_GOOD);
    run(f, f->n1, 0, ms, NULL, 0);
    assert_int_equal(data(f)[4 + 2] & 0x04, 0x04);
    /* the other nexus is told; the one that changed it is not */
    assert_int_equal(run(f, f->n1, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    run(f, f->n2, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x2a, 0x01);
    assert_int_equal(run(f, f->n2, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);

    /* WCE=0 on the cached store: every write becomes FUA */
    run(f, f->n1, 1, ms, NULL, 0);
    memcpy(list, data(f), 24);
    list[0] = 0;
    list[4 + 2] &= (uint8_t)~0x04;
    assert_int_equal(run(f, f->n1, 1, sel, list, sizeof(list)), SCSI_STATUS_GOOD);
    static uint8_t out[512];
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1};
    run(f, f->n1, 1, w10, out, sizeof(out));
    assert_true(f->m->last_fua);

    /* a bit outside the changeable mask */
    list[4 + 2] |= 0x01; /* RCD */
    run(f, f->n1, 1, sel, list, sizeof(list));
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    assert_int_equal(f->t.sense[15] & 0xc0, 0x80); /* SKSV, C/D=0: parameter list */
    assert_int_equal(get_be16(f->t.sense + 16), 6);
    list[4 + 2] &= (uint8_t)~0x01;
    list[4 + 1] = 0x10; /* wrong page length */
    run(f, f->n1, 1, sel, list, sizeof(list));
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    list[4 + 1] = 0x12;
    sel[4] = 12; /* page cut short */
    run(f, f->n1, 1, sel, list, sizeof(list));
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    sel[4] = 2; /* not even a header */
    run(f, f->n1, 1, sel, list, sizeof(list));
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    uint8_t sp[16] = {0x15, 0x11, 0, 0, 24};
    run(f, f->n1, 1, sp, list, sizeof(list));
    assert_cdb_field(&f->t, 1);

    /* MODE SELECT(10) with a block descriptor that keeps the block size */
    uint8_t l10[8 + 8 + 20] = {0};
    l10[7] = 8;
    put_be24(l10 + 8 + 5, 512);
    l10[16] = 0x08;
    l10[17] = 0x12;
    uint8_t sel10[16] = {0x55, 0x10, 0, 0, 0, 0, 0, 0, sizeof(l10)};
    assert_int_equal(run(f, f->n1, 1, sel10, l10, sizeof(l10)), SCSI_STATUS_GOOD);
    put_be24(l10 + 8 + 5, 4096);
    run(f, f->n1, 1, sel10, l10, sizeof(l10));
    assert_sense(&f->t, 0x5, 0x26, 0x00);
}

static int wce_select_done;

static void on_wce_select_done(struct scsi_task *t)
{
    (void)t;
    wce_select_done++;
}

/* MODE SELECT with the caching page's WCE (byte 2 bit 2) set to wce on LUN 1, on its own task
 * (held until the test releases it); its done() counts in wce_select_done. */
static void wce_select(struct fx *f, struct scsi_task *ts, bool wce)
{
    uint8_t ms[16] = {0x1a, 0x08, 0x08, 0, 255};
    run(f, f->n1, 1, ms, NULL, 0);
    uint8_t list[24];
    memcpy(list, data(f), 24);
    list[0] = 0;
    list[4 + 2] = (uint8_t)((list[4 + 2] & ~0x04) | (wce ? 0x04 : 0));
    uint8_t sel[16] = {0x15, 0x10, 0, 0, 24};
    wce_select_done = 0;
    sfx_run(ts, &f->tg, f->n1, 1, sel, list, sizeof(list), 0, 0);
    ts->done = on_wce_select_done; /* exec returned; the answer, if not given yet, comes here */
    wce_select_done += sfx_done_calls;
}

static bool lun1_wce(struct fx *f)
{
    uint8_t ms[16] = {0x1a, 0x08, 0x08, 0, 255};
    assert_int_equal(run(f, f->n1, 1, ms, NULL, 0), SCSI_STATUS_GOOD);
    return data(f)[4 + 2] & 0x04;
}

static bool lun1_write_fua(struct fx *f)
{
    static uint8_t out[512];
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1};
    assert_int_equal(run(f, f->n1, 1, w10, out, sizeof(out)), SCSI_STATUS_GOOD);
    return f->m->last_fua;
}

/* MODE SELECT turning WCE off (SBC-3 caching page) flushes the store before it answers: the
 * writes acknowledged into the volatile cache would otherwise never be flushed, the initiator
 * sending no SYNCHRONIZE CACHE any more. Writes set up while the flush runs are FUA already. A
 * failed flush fails the MODE SELECT as SYNCHRONIZE CACHE would (MEDIUM ERROR 0Ch/00h) and WCE
 * stays on, with no UA; turning WCE on flushes nothing. */
static void test_mode_select_wce_off_flushes(void **state)
{
    struct fx *f = *state;
    struct scsi_task ts;
    scsi_task_init(&ts);
    assert_true(lun1_wce(f)); /* the test store has a volatile cache */

    f->m->hold = 1u << BS_FLUSH;
    int flushes = f->m->flushes;
    wce_select(f, &ts, false);
    assert_int_equal(f->m->flushes, flushes + 1);
    assert_int_equal(wce_select_done, 0); /* not answered before the flush is done */
    assert_true(lun1_write_fua(f));
    f->m->held->done(f->m->held, -EIO);
    assert_int_equal(wce_select_done, 1);
    assert_int_equal(ts.status, SCSI_STATUS_CHECK_CONDITION);
    assert_sense(&ts, 0x3, 0x0c, 0x00);
    assert_true(lun1_wce(f));
    assert_false(lun1_write_fua(f));
    assert_int_equal(run(f, f->n2, 1, TUR, NULL, 0), SCSI_STATUS_GOOD); /* nothing changed */

    wce_select(f, &ts, false);
    assert_int_equal(f->m->flushes, flushes + 2);
    assert_int_equal(wce_select_done, 0);
    f->m->held->done(f->m->held, 0);
    assert_int_equal(wce_select_done, 1);
    assert_int_equal(ts.status, SCSI_STATUS_GOOD);
    assert_false(lun1_wce(f));
    assert_true(lun1_write_fua(f));
    run(f, f->n2, 1, TUR, NULL, 0);
    assert_sense(&f->t, 0x6, 0x2a, 0x01);

    /* a write in the store when WCE goes off (set up with WCE on, not FUA) is waited for: the
     * flush starts once it is done, so it is made stable too */
    wce_select(f, &ts, true);
    struct scsi_task tw;
    scsi_task_init(&tw);
    static uint8_t out[512];
    uint8_t w10[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1};
    f->m->hold = 1u << BS_WRITE;
    sfx_run(&tw, &f->tg, f->n1, 1, w10, out, sizeof(out), 0, 0);
    struct bs_io *w = f->m->held;
    assert_false(w->fua);
    f->m->hold = 1u << BS_FLUSH;
    wce_select(f, &ts, false);
    assert_int_equal(f->m->flushes, flushes + 2); /* not before the write is done */
    assert_int_equal(wce_select_done, 0);
    w->done(w, 0);
    assert_int_equal(f->m->flushes, flushes + 3);
    assert_int_equal(wce_select_done, 0);
    f->m->held->done(f->m->held, 0);
    assert_int_equal(wce_select_done, 1);
    assert_int_equal(ts.status, SCSI_STATUS_GOOD);
    scsi_task_release(&tw);
    flushes++;

    /* on again: nothing to flush, answered at once */
    wce_select(f, &ts, true);
    assert_int_equal(wce_select_done, 1);
    assert_int_equal(ts.status, SCSI_STATUS_GOOD);
    assert_int_equal(f->m->flushes, flushes + 2);
    assert_true(lun1_wce(f));
    f->m->hold = 0;
    scsi_task_release(&ts);
}

/* --- REPORT SUPPORTED OPERATION CODES --- */

static void test_rsoc(void **state)
{
    struct fx *f = *state;
    uint8_t all[16] = {0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0x10, 0};
    assert_int_equal(run(f, f->n1, 0, all, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    uint32_t len = get_be32(d);
    assert_int_equal(f->t.data_len, 4 + len);
    assert_int_equal(len % 8, 0);
    bool saw_read10 = false, saw_rc16 = false, saw_write16 = false;
    for (uint32_t off = 4; off < 4 + len; off += 8) {
        const uint8_t *e = d + off;
        assert_int_equal(e[5] & 0x02, 0); /* no CTDP without RCTD */
        if (e[0] == 0x28) {
            saw_read10 = true;
            assert_int_equal(get_be16(e + 6), 10);
            assert_int_equal(e[5] & 1, 0);
        }
        if (e[0] == 0x8a)
            saw_write16 = get_be16(e + 6) == 16;
        if (e[0] == 0x9e && get_be16(e + 2) == 0x10) {
            saw_rc16 = true;
            assert_int_equal(e[5] & 1, 1); /* SERVACTV */
        }
    }
    assert_true(saw_read10 && saw_rc16 && saw_write16);

    all[2] = 0x80; /* RCTD: each descriptor carries a timeouts descriptor */
    run(f, f->n1, 0, all, NULL, 0);
    d = data(f);
    assert_int_equal(get_be32(d) % 20, 0);
    assert_int_equal(d[4 + 5] & 0x02, 0x02);
    assert_int_equal(get_be16(d + 4 + 8), 0x0a);

    uint8_t one[16] = {0xa3, 0x0c, 0x01, 0x28, 0, 0, 0, 0, 1, 0};
    assert_int_equal(run(f, f->n1, 0, one, NULL, 0), SCSI_STATUS_GOOD);
    d = data(f);
    assert_int_equal(d[1] & 7, 3); /* supported as the standard says */
    assert_int_equal(get_be16(d + 2), 10);
    static const uint8_t r10_usage[10] = {0x28, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0};
    assert_memory_equal(d + 4, r10_usage, 10);
    assert_int_equal(f->t.data_len, 14);
    one[3] = 0xff;
    run(f, f->n1, 0, one, NULL, 0);
    assert_int_equal(data(f)[1] & 7, 1); /* not supported */
    one[3] = 0x9e;                       /* has service actions: needs option 2 */
    run(f, f->n1, 0, one, NULL, 0);
    assert_cdb_field(&f->t, 3);

    uint8_t two[16] = {0xa3, 0x0c, 0x82, 0x9e, 0, 0x10, 0, 0, 1, 0};
    assert_int_equal(run(f, f->n1, 0, two, NULL, 0), SCSI_STATUS_GOOD);
    d = data(f);
    assert_int_equal(d[1], 0x83); /* CTDP, supported */
    assert_int_equal(get_be16(d + 2), 16);
    assert_int_equal(d[4], 0x9e);
    assert_int_equal(d[5], 0x10);
    assert_int_equal(f->t.data_len, 4 + 16 + 12);
    two[3] = 0x28; /* no service actions: option 2 is wrong */
    run(f, f->n1, 0, two, NULL, 0);
    assert_cdb_field(&f->t, 3);
    two[2] = 0x03;
    run(f, f->n1, 0, two, NULL, 0);
    assert_cdb_field(&f->t, 2);
}

/* --- LUN addressing --- */

static void test_lun_wire(void **state)
{
    (void)state;
    uint8_t w[8];
    static const uint64_t luns[] = {0, 1, 255, 256, 1000, 16383};
    for (size_t i = 0; i < sizeof(luns) / sizeof(luns[0]); i++) {
        scsi_lun_to_wire(luns[i], w);
        assert_int_equal(scsi_lun_from_wire(w), luns[i]);
    }
    scsi_lun_to_wire(5, w);
    static const uint8_t five[8] = {0, 5};
    assert_memory_equal(w, five, 8);
    scsi_lun_to_wire(300, w);
    static const uint8_t flat[8] = {0x41, 0x2c};
    assert_memory_equal(w, flat, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inquiry_standard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_physical_block_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_missing_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_bad_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_vpd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_vpd_list_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_vpd_extended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_vpd_third_party_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry_vpd_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_luns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_lun_and_opcodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ua_new_nexus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ua_resets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ua_nexus_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ua_tasks_cleared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rw_ram, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rw_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rw_submit_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_edtl_short, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_sense, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_select, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_select_wce_off_flushes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rsoc, setup, teardown),
        cmocka_unit_test(test_lun_wire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
