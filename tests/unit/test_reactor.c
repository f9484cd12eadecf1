/* Reactor unit tests: a descriptor removed while its event still waits in the batch being
 * dispatched is not called back, even when its owner reuses (or frees) the handle before the
 * batch is done. The bench crashed so when a message freed a session whose second connection
 * had an event queued behind the message in the same batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "reactor/reactor.h"

struct fixture {
    struct reactor *r;
    int a[2], b[2];
    struct reactor_fd ha, hb;
    int a_calls, b_calls, stale_calls;
};

static void on_stale(void *arg, uint32_t events)
{
    (void)events;
    ((struct fixture *)arg)->stale_calls++;
}

static void on_b(void *arg, uint32_t events)
{
    (void)events;
    ((struct fixture *)arg)->b_calls++;
}

/* What an owner freeing the handle looks like to the reactor: removed, then its memory taken
 * by something else (a free()d handle filled with MALLOC_PERTURB_'s bytes, or a new one). */
static void drop_b(struct fixture *f)
{
    reactor_fd_del(f->r, &f->hb);
    f->hb.fn = on_stale;
    f->hb.arg = f;
}

static void on_a_drops_b(void *arg, uint32_t events)
{
    (void)events;
    struct fixture *f = arg;
    f->a_calls++;
    drop_b(f);
    reactor_stop(f->r);
}

static void on_a(void *arg, uint32_t events)
{
    (void)events;
    struct fixture *f = arg;
    f->a_calls++;
}

static void msg_drops_b(void *arg)
{
    struct fixture *f = arg;
    drop_b(f);
    reactor_stop(f->r);
}

static void setup(struct fixture *f, reactor_fd_fn on_a_fn)
{
    *f = (struct fixture){0};
    f->r = reactor_create(0);
    assert_non_null(f->r);
    assert_int_equal(pipe(f->a), 0);
    assert_int_equal(pipe(f->b), 0);
    assert_int_equal(reactor_fd_add(f->r, &f->ha, f->a[0], EPOLLIN, on_a_fn, f), 0);
    assert_int_equal(reactor_fd_add(f->r, &f->hb, f->b[0], EPOLLIN, on_b, f), 0);
}

static void teardown(struct fixture *f)
{
    reactor_fd_del(f->r, &f->ha);
    reactor_destroy(f->r);
    close(f->a[0]);
    close(f->a[1]);
    close(f->b[0]);
    close(f->b[1]);
}

/* A callback removes another descriptor whose event comes later in the same batch. */
static void test_fd_del_from_callback(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, on_a_drops_b);
    /* epoll reports ready descriptors in the order they became ready: a, then b */
    assert_int_equal(write(f.a[1], "x", 1), 1);
    assert_int_equal(write(f.b[1], "x", 1), 1);
    reactor_run(f.r);
    assert_int_equal(f.a_calls, 1);
    assert_int_equal(f.b_calls, 0);
    assert_int_equal(f.stale_calls, 0);
    teardown(&f);
}

/* A message (the session's destroy in the bench) removes a descriptor whose event comes after
 * the message's in the same batch. */
static void test_fd_del_from_message(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, on_a);
    assert_int_equal(write(f.a[1], "x", 1), 1);
    assert_int_equal(reactor_send(f.r, msg_drops_b, &f), 0);
    assert_int_equal(write(f.b[1], "x", 1), 1);
    reactor_run(f.r);
    assert_int_equal(f.a_calls, 1);
    assert_int_equal(f.b_calls, 0);
    assert_int_equal(f.stale_calls, 0);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_del_from_callback),
        cmocka_unit_test(test_fd_del_from_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
