/* Unit tests for util/fault_guard: a read of a shared file mapping past the file's new end
 * (SIGBUS, mmap(2)) comes back as -EFAULT, again and again on one thread (the handler leaves
 * SIGBUS unblocked), on another thread too, and a read that does not fault returns 0. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/fault_guard.h"

struct rd {
    const volatile uint8_t *src;
    size_t len;
    unsigned sum;
};

static void read_all(void *arg)
{
    struct rd *r = arg;
    for (size_t i = 0; i < r->len; i += 4096)
        r->sum += r->src[i];
}

/* A 64 KiB file mapped shared, then truncated to its first page. */
static uint8_t *shrunk_map(void)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    int fd = fileno(f);
    assert_int_equal(ftruncate(fd, 65536), 0);
    uint8_t *m = mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(ftruncate(fd, 4096), 0);
    fclose(f);
    return m;
}

static void *other_thread(void *arg)
{
    struct rd r = {.src = arg, .len = 65536};
    return (void *)(intptr_t)fault_guard_run(read_all, &r);
}

static void test_shrunk_mapping(void **state)
{
    (void)state;
    uint8_t *m = shrunk_map();
    struct rd head = {.src = m, .len = 4096};
    assert_int_equal(fault_guard_run(read_all, &head), 0); /* still in the file */
    for (int k = 0; k < 3; k++) {
        struct rd r = {.src = m, .len = 65536};
        assert_int_equal(fault_guard_run(read_all, &r), -EFAULT);
    }
    pthread_t th;
    void *rc;
    assert_int_equal(pthread_create(&th, NULL, other_thread, m), 0);
    assert_int_equal(pthread_join(th, &rc), 0);
    assert_int_equal((intptr_t)rc, -EFAULT);
    assert_int_equal(fault_guard_run(read_all, &head), 0);
    munmap(m, 65536);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shrunk_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
