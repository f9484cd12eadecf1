/* Aborted tasks and the wait for them to leave the store (SAM-5 §7.1: a task management
 * function answers FUNCTION COMPLETE only once every command it aborted has ended, so no
 * aborted command may change the medium after that answer).
 *
 * A task is in the core from scsi_task_exec() until its done() call. scsi_task_abort() marks
 * it aborted there: work not yet given to the store never is (a queued range-lock request, the
 * next chunk of WRITE SAME, UNMAP or EXTENDED COPY), and a request the store already
 * has runs to its end, as a store cannot take back a write it began (an io_uring write, a
 * librbd aio). Each LUN counts its aborted tasks still in the core; scsi_lun_quiesce() runs a
 * callback once that count is 0. The count covers every aborted task of the LUN, whoever
 * aborted it (a TMF, PREEMPT AND ABORT, a connection lost or reinstated), so a wait is never
 * shorter than the one it needs, and at most as long as the aborted work still in the store.
 *
 * Threads: a task's abort and its done() may run on different threads (an ERL 2 orphan is
 * aborted by whichever reactor took the TMF), so the task's phase is one atomic and the count
 * is raised before the phase moves, never after. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <stdatomic.h>

#include "scsi/scsi_internal.h"

static void waiters_fire(struct scsi_lun *lu)
{
    pthread_mutex_lock(&lu->quiesce_lock);
    struct scsi_wait *w = NULL;
    if (atomic_load(&lu->aborting) == 0) { /* not raised again meanwhile */
        w = lu->quiesce_waiters;
        lu->quiesce_waiters = NULL;
    }
    pthread_mutex_unlock(&lu->quiesce_lock);
    while (w) {
        struct scsi_wait *next = w->next;
        if (w->r)
            reactor_post(w->r, &w->msg, w->fn, w->arg);
        else
            w->fn(w->arg);
        w = next;
    }
}

static void aborting_drop(struct scsi_lun *lu)
{
    int was = atomic_fetch_sub(&lu->aborting, 1);
    assert(was > 0);
    if (was == 1)
        waiters_fire(lu);
}

/* The transport's done, behind the core's: the aborted count drops first, then the transport
 * hears of the end (and may free the task). */
static void core_done(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    void (*done)(struct scsi_task *) = k->transport_done;
    t->done = done;
    if (atomic_exchange(&k->phase, PHASE_IDLE) == PHASE_ABORTED) {
        t->status = SCSI_STATUS_TASK_ABORTED; /* nobody answers it; said for the record */
        t->sense_len = 0;
        aborting_drop(t->lu);
    }
    done(t);
}

void scsi_task_enter(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    assert(atomic_load(&k->phase) == PHASE_IDLE);
    k->transport_done = t->done;
    t->done = core_done;
    atomic_store(&k->phase, PHASE_RUNNING);
}

void scsi_task_abort(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    if (atomic_load(&k->phase) != PHASE_RUNNING || !t->lu)
        return;
    struct scsi_lun *lu = t->lu; /* held by the task until release, after done */
    atomic_fetch_add(&lu->aborting, 1);
    unsigned char running = PHASE_RUNNING;
    if (!atomic_compare_exchange_strong(&k->phase, &running, PHASE_ABORTED))
        aborting_drop(lu); /* it ended meanwhile */
    else
        scsi_throttle_abort(t); /* waiting for its turn under a cap: not any more */
}

bool scsi_task_commit(struct scsi_task *t)
{
    unsigned char running = PHASE_RUNNING;
    return atomic_compare_exchange_strong(&scsi_core(t)->phase, &running, PHASE_COMMITTED);
}

void scsi_task_submit(struct scsi_task *t, struct bs *bs, struct bs_io *io)
{
    if (t && scsi_task_aborted(t)) {
        io->done(io, -ECANCELED); /* as a store that refused it: the caller's path ends it */
        return;
    }
    bs_submit(bs, io);
}

bool scsi_lun_quiesce(struct scsi_lun *lu, struct scsi_wait *w)
{
    if (atomic_load(&lu->aborting) == 0)
        return false;
    w->r = reactor_self();
    w->msg = (struct reactor_msg){0};
    pthread_mutex_lock(&lu->quiesce_lock);
    bool wait = atomic_load(&lu->aborting) != 0;
    if (wait) {
        w->next = lu->quiesce_waiters;
        lu->quiesce_waiters = w;
    }
    pthread_mutex_unlock(&lu->quiesce_lock);
    return wait;
}

/* One LUN after another: a chain of waits through the target's LUNs, from `next` on. */
static void target_quiesce_step(void *arg)
{
    struct scsi_target_wait *tw = arg;
    struct scsi_target *t = tw->target;
    while (tw->next < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE)) {
        struct scsi_lun *lu = __atomic_load_n(&t->luns[tw->next++], __ATOMIC_ACQUIRE);
        tw->w.fn = target_quiesce_step;
        tw->w.arg = tw;
        if (lu && scsi_lun_quiesce(lu, &tw->w))
            return;
    }
    if (tw->waited)
        tw->fn(tw->arg);
}

bool scsi_target_quiesce(struct scsi_target *t, struct scsi_target_wait *tw)
{
    tw->target = t;
    tw->next = 0;
    tw->waited = false;
    /* Synchronously through the LUNs with nothing to wait for; the first wait makes the rest
     * asynchronous, and the last step then calls fn. */
    while (tw->next < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE)) {
        struct scsi_lun *lu = __atomic_load_n(&t->luns[tw->next++], __ATOMIC_ACQUIRE);
        tw->w.fn = target_quiesce_step;
        tw->w.arg = tw;
        if (lu && scsi_lun_quiesce(lu, &tw->w)) {
            tw->waited = true;
            return true;
        }
    }
    return false;
}

/* ---------------- the same, for a thread that may block ---------------- */

/* Shared by the waiting thread and the callbacks; the last of the two frees it, so a waiter
 * that gives up leaves it to a callback that comes later. */
struct scsi_sync_wait {
    struct scsi_join join; /* first: the join is the object */
    struct scsi_lun *lu;
    struct scsi_wait w;
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    atomic_int refs;
};

static void sync_put(struct scsi_sync_wait *sw)
{
    if (atomic_fetch_sub(&sw->refs, 1) != 1)
        return;
    pthread_cond_destroy(&sw->cv);
    pthread_mutex_destroy(&sw->m);
    free(sw);
}

static void sync_signal(void *arg)
{
    struct scsi_sync_wait *sw = arg;
    pthread_mutex_lock(&sw->m);
    sw->done = true;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->m);
    sync_put(sw);
}

/* Every abort marked: now the store. */
static void sync_marked(struct scsi_join *j)
{
    struct scsi_sync_wait *sw = (struct scsi_sync_wait *)j;
    sw->w.fn = sync_signal;
    sw->w.arg = sw;
    if (!scsi_lun_quiesce(sw->lu, &sw->w))
        sync_signal(sw);
}

struct scsi_sync_wait *scsi_sync_wait_new(struct scsi_lun *lu)
{
    struct scsi_sync_wait *sw = calloc(1, sizeof(*sw));
    if (!sw)
        return NULL;
    atomic_init(&sw->join.n, 1);
    sw->join.fn = sync_marked;
    sw->lu = lu;
    pthread_mutex_init(&sw->m, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sw->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&sw->refs, 2);
    return sw;
}

struct scsi_join *scsi_sync_wait_join(struct scsi_sync_wait *sw)
{
    return sw ? &sw->join : NULL;
}

bool scsi_sync_wait_finish(struct scsi_sync_wait *sw, unsigned timeout_ms)
{
    if (!sw)
        return false;
    assert(!reactor_self()); /* a reactor would wait for itself */
    scsi_join_done(&sw->join);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sw->m);
    int rc = 0;
    while (!sw->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&sw->cv, &sw->m, &until);
    bool done = sw->done;
    pthread_mutex_unlock(&sw->m);
    sync_put(sw);
    return done;
}
