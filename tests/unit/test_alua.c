/* Implicit ALUA without sockets: two SCSI targets of the same name stand for two gateways, A in
 * target port group 1 and B in group 2, each told of the other. LUN 0 is active/optimized on A
 * and active/non-optimized on B; LUN 1 is standby on B. Checked: INQUIRY TPGS=01b, the VPD 0x83
 * designators (same LU, distinct ports), REPORT TARGET PORT GROUPS byte for byte in both formats
 * and identical from both gateways, the commands a standby port refuses (SPC-4 §5.16.2.4.5) and
 * the ones it answers, SET TARGET PORT GROUPS refused (implicit only), and a state changed
 * live (scsi_lun_alua_set): ASYMMETRIC ACCESS STATE CHANGED once per nexus, then the new
 * state in RTPG and the standby gate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"

#define TGT_NAME "iqn.2024-01.io.linerate:alua"

static int run(struct sfx_gateways *f, struct scsi_target *tg, uint64_t lun, const uint8_t *cdb)
{
    struct scsi_nexus *n = tg == &f->a ? f->na : f->nb;
    return sfx_run(&f->t, tg, n, lun, cdb, NULL, 0, 4096, SFX_CHECK_DONE | SFX_CHECK_REFUSAL);
}

static const uint8_t *data(struct sfx_gateways *f)
{
    return f->t.iov[0].iov_base;
}

static const uint8_t TUR[16] = {0x00};
static const uint8_t READ10[16] = {0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0};
static const uint8_t WRITE10[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* 0 blocks */
static const uint8_t READCAP10[16] = {0x25};
static const uint8_t SYNC10[16] = {0x35};
static const uint8_t INQUIRY[16] = {0x12, 0, 0, 0, 96};
static const uint8_t VPD83[16] = {0x12, 1, 0x83, 0, 255};
static const uint8_t REPORT_LUNS[16] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
static const uint8_t REQUEST_SENSE[16] = {0x03, 0, 0, 0, 18};
static const uint8_t MODE_SENSE6[16] = {0x1a, 0, 0x3f, 0, 255};
static const uint8_t PRIN_KEYS[16] = {0x5e, 0x00, 0, 0, 0, 0, 0, 0, 64, 0};
static const uint8_t RTPG[16] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
static const uint8_t RTPG_EXT[16] = {0xa3, 0x2a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
static const uint8_t STPG[16] = {0xa4, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0};

/* Reports the pending unit attentions (new nexus) of both nexuses on both LUNs. */
static void clear_uas(struct sfx_gateways *f)
{
    struct scsi_target *tgs[2] = {&f->a, &f->b};
    for (int i = 0; i < 2; i++)
        for (uint64_t lun = 0; lun < 2; lun++)
            while (run(f, tgs[i], lun, REQUEST_SENSE) == SCSI_STATUS_GOOD &&
                   (data(f)[2] & 0x0f) == 0x6)
                ;
}

static void add_lun(struct scsi_target *tg, uint64_t lun, bool set, enum scsi_alua_state own,
                    uint16_t peer, enum scsi_alua_state peer_state)
{
    char err[128];
    struct scsi_lun_config c = {.lun = lun,
                                .bs = bs_open_spec("ram:1M", err, sizeof(err)),
                                .block_size = 512,
                                .alua_state_set = set,
                                .alua_state = own};
    if (peer) {
        c.alua_peers[0] = (struct scsi_alua_group){.id = peer, .state = (uint8_t)peer_state};
        c.alua_npeers = 1;
    }
    assert_non_null(c.bs);
    assert_int_equal(scsi_target_add_lun(tg, &c, err, sizeof(err)), 0);
}

static int setup(void **state)
{
    struct sfx_gateways *f = calloc(1, sizeof(*f));
    /* Gateway A: group 1, knows group 2 as active/non-optimized; LUN 1 overrides the peer's
     * state to standby, as gateway B's own config says. */
    sfx_gateway_init(&f->a, TGT_NAME, 1, SCSI_ALUA_ACTIVE_OPTIMIZED, 2,
                     SCSI_ALUA_ACTIVE_NON_OPTIMIZED);
    add_lun(&f->a, 0, false, 0, 0, 0);
    add_lun(&f->a, 1, false, 0, 2, SCSI_ALUA_STANDBY);
    /* Gateway B: group 2, active/non-optimized by default, standby for LUN 1. */
    sfx_gateway_init(&f->b, TGT_NAME, 2, SCSI_ALUA_ACTIVE_NON_OPTIMIZED, 1,
                     SCSI_ALUA_ACTIVE_OPTIMIZED);
    add_lun(&f->b, 0, false, 0, 0, 0);
    add_lun(&f->b, 1, true, SCSI_ALUA_STANDBY, 0, 0);
    f->na = sfx_nexus_get(&f->a, 1);
    f->nb = sfx_nexus_get(&f->b, 1);
    clear_uas(f);
    *state = f;
    return 0;
}

static void test_inquiry_tpgs(void **state)
{
    struct sfx_gateways *f = *state;
    assert_int_equal(run(f, &f->a, 0, INQUIRY), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[5], 0x18); /* TPGS 01b (implicit), 3PC */
    /* standby does not hide the LU from INQUIRY */
    assert_int_equal(run(f, &f->b, 1, INQUIRY), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[0], 0x00);
    assert_int_equal(data(f)[5], 0x18);
}

static const uint8_t *find_designator(const uint8_t *d, uint8_t assoc_type)
{
    uint32_t len = 4 + get_be16(d + 2);
    for (uint32_t off = 4; off < len; off += 4 + d[off + 3])
        if ((d[off + 1] & 0x3f) == assoc_type)
            return d + off;
    return NULL;
}

static void test_vpd83_ports(void **state)
{
    struct sfx_gateways *f = *state;
    uint8_t va[256], vb[256];
    assert_int_equal(run(f, &f->a, 0, VPD83), SCSI_STATUS_GOOD);
    memcpy(va, data(f), sizeof(va));
    assert_int_equal(run(f, &f->b, 0, VPD83), SCSI_STATUS_GOOD);
    memcpy(vb, data(f), sizeof(vb));
    /* the same logical unit through both gateways */
    assert_memory_equal(find_designator(va, 0x03), find_designator(vb, 0x03), 12);
    assert_memory_equal(find_designator(va, 0x01), find_designator(vb, 0x01), 28);
    /* relative target port 1 / 2, in target port group 1 / 2: designator, PIV=1, port */
    static const uint8_t rel_a[] = {0x51, 0x94, 0, 4, 0, 0, 0, 1};
    static const uint8_t tpg_a[] = {0x51, 0x95, 0, 4, 0, 0, 0, 1};
    static const uint8_t rel_b[] = {0x51, 0x94, 0, 4, 0, 0, 0, 2};
    static const uint8_t tpg_b[] = {0x51, 0x95, 0, 4, 0, 0, 0, 2};
    assert_memory_equal(find_designator(va, 0x14), rel_a, 8);
    assert_memory_equal(find_designator(va, 0x15), tpg_a, 8);
    assert_memory_equal(find_designator(vb, 0x14), rel_b, 8);
    assert_memory_equal(find_designator(vb, 0x15), tpg_b, 8);
    /* distinct target port names (RFC 7143 §4.2.7.2: name plus TPGT) */
    assert_string_equal((const char *)find_designator(va, 0x18) + 4, TGT_NAME ",t,0x0001");
    assert_string_equal((const char *)find_designator(vb, 0x18) + 4, TGT_NAME ",t,0x0002");
}

/* LUN 0: group 1 active/optimized, group 2 active/non-optimized; one port each. */
static const uint8_t RTPG_LUN0[] = {
    0x00, 0x00, 0x00, 0x18,                         /* RETURN DATA LENGTH */
    0x00, 0x07, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, /* AO, S/AN/AO_SUP, group 1, 1 port */
    0x00, 0x00, 0x00, 0x01,                         /* relative target port 1 */
    0x01, 0x07, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, /* AN, group 2 */
    0x00, 0x00, 0x00, 0x02,                         /* relative target port 2 */
};

static void test_rtpg_length_only(void **state)
{
    struct sfx_gateways *f = *state;
    assert_int_equal(run(f, &f->a, 0, RTPG), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, sizeof(RTPG_LUN0));
    assert_memory_equal(data(f), RTPG_LUN0, sizeof(RTPG_LUN0));
    /* the same bytes from the other gateway */
    assert_int_equal(run(f, &f->b, 0, RTPG), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, sizeof(RTPG_LUN0));
    assert_memory_equal(data(f), RTPG_LUN0, sizeof(RTPG_LUN0));
    /* LUN 1: group 2 in standby, from both */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(run(f, i ? &f->b : &f->a, 1, RTPG), SCSI_STATUS_GOOD);
        assert_int_equal(data(f)[4], 0x00);
        assert_int_equal(data(f)[16], 0x02);
        assert_int_equal(get_be16(data(f) + 18), 2);
    }
    /* the allocation length truncates; the length field still tells the whole */
    uint8_t cdb[16];
    memcpy(cdb, RTPG, sizeof(cdb));
    put_be32(cdb + 6, 4);
    assert_int_equal(run(f, &f->a, 0, cdb), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 4);
    assert_int_equal(get_be32(data(f)), 0x18);
}

static void test_rtpg_extended(void **state)
{
    struct sfx_gateways *f = *state;
    assert_int_equal(run(f, &f->b, 0, RTPG_EXT), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 8 + 24);
    const uint8_t *d = data(f);
    assert_int_equal(get_be32(d), 24); /* the descriptor list only */
    assert_int_equal(d[4], 0x10);      /* FORMAT TYPE 001b */
    assert_int_equal(d[5], 0);         /* IMPLICIT TRANSITION TIME */
    assert_memory_equal(d + 8, RTPG_LUN0 + 4, 24);
}

static void test_rtpg_bad_fields(void **state)
{
    struct sfx_gateways *f = *state;
    uint8_t cdb[16];
    memcpy(cdb, RTPG, sizeof(cdb));
    cdb[1] = 0x4a; /* PARAMETER DATA FORMAT 010b: reserved */
    assert_int_equal(run(f, &f->a, 0, cdb), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x24, 0x00);
    sfx_assert_field_pointer(&f->t, 0xc0, 1);
    memcpy(cdb, RTPG, sizeof(cdb));
    cdb[2] = 1; /* reserved */
    assert_int_equal(run(f, &f->a, 0, cdb), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x24, 0x00);
    assert_int_equal(run(f, &f->a, 7, RTPG), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x25, 0x00); /* no such LUN */
}

static void expect_standby(struct sfx_gateways *f, const uint8_t *cdb)
{
    assert_int_equal(run(f, &f->b, 1, cdb), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, SFX_SENSE_LEN | SFX_SENSE_FIXED, 0x2, 0x04, 0x0b);
}

static void expect_standby_lun(struct sfx_gateways *f, uint64_t lun)
{
    assert_int_equal(run(f, &f->b, lun, READ10), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, SFX_SENSE_LEN | SFX_SENSE_FIXED, 0x2, 0x04, 0x0b);
}

static void test_standby(void **state)
{
    struct sfx_gateways *f = *state;
    expect_standby(f, TUR);
    expect_standby(f, READ10);
    expect_standby(f, WRITE10);
    expect_standby(f, SYNC10);
    /* SPC-4 §5.16.2.4.5: what a standby port still answers; READ CAPACITY too, which the
     * standard allows and Linux needs (cmds.c) */
    const uint8_t *allowed[] = {INQUIRY,   VPD83, REPORT_LUNS, REQUEST_SENSE, MODE_SENSE6,
                                PRIN_KEYS, RTPG,  RTPG_EXT,    READCAP10};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        assert_int_equal(run(f, &f->b, 1, allowed[i]), SCSI_STATUS_GOOD);
    /* the same LUN on the active gateway, and the active LUN on the standby gateway */
    assert_int_equal(run(f, &f->a, 1, TUR), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, &f->a, 1, READ10), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, &f->b, 0, TUR), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, &f->b, 0, READ10), SCSI_STATUS_GOOD);
}

static void test_stpg_refused(void **state)
{
    struct sfx_gateways *f = *state;
    /* TPGS 01b: SET TARGET PORT GROUPS is not offered (SPC-4 §6.6.2 table 147) */
    assert_int_equal(run(f, &f->a, 0, STPG), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x20, 0x00);
    assert_int_equal(run(f, &f->b, 1, STPG), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x20, 0x00);
}

/* The group's state in RTPG (length-only format) of LUN lun through gateway B. */
static uint8_t rtpg_state(struct sfx_gateways *f, uint64_t lun, uint16_t group)
{
    assert_int_equal(run(f, &f->b, lun, RTPG), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    for (uint32_t off = 4; off < 4 + get_be32(d); off += 8 + 4u * d[off + 7])
        if (get_be16(d + off + 2) == group)
            return d[off] & 0x0f;
    fail_msg("RTPG has no group %u", group);
    return 0xff;
}

static void expect_alua_ua(struct sfx_gateways *f, struct scsi_nexus *n, uint64_t lun)
{
    assert_int_equal(sfx_run(&f->t, &f->b, n, lun, TUR, NULL, 0, 0, SFX_CHECK_REFUSAL),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x6, 0x2a, 0x06);
}

static void test_live_change(void **state)
{
    struct sfx_gateways *f = *state;
    struct scsi_nexus *n2 = sfx_nexus_get(&f->b, 2);
    while (sfx_run(&f->t, &f->b, n2, 0, TUR, NULL, 0, 0, 0) != SCSI_STATUS_GOOD)
        ; /* its power-on UA */
    /* B's own group to standby for LUN 0: both nexuses told once, the state at once */
    assert_int_equal(scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 0, SCSI_ALUA_STANDBY), 1);
    expect_alua_ua(f, f->nb, 0);
    expect_standby_lun(f, 0);
    assert_int_equal(rtpg_state(f, 0, 2), SCSI_ALUA_STANDBY);
    expect_alua_ua(f, n2, 0);
    /* LUN 1 did not change: no UA there */
    assert_int_equal(run(f, &f->b, 1, INQUIRY), SCSI_STATUS_GOOD);
    /* the peer group, by id; the same state again raises nothing; an unknown group is refused */
    assert_int_equal(scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 1, SCSI_ALUA_STANDBY), 1);
    expect_alua_ua(f, f->nb, 0);
    assert_int_equal(rtpg_state(f, 0, 1), SCSI_ALUA_STANDBY);
    assert_int_equal(scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 1, SCSI_ALUA_STANDBY), 0);
    assert_int_equal(scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 9, SCSI_ALUA_STANDBY), -1);
    assert_int_equal(rtpg_state(f, 0, 1), SCSI_ALUA_STANDBY);
    /* back to active: reads again after the UA */
    assert_int_equal(
        scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 0, SCSI_ALUA_ACTIVE_NON_OPTIMIZED), 1);
    expect_alua_ua(f, f->nb, 0);
    assert_int_equal(run(f, &f->b, 0, READ10), SCSI_STATUS_GOOD);
    struct scsi_alua_group g[SCSI_ALUA_GROUPS_MAX];
    assert_int_equal(scsi_lun_alua_get(scsi_target_lun(&f->b, 0), g, SCSI_ALUA_GROUPS_MAX), 2);
    assert_int_equal(g[0].id, 2);
    assert_int_equal(g[0].state, SCSI_ALUA_ACTIVE_NON_OPTIMIZED);
    assert_int_equal(g[1].state, SCSI_ALUA_STANDBY);
    scsi_task_release(&f->t);
    scsi_nexus_put(n2);
}

/* alua-explicit: TPGS 11b, and SET TARGET PORT GROUPS from one nexus tells the others */
static void test_explicit_stpg(void **state)
{
    struct sfx_gateways *f = *state;
    f->b.alua_explicit = true;
    assert_int_equal(run(f, &f->b, 0, INQUIRY), SCSI_STATUS_GOOD);
    assert_int_equal(data(f)[5] & 0x30, 0x30);
    struct scsi_nexus *n2 = sfx_nexus_get(&f->b, 2);
    while (sfx_run(&f->t, &f->b, n2, 0, TUR, NULL, 0, 0, 0) != SCSI_STATUS_GOOD)
        ;
    uint8_t cdb[16] = {0xa4, 0x0a};
    cdb[9] = 8; /* header and one descriptor */
    /* an unsupported state (unavailable, 3h), then an unknown group: nothing changes */
    uint8_t bad_state[8] = {0, 0, 0, 0, 0x03, 0, 0, 2};
    assert_int_equal(sfx_run(&f->t, &f->b, f->nb, 0, cdb, bad_state, 8, 0, SFX_CHECK_REFUSAL),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x26, 0x00);
    uint8_t bad_group[8] = {0, 0, 0, 0, SCSI_ALUA_STANDBY, 0, 0, 9};
    assert_int_equal(sfx_run(&f->t, &f->b, f->nb, 0, cdb, bad_group, 8, 0, SFX_CHECK_REFUSAL),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&f->t, 0, 0x5, 0x26, 0x00);
    assert_int_equal(rtpg_state(f, 0, 2), SCSI_ALUA_ACTIVE_NON_OPTIMIZED);
    /* B's own group (2) to standby for LUN 0 */
    uint8_t set[8] = {0, 0, 0, 0, SCSI_ALUA_STANDBY, 0, 0, 2};
    assert_int_equal(sfx_run(&f->t, &f->b, f->nb, 0, cdb, set, 8, 0, SFX_CHECK_REFUSAL),
                     SCSI_STATUS_GOOD);
    /* the sender is not told (SPC-4 §5.16.2.3): standby at once; the other nexus is */
    expect_standby_lun(f, 0);
    assert_int_equal(rtpg_state(f, 0, 2), SCSI_ALUA_STANDBY);
    expect_alua_ua(f, n2, 0);
    scsi_task_release(&f->t);
    scsi_nexus_put(n2);
}

static void test_state_names(void **state)
{
    (void)state;
    enum scsi_alua_state s;
    assert_int_equal(scsi_alua_state_parse("active/optimized", &s), 0);
    assert_int_equal(s, SCSI_ALUA_ACTIVE_OPTIMIZED);
    assert_int_equal(scsi_alua_state_parse("AN", &s), 0);
    assert_int_equal(s, SCSI_ALUA_ACTIVE_NON_OPTIMIZED);
    assert_int_equal(scsi_alua_state_parse("standby", &s), 0);
    assert_int_equal(s, SCSI_ALUA_STANDBY);
    assert_int_equal(scsi_alua_state_parse("unavailable", &s), -1);
    assert_string_equal(scsi_alua_state_name(SCSI_ALUA_ACTIVE_NON_OPTIMIZED),
                        "active/non-optimized");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inquiry_tpgs, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_vpd83_ports, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_rtpg_length_only, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_rtpg_extended, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_rtpg_bad_fields, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_standby, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_stpg_refused, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_live_change, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_explicit_stpg, setup, sfx_gateways_teardown),
        cmocka_unit_test(test_state_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
