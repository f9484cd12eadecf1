/* Running SCSI commands on the target: a task goes to the SCSI core once its CmdSN turn
 * came and its data is in, its completion is answered (response.c) and counted (metrics);
 * a task aborted is never answered. */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/exec.h"
#include "iscsi/response.h"
#include "iscsi/session.h"
#include "iscsi/task.h"
#include "util/log.h"

/* Medium reads and writes by opcode (SBC-3): the metrics' read/write classes; everything else,
 * INQUIRY to COMPARE AND WRITE, is "other". */
static enum iostats_op cmd_op(const uint8_t *cdb)
{
    switch (cdb[0]) {
    case 0x08:
    case 0x28:
    case 0xa8:
    case 0x88: /* READ (6), (10), (12), (16) */
        return IOSTATS_READ;
    case 0x0a:
    case 0x2a:
    case 0xaa:
    case 0x8a: /* WRITE (6), (10), (12), (16) */
        return IOSTATS_WRITE;
    default:
        return IOSTATS_OTHER;
    }
}

/* A command answered: one count each in this reactor's shard of its LUN's, host entry's,
 * session's and portal's counters (util/iostats.h: reactor-local stores, no lock, no atomic RMW).
 * Bytes are those the command moved: the Data-In sent, or the data-out the store took (GOOD only).
 */
static void cmd_count(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (!IOSTATS_ENABLED) { /* -Dmetrics=false: not even the clock reading */
        task_queue_leave(t);
        return;
    }
    const struct scsi_task *st = &t->scsi;
    struct iostats_sample s = {.op = cmd_op(st->cdb), .err_slot = -1};
    s.lat_ns = iostats_now_ns() - t->arrival_ns;
    s.bucket = iostats_lat_bucket(s.lat_ns);
    if (st->status == SCSI_STATUS_GOOD) {
        if (!t->refused && st->dir == SCSI_DIR_READ) {
            uint32_t edtl = rsp_edtl(t);
            s.bytes = st->data_len < edtl ? st->data_len : edtl;
        } else if (!t->refused && st->dir == SCSI_DIR_WRITE) {
            s.bytes = t->data_expected;
        }
    } else {
        s.err_slot = iostats_err_slot(st->status, st->sense, st->sense_len);
    }
    iostats_cmd(iostats_shard(scsi_task_lun_stats(st), c->rid), &s);
    /* its initiator's entry's, for this LUN: NULL on a target without entries */
    iostats_cmd(iostats_shard(scsi_task_host_stats(st), c->rid), &s);
    iostats_cmd(c->st_session, &s);
    iostats_cmd(c->st_portal, &s);
    task_queue_leave(t);
}

/* An event of task t (an R2T sent, an abort) on its LUN, session and portal. */
void exec_count_event(struct iscsi_conn *c, struct iscsi_task *t, enum iostats_event ev)
{
    if (!IOSTATS_ENABLED)
        return;
    iostats_event(iostats_shard(scsi_task_lun_stats(&t->scsi), c->rid), ev);
    iostats_event(c->st_session, ev);
    iostats_event(c->st_portal, ev);
}

/* A data digest error in task t's data (immediate or Data-Out, ERL >= 1): its LUN's count. The
 * engine counted it for the session and the portal already (wire.c); a header digest error,
 * or data of a PDU with no task, names no LUN. */
void exec_count_lun_digest_error(struct iscsi_conn *c, struct iscsi_task *t)
{
    iostats_event(iostats_shard(scsi_task_lun_stats(&t->scsi), c->rid), IOSTATS_DIGEST_ERROR);
}

/* Answer the command; the protocol side is then done with it and drops its reference (the
 * queued PDUs, and the store until its completion returns, keep the task). */
int exec_respond(struct iscsi_conn *c, struct iscsi_task *t)
{
    int rc;
    assert(!t->aborted && t->state != TASK_SENDING);
    cmd_count(c, t);
    t->state = TASK_SENDING;
    if (t->scsi.dir == SCSI_DIR_READ && t->scsi.status == SCSI_STATUS_GOOD && t->scsi.data_len &&
        rsp_edtl(t) && !t->refused)
        rc = rsp_send_data_in(c, t);
    else
        rc = rsp_send_status(c, t);
    if (rc == ISCSI_OK && conn_erl(c) >= 1) {
        /* RFC 7143 §7.1, §11.16: kept until ExpStatSN acknowledges its StatSN, for a SNACK or
         * a command retry; the protocol side's reference becomes the retained list's. Sent in
         * StatSN order, so appending keeps the list sorted. */
        t->state = TASK_RETAINED;
        list_add_tail(&c->retained, &t->retained_node);
        c->nretained++;
        rsp_retained_bound(c);
        return rc;
    }
    task_put(t);
    return rc;
}

static void cmd_scsi_done(struct scsi_task *st)
{
    struct iscsi_task *t = st->transport_priv;
    struct iscsi_conn *c = t->conn;
    int rc = ISCSI_OK;
    if (t->orphan == ORPHAN_BUSY) {
        /* ERL 2: its connection is gone (c lives on by the store's reference to it); the
         * orphan group keeps the task, now answered by whoever reassigns it */
        assert(t->orphan_done); /* set with ORPHAN_BUSY (orphans_fill) */
        task_put(t);            /* the SCSI core's */
        t->orphan_done(t);      /* orphan.c decides its fate */
        conn_put(c);
        return;
    }
    if (c->dead) {
        /* closed while the store had it: conn_close() detached the session, nothing to
         * count or answer */
    } else if (t->aborted) {
        session_cmd_done(c->session); /* it counted in flight until the store let go */
    } else {
        rc = exec_respond(c, t);
    }
    task_put(t); /* the SCSI core's */
    if (c->exec_status)
        *c->exec_status = rc;
    else
        conn_fail(c, rc);
    conn_put(c);
}

static int cmd_exec(struct iscsi_conn *c, struct iscsi_task *t)
{
    t->state = TASK_EXEC;
    task_hash_del(c, t); /* no more Data-Out for it; the ITT may be reused after status */
    if (t->refused)
        return exec_respond(c, t);
    conn_get(c);
    task_get(t); /* the SCSI core's, until cmd_scsi_done() */
    t->scsi.done = cmd_scsi_done;
    /* A completion inside this call leaves its status here: the caller (a handler, or the
     * released-task run) returns it, and the connection is not closed under it. */
    int rc = ISCSI_OK, *outer = c->exec_status;
    c->exec_status = &rc;
    scsi_task_exec(&t->scsi);
    c->exec_status = outer;
    return rc;
}

/* Run once all data is in and the command's CmdSN turn has come. */
int exec_maybe_run(struct iscsi_conn *c, struct iscsi_task *t)
{
    /* A task waiting for its CmdSN turn stays TASK_QUEUED until exec_run_released() (on this
     * thread) takes it, even if its last Data-Out arrives first. */
    if (t->state == TASK_QUEUED || t->data_received < t->data_expected)
        return ISCSI_OK;
    /* a command that takes none of its data-out answers once the unsolicited burst is in */
    if ((t->refused || !t->data_expected) && t->unsol_remaining)
        return ISCSI_OK;
    return cmd_exec(c, t);
}

/* The session moved these tasks from its CmdSN queue to c->released (MC/S: they arrived ahead
 * of a command on another connection). Runs on c's reactor, the only thread that touches the
 * tasks' state. */
void exec_run_released(void *arg)
{
    struct iscsi_conn *c = arg;
    struct list_node ready;
    list_init(&ready);
    /* A kick (deferred call or message) may arrive after the connection closed: its teardown
     * took the released tasks back already. */
    if (!c->dead && c->session) {
        pthread_mutex_lock(&c->session->lock);
        c->release_kicked = false;
        if (!list_empty(&c->released)) {
            ready.next = c->released.next;
            ready.prev = c->released.prev;
            ready.next->prev = &ready;
            ready.prev->next = &ready;
            list_init(&c->released);
        }
        pthread_mutex_unlock(&c->session->lock);
    }
    struct list_node *n;
    int rc = ISCSI_OK;
    while (rc == ISCSI_OK && (n = list_pop(&ready)) != NULL) {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, wait.node);
        assert(t->state == TASK_QUEUED && !t->aborted); /* an abort takes it off the list */
        t->state = TASK_DATA_OUT;
        rc = exec_maybe_run(c, t);
    }
    /* What is left after a failure goes back to c->released for the teardown: released,
     * their CmdSNs acknowledged, so kept for reassignment at ERL 2 (orphans_fill). */
    if (!list_empty(&ready)) {
        pthread_mutex_lock(&c->session->lock);
        while ((n = list_pop(&ready)) != NULL)
            list_add_tail(&c->released, n);
        pthread_mutex_unlock(&c->session->lock);
    }
    conn_fail(c, rc);
    conn_put(c);
}

/* With the session lock held: a queued task's turn came. It moves to its connection's released
 * list (the same node, the same lock), and the connection gets one kick (a deferred call on its
 * own reactor, or one message to another) however many commands a burst releases. */
void exec_release_turn(struct cmdsn_wait *w)
{
    struct iscsi_task *t = list_entry(w, struct iscsi_task, wait);
    struct iscsi_conn *c = t->conn;
    list_add_tail(&c->released, &w->node);
    if (!c->release_kicked) {
        c->release_kicked = true;
        conn_get(c); /* dropped by exec_run_released() */
        if (reactor_self() == c->reactor)
            reactor_defer(c->reactor, &c->release_hook, exec_run_released, c);
        else
            reactor_post(c->reactor, &c->release_msg, exec_run_released, c);
    }
}

/* Never answer it. The protocol side lets go of the task here; the store (until its completion
 * returns) and queued PDUs keep it until they let go too. */
void exec_task_abort(struct iscsi_task *t)
{
    struct iscsi_conn *c = t->conn;
    assert(!t->aborted);
    t->aborted = true;
    if (t->state == TASK_SENDING)
        return; /* already answered: the protocol side let go when it queued the answer */
    if (t->state == TASK_RETAINED) {
        /* answered and kept for retransmission: no longer (the retained list's reference) */
        list_del(&t->retained_node);
        c->nretained--;
        task_put(t);
        return;
    }
    if (t->state == TASK_QUEUED) {
        assert(c->session);
        session_cmdsn_cancel(c->session, &t->wait);
    } else if (t->state == TASK_DATA_OUT && c->session && !t->cmdsn_pending) {
        session_cmd_done(c->session);
    } else if (t->state == TASK_EXEC) {
        /* it counts in flight until the store lets go (cmd_scsi_done); the store gets none
         * of its work it does not have yet, and the TMF's answer waits for the rest */
        scsi_task_abort(&t->scsi);
    }
    task_hash_del(c, t);
    if (c->w.in.task == t)
        c->w.in.discard = true; /* the rest of the data segment being received: dropped */
    task_put(t);                /* the protocol side's */
}
