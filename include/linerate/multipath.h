/* A multipath device over linerate's initiator: one session per portal (gateway) to one LUN,
 * run on one reactor. Paths are chosen by ALUA state from REPORT TARGET PORT GROUPS (asked at
 * login, on UNIT ATTENTION 2Ah/06h, on NOT READY 04h/0Ah-0Ch and when a path is lost):
 * active/optimized first, then active/non-optimized, round robin among equals, never standby,
 * unavailable or transitioning. A command whose path died is issued again on another path
 * (once per path, within failover_timeout_ms), and the caller sees only its final status.
 *
 * When a command is issued again (docs/multipath.md has the why and what dm-multipath does):
 * - it never left (lr_scsi refused it) or the target did not run it: NOT READY 04h/0Ah
 *   (transition), 04h/0Bh (standby), 04h/0Ch (unavailable), UNIT ATTENTION 2Ah/06h (SPC-4
 *   §5.16.2.4, SAM-5 §5.14: a command answered with a unit attention was not executed);
 * - its path's session is gone: every connection of it lost and not recovered by the session
 *   itself (ErrorRecoveryLevel 0: a connection failure ends the session and the target
 *   terminates its tasks, RFC 7143 §7.1.5; at ERL 2 only once the session gave up).
 *   The session is then destroyed, so nothing of ours can carry the command on that path.
 *   A command whose connection was lost (or dropped at its timeout) while the session
 *   recovers that connection (lr_session_conn_recovering: the target may still hold and run
 *   it, §7.1.4) waits for the recovery to end, then is issued again:
 *   on the same path when the session came back, elsewhere when it gave up.
 *   The data of a WRITE issued again is the caller's buffer, unchanged (it must stay valid
 *   and unchanged until done() runs, as for lr_scsi).
 * A COMPARE AND WRITE issued again after its path died may find its own first copy landed:
 * on MISCOMPARE its blocks are read back, and GOOD is reported when they hold its write data
 * (what ESXi does for its ATS heartbeat; any other content is a real miscompare).
 * Anything else (CHECK CONDITION of the command itself, a failure with the session still up)
 * is the final status. A lost path logs in again by itself (lr_mpath_login). No call here is
 * thread-safe; everything runs on the reactor given. */
#ifndef LINERATE_MULTIPATH_H
#define LINERATE_MULTIPATH_H

#include <stdbool.h>
#include <stdint.h>

#include "linerate/initiator.h"

#define LR_MPATH_MAX_PATHS 8

/* ASYMMETRIC ACCESS STATE (SPC-4 §6.27.2), and unknown (no answer yet) */
enum lr_alua_state {
    LR_ALUA_AO = 0x0,
    LR_ALUA_AN = 0x1,
    LR_ALUA_STANDBY = 0x2,
    LR_ALUA_UNAVAILABLE = 0x3,
    LR_ALUA_LBA_DEPENDENT = 0x4,
    LR_ALUA_OFFLINE = 0xe,
    LR_ALUA_TRANSITIONING = 0xf,
    LR_ALUA_UNKNOWN = 0xff,
};
const char *lr_alua_state_name(uint8_t state);

struct lr_mpath_opts {
    /* For every path: target, LUN, initiator name, digests, CHAP, timeouts... host and port
     * come from the portals below; conn_reactors must be all NULL (one reactor). */
    struct lr_session_opts session;
    const char *hosts[LR_MPATH_MAX_PATHS];
    uint16_t ports[LR_MPATH_MAX_PATHS]; /* 0: 3260 */
    unsigned npaths;                    /* 1..LR_MPATH_MAX_PATHS */
    /* How long a command may be carried from path to path, counted from its first issue
     * (default 60000): past it, or with no path left to try, it completes with the last
     * failure. Commands wait meanwhile for a usable path (a standby one made active). */
    uint32_t failover_timeout_ms;
};

struct lr_mpath;

/* NULL with errno EINVAL (bad options) or ENOMEM. */
struct lr_mpath *lr_mpath_create(struct reactor *r, const struct lr_mpath_opts *o);
/* Destroys every path's session; commands not completed get LR_ERR_ABORTED. */
void lr_mpath_destroy(struct lr_mpath *m);
/* Logs in every path, reads each one's target port group (VPD 0x83) and its state (RTPG
 * through it: each port's word on its own group counts).
 * done(): LR_OK once at least one path is logged in and the states are known (a target
 * without RTPG: every path counts as active/optimized), else the first path's failure.
 * A path that cannot log in, or whose session is lost later, logs in again by itself (after
 * 100 ms, doubling to at most 5 s apart, until logout or destroy) and carries I/O again once
 * RTPG says its state allows it (failback to an active/optimized path). Returns 0, or -1
 * (already logged in, no memory). */
int lr_mpath_login(struct lr_mpath *m, lr_done_fn done, void *arg);
/* Logs out every live path; done() once all answered or were lost (LR_OK). */
int lr_mpath_logout(struct lr_mpath *m, lr_done_fn done, void *arg);

/* As lr_scsi on one session; res->conn in done() is the index of the path that gave the
 * final status (-1 when none). Returns -1 only when no task slot is left. */
int lr_mpath_scsi(struct lr_mpath *m, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                  void *buf, uint32_t len, lr_done_fn done, void *arg);
int lr_mpath_read(struct lr_mpath *m, uint64_t lba, uint32_t blocks, uint32_t block_size, void *buf,
                  lr_done_fn done, void *arg);
int lr_mpath_write(struct lr_mpath *m, uint64_t lba, uint32_t blocks, uint32_t block_size,
                   const void *buf, lr_done_fn done, void *arg);
int lr_mpath_read_capacity(struct lr_mpath *m, lr_capacity_fn done, void *arg);

struct lr_mpath_path_info {
    const char *host;
    uint16_t port;
    bool up;                         /* logged in, not lost, its state asked (RTPG) */
    bool lost;                       /* its session was lost after login */
    bool login_failed;               /* it never logged in */
    int group;                       /* target port group, -1 unknown */
    uint8_t state;                   /* enum lr_alua_state of that group, as last reported */
    uint64_t commands;               /* commands completed on it (final status) */
    uint64_t reissued;               /* of those, commands that had failed over from another path */
    uint64_t relogins;               /* times it logged in again after a loss or a failed login */
    uint64_t commands_now;           /* commands completed on its current session */
    bool header_digest, data_digest; /* CRC32C negotiated (while up) */
};
unsigned lr_mpath_paths_up(const struct lr_mpath *m);
/* Path i (the order of lr_mpath_opts.hosts): false when there is no such path. */
bool lr_mpath_path_info(const struct lr_mpath *m, unsigned i, struct lr_mpath_path_info *out);
/* Paths that died (sessions lost) so far, and how many times a command was issued again
 * (after a lost path, a unit attention 2Ah/06h or a NOT READY of a port not active). */
void lr_mpath_counts(const struct lr_mpath *m, uint64_t *paths_lost, uint64_t *reissued);
/* COMPARE AND WRITEs issued again after a path died that came back MISCOMPARE and were read
 * back (checked), and of those the ones whose blocks held their own write data (landed:
 * reported GOOD, the miscompare was their own first copy's doing). */
void lr_mpath_caw_counts(const struct lr_mpath *m, uint64_t *checked, uint64_t *landed);

#endif
