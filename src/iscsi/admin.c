/* What the daemon's control socket (linerate-ctl) sees of the iSCSI sessions and does to them:
 * a copy of the session table, a Logout requested with an Async Message (RFC 7143 §11.9),
 * sessions and connections closed. Runs on the control thread: it only reads what is fixed
 * once a connection is logged in, under the session table and session locks, and whatever
 * touches a connection itself is posted to the connection's own reactor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/conn.h"
#include "iscsi/session.h"
#include "reactor/reactor.h"
#include "util/log.h"

/* AsyncEvent codes (RFC 7143 §11.9.1) */
#define ASYNC_EVENT_REQUEST_LOGOUT 1

static void conn_info_fill(struct iscsi_conn_info *ci, const struct iscsi_conn *c)
{
    ci->cid = c->cid;
    snprintf(ci->peer, sizeof(ci->peer), "%s", c->peer);
    snprintf(ci->portal, sizeof(ci->portal), "%s", c->portal ? c->portal->text : "");
    ci->reactor = reactor_id(c->reactor);
    ci->header_digest = c->hdigest;
    ci->data_digest = c->ddigest;
    ci->max_recv_dsl = c->max_recv_dsl;
    ci->max_send_dsl = c->max_send_dsl;
}

int iscsi_server_list_sessions(struct iscsi_server *srv, struct iscsi_session_info **out,
                               unsigned *n)
{
    *out = NULL;
    *n = 0;
    uint64_t now = reactor_now_ms();
    pthread_mutex_lock(&srv->sessions_lock);
    unsigned cap = srv->nsessions ? srv->nsessions : 1;
    struct iscsi_session_info *v = calloc(cap, sizeof(*v));
    if (!v) {
        pthread_mutex_unlock(&srv->sessions_lock);
        return -ENOMEM;
    }
    unsigned k = 0;
    for (unsigned i = 1; i < srv->sessions_cap && k < cap; i++) {
        struct iscsi_session *s = srv->sessions[i];
        if (!s || s->closing)
            continue;
        struct iscsi_session_info *si = &v[k++];
        si->tsih = s->tsih;
        memcpy(si->isid, s->isid, sizeof(si->isid));
        snprintf(si->initiator, sizeof(si->initiator), "%s", s->initiator_name);
        snprintf(si->target, sizeof(si->target), "%s", s->node ? s->node->name : "");
        snprintf(si->chap_user, sizeof(si->chap_user), "%s", s->chap_user);
        si->discovery = s->discovery;
        si->params = s->params;
        si->age_ms = now >= s->created_ms ? now - s->created_ms : 0;
        pthread_mutex_lock(&s->lock);
        si->in_flight = s->in_flight;
        iostats_read(s->stats, &si->stats);
        for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next) {
            if (si->nconns == ISCSI_ADMIN_CONNS_MAX)
                break;
            conn_info_fill(&si->conns[si->nconns++],
                           list_entry(ln, struct iscsi_conn, session_node));
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&srv->sessions_lock);
    *out = v;
    *n = k;
    return 0;
}

bool iscsi_server_session_alive(struct iscsi_server *srv, uint16_t tsih)
{
    struct iscsi_session *s = session_lookup(srv, tsih);
    if (s)
        session_put(s);
    return s != NULL;
}

/* One Async Message on its way to a connection's reactor. */
struct logout_req {
    struct reactor_msg msg;
    struct iscsi_conn *c; /* holds a reference */
    unsigned time2wait_s;
};

static void logout_req_run(void *arg)
{
    struct logout_req *q = arg;
    struct iscsi_conn *c = q->c;
    if (!c->dead && c->phase == CONN_FFP) {
        struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL);
        if (p) {
            struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
            bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
            h->b[BHS_ASYNC_EVENT] = ASYNC_EVENT_REQUEST_LOGOUT;
            /* Parameter3: the seconds the initiator has to log out (§11.9.1) */
            unsigned t = q->time2wait_s > 65535 ? 65535 : q->time2wait_s;
            h->b[BHS_ASYNC_PARAM3] = (uint8_t)(t >> 8);
            h->b[BHS_ASYNC_PARAM3 + 1] = (uint8_t)t;
            /* An Async Message carries a StatSN of its own (§11.9), as a response does. */
            conn_fill_sn(c, h, true);
            conn_send(c, p);
            LOG_INFO("%s: logout requested by the administrator (within %us)", c->peer, t);
        } else {
            conn_close(c, "out of memory for the Async Message requesting logout");
        }
    }
    conn_put(c);
    free(q);
}

int iscsi_server_request_logout(struct iscsi_server *srv, uint16_t tsih, unsigned time2wait_s)
{
    struct iscsi_session *s = session_lookup(srv, tsih);
    if (!s)
        return -ENOENT;
    int asked = 0;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next) {
        struct iscsi_conn *c = list_entry(ln, struct iscsi_conn, session_node);
        struct logout_req *q = calloc(1, sizeof(*q));
        if (!q)
            break;   /* the caller's fallback (closing the session) still works */
        conn_get(c); /* alive while in the list, which the lock keeps it in */
        q->c = c;
        q->time2wait_s = time2wait_s;
        reactor_post(c->reactor, &q->msg, logout_req_run, q);
        asked++;
    }
    pthread_mutex_unlock(&s->lock);
    session_put(s);
    return asked;
}

int iscsi_server_close_session(struct iscsi_server *srv, uint16_t tsih, const char *why)
{
    struct iscsi_session *s = session_lookup(srv, tsih);
    if (!s)
        return -ENOENT;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next)
        conn_close_async(list_entry(ln, struct iscsi_conn, session_node), why);
    pthread_mutex_unlock(&s->lock);
    session_put(s);
    return 0;
}

int iscsi_server_close_conn(struct iscsi_server *srv, uint16_t tsih, uint16_t cid, const char *why)
{
    struct iscsi_session *s = session_lookup(srv, tsih);
    if (!s)
        return -ENOENT;
    int rc = -ESRCH;
    pthread_mutex_lock(&s->lock);
    for (struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next) {
        struct iscsi_conn *c = list_entry(ln, struct iscsi_conn, session_node);
        if (c->cid == cid) {
            conn_close_async(c, why);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    session_put(s);
    return rc;
}
