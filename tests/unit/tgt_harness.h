/* A target-side iSCSI harness for unit tests: a server with one target node (one RAM LUN), one
 * connection with no socket that logs in by real Login Request PDUs, request builders, and the
 * target's answers parsed one PDU at a time. Tests feed bytes and check what comes out; they
 * see nothing of the connection's internals (only tgt_harness.c does), so a change of the
 * target's receive/transmit engine is absorbed in that one file. Everything runs on the test's
 * thread; a reactor is driven until idle after each request so deferred work (completions,
 * task frees, flushes) has happened before the test looks. */
#ifndef LR_TESTS_UNIT_TGT_HARNESS_H
#define LR_TESTS_UNIT_TGT_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/pdu.h"

#define TGT_TARGET_NAME "iqn.2026-12.org.linerate:harness"
#define TGT_INITIATOR_NAME "iqn.2026-12.org.linerate:harness-ini"
#define TGT_INITIATOR2_NAME "iqn.2026-12.org.linerate:harness-two"
#define TGT_BLOCK 512u

/* What the initiator side of the login offers (RFC 7143 §13); the target's defaults are
 * larger or more permissive, so these are what the session ends up with. */
struct tgt_opts {
    bool immediate_data;
    bool initial_r2t;
    uint32_t first_burst;
    uint32_t max_burst;
    uint32_t mrdsl; /* the initiator's MaxRecvDataSegmentLength: the target's Data-In size */
    uint32_t max_outstanding_r2t;
    uint32_t lun_mib; /* size of LUN 0 (RAM) */
    uint32_t cmdsn;   /* CmdSN of the Login Request: the first command's (§11.12.7) */
    /* ErrorRecoveryLevel offered (and made possible on the target for this test only, past
     * ISCSI_ERL_IMPLEMENTED: the recovery paths are tested before the level is enabled) */
    uint8_t erl;
    bool data_digest;        /* DataDigest=CRC32C both ways */
    uint64_t max_tx_backlog; /* the target's max-tx-backlog (0: its default) */
    /* DefaultTime2Wait / DefaultTime2Retain of both sides (-1: not offered, the target's
     * defaults 2 and 20 apply) */
    int time2wait, time2retain;
    uint32_t max_connections; /* MaxConnections offered (0: not offered, RFC default 1) */
    const char *lun_spec;     /* LUN 0 as --lun takes it instead of ram:<lun_mib>M */
    /* non-NULL: the initiator has a [host] entry that maps LUN 0 as 0, with these caps as
     * the entry's keys take them ("iops=2,burst=0"; "" for none) */
    const char *host_limits;
    /* with host_limits: the entry is [group harness] of the initiator and TGT_INITIATOR2_NAME */
    bool host_group;
};

/* ImmediateData=Yes, InitialR2T=No, FirstBurstLength 8 KiB, MaxBurstLength 16 KiB, MRDSL 4 KiB,
 * MaxOutstandingR2T 2, a 4 MiB LUN, CmdSN 1, ERL 0, no digests, Time2Wait/Retain not offered. */
void tgt_opts_default(struct tgt_opts *o);

struct tgt;

/* Build the server and node, log in (asserting a successful leading login to full feature
 * phase), take the new nexus's POWER ON unit attention with a TEST UNIT READY (CmdSN
 * o->cmdsn: the test's first command has o->cmdsn + 1), and return the harness. */
struct tgt *tgt_login(const struct tgt_opts *o);
/* Close the connection if it is still open and free everything. */
void tgt_free(struct tgt *t);

/* CmdSN bookkeeping of the test's "initiator": the next CmdSN (and advance it), or peek. */
uint32_t tgt_next_cmdsn(struct tgt *t);
uint32_t tgt_peek_cmdsn(const struct tgt *t);
/* A fresh Initiator Task Tag. */
uint32_t tgt_new_itt(struct tgt *t);
/* What the login answered: ExpCmdSN/MaxCmdSN of the final Login Response, the target's
 * declared MaxRecvDataSegmentLength, the TSIH. */
uint32_t tgt_login_expcmdsn(const struct tgt *t);
uint32_t tgt_login_maxcmdsn(const struct tgt *t);
uint32_t tgt_target_mrdsl(const struct tgt *t);
uint16_t tgt_tsih(const struct tgt *t);

/* ---- requests ---- */

/* A request PDU: header and data segment (not owned). Builders fill every field they name;
 * a test may change header bytes before sending (a wrong DataSN, an unknown opcode). */
struct tgt_pdu {
    struct iscsi_bhs bhs;
    const void *data;
    uint32_t dlen;
    bool bad_digest; /* with DataDigest on: send a wrong data digest */
};

/* SCSI Command on LUN 0: flags are ISCSI_FLAG_FINAL / ISCSI_CMD_READ / ISCSI_CMD_WRITE
 * (simple task attribute); imm is immediate data. */
void tgt_pdu_scsi_cmd(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const uint8_t cdb[16],
                      uint32_t edtl, uint8_t flags, const void *imm, uint32_t imm_len);
/* Mark a request immediate (bit 6 of byte 0). */
void tgt_pdu_set_immediate(struct tgt_pdu *p);
/* READ(10) (0x28) or WRITE(10) (0x2a) of `blocks` 512-byte blocks at lba. */
void tgt_cdb_rw10(uint8_t cdb[16], uint8_t op, uint32_t lba, uint16_t blocks);
void tgt_pdu_data_out(struct tgt_pdu *p, uint32_t itt, uint32_t ttt, uint32_t datasn,
                      uint32_t offset, const void *data, uint32_t len, bool final);
void tgt_pdu_nop_out(struct tgt_pdu *p, uint32_t itt, uint32_t ttt, uint32_t cmdsn, bool immediate,
                     const void *data, uint32_t len);
void tgt_pdu_tmf(struct tgt_pdu *p, uint8_t function, uint32_t itt, uint32_t rtt, uint32_t refcmdsn,
                 uint32_t cmdsn, bool immediate);
void tgt_pdu_logout(struct tgt_pdu *p, uint8_t reason, uint32_t itt, uint16_t cid, uint32_t cmdsn,
                    bool immediate);
void tgt_pdu_text(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const char *text, uint32_t len);
void tgt_pdu_snack(struct tgt_pdu *p, uint8_t type, uint32_t itt, uint32_t ttt, uint32_t begrun,
                   uint32_t runlength);
/* A Login Request (CSG=1, NSG=3, T=1) with the given text, for a connection in full feature
 * phase. */
void tgt_pdu_login(struct tgt_pdu *p, uint32_t itt, uint32_t cmdsn, const char *text, uint32_t len);

/* Send a request: ExpStatSN is filled in, the bytes are fed to the connection, the reactor
 * runs until idle and the target's answers are collected for tgt_recv(). */
void tgt_send(struct tgt *t, const struct tgt_pdu *p);
/* Feed raw bytes (a header alone, a PDU split anywhere), then as tgt_send. Returns the bytes
 * the connection took. */
size_t tgt_feed(struct tgt *t, const void *bytes, size_t len);
/* Several requests in one read: their bytes fed at once, so that the target receives every one
 * of them before it writes any answer (answers stay queued meanwhile), and the connection reads
 * them all in one turn, before anything the first posts to another connection (a close, a
 * message) has run; then as tgt_send. */
void tgt_send_together(struct tgt *t, const struct tgt_pdu *const *p, unsigned n);

/* ExpStatSN of the requests: by default each answer with a StatSN advances it (§4.2.2.2);
 * held, it stays where it is (an initiator that has not acknowledged), or is set at will. */
void tgt_hold_expstatsn(struct tgt *t, bool hold);
void tgt_set_expstatsn(struct tgt *t, uint32_t expstatsn);
uint32_t tgt_expstatsn(const struct tgt *t);

/* A reader that does not read: held, the target's answers stay in the connection's transmit
 * queue; released, they are collected for tgt_recv() as usual. */
void tgt_hold_tx(struct tgt *t, bool hold);
/* What the connection's once-a-second timer does to a stalled reader (rsp_unpin_stalled: the
 * queued Data-In of READs sent in place copied away, their pins let go); its return code. */
int tgt_unpin_stalled(struct tgt *t);

/* What the connection's once-a-second timer does at ERL >= 1 after `ms` more milliseconds
 * (the Data-Out stall check), then the answers collected as after tgt_send(). */
void tgt_timer_after(struct tgt *t, unsigned ms);

/* ---- answers ---- */

struct tgt_rsp {
    struct iscsi_bhs bhs;
    enum iscsi_opcode opcode;
    uint8_t flags;
    uint32_t itt, ttt, statsn, expcmdsn, maxcmdsn;
    uint32_t datasn;      /* DataSN (Data-In), R2TSN (R2T), ExpDataSN (SCSI Response) */
    uint32_t offset;      /* BufferOffset (Data-In, R2T) */
    uint32_t desired_len; /* DesiredDataTransferLength (R2T) */
    uint32_t residual;    /* ResidualCount (SCSI Response, Data-In with S) */
    uint8_t response;     /* SCSI/TMF/Logout Response */
    uint8_t status;       /* SCSI status (SCSI Response, Data-In with S) */
    uint8_t reason;       /* Reject reason */
    const uint8_t *data;  /* the data segment, valid until the next tgt_recv() or tgt_free() */
    uint32_t dlen;
    /* SCSI Response with sense data (§11.4.7): key, ASC, ASCQ (fixed or descriptor format) */
    bool has_sense;
    uint8_t sense_key, asc, ascq;
};

/* The next PDU the target sent, or false if there is none. */
bool tgt_recv(struct tgt *t, struct tgt_rsp *r);
/* How many whole PDUs are waiting for tgt_recv(). */
unsigned tgt_pending(struct tgt *t);
/* Whether the target closed the connection. */
bool tgt_closed(const struct tgt *t);

/* ---- more connections of the session (index 0 is the leading one) ---- */

/* A connection joining the session (TSIH of the leading login) with this CID: a new one, or
 * the reinstatement of a CID in use (RFC 7143 §6.3.4). It becomes the current one: requests and
 * answers go through it until tgt_use(). With status NULL the login must succeed; else the
 * Login Response's status class/detail is stored there. Returns its index. */
int tgt_login_conn(struct tgt *t, uint16_t cid, uint16_t *status);
/* A connection with a session of its own, of another initiator (a leading login as
 * initiator_name, every key but the names at its default, the Login Request's CmdSN cmdsn:
 * the test numbers that session's commands itself). It becomes the current one, as above;
 * its new nexus has its POWER ON unit attention pending. Returns its index. */
int tgt_login_session(struct tgt *t, const char *initiator_name, uint32_t cmdsn);
/* The MaxRecvDataSegmentLength the next connections declare (the first one's by default). */
void tgt_set_join_mrdsl(struct tgt *t, uint32_t mrdsl);
/* Make connection idx the one tgt_send()/tgt_recv() and the rest act on. */
void tgt_use(struct tgt *t, int idx);
int tgt_current(const struct tgt *t);
/* The current connection fails (its TCP connection lost, as the target sees it). */
void tgt_kill(struct tgt *t);
/* The current connection fails, and while its teardown runs (as it begins, or once its orphan
 * group is published) a Logout for recovery or a restart on another thread names its CID with
 * this ExpStatSN (session_close_conn_by_cid): the race of the two, at one point of it. */
void tgt_kill_acked(struct tgt *t, bool published, uint32_t exp_statsn);
/* Let `ms` milliseconds of real time pass with the reactor running (timers fire). */
void tgt_wait_ms(struct tgt *t, unsigned ms);
/* In one reactor turn (before anything the first starts in a store can complete): `first` is
 * fed to the current connection, the connection fails, and `second` is fed to connection
 * `other`, which becomes the current one. */
void tgt_send_kill_send(struct tgt *t, const struct tgt_pdu *first, int other,
                        const struct tgt_pdu *second);
/* The target announces it will drop the current connection (Async Message event 2). */
void tgt_async_drop(struct tgt *t);
/* The SCSI target behind the node, for what a test sets up as linerate-ctl would (host LUN
 * maps). */
struct scsi_target;
struct scsi_target *tgt_scsi_target(struct tgt *t);
/* The node behind the target, for its entries (their limiters). */
struct iscsi_node *tgt_node(struct tgt *t);

#endif
