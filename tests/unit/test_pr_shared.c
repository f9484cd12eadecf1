/* Persistent reservations held in a store's shared object (pr.c, "Shared state"), with two
 * "gateways" (two targets, each with a LUN on its own store) over one in-process object that
 * behaves as the RADOS object does for pr.c: versioned, written only if the version read is
 * still current (compare and swap), notifies handed to every watcher. The real cluster is
 * exercised by target-rbd-pr; this one injects what is hard to provoke there: a lost race,
 * a broken watch. Without a reactor the helper-thread work runs on the caller, so commands
 * complete before sfx_run returns (the re-read after a broken watch runs on the helper thread). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"
#include "iscsi/scsi_port.h"

#define TGT_NAME "iqn.2024-01.io.linerate:pr-shared"
#define CONFLICT SCSI_STATUS_RESERVATION_CONFLICT
#define GOOD SCSI_STATUS_GOOD
#define CHECK SCSI_STATUS_CHECK_CONDITION

enum { WE = 1, EA = 3 };
enum { REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT_ABORT };

/* ---- the shared object ---- */

static struct {
    pthread_mutex_t lock;
    char *text;
    uint64_t ver;
    struct {
        void (*cb)(void *arg, const void *buf, size_t len, int err);
        void *arg;
    } w[2];
    unsigned nw;
    unsigned writes, lost_races, notifies;
    bool race_next;  /* the next write finds the object changed by "someone else" */
    bool fail_reads; /* reads fail with -ETIMEDOUT */
    unsigned failed_reads;
} obj = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int obj_read(struct bs *bs, const char *name, char **buf, size_t *len, uint64_t *ver)
{
    (void)bs;
    assert_string_equal(name, "pr");
    pthread_mutex_lock(&obj.lock);
    int ret = obj.fail_reads ? -ETIMEDOUT : 0;
    /* atomic: the test polls it without the lock while the helper thread retries */
    __atomic_fetch_add(&obj.failed_reads, ret < 0, __ATOMIC_RELEASE);
    *buf = ret == 0 && obj.text ? strdup(obj.text) : NULL;
    *len = *buf ? strlen(*buf) : 0;
    *ver = obj.ver;
    pthread_mutex_unlock(&obj.lock);
    return ret;
}

static int obj_write(struct bs *bs, const char *name, const void *buf, size_t len, uint64_t ver,
                     uint64_t *newver)
{
    (void)bs, (void)name;
    pthread_mutex_lock(&obj.lock);
    if (obj.race_next) {
        /* a registration made through another gateway lands first */
        obj.race_next = false;
        char *t = NULL;
        assert_true(asprintf(&t, "%sreg 00000000000000ee iqn.2024-01.test:other,i,0x800000000009\n",
                             obj.text) > 0);
        free(obj.text);
        obj.text = t;
        obj.ver++;
    }
    int ret = 0;
    if (ver != obj.ver) {
        obj.lost_races++;
        ret = -ECANCELED;
    } else {
        free(obj.text);
        obj.text = strndup(buf, len);
        *newver = ++obj.ver;
        obj.writes++;
    }
    pthread_mutex_unlock(&obj.lock);
    return ret;
}

static int obj_notify(struct bs *bs, const char *name, const void *buf, size_t len,
                      unsigned timeout_ms)
{
    (void)bs, (void)name, (void)timeout_ms;
    obj.notifies++;
    for (unsigned i = 0; i < obj.nw; i++)
        obj.w[i].cb(obj.w[i].arg, buf, len, 0);
    return 0;
}

static int obj_watch(struct bs *bs, const char *name,
                     void (*cb)(void *arg, const void *buf, size_t len, int err), void *arg)
{
    (void)bs, (void)name;
    for (unsigned i = 0; i < obj.nw; i++)
        if (obj.w[i].arg == arg) { /* re-armed */
            obj.w[i].cb = cb;
            return 0;
        }
    assert_true(obj.nw < 2);
    obj.w[obj.nw].cb = cb;
    obj.w[obj.nw++].arg = arg;
    return 0;
}

/* ---- two gateways ---- */

struct gw {
    struct scsi_target tg; /* first: on_abort finds the gateway from it */
    struct scsi_nexus *aborted;
    unsigned naborted;
    struct bs_ops ops;
    struct scsi_nexus *n[3]; /* initiators 1, 2, 3 */
    struct scsi_task t;
};

struct fx {
    struct gw a, b;
};

static void on_abort(struct scsi_target *tg, struct scsi_nexus *n, struct scsi_lun *lu,
                     struct scsi_join *join)
{
    (void)lu;
    (void)join;
    struct gw *g = (struct gw *)tg;
    g->aborted = n;
    g->naborted++;
}

/* Each gateway is a target port of its own: TPGT = relative target port identifier
 * (docs/gateways.md). */
static void gw_up(struct gw *g, uint16_t tpgt)
{
    assert_int_equal(scsi_target_init(&g->tg, TGT_NAME, tpgt), 0);
    /* and knows the other one's (its ALUA peer) */
    g->tg.alua_peers[0] = (struct scsi_alua_group){.id = tpgt == 1 ? 2 : 1};
    g->tg.alua_npeers = 1;
    g->tg.abort_nexus_tasks = on_abort;
    struct sfx_store *m;
    struct bs *bs = sfx_store_open(1 << 20, false, &m);
    g->ops = *bs->ops;
    g->ops.obj_read = obj_read;
    g->ops.obj_write = obj_write;
    g->ops.obj_notify = obj_notify;
    g->ops.obj_watch = obj_watch;
    bs->ops = &g->ops;
    sfx_add_lun(&g->tg, 0, bs, 512, false);
    for (uint8_t i = 0; i < 3; i++)
        g->n[i] = sfx_nexus_get(&g->tg, (uint8_t)(i + 1));
}

static int run(struct gw *g, int ini, const uint8_t *cdb, const void *out, size_t out_len)
{
    return sfx_run(&g->t, &g->tg, g->n[ini - 1], 0, cdb, out, out_len, 0, 0);
}

static uint16_t take_ua(struct gw *g, int ini)
{
    uint8_t cdb[16] = {0x03, 0, 0, 0, 18};
    run(g, ini, cdb, NULL, 0);
    const uint8_t *d = g->t.iov[0].iov_base;
    return (uint16_t)(d[12] << 8 | d[13]);
}

static int setup(void **state)
{
    obj.text = NULL;
    obj.ver = obj.nw = obj.writes = obj.lost_races = obj.notifies = 0;
    obj.race_next = obj.fail_reads = false;
    obj.failed_reads = 0;
    struct fx *f = calloc(1, sizeof(*f));
    gw_up(&f->a, 1);
    gw_up(&f->b, 2);
    assert_int_equal(obj.nw, 2);
    assert_non_null(obj.text); /* the first gateway created the object */
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(take_ua(&f->a, i), 0x2900);
        assert_int_equal(take_ua(&f->b, i), 0x2900);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->a.tg, &f->a.t, f->a.n[0], f->a.n[1], f->a.n[2]);
    sfx_target_down(&f->b.tg, &f->b.t, f->b.n[0], f->b.n[1], f->b.n[2]);
    free(f);
    free(obj.text);
    obj.text = NULL;
    return 0;
}

static int prout(struct gw *g, int ini, unsigned sa, unsigned type, uint64_t rk, uint64_t sark)
{
    uint8_t cdb[16] = {0x5f, (uint8_t)sa, (uint8_t)type};
    put_be32(cdb + 5, 24);
    uint8_t p[24] = {0};
    put_be64(p, rk);
    put_be64(p + 8, sark);
    return run(g, ini, cdb, p, sizeof(p));
}

static unsigned read_keys(struct gw *g, int ini, uint64_t *keys, unsigned max)
{
    uint8_t cdb[16] = {0x5e, 0};
    put_be16(cdb + 7, 1024);
    assert_int_equal(run(g, ini, cdb, NULL, 0), GOOD);
    const uint8_t *d = g->t.iov[0].iov_base;
    unsigned n = get_be32(d + 4) / 8;
    for (unsigned i = 0; i < n && i < max; i++)
        keys[i] = get_be64(d + 8 + 8 * i);
    return n;
}

static int rw(struct gw *g, int ini, bool write)
{
    uint8_t cdb[16] = {write ? 0x2a : 0x28, 0, 0, 0, 0, 1, 0, 0, 1};
    static uint8_t block[512];
    return write ? run(g, ini, cdb, block, 512) : run(g, ini, cdb, NULL, 0);
}

/* A reservation taken through A holds for the other initiators through B, and goes away for
 * them with the RELEASE through A. */
static void test_reserve_across(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    assert_int_equal(prout(&f->b, 2, REGISTER, 0, 0, 0xb2), GOOD);
    uint64_t k[4];
    assert_int_equal(read_keys(&f->b, 3, k, 4), 2);
    assert_true((k[0] == 0xa1 && k[1] == 0xb2) || (k[0] == 0xb2 && k[1] == 0xa1));
    assert_int_equal(prout(&f->a, 1, RESERVE, WE, 0xa1, 0), GOOD);
    assert_int_equal(rw(&f->b, 2, true), CONFLICT);
    assert_int_equal(rw(&f->b, 3, true), CONFLICT);
    assert_int_equal(rw(&f->b, 2, false), GOOD);
    assert_int_equal(rw(&f->a, 1, true), GOOD);
    /* the same initiator port through the other gateway is another I_T nexus: not the holder */
    assert_int_equal(rw(&f->b, 1, true), CONFLICT);
    assert_int_equal(prout(&f->a, 1, RELEASE, WE, 0xa1, 0), GOOD);
    assert_int_equal(rw(&f->b, 2, true), GOOD);
    assert_int_equal(rw(&f->b, 3, true), GOOD);
    /* an SPC-2 RESERVE through B holds on A */
    assert_int_equal(prout(&f->a, 1, CLEAR, 0, 0xa1, 0), GOOD);
    assert_int_equal(take_ua(&f->b, 2), 0x2a03); /* RESERVATIONS PREEMPTED, through B */
    uint8_t reserve6[16] = {0x16}, release6[16] = {0x17};
    assert_int_equal(run(&f->b, 2, reserve6, NULL, 0), GOOD);
    assert_int_equal(rw(&f->a, 1, false), CONFLICT);
    assert_int_equal(run(&f->b, 2, release6, NULL, 0), GOOD);
    assert_int_equal(rw(&f->a, 1, false), GOOD);
}

/* A change that loses the race to another gateway's is made again on the newer state: no
 * update is lost. */
static void test_lost_race(void **state)
{
    struct fx *f = *state;
    obj.race_next = true;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    assert_int_equal(obj.lost_races, 1);
    uint64_t k[4];
    assert_int_equal(read_keys(&f->b, 2, k, 4), 2);
    assert_non_null(strstr(obj.text, "reg 00000000000000ee"));
    assert_non_null(strstr(obj.text, "reg 00000000000000a1"));
}

/* PREEMPT through B: A's initiator hears REGISTRATIONS PREEMPTED through A (the notify carries
 * the unit attention), and the refusal or no-op writes nothing. */
static void test_preempt_ua_across(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    assert_int_equal(prout(&f->b, 2, REGISTER, 0, 0, 0xb2), GOOD);
    assert_int_equal(prout(&f->a, 1, RESERVE, EA, 0xa1, 0), GOOD);
    assert_int_equal(rw(&f->b, 2, false), CONFLICT);
    unsigned writes = obj.writes;
    assert_int_equal(prout(&f->b, 3, RESERVE, EA, 0x33, 0), CONFLICT); /* not registered */
    assert_int_equal(obj.writes, writes);
    assert_int_equal(prout(&f->b, 2, PREEMPT, WE, 0xb2, 0xa1), GOOD);
    assert_int_equal(take_ua(&f->a, 1), 0x2a05);
    assert_int_equal(rw(&f->a, 1, true), CONFLICT);
    assert_int_equal(rw(&f->a, 1, false), GOOD);
    assert_int_equal(take_ua(&f->b, 2), 0); /* the sender hears nothing */
}

/* PREEMPT AND ABORT took the nexus of initiator ini through gateway g: its tasks aborted there
 * and REGISTRATIONS PREEMPTED to it; nothing through the other gateway. */
static void preempted_on(struct gw *g, int ini, struct gw *other)
{
    assert_int_equal(g->naborted, 1);
    assert_ptr_equal(g->aborted, g->n[ini - 1]);
    assert_int_equal(other->naborted, 0);
    assert_int_equal(take_ua(g, ini), 0x2a05);
    assert_int_equal(take_ua(other, ini), 0);
}

/* PREEMPT AND ABORT through A: the preempted nexus's tasks are aborted on B, where it is; the
 * same initiator port through A is another nexus, registered with nothing, and keeps its
 * tasks, and so do the sender's. */
static void test_preempt_abort_across(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    assert_int_equal(prout(&f->b, 2, REGISTER, 0, 0, 0xb2), GOOD);
    assert_int_equal(prout(&f->b, 2, RESERVE, WE, 0xb2, 0), GOOD);
    assert_int_equal(prout(&f->a, 1, PREEMPT_ABORT, EA, 0xa1, 0xb2), GOOD);
    preempted_on(&f->b, 2, &f->a);
    assert_int_equal(rw(&f->b, 2, false), CONFLICT);
}

/* A broken watch: until the object is read again, what the reservation rules check ends in
 * ABORTED COMMAND / TIMEOUT ON LOGICAL UNIT (retried), not in a decision on a stale copy. */
static void test_broken_watch(void **state)
{
    struct fx *f = *state;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    obj.fail_reads = true;
    obj.w[1].cb(obj.w[1].arg, NULL, 0, -ENOTCONN); /* gateway B's watch */
    assert_int_equal(rw(&f->b, 2, false), CHECK);
    sfx_assert_sense(&f->b.t, 0, 0x0b, 0x3e, 0x02);
    uint8_t tur[16] = {0};
    assert_int_equal(run(&f->b, 2, tur, NULL, 0), GOOD); /* no reservation restricts TUR */
    /* the helper thread's first re-read fails: the mirror stays stale */
    for (int i = 0; i < 50 && !__atomic_load_n(&obj.failed_reads, __ATOMIC_ACQUIRE); i++)
        usleep(100 * 1000);
    assert_true(__atomic_load_n(&obj.failed_reads, __ATOMIC_ACQUIRE) > 0);
    assert_int_equal(rw(&f->b, 2, false), CHECK);
    pthread_mutex_lock(&obj.lock);
    obj.fail_reads = false;
    pthread_mutex_unlock(&obj.lock);
    int st = CHECK;
    for (int i = 0; i < 50 && st != GOOD; i++) {
        usleep(100 * 1000); /* the re-read is retried every second */
        st = rw(&f->b, 2, false);
    }
    assert_int_equal(st, GOOD);
    uint64_t k[2];
    assert_int_equal(read_keys(&f->b, 2, k, 2), 1);
    assert_int_equal(k[0], 0xa1);
}

/* A unit attention raised by a notify the helper thread sends (nobody waits for it). */
static uint16_t await_ua(struct gw *g, int ini)
{
    uint16_t ua = 0;
    for (int i = 0; i < 500 && !ua; i++) {
        ua = take_ua(g, ini);
        if (!ua)
            usleep(10 * 1000);
    }
    return ua;
}

static void reset_done(void *arg)
{
    ++*(int *)arg;
}

/* LOGICAL UNIT RESET through A: every nexus through B hears 29h/03h too, and B aborts their
 * tasks of the LU (one task set, whichever gateway a command came through); A's own nexuses
 * hear it once, and A's transport aborts A's tasks itself. Target resets likewise: warm
 * 29h/03h, cold 29h/01h. */
static void test_reset_across(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->a.tg, 0);
    unsigned notifies = obj.notifies;
    int calls = 0;
    /* without a reactor the other gateways are told before it returns: nothing to wait for */
    assert_false(scsi_lun_reset_wait(lu, f->a.n[0], reset_done, &calls));
    assert_int_equal(calls, 0);
    assert_int_equal(obj.notifies, notifies + 1);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(take_ua(&f->a, i), 0x2903);
        assert_int_equal(take_ua(&f->a, i), 0);
        assert_int_equal(take_ua(&f->b, i), 0x2903);
        assert_int_equal(take_ua(&f->b, i), 0);
    }
    assert_int_equal(f->b.naborted, 3);
    assert_int_equal(f->a.naborted, 0);

    /* without done the others are told from the helper thread, and nobody waits */
    scsi_target_reset(&f->a.tg, f->a.n[1], false);
    assert_int_equal(await_ua(&f->b, 3), 0x2903);
    assert_int_equal(take_ua(&f->a, 3), 0x2903);
    scsi_target_reset(&f->b.tg, f->b.n[1], true);
    assert_int_equal(await_ua(&f->a, 3), 0x2901);
    assert_int_equal(take_ua(&f->b, 3), 0x2901);
    assert_int_equal(f->a.naborted, 3);
    assert_int_equal(f->b.naborted, 6);
}

/* REGISTER AND MOVE through g (type WE) to the TransportID of initiator port name tid through
 * relative target port tport. */
static int move(struct gw *g, int ini, uint64_t rk, uint64_t sark, uint16_t tport, const char *tid)
{
    uint8_t p[24 + 256] = {0};
    put_be64(p, rk);
    put_be64(p + 8, sark);
    put_be16(p + 18, tport);
    uint16_t al = (uint16_t)((strlen(tid) + 1 + 3) & ~(size_t)3);
    p[24] = 0x45;
    put_be16(p + 26, al);
    memcpy(p + 28, tid, strlen(tid));
    put_be32(p + 20, 4u + al);
    uint8_t mv[16] = {0x5f, 7, WE};
    put_be32(mv + 5, 28u + al);
    return run(g, ini, mv, p, 28u + al);
}

/* A port name with line breaks in it (login refuses them, keys.c; this is the state text's own
 * guarantee) goes into the object and its notify as one field: the other gateway installs no
 * line of it, no registration, no version, and keeps following the changes. A REGISTER AND
 * MOVE to such a name is refused and writes nothing. */
static void test_hostile_name_across(void **state)
{
    struct fx *f = *state;
    const char *evil = "iqn.2024-01.test:evil\nversion 999\nreg 00000000000000ee "
                       "iqn.2024-01.test:init3,i,0x800000000003\nspc2 iqn.2024-01.test:x";
    const uint8_t isid[6] = {0x80, 0, 0, 0, 0, 9};
    struct scsi_nexus *n = scsi_nexus_get(&f->a.tg, &iscsi_scsi_transport, evil, isid);
    assert_non_null(n);
    uint8_t sense[16] = {0x03, 0, 0, 0, 18}; /* its power-on unit attention */
    sfx_run(&f->a.t, &f->a.tg, n, 0, sense, NULL, 0, 0, 0);
    uint8_t cdb[16] = {0x5f, REGISTER};
    put_be32(cdb + 5, 24);
    uint8_t p[24 + 256] = {0};
    put_be64(p + 8, 0xe1);
    assert_int_equal(sfx_run(&f->a.t, &f->a.tg, n, 0, cdb, p, 24, 0, 0), GOOD);
    unsigned regs = 0;
    for (const char *l = obj.text; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        regs += strncmp(l, "reg ", 4) == 0;
    assert_int_equal(regs, 1);
    uint64_t k[4];
    assert_int_equal(read_keys(&f->b, 3, k, 4), 1);
    assert_int_equal(k[0], 0xe1);
    /* initiator 3 is not registered under 0xee through B, and B still follows A */
    assert_int_equal(prout(&f->b, 3, RESERVE, WE, 0xee, 0), CONFLICT);
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa1), GOOD);
    assert_int_equal(rw(&f->b, 1, true), GOOD);
    assert_int_equal(read_keys(&f->b, 3, k, 4), 2);

    /* REGISTER AND MOVE through A to a TransportID with a line break */
    assert_int_equal(prout(&f->a, 1, RESERVE, WE, 0xa1, 0), GOOD);
    char *before = strdup(obj.text);
    uint64_t ver = obj.ver;
    const char *tid = "iqn.2024-01.test:a\nreg 00000000000000ee iqn.2024-01.test:init3,i,"
                      "0x800000000003";
    assert_int_equal(move(&f->a, 1, 0xa1, 5, 1, tid), CHECK);
    assert_string_equal(obj.text, before);
    assert_int_equal(obj.ver, ver);
    free(before);
    assert_int_equal(prout(&f->b, 3, RESERVE, WE, 0xee, 0), CONFLICT);
    assert_int_equal(rw(&f->b, 2, true), CONFLICT);
    scsi_nexus_put(n);
}

/* READ FULL STATUS through g: each registrant's key and relative target port, in keys[i] and
 * rtp[i]; how many there are. */
static unsigned read_full(struct gw *g, int ini, uint64_t *keys, uint16_t *rtp, unsigned max)
{
    uint8_t cdb[16] = {0x5e, 3};
    put_be16(cdb + 7, 4096);
    assert_int_equal(run(g, ini, cdb, NULL, 0), GOOD);
    const uint8_t *d = g->t.iov[0].iov_base;
    uint32_t len = get_be32(d + 4);
    unsigned n = 0;
    for (uint32_t off = 8; off < 8 + len; n++) {
        const uint8_t *p = d + off;
        if (n < max) {
            keys[n] = get_be64(p);
            rtp[n] = get_be16(p + 18);
        }
        off += 24 + get_be32(p + 20);
    }
    return n;
}

/* One initiator port (one ISID) through both gateways is two I_T nexuses (SPC-4 §5.13.7:
 * with ALL_TG_PT 0 a REGISTER registers the nexus it came through): each registers on its
 * own, holds or not on its own, and is preempted on its own. */
static void test_same_port_two_gateways(void **state)
{
    struct fx *f = *state;
    const uint64_t K = 0xa1;
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, K), GOOD);
    /* what multipath tools send on each further path: a new registration, not a conflict */
    assert_int_equal(prout(&f->b, 1, REGISTER, 0, 0, K), GOOD);
    uint64_t k[4];
    uint16_t rtp[4];
    assert_int_equal(read_full(&f->b, 1, k, rtp, 4), 2);
    assert_int_equal(k[0], K);
    assert_int_equal(k[1], K);
    assert_true((rtp[0] == 1 && rtp[1] == 2) || (rtp[0] == 2 && rtp[1] == 1));

    /* Write Exclusive through A: B's nexus is a registrant, not the holder */
    assert_int_equal(prout(&f->a, 1, RESERVE, WE, K, 0), GOOD);
    assert_int_equal(rw(&f->a, 1, true), GOOD);
    assert_int_equal(rw(&f->b, 1, true), CONFLICT);
    assert_int_equal(rw(&f->b, 1, false), GOOD);
    /* nor may it release it (a no-op) */
    assert_int_equal(prout(&f->b, 1, RELEASE, WE, K, 0), GOOD);
    assert_int_equal(rw(&f->b, 1, true), CONFLICT);
    assert_int_equal(prout(&f->a, 1, RELEASE, WE, K, 0), GOOD);
    /* registrants only: B's registered nexus may write, an unregistered one may not */
    assert_int_equal(prout(&f->a, 1, RESERVE, 5 /* WE_RO */, K, 0), GOOD);
    assert_int_equal(rw(&f->b, 1, true), GOOD);
    assert_int_equal(rw(&f->b, 2, true), CONFLICT);
    assert_int_equal(prout(&f->a, 1, RELEASE, 5, K, 0), GOOD);
    assert_int_equal(take_ua(&f->b, 1), 0x2a04); /* RESERVATIONS RELEASED, to B's nexus */
    assert_int_equal(prout(&f->a, 1, RESERVE, 6 /* EA_RO */, K, 0), GOOD);
    assert_int_equal(rw(&f->b, 1, false), GOOD);
    assert_int_equal(rw(&f->b, 2, false), CONFLICT);

    /* UNREGISTER through A leaves B's registration (and releases A's reservation) */
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, K, 0), GOOD);
    assert_int_equal(read_full(&f->a, 1, k, rtp, 4), 1);
    assert_int_equal(k[0], K);
    assert_int_equal(rtp[0], 2);
    assert_int_equal(take_ua(&f->b, 1), 0x2a04);
    assert_int_equal(rw(&f->b, 2, false), GOOD);
    assert_int_equal(prout(&f->a, 1, RESERVE, WE, K, 0), CONFLICT); /* A's is gone */

    /* PREEMPT AND ABORT of the other nexus's key: A's nexus holds under 0xa2, B's (key K)
     * preempts it; only A's tasks are aborted and only A's nexus hears of it */
    assert_int_equal(prout(&f->a, 1, REGISTER, 0, 0, 0xa2), GOOD);
    assert_int_equal(prout(&f->a, 1, RESERVE, WE, 0xa2, 0), GOOD);
    assert_int_equal(prout(&f->b, 1, PREEMPT_ABORT, WE, K, 0xa2), GOOD);
    preempted_on(&f->a, 1, &f->b);
    assert_int_equal(rw(&f->b, 1, true), GOOD);
    assert_int_equal(rw(&f->a, 1, true), CONFLICT);
    assert_int_equal(read_full(&f->a, 1, k, rtp, 4), 1);
    assert_int_equal(rtp[0], 2);

    /* REGISTER AND MOVE through B to the same initiator port through A: its RELATIVE TARGET
     * PORT IDENTIFIER names the nexus; a port of no gateway is refused */
    const char *init1 = "iqn.2024-01.test:init1,i,0x800000000001";
    assert_int_equal(move(&f->b, 1, K, 0xa3, 3, init1), CHECK);
    assert_int_equal(move(&f->b, 1, K, 0xa3, 2, init1), CHECK); /* to itself */
    assert_int_equal(move(&f->b, 1, K, 0xa3, 1, init1), GOOD);
    assert_int_equal(rw(&f->a, 1, true), GOOD);
    assert_int_equal(rw(&f->b, 1, true), CONFLICT);
    assert_int_equal(read_full(&f->b, 1, k, rtp, 4), 2);
    assert_true((k[0] == 0xa3 && rtp[0] == 1) || (k[1] == 0xa3 && rtp[1] == 1));

    /* SPC-2 RESERVE holds per nexus too */
    assert_int_equal(prout(&f->b, 1, CLEAR, 0, K, 0), GOOD);
    assert_int_equal(take_ua(&f->a, 1), 0x2a03); /* RESERVATIONS PREEMPTED, to A's nexus */
    uint8_t reserve6[16] = {0x16}, release6[16] = {0x17};
    assert_int_equal(run(&f->a, 1, reserve6, NULL, 0), GOOD);
    assert_int_equal(rw(&f->b, 1, false), CONFLICT);
    assert_int_equal(run(&f->b, 1, release6, NULL, 0), GOOD); /* not its own: a no-op */
    assert_int_equal(rw(&f->b, 1, false), CONFLICT);
    assert_int_equal(run(&f->a, 1, release6, NULL, 0), GOOD);
    assert_int_equal(rw(&f->b, 1, false), GOOD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reserve_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preempt_ua_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preempt_abort_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broken_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_name_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_port_two_gateways, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
