/* Unit tests of the event-line quoting (log_quote, docs/logging.md), the log destination
 * names, and sd_notify's address checks (the datagram itself is tested with a real listener
 * in tests/integration/target_service.py: no sockets here). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/log.h"
#include "util/sdnotify.h"

static void test_quote_plain(void **state)
{
    (void)state;
    char b[64];
    assert_string_equal(log_quote(b, sizeof(b), "iqn.2026-11.org.linerate:x"),
                        "iqn.2026-11.org.linerate:x");
    assert_string_equal(log_quote(b, sizeof(b), "127.0.0.1:3260"), "127.0.0.1:3260");
    /* UTF-8 bytes are not control characters */
    assert_string_equal(log_quote(b, sizeof(b), "caf\xc3\xa9"), "caf\xc3\xa9");
}

static void test_quote_needs_quotes(void **state)
{
    (void)state;
    char b[64];
    assert_string_equal(log_quote(b, sizeof(b), ""), "\"\"");
    assert_string_equal(log_quote(b, sizeof(b), "peer closed the connection"),
                        "\"peer closed the connection\"");
    assert_string_equal(log_quote(b, sizeof(b), "a\"b"), "\"a\\\"b\"");
    assert_string_equal(log_quote(b, sizeof(b), "a\\b"), "\"a\\\\b\"");
    assert_string_equal(log_quote(b, sizeof(b), "a\nb\tc"), "\"a?b?c\"");
    assert_string_equal(log_quote(b, sizeof(b), "x=1"), "x=1"); /* '=' is fine in a value */
}

static void test_quote_truncates(void **state)
{
    (void)state;
    char b[8];
    /* Always closed and terminated: at most len - 1 bytes. */
    log_quote(b, sizeof(b), "a b c d e f g");
    assert_true(strlen(b) < sizeof(b));
    assert_int_equal(b[0], '"');
    assert_int_equal(b[strlen(b) - 1], '"');
    log_quote(b, sizeof(b), "abcdefghijkl");
    assert_string_equal(b, "abcdefg");
    /* An escape is never cut in half. */
    log_quote(b, sizeof(b), "\\\\\\\\\\\\");
    assert_string_equal(b, "\"\\\\\\\\\"");
}

static void test_dest_parse(void **state)
{
    (void)state;
    assert_int_equal(log_dest_parse("stderr"), LOG_DEST_STDERR);
    assert_int_equal(log_dest_parse("syslog"), LOG_DEST_SYSLOG);
    assert_int_equal(log_dest_parse("journal"), -1);
    assert_int_equal(log_dest_parse(""), -1);
}

static void test_notify_addresses(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(sd_notifyf_lr("READY=1"), 0); /* not run by a service manager */
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(sd_notifyf_lr("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "relative/notify", 1);
    assert_int_equal(sd_notifyf_lr("READY=1"), -EINVAL);
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    setenv("NOTIFY_SOCKET", longpath, 1);
    assert_int_equal(sd_notifyf_lr("READY=1"), -EINVAL);
    /* A path nobody listens on: the send fails, the caller is told. */
    setenv("NOTIFY_SOCKET", "/nonexistent-linerate-dir/notify", 1);
    assert_true(sd_notifyf_lr("READY=1") < 0);
    unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quote_plain),      cmocka_unit_test(test_quote_needs_quotes),
        cmocka_unit_test(test_quote_truncates),  cmocka_unit_test(test_dest_parse),
        cmocka_unit_test(test_notify_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
