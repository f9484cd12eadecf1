/* The multipath device (linerate/multipath.h): a session per portal to one LUN, paths chosen
 * by ALUA state (mpath_pick.c, from the RTPG answers alua.c reads), commands carried to
 * another path when theirs died. Uses only the public session API, on one reactor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "initiator/alua.h"
#include "initiator/cdb.h"
#include "initiator/mpath_caw.h"
#include "initiator/mpath_pick.h"
#include "linerate/multipath.h"
#include "util/bytes.h"
#include "util/log.h"

#define MP_BUF 1024       /* VPD 0x83 and RTPG answers */
#define MP_POLL_MS 200    /* RTPG again while commands wait for a usable path */
#define MP_RTPG_RETRIES 8 /* unit attentions in a row on RTPG (each is reported once) */
#define MP_MAX_GROUPS 16
/* A lost path logs in again after 100 ms, then 200, 400... at most 5 s apart: a gateway that
 * restarts is used again within seconds, one that stays down costs a connect every 5 s. */
#define MP_RELOGIN_FIRST_MS 100
#define MP_RELOGIN_MAX_MS 5000
#define MP_RELOGIN_LOG_EVERY 12

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
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

const char *lr_alua_state_name(uint8_t st)
{
    switch (st) {
    case LR_ALUA_AO:
        return "active/optimized";
    case LR_ALUA_AN:
        return "active/non-optimized";
    case LR_ALUA_STANDBY:
        return "standby";
    case LR_ALUA_UNAVAILABLE:
        return "unavailable";
    case LR_ALUA_LBA_DEPENDENT:
        return "lba-dependent";
    case LR_ALUA_OFFLINE:
        return "offline";
    case LR_ALUA_TRANSITIONING:
        return "transitioning";
    default:
        return "unknown";
    }
}

static void submit(struct lr_mpath *m, struct mp_cmd *c);
static void refresh(struct lr_mpath *m);

/* ---- commands ---- */

static void finish(struct mp_cmd *c, const struct lr_result *res)
{
    struct lr_mpath *m = c->m;
    struct lr_result r = *res;
    r.conn = c->path;
    if (c->path >= 0 && (res->err == LR_OK || res->err == LR_SCSI_STATUS)) {
        m->paths[c->path].commands++;
        m->paths[c->path].commands_now += c->gen == m->paths[c->path].gen;
        m->paths[c->path].reissued += c->moved;
    }
    lr_done_fn done = c->done;
    void *arg = c->arg;
    c->next = m->free_cmds;
    m->free_cmds = c;
    done(arg, &r);
}

static void wait_push(struct lr_mpath *m, struct mp_cmd *c)
{
    c->path = -1;
    c->next = NULL;
    if (m->wait_tail)
        m->wait_tail->next = c;
    else
        m->wait_head = c;
    m->wait_tail = c;
    lr_timer_start(m->poll, MP_POLL_MS);
}

/* Commands waiting for a path try again (after an RTPG answer, a poll tick). */
static void drain(struct lr_mpath *m)
{
    struct mp_cmd *c = m->wait_head;
    m->wait_head = m->wait_tail = NULL;
    while (c) {
        struct mp_cmd *next = c->next;
        submit(m, c);
        c = next;
    }
}

static bool waiting_is_worth(const struct lr_mpath *m, const struct mp_cmd *c)
{
    /* a path that may yet take it: logging in, or up and not tried to death */
    for (unsigned i = 0; i < m->npaths; i++) {
        const struct mp_path *p = &m->paths[i];
        if (c->died_on >> i & 1)
            continue;
        if (p->st == MP_LOGGING_IN || p->st == MP_PROBING || p->st == MP_UP)
            return true;
    }
    return false;
}

static void fail_no_path(struct mp_cmd *c)
{
    if (c->have_last) {
        finish(c, &c->last);
        return;
    }
    struct lr_result r = {.err = LR_ERR_NO_CONN, .what = "no usable path", .conn = -1};
    finish(c, &r);
}

static void on_cmd(void *arg, const struct lr_result *res);

static int pick(struct lr_mpath *m, uint32_t exclude)
{
    struct ini_mpath_cand cand[LR_MPATH_MAX_PATHS];
    for (unsigned i = 0; i < m->npaths; i++) {
        cand[i].up = m->paths[i].st == MP_UP && !m->paths[i].fresh;
        cand[i].state = m->no_alua ? LR_ALUA_AO : m->paths[i].state;
    }
    return ini_mpath_pick(cand, m->npaths, exclude, &m->rr);
}

static void path_dead(struct mp_path *p, const char *why);

static void submit(struct lr_mpath *m, struct mp_cmd *c)
{
    if (m->destroying) {
        struct lr_result r = {.err = LR_ERR_ABORTED, .what = "multipath device destroyed"};
        c->path = -1;
        finish(c, &r);
        return;
    }
    for (;;) {
        if (now_ms() >= c->deadline_ms || !waiting_is_worth(m, c)) {
            c->path = -1;
            fail_no_path(c);
            return;
        }
        int i = pick(m, c->died_on);
        if (i < 0) {
            wait_push(m, c);
            return;
        }
        struct mp_path *p = &m->paths[i];
        if (c->last_path >= 0 && c->last_path != i)
            c->moved = true;
        c->path = c->last_path = i;
        c->gen = p->gen;
        if (lr_scsi(p->s, c->cdb, c->cdb_len, c->dir, c->buf, c->len, on_cmd, c) == 0)
            return;
        /* refused: the session has no connection left (the command never left), or no
         * task slot (the device's slots match the session's: not while it lives) */
        struct lr_session_info info;
        lr_session_get_info(p->s, &info);
        if (info.connections_up == 0 && !info.recovering) {
            c->died_on |= 1u << i;
            path_dead(p, "no connection left");
            continue;
        }
        wait_push(m, c);
        return;
    }
}

/* After a failure on path c->path that did not run the command (or whose session is gone):
 * on another path, or the same one later, until the deadline. */
static void again(struct mp_cmd *c, const struct lr_result *res)
{
    c->last = *res;
    c->have_last = true;
    c->m->reissued++;
    submit(c->m, c);
}

static bool lost_kind(enum lr_err e)
{
    return e == LR_ERR_CONN_LOST || e == LR_ERR_TIMEOUT || e == LR_ERR_NO_CONN || e == LR_ERR_IO ||
           e == LR_ERR_ABORTED;
}

/* The session of p cannot complete anything any more: every connection lost and its own
 * recovery (ERL 2, or a login after a logout the target asked for) over, or we destroyed it. */
static bool session_gone(const struct mp_path *p)
{
    if (p->st == MP_DEAD || !p->s)
        return true;
    struct lr_session_info info;
    lr_session_get_info(p->s, &info);
    return info.connections_up == 0 && !info.recovering;
}

/* A failure the session's recovery produced: the connection the command ran on was lost, or
 * dropped at its timeout, and that connection is being recovered (RFC 7143 §7.1.4). A socket
 * error or an abort on a connection that is up is the command's own answer, reported even
 * while another connection of the session recovers. */
static bool recovery_kind(const struct mp_path *p, const struct lr_result *res)
{
    return p->st != MP_DEAD && (res->err == LR_ERR_CONN_LOST || res->err == LR_ERR_TIMEOUT) &&
           lr_session_conn_recovering(p->s, res->conn);
}

static bool session_recovering(const struct mp_path *p)
{
    if (p->st == MP_DEAD || !p->s)
        return false;
    struct lr_session_info info;
    lr_session_get_info(p->s, &info);
    return info.recovering;
}

/* A command failed (lost connection, timeout) while its session recovers: at ERL 2 the target
 * keeps the lost connection's tasks for reassignment until Time2Retain (RFC 7143 §7.1.4,
 * §13.16), so this one may still run there. Issued elsewhere now, the copy could be overtaken
 * by the original; it waits for the recovery to end (held_check). */
static void hold(struct lr_mpath *m, struct mp_cmd *c, const struct lr_result *res)
{
    c->unsure = true;
    c->last = *res;
    c->have_last = true;
    c->next = m->held;
    m->held = c;
    lr_timer_start(m->poll, MP_POLL_MS);
}

static void set_group_state(struct lr_mpath *m, int group, uint8_t state)
{
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].group == group)
            m->paths[i].state = state;
}

/* The port said it does not take I/O for the LU now (SPC-4 §5.16.2.4.5-.7): none on it until
 * RTPG says otherwise. A target without RTPG (no_alua) keeps every path usable. */
static void not_here(struct lr_mpath *m, struct mp_path *p, uint8_t state)
{
    if (!m->no_alua) {
        if (p->group >= 0)
            set_group_state(m, p->group, state);
        p->state = state;
    }
    refresh(m);
}

static void caw_read_done(void *arg, const struct lr_result *res)
{
    struct mp_cmd *c = arg;
    struct lr_mpath *m = c->m;
    uint32_t half = c->len / 2;
    bool landed = res->err == LR_OK && res->residual == 0 &&
                  ini_caw_landed(c->buf, c->len, c->readback, half);
    free(c->readback);
    c->readback = NULL;
    if (!landed) {
        finish(c, &c->last); /* a real miscompare, or the read failed: as answered */
        return;
    }
    m->caw_landed++;
    LOG_INFO("multipath: COMPARE AND WRITE issued again miscompared, but its blocks hold its "
             "data: its first copy landed; GOOD");
    struct lr_result ok = {.err = LR_OK};
    finish(c, &ok);
}

/* A COMPARE AND WRITE whose earlier copy went out on a path that died (c->unsure) came back
 * MISCOMPARE: that copy may have run, and this one compared against its data. Read the
 * blocks back (through the device: on any path) and report GOOD when they hold this
 * command's write data, as ESXi does for its ATS heartbeat. Any other content is a real
 * miscompare, reported as answered; so is a failed read. True when the check is under way. */
static int scsi_until(struct lr_mpath *m, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                      void *buf, uint32_t len, lr_done_fn done, void *arg, uint64_t deadline_ms);

static bool caw_check(struct mp_cmd *c, const struct lr_result *res)
{
    struct lr_mpath *m = c->m;
    uint64_t lba;
    uint32_t blocks;
    if (!ini_caw_miscompare(c->cdb, c->cdb_len, res, &lba, &blocks) || c->len % 2)
        return false;
    c->last = *res;
    c->readback = malloc(c->len / 2);
    if (!c->readback)
        return false;
    m->caw_checked++;
    uint8_t cdb[16];
    unsigned n = ini_cdb_rw(cdb, false, lba, blocks);
    /* the read-back is part of the CAW: it has what is left of the CAW's time, no more */
    if (scsi_until(m, cdb, n, LR_DIR_READ, c->readback, c->len / 2, caw_read_done, c,
                   c->deadline_ms) == 0)
        return true;
    free(c->readback);
    c->readback = NULL;
    return false;
}

static void on_cmd(void *arg, const struct lr_result *res)
{
    struct mp_cmd *c = arg;
    struct lr_mpath *m = c->m;
    struct mp_path *p = &m->paths[c->path];
    if (m->destroying) {
        finish(c, res);
        return;
    }
    if (res->err == LR_SCSI_STATUS) {
        switch (ini_alua_sense(res->sense, res->sense_len)) {
        case INI_SENSE_AAS_CHANGED:
            refresh(m);
            again(c, res);
            return;
        case INI_SENSE_STANDBY:
            not_here(m, p, LR_ALUA_STANDBY);
            again(c, res);
            return;
        case INI_SENSE_UNAVAILABLE:
            not_here(m, p, LR_ALUA_UNAVAILABLE);
            again(c, res);
            return;
        case INI_SENSE_TRANSITION:
            not_here(m, p, LR_ALUA_TRANSITIONING);
            again(c, res);
            return;
        case INI_SENSE_OTHER:
            break;
        }
    }
    if (recovery_kind(p, res)) {
        hold(m, c, res);
        return;
    }
    if (lost_kind(res->err) && session_gone(p)) {
        c->died_on |= 1u << c->path;
        c->unsure = true;
        path_dead(p, res->what ? res->what : lr_err_name(res->err));
        again(c, res);
        return;
    }
    if (c->unsure && caw_check(c, res))
        return;
    finish(c, res);
}

static struct mp_cmd *cmd_take(struct lr_mpath *m)
{
    struct mp_cmd *c = m->free_cmds;
    if (c)
        m->free_cmds = c->next;
    return c;
}

static int scsi_until(struct lr_mpath *m, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                      void *buf, uint32_t len, lr_done_fn done, void *arg, uint64_t deadline_ms)
{
    if (cdb_len > 16 || m->destroying)
        return -1;
    struct mp_cmd *c = cmd_take(m);
    if (!c)
        return -1;
    *c = (struct mp_cmd){
        .m = m,
        .cdb_len = cdb_len,
        .dir = dir,
        .buf = buf,
        .len = len,
        .done = done,
        .arg = arg,
        .deadline_ms = deadline_ms,
        .path = -1,
        .last_path = -1,
    };
    memcpy(c->cdb, cdb, cdb_len);
    submit(m, c);
    return 0;
}

int lr_mpath_scsi(struct lr_mpath *m, const uint8_t *cdb, unsigned cdb_len, enum lr_dir dir,
                  void *buf, uint32_t len, lr_done_fn done, void *arg)
{
    return scsi_until(m, cdb, cdb_len, dir, buf, len, done, arg,
                      now_ms() + m->o.failover_timeout_ms);
}

static int rw(struct lr_mpath *m, bool write, uint64_t lba, uint32_t blocks, uint32_t bs, void *buf,
              lr_done_fn done, void *arg)
{
    uint8_t cdb[16];
    unsigned len = ini_cdb_rw(cdb, write, lba, blocks);
    uint64_t bytes = (uint64_t)blocks * bs;
    if (bytes > 0xffffffffu)
        return -1;
    return lr_mpath_scsi(m, cdb, len, write ? LR_DIR_WRITE : LR_DIR_READ, buf, (uint32_t)bytes,
                         done, arg);
}

int lr_mpath_read(struct lr_mpath *m, uint64_t lba, uint32_t blocks, uint32_t block_size, void *buf,
                  lr_done_fn done, void *arg)
{
    return rw(m, false, lba, blocks, block_size, buf, done, arg);
}

int lr_mpath_write(struct lr_mpath *m, uint64_t lba, uint32_t blocks, uint32_t block_size,
                   const void *buf, lr_done_fn done, void *arg)
{
    return rw(m, true, lba, blocks, block_size, (void *)buf, done, arg);
}

struct mp_readcap {
    struct lr_mpath *m;
    lr_capacity_fn done;
    void *arg;
    unsigned tries;
    uint8_t buf[32];
};

static int readcap_issue(struct mp_readcap *x);

static void readcap_done(void *arg, const struct lr_result *res)
{
    struct mp_readcap *x = arg;
    uint8_t key, asc, ascq;
    ini_sense_kaa(res->sense, res->sense_len, &key, &asc, &ascq);
    /* a new I_T nexus first sees a unit attention (SAM-5 §5.14): the command did not run */
    if (res->err == LR_SCSI_STATUS && key == 0x6 && x->tries++ < 8 && readcap_issue(x) == 0)
        return;
    uint64_t blocks = 0;
    uint32_t bs = 0;
    if (res->err == LR_OK) {
        blocks = get_be64(x->buf) + 1;
        bs = get_be32(x->buf + 8);
    }
    x->done(x->arg, res, blocks, bs);
    free(x);
}

static int readcap_issue(struct mp_readcap *x)
{
    uint8_t cdb[16] = {0x9e, 0x10}; /* READ CAPACITY (16), SBC-4 §5.20 */
    put_be32(cdb + 10, sizeof(x->buf));
    return lr_mpath_scsi(x->m, cdb, 16, LR_DIR_READ, x->buf, sizeof(x->buf), readcap_done, x);
}

int lr_mpath_read_capacity(struct lr_mpath *m, lr_capacity_fn done, void *arg)
{
    struct mp_readcap *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    *x = (struct mp_readcap){.m = m, .done = done, .arg = arg};
    if (readcap_issue(x) < 0) {
        free(x);
        return -1;
    }
    return 0;
}

/* ---- paths: death, RTPG ---- */

static void relogin_later(struct mp_path *p)
{
    struct lr_mpath *m = p->m;
    if (m->destroying || m->stopping)
        return;
    if (!p->relogin_ms)
        p->relogin_ms = MP_RELOGIN_FIRST_MS;
    lr_timer_start(p->relogin, p->relogin_ms);
    p->relogin_ms = p->relogin_ms * 2 > MP_RELOGIN_MAX_MS ? MP_RELOGIN_MAX_MS : p->relogin_ms * 2;
}

static void on_path_login(void *arg, const struct lr_result *res);
static void relogin_end(struct mp_path *p, const struct lr_result *res);

/* One ISID per path, kept by all its sessions (RFC 7143 §11.12.5, type 0x80 random; the last
 * byte is the path's, so two paths never share one). A session logging in again with it
 * reinstates the lost one (§6.3.5): the target ends the old connections and waits for their
 * tasks before it answers, so a WRITE stuck in the old session (and re-issued on another path
 * meanwhile) cannot land after a WRITE sent through the new one; the path's persistent
 * reservation registrations stay too. The old session is always destroyed before a new one is
 * created (relogin runs only with p->s NULL): two live sessions never share an ISID. */
static void path_isid(struct mp_path *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint32_t q = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec ^ (uint32_t)(uintptr_t)p->m;
    p->isid[0] = 0x80;
    p->isid[1] = (uint8_t)(q >> 24);
    p->isid[2] = (uint8_t)(q >> 16);
    p->isid[3] = (uint8_t)(q >> 8);
    p->isid[4] = (uint8_t)q;
    p->isid[5] = (uint8_t)(0x10 + p->idx);
}

/* A lost path (or one that never logged in) logs in again with a new session and the path's
 * ISID: a reinstatement of the lost session (see path_isid), so nothing of its tasks can
 * reach the target after the new session's (the commands that died on the path are still
 * never sent to it again, see died_on). It carries I/O once its VPD 0x83 and RTPG answered,
 * when its state says so (mpath_pick: AO first). */
static void relogin(void *arg)
{
    struct mp_path *p = arg;
    struct lr_mpath *m = p->m;
    if (m->destroying || m->stopping || p->st != MP_DEAD || p->s)
        return;
    struct lr_session_opts so = m->o.session;
    so.host = p->host;
    so.port = p->port;
    memcpy(so.isid, p->isid, sizeof(so.isid));
    p->s = lr_session_create(m->r, &so);
    if (!p->s) {
        relogin_later(p);
        return;
    }
    p->gen++;
    p->group = -1;
    p->state = LR_ALUA_UNKNOWN;
    p->rtpg_busy = p->rtpg_again = false;
    p->rtpg_ua = 0;
    p->relogging = true;
    p->fresh = true;
    p->st = MP_LOGGING_IN;
    if (lr_session_login(p->s, on_path_login, p) < 0) {
        p->st = MP_DEAD;
        relogin_end(p, NULL); /* counted and logged; reaped, then tried again later */
    }
}

/* The end of a login again: up (its state asked at once), or dead and tried later. */
static void relogin_end(struct mp_path *p, const struct lr_result *res)
{
    struct lr_mpath *m = p->m;
    p->relogging = false;
    if (m->destroying)
        return; /* lr_mpath_destroy ends the session itself */
    if (m->stopping) {
        p->st = MP_DEAD; /* logging out: no new path now */
        lr_timer_start(m->reap, 0);
        return;
    }
    if (p->st == MP_UP) {
        LOG_WARN("multipath: path %u (%s:%u) logged in again (target port group %d) after %u "
                 "failed attempt%s",
                 p->idx, p->host, p->port, p->group, p->relogin_fails,
                 p->relogin_fails == 1 ? "" : "s");
        p->relogins++;
        p->login_failed = false;
        p->commands_now = 0;
        p->relogin_ms = 0;
        p->relogin_fails = 0;
        refresh(m); /* its state, and the others' (the gateway's return may be a failback) */
        return;
    }
    /* one line on the first failure, then one on every twelfth (about a minute apart once at
     * the longest interval), not one per attempt */
    if (++p->relogin_fails % MP_RELOGIN_LOG_EVERY == 1)
        LOG_WARN("multipath: path %u (%s:%u) login again failed (%u in a row): %s", p->idx, p->host,
                 p->port, p->relogin_fails,
                 res && res->what ? res->what
                 : res            ? lr_err_name(res->err)
                                  : "no session");
    p->st = MP_DEAD;
    lr_timer_start(m->reap, 0); /* destroys the session, then relogin_later() */
}

/* Sessions of dead paths are destroyed here, outside their own callbacks. */
static void reap(void *arg)
{
    struct lr_mpath *m = arg;
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *p = &m->paths[i];
        if (p->st == MP_DEAD && p->s) {
            struct lr_session *s = p->s;
            lr_session_destroy(s); /* its commands not yet completed come back: again() */
            p->s = NULL;
            relogin_later(p);
        }
    }
}

static void path_dead(struct mp_path *p, const char *why)
{
    struct lr_mpath *m = p->m;
    if (p->st == MP_DEAD)
        return;
    p->st = MP_DEAD;
    unsigned left = lr_mpath_paths_up(m);
    LOG_WARN("multipath: path %u (%s:%u, group %d) lost: %s; %u path%s left", p->idx, p->host,
             p->port, p->group, why, left, left == 1 ? "" : "s");
    m->paths_lost++;
    lr_timer_start(m->reap, 0);
    refresh(m); /* a path lost may mean a state changed elsewhere (a failover) */
}

static void on_rtpg(void *arg, const struct lr_result *res);

/* One path's REPORT TARGET PORT GROUPS answer: the state it gives for its own target port
 * group is taken, for every path of that group. A port knows its own state; what it says of
 * the other groups is what its gateway was told (linerate's alua-peer, a picture operators
 * keep in step by hand, SPC-4 §5.16.2.5 notwithstanding), and a stale entry there must not
 * send I/O to a port that refuses it, nor keep it from one that takes it. */
static void apply_rtpg(struct mp_path *p, uint32_t len)
{
    struct lr_mpath *m = p->m;
    struct ini_alua_group g[MP_MAX_GROUPS];
    int n = ini_alua_rtpg_parse(p->buf, len, g, MP_MAX_GROUPS);
    if (n < 0) {
        LOG_WARN("multipath: path %u: malformed REPORT TARGET PORT GROUPS answer ignored", p->idx);
        return;
    }
    uint8_t st = LR_ALUA_UNKNOWN;
    for (int k = 0; k < n; k++)
        if (g[k].id == p->group)
            st = g[k].state;
    if (p->group < 0 && n == 1)
        st = g[0].state; /* no group designator in VPD 0x83: a lone group is ours */
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *q = &m->paths[i];
        if (q != p && (p->group < 0 || q->group != p->group))
            continue;
        if (st != q->state && q->st == MP_UP)
            LOG_INFO("multipath: path %u (%s:%u, group %d): %s", i, q->host, q->port, q->group,
                     lr_alua_state_name(st));
        q->state = st;
    }
}

static bool rtpg_pending(const struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++) {
        const struct mp_path *p = &m->paths[i];
        if (p->st == MP_UP && (p->rtpg_busy || p->rtpg_again))
            return true;
    }
    return false;
}

/* Login ends once every live path told its state (a unit attention on each new nexus comes
 * first), or at once when none is live. */
static void login_maybe_done(struct lr_mpath *m)
{
    if (!m->login_rtpg || rtpg_pending(m))
        return;
    m->login_rtpg = false;
    struct lr_result ok = {.err = LR_OK, .conn = -1};
    lr_done_fn done = m->login_done;
    m->login_done = NULL;
    if (done)
        done(m->login_arg, lr_mpath_paths_up(m) ? &ok : &m->login_err);
}

/* REPORT TARGET PORT GROUPS on path p (one at a time; asked again meanwhile, it runs after). */
static void path_refresh(struct mp_path *p)
{
    if (p->st != MP_UP)
        return;
    if (p->rtpg_busy) {
        p->rtpg_again = true;
        return;
    }
    p->rtpg_again = false;
    uint8_t cdb[12];
    ini_alua_rtpg_cdb(cdb, MP_BUF);
    memset(p->buf, 0, sizeof(p->buf));
    if (lr_scsi(p->s, cdb, 12, LR_DIR_READ, p->buf, MP_BUF, on_rtpg, p) == 0)
        p->rtpg_busy = true;
    else if (p->fresh)
        lr_timer_start(p->m->poll, MP_POLL_MS); /* no I/O until it ran: asked at the next tick */
}

/* A path logged in again whose RTPG could not be sent: it carries nothing until it ran. */
static bool fresh_unasked(const struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].st == MP_UP && m->paths[i].fresh && !m->paths[i].rtpg_busy)
            return true;
    return false;
}

/* Every live path tells its state again. */
static void refresh(struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++)
        path_refresh(&m->paths[i]);
    login_maybe_done(m);
}

static void on_rtpg(void *arg, const struct lr_result *res)
{
    struct mp_path *p = arg;
    struct lr_mpath *m = p->m;
    p->rtpg_busy = false;
    if (m->destroying)
        return;
    uint8_t key, asc, ascq;
    ini_sense_kaa(res->sense, res->sense_len, &key, &asc, &ascq);
    if (res->err == LR_OK) {
        p->rtpg_ua = 0;
        uint32_t got = MP_BUF;
        if (res->residual_kind == LR_RESIDUAL_UNDERFLOW && res->residual <= MP_BUF)
            got = MP_BUF - res->residual;
        apply_rtpg(p, got);
    } else if (res->err == LR_SCSI_STATUS && key == 0x6 && p->rtpg_ua++ < MP_RTPG_RETRIES) {
        p->rtpg_again = true; /* a unit attention (2Ah/06h among them): RTPG did not run */
    } else if (res->err == LR_SCSI_STATUS && key == 0x5) {
        /* ILLEGAL REQUEST: no ALUA on this target; every path is as good as another */
        if (!m->no_alua)
            LOG_INFO("multipath: the target has no REPORT TARGET PORT GROUPS: all paths used");
        m->no_alua = true;
    } else if (lost_kind(res->err) && session_gone(p)) {
        path_dead(p, res->what ? res->what : lr_err_name(res->err));
    } else {
        LOG_WARN("multipath: REPORT TARGET PORT GROUPS on path %u failed: %s", p->idx,
                 res->what ? res->what : lr_err_name(res->err));
        p->rtpg_ua = 0;
    }
    /* its own RTPG ran (a new nexus's unit attentions taken by it, not by a caller's command)
     * or gave up: a path logged in again may carry I/O from now on, by its state */
    if (!p->rtpg_again)
        p->fresh = false;
    if (p->rtpg_again)
        path_refresh(p);
    login_maybe_done(m);
    drain(m);
}

/* The commands held while their session recovered, once it is over: the session gave up
 * (Time2Retain passed, or it could not log in again: the target holds none of its tasks any
 * more, §13.16), the path is dead and they go elsewhere; it came back, they are issued again
 * there, after the cleanup of the lost connection (§11.14). Past their deadline they fail
 * with the error that held them. */
static void held_check(struct lr_mpath *m)
{
    struct mp_cmd *c = m->held, **link = &m->held;
    while (c) {
        struct mp_cmd *next = c->next;
        struct mp_path *p = &m->paths[c->path];
        bool old = c->gen != p->gen; /* its session was lost and the path logged in anew */
        if (!old && session_recovering(p) && now_ms() < c->deadline_ms) {
            link = &c->next;
            c = next;
            continue;
        }
        *link = next;
        struct lr_result res = c->last;
        if (now_ms() >= c->deadline_ms) {
            finish(c, &res);
        } else {
            if (old) {
                c->died_on |= 1u << c->path;
            } else if (session_gone(p)) {
                c->died_on |= 1u << c->path;
                path_dead(p, res.what ? res.what : lr_err_name(res.err));
            }
            again(c, &res);
        }
        c = next;
    }
}

/* While commands wait for a usable path (or a path logged in again could not ask its state):
 * ask the states again, and let the ones past their deadline fail. */
static void poll_tick(void *arg)
{
    struct lr_mpath *m = arg;
    if (m->held)
        held_check(m);
    if (m->wait_head || fresh_unasked(m)) {
        refresh(m);
        drain(m);
    }
    if (m->wait_head || m->held || fresh_unasked(m))
        lr_timer_start(m->poll, MP_POLL_MS);
}

/* ---- login and logout ---- */

static void login_one_done(struct lr_mpath *m)
{
    if (--m->login_pending)
        return;
    m->login_rtpg = true;
    refresh(m); /* calls login_done with the error when no path is up */
}

static void on_vpd(void *arg, const struct lr_result *res)
{
    struct mp_path *p = arg;
    struct lr_mpath *m = p->m;
    uint16_t g;
    if (m->destroying)
        return; /* lr_mpath_destroy ends this session: nothing else may run (paths gone) */
    if (res->err == LR_OK && ini_alua_vpd83_group(p->buf, MP_BUF, &g) == 0)
        p->group = g;
    if (res->err != LR_OK && lost_kind(res->err)) {
        p->st = MP_DEAD;
        lr_timer_start(m->reap, 0);
    } else {
        p->st = MP_UP;
    }
    if (p->relogging) {
        relogin_end(p, res);
        return;
    }
    LOG_INFO("multipath: path %u (%s:%u) logged in, target port group %d", p->idx, p->host, p->port,
             p->group);
    login_one_done(m);
}

static void on_path_login(void *arg, const struct lr_result *res)
{
    struct mp_path *p = arg;
    struct lr_mpath *m = p->m;
    if (m->destroying)
        return;
    if (p->relogging && (res->err != LR_OK || m->stopping)) {
        p->st = MP_DEAD;
        relogin_end(p, res);
        return;
    }
    if (res->err != LR_OK) {
        LOG_WARN("multipath: path %u (%s:%u) login failed: %s", p->idx, p->host, p->port,
                 res->what ? res->what : lr_err_name(res->err));
        if (!m->login_err_set)
            m->login_err = *res;
        m->login_err_set = true;
        p->login_failed = true;
        p->st = MP_DEAD;
        lr_timer_start(m->reap, 0);
        login_one_done(m);
        return;
    }
    /* INQUIRY is allowed on every port whatever its state (SPC-4 §5.16.2.4.5) and reports
     * no unit attention (SAM-5 §5.14) */
    p->st = MP_PROBING;
    uint8_t cdb[6];
    ini_alua_vpd83_cdb(cdb, MP_BUF);
    if (lr_scsi(p->s, cdb, 6, LR_DIR_READ, p->buf, MP_BUF, on_vpd, p) < 0) {
        p->st = MP_UP;
        if (p->relogging)
            relogin_end(p, NULL);
        else
            login_one_done(m);
    }
}

int lr_mpath_login(struct lr_mpath *m, lr_done_fn done, void *arg)
{
    if (m->login_done || m->login_pending)
        return -1;
    m->login_done = done;
    m->login_arg = arg;
    m->login_err = (struct lr_result){.err = LR_ERR_NO_CONN, .what = "no path logged in"};
    m->login_err_set = false;
    unsigned started = 0;
    m->login_pending = m->npaths + 1; /* held until every login is under way */
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *p = &m->paths[i];
        if (p->st != MP_IDLE)
            continue;
        p->st = MP_LOGGING_IN;
        if (lr_session_login(p->s, on_path_login, p) < 0) {
            p->st = MP_DEAD;
            lr_timer_start(m->reap, 0); /* reaped, then logged in again later */
            m->login_pending--;
            continue;
        }
        started++;
    }
    if (!started) {
        m->login_pending = 0;
        m->login_done = NULL;
        return -1;
    }
    login_one_done(m);
    return 0;
}

static void on_path_logout(void *arg, const struct lr_result *res)
{
    struct mp_path *p = arg;
    struct lr_mpath *m = p->m;
    (void)res;
    p->st = MP_LOGGED_OUT;
    if (--m->logout_pending == 0 && m->logout_done) {
        lr_done_fn done = m->logout_done;
        m->logout_done = NULL;
        struct lr_result ok = {.err = LR_OK, .conn = -1};
        done(m->logout_arg, &ok);
    }
}

int lr_mpath_logout(struct lr_mpath *m, lr_done_fn done, void *arg)
{
    lr_timer_stop(m->poll);
    m->stopping = true;
    for (unsigned i = 0; i < m->npaths; i++)
        lr_timer_stop(m->paths[i].relogin);
    m->logout_done = done;
    m->logout_arg = arg;
    m->logout_pending = 1;
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *p = &m->paths[i];
        if (p->st != MP_UP)
            continue;
        m->logout_pending++;
        if (lr_session_logout(p->s, on_path_logout, p) < 0)
            m->logout_pending--;
    }
    struct mp_path none = {.m = m};
    on_path_logout(&none, NULL);
    return 0;
}

/* ---- life ---- */

struct lr_mpath *lr_mpath_create(struct reactor *r, const struct lr_mpath_opts *o)
{
    if (!o->npaths || o->npaths > LR_MPATH_MAX_PATHS) {
        errno = EINVAL;
        return NULL;
    }
    for (unsigned i = 0; i < LR_MAX_CONNECTIONS; i++)
        if (o->session.conn_reactors[i]) {
            errno = EINVAL;
            return NULL;
        }
    struct lr_mpath *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->r = r;
    m->o = *o;
    if (!m->o.failover_timeout_ms)
        m->o.failover_timeout_ms = 60000;
    m->npaths = o->npaths;
    m->ncmds = o->session.max_tasks ? o->session.max_tasks : 1024;
    m->cmds = calloc(m->ncmds, sizeof(*m->cmds));
    m->poll = lr_timer_new(r, poll_tick, m);
    m->reap = lr_timer_new(r, reap, m);
    if (!m->cmds || !m->poll || !m->reap)
        goto fail;
    for (uint32_t i = m->ncmds; i-- > 0;) {
        m->cmds[i].m = m;
        m->cmds[i].next = m->free_cmds;
        m->free_cmds = &m->cmds[i];
    }
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *p = &m->paths[i];
        p->m = m;
        p->idx = i;
        p->group = -1;
        p->state = LR_ALUA_UNKNOWN;
        snprintf(p->host, sizeof(p->host), "%s", o->hosts[i] ? o->hosts[i] : "");
        p->port = o->ports[i] ? o->ports[i] : 3260;
        p->relogin = lr_timer_new(r, relogin, p);
        if (!p->relogin)
            goto fail;
        path_isid(p);
        struct lr_session_opts so = o->session;
        so.host = p->host;
        so.port = p->port;
        memcpy(so.isid, p->isid, sizeof(so.isid));
        p->s = lr_session_create(r, &so);
        if (!p->s)
            goto fail;
    }
    return m;
fail:
    lr_mpath_destroy(m);
    errno = ENOMEM;
    return NULL;
}

void lr_mpath_destroy(struct lr_mpath *m)
{
    if (!m)
        return;
    m->destroying = true;
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].s) {
            m->paths[i].st = MP_DEAD; /* no callback of another path's end may use it */
            lr_session_destroy(m->paths[i].s);
            m->paths[i].s = NULL;
        }
    struct mp_cmd *c = m->wait_head;
    m->wait_head = m->wait_tail = NULL;
    if (c) {
        struct mp_cmd *t = c;
        while (t->next)
            t = t->next;
        t->next = m->held;
    } else {
        c = m->held;
    }
    m->held = NULL;
    while (c) {
        struct mp_cmd *next = c->next;
        struct lr_result r = {.err = LR_ERR_ABORTED, .what = "multipath device destroyed"};
        c->path = -1;
        finish(c, &r);
        c = next;
    }
    for (unsigned i = 0; i < m->npaths; i++)
        lr_timer_free(m->paths[i].relogin);
    lr_timer_free(m->poll);
    lr_timer_free(m->reap);
    free(m->cmds);
    free(m);
}

unsigned lr_mpath_paths_up(const struct lr_mpath *m)
{
    unsigned n = 0;
    for (unsigned i = 0; i < m->npaths; i++)
        n += m->paths[i].st == MP_UP && !m->paths[i].fresh;
    return n;
}

bool lr_mpath_path_info(const struct lr_mpath *m, unsigned i, struct lr_mpath_path_info *out)
{
    if (i >= m->npaths)
        return false;
    const struct mp_path *p = &m->paths[i];
    *out = (struct lr_mpath_path_info){
        .host = p->host,
        .port = p->port,
        .up = p->st == MP_UP && !p->fresh,
        .lost = p->st == MP_DEAD && !p->login_failed,
        .login_failed = p->login_failed,
        .group = p->group,
        .state = m->no_alua ? LR_ALUA_AO : p->state,
        .commands = p->commands,
        .reissued = p->reissued,
        .relogins = p->relogins,
        .commands_now = p->commands_now,
    };
    if (p->s && p->st == MP_UP) {
        struct lr_session_info info;
        lr_session_get_info(p->s, &info);
        out->header_digest = info.header_digest;
        out->data_digest = info.data_digest;
    }
    return true;
}

void lr_mpath_counts(const struct lr_mpath *m, uint64_t *paths_lost, uint64_t *reissued)
{
    *paths_lost = m->paths_lost;
    *reissued = m->reissued;
}

void lr_mpath_caw_counts(const struct lr_mpath *m, uint64_t *checked, uint64_t *landed)
{
    *checked = m->caw_checked;
    *landed = m->caw_landed;
}
