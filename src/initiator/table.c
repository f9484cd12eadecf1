/* The session's task table: a fixed array of slots, their ITTs (slot | generation, looked up
 * in O(1); ini.h says how they are numbered), and giving a slot back when its task completes,
 * with the PDUs of it still queued to send, which point into its buffer and at the slot.
 * Taking one (ini_task_take) is inline in ini.h: it is on every command's path. */
#include <assert.h>
#include <stdlib.h>

#include "initiator/ini.h"
#include "initiator/table.h"
#include "util/log.h"

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

/* A task's PDU left the queue: written whole (ok), or dropped with its connection. The task
 * is still t->conn's: it lets go of its PDUs before it leaves (ini_task_detach). */
static void task_pdu_sent(struct wire_pdu *p, bool ok)
{
    struct ini_task *t = p->arg;
    assert(t->queued > 0);
    t->queued--;
    if (ok && (p->hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_SCSI_CMD)
        t->cmd_sent = true;
}

static uint64_t resend_bytes(const struct wire_pdu *p)
{
    return sizeof(struct wire_pdu) + (uint64_t)p->dlen;
}

static void task_pdu_resent(struct wire_pdu *p, bool ok)
{
    struct ini_task *t = p->arg;
    assert(t->conn && t->conn->resend_unsent >= resend_bytes(p));
    t->conn->resend_unsent -= resend_bytes(p);
    task_pdu_sent(p, ok);
}

void ini_task_pdu_mark(struct ini_task *t, struct wire_pdu *p, uint32_t dlen, bool resend)
{
    p->sent = resend ? task_pdu_resent : task_pdu_sent;
    p->arg = t;
    p->dlen = dlen; /* as ini_conn_send sets it: the PDU may be dropped at once, in there */
    if (resend)
        t->conn->resend_unsent += resend_bytes(p);
    t->queued++;
}

static enum wire_forget task_pdu_forget(struct wire_pdu *p, void *arg, void **into)
{
    (void)into; /* the engine copies into memory the PDU owns */
    struct ini_task *t = arg;
    if (p->arg != t || (p->sent != task_pdu_sent && p->sent != task_pdu_resent))
        return WIRE_FORGET_NOT;
    if (p->sent == task_pdu_resent)
        t->conn->resend_unsent -= resend_bytes(p);
    p->sent = NULL;
    p->arg = NULL;
    t->queued--;
    /* RFC 7143 §4.2.3.3, §11.7: once the task has its status (or is aborted, or moves to
     * another connection), Data-Out of it is of no use to the target, which discards it; the
     * caller may reuse or free the buffer it points into the moment its callback runs. A
     * command is not dropped: its CmdSN belongs to the session's sequence. */
    return (p->hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_DATA_OUT ? WIRE_FORGET_DROP
                                                                : WIRE_FORGET_COPY;
}

void ini_task_detach(struct lr_session *s, struct ini_task *t)
{
    (void)s;
    if (!t->queued)
        return;
    struct ini_conn *c = t->conn;
    /* the queue is only ever touched on its connection's thread (conn.c) */
    assert(c && (!s->mt || c->r == reactor_self()));
    if (wire_forget(&c->w, task_pdu_forget, t) < 0)
        LOG_WARN("initiator: connection %u: out of memory letting go of task %08x's data: "
                 "connection closed",
                 c->idx, t->itt);
    assert(t->queued == 0);
}

void ini_task_complete(struct lr_session *s, struct ini_task *t, struct lr_result *res)
{
    ini_task_detach(s, t);
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
