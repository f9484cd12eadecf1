/* Unit tests for the --inject LIST syntax (util/inject.c) shared by linerate-bench and
 * linerate-target: accepted lists, every refusal with its reason, the report form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "util/inject.h"

static void test_accepted(void **state)
{
    (void)state;
    struct inject_spec s;
    char err[256];
    assert_int_equal(inject_parse("kill-connection=1", &s, err, sizeof(err)), 0);
    assert_true(s.kill_conn_s == 1.0 && s.digest_error == 0 && s.drop_pdu == 0);
    assert_true(inject_any(&s));
    assert_int_equal(
        inject_parse("kill-connection=0.5,digest-error=0.0001,drop-pdu=1e-3", &s, err, sizeof(err)),
        0);
    assert_true(s.kill_conn_s == 0.5 && s.digest_error == 0.0001 && s.drop_pdu == 0.001);
    /* any order; the bounds themselves */
    assert_int_equal(inject_parse("drop-pdu=0,kill-connection=3600", &s, err, sizeof(err)), 0);
    assert_true(s.kill_conn_s == 3600 && s.drop_pdu == 0);
    assert_int_equal(inject_parse("kill-connection=0.01", &s, err, sizeof(err)), 0);
    assert_int_equal(inject_parse("digest-error=0.999999", &s, err, sizeof(err)), 0);
    /* rates of 0 inject nothing */
    assert_int_equal(inject_parse("digest-error=0,drop-pdu=0.0", &s, err, sizeof(err)), 0);
    assert_false(inject_any(&s));
}

static void refused(const char *list, const char *why)
{
    struct inject_spec s;
    char err[256] = "";
    assert_int_equal(inject_parse(list, &s, err, sizeof(err)), -1);
    if (!strstr(err, why))
        fail_msg("'%s': expected '%s' in '%s'", list, why, err);
}

static void test_refused(void **state)
{
    (void)state;
    refused("", "empty list");
    refused("kill-connection", "expected NAME=VALUE");
    refused("kill-connection=1,", "expected NAME=VALUE");
    refused(",kill-connection=1", "expected NAME=VALUE");
    refused("cut=1", "unknown fault");
    refused("Kill-Connection=1", "unknown fault");
    refused("kill-connection=1,kill-connection=2", "given twice");
    /* seconds: 0.01..3600, decimal only */
    const char *bad_s[] = {"0", "0.001", "3601", "-1", "1s", "", "inf", "nan", "0x10", "1e9", "."};
    for (size_t i = 0; i < sizeof(bad_s) / sizeof(bad_s[0]); i++) {
        char list[64];
        snprintf(list, sizeof(list), "kill-connection=%s", bad_s[i]);
        refused(list, "0.01..3600");
    }
    /* rates: 0 <= RATE < 1 */
    const char *bad_r[] = {"1", "1.0", "2", "-0.1", "0.1%", "", "nan", "1e0", "one", "+0.1"};
    for (size_t i = 0; i < sizeof(bad_r) / sizeof(bad_r[0]); i++) {
        char list[64];
        snprintf(list, sizeof(list), "digest-error=%s", bad_r[i]);
        refused(list, "0 <= RATE < 1");
        snprintf(list, sizeof(list), "drop-pdu=%s", bad_r[i]);
        refused(list, "0 <= RATE < 1");
    }
    /* store delay: whole milliseconds per MiB, 1..10000 */
    const char *bad_ms[] = {"0", "0.5", "10001", "-1", "1ms", "", "nan", "2.5"};
    for (size_t i = 0; i < sizeof(bad_ms) / sizeof(bad_ms[0]); i++) {
        char list[64];
        snprintf(list, sizeof(list), "store-delay=%s", bad_ms[i]);
        refused(list, "1..10000");
    }
    /* the reason names the item */
    refused("kill-connection=1,drop-pdu=5", "'drop-pdu=5'");
}

static void test_store_delay(void **state)
{
    (void)state;
    struct inject_spec s;
    char err[256], buf[128];
    assert_int_equal(inject_parse("store-delay=1600,drop-pdu=0.5", &s, err, sizeof(err)), 0);
    assert_true(s.store_delay_ms == 1600);
    assert_true(inject_any(&s));
    inject_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "drop-pdu=0.5,store-delay=1600");
    assert_int_equal(inject_parse("store-delay=1", &s, err, sizeof(err)), 0);
    assert_int_equal(inject_parse("store-delay=10000", &s, err, sizeof(err)), 0);
}

static void test_format_and_availability(void **state)
{
    (void)state;
    struct inject_spec s;
    char err[256], buf[128];
    assert_int_equal(inject_parse("drop-pdu=0.5,kill-connection=1.5", &s, err, sizeof(err)), 0);
    inject_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "kill-connection=1.5,drop-pdu=0.5");
    memset(&s, 0, sizeof(s));
    inject_format(&s, buf, sizeof(buf));
    assert_string_equal(buf, "none");
    /* what this build applies: all three (the wire engine corrupts and drops) */
    assert_int_equal(inject_parse("kill-connection=2", &s, err, sizeof(err)), 0);
    assert_int_equal(inject_check_available(&s, err, sizeof(err)), 0);
    assert_int_equal(inject_parse("kill-connection=2,digest-error=0.1", &s, err, sizeof(err)), 0);
    assert_int_equal(inject_check_available(&s, err, sizeof(err)), 0);
    assert_int_equal(inject_parse("drop-pdu=0.1", &s, err, sizeof(err)), 0);
    assert_int_equal(inject_check_available(&s, err, sizeof(err)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_format_and_availability),
        cmocka_unit_test(test_store_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
