/* Unit tests of whole-or-nothing file replacement (util/atomic_file.h): the text and the mode
 * whatever the umask, a failed write leaving the old file and no temporary one, and the sweep
 * removing exactly the leftovers of an interrupted save (the crash itself is tested by
 * tests/integration/target_crash_state.py, which kills the daemon mid-save). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/atomic_file.h"

static char dir[64];

static void at(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void touch(const char *name)
{
    char p[256];
    at(p, sizeof(p), name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
}

static int exists(const char *name)
{
    char p[256];
    struct stat st;
    at(p, sizeof(p), name);
    return lstat(p, &st) == 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/lr-atomic-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_write_replaces_with_mode(void **state)
{
    (void)state;
    char p[256], buf[64] = {0};
    at(p, sizeof(p), "state.pr");
    touch("state.pr");
    mode_t old = umask(0);
    assert_int_equal(atomic_file_write(p, "version 1\n", 10, 0600), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof(buf)), 10);
    close(fd);
    assert_string_equal(buf, "version 1\n");
    assert_int_equal(atomic_file_sweep(p), 0); /* nothing left behind */
}

static void test_write_failure_keeps_old(void **state)
{
    (void)state;
    char p[256];
    at(p, sizeof(p), "gone/state.pr"); /* no such directory: mkstemp fails */
    assert_int_equal(atomic_file_write(p, "x", 1, 0600), -ENOENT);
    at(p, sizeof(p), "adir");
    assert_int_equal(mkdir(p, 0700), 0);
    /* rename over a directory fails: the temporary file must not stay */
    assert_true(atomic_file_write(p, "x", 1, 0600) < 0);
    assert_int_equal(atomic_file_sweep(p), 0);
}

static void test_sweep_only_leftovers(void **state)
{
    (void)state;
    char p[256], target[256], link[256];
    touch(".lun0.pr.AbC123");  /* a leftover: removed */
    touch(".lun0.pr.zz9");     /* not mkstemp's six characters */
    touch(".lun0.pr.AbC1234"); /* seven */
    touch(".lun0.pr.Ab-123");  /* not a letter or digit */
    touch("lun0.pr.AbC123");   /* no leading dot */
    touch(".lun1.pr.AbC123");  /* another file's */
    touch("outside");
    at(target, sizeof(target), "outside");
    at(link, sizeof(link), ".lun0.pr.LnK999");
    assert_int_equal(symlink(target, link), 0); /* removed itself, never followed */
    at(p, sizeof(p), "lun0.pr");
    assert_int_equal(atomic_file_sweep(p), 2);
    assert_false(exists(".lun0.pr.AbC123"));
    assert_false(exists(".lun0.pr.LnK999"));
    assert_true(exists("outside"));
    assert_true(exists(".lun0.pr.zz9"));
    assert_true(exists(".lun0.pr.AbC1234"));
    assert_true(exists(".lun0.pr.Ab-123"));
    assert_true(exists("lun0.pr.AbC123"));
    assert_true(exists(".lun1.pr.AbC123"));
    at(p, sizeof(p), "nodir/lun0.pr");
    assert_int_equal(atomic_file_sweep(p), 0); /* no directory yet: nothing to do */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_replaces_with_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_keeps_old, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_only_leftovers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
