/* Task scheduling for a session: the session-wide CmdSN window (RFC 7143 §4.2.2.1), spreading
 * commands over the MC/S connections (least outstanding, round robin on ties), handing them to
 * a connection's thread (its inbox, and moving a connection with what it owes) and the SCSI
 * command entry points. The task table itself is table.c's. */
#include <stdlib.h>
#include <string.h>

#include "initiator/abort.h"
#include "initiator/cdb.h"
#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/sched.h"
#include "initiator/table.h"
#include "initiator/task.h"

uint32_t lr_session_inflight(const struct lr_session *cs)
{
    struct lr_session *s = (struct lr_session *)cs;
    ini_lock(s);
    uint32_t n = s->inflight;
    ini_unlock(s);
    return n;
}

/* §4.2.2.1: MaxCmdSN and ExpCmdSN from the target only move forward, and a MaxCmdSN below
 * ExpCmdSN - 1 is ignored as invalid. */
void ini_session_update_window(struct lr_session *s, uint32_t exp, uint32_t max)
{
    if (sn_lt(max, exp - 1))
        return;
    bool opened = false;
    if (sn_lt(s->expcmdsn, exp))
        s->expcmdsn = exp;
    if (sn_lt(s->maxcmdsn, max)) {
        s->maxcmdsn = max;
        opened = true;
    }
    if (opened && (!list_empty(&s->waitq) || !list_empty(&s->resendq)))
        ini_session_kick(s);
}

void lr_session_next_conn(struct lr_session *s, int idx)
{
    ini_lock(s);
    s->next_conn = idx;
    ini_unlock(s);
}

/* Commands go to the least loaded connection, round robin on ties. With connections on
 * several threads, a command issued from a task's callback goes on that task's connection
 * instead: each connection keeps its own share of the queue depth going on its own thread, as
 * independent sessions would, rather than every completion handing a command across. */
static struct ini_conn *pick_conn(struct lr_session *s, const struct ini_task *t)
{
    if (t->want_conn >= 0 && (unsigned)t->want_conn < s->nconns &&
        s->conns[t->want_conn]->state == ICS_FFP && !s->conns[t->want_conn]->draining &&
        !s->conns[t->want_conn]->logout_sent)
        return s->conns[t->want_conn];
    struct ini_conn *best = NULL;
    unsigned n = s->nconns;
    for (unsigned k = 0; k < n; k++) {
        struct ini_conn *c = s->conns[(s->rr + k) % n];
        /* draining: the target asked for its logout; logout_sent: its own Logout went out
         * (RFC 7143 §11.14: no new command on it after) */
        if (c->state != ICS_FFP || c->draining || c->logout_sent)
            continue;
        if (!best || c->outstanding < best->outstanding)
            best = c;
    }
    /* ...unless another one carries clearly less: a connection that logged in again (ERL 2)
     * starts with nothing and would otherwise never get its share back */
    struct ini_conn *cur = s->completing;
    if (s->mt && cur && cur->state == ICS_FFP && !cur->draining && !cur->logout_sent &&
        (!best || cur->outstanding < best->outstanding + 4))
        return cur;
    if (best)
        s->rr = (best->idx + 1) % n;
    return best;
}

void ini_session_fail_waiting(struct lr_session *s, enum lr_err e, const char *what)
{
    struct list_node *n;
    while ((n = list_pop(&s->resendq)) != NULL || (n = list_pop(&s->waitq)) != NULL) {
        struct ini_task *t = list_entry(n, struct ini_task, node);
        struct lr_result r = {.err = e, .what = what};
        t->conn = NULL;
        ini_task_complete(s, t, &r);
    }
}

void ini_session_kick(struct lr_session *s)
{
    if (!s->logged_in || s->logging_out || s->destroyed)
        return;
    /* Commands that already own a CmdSN go first: the target's window waits for them. */
    while (!list_empty(&s->resendq)) {
        struct ini_task *t = list_entry(s->resendq.next, struct ini_task, node);
        struct ini_conn *c = pick_conn(s, t);
        if (!c)
            break;
        list_del(&t->node);
        ini_conn_submit(c, t);
    }
    while (!list_empty(&s->waitq) && sn_le(s->cmdsn, s->maxcmdsn)) {
        struct ini_task *t = list_entry(s->waitq.next, struct ini_task, node);
        struct ini_conn *c = pick_conn(s, t);
        if (!c)
            break;
        list_del(&t->node);
        t->cmdsn = s->cmdsn++;
        t->has_cmdsn = true;
        ini_conn_submit(c, t);
    }
    /* at ERL 2 they wait while the session reconnects (orphan.c) */
    if (ini_conns_any_up(s) == false && !ini_orphan_recovering(s) && !ini_relogin_pending(s))
        ini_session_fail_waiting(s, LR_ERR_NO_CONN, "no connection left in the session");
}

/* The command of t, or its TASK REASSIGN (ERL 2), onto c. */
static int send_task(struct ini_conn *c, struct ini_task *t)
{
    if (t->reassign && ini_abort_wanted(c->s, t))
        return ini_abort_send_orphan(c, t); /* aborted where it would be reassigned */
    return t->reassign ? ini_task_send_reassign(c, t) : ini_task_send(c, t);
}

void ini_conn_drain_inbox(struct ini_conn *c)
{
    c->inbox_kicked = false;
    struct list_node *n;
    while ((n = list_pop(&c->inbox)) != NULL) {
        struct ini_task *t = list_entry(n, struct ini_task, node);
        c->outstanding--; /* counted again by ini_task_send */
        t->state = ITS_ACTIVE;
        if (ini_conn_fail(c, send_task(c, t)) < 0)
            break; /* the rest of the inbox became its unsent commands */
    }
}

static void conn_inbox_msg(void *arg)
{
    struct ini_conn *c = arg;
    struct lr_session *s = c->s;
    ini_lock(s);
    s->msgs--;
    /* A message that reaches the old thread of a connection that moved does nothing: the move
     * took the inbox along, and anything handed over since went to its new thread. */
    if (c->r == reactor_self())
        ini_conn_drain_inbox(c);
    ini_unlock(s);
}

void ini_conn_submit(struct ini_conn *c, struct ini_task *t)
{
    struct lr_session *s = c->s;
    if (!s->mt || c->r == reactor_self()) {
        t->state = ITS_ACTIVE;
        int rc = send_task(c, t);
        if (rc < 0)
            ini_conn_fail(c, rc);
        return;
    }
    /* Waiting with its CmdSN (the tick leaves it alone); counted on c for pick_conn. */
    t->state = ITS_WAITING;
    t->conn = NULL;
    c->outstanding++;
    list_add_tail(&c->inbox, &t->node);
    if (!c->inbox_kicked) {
        c->inbox_kicked = true;
        /* Not queued: the kick from before a failure reset inbox_kicked is still pending on
         * this same thread, and drains the inbox when it runs. */
        if (reactor_post(c->r, &c->inbox_msg[c->moves & 1], conn_inbox_msg, c))
            s->msgs++;
    }
}

void ini_conn_move(struct ini_conn *c, struct reactor *to)
{
    struct lr_session *s = c->s;
    ini_lock(s); /* held twice: the flush below keeps it through its sendmsg */
    /* What this thread still owes the connection goes out from here first. */
    ini_conn_drain_inbox(c);
    if (reactor_undefer(&c->w.flush_hook))
        ini_conn_flush(c);
    c->r = to;
    c->moves++; /* kicks go to it with the other inbox message */
    if (wire_move(&c->w, to) < 0)
        ini_conn_close(c, "cannot move the connection to its thread");
    ini_unlock(s);
}

static int scsi_locked(struct lr_session *s, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                       void *buf, uint32_t len, lr_done_fn done, void *arg, uint32_t *tag)
{
    if (!s->logged_in || s->logging_out || s->destroyed || !s->nfree || cdb_len > 16 ||
        (!ini_conns_any_up(s) && !ini_orphan_recovering(s) && !ini_relogin_pending(s)))
        return -1;
    struct ini_task *t = ini_task_take(s);
    memcpy(t->cdb, cdb, cdb_len);
    t->cdb_len = (uint8_t)cdb_len;
    t->dir = dir;
    t->buf = buf;
    t->len = len;
    t->done = done;
    t->arg = arg;
    t->deadline_ms = reactor_now_ms() + s->o.cmd_timeout_ms;
    if (tag)
        *tag = t->itt; /* before the kick: the command may complete within it */
    t->want_conn = s->next_conn;
    s->next_conn = -1;
    t->state = ITS_WAITING;
    s->inflight++;
    list_add_tail(&s->waitq, &t->node);
    ini_session_kick(s);
    return 0;
}

int lr_scsi_tag(struct lr_session *s, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                void *buf, uint32_t len, lr_done_fn done, void *arg, uint32_t *tag)
{
    ini_lock(s);
    int rc = scsi_locked(s, cdb, cdb_len, dir, buf, len, done, arg, tag);
    ini_unlock(s);
    return rc;
}

int lr_scsi(struct lr_session *s, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir, void *buf,
            uint32_t len, lr_done_fn done, void *arg)
{
    return lr_scsi_tag(s, cdb, cdb_len, dir, buf, len, done, arg, NULL);
}

static int rw(struct lr_session *s, bool write, uint64_t lba, uint32_t blocks, uint32_t bs,
              void *buf, lr_done_fn done, void *arg, uint32_t *tag)
{
    uint8_t cdb[16];
    unsigned len = ini_cdb_rw(cdb, write, lba, blocks);
    uint64_t bytes = (uint64_t)blocks * bs;
    if (bytes > 0xffffffffu)
        return -1;
    return lr_scsi_tag(s, cdb, len, write ? LR_DIR_WRITE : LR_DIR_READ, buf, (uint32_t)bytes, done,
                       arg, tag);
}

int lr_read(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size, void *buf,
            lr_done_fn done, void *arg)
{
    return rw(s, false, lba, blocks, block_size, buf, done, arg, NULL);
}

int lr_write(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size,
             const void *buf, lr_done_fn done, void *arg)
{
    return rw(s, true, lba, blocks, block_size, (void *)buf, done, arg, NULL);
}

int lr_write_tag(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size,
                 const void *buf, lr_done_fn done, void *arg, uint32_t *tag)
{
    return rw(s, true, lba, blocks, block_size, (void *)buf, done, arg, tag);
}

struct readcap_ctx {
    struct lr_session *s;
    lr_capacity_fn done;
    void *arg;
    unsigned tries;
    bool rc10;
    uint8_t buf[32];
};

static int readcap_issue(struct readcap_ctx *x);

static uint8_t sense_key(const struct lr_result *res)
{
    /* SPC-5 §4.4: fixed format (0x70/0x71) has the key in byte 2, descriptor format in byte 1 */
    if (res->sense_len < 3)
        return 0;
    uint8_t code = res->sense[0] & 0x7f;
    return code >= 0x72 ? res->sense[1] & 0x0f : res->sense[2] & 0x0f;
}

static void readcap_done(void *arg, const struct lr_result *res)
{
    struct readcap_ctx *x = arg;
    uint64_t blocks = 0;
    uint32_t bs = 0;
    if (res->err == LR_SCSI_STATUS && x->tries++ < 8) {
        uint8_t key = sense_key(res);
        /* A new I_T nexus first sees UNIT ATTENTION (power on / reset, SAM-5 §5.14); a target
         * without READ CAPACITY(16) says ILLEGAL REQUEST: use the 10-byte form. */
        if (key == 0x6 || (key == 0x5 && !x->rc10)) {
            x->rc10 = x->rc10 || key == 0x5;
            if (readcap_issue(x) == 0)
                return;
        }
    }
    if (res->err == LR_OK) {
        if (x->rc10) {
            blocks = (uint64_t)get_be32(x->buf) + 1;
            bs = get_be32(x->buf + 4);
        } else {
            blocks = get_be64(x->buf) + 1;
            bs = get_be32(x->buf + 8);
        }
    }
    x->done(x->arg, res, blocks, bs);
    free(x);
}

static int readcap_issue(struct readcap_ctx *x)
{
    uint8_t cdb[16] = {0};
    unsigned len = 10;
    if (x->rc10) {
        cdb[0] = 0x25; /* READ CAPACITY(10) */
    } else {
        cdb[0] = 0x9e; /* SERVICE ACTION IN(16) / READ CAPACITY(16) */
        cdb[1] = 0x10;
        put_be32(cdb + 10, sizeof(x->buf));
        len = 16;
    }
    return lr_scsi(x->s, cdb, len, LR_DIR_READ, x->buf, x->rc10 ? 8 : sizeof(x->buf), readcap_done,
                   x);
}

int lr_read_capacity(struct lr_session *s, lr_capacity_fn done, void *arg)
{
    struct readcap_ctx *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    x->s = s;
    x->done = done;
    x->arg = arg;
    if (readcap_issue(x) < 0) {
        free(x);
        return -1;
    }
    return 0;
}
