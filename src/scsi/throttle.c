/* Commands over a cap wait in the core before they run: the LUN's IOPS and bytes/s caps on this
 * gateway (util/rate_limit.h), and a cap the transport names for the task (an initiator
 * entry's). The wait never blocks a thread: the command gets a timer on the reactor that ran it,
 * set to the turn the cap gave it, and runs from there. Turns are given in the order commands
 * reach the core and timers of one reactor with one deadline fire in the order they were set,
 * so commands of one connection run in their order. Nothing is allocated: the timer and the
 * abort's message live in the task, and how many commands wait is bounded by the sessions'
 * command windows.
 *
 * An abort (a TMF, a LUN reset, a lost connection, PREEMPT AND ABORT) of a waiting command ends
 * it at once, on its reactor, with the status quiesce.c gives aborted tasks; it never reaches
 * the store, and the task management function's answer does not wait for its turn. */
#include <assert.h>
#include <string.h>

#include "scsi/scsi_internal.h"

enum {
    TH_NONE = 0,
    TH_WAITING, /* its timer is set */
    TH_ABORTED, /* aborted while waiting: the message ends it, the timer does nothing */
};

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
    struct scsi_task *t = arg;
    struct scsi_task_core *k = scsi_core(t);
    unsigned char waiting = TH_WAITING;
    if (!atomic_compare_exchange_strong(&k->th_state, &waiting, TH_NONE))
        return; /* aborted meanwhile: throttle_aborted() ends it */
    atomic_fetch_sub_explicit(&t->lu->throttled, 1, memory_order_relaxed);
    k->cmd->exec(t, k->cmd);
}

/* Aborted while waiting: ended without running (t->done is the core's, which says TASK ABORTED
 * and lets a quiesce wait go on). */
static void throttle_aborted(void *arg)
{
    struct scsi_task *t = arg;
    struct scsi_task_core *k = scsi_core(t);
    reactor_timer_stop(k->th_reactor, &k->th_timer);
    /* its slots go back where no later command holds one behind them: aborting what waits
     * does not leave the cap reserved for commands that never run */
    rate_limit_refund(&t->lu->limit, &k->th_lu_slot);
    if (t->limit)
        rate_limit_refund(t->limit, &k->th_e_slot);
    atomic_store(&k->th_state, TH_NONE);
    atomic_fetch_sub_explicit(&t->lu->throttled, 1, memory_order_relaxed);
    t->done(t);
}

void scsi_throttle_abort(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    unsigned char waiting = TH_WAITING;
    /* From any thread: the task's own reactor ends it, never inside the caller's abort */
    if (atomic_compare_exchange_strong(&k->th_state, &waiting, TH_ABORTED))
        reactor_post(k->th_reactor, &k->th_msg, throttle_aborted, t);
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
     * each counts it delayed only if it was the one (or one of the two) that held it back */
    struct scsi_task_core *k = scsi_core(t);
    memset(&k->th_lu_slot, 0, sizeof(k->th_lu_slot));
    memset(&k->th_e_slot, 0, sizeof(k->th_e_slot));
    uint64_t now = rate_limit_now_ns(), lu_until = 0, e_until = 0;
    if (rate_limit_on(&lu->limit))
        lu_until = rate_limit_charge(&lu->limit, op, t->xfer_len, now, &k->th_lu_slot);
    if (t->limit && rate_limit_on(t->limit))
        e_until = rate_limit_charge(t->limit, op, t->xfer_len, now, &k->th_e_slot);
    uint64_t until = lu_until > e_until ? lu_until : e_until;
    struct reactor *r = reactor_self();
    if (until <= now || !r) /* no reactor (a test driving the core from a thread): no wait */
        return false;
    if (lu_until > now)
        rate_limit_count_delay(&lu->limit, until - now);
    if (e_until > now)
        rate_limit_count_delay(t->limit, until - now);
    assert(atomic_load(&k->th_state) == TH_NONE);
    k->th_reactor = r;
    k->th_msg = (struct reactor_msg){0};
    atomic_fetch_add_explicit(&lu->throttled, 1, memory_order_relaxed);
    atomic_store(&k->th_state, TH_WAITING);
    /* the reactor's clock is CLOCK_MONOTONIC in whole ms: the first ms at or after the turn */
    reactor_timer_at(r, &k->th_timer, (until + 999999) / 1000000, throttle_due, t);
    /* An abort that came after the caller's check but before TH_WAITING was stored found
     * nothing to end (its CAS saw TH_NONE); end the command here instead of at its turn. The
     * CAS makes this and scsi_throttle_abort() end it once. The message runs on this reactor
     * after we return, so the timer it stops is set. No test reaches this window: it lies
     * between two instructions of one thread, with no point to hold it open from outside. */
    unsigned char waiting = TH_WAITING;
    if (scsi_task_aborted(t) && atomic_compare_exchange_strong(&k->th_state, &waiting, TH_ABORTED))
        reactor_post(r, &k->th_msg, throttle_aborted, t);
    return true;
}
