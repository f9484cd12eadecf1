/* Private to the SCSI core: the LUN and target state behind scsi.h, the sense-reason codes the
 * handlers return, the opcode table row, and the unit-attention bits. Not for transports. */
#ifndef LR_SCSI_INTERNAL_H
#define LR_SCSI_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "bs/bs.h"
#include "reactor/reactor.h"
#include "scsi/range_lock.h"
#include "scsi/scsi.h"
#include "util/iostats.h"

/* --- sense reasons (LIO's sense_reason_t): one table in sense.c maps each to key/ASC/ASCQ --- */
enum scsi_reason {
    SR_OK = 0,
    SR_NO_SENSE,
    SR_INVALID_OPCODE,         /* 5 / 20h 00h */
    SR_INVALID_FIELD_IN_CDB,   /* 5 / 24h 00h */
    SR_LBA_OUT_OF_RANGE,       /* 5 / 21h 00h */
    SR_LUN_NOT_SUPPORTED,      /* 5 / 25h 00h */
    SR_INVALID_FIELD_IN_PARAM, /* 5 / 26h 00h */
    SR_INVALID_FIELD_IN_IU,    /* 5 / 0Eh 03h */
    SR_PARAM_LIST_LENGTH,      /* 5 / 1Ah 00h */
    SR_SAVING_NOT_SUPPORTED,   /* 5 / 39h 00h */
    SR_WRITE_PROTECTED,        /* 7 / 27h 00h */
    SR_MISCOMPARE,             /* E / 1Dh 00h */
    SR_READ_ERROR,             /* 3 / 11h 00h */
    SR_WRITE_ERROR,            /* 3 / 0Ch 00h */
    SR_SPACE_ALLOC_FAILED,     /* 7 / 27h 07h */
    SR_INTERNAL_FAILURE,       /* 4 / 44h 00h */
    SR_INSUFFICIENT_RESOURCES, /* B / 55h 03h */
    SR_UA_POWER_ON_RESET,      /* 6 / 29h 00h */
    SR_UA_POWER_ON,            /* 6 / 29h 01h */
    SR_UA_BUS_DEVICE_RESET,    /* 6 / 29h 03h */
    SR_UA_NEXUS_LOSS,          /* 6 / 29h 07h I_T NEXUS LOSS OCCURRED */
    SR_UA_MODE_CHANGED,        /* 6 / 2Ah 01h */
    SR_UA_CAPACITY_CHANGED,    /* 6 / 2Ah 09h */
    SR_UA_COMMANDS_CLEARED,    /* 6 / 2Fh 00h COMMANDS CLEARED BY ANOTHER INITIATOR */
    SR_UA_LUNS_CHANGED,        /* 6 / 3Fh 0Eh */
    SR_RESERVATION_CONFLICT,   /* status 18h, no sense (SAM-5 §5.3.1) */
    SR_INVALID_RELEASE_OF_PR,  /* 5 / 26h 04h */
    SR_UA_RESV_PREEMPTED,      /* 6 / 2Ah 03h */
    SR_UA_RESV_RELEASED,       /* 6 / 2Ah 04h */
    SR_UA_REG_PREEMPTED,       /* 6 / 2Ah 05h */
    SR_UA_ISCSI_CLEARED,       /* 6 / 47h 7Fh SOME COMMANDS CLEARED BY ISCSI PROTOCOL EVENT */
    SR_UA_ALUA_CHANGED,        /* 6 / 2Ah 06h ASYMMETRIC ACCESS STATE CHANGED */
    SR_OPERATION_IN_PROGRESS,  /* 5 / 00h 16h */
    SR_TOO_MANY_CSCD,          /* 5 / 26h 06h TOO MANY TARGET DESCRIPTORS */
    SR_UNSUPPORTED_CSCD_TYPE,  /* 5 / 26h 07h UNSUPPORTED TARGET DESCRIPTOR TYPE CODE */
    SR_TOO_MANY_SEGMENTS,      /* 5 / 26h 08h TOO MANY SEGMENT DESCRIPTORS */
    SR_UNSUPPORTED_SEG_TYPE,   /* 5 / 26h 09h UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE */
    SR_INLINE_DATA_EXCEEDED,   /* 5 / 26h 0Bh INLINE DATA LENGTH EXCEEDED */
    SR_COPY_TARGET_FAILURE,    /* A / 0Dh 01h THIRD PARTY DEVICE FAILURE */
    SR_COPY_UNREACHABLE,       /* A / 0Dh 02h COPY TARGET DEVICE NOT REACHABLE */
    SR_SW_WRITE_PROTECTED,     /* 7 / 27h 02h LOGICAL UNIT SOFTWARE WRITE PROTECTED */
    SR_SANITIZE_IN_PROGRESS,   /* 2 / 04h 1Bh LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS */
    SR_SANITIZE_FAILED,        /* 3 / 31h 03h SANITIZE COMMAND FAILED */
    SR_MEDIUM_NOT_PRESENT,     /* 2 / 3Ah 00h MEDIUM NOT PRESENT */
    SR_REMOVAL_PREVENTED,      /* 5 / 53h 02h MEDIUM REMOVAL PREVENTED */
    SR_TASK_SET_FULL,          /* status 28h, no sense (SAM-5 §5.3.1): scsi_task_refuse */
    SR_BUSY,                   /* status 08h, no sense (SAM-5 §5.3.1): the transport's admit */
    SR_PROTOCOL_CRC_ERROR,     /* B / 47h 05h PROTOCOL SERVICE CRC ERROR (RFC 7143 §11.4.7.2) */
    SR_LU_TIMEOUT,             /* B / 3Eh 02h TIMEOUT ON LOGICAL UNIT: the store's backend did
                                  not answer in time; ABORTED COMMAND, so initiators retry */
    SR_NOT_READY_MANUAL,       /* 2 / 04h 03h LOGICAL UNIT NOT READY, MANUAL INTERVENTION
                                  REQUIRED: the store gave up (e.g. fenced by its cluster) */
    SR_ALUA_STANDBY,           /* 2 / 04h 0Bh LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN
                                  STANDBY STATE (SPC-4 §5.16.2.4.5) */
    SR__COUNT
};

/* A reason plus an optional sense-key-specific field pointer (SPC-4 §4.5.2.4.2), packed in one
 * word so a handler can still "return SR_...". Bits 0-7 reason, 8 SKSV, 9 C/D, 10 BPV,
 * 11-13 bit pointer, 16-31 field pointer. */
typedef uint32_t scsi_sr;
#define SR_SKSV (1u << 8)
#define SR_CD (1u << 9)
#define SR_BPV (1u << 10)
#define SR_REASON(sr) ((enum scsi_reason)((sr)&0xffu))
/* INVALID FIELD IN CDB pointing at byte (and bit, or -1 for the whole byte). */
#define SR_CDB_FIELD(byte, bit)                                                                    \
    ((scsi_sr)SR_INVALID_FIELD_IN_CDB | SR_SKSV | SR_CD | ((uint32_t)(byte) << 16) |               \
     ((bit) >= 0 ? SR_BPV | ((uint32_t)(bit) << 11) : 0))
#define SR_PARAM_FIELD(byte, bit)                                                                  \
    ((scsi_sr)SR_INVALID_FIELD_IN_PARAM | SR_SKSV | ((uint32_t)(byte) << 16) |                     \
     ((bit) >= 0 ? SR_BPV | ((uint32_t)(bit) << 11) : 0))

/* Fixed-format sense (SPC-4 §4.5.3) into buf (>= 18 bytes); returns its length. info is put in
 * the INFORMATION field (VALID=1) when has_info. */
uint8_t scsi_sense_build(uint8_t *buf, scsi_sr sr, bool has_info, uint32_t info);
/* Set status from a reason: GOOD for SR_OK, else CHECK CONDITION with the sense. */
void scsi_task_set_reason(struct scsi_task *t, scsi_sr sr);
void scsi_task_set_reason_info(struct scsi_task *t, scsi_sr sr, uint32_t info);

/* --- unit attentions (SAM-5 §5.14), one bit each, lowest bit reported first --- */
enum {
    UA_POWER_ON_RESET = 1u << 0,
    UA_POWER_ON = 1u << 1,
    UA_BUS_DEVICE_RESET = 1u << 2,
    /* The nexus's session ended without a logout (SAM-5 §6.3.4); below the resets, which
     * say more, and above the rest, which it does not clear. */
    UA_NEXUS_LOSS = 1u << 3,
    UA_MODE_CHANGED = 1u << 4,
    UA_CAPACITY_CHANGED = 1u << 5,
    UA_COMMANDS_CLEARED = 1u << 6,
    UA_LUNS_CHANGED = 1u << 7,
    UA_RESV_PREEMPTED = 1u << 8, /* SPC-4 §5.13: persistent reservation events */
    UA_RESV_RELEASED = 1u << 9,
    UA_REG_PREEMPTED = 1u << 10,
    UA_ISCSI_CLEARED = 1u << 11, /* RFC 7143 §11.14.5: tasks ended by a protocol event */
    UA_ALUA_CHANGED = 1u << 12,  /* SPC-4 §5.16.2.2: a target port group's state changed */
    UA_RESETS = UA_POWER_ON_RESET | UA_POWER_ON | UA_BUS_DEVICE_RESET,
};

/* The result of one EXTENDED COPY (LID1) held for RECEIVE COPY RESULTS (SPC-4 §6.18), per I_T
 * nexus, LUN and LIST IDENTIFIER. Guarded by target->lock; dropped once a completed copy's
 * status is reported, and on I_T nexus loss (xcopy_nexus_lost). */
/* What WRITE SAME fills the medium from (the block repeated) and EXTENDED COPY's bounce
 * buffer: memory those commands allocate as they run, counted in scsi_task.mem. */
#define SCSI_FILL_CHUNK (1u << 20)
#define SCSI_COPY_CHUNK (1u << 20)
#define XCOPY_HELD_MAX 8
struct xcopy_result {
    uint64_t seq; /* 0: slot free; else arrival order (the oldest completed one is reused) */
    uint64_t lun;
    uint64_t bytes;    /* TRANSFER COUNT so far */
    uint16_t segments; /* SEGMENTS PROCESSED so far */
    uint8_t list_id;
    uint8_t status;    /* COPY MANAGER STATUS: 0 in progress, 1 done, 2 done with errors */
    uint8_t sense_len; /* the CHECK CONDITION's sense, for FAILED SEGMENT DETAILS */
    uint8_t sense[18];
};

struct scsi_host_map;
struct scsi_host_table; /* host_map.c's own */

struct scsi_nexus_impl {
    struct scsi_nexus pub;
    unsigned slot;
    /* What LUN numbers mean to this nexus (host_map.c): NULL while the target has no host
     * entries (every LUN under its own number); set under the target lock, read by the data
     * path without one. */
    _Atomic(const struct scsi_host_map *) map;
    int refs;  /* sessions holding it, plus PREEMPT AND ABORT while it calls the hook */
    bool lost; /* I_T nexus loss done since the last session took it (under target lock) */
    /* runs of its loss hooks under way (without the lock): the slot is not recycled
     * meanwhile, or they would act on the nexus that took it (nexus.c) */
    unsigned losing;
    uint64_t xcopy_seq;
    struct xcopy_result xcopy[XCOPY_HELD_MAX];
};

static inline struct scsi_nexus_impl *scsi_nexus_impl(struct scsi_nexus *n)
{
    return (struct scsi_nexus_impl *)n;
}

static inline unsigned scsi_nexus_slot(const struct scsi_nexus *n)
{
    return ((const struct scsi_nexus_impl *)n)->slot;
}

/* --- per-LUN modules: what each part of the core that keeps state of its own per LUN or per
 * I_T nexus (reservations, copy results, ALUA, removable medium, the resize watch) does at the
 * life events of LUNs and nexuses. target.c, nexus.c and reset.c run the target's modules
 * (scsi_target_priv.modules) in table order, stop and free in reverse, and call none of them
 * by name; the table is in lun_modules.c. Any entry may be NULL. --- */
struct scsi_lun_hooks {
    const char *name;
    /* The LUN is added, before it is published: < 0 refuses it (err says why), after
     * undoing what this init did; the modules before it are freed. */
    int (*init)(struct scsi_lun *lu, const struct scsi_lun_config *cfg, char *err, size_t errlen);
    /* The LUN was published: it may be found by other threads from now on. */
    void (*start)(struct scsi_lun *lu);
    /* The LUN is being freed: end and wait for work that uses its store (closed next). */
    void (*stop)(struct scsi_lun *lu);
    /* After the store is closed: free what init allocated. */
    void (*free)(struct scsi_lun *lu);
    /* I_T nexus loss (SAM-5 §6.3.4), without the target lock: once for the nexus, then for
     * each LUN of the target. */
    void (*nexus_lost)(struct scsi_nexus *n);
    void (*lun_nexus_lost)(struct scsi_lun *lu, const struct scsi_nexus *n);
    /* A reset of lu here (ua: UA_BUS_DEVICE_RESET or UA_POWER_ON), after its unit attention
     * is raised. true: done(arg) follows, on the calling reactor (on the caller before reset
     * returns, without one; NULL done: nobody waits); false: done is not called. */
    bool (*reset)(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg);
    /* lu was reset through another gateway (scsi_lun_reset_elsewhere), after the unit
     * attention is raised and this gateway's tasks on lu are aborted. */
    void (*reset_elsewhere)(struct scsi_lun *lu, unsigned ua);
};
/* NULL-terminated, in the order the modules are set up. */
extern const struct scsi_lun_hooks *const scsi_lun_modules[];

struct scsi_target_priv {
    struct scsi_nexus_impl *nexus[SCSI_NEXUS_MAX]; /* by slot; guarded by target->lock */
    /* Every LUN of the target, published or being added, has the first nchunks chunks of
     * per-nexus state (struct scsi_lun_nexus_chunk), and every nexus slot is below
     * nchunks * SCSI_NEXUS_CHUNK; adding lists the LUNs being added (scsi_lun.adding_next).
     * Both guarded by target->lock. */
    unsigned nchunks;
    struct scsi_lun *adding;
    uint64_t next_nexus_id;
    const struct scsi_lun_hooks *const *modules; /* scsi_lun_modules */
    struct scsi_host_table *hosts; /* host entries (host_map.c); NULL until the first */
};

/* Tasks holding a LUN (from scsi_task_setup until scsi_task_release), counted in shards so
 * that reactors on different cores do not share a cache line per command: a task adds to the
 * shard of the thread that set it up and subtracts from the shard of the thread releasing it,
 * so a shard may go negative; only the sum means anything. A LUN detached at run time is freed
 * once the sum reaches 0 (scsi_lun_users). */
#define SCSI_LUN_USER_SHARDS 16
struct scsi_lun_users {
    atomic_long n;
    char pad[64 - sizeof(atomic_long)];
};

/* What a LUN keeps per I_T nexus, for SCSI_NEXUS_CHUNK nexus slots: a LUN has the chunks of
 * the slots its target has used (scsi_target_priv.nchunks), not all SCSI_NEXUS_MAX, so a target
 * of many LUNs and few initiators costs 1 KiB per LUN and not 16. A chunk once given to a LUN
 * stays until the LUN is freed, so the data path reads it without a lock. */
#define SCSI_NEXUS_CHUNK 256u
#define SCSI_NEXUS_CHUNKS (SCSI_NEXUS_MAX / SCSI_NEXUS_CHUNK)
struct scsi_lun_nexus_chunk {
    atomic_uint ua[SCSI_NEXUS_CHUNK]; /* pending UA_* bits (ua.c) */
    /* which nexuses sent PREVENT ALLOW MEDIUM REMOVAL with PREVENT=1 (sbc_removable.c), bit
     * slot % 64 of word slot % SCSI_NEXUS_CHUNK / 64; guarded by the LUN's lock */
    uint64_t prevent[SCSI_NEXUS_CHUNK / 64];
};

struct scsi_lun {
    struct scsi_target *target;
    uint64_t id;
    struct bs *bs;
    /* Grows at run time (scsi_lun_grow, from linerate-ctl): every reader loads it once per
     * command and sees the old or the new size, never a torn one. */
    _Atomic uint64_t nblocks;
    uint32_t block_size;
    uint8_t block_shift;
    uint8_t phys_exp;      /* log2(physical block size / block_size) */
    atomic_bool read_only; /* configuration; changed at run time by scsi_lun_set_read_only */
    bool mapped;           /* bs_map() works: READ/WRITE go straight to store memory */
    atomic_bool wce;       /* caching mode page WCE; read lock-free on the write path */
    pthread_mutex_t lock;  /* mode-page changes and the UA they raise */
    /* What INQUIRY and VPD 80h/83h/B1h say (spc.c): the configured identity with every
     * default filled in when the LUN is added (target.c) */
    struct scsi_lun_identity ident;
    /* per-nexus state by slot / SCSI_NEXUS_CHUNK (scsi_lun_ua); set under the target lock,
     * NULL past the chunks the target has used */
    struct scsi_lun_nexus_chunk *nx[SCSI_NEXUS_CHUNKS];
    struct scsi_lun *adding_next; /* scsi_target_priv.adding */
    struct scsi_lun_users users[SCSI_LUN_USER_SHARDS];
    struct iostats *stats; /* the metrics (util/iostats.h); NULL if out of memory at add */
    /* sbc_thin.c, sbc_caw.c, sbc_sanitize.c */
    atomic_bool swp;           /* control mode page SWP: software write protect (SPC-4 §7.5.8) */
    atomic_int sanitize;       /* SANITIZE_IDLE/RUNNING/FAILED, checked by setup */
    uint64_t sanitize_rate;    /* bytes/s a sanitize writes at most; 0: no limit */
    struct scsi_range_lock rl; /* orders CAW/ORWRITE/WRITE ATOMIC/SANITIZE, READ vs WRITE */
    /* throttle.c: the LUN's caps, and its commands waiting under them (or a task's own) */
    struct rate_limit limit;
    atomic_uint throttled;
    /* quiesce.c: tasks aborted while in the core, and who waits for them to be none */
    atomic_int aborting;
    pthread_mutex_t quiesce_lock;
    struct scsi_wait *quiesce_waiters;
    /* Reservation state (pr.c). resv is the fast-path summary: RESV_* bits, 0 when nothing
     * is reserved or registered, so setup pays one relaxed load; pr holds the rest and is
     * guarded by lock. */
    atomic_uint resv;
    struct pr_state *pr;
    /* Removable medium (sbc_removable.c). medium_absent is read once per command by setup;
     * nprevent counts the nexuses whose prevent bit is set (scsi_lun_nexus_chunk), guarded
     * by lock. */
    bool removable;
    atomic_bool medium_absent;
    uint16_t nprevent;
    /* Implicit ALUA (alua.c): every target port group's access state for this LUN, this
     * target's own group first. The groups are fixed once the LUN is added; a state changes
     * live (scsi_lun_alua_set, the control thread) and is read with one relaxed load, so the
     * data path takes no lock for it. */
    struct scsi_alua_port {
        uint16_t id;
        atomic_uchar state; /* enum scsi_alua_state */
    } alua[SCSI_ALUA_GROUPS_MAX];
    uint8_t alua_ngroups;
    /* alua-mode = failover: this gateway's hold on the active/optimized role is a lease, valid
     * until alua_lease_ms (CLOCK_BOOTTIME): the last successful heartbeat plus the failover
     * timeout, stored by the failover thread (alua_failover.c). Past it the own group answers
     * as standby until a heartbeat confirms the role again, so a gateway that was stopped or
     * cut off refuses I/O at once, whether or not it was fenced yet. 0: no lease (not in
     * failover mode). alua_configured_ao: the configuration said active/optimized; the own
     * group starts standby all the same and the failover thread decides. */
    _Atomic uint64_t alua_lease_ms;
    bool alua_configured_ao;
    /* The medium resized under the LUN (lun_admin.c): one helper-thread job at a time, run
     * again when the store called back meanwhile; guarded by lock. */
    struct scsi_lun_resize *resize;
    struct scsi_failover *failover; /* alua_failover.c; NULL when not in failover mode */
    /* the target's modules when it was added (scsi_lun_hooks), for its life events */
    const struct scsi_lun_hooks *const *modules;
};

/* The chunk of per-nexus state of slot on lu: there for the slot of every nexus of the
 * target (scsi_target_priv.nchunks). */
static inline struct scsi_lun_nexus_chunk *scsi_lun_nx(const struct scsi_lun *lu, unsigned slot)
{
    return __atomic_load_n(&lu->nx[slot / SCSI_NEXUS_CHUNK], __ATOMIC_ACQUIRE);
}

/* The pending UA word of slot on lu. */
static inline atomic_uint *scsi_lun_ua(const struct scsi_lun *lu, unsigned slot)
{
    return &scsi_lun_nx(lu, slot)->ua[slot % SCSI_NEXUS_CHUNK];
}

/* With the target lock: gives lu the chunks below nchunks it lacks. 0 or -ENOMEM (the chunks
 * given so far stay, freed with the LUN by scsi_lun_nexus_chunks_free). */
int scsi_lun_nexus_chunks(struct scsi_lun *lu, unsigned nchunks);
void scsi_lun_nexus_chunks_free(struct scsi_lun *lu);

/* Add UA bits for one nexus slot; a reset UA replaces whatever was pending (SAM-5 §5.14), and
 * an I_T nexus loss UA is not added while a reset UA is pending. */
void scsi_ua_raise(struct scsi_lun *lu, unsigned slot, unsigned bits);
/* Raise bits for every nexus of the target except skip (NULL: all). */
void scsi_ua_raise_all(struct scsi_lun *lu, const struct scsi_nexus *skip, unsigned bits);
/* The LU was reset through another gateway (ua: UA_BUS_DEVICE_RESET or UA_POWER_ON): what
 * the reset does to this gateway's nexuses. From the shared object's watch (a store thread). */
void scsi_lun_reset_elsewhere(struct scsi_lun *lu, unsigned ua);
/* Take the highest-priority pending UA of t's nexus; SR_OK if none. */
scsi_sr scsi_ua_take(struct scsi_lun *lu, const struct scsi_nexus *n);

/* The task enters the core (scsi_task_exec): its abort and the LUN's wait count from here
 * (quiesce.c). */
void scsi_task_enter(struct scsi_task *t);
/* throttle.c: t (a medium command of a LUN; one that moves no data passes) is over its LUN's
 * caps or its own (struct scsi_task.limit): true, it waits and runs later on this reactor (its
 * turn, or ended at once by an abort); false, run it now. Called only when one of them is set
 * (scsi_task_exec), so that an uncapped LUN pays two loads. */
bool scsi_throttle(struct scsi_task *t);
/* t was just marked aborted: if it waits under a cap, it ends now (on its reactor). */
void scsi_throttle_abort(struct scsi_task *t);
/* Tests only: commands that wait take the path of a failed allocation of their record (the
 * reactor's spare queue, throttle.c), which no other test can make happen. */
extern _Atomic bool scsi_throttle_no_record;
/* From here on the task cannot be aborted (its effect is made; it only waits before it
 * answers). false: it was aborted already. */
bool scsi_task_commit(struct scsi_task *t);
/* bs_submit for work of task t (NULL: of no task): once t is aborted, io->done(io,
 * -ECANCELED) runs instead, on this thread, as if the store had failed it. */
void scsi_task_submit(struct scsi_task *t, struct bs *bs, struct bs_io *io);
/* The wait of a thread that may block (a store's watch thread, never a reactor) for aborts it
 * asks for on lu: new (NULL: out of memory, nobody waits), pass its join to the aborts (NULL
 * for NULL), then finish: true once every abort is marked and lu's aborted tasks have left
 * the store, false after timeout_ms. finish frees it either way. */
struct scsi_sync_wait *scsi_sync_wait_new(struct scsi_lun *lu);
/* How long a gateway told of a reset or a PREEMPT AND ABORT through another waits for the
 * commands it aborted before it acknowledges: below that gateway's wait for the answer (5 s). */
#define SCSI_ELSEWHERE_WAIT_MS 4000u
struct scsi_join *scsi_sync_wait_join(struct scsi_sync_wait *sw);
bool scsi_sync_wait_finish(struct scsi_sync_wait *sw, unsigned timeout_ms);

/* --- the opcode table (cmds.c) and task setup (task.c) --- */
enum {
    CMD_UA_OK = 1u << 0,    /* runs with a UA pending and leaves it (SAM-5 §5.14) */
    CMD_NOLUN_OK = 1u << 1, /* runs on a LUN that does not exist */
    CMD_WRITES = 1u << 2,   /* changes the medium: refused on a read-only LUN */
    CMD_DIRECT = 1u << 3,   /* plain block READ/WRITE: the data is the blocks, as they are */
    CMD_MEDIUM = 1u << 4,   /* addresses blocks: LBA range checked centrally */
    CMD_SA = 1u << 5,       /* has service actions (CDB byte 1 bits 4:0) */
    CMD_XFER = 1u << 6,     /* moves its blocks (transfer length bounded by MAX_XFER) */
    /* no block range, but NOT READY without a medium (TEST UNIT READY, READ CAPACITY, ...) */
    CMD_NEEDS_MEDIUM = 1u << 7,
    /* with data-out, setup allocates room after the data to read the medium into (VERIFY
     * with BYTCHK compares the two) */
    CMD_SCRATCH = 1u << 8,
    /* runs while this target port is in standby for the LUN (SPC-4 §5.16.2.4.5) */
    CMD_STANDBY_OK = 1u << 9,
    /* offered only where the LUN has what it needs (scsi_cmd_offered): WRITE ATOMIC, SET
     * TARGET PORT GROUPS */
    CMD_OPTIONAL = 1u << 10,
    /* changes what every host sees of the LU (mode pages, reservations, ALUA states): refused
     * through a read-only host mapping as a write is, so a host that may only read cannot
     * write protect the LU (SWP) or fence the writers out (scsi_target_host_map) */
    CMD_LU_STATE = 1u << 11,
};

/* How a row meets a reservation held by another I_T nexus (the scsi_cmd.pr column), from
 * SPC-4 table 66 and SBC-3 table 13 (commands allowed in the presence of various
 * reservations). 0 is the default so a row that says nothing is classed by its flags: rows
 * that run without a LUN (INQUIRY, REPORT LUNS, REQUEST SENSE) as PRC_ANY, medium changing
 * rows (CMD_WRITES) as PRC_WRITE, the rest as PRC_READ. */
enum {
    PRC_DEFAULT = 0,
    PRC_READ,  /* allowed under Write Exclusive for non-holders; conflict under Exclusive Access */
    PRC_WRITE, /* conflict under either for non-holders */
    PRC_ALLOW, /* allowed under persistent reservations; conflict under SPC-2 RESERVE */
    PRC_ANY,   /* allowed under any reservation */
    PRC_PR,    /* PERSISTENT RESERVE IN/OUT: the service action decides; conflict under RESERVE */
    PRC_SPC2,  /* RESERVE/RELEASE 6/10: conflict whenever a registration exists */
    PRC_CDB,   /* START STOP UNIT, PREVENT ALLOW: a CDB bit decides (SBC-3 table 13) */
};

/* lun->resv bits */
enum {
    RESV_SPC2 = 1u << 0, /* an SPC-2 RESERVE is held */
    RESV_PR = 1u << 1,   /* a persistent reservation is held */
    RESV_REGS = 1u << 2, /* persistent reservation keys are registered */
};

/* What parse learns from a CDB. Medium commands set lba/nblocks; setup checks them once. */
struct scsi_req {
    uint64_t lba;
    uint64_t nblocks;  /* blocks addressed (range check) */
    uint64_t xfer_len; /* bytes to move; 64-bit so overflow is checked, not wrapped */
    enum scsi_dir dir;
    bool fua;
};

struct scsi_cmd;
typedef scsi_sr (*scsi_parse_fn)(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
typedef void (*scsi_exec_fn)(struct scsi_task *t, const struct scsi_cmd *c);

struct scsi_cmd {
    const char *name;
    uint8_t opcode;
    uint8_t sa;
    uint8_t cdb_len;
    uint16_t flags; /* CMD_* */
    /* READ/WRITE-like rows: where the LBA and TRANSFER LENGTH fields are */
    uint8_t lba_off, lba_len, tl_off, tl_len;
    scsi_parse_fn parse;
    scsi_exec_fn exec;
    /* CDB USAGE DATA (SPC-4 §6.35.3): bit set = the device server looks at it. Setup refuses
     * bits outside it, so the table is also the reserved-bit check. */
    uint8_t usage[SCSI_CDB_MAX];
    uint32_t timeout_s; /* recommended timeout for RSOC's timeouts descriptor */
    uint8_t pr;         /* PRC_*: how reservations held by others affect it */
};

struct throttle_wait; /* throttle.c's own */

/* What the core keeps per task, in scsi_task.core (opaque to transports). Set by setup. */
struct scsi_task_core {
    /* the opcode-table row to run; NULL: refused, exec only calls done */
    const struct scsi_cmd *cmd;
    void *buf;       /* buffer allocated by setup (t->buffered) */
    struct bs_io io; /* the medium range (offset, length, fua) and the store request */
    bool lu_held;    /* counted in t->lu's users until release */
    bool pinned;     /* READ data is the store's memory, io's range pinned until release */
    /* ... and on a store that does not keep blocks whole itself (bs->order_rw: a file), the
     * READ's record in the LUN's range lock is io.arg (io was never submitted), held until
     * release (sbc.c rw_slow_granted) */
    bool rl_held;
    bool mode_swp;     /* MODE SELECT turning WCE off: the SWP it sets once the flush is done */
    uint8_t buf_class; /* buf's size class in the thread's buffer cache (task.c) */
    /* quiesce.c: whether the task is in the core and aborted, and the transport's done that
     * the core's own stands in front of while it is */
    _Atomic unsigned char phase;
    /* throttle.c: a command waiting for its turn under a cap, on the reactor that ran it
     * (beside phase: it fills padding, not a word of its own) */
    _Atomic unsigned char th_state;
    void (*transport_done)(struct scsi_task *t);
    /* throttle.c: what it waits with (allocated only when it waits, so a command that does not wait
     * neither allocates it nor zeroes it), or, when that allocation failed, the next command
     * in the reactor's queue of those waiting without one */
    union {
        struct throttle_wait *wait;
        struct scsi_task *next;
    } th;
};
_Static_assert(sizeof(struct scsi_task_core) <= SCSI_TASK_CORE_BYTES,
               "SCSI_TASK_CORE_BYTES too small for struct scsi_task_core");
_Static_assert(_Alignof(struct scsi_task_core) <= _Alignof(struct scsi_task),
               "struct scsi_task_core needs more alignment than scsi_task.core has");

/* The core's state of a task. The storage is only ever accessed through this type (and cleared
 * with memset by scsi_task_init), never as the union's own members, so no two accesses of
 * different types meet there. */
static inline struct scsi_task_core *scsi_core(struct scsi_task *t)
{
    return (struct scsi_task_core *)(void *)t->core.bytes;
}

/* scsi_task_core.phase (quiesce.c moves it; throttle.c only reads it) */
enum {
    PHASE_IDLE = 0, /* not in the core (before exec, after done) */
    PHASE_RUNNING,
    PHASE_ABORTED,
    /* past the point where an abort could stop anything (a PERSISTENT RESERVE OUT that
     * changed the state and waits for the tasks it aborted): not aborted any more, so two such
     * commands preempting each other never wait for each other */
    PHASE_COMMITTED,
};

/* The transport aborted it while it is in the core: a step not begun yet is not taken. Inline
 * so that throttle.c reads the phase without calling back into quiesce.c, which calls it. */
static inline bool scsi_task_aborted(struct scsi_task *t)
{
    return atomic_load(&scsi_core(t)->phase) == PHASE_ABORTED;
}

/* The medium range setup checked for a CMD_MEDIUM row: offset and length in bytes, fua. */
static inline const struct bs_io *scsi_task_range(struct scsi_task *t)
{
    return &scsi_core(t)->io;
}

extern const struct scsi_cmd scsi_cmds[];
extern const size_t scsi_ncmds;
const struct scsi_cmd *scsi_cmd_lookup(uint8_t opcode, uint8_t sa, bool *opcode_known);
/* Whether lu offers the row's command at all (NULL lu: yes): WRITE ATOMIC only where the store
 * writes atomically. One that is not offered is an INVALID COMMAND OPERATION CODE there and
 * REPORT SUPPORTED OPERATION CODES leaves it out. */
bool scsi_cmd_offered(const struct scsi_lun *lu, const struct scsi_cmd *c);

/* How a handler finishes (complete.c). Copy a built response into the task buffer (truncated to
 * xfer_len) and finish GOOD. */
void scsi_task_put_data(struct scsi_task *t, const void *src, uint32_t len);
void scsi_task_complete(struct scsi_task *t, scsi_sr sr);

/* --- handlers (spc.c, mode.c, sbc.c) --- */
scsi_sr spc_parse_none(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr spc_parse_inquiry(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr spc_parse_report_luns(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr spc_parse_rsoc(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr spc_parse_request_sense(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void spc_exec_inquiry(struct scsi_task *t, const struct scsi_cmd *c);
void spc_exec_report_luns(struct scsi_task *t, const struct scsi_cmd *c);
void spc_exec_tur(struct scsi_task *t, const struct scsi_cmd *c);
void spc_exec_request_sense(struct scsi_task *t, const struct scsi_cmd *c);
void spc_exec_rsoc(struct scsi_task *t, const struct scsi_cmd *c);
void spc_exec_good(struct scsi_task *t, const struct scsi_cmd *c);
/* implicit ALUA (alua.c) */
scsi_sr alua_parse_rtpg(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void alua_exec_rtpg(struct scsi_task *t, const struct scsi_cmd *c);
scsi_sr alua_parse_stpg(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void alua_exec_stpg(struct scsi_task *t, const struct scsi_cmd *c);
/* init fills lu->alua from the target's own group, its peers and the LUN's config. */
extern const struct scsi_lun_hooks alua_lun_hooks;
/* alua-mode = failover (alua_failover.c): a heartbeat thread per LUN, started once the LUN is
 * published, stopped before its store closes. */
extern const struct scsi_lun_hooks alua_failover_lun_hooks;

scsi_sr mode_parse_sense(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr mode_parse_select(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void mode_exec_sense(struct scsi_task *t, const struct scsi_cmd *c);
void mode_exec_select(struct scsi_task *t, const struct scsi_cmd *c);

scsi_sr sbc_parse_rw(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_verify(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_sync(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_readcap10(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_readcap16(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_start_stop(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void sbc_exec_read(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_write(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_verify(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_sync(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_readcap10(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_readcap16(struct scsi_task *t, const struct scsi_cmd *c);

/* --- thin provisioning and the other block commands (sbc_thin.c, sbc_caw.c, sbc_sanitize.c,
 * sbc_extra.c) --- */
/* Limits reported in VPD 0xB0 and enforced by the commands. */
#define SBC_MAX_CAW_BLOCKS 255u         /* COMPARE AND WRITE bound of a single-gateway store */
#define SBC_MAX_UNMAP_DESCRIPTORS 2048u /* MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT */
#define SBC_MAX_UNMAP_BLOCKS (1u << 20) /* MAXIMUM UNMAP LBA COUNT (libiscsi wants <= 2^20) */
#define SBC_MAX_WRITE_SAME_BLOCKS                                                                  \
    0xffffu                             /* MAXIMUM WRITE SAME LENGTH: bounds one command's work    \
                                         */
#define SBC_MAX_ATOMIC_BYTES (1u << 20) /* MAXIMUM ATOMIC TRANSFER LENGTH, in bytes */
#define SBC_PROVISIONING_UNIT 4096u     /* page / file system block: unmap and mapping unit */

enum { SANITIZE_IDLE, SANITIZE_RUNNING, SANITIZE_FAILED };

/* The reason for a store's -errno on an operation (sbc.c): MEDIUM ERROR by default. */
scsi_sr sbc_io_reason(enum bs_op op, int err);

/* DATA PROTECT if the LUN is read-only (configuration) or software write protected (SWP). */
static inline scsi_sr sbc_write_protect(const struct scsi_lun *lu)
{
    if (lu->read_only)
        return SR_WRITE_PROTECTED;
    if (atomic_load_explicit(&((struct scsi_lun *)lu)->swp, memory_order_relaxed))
        return SR_SW_WRITE_PROTECTED;
    return SR_OK;
}

/* While a SANITIZE runs, everything but INQUIRY, REPORT LUNS and REQUEST SENSE is NOT READY;
 * after one failed, medium access is a MEDIUM ERROR until a sanitize succeeds or EXIT FAILURE
 * MODE (SBC-4 §4.11.3). One relaxed load on the fast path. */
static inline scsi_sr sbc_sanitize_gate(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    int s = atomic_load_explicit(&((struct scsi_lun *)lu)->sanitize, memory_order_relaxed);
    if (s == SANITIZE_IDLE || (c->flags & CMD_UA_OK))
        return SR_OK;
    if (s == SANITIZE_RUNNING)
        return SR_SANITIZE_IN_PROGRESS;
    return (c->flags & CMD_MEDIUM) ? SR_SANITIZE_FAILED : SR_OK;
}

/* Whether the LUN is thin provisioned (VPD 0xB2, READ CAPACITY(16) LBPME and LBPRZ): its store
 * releases space on UNMAP and unmapped blocks read as zeros. */
static inline bool sbc_thin(const struct scsi_lun *lu)
{
    return lu->bs->thin;
}

scsi_sr sbc_parse_unmap(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_write_same(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_get_lba_status(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void sbc_exec_unmap(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_write_same(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_get_lba_status(struct scsi_task *t, const struct scsi_cmd *c);

scsi_sr sbc_parse_caw(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
/* MAXIMUM COMPARE AND WRITE LENGTH of lu (VPD 0xB0), which sbc_parse_caw enforces: what the
 * LUN compares and writes atomically for every client of its medium. */
uint8_t sbc_caw_max_blocks(const struct scsi_lun *lu);
scsi_sr sbc_parse_orwrite(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_write_atomic(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
/* MAXIMUM ATOMIC TRANSFER LENGTH of lu in bytes (VPD 0xB0 gives it in blocks), which
 * sbc_parse_write_atomic enforces: 0 (no WRITE ATOMIC) unless the store writes atomically. */
uint32_t sbc_atomic_max_bytes(const struct scsi_lun *lu);
void sbc_exec_caw(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_orwrite(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_write_atomic(struct scsi_task *t, const struct scsi_cmd *c);

scsi_sr sbc_parse_sanitize(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void sbc_exec_sanitize(struct scsi_task *t, const struct scsi_cmd *c);

scsi_sr sbc_parse_prefetch(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr sbc_parse_read_defect(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void sbc_exec_read_defect(struct scsi_task *t, const struct scsi_cmd *c);

/* One medium operation after another on a store, without recursion when the store completes
 * inline (RAM) and yielding the reactor every few steps (sbc_thin.c). next() fills io (op,
 * offset, length, iov) and returns true, or returns false when there is nothing left. */
struct sbc_seq {
    struct bs *bs;
    struct scsi_task *task; /* whose work it is (NULL: answered already): stops once aborted */
    struct bs_io io;
    bool (*next)(struct sbc_seq *s, struct bs_io *io);
    void (*done)(struct sbc_seq *s, int err);
    int err;
    bool in_submit, inline_done;
    /* Pacing: with rate (bytes per second) set, a step that would run ahead of
     * start_ms + bytes / rate waits on pace_timer first (only on a reactor thread). */
    uint64_t rate, start_ms, bytes;
    struct reactor_timer pace_timer;
    struct reactor_msg yield_msg; /* the next step, after the reactor's other events */
};
void sbc_seq_run(struct sbc_seq *s);

/* A buffer of len bytes (a multiple of the block size) holding pat (plen bytes, <= block)
 * repeated to fill each block; 4096-aligned so an O_DIRECT store takes it. NULL if out of
 * memory. */
uint8_t *sbc_pattern_buffer(size_t len, uint32_t block_size, const uint8_t *pat, size_t plen);

/* A range [off, end) written chunk by chunk from one pattern buffer, or unmapped in one request:
 * what WRITE SAME and SANITIZE share. */
struct sbc_fill {
    uint64_t off, end;
    bool unmap, fua;
    bool same; /* one BS_WRITE_SAME of the chunk (one block) over the range: the store repeats it */
    uint8_t *chunk; /* chunk_len bytes of pattern (NULL when unmapping) */
    size_t chunk_len;
    struct iovec iov;
};
/* The next request of the fill into io; false once the range is done. */
bool sbc_fill_next(struct sbc_fill *f, struct bs_io *io);

/* --- removable medium (sbc_removable.c): SBC-3 §5.x START STOP UNIT, SPC-4 §6.13 PREVENT
 * ALLOW MEDIUM REMOVAL --- */
/* NOT READY, MEDIUM NOT PRESENT for a command that needs the medium while it is ejected
 * (CMD_MEDIUM and CMD_NEEDS_MEDIUM rows); one relaxed load, false on fixed LUNs. */
static inline scsi_sr sbc_medium_gate(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    if (!(c->flags & (CMD_MEDIUM | CMD_NEEDS_MEDIUM)))
        return SR_OK;
    return atomic_load_explicit(&((struct scsi_lun *)lu)->medium_absent, memory_order_relaxed)
               ? SR_MEDIUM_NOT_PRESENT
               : SR_OK;
}
/* NOT READY 04h/0Bh for a command the standby state does not allow; SR_OK otherwise. One load
 * on the fast path. */
static inline scsi_sr alua_gate(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    /* SPC-4 §5.16.2.4.5: in standby the device server answers INQUIRY, LOG SELECT/SENSE, MODE
     * SELECT/SENSE, REPORT LUNS, RECEIVE/SEND DIAGNOSTIC, REPORT and SET TARGET PORT GROUPS,
     * REQUEST SENSE, PERSISTENT RESERVE IN/OUT and the echo buffer modes of READ/WRITE
     * BUFFER (those offered here carry CMD_STANDBY_OK); anything else is NOT READY, LOGICAL
     * UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE. TEST UNIT READY included, which is
     * how a multipath path checker learns the path is not for I/O. */
    if (c->flags & CMD_STANDBY_OK)
        return SR_OK;
    struct scsi_lun *l = (struct scsi_lun *)lu;
    if (atomic_load_explicit(&l->alua[0].state, memory_order_relaxed) == SCSI_ALUA_STANDBY)
        return SR_ALUA_STANDBY;
    uint64_t lease = atomic_load_explicit(&l->alua_lease_ms, memory_order_acquire);
    if (lease) {
        struct timespec ts;
        clock_gettime(CLOCK_BOOTTIME, &ts); /* counts a suspend too (alua_failover.c) */
        if ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 >= lease)
            return SR_ALUA_STANDBY; /* the failover lease ran out: standby until renewed */
    }
    return SR_OK;
}

/* The state checks setup makes before parsing command c for the LUN lu: the ALUA standby
 * gate, sanitize and the medium; SR_OK or the first that refuses. */
static inline scsi_sr scsi_lun_gates(const struct scsi_lun *lu, const struct scsi_cmd *c)
{
    /* this gateway's port group in standby for the LUN; NOT READY while a SANITIZE runs
     * (SBC-4 §4.11.3); removable LUN, medium ejected: NOT READY, MEDIUM NOT PRESENT */
    scsi_sr sr = alua_gate(lu, c);
    if (!sr)
        sr = sbc_sanitize_gate(lu, c);
    if (!sr)
        sr = sbc_medium_gate(lu, c);
    return sr;
}
void sbc_exec_start_stop(struct scsi_task *t, const struct scsi_cmd *c);
void sbc_exec_prevent_allow(struct scsi_task *t, const struct scsi_cmd *c);
/* Prevention ends for one nexus (I_T nexus loss) or for every nexus (LUN reset, target
 * reset, here or through another gateway): SPC-4 §6.13. */
extern const struct scsi_lun_hooks sbc_removable_lun_hooks;

/* --- the helper thread (offload.c) for work that blocks: work() runs there, then done() on
 * the reactor that called scsi_offload_submit (both on the caller, in order, when it has no
 * reactor; both on the helper thread when detached: for callers that may not block, such as a
 * librados callback). The caller owns o until done() runs. --- */
struct scsi_offload {
    void (*work)(struct scsi_offload *o);
    void (*done)(struct scsi_offload *o);
    bool detached;
    struct reactor *r;
    struct reactor_msg msg;
    struct scsi_offload *next;
};
void scsi_offload_submit(struct scsi_offload *o);

/* --- the medium resized by someone else (lun_admin.c) --- */
/* Watch the store's size (bs size_watch), if it has one, once the LUN is published (start): a
 * change sets the capacity and raises CAPACITY DATA HAS CHANGED on every nexus; a failure is
 * logged and the LUN serves at its present size. stop ends the watch and waits for its job. */
extern const struct scsi_lun_hooks scsi_lun_resize_hooks;

/* --- reservations (pr.c): SPC-4 persistent reservations and SPC-2 RESERVE/RELEASE --- */
/* init loads the state (APTPL file or the cluster's); stop waits for the LUN's reservation work
 * still on the helper thread (shared state); nexus loss and resets release SPC-2 reservations
 * (SPC-2 §5.5.1; persistent ones stay, SPC-4 §5.13.1); a reset of a LU whose state is shared
 * with other gateways (an RBD image several export) tells them on the shared object's watch,
 * on the helper thread, so that each raises the reset's unit attention for its own nexuses and
 * aborts their tasks (scsi_lun_reset_elsewhere); done once every gateway acknowledged or the
 * wait timed out. */
extern const struct scsi_lun_hooks pr_lun_hooks;
/* The central check scsi_task_setup makes when lu->resv (resv) is nonzero: whether t's I_T
 * nexus may run c on lu (t->lu, or another LUN a copy names). SR_RESERVATION_CONFLICT or
 * SR_OK. */
scsi_sr pr_check(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c, unsigned resv);
scsi_sr pr_parse_in(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr pr_parse_out(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr pr_parse_spc2(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void pr_exec_in(struct scsi_task *t, const struct scsi_cmd *c);
void pr_exec_out(struct scsi_task *t, const struct scsi_cmd *c);
void pr_exec_reserve(struct scsi_task *t, const struct scsi_cmd *c);
void pr_exec_release(struct scsi_task *t, const struct scsi_cmd *c);

/* --- third-party copy (xcopy.c): EXTENDED COPY (LID1), RECEIVE COPY RESULTS --- */
scsi_sr xcopy_parse(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
scsi_sr xcopy_parse_rcr(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r);
void xcopy_exec(struct scsi_task *t, const struct scsi_cmd *c);
void xcopy_exec_rcr(struct scsi_task *t, const struct scsi_cmd *c);
/* The descriptors of VPD page 8Fh (third-party copy) at d; returns their length. */
uint32_t xcopy_vpd_descriptors(uint8_t *d);
/* I_T nexus loss discards the copy results held for it. */
extern const struct scsi_lun_hooks xcopy_lun_hooks;

/* Field accessors for table-described CDB fields (1..8 bytes, big-endian). */
static inline uint64_t scsi_cdb_field(const uint8_t *cdb, unsigned off, unsigned len)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < len; i++)
        v = v << 8 | cdb[off + i];
    return v;
}

/* --- host LUN maps (host_map.c builds them, lun_addr.c reads them) --- */

/* A slot of a map: 0 when nothing is mapped at that host number, else the target's LUN + 1 in
 * the low 15 bits (LUNs are below SCSI_LUN_SLOTS = 2^14) and HOST_SLOT_RO for a read-only
 * mapping. Two bytes a host number, so the largest map (host LUN 16383) is 32 KiB. */
#define HOST_SLOT_RO 0x8000u
#define HOST_SLOT_LUN 0x7fffu
_Static_assert(SCSI_LUN_SLOTS < HOST_SLOT_LUN, "a LUN + 1 fits a slot");

/* A host's map as its nexuses read it (built by host_map.c, read by lun_addr.c): immutable once
 * published. */

struct scsi_host_map {
    struct scsi_host_map *retired_next; /* scsi_host_table.retired */
    uint32_t nslots;                    /* host numbers 0..nslots-1 have a slot */
    /* Per slot, the entry's counters for the LUN it names (host_map.c; NULL: none), in the
     * same allocation. The entry owns them; a retired map may own some too (owned), freed
     * with it: a reactor that read the map in its turn may still count into them. */
    struct iostats **stats;
    struct iostats **owned;
    unsigned nowned;
    uint16_t slot[];
};

/* With the target lock: n reads the map of its initiator (scsi_nexus_get, for a new nexus). */
void scsi_host_map_bind_locked(struct scsi_target *t, struct scsi_nexus_impl *n);
/* With the target lock: whether nexus n is shown target LUN `lun` (always while the target has
 * no entries), mapped or about to be. */
bool scsi_host_map_shows_locked(const struct scsi_nexus_impl *n, uint64_t lun);
/* The target's entries and retired maps, at scsi_target_destroy. */
void scsi_host_table_free(struct scsi_target *t);
/* The host numbers nexus n sees a LUN at, in order, into out (up to max; out may be NULL):
 * how many there are (REPORT LUNS). */
uint32_t scsi_nexus_report_luns(struct scsi_nexus *n, uint64_t *out, uint32_t max);

#endif
