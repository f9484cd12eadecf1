/* The session's task table: a fixed array of slots, their ITTs (slot | generation, looked up
 * in O(1)), taking a free slot for a command and giving it back when the task completes. */
#include <stdlib.h>
#include <string.h>

#include "initiator/ini.h"

/* An ITT is a task slot's index in its low itt_idx_bits (as few as the slots need) and above
 * them, up to bit 30, the slot's generation: one more each time the slot takes a command. Bit
 * 31 stays clear: login, logout and TMF use tags above it.
 * An ITT must not come back while the target may still hold the task it named: at ERL 2 the
 * target keeps the tasks of a lost connection, answered ones included, for Time2Retain (20 s
 * by default), and a TASK REASSIGN finds them by ITT alone (RFC 7143 §11.5.1). A generation of
 * 15 bits shared by the session came round every 32768 commands, a fraction of a second, and
 * a reassignment then claimed a task of that name answered long before: its old status
 * completed the new command, which never ran, and the hole it left in the CmdSN sequence held
 * back every later command. A slot's own generation of 31 - itt_idx_bits bits comes round
 * after 2^21 commands of that slot at the default 1024 slots (2^25 for linerate-bench's QD +
 * 8), 2^16 at the most slots (32768). */
static uint32_t itt_idx_mask(const struct lr_session *s)
{
    return (1u << s->itt_idx_bits) - 1;
}

uint32_t ini_task_idx(const struct lr_session *s, const struct ini_task *t)
{
    return t->itt & itt_idx_mask(s);
}

/* The ITT slot idx takes next, from the one it had (0 for a slot never used). */
static uint32_t itt_next(const struct lr_session *s, uint32_t idx, uint32_t prev)
{
    uint32_t gen_mask = 0x7fffffffu >> s->itt_idx_bits;
    uint32_t gen = ((prev >> s->itt_idx_bits) + 1) & gen_mask;
    return idx | gen << s->itt_idx_bits;
}

struct ini_task *ini_task_lookup(struct lr_session *s, uint32_t itt)
{
    uint32_t idx = itt & itt_idx_mask(s);
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

struct ini_task *ini_task_take(struct lr_session *s)
{
    uint32_t idx = s->free_idx[--s->nfree];
    struct ini_task *t = &s->tasks[idx];
    uint32_t prev = t->itt;
    memset(t, 0, sizeof(*t));
    t->itt = itt_next(s, idx, prev);
    return t;
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
