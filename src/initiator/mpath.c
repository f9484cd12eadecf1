/* The multipath device (linerate/multipath.h): a session per portal to one LUN, paths chosen
 * by ALUA state (mpath_pick.c, from the RTPG answers alua.c reads), commands carried to
 * another path when theirs died. This file is the commands' half: which path a command takes,
 * and where it goes again when its path failed or said it does not serve the LU now; the
 * paths' own life (login, logging in again, states) is mpath_path.c's. Uses only the public
 * session API, on one reactor. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "initiator/alua.h"
#include "initiator/cdb.h"
#include "initiator/mpath_caw.h"
#include "initiator/mpath_path.h"
#include "initiator/mpath_pick.h"
#include "util/bytes.h"
#include "util/log.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void submit(struct lr_mpath *m, struct mp_cmd *c);

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
            ini_mpath_path_dead(p, "no connection left");
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

/* The state a port is in when it refuses a command with that sense (SPC-4 §5.16.2.4.5-.7);
 * 2Ah/06h says only that some state changed: RTPG tells which. */
static const uint8_t state_of_sense[] = {
    [INI_SENSE_STANDBY] = LR_ALUA_STANDBY,
    [INI_SENSE_UNAVAILABLE] = LR_ALUA_UNAVAILABLE,
    [INI_SENSE_TRANSITION] = LR_ALUA_TRANSITIONING,
};

static void on_cmd(void *arg, const struct lr_result *res)
{
    struct mp_cmd *c = arg;
    struct lr_mpath *m = c->m;
    struct mp_path *p = &m->paths[c->path];
    if (m->destroying) {
        finish(c, res);
        return;
    }
    enum ini_alua_sense says =
        res->err == LR_SCSI_STATUS ? ini_alua_sense(res->sense, res->sense_len) : INI_SENSE_OTHER;
    if (says != INI_SENSE_OTHER) {
        /* the command did not run: the path's state changed, or its port does not serve the
         * LU now; it goes again, where the states now say */
        if (says == INI_SENSE_AAS_CHANGED)
            ini_mpath_refresh(m);
        else
            ini_mpath_not_here(m, p, state_of_sense[says]);
        again(c, res);
        return;
    }
    if (ini_mpath_recovery_kind(p, res)) {
        hold(m, c, res);
        return;
    }
    if (ini_mpath_lost_kind(res->err) && ini_mpath_session_gone(p)) {
        c->died_on |= 1u << c->path;
        c->unsure = true;
        ini_mpath_path_dead(p, res->what ? res->what : lr_err_name(res->err));
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

/* ---- commands held or waiting ---- */

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
        if (!old && ini_mpath_session_recovering(p) && now_ms() < c->deadline_ms) {
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
            } else if (ini_mpath_session_gone(p)) {
                c->died_on |= 1u << c->path;
                ini_mpath_path_dead(p, res.what ? res.what : lr_err_name(res.err));
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
    if (m->wait_head || ini_mpath_fresh_unasked(m)) {
        ini_mpath_refresh(m);
        drain(m);
    }
    if (m->wait_head || m->held || ini_mpath_fresh_unasked(m))
        lr_timer_start(m->poll, MP_POLL_MS);
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
    m->state_known = drain;
    m->poll = lr_timer_new(r, poll_tick, m);
    if (!m->cmds || !m->poll)
        goto fail;
    for (uint32_t i = m->ncmds; i-- > 0;) {
        m->cmds[i].m = m;
        m->cmds[i].next = m->free_cmds;
        m->free_cmds = &m->cmds[i];
    }
    if (ini_mpath_paths_init(m) < 0)
        goto fail;
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
    ini_mpath_paths_end(m);
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
    ini_mpath_paths_free(m);
    lr_timer_free(m->poll);
    free(m->cmds);
    free(m);
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
