/* ErrorRecoveryLevel 1 on the initiator: within-connection recovery (RFC 7143 §7.1-§7.9) with
 * SNACK (§11.16) and command retry (§7.2.1). Everything here runs only when the connection's
 * engine has erl >= 1; ERL 0 keeps task.c's paths as they were.
 *
 * What is lost, how it shows, and what is asked for:
 * - a Data-In (dropped, or its header damaged and dropped by the engine, §7.8): a DataSN gap,
 *   or a SCSI Response whose ExpDataSN is past the last DataSN received (§7.9, §11.4.8); a
 *   Data-In with a bad data digest is missing itself. Data/R2T SNACK (type 0) for the run;
 *   the task's status, if it came first, waits on the task until the run is filled, and its
 *   StatSN is not acknowledged meanwhile (§7.9: the target may free the data once it is).
 * - a numbered response (SCSI Response, Reject, NOP-In answer, ...): a StatSN gap, or one with
 *   a bad data digest (discarded, §7.8). Status SNACK (type 1) for the run. ExpStatSN stays at
 *   the first StatSN not received.
 * - an R2T: an R2TSN gap. Data/R2T SNACK for the missing R2TSNs. An R2T numbered before the
 *   next one expected (retransmitted, or a recovery R2T for data with a bad digest) is answered
 *   with the data like any other.
 * - a SCSI Command: the target Rejects it (reason 0x02, data digest error on immediate data)
 *   or never sees it. Retried with the same ITT, CmdSN, CDB and data on the same connection
 *   (§7.2.1): at once after the Reject; after a quiet period otherwise (below).
 * - the last PDU of an exchange with nothing after it to show a gap: the recovery timer. A
 *   connection with tasks outstanding and no PDU for any of them for INI_ERL_QUIET_MS gets a
 *   round: a NOP-Out ping (its answer carries the StatSN, so a lost last response shows as a
 *   gap, and ExpCmdSN, so a command the target never got shows as ExpCmdSN stuck at its
 *   CmdSN: retried), and the SNACKs still unanswered are sent again.
 * A SNACK the target Rejects ends what it asked for: a Data SNACK fails the task (§7.8 a: the
 *   target ends it with CHECK CONDITION, or it has sent its status, which we then do not take
 *   as good) -- unless the status has not arrived yet: a target may count Data-In as sent
 *   only once its status is, so the SNACK is sent again when the status comes. StatSNs
 *   refused, or still missing after INI_ERL_GIVEUP_MS, are skipped so that ExpStatSN moves on
 *   (their tasks end by the command timeout).
 * Not done: DataACK (the A bit; our target never sets it), R-Data SNACK (no MRDSL change in
 * full feature phase). */
#include <stddef.h>
#include <string.h>

#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/snack.h"
#include "initiator/table.h"
#include "initiator/task.h"
#include "util/log.h"

/* SNACK Request (§11.16.1): Type in byte 1, BegRun and RunLength in the last two words. */
#define SNACK_TYPE_DATA 0
#define SNACK_TYPE_STATUS 1
#define SNACK_TYPE_MASK 0x0f
#define SNACK_BEGRUN 40
#define SNACK_RUNLENGTH 44

/* No PDU for a task of the connection for this long while tasks are outstanding: a round.
 * A lost command holds up the session's whole CmdSN window at the target until its retry, so
 * this is short; rounds without progress back off (doubling, up to 64 times this), so that a
 * slow target costs a ping now and then, not a stream of them. */
#define INI_ERL_QUIET_MS 10
#define INI_ERL_BACKOFF_MAX 6
/* What was asked for and has not come is asked for again this often. */
#define INI_ERL_RESEND_MS 30
/* How long a missing StatSN is asked for before it is skipped. */
#define INI_ERL_GIVEUP_MS 3000

/* Room for n more bytes of what recovery sends at the target's asking (ini.h,
 * INI_RESEND_BACKLOG_MAX); without it (INI_ERR_RESEND_FLOOD) the connection fails. */
static int resend_room(struct ini_conn *c, uint64_t n)
{
    if (c->resend_unsent + n <= INI_RESEND_BACKLOG_MAX)
        return INI_OK;
    LOG_WARN("initiator: connection %u: %llu bytes of recovery PDUs unsent: the target asks for "
             "data again faster than it reads it",
             c->idx, (unsigned long long)c->resend_unsent);
    return INI_ERR_RESEND_FLOOD;
}

static int send_snack(struct ini_conn *c, uint8_t type, uint32_t itt, uint32_t beg, uint32_t run)
{
    int rc = resend_room(c, sizeof(struct wire_pdu));
    if (rc < 0)
        return rc;
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    /* §11.16: F set; LUN reserved except for DataACK; ITT reserved for Status SNACK; the
     * TTT/SNACK Tag is reserved (0xffffffff) but for DataACK and R-Data SNACK. */
    bhs_init(h, ISCSI_OP_SNACK, ISCSI_FLAG_FINAL | type);
    bhs_put32(h, BHS_ITT, itt);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    bhs_put32(h, SNACK_BEGRUN, beg);
    bhs_put32(h, SNACK_RUNLENGTH, run);
    c->snacks++;
    LOG_DEBUG("initiator: connection %u: %s SNACK ITT %08x BegRun %u RunLength %u", c->idx,
              type == SNACK_TYPE_STATUS ? "Status" : "Data/R2T", itt, beg, run);
    ini_resend_account(c, p, sizeof(struct wire_pdu));
    ini_conn_send(c, p, NULL, 0);
    return INI_OK;
}

/* ---- StatSN window: a ring of bits, StatSN x at x % INI_STATSN_WINDOW, meaningful for
 * [expstatsn, statsn_hi) and clear elsewhere ---- */

static bool win_get(const uint64_t *w, uint32_t sn)
{
    uint32_t k = sn % INI_STATSN_WINDOW;
    return (w[k / 64] >> (k % 64)) & 1;
}

static void win_set(uint64_t *w, uint32_t sn, bool v)
{
    uint32_t k = sn % INI_STATSN_WINDOW;
    if (v)
        w[k / 64] |= 1ull << (k % 64);
    else
        w[k / 64] &= ~(1ull << (k % 64));
}

/* ExpStatSN moves over every StatSN received whose task has all its data. */
static void stat_advance(struct ini_conn *c)
{
    while (c->expstatsn != c->statsn_hi && win_get(c->stat_got, c->expstatsn) &&
           !win_get(c->stat_held, c->expstatsn)) {
        win_set(c->stat_got, c->expstatsn, false);
        c->expstatsn++;
    }
}

/* Far past the window (more lost in a row than it holds): take the new StatSN as the start,
 * as ERL 0 does; what was missing before it is given up. */
static bool stat_jump(struct ini_conn *c, uint32_t statsn)
{
    if (statsn - c->expstatsn < INI_STATSN_WINDOW)
        return false;
    LOG_WARN("initiator: connection %u: StatSN %u is %u past ExpStatSN %u: the responses "
             "between are given up",
             c->idx, statsn, statsn - c->expstatsn, c->expstatsn);
    memset(c->stat_got, 0, sizeof(c->stat_got));
    memset(c->stat_held, 0, sizeof(c->stat_held));
    c->expstatsn = c->statsn_hi = statsn;
    return true;
}

void ini_snack_start(struct ini_conn *c)
{
    memset(c->stat_got, 0, sizeof(c->stat_got));
    memset(c->stat_held, 0, sizeof(c->stat_held));
    c->statsn_hi = c->expstatsn;
    c->last_progress_ms = reactor_now_ms();
    c->rounds = 0;
}

/* StatSNs from statsn_hi up to (not including) end were never seen: §7.9 asks for them. */
static int stat_reveal(struct ini_conn *c, uint32_t end)
{
    int rc = INI_OK;
    if (sn_lt(c->statsn_hi, end))
        rc = send_snack(c, SNACK_TYPE_STATUS, ISCSI_RSVD_TAG, c->statsn_hi, end - c->statsn_hi);
    if (sn_lt(c->statsn_hi, end))
        c->statsn_hi = end;
    return rc;
}

int ini_snack_statsn(struct ini_conn *c, uint32_t statsn, bool held)
{
    if (sn_lt(statsn, c->expstatsn))
        return INI_OK; /* a retransmission of one acknowledged already */
    stat_jump(c, statsn);
    int rc = stat_reveal(c, statsn);
    if (sn_le(c->statsn_hi, statsn))
        c->statsn_hi = statsn + 1;
    win_set(c->stat_got, statsn, true);
    win_set(c->stat_held, statsn, held);
    stat_advance(c);
    return rc;
}

int ini_snack_statsn_lost(struct ini_conn *c, uint32_t statsn)
{
    if (sn_lt(statsn, c->expstatsn))
        return INI_OK;
    stat_jump(c, statsn);
    if (sn_le(c->statsn_hi, statsn))
        return stat_reveal(c, statsn + 1); /* this one and any before it never seen */
    if (!win_get(c->stat_got, statsn))     /* a retransmission, damaged again */
        return send_snack(c, SNACK_TYPE_STATUS, ISCSI_RSVD_TAG, statsn, 1);
    return INI_OK;
}

static void statsn_release(struct ini_conn *c, uint32_t statsn)
{
    if (sn_lt(statsn, c->expstatsn) || sn_le(c->statsn_hi, statsn))
        return;
    win_set(c->stat_held, statsn, false);
    stat_advance(c);
}

/* StatSNs in [beg, end) will not come: stop waiting for them. */
static void stat_skip(struct ini_conn *c, uint32_t beg, uint32_t end)
{
    if (sn_lt(beg, c->expstatsn))
        beg = c->expstatsn;
    if (sn_lt(c->statsn_hi, end))
        end = c->statsn_hi;
    for (uint32_t sn = beg; sn_lt(sn, end); sn++)
        win_set(c->stat_got, sn, true);
    stat_advance(c);
}

/* ---- missing Data-In runs of a task ---- */

static bool miss_add(struct ini_task *t, uint32_t beg, uint32_t n)
{
    if (t->nmiss && t->miss_beg[t->nmiss - 1] + t->miss_len[t->nmiss - 1] == beg) {
        t->miss_len[t->nmiss - 1] += n;
        return true;
    }
    if (t->nmiss == INI_MISS_MAX) {
        t->miss_overflow = true; /* too scattered to track: the task fails as at ERL 0 */
        return false;
    }
    t->miss_beg[t->nmiss] = beg;
    t->miss_len[t->nmiss] = n;
    t->nmiss++;
    return true;
}

static int miss_find(const struct ini_task *t, uint32_t sn)
{
    for (int i = 0; i < t->nmiss; i++)
        if (sn - t->miss_beg[i] < t->miss_len[i])
            return i;
    return -1;
}

static void miss_remove(struct ini_task *t, uint32_t sn)
{
    int i = miss_find(t, sn);
    if (i < 0)
        return; /* a duplicate */
    uint32_t b = t->miss_beg[i], n = t->miss_len[i];
    if (n == 1) {
        memmove(&t->miss_beg[i], &t->miss_beg[i + 1], (t->nmiss - i - 1) * sizeof(uint32_t));
        memmove(&t->miss_len[i], &t->miss_len[i + 1], (t->nmiss - i - 1) * sizeof(uint32_t));
        t->nmiss--;
    } else if (sn == b) {
        t->miss_beg[i]++;
        t->miss_len[i]--;
    } else if (sn == b + n - 1) {
        t->miss_len[i]--;
    } else if (t->nmiss == INI_MISS_MAX) {
        t->miss_overflow = true;
    } else {
        memmove(&t->miss_beg[i + 2], &t->miss_beg[i + 1], (t->nmiss - i - 1) * sizeof(uint32_t));
        memmove(&t->miss_len[i + 2], &t->miss_len[i + 1], (t->nmiss - i - 1) * sizeof(uint32_t));
        t->miss_len[i] = sn - b;
        t->miss_beg[i + 1] = sn + 1;
        t->miss_len[i + 1] = b + n - sn - 1;
        t->nmiss++;
    }
}

/* DataSNs [beg, beg + n) of t are missing: record them and ask for them (§7.8 a, §7.9). */
static int data_missing(struct ini_conn *c, struct ini_task *t, uint32_t beg, uint32_t n)
{
    if (t->miss_overflow || t->snack_refused)
        return INI_OK;
    if (miss_add(t, beg, n))
        return send_snack(c, SNACK_TYPE_DATA, t->itt, beg, n);
    return INI_OK;
}

/* Every missing run of t asked for again. */
static int data_missing_again(struct ini_conn *c, struct ini_task *t)
{
    for (unsigned k = 0; k < t->nmiss; k++) {
        int rc = send_snack(c, SNACK_TYPE_DATA, t->itt, t->miss_beg[k], t->miss_len[k]);
        if (rc < 0)
            return rc;
    }
    return INI_OK;
}

static bool task_gave_up(const struct ini_task *t)
{
    return t->miss_overflow || t->snack_refused;
}

static void task_finish(struct ini_conn *c, struct ini_task *t, struct lr_result *r)
{
    if (task_gave_up(t)) {
        memset(r, 0, offsetof(struct lr_result, sense));
        r->err = LR_ERR_PROTOCOL;
        r->what = t->snack_refused ? "Data-In lost and not retransmitted (SNACK rejected)"
                                   : "too many Data-In PDUs lost";
    }
    ini_task_complete(c->s, t, r);
}

/* The status of t arrived (StatSN statsn): complete it, or hold it until its data has. */
static int task_status(struct ini_conn *c, struct ini_task *t, uint32_t statsn, struct lr_result *r)
{
    if (t->nmiss && !task_gave_up(t)) {
        t->held = *r;
        t->status_held = true;
        t->held_statsn = statsn;
        int rc = ini_snack_statsn(c, statsn, true);
        if (rc < 0)
            return rc;
        if (t->snack_early) { /* refused while the status was on its way: now it is not */
            t->snack_early = false;
            return data_missing_again(c, t);
        }
        return INI_OK;
    }
    t->status_held = false;
    int rc = ini_snack_statsn(c, statsn, false);
    if (rc < 0)
        return rc;
    task_finish(c, t, r);
    return INI_OK;
}

/* A retransmission filled the last hole, or recovery was given up: a held status completes. */
static void task_maybe_done(struct ini_conn *c, struct ini_task *t)
{
    if (!t->status_held || (t->nmiss && !task_gave_up(t)))
        return;
    t->status_held = false;
    statsn_release(c, t->held_statsn);
    struct lr_result r = t->held; /* the callback may reuse the task's slot */
    task_finish(c, t, &r);
}

int ini_snack_data_in(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                      const uint8_t *data, uint32_t dlen, bool dd_ok)
{
    uint32_t datasn = get_be32(hdr + BHS_DATASN);
    int rc = INI_OK;
    if (dlen) {
        /* A damaged payload may have landed in the buffer already (direct placement): the
         * retransmission overwrites it. */
        rc = ini_task_place_data_in(c, t, hdr, data, dlen, dd_ok);
        if (rc < 0)
            return rc;
        if (dd_ok)
            t->data_in += dlen;
    }
    if (sn_le(t->exp_datasn, datasn)) {
        /* DataSNs skipped were lost (§7.9); this one too if its data is damaged (§7.8) */
        uint32_t n = datasn - t->exp_datasn + (dd_ok ? 0 : 1);
        if (n)
            rc = data_missing(c, t, t->exp_datasn, n);
        t->exp_datasn = datasn + 1;
    } else if (dd_ok) {
        miss_remove(t, datasn); /* a retransmission */
    } else if (miss_find(t, datasn) >= 0 && !task_gave_up(t)) {
        rc = send_snack(c, SNACK_TYPE_DATA, t->itt, datasn, 1); /* damaged again */
    }
    if (rc < 0)
        return rc;
    if (hdr[BHS_FLAGS] & ISCSI_DATAIN_STATUS) {
        /* Phase collapse (§11.7.4). The header is sound (a damaged one never arrives), so its
         * status stands even when the data digest is bad. */
        struct lr_result r;
        ini_task_result(t, hdr, NULL, 0, &r);
        return task_status(c, t, get_be32(hdr + BHS_STATSN), &r);
    }
    task_maybe_done(c, t);
    return INI_OK;
}

int ini_snack_scsi_rsp(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                       const uint8_t *data, uint32_t dlen, bool dd_ok)
{
    uint32_t statsn = get_be32(hdr + BHS_STATSN);
    if (!dd_ok)
        return ini_snack_statsn_lost(c, statsn); /* §7.8: discarded, asked for again */
    if (t->dir == LR_DIR_READ && hdr[BHS_RESPONSE] == 0) {
        /* §11.4.8: ExpDataSN is the number of Data-In PDUs the target sent; fewer received
         * means the last ones were lost (§7.9). */
        uint32_t expdatasn = get_be32(hdr + BHS_EXPDATASN);
        if (sn_lt(t->exp_datasn, expdatasn)) {
            int rc = data_missing(c, t, t->exp_datasn, expdatasn - t->exp_datasn);
            t->exp_datasn = expdatasn;
            if (rc < 0)
                return rc;
        }
    }
    struct lr_result r;
    ini_task_result(t, hdr, data, dlen, &r);
    return task_status(c, t, statsn, &r);
}

int ini_snack_r2t(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr)
{
    uint32_t r2tsn = get_be32(hdr + BHS_R2TSN);
    if (t->r2tsn_resync) {
        /* the first R2T since a TASK REASSIGN (ERL 2): the target numbers on from its own
         * count, which R2Ts lost with the old connection may have moved (§7.2.2) */
        t->r2tsn_resync = false;
        t->exp_r2tsn = r2tsn;
    }
    if (sn_le(t->exp_r2tsn, r2tsn)) {
        int rc = INI_OK;
        if (r2tsn != t->exp_r2tsn) /* §7.9: R2Ts lost before this one */
            rc = send_snack(c, SNACK_TYPE_DATA, t->itt, t->exp_r2tsn, r2tsn - t->exp_r2tsn);
        t->exp_r2tsn = r2tsn + 1;
        if (rc < 0)
            return rc;
    }
    /* An R2T numbered before is a retransmission we asked for or a recovery R2T (§7.8: data
     * the target discarded): either way it wants the data again, under its own TTT. Data
     * asked for again is bounded in what may wait unsent for it: a target may ask without
     * end. */
    uint32_t off = get_be32(hdr + BHS_BUFFER_OFFSET), len = get_be32(hdr + BHS_DESIRED_LEN);
    bool again = off < t->solicited_end;
    uint32_t pdus = (len + c->peer_mrdsl - 1) / c->peer_mrdsl;
    if (again) {
        int rc = resend_room(c, (uint64_t)len + (uint64_t)pdus * sizeof(struct wire_pdu));
        if (rc < 0)
            return rc;
    }
    if (off + len > t->solicited_end)
        t->solicited_end = off + len;
    return ini_task_data_out(c, t, get_be32(hdr + BHS_TTT), off, len, again);
}

int ini_snack_reject(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                     bool *handled)
{
    *handled = false;
    if (dlen < ISCSI_BHS_LEN)
        return INI_OK;
    *handled = true;
    uint8_t reason = hdr[BHS_REJECT_REASON];
    uint8_t op = data[0] & ISCSI_OPCODE_MASK;
    uint32_t itt = get_be32(data + BHS_ITT);
    if (op == ISCSI_OP_SCSI_CMD && reason == ISCSI_REJECT_DIGEST_ERROR) {
        /* §7.8: the target discarded the command (its immediate data was damaged) without
         * consuming its CmdSN (§7.3); §7.2.1: retry it, unchanged, on this connection. */
        struct ini_task *t = ini_task_lookup(c->s, itt);
        if (t && t->conn == c && t->has_cmdsn && get_be32(data + BHS_CMDSN) == t->cmdsn)
            return ini_task_resend_cmd(c, t);
        return INI_OK;
    }
    if (op == ISCSI_OP_DATA_OUT && reason == ISCSI_REJECT_DIGEST_ERROR)
        return INI_OK; /* §7.8: the target asks for the data again with a recovery R2T */
    if (op == ISCSI_OP_SNACK) {
        uint32_t beg = get_be32(data + SNACK_BEGRUN), run = get_be32(data + SNACK_RUNLENGTH);
        LOG_WARN("initiator: connection %u: target rejected a SNACK (type %u, ITT %08x, BegRun "
                 "%u, RunLength %u, reason 0x%02x)",
                 c->idx, data[1] & SNACK_TYPE_MASK, itt, beg, run, reason);
        if ((data[1] & SNACK_TYPE_MASK) == SNACK_TYPE_DATA) {
            struct ini_task *t = ini_task_lookup(c->s, itt);
            if (t && t->conn == c && !t->status_held && t->dir == LR_DIR_READ) {
                /* Before the status, a target may not count the Data-In as sent yet (its
                 * status still queued behind them): asked again once the status is in. */
                t->snack_early = true;
            } else if (t && t->conn == c) {
                t->snack_refused = true;
                task_maybe_done(c, t);
            }
        } else if ((data[1] & SNACK_TYPE_MASK) == SNACK_TYPE_STATUS) {
            stat_skip(c, beg, run ? beg + run : c->statsn_hi);
        }
        return INI_OK;
    }
    *handled = false;
    return INI_OK;
}

int ini_snack_pong(struct ini_conn *c, const uint8_t *hdr)
{
    (void)hdr; /* its StatSN and ExpCmdSN were taken by ini_rx_ffp already */
    if (c->rounds == 0)
        return INI_OK; /* progress since the ping: nothing is stuck */
    /* The ping left after every command of this connection that is in the socket, so the
     * target read them first: ExpCmdSN still at one of their CmdSNs means it never got that
     * command (or discarded it with a Reject we did not get). §7.2.1: retry it. */
    struct lr_session *s = c->s;
    uint64_t now = reactor_now_ms();
    for (uint32_t i = 0; i < s->ntasks; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state == ITS_ACTIVE && t->conn == c && t->has_cmdsn && t->cmd_sent &&
            !t->reassigning && t->cmdsn == s->expcmdsn && now - t->retry_ms >= INI_ERL_QUIET_MS) {
            LOG_DEBUG("initiator: connection %u: retrying task %08x (CmdSN %u)", c->idx, t->itt,
                      t->cmdsn);
            int rc = ini_task_resend_cmd(c, t);
            if (rc < 0)
                return rc;
        }
    }
    return INI_OK;
}

static int send_ping(struct ini_conn *c)
{
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    /* §11.18: ITT set asks for an answer; immediate, so CmdSN does not advance; no data, so
     * nothing of it can be damaged by a data digest. */
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL);
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    bhs_put32(h, BHS_ITT, INI_PING_ITT + c->idx);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    bhs_put32(h, BHS_CMDSN, c->s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    ini_conn_send(c, p, NULL, 0);
    return INI_OK;
}

/* StatSNs still missing: asked for again, or given up on after long enough. */
static int statsn_round(struct ini_conn *c, uint64_t now)
{
    if (c->expstatsn == c->statsn_hi)
        return INI_OK;
    if (c->stuck_at != c->expstatsn || !c->stuck_since_ms) {
        c->stuck_at = c->expstatsn;
        c->stuck_since_ms = now;
    }
    if (now - c->stuck_since_ms >= INI_ERL_GIVEUP_MS) {
        LOG_WARN("initiator: connection %u: StatSN %u..%u still missing after %llu ms: "
                 "given up",
                 c->idx, c->expstatsn, c->statsn_hi - 1,
                 (unsigned long long)(now - c->stuck_since_ms));
        c->stuck_since_ms = 0;
        stat_skip(c, c->expstatsn, c->statsn_hi);
        return INI_OK;
    }
    for (uint32_t sn = c->expstatsn; sn != c->statsn_hi; sn++) {
        if (win_get(c->stat_got, sn))
            continue;
        uint32_t run = 1;
        while (sn + run != c->statsn_hi && !win_get(c->stat_got, sn + run))
            run++;
        int rc = send_snack(c, SNACK_TYPE_STATUS, ISCSI_RSVD_TAG, sn, run);
        if (rc < 0)
            return rc;
        sn += run - 1;
    }
    return INI_OK;
}

/* On the connection's thread: ask again for what is missing, and ping. */
static int recovery_round(struct ini_conn *c)
{
    struct lr_session *s = c->s;
    if (c->state != ICS_FFP)
        return INI_OK;
    c->rounds++;
    int rc = statsn_round(c, reactor_now_ms());
    /* Data-In still missing */
    for (uint32_t i = 0; rc == INI_OK && i < s->ntasks && c->state == ICS_FFP; i++) {
        struct ini_task *t = &s->tasks[i];
        if (t->state != ITS_ACTIVE || t->conn != c || !t->nmiss || task_gave_up(t))
            continue;
        rc = data_missing_again(c, t);
    }
    if (rc == INI_OK && c->state == ICS_FFP)
        rc = send_ping(c);
    return rc;
}

static void round_msg(void *arg)
{
    struct ini_conn *c = arg;
    struct lr_session *s = c->s;
    ini_lock(s);
    s->msgs--;
    c->rec_req = false;
    if (c->r == reactor_self()) /* else it moved: the next tick asks its new thread */
        ini_conn_fail(c, recovery_round(c));
    ini_unlock(s);
}

void ini_snack_tick(struct ini_conn *c, uint64_t now)
{
    if (c->state != ICS_FFP || c->w.erl == 0 || c->rec_req)
        return;
    /* Something asked for and not in yet (a StatSN missing, or a status held for its data):
     * asked again every INI_ERL_RESEND_MS even while other traffic flows, since the
     * retransmission itself may be lost and nothing else would show it. Otherwise a round
     * only for a connection quiet with tasks outstanding, backing off. */
    bool pending = c->expstatsn != c->statsn_hi;
    unsigned backoff = c->rounds < INI_ERL_BACKOFF_MAX ? c->rounds : INI_ERL_BACKOFF_MAX;
    bool quiet = c->outstanding && now - c->last_progress_ms >= INI_ERL_QUIET_MS &&
                 now - c->last_round_ms >= (uint64_t)INI_ERL_QUIET_MS << backoff;
    if (!quiet && !(pending && now - c->last_round_ms >= INI_ERL_RESEND_MS))
        return;
    c->last_round_ms = now;
    struct lr_session *s = c->s;
    if (!s->mt || c->r == reactor_self()) {
        ini_conn_fail(c, recovery_round(c));
        return;
    }
    c->rec_req = true;
    /* one message per side of the last move, as the inbox kick (ini.h): one still pending on
     * the thread the connection left must not swallow this one */
    if (reactor_post(c->r, &c->rec_msg[c->moves & 1], round_msg, c))
        s->msgs++;
}
