/* util/iostats: latency bucket bounds, the error slot of a status and its sense, and shards
 * merged on read, with reactor threads writing their own shards and other threads the shared
 * one at the same time. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/iostats.h"

static void test_buckets(void **state)
{
    (void)state;
    assert_int_equal(iostats_lat_bucket(0), 0);
    assert_int_equal(iostats_lat_bucket(1023), 0);
    assert_int_equal(iostats_lat_bucket(1024), 1); /* bounds are exclusive: below 2^(10+i) */
    assert_int_equal(iostats_lat_bucket(2047), 1);
    assert_int_equal(iostats_lat_bucket(2048), 2);
    assert_int_equal(iostats_lat_bucket(UINT64_MAX), IOSTATS_LAT_BUCKETS - 1);
    for (unsigned i = 0; i + 1 < IOSTATS_LAT_BUCKETS; i++) {
        uint64_t bound_ns = (uint64_t)(iostats_lat_bound_s(i) * 1e9 + 0.5);
        assert_int_equal(iostats_lat_bucket(bound_ns - 1), i);
        assert_int_equal(iostats_lat_bucket(bound_ns), i + 1);
    }
    assert_true(iostats_lat_bound_s(IOSTATS_LAT_BUCKETS - 1) > 1e300); /* +Inf */
}

static void test_err_slot(void **state)
{
    (void)state;
    uint8_t fixed[18] = {0x70, 0, 0x05}; /* ILLEGAL REQUEST */
    uint8_t desc[8] = {0x72, 0x06};      /* UNIT ATTENTION, descriptor format */
    assert_int_equal(iostats_err_slot(0x00, NULL, 0), -1);
    assert_int_equal(iostats_err_slot(0x02, fixed, sizeof(fixed)), 5);
    assert_int_equal(iostats_err_slot(0x02, desc, sizeof(desc)), 6);
    assert_int_equal(iostats_err_slot(0x18, NULL, 0), IOSTATS_ERR_NO_SENSE_STATUS);
    assert_int_equal(iostats_err_slot(0x02, fixed, 2), IOSTATS_ERR_NO_SENSE_STATUS);
    assert_string_equal(iostats_err_name(5), "illegal_request");
    assert_string_equal(iostats_err_name(IOSTATS_ERR_NO_SENSE_STATUS), "none");
}

static struct iostats_sample sample(enum iostats_op op, uint64_t bytes, uint64_t lat_ns, int err)
{
    return (struct iostats_sample){.op = op,
                                   .bytes = bytes,
                                   .lat_ns = lat_ns,
                                   .bucket = iostats_lat_bucket(lat_ns),
                                   .err_slot = err};
}

#define PER_THREAD 200000
struct writer {
    struct iostats *s;
    int reactor;
};

static void *write_many(void *arg)
{
    struct writer *w = arg;
    struct iostats_shard *h = iostats_shard(w->s, w->reactor);
    struct iostats_sample s = sample(IOSTATS_WRITE, 4096, 5000, -1);
    for (int i = 0; i < PER_THREAD; i++) {
        iostats_cmd(h, &s);
        iostats_event(h, IOSTATS_R2T);
    }
    return NULL;
}

static void test_merge(void **state)
{
    (void)state;
    iostats_set_reactors(2);
    struct iostats *s = iostats_new();
    assert_non_null(s);
    /* reactors 0 and 1 own their shards; reactor 7 (past the count) and -1 (no reactor) share
     * the last one, with atomic adds, so nothing is lost even from two threads at once */
    struct writer w[4] = {{s, 0}, {s, 1}, {s, 7}, {s, -1}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, write_many, &w[i]), 0);
    struct iostats_values mid;
    iostats_read(s, &mid); /* while they write: never more than written */
    assert_true(mid.cmds[IOSTATS_WRITE] <= 4ull * PER_THREAD);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct iostats_sample rd = sample(IOSTATS_READ, 512, 3000000, 6);
    iostats_cmd(iostats_shard(s, 0), &rd);
    struct iostats_values v;
    iostats_read(s, &v);
    assert_int_equal(v.cmds[IOSTATS_WRITE], 4ull * PER_THREAD);
    assert_int_equal(v.bytes[IOSTATS_WRITE], 4ull * PER_THREAD * 4096);
    assert_int_equal(v.lat[IOSTATS_WRITE][iostats_lat_bucket(5000)], 4ull * PER_THREAD);
    assert_int_equal(v.lat_sum_ns[IOSTATS_WRITE], 4ull * PER_THREAD * 5000);
    assert_int_equal(v.r2ts, 4ull * PER_THREAD);
    assert_int_equal(v.cmds[IOSTATS_READ], 1);
    assert_int_equal(v.errors[6], 1);
    assert_int_equal(v.lat[IOSTATS_READ][iostats_lat_bucket(3000000)], 1);
    struct iostats_values sum = v;
    iostats_add(&sum, &v);
    assert_int_equal(sum.r2ts, 8ull * PER_THREAD);
    iostats_free(s);
    /* a missing set (out of memory at creation) counts nothing and reads 0 */
    iostats_cmd(iostats_shard(NULL, 0), &rd);
    iostats_read(NULL, &v);
    assert_int_equal(v.cmds[IOSTATS_READ], 0);
}

/* The in-flight gauge: each writer enters and leaves on its own shard, so while they run a
 * reader never sees the sum below 0 nor above what is entered at most, and it ends at what is
 * still in. */
#define QUEUE_ROUNDS 200000
static void *queue_many(void *arg)
{
    struct writer *w = arg;
    struct iostats_shard *h = iostats_shard(w->s, w->reactor);
    for (int i = 0; i < QUEUE_ROUNDS; i++) {
        iostats_queue(h, 1);
        iostats_queue(h, 1);
        iostats_queue(h, -1);
        iostats_queue(h, -1);
    }
    iostats_queue(h, 1); /* one stays in */
    return NULL;
}

static void test_queue(void **state)
{
    (void)state;
    iostats_set_reactors(2);
    struct iostats *s = iostats_new();
    assert_non_null(s);
    struct writer w[4] = {{s, 0}, {s, 1}, {s, -1}, {s, -1}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, queue_many, &w[i]), 0);
    for (int k = 0; k < 1000; k++) {
        struct iostats_values mid;
        iostats_read(s, &mid);
        assert_true(mid.in_flight <= 4 * 2); /* unsigned: a negative sum would be huge */
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct iostats_values v;
    iostats_read(s, &v);
    assert_int_equal(v.in_flight, 4);
    iostats_queue(iostats_shard(s, 1), -1);
    iostats_read(s, &v);
    assert_int_equal(v.in_flight, 3);
    iostats_queue(NULL, 1); /* no set: nothing */
    iostats_free(s);
}

/* -Dmetrics=false: no set is made, so nothing on the data path has one to count into, and a
 * reader of none sees zeros (what the daemon then does not show: target/stats.c). */
static void test_compiled_out(void **state)
{
    (void)state;
    struct iostats *s = iostats_new();
    assert_null(s);
    assert_null(iostats_shard(s, 0));
    struct iostats_sample c = {.op = IOSTATS_READ, .bytes = 4096, .err_slot = -1};
    iostats_cmd(iostats_shard(s, 0), &c);
    iostats_queue(iostats_shard(s, 0), 1);
    iostats_event(iostats_shard(s, 0), IOSTATS_R2T);
    struct iostats_values v;
    memset(&v, 0xff, sizeof(v));
    iostats_read(s, &v);
    assert_int_equal(v.cmds[IOSTATS_READ], 0);
    assert_int_equal(v.in_flight, 0);
}

int main(void)
{
    /* what every build has: bucket bounds and error slots */
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_err_slot),
    };
    /* the counting itself, which -Dmetrics=false compiles out */
    const struct CMUnitTest counting[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_queue),
    };
    const struct CMUnitTest off[] = {
        cmocka_unit_test(test_compiled_out),
    };
    int rc = cmocka_run_group_tests_name("iostats", pure, NULL, NULL);
    if (IOSTATS_ENABLED)
        return rc | cmocka_run_group_tests_name("iostats counting", counting, NULL, NULL);
    rc |= cmocka_run_group_tests_name("iostats compiled out", off, NULL, NULL);
    if (rc)
        return rc;
    printf("SKIP: built with -Dmetrics=false: the counting tests (merge, queue) do not apply\n");
    return 77; /* meson: skipped */
}
