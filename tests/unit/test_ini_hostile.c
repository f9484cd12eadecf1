/* The initiator library over real sockets against a small adversarial target
 * (fake_target.c): what a user of the library sees, through its public calls, when the target
 * asks for a logout (Async Message event 1, RFC 7143 §11.9.1) or never answers ours, answers
 * CHAP, SendTargets, SNACKs or TASK REASSIGN with nonsense, or sends wrong or no digests;
 * and an lr_mpath device destroyed while its first login is under way.
 * Each case bounds the time it may take; the sanitizer builds run the same. docs/security.md
 * lists the cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <poll.h>
#include <sys/socket.h>

#include "alloc_fail.h"
#include "fake_target.h"
#include "initiator/ini.h"
#include "linerate/multipath.h"

static struct reactor *R;
/* When run_case() began the login: for a case that bounds the time of the whole run. */
static uint64_t login_started;

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
    uint8_t response; /* a TMF's */
};

static void on_done(void *arg, const struct lr_result *r)
{
    struct done_log *d = arg;
    d->calls++;
    d->ok += r->err == LR_OK;
    d->last = r->err;
    d->what = r->what;
    d->response = r->response;
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

/* Run the reactor until d has seen calls completions: false if not within ms. */
static bool calls_within(struct done_log *d, int calls, int ms)
{
    struct until u = {d, calls};
    return ft_run_until(R, calls_reached, &u, ms);
}

/* One 4 KiB READ at LBA 0 that completes good within 3 s, every byte fill. */
static void read_4k_ok(struct lr_session *s, uint8_t fill)
{
    static _Thread_local uint8_t buf[4096];
    struct done_log io = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &io), 0);
    assert_true(calls_within(&io, 1, 3000));
    assert_int_equal(io.last, LR_OK);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], fill);
}

static bool target_done(void *arg)
{
    struct ft *f = arg;
    return atomic_load(&f->stage) >= 100;
}

/* A session to the fake target with o's other options (a command timeout of 10 s unless
 * given), logged in. */
static struct lr_session *login_with(struct ft *f, struct lr_session_opts o)
{
    o.host = "127.0.0.1";
    o.port = f->port;
    o.target_name = "iqn.2026-12.org.linerate:fake";
    o.login_timeout_ms = 3000;
    if (!o.cmd_timeout_ms)
        o.cmd_timeout_ms = 10000;
    struct lr_session *s = lr_session_create(R, &o);
    assert_non_null(s);
    struct done_log d = {0};
    assert_int_equal(lr_session_login(s, on_done, &d), 0);
    assert_true(calls_within(&d, 1, 5000));
    assert_int_equal(d.last, LR_OK);
    return s;
}

static void logout_and_stop(struct ft *f, struct lr_session *s)
{
    struct done_log lo = {0};
    if (lr_session_logout(s, on_done, &lo) == 0)
        calls_within(&lo, 1, 3000);
    ft_run_until(R, target_done, f, 3000);
    lr_session_destroy(s);
    ft_stop(f);
    if (f->failed)
        fail_msg("fake target: %s", f->why);
}

/* The target's side of the end: the Logout of the session, answered. */
static void await_logout(struct ft *f, struct ft_conn *c)
{
    static _Thread_local struct ft_pdu p;
    while (ft_recv_c(c, &p, 5000) == 0) {
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
        if (ft_recv_c(c, p, (int)(deadline - now_ms())) < 0)
            return -1;
        if ((p->h[0] & 0x3f) == ISCSI_OP_SCSI_CMD)
            return 0;
        if ((p->h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ)
            return -1;
    }
    return -1;
}

/* A connection accepted and logged in with keys, the command window (MaxCmdSN - ExpCmdSN + 1)
 * given: its fd, or -1 after ft_fail(f, what). */
static int accept_login(struct ft *f, struct ft_conn *c, const char *keys, uint32_t len,
                        uint32_t window, const char *what)
{
    int fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login(f, fd, c, keys, len, window) < 0) {
        ft_fail(f, what);
        return -1;
    }
    return fd;
}

/* The first SCSI Command of a session just logged in, into p, and its CmdSN acknowledged in
 * the answers from now on: 0, or -1 after ft_fail. */
static int first_cmd(struct ft *f, struct ft_conn *c, struct ft_pdu *p)
{
    if (next_cmd(c, p, 5000) < 0) {
        ft_fail(f, "a command");
        return -1;
    }
    c->expcmdsn = get_be32(p->h + BHS_CMDSN) + 1;
    return 0;
}

/* The target's side of a session's last command and its end: one READ answered with fill,
 * then the session's Logout (await_logout); ft_fail(f, what) if no command comes. */
static void answer_one_then_logout(struct ft *f, struct ft_conn *c, uint8_t fill, const char *what)
{
    static _Thread_local struct ft_pdu p;
    if (next_cmd(c, &p, 5000) < 0)
        return ft_fail(f, what);
    ft_read_done(c, &p, fill);
    await_logout(f, c);
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
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 4, "first login") < 0)
        return;
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
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 32, "second login") < 0)
        return;
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

static void client_drain_then_relogin(struct ft *f, struct lr_session *s)
{
    static _Thread_local uint8_t buf[6][4096];
    struct done_log io = {0};
    uint64_t t0 = now_ms();
    for (int i = 0; i < 6; i++)
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_done, &io), 0);
    assert_true(calls_within(&io, 6, 8000));
    assert_int_equal(io.ok, 6); /* none failed */
    assert_true(now_ms() - t0 < 4000);
    for (int i = 0; i < 6; i++)
        assert_int_equal(buf[i][4095], i < 4 ? 0x11 : 0x22);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 1);
    assert_int_equal(info.tsih, 0x101); /* the new session's */
    assert_int_equal(atomic_load(&f->logins), 2);
}

/* A command the target never answers is not waited for past Parameter3: the Logout goes out
 * in time, the command fails saying so, and the session is back for the next one. */
static void script_unanswered(struct ft *f)
{
    static struct ft_pdu cmd[2], p;
    struct ft_conn c;
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 32, "first login") < 0)
        return;
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
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 32, "second login") < 0)
        return;
    answer_one_then_logout(f, &c, 0x33, "a command on the new session");
}

static void client_unanswered(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[3][4096];
    struct done_log io[2] = {{0}, {0}};
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &io[0]), 0);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &io[1]), 0);
    assert_true(calls_within(&io[0], 1, 3000));
    assert_int_equal(io[0].last, LR_OK);
    assert_true(calls_within(&io[1], 1, 3000));
    assert_int_equal(io[1].last, LR_ERR_CONN_LOST);
    assert_string_equal(io[1].what, "terminated by the logout the target asked for");
    /* taken at once, and done on the session logged in anew */
    struct done_log again = {0};
    assert_int_equal(lr_read(s, 16, 8, 512, buf[2], on_done, &again), 0);
    assert_true(calls_within(&again, 1, 3000));
    assert_int_equal(again.last, LR_OK);
    assert_int_equal(buf[2][0], 0x33);
}

/* A target that asks for a logout and is gone after it (its listener closed): the commands
 * waiting for the new login fail, after a few attempts, saying why; then none is taken. */
static void script_logout_then_gone(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys, sizeof(op_keys), 32, "login");
    if (fd < 0)
        return;
    if (next_cmd(&c, &p, 5000) < 0)
        return ft_fail(f, "a command");
    ft_async(&c, 1, 0);
    while (ft_recv(fd, &p, 3000) == 0)
        if ((p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ) {
            ft_logout_rsp(&c, &p);
            break;
        }
    shutdown(f->lfd, SHUT_RDWR); /* no more logins: connections are refused */
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_logout_then_gone(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[2][4096];
    struct done_log io[2] = {{0}, {0}};
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &io[0]), 0);
    assert_true(calls_within(&io[0], 1, 3000));
    assert_int_equal(io[0].last, LR_ERR_CONN_LOST);
    uint64_t t0 = now_ms();
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &io[1]), 0);
    assert_true(calls_within(&io[1], 1, 6000));
    assert_int_equal(io[1].last, LR_ERR_NO_CONN);
    assert_string_equal(io[1].what,
                        "the target asked for a logout and the session could not log in again");
    assert_true(now_ms() - t0 < 5000);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &io[1]), -1);
}

/* A target that asks for a logout right after every login: the initiator stops logging in
 * after a few rounds with nothing done (each command fails, terminated by a logout or for want
 * of a session), then takes no more commands; it does not loop. */
static void script_logout_always(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
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

static void client_logout_always(struct ft *f, struct lr_session *s)
{
    static _Thread_local uint8_t buf[4096];
    struct done_log io = {0};
    int issued = 0;
    /* each command fails (terminated, or no session left); then no more are taken */
    while (issued < 10 && lr_read(s, 0, 8, 512, buf, on_done, &io) == 0) {
        issued++;
        assert_true(calls_within(&io, issued, 5000));
        assert_true(io.last == LR_ERR_CONN_LOST || io.last == LR_ERR_NO_CONN);
        assert_non_null(io.what);
    }
    assert_true(issued >= 1 && issued < 10);
    assert_true(now_ms() - login_started < 6000);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 0);
    assert_true(atomic_load(&f->logins) <= 4);
}

/* ---- several connections (MC/S) ---- */

static const char op_keys_mcs[] = "HeaderDigest=None\0DataDigest=None\0MaxConnections=2\0"
                                  "InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=262144\0"
                                  "FirstBurstLength=65536\0DefaultTime2Wait=2\0"
                                  "DefaultTime2Retain=0\0MaxOutstandingR2T=1\0"
                                  "DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
                                  "ErrorRecoveryLevel=0\0MaxRecvDataSegmentLength=65536";

/* Two connections; the target asks the second to log out. Only that one goes ("close the
 * connection", its CID), nothing new is sent on it meanwhile, and its CID logs in again into
 * the same session (TSIH kept), while the first carries the commands throughout. */
static void script_mcs_one_asked(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c[2];
    uint16_t tsih = 0;
    for (int i = 0; i < 2; i++)
        if (accept_login(f, &c[i], op_keys_mcs, sizeof(op_keys_mcs), 64, "the two logins") < 0)
            return;
    tsih = c[0].tsih;
    if (c[1].asked_tsih != tsih)
        return ft_fail(f, "the second connection is not in the session");
    ft_async(&c[1], 1, 3);
    atomic_store(&f->stage, 1);
    bool asked = true, relogged = false, ended = false;
    uint64_t deadline = now_ms() + 8000;
    while (now_ms() < deadline && !ended) {
        struct pollfd pf[3] = {{.fd = c[0].fd, .events = POLLIN},
                               {.fd = c[1].fd, .events = POLLIN},
                               {.fd = f->lfd, .events = POLLIN}};
        if (poll(pf, 3, 100) <= 0)
            continue;
        if (pf[2].revents & POLLIN) {
            int fd = ft_accept(f, 1000);
            if (asked || fd < 0 || ft_login(f, fd, &c[1], op_keys_mcs, sizeof(op_keys_mcs), 64) < 0)
                return ft_fail(f, "a login other than the asked connection's again");
            if (c[1].asked_tsih != tsih || c[1].cid != 1)
                return ft_fail(f, "the asked connection came back outside the session");
            relogged = true;
            continue;
        }
        for (int i = 0; i < 2; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP)))
                continue;
            if (ft_recv(c[i].fd, &p, 1000) < 0)
                return ft_fail(f, "a connection closed unasked");
            uint8_t op = p.h[0] & 0x3f;
            if (op == ISCSI_OP_SCSI_CMD) {
                if (i == 1 && asked)
                    return ft_fail(f, "a command on the connection asked to log out");
                ft_read_done(&c[i], &p, (uint8_t)(0x40 + i));
            } else if (op == ISCSI_OP_LOGOUT_REQ && (p.h[1] & 0x7f) == 0 && relogged) {
                ft_logout_rsp(&c[i], &p); /* the end: the session's Logout */
                ended = true;
                break;
            } else if (op == ISCSI_OP_LOGOUT_REQ) {
                if (i != 1 || !asked || (p.h[1] & 0x7f) != ISCSI_LOGOUT_CLOSE_CONNECTION ||
                    get_be16(p.h + BHS_CID) != 1)
                    return ft_fail(f, "a Logout other than 'close the connection' of CID 1");
                ft_logout_rsp(&c[i], &p);
                close(c[1].fd);
                c[1].fd = -1;
                asked = false;
            }
        }
    }
    if (!relogged || !ended)
        return ft_fail(f, "the asked connection did not log in again");
    close(c[0].fd);
    close(c[1].fd);
    atomic_store(&f->stage, 100);
}

static bool stage_reached(void *arg)
{
    struct ft *f = arg;
    return atomic_load(&f->stage) >= 1;
}

static bool logins_reached_3(void *arg)
{
    struct ft *f = arg;
    return atomic_load(&f->logins) >= 3;
}

static void client_mcs_one_asked(struct ft *f, struct lr_session *s)
{
    /* the Async Message has been taken in before the commands */
    assert_true(ft_run_until(R, stage_reached, f, 5000));
    struct done_log idle = {0};
    calls_within(&idle, 1000, 100); /* 100 ms of the reactor */
    static _Thread_local uint8_t buf[8][4096];
    struct done_log io = {0};
    for (int i = 0; i < 8; i++)
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_done, &io), 0);
    assert_true(calls_within(&io, 8, 5000));
    assert_int_equal(io.ok, 8);
    assert_true(ft_run_until(R, logins_reached_3, f, 5000));
    calls_within(&idle, 1000, 100);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 2);
}

/* Two connections, and the target answers each command on the other connection first: a
 * Data-In with status for a task that is not that connection's (§5.2 allegiance). Ignored,
 * never placed in the caller's buffer; the true answer, on the command's connection, half the
 * data and the rest an underflow, completes it. */
static int data_in_half(struct ft_conn *c, const struct ft_pdu *cmd, uint8_t fill)
{
    static uint8_t data[2048];
    memset(data, fill, sizeof(data));
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(c, h, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW,
           get_be32(cmd->h + BHS_ITT));
    put_be32(h + BHS_TTT, ISCSI_RSVD_TAG);
    put_be32(h + BHS_RESIDUAL, get_be32(cmd->h + BHS_EDTL) - (uint32_t)sizeof(data));
    return ft_send_c(c, h, data, sizeof(data));
}

static void script_mcs_wrong_connection(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c[2];
    for (int i = 0; i < 2; i++)
        if (accept_login(f, &c[i], op_keys_mcs, sizeof(op_keys_mcs), 64, "the two logins") < 0)
            return;
    int answered = 0;
    uint64_t deadline = now_ms() + 8000;
    while (now_ms() < deadline) {
        struct pollfd pf[2] = {{.fd = c[0].fd, .events = POLLIN},
                               {.fd = c[1].fd, .events = POLLIN}};
        if (poll(pf, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP)))
                continue;
            if (ft_recv_c(&c[i], &p, 1000) < 0)
                return ft_fail(f, "a connection closed");
            uint8_t op = p.h[0] & 0x3f;
            if (op == ISCSI_OP_LOGOUT_REQ) {
                ft_logout_rsp(&c[i], &p);
                goto end;
            }
            if (op != ISCSI_OP_SCSI_CMD)
                continue;
            c[i].expcmdsn = get_be32(p.h + BHS_CMDSN) + 1;
            ft_read_done(&c[1 - i], &p, 0xee); /* the lie, on the other connection */
            usleep(20 * 1000);
            data_in_half(&c[i], &p, 0x11);
            answered++;
        }
    }
end:
    if (answered != 4)
        ft_fail(f, "not four commands");
    close(c[0].fd);
    close(c[1].fd);
    atomic_store(&f->stage, 100);
}

static bool four_stale(void *arg)
{
    struct lr_session *s = arg;
    return s->conns[0]->stale_pdus + s->conns[1]->stale_pdus == 4;
}

static void client_mcs_wrong_connection(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[4][4096];
    memset(buf, 0, sizeof(buf));
    struct done_log io = {0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(lr_read(s, (uint64_t)i * 8, 8, 512, buf[i], on_done, &io), 0);
    assert_true(calls_within(&io, 4, 5000));
    assert_int_equal(io.ok, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(buf[i][0], 0x11);
        assert_int_equal(buf[i][2047], 0x11);
        for (int k = 2048; k < 4096; k++)
            if (buf[i][k])
                fail_msg("read %d: byte %d from the wrong connection's answer", i, k);
    }
    /* every lie seen and let be (the last may still be on its way) */
    assert_true(ft_run_until(R, four_stale, s, 2000));
}

/* ---- CHAP from the initiator's side (RFC 7143 §12.1.3) ---- */

#define SEC_STAY (ISCSI_STAGE_SECURITY << 2)
#define SEC_LEAVE (ISCSI_LOGIN_TRANSIT | ISCSI_STAGE_SECURITY << 2 | ISCSI_STAGE_OPERATIONAL)
#define STEP(flags, lit)                                                                           \
    {                                                                                              \
        (flags), (lit), sizeof(lit)                                                                \
    }

static const char auth_chap[] = "AuthMethod=CHAP";
static const char md5_chal[] = "CHAP_A=5\0CHAP_I=1\0CHAP_C=0x00112233445566778899aabbccddeeff";
static char huge_chal[2400];
static char junk[4000];

struct chap_case {
    const char *name;
    bool mutual;
    const char *algorithms;
    struct ft_step steps[3];
    int n;
    const char *what; /* NULL: either of the two bounds of a login that does not end */
};

static void script_chap(struct ft *f)
{
    const struct chap_case *k = f->arg;
    int fd = ft_accept(f, 5000);
    if (fd < 0)
        return ft_fail(f, "no connection");
    ft_login_steps(f, fd, k->steps, k->n);
    close(fd);
    atomic_store(&f->stage, 100);
}

/* A target that cheats in CHAP or never ends the security stage: the login fails with
 * LR_ERR_LOGIN and the reason, quickly; nothing is taken on trust. */
static void test_chap_hostile_target(void **state)
{
    (void)state;
    memcpy(huge_chal, "CHAP_A=5\0CHAP_I=1\0CHAP_C=0x", 28);
    memset(huge_chal + 28, 'a', sizeof(huge_chal) - 29); /* 1185 bytes: above CHAP_CHALLENGE_MAX */
    memset(junk, 'j', sizeof(junk) - 1);
    memcpy(junk, "X-junk=", 7);
    const struct chap_case cases[] = {
        {"mutual, no CHAP_R",
         true,
         NULL,
         {STEP(SEC_STAY, auth_chap), STEP(SEC_STAY, md5_chal), {SEC_LEAVE, "", 0}},
         3,
         "the target did not answer our CHAP challenge (mutual CHAP)"},
        {"mutual, wrong CHAP_R",
         true,
         NULL,
         {STEP(SEC_STAY, auth_chap), STEP(SEC_STAY, md5_chal),
          STEP(SEC_LEAVE, "CHAP_N=tgt\0CHAP_R=0x000102030405060708090a0b0c0d0e0f")},
         3,
         "the target's CHAP_R is wrong (wrong mutual secret)"},
        {"mutual, another user",
         true,
         NULL,
         {STEP(SEC_STAY, auth_chap), STEP(SEC_STAY, md5_chal),
          STEP(SEC_LEAVE, "CHAP_N=mallory\0CHAP_R=0x000102030405060708090a0b0c0d0e0f")},
         3,
         "the target answered as another CHAP user"},
        {"mutual, challenged again instead of answering",
         true,
         NULL,
         {STEP(SEC_STAY, auth_chap), STEP(SEC_STAY, md5_chal), STEP(SEC_STAY, md5_chal)},
         3,
         "target's login keys not acceptable"}, /* CHAP_A a second time (§6.2) */
        {"huge CHAP_C",
         false,
         NULL,
         {STEP(SEC_STAY, auth_chap), {SEC_STAY, huge_chal, sizeof(huge_chal)}},
         2,
         "CHAP: the target's security keys are not acceptable"},
        {"an algorithm not offered",
         false,
         "md5",
         {STEP(SEC_STAY, auth_chap),
          STEP(SEC_STAY, "CHAP_A=7\0CHAP_I=1\0CHAP_C=0x00112233445566778899aabbccddeeff")},
         2,
         "the target chose a CHAP algorithm we did not offer"},
        {"one-way, a CHAP_R not asked for",
         false,
         NULL,
         {STEP(SEC_STAY, auth_chap), STEP(SEC_STAY, md5_chal),
          STEP(SEC_LEAVE, "CHAP_N=tgt\0CHAP_R=0x000102030405060708090a0b0c0d0e0f")},
         3,
         "the target sent CHAP_N/CHAP_R we did not ask for"},
        {"continuation without end",
         false,
         NULL,
         {{ISCSI_FLAG_CONTINUE | SEC_STAY, junk, sizeof(junk)}},
         1,
         NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct chap_case *k = &cases[i];
        struct ft f;
        assert_int_equal(ft_start(&f, script_chap, (void *)k), 0);
        struct lr_session_opts o = {.host = "127.0.0.1",
                                    .port = f.port,
                                    .target_name = "iqn.2026-12.org.linerate:fake",
                                    .login_timeout_ms = 3000,
                                    .chap_user = "ini",
                                    .chap_secret = "0123456789abcdef",
                                    .chap_mutual_user = k->mutual ? "tgt" : NULL,
                                    .chap_mutual_secret = k->mutual ? "fedcba9876543210" : NULL,
                                    .chap_algorithms = k->algorithms};
        struct lr_session *s = lr_session_create(R, &o);
        assert_non_null(s);
        struct done_log d = {0};
        uint64_t t0 = now_ms();
        assert_int_equal(lr_session_login(s, on_done, &d), 0);
        if (!calls_within(&d, 1, 5000))
            fail_msg("%s: the login did not end", k->name);
        if (d.last != LR_ERR_LOGIN || !d.what)
            fail_msg("%s: %s", k->name, lr_err_name(d.last));
        if (k->what && strcmp(d.what, k->what))
            fail_msg("%s: \"%s\"", k->name, d.what);
        if (!k->what && strcmp(d.what, "login does not converge") &&
            strcmp(d.what, "login text too long"))
            fail_msg("%s: \"%s\"", k->name, d.what);
        assert_true(now_ms() - t0 < 2000);
        lr_session_destroy(s);
        ft_stop(&f);
        if (f.failed)
            fail_msg("%s: fake target: %s", k->name, f.why);
    }
}

/* ---- SendTargets answers that never end (RFC 7143 §11.10-§11.11) ---- */

struct text_case {
    const char *name;
    uint8_t flags; /* of every Text Response */
    uint32_t len;  /* its text */
    bool silent;   /* no answer at all */
    enum lr_err err;
    const char *what;
};

static void script_text(struct ft *f)
{
    const struct text_case *k = f->arg;
    static const char op[] = "HeaderDigest=None\0DataDigest=None\0MaxRecvDataSegmentLength=65536";
    const struct ft_step steps[] = {
        STEP(SEC_LEAVE, "AuthMethod=None"),
        STEP(ISCSI_LOGIN_TRANSIT | ISCSI_STAGE_OPERATIONAL << 2 | ISCSI_STAGE_FULL_FEATURE, op)};
    int fd = ft_accept(f, 5000);
    if (fd < 0 || ft_login_steps(f, fd, steps, 2) != 2)
        return ft_fail(f, "discovery login");
    struct ft_conn c = {.fd = fd, .statsn = 2, .expcmdsn = 1, .maxcmdsn = 64};
    static _Thread_local struct ft_pdu p;
    static char text[8192];
    memset(text, 0, sizeof(text));
    for (uint32_t off = 0; off + 16 <= k->len; off += 16)
        memcpy(text + off, "X-more=abcdefgh", 16);
    for (int n = 0; n < 2000 && ft_recv(fd, &p, 3000) == 0; n++) {
        if ((p.h[0] & 0x3f) != ISCSI_OP_TEXT_REQ || k->silent)
            continue;
        uint8_t h[ISCSI_BHS_LEN];
        ft_rsp(&c, h, ISCSI_OP_TEXT_RSP, k->flags, get_be32(p.h + BHS_ITT));
        put_be32(h + BHS_TTT, 0x1234);
        if (ft_send(fd, h, text, k->len) < 0)
            break;
    }
    close(fd);
    atomic_store(&f->stage, 100);
}

struct disc_log {
    int calls;
    enum lr_err err;
    const char *what;
};

static void on_disc(void *arg, const struct lr_result *r, const char *text, uint32_t len)
{
    struct disc_log *d = arg;
    (void)text;
    (void)len;
    d->calls++;
    d->err = r->err;
    d->what = r->what;
}

static bool disc_done(void *arg)
{
    return ((struct disc_log *)arg)->calls > 0;
}

/* ---- lr_mpath destroyed during its first login ---- */

/* Path A answers the VPD 0x83 INQUIRY of lr_mpath's login (all zero: no port group), path B
 * takes its INQUIRY and never answers; each then waits for the initiator to close. */
static void script_vpd(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    bool answer = f->arg != NULL;
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 32, "login") < 0)
        return;
    if (first_cmd(f, &c, &p) < 0)
        return;
    if (answer)
        ft_read_done(&c, &p, 0);
    atomic_store(&f->stage, 1);
    while (ft_recv(c.fd, &p, 5000) == 0) {
    }
    close(c.fd);
}

struct vpd_wait {
    struct ft *b;
    struct lr_mpath *m;
};

static bool a_up_b_asked(void *arg)
{
    struct vpd_wait *w = arg;
    struct lr_mpath_path_info pi;
    return atomic_load(&w->b->stage) >= 1 && lr_mpath_path_info(w->m, 0, &pi) && pi.up;
}

/* lr_mpath_destroy while path A is up and path B's INQUIRY is still out: B's INQUIRY ends
 * aborted and the login must not go on with path A, whose session is already gone (it did:
 * an RTPG through a freed session, a crash). */
static void test_mpath_destroy_in_login(void **state)
{
    (void)state;
    struct ft a, b;
    assert_int_equal(ft_start(&a, script_vpd, (void *)1), 0);
    assert_int_equal(ft_start(&b, script_vpd, NULL), 0);
    struct lr_mpath_opts mo = {.npaths = 2};
    mo.session.target_name = "iqn.2026-12.org.linerate:hostile";
    mo.hosts[0] = mo.hosts[1] = "127.0.0.1";
    mo.ports[0] = a.port;
    mo.ports[1] = b.port;
    struct lr_mpath *m = lr_mpath_create(R, &mo);
    assert_non_null(m);
    struct done_log d = {0};
    assert_int_equal(lr_mpath_login(m, on_done, &d), 0);
    struct vpd_wait w = {&b, m};
    assert_true(ft_run_until(R, a_up_b_asked, &w, 5000));
    lr_mpath_destroy(m);
    assert_true(d.calls <= 1);
    calls_within(&(struct done_log){0}, 1, 50); /* the sessions' deferred frees */
    ft_stop(&a);
    ft_stop(&b);
    assert_false(a.failed);
    assert_false(b.failed);
}

static void test_sendtargets_without_end(void **state)
{
    (void)state;
    const struct text_case cases[] = {
        {"F=0 C=1 forever, empty", ISCSI_FLAG_CONTINUE, 0, false, LR_ERR_PROTOCOL,
         "SendTargets answer never ends"},
        {"F=0 C=0 forever, a little text", 0, 16, false, LR_ERR_PROTOCOL,
         "SendTargets answer never ends"},
        {"F=0 C=1, 8 KiB each", ISCSI_FLAG_CONTINUE, 8192, false, LR_ERR_PROTOCOL,
         "SendTargets answer too long"},
        {"no answer", ISCSI_FLAG_FINAL, 0, true, LR_ERR_TIMEOUT,
         "no complete SendTargets answer in time"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct text_case *k = &cases[i];
        struct ft f;
        assert_int_equal(ft_start(&f, script_text, (void *)k), 0);
        struct lr_session_opts o = {.host = "127.0.0.1", .port = f.port, .cmd_timeout_ms = 1000};
        struct disc_log d = {0};
        uint64_t t0 = now_ms();
        assert_int_equal(lr_discover_opts(R, &o, on_disc, &d), 0);
        if (!ft_run_until(R, disc_done, &d, 4000))
            fail_msg("%s: discovery did not end", k->name);
        if (d.err != k->err || !d.what || strcmp(d.what, k->what))
            fail_msg("%s: %s \"%s\"", k->name, lr_err_name(d.err), d.what ? d.what : "");
        assert_true(now_ms() - t0 < 3000);
        calls_within(&(struct done_log){0}, 1, 50); /* the session's deferred free */
        ft_stop(&f);
        if (f.failed)
            fail_msg("%s: fake target: %s", k->name, f.why);
    }
}

/* ---- digests on (RFC 7143 §7.8) and recovery at ERL 1 against a target that lies ---- */

static const char op_keys_dig[] = "HeaderDigest=CRC32C\0DataDigest=CRC32C\0MaxConnections=1\0"
                                  "InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=262144\0"
                                  "FirstBurstLength=65536\0DefaultTime2Wait=2\0"
                                  "DefaultTime2Retain=0\0MaxOutstandingR2T=1\0"
                                  "DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
                                  "ErrorRecoveryLevel=0\0MaxRecvDataSegmentLength=65536";

/* A Data-In with a bad data digest, then a good one, then one with a bad header digest. */
static void script_digests(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys_dig, sizeof(op_keys_dig), 32, "login");
    if (fd < 0)
        return;
    c.hd = c.dd = true;
    for (int k = 0; k < 3; k++) {
        if (next_cmd(&c, &p, 5000) < 0)
            return ft_fail(f, "a command");
        c.bad_dd = k == 0;
        c.bad_hd = k == 2;
        ft_read_done(&c, &p, 0x55);
    }
    /* the initiator drops the connection: nothing more comes */
    while (ft_recv_c(&c, &p, 3000) == 0)
        ;
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_digests(struct ft *f, struct lr_session *s)
{
    (void)f;
    struct done_log d = {0};
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_true(info.header_digest && info.data_digest);
    static _Thread_local uint8_t buf[4096];
    const enum lr_err want[3] = {LR_ERR_PROTOCOL, LR_OK, LR_ERR_CONN_LOST};
    const char *what[3] = {"data digest error on Data-In", NULL, "header digest error"};
    for (int k = 0; k < 3; k++) {
        struct done_log io = {0};
        uint64_t t0 = now_ms();
        assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &io), 0);
        assert_true(calls_within(&io, 1, 3000));
        assert_true(now_ms() - t0 < 1000);
        assert_int_equal(io.last, want[k]);
        if (what[k])
            assert_string_equal(io.what, what[k]);
    }
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 0);
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &d), -1);
}

static const char op_keys_erl1[] = "HeaderDigest=None\0DataDigest=None\0MaxConnections=1\0"
                                   "InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=262144\0"
                                   "FirstBurstLength=65536\0DefaultTime2Wait=2\0"
                                   "DefaultTime2Retain=0\0MaxOutstandingR2T=1\0"
                                   "DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
                                   "ErrorRecoveryLevel=1\0MaxRecvDataSegmentLength=65536";

/* ERL 1: a READ's first Data-In never comes; every SNACK for it is answered with the second
 * one again. The initiator keeps asking (§7.9) but not past the command timeout. */
static void script_snack_liar(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    static uint8_t data[4096];
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys_erl1, sizeof(op_keys_erl1), 32, "login");
    if (fd < 0 || first_cmd(f, &c, &p) < 0)
        return;
    uint32_t itt = get_be32(p.h + BHS_ITT);
    uint8_t h[ISCSI_BHS_LEN];
    uint32_t statsn = c.statsn;
    int snacks = 0;
    for (int n = 0; n < 5000; n++) {
        /* DataSN 1 (offset 4096) with the status; DataSN 0 never */
        c.statsn = statsn;
        ft_rsp(&c, h, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS, itt);
        put_be32(h + BHS_TTT, ISCSI_RSVD_TAG);
        put_be32(h + BHS_DATASN, 1);
        put_be32(h + BHS_BUFFER_OFFSET, 4096);
        if (ft_send_c(&c, h, data, sizeof(data)) < 0)
            break;
        bool again = false;
        while (!again && ft_recv_c(&c, &p, 3000) == 0) {
            uint8_t op = p.h[0] & 0x3f;
            if (op == ISCSI_OP_SNACK) {
                snacks++;
                again = true;
            } else if (op == ISCSI_OP_NOP_OUT && get_be32(p.h + BHS_ITT) != ISCSI_RSVD_TAG) {
                uint8_t r[ISCSI_BHS_LEN];
                c.statsn = statsn + 1;
                ft_rsp(&c, r, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL, get_be32(p.h + BHS_ITT));
                c.statsn--; /* a ping's answer takes no StatSN */
                put_be32(r + BHS_TTT, ISCSI_RSVD_TAG);
                ft_send_c(&c, r, NULL, 0);
            }
        }
        if (!again)
            break;
    }
    if (snacks == 0)
        ft_fail(f, "no SNACK for the missing Data-In");
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_snack_liar(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[8192];
    struct done_log io = {0};
    uint64_t t0 = now_ms();
    assert_int_equal(lr_read(s, 0, 16, 512, buf, on_done, &io), 0);
    assert_true(calls_within(&io, 1, 5000));
    assert_int_not_equal(io.last, LR_OK);
    assert_non_null(io.what);
    assert_true(now_ms() - t0 < 3500);
}

/* A connection logged in with keys (a window of 32) and its first command in p: its fd, or -1
 * after ft_fail. */
static int login_first_cmd(struct ft *f, struct ft_conn *c, const char *keys, uint32_t len,
                           struct ft_pdu *p)
{
    int fd = accept_login(f, c, keys, len, 32, "login");
    return fd < 0 || first_cmd(f, c, p) < 0 ? -1 : fd;
}

/* An R2T (R2TSN 0) of the task itt for len bytes at off, into h. */
static void r2t_hdr(struct ft_conn *c, uint8_t *h, uint32_t itt, uint32_t ttt, uint32_t off,
                    uint32_t len)
{
    ft_rsp(c, h, ISCSI_OP_R2T, ISCSI_FLAG_FINAL, itt);
    c->statsn--; /* an R2T carries StatSN without taking it */
    put_be32(h + BHS_TTT, ttt);
    put_be32(h + BHS_R2TSN, 0);
    put_be32(h + BHS_BUFFER_OFFSET, off);
    put_be32(h + BHS_DESIRED_LEN, len);
}

/* ERL 1: recovery R2Ts for data already sent, without end, and the initiator's Data-Out never
 * read. What waits unsent is bounded (INI_RESEND_BACKLOG_MAX): the connection fails, and the
 * WRITE with it, saying why. */
static void script_r2t_flood(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = login_first_cmd(f, &c, op_keys_erl1, sizeof(op_keys_erl1), &p);
    if (fd < 0)
        return;
    uint32_t itt = get_be32(p.h + BHS_ITT);
    /* The initiator gives up once 64 MiB of asked-for data is unsent, about 1100 of these R2Ts
     * past what the sockets hold. The bound is far beyond that and beyond what the socket
     * buffers take without the initiator reading (about 1 MiB of R2Ts fits in them), so a
     * loaded machine that lets this thread run ahead cannot make an honest initiator fail. */
    int n = 0;
    for (; n < 1000000; n++) {
        uint8_t h[ISCSI_BHS_LEN];
        r2t_hdr(&c, h, itt, 0x100 + (uint32_t)n, 0, 65536);
        if (ft_send_c(&c, h, NULL, 0) < 0)
            break; /* the initiator gave up */
    }
    if (n == 1000000)
        ft_fail(f, "a million recovery R2Ts taken");
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_r2t_flood(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[262144];
    struct done_log io = {0};
    uint64_t t0 = now_ms();
    assert_int_equal(lr_write(s, 0, 512, 512, buf, on_done, &io), 0);
    assert_true(calls_within(&io, 1, 8000));
    assert_int_equal(io.last, LR_ERR_CONN_LOST);
    assert_string_equal(io.what, "the target asks for data again faster than it reads it");
    assert_true(now_ms() - t0 < 8000);
}

/* A connection logged in with keys that set both digests on, and its first command in p: its
 * fd, or -1 after ft_fail. */
static int accept_digests_cmd(struct ft *f, struct ft_conn *c, const char *keys, uint32_t len,
                              struct ft_pdu *p)
{
    int fd = accept_login(f, c, keys, len, 32, "login");
    if (fd < 0)
        return -1;
    c->hd = c->dd = true;
    return first_cmd(f, c, p) < 0 ? -1 : fd;
}

/* Digests negotiated, then a Data-In sent without them: the initiator takes the first four
 * bytes of the data for the header digest (§11.1), which cannot match: that connection fails
 * at once, the READ with it, and no byte of the data lands in the user's buffer. */
static void script_digests_omitted(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_digests_cmd(f, &c, op_keys_dig, sizeof(op_keys_dig), &p);
    if (fd < 0)
        return;
    c.hd = c.dd = false; /* what it sends from now on: no digests */
    ft_read_done(&c, &p, 0x77);
    c.hd = c.dd = true;
    while (ft_recv_c(&c, &p, 3000) == 0)
        ;
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_digests_omitted(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[4096];
    struct done_log io = {0};
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &io), 0);
    assert_true(calls_within(&io, 1, 3000));
    assert_int_equal(io.last, LR_ERR_CONN_LOST);
    assert_string_equal(io.what, "header digest error");
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xee);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 0);
}

/* Digests negotiated, then a status without data sent without its header digest, and nothing
 * after it: the initiator waits for four bytes that never come. It must not wait for ever: the
 * READ fails at its command timeout, with its connection, never reported good. */
static void script_digest_omitted_then_silent(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_digests_cmd(f, &c, op_keys_dig, sizeof(op_keys_dig), &p);
    if (fd < 0)
        return;
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(&c, h, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, get_be32(p.h + BHS_ITT));
    c.hd = false;
    ft_send_c(&c, h, NULL, 0);
    c.hd = true;
    while (ft_recv_c(&c, &p, 5000) == 0)
        ;
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_digest_omitted_then_silent(struct ft *f, struct lr_session *s)
{
    static _Thread_local uint8_t buf[4096];
    struct done_log io = {0};
    assert_int_equal(lr_read(s, 0, 8, 512, buf, on_done, &io), 0);
    assert_true(calls_within(&io, 1, 4000));
    assert_int_equal(io.last, LR_ERR_TIMEOUT);
    assert_string_equal(io.what, "command timeout");
    /* the target saw its connection closed well before its own 5 s */
    assert_true(ft_run_until(R, target_done, f, 3000));
}

/* The keys of a session with one connection, all but digests, ErrorRecoveryLevel and the times. */
#define KEYS_ONE_CONN                                                                              \
    "MaxConnections=1\0InitialR2T=Yes\0ImmediateData=Yes\0MaxBurstLength=262144\0"                 \
    "FirstBurstLength=65536\0MaxOutstandingR2T=1\0DataPDUInOrder=Yes\0"                            \
    "DataSequenceInOrder=Yes\0MaxRecvDataSegmentLength=65536\0"

static const char op_keys_dig_erl1[] = "HeaderDigest=CRC32C\0DataDigest=CRC32C\0" KEYS_ONE_CONN
                                       "DefaultTime2Wait=2\0DefaultTime2Retain=0\0"
                                       "ErrorRecoveryLevel=1";
static const char op_keys_erl2[] = "HeaderDigest=None\0DataDigest=None\0" KEYS_ONE_CONN
                                   "DefaultTime2Wait=0\0DefaultTime2Retain=20\0"
                                   "ErrorRecoveryLevel=2";

static void data_in(struct ft_conn *c, uint32_t itt, uint32_t sn, uint8_t fill)
{
    static uint8_t data[4096];
    uint8_t h[ISCSI_BHS_LEN];
    memset(data, fill, sizeof(data));
    ft_rsp(c, h, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL, itt);
    c->statsn--; /* no status in it: no StatSN taken */
    put_be32(h + BHS_STATSN, 0);
    put_be32(h + BHS_TTT, ISCSI_RSVD_TAG);
    put_be32(h + BHS_DATASN, sn);
    ft_send_c(c, h, data, sizeof(data));
}

/* ERL 1 with digests: the Data-In's data digest is wrong (0x99 on the wire, damaged), then the
 * GOOD status. §7.8 / §11.7.2: the initiator discards that PDU and asks for it again with a
 * Data SNACK; the READ completes with the data sent again (0x66), never with the damaged one,
 * nor before it came. */
static void script_erl1_data_digest(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    if (accept_digests_cmd(f, &c, op_keys_dig_erl1, sizeof(op_keys_dig_erl1), &p) < 0)
        return;
    uint32_t itt = get_be32(p.h + BHS_ITT);
    c.bad_dd = true;
    data_in(&c, itt, 0, 0x99);
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(&c, h, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt);
    put_be32(h + BHS_EXPDATASN, 1);
    ft_send_c(&c, h, NULL, 0);
    bool snacked = false;
    while (!snacked && ft_recv_c(&c, &p, 3000) == 0)
        snacked = (p.h[0] & 0x3f) == ISCSI_OP_SNACK && (p.h[1] & 0x0f) == 0 &&
                  get_be32(p.h + BHS_ITT) == itt;
    if (!snacked)
        return ft_fail(f, "no Data SNACK for the Data-In with a bad digest");
    data_in(&c, itt, 0, 0x66);
    await_logout(f, &c);
}

static void client_erl1_data_digest(struct ft *f, struct lr_session *s)
{
    (void)f;
    read_4k_ok(s, 0x66);
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 1);
}

/* ---- a Logout the target never answers ---- */

/* The target reads the Logout and stays silent, its connection open: the initiator gives up
 * after logout_timeout_ms, closes the connection and completes the logout with an error. */
static void script_logout_silent(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys, sizeof(op_keys), 32, "login");
    if (fd < 0)
        return;
    bool seen = false;
    while (ft_recv_c(&c, &p, 5000) == 0)
        seen = seen || (p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ;
    if (!seen)
        ft_fail(f, "no Logout");
    close(fd);
    atomic_store(&f->stage, 100);
}

static void client_logout_silent(struct ft *f, struct lr_session *s)
{
    struct done_log lo = {0};
    assert_int_equal(lr_session_logout(s, on_done, &lo), 0);
    assert_true(calls_within(&lo, 1, 3000));
    assert_int_equal(lo.last, LR_ERR_TIMEOUT);
    assert_string_equal(lo.what, "logout timed out");
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 0);
    /* the target saw the connection close (its read ended before its own 5 s) */
    assert_true(ft_run_until(R, target_done, f, 3000));
}

/* The target asks for a logout (Async event 1), reads the Logout and stays silent: the
 * initiator drops that connection after logout_timeout_ms, logs in again as §11.9.1 wants,
 * and the next command is done on the new session. */
static void script_asked_logout_silent(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys, sizeof(op_keys), 32, "first login");
    if (fd < 0)
        return;
    ft_async(&c, 1, 0);
    bool seen = false;
    while (ft_recv_c(&c, &p, 5000) == 0)
        seen = seen || (p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ;
    close(fd);
    if (!seen)
        return ft_fail(f, "no Logout after the Async Message");
    atomic_store(&f->stage, 1); /* the initiator closed it */
    if (accept_login(f, &c, op_keys, sizeof(op_keys), 32, "second login") < 0)
        return;
    answer_one_then_logout(f, &c, 0x33, "a command on the new session");
}

static void client_asked_logout_silent(struct ft *f, struct lr_session *s)
{
    /* dropped well before the 5 s the target waits */
    assert_true(ft_run_until(R, stage_reached, f, 3000));
    read_4k_ok(s, 0x33);
    assert_int_equal(atomic_load(&f->logins), 2);
}

/* ---- ERL 2: answers about tasks and connections that do not exist ---- */

/* TASK REASSIGN answers (§11.6.1) for a reassignment never asked: under the ITT our TASK
 * REASSIGN of the task itt would carry (its slot, 0, being the session's first), another
 * slot's, the command's own ITT and an ITT of nothing, each Function Complete, "task does not
 * exist" (which would have the command sent again) and "function rejected" (which would fail
 * it). */
static void tmf_answers_for_nothing(struct ft_conn *c, uint32_t itt)
{
    const uint32_t bogus[] = {INI_TMF_ITT, INI_TMF_ITT + 1, itt, 0x12345678u};
    const uint8_t rsp[] = {ISCSI_TMF_RSP_COMPLETE, ISCSI_TMF_RSP_NO_TASK, ISCSI_TMF_RSP_REJECTED};
    for (size_t i = 0; i < sizeof(bogus) / sizeof(bogus[0]); i++)
        for (size_t k = 0; k < sizeof(rsp); k++) {
            uint8_t h[ISCSI_BHS_LEN];
            ft_rsp(c, h, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, bogus[i]);
            h[BHS_RESPONSE] = rsp[k];
            ft_send_c(c, h, NULL, 0);
        }
}

/* With a READ outstanding: TASK REASSIGN answers for nothing (tmf_answers_for_nothing) and an
 * Async event 2 naming a CID the session does not have. None of them may end, complete or
 * send again anything: the READ then completes once, with its data, on the connection still
 * up, and it alone was sent. */
static void script_erl2_nonsense(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = accept_login(f, &c, op_keys_erl2, sizeof(op_keys_erl2), 32, "login");
    if (fd < 0 || first_cmd(f, &c, &p) < 0)
        return;
    uint32_t itt = get_be32(p.h + BHS_ITT);
    tmf_answers_for_nothing(&c, itt);
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(&c, h, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG);
    h[BHS_ASYNC_EVENT] = 2;
    put_be16(h + BHS_ASYNC_PARAM1, (uint16_t)(c.cid + 7)); /* no such connection */
    put_be16(h + BHS_ASYNC_PARAM2, 0);
    put_be16(h + BHS_ASYNC_PARAM3, 20);
    ft_send_c(&c, h, NULL, 0);
    atomic_store(&f->stage, 1);
    ft_read_done(&c, &p, 0x44);
    tmf_answers_for_nothing(&c, itt); /* again, now that the task is gone */
    answer_one_then_logout(f, &c, 0x45, "a second command on the same connection");
}

static void client_erl2_nonsense(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[2][4096];
    struct done_log io = {0};
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.erl, 2);
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &io), 0);
    assert_true(calls_within(&io, 1, 3000));
    assert_int_equal(io.last, LR_OK);
    assert_int_equal(buf[0][4095], 0x44);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &io), 0);
    assert_true(calls_within(&io, 2, 3000));
    assert_int_equal(io.ok, 2); /* each completed once, both good */
    assert_int_equal(buf[1][0], 0x45);
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_up, 1);
}

/* ERL 2: the connection carrying a READ is lost; on the new connection the target answers
 * our TASK REASSIGN (§11.5.1) with Function Complete under another ITT, and never for the
 * task. The wrong answer is ignored; the READ fails once, at its command timeout, not kept for
 * reassignment after it, and its buffer untouched; the session logs in again and goes on. */
static void script_erl2_reassign_nonsense(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c, n;
    int fd = accept_login(f, &c, op_keys_erl2, sizeof(op_keys_erl2), 32, "login");
    if (fd < 0 || first_cmd(f, &c, &p) < 0)
        return;
    close(fd); /* the connection is lost with the READ on it */
    if (accept_login(f, &n, op_keys_erl2, sizeof(op_keys_erl2), 32, "second login") < 0)
        return;
    int tmfs = 0;
    while (ft_recv_c(&n, &p, 5000) == 0) { /* until the initiator drops it */
        uint8_t h[ISCSI_BHS_LEN];
        if ((p.h[0] & 0x3f) == ISCSI_OP_TMF_REQ && (p.h[1] & 0x7f) == ISCSI_TMF_TASK_REASSIGN) {
            tmfs++;
            ft_rsp(&n, h, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, get_be32(p.h + BHS_ITT) + 1);
            h[BHS_RESPONSE] = ISCSI_TMF_RSP_COMPLETE;
            ft_send_c(&n, h, NULL, 0);
        }
    }
    close(n.fd);
    if (tmfs != 1)
        return ft_fail(f, "not one TASK REASSIGN");
    if (accept_login(f, &n, op_keys_erl2, sizeof(op_keys_erl2), 32, "third login") < 0)
        return;
    answer_one_then_logout(f, &n, 0x55, "a command after the timeout");
}

static void client_erl2_reassign_nonsense(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[2][4096];
    struct done_log io = {0}, again = {0};
    memset(buf[0], 0xee, sizeof(buf[0]));
    uint64_t t0 = now_ms();
    assert_int_equal(lr_read(s, 0, 8, 512, buf[0], on_done, &io), 0);
    assert_true(calls_within(&io, 1, 5000));
    assert_true(now_ms() - t0 < 5000);
    assert_int_equal(io.last, LR_ERR_TIMEOUT);
    assert_string_equal(io.what, "command timeout");
    for (size_t i = 0; i < sizeof(buf[0]); i++)
        assert_int_equal(buf[0][i], 0xee);
    assert_int_equal(lr_read(s, 8, 8, 512, buf[1], on_done, &again), 0);
    assert_true(calls_within(&again, 1, 5000));
    assert_int_equal(again.last, LR_OK);
    assert_int_equal(buf[1][0], 0x55);
    assert_int_equal(io.calls, 1); /* the first never completed again */
}

/* ---- ABORT TASK (lr_task_abort) ---- */

#define ABORT_FILL 0x5c

/* A WRITE of 128 KiB (64 KiB immediate), then its ABORT TASK: the target sends an R2T for the
 * rest it issued before the abort and the TMF's Function Complete in one write, so the
 * initiator reads both at once. The Data-Out it owes for the R2T must carry the data the
 * WRITE was given, not what the caller put in the buffer once the task ended (it used to be
 * sent from there, after the caller got the buffer back: a use after free). */
/* The target's side of a session's end after its last WRITE completed: every PDU up to the
 * Logout (answered) read, and any Data-Out among them must carry the caller's data
 * (ABORT_FILL), never what its callback wrote into the buffer it got back (0xdd). */
static void data_out_unread_then_logout(struct ft *f, struct ft_conn *c, struct ft_pdu *p)
{
    while (ft_recv_c(c, p, 5000) == 0) {
        if ((p->h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ) {
            ft_logout_rsp(c, p);
            break;
        }
        if ((p->h[0] & 0x3f) != ISCSI_OP_DATA_OUT)
            continue;
        for (uint32_t i = 0; i < p->dlen; i++)
            if (p->data[i] != ABORT_FILL)
                return ft_fail(f, "Data-Out sent from the caller's buffer after its task ended");
    }
    close(c->fd);
    atomic_store(&f->stage, 100);
}

/* The test's go-ahead to a script waiting at a stage (write_rsp_go). */
static atomic_int script_go;

/* A WRITE of 128 KiB: its first 64 KiB go as immediate data with the command; the target
 * answers with an R2T for the other 64 KiB and, in the same send, a SCSI Response GOOD (a
 * hostile or broken target: the status before the data it asked for). The initiator's sending
 * is held meanwhile (as a target that stops reading would hold it), so the Data-Out for the
 * R2T is still queued when the response completes the WRITE and the caller's callback reuses
 * the buffer. Once sending goes on, no Data-Out may be read from that buffer. */
static void write_r2t_rsp_batch(struct ft *f, const char *keys, uint32_t len)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = login_first_cmd(f, &c, keys, len, &p);
    if (fd < 0)
        return;
    if ((p.h[0] & 0x3f) != ISCSI_OP_SCSI_CMD || get_be32(p.h + BHS_EDTL) != 131072 ||
        p.dlen != 65536)
        return ft_fail(f, "a WRITE of 128 KiB with 64 KiB of immediate data");
    uint32_t itt = get_be32(p.h + BHS_ITT);
    atomic_store(&f->stage, 1);
    for (int i = 0; i < 5000 && !atomic_load(&script_go); i++)
        usleep(1000);
    uint8_t two[2 * ISCSI_BHS_LEN];
    r2t_hdr(&c, two, itt, 0x78, 65536, 65536);
    ft_rsp(&c, two + ISCSI_BHS_LEN, ISCSI_OP_SCSI_RSP, ISCSI_FLAG_FINAL, itt);
    if (send(fd, two, sizeof(two), MSG_NOSIGNAL) != (ssize_t)sizeof(two))
        return ft_fail(f, "send");
    data_out_unread_then_logout(f, &c, &p);
}

static void script_write_r2t_rsp_batch(struct ft *f)
{
    write_r2t_rsp_batch(f, op_keys, sizeof(op_keys));
}

static void script_write_r2t_rsp_batch_erl1(struct ft *f)
{
    write_r2t_rsp_batch(f, op_keys_erl1, sizeof(op_keys_erl1));
}

static uint8_t abort_buf[131072];

/* The caller's done(): the buffer is its own again, and reused. */
static void on_done_reuse(void *arg, const struct lr_result *r)
{
    memset(abort_buf, 0xdd, sizeof(abort_buf));
    on_done(arg, r);
}

static void client_write_r2t_rsp_batch(struct ft *f, struct lr_session *s)
{
    memset(abort_buf, ABORT_FILL, sizeof(abort_buf));
    atomic_store(&script_go, 0);
    struct done_log io = {0};
    assert_int_equal(lr_write(s, 0, 256, 512, abort_buf, on_done_reuse, &io), 0);
    assert_true(ft_run_until(R, stage_reached, f, 5000)); /* the command is in */
    lr_session_conn_tx_hold(s, 0, true);
    atomic_store(&script_go, 1);
    assert_true(calls_within(&io, 1, 5000));
    assert_int_equal(io.last, LR_OK); /* what the target said */
    lr_session_conn_tx_hold(s, 0, false);
}

static void script_abort_r2t_batch(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c;
    int fd = login_first_cmd(f, &c, op_keys, sizeof(op_keys), &p);
    if (fd < 0)
        return;
    uint32_t itt = get_be32(p.h + BHS_ITT);
    do {
        if (ft_recv_c(&c, &p, 5000) < 0)
            return ft_fail(f, "no ABORT TASK");
    } while ((p.h[0] & 0x3f) != ISCSI_OP_TMF_REQ);
    uint8_t two[2 * ISCSI_BHS_LEN];
    r2t_hdr(&c, two, itt, 0x77, 65536, 65536);
    uint8_t *h = two + ISCSI_BHS_LEN;
    ft_rsp(&c, h, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, get_be32(p.h + BHS_ITT));
    h[BHS_RESPONSE] = ISCSI_TMF_RSP_COMPLETE;
    if (send(fd, two, sizeof(two), MSG_NOSIGNAL) != (ssize_t)sizeof(two))
        return ft_fail(f, "send");
    atomic_store(&f->stage, 1);
    /* the Data-Out for the R2T is of no use once the task is aborted (§4.2.3.3): dropped, or
     * at least never read from the buffer the caller got back */
    data_out_unread_then_logout(f, &c, &p);
}

static void client_abort_r2t_batch(struct ft *f, struct lr_session *s)
{
    (void)f;
    memset(abort_buf, ABORT_FILL, sizeof(abort_buf));
    struct done_log io = {0}, ab = {0};
    uint32_t tag;
    assert_int_equal(lr_write_tag(s, 0, 256, 512, abort_buf, on_done_reuse, &io, &tag), 0);
    assert_int_equal(lr_task_abort(s, tag, on_done, &ab), 0);
    assert_true(calls_within(&ab, 1, 5000));
    assert_int_equal(ab.last, LR_OK);
    assert_int_equal(io.calls, 1);
    assert_int_equal(io.last, LR_ERR_TASK_ABORTED);
    assert_true(ft_run_until(R, stage_reached, f, 5000));
}

/* ERL 2: the connection carrying a READ is lost with the READ's ABORT TASK asked; on the new
 * connection the ABORT TASK goes in place of the TASK REASSIGN, and the target answers it
 * "task still allegiant" (§11.6.1: it has not let go of the old connection yet) the first
 * time. The orphan is not the new connection's then: the ABORT TASK is asked again, answered
 * Function Complete, and the READ ends aborted (it used to sit until its command timeout). */
static void script_erl2_abort_allegiant(struct ft *f)
{
    static _Thread_local struct ft_pdu p;
    struct ft_conn c, n;
    int fd = login_first_cmd(f, &c, op_keys_erl2, sizeof(op_keys_erl2), &p);
    if (fd < 0)
        return;
    close(fd); /* the connection is lost with the READ on it */
    if (accept_login(f, &n, op_keys_erl2, sizeof(op_keys_erl2), 32, "second login") < 0)
        return;
    int aborts = 0;
    while (aborts < 2 && ft_recv_c(&n, &p, 5000) == 0) {
        if ((p.h[0] & 0x3f) == ISCSI_OP_LOGOUT_REQ) { /* of the lost connection's CID */
            ft_logout_rsp(&n, &p);
            continue;
        }
        if ((p.h[0] & 0x3f) != ISCSI_OP_TMF_REQ)
            continue;
        if ((p.h[1] & 0x7f) != ISCSI_TMF_ABORT_TASK)
            return ft_fail(f, "a TMF other than ABORT TASK");
        uint8_t h[ISCSI_BHS_LEN];
        ft_rsp(&n, h, ISCSI_OP_TMF_RSP, ISCSI_FLAG_FINAL, get_be32(p.h + BHS_ITT));
        h[BHS_RESPONSE] = aborts++ ? ISCSI_TMF_RSP_COMPLETE : ISCSI_TMF_RSP_TASK_ALLEGIANT;
        ft_send_c(&n, h, NULL, 0);
    }
    if (aborts < 2)
        return ft_fail(f, "the ABORT TASK not asked again");
    await_logout(f, &n);
}

static void client_erl2_abort_allegiant(struct ft *f, struct lr_session *s)
{
    (void)f;
    static _Thread_local uint8_t buf[4096];
    const uint8_t cdb[10] = {0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0}; /* READ (10), 8 blocks */
    struct done_log io = {0}, ab = {0};
    uint32_t tag;
    uint64_t t0 = now_ms();
    assert_int_equal(
        lr_scsi_tag(s, cdb, sizeof(cdb), LR_DIR_READ, buf, sizeof(buf), on_done, &io, &tag), 0);
    assert_int_equal(lr_task_abort(s, tag, on_done, &ab), 0);
    assert_true(calls_within(&ab, 1, 5000));
    assert_int_equal(ab.last, LR_OK);
    assert_int_equal(ab.response, ISCSI_TMF_RSP_COMPLETE);
    assert_int_equal(io.calls, 1);
    assert_int_equal(io.last, LR_ERR_TASK_ABORTED);
    assert_true(now_ms() - t0 < 5000); /* not the command timeout (10 s) */
}

/* ---- the cases with a session logged in: the target's script, then the user's side ---- */

/* ---- no memory for a connection ---- */

/* Two connections asked and granted, and no memory for the second: the login completes with
 * the first alone (it used to wait for the second's login forever), which carries the I/O. */
static void script_second_conn_no_memory(struct ft *f)
{
    struct ft_conn c;
    if (accept_login(f, &c, op_keys_mcs, sizeof(op_keys_mcs), 64, "the leading login") < 0)
        return;
    answer_one_then_logout(f, &c, 0x5a, "a command on the one connection");
}

static void fail_second_conn(void)
{
    af_fail_sized(sizeof(struct ini_conn), 1);
}

static void client_second_conn_no_memory(struct ft *f, struct lr_session *s)
{
    (void)f;
    assert_true(af_fired());
    struct lr_session_info info;
    lr_session_get_info(s, &info);
    assert_int_equal(info.connections_granted, 2);
    assert_int_equal(info.connections_up, 1);
    read_4k_ok(s, 0x5a);
}

struct hostile_case {
    const char *name;
    ft_script_fn script;                                /* the fake target */
    struct lr_session_opts opts;                        /* for login_with() */
    void (*client)(struct ft *f, struct lr_session *s); /* once logged in */
    bool logout;                /* the end: the session's Logout, else only destroyed */
    void (*before_login)(void); /* e.g. an allocation made to fail (alloc_fail.h) */
};

static const struct hostile_case cases[] = {
    {.name = "test_async_logout_drains_and_logs_in_again",
     .script = script_drain_then_relogin,
     .client = client_drain_then_relogin,
     .logout = true},
    {.name = "test_async_logout_unanswered_command_fails",
     .script = script_unanswered,
     .client = client_unanswered,
     .logout = true},
    {.name = "test_async_logout_every_login_bounded",
     .script = script_logout_always,
     .client = client_logout_always},
    {.name = "test_async_logout_target_gone",
     .script = script_logout_then_gone,
     .client = client_logout_then_gone},
    {.name = "test_mcs_async_logout_one_connection",
     .script = script_mcs_one_asked,
     .opts = {.connections = 2},
     .client = client_mcs_one_asked,
     .logout = true},
    {.name = "test_mcs_answer_on_wrong_connection",
     .script = script_mcs_wrong_connection,
     .opts = {.connections = 2},
     .client = client_mcs_wrong_connection,
     .logout = true},
    {.name = "test_digest_errors_from_target",
     .script = script_digests,
     .opts = {.header_digest = true, .data_digest = true, .cmd_timeout_ms = 5000},
     .client = client_digests},
    {.name = "test_erl1_snack_answered_wrong",
     .script = script_snack_liar,
     .opts = {.error_recovery_level = 1, .cmd_timeout_ms = 1500},
     .client = client_snack_liar},
    {.name = "test_erl1_recovery_r2t_flood_bounded",
     .script = script_r2t_flood,
     .opts = {.error_recovery_level = 1, .cmd_timeout_ms = 20000},
     .client = client_r2t_flood},
    {.name = "test_digests_negotiated_then_omitted",
     .script = script_digests_omitted,
     .opts = {.header_digest = true, .data_digest = true, .cmd_timeout_ms = 5000},
     .client = client_digests_omitted},
    {.name = "test_digest_omitted_then_silence_bounded",
     .script = script_digest_omitted_then_silent,
     .opts = {.header_digest = true, .data_digest = true, .cmd_timeout_ms = 1000},
     .client = client_digest_omitted_then_silent},
    {.name = "test_erl1_data_digest_error_snacked",
     .script = script_erl1_data_digest,
     .opts = {.header_digest = true,
              .data_digest = true,
              .error_recovery_level = 1,
              .cmd_timeout_ms = 5000},
     .client = client_erl1_data_digest,
     .logout = true},
    {.name = "test_logout_unanswered_times_out",
     .script = script_logout_silent,
     .opts = {.logout_timeout_ms = 300},
     .client = client_logout_silent},
    {.name = "test_asked_logout_unanswered_relogin",
     .script = script_asked_logout_silent,
     .opts = {.logout_timeout_ms = 300},
     .client = client_asked_logout_silent,
     .logout = true},
    {.name = "test_erl2_answers_for_nothing_ignored",
     .script = script_erl2_nonsense,
     .opts = {.error_recovery_level = 2},
     .client = client_erl2_nonsense,
     .logout = true},
    {.name = "test_erl2_reassign_answered_wrong",
     .script = script_erl2_reassign_nonsense,
     .opts = {.error_recovery_level = 2, .cmd_timeout_ms = 1000},
     .client = client_erl2_reassign_nonsense,
     .logout = true},
    {.name = "test_mcs_second_connection_no_memory",
     .script = script_second_conn_no_memory,
     .opts = {.connections = 2},
     .client = client_second_conn_no_memory,
     .logout = true,
     .before_login = fail_second_conn},
    {.name = "test_abort_task_r2t_and_answer_together",
     .script = script_abort_r2t_batch,
     .client = client_abort_r2t_batch,
     .logout = true},
    {.name = "test_write_r2t_and_status_together",
     .script = script_write_r2t_rsp_batch,
     .client = client_write_r2t_rsp_batch,
     .logout = true},
    {.name = "test_erl1_write_r2t_and_status_together",
     .script = script_write_r2t_rsp_batch_erl1,
     .opts = {.error_recovery_level = 1},
     .client = client_write_r2t_rsp_batch,
     .logout = true},
    {.name = "test_erl2_abort_of_orphan_still_allegiant",
     .script = script_erl2_abort_allegiant,
     .opts = {.error_recovery_level = 2},
     .client = client_erl2_abort_allegiant,
     .logout = true},
};

static void run_case(void **state)
{
    const struct hostile_case *k = *state;
    struct ft f;
    assert_int_equal(ft_start(&f, k->script, NULL), 0);
    login_started = now_ms();
    if (k->before_login)
        k->before_login();
    struct lr_session *s = login_with(&f, k->opts);
    k->client(&f, s);
    if (k->logout) {
        logout_and_stop(&f, s);
        return;
    }
    lr_session_destroy(s);
    ft_stop(&f);
    if (f.failed)
        fail_msg("fake target: %s", f.why);
}

#define CASE(i)                                                                                    \
    {                                                                                              \
        cases[i].name, run_case, NULL, NULL, (void *)&cases[i]                                     \
    }

int main(void)
{
    R = reactor_create(0);
    const struct CMUnitTest tests[] = {
        CASE(0),
        CASE(1),
        CASE(2),
        CASE(3),
        CASE(4),
        CASE(5),
        cmocka_unit_test(test_chap_hostile_target),
        cmocka_unit_test(test_sendtargets_without_end),
        cmocka_unit_test(test_mpath_destroy_in_login),
        CASE(6),
        CASE(7),
        CASE(8),
        CASE(9),
        CASE(10),
        CASE(11),
        CASE(12),
        CASE(13),
        CASE(14),
        CASE(15),
        CASE(16),
        CASE(17),
        CASE(18),
        CASE(19),
        CASE(20),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    reactor_destroy(R);
    return rc;
}
