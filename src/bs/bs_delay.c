/* --inject store-delay (bs.h): requests of the stores that are not memory wait on their
 * reactor before the store gets them, each for a time in proportion to what it moves, as a
 * slow disk keeps a large write while a small one passes. A testing aid: tests abort writes
 * that are still in the store with it. */
#include <assert.h>

#include "bs/bs.h"
#include "reactor/reactor.h"
#include "util/list.h"

unsigned bs_inject_delay_ms;

void bs_inject_delay(unsigned ms)
{
    bs_inject_delay_ms = ms;
}

/* One queue per reactor thread, in due order (the thread's own storage: nothing to free). */
struct delay_queue {
    struct reactor *r;
    struct list_node waiting; /* bs_io.st.node */
    struct reactor_timer timer;
    bool armed;
};

static __thread struct delay_queue tls_queue;

void bs_delay_thread_reset(void)
{
    assert(!tls_queue.r || list_empty(&tls_queue.waiting));
    tls_queue = (struct delay_queue){0};
}

static void delay_fire(void *arg)
{
    struct delay_queue *q = arg;
    q->armed = false;
    uint64_t now = reactor_now_ms();
    while (!list_empty(&q->waiting)) {
        struct bs_io *io = list_entry(q->waiting.next, struct bs_io, st.node);
        if (io->st.due_ms > now) {
            q->armed = true;
            reactor_timer_start(q->r, &q->timer, io->st.due_ms - now, delay_fire, q);
            return;
        }
        list_del(&io->st.node);
        io->st.bs->ops->submit(io->st.bs, io);
    }
}

void bs_submit_delayed(struct bs *bs, struct bs_io *io)
{
    struct reactor *r = reactor_self();
    if (!r) { /* no loop to wait on (the control thread, unit tests): at once */
        bs->ops->submit(bs, io);
        return;
    }
    struct delay_queue *q = &tls_queue;
    if (!q->r) {
        q->r = r;
        list_init(&q->waiting);
    }
    uint64_t moved = io->op == BS_READ || io->op == BS_WRITE ? io->length : 0;
    uint64_t wait = (moved * bs_inject_delay_ms) >> 20;
    io->st.bs = bs; /* the store sets it again when it takes the request */
    io->st.due_ms = reactor_now_ms() + (wait ? wait : 1);
    struct list_node *at = q->waiting.prev; /* the last one due no later than io */
    while (at != &q->waiting && list_entry(at, struct bs_io, st.node)->st.due_ms > io->st.due_ms)
        at = at->prev;
    list_add(at, &io->st.node);
    /* The timer for the head (never started here: a request's completion must not run inside
     * another one's submission) */
    if (q->armed && at != &q->waiting)
        return; /* not the new head: the timer is set for an earlier one */
    if (q->armed)
        reactor_timer_stop(r, &q->timer);
    uint64_t now = reactor_now_ms();
    q->armed = true;
    reactor_timer_start(r, &q->timer, io->st.due_ms > now ? io->st.due_ms - now : 0, delay_fire, q);
}
