/* The multipath device's own structures (linerate/multipath.h), shared by its two halves:
 * mpath_path.c (path life: login, logging in again, ALUA states) and mpath.c (commands: which
 * path, and where again when theirs failed). Not a public header. */
#ifndef LR_INITIATOR_MPATH_DEV_H
#define LR_INITIATOR_MPATH_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "linerate/multipath.h"

#define MP_BUF 1024    /* VPD 0x83 and RTPG answers */
#define MP_POLL_MS 200 /* RTPG again while commands wait for a usable path */

enum mp_pstate { MP_IDLE, MP_LOGGING_IN, MP_PROBING, MP_UP, MP_DEAD, MP_LOGGED_OUT };

struct mp_path {
    struct lr_mpath *m;
    unsigned idx;
    char host[256];
    uint16_t port;
    struct lr_session *s;
    enum mp_pstate st;
    bool login_failed;
    int group;
    uint8_t state;
    uint64_t commands, reissued;
    /* logging in again after a loss (or a failed login): when, how many times, how often it
     * failed in a row; gen counts its sessions, so a command knows it ran on an older one */
    struct lr_timer *relogin;
    uint32_t relogin_ms;
    bool relogging;
    bool fresh; /* logged in again, its own RTPG not answered yet: no I/O (see on_rtpg) */
    unsigned relogin_fails;
    uint64_t relogins, commands_now;
    uint32_t gen;
    /* its RTPG: one at a time; asked again meanwhile, it runs after (rtpg_again) */
    bool rtpg_busy, rtpg_again;
    unsigned rtpg_ua;    /* unit attentions in a row on it */
    uint8_t buf[MP_BUF]; /* VPD 0x83 at login, then RTPG answers */
    uint8_t isid[6];     /* every session of the path: see path_isid */
};

struct mp_cmd {
    struct lr_mpath *m;
    struct mp_cmd *next; /* free list or wait list */
    uint8_t cdb[16];
    unsigned cdb_len;
    enum lr_dir dir;
    void *buf;
    uint32_t len;
    lr_done_fn done;
    void *arg;
    uint64_t deadline_ms;
    uint32_t died_on;  /* paths whose session was lost under it: never tried again */
    int path;          /* where it is now, -1 waiting */
    uint32_t gen;      /* the session of that path it went to (mp_path.gen) */
    int last_path;     /* where it was last sent, -1 never */
    bool moved;        /* issued again on another path */
    bool unsure;       /* a copy went out on a path that died under it: it may have run */
    uint8_t *readback; /* a CAW's blocks read back after a MISCOMPARE (caw_check) */
    bool have_last;
    struct lr_result last; /* the latest failure, final when no path is left */
};

struct lr_mpath {
    struct reactor *r;
    struct lr_mpath_opts o;
    struct mp_path paths[LR_MPATH_MAX_PATHS];
    unsigned npaths, rr;
    struct mp_cmd *cmds, *free_cmds, *wait_head, *wait_tail;
    struct mp_cmd *held; /* failed while their session recovered: see hold() */
    uint32_t ncmds;
    struct lr_timer *poll, *reap;
    bool no_alua; /* RTPG refused (ILLEGAL REQUEST): every path counts as AO */
    /* login and logout */
    lr_done_fn login_done, logout_done;
    void *login_arg, *logout_arg;
    unsigned login_pending, logout_pending;
    bool login_rtpg;            /* login waits for every live path's RTPG answer */
    struct lr_result login_err; /* the first path's login failure */
    bool login_err_set;
    bool destroying, stopping; /* stopping: logout asked, no path logs in again */
    uint64_t paths_lost, reissued;
    uint64_t caw_checked, caw_landed;
    /* mpath.c's: a path's state is known (its RTPG answered or gave up): the commands waiting
     * for a path try again. Called by mpath_path.c, which knows nothing of commands. */
    void (*state_known)(struct lr_mpath *m);
};

#endif
