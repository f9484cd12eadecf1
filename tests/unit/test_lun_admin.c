/* LUNs changed while they serve (scsi/lun_admin.c, bs_grow): what linerate-ctl's add, remove,
 * set ro|rw and resize do to the SCSI core, checked through commands as an initiator sees
 * them: the unit attentions (REPORTED LUNS DATA HAS CHANGED, CAPACITY DATA HAS CHANGED, MODE
 * PARAMETERS CHANGED), the new capacity, write protection, and a detached LUN that outlives
 * the command holding it. Also a medium resized under the LUN by someone else (an RBD image
 * after `rbd resize`), told by a store callback from a thread of its own. */
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

#include "bs/bs.h"
#include "iscsi/scsi_port.h"
#include "scsi_fixture.h"
#include "util/bytes.h"

static const uint8_t TUR[16] = {0x00};
static const uint8_t RC16[16] = {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32};

static int run(struct scsi_task *t, struct scsi_target *tg, struct scsi_nexus *n, uint64_t lun,
               const uint8_t *cdb)
{
    return sfx_run(t, tg, n, lun, cdb, NULL, 0, 4096, SFX_CHECK_DONE | SFX_CHECK_REFUSAL);
}

static void write10(uint8_t cdb[16], uint32_t lba, uint16_t blocks)
{
    memset(cdb, 0, 16);
    cdb[0] = 0x2a;
    put_be32(cdb + 2, lba);
    put_be16(cdb + 7, blocks);
}

static struct bs *ram(const char *spec)
{
    char err[256];
    struct bs *bs = bs_open_spec(spec, err, sizeof(err));
    if (!bs)
        fail_msg("%s: %s", spec, err);
    return bs;
}

/* A target with a RAM LUN 0 of 1 MiB and one nexus whose power-on UA is already reported. */
static void setup_target(struct scsi_target *tg, struct scsi_nexus **n, struct scsi_task *t)
{
    assert_int_equal(scsi_target_init(tg, "iqn.2024-01.test:target", 1), 0);
    sfx_add_lun(tg, 0, ram("ram:1M"), 512, false);
    *n = sfx_nexus_get(tg, 1);
    memset(t, 0, sizeof(*t));
    assert_int_equal(run(t, tg, *n, 0, TUR), SCSI_STATUS_CHECK_CONDITION); /* 29h/00h */
    assert_int_equal(run(t, tg, *n, 0, TUR), SCSI_STATUS_GOOD);
}

static void test_grow_capacity_ua(void **state)
{
    (void)state;
    struct scsi_target tg;
    struct scsi_nexus *n;
    struct scsi_task t;
    setup_target(&tg, &n, &t);
    struct scsi_lun *lu = scsi_target_lun(&tg, 0);
    char err[256];
    assert_int_equal(scsi_lun_grow(lu, 1000, err, sizeof(err)), -1);       /* not whole blocks */
    assert_int_equal(scsi_lun_grow(lu, 512 * 1024, err, sizeof(err)), -1); /* shrinking */
    assert_non_null(strstr(err, "shrink"));
    assert_int_equal(scsi_lun_grow(lu, 4u << 20, err, sizeof(err)), 0);
    /* SBC: CAPACITY DATA HAS CHANGED first, then the new size */
    assert_int_equal(run(&t, &tg, n, 0, RC16), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x06, 0x2a, 0x09);
    assert_int_equal(run(&t, &tg, n, 0, RC16), SCSI_STATUS_GOOD);
    assert_int_equal(get_be64(t.iov[0].iov_base), (4u << 20) / 512 - 1);
    /* the grown part is there to write */
    uint8_t cdb[16], data[512];
    memset(data, 0x5a, sizeof(data));
    write10(cdb, (4u << 20) / 512 - 1, 1);
    assert_int_equal(sfx_run(&t, &tg, n, 0, cdb, data, sizeof(data), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);
    sfx_target_down(&tg, &t, n, NULL, NULL);
}

static void test_read_only_toggle(void **state)
{
    (void)state;
    struct scsi_target tg;
    struct scsi_nexus *n;
    struct scsi_task t;
    setup_target(&tg, &n, &t);
    struct scsi_lun *lu = scsi_target_lun(&tg, 0);
    char err[256];
    uint8_t cdb[16], data[512] = {0};
    write10(cdb, 0, 1);
    assert_int_equal(scsi_lun_set_read_only(lu, true, err, sizeof(err)), 0);
    assert_int_equal(run(&t, &tg, n, 0, TUR), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x06, 0x2a, 0x01); /* MODE PARAMETERS CHANGED */
    assert_int_equal(sfx_run(&t, &tg, n, 0, cdb, data, sizeof(data), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x07, 0x27, 0x00); /* WRITE PROTECTED */
    /* the same state again raises nothing */
    assert_int_equal(scsi_lun_set_read_only(lu, true, err, sizeof(err)), 0);
    assert_int_equal(run(&t, &tg, n, 0, TUR), SCSI_STATUS_GOOD);
    assert_int_equal(scsi_lun_set_read_only(lu, false, err, sizeof(err)), 0);
    assert_int_equal(run(&t, &tg, n, 0, TUR), SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(sfx_run(&t, &tg, n, 0, cdb, data, sizeof(data), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);
    sfx_target_down(&tg, &t, n, NULL, NULL);
}

static void test_add_and_detach(void **state)
{
    (void)state;
    struct scsi_target tg;
    struct scsi_nexus *n;
    struct scsi_task t, held;
    setup_target(&tg, &n, &t);
    sfx_add_lun(&tg, 3, ram("ram:1M"), 512, false);
    struct scsi_lun *lu3 = scsi_target_lun(&tg, 3);
    scsi_target_luns_changed(&tg, 3, lu3);
    /* the LUN in use hears REPORTED LUNS DATA HAS CHANGED, the new one POWER ON */
    assert_int_equal(run(&t, &tg, n, 0, TUR), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x06, 0x3f, 0x0e);
    assert_int_equal(run(&t, &tg, n, 3, TUR), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x06, 0x29, 0x00);
    assert_int_equal(run(&t, &tg, n, 3, TUR), SCSI_STATUS_GOOD);
    assert_int_equal(scsi_lun_users(lu3), 1); /* t still holds it (set up, not released) */
    scsi_task_release(&t);
    assert_int_equal(scsi_lun_users(lu3), 0);

    /* a write set up on LUN 3 and not finished: detaching leaves it its LUN */
    memset(&held, 0, sizeof(held));
    uint8_t cdb[16];
    write10(cdb, 0, 1);
    scsi_task_init(&held);
    memcpy(held.cdb, cdb, 16);
    held.lun = 3;
    held.target = &tg;
    held.nexus = n;
    held.edtl = 512;
    held.edtl_write = true;
    held.done = sfx_on_done;
    assert_int_equal(scsi_task_setup(&held), 0);
    assert_int_equal(scsi_lun_users(lu3), 1);
    assert_ptr_equal(scsi_target_detach_lun(&tg, 3), lu3);
    assert_null(scsi_target_lun(&tg, 3));
    assert_null(scsi_target_detach_lun(&tg, 3));
    /* new commands: LOGICAL UNIT NOT SUPPORTED */
    assert_int_equal(run(&t, &tg, n, 3, TUR), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x05, 0x25, 0x00);
    memset(held.iov[0].iov_base, 0xa5, 512);
    scsi_task_exec(&held);
    assert_int_equal(held.status, SCSI_STATUS_GOOD);
    assert_int_equal(scsi_lun_users(lu3), 1);
    scsi_task_release(&held);
    assert_int_equal(scsi_lun_users(lu3), 0);
    scsi_lun_free(lu3);
    /* the number can be used again */
    sfx_add_lun(&tg, 3, ram("ram:64k"), 512, false);
    sfx_target_down(&tg, &t, n, NULL, NULL);
}

/* A LUN being removed (detached, its commands still finishing) while the 257th initiator logs
 * in: the new nexus's slot has per-nexus state on the published LUNs only, and a unit attention
 * raised on the removed LUN for every nexus (as an ABORT TASK SET or a reset of a shared LU
 * does) must pass over that slot, not write through a chunk the LUN never got. */
static void test_detached_lun_new_nexus(void **state)
{
    (void)state;
    struct scsi_target tg;
    struct scsi_nexus *n;
    struct scsi_task t;
    setup_target(&tg, &n, &t);
    sfx_add_lun(&tg, 3, ram("ram:64k"), 512, false);
    struct scsi_lun *lu3 = scsi_target_detach_lun(&tg, 3);
    assert_non_null(lu3);
    enum { HOSTS = 300 }; /* past the first 256 slots */
    static struct scsi_nexus *hosts[HOSTS];
    for (unsigned i = 0; i < HOSTS; i++) {
        char name[64];
        const uint8_t isid[6] = {0x80, 0, 0, 0, (uint8_t)(i >> 8), (uint8_t)i};
        snprintf(name, sizeof(name), "iqn.2024-01.test:host%u", i);
        hosts[i] = scsi_nexus_get(&tg, &iscsi_scsi_transport, name, isid);
        assert_non_null(hosts[i]);
    }
    scsi_lun_tasks_cleared(lu3, NULL);
    scsi_lun_reset(lu3, NULL);
    /* the published LUN has the last host's state: its first command reports power on */
    assert_int_equal(run(&t, &tg, hosts[HOSTS - 1], 0, TUR), SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x06, 0x29, 0x00);
    scsi_task_release(&t);
    for (unsigned i = 0; i < HOSTS; i++)
        scsi_nexus_put(hosts[i]);
    scsi_lun_free(lu3);
    sfx_target_down(&tg, &t, n, NULL, NULL);
}

static void test_bs_grow(void **state)
{
    (void)state;
    char err[256];
    struct bs *bs = ram("ram:1M");
    assert_int_equal(bs_grow(bs, 512 * 1024, err, sizeof(err)), -1);
    assert_int_equal(bs_grow(bs, 8u << 20, err, sizeof(err)), 0);
    assert_int_equal(bs->size, 8u << 20);
    uint8_t *p = bs_map_read(bs, (8u << 20) - 4096, 4096);
    assert_non_null(p);
    for (int i = 0; i < 4096; i++)
        assert_int_equal(p[i], 0);
    bs_close(bs);

    bs = ram("ram:1M,prealloc");
    assert_int_equal(bs_grow(bs, 2u << 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "preallocated"));
    bs_close(bs);

    bs = ram("null:1M");
    assert_int_equal(bs_grow(bs, 1u << 30, err, sizeof(err)), 0);
    bs_close(bs);

    char path[] = "/tmp/lr-test-grow-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char spec[128];
    snprintf(spec, sizeof(spec), "file:%s,size=1M", path);
    bs = ram(spec);
    assert_int_equal(bs_grow(bs, 3u << 20, err, sizeof(err)), 0);
    assert_int_equal(bs->size, 3u << 20);
    bs_close(bs);
    snprintf(spec, sizeof(spec), "file:%s,ro", path);
    bs = ram(spec);
    assert_int_equal(bs->size, 3u << 20);
    assert_true(bs->read_only);
    assert_int_equal(bs_grow(bs, 4u << 20, err, sizeof(err)), -1);
    bs_close(bs);
    unlink(path);
}

/* ---- a medium resized by someone else: a store with size_watch/size_refresh ---- */

static struct {
    pthread_mutex_t lock;
    uint64_t size; /* the medium's size "in the cluster" */
    void (*cb)(void *arg);
    void *arg;
    int watches, unwatches, refreshes;
} med = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int med_size_watch(struct bs *bs, void (*cb)(void *arg), void *arg)
{
    (void)bs;
    pthread_mutex_lock(&med.lock);
    med.cb = cb;
    med.arg = arg;
    if (cb)
        med.watches++;
    else
        med.unwatches++;
    pthread_mutex_unlock(&med.lock);
    return 0;
}

static int med_size_refresh(struct bs *bs, uint64_t *size)
{
    pthread_mutex_lock(&med.lock);
    *size = med.size;
    /* atomic: the test polls it without the lock while the helper thread writes it */
    __atomic_fetch_add(&med.refreshes, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&med.lock);
    __atomic_store_n(&bs->size, *size, __ATOMIC_RELEASE);
    return 0;
}

/* The store's own thread calls back, as librbd's does. */
static void *med_notify_thread(void *unused)
{
    (void)unused;
    med.cb(med.arg);
    return NULL;
}

static void med_resize(uint64_t size)
{
    pthread_mutex_lock(&med.lock);
    med.size = size;
    pthread_mutex_unlock(&med.lock);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, med_notify_thread, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

/* The helper thread takes the change up: TEST UNIT READY until the unit attention comes. */
static void await_capacity_ua(struct scsi_task *t, struct scsi_target *tg, struct scsi_nexus *n)
{
    for (int i = 0; i < 5000; i++) {
        if (run(t, tg, n, 0, TUR) != SCSI_STATUS_GOOD) {
            sfx_assert_sense(t, SFX_SENSE_FIXED, 0x06, 0x2a, 0x09);
            assert_int_equal(run(t, tg, n, 0, TUR), SCSI_STATUS_GOOD); /* reported once */
            return;
        }
        usleep(1000);
    }
    fail_msg("no CAPACITY DATA HAS CHANGED within 5 s");
}

static void test_medium_resized_elsewhere(void **state)
{
    (void)state;
    struct scsi_target tg;
    struct scsi_task t;
    memset(&t, 0, sizeof(t));
    assert_int_equal(scsi_target_init(&tg, "iqn.2024-01.test:target", 1), 0);
    /* 4 MiB of memory, of which the "medium" has 1 MiB at first */
    struct bs *bs = ram("ram:4M");
    static struct bs_ops ops;
    ops = *bs->ops;
    ops.size_watch = med_size_watch;
    ops.size_refresh = med_size_refresh;
    bs->ops = &ops;
    bs->size = med.size = 1u << 20;
    sfx_add_lun(&tg, 0, bs, 512, false);
    assert_int_equal(med.watches, 1);
    struct scsi_nexus *n1 = sfx_nexus_get(&tg, 1), *n2 = sfx_nexus_get(&tg, 2);
    for (int i = 0; i < 2; i++) { /* power-on UAs */
        assert_int_equal(run(&t, &tg, i ? n2 : n1, 0, TUR), SCSI_STATUS_CHECK_CONDITION);
        assert_int_equal(run(&t, &tg, i ? n2 : n1, 0, TUR), SCSI_STATUS_GOOD);
    }

    /* a notification that changed something else: the size is read, nothing is raised */
    med_resize(1u << 20);
    for (int i = 0; i < 5000 && __atomic_load_n(&med.refreshes, __ATOMIC_ACQUIRE) == 0; i++)
        usleep(1000);
    assert_int_equal(run(&t, &tg, n1, 0, TUR), SCSI_STATUS_GOOD);

    /* grown: every nexus gets 2Ah/09h, then READ CAPACITY says the new size */
    med_resize(4u << 20);
    await_capacity_ua(&t, &tg, n1);
    await_capacity_ua(&t, &tg, n2);
    assert_int_equal(run(&t, &tg, n1, 0, RC16), SCSI_STATUS_GOOD);
    assert_int_equal(get_be64(t.iov[0].iov_base), (4u << 20) / 512 - 1);
    uint8_t cdb[16], data[512];
    memset(data, 0xa5, sizeof(data));
    write10(cdb, (4u << 20) / 512 - 1, 1);
    assert_int_equal(sfx_run(&t, &tg, n1, 0, cdb, data, sizeof(data), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_GOOD);

    /* shrunk (rbd resize --allow-shrink): taken too, and the lost blocks are out of range */
    med_resize(2u << 20);
    await_capacity_ua(&t, &tg, n1);
    assert_int_equal(run(&t, &tg, n1, 0, RC16), SCSI_STATUS_GOOD);
    assert_int_equal(get_be64(t.iov[0].iov_base), (2u << 20) / 512 - 1);
    assert_int_equal(sfx_run(&t, &tg, n1, 0, cdb, data, sizeof(data), 0, SFX_CHECK_DONE),
                     SCSI_STATUS_CHECK_CONDITION);
    sfx_assert_sense(&t, SFX_SENSE_FIXED, 0x05, 0x21, 0x00);

    /* the LUN's end ends the watch before the store closes */
    sfx_target_down(&tg, &t, n1, n2, NULL);
    assert_int_equal(med.unwatches, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_capacity_ua),
        cmocka_unit_test(test_read_only_toggle),
        cmocka_unit_test(test_add_and_detach),
        cmocka_unit_test(test_bs_grow),
        cmocka_unit_test(test_medium_resized_elsewhere),
        cmocka_unit_test(test_detached_lun_new_nexus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
