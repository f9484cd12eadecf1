/* Reactor unit tests: a descriptor removed while its event still waits in the batch being
 * dispatched is not called back, even when its owner reuses (or frees) the handle before the
 * batch is done (the bench crashed so when a message freed a session whose second connection
 * had an event queued behind the message in the same batch). Embedded messages: they run on
 * the reactor's thread, in order per sender, once per post however many threads post, a
 * pending one is not queued twice, one may post itself again; a yielded step lets ready
 * descriptors run first; reactor_destroy runs what is still queued. A reactor that polls
 * after busy turns (reactor_set_poll_us) takes posted messages and runs timers as one that
 * sleeps. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "reactor/reactor.h"

struct fixture {
    struct reactor *r;
    int a[2], b[2];
    struct reactor_fd ha, hb;
    int a_calls, b_calls, stale_calls;
    struct reactor_msg msg;
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
    assert_true(reactor_post(f.r, &f.msg, msg_drops_b, &f));
    assert_int_equal(write(f.b[1], "x", 1), 1);
    reactor_run(f.r);
    assert_int_equal(f.a_calls, 1);
    assert_int_equal(f.b_calls, 0);
    assert_int_equal(f.stale_calls, 0);
    teardown(&f);
}

/* ---- messages ---- */

static void *run_thread(void *arg)
{
    reactor_run(arg);
    return NULL;
}

static void stop_msg(void *arg)
{
    reactor_stop(arg);
}

#define SENDERS 4
#define PER_SENDER 5000

struct rec {
    struct reactor_msg msg;
    struct mctx *m;
    unsigned sender, seq;
};

struct mctx {
    struct reactor *r;
    pthread_t reactor_thread;
    struct rec recs[SENDERS][PER_SENDER];
    unsigned next[SENDERS]; /* the seq each sender's next message must carry */
    unsigned runs, out_of_order, wrong_thread;
    struct reactor_msg stop;
};

static void rec_run(void *arg)
{
    struct rec *x = arg;
    struct mctx *m = x->m;
    if (!pthread_equal(pthread_self(), m->reactor_thread) || reactor_self() != m->r)
        m->wrong_thread++;
    if (x->seq != m->next[x->sender])
        m->out_of_order++;
    m->next[x->sender] = x->seq + 1;
    m->runs++;
}

struct sender {
    struct mctx *m;
    unsigned id;
};

static void *sender_thread(void *arg)
{
    struct sender *sd = arg;
    for (unsigned i = 0; i < PER_SENDER; i++) {
        struct rec *x = &sd->m->recs[sd->id][i];
        *x = (struct rec){.m = sd->m, .sender = sd->id, .seq = i};
        assert_true(reactor_post(sd->m->r, &x->msg, rec_run, x));
    }
    return NULL;
}

/* Each sender's messages run on the reactor's thread, all of them, in the order it posted
 * them, with nsenders threads posting at once. */
static void run_senders(unsigned nsenders, unsigned poll_us)
{
    static struct mctx m; /* ~400 KB */
    memset(&m, 0, sizeof(m));
    m.r = reactor_create(0);
    assert_non_null(m.r);
    reactor_set_poll_us(m.r, poll_us);
    assert_int_equal(pthread_create(&m.reactor_thread, NULL, run_thread, m.r), 0);
    pthread_t th[SENDERS];
    struct sender sd[SENDERS];
    for (unsigned i = 0; i < nsenders; i++) {
        sd[i] = (struct sender){&m, i};
        assert_int_equal(pthread_create(&th[i], NULL, sender_thread, &sd[i]), 0);
    }
    for (unsigned i = 0; i < nsenders; i++)
        pthread_join(th[i], NULL);
    /* posted after every sender's last message by this thread: it runs after them all */
    assert_true(reactor_post(m.r, &m.stop, stop_msg, m.r));
    pthread_join(m.reactor_thread, NULL);
    reactor_destroy(m.r);
    assert_int_equal(m.runs, nsenders * PER_SENDER);
    assert_int_equal(m.out_of_order, 0);
    assert_int_equal(m.wrong_thread, 0);
    for (unsigned i = 0; i < nsenders; i++)
        assert_int_equal(m.next[i], PER_SENDER);
}

static void test_post_one_sender_in_order(void **state)
{
    (void)state;
    run_senders(1, 0);
}

static void test_post_many_senders(void **state)
{
    (void)state;
    run_senders(SENDERS, 0);
}

/* The same with the reactor polling after busy turns (--poll-us): a message posted while it
 * polls instead of sleeping is taken by the poll, in order, on the reactor's thread. */
static void test_post_many_senders_polling(void **state)
{
    (void)state;
    run_senders(SENDERS, 1000);
}

/* A polling reactor still runs its timers while a descriptor keeps every turn busy (a pipe
 * that stays readable): they are checked each turn, polling or not. */
struct tick {
    struct reactor *r;
    struct reactor_timer t;
    struct reactor_fd h;
    unsigned fired, busy_calls;
};

static void tick_fn(void *arg)
{
    struct tick *k = arg;
    if (++k->fired == 5)
        reactor_stop(k->r);
    else
        reactor_timer_start(k->r, &k->t, 1, tick_fn, k);
}

static void on_readable(void *arg, uint32_t events)
{
    (void)events;
    ((struct tick *)arg)->busy_calls++;
}

static void test_timers_run_while_polling(void **state)
{
    (void)state;
    struct tick k = {0};
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "x", 1), 1); /* never read: readable on every turn */
    k.r = reactor_create(0);
    assert_non_null(k.r);
    reactor_set_poll_us(k.r, 10000);
    assert_int_equal(reactor_fd_add(k.r, &k.h, p[0], EPOLLIN, on_readable, &k), 0);
    reactor_timer_start(k.r, &k.t, 1, tick_fn, &k);
    reactor_run(k.r);
    assert_int_equal(k.fired, 5);
    assert_true(k.busy_calls >= 5);
    reactor_fd_del(k.r, &k.h);
    reactor_destroy(k.r);
    close(p[0]);
    close(p[1]);
}

/* One message posted by several threads at once, as the MC/S release kick is: never queued
 * twice, run at least once after the last post, and at most once per post that queued it. */
struct kick {
    struct reactor *r;
    struct reactor_msg msg;
    atomic_uint queued, runs;
    atomic_bool go;
};

static void kick_run(void *arg)
{
    struct kick *k = arg;
    atomic_fetch_add(&k->runs, 1);
}

static void *kicker(void *arg)
{
    struct kick *k = arg;
    while (!atomic_load(&k->go))
        ;
    for (unsigned i = 0; i < PER_SENDER; i++)
        if (reactor_post(k->r, &k->msg, kick_run, k))
            atomic_fetch_add(&k->queued, 1);
    return NULL;
}

static void test_kick_concurrent(void **state)
{
    (void)state;
    struct kick k = {0};
    struct reactor_msg stop = {0};
    k.r = reactor_create(0);
    assert_non_null(k.r);
    pthread_t rt, th[SENDERS];
    assert_int_equal(pthread_create(&rt, NULL, run_thread, k.r), 0);
    for (unsigned i = 0; i < SENDERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, kicker, &k), 0);
    atomic_store(&k.go, true);
    for (unsigned i = 0; i < SENDERS; i++)
        pthread_join(th[i], NULL);
    reactor_post(k.r, &stop, stop_msg, k.r);
    pthread_join(rt, NULL);
    reactor_destroy(k.r);
    unsigned q = atomic_load(&k.queued), n = atomic_load(&k.runs);
    assert_true(q >= 1);
    assert_true(q <= SENDERS * PER_SENDER);
    assert_int_equal(n, q); /* every post that queued it ran once, none else */
}

/* A message posted again while pending is not queued twice; from its own callback it is. */
struct again {
    struct reactor *r;
    struct reactor_msg msg;
    unsigned runs;
};

static void again_run(void *arg)
{
    struct again *a = arg;
    if (++a->runs < 3)
        assert_true(reactor_post(a->r, &a->msg, again_run, a));
    else
        reactor_stop(a->r);
}

static void test_post_again_from_callback(void **state)
{
    (void)state;
    struct again a = {.r = reactor_create(0)};
    assert_non_null(a.r);
    assert_true(reactor_post(a.r, &a.msg, again_run, &a));
    assert_false(reactor_post(a.r, &a.msg, again_run, &a)); /* pending: one run */
    reactor_run(a.r);
    assert_int_equal(a.runs, 3);
    reactor_destroy(a.r);
    assert_int_equal(a.runs, 3);
}

/* ---- yield ---- */

struct steps {
    struct reactor *r;
    struct reactor_fd h;
    int p[2];
    struct reactor_msg msg;
    char log[8];
    unsigned n;
};

static void step_two(void *arg)
{
    struct steps *st = arg;
    st->log[st->n++] = '2';
    reactor_stop(st->r);
}

static void step_one(void *arg)
{
    struct steps *st = arg;
    st->log[st->n++] = '1';
    /* the descriptor becomes ready during the step: it gets its turn before the next one */
    assert_int_equal(write(st->p[1], "x", 1), 1);
    assert_true(reactor_yield(st->r, &st->msg, step_two, st));
    assert_false(reactor_yield(st->r, &st->msg, step_two, st));
}

static void on_pipe(void *arg, uint32_t events)
{
    (void)events;
    struct steps *st = arg;
    char c;
    assert_int_equal(read(st->p[0], &c, 1), 1);
    st->log[st->n++] = 'f';
}

static void test_yield_lets_fd_run(void **state)
{
    (void)state;
    struct steps st = {.r = reactor_create(0)};
    assert_non_null(st.r);
    assert_int_equal(pipe(st.p), 0);
    assert_int_equal(reactor_fd_add(st.r, &st.h, st.p[0], EPOLLIN, on_pipe, &st), 0);
    assert_true(reactor_post(st.r, &st.msg, step_one, &st));
    reactor_run(st.r);
    assert_int_equal(st.n, 3);
    assert_memory_equal(st.log, "1f2", 3);
    reactor_fd_del(st.r, &st.h);
    reactor_destroy(st.r);
    close(st.p[0]);
    close(st.p[1]);
}

/* A step that yields again and again does not keep the loop from its descriptors (a deferred
 * hook re-deferring itself would: hooks run until none is left). */
struct spin {
    struct reactor *r;
    struct reactor_msg msg;
    struct reactor_fd h;
    int p[2];
    unsigned steps, fd_calls;
};

static void spin_step(void *arg)
{
    struct spin *sp = arg;
    if (++sp->steps == 1)
        assert_int_equal(write(sp->p[1], "x", 1), 1);
    if (sp->fd_calls) {
        reactor_stop(sp->r);
        return;
    }
    assert_true(sp->steps < 100);
    reactor_yield(sp->r, &sp->msg, spin_step, sp);
}

static void spin_fd(void *arg, uint32_t events)
{
    (void)events;
    struct spin *sp = arg;
    char c;
    assert_int_equal(read(sp->p[0], &c, 1), 1);
    sp->fd_calls++;
}

static void test_yield_loop_not_starving(void **state)
{
    (void)state;
    struct spin sp = {.r = reactor_create(0)};
    assert_non_null(sp.r);
    assert_int_equal(pipe(sp.p), 0);
    assert_int_equal(reactor_fd_add(sp.r, &sp.h, sp.p[0], EPOLLIN, spin_fd, &sp), 0);
    reactor_post(sp.r, &sp.msg, spin_step, &sp);
    reactor_run(sp.r);
    assert_int_equal(sp.fd_calls, 1);
    assert_true(sp.steps <= 3);
    reactor_fd_del(sp.r, &sp.h);
    reactor_destroy(sp.r);
    close(sp.p[0]);
    close(sp.p[1]);
}

/* reactor_poll, one turn on the caller's thread: a step yielded during the turn waits for the
 * next one. */
struct polled {
    struct reactor *r;
    struct reactor_msg msg;
    unsigned runs;
};

static void polled_step(void *arg)
{
    struct polled *p = arg;
    if (++p->runs < 2)
        assert_true(reactor_yield(p->r, &p->msg, polled_step, p));
}

static void test_poll_runs_yielded_once_per_turn(void **state)
{
    (void)state;
    struct polled p = {.r = reactor_create(0)};
    assert_non_null(p.r);
    assert_true(reactor_post(p.r, &p.msg, polled_step, &p));
    assert_true(reactor_poll(p.r) > 0); /* the message: it yields the second step */
    assert_int_equal(p.runs, 1);
    assert_int_equal(reactor_poll(p.r), 1);
    assert_int_equal(p.runs, 2);
    assert_int_equal(reactor_poll(p.r), 0);
    reactor_destroy(p.r);
}

/* ---- teardown ---- */

struct td {
    struct reactor *r;
    struct reactor_msg a, b, c, y;
    char log[8];
    unsigned n;
};

static void td_c(void *arg)
{
    struct td *t = arg;
    t->log[t->n++] = 'c';
}

static void td_y(void *arg)
{
    struct td *t = arg;
    t->log[t->n++] = 'y';
}

static void td_a(void *arg)
{
    struct td *t = arg;
    t->log[t->n++] = 'a';
    assert_ptr_equal(reactor_self(), t->r);
    /* posted while the destroy drains: it runs too */
    reactor_post(t->r, &t->c, td_c, t);
}

static void td_b(void *arg)
{
    struct td *t = arg;
    t->log[t->n++] = 'b';
    reactor_yield(t->r, &t->y, td_y, t);
}

/* Messages still queued when the reactor is destroyed run there, in order, with what they
 * post or yield meanwhile: a message commonly carries a reference its callback drops. */
static void test_destroy_runs_queued(void **state)
{
    (void)state;
    struct td t = {.r = reactor_create(0)};
    assert_non_null(t.r);
    reactor_post(t.r, &t.a, td_a, &t);
    reactor_post(t.r, &t.b, td_b, &t);
    reactor_destroy(t.r);
    assert_int_equal(t.n, 4);
    assert_memory_equal(t.log, "aby", 3); /* the queue, then what it yielded */
    assert_int_equal(t.log[3], 'c');      /* then what it posted meanwhile */
    assert_null(reactor_self());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_del_from_callback),
        cmocka_unit_test(test_fd_del_from_message),
        cmocka_unit_test(test_post_one_sender_in_order),
        cmocka_unit_test(test_post_many_senders),
        cmocka_unit_test(test_post_many_senders_polling),
        cmocka_unit_test(test_timers_run_while_polling),
        cmocka_unit_test(test_kick_concurrent),
        cmocka_unit_test(test_post_again_from_callback),
        cmocka_unit_test(test_yield_lets_fd_run),
        cmocka_unit_test(test_yield_loop_not_starving),
        cmocka_unit_test(test_poll_runs_yielded_once_per_turn),
        cmocka_unit_test(test_destroy_runs_queued),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
