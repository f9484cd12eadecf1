/* The public headers as an application sees them: this file and its two helpers are compiled
 * with include/ as the only project include directory (tests/unit/meson.build), each starting
 * with a different public header, so a header that needs an internal one fails the build. The
 * test drives a reactor, a timer and a session through the public API alone. */
#include "linerate/initiator.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "linerate/initiator_test.h"
#include "linerate/reactor.h"
#include "public_api.h"

/* On the reactor: a session (not logged in) and the test hooks on it, then the stop timer. */
static void on_reactor(void *arg)
{
    struct public_api_run *run = arg;
    struct lr_session_opts o = {.host = "127.0.0.1", .port = 9, .target_name = "iqn.x:y"};
    struct lr_session *s = lr_session_create(run->r, &o);
    assert_non_null(s);
    run->hooks_idle = public_api_hooks_idle(s);
    lr_session_destroy(s);
    public_api_arm_stop(run);
}

static void test_reactor_session_timer(void **state)
{
    (void)state;
    struct public_api_run run = {.r = lr_reactor_create(7)};
    assert_non_null(run.r);
    assert_null(lr_reactor_self());
    assert_int_equal(lr_reactor_call(run.r, on_reactor, &run), 0);
    lr_reactor_run(run.r); /* returns once the timer stopped it */
    assert_true(run.hooks_idle);
    assert_true(run.timer_fired);
    assert_non_null(run.timer);
    lr_timer_free(run.timer); /* fired, so not armed: fine off the reactor's thread */
    lr_reactor_destroy(run.r);
}

/* lr_result.residual_kind came after lr_result was published: it sits in the tail padding, so
 * the size and every older field's offset are what they were, and a result built with
 * designated initializers (zero) reads as "no residual". */
static void test_result_residual_kind(void **state)
{
    (void)state;
    size_t align = _Alignof(struct lr_result);
    size_t old_end = offsetof(struct lr_result, recovered) + sizeof(bool);
    assert_int_equal(sizeof(struct lr_result), (old_end + align - 1) / align * align);
    assert_true(offsetof(struct lr_result, residual_kind) >= old_end);
    struct lr_result r = {.err = LR_OK};
    assert_int_equal(r.residual_kind, LR_RESIDUAL_NONE);
    assert_int_equal(LR_RESIDUAL_NONE, 0);
    assert_int_not_equal(LR_RESIDUAL_UNDERFLOW, LR_RESIDUAL_OVERFLOW);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reactor_session_timer),
        cmocka_unit_test(test_result_residual_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
