/* Commands over a cap wait in the core before they run: the LUN's IOPS and bytes/s caps on this
 * gateway (util/rate_limit.h), and a cap the transport names for the task (an initiator
 * entry's). The wait never blocks a thread: the command gets a timer on the reactor that ran it,
 * set to the turn the cap gave it, and runs from there. Turns are given in the order commands
 * reach the core and timers of one reactor with one deadline fire in the order they were set,
 * so commands of one connection run in their order.
 *
 * What a command waits with (its timer, the abort's message, the slots it reserved) is
 * allocated when it has to wait, never before: a command that does not wait pays for none of
 * it (issue 29 item 5: no cap, no cost), and one that waits is on the slow path anyway. If that
 * allocation fails the command still waits, in a queue of its reactor (struct throttle_spare):
 * it goes at or after its turn, in order, and an abort ends it within SPARE_TICK_MS without
 * giving its slots back (nothing kept them). How many commands wait is bounded by the sessions'
 * command windows.
 *
 * An abort (a TMF, a LUN reset, a lost connection, PREEMPT AND ABORT) of a waiting command ends
 * it at once, on its reactor, with the status quiesce.c gives aborted tasks; it never reaches
 * the store, and the task management function's answer does not wait for its turn. */
#include <assert.h>
#include <stdlib.h>

#include "scsi/scsi_internal.h"

enum {
    TH_NONE = 0,
    TH_WAITING,        /* its timer is set */
    TH_ABORTED,        /* aborted while waiting: the message ends it, the timer does nothing */
    TH_QUEUED,         /* waiting in the reactor's spare queue (no record could be allocated) */
    TH_QUEUED_ABORTED, /* the same, aborted: the queue's next tick ends it, not run */
};

struct throttle_wait {
    struct scsi_task *t;
    struct reactor *r;
    struct reactor_timer timer;
    struct reactor_msg msg;
    struct rate_slot lu_slot, e_slot; /* what it reserved, given back if aborted */
};

/* Commands waiting on this reactor without a record, in batches: the current batch goes at
 * the latest turn in it; commands that come meanwhile form the next batch, which becomes
 * current when the current one has gone (so no batch is pushed back for ever). While the queue
 * is not empty every command that waits on this reactor joins it, so none charged later goes
 * before one in it. An abort from another thread cannot reach this queue (nothing to post
 * with), so its timer ticks every SPARE_TICK_MS while it is not empty and ends the commands
 * aborted since. Per thread: a reactor is one thread. */
#define SPARE_TICK_MS 10
struct throttle_spare {
    struct reactor *r; /* the reactor its timer is on */
    struct reactor_timer timer;
    struct scsi_task *head, *tail;           /* the current batch */
    struct scsi_task *next_head, *next_tail; /* the next batch */
    uint64_t head_ms, next_ms;               /* the latest turn in each */
};
static _Thread_local struct throttle_spare spare;

_Atomic bool scsi_throttle_no_record;

struct rate_limit *scsi_lun_rate_limit(struct scsi_lun *lu)
{
    return &lu->limit;
}

unsigned scsi_lun_throttled(const struct scsi_lun *lu)
{
    return atomic_load_explicit(&lu->throttled, memory_order_relaxed);
}

/* Its turn came. */
static void throttle_due(void *arg)
{
    struct throttle_wait *w = arg;
    struct scsi_task *t = w->t;
    struct scsi_task_core *k = scsi_core(t);
    unsigned char waiting = TH_WAITING;
    if (!atomic_compare_exchange_strong(&k->th_state, &waiting, TH_NONE))
        return; /* aborted meanwhile: throttle_aborted() ends it and frees w */
    free(w);
    atomic_fetch_sub_explicit(&t->lu->throttled, 1, memory_order_relaxed);
    k->cmd->exec(t, k->cmd);
}

/* Aborted while waiting: ended without running (t->done is the core's, which says TASK ABORTED
 * and lets a quiesce wait go on). */
static void throttle_aborted(void *arg)
{
    struct throttle_wait *w = arg;
    struct scsi_task *t = w->t;
    struct scsi_task_core *k = scsi_core(t);
    reactor_timer_stop(w->r, &w->timer);
    /* its slots go back where no later command holds one behind them: aborting what waits
     * does not leave the cap reserved for commands that never run */
    rate_limit_refund(&t->lu->limit, &w->lu_slot);
    if (t->limit)
        rate_limit_refund(t->limit, &w->e_slot);
    free(w);
    atomic_store(&k->th_state, TH_NONE);
    atomic_fetch_sub_explicit(&t->lu->throttled, 1, memory_order_relaxed);
    t->done(t);
}

/* Takes the aborted commands out of the list *head (its last in *tail) onto *ended. */
static void spare_sweep(struct scsi_task **head, struct scsi_task **tail, struct scsi_task **ended)
{
    struct scsi_task **link = head, *last = NULL;
    while (*link) {
        struct scsi_task *t = *link;
        struct scsi_task_core *k = scsi_core(t);
        if (atomic_load(&k->th_state) == TH_QUEUED_ABORTED) {
            *link = k->th.next;
            k->th.next = *ended;
            *ended = t;
        } else {
            last = t;
            link = &k->th.next;
        }
    }
    *tail = last;
}

/* Ends (aborted) or runs each command of the list t. */
static void spare_finish(struct scsi_task *t)
{
    while (t) {
        struct scsi_task_core *k = scsi_core(t);
        struct scsi_task *next = k->th.next;
        unsigned char queued = TH_QUEUED;
        bool run = atomic_compare_exchange_strong(&k->th_state, &queued, TH_NONE);
        if (!run)
            atomic_store(&k->th_state, TH_NONE); /* TH_QUEUED_ABORTED */
        atomic_fetch_sub_explicit(&t->lu->throttled, 1, memory_order_relaxed);
        if (run)
            k->cmd->exec(t, k->cmd);
        else
            t->done(t);
        t = next;
    }
}

/* The spare queue's tick: the aborted end; the current batch goes if its turn came (the next
 * becoming current). The queue is set right before any command runs (running one may bring
 * new commands here). */
static void spare_tick(void *arg)
{
    (void)arg;
    struct scsi_task *ended = NULL, *due = NULL;
    spare_sweep(&spare.head, &spare.tail, &ended);
    spare_sweep(&spare.next_head, &spare.next_tail, &ended);
    uint64_t now = reactor_now_ms();
    if (spare.head && spare.head_ms <= now) {
        due = spare.head;
        spare.head = spare.next_head;
        spare.tail = spare.next_tail;
        spare.head_ms = spare.next_ms;
        spare.next_head = spare.next_tail = NULL;
    }
    if (!spare.head && spare.next_head) { /* the whole current batch was aborted */
        spare.head = spare.next_head;
        spare.tail = spare.next_tail;
        spare.head_ms = spare.next_ms;
        spare.next_head = spare.next_tail = NULL;
    }
    if (spare.head) {
        uint64_t at = spare.head_ms < now + SPARE_TICK_MS ? spare.head_ms : now + SPARE_TICK_MS;
        reactor_timer_at(spare.r, &spare.timer, at, spare_tick, NULL);
    }
    spare_finish(ended);
    spare_finish(due);
}

/* t waits without a record until ms (the reactor's clock), behind those already queued. */
static void spare_queue(struct reactor *r, struct scsi_task *t, uint64_t ms)
{
    scsi_core(t)->th.next = NULL;
    /* a queue left by a reactor this thread ran before (destroyed with commands waiting: its
     * timer is gone with it) is not waited behind */
    if (spare.head && spare.r != r)
        spare = (struct throttle_spare){0};
    if (!spare.head) {
        spare.r = r;
        spare.head = spare.tail = t;
        spare.head_ms = ms;
        uint64_t now = reactor_now_ms();
        reactor_timer_at(r, &spare.timer, ms < now + SPARE_TICK_MS ? ms : now + SPARE_TICK_MS,
                         spare_tick, NULL);
        return;
    }
    if (spare.next_head) {
        scsi_core(spare.next_tail)->th.next = t;
        spare.next_ms = ms > spare.next_ms ? ms : spare.next_ms;
    } else {
        spare.next_head = t;
        spare.next_ms = ms;
    }
    spare.next_tail = t;
}

void scsi_throttle_abort(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    unsigned char waiting = TH_WAITING, queued = TH_QUEUED;
    /* From any thread: the task's own reactor ends it, never inside the caller's abort */
    if (atomic_compare_exchange_strong(&k->th_state, &waiting, TH_ABORTED)) {
        struct throttle_wait *w = k->th.wait;
        reactor_post(w->r, &w->msg, throttle_aborted, w);
    } else {
        /* queued without a record: nothing to post with; the queue's next tick ends it */
        atomic_compare_exchange_strong(&k->th_state, &queued, TH_QUEUED_ABORTED);
    }
}

static enum rate_op throttle_op(const struct scsi_task *t)
{
    return t->dir == SCSI_DIR_READ ? RATE_OP_READ : RATE_OP_WRITE;
}

bool scsi_throttle(struct scsi_task *t)
{
    struct scsi_lun *lu = t->lu;
    if (t->dir == SCSI_DIR_NONE) /* SYNCHRONIZE CACHE, VERIFY without data: not counted */
        return false;
    enum rate_op op = throttle_op(t);
    /* charged to both the LUN's cap and the entry's: it goes when both give it its turn, and
     * each counts it delayed only if it was the one (or one of the two) that held it back. The
     * slots go on the stack: kept only if it waits. */
    struct rate_slot lu_slot = {0}, e_slot = {0};
    uint64_t now = rate_limit_now_ns(), lu_until = 0, e_until = 0;
    if (rate_limit_on(&lu->limit))
        lu_until = rate_limit_charge(&lu->limit, op, t->xfer_len, now, &lu_slot);
    if (t->limit && rate_limit_on(t->limit))
        e_until = rate_limit_charge(t->limit, op, t->xfer_len, now, &e_slot);
    uint64_t until = lu_until > e_until ? lu_until : e_until;
    struct reactor *r = reactor_self();
    if (until <= now || !r) /* no reactor (a test driving the core from a thread): no wait */
        return false;
    if (lu_until > now)
        rate_limit_count_delay(&lu->limit, until - now);
    if (e_until > now)
        rate_limit_count_delay(t->limit, until - now);
    struct scsi_task_core *k = scsi_core(t);
    assert(atomic_load(&k->th_state) == TH_NONE);
    atomic_fetch_add_explicit(&lu->throttled, 1, memory_order_relaxed);
    /* the reactor's clock is CLOCK_MONOTONIC in whole ms: the first ms at or after the turn */
    uint64_t due_ms = (until + 999999) / 1000000;
    /* with commands in the spare queue, later ones join it: none overtakes them */
    struct throttle_wait *w = (spare.head && spare.r == r) || atomic_load(&scsi_throttle_no_record)
                                  ? NULL
                                  : malloc(sizeof(*w));
    if (!w) {
        atomic_store(&k->th_state, TH_QUEUED);
        spare_queue(r, t, due_ms);
        /* an abort between the caller's check and TH_QUEUED found nothing to end */
        unsigned char queued = TH_QUEUED;
        if (scsi_task_aborted(t))
            atomic_compare_exchange_strong(&k->th_state, &queued, TH_QUEUED_ABORTED);
        return true;
    }
    *w = (struct throttle_wait){.t = t, .r = r, .lu_slot = lu_slot, .e_slot = e_slot};
    k->th.wait = w;
    atomic_store(&k->th_state, TH_WAITING);
    reactor_timer_at(r, &w->timer, due_ms, throttle_due, w);
    /* An abort that came after the caller's check but before TH_WAITING was stored found
     * nothing to end (its CAS saw TH_NONE); end the command here instead of at its turn. The
     * CAS makes this and scsi_throttle_abort() end it once. The message runs on this reactor
     * after we return, so the timer it stops is set. No test reaches this window: it lies
     * between two instructions of one thread, with no point to hold it open from outside. */
    unsigned char waiting = TH_WAITING;
    if (scsi_task_aborted(t) && atomic_compare_exchange_strong(&k->th_state, &waiting, TH_ABORTED))
        reactor_post(r, &w->msg, throttle_aborted, w);
    return true;
}
