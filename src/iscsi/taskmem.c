/* The daemon-wide budget of task data memory (max-task-buffers, docs/limits.md): every byte a
 * command will hold for its data is charged here before the SCSI core allocates it, and given
 * back when the task frees it, whichever connection (or none: an ERL 2 orphan) holds the task
 * then. One atomic per command, never per PDU. */
#include <assert.h>
#include <inttypes.h>

#include "iscsi/node.h"
#include "iscsi/taskmem.h"
#include "reactor/reactor.h"
#include "util/log.h"

bool taskmem_charge(struct iscsi_server *srv, uint64_t n)
{
    uint64_t cap = srv->limits.max_task_buffers;
    uint64_t cur = atomic_load_explicit(&srv->task_mem, memory_order_relaxed);
    do {
        if (cap && (n > cap || cur > cap - n))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&srv->task_mem, &cur, cur + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

void taskmem_uncharge(struct iscsi_server *srv, uint64_t n)
{
    uint64_t before = atomic_fetch_sub_explicit(&srv->task_mem, n, memory_order_relaxed);
    assert(before >= n);
    (void)before;
}

/* A command refused for the budget: counted, and said in the log a few times a minute at
 * most (a peer filling the budget would otherwise write a line per command). */
void taskmem_refused(struct iscsi_server *srv, const char *peer, uint64_t n)
{
    atomic_fetch_add_explicit(&srv->task_mem_refused, 1, memory_order_relaxed);
    unsigned sup = 0;
    pthread_mutex_lock(&srv->task_mem_log_lock);
    bool say = log_limit_allow(&srv->task_mem_log, reactor_now_ms(), &sup);
    pthread_mutex_unlock(&srv->task_mem_log_lock);
    if (!say)
        return;
    if (sup)
        LOG_WARN("max-task-buffers: %u more commands refused and not logged", sup);
    LOG_WARN("%s: a command needing %" PRIu64 " bytes of buffers refused: tasks hold %" PRIu64
             " of max-task-buffers %" PRIu64 " (answered TASK SET FULL or BUSY)",
             peer, n, atomic_load_explicit(&srv->task_mem, memory_order_relaxed),
             srv->limits.max_task_buffers);
}
