/* The per-LUN range lock (range_lock.h): a held list and a FIFO of waiters under a mutex that
 * is only taken for list updates, plus a lock-free counter for the shared data path. Waiters
 * are resumed by a message to their reactor, so a grant never runs a command on the thread
 * that released the range (and never deep inside that thread's stack). */
#include "scsi/range_lock.h"

#include "reactor/reactor.h"

void scsi_rl_init(struct scsi_range_lock *rl)
{
    pthread_mutex_init(&rl->m, NULL);
    atomic_init(&rl->excl, 0);
    atomic_init(&rl->fast, 0);
    list_init(&rl->held);
    list_init(&rl->waiting);
    rl->writers = 0;
}

void scsi_rl_destroy(struct scsi_range_lock *rl)
{
    pthread_mutex_destroy(&rl->m);
}

/* Which modes exclude each other when their ranges overlap (symmetric). */
static const bool mode_conflict[4][4] = {
    [SCSI_RL_SHARED] = {[SCSI_RL_EXCL] = true},
    [SCSI_RL_READ] = {[SCSI_RL_WRITE] = true, [SCSI_RL_EXCL] = true},
    [SCSI_RL_WRITE] = {[SCSI_RL_READ] = true, [SCSI_RL_WRITE] = true, [SCSI_RL_EXCL] = true},
    [SCSI_RL_EXCL] = {true, true, true, true},
};

static bool conflicts(const struct scsi_rl_req *a, const struct scsi_rl_req *b)
{
    if (!mode_conflict[a->mode][b->mode])
        return false;
    return a->off < b->off + b->len && b->off < a->off + a->len;
}

/* Under rl->m: may q be granted now? It must not conflict with a holder nor with an earlier
 * waiter (arrival order among overlapping requests), and an exclusive request waits for the
 * fast holders, whose ranges are unknown. */
static bool grantable(struct scsi_range_lock *rl, const struct scsi_rl_req *q)
{
    if (q->mode == SCSI_RL_EXCL && atomic_load(&rl->fast))
        return false;
    if (q->mode == SCSI_RL_READ && !rl->writers)
        return true;
    for (struct list_node *n = rl->held.next; n != &rl->held; n = n->next)
        if (conflicts(q, list_entry(n, struct scsi_rl_req, node)))
            return false;
    for (struct list_node *n = rl->waiting.next; n != &rl->waiting; n = n->next) {
        const struct scsi_rl_req *w = list_entry(n, struct scsi_rl_req, node);
        if (w == q)
            break;
        if (conflicts(q, w))
            return false;
    }
    return true;
}

/* Under rl->m: move every waiter that can go now to the held list; returns them chained. */
static struct scsi_rl_req *grant_waiters(struct scsi_range_lock *rl)
{
    struct scsi_rl_req *ready = NULL, **tail = &ready;
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &rl->waiting)
    {
        struct scsi_rl_req *w = list_entry(n, struct scsi_rl_req, node);
        if (!grantable(rl, w))
            continue;
        list_del(&w->node);
        list_add_tail(&rl->held, &w->node);
        w->ready = NULL;
        *tail = w;
        tail = &w->ready;
    }
    return ready;
}

static void granted_msg(void *arg)
{
    struct scsi_rl_req *q = arg;
    q->granted(q);
}

static void resume(struct scsi_rl_req *ready)
{
    while (ready) {
        struct scsi_rl_req *q = ready;
        ready = q->ready;
        if (q->r)
            reactor_post(q->r, &q->grant_msg, granted_msg, q);
        else
            q->granted(q);
    }
}

bool scsi_rl_try_fast(struct scsi_range_lock *rl)
{
    atomic_fetch_add(&rl->fast, 1);
    /* seq_cst pairs with scsi_rl_acquire's increment of excl followed by its load of fast:
     * one of the two sides sees the other. */
    if (!atomic_load(&rl->excl))
        return true;
    scsi_rl_release_fast(rl);
    return false;
}

void scsi_rl_release_fast(struct scsi_range_lock *rl)
{
    if (atomic_fetch_sub(&rl->fast, 1) != 1 || !atomic_load(&rl->excl))
        return;
    /* the last fast holder left while an exclusive request may be waiting for it */
    pthread_mutex_lock(&rl->m);
    struct scsi_rl_req *ready = grant_waiters(rl);
    pthread_mutex_unlock(&rl->m);
    resume(ready);
}

bool scsi_rl_acquire(struct scsi_range_lock *rl, struct scsi_rl_req *q)
{
    q->r = reactor_self();
    pthread_mutex_lock(&rl->m);
    if (q->mode == SCSI_RL_EXCL)
        atomic_fetch_add(&rl->excl, 1);
    if (q->mode == SCSI_RL_WRITE || q->mode == SCSI_RL_EXCL)
        rl->writers++;
    bool now = grantable(rl, q);
    list_add_tail(now ? &rl->held : &rl->waiting, &q->node);
    pthread_mutex_unlock(&rl->m);
    return now;
}

void scsi_rl_release(struct scsi_range_lock *rl, struct scsi_rl_req *q)
{
    pthread_mutex_lock(&rl->m);
    list_del(&q->node);
    if (q->mode == SCSI_RL_EXCL)
        atomic_fetch_sub(&rl->excl, 1);
    if (q->mode == SCSI_RL_WRITE || q->mode == SCSI_RL_EXCL)
        rl->writers--;
    struct scsi_rl_req *ready = grant_waiters(rl);
    pthread_mutex_unlock(&rl->m);
    resume(ready);
}
