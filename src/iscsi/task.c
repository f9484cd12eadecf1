/* The task pool: a task's allocation (from its reactor's warm free list, then its connection's),
 * its reference count and the one place it is freed (struct iscsi_task), and the hash of a
 * connection's tasks by ITT. Below the command flow (cmd.c) and the orphans (orphan.c). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/session.h"
#include "iscsi/task.h"
#include "iscsi/taskmem.h"

/* The shared pools of c's reactor when called on its thread, else NULL. */
static struct iscsi_reactor_local *task_reactor_local(struct iscsi_conn *c)
{
    struct iscsi_server *srv = c->srv;
    if (!srv->local || reactor_self() != c->reactor)
        return NULL;
    assert(c->rid >= 0 && (unsigned)c->rid < srv->nreactors);
    return &srv->local[c->rid];
}

struct iscsi_task *task_alloc(struct iscsi_conn *c)
{
    struct iscsi_reactor_local *l = task_reactor_local(c);
    struct list_node *n = l ? list_pop(&l->task_free) : NULL;
    if (n)
        l->ntask_free--;
    else
        n = list_pop(&c->task_free);
    struct iscsi_task *t = n ? list_entry(n, struct iscsi_task, node) : malloc(sizeof(*t));
    if (!t)
        return NULL;
    memset(t, 0, sizeof(*t)); /* also what scsi_task_init() does for the embedded task */
    t->conn = c;
    t->refs = 1; /* the protocol side's */
    list_init(&t->retained_node);
    list_init(&t->wait.node);
    list_add_tail(&c->tasks, &t->node);
    c->ntasks++;
    return t;
}

void task_get(struct iscsi_task *t)
{
    assert(t->refs > 0);
    t->refs++;
}

/* The task stops counting in its portal's queue depth (struct iscsi_task.st_queue): on the
 * reactor that counted it, as every caller runs on the task's connection's thread. */
void task_queue_leave(struct iscsi_task *t)
{
    iostats_queue(t->st_queue, -1);
    t->st_queue = NULL;
}

/* The one place a task is freed: when its last holder lets go (see struct iscsi_task). */
void task_put(struct iscsi_task *t)
{
    assert(t->refs > 0);
    if (--t->refs > 0)
        return;
    struct iscsi_conn *c = t->conn;
    if (!c) {
        /* ERL 2: an orphan never reassigned (orphan.c), on no connection's lists: its buffer
         * charge left with it, and it holds a session reference of its own. */
        assert(t->orphan == ORPHAN_NO || t->orphan == ORPHAN_IDLE);
        assert(list_empty(&t->wait.node) && list_empty(&t->retained_node));
        struct iscsi_session *s = t->orphan_sess;
        scsi_task_release(&t->scsi);
        taskmem_uncharge(s->srv, t->buf_charge); /* the orphan's memory, till now */
        free(t);
        session_put(s);
        return;
    }
    /* ended unanswered (aborted, dropped, its connection gone): out of the queue depth */
    task_queue_leave(t);
    assert(list_empty(&t->wait.node));     /* no longer waiting for its CmdSN turn */
    assert(list_empty(&t->retained_node)); /* the retained list holds a reference */
    assert(c->w.in.task != t);             /* the receive engine holds a reference while placing */
    task_hash_del(c, t);
    assert(c->buf_bytes >= t->buf_charge);
    c->buf_bytes -= t->buf_charge;
    scsi_task_release(&t->scsi);
    taskmem_uncharge(c->srv, t->buf_charge);
    t->buf_charge = 0;
    list_del(&t->node);
    c->ntasks--;
    struct iscsi_reactor_local *l = task_reactor_local(c);
    if (l && l->ntask_free < ISCSI_REACTOR_TASKS_MAX) {
        list_add(&l->task_free, &t->node);
        l->ntask_free++;
    } else {
        list_add_tail(&c->task_free, &t->node);
    }
}

/* The last reference to c is gone: the tasks in its own free list go with it. */
void task_pool_conn_free(struct iscsi_conn *c)
{
    struct list_node *n;
    while ((n = list_pop(&c->task_free)) != NULL)
        free(list_entry(n, struct iscsi_task, node));
}

/* ---------------- a connection's tasks taking Data-Out, by ITT ---------------- */

static unsigned task_hash_bucket(uint32_t itt)
{
    return (itt ^ (itt >> 8) ^ (itt >> 16)) & (ISCSI_TASK_HASH_SIZE - 1);
}

void task_hash_add(struct iscsi_conn *c, struct iscsi_task *t)
{
    unsigned b = task_hash_bucket(t->itt);
    t->hash_next = c->task_hash[b];
    c->task_hash[b] = t;
    t->in_hash = true;
}

void task_hash_del(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (!t->in_hash)
        return;
    struct iscsi_task **pp = &c->task_hash[task_hash_bucket(t->itt)];
    while (*pp && *pp != t)
        pp = &(*pp)->hash_next;
    if (*pp)
        *pp = t->hash_next;
    t->in_hash = false;
}

struct iscsi_task *task_hash_find(struct iscsi_conn *c, uint32_t itt)
{
    for (struct iscsi_task *t = c->task_hash[task_hash_bucket(itt)]; t; t = t->hash_next)
        if (t->itt == itt)
            return t;
    return NULL;
}
