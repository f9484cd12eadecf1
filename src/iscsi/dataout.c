/* Write data on the target (RFC 7143 §11.7, §11.8): R2Ts bounded by MaxOutstandingR2T and
 * MaxBurstLength, Data-Out placed straight into the task's buffer, sequence checks, and at
 * ERL >= 1 holes solicited again by recovery R2Ts and stalled writes re-solicited (§7.8, §7.9). */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/dataout.h"
#include "iscsi/exec.h"
#include "iscsi/response.h"
#include "iscsi/task.h"
#include "util/iov.h"
#include "util/log.h"

static struct r2t_seq *r2t_slot_free(struct iscsi_task *t)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (!t->r2t[i].used)
            return &t->r2t[i];
    return NULL;
}

static struct r2t_seq *r2t_slot_find(struct iscsi_task *t, uint32_t ttt)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (t->r2t[i].used && t->r2t[i].ttt == ttt)
            return &t->r2t[i];
    return NULL;
}

/* Queue the R2T of an open sequence (again: the same R2TSN, TTT, offset, length and StatSN
 * field, current ExpCmdSN/MaxCmdSN, §11.16). */
static int queue_r2t(struct iscsi_conn *c, struct iscsi_task *t, const struct r2t_seq *seq)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_R2T, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    memcpy(h->b + BHS_LUN, t->req.b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, t->itt);
    bhs_put32(h, BHS_TTT, seq->ttt);
    rsp_fill_sn_again(c, h, seq->statsn);
    bhs_put32(h, BHS_R2TSN, seq->r2tsn);
    bhs_put32(h, BHS_BUFFER_OFFSET, seq->offset);
    bhs_put32(h, BHS_DESIRED_LEN, seq->len);
    conn_send(c, p);
    exec_count_event(c, t, IOSTATS_R2T);
    return ISCSI_OK;
}

/* Solicit what is still missing, at most MaxOutstandingR2T sequences at a time, each at most
 * MaxBurstLength (§11.8). Each R2T gets its own TTT so Data-Out PDUs name their sequence.
 * At ERL >= 1 the holes lost Data-Out left go first: a recovery R2T each (§7.8, §7.9), with a
 * new TTT and the next R2TSN. */
int dataout_send_r2ts(struct iscsi_conn *c, struct iscsi_task *t)
{
    uint32_t max_out = c->session->params.max_outstanding_r2t;
    uint32_t burst = c->session->params.max_burst;
    if (!max_out)
        max_out = 1;
    if (max_out > ISCSI_MAX_R2T)
        max_out = ISCSI_MAX_R2T;
    while ((t->nholes || t->r2t_offset < t->data_expected) && t->r2t_outstanding < max_out) {
        struct r2t_seq *seq = r2t_slot_free(t);
        if (!seq)
            return ISCSI_OK;
        uint32_t off, len;
        if (t->nholes) {
            struct data_hole *hole = &t->holes[0];
            off = hole->off;
            len = hole->len < burst ? hole->len : burst;
            hole->off += len;
            hole->len -= len;
            if (!hole->len)
                memmove(&t->holes[0], &t->holes[1], --t->nholes * sizeof(t->holes[0]));
        } else {
            off = t->r2t_offset;
            len = t->data_expected - off;
            if (len > burst)
                len = burst;
            t->r2t_offset += len;
        }
        uint32_t ttt = c->next_ttt++;
        if (ttt == ISCSI_RSVD_TAG)
            ttt = c->next_ttt++;
        *seq = (struct r2t_seq){.ttt = ttt,
                                .offset = off,
                                .len = len,
                                .r2tsn = t->r2tsn++,
                                .statsn = c->statsn,
                                .used = true};
        int rc = queue_r2t(c, t, seq);
        if (rc < 0)
            return rc;
        t->r2t_outstanding++;
    }
    return ISCSI_OK;
}

int dataout_resend_r2t(struct iscsi_conn *c, struct iscsi_task *t, uint32_t r2tsn)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++)
        if (t->r2t[i].used && t->r2t[i].r2tsn == r2tsn)
            return queue_r2t(c, t, &t->r2t[i]);
    return ISCSI_ERR_PROTOCOL; /* snack.c checked it is open */
}

/* Point the receive engine at [off, off+len) of the task's data buffers. */
void dataout_rx_into_task(struct iscsi_pdu_in *p, struct iscsi_task *t, uint32_t off, uint32_t len)
{
    const struct scsi_task *st = &t->scsi;
    p->dstcnt = iov_slice(st->iov, st->iovcnt, off, len, p->dst, SCSI_TASK_IOV_MAX);
    if (p->dstcnt == 0)
        p->discard = true;
}

/* A Data-Out that does not continue its sequence (DataSN or offset) means a PDU was lost, and
 * at ERL 0 nothing is retransmitted. RFC 7143 §7.8 lets the target end the command instead of
 * the connection: swallow the rest of the task's data, then answer CHECK CONDITION, ABORTED
 * COMMAND, PROTOCOL SERVICE CRC ERROR (a sequence error implies a digest error, §7.9). */
void dataout_sequence_failed(struct iscsi_conn *c, struct iscsi_task *t, const char *why,
                             uint32_t ttt, uint32_t datasn, uint32_t off, uint32_t len)
{
    CONN_LOG_LIMITED(
        c, LOG_LVL_WARN,
        "%s: ITT 0x%08x: %s (TTT 0x%08x DataSN %u offset %u length %u); the command ends "
        "with CHECK CONDITION",
        c->peer, t->itt, why, ttt, datasn, off, len);
    t->seq_failed = true;
    t->r2t_offset = t->data_expected; /* solicit nothing more */
}

/* ERL >= 1: [off, off+len) of the write was lost on the way (a Data-Out dropped for its header
 * digest, rejected for its data digest, or never sent): solicit it again with a recovery R2T
 * (§7.8, §7.9). False when the task has no room for another hole. */
bool dataout_hole_add(struct iscsi_task *t, uint32_t off, uint32_t len)
{
    if (off >= t->data_expected)
        return true; /* beyond what we take: nothing to ask for again */
    if (len > t->data_expected - off)
        len = t->data_expected - off;
    if (!len)
        return true;
    if (t->nholes == ISCSI_MAX_HOLES)
        return false;
    t->holes[t->nholes++] = (struct data_hole){.off = off, .len = len};
    return true;
}

/* ERL >= 1: a Data-Out continues its sequence past PDUs that never came (DataSN and offset both
 * ahead, still inside the sequence): the skipped range is a hole and this PDU is taken at its
 * offset (§7.9: a sequence error implies a digest error, recovered like one). */
static bool data_out_gap(uint32_t exp_datasn, uint32_t exp_off, uint32_t datasn, uint32_t off,
                         uint32_t end)
{
    return sn_lt(exp_datasn, datasn) && off > exp_off && off < end;
}

/* After a sequence error, once every outstanding R2T and the unsolicited burst are closed by
 * their F bit, the command is answered. */
void dataout_maybe_terminate(struct iscsi_task *t)
{
    if (!t->seq_failed || t->refused || t->r2t_outstanding || t->unsol_remaining)
        return;
    t->refused = true;
    scsi_task_refuse(&t->scsi, SCSI_REFUSE_PROTOCOL_CRC_ERROR);
    t->data_expected = t->data_received;
}

/* Data-Out header checks (§11.7): the PDU must continue its sequence exactly — right TTT,
 * next DataSN, next offset (DataPDUInOrder=Yes), within the burst. A TTT we never gave or a
 * PDU longer than its burst is a protocol error that closes the connection; a DataSN or offset
 * out of sequence ends just the command (above). */
int dataout_handle_header(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *h = &p->bhs;
    struct iscsi_task *t = task_hash_find(c, bhs_get32(h, BHS_ITT));
    if (!t) {
        p->discard = true; /* for a task that already ended (aborted): dropped */
        return ISCSI_OK;
    }
    /* Only tasks still taking data are hashed: cmd_exec() and aborts unhash them. */
    assert((t->state == TASK_DATA_OUT || t->state == TASK_QUEUED) && !t->aborted);
    uint32_t ttt = bhs_get32(h, BHS_TTT);
    uint32_t off = bhs_get32(h, BHS_BUFFER_OFFSET);
    uint32_t datasn = bhs_get32(h, BHS_DATASN);
    uint32_t len = p->dlen;
    const char *err = NULL, *seq_err = NULL;
    bool erl1 = conn_erl(c) >= 1;
    t->data_out_ms = c->last_rx_ms; /* progress: the stall check and data-out-timeout */
    if (erl1)
        t->stall_rounds = 0;
    if (ttt == ISCSI_RSVD_TAG) {
        if (erl1 && !t->seq_failed &&
            data_out_gap(t->unsol_datasn, t->unsol_next_off, datasn, off,
                         t->unsol_next_off + t->unsol_remaining)) {
            uint32_t gap = off - t->unsol_next_off;
            if (!dataout_hole_add(t, t->unsol_next_off, gap))
                dataout_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt, datasn, off, len);
            t->unsol_remaining -= gap;
            t->unsol_next_off = off;
            t->unsol_datasn = datasn;
        }
        if (len > t->unsol_remaining && !t->seq_failed)
            err = "unsolicited Data-Out beyond FirstBurstLength";
        else if (datasn != t->unsol_datasn)
            seq_err = "unsolicited Data-Out DataSN out of sequence";
        else if (off != t->unsol_next_off)
            seq_err = "unsolicited Data-Out buffer offset out of order";
    } else {
        struct r2t_seq *seq = r2t_slot_find(t, ttt);
        if (!seq && erl1 && sn_lt(ttt, c->next_ttt)) {
            /* A sequence the stall check gave up on (its range solicited again under a new
             * TTT): what still comes for it is late, and dropped. */
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: late Data-Out for closed TTT 0x%08x dropped", c->peer,
                             t->itt, ttt);
            p->discard = true;
            return ISCSI_OK;
        }
        if (seq && erl1 && sn_lt(datasn, seq->datasn) && off < seq->offset + seq->got) {
            /* A PDU of the sequence again (the R2T was re-sent and answered twice): what it
             * carries is here already, and dropped. */
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: Data-Out DataSN %u for TTT 0x%08x again: dropped",
                             c->peer, t->itt, datasn, ttt);
            p->discard = true;
            return ISCSI_OK;
        }
        if (seq && erl1 && !t->seq_failed &&
            data_out_gap(seq->datasn, seq->offset + seq->got, datasn, off,
                         seq->offset + seq->len)) {
            uint32_t gap = off - (seq->offset + seq->got);
            if (!dataout_hole_add(t, seq->offset + seq->got, gap))
                dataout_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt, datasn, off, len);
            seq->got += gap;
            seq->datasn = datasn;
        }
        if (!seq)
            err = "Data-Out with an unknown Target Transfer Tag";
        else if (datasn != seq->datasn)
            seq_err = "Data-Out DataSN out of sequence";
        else if (off != seq->offset + seq->got)
            seq_err = "Data-Out buffer offset out of order";
        else if (len > seq->len - seq->got && !t->seq_failed)
            err = "Data-Out longer than the R2T asked for";
    }
    if (err) {
        LOG_WARN("%s: ITT 0x%08x: %s (TTT 0x%08x DataSN %u offset %u length %u)", c->peer, t->itt,
                 err, ttt, datasn, off, len);
        return ISCSI_ERR_DATA_OUT;
    }
    if (seq_err && !t->seq_failed)
        dataout_sequence_failed(c, t, seq_err, ttt, datasn, off, len);
    task_get(t); /* the receive engine's, until the end of this PDU */
    p->task = t;
    if (t->seq_failed || t->refused || off >= t->data_expected) {
        p->discard = true;
        return ISCSI_OK;
    }
    uint32_t take = len;
    if (take > t->data_expected - off)
        take = t->data_expected - off;
    dataout_rx_into_task(p, t, off, take);
    return ISCSI_OK;
}

int dataout_handle_done(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *h = &p->bhs;
    struct iscsi_task *t = p->task;
    if (!t || t->aborted)
        return ISCSI_OK; /* dropped, or a TMF took its task while the data came in */
    uint32_t ttt = bhs_get32(h, BHS_TTT);
    uint32_t off = bhs_get32(h, BHS_BUFFER_OFFSET);
    uint32_t len = p->dlen;
    bool final = h->b[1] & ISCSI_FLAG_FINAL;
    if (p->data_digest_bad) {
        /* ERL >= 1 only (ERL 0 closes the connection in the engine): RFC 7143 §7.8, a data PDU
         * with a bad data digest is rejected with reason 0x02 and its payload discarded (what
         * direct placement wrote is overwritten by the recovery); the range is solicited again
         * by a recovery R2T. The PDU still moves its sequence on. */
        exec_count_lun_digest_error(c, t);
        int rc = conn_send_reject(c, h, ISCSI_REJECT_DIGEST_ERROR);
        if (rc < 0)
            return rc;
        if (!t->seq_failed && !t->refused && !dataout_hole_add(t, off, len))
            dataout_sequence_failed(c, t, "too many Data-Out PDUs lost", ttt,
                                    bhs_get32(h, BHS_DATASN), off, len);
    } else if (!t->seq_failed && off < t->data_expected) {
        uint32_t take = len;
        if (take > t->data_expected - off)
            take = t->data_expected - off;
        t->data_received += take;
    }
    if (ttt == ISCSI_RSVD_TAG) {
        t->unsol_datasn++;
        t->unsol_next_off += len;
        t->unsol_remaining = len >= t->unsol_remaining ? 0 : t->unsol_remaining - len;
        if (final)
            t->unsol_remaining = 0; /* the initiator ended the unsolicited burst early */
    } else {
        struct r2t_seq *seq = r2t_slot_find(t, ttt);
        assert(seq); /* the header phase found it, and only this PDU's end frees it */
        seq->got = len >= seq->len - seq->got ? seq->len : seq->got + len;
        seq->datasn++;
        if (final || seq->got == seq->len) {
            if (seq->got != seq->len && !t->seq_failed) {
                LOG_WARN("%s: ITT 0x%08x: R2T sequence ended after %u of %u bytes", c->peer, t->itt,
                         seq->got, seq->len);
                return ISCSI_ERR_DATA_OUT_SEQ;
            }
            seq->used = false;
            t->r2t_outstanding--;
            if (!t->refused && !t->seq_failed) {
                int rc = dataout_send_r2ts(c, t);
                if (rc < 0)
                    return rc;
            }
        }
    }
    if (t->nholes && !t->refused && !t->seq_failed) {
        /* ERL >= 1: a recovery R2T per hole, as soon as MaxOutstandingR2T lets one go */
        int rc = dataout_send_r2ts(c, t);
        if (rc < 0)
            return rc;
    }
    dataout_maybe_terminate(t);
    return exec_maybe_run(c, t);
}

bool dataout_r2ts_to_holes(struct iscsi_task *t)
{
    bool room = true;
    for (unsigned i = 0; i < ISCSI_MAX_R2T; i++) {
        struct r2t_seq *seq = &t->r2t[i];
        if (!seq->used)
            continue;
        room = room && dataout_hole_add(t, seq->offset + seq->got, seq->len - seq->got);
        seq->used = false;
        t->r2t_outstanding--;
    }
    return room;
}

/* ERL >= 1: a write whose Data-Out stopped (the final PDU of a sequence, or an R2T, lost on the
 * way) would wait for ever: after ISCSI_DATA_OUT_STALL_MS without progress, what is missing of
 * each open sequence becomes a hole, the sequence is closed, and recovery R2Ts solicit the
 * holes under new TTTs (§7.9). An initiator that answers none of ISCSI_DATA_OUT_STALL_ROUNDS
 * such rounds is not recovering this command: rather than wait for ever (or drop a connection
 * that carries other commands), the command alone ends with CHECK CONDITION, ABORTED COMMAND,
 * 47h/05h, the termination §7.8 b and §7.9 give the target for data it does not recover; what
 * still comes for it is dropped (its task is gone). */
int dataout_check_stalled(struct iscsi_conn *c, uint64_t now_ms)
{
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t->aborted || t->refused || t->seq_failed ||
            (t->state != TASK_DATA_OUT && t->state != TASK_QUEUED))
            continue;
        if (!t->r2t_outstanding && !t->unsol_remaining)
            continue;
        if (wire_rx_current(&c->w) && wire_rx_current(&c->w)->task == t)
            continue; /* a Data-Out for it is arriving right now: not stalled */
        if (now_ms - t->data_out_ms < ISCSI_DATA_OUT_STALL_MS)
            continue;
        t->data_out_ms = now_ms;
        bool give_up = ++t->stall_rounds > ISCSI_DATA_OUT_STALL_ROUNDS;
        bool room = dataout_r2ts_to_holes(t);
        if (t->unsol_remaining) {
            room = room && dataout_hole_add(t, t->unsol_next_off, t->unsol_remaining);
            t->unsol_remaining = 0;
        }
        if (!give_up)
            CONN_LOG_LIMITED(c, LOG_LVL_INFO,
                             "%s: ITT 0x%08x: Data-Out stalled; soliciting the missing data again",
                             c->peer, t->itt);
        int rc;
        if (!room || give_up) {
            dataout_sequence_failed(
                c, t, give_up ? "no Data-Out for the recovery R2Ts" : "too many Data-Out PDUs lost",
                ISCSI_RSVD_TAG, 0, 0, 0);
            dataout_maybe_terminate(t);
            rc = exec_maybe_run(c, t);
        } else {
            rc = dataout_send_r2ts(c, t);
        }
        if (rc < 0)
            return rc;
    }
    return ISCSI_OK;
}

/* ERL 0: a write whose solicited or unsolicited Data-Out stops coming holds its buffers for as
 * long as the initiator likes (answering NOP-In pings keeps the connection), and ERL 0 has no
 * way to ask for the data again (recovery R2Ts are ERL 1, RFC 7143 §7.1.2, §7.8): after
 * data-out-timeout seconds without a Data-Out for it, the connection is closed, which is the
 * recovery ERL 0 has (§7.1.5: connection failure, the session's tasks end with it) and frees
 * every buffer it held. */
int dataout_check_timeout(struct iscsi_conn *c, uint64_t now_ms)
{
    uint64_t limit_ms = (uint64_t)c->srv->limits.data_out_timeout_s * 1000;
    if (!limit_ms)
        return ISCSI_OK;
    struct list_node *n, *tmp;
    list_for_each_safe(n, tmp, &c->tasks)
    {
        struct iscsi_task *t = list_entry(n, struct iscsi_task, node);
        if (t->aborted || t->refused || (t->state != TASK_DATA_OUT && t->state != TASK_QUEUED))
            continue;
        if (!t->r2t_outstanding && !t->unsol_remaining)
            continue;
        /* A Data-Out arriving right now counts too: its header moved data_out_ms, and a payload
         * that takes this long (a peer sending a header and then nothing) is no progress. */
        if (now_ms - t->data_out_ms < limit_ms)
            continue;
        log_msg(LOG_LVL_WARN,
                "%s: ITT 0x%08x: no Data-Out for %u s (data-out-timeout), %" PRIu64
                " bytes of buffers held on this connection: closing it (ERL 0)",
                c->peer, t->itt, c->srv->limits.data_out_timeout_s, c->buf_bytes);
        return ISCSI_ERR_DATA_OUT_TIMEOUT;
    }
    return ISCSI_OK;
}
