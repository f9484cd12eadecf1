/* Host LUN maps (scsi.h "host LUN maps", issue 29 item 3) driven through the SCSI core without
 * sockets: two initiators of one target, each seeing its own map under its own numbers, as
 * REPORT LUNS, INQUIRY, TEST UNIT READY, READ/WRITE, MODE SENSE and PERSISTENT RESERVE OUT
 * show it to an initiator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bs/bs.h"
#include "scsi/scsi.h"
#include "util/bytes.h"
#include "util/iostats.h"

#include "scsi_fixture.h"

#define TGT_NAME "iqn.2026-11.org.linerate:shared"
#define HOST_A "iqn.2024-01.test:init1" /* sfx_nexus_get(tg, 1) */
#define HOST_B "IQN.2024-01.test:INIT2" /* sfx_nexus_get(tg, 2): names compare case-blind */

enum { GOOD = 0x00, CHECK = 0x02, CONFLICT = 0x18 };

/* Target LUNs 0, 1 and 2, ram 1M each. Host A sees LUN 2 as 0 and LUN 1 as 1; host B sees
 * LUN 1 as 5. Nexus a is host A's, b host B's, c (init3) has no entry. */
struct fx {
    struct scsi_target tg;
    struct scsi_nexus *a, *b, *c;
    struct scsi_task t;
    char err[256];
};

static int run(struct fx *f, struct scsi_nexus *n, uint64_t lun, const uint8_t *cdb,
               const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, n, lun, cdb, out, out_len, 0, SFX_CHECK_DONE | SFX_CHECK_REFUSAL);
}

static const uint8_t TUR[16] = {0x00};

static void assert_sense(struct fx *f, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(&f->t, SFX_SENSE_LEN | SFX_SENSE_FIXED, key, asc, ascq);
}

/* TEST UNIT READY until GOOD, taking whatever unit attentions are pending (at most a few). */
static void drain(struct fx *f, struct scsi_nexus *n, uint64_t lun)
{
    for (int i = 0; i < 8; i++)
        if (run(f, n, lun, TUR, NULL, 0) == GOOD)
            return;
    fail_msg("LUN %llu never became ready", (unsigned long long)lun);
}

static void map(struct fx *f, const char *host, uint64_t host_lun, uint64_t lun, bool ro)
{
    assert_int_equal(scsi_target_host_map(&f->tg, host, host_lun, lun, ro, f->err, sizeof(f->err)),
                     0);
}

static void add_lun(struct fx *f, uint64_t lun)
{
    sfx_add_lun(&f->tg, lun, bs_open_spec("ram:1M", f->err, sizeof(f->err)), 512, false);
}

static int setup_plain(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    for (uint64_t l = 0; l < 3; l++)
        add_lun(f, l);
    f->a = sfx_nexus_get(&f->tg, 1);
    f->b = sfx_nexus_get(&f->tg, 2);
    f->c = sfx_nexus_get(&f->tg, 3);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    setup_plain(state);
    struct fx *f = *state;
    assert_int_equal(scsi_target_host_add(&f->tg, HOST_A, f->err, sizeof(f->err)), 0);
    assert_int_equal(scsi_target_host_add(&f->tg, HOST_B, f->err, sizeof(f->err)), 0);
    map(f, HOST_A, 0, 2, false);
    map(f, HOST_A, 1, 1, false);
    map(f, HOST_B, 5, 1, false);
    drain(f, f->a, 0);
    drain(f, f->a, 1);
    drain(f, f->b, 5);
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->tg, &f->t, f->a, f->b, f->c);
    free(f);
    return 0;
}

/* REPORT LUNS into nums (up to max): how many the list holds. */
static unsigned report_luns(struct fx *f, struct scsi_nexus *n, uint64_t *nums, unsigned max)
{
    uint8_t cdb[16] = {0xa0};
    put_be32(cdb + 6, 4096);
    assert_int_equal(run(f, n, 0, cdb, NULL, 0), GOOD);
    const uint8_t *d = f->t.iov[0].iov_base;
    unsigned k = get_be32(d) / 8;
    assert_true(k <= max);
    for (unsigned i = 0; i < k; i++)
        nums[i] = scsi_lun_from_wire(d + 8 + 8 * i);
    return k;
}

static void write_block(struct fx *f, struct scsi_nexus *n, uint64_t lun, uint8_t fill, int want)
{
    uint8_t cdb[16];
    sfx_cdb10(cdb, 0x2a, 0, 7, 1);
    uint8_t block[512];
    memset(block, fill, sizeof(block));
    /* RESERVATION CONFLICT is a refusal without sense: no SFX_CHECK_REFUSAL */
    assert_int_equal(sfx_run(&f->t, &f->tg, n, lun, cdb, block, sizeof(block), 0, SFX_CHECK_DONE),
                     want);
}

static uint8_t read_block(struct fx *f, struct scsi_nexus *n, uint64_t lun)
{
    uint8_t cdb[16];
    sfx_cdb10(cdb, 0x28, 0, 7, 1);
    assert_int_equal(run(f, n, lun, cdb, NULL, 0), GOOD);
    return ((const uint8_t *)f->t.iov[0].iov_base)[100];
}

/* PERSISTENT RESERVE OUT with a 24-byte parameter list. */
static int prout(struct fx *f, struct scsi_nexus *n, uint64_t lun, unsigned sa, unsigned type,
                 uint64_t rk, uint64_t sark)
{
    uint8_t cdb[16], p[24];
    sfx_prout24(cdb, p, sa, type, rk, sark);
    return run(f, n, lun, cdb, p, sizeof(p));
}

/* Without host entries every initiator sees every LUN under its own number, as before. */
static void test_no_entries_as_before(void **state)
{
    struct fx *f = *state;
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->a, nums, 8), 3);
    assert_int_equal(nums[0], 0);
    assert_int_equal(nums[2], 2);
    assert_int_equal(scsi_target_host_maps(&f->tg, HOST_A, NULL, 0), -1);
}

/* Each host's REPORT LUNS lists its map under its numbers; one with no entry sees none. */
static void test_report_luns_per_host(void **state)
{
    struct fx *f = *state;
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->a, nums, 8), 2);
    assert_int_equal(nums[0], 0);
    assert_int_equal(nums[1], 1);
    assert_int_equal(report_luns(f, f->b, nums, 8), 1);
    assert_int_equal(nums[0], 5);
    assert_int_equal(report_luns(f, f->c, nums, 8), 0);
    /* the map as show and save read it, in host number order */
    struct scsi_host_mapping rows[4];
    assert_int_equal(scsi_target_host_maps(&f->tg, HOST_A, rows, 4), 2);
    assert_int_equal(rows[0].host_lun, 0);
    assert_int_equal(rows[0].lun, 2);
    assert_int_equal(rows[1].host_lun, 1);
    assert_int_equal(rows[1].lun, 1);
}

/* A number a host has not mapped is no LUN for it: LOGICAL UNIT NOT SUPPORTED, and INQUIRY
 * answers with peripheral qualifier 011b (SPC-4 §6.6.2), even where another host (or the
 * target itself) has a LUN under that number. */
static void test_unmapped_not_supported(void **state)
{
    struct fx *f = *state;
    assert_int_equal(run(f, f->a, 2, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    assert_int_equal(run(f, f->b, 0, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    assert_int_equal(run(f, f->c, 1, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    uint8_t inq[16] = {0x12, 0, 0, 0, 96};
    assert_int_equal(run(f, f->b, 0, inq, NULL, 0), GOOD);
    assert_int_equal(((const uint8_t *)f->t.iov[0].iov_base)[0], 0x7f);
    assert_int_equal(run(f, f->b, 5, inq, NULL, 0), GOOD);
    assert_int_equal(((const uint8_t *)f->t.iov[0].iov_base)[0], 0x00);
}

/* One logical unit under two numbers: what host B writes through 5, host A reads through 1;
 * host A's 0 is another LUN. */
static void test_same_lun_two_numbers(void **state)
{
    struct fx *f = *state;
    write_block(f, f->b, 5, 0xb5, GOOD);
    assert_int_equal(read_block(f, f->a, 1), 0xb5);
    assert_int_equal(read_block(f, f->a, 0), 0x00);
    assert_int_equal(scsi_nexus_host_lun(f->a, scsi_lun_id(scsi_nexus_lun(f->b, 5, NULL)), NULL),
                     1);
    assert_int_equal(scsi_nexus_host_lun(f->b, scsi_lun_id(scsi_nexus_lun(f->a, 0, NULL)), NULL),
                     UINT64_MAX);
}

/* Read-only for one host only: its writes fail DATA PROTECT, WRITE PROTECTED (27h/00h) and
 * MODE SENSE shows it WP; the other host writes the same LUN and sees no WP. */
static void test_read_only_mapping(void **state)
{
    struct fx *f = *state;
    map(f, HOST_A, 1, 1, true);
    drain(f, f->a, 1);
    write_block(f, f->a, 1, 0xaa, CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    write_block(f, f->b, 5, 0xbb, GOOD);
    assert_int_equal(read_block(f, f->a, 1), 0xbb);
    uint8_t ms[16] = {0x1a, 0x08, 0x3f, 0, 64}; /* MODE SENSE(6), DBD, all pages */
    assert_int_equal(run(f, f->a, 1, ms, NULL, 0), GOOD);
    assert_int_equal(((const uint8_t *)f->t.iov[0].iov_base)[2] & 0x80, 0x80);
    assert_int_equal(run(f, f->b, 5, ms, NULL, 0), GOOD);
    assert_int_equal(((const uint8_t *)f->t.iov[0].iov_base)[2] & 0x80, 0);
    bool ro = false;
    assert_non_null(scsi_nexus_lun(f->a, 1, &ro));
    assert_true(ro);
    /* nor may it change what the other hosts see of the LU: MODE SELECT (here SWP=1, which
     * would write protect it for B) and PERSISTENT RESERVE OUT */
    uint8_t sel[16] = {0x15, 0x10, 0, 0, 16}; /* MODE SELECT(6), PF, 16 bytes */
    uint8_t page[16] = {0, 0, 0, 0, 0x0a, 10, 0x08 /* SWP */};
    assert_int_equal(run(f, f->a, 1, sel, page, sizeof(page)), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    assert_int_equal(prout(f, f->a, 1, 0x00 /* REGISTER */, 0, 0, 0xa1), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    write_block(f, f->b, 5, 0xbc, GOOD);
    assert_int_equal(prout(f, f->b, 5, 0x00, 0, 0, 0xb1), GOOD);
}

/* Nor may a read-only host take the SPC-2 reservation (RESERVE(6)/(10), SPC-2 §7.21, §7.22),
 * which would fence host B's writes out, or move or hold a removable medium, which every host
 * shares (START STOP UNIT with LOEJ=1, SBC-3 §5.20; PREVENT ALLOW MEDIUM REMOVAL, SPC-4
 * §6.13). START STOP UNIT without LOEJ changes nothing and stays GOOD. */
static void test_read_only_no_lu_state(void **state)
{
    struct fx *f = *state;
    struct scsi_lun_config c = {.lun = 3,
                                .bs = bs_open_spec("ram:1M", f->err, sizeof(f->err)),
                                .block_size = 512,
                                .removable = true};
    assert_int_equal(scsi_target_add_lun(&f->tg, &c, f->err, sizeof(f->err)), 0);
    map(f, HOST_A, 1, 1, true);
    map(f, HOST_A, 3, 3, true);
    map(f, HOST_B, 3, 3, false);
    /* the unit attentions the maps raised (REPORTED LUNS DATA HAS CHANGED on every LUN) */
    struct scsi_nexus *n[] = {f->a, f->a, f->b, f->b};
    const uint64_t nums[] = {1, 3, 3, 5};
    for (unsigned i = 0; i < 4; i++)
        drain(f, n[i], nums[i]);
    const uint8_t res6[16] = {0x16}, res10[16] = {0x56};
    assert_int_equal(run(f, f->a, 1, res6, NULL, 0), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    assert_int_equal(run(f, f->a, 1, res10, NULL, 0), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    write_block(f, f->b, 5, 0xbd, GOOD);
    const uint8_t eject[16] = {0x1b, 0, 0, 0, 0x02}, start[16] = {0x1b, 0, 0, 0, 0x01};
    const uint8_t prevent[16] = {0x1e, 0, 0, 0, 0x01};
    assert_int_equal(run(f, f->a, 3, eject, NULL, 0), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    assert_int_equal(run(f, f->a, 3, prevent, NULL, 0), CHECK);
    assert_sense(f, 0x7, 0x27, 0x00);
    assert_int_equal(run(f, f->a, 3, start, NULL, 0), GOOD);
    /* the medium is still in, and B may eject it */
    write_block(f, f->b, 3, 0xbe, GOOD);
    assert_int_equal(run(f, f->b, 3, eject, NULL, 0), GOOD);
}

/* Reservations are the logical unit's: host A reserves it through its number 1, host B meets
 * RESERVATION CONFLICT through 5; once A releases, B writes. */
static void test_reservation_shared_across_numbers(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->a, 1, 0x00 /* REGISTER */, 0, 0, 0xa1), GOOD);
    assert_int_equal(prout(f, f->a, 1, 0x01 /* RESERVE */, 0x1 /* WE */, 0xa1, 0), GOOD);
    write_block(f, f->b, 5, 0xbb, CONFLICT);
    write_block(f, f->a, 0, 0xcc, GOOD); /* A's other LUN: not reserved */
    assert_int_equal(prout(f, f->a, 1, 0x02 /* RELEASE */, 0x1, 0xa1, 0), GOOD);
    drain(f, f->b, 5); /* RESERVATIONS RELEASED is not reported to a non-registrant */
    write_block(f, f->b, 5, 0xbb, GOOD);
}

/* A unit attention the LUN raises reaches each host by the number it knows the LUN by. */
static void test_ua_by_any_number(void **state)
{
    struct fx *f = *state;
    assert_int_equal(
        scsi_lun_set_read_only(scsi_nexus_lun(f->b, 5, NULL), true, f->err, sizeof(f->err)), 0);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x2a, 0x01); /* MODE PARAMETERS CHANGED */
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x2a, 0x01);
}

/* A change of host A's map is REPORTED LUNS DATA HAS CHANGED for A, whichever number it sends
 * next, and nothing for B. */
static void test_luns_changed_only_that_host(void **state)
{
    struct fx *f = *state;
    map(f, HOST_A, 7, 0, false);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->a, 0, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x3f, 0x0e);
    drain(f, f->a, 7);
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->a, nums, 8), 3);
    assert_int_equal(nums[2], 7);
    /* mapping it again as it is changes nothing and tells nobody */
    map(f, HOST_A, 7, 0, false);
    assert_int_equal(run(f, f->a, 0, TUR, NULL, 0), GOOD);
    assert_int_equal(scsi_target_host_unmap(&f->tg, HOST_A, 7, f->err, sizeof(f->err)), 0);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x3f, 0x0e);
    assert_int_equal(run(f, f->a, 7, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    scsi_host_maps_free(scsi_target_host_retired_take(&f->tg));
}

/* A number mapped to a LUN the target does not have yet answers once the LUN is added. */
static void test_map_then_add_lun(void **state)
{
    struct fx *f = *state;
    map(f, HOST_B, 3, 9, false);
    drain(f, f->b, 5);
    assert_int_equal(run(f, f->b, 3, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->b, nums, 8), 1);
    add_lun(f, 9);
    assert_int_equal(report_luns(f, f->b, nums, 8), 2);
    assert_int_equal(nums[0], 3);
    assert_int_equal(nums[1], 5);
    drain(f, f->b, 3); /* a new LUN: POWER ON, RESET first */
    write_block(f, f->b, 3, 0x39, GOOD);
    assert_int_equal(run(f, f->a, 3, TUR, NULL, 0), CHECK); /* not A's */
    assert_sense(f, 0x5, 0x25, 0x00);
}

/* A LUN added or removed changes the inventory of the hosts whose map shows it, and of no other
 * (issue 29 item 3: 3Fh/0Eh on that host's nexuses only). LUN 2 is host A's alone (as 0). */
static void test_lun_removed_tells_its_hosts(void **state)
{
    struct fx *f = *state;
    scsi_task_release(&f->t);
    struct scsi_lun *lu = scsi_target_detach_lun(&f->tg, 2);
    assert_non_null(lu);
    scsi_lun_free(lu);
    scsi_target_luns_changed(&f->tg, 2, NULL);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x3f, 0x0e);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), GOOD);
}

/* A new LUN mapped for host B (as 3) tells B, by the LUNs it already had; host A, which does
 * not see it, and C, which has no entry, hear nothing. */
static void test_lun_added_tells_its_hosts(void **state)
{
    struct fx *f = *state;
    map(f, HOST_B, 3, 9, false);
    drain(f, f->b, 5);
    add_lun(f, 9);
    scsi_target_luns_changed(&f->tg, 9, scsi_nexus_lun(f->b, 3, NULL));
    assert_int_equal(run(f, f->a, 0, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x6, 0x3f, 0x0e);
    drain(f, f->b, 3); /* the new LUN itself: POWER ON, RESET */
    /* a LUN nobody maps tells nobody */
    add_lun(f, 4);
    scsi_target_luns_changed(&f->tg, 4, scsi_target_lun(&f->tg, 4));
    assert_int_equal(run(f, f->a, 0, TUR, NULL, 0), GOOD);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), GOOD);
}

/* Without entries every nexus sees every LUN, so every nexus is told, as before maps. */
static void test_lun_added_no_entries(void **state)
{
    struct fx *f = *state;
    drain(f, f->a, 0);
    drain(f, f->b, 0);
    drain(f, f->c, 0);
    add_lun(f, 3);
    scsi_target_luns_changed(&f->tg, 3, scsi_target_lun(&f->tg, 3));
    struct scsi_nexus *all[] = {f->a, f->b, f->c};
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(run(f, all[i], 0, TUR, NULL, 0), CHECK);
        assert_sense(f, 0x6, 0x3f, 0x0e);
    }
}

/* A detached LUN: every host number it had answers LOGICAL UNIT NOT SUPPORTED. */
static void test_detach_lun(void **state)
{
    struct fx *f = *state;
    scsi_task_release(&f->t);
    struct scsi_lun *lu = scsi_target_detach_lun(&f->tg, 1);
    assert_non_null(lu);
    assert_int_equal(scsi_lun_users(lu), 0);
    scsi_lun_free(lu);
    assert_int_equal(run(f, f->a, 1, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->a, nums, 8), 1);
    assert_int_equal(report_luns(f, f->b, nums, 8), 0);
}

/* Removing an entry leaves its initiator no LUN; the other host keeps its map. */
static void test_remove_entry(void **state)
{
    struct fx *f = *state;
    assert_int_equal(scsi_target_host_remove(&f->tg, HOST_A, f->err, sizeof(f->err)), 0);
    uint64_t nums[8];
    assert_int_equal(report_luns(f, f->a, nums, 8), 0);
    assert_int_equal(run(f, f->a, 0, TUR, NULL, 0), CHECK);
    assert_sense(f, 0x5, 0x25, 0x00);
    assert_int_equal(run(f, f->b, 5, TUR, NULL, 0), GOOD);
    assert_int_equal(scsi_target_host_remove(&f->tg, HOST_A, f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "no entry"));
    /* the last entry gone, the target shows every LUN to everyone again */
    assert_int_equal(scsi_target_host_remove(&f->tg, HOST_B, f->err, sizeof(f->err)), 0);
    assert_int_equal(report_luns(f, f->c, nums, 8), 3);
}

/* One WRITE of `bytes` counted into st as a thread that is no reactor counts (the shared
 * shard). */
static void count_write(struct iostats *st, uint64_t bytes)
{
    struct iostats_sample c = {.op = IOSTATS_WRITE, .bytes = bytes, .err_slot = -1};
    iostats_cmd(iostats_shard(st, -1), &c);
}

static uint64_t host_writes(struct fx *f, const char *host, uint64_t lun, int want_rc)
{
    struct iostats_values v;
    memset(&v, 0, sizeof(v));
    assert_int_equal(scsi_target_host_stats(&f->tg, host, lun, &v), want_rc);
    return v.bytes[IOSTATS_WRITE];
}

/* Per-entry counters (scsi.h): a command finds its entry's set for the LUN it ran on; the set
 * goes with the mapping or the entry, and a reactor that read it in its turn may still count
 * into it until the retired maps are freed (ASan checks there is no use after free). */
static void test_host_stats(void **state)
{
    struct fx *f = *state;
    drain(f, f->a, 0); /* host A's 0: LUN 2 */
    struct iostats *a2 = scsi_task_host_stats(&f->t);
    if (!IOSTATS_ENABLED) {
        assert_null(a2);
        return;
    }
    assert_non_null(a2);
    count_write(a2, 512);
    assert_int_equal(host_writes(f, HOST_A, 2, 0), 512);
    assert_int_equal(host_writes(f, HOST_B, 1, 0), 0);  /* the same LUN through another host */
    assert_int_equal(host_writes(f, HOST_A, 0, -1), 0); /* not mapped for A */
    drain(f, f->b, 5);
    struct iostats *b1 = scsi_task_host_stats(&f->t);
    assert_non_null(b1);
    assert_ptr_not_equal(b1, a2);
    assert_int_equal(run(f, f->c, 0, TUR, NULL, 0), CHECK); /* no entry: no LUN, no counters */
    assert_null(scsi_task_host_stats(&f->t));

    /* host A's 0 now names LUN 0: LUN 2's set is dropped, A's reactor may still hold it */
    map(f, HOST_A, 0, 0, false);
    assert_int_equal(host_writes(f, HOST_A, 2, -1), 0);
    assert_int_equal(host_writes(f, HOST_A, 0, 0), 0);
    count_write(a2, 512);
    /* the entry goes: its sets with it, after the turn */
    drain(f, f->a, 1);
    struct iostats *a1 = scsi_task_host_stats(&f->t);
    assert_non_null(a1);
    assert_int_equal(scsi_target_host_remove(&f->tg, HOST_A, f->err, sizeof(f->err)), 0);
    assert_int_equal(host_writes(f, HOST_A, 1, -1), 0);
    count_write(a1, 4096);
    scsi_host_maps_free(scsi_target_host_retired_take(&f->tg));
    assert_int_equal(host_writes(f, HOST_B, 1, 0), 0);
}

/* Without entries a command has no entry counters (and pays one load and a branch). */
static void test_no_entries_no_host_stats(void **state)
{
    struct fx *f = *state;
    drain(f, f->a, 0);
    assert_null(scsi_task_host_stats(&f->t));
}

/* What a configuration or linerate-ctl may ask for is bounded, with a reason. */
static void test_bounds(void **state)
{
    struct fx *f = *state;
    char name[64];
    assert_int_equal(scsi_target_host_add(&f->tg, HOST_A, f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "already has an entry"));
    for (unsigned i = 2; i < SCSI_HOST_ENTRIES_MAX; i++) {
        snprintf(name, sizeof(name), "iqn.2024-01.test:many%u", i);
        assert_int_equal(scsi_target_host_add(&f->tg, name, f->err, sizeof(f->err)), 0);
    }
    assert_int_equal(
        scsi_target_host_add(&f->tg, "iqn.2024-01.test:one-more", f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "4096 initiator entries"));
    assert_int_equal(
        scsi_target_host_map(&f->tg, HOST_A, SCSI_LUN_SLOTS, 0, false, f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "flat space"));
    /* one number per LUN and host */
    assert_int_equal(scsi_target_host_map(&f->tg, HOST_A, 4, 2, false, f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "already mapped as 0"));
    assert_int_equal(scsi_target_host_map(&f->tg, "iqn.2024-01.test:nobody", 0, 0, false, f->err,
                                          sizeof(f->err)),
                     -1);
    assert_int_equal(scsi_target_host_unmap(&f->tg, HOST_A, 9, f->err, sizeof(f->err)), -1);
    /* the highest number a host may use */
    map(f, HOST_A, SCSI_LUN_SLOTS - 1, 0, false);
    drain(f, f->a, SCSI_LUN_SLOTS - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_entries_as_before, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_report_luns_per_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmapped_not_supported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_lun_two_numbers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_no_lu_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reservation_shared_across_numbers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ua_by_any_number, setup, teardown),
        cmocka_unit_test_setup_teardown(test_luns_changed_only_that_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_then_add_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detach_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lun_removed_tells_its_hosts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lun_added_tells_its_hosts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lun_added_no_entries, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_remove_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_entries_no_host_stats, setup_plain, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
