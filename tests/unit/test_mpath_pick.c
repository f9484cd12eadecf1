/* The multipath device's path choice, fed by linerate's own SCSI target (no sockets): two
 * gateways of one target, A in target port group 1 (active/optimized) and B in group 2
 * (active/non-optimized). What the initiator reads from their REPORT TARGET PORT GROUPS, VPD
 * 0x83 and sense data (initiator/alua.c) decides where commands go (initiator/mpath_pick.c):
 * never to B while A lives, even with B listed first; to B once A is down; nowhere once B is
 * standby (after its 2Ah/06h). Plus round robin among equal paths, exclusions, and bytes a
 * target may get wrong; and how a COMPARE AND WRITE issued again is judged after a MISCOMPARE
 * (initiator/mpath_caw.c): its own first copy landed, or another host wrote. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "initiator/alua.h"
#include "initiator/mpath_caw.h"
#include "initiator/mpath_pick.h"
#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"

#include "scsi_fixture.h"

#define TGT_NAME "iqn.2024-01.io.linerate:mpath"

static const uint8_t TUR[16] = {0x00};

static void add_lun(struct scsi_target *tg)
{
    char err[128];
    sfx_add_lun(tg, 0, bs_open_spec("ram:1M", err, sizeof(err)), 512, false);
}

static int setup(void **state)
{
    struct sfx_gateways *f = calloc(1, sizeof(*f));
    sfx_gateway_init(&f->a, TGT_NAME, 1, SCSI_ALUA_ACTIVE_OPTIMIZED, 2,
                     SCSI_ALUA_ACTIVE_NON_OPTIMIZED);
    add_lun(&f->a);
    sfx_gateway_init(&f->b, TGT_NAME, 2, SCSI_ALUA_ACTIVE_NON_OPTIMIZED, 1,
                     SCSI_ALUA_ACTIVE_OPTIMIZED);
    add_lun(&f->b);
    f->na = sfx_nexus_get(&f->a, 1);
    f->nb = sfx_nexus_get(&f->b, 1);
    /* each new nexus's power-on unit attention */
    while (sfx_run(&f->t, &f->a, f->na, 0, TUR, NULL, 0, 0, 0) != SCSI_STATUS_GOOD)
        ;
    while (sfx_run(&f->t, &f->b, f->nb, 0, TUR, NULL, 0, 0, 0) != SCSI_STATUS_GOOD)
        ;
    *state = f;
    return 0;
}

/* cdb through one gateway; the data in buf (len bytes at most), the status returned */
static int ask(struct sfx_gateways *f, struct scsi_target *tg, const uint8_t *cdb12, uint8_t *buf,
               uint32_t *len)
{
    uint8_t cdb[16] = {0};
    memcpy(cdb, cdb12, 12);
    struct scsi_nexus *n = tg == &f->a ? f->na : f->nb;
    int st = sfx_run(&f->t, tg, n, 0, cdb, NULL, 0, *len, 0);
    uint32_t got = 0;
    for (int i = 0; st == SCSI_STATUS_GOOD && i < f->t.iovcnt && got < *len; i++) {
        uint32_t n1 = (uint32_t)f->t.iov[i].iov_len;
        if (n1 > *len - got)
            n1 = *len - got;
        memcpy(buf + got, f->t.iov[i].iov_base, n1);
        got += n1;
    }
    *len = got;
    return st;
}

/* The group of a gateway's port, from its VPD 0x83. */
static int group_of(struct sfx_gateways *f, struct scsi_target *tg)
{
    uint8_t cdb[12], buf[255];
    uint32_t len = sizeof(buf);
    ini_alua_vpd83_cdb(cdb, sizeof(buf));
    assert_int_equal(ask(f, tg, cdb, buf, &len), SCSI_STATUS_GOOD);
    uint16_t g;
    assert_int_equal(ini_alua_vpd83_group(buf, len, &g), 0);
    return g;
}

/* path i's state from an RTPG answer through tg: status, and states set into c */
static int states_from(struct sfx_gateways *f, struct scsi_target *tg, const int *groups,
                       struct ini_mpath_cand *c, unsigned n)
{
    uint8_t cdb[12], buf[512];
    uint32_t len = sizeof(buf);
    ini_alua_rtpg_cdb(cdb, sizeof(buf));
    int st = ask(f, tg, cdb, buf, &len);
    if (st != SCSI_STATUS_GOOD)
        return st;
    struct ini_alua_group g[8];
    int k = ini_alua_rtpg_parse(buf, len, g, 8);
    assert_int_equal(k, 2);
    for (unsigned i = 0; i < n; i++) {
        c[i].state = LR_ALUA_UNKNOWN;
        for (int j = 0; j < k; j++)
            if (g[j].id == groups[i])
                c[i].state = g[j].state;
    }
    return st;
}

static void test_ao_before_an(void **state)
{
    struct sfx_gateways *f = *state;
    /* path 0 is B (listed first, as a user may), path 1 is A */
    int groups[2] = {group_of(f, &f->b), group_of(f, &f->a)};
    assert_int_equal(groups[0], 2);
    assert_int_equal(groups[1], 1);
    struct ini_mpath_cand c[2] = {{.up = true}, {.up = true}};
    /* both gateways tell the same picture */
    assert_int_equal(states_from(f, &f->b, groups, c, 2), SCSI_STATUS_GOOD);
    assert_int_equal(c[0].state, LR_ALUA_AN);
    assert_int_equal(c[1].state, LR_ALUA_AO);
    assert_int_equal(states_from(f, &f->a, groups, c, 2), SCSI_STATUS_GOOD);
    unsigned rr = 0;
    for (int i = 0; i < 100; i++)
        assert_int_equal(ini_mpath_pick(c, 2, 0, &rr), 1); /* never B while A lives */
    c[1].up = false;                                       /* A lost */
    assert_int_equal(ini_mpath_pick(c, 2, 0, &rr), 0);
    /* a command that died on B is not sent there again */
    assert_int_equal(ini_mpath_pick(c, 2, 1u << 0, &rr), -1);
}

static void test_standby_never(void **state)
{
    struct sfx_gateways *f = *state;
    int groups[2] = {2, 1};
    struct ini_mpath_cand c[2] = {{.up = true}, {.up = false}};
    /* B made standby (its own group): the next command there says so with a unit attention,
     * RTPG then tells standby, and nothing goes to it */
    assert_int_equal(scsi_lun_alua_set(scsi_target_lun(&f->b, 0), 0, SCSI_ALUA_STANDBY), 1);
    assert_int_equal(sfx_run(&f->t, &f->b, f->nb, 0, TUR, NULL, 0, 0, 0),
                     SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(ini_alua_sense(f->t.sense, f->t.sense_len), INI_SENSE_AAS_CHANGED);
    assert_int_equal(states_from(f, &f->b, groups, c, 2), SCSI_STATUS_GOOD);
    assert_int_equal(c[0].state, LR_ALUA_STANDBY);
    unsigned rr = 0;
    assert_int_equal(ini_mpath_pick(c, 2, 0, &rr), -1);
    /* and a command sent there anyway is refused with 04h/0Bh */
    assert_int_equal(sfx_run(&f->t, &f->b, f->nb, 0, TUR, NULL, 0, 0, 0),
                     SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(ini_alua_sense(f->t.sense, f->t.sense_len), INI_SENSE_STANDBY);
}

static void test_round_robin(void **state)
{
    (void)state;
    struct ini_mpath_cand c[4] = {{.up = true, .state = LR_ALUA_AO},
                                  {.up = true, .state = LR_ALUA_AN},
                                  {.up = true, .state = LR_ALUA_AO},
                                  {.up = true, .state = LR_ALUA_TRANSITIONING}};
    unsigned rr = 0, hits[4] = {0};
    for (int i = 0; i < 100; i++)
        hits[ini_mpath_pick(c, 4, 0, &rr)]++;
    assert_int_equal(hits[0], 50);
    assert_int_equal(hits[2], 50);
    assert_int_equal(ini_mpath_pick(c, 4, 1u << 0 | 1u << 2, &rr), 1);
    c[1].state = LR_ALUA_UNKNOWN;
    assert_int_equal(ini_mpath_pick(c, 4, 1u << 0 | 1u << 2, &rr), -1);
}

static void test_bad_bytes(void **state)
{
    (void)state;
    struct ini_alua_group g[4];
    /* a descriptor whose port count runs past RETURN DATA LENGTH */
    uint8_t rtpg[16] = {0, 0, 0, 8, 0x80, 0x07, 0, 1, 0, 0, 0, 5};
    assert_int_equal(ini_alua_rtpg_parse(rtpg, sizeof(rtpg), g, 4), -1);
    /* cut at the allocation length: the whole descriptors only */
    uint8_t two[4 + 24] = {0, 0, 0,    24,   0x00, 0x07, 0, 1, 0, 0, 0, 1, 0, 0,
                           0, 1, 0x01, 0x07, 0,    2,    0, 0, 0, 1, 0, 0, 0, 2};
    assert_int_equal(ini_alua_rtpg_parse(two, 20, g, 4), 1);
    assert_int_equal(g[0].id, 1);
    assert_int_equal(ini_alua_rtpg_parse(two, sizeof(two), g, 4), 2);
    assert_int_equal(g[1].state, LR_ALUA_AN);
    assert_int_equal(ini_alua_rtpg_parse(two, 3, g, 4), -1);
    /* VPD 0x83 without a target port group designator, and one cut short */
    uint8_t vpd[12] = {0, 0x83, 0, 8, 0x01, 0x14, 0, 4, 0, 0, 0, 1}; /* type 4 only */
    uint16_t grp;
    assert_int_equal(ini_alua_vpd83_group(vpd, sizeof(vpd), &grp), -1);
    vpd[5] = 0x15;
    assert_int_equal(ini_alua_vpd83_group(vpd, sizeof(vpd), &grp), 0);
    assert_int_equal(grp, 1);
    assert_int_equal(ini_alua_vpd83_group(vpd, 10, &grp), -1);
    /* descriptor-format sense, and sense too short to say anything */
    uint8_t desc[8] = {0x72, 0x02, 0x04, 0x0a};
    assert_int_equal(ini_alua_sense(desc, sizeof(desc)), INI_SENSE_TRANSITION);
    uint8_t fixed[18] = {0x70, 0, 0x02, [7] = 10, [12] = 0x04, [13] = 0x0c};
    assert_int_equal(ini_alua_sense(fixed, sizeof(fixed)), INI_SENSE_UNAVAILABLE);
    assert_int_equal(ini_alua_sense(fixed, 13), INI_SENSE_OTHER);
}

/* One host's heartbeat slot on A's LUN: its CAW runs, then the same CAW again (the copy
 * lr_mpath issues on another path when the first one's answer was lost) miscompares; read
 * back, the block holds its write data: landed. Another host's write over the slot makes the
 * next miscompare a real one. A miscompare of any other command, or a GOOD CAW, is no case. */
static void test_caw_judgement(void **state)
{
    struct sfx_gateways *f = *state;
    uint8_t cdb[16] = {0x89, 0, [9] = 7, [13] = 1}; /* COMPARE AND WRITE, LBA 7, 1 block */
    uint8_t caw[1024] = {0}, rd[512];
    memset(caw + 512, 'h', 512);
    struct lr_result res = {.err = LR_SCSI_STATUS};
    uint64_t lba;
    uint32_t blocks;
    assert_int_equal(sfx_run(&f->t, &f->a, f->na, 0, cdb, caw, sizeof(caw), 0, 0),
                     SCSI_STATUS_GOOD);
    res.err = LR_OK;
    assert_false(ini_caw_miscompare(cdb, 16, &res, &lba, &blocks));
    /* the copy issued again */
    assert_int_equal(sfx_run(&f->t, &f->a, f->na, 0, cdb, caw, sizeof(caw), 0, 0),
                     SCSI_STATUS_CHECK_CONDITION);
    res = (struct lr_result){.err = LR_SCSI_STATUS, .scsi_status = 2, .sense_len = f->t.sense_len};
    memcpy(res.sense, f->t.sense, f->t.sense_len);
    assert_true(ini_caw_miscompare(cdb, 16, &res, &lba, &blocks));
    assert_int_equal(lba, 7);
    assert_int_equal(blocks, 1);
    uint8_t rcdb[12] = {0x28, 0, 0, 0, 0, 7, 0, 0, 1}; /* READ (10) */
    uint32_t len = sizeof(rd);
    assert_int_equal(ask(f, &f->a, rcdb, rd, &len), SCSI_STATUS_GOOD);
    assert_true(ini_caw_landed(caw, sizeof(caw), rd, len));
    /* the same sense on a WRITE is no CAW's; a short read is no verdict */
    uint8_t wcdb[16] = {0x2a, 0, 0, 0, 0, 7, 0, 0, 1};
    assert_false(ini_caw_miscompare(wcdb, 10, &res, &lba, &blocks));
    assert_false(ini_caw_landed(caw, sizeof(caw), rd, len - 1));
    /* another host takes the slot: the next miscompare is real */
    uint8_t other[512];
    memset(other, 'o', sizeof(other));
    assert_int_equal(sfx_run(&f->t, &f->a, f->na, 0, wcdb, other, sizeof(other), 0, 0),
                     SCSI_STATUS_GOOD);
    memcpy(caw, caw + 512, 512); /* compare with what the host wrote last */
    memset(caw + 512, 'i', 512);
    assert_int_equal(sfx_run(&f->t, &f->a, f->na, 0, cdb, caw, sizeof(caw), 0, 0),
                     SCSI_STATUS_CHECK_CONDITION);
    memcpy(res.sense, f->t.sense, f->t.sense_len);
    assert_true(ini_caw_miscompare(cdb, 16, &res, &lba, &blocks));
    len = sizeof(rd);
    assert_int_equal(ask(f, &f->a, rcdb, rd, &len), SCSI_STATUS_GOOD);
    assert_false(ini_caw_landed(caw, sizeof(caw), rd, len));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ao_before_an, setup, sfx_gateways_teardown),
        cmocka_unit_test_setup_teardown(test_standby_never, setup, sfx_gateways_teardown),
        cmocka_unit_test(test_round_robin),
        cmocka_unit_test(test_bad_bytes),
        cmocka_unit_test_setup_teardown(test_caw_judgement, setup, sfx_gateways_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
