/* linerate's asynchronous iSCSI initiator: sessions of one or more connections (MC/S) driven
 * by the caller's reactor (linerate/reactor.h), discovery, login, READ/WRITE with callbacks,
 * logout. A session runs on its reactor's thread, and no call here is thread-safe, unless
 * lr_session_opts.conn_reactors puts its connections on other reactors: see there. Hooks for
 * tests (steering and dropping connections) are in linerate/initiator_test.h. */
#ifndef LINERATE_INITIATOR_H
#define LINERATE_INITIATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "linerate/reactor.h"

struct lr_session;

#define LR_MAX_CONNECTIONS 16
#define LR_SENSE_MAX 252

/* What happened to a request. LR_OK and LR_CHECK_CONDITION carry SCSI status; the others
 * mean the command never completed on the target as far as we know. */
enum lr_err {
    LR_OK = 0,
    LR_SCSI_STATUS,   /* SCSI status other than GOOD (CHECK CONDITION: sense filled in) */
    LR_ERR_LOGIN,     /* login refused: login_status = class << 8 | detail */
    LR_ERR_CONN_LOST, /* the connection carrying the task was lost */
    LR_ERR_TIMEOUT,   /* no answer within the command timeout */
    LR_ERR_PROTOCOL,  /* the target broke the protocol (bad PDU, digest error, Reject) */
    LR_ERR_NO_CONN,   /* the session has no connection left */
    LR_ERR_IO,        /* socket error (connect refused, ...) */
    LR_ERR_ABORTED,   /* session torn down while the task waited */
    /* lr_task_abort: the target answered the ABORT TASK before the command's own status (or
     * the command never left): it did not run, or ran whole before that answer */
    LR_ERR_TASK_ABORTED,
};

const char *lr_err_name(enum lr_err e);

/* lr_result.residual_kind (the U and O bits of the SCSI Response or final Data-In) */
enum lr_residual {
    LR_RESIDUAL_NONE = 0,  /* exactly the expected length moved; residual is 0 */
    LR_RESIDUAL_UNDERFLOW, /* residual bytes of the buffer were not transferred */
    LR_RESIDUAL_OVERFLOW,  /* the command wanted residual bytes more than the buffer holds */
};

struct lr_result {
    enum lr_err err;
    uint8_t scsi_status;   /* 0x00 GOOD, 0x02 CHECK CONDITION, ... */
    uint8_t response;      /* iSCSI response code of a SCSI Response PDU */
    uint16_t login_status; /* LR_ERR_LOGIN: status class << 8 | status detail (RFC 7143 §11.13.5) */
    uint32_t residual;     /* ResidualCount of the response; residual_kind says which */
    uint32_t sense_len;
    uint8_t sense[LR_SENSE_MAX];
    const char *what; /* short human description of the error, static string */
    int conn;         /* index of the connection the task ran on, -1 if none */
    /* ErrorRecoveryLevel 2: the connection the command went out on was lost and the task was
     * carried on over another one (TASK REASSIGN, or a retry of a command the target never
     * got; RFC 7143 §7.2) */
    bool recovered;
    /* enum lr_residual: what `residual` counts (RFC 7143 §11.4.5): bytes of the expected
     * length that were not transferred (underflow), or bytes the command wanted beyond it that
     * were not (overflow). A uint8_t, so lr_result keeps its size and layout. */
    uint8_t residual_kind;
};

typedef void (*lr_done_fn)(void *arg, const struct lr_result *res);

/* iscsi://[USER%SECRET@]HOST[:PORT]/IQN/LUN, the CHAP credentials spelt as libiscsi does
 * (the secret may not contain '@' or '/'). lr_url_wipe clears the secret. */
struct lr_url {
    char host[256];
    uint16_t port;
    char target[224];
    uint64_t lun;
    char chap_user[256]; /* "" without credentials */
    char chap_secret[256];
};
int lr_url_parse(const char *s, struct lr_url *u);
void lr_url_wipe(struct lr_url *u);

struct lr_session_opts {
    const char *initiator_name; /* default iqn.2026-01.org.linerate:bench */
    const char *host;
    uint16_t port;           /* default 3260 */
    const char *target_name; /* NULL for a discovery session */
    uint64_t lun;
    bool header_digest; /* ask for CRC32C; the target may refuse */
    bool data_digest;
    uint32_t connections;   /* MC/S connections wanted (asks MaxConnections=N) */
    uint32_t max_recv_dsl;  /* what we accept per PDU (default 256 KiB) */
    uint32_t max_burst;     /* default 256 KiB */
    uint32_t first_burst;   /* default 64 KiB */
    bool no_immediate_data; /* ask ImmediateData=No */
    bool initial_r2t;       /* ask InitialR2T=Yes */
    /* default 30000; 0 = default. Past it the task's connection is dropped and the task
     * fails with LR_ERR_TIMEOUT, at ERL 2 too: a timed-out task is not reassigned (a TASK
     * REASSIGN restarts the count for a task another connection's loss orphaned). */
    uint32_t cmd_timeout_ms;
    uint32_t login_timeout_ms; /* default 10000 */
    uint32_t max_tasks;        /* task slots (outstanding + queued); default 1024 */
    /* MC/S over several threads: connection i moves to conn_reactors[i] (NULL: stays) once the
     * session is logged in, and comes back for logout. If any of them names another reactor
     * than the session's, the session takes a lock of its own: the calls below other than
     * login take it, callbacks run with it held (so callbacks of one session never run at the
     * same time, on whatever thread), and the caller takes it with lr_session_lock() to touch,
     * from elsewhere, state its callbacks share. Login, logout and destroy are called on the
     * session's reactor, outside callbacks; see lr_session_destroy. */
    struct reactor *conn_reactors[LR_MAX_CONNECTIONS];
    /* CHAP (RFC 7143 §12.1.3): log in as chap_user proving chap_secret; with
     * chap_mutual_user the target must prove itself as that user with chap_mutual_secret
     * (mutual CHAP: the login fails if it does not). NULL: no CHAP (AuthMethod=None).
     * chap_algorithms: "sha3-256,sha256,md5" style list, NULL for all. Copied at create,
     * wiped at destroy, never logged nor put in an error. */
    const char *chap_user, *chap_secret;
    const char *chap_mutual_user, *chap_mutual_secret;
    const char *chap_algorithms;
    /* ErrorRecoveryLevel to ask for (RFC 7143 §7, §13.20): 0 (default), 1 or 2; the target
     * may answer lower (lr_session_info.erl says what was agreed). Above lr_erl_max()
     * lr_session_create fails with errno ENOTSUP: we never offer recovery we cannot do. */
    uint32_t error_recovery_level;
    /* How long any Logout of ours waits for its Logout Response (RFC 7143 §11.14) before the
     * connection is closed: lr_session_logout then completes with LR_ERR_TIMEOUT, a logout
     * the target asked for goes on with a login, an ERL 2 cleanup with a login; default 5000. */
    uint32_t logout_timeout_ms;
    /* The session's ISID (RFC 7143 §11.12.5); all zero: a random one (type 0x80) of its own.
     * A session logging in with the ISID of an earlier session of this initiator name to the
     * same target portal group reinstates it (§6.3.5): the target ends the old one's
     * connections and tasks (and keeps its persistent reservations) before it answers. Never
     * give two live sessions to one target the same ISID. */
    uint8_t isid[6];
};

/* The highest ErrorRecoveryLevel this library performs. */
unsigned lr_erl_max(void);

/* The negotiated outcome, for reports. */
struct lr_session_info {
    uint32_t connections_asked;
    uint32_t connections_granted; /* MaxConnections answer */
    uint32_t connections_up;      /* logged in right now */
    bool header_digest, data_digest;
    bool immediate_data, initial_r2t;
    uint32_t max_burst, first_burst, peer_max_recv_dsl, max_recv_dsl, max_outstanding_r2t;
    uint16_t tsih;
    uint32_t cmdsn, expcmdsn, maxcmdsn;
    uint32_t erl; /* ErrorRecoveryLevel agreed */
    /* DefaultTime2Wait/DefaultTime2Retain agreed (s): at ERL 2 the wait before a lost
     * connection's tasks are reassigned, and how long after it the target keeps them */
    uint32_t time2wait, time2retain;
    /* The session is still at work on its own: an ERL 2 connection recovery (orphans to
     * reassign, a slot to log in again) or a login after a logout the target asked for, not
     * given up yet. Its commands may still complete, or the target still hold them. */
    bool recovering;
};

struct lr_session *lr_session_create(struct reactor *r, const struct lr_session_opts *o);
/* Frees everything; in-flight tasks complete with LR_ERR_ABORTED. With connections on other
 * reactors (conn_reactors) it returns at once and does this on the session's reactor once
 * every connection is back there, meanwhile tasks may still complete normally on their
 * threads; those reactors must keep running until then. Destroying after logout's done()
 * leaves nothing for later. */
void lr_session_destroy(struct lr_session *s);

/* Log in the leading connection, then the others (non-leading, same TSIH, new CIDs).
 * done() runs once: LR_OK when at least the leading connection is in full feature phase
 * (fewer connections than asked is reported through lr_session_get_info), or the error.
 * A login fails (LR_ERR_LOGIN, the reason in `what`) within login_timeout_ms whatever the
 * target sends: a mutual-CHAP target that does not answer our challenge, answers it wrong or
 * as another user, a CHAP_C over 1024 bytes, an algorithm we did not offer, a login that does
 * not converge in 16 rounds. Returns 0, or -1 when logged in already or (errno ENOMEM) there
 * is no memory for the connection: then done() is not called.
 *
 * When the target asks for a logout (Async Message event 1, RFC 7143 §11.9.1), at any
 * ErrorRecoveryLevel: that connection takes no new command, its commands may complete until
 * Parameter3 seconds are nearly up, then it logs out ("close the connection", or "close the
 * session" for the last one) and logs in again: the same CID into the session, or a new
 * session with the same ISID. Commands issued meanwhile wait and go out there. Commands the
 * target still had when the Logout left were terminated by it and fail with
 * LR_ERR_CONN_LOST ("terminated by the logout the target asked for"): whether they ran is
 * unknown, so they are not sent again. An unanswered Logout drops the connection after
 * logout_timeout_ms; after 5 failed login attempts, or 3 logouts asked for in a row with no
 * command completed, the session stops logging in and the commands waiting fail with
 * LR_ERR_NO_CONN. */
int lr_session_login(struct lr_session *s, lr_done_fn done, void *arg);
/* Log out the whole session (reason: close session); done() when the target answered (LR_OK)
 * or the connections are gone: LR_ERR_TIMEOUT ("logout timed out") when no answer came within
 * logout_timeout_ms, LR_ERR_CONN_LOST when a connection was lost before it, LR_OK when there
 * was nothing to log out. Returns 0, or -1 when there is no memory for the Logout: then done()
 * is not called. */
int lr_session_logout(struct lr_session *s, lr_done_fn done, void *arg);
void lr_session_get_info(const struct lr_session *s, struct lr_session_info *info);
/* Connection i (lr_result.conn) is the one the session's recovery is at work on: lost (or
 * dropped at a command timeout) and not given up at ERL 2, or the session logs in again after
 * a logout the target asked for. False for -1 and for a connection up and unrelated. */
bool lr_session_conn_recovering(const struct lr_session *s, int i);
/* The session's lock (recursive; nothing unless conn_reactors names another reactor). */
void lr_session_lock(struct lr_session *s);
void lr_session_unlock(struct lr_session *s);

/* SCSI commands. buf must stay valid until done() runs. Returns 0, or -1 when the session
 * cannot take the task (no slot left, no connection).
 *
 * A command reported LR_OK with data-in (a READ) has every byte of len but the underflow
 * residual from the target, each received once: at ErrorRecoveryLevel 0 the Data-In PDUs
 * must come in DataSN and offset order (DataPDUInOrder) and add up to exactly that, with good
 * digests where negotiated; anything else (a PDU lost, repeated or corrupted, a GOOD status
 * without the data, a residual underflow above len, underflow and overflow together) is
 * LR_ERR_PROTOCOL with the reason in `what`, and buf may hold some of the data; a bad header
 * digest loses the connection (LR_ERR_CONN_LOST). At level 1 and 2 the missing Data-In is
 * asked for again first (SNACK), until the command timeout. A target that sends pings faster
 * than it reads the answers (more than 1 MiB of them unsent), at level 0 an R2T for data
 * already sent, or at level 1 and 2 recovery R2Ts and SNACKs it makes us send faster than it
 * reads them (more than 64 MiB unsent), loses the connection. */
enum lr_dir { LR_DIR_NONE, LR_DIR_READ, LR_DIR_WRITE };
int lr_scsi(struct lr_session *s, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir, void *buf,
            uint32_t len, lr_done_fn done, void *arg);
/* lr_scsi, and *tag gets the task's tag (its Initiator Task Tag) for lr_task_abort. */
int lr_scsi_tag(struct lr_session *s, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                void *buf, uint32_t len, lr_done_fn done, void *arg, uint32_t *tag);

/* ABORT TASK (RFC 7143 §11.5.1) of the task lr_scsi_tag tagged. Returns 0 and done() runs once
 * later (never from inside this call), or -1: errno ESRCH when the task already completed (its
 * callback ran) or no such task, EALREADY when an abort of it is under way, ENOTSUP for a
 * session with connections on other reactors (conn_reactors), ENOMEM.
 *
 * The task's own callback still runs exactly once:
 * - with LR_ERR_TASK_ABORTED when the abort won: the target answered "function complete" or
 *   "task does not exist" before any status of the command, or the command was still waiting
 *   for the CmdSN window and was never sent. A WRITE so aborted either landed whole before
 *   that answer or not at all, and none of it lands after (RFC 7143 §4.2.3.3: the target
 *   discards what comes for an aborted task).
 * - with the command's own result when that came first: its status stands (a GOOD write
 *   landed), and the abort is answered "task does not exist" (or "function complete").
 * - with LR_ERR_CONN_LOST etc. as any task when its connection fails first. At ERL 2 a task
 *   whose connection was lost is not reassigned: once the target let go of that connection,
 *   the ABORT TASK goes on another one in place of the TASK REASSIGN.
 * The task's callback runs before the abort's done().
 *
 * The abort's done(): LR_OK with `response` the TMF response code (RFC 7143 §11.6.1: 0
 * function complete, 1 task does not exist, 5 not supported, 255 rejected; only 0 and 1
 * abort anything) and `what` spelling it; LR_ERR_CONN_LOST when the task ended with its
 * connection before the abort was answered; LR_ERR_TIMEOUT when no answer came within
 * cmd_timeout_ms; LR_ERR_ABORTED when the session was destroyed. */
int lr_task_abort(struct lr_session *s, uint32_t tag, lr_done_fn done, void *arg);

/* READ/WRITE (10), or (16) when the LBA or the block count does not fit. */
int lr_read(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size, void *buf,
            lr_done_fn done, void *arg);
int lr_write(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size,
             const void *buf, lr_done_fn done, void *arg);
/* lr_write that gives the task's tag for lr_task_abort */
int lr_write_tag(struct lr_session *s, uint64_t lba, uint32_t blocks, uint32_t block_size,
                 const void *buf, lr_done_fn done, void *arg, uint32_t *tag);
/* READ CAPACITY (16): last LBA + 1 and the block size. */
typedef void (*lr_capacity_fn)(void *arg, const struct lr_result *res, uint64_t blocks,
                               uint32_t block_size);
int lr_read_capacity(struct lr_session *s, lr_capacity_fn done, void *arg);

/* Tasks handed to the session and not yet completed. */
uint32_t lr_session_inflight(const struct lr_session *s);

/* Discovery: SendTargets=All on a discovery session; done() gets the raw key=value\0 text
 * (TargetName=..., TargetAddress=...) or an error: LR_ERR_PROTOCOL for an answer over 64 KiB
 * or of more than 256 Text Responses, LR_ERR_TIMEOUT when it is not complete within
 * cmd_timeout_ms. */
typedef void (*lr_discovery_fn)(void *arg, const struct lr_result *res, const char *text,
                                uint32_t len);
int lr_discover(struct reactor *r, const char *host, uint16_t port, const char *initiator_name,
                lr_discovery_fn done, void *arg);
/* The same with session options (host, port, initiator name, CHAP; target_name ignored). */
int lr_discover_opts(struct reactor *r, const struct lr_session_opts *o, lr_discovery_fn done,
                     void *arg);

#endif
