/* Path life of the multipath device (mpath_path.h): login and logout of every path, a lost
 * path logged in again with back-off, and each path's ALUA state from its RTPG answers. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "initiator/alua.h"
#include "initiator/mpath_path.h"
#include "util/log.h"

#define MP_RTPG_RETRIES 8 /* unit attentions in a row on RTPG (each is reported once) */
#define MP_MAX_GROUPS 16
/* A lost path logs in again after 100 ms, then 200, 400... at most 5 s apart: a gateway that
 * restarts is used again within seconds, one that stays down costs a connect every 5 s. */
#define MP_RELOGIN_FIRST_MS 100
#define MP_RELOGIN_MAX_MS 5000
#define MP_RELOGIN_LOG_EVERY 12

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

/* ---- sessions ---- */

bool ini_mpath_lost_kind(enum lr_err e)
{
    return e == LR_ERR_CONN_LOST || e == LR_ERR_TIMEOUT || e == LR_ERR_NO_CONN || e == LR_ERR_IO ||
           e == LR_ERR_ABORTED;
}

/* The session of p cannot complete anything any more: every connection lost and its own
 * recovery (ERL 2, or a login after a logout the target asked for) over, or we destroyed it. */
bool ini_mpath_session_gone(const struct mp_path *p)
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
bool ini_mpath_recovery_kind(const struct mp_path *p, const struct lr_result *res)
{
    return p->st != MP_DEAD && (res->err == LR_ERR_CONN_LOST || res->err == LR_ERR_TIMEOUT) &&
           lr_session_conn_recovering(p->s, res->conn);
}

bool ini_mpath_session_recovering(const struct mp_path *p)
{
    if (p->st == MP_DEAD || !p->s)
        return false;
    struct lr_session_info info;
    lr_session_get_info(p->s, &info);
    return info.recovering;
}

/* ---- death and logging in again ---- */

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
        /* its state, and the others' (the gateway's return may be a failback) */
        ini_mpath_refresh(m);
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

void ini_mpath_path_dead(struct mp_path *p, const char *why)
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
    ini_mpath_refresh(m); /* a path lost may mean a state changed elsewhere (a failover) */
}

/* ---- ALUA states: RTPG ---- */

static void on_rtpg(void *arg, const struct lr_result *res);

static void set_group_state(struct lr_mpath *m, int group, uint8_t state)
{
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].group == group)
            m->paths[i].state = state;
}

/* The port said it does not take I/O for the LU now (SPC-4 §5.16.2.4.5-.7): none on it until
 * RTPG says otherwise. A target without RTPG (no_alua) keeps every path usable. */
void ini_mpath_not_here(struct lr_mpath *m, struct mp_path *p, uint8_t state)
{
    if (!m->no_alua) {
        if (p->group >= 0)
            set_group_state(m, p->group, state);
        p->state = state;
    }
    ini_mpath_refresh(m);
}

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
bool ini_mpath_fresh_unasked(const struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].st == MP_UP && m->paths[i].fresh && !m->paths[i].rtpg_busy)
            return true;
    return false;
}

/* Every live path tells its state again. */
void ini_mpath_refresh(struct lr_mpath *m)
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
    } else if (ini_mpath_lost_kind(res->err) && ini_mpath_session_gone(p)) {
        ini_mpath_path_dead(p, res->what ? res->what : lr_err_name(res->err));
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
    m->state_known(m); /* the commands waiting for a path try again */
}

/* ---- login and logout ---- */

static void login_one_done(struct lr_mpath *m)
{
    if (--m->login_pending)
        return;
    m->login_rtpg = true;
    ini_mpath_refresh(m); /* calls login_done with the error when no path is up */
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
    if (res->err != LR_OK && ini_mpath_lost_kind(res->err)) {
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

/* ---- the paths of a device ---- */

int ini_mpath_paths_init(struct lr_mpath *m)
{
    m->reap = lr_timer_new(m->r, reap, m);
    if (!m->reap)
        return -1;
    for (unsigned i = 0; i < m->npaths; i++) {
        struct mp_path *p = &m->paths[i];
        p->m = m;
        p->idx = i;
        p->group = -1;
        p->state = LR_ALUA_UNKNOWN;
        snprintf(p->host, sizeof(p->host), "%s", m->o.hosts[i] ? m->o.hosts[i] : "");
        p->port = m->o.ports[i] ? m->o.ports[i] : 3260;
        p->relogin = lr_timer_new(m->r, relogin, p);
        if (!p->relogin)
            return -1;
        path_isid(p);
        struct lr_session_opts so = m->o.session;
        so.host = p->host;
        so.port = p->port;
        memcpy(so.isid, p->isid, sizeof(so.isid));
        p->s = lr_session_create(m->r, &so);
        if (!p->s)
            return -1;
    }
    return 0;
}

void ini_mpath_paths_end(struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++)
        if (m->paths[i].s) {
            m->paths[i].st = MP_DEAD; /* no callback of another path's end may use it */
            lr_session_destroy(m->paths[i].s);
            m->paths[i].s = NULL;
        }
}

void ini_mpath_paths_free(struct lr_mpath *m)
{
    for (unsigned i = 0; i < m->npaths; i++)
        lr_timer_free(m->paths[i].relogin);
    lr_timer_free(m->reap);
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
