/* The session's task table: a fixed array of slots, their ITTs (slot | generation, looked up
 * in O(1); ini.h says how they are numbered), and giving a slot back when its task completes.
 * Taking one (ini_task_take) is inline in ini.h: it is on every command's path. */
#include <stdlib.h>

#include "initiator/ini.h"
#include "initiator/table.h"

uint32_t ini_task_idx(const struct lr_session *s, const struct ini_task *t)
{
    return t->itt & ini_itt_idx_mask(s);
}

struct ini_task *ini_task_lookup(struct lr_session *s, uint32_t itt)
{
    uint32_t idx = itt & ini_itt_idx_mask(s);
    if (itt & 0x80000000u || idx >= s->ntasks)
        return NULL;
    struct ini_task *t = &s->tasks[idx];
    return t->state == ITS_ACTIVE && t->itt == itt ? t : NULL;
}

int ini_table_init(struct lr_session *s, uint32_t ntasks)
{
    s->ntasks = ntasks;
    s->itt_idx_bits = 1;
    while ((1u << s->itt_idx_bits) < s->ntasks)
        s->itt_idx_bits++;
    s->tasks = calloc(s->ntasks, sizeof(*s->tasks));
    s->free_idx = calloc(s->ntasks, sizeof(*s->free_idx));
    if (!s->tasks || !s->free_idx) {
        ini_table_free(s);
        return -1;
    }
    for (uint32_t i = 0; i < s->ntasks; i++)
        s->free_idx[s->nfree++] = s->ntasks - 1 - i;
    return 0;
}

void ini_table_free(struct lr_session *s)
{
    free(s->tasks);
    free(s->free_idx);
    s->tasks = NULL;
    s->free_idx = NULL;
}

void ini_task_complete(struct lr_session *s, struct ini_task *t, struct lr_result *res)
{
    res->conn = t->conn ? (int)t->conn->idx : -1;
    res->recovered = t->recovered;
    struct ini_conn *on = t->state == ITS_ACTIVE ? t->conn : NULL;
    if (on)
        on->outstanding--;
    lr_done_fn done = t->done;
    void *arg = t->arg;
    t->state = ITS_FREE;
    t->conn = NULL;
    t->buf = NULL;
    s->free_idx[s->nfree++] = ini_task_idx(s, t);
    s->inflight--;
    if (res->err == LR_OK)
        s->relogin_rounds = 0; /* the session works: logouts asked for are not in a row */
    if (done) {
        struct ini_conn *outer = s->completing;
        s->completing = on;
        done(arg, res);
        s->completing = outer;
    }
}
