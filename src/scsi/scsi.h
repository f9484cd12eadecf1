/* The SCSI core (SPC-4 / SBC-3): takes a CDB, a LUN and data buffers, returns status and
 * sense. It never sees a PDU, so iSCSI, the unit tests and future transports drive it alike.
 *
 * Life of a task, driven by the transport:
 *   1. fill cdb, lun, target, nexus, edtl (scsi_task_init);
 *   2. scsi_task_setup(): validates everything that can be refused before any data moves
 *      (LUN, unit attention, reservation, CDB fields, LBA range, transfer length) and
 *      gives the task a buffer of its own for its data (t->iov), RAM LUNs included, so that
 *      what the transport sends is memory no other command writes;
 *   3. for a write, the transport fills t->iov with the data-out bytes;
 *   4. scsi_task_exec(): runs the command; t->done(t) is called once, on the calling reactor
 *      thread, possibly before exec returns;
 *   5. the transport sends t->data_len bytes from t->iov (reads) and the status/sense;
 *   6. scsi_task_release() frees what setup allocated. */
#ifndef LR_SCSI_H
#define LR_SCSI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "reactor/reactor.h"
#include "util/rate_limit.h"

/* SAM-5 status codes */
enum scsi_status {
    SCSI_STATUS_GOOD = 0x00,
    SCSI_STATUS_CHECK_CONDITION = 0x02,
    SCSI_STATUS_CONDITION_MET = 0x04,
    SCSI_STATUS_BUSY = 0x08,
    SCSI_STATUS_RESERVATION_CONFLICT = 0x18,
    SCSI_STATUS_TASK_SET_FULL = 0x28,
    SCSI_STATUS_ACA_ACTIVE = 0x30,
    SCSI_STATUS_TASK_ABORTED = 0x40,
};

enum scsi_dir { SCSI_DIR_NONE, SCSI_DIR_READ, SCSI_DIR_WRITE };

#define SCSI_SENSE_MAX 96
#define SCSI_TASK_IOV_MAX 16
#define SCSI_CDB_MAX 16
/* Room for the SCSI core's private per-task state (struct scsi_task_core). */
#define SCSI_TASK_CORE_BYTES 232 /* the real struct: the _Static_assert in scsi_internal.h */
/* Largest transfer one command may ask for (VPD 0xB0 MAXIMUM TRANSFER LENGTH says so);
 * bounds every allocation a CDB can cause. */
#define SCSI_MAX_XFER_BYTES (8u << 20)

struct bs;
struct scsi_lun;
struct scsi_join;
struct scsi_target;

/* What the transport of an I_T nexus says about its initiator ports, which the core does not
 * know: each SCSI transport protocol defines its port names and its TransportIDs (SPC-4
 * §7.6.4). The iSCSI target fills it in (iscsi/scsi_port.c) and gives it to scsi_nexus_get. */
struct scsi_transport {
    /* The initiator port name of initiator_name's port port_id (iSCSI: the ISID), into out
     * (n bytes): how the core tells nexuses apart and names them in reservations. */
    void (*port_name)(char *out, size_t n, const char *initiator_name, const void *port_id);
    /* The TransportID of a port so named (PERSISTENT RESERVE IN, READ FULL STATUS): its
     * length, a multiple of 4, and its bytes at out. */
    uint32_t (*tid_len)(const char *port);
    void (*tid_put)(uint8_t *out, const char *port);
    /* The port name a TransportID of len bytes designates (PERSISTENT RESERVE OUT, REGISTER
     * AND MOVE) into port (portlen bytes): 0, or -1 with *bad the offset in tid of the first
     * field that is not what the protocol allows. */
    int (*tid_parse)(const uint8_t *tid, uint32_t len, char *port, size_t portlen, uint32_t *bad);
    /* What INQUIRY reports of the protocol: its PROTOCOL IDENTIFIER (SPC-4 §7.6.1) in the
     * target port designators of VPD 0x83, its version descriptor (SPC-4 §6.6.2) in the
     * standard data, and the name of target_name's port tpgt (a SCSI name string, VPD 0x83). */
    uint8_t protocol_id;
    uint16_t version_descriptor;
    void (*target_port_name)(char *out, size_t n, const char *target_name, uint16_t tpgt);
};

/* An I_T nexus: one initiator port talking to one target port. Reservations and unit
 * attentions are kept per nexus. Owned by the SCSI core, shared by reference. */
struct scsi_nexus {
    char initiator_port[256]; /* the transport's port name (scsi_transport.port_name) */
    char initiator_name[224];
    uint64_t id; /* unique within the target, never reused */
    struct scsi_target *target;
    const struct scsi_transport *transport;
};

/* Asymmetric access states of a target port group (SPC-4 §6.27 table 256), as REPORT TARGET
 * PORT GROUPS carries them. Only the three an implicit-ALUA gateway is configured with. */
enum scsi_alua_state {
    SCSI_ALUA_ACTIVE_OPTIMIZED = 0x0,
    SCSI_ALUA_ACTIVE_NON_OPTIMIZED = 0x1,
    SCSI_ALUA_STANDBY = 0x2,
};

/* Target port groups a target knows besides its own: one per other gateway exporting the same
 * LUNs (implicit ALUA, SPC-4 §5.16). Group IDs are also the groups' relative target port IDs
 * (one port per group). */
#define SCSI_ALUA_GROUPS_MAX 16

/* I_T nexus slots per target: a LUN keeps one UA word per slot, so the data path checks its
 * nexus's pending UAs with a single atomic load. A login that would be the target's 4097th
 * distinct initiator port is refused (max-sessions-per-target is bounded by it). A LUN keeps
 * that state in chunks of 256 slots, only for the slots its target has used (1 KiB per LUN
 * per 256 initiators); the target has a pointer per slot (32 KiB). */
#define SCSI_NEXUS_MAX 4096
struct scsi_alua_group {
    uint16_t id;   /* 1..65535 */
    uint8_t state; /* enum scsi_alua_state */
};

/* "active/optimized" ("ao", "optimized"), "active/non-optimized" ("an", "non-optimized"),
 * "standby" ("sb"): 0 and the state, or -1. */
int scsi_alua_state_parse(const char *s, enum scsi_alua_state *out);
const char *scsi_alua_state_name(enum scsi_alua_state s);
/* Change, live, the state of target port group `group` (0: the target's own) for LUN lu
 * (SPC-4 §5.16.2.2): REPORT TARGET PORT GROUPS and the standby gate see it at once, and every
 * I_T nexus gets ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h). 1 changed, 0 it was that state
 * already, -1 the LUN has no such group (groups are fixed when the LUN is added). */
int scsi_lun_alua_set(struct scsi_lun *lu, uint16_t group, enum scsi_alua_state st);
/* The LUN's groups and their states, its own first: how many written (at most max). */
unsigned scsi_lun_alua_get(const struct scsi_lun *lu, struct scsi_alua_group *out, unsigned max);
/* Failover (alua-mode = failover): ask that this gateway take the active/optimized role of lu
 * (the operator's failback); done by its failover thread through the cluster. 0, -1 when
 * the LUN has no failover running, -ESHUTDOWN when this gateway was fenced (it can never
 * take the role again: only a restart, a new client, can). */
int scsi_lun_failover_claim(struct scsi_lun *lu);
struct scsi_failover_info {
    uint16_t ao;              /* the group the cluster says is active/optimized; 0 not known yet */
    uint64_t epoch;           /* bumped at each change of that group */
    bool fenced;              /* this gateway was blocklisted: standby for good */
    unsigned failovers;       /* takeovers this gateway made */
    uint64_t last_failover_s; /* when the last one was (Unix time), 0 none */
    uint16_t last_failover_from; /* from which group */
};
/* false when lu has no failover running. */
bool scsi_lun_failover_get(struct scsi_lun *lu, struct scsi_failover_info *out);

/* What a LUN tells hosts it is (INQUIRY, VPD 80h/83h/B1h), as an admin sets it so that a disk
 * keeps its identity across a move, a restart and every gateway. Zero fields keep the
 * defaults: vendor "LINERATE", the store's product name, revision "0001", a serial and an NAA
 * 3h designator hashed from the store's medium id (or the target name and LUN number), medium
 * rotation rate 1 (non-rotating). Strings are printable ASCII (SPC-4 §6.6.2), NUL-terminated. */
#define SCSI_SERIAL_MAX 64 /* VPD 80h PRODUCT SERIAL NUMBER, and the T10 vendor ID designator */
#define SCSI_TCMU_CONFIG_MAX 254 /* a designator's length is one byte, the NUL counted in it */
struct scsi_lun_identity {
    char vendor[9];   /* T10 VENDOR IDENTIFICATION, 8 bytes padded with spaces */
    char product[17]; /* PRODUCT IDENTIFICATION, 16 bytes */
    char revision[5]; /* PRODUCT REVISION LEVEL, 4 bytes */
    char serial[SCSI_SERIAL_MAX + 1];
    uint8_t naa[16];   /* an NAA designator (SPC-4 §7.8.6.6), checked by the caller */
    uint8_t naa_len;   /* 8 or 16; 0: the default */
    uint16_t rotation; /* SBC-3 §6.5.2 MEDIUM ROTATION RATE: 1 or 0401h..FFFEh; 0: default */
    /* The layout of VPD 80h and 83h: linerate's own, LIO's byte for byte, or tcmu-runner's
     * (an imported LUN keeps the pages hosts read from LIO or a ceph-iscsi gateway; spc.c,
     * docs/migrate.md) */
    enum scsi_vpd_style { SCSI_VPD_LINERATE, SCSI_VPD_LIO, SCSI_VPD_TCMU } vpd_style;
    /* SCSI_VPD_TCMU: the handler's config string tcmu-runner sends in a vendor specific
     * designator of VPD 83h (e.g. "rbd/POOL/IMAGE;osd_op_timeout=30"); "" sends a bare NUL */
    char tcmu_config[SCSI_TCMU_CONFIG_MAX + 1];
};

struct scsi_lun_config {
    uint64_t lun;        /* LUN number as the initiator addresses it */
    struct bs *bs;       /* the store (bs/bs.h); the LUN takes ownership */
    uint32_t block_size; /* 512 or 4096; 0 means 512 */
    /* Physical block size told to initiators (READ CAPACITY 16 LOGICAL BLOCKS PER PHYSICAL
     * BLOCK EXPONENT, VPD 0xB0 OPTIMAL TRANSFER LENGTH GRANULARITY): a power-of-two multiple
     * of block_size up to 64 KiB, e.g. 4096 for a 512e LUN on a 4K-sector disk; 0 means
     * block_size (every logical block is written alone). */
    uint32_t phys_block_size;
    bool read_only;
    /* Removable medium (SBC-3 §4.3): INQUIRY RMB=1, PREVENT ALLOW MEDIUM REMOVAL is kept per
     * I_T nexus and START STOP UNIT with LOEJ=1 ejects and loads; while ejected, commands that
     * need the medium are NOT READY, MEDIUM NOT PRESENT. false: the medium is always there. */
    bool removable;
    /* Bytes per second SANITIZE OVERWRITE (and BLOCK ERASE on a fully provisioned LUN) writes
     * at most, so a background sanitize leaves the store and the reactor to other LUNs (as
     * md's sync_speed_max does for a resync); 0: as fast as the store goes. */
    uint64_t sanitize_rate;
    /* Where persistent reservations made with APTPL=1 are kept (SPC-4 §5.13.5): loaded by
     * scsi_target_add_lun, rewritten atomically on every change while APTPL is in force.
     * NULL: APTPL is refused (PTPL_C=0). The string is copied. */
    const char *pr_state_path;
    /* Access state of this target's own port group for this LUN; unless alua_state_set, the
     * target's alua_state. */
    bool alua_state_set;
    enum scsi_alua_state alua_state;
    /* States of other groups for this LUN, overriding the target's alua_peers (by id); a group
     * named here that the target does not list is added for this LUN. */
    struct scsi_alua_group alua_peers[SCSI_ALUA_GROUPS_MAX - 1];
    unsigned alua_npeers;
    struct scsi_lun_identity identity; /* all zero: the defaults */
    /* IOPS and bytes/s caps of the LUN on this gateway (throttle.c); all zero: none */
    struct rate_limit_conf limits;
};

/* A SCSI target device: its LUNs and its one target port. */
struct scsi_target {
    char name[224]; /* SCSI target device name (iSCSI: the target's iSCSI name) */
    /* Target portal group tag = relative target port id = target port group (implicit ALUA,
     * SPC-4 §5.16: one port per group, one group per gateway). */
    uint16_t tpgt;
    struct scsi_lun **luns; /* luns[i] is LUN i; NULL holes allowed */
    uint32_t nluns;
    pthread_mutex_t lock; /* nexus list */
    void *priv;           /* SCSI core's per-target state */
    /* Set by the transport (NULL: skipped). PREEMPT AND ABORT calls it, on the thread running
     * that command and with no SCSI core lock held, for each I_T nexus with a live session
     * whose registration it removed: abort that nexus's tasks on lu as ABORT TASK SET would
     * (SPC-4 §5.13.11.2.5). With join, the transport adds one to it and ends that once every
     * task concerned is marked aborted (scsi_task_abort): the PREEMPT AND ABORT task answers
     * only after that and once the LUN's aborted tasks have left the store. */
    void (*abort_nexus_tasks)(struct scsi_target *t, struct scsi_nexus *n, struct scsi_lun *lu,
                              struct scsi_join *join);
    void *transport_ctx; /* the transport's own pointer, for that hook */
    /* The other gateways' target port groups and their default state for every LUN; set
     * before the first LUN is added (scsi_target_add_lun copies them into the LUN). */
    struct scsi_alua_group alua_peers[SCSI_ALUA_GROUPS_MAX - 1];
    unsigned alua_npeers;
    enum scsi_alua_state alua_state; /* own group's default for LUNs added (0: active/optimized) */
    /* Explicit ALUA as well (SPC-4 §5.16.2.3): INQUIRY TPGS 11b and SET TARGET PORT GROUPS;
     * set before the first command. */
    bool alua_explicit;
    /* alua-mode = failover (alua_failover.c): one group active/optimized per LUN, chosen and
     * handed over through the cluster; heartbeat period and dead time (0: 1 s and 5 s). Set
     * before the first LUN is added. */
    bool alua_failover;
    unsigned failover_hb_ms, failover_timeout_ms;
};

/* Why a transport ends a command itself instead of letting it run (or finish running). */
enum scsi_refusal {
    /* SAM-5 §5.3.1 TASK SET FULL, no sense: the transport has no room for the command now
     * (buffers, say) while the I_T nexus has other commands; the initiator retries later.
     * Before any data moved: dir becomes SCSI_DIR_NONE and xfer_len 0, as when setup
     * refuses. */
    SCSI_REFUSE_TASK_SET_FULL,
    /* SAM-5 §5.3.1 BUSY, no sense: the same lack of room when the I_T nexus has no other
     * command (TASK SET FULL is for a nexus that has some); the initiator retries later. */
    SCSI_REFUSE_BUSY,
    /* CHECK CONDITION, ABORTED COMMAND, 47h/05h PROTOCOL SERVICE CRC ERROR: data-out was lost
     * to a digest or sequence error that the connection does not recover (RFC 7143 §7.8 b,
     * §7.9; the sense is the "Protocol Service CRC error" row of §11.4.7.2). dir and xfer_len
     * stay, so the transport's residual still counts what the CDB asked for. */
    SCSI_REFUSE_PROTOCOL_CRC_ERROR,
};

struct scsi_task {
    /* filled by the transport */
    uint8_t cdb[SCSI_CDB_MAX];
    uint64_t lun;
    struct scsi_target *target;
    struct scsi_nexus *nexus;
    uint32_t edtl;              /* expected data transfer length from the transport */
    bool edtl_read, edtl_write; /* transport's R and W bits */
    /* The transport may resend a READ's data after its status (iSCSI ERL >= 1, until the
     * initiator acknowledges it): the core then copies it rather than send it from a RAM LUN
     * in place, whose pages would stay pinned (WRITEs waiting) for as long as that takes. */
    bool keeps_data;
    void (*done)(struct scsi_task *t);
    void *transport_priv;
    /* Or NULL: asked by setup, before it allocates anything, with every byte of data memory
     * the command will hold (its buffer, the medium's copy a compare reads, what its execution
     * allocates: scsi_task.mem). Returning false refuses the command with *why (TASK SET FULL
     * or BUSY, SAM-5 §5.3.1), nothing allocated. What it charges the transport uncharges
     * itself, once scsi_task_release() has freed the memory. */
    bool (*admit)(struct scsi_task *t, size_t bytes, enum scsi_refusal *why);
    /* Or NULL: a cap besides the LUN's that this command is charged to (an initiator entry's,
     * say), kept alive by the transport until done. Commands over either cap wait in the core
     * before they run (throttle.c). */
    struct rate_limit *limit;

    /* set by scsi_task_setup() */
    struct scsi_lun *lu; /* NULL if the LUN does not exist */
    enum scsi_dir dir;
    uint32_t xfer_len; /* bytes the CDB asks to move (data-out for writes) */
    struct iovec iov[SCSI_TASK_IOV_MAX];
    int iovcnt; /* buffers for the data: xfer_len bytes in total */
    /* The data lives in a buffer setup allocated (the store is not memory mapped, or the
     * command needs a copy), held until release: a transport may bound how much of that one
     * peer holds (scsi_task_refuse, SCSI_REFUSE_TASK_SET_FULL). */
    bool buffered;
    size_t mem; /* the bytes admit was asked for (0: none, or no admit) */

    /* set by scsi_task_exec() (or by setup when it refuses) */
    uint32_t data_len; /* reads: bytes of t->iov valid to send (may be < xfer_len) */
    uint8_t status;
    uint8_t sense[SCSI_SENSE_MAX];
    uint8_t sense_len;

    /* The SCSI core's own per-task state (struct scsi_task_core in scsi_internal.h: the
     * command's opcode-table row, the store request, the range lock it holds). Embedded so a
     * command costs no allocation; opaque so no transport reads it; its size is checked
     * against the real struct at compile time. */
    union {
        void *align_ptr;
        uint64_t align_u64;
        unsigned char bytes[SCSI_TASK_CORE_BYTES];
    } core;
};

/* --- targets, LUNs, nexuses --- */
int scsi_target_init(struct scsi_target *t, const char *name, uint16_t tpgt);
/* Adds a LUN (takes ownership of cfg->bs). Returns 0 or -errno; err gets a reason. */
int scsi_target_add_lun(struct scsi_target *t, const struct scsi_lun_config *cfg, char *err,
                        size_t errlen);
/* The NAA designator (VPD 83h) a LUN of cfg would have on t: cfg's own, or the default made of
 * the store's medium id or t's name and the LUN number. Returns its length (8 or 16). */
uint8_t scsi_lun_naa(const struct scsi_target *t, const struct scsi_lun_config *cfg,
                     uint8_t naa[16]);
void scsi_target_destroy(struct scsi_target *t);

/* Find or create the nexus for an initiator port (initiator_name's port port_id, which tp
 * names); takes a reference. NULL when all SCSI_NEXUS_MAX (4096) nexus slots of the target are
 * held by live sessions. */
struct scsi_nexus *scsi_nexus_get(struct scsi_target *t, const struct scsi_transport *tp,
                                  const char *initiator_name, const void *port_id);
void scsi_nexus_put(struct scsi_nexus *n);
/* I_T nexus loss (SAM-5 §6.3.4): the last session of this initiator port ended. Releases the
 * SPC-2 RESERVE it held on any LUN; persistent reservations survive. scsi_nexus_put calls it
 * when the last reference goes, so a transport that puts the nexus when a session ends need not
 * call it itself. Idempotent. */
void scsi_nexus_lost(struct scsi_nexus *n);
/* A logout is ending the only session of this nexus: do what I_T nexus loss does now, before
 * the transport confirms the logout, so that the initiator's next command (on another session)
 * finds the SPC-2 reservation and PREVENT state of this nexus gone. Nothing if another session
 * still holds the nexus; the last put then does not do it a second time. */
void scsi_nexus_logout(struct scsi_nexus *n);
/* The session holding this nexus ended without a logout: its connection was lost (or timed
 * out, or the target closed it) or a new login reinstated it (RFC 7143 §6.3.5). SAM-5 §6.3.4:
 * unit attention I_T NEXUS LOSS OCCURRED (29h/07h) on every LUN for this initiator port, to
 * be reported by its next command on whichever session takes the nexus next; not added where
 * a power-on or reset UA is still pending. A logout is no loss the initiator has to be told
 * of: the transport does not call this then. */
void scsi_nexus_loss_ua(struct scsi_nexus *n);

/* --- tasks --- */
void scsi_task_init(struct scsi_task *t);
/* 0: go on to the data phase / exec. -1: refused; status and sense are set, nothing to exec
 * (calling scsi_task_exec anyway just calls done); dir is SCSI_DIR_NONE and xfer_len 0, except
 * when the transport will not deliver all the data-out (no W bit, or edtl < xfer_len). Then
 * (FCP-4 §9.4.2) WRITE and WRITE AND VERIFY with an edtl of whole blocks store those blocks
 * (0, GOOD); anything else is refused with 0Eh/03h before any data is placed, iovcnt 0, the
 * data-out to be dropped. Either way dir (SCSI_DIR_WRITE) and xfer_len stay the CDB's, for the
 * transport's overflow residual. For emulated data-in commands
 * xfer_len may be below the allocation length (capped at the full response size); residuals
 * come from data_len. */
int scsi_task_setup(struct scsi_task *t);
void scsi_task_exec(struct scsi_task *t);
void scsi_task_release(struct scsi_task *t);
/* A READ whose data is the store's memory sent in place (a RAM LUN's, at least its send-min)
 * keeps those pages unchanged until release, and WRITEs over them wait. A transport that no
 * longer refers to them (it copied what it still had to send) lets them go earlier with
 * unpin; the task's iovecs must not be read after that. */
bool scsi_task_pinned(const struct scsi_task *t);
void scsi_task_unpin(struct scsi_task *t);
/* Pinned, and the store's pages can vanish under a reader (bs_ops pin_can_fault: a file LUN's
 * mapping): the transport reads them only under util/fault_guard. */
bool scsi_task_pin_can_fault(const struct scsi_task *t);
/* The buffer setup gave a task that moves data (t->buffered, at least xfer_len bytes), held
 * until release. A READ sent in place leaves it unused: a transport that must let go of the
 * pins before its data is sent copies what it still has to send there, at the data's
 * offsets, then unpins. NULL when the task has none. */
void *scsi_task_buffer(struct scsi_task *t);

/* --- aborted tasks (quiesce.c) --- */
/* The transport aborted t (a TMF, PREEMPT AND ABORT, its connection ended): from any thread,
 * at any time; nothing if t is not between scsi_task_exec() and its done(). Work the store does
 * not have yet is never given to it; what it has runs to its end. done() is still called once,
 * with status TASK ABORTED, and the transport answers nothing. */
void scsi_task_abort(struct scsi_task *t);

/* Pieces of work someone waits for, counted: fn(j) runs on the thread that ends the last. */
struct scsi_join {
    atomic_uint n;
    void (*fn)(struct scsi_join *j);
};
static inline void scsi_join_add(struct scsi_join *j)
{
    atomic_fetch_add(&j->n, 1);
}
static inline void scsi_join_done(struct scsi_join *j)
{
    if (atomic_fetch_sub(&j->n, 1) == 1)
        j->fn(j);
}

/* A wait for every aborted task of a LUN to have left the store. Filled by the caller (fn,
 * arg) and kept alive until fn runs. */
struct scsi_wait {
    void (*fn)(void *arg);
    void *arg;
    /* private */
    struct reactor *r;
    struct scsi_wait *next;
    struct reactor_msg msg;
};
/* false: no aborted task of lu is in the store now, go on. true: w->fn(w->arg) runs once none
 * is: posted to the calling reactor (called on the thread that ended the last one when the
 * caller has no reactor). A task management function answers only then (SAM-5 §7.1). */
bool scsi_lun_quiesce(struct scsi_lun *lu, struct scsi_wait *w);
/* The same for every LUN of a target, one after another (a target reset). */
struct scsi_target_wait {
    void (*fn)(void *arg);
    void *arg;
    /* private */
    struct scsi_target *target;
    uint32_t next;
    bool waited;
    struct scsi_wait w;
};
bool scsi_target_quiesce(struct scsi_target *t, struct scsi_target_wait *tw);

/* --- task management (SAM-5 §7), mapped from the transport's TMF --- */
/* A LOGICAL UNIT RESET happened: unit attention 29h/03h (BUS DEVICE RESET FUNCTION OCCURRED)
 * to every nexus, the requester's included (SAM-5 §6.3.3, as LIO does); drop reservations held
 * by SPC-2 RESERVE. The transport aborts the tasks themselves. */
void scsi_lun_reset(struct scsi_lun *lu, struct scsi_nexus *by);
/* TARGET WARM RESET: 29h/03h on every LUN for every nexus; TARGET COLD RESET: 29h/01h POWER ON
 * OCCURRED (SAM-5 §6.3.1). */
void scsi_target_reset(struct scsi_target *t, struct scsi_nexus *by, bool cold);
/* The same, for a transport that answers the TMF only once the reset holds everywhere: a LUN
 * exported by several gateways (shared state: an RBD image) has I_T nexuses on each, and the
 * other gateways are told (a notify through the cluster) to raise the unit attention and
 * abort their tasks of that LUN. true: done(arg) runs later on this reactor, once they all
 * acknowledged (or a few seconds passed: one that does not answer is dead or cut off); false:
 * the reset is complete (no LUN shared, or no reactor), done is not called. Without done the
 * others are told and nobody waits (scsi_lun_reset, scsi_target_reset). */
bool scsi_lun_reset_wait(struct scsi_lun *lu, struct scsi_nexus *by, void (*done)(void *arg),
                         void *arg);
bool scsi_target_reset_wait(struct scsi_target *t, struct scsi_nexus *by, bool cold,
                            void (*done)(void *arg), void *arg);
/* CLEAR TASK SET from nexus `by` aborted the task set of lu (SAM-5 §7.4; the control mode page
 * has TAS 0): unit attention 2Fh/00h COMMANDS CLEARED BY ANOTHER INITIATOR for every other
 * nexus that has a session, none for the requester. SAM-5 asks it for each nexus that lost a
 * command; which ones did is known only on their reactors, after the TMF is answered, so every
 * nexus that could have had one is told before the answer (a nexus with nothing in the task
 * set just sees a UA it can ignore). ABORT TASK SET aborts only the requester's own tasks and
 * raises nothing; PREEMPT AND ABORT's nexuses get REGISTRATIONS PREEMPTED (pr.c). */
void scsi_lun_tasks_cleared(struct scsi_lun *lu, const struct scsi_nexus *by);
/* The transport ended tasks of nexus n on LUN `lun` unanswered while the nexus goes on (iSCSI:
 * a connection closed or not recovered in time, RFC 7143 §11.14.5 a-c): unit attention
 * 47h/7Fh SOME COMMANDS CLEARED BY ISCSI PROTOCOL EVENT on the next command there. */
void scsi_nexus_tasks_terminated(struct scsi_nexus *n, uint64_t lun);

struct scsi_lun *scsi_target_lun(struct scsi_target *t, uint64_t lun);
/* The LUN's IOPS and bytes/s caps on this gateway (util/rate_limit.h): rate_limit_set changes
 * them while commands run; commands already waiting keep the turn they were given. */
struct rate_limit *scsi_lun_rate_limit(struct scsi_lun *lu);
/* Commands of the LUN waiting for their turn under its caps (or a task's own) now. */
unsigned scsi_lun_throttled(const struct scsi_lun *lu);
/* Close the store and free a LUN no task holds (scsi_target_destroy, scsi_lun_users() == 0). */
void scsi_lun_free(struct scsi_lun *lu);
uint64_t scsi_lun_size_bytes(const struct scsi_lun *lu);
/* The LUN number this LUN answers to (the inverse of scsi_target_lun). */
uint64_t scsi_lun_id(const struct scsi_lun *lu);
/* Flush a LUN's store (shutdown). Blocking; not for reactor threads in steady state. */
int scsi_lun_flush_sync(struct scsi_lun *lu);

/* --- run-time changes (lun_admin.c), made by the daemon's control thread while reactors
 * serve; none of these runs on a reactor. --- */

/* LUN numbers 0..SCSI_LUN_SLOTS-1 (flat space addressing, SAM-5 §4.7.7). */
#define SCSI_LUN_SLOTS 16384u

/* Take LUN `lun` out of its target: from now on a new command to it fails LOGICAL UNIT NOT
 * SUPPORTED and REPORT LUNS leaves it out. Commands already holding it (scsi_lun_users) run
 * to completion; the caller waits until every reactor has finished the turn it was in (a
 * command may have looked the LUN up just before), then until scsi_lun_users() is 0, and
 * frees it with scsi_lun_free(). Returns the LUN, or NULL if there is none. */
struct scsi_lun *scsi_target_detach_lun(struct scsi_target *t, uint64_t lun);
/* Tasks and background work (an IMMED sanitize, a copy naming it) holding lu. */
long scsi_lun_users(const struct scsi_lun *lu);
/* A task, or a task management function answered once lu's aborted tasks have left the store,
 * starts or stops holding lu (struct scsi_lun_users); from any thread. */
void scsi_lun_user_get(struct scsi_lun *lu);
void scsi_lun_user_put(struct scsi_lun *lu);
/* The LUN's I/O counters (util/iostats.h), kept by the transport; NULL if there are none. */
struct iostats *scsi_lun_stats(const struct scsi_lun *lu);
/* The same for the LUN t holds (from setup until release or refuse), else NULL: a command the
 * transport refused has let go of its LUN, which may be gone. */
struct iostats *scsi_task_lun_stats(const struct scsi_task *t);
/* Target LUN `lun` was added or removed: REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh; SPC-4 REPORT
 * LUNS: a changed logical unit inventory is a unit attention for the I_T nexus) on every LUN
 * but `except` (the new LUN, which tells its own story with POWER ON, RESET), for each nexus
 * whose host map shows `lun` (every nexus while the target has no host entries). */
void scsi_target_luns_changed(struct scsi_target *t, uint64_t lun, const struct scsi_lun *except);
/* Write-protect (or not) a LUN: the next write fails DATA PROTECT, WRITE PROTECTED; every
 * nexus gets MODE PARAMETERS CHANGED (2Ah/01h: the WP bit of the mode parameter header
 * changed). -1 with a reason when the store itself was opened read-only. */
int scsi_lun_set_read_only(struct scsi_lun *lu, bool ro, char *err, size_t errlen);
/* Grow a LUN to `bytes` (a whole number of blocks, never smaller): the store grows first,
 * then the capacity READ CAPACITY reports, then every nexus gets CAPACITY DATA HAS CHANGED
 * (2Ah/09h). -1 with a reason (store cannot grow, shrinking, not whole blocks). */
int scsi_lun_grow(struct scsi_lun *lu, uint64_t bytes, char *err, size_t errlen);

/* --- host LUN maps (host_map.c): what each initiator sees of a target ---
 * A target with no host entries shows every LUN to every initiator under its own number, as
 * it always has. Once it has one, a nexus sees only the LUNs mapped for its initiator name,
 * under the numbers mapped (LUN 0 for each host's boot disk is the common case): REPORT LUNS
 * lists that map, a command to an unmapped number fails LOGICAL UNIT NOT SUPPORTED (INQUIRY
 * answers with peripheral qualifier 011b, SPC-4 §6.6.2), and an initiator with no entry sees
 * no LUN at all. The logical unit is the same object whatever number a host knows it by, so
 * reservations, ALUA state and unit attentions stay the LUN's. Groups of initiators are the
 * caller's business: it adds each name with the group's map. Names compare case-blind
 * (RFC 3722). Control thread only, never on a reactor; the data path reads a nexus's map
 * without a lock. Each returns 0, or -1 with a reason in err. */
int scsi_target_host_add(struct scsi_target *t, const char *initiator_name, char *err,
                         size_t errlen);
/* Drop an initiator's entry with its map; its nexuses then see no LUN (the caller decides
 * first what happens to its sessions). */
int scsi_target_host_remove(struct scsi_target *t, const char *initiator_name, char *err,
                            size_t errlen);
/* Show target LUN `lun` to initiator_name as `host_lun` (0..SCSI_LUN_SLOTS-1), read-only for
 * that host or not (a write through a read-only mapping fails DATA PROTECT, WRITE PROTECTED;
 * MODE SENSE reports WP). A change of a host's map raises REPORTED LUNS DATA HAS CHANGED
 * (3Fh/0Eh) on that host's nexuses only. Mapping a LUN the target does not have (yet) is
 * allowed: the number answers once the LUN is added. A host number mapped again is replaced
 * (unchanged: nobody is told); a LUN has at most one number per host (-1 otherwise). */
int scsi_target_host_map(struct scsi_target *t, const char *initiator_name, uint64_t host_lun,
                         uint64_t lun, bool read_only, char *err, size_t errlen);
int scsi_target_host_unmap(struct scsi_target *t, const char *initiator_name, uint64_t host_lun,
                           char *err, size_t errlen);
/* One row of a host's map, for show, save and stats. */
struct scsi_host_mapping {
    uint64_t host_lun; /* the number the host addresses */
    uint64_t lun;      /* the target's LUN number */
    bool read_only;
};
/* The map of initiator_name, up to max rows in host_lun order: the number of rows it has, or
 * -1 when it has no entry. */
int scsi_target_host_maps(struct scsi_target *t, const char *initiator_name,
                          struct scsi_host_mapping *out, unsigned max);
/* The logical unit nexus n addresses as host_lun, NULL if none; *read_only (if not NULL) set
 * when the mapping is read-only. Without host entries: scsi_target_lun(). Without a lock, on
 * a reactor (or the control thread): the map it reads is freed only after every reactor's turn
 * (scsi_target_host_retired_take), and the LUN as scsi_target_lun() says. */
struct scsi_lun *scsi_nexus_lun(struct scsi_nexus *n, uint64_t host_lun, bool *read_only);
/* The other way: the number nexus n knows the target's LUN `lun` by (`lun` itself without host
 * entries), UINT64_MAX when its host does not see it; *read_only (if not NULL) as above. For a
 * transport that aborts the tasks of several nexuses on one logical unit (LOGICAL UNIT RESET,
 * CLEAR TASK SET, PREEMPT AND ABORT): each task carries the number its initiator sent. Takes
 * the target lock when n has a map (any thread, no SCSI core lock held). */
uint64_t scsi_nexus_host_lun(struct scsi_nexus *n, uint64_t lun, bool *read_only);
/* Per-entry counters (util/iostats.h): each entry keeps one counter set per target LUN it maps,
 * kept while the LUN stays mapped (its mapping's read-only flag changed keeps them), dropped
 * when the entry or its mapping of the LUN goes. scsi_task_host_stats: the set of task t's
 * initiator's entry for its LUN, NULL when the target has no entries (one load and a branch) or the
 * initiator no entry; on a reactor, used within the turn it was read in (the map holding it
 * is freed after that turn, scsi_target_host_retired_take). scsi_target_host_stats: adds
 * initiator_name's counters for target LUN `lun` into *out; 0, or -1 when it has none. */
struct iostats *scsi_task_host_stats(const struct scsi_task *t);
struct iostats_values;
int scsi_target_host_stats(struct scsi_target *t, const char *initiator_name, uint64_t lun,
                           struct iostats_values *out);
/* Most host entries a target takes, and most mappings over all its entries: what a
 * configuration or linerate-ctl may ask for is bounded (a map is at most SCSI_LUN_SLOTS host
 * numbers). */
#define SCSI_HOST_ENTRIES_MAX 4096u
#define SCSI_HOST_ROWS_MAX 65536u
/* Maps the calls above replaced, in a list: a command on a reactor may have read one just
 * before, so the caller frees them (scsi_host_maps_free) once every reactor has finished the
 * turn it was in, as it frees a detached LUN. Those never taken are freed with the target. */
struct scsi_host_map;
struct scsi_host_map *scsi_target_host_retired_take(struct scsi_target *t);
void scsi_host_maps_free(struct scsi_host_map *list);

/* What `linerate-ctl show luns` reports of a LUN. */
struct scsi_lun_info {
    uint64_t lun;
    uint64_t bytes;
    uint32_t block_size;
    uint32_t phys_block_size;
    bool read_only;
    bool removable;
    bool thin;
    const char *store;                        /* the store's description ("ram:64M", "file:/x") */
    const char *medium_id;                    /* the store's medium id (bs.h); "" if none */
    long users;                               /* commands holding it now */
    const struct scsi_lun_identity *identity; /* what hosts are told, defaults filled in */
};
void scsi_lun_get_info(const struct scsi_lun *lu, struct scsi_lun_info *out);

/* The transport's 8-byte LUN field (SAM-5 §4.7, flat/peripheral addressing) to a LUN number and
 * back. */
uint64_t scsi_lun_from_wire(const uint8_t w[8]);
void scsi_lun_to_wire(uint64_t lun, uint8_t w[8]);

/* The transport refuses t, after scsi_task_setup() and before (or instead of) the rest of its
 * data: releases what setup took (buffer, range lock; scsi_task_release later is harmless),
 * sets status and sense from the reason, and makes scsi_task_exec() only call done. Call it
 * once nothing more will be placed in t->iov. */
void scsi_task_refuse(struct scsi_task *t, enum scsi_refusal why);

#endif
