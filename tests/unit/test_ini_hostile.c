/* The initiator library over real sockets against a small adversarial target
 * (fake_target.c): what a user of the library sees, through its public calls, when the target
 * asks for a logout (Async Message event 1, RFC 7143 §11.9.1), once or after every login.
 * Each case bounds the time it may take; the sanitizer build runs the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_target.h"
#include "initiator/ini.h"

static struct reactor *R;

static const char op_keys[] = "HeaderDigest=None\0DataDigest=None\0MaxConnections=1\0"
                              "InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=262144\0"
                              "FirstBurstLength=65536\0DefaultTime2Wait=2\0"
                              "DefaultTime2Retain=0\0MaxOutstandingR2T=1\0DataPDUInOrder=Yes\0"
                              "DataSequenceInOrder=Yes\0ErrorRecoveryLevel=0\0"
                              "MaxRecvDataSegmentLength=65536";

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct done_log {
    int calls, ok;
    enum lr_err last;
    const char *what;
    uint8_t first_byte;
};

static void on_done(void *arg, const struct lr_result *r)
{
    struct done_log *d = arg;
    d->calls++;
    d->ok += r->err == LR_OK;
    d->last = r->err;
    d->what = r->what;
}

struct until {
    struct done_log *d;
    int calls;
};

static bool calls_reached(void *arg)
{
    struct until *u = arg;
    return u->d->calls >= u->calls;
}

static bool target_done(void *arg)
{
    struct ft *f = arg;
    return atomic_load(&f->stage) >= 100;
}

static struct lr_session *login(struct ft *f, struct done_log *d)
{
    struct lr_session_opts o = {.host = "127.0.0.1",
                                .port = f->port,
                                .target_name = "iqn.2026-12.org.linerate:fake",
                                .lun = 0,
                                .cmd_timeout_ms = 10000,
                                .login_timeout_ms = 3000};
    struct lr_session *s = lr_session_create(R, &o);
    assert_non_null(s);
    assert_int_equal(lr_session_login(s, on_done, d), 0);
    struct until u = {d, 1};
    assert_true(ft_run_until(R, calls_reached, &u, 5000));
    assert_int_equal(d->last, LR_OK);
    return s;
}

static void logout_and_stop(struct ft *f, struct lr_session *s)
{
    struct done_log lo = {0};
    if (lr_session_logout(s, on_done, &lo) == 0) {
        struct until u = {&lo, 1};
        ft_run_until(R, calls_reached, &u, 3000);
    }
    ft_run_until(R, target_done, f, 3000);
    lr_session_destroy(s);
    ft_stop(f);
    if (f->failed)
        fail_msg("fake target: %s", f->why);
}

/* The target's side of the end: the Logout of the session, answered. */
static void await_logout(struct ft *f, struct ft_conn *c)
{
    static struct ft_pdu p;
    while (ft_recv(c->fd, &p, 5000) == 0) {
        if ((p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ) {
            ft_logout_rsp(c, &p);
            break;
        }
    }
    close(c->fd);
    atomic_store(&f->stage, 100);
}

/* The next SCSI Command on c (anything else is skipped); 0, or -1 if none came in ms. */
static int next_cmd(struct ft_conn *c, struct ft_pdu *p, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    while (now_ms() < deadline) {
        if (ft_recv(c->fd, p, (int)(deadline - now_ms())) < 0)
            return -1;
        if ((p->h[0] & 0x3f) == ISCSI_OP_SCSI_CMD)
            return 0;
        if ((p->h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ)
            return -1;
    }
    return -1;
}

/* ---- a logout asked for with commands in flight and waiting ---- */

/* Four commands are in (the window holds four), two answered, then the target asks for a
 * logout within 3 s and answers the other two a little later: the initiator must wait for
 * them, then log the session out, then log in anew (TSIH 0, the same ISID), where the two
 * commands that waited for the window go out, numbered from the new login's CmdSN. */
static void script_drain_then_relogin(struct ft *f)
{
    static struct ft_pdu cmd[4], p;
    struct ft_conn c;
    int fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login(f, fd, &c, op_keys, sizeof(op_keys), 4) < 0)
        return ft_fail(f, "first login");
    for (int i = 0; i < 4; i++)
        if (next_cmd(&c, &cmd[i], 5000) < 0)
            return ft_fail(f, "four commands");
    ft_read_done(&c, &cmd[0], 0x11);
    ft_read_done(&c, &cmd[1], 0x11);
    ft_async(&c, 1, 3);
    usleep(100 * 1000);
    ft_read_done(&c, &cmd[2], 0x11);
    ft_read_done(&c, &cmd[3], 0x11);
    uint8_t isid[6];
    memcpy(isid, c.isid, 6);
    /* nothing but the Logout of the session now, well within Parameter3 */
    if (ft_recv(c.fd, &p, 3000) < 0 || (p.h[0] & 0x3f) != ISCSI_OP_LOGOUT_REQ)
        return ft_fail(f, "no Logout after the Async Message");
    if ((p.h[1] & 0x7f) != ISCSI_LOGOUT_CLOSE_SESSION)
        return ft_fail(f, "the Logout is not 'close the session'");
    ft_logout_rsp(&c, &p);
    close(c.fd);
    atomic_store(&f->stage, 1);
    fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login(f, fd, &c, op_keys, sizeof(op_keys), 32) < 0)
        return ft_fail(f, "second login");
    if (c.asked_tsih != 0 || memcmp(isid, c.isid, 6))
        return ft_fail(f, "the new login is not a new session of the same ISID");
    for (uint32_t i = 0; i < 2; i++) {
        if (next_cmd(&c, &p, 5000) < 0)
            return ft_fail(f, "the two waiting commands on the new session");
        if (get_be32(p.h + BHS_CMDSN) != c.login_cmdsn + i)
            return ft_fail(f, "a waiting command kept a CmdSN of the old session");
        ft_read_done(&c, &p, 0x22);
    }
    await_logout(f, &c);
}

static void test_async_logout_drains_and_logs_in_again(void **state)
{
    (void)state;
    struct ft f;
    assert_int_equal(ft_start(&f, script_drain_then_relogin, NULL), 0);
    struct done_log d = {0};
    struct lr_session *s = login(&f, &d);
    static uint8_t buf[6][4096];
    struct done_log io = {0};
    uint64_t t0 = now_ms();
    for (int i = 0; i < 6; i++)
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_done, &io), 0);
    struct until u = {&io, 6};
    assert_true(ft_run_until(R, calls_reached, &u, 8000));
    assert_int_equal(io.ok, 6); /* none failed */
    assert_true(now_ms() - t0 < 4000);
    for (int i = 0; i < 6; i++)
        assert_int_equal(buf[i][4095], i < 4 ? 0x11 : 0x22);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 1);
    assert_int_equal(info.tsih, 0x101); /* the new session's */
    assert_int_equal(atomic_load(&f.logins), 2);
    logout_and_stop(&f, s);
}

/* A command the target never answers is not waited for past Parameter3: the Logout goes out
 * in time, the command fails saying so, and the session is back for the next one. */
static void script_unanswered(struct ft *f)
{
    static struct ft_pdu cmd[2], p;
    struct ft_conn c;
    int fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login(f, fd, &c, op_keys, sizeof(op_keys), 32) < 0)
        return ft_fail(f, "first login");
    for (int i = 0; i < 2; i++)
        if (next_cmd(&c, &cmd[i], 5000) < 0)
            return ft_fail(f, "two commands");
    ft_read_done(&c, &cmd[0], 0x11);
    uint64_t t = now_ms();
    ft_async(&c, 1, 1);
    if (ft_recv(c.fd, &p, 3000) < 0 || (p.h[0] & 0x3f) != ISCSI_OP_LOGOUT_REQ)
        return ft_fail(f, "no Logout after the Async Message");
    if (now_ms() - t > 1000)
        return ft_fail(f, "the Logout came after Parameter3");
    ft_logout_rsp(&c, &p);
    close(c.fd);
    fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login(f, fd, &c, op_keys, sizeof(op_keys), 32) < 0)
        return ft_fail(f, "second login");
    if (next_cmd(&c, &p, 5000) < 0)
        return ft_fail(f, "a command on the new session");
    ft_read_done(&c, &p, 0x33);
    await_logout(f, &c);
}

static void test_async_logout_unanswered_command_fails(void **state)
{
    (void)state;
    struct ft f;
    assert_int_equal(ft_start(&f, script_unanswered, NULL), 0);
    struct done_log d = {0};
    struct lr_session *s = login(&f, &d);
    static uint8_t buf[3][4096];
    struct done_log io[2] = {{0}, {0}};
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &io[0]), 0);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &io[1]), 0);
    struct until u0 = {&io[0], 1}, u1 = {&io[1], 1};
    assert_true(ft_run_until(R, calls_reached, &u0, 3000));
    assert_int_equal(io[0].last, LR_OK);
    assert_true(ft_run_until(R, calls_reached, &u1, 3000));
    assert_int_equal(io[1].last, LR_ERR_CONN_LOST);
    assert_string_equal(io[1].what, "terminated by the logout the target asked for");
    /* taken at once, and done on the session logged in anew */
    struct done_log again = {0};
    assert_int_equal(lr_read(s, 16, 8, 512, buf[2], on_done, &again), 0);
    struct until u2 = {&again, 1};
    assert_true(ft_run_until(R, calls_reached, &u2, 3000));
    assert_int_equal(again.last, LR_OK);
    assert_int_equal(buf[2][0], 0x33);
    logout_and_stop(&f, s);
}

/* A target that asks for a logout right after every login: the initiator stops logging in
 * after a few rounds with nothing done (each command fails, terminated by a logout or for want
 * of a session), then takes no more commands; it does not loop. */
static void script_logout_always(struct ft *f)
{
    static struct ft_pdu p;
    for (int n = 0; n < 8; n++) {
        struct ft_conn c;
        int fd = ft_accept(f, 2000);
        if (fd < 0)
            break;
        if (ft_login(f, fd, &c, op_keys, sizeof(op_keys), 32) < 0) {
            close(fd);
            break;
        }
        ft_async(&c, 1, 0);
        while (ft_recv(fd, &p, 3000) == 0)
            if ((p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ) {
                ft_logout_rsp(&c, &p);
                break;
            }
        close(fd);
    }
    atomic_store(&f->stage, 100);
}

static void test_async_logout_every_login_bounded(void **state)
{
    (void)state;
    struct ft f;
    assert_int_equal(ft_start(&f, script_logout_always, NULL), 0);
    struct done_log d = {0};
    uint64_t t0 = now_ms();
    struct lr_session *s = login(&f, &d);
    static uint8_t buf[4096];
    struct done_log io = {0};
    int issued = 0;
    /* each command fails (terminated, or no session left); then no more are taken */
    while (issued < 10 && lr_read(s, 0, 8, 512, buf, on_done, &io) == 0) {
        issued++;
        struct until u = {&io, issued};
        assert_true(ft_run_until(R, calls_reached, &u, 5000));
        assert_true(io.last == LR_ERR_CONN_LOST || io.last == LR_ERR_NO_CONN);
        assert_non_null(io.what);
    }
    assert_true(issued >= 1 && issued < 10);
    assert_true(now_ms() - t0 < 6000);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 0);
    assert_true(atomic_load(&f.logins) <= 4);
    lr_session_destroy(s);
    ft_stop(&f);
    assert_false(f.failed);
}

int main(void)
{
    R = reactor_create(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_logout_drains_and_logs_in_again),
        cmocka_unit_test(test_async_logout_unanswered_command_fails),
        cmocka_unit_test(test_async_logout_every_login_bounded),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    reactor_destroy(R);
    return rc;
}
