/* Text requests in full feature phase (RFC 7143 §11.10/§11.11): SendTargets discovery
 * (Appendix C) listing every target this initiator may see with every portal, and key
 * negotiation in FFP through the shared engine. Long answers go out over several Text
 * Responses with the C bit, the initiator pulling each with an empty request (TTT echoed). */
#include <stdlib.h>
#include <string.h>

#include "iscsi/auth.h"
#include "iscsi/conn.h"
#include "iscsi/discovery.h"
#include "iscsi/session.h"
#include "util/log.h"

#define TEXT_TTT 0x5445u /* "TE": one text exchange at a time per connection */

void discovery_send_targets(struct iscsi_conn *c, const char *which, struct iscsi_text *out)
{
    struct iscsi_server *srv = c->srv;
    bool all = strcmp(which, "All") == 0;
    const char *initiator = c->session ? c->session->initiator_name : c->neg.initiator_name;
    unsigned bound = iscsi_server_node_bound(srv);
    for (unsigned i = 0; i < bound; i++) {
        struct iscsi_node *n = iscsi_server_node(srv, i);
        if (!n || (!all && strcmp(which, n->name) != 0))
            continue;
        /* In a normal session, an empty value or the session's own target (§C.1) */
        if (!iscsi_node_allows(n, initiator))
            continue;
        /* Only what the asker could log in to: a CHAP target is listed to a session that
         * authenticated as the CHAP user this initiator logs in to it with (its entry's, else
         * the target's), through discovery CHAP with the same name. With discovery-chap-match
         * off, as LIO does, to every discovery session (which discovery CHAP, if set, gated
         * at login): a configuration moved from LIO keeps what its hosts discover. */
        pthread_mutex_lock(&srv->chap_lock); /* a reload may change it meanwhile */
        const struct chap_creds *cr = iscsi_node_chap_for(n, initiator);
        bool hidden =
            !srv->discovery_chap_any && cr->user[0] &&
            !(c->auth && c->auth->state == AUTH_DONE && strcmp(c->auth->user, cr->user) == 0);
        pthread_mutex_unlock(&srv->chap_lock);
        if (hidden)
            continue;
        iscsi_text_add(out, "TargetName", n->name);
        pthread_mutex_lock(&n->access_lock); /* linerate-ctl may change them meanwhile */
        for (unsigned p = 0; p < n->nportals; p++)
            iscsi_text_addf(out, "TargetAddress", "%s,%u", n->portals[p].text, n->portals[p].tpgt);
        pthread_mutex_unlock(&n->access_lock);
    }
}

static int text_send_chunk(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
    uint32_t left = c->login_out.len - c->login_out_off;
    uint32_t max = c->max_send_dsl;
    uint32_t n = left < max ? left : max;
    bool more = left > n;
    struct wire_pdu *p =
        conn_pdu_new(c, ISCSI_OP_TEXT_RSP, more ? ISCSI_FLAG_CONTINUE : ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    memcpy(h->b + BHS_LUN, req->b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
    bhs_put32(h, BHS_TTT, more ? TEXT_TTT : ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
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

int text_handle(struct iscsi_conn *c, struct iscsi_pdu_in *pdu)
{
    struct iscsi_bhs *req = &pdu->bhs;
    bool final = req->b[1] & ISCSI_FLAG_FINAL;
    bool cont = req->b[1] & ISCSI_FLAG_CONTINUE;
    uint32_t ttt = bhs_get32(req, BHS_TTT);
    c->last_text_ms = reactor_now_ms();
    if (!bhs_immediate(req))
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    if (final && cont) {
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    /* Continuing our long answer. */
    if (ttt == TEXT_TTT && c->login_out.len && c->login_out_off < c->login_out.len) {
        return text_send_chunk(c, req);
    }
    if (ttt != ISCSI_RSVD_TAG && ttt != TEXT_TTT) {
        return conn_send_reject(c, req, ISCSI_REJECT_INVALID_PDU_FIELD);
    }
    if (ttt == ISCSI_RSVD_TAG) {
        /* A new exchange resets any unfinished one (§11.10.4). */
        iscsi_text_reset(&c->login_out);
        c->login_out_off = 0;
    }
    if (iscsi_text_append(&c->login_in, pdu->data, pdu->dlen) < 0) {
        iscsi_text_reset(&c->login_in);
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    if (cont || !final) {
        /* More request text follows: answer empty, asking for it (§11.10.2). */
        struct wire_pdu *p = conn_pdu_new(c, ISCSI_OP_TEXT_RSP, 0);
        if (!p)
            return ISCSI_ERR_NOMEM;
        struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
        bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
        bhs_put32(h, BHS_TTT, TEXT_TTT);
        conn_fill_sn(c, h, true);
        conn_send(c, p);
        return ISCSI_OK;
    }
    iscsi_neg_restart(&c->neg);
    c->neg.ffp = true;
    iscsi_text_reset(&c->login_out);
    enum iscsi_login_status st = iscsi_neg_handle(&c->neg, ISCSI_STAGE_FULL_FEATURE,
                                                  c->login_in.data, c->login_in.len, &c->login_out);
    iscsi_text_reset(&c->login_in);
    if (st != ISCSI_LOGIN_OK) {
        iscsi_text_reset(&c->login_out);
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    if (c->neg.send_targets_seen) {
        const char *which = c->neg.send_targets;
        if (!which[0] && c->session && c->session->node)
            which = c->session->node->name; /* §C.1: empty value = this session's target */
        if (which[0])
            discovery_send_targets(c, which, &c->login_out);
    }
    if (c->login_out.overflow) {
        iscsi_text_reset(&c->login_out);
        return conn_send_reject(c, req, ISCSI_REJECT_LONG_OP_REJECT);
    }
    c->login_out_off = 0;
    return text_send_chunk(c, req);
}
