/* Reservations driven through the SCSI core without sockets: PERSISTENT RESERVE IN/OUT service
 * actions, the conflict matrix of every reservation type for holder / registrant /
 * non-registrant, the unit attentions SPC-4 §5.13 asks for, the APTPL state file across a
 * "restart", and SPC-2 RESERVE/RELEASE with their interplay. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"
#include "iscsi/scsi_port.h"

#define TGT_NAME "iqn.2024-01.io.linerate:pr"
#define INI1 "iqn.2024-01.test:init1"
#define INI2 "iqn.2024-01.test:init2"
#define CONFLICT SCSI_STATUS_RESERVATION_CONFLICT
#define GOOD SCSI_STATUS_GOOD
#define CHECK SCSI_STATUS_CHECK_CONDITION

enum { WE = 1, EA = 3, WE_RO = 5, EA_RO = 6, WE_AR = 7, EA_AR = 8 };
enum { REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT_ABORT, REG_IGNORE, REG_MOVE };

struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1, *n2, *n3; /* n3 never registers */
    struct scsi_task t;
    char dir[64], path[128];
    struct scsi_nexus *aborted[4];
    unsigned naborted;
};

static void on_abort(struct scsi_target *tg, struct scsi_nexus *n, struct scsi_lun *lu,
                     struct scsi_join *join)
{
    struct fx *f = (struct fx *)((char *)tg - offsetof(struct fx, tg));
    (void)lu;
    (void)join;
    if (f->naborted < 4)
        f->aborted[f->naborted++] = n;
}

static int run(struct fx *f, struct scsi_nexus *n, const uint8_t *cdb, const void *out,
               size_t out_len)
{
    return sfx_run(&f->t, &f->tg, n, 0, cdb, out, out_len, 0, 0);
}

static const uint8_t *data(struct fx *f)
{
    return f->t.iov[0].iov_base;
}

static void assert_sense(const struct scsi_task *t, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(t, 0, key, asc, ascq);
}

/* PERSISTENT RESERVE OUT with a 24-byte parameter list (or pll bytes of it) */
static int prout_pll(struct fx *f, struct scsi_nexus *n, unsigned sa, unsigned type, uint64_t rk,
                     uint64_t sark, uint8_t flags, uint32_t pll)
{
    uint8_t cdb[16] = {0x5f, (uint8_t)sa, (uint8_t)type};
    put_be32(cdb + 5, pll);
    uint8_t p[64] = {0};
    put_be64(p, rk);
    put_be64(p + 8, sark);
    p[20] = flags;
    return run(f, n, cdb, p, pll);
}

static int prout(struct fx *f, struct scsi_nexus *n, unsigned sa, unsigned type, uint64_t rk,
                 uint64_t sark)
{
    return prout_pll(f, n, sa, type, rk, sark, 0, 24);
}

static int prin(struct fx *f, struct scsi_nexus *n, unsigned sa, uint16_t alloc)
{
    uint8_t cdb[16] = {0x5e, (uint8_t)sa};
    put_be16(cdb + 7, alloc);
    return run(f, n, cdb, NULL, 0);
}

static int rw(struct fx *f, struct scsi_nexus *n, bool write)
{
    uint8_t cdb[16] = {write ? 0x2a : 0x28, 0, 0, 0, 0, 1, 0, 0, 1};
    static uint8_t block[512];
    return write ? run(f, n, cdb, block, 512) : run(f, n, cdb, NULL, 0);
}

static int simple(struct fx *f, struct scsi_nexus *n, uint8_t opcode)
{
    uint8_t cdb[16] = {opcode};
    if (opcode == 0x12 || opcode == 0x1a)
        cdb[4] = 36; /* INQUIRY, MODE SENSE(6) allocation length */
    if (opcode == 0x1a)
        cdb[2] = 0x3f; /* all pages */
    return run(f, n, cdb, NULL, 0);
}

/* Takes the pending UA of n (SR_OK if none) with REQUEST SENSE-like semantics. */
static uint16_t take_ua(struct fx *f, struct scsi_nexus *n)
{
    uint8_t cdb[16] = {0x03, 0, 0, 0, 18};
    run(f, n, cdb, NULL, 0);
    return (uint16_t)(data(f)[12] << 8 | data(f)[13]);
}

static uint64_t read_keys(struct fx *f, struct scsi_nexus *n, uint32_t *gen, unsigned *count)
{
    assert_int_equal(prin(f, n, 0, 1024), GOOD);
    *gen = get_be32(data(f));
    *count = get_be32(data(f) + 4) / 8;
    return *count ? get_be64(data(f) + 8) : 0;
}

static void add_lun(struct fx *f)
{
    char err[256];
    struct bs *bs = bs_open_spec("ram:16M", err, sizeof(err));
    assert_non_null(bs);
    struct scsi_lun_config c = {.lun = 0, .bs = bs, .pr_state_path = f->path};
    assert_int_equal(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)), 0);
}

static void nexuses(struct fx *f)
{
    /* INI1, INI2 and iqn.2024-01.test:init3 */
    f->n1 = sfx_nexus_get(&f->tg, 1);
    f->n2 = sfx_nexus_get(&f->tg, 2);
    f->n3 = sfx_nexus_get(&f->tg, 3);
    assert_int_equal(take_ua(f, f->n1), 0x2900);
    assert_int_equal(take_ua(f, f->n2), 0x2900);
    assert_int_equal(take_ua(f, f->n3), 0x2900);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_pr.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/lun0.pr", f->dir);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    f->tg.abort_nexus_tasks = on_abort;
    add_lun(f);
    nexuses(f);
    *state = f;
    return 0;
}

static void target_down(struct fx *f)
{
    sfx_target_down(&f->tg, &f->t, f->n1, f->n2, f->n3);
}

/* A new target and LUN from the same state file, as after a restart of the daemon. */
static void restart(struct fx *f)
{
    target_down(f);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    add_lun(f);
    nexuses(f);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    target_down(f);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* --- REGISTER / REGISTER AND IGNORE EXISTING KEY / READ KEYS --- */

static void test_register(void **state)
{
    struct fx *f = *state;
    uint32_t gen;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(gen, 0);
    assert_int_equal(n, 0);

    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0x11), GOOD);
    assert_int_equal(read_keys(f, f->n2, &gen, &n), 0x11);
    assert_int_equal(gen, 1);
    assert_int_equal(n, 1);
    /* registered: the RESERVATION KEY must match (SPC-4 §5.13.7) */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0x12), CONFLICT);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0x99, 0x12), CONFLICT);
    /* not registered: a nonzero RESERVATION KEY conflicts; SARK 0 is a no-op */
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0x11, 0x22), CONFLICT);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 0), GOOD);
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(gen, 1);
    /* change key, then unregister */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0x11, 0x12), GOOD);
    assert_int_equal(read_keys(f, f->n1, &gen, &n), 0x12);
    assert_int_equal(gen, 2);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0x12, 0), GOOD);
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(n, 0);
    assert_int_equal(gen, 3);

    /* REGISTER AND IGNORE EXISTING KEY: the RESERVATION KEY does not matter */
    assert_int_equal(prout(f, f->n2, REG_IGNORE, 0, 0x77, 0x21), GOOD);
    assert_int_equal(prout(f, f->n2, REG_IGNORE, 0, 0x77, 0x22), GOOD);
    assert_int_equal(read_keys(f, f->n1, &gen, &n), 0x22);
    assert_int_equal(n, 1);
    assert_int_equal(prout(f, f->n2, REG_IGNORE, 0, 0, 0), GOOD);
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(n, 0);
}

/* SPC-4 §6.15.2: ADDITIONAL LENGTH is the whole list whatever the allocation length says. */
static void test_read_keys_truncate(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0x11), GOOD);
    assert_int_equal(prout_pll(f, f->n2, REGISTER, 0, 0, 0x22, 0x01, 24), GOOD); /* APTPL */
    assert_int_equal(prin(f, f->n1, 0, 8), GOOD);
    assert_int_equal(f->t.data_len, 8);
    assert_int_equal(get_be32(data(f) + 4), 16);
    assert_int_equal(prin(f, f->n1, 0, 12), GOOD);
    assert_int_equal(f->t.data_len, 12);
    assert_int_equal(prin(f, f->n1, 0, 0), GOOD);
    assert_int_equal(f->t.data_len, 0);
}

static void test_bad_cdbs_and_params(void **state)
{
    struct fx *f = *state;
    /* unknown service actions: INVALID FIELD IN CDB */
    prin(f, f->n1, 4, 100);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    prout(f, f->n1, 8, 0, 0, 1);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    /* PARAMETER LIST LENGTH must be 24 */
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0, 23);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0, 0);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0, 28);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    /* SPEC_I_PT and ALL_TG_PT are not offered */
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x08, 24);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x04, 24);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    uint32_t gen;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(n, 0);
    /* RESERVE: bad type, bad scope */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    prout(f, f->n1, RESERVE, 2, 1, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    prout(f, f->n1, RESERVE, 0x10 | WE, 1, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    /* RESERVE from a non-registrant, or with the wrong key */
    assert_int_equal(prout(f, f->n2, RESERVE, WE, 0, 0), CONFLICT);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 2, 0), CONFLICT);
}

static void test_report_capabilities(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prin(f, f->n1, 2, 100), GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(f->t.data_len, 8);
    assert_int_equal(get_be16(d), 8);
    assert_int_equal(d[2], 0x01);        /* CRH 0, SIP_C 0, ATP_C 0, PTPL_C 1 */
    assert_int_equal(d[3], 0x80 | 0x10); /* TMV, ALLOW COMMANDS 001b, PTPL_A 0 */
    assert_int_equal(d[4], 0xea);        /* WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX */
    assert_int_equal(d[5], 0x01);        /* EX_AC_AR */
    assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 5, 0x01, 24), GOOD);
    prin(f, f->n1, 2, 100);
    assert_int_equal(data(f)[3] & 0x01, 0x01); /* PTPL_A follows APTPL */
}

/* --- the conflict matrix (SPC-4 §5.13.1 table 66, SBC-3 table 13) --- */

struct access {
    uint8_t type;
    bool reg_read, reg_write, unreg_read, unreg_write;
};

static const struct access matrix[] = {
    {WE, true, false, true, false},   {EA, false, false, false, false},
    {WE_RO, true, true, true, false}, {EA_RO, true, true, false, false},
    {WE_AR, true, true, true, false}, {EA_AR, true, true, false, false},
};

static void test_conflict_matrix(void **state)
{
    struct fx *f = *state;
    for (size_t i = 0; i < sizeof(matrix) / sizeof(matrix[0]); i++) {
        const struct access *a = &matrix[i];
        assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0xa1), GOOD);
        assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 0xb2), GOOD);
        assert_int_equal(prout(f, f->n1, RESERVE, a->type, 0xa1, 0), GOOD);
        /* holder */
        assert_int_equal(rw(f, f->n1, false), GOOD);
        assert_int_equal(rw(f, f->n1, true), GOOD);
        /* registrant, not holder (except all-registrants, where it holds too) */
        assert_int_equal(rw(f, f->n2, false), a->reg_read ? GOOD : CONFLICT);
        assert_int_equal(rw(f, f->n2, true), a->reg_write ? GOOD : CONFLICT);
        /* non-registrant */
        assert_int_equal(rw(f, f->n3, false), a->unreg_read ? GOOD : CONFLICT);
        assert_int_equal(rw(f, f->n3, true), a->unreg_write ? GOOD : CONFLICT);
        /* allowed for everyone: INQUIRY, TUR, READ CAPACITY, PERSISTENT RESERVE IN */
        assert_int_equal(simple(f, f->n3, 0x12), GOOD);
        assert_int_equal(simple(f, f->n3, 0x00), GOOD);
        uint8_t rc10[16] = {0x25};
        assert_int_equal(run(f, f->n3, rc10, NULL, 0), GOOD);
        assert_int_equal(prin(f, f->n3, 1, 100), GOOD);
        /* MODE SENSE reads: allowed under Write Exclusive; SYNCHRONIZE CACHE conflicts */
        assert_int_equal(simple(f, f->n3, 0x1a), a->unreg_read ? GOOD : CONFLICT);
        assert_int_equal(simple(f, f->n3, 0x35), CONFLICT);
        /* START STOP UNIT: start passes, stop does not */
        uint8_t ssu[16] = {0x1b, 0, 0, 0, 0x01};
        assert_int_equal(run(f, f->n3, ssu, NULL, 0), GOOD);
        ssu[4] = 0;
        assert_int_equal(run(f, f->n3, ssu, NULL, 0), CONFLICT);
        /* the unregistered n2 */
        assert_int_equal(prout(f, f->n2, REGISTER, 0, 0xb2, 0), GOOD);
        assert_int_equal(rw(f, f->n2, false), a->unreg_read ? GOOD : CONFLICT);
        assert_int_equal(rw(f, f->n2, true), a->unreg_write ? GOOD : CONFLICT);
        /* READ RESERVATION: key 0 for all-registrants types */
        assert_int_equal(prin(f, f->n2, 1, 100), GOOD);
        assert_int_equal(get_be32(data(f) + 4), 16);
        bool ar = a->type == WE_AR || a->type == EA_AR;
        assert_int_equal(get_be64(data(f) + 8), ar ? 0 : 0xa1);
        assert_int_equal(data(f)[21], a->type);
        /* release, and nothing is blocked any more */
        assert_int_equal(prout(f, f->n1, RELEASE, a->type, 0xa1, 0), GOOD);
        assert_int_equal(rw(f, f->n3, true), GOOD);
        assert_int_equal(prout(f, f->n1, REGISTER, 0, 0xa1, 0), GOOD);
        take_ua(f, f->n2);
        take_ua(f, f->n3);
    }
}

/* Registrations alone block nobody. */
static void test_registrations_alone(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(rw(f, f->n3, true), GOOD);
    assert_int_equal(rw(f, f->n3, false), GOOD);
}

/* --- RESERVE / RELEASE rules --- */

static void test_reserve_release(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    uint32_t gen;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(prout(f, f->n1, RESERVE, WE_RO, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE_RO, 1, 0), GOOD);  /* again: fine */
    assert_int_equal(prout(f, f->n1, RESERVE, EA, 1, 0), CONFLICT); /* another type */
    assert_int_equal(prout(f, f->n2, RESERVE, WE_RO, 2, 0), CONFLICT);
    uint32_t gen2;
    read_keys(f, f->n1, &gen2, &n);
    assert_int_equal(gen2, gen); /* RESERVE does not bump PRGENERATION */
    /* RELEASE by a non-holder registrant: no-op */
    assert_int_equal(prout(f, f->n2, RELEASE, WE_RO, 2, 0), GOOD);
    assert_int_equal(prin(f, f->n1, 1, 100), GOOD);
    assert_int_equal(get_be32(data(f) + 4), 16);
    /* RELEASE with the wrong type: INVALID RELEASE OF PERSISTENT RESERVATION */
    prout(f, f->n1, RELEASE, WE, 1, 0);
    assert_sense(&f->t, 0x5, 0x26, 0x04);
    /* RELEASE by a non-registrant: conflict */
    assert_int_equal(prout(f, f->n3, RELEASE, WE_RO, 0, 0), CONFLICT);
    /* releasing a registrants-only reservation: RESERVATIONS RELEASED to the others */
    assert_int_equal(prout(f, f->n1, RELEASE, WE_RO, 1, 0), GOOD);
    assert_int_equal(take_ua(f, f->n2), 0x2a04);
    assert_int_equal(take_ua(f, f->n1), 0);
    assert_int_equal(take_ua(f, f->n3), 0);
    /* a Write Exclusive release tells nobody */
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n1, RELEASE, WE, 1, 0), GOOD);
    assert_int_equal(take_ua(f, f->n2), 0);
    /* nothing reserved: RELEASE is a no-op */
    assert_int_equal(prout(f, f->n1, RELEASE, WE, 1, 0), GOOD);
}

/* Unregistering the holder releases the reservation; for all-registrants types only the last
 * registrant leaving does. */
static void test_unregister_releases(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, EA_RO, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 1, 0), GOOD);
    assert_int_equal(take_ua(f, f->n2), 0x2a04);
    assert_int_equal(prin(f, f->n2, 1, 100), GOOD);
    assert_int_equal(get_be32(data(f) + 4), 0);

    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE_AR, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 1, 0), GOOD);
    assert_int_equal(prin(f, f->n2, 1, 100), GOOD);
    assert_int_equal(get_be32(data(f) + 4), 16); /* n2 still holds it */
    assert_int_equal(rw(f, f->n1, true), CONFLICT);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 2, 0), GOOD);
    prin(f, f->n2, 1, 100);
    assert_int_equal(get_be32(data(f) + 4), 0);
    assert_int_equal(rw(f, f->n1, true), GOOD);
}

/* --- CLEAR, PREEMPT, PREEMPT AND ABORT --- */

static void test_clear(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, EA, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n3, CLEAR, 0, 0, 0), CONFLICT);
    assert_int_equal(prout(f, f->n2, CLEAR, 0, 3, 0), CONFLICT);
    uint32_t gen, gen2;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(prout(f, f->n2, CLEAR, 0, 2, 0), GOOD);
    assert_int_equal(take_ua(f, f->n1), 0x2a03);
    assert_int_equal(take_ua(f, f->n2), 0);
    read_keys(f, f->n1, &gen2, &n);
    assert_int_equal(n, 0);
    assert_int_equal(gen2, gen + 1);
    assert_int_equal(rw(f, f->n3, true), GOOD);
}

/* libiscsi ProutPreempt.RemoveRegistration: no reservation, SARK names another key. */
static void test_preempt_registration(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    uint32_t gen, gen2;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(n, 2);
    assert_int_equal(prout(f, f->n2, PREEMPT, EA, 2, 9), CONFLICT); /* no such key */
    prout(f, f->n2, PREEMPT, EA, 2, 0);                             /* SARK 0, no reservation */
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    assert_int_equal(prout(f, f->n2, PREEMPT, EA, 2, 1), GOOD);
    assert_int_equal(read_keys(f, f->n2, &gen2, &n), 2);
    assert_int_equal(n, 1);
    assert_int_equal(gen2, gen + 1);
    assert_int_equal(take_ua(f, f->n1), 0x2a05);
    assert_int_equal(take_ua(f, f->n2), 0);
    prin(f, f->n2, 1, 100);
    assert_int_equal(get_be32(data(f) + 4), 0); /* no reservation made */
}

static void test_preempt_reservation(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    assert_int_equal(prout(f, f->n3, REGISTER, 0, 0, 3), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    assert_int_equal(prout(f, f->n2, PREEMPT_ABORT, EA, 2, 1), GOOD);
    /* n1's registration and reservation are gone, n2 holds Exclusive Access */
    assert_int_equal(prin(f, f->n2, 1, 100), GOOD);
    assert_int_equal(get_be64(data(f) + 8), 2);
    assert_int_equal(data(f)[21], EA);
    assert_int_equal(take_ua(f, f->n1), 0x2a05);
    assert_int_equal(take_ua(f, f->n3), 0x2a04); /* the type changed */
    assert_int_equal(take_ua(f, f->n2), 0);
    assert_int_equal(f->naborted, 1);
    assert_ptr_equal(f->aborted[0], f->n1);
    assert_int_equal(rw(f, f->n1, false), CONFLICT);
    assert_int_equal(rw(f, f->n3, false), CONFLICT);
    assert_int_equal(rw(f, f->n2, true), GOOD);
    /* n1 is no longer registered: PREEMPT from it conflicts */
    assert_int_equal(prout(f, f->n1, PREEMPT, WE, 1, 2), CONFLICT);
    /* plain PREEMPT aborts nothing */
    assert_int_equal(prout(f, f->n3, PREEMPT, WE, 3, 2), GOOD);
    assert_int_equal(f->naborted, 1);
    assert_int_equal(prin(f, f->n3, 1, 100), GOOD);
    assert_int_equal(get_be64(data(f) + 8), 3);
}

/* --- REGISTER AND MOVE, READ FULL STATUS --- */

static uint32_t put_tid(uint8_t *p, const char *port)
{
    size_t n = (strlen(port) + 1 + 3) & ~(size_t)3;
    memset(p, 0, 4 + n);
    p[0] = 0x45;
    put_be16(p + 2, (uint16_t)n);
    memcpy(p + 4, port, strlen(port));
    return (uint32_t)(4 + n);
}

static int register_move(struct fx *f, struct scsi_nexus *n, unsigned type, uint64_t rk,
                         uint64_t sark, bool unreg, const char *dest, uint16_t relport)
{
    uint8_t p[24 + 300] = {0};
    put_be64(p, rk);
    put_be64(p + 8, sark);
    p[17] = unreg ? 0x02 : 0;
    put_be16(p + 18, relport);
    uint32_t tl = put_tid(p + 24, dest);
    put_be32(p + 20, tl);
    uint8_t cdb[16] = {0x5f, REG_MOVE, (uint8_t)type};
    put_be32(cdb + 5, 24 + tl);
    return run(f, n, cdb, p, 24 + tl);
}

static void test_register_move_and_full_status(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    /* not the holder: conflict */
    assert_int_equal(register_move(f, f->n1, WE, 1, 5, false, f->n2->initiator_port, 1), CONFLICT);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    /* bad relative target port, move to itself, SARK 0 */
    register_move(f, f->n1, WE, 1, 5, false, f->n2->initiator_port, 7);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    register_move(f, f->n1, WE, 1, 5, false, f->n1->initiator_port, 1);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    register_move(f, f->n1, WE, 1, 0, false, f->n2->initiator_port, 1);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    /* upper-case ISID digits name the same port */
    char up[256];
    snprintf(up, sizeof(up), "%s", f->n2->initiator_port);
    for (char *s = strstr(up, ",i,0x") + 5; *s; s++)
        if (*s >= 'a' && *s <= 'f')
            *s = (char)(*s - 'a' + 'A');
    assert_int_equal(register_move(f, f->n1, EA, 1, 5, true, up, 1), GOOD);

    /* READ FULL STATUS: n2 alone, holder of EA with key 5, its TransportID */
    assert_int_equal(prin(f, f->n2, 3, 1000), GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(get_be32(d), 2); /* REGISTER, REGISTER AND MOVE */
    const char *port = f->n2->initiator_port;
    uint32_t tidlen = 4 + (uint32_t)((strlen(port) + 1 + 3) & ~(size_t)3);
    assert_int_equal(get_be32(d + 4), 24 + tidlen);
    const uint8_t *r = d + 8;
    assert_int_equal(get_be64(r), 5);
    assert_int_equal(r[12], 0x01); /* R_HOLDER */
    assert_int_equal(r[13], EA);
    assert_int_equal(get_be16(r + 18), 1);
    assert_int_equal(get_be32(r + 20), tidlen);
    assert_int_equal(r[24], 0x45);
    assert_int_equal(get_be16(r + 26), tidlen - 4);
    assert_string_equal((const char *)r + 28, port);
    assert_int_equal(rw(f, f->n1, false), CONFLICT);
    assert_int_equal(rw(f, f->n2, true), GOOD);
}

/* --- APTPL: the state file across a restart --- */

static void test_aptpl_restart(void **state)
{
    struct fx *f = *state;
    /* the APTPL bit of the latest REGISTER governs the whole LU (SPC-4 §5.13.5) */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0xabc), GOOD);
    assert_int_equal(access(f->path, F_OK), -1);
    assert_int_equal(prout_pll(f, f->n2, REGISTER, 0, 0, 0xdef, 0x01, 24), GOOD);
    assert_int_equal(access(f->path, F_OK), 0);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 0xabc, 0), GOOD);
    assert_int_equal(access(f->path, F_OK), 0);
    uint32_t gen;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);

    /* "restart": a new target and LUN from the same state file */
    restart(f);
    uint32_t gen2;
    read_keys(f, f->n3, &gen2, &n);
    assert_int_equal(n, 2);
    assert_int_equal(gen2, gen);
    assert_int_equal(prin(f, f->n3, 1, 100), GOOD);
    assert_int_equal(get_be64(data(f) + 8), 0xabc);
    assert_int_equal(data(f)[21], WE);
    assert_int_equal(rw(f, f->n3, true), CONFLICT);
    assert_int_equal(rw(f, f->n1, true), GOOD);
    prin(f, f->n1, 2, 8);
    assert_int_equal(data(f)[3] & 0x01, 0x01); /* PTPL_A */

    /* APTPL=0 on the next REGISTER ends it: the file goes */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0xabc, 0xabd), GOOD);
    assert_int_equal(access(f->path, F_OK), -1);
    restart(f);
    read_keys(f, f->n3, &gen2, &n);
    assert_int_equal(n, 0);
}

/* A target (down on entry and on return) refuses a LUN whose state file holds text. */
static void assert_file_refused(struct fx *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    fputs(text, fp);
    fclose(fp);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    char err[256];
    struct bs *bs = bs_open_spec("ram:1M", err, sizeof(err));
    struct scsi_lun_config c = {.lun = 0, .bs = bs, .pr_state_path = f->path};
    assert_true(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "lun0.pr"));
    bs_close(bs);
    scsi_target_destroy(&f->tg);
}

static void test_aptpl_corrupt_file(void **state)
{
    struct fx *f = *state;
    target_down(f);
    assert_file_refused(f, "something else\n");
    unlink(f->path);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    add_lun(f);
    nexuses(f);
}

/* A change made while APTPL is in force (or that starts or ends it) that cannot be saved is
 * refused, HARDWARE ERROR 44h/00h INTERNAL TARGET FAILURE, and changes nothing: no key, no
 * reservation, no generation, no unit attention, PTPL_A as it was, the file as it was. */
static void test_aptpl_save_fails(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 0xabc, 0x01, 24), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 0xabc, 0), GOOD);
    uint32_t gen, gen2;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);
    assert_int_equal(n, 1);

    /* the state directory becomes a regular file: even root cannot write below it */
    char moved[160];
    snprintf(moved, sizeof(moved), "%s.moved", f->dir);
    assert_int_equal(rename(f->dir, moved), 0);
    FILE *fp = fopen(f->dir, "w");
    assert_non_null(fp);
    fclose(fp);

    /* REGISTER with APTPL=1 and with APTPL=0 (that would end APTPL: the file would go) by a
     * new nexus and by the holder, unregistering, RELEASE, CLEAR, PREEMPT AND ABORT */
    assert_int_equal(prout_pll(f, f->n2, REGISTER, 0, 0, 0xdef, 0x01, 24), CHECK);
    assert_sense(&f->t, 0x4, 0x44, 0x00);
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 0xdef), CHECK);
    assert_sense(&f->t, 0x4, 0x44, 0x00);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0xabc, 0xabd), CHECK);
    assert_sense(&f->t, 0x4, 0x44, 0x00);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0xabc, 0), CHECK); /* unregister */
    assert_int_equal(prout(f, f->n1, RELEASE, WE, 0xabc, 0), CHECK);
    assert_int_equal(prout(f, f->n1, CLEAR, 0, 0xabc, 0), CHECK);
    assert_int_equal(prout(f, f->n1, PREEMPT_ABORT, EA, 0xabc, 0xabc), CHECK);
    assert_sense(&f->t, 0x4, 0x44, 0x00);
    assert_int_equal(f->naborted, 0);

    read_keys(f, f->n3, &gen2, &n);
    assert_int_equal(n, 1);
    assert_int_equal(gen2, gen);
    assert_int_equal(get_be64(data(f) + 8), 0xabc);
    assert_int_equal(prin(f, f->n3, 1, 100), GOOD); /* READ RESERVATION */
    assert_int_equal(get_be32(data(f) + 4), 16);
    assert_int_equal(get_be64(data(f) + 8), 0xabc);
    assert_int_equal(data(f)[21], WE);
    assert_int_equal(rw(f, f->n2, true), CONFLICT);
    prin(f, f->n1, 2, 8);
    assert_int_equal(data(f)[3] & 0x01, 0x01); /* PTPL_A: still in force */
    assert_int_equal(take_ua(f, f->n1), 0);
    assert_int_equal(take_ua(f, f->n2), 0);

    /* the directory back: the next change is saved, and a "restart" finds what was reported */
    assert_int_equal(unlink(f->dir), 0);
    assert_int_equal(rename(moved, f->dir), 0);
    assert_int_equal(prout_pll(f, f->n2, REGISTER, 0, 0, 0xdef, 0x01, 24), GOOD);
    read_keys(f, f->n3, &gen2, &n);
    assert_int_equal(gen2, gen + 1);
    restart(f);
    read_keys(f, f->n3, &gen2, &n);
    assert_int_equal(n, 2);
    assert_int_equal(gen2, gen + 1);
    assert_int_equal(prin(f, f->n3, 1, 100), GOOD);
    assert_int_equal(get_be64(data(f) + 8), 0xabc);
    assert_int_equal(data(f)[21], WE);
}

/* Without a state path APTPL is refused (PTPL_C 0). */
static void test_aptpl_unavailable(void **state)
{
    struct fx *f = *state;
    target_down(f);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    char err[256];
    struct scsi_lun_config c = {.lun = 0, .bs = bs_open_spec("ram:1M", err, sizeof(err))};
    assert_int_equal(scsi_target_add_lun(&f->tg, &c, err, sizeof(err)), 0);
    nexuses(f);
    prin(f, f->n1, 2, 8);
    assert_int_equal(data(f)[2] & 0x01, 0);
    prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x01, 24);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
}

/* --- SPC-2 RESERVE / RELEASE --- */

static void test_reserve6(void **state)
{
    struct fx *f = *state;
    assert_int_equal(simple(f, f->n1, 0x16), GOOD);
    assert_int_equal(simple(f, f->n1, 0x16), GOOD); /* again by the holder */
    assert_int_equal(simple(f, f->n2, 0x16), CONFLICT);
    /* others: everything conflicts but INQUIRY, REPORT LUNS, REQUEST SENSE and RELEASE */
    assert_int_equal(rw(f, f->n2, false), CONFLICT);
    assert_int_equal(simple(f, f->n2, 0x1a), CONFLICT); /* MODE SENSE */
    assert_int_equal(simple(f, f->n2, 0x00), CONFLICT); /* TEST UNIT READY */
    assert_int_equal(simple(f, f->n2, 0x12), GOOD);
    assert_int_equal(take_ua(f, f->n2), 0);
    assert_int_equal(simple(f, f->n2, 0x17), GOOD); /* a no-op */
    assert_int_equal(rw(f, f->n2, false), CONFLICT);
    /* the holder can do anything but PERSISTENT RESERVE IN/OUT */
    assert_int_equal(rw(f, f->n1, true), GOOD);
    assert_int_equal(prin(f, f->n1, 0, 100), CONFLICT);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), CONFLICT);
    assert_int_equal(simple(f, f->n1, 0x17), GOOD);
    assert_int_equal(rw(f, f->n2, true), GOOD);
    /* RESERVE(10)/RELEASE(10) likewise */
    uint8_t r10[16] = {0x56};
    assert_int_equal(run(f, f->n2, r10, NULL, 0), GOOD);
    assert_int_equal(rw(f, f->n1, false), CONFLICT);
    r10[0] = 0x57;
    assert_int_equal(run(f, f->n2, r10, NULL, 0), GOOD);
    assert_int_equal(rw(f, f->n1, false), GOOD);
    /* third-party reservations are not offered */
    r10[0] = 0x56;
    r10[1] = 0x10;
    run(f, f->n2, r10, NULL, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
}

/* SPC-4 §5.13.3: with anything registered RESERVE and RELEASE conflict for everyone. */
static void test_reserve6_vs_registrations(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 1), GOOD);
    assert_int_equal(simple(f, f->n1, 0x16), CONFLICT);
    assert_int_equal(simple(f, f->n2, 0x16), CONFLICT);
    assert_int_equal(simple(f, f->n2, 0x17), CONFLICT);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    assert_int_equal(simple(f, f->n1, 0x16), CONFLICT);
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 1, 0), GOOD);
    assert_int_equal(simple(f, f->n2, 0x16), GOOD);
}

/* Released by LUN reset, target reset and I_T nexus loss; persistent ones are not. */
static void test_reserve6_released(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    assert_int_equal(simple(f, f->n1, 0x16), GOOD);
    scsi_lun_reset(lu, f->n2);
    take_ua(f, f->n1);
    take_ua(f, f->n2);
    assert_int_equal(rw(f, f->n2, true), GOOD);

    assert_int_equal(simple(f, f->n1, 0x16), GOOD);
    scsi_target_reset(&f->tg, f->n2, false);
    take_ua(f, f->n1);
    take_ua(f, f->n2);
    assert_int_equal(rw(f, f->n2, true), GOOD);

    assert_int_equal(simple(f, f->n1, 0x16), GOOD);
    scsi_target_reset(&f->tg, f->n2, true);
    take_ua(f, f->n1);
    take_ua(f, f->n2);
    assert_int_equal(rw(f, f->n2, true), GOOD);

    /* nexus loss: the last session of n1 ends; n1 logs in again later */
    assert_int_equal(simple(f, f->n1, 0x16), GOOD);
    assert_int_equal(simple(f, f->n2, 0x16), CONFLICT);
    scsi_nexus_put(f->n1);
    assert_int_equal(simple(f, f->n2, 0x16), GOOD);
    const uint8_t i1[6] = {0x80, 0, 0, 0, 0, 1};
    f->n1 = scsi_nexus_get(&f->tg, &iscsi_scsi_transport, INI1, i1);
    assert_int_equal(simple(f, f->n2, 0x17), GOOD);

    /* persistent reservations survive all of it */
    assert_int_equal(prout(f, f->n2, REGISTER, 0, 0, 2), GOOD);
    assert_int_equal(prout(f, f->n2, RESERVE, EA, 2, 0), GOOD);
    scsi_lun_reset(lu, f->n1);
    scsi_target_reset(&f->tg, f->n1, true);
    scsi_nexus_put(f->n2);
    scsi_nexus_lost(f->n2);
    const uint8_t i2[6] = {0x80, 0, 0, 0, 0, 2};
    f->n2 = scsi_nexus_get(&f->tg, &iscsi_scsi_transport, INI2, i2);
    take_ua(f, f->n1);
    assert_int_equal(rw(f, f->n1, false), CONFLICT);
}

/* --- TransportIDs and the state text: what an initiator names cannot break the file --- */

/* REGISTER AND MOVE with a raw TransportID of tl bytes (PARAMETER DATA LENGTH tl). */
static int register_move_raw(struct fx *f, const uint8_t *tid, uint32_t tl)
{
    uint8_t p[24 + 600] = {0};
    put_be64(p, 1);
    put_be64(p + 8, 5);
    p[17] = 0x01; /* APTPL */
    put_be16(p + 18, 1);
    put_be32(p + 20, tl);
    memcpy(p + 24, tid, tl);
    uint8_t cdb[16] = {0x5f, REG_MOVE, WE};
    put_be32(cdb + 5, 24 + tl);
    return run(f, f->n1, cdb, p, 24 + tl);
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    char *text = NULL;
    size_t cap = 0;
    if (getdelim(&text, &cap, '\0', fp) < 0) {
        free(text);
        text = NULL;
    }
    fclose(fp);
    return text;
}

/* The file and the state as the initiators see them are what they were. */
static void assert_unchanged(struct fx *f, const char *file, uint32_t gen)
{
    char *now = slurp(f->path);
    assert_non_null(now);
    assert_string_equal(now, file);
    free(now);
    uint32_t g;
    unsigned n;
    assert_int_equal(read_keys(f, f->n3, &g, &n), 1);
    assert_int_equal(n, 1);
    assert_int_equal(g, gen);
    assert_int_equal(rw(f, f->n1, true), GOOD);
    assert_int_equal(rw(f, f->n2, true), CONFLICT);
}

static void test_register_move_bad_tids(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x01, 24), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    char *file = slurp(f->path);
    assert_non_null(file);
    uint32_t gen;
    unsigned n;
    read_keys(f, f->n1, &gen, &n);

    char longname[300];
    snprintf(longname, sizeof(longname), "iqn.2024-01.test:%0*d,i,0x800000000002", 224 - 17, 0);
    const char *names[] = {
        /* a forged registration and a phantom holder after a restart */
        "iqn.2024-01.test:a\nreservation 3 -\nreg 00000000000000ff iqn.2024-01.evil,i,"
        "0x000000000001",
        "iqn.2024-01.test:a b,i,0x800000000002",
        "iqn.2024-01.test:a\tb,i,0x800000000002",
        "iqn.2024-01.test:a%0a,i,0x800000000002",
        longname,
        "iqn.2024-01.test:init2,i,0x80000000000g",
        "iqn.2024-01.test:init2,i,0x8000000000022",
        "iqn.2024-01.test:init2,i,0x80000000002",
        "iqn.2024-01.test:init2,I,0x800000000002",
        "iqn.2024-01.test:init2",
        "iqn.2024-01.test:init2,i,0x800000000002,i,0x800000000002",
        "example.com:init2,i,0x800000000002",
        "iqn.24-01.test:init2,i,0x800000000002",
        "eui.0123,i,0x800000000002",
        "naa.0123456789abcdefg,i,0x800000000002",
        ",i,0x800000000002",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        uint8_t tid[600];
        uint32_t tl = put_tid(tid, names[i]);
        assert_int_equal(register_move_raw(f, tid, tl), CHECK);
        assert_sense(&f->t, 0x5, 0x26, 0x00);
        assert_unchanged(f, file, gen);
    }

    /* the TransportID's own fields around a name that would do */
    const char *good = "iqn.2024-01.test:init2,i,0x800000000002";
    struct {
        uint8_t byte0;
        int addlen_delta; /* to ADDITIONAL LENGTH */
        int tl_delta;     /* to TRANSPORTID PARAMETER DATA LENGTH */
        int pad;          /* a non-NUL byte after the name's NUL, at this offset from it */
        unsigned field;   /* the parameter list byte the field pointer names */
    } bad[] = {
        {0x85, 0, 0, 0, 24},  /* FORMAT CODE 10b */
        {0xc5, 0, 0, 0, 24},  /* FORMAT CODE 11b */
        {0x05, 0, 0, 0, 24},  /* 00b names a device, not a port */
        {0x44, 0, 0, 0, 24},  /* not iSCSI */
        {0x65, 0, 0, 0, 24},  /* reserved bits */
        {0x45, -1, 0, 0, 26}, /* not a multiple of four */
        {0x45, 4, 0, 0, 26},  /* beyond the TransportID */
        {0x45, 0, -4, 0, 26}, /* PARAMETER DATA LENGTH cuts it short */
        {0x45, 4, 4, 1, 28},  /* padding that is not NUL */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t tid[600] = {0};
        uint32_t tl = put_tid(tid, good);
        tid[0] = bad[i].byte0;
        put_be16(tid + 2, (uint16_t)(get_be16(tid + 2) + bad[i].addlen_delta));
        if (bad[i].pad)
            tid[(int)tl + bad[i].tl_delta - 1] = 'x';
        assert_int_equal(register_move_raw(f, tid, (uint32_t)((int)tl + bad[i].tl_delta)), CHECK);
        assert_sense(&f->t, 0x5, 0x26, 0x00);
        sfx_assert_field_pointer(&f->t, 0x80, bad[i].field);
        assert_unchanged(f, file, gen);
    }
    /* ADDITIONAL LENGTH below 20 (a short name: "naa." and 16 digits would fit 20) */
    uint8_t tid[64] = {0x45, 0, 0, 16};
    memcpy(tid + 4, "eui.0123,i,0x8", 14);
    assert_int_equal(register_move_raw(f, tid, 20), CHECK);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    assert_unchanged(f, file, gen);

    /* a restart finds the state the initiators were told of */
    restart(f);
    assert_unchanged(f, file, gen);
    free(file);
}

/* Every form of iSCSI name RFC 7143 §4.2.7 has survives the state file as it was moved to. */
static void test_state_round_trip_names(void **state)
{
    struct fx *f = *state;
    const char *names[] = {
        "iqn.2024-01.test:init2,i,0x800000000002",
        "iqn.1994-05.com.example.host-1,i,0xABCDEF012345",
        "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309,i,0x400000000001",
        "eui.02004567A425678D,i,0x800000000002",
        "naa.52004567BA64678D,i,0x800000000002",
        "naa.52004567BA64678D0123456789abcdef,i,0x800000000002",
    };
    assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x01, 24), GOOD);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
        uint8_t tid[300];
        uint32_t tl = put_tid(tid, names[i]);
        assert_int_equal(register_move_raw(f, tid, tl), GOOD);
        restart(f);
        /* READ FULL STATUS: n1 and the new holder, named as it was (ISID in lower case) */
        assert_int_equal(prin(f, f->n3, 3, 4000), GOOD);
        char want[256];
        snprintf(want, sizeof(want), "%s", names[i]);
        for (char *s = strstr(want, ",i,0x") + 5; *s; s++)
            if (*s >= 'A' && *s <= 'F')
                *s = (char)(*s - 'A' + 'a');
        const uint8_t *d = data(f);
        bool found = false;
        for (uint32_t off = 8; off < 8 + get_be32(d + 4);) {
            const uint8_t *r = d + off;
            if (r[12] & 0x01) {
                assert_string_equal((const char *)r + 28, want);
                found = true;
            }
            off += 24 + get_be32(r + 20);
        }
        assert_true(found);
        /* CLEAR through n1 (still registered) and again */
        assert_int_equal(prout(f, f->n1, CLEAR, 0, 1, 0), GOOD);
        assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x01, 24), GOOD);
    }
}

/* The target (TPGT 1) up again over a state file holding text. */
static void start_with_file(struct fx *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    fputs(text, fp);
    fclose(fp);
    assert_int_equal(scsi_target_init(&f->tg, TGT_NAME, 1), 0);
    add_lun(f);
    nexuses(f);
}

/* A state file whose lines do not frame exactly is refused (the LUN does not come up): a
 * field with trailing text, a bad or NUL escape, a raw control character. */
static void test_state_file_strict(void **state)
{
    struct fx *f = *state;
    const char *texts[] = {
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 iqn.2024-01.test:a,i,0x000000000001 "
        "x\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 iqn.2024-01.test:a%0,i,0x000000000001\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 "
        "iqn.2024-01.test:a%00,i,0x000000000001\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 "
        "iqn.2024-01.test:a%zz,i,0x000000000001\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 iqn.2024-01.test:a\r,i,0x000000000001\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001  iqn.2024-01.test:a,i,0x000000000001\n",
        "linerate-pr 1\ngeneration 1x\nreg 0000000000000001 iqn.2024-01.test:a,i,0x000000000001\n",
        /* the relative target port: 1 to 65535, in decimal */
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 iqn.2024-01.test:a,i,0x000000000001 0\n",
        "linerate-pr 1\ngeneration 1\nreg 0000000000000001 iqn.2024-01.test:a,i,0x000000000001 "
        "65536\n",
        "linerate-pr 1\ngeneration 1\nreservation 3 - 1\n"
        "reg 0000000000000001 iqn.2024-01.test:a,i,0x000000000001 1\n",
    };
    target_down(f);
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        assert_file_refused(f, texts[i]);
    /* a file of the format before escaping (and before target ports), with valid names, loads
     * as it did */
    start_with_file(f, "linerate-pr 1\ngeneration 7\n"
                       "reservation 1 iqn.2024-01.test:init1,i,0x800000000001\n"
                       "reg 0000000000000abc iqn.2024-01.test:init1,i,0x800000000001\n"
                       "reg 0000000000000def eui.02004567A425678D,i,0x400000000001\n");
    uint32_t gen;
    unsigned n;
    assert_int_equal(read_keys(f, f->n3, &gen, &n), 0xabc);
    assert_int_equal(gen, 7);
    assert_int_equal(n, 2);
    assert_int_equal(rw(f, f->n1, true), GOOD);
    assert_int_equal(rw(f, f->n2, true), CONFLICT);
    /* those registrations were through this target port: written back with it */
    assert_int_equal(prout_pll(f, f->n2, REGISTER, 0, 0, 0x22, 0x01, 24), GOOD); /* APTPL */
    char *text = slurp(f->path);
    assert_non_null(strstr(text, "\nreservation 1 iqn.2024-01.test:init1,i,0x800000000001 1\n"));
    assert_non_null(
        strstr(text, "\nreg 0000000000000abc iqn.2024-01.test:init1,i,0x800000000001 1\n"));
    free(text);
}

/* Registrations name their I_T nexus's relative target port: one through another target port
 * of the device (another gateway's) is not this nexus's, nor is the reservation it holds. */
static void test_state_file_other_tport(void **state)
{
    struct fx *f = *state;
    target_down(f);
    start_with_file(f, "linerate-pr 1\ngeneration 3\n"
                       "reservation 1 iqn.2024-01.test:init1,i,0x800000000001 2\n"
                       "reg 0000000000000abc iqn.2024-01.test:init1,i,0x800000000001 2\n");
    uint32_t gen;
    unsigned n;
    assert_int_equal(read_keys(f, f->n3, &gen, &n), 0xabc);
    assert_int_equal(n, 1);
    assert_int_equal(rw(f, f->n1, true), CONFLICT);
    /* so this nexus registers on its own, under the same key */
    assert_int_equal(prout(f, f->n1, REGISTER, 0, 0, 0xabc), GOOD);
    assert_int_equal(rw(f, f->n1, true), CONFLICT);
    assert_int_equal(prout(f, f->n1, RELEASE, WE, 0xabc, 0), GOOD); /* not the holder: no-op */
    assert_int_equal(rw(f, f->n1, true), CONFLICT);
}

/* The file is written 0600 through a fresh temporary name: a symlink planted where the old
 * code wrote its "<path>.tmp" leads nowhere. */
static void test_state_file_mode_and_symlink(void **state)
{
    struct fx *f = *state;
    char outside[160], tmp[160];
    snprintf(outside, sizeof(outside), "%s.outside", f->dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", f->path);
    FILE *fp = fopen(outside, "w");
    fputs("untouched\n", fp);
    fclose(fp);
    assert_int_equal(symlink(outside, tmp), 0);
    mode_t old = umask(0);
    assert_int_equal(prout_pll(f, f->n1, REGISTER, 0, 0, 1, 0x01, 24), GOOD);
    assert_int_equal(prout(f, f->n1, RESERVE, WE, 1, 0), GOOD);
    umask(old);
    struct stat st;
    assert_int_equal(lstat(f->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    char *text = slurp(outside);
    assert_string_equal(text, "untouched\n");
    free(text);
    assert_int_equal(lstat(tmp, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* nothing else is left in the directory */
    DIR *d = opendir(f->dir);
    unsigned entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    assert_int_equal(entries, 2); /* the file and the symlink */
    unlink(tmp);
    unlink(outside);
    restart(f);
    assert_int_equal(rw(f, f->n2, true), CONFLICT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_keys_truncate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_cdbs_and_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_capabilities, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conflict_matrix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registrations_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unregister_releases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preempt_registration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preempt_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_move_and_full_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aptpl_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aptpl_corrupt_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aptpl_unavailable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aptpl_save_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_move_bad_tids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_round_trip_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_file_strict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_file_other_tport, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_file_mode_and_symlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve6, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve6_vs_registrations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve6_released, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
