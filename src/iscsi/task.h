/* The target's view of one SCSI command (struct iscsi_task; the pool is task.c): its state, its
 * write bookkeeping (R2T sequences, holes), what an ERL >= 1 retransmission needs, and its lifetime
 * by reference count. */
#ifndef LR_ISCSI_TASK_H
#define LR_ISCSI_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "iscsi/node.h"
#include "iscsi/pdu.h"
#include "iscsi/session.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/list.h"

/* ERL >= 1: missing ranges of a write's Data-Out one task may have waiting for recovery R2Ts
 * (DataPDUInOrder=Yes keeps them few); one more ends the command as ERL 0 would. */
#define ISCSI_MAX_HOLES 8u
/* ERL >= 1: a write whose Data-Out stops arriving for this long with sequences still open
 * (their final PDU lost) has the missing ranges solicited again by recovery R2Ts (§7.9). */
#define ISCSI_DATA_OUT_STALL_MS 500u
/* ... and after this many such rounds with not one Data-Out for the command, it ends with CHECK
 * CONDITION (its connection stays). */
#define ISCSI_DATA_OUT_STALL_ROUNDS 4u

/* Immediate commands bypass the CmdSN window (RFC 7143 §4.2.2.1), so they are bounded here:
 * past this many tasks on the connection one is rejected with reason 0x06, "Immediate Command
 * Reject - too many immediate commands" (§11.17.1). Non-immediate commands are bounded by the
 * window the target grants (MaxCmdSN); one inside it is always taken (outside it, it is
 * silently ignored, §4.2.2.1), and tasks whose answers wait to be sent are bounded by
 * max-tx-backlog, past which the connection stops reading. */
#define CONN_TASKS_MAX 1024u

struct iscsi_conn;
struct iscsi_session;

/* A task's life on the protocol side (cmd.c, exec.c, response.c):
 *
 *   SCSI Command ─> DATA_OUT ─(its data in, its turn)─> EXEC ─(store done)─> SENDING
 *        │             ^                                                   │    ^
 *        │ ahead of    │ its CmdSN turn                          ERL >= 1, │    │ ExpStatSN
 *        │ ExpCmdSN    │ (exec_run_released)                          sent v    │ acks it
 *        └──> QUEUED ──┘                                              RETAINED ─┘
 *
 * SENDING ends when its last holder lets go (task_put). Answered (task_answered) = SENDING or
 * RETAINED. From any state a TMF can abort it (t->aborted: never answered), and its
 * connection's end can free it or, at ERL 2, make it an orphan: t->orphan then says where it
 * is (enum task_orphan) while its state stays what it was, which is what a TASK REASSIGN
 * resumes from (orphan.c). That is why the two are kept apart: an orphan is in any state. */
enum iscsi_task_state {
    TASK_QUEUED,   /* waiting for its CmdSN turn (MC/S or immediate ordering) */
    TASK_DATA_OUT, /* receiving write data (immediate/unsolicited/solicited) */
    TASK_EXEC,     /* in the SCSI core / backing store */
    TASK_SENDING,  /* response queued */
    TASK_RETAINED, /* ERL >= 1: answered, kept until ExpStatSN acknowledges its StatSN */
};

/* One solicited Data-Out sequence (an R2T and the PDUs that answer it). */
struct r2t_seq {
    uint32_t ttt;
    uint32_t offset, len;
    uint32_t got;    /* bytes received so far, in order (DataPDUInOrder=Yes) */
    uint32_t datasn; /* next expected DataSN within the sequence (§11.7.2) */
    uint32_t r2tsn;  /* of the R2T that opened it: a Data/R2T SNACK names it (§11.16) */
    uint32_t statsn; /* the StatSN field it carried, for an exact replica */
    bool used;
};

/* ERL 2 (RFC 7143 §7.2.2): a task whose connection failed or was logged out for recovery
 * outlives it in its session's orphan set (orphan.c) until TASK REASSIGN moves it to another
 * connection or Time2Retain ends it. */
/*
 *   NO ─(its connection ends at ERL 2: orphans_fill)─┬─> IDLE ─(claimed by TASK REASSIGN
 *                                                    │          or ABORT TASK)─> NO
 *                                                    │    └─(Time2Retain passed)─> freed
 *                                                    └─> BUSY (the store has it)
 *   BUSY ─(store done: orphan_done, orphans_store_done)─> IDLE, NO (claimed meanwhile), freed
 */
enum task_orphan {
    ORPHAN_NO,   /* on a connection */
    ORPHAN_IDLE, /* waiting in the orphan set, touched only under its session's lock */
    ORPHAN_BUSY, /* in the orphan set while the store has it: its completion decides */
};

/* ERL >= 1: a range of write data lost on the way (§7.8, §7.9), to be solicited again. */
struct data_hole {
    uint32_t off, len;
};

/* Task lifetime: `refs` counts its holders, and task_put() dropping the last one is the only
 * place a task is freed (unhashed, its buffer charge released, back to the connection's free
 * list). The holders:
 *   - the protocol side, from the SCSI Command until the response is queued, the task is
 *     aborted, or its connection is torn down (or the command is dropped by the CmdSN rules);
 *   - the receive engine while a data segment is being placed into its buffers (pdu_in.task);
 *   - the SCSI core / store from scsi_task_exec() until its completion;
 *   - every queued PDU whose data or completion points at it (Data-In, SCSI Response). */
struct iscsi_task {
    struct scsi_task scsi;
    struct iscsi_conn *conn;
    struct iscsi_bhs req; /* the SCSI Command header as received */
    uint32_t itt;
    uint32_t cmdsn;
    uint32_t edtl;
    bool immediate;
    bool refused;    /* setup refused: swallow data-out, then answer */
    bool aborted;    /* a TMF aborted it: never answer */
    bool seq_failed; /* a Data-Out sequence error: swallow the rest, then CHECK CONDITION */
    bool in_hash;
    bool cmdsn_pending; /* ERL >= 1, immediate data under a data digest: the CmdSN is looked
                           at once the digest is known good (§7.3), not in flight till then */
    enum iscsi_task_state state;
    /* The portal shard whose in-flight gauge counts it (util/iostats.h: iostats_queue), from
     * its acceptance into the CmdSN window until it is answered, freed, or orphaned (ERL 2):
     * always on the connection's reactor that entered it; NULL once it left. */
    struct iostats_shard *st_queue;
    /* write bookkeeping */
    uint32_t data_expected; /* bytes of data-out this task will receive in total */
    uint32_t data_received;
    /* immediate data placed by the command PDU still coming in: counted in data_received
     * only once that PDU ends; if the connection dies first (ERL 2), solicited again */
    uint32_t imm_pending;
    uint64_t arrival_ns;      /* when the command PDU came, for the latency histograms */
    uint32_t unsol_remaining; /* unsolicited bytes still due (sent without R2T) */
    uint32_t r2t_offset;      /* next offset to solicit */
    uint32_t r2t_outstanding; /* R2Ts sent and not yet fully answered */
    uint32_t r2tsn;
    struct r2t_seq r2t[ISCSI_MAX_R2T];
    uint32_t unsol_datasn;   /* next DataSN of the unsolicited sequence */
    uint32_t unsol_next_off; /* next buffer offset of the unsolicited sequence */
    uint32_t datasn_in;      /* Data-In DataSN */
    /* ERL >= 1 (RFC 7143 §7.1): what a retransmission needs. The status's StatSN, and the
     * Data-In segmentation used at send time (PDU size, burst, bytes), from which DataSN k's
     * offset and length follow, so a Data SNACK re-sends exact replicas (§11.16). */
    uint32_t statsn;
    uint32_t din_pdu_len, din_burst, din_total;
    /* ERL 2: Data-In from DataSN din_recut_sn on were cut anew into PDUs of din_recut_pdu
     * bytes from offset din_recut_off (a TASK REASSIGN to a connection taking smaller PDUs,
     * §11.5.1); 0: one cut throughout. A Data SNACK replays whichever cut a DataSN had. */
    uint32_t din_recut_sn, din_recut_off, din_recut_pdu;
    struct data_hole holes[ISCSI_MAX_HOLES]; /* write data to solicit again */
    unsigned nholes;
    uint64_t data_out_ms;           /* last Data-Out progress (the stall check) */
    unsigned stall_rounds;          /* re-solicits since then (ISCSI_DATA_OUT_STALL_ROUNDS) */
    struct list_node retained_node; /* conn->retained, in StatSN order */
    unsigned refs;                  /* see above; on the connection's thread only */
    uint64_t buf_charge;            /* bytes of data memory it holds: in conn->buf_bytes (while on a
                                     * connection) and in srv->task_mem (until freed) */
    struct iscsi_task *hash_next;
    struct list_node node;  /* conn->tasks (conn->task_free once freed) */
    struct cmdsn_wait wait; /* session->pending, then conn->released (MC/S order) */
    /* ERL 2, while orphaned (the session's lock guards these; see enum task_orphan). `node`
     * then links it into its orphan group instead of conn->tasks, and conn is NULL (or, while
     * ORPHAN_BUSY, the dead connection the store completes on). */
    enum task_orphan orphan;
    uint16_t orphan_cid;               /* the connection it was allegiant to */
    bool orphan_released;              /* its CmdSN turn came while it had no connection */
    bool orphan_expired;               /* Time2Retain ended while the store had it */
    struct iscsi_session *orphan_sess; /* a session reference, while orphaned */
    struct iscsi_conn *claim;          /* TASK REASSIGN took it while ORPHAN_BUSY (a ref) */
    struct reactor_msg move_msg;       /* ... and the completion hands it over by this */
    bool abort_on_arrival;             /* ... and ABORT TASK took it meanwhile */
    /* ORPHAN_BUSY: what the store's completion runs (orphan.c, set with the state), so that
     * running commands (exec.c) need not know the orphans */
    void (*orphan_done)(struct iscsi_task *t);
};

/* What the connections of one reactor share, touched only on its thread (reactor_self()): with
 * hundreds of connections, a pool of their own is cold by the time each reuses it (issue 14:
 * zeroing a recycled task cost 4 x at 256 sessions what it did at 8), while a pool every
 * connection of the thread draws on stays in cache. */
#define ISCSI_REACTOR_TASKS_MAX 256u /* free tasks kept per reactor; more go to their conn */
struct iscsi_reactor_local {
    struct list_node task_free; /* most recently freed first */
    unsigned ntask_free;
};

/* Answered: its status is queued or on the wire (TASK_SENDING), or sent and kept for a SNACK
 * (TASK_RETAINED); the initiator has it or will, so nothing about it is pending any more. */
static inline bool task_answered(const struct iscsi_task *t)
{
    return t->state == TASK_SENDING || t->state == TASK_RETAINED;
}

/* task.c: the pool. A new task of c (TASK_QUEUED, one reference: the protocol side's, on c's
 * list of tasks); NULL when memory ran out. The caller sets its wait.release. */
struct iscsi_task *task_alloc(struct iscsi_conn *c);
/* The last reference to c is gone: its free tasks are freed (struct conn_ops.free). */
void task_pool_conn_free(struct iscsi_conn *c);
/* t stops counting in its portal's queue depth (st_queue), on the reactor that counted it. */
void task_queue_leave(struct iscsi_task *t);
/* The tasks of c that take Data-Out, by ITT (in_hash tells whether t is in). */
void task_hash_add(struct iscsi_conn *c, struct iscsi_task *t);
void task_hash_del(struct iscsi_conn *c, struct iscsi_task *t);
struct iscsi_task *task_hash_find(struct iscsi_conn *c, uint32_t itt);

void task_get(struct iscsi_task *t);
/* Drop a reference; the last one frees the task (see struct iscsi_task). */
void task_put(struct iscsi_task *t);

#endif
