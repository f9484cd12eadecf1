/* Unit tests of the event-line quoting (log_quote, docs/logging.md), the log destination
 * names, and sd_notify's address checks (the datagram itself is tested with a real listener
 * in tests/integration/target_service.py: no sockets here). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void test_escape_controls(void **state)
{
    (void)state;
    char b[32];
    assert_int_equal(log_escape_controls(b, sizeof(b), "plain \"text\" caf\xc3\xa9"), 18);
    assert_string_equal(b, "plain \"text\" caf\xc3\xa9");
    log_escape_controls(b, sizeof(b), "a\nb\tc\x01\x7f");
    assert_string_equal(b, "a\\x0ab\\x09c\\x01\\x7f");
    /* truncated, terminated, an escape never cut in half */
    char t[6];
    assert_int_equal(log_escape_controls(t, sizeof(t), "ab\n\n"), 2);
    assert_string_equal(t, "ab");
}

/* What log_msg writes to stderr for one message (stderr is a pipe meanwhile). */
static void capture_line(char *out, size_t len, const char *fmt, const char *arg)
{
    int fds[2], saved = dup(STDERR_FILENO);
    assert_int_equal(pipe(fds), 0);
    assert_true(saved >= 0 && dup2(fds[1], STDERR_FILENO) >= 0);
    log_msg(LOG_LVL_ERROR, fmt, arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    ssize_t n = read(fds[0], out, len - 1);
    close(fds[0]);
    assert_true(n > 0);
    out[n] = '\0';
}

/* A peer's value with a newline and a priority prefix stays on its one line. */
static void test_sink_escapes_controls(void **state)
{
    (void)state;
    char out[1100];
    capture_line(out, sizeof(out), "negotiation: SessionType=%s: unsupported",
                 "x\n<2>FORGED line\r\x1b[31m\x7f");
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, ""); /* one line, ending with the only newline */
    assert_non_null(strstr(out, "SessionType=x\\x0a<2>FORGED line\\x0d\\x1b[31m\\x7f: unsupp"));
    /* a message longer than the line buffer still ends with one newline */
    char big[1500];
    memset(big, '\n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_line(out, sizeof(out), "%s", big);
    assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quote_plain),      cmocka_unit_test(test_quote_needs_quotes),
        cmocka_unit_test(test_quote_truncates),  cmocka_unit_test(test_dest_parse),
        cmocka_unit_test(test_notify_addresses), cmocka_unit_test(test_sink_escapes_controls),
        cmocka_unit_test(test_escape_controls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
