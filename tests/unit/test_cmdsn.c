/* The target's session-wide CmdSN window (RFC 7143 §4.2.2.1), driven on a bare session: no
 * connection, no socket, no reactor. Waiting commands are struct cmdsn_wait with a release
 * callback that records the order in which the window lets them go. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "iscsi/session.h"

static uint32_t released[64];
static unsigned nreleased;

static void record_release(struct cmdsn_wait *w)
{
    assert_true(nreleased < 64);
    released[nreleased++] = w->cmdsn;
}

static struct cmdsn_wait waiters[16];

static struct cmdsn_wait *waiter(unsigned i)
{
    waiters[i] = (struct cmdsn_wait){.release = record_release};
    return &waiters[i];
}

static int setup(void **state)
{
    struct iscsi_session *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    pthread_mutex_init(&s->lock, NULL);
    list_init(&s->conns);
    nreleased = 0;
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct iscsi_session *s = *state;
    pthread_mutex_destroy(&s->lock);
    free(s);
    return 0;
}

static uint32_t exp_cmdsn(struct iscsi_session *s)
{
    uint32_t exp, max;
    session_window(s, &exp, &max);
    return exp;
}

static uint32_t max_cmdsn(struct iscsi_session *s)
{
    uint32_t exp, max;
    session_window(s, &exp, &max);
    return max;
}

static enum cmdsn_verdict arrive(struct iscsi_session *s, uint32_t sn, unsigned w)
{
    return session_cmdsn_check(s, sn, false, waiter(w));
}

/* Commands at ExpCmdSN run at once; MaxCmdSN grants the window less what is in flight, and
 * never shrinks. */
static void test_in_order(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 10);
    assert_int_equal(exp_cmdsn(s), 10);
    assert_int_equal(max_cmdsn(s), 10 + ISCSI_CMD_WINDOW - 1);
    for (uint32_t sn = 10; sn < 20; sn++)
        assert_int_equal(arrive(s, sn, 0), CMDSN_RUN);
    assert_int_equal(exp_cmdsn(s), 20);
    /* ten in flight: the window's right edge has not moved */
    assert_int_equal(max_cmdsn(s), 10 + ISCSI_CMD_WINDOW - 1);
    for (unsigned i = 0; i < 10; i++)
        session_cmd_done(s);
    assert_int_equal(max_cmdsn(s), 20 + ISCSI_CMD_WINDOW - 1);
    assert_int_equal(nreleased, 0);
}

/* MC/S: commands ahead of a gap wait, then go in CmdSN order once it fills. */
static void test_ahead_queued_then_released_in_order(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 100);
    assert_int_equal(arrive(s, 103, 3), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 101, 1), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 102, 2), CMDSN_QUEUED);
    assert_int_equal(nreleased, 0);
    assert_int_equal(exp_cmdsn(s), 100);
    assert_int_equal(arrive(s, 100, 0), CMDSN_RUN);
    assert_int_equal(nreleased, 3);
    assert_int_equal(released[0], 101);
    assert_int_equal(released[1], 102);
    assert_int_equal(released[2], 103);
    assert_int_equal(exp_cmdsn(s), 104);
}

/* Outside [ExpCmdSN, MaxCmdSN], or a duplicate of a queued command: silently ignored, and not
 * counted in flight. */
static void test_outside_window_dropped(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 100);
    uint32_t max = max_cmdsn(s);
    assert_int_equal(arrive(s, 99, 0), CMDSN_OUTSIDE);
    assert_int_equal(arrive(s, max + 1, 0), CMDSN_OUTSIDE);
    assert_int_equal(arrive(s, 100u - 0x80000000u, 0), CMDSN_OUTSIDE);
    assert_int_equal(arrive(s, max, 1), CMDSN_QUEUED);
    assert_int_equal(arrive(s, max, 2), CMDSN_OUTSIDE); /* the same CmdSN again */
    assert_int_equal(exp_cmdsn(s), 100);
    assert_int_equal(max_cmdsn(s), max); /* only the queued one is in flight */
    assert_int_equal(nreleased, 0);
}

/* Immediate commands bypass the window (§3.2.2.1): they run whatever their CmdSN, and do not
 * advance ExpCmdSN, but count in flight. */
static void test_immediate(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 5);
    assert_int_equal(session_cmdsn_check(s, 5, true, waiter(0)), CMDSN_RUN);
    assert_int_equal(session_cmdsn_check(s, 5, true, waiter(1)), CMDSN_RUN);
    assert_int_equal(session_cmdsn_check(s, 5000, true, waiter(2)), CMDSN_RUN);
    assert_int_equal(exp_cmdsn(s), 5);
    /* the non-immediate command with that CmdSN still runs */
    assert_int_equal(arrive(s, 5, 3), CMDSN_RUN);
    assert_int_equal(exp_cmdsn(s), 6);
    for (unsigned i = 0; i < 4; i++)
        session_cmd_done(s);
    assert_int_equal(max_cmdsn(s), 6 + ISCSI_CMD_WINDOW - 1);
}

/* CmdSNs used by non-SCSI requests or taken by ABORT TASK ahead of ExpCmdSN are stepped over
 * when the window reaches them; a command arriving later with one is dropped. */
static void test_consumed_stepped_over(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 50);
    session_consume_cmdsn(s, 50); /* at ExpCmdSN: the window moves at once */
    assert_int_equal(exp_cmdsn(s), 51);
    session_consume_cmdsn(s, 53);
    session_consume_cmdsn(s, 54);
    assert_int_equal(arrive(s, 52, 2), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 55, 5), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 54, 4), CMDSN_RECEIVED); /* ABORT TASK took it first */
    assert_int_equal(arrive(s, 51, 1), CMDSN_RUN);
    assert_int_equal(nreleased, 2);
    assert_int_equal(released[0], 52);
    assert_int_equal(released[1], 55);
    assert_int_equal(exp_cmdsn(s), 56);
    assert_int_equal(arrive(s, 53, 3), CMDSN_OUTSIDE);   /* behind the window now */
    session_consume_cmdsn(s, 40);                        /* below the window: nothing */
    session_consume_cmdsn(s, 56 + ISCSI_CMD_WINDOW + 5); /* beyond it: nothing */
    assert_int_equal(exp_cmdsn(s), 56);
    assert_int_equal(arrive(s, 56, 6), CMDSN_RUN);
    assert_int_equal(exp_cmdsn(s), 57);
}

/* A queued command that goes away (aborted, its connection gone) was received all the same:
 * its CmdSN is stepped over, and it no longer counts in flight. */
static void test_cancel_keeps_cmdsn_taken(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 0);
    struct cmdsn_wait *w = waiter(1);
    assert_int_equal(session_cmdsn_check(s, 1, false, w), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 2, 2), CMDSN_QUEUED);
    session_cmdsn_cancel(s, w);
    assert_int_equal(arrive(s, 0, 0), CMDSN_RUN);
    assert_int_equal(nreleased, 1);
    assert_int_equal(released[0], 2);
    assert_int_equal(exp_cmdsn(s), 3);
    session_cmd_done(s);
    session_cmd_done(s);
    assert_int_equal(max_cmdsn(s), 3 + ISCSI_CMD_WINDOW - 1);
}

/* ERL 0: once a connection of the session died, a gap that held commands back for
 * ISCSI_GAP_GRACE_MS is taken as lost (the commands died with it) and the window moves on;
 * without a lost connection a gap is only MC/S traffic and is waited for. */
static void test_gap_given_up_after_grace(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 10);
    assert_int_equal(arrive(s, 13, 3), CMDSN_QUEUED);
    session_consume_cmdsn(s, 11); /* a taken CmdSN inside the hole counts as received */
    uint64_t t0 = 1000;
    session_check_gap(s, t0);
    session_check_gap(s, t0 + 10 * ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), 10); /* no connection lost: wait */
    session_note_lost_conn(s);
    session_check_gap(s, t0);
    session_check_gap(s, t0 + ISCSI_GAP_GRACE_MS - 1);
    assert_int_equal(exp_cmdsn(s), 10);
    assert_int_equal(nreleased, 0);
    /* 10 is lost; the window may not jump over taken 11, so it stops behind it at 12 */
    session_check_gap(s, t0 + ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), 12);
    assert_int_equal(nreleased, 0);
    /* the grace starts again from there: then 12 is lost too and 13 runs */
    session_check_gap(s, t0 + ISCSI_GAP_GRACE_MS + 1);
    session_check_gap(s, t0 + 2 * ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), 12);
    session_check_gap(s, t0 + 2 * ISCSI_GAP_GRACE_MS + 1);
    assert_int_equal(exp_cmdsn(s), 14);
    assert_int_equal(nreleased, 1);
    assert_int_equal(released[0], 13);
}

/* A gap whose ExpCmdSN keeps moving is traffic, not a hole: the grace restarts. */
static void test_gap_moving_is_not_lost(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 0);
    session_note_lost_conn(s);
    assert_int_equal(arrive(s, 5, 5), CMDSN_QUEUED);
    session_check_gap(s, 1000);
    assert_int_equal(arrive(s, 0, 0), CMDSN_RUN); /* the window moved meanwhile */
    session_check_gap(s, 1000 + ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), 1);
    session_check_gap(s, 1000 + 2 * ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), 6);
    assert_int_equal(nreleased, 1);
}

/* Only CmdSNs the window had granted when the connection died can have died with it: a hole
 * past that MaxCmdSN is a live connection's command (at ERL 1 retried after a header digest
 * error, §7.2.1) and is waited for, however long. */
static void test_gap_after_the_loss_is_waited_for(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 0);
    uint32_t upto = max_cmdsn(s);
    session_note_lost_conn(s);
    /* the window moves on past everything granted at the loss */
    for (uint32_t sn = 0; sn <= upto; sn++) {
        assert_int_equal(arrive(s, sn, 0), CMDSN_RUN);
        session_cmd_done(s);
    }
    /* a live connection's command upto + 1 is lost and retried late; upto + 2 waits */
    assert_true(sn_lt(upto + 2, max_cmdsn(s))); /* granted now */
    assert_int_equal(arrive(s, upto + 2, 1), CMDSN_QUEUED);
    session_check_gap(s, 1000);
    session_check_gap(s, 1000 + 10 * ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), upto + 1);
    assert_int_equal(nreleased, 0);
    assert_int_equal(arrive(s, upto + 1, 0), CMDSN_RUN); /* the retry, in the window */
    assert_int_equal(exp_cmdsn(s), upto + 3);
    assert_int_equal(nreleased, 1);
    assert_int_equal(released[0], upto + 2);
}

/* A hole reaching past the MaxCmdSN granted at the loss is given up only up to it. */
static void test_gap_given_up_only_up_to_the_loss(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 0);
    for (uint32_t sn = 0; sn < 100; sn++) {
        assert_int_equal(arrive(s, sn, 0), CMDSN_RUN);
        session_cmd_done(s);
    }
    uint32_t upto = max_cmdsn(s); /* 99 + ISCSI_CMD_WINDOW */
    session_note_lost_conn(s);
    /* 100..upto died with the connection; upto + 1 was a live one's, lost and not retried
     * yet; upto + 2 waits behind both */
    for (uint32_t sn = 100; sn < upto - 10; sn++) {
        assert_int_equal(arrive(s, sn, 0), CMDSN_RUN);
        session_cmd_done(s);
    }
    assert_true(sn_lt(upto + 2, max_cmdsn(s)));
    assert_int_equal(arrive(s, upto + 2, 1), CMDSN_QUEUED);
    session_check_gap(s, 1000);
    session_check_gap(s, 1000 + ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), upto + 1);
    session_check_gap(s, 1000 + 10 * ISCSI_GAP_GRACE_MS);
    session_check_gap(s, 1000 + 20 * ISCSI_GAP_GRACE_MS);
    assert_int_equal(exp_cmdsn(s), upto + 1);
    assert_int_equal(nreleased, 0);
}

/* Serial number arithmetic across 2^32 (RFC 1982): the window, the queue and the taken set
 * work the same on both sides of the wrap. */
static void test_wraparound(void **state)
{
    struct iscsi_session *s = *state;
    session_cmdsn_init(s, 0xfffffffeu);
    assert_int_equal(max_cmdsn(s), ISCSI_CMD_WINDOW - 3);
    assert_int_equal(arrive(s, 0xfffffffdu, 0), CMDSN_OUTSIDE);
    assert_int_equal(arrive(s, 1, 1), CMDSN_QUEUED);
    session_consume_cmdsn(s, 0);
    assert_int_equal(arrive(s, 0xffffffffu, 2), CMDSN_QUEUED);
    assert_int_equal(arrive(s, 0, 3), CMDSN_RECEIVED);
    assert_int_equal(arrive(s, ISCSI_CMD_WINDOW - 3, 4), CMDSN_QUEUED);
    assert_int_equal(arrive(s, ISCSI_CMD_WINDOW - 2, 5), CMDSN_OUTSIDE);
    assert_int_equal(arrive(s, 0xfffffffeu, 6), CMDSN_RUN);
    assert_int_equal(nreleased, 2);
    assert_int_equal(released[0], 0xffffffffu);
    assert_int_equal(released[1], 1);
    assert_int_equal(exp_cmdsn(s), 2);
    for (unsigned i = 0; i < 3; i++)
        session_cmd_done(s);
    /* one still queued (at the old right edge): the edge moves with ExpCmdSN */
    assert_int_equal(max_cmdsn(s), 2 + ISCSI_CMD_WINDOW - 1 - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ahead_queued_then_released_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outside_window_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_immediate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consumed_stepped_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_keeps_cmdsn_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_given_up_after_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_moving_is_not_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_after_the_loss_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_given_up_only_up_to_the_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wraparound, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
