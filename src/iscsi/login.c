/* The login phase on the target (RFC 7143 §6): stages and transit rules, text spread over
 * C-bit PDUs both ways, key negotiation through the shared engine, target lookup and ACL,
 * CHAP in the security stage (iscsi/auth.c; a target or discovery with CHAP configured cannot
 * be entered without it), session creation, reinstatement (§6.3.5) and joining an existing
 * session (MC/S), and a login status class/detail for every refusal. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/auth.h"
#include "iscsi/conn.h"
#include "iscsi/login.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "util/log.h"

unsigned iscsi_target_erl_max = ISCSI_ERL_IMPLEMENTED;

static const char *login_status_text(enum iscsi_login_status st)
{
    switch (st) {
    case ISCSI_LOGIN_INITIATOR_ERROR:
        return "initiator error";
    case ISCSI_LOGIN_AUTH_FAILED:
        return "authentication failed";
    case ISCSI_LOGIN_AUTHZ_FAILED:
        return "initiator not allowed (ACL)";
    case ISCSI_LOGIN_NOT_FOUND:
        return "target not found";
    case ISCSI_LOGIN_UNSUPPORTED_VERSION:
        return "unsupported version";
    case ISCSI_LOGIN_TOO_MANY_CONNECTIONS:
        return "too many connections";
    case ISCSI_LOGIN_MISSING_PARAMETER:
        return "missing parameter";
    case ISCSI_LOGIN_CANT_INCLUDE_IN_SESSION:
        return "cannot include in session";
    case ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED:
        return "session type not supported";
    case ISCSI_LOGIN_SESSION_DOES_NOT_EXIST:
        return "session does not exist";
    case ISCSI_LOGIN_INVALID_DURING_LOGIN:
        return "invalid request during login";
    case ISCSI_LOGIN_TARGET_ERROR:
        return "target error";
    case ISCSI_LOGIN_SERVICE_UNAVAILABLE:
        return "service unavailable";
    case ISCSI_LOGIN_OUT_OF_RESOURCES:
        return "out of resources";
    default:
        return "refused";
    }
}

static void login_log_abandoned(struct iscsi_conn *c);

void login_conn_cleanup(struct iscsi_conn *c)
{
    iscsi_text_reset(&c->login_in);
    iscsi_text_reset(&c->login_out);
    if (c->auth) {
        reactor_timer_stop(c->reactor, &c->auth->fail_timer);
        if (c->auth->waiting || c->auth->failing)
            login_log_abandoned(c);
        iscsi_auth_free(c->auth);
        c->auth = NULL;
    }
}

static struct wire_pdu *login_rsp_alloc(struct iscsi_conn *c, uint8_t flags)
{
    struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_LOGIN_RSP, flags);
    if (!p)
        return NULL;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_VERSION_MAX] = 0;
    h->b[BHS_VERSION_MIN] = 0; /* version-active */
    memcpy(h->b + BHS_ISID, c->login_isid, 6);
    bhs_put32(h, BHS_ITT, c->login_itt);
    return p;
}

static void login_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h)
{
    bhs_put32(h, BHS_STATSN, c->statsn++);
    uint32_t exp, max;
    if (c->session) {
        session_window(c->session, &exp, &max);
    } else {
        /* Login does not advance CmdSN: the login request's CmdSN is the first command's. */
        exp = c->login_cmdsn;
        max = exp + ISCSI_CMD_WINDOW - 1;
    }
    bhs_put32(h, BHS_EXPCMDSN, exp);
    bhs_put32(h, BHS_MAXCMDSN, max);
}

/* Refuse the login with a status and close once the answer is out (§11.13.5). */
static void login_log_refused(struct iscsi_conn *c, enum iscsi_login_status st, const char *detail,
                              const char *after)
{
    char ini[2 * ISCSI_NAME_MAX + 3];
    CONN_LOG_LOGIN(c, LOG_LVL_WARN, "%s: login refused (%s, status 0x%04x)%s%s%s%s%s", c->peer,
                   login_status_text(st), st, c->neg.initiator_name[0] ? " initiator " : "",
                   c->neg.initiator_name[0] ? log_quote(ini, sizeof(ini), c->neg.initiator_name)
                                            : "",
                   detail ? ": " : "", detail ? detail : "", after);
}

static int login_fail(struct iscsi_conn *c, enum iscsi_login_status st, const char *detail)
{
    login_log_refused(c, st, detail, "");
    struct wire_pdu *p = login_rsp_alloc(c, 0);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_STATUS_CLASS] = (uint8_t)(st >> 8);
    h->b[BHS_STATUS_DETAIL] = (uint8_t)st;
    login_fill_sn(c, h);
    conn_send(c, p);
    c->phase = CONN_LOGGED_OUT; /* close after flushing */
    return ISCSI_OK;
}

static void login_auth_fail_fire(void *arg)
{
    struct iscsi_conn *c = arg;
    assert(!c->dead); /* conn_close() stops this timer (login_conn_cleanup) */
    c->auth->failing = false;
    conn_fail(c, login_fail(c, ISCSI_LOGIN_AUTH_FAILED, c->auth->detail));
}

/* A failure counted for this connection's address: the reason for its log line in `detail`
 * (address, target, reason, failures in a row). Returns the delay of the answer. */
static uint32_t login_count_failure(struct iscsi_conn *c, const char *why, char *detail, size_t len)
{
    char addr[sizeof(c->peer)];
    conn_peer_addr(c, addr, sizeof(addr));
    unsigned n = 0;
    uint32_t ms = c->srv->auth_guard ? auth_guard_failed(c->srv->auth_guard, addr, &n) : 0;
    /* the answer must beat the login deadline (login-timeout from accept, checked once a
     * second), or the initiator would see a silent close instead of 0201h */
    uint64_t now = reactor_now_ms();
    uint64_t deadline = c->accept_ms + (uint64_t)c->srv->login_timeout_s * 1000;
    if (ms && now + ms + 1500 > deadline)
        ms = deadline > now + 1500 ? (uint32_t)(deadline - now - 1500) : 0;
    snprintf(detail, len, "CHAP, %s%s: %s; failure %u in a row from %s, answered after %u ms",
             c->discovery ? "discovery session" : "target ",
             c->discovery ? "" : (c->node ? c->node->name : c->neg.target_name),
             why ? why : "authentication failed", n, addr, ms);
    return ms;
}

/* The connection closed while its CHAP response waited for its turn, or for the answer to
 * its failure: a guesser giving up on a slow answer. Still an authentication failure from
 * that address, counted (if it was not yet) and logged. */
static void login_log_abandoned(struct iscsi_conn *c)
{
    if (c->auth->waiting)
        login_count_failure(c, "response not checked (its turn had not come)", c->auth->detail,
                            sizeof(c->auth->detail));
    c->auth->waiting = c->auth->failing = false;
    unsigned sup; /* as many as a guesser opens connections: rate limited */
    if (!iscsi_server_log_allow(c->srv, &sup))
        return;
    if (sup)
        LOG_WARN("%u more lines about connections not logged in not logged", sup);
    login_log_refused(c, ISCSI_LOGIN_AUTH_FAILED, c->auth->detail,
                      "; the connection closed before the answer");
}

/* An authentication failure: always status 0201h, whatever the cause (unknown user, wrong
 * secret, malformed or missing key), so that a prober learns nothing from the answer. The
 * answer waits 1 s, 2 s, 4 s... up to 10 s by failures in a row from this address (a reactor
 * timer, the reactor keeps serving), which makes guessing secrets slow; the connection
 * ignores what it sends meanwhile. */
static int login_fail_auth(struct iscsi_conn *c, const char *why)
{
    char local[sizeof(c->auth->detail)];
    /* one warn line, when the answer goes: address, initiator (login_fail), target, reason */
    char *detail = c->auth ? c->auth->detail : local;
    uint32_t ms = login_count_failure(c, why, detail, sizeof(local));
    if (!c->auth || !ms)
        return login_fail(c, ISCSI_LOGIN_AUTH_FAILED, detail);
    c->auth->failing = true;
    reactor_timer_start(c->reactor, &c->auth->fail_timer, ms, login_auth_fail_fire, c);
    return ISCSI_OK;
}

/* Send the next chunk of login_out; C bit while more follows (§6.1.1, text over PDUs). */
static int login_send_chunk(struct iscsi_conn *c, uint8_t transit_flags)
{
    uint32_t left = c->login_out.len - c->login_out_off;
    uint32_t n = left < 8192u ? left : 8192u;
    bool more = left > n;
    uint8_t flags = more ? ISCSI_FLAG_CONTINUE : transit_flags;
    flags |= (uint8_t)(c->login_stage << 2);
    struct wire_pdu *p = login_rsp_alloc(c, flags);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    if (!more && (transit_flags & ISCSI_LOGIN_TRANSIT) &&
        ISCSI_LOGIN_NSG(transit_flags) == ISCSI_STAGE_FULL_FEATURE && c->session)
        put_be16(h->b + BHS_TSIH, c->session->tsih);
    login_fill_sn(c, h);
    int rc = conn_send_copy(c, p, c->login_out.data + c->login_out_off, n);
    if (rc < 0)
        return rc;
    c->login_out_off += n;
    if (!more) {
        iscsi_text_reset(&c->login_out);
        c->login_out_off = 0;
    }
    return ISCSI_OK;
}

/* The whole first request is in: choose the target before negotiating, since its parameters
 * are our side's limits. */
static enum iscsi_login_status login_pick_node(struct iscsi_conn *c, const char *text, uint32_t len)
{
    struct iscsi_text_iter *it = malloc(sizeof(*it));
    if (!it)
        return ISCSI_LOGIN_OUT_OF_RESOURCES;
    iscsi_text_iter_init(it, text, len);
    const char *k, *v;
    bool discovery = false;
    char target[ISCSI_NAME_MAX + 1] = "", initiator[ISCSI_NAME_MAX + 1] = "";
    while (iscsi_text_next(it, &k, &v) == 1) {
        if (strcmp(k, "SessionType") == 0 && strcmp(v, "Discovery") == 0)
            discovery = true;
        else if (strcmp(k, "TargetName") == 0)
            snprintf(target, sizeof(target), "%s", v);
        /* the first: a second, different one is refused by the negotiation (keys.c) */
        else if (strcmp(k, "InitiatorName") == 0 && !initiator[0])
            snprintf(initiator, sizeof(initiator), "%s", v);
    }
    free(it);
    c->discovery = discovery;
    struct iscsi_params local;
    if (!discovery && target[0]) {
        c->node = iscsi_server_find_node(c->srv, target);
        if (!c->node)
            return ISCSI_LOGIN_NOT_FOUND;
        local = c->node->params;
    } else {
        iscsi_params_default(&local);
        local.max_recv_dsl = ISCSI_TARGET_MRDSL_MAX;
        /* a discovery session takes the first node's preferences */
        unsigned bound = iscsi_server_node_bound(c->srv);
        for (unsigned i = 0; i < bound; i++) {
            struct iscsi_node *n = iscsi_server_node(c->srv, i);
            if (n) {
                local = n->params;
                break;
            }
        }
    }
    if (local.max_recv_dsl > ISCSI_TARGET_MRDSL_MAX)
        local.max_recv_dsl = ISCSI_TARGET_MRDSL_MAX;
    if (local.max_connections > ISCSI_MAX_CONNECTIONS)
        local.max_connections = ISCSI_MAX_CONNECTIONS;
    if (local.max_outstanding_r2t > ISCSI_MAX_R2T)
        local.max_outstanding_r2t = ISCSI_MAX_R2T;
    /* The configuration never holds a level we cannot perform (target_parse_erl). A
     * discovery session only exchanges Text: a lost answer is simply asked again, so it
     * stays at ERL 0 whatever the first node prefers. */
    assert(local.erl <= iscsi_target_erl_max);
    if (discovery)
        local.erl = 0;
    iscsi_neg_init(&c->neg, ISCSI_SIDE_TARGET, &local);
    c->neg.leading = c->login_tsih == 0;
    /* CHAP configured for this target (or for discovery), or for this initiator's entry of
     * the target (over the target's): AuthMethod=None is refused and the CHAP keys go to this
     * connection's exchange (RFC 7143 §12.1.3). Copied under the lock: a reload may replace
     * them now (linerate-ctl reload). */
    pthread_mutex_lock(&c->srv->chap_lock);
    const struct chap_creds *cr = discovery ? &c->srv->discovery_chap
                                  : c->node ? iscsi_node_chap_for(c->node, initiator)
                                            : NULL;
    if (cr && cr->user[0])
        c->auth = iscsi_auth_new(cr);
    bool want = cr && cr->user[0];
    pthread_mutex_unlock(&c->srv->chap_lock);
    if (want) {
        if (!c->auth)
            return ISCSI_LOGIN_OUT_OF_RESOURCES;
        c->neg.auth_required = true;
        c->neg.auth_key = iscsi_auth_key;
        c->neg.auth_ctx = c->auth;
    }
    return ISCSI_LOGIN_OK;
}

/* Checks once the initiator's declarations are known (after the first request). */
static enum iscsi_login_status login_check_identity(struct iscsi_conn *c, const char **why)
{
    struct iscsi_neg *n = &c->neg;
    if (!n->initiator_name[0]) {
        *why = "no InitiatorName";
        return ISCSI_LOGIN_MISSING_PARAMETER;
    }
    if (n->session_type == ISCSI_SESSION_DISCOVERY) {
        c->discovery = true;
        return ISCSI_LOGIN_OK;
    }
    if (!n->target_name[0]) {
        *why = "no TargetName for a normal session";
        return ISCSI_LOGIN_MISSING_PARAMETER;
    }
    if (!c->node) {
        *why = n->target_name;
        return ISCSI_LOGIN_NOT_FOUND;
    }
    /* A target is reached through its own portals, those SendTargets gives as its
     * TargetAddress (RFC 7143 Appendix C); a listener shared with another target, or a portal
     * removed from it at run time, does not lead to it. */
    if (c->portal && !iscsi_node_has_portal(c->node, c->portal->text)) {
        *why = "target not served on this portal";
        return ISCSI_LOGIN_NOT_FOUND;
    }
    if (!iscsi_node_allows(c->node, n->initiator_name)) {
        *why = c->node->name;
        return ISCSI_LOGIN_AUTHZ_FAILED;
    }
    if (c->login_tsih != 0) {
        struct iscsi_session *s = session_lookup(c->srv, c->login_tsih);
        if (!s || s->node != c->node || memcmp(s->isid, c->login_isid, 6) != 0 ||
            strcmp(s->initiator_name, n->initiator_name) != 0) {
            if (s)
                session_put(s);
            *why = "TSIH does not name a session of this initiator";
            return ISCSI_LOGIN_SESSION_DOES_NOT_EXIST;
        }
        session_put(s);
    }
    return ISCSI_LOGIN_OK;
}

/* The transit to full feature phase: create or join the session, switch digests on. */
static enum iscsi_login_status login_enter_ffp(struct iscsi_conn *c)
{
    struct iscsi_params p;
    iscsi_neg_result(&c->neg, &p);
    /* Asked again now, not only at the first login PDU: linerate-ctl may have closed the
     * target to this initiator during the exchange (CHAP round trips take a while), and
     * `allow --force` logs out only the sessions that exist when it looks. What is left is
     * the moment between this check and the session entering the table. */
    if (!c->discovery && c->node && !iscsi_node_allows(c->node, c->neg.initiator_name))
        return ISCSI_LOGIN_AUTHZ_FAILED;
    if (c->login_tsih == 0) {
        if (!c->discovery) {
            struct scsi_join *closed = session_takeover_begin(c);
            session_reinstate(c->srv, c->neg.initiator_name, c->login_isid, c->node, c, closed);
            session_takeover_end(closed);
        }
        struct iscsi_session *s = session_create(c, &p);
        if (!s)
            return ISCSI_LOGIN_OUT_OF_RESOURCES;
        /* who the session authenticated as, for linerate-ctl show sessions */
        if (c->auth && c->auth->state == AUTH_DONE)
            snprintf(s->chap_user, sizeof(s->chap_user), "%s", c->auth->user);
        session_add_conn(s, c);
    } else {
        struct iscsi_session *s = session_lookup(c->srv, c->login_tsih);
        if (!s)
            return ISCSI_LOGIN_SESSION_DOES_NOT_EXIST;
        /* §6.3.4: at ERL 2 a target must take a connection that reinstates one of the
         * session's (same CID) even at MaxConnections: it replaces that one. */
        bool reinstating = s->params.erl >= 2 && session_has_conn(s, c->cid);
        pthread_mutex_lock(&s->lock);
        bool full = s->nconns - (reinstating ? 1u : 0u) >= s->params.max_connections || s->closing;
        pthread_mutex_unlock(&s->lock);
        if (full) {
            session_put(s);
            return ISCSI_LOGIN_TOO_MANY_CONNECTIONS;
        }
        /* Connection reinstatement (§6.3.4): a new login with a CID in use replaces it, an
         * implicit Logout "remove the connection for recovery" at ERL 2 (its tasks kept for
         * TASK REASSIGN), "close the connection" below (§11.14). The first Login Request of a
         * restart carries the old connection's ExpStatSN (§11.12): the answers below it were
         * received and are not kept, as a Logout's ExpStatSN does. Were they kept, a TASK
         * REASSIGN could claim one by an ITT the initiator has since given to a new command. */
        uint32_t acked = c->login_expstatsn;
        /* below ERL 2 the replaced connection's commands end with it: wait for them */
        struct scsi_join *closed = s->params.erl < 2 ? session_takeover_begin(c) : NULL;
        /* At ERL 2 the CID's last connection takes the acknowledgement: still up, or gone
         * (or going) with its answers in its orphan group (session_close_conn_by_cid). */
        unsigned n = session_close_conn_by_cid(s, c->cid, s->params.erl < 2,
                                               s->params.erl >= 2 ? &acked : NULL, closed);
        session_takeover_end(closed);
        if (n)
            LOG_INFO("%s: CID %u: %u answered task(s) acknowledged by the login (ExpStatSN %u): "
                     "not kept for reassignment",
                     c->peer, c->cid, n, acked);
        /* Session-wide values come from the leading login; connection-only ones are ours. */
        struct iscsi_params sp = s->params;
        sp.header_digest = p.header_digest;
        sp.data_digest = p.data_digest;
        sp.max_recv_dsl = p.max_recv_dsl;
        sp.peer_max_recv_dsl = p.peer_max_recv_dsl;
        p = sp;
        session_add_conn(s, c);
        session_put(s);
    }
    c->max_recv_dsl = p.max_recv_dsl;
    c->max_send_dsl = p.peer_max_recv_dsl;
    if (c->max_send_dsl > ISCSI_MRDSL_MAX)
        c->max_send_dsl = ISCSI_MRDSL_MAX;
    return ISCSI_LOGIN_OK;
}

static void login_after_final(struct iscsi_conn *c, uint8_t rsp_flags);
static int login_finish(struct iscsi_conn *c, uint8_t flags);

int login_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint8_t flags = req->b[1];
    bool transit = flags & ISCSI_LOGIN_TRANSIT;
    bool cont = flags & ISCSI_FLAG_CONTINUE;
    enum iscsi_stage csg = (enum iscsi_stage)ISCSI_LOGIN_CSG(flags);
    enum iscsi_stage nsg = (enum iscsi_stage)ISCSI_LOGIN_NSG(flags);
    bool first = !c->login_started;
    c->login_started = true;
    c->login_cmdsn = bhs_get32(req, BHS_CMDSN);
    if (c->auth && (c->auth->failing || c->auth->waiting))
        return ISCSI_OK; /* the refusal is on its way, or the response waits its turn */

    if (first) {
        memcpy(c->login_isid, req->b + BHS_ISID, 6);
        c->login_tsih = get_be16(req->b + BHS_TSIH);
        c->login_itt = bhs_get32(req, BHS_ITT);
        c->cid = get_be16(req->b + BHS_CID);
        c->login_stage = csg;
        /* StatSN: any start value; ExpStatSN of a reinstating initiator is taken as given. */
        c->login_expstatsn = bhs_get32(req, BHS_EXPSTATSN);
        c->statsn = c->login_expstatsn;
        if (c->statsn == 0)
            c->statsn = 1;
        if (req->b[BHS_VERSION_MIN] > 0) {
            return login_fail(c, ISCSI_LOGIN_UNSUPPORTED_VERSION, NULL);
        }
    } else {
        if (memcmp(c->login_isid, req->b + BHS_ISID, 6) != 0 ||
            c->login_tsih != get_be16(req->b + BHS_TSIH)) {
            return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "ISID or TSIH changed during login");
        }
        c->login_itt = bhs_get32(req, BHS_ITT);
    }
    if (csg == 2 || csg == ISCSI_STAGE_FULL_FEATURE || csg != c->login_stage ||
        (transit && (nsg == 2 || nsg <= csg)) || (transit && cont)) {
        return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "invalid stage transition");
    }

    /* The initiator is pulling the rest of a long response of ours (empty request, C=0). */
    if (c->login_out.len && c->login_out_off && c->login_out_off < c->login_out.len) {
        int rc = login_send_chunk(c, c->login_rsp_flags);
        if (rc == ISCSI_OK && c->login_out.len == 0)
            login_after_final(c, c->login_rsp_flags);
        return rc;
    }

    if (iscsi_text_append(&c->login_in, p->data, p->dlen) < 0) {
        return login_fail(c, ISCSI_LOGIN_OUT_OF_RESOURCES, "login text too long");
    }
    if (cont) {
        /* More text follows: acknowledge with an empty response in the same stage. */
        struct wire_pdu *rsp = login_rsp_alloc(c, (uint8_t)(csg << 2));
        if (!rsp)
            return ISCSI_ERR_NOMEM;
        login_fill_sn(c, (struct iscsi_bhs *)rsp->hdr);
        conn_send(c, rsp);
        return ISCSI_OK;
    }

    enum iscsi_login_status st;
    const char *why = NULL;
    if (!c->login_first_done) {
        st = login_pick_node(c, c->login_in.data, c->login_in.len);
        if (st != ISCSI_LOGIN_OK) {
            iscsi_neg_init(&c->neg, ISCSI_SIDE_TARGET, NULL);
            /* a clean negotiation state: nothing of this request was taken, so the
             * refusal's log line names no initiator */
            return login_fail(c, st, "unknown TargetName");
        }
    }
    iscsi_text_reset(&c->login_out);
    st = iscsi_neg_handle(&c->neg, csg, c->login_in.data, c->login_in.len, &c->login_out);
    iscsi_text_reset(&c->login_in);
    if (st != ISCSI_LOGIN_OK) {
        /* In the security stage of a CHAP login every refusal is an authentication failure:
         * a malformed CHAP key answers like a wrong secret. */
        if (c->auth && csg == ISCSI_STAGE_SECURITY) {
            return login_fail_auth(c, c->auth->why ? c->auth->why : "security keys refused");
        }
        return login_fail(c, st, "key negotiation failed");
    }
    if (!c->login_first_done) {
        st = login_check_identity(c, &why);
        if (st != ISCSI_LOGIN_OK) {
            return login_fail(c, st, why);
        }
        if (c->neg.session_type == ISCSI_SESSION_NONE)
            c->neg.session_type = ISCSI_SESSION_NORMAL; /* §13.21 default */
        if (!c->discovery && c->login_tsih == 0) {
            /* §13.9: the target declares its portal group tag in its first response. */
            iscsi_text_addf(&c->login_out, "TargetPortalGroupTag", "%u", c->node->tpgt);
            if (c->node->alias[0])
                iscsi_text_add(&c->login_out, "TargetAlias", c->node->alias);
        }
        c->login_first_done = true;
    }
    return login_finish(c, flags);
}

static void login_auth_resume(void *arg)
{
    struct iscsi_conn *c = arg;
    assert(!c->dead); /* conn_close() stops this timer (login_conn_cleanup) */
    c->auth->waiting = false;
    c->auth->waited = true;
    conn_fail(c, login_finish(c, c->auth->wait_flags));
}

/* A CHAP response from an address with failures in a row waits for its turn (one check per
 * back-off delay, auth_guard_reserve) before it is checked, right or wrong: true when it was
 * put to wait, or refused because its turn comes after the login deadline. */
static bool login_auth_wait(struct iscsi_conn *c, uint8_t flags, int *rc)
{
    if (!c->srv->auth_guard || c->auth->state != AUTH_WAIT_NR || c->auth->waited)
        return false;
    char addr[sizeof(c->peer)];
    conn_peer_addr(c, addr, sizeof(addr));
    uint32_t ms = auth_guard_reserve(c->srv->auth_guard, addr);
    if (!ms)
        return false;
    uint64_t deadline = c->accept_ms + (uint64_t)c->srv->login_timeout_s * 1000;
    if (reactor_now_ms() + ms + 1500 > deadline) {
        *rc = login_fail_auth(c, "response not checked: its turn comes after the login deadline");
        return true;
    }
    c->auth->waiting = true;
    c->auth->wait_flags = flags;
    reactor_timer_start(c->reactor, &c->auth->fail_timer, ms, login_auth_resume, c);
    *rc = ISCSI_OK;
    return true;
}

/* The request's keys are in: the CHAP step, the stage checks, the answer. */
static int login_finish(struct iscsi_conn *c, uint8_t flags)
{
    bool transit = flags & ISCSI_LOGIN_TRANSIT;
    enum iscsi_stage csg = (enum iscsi_stage)ISCSI_LOGIN_CSG(flags);
    enum iscsi_stage nsg = (enum iscsi_stage)ISCSI_LOGIN_NSG(flags);
    enum iscsi_login_status st;
    int rc;
    if (csg == ISCSI_STAGE_SECURITY && c->auth && login_auth_wait(c, flags, &rc))
        return rc;
    if (csg == ISCSI_STAGE_SECURITY && c->auth) {
        bool may_transit;
        c->auth->waited = false;
        st = iscsi_auth_step(c->auth, &c->neg, c->srv->auth_guard, &c->login_out, &may_transit);
        if (st != ISCSI_LOGIN_OK) {
            return login_fail_auth(c, c->auth->why);
        }
        if (transit && !may_transit) {
            /* §6.2: the target answers T=0 while CHAP goes on (libiscsi asks to transit in
             * the request that proposes AuthMethod); with no CHAP under way the request
             * tries to leave the security stage unauthenticated. */
            if (c->auth->state == AUTH_WAIT_METHOD) {
                return login_fail_auth(c, "security stage left without AuthMethod=CHAP");
            }
            transit = false;
        }
    }
    if (csg == ISCSI_STAGE_SECURITY && transit && !c->neg.auth_none_agreed &&
        !c->neg.auth_chap_agreed) {
        if (c->neg.auth_required) {
            return login_fail_auth(c, "authentication required");
        }
    }
    /* §12: with CHAP configured the security stage cannot be skipped (a first request with
     * CSG=1, or operational negotiation before the exchange completed). */
    if (csg != ISCSI_STAGE_SECURITY && c->neg.auth_required &&
        !(c->auth && c->auth->state == AUTH_DONE)) {
        return login_fail_auth(c, "operational stage without authentication");
    }
    /* Our own declarations for the operational stage (MaxRecvDataSegmentLength). */
    if (csg == ISCSI_STAGE_OPERATIONAL)
        iscsi_neg_offer(&c->neg, ISCSI_STAGE_OPERATIONAL, &c->login_out);
    if (c->login_out.overflow) {
        return login_fail(c, ISCSI_LOGIN_OUT_OF_RESOURCES, "login response too long");
    }

    uint8_t rsp_flags = 0;
    if (transit) {
        rsp_flags = ISCSI_LOGIN_TRANSIT | (uint8_t)nsg;
        if (nsg == ISCSI_STAGE_FULL_FEATURE) {
            st = login_enter_ffp(c);
            if (st != ISCSI_LOGIN_OK) {
                return login_fail(c, st, "cannot complete login");
            }
        }
    }
    c->login_rsp_flags = rsp_flags;
    c->login_out_off = 0;
    rc = login_send_chunk(c, rsp_flags);
    if (rc < 0 || c->login_out.len) /* more to pull: stay in this stage */
        return rc;
    login_after_final(c, rsp_flags);
    return ISCSI_OK;
}

/* The last response of a stage is out: move to the next stage. */
static void login_after_final(struct iscsi_conn *c, uint8_t rsp_flags)
{
    bool transit = rsp_flags & ISCSI_LOGIN_TRANSIT;
    enum iscsi_stage nsg = (enum iscsi_stage)ISCSI_LOGIN_NSG(rsp_flags);
    if (transit) {
        c->login_stage = nsg;
        if (nsg == ISCSI_STAGE_FULL_FEATURE) {
            struct iscsi_params p;
            iscsi_neg_result(&c->neg, &p);
            /* Digests start with the first PDU after the final Login Response (§13.1). */
            c->hdigest = p.header_digest;
            c->ddigest = p.data_digest;
            c->phase = CONN_FFP;
            c->last_text_ms = reactor_now_ms();
            if (!c->discovery)
                conn_inject_start(c);
            if (c->auth && c->srv->auth_guard) {
                char addr[sizeof(c->peer)];
                conn_peer_addr(c, addr, sizeof(addr));
                auth_guard_succeeded(c->srv->auth_guard, addr);
            }
            /* An event line (docs/logging.md): its keys are stable. */
            char ini[2 * ISCSI_NAME_MAX + 3], user[2 * CHAP_NAME_MAX + 3];
            LOG_INFO("event=login peer=%s initiator=%s%s%s type=%s tsih=%u cid=%u "
                     "header-digest=%s data-digest=%s mrdsl=%u/%u erl=%u auth=%s%s%s%s",
                     c->peer, log_quote(ini, sizeof(ini), c->neg.initiator_name),
                     c->node ? " target=" : "", c->node ? c->node->name : "",
                     c->discovery ? "discovery" : "normal", c->session->tsih, c->cid,
                     c->hdigest ? "crc32c" : "none", c->ddigest ? "crc32c" : "none",
                     c->max_recv_dsl, c->max_send_dsl, c->session->params.erl,
                     c->auth ? "chap-" : "none", c->auth ? chap_alg_name(c->auth->alg) : "",
                     c->auth ? " chap-user=" : "",
                     c->auth ? log_quote(user, sizeof(user), c->auth->user) : "");
        }
    }
}
