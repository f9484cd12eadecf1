/* Discovery (RFC 7143 §4.3, Appendix C): a discovery session, one Text Request with
 * SendTargets=All, continuation requests while the target sets C (§11.10-§11.11), logout.
 * Also the small helpers of the public API: URL parsing and error names. */
#include <stdlib.h>
#include <string.h>

#include "initiator/conn.h"
#include "initiator/ini.h"

#define INI_TEXT_ITT 0x80000010u
/* Text Responses one SendTargets may take: far more than a real target's answer needs (it is
 * bounded by ISCSI_TEXT_MAX anyway), and an end to one that sends F=0 forever with little or
 * no text. */
#define INI_TEXT_ROUNDS_MAX 256

struct disc {
    struct lr_session *s;
    struct reactor_deferred free_d;
    struct reactor_timer timer; /* the whole SendTargets exchange: cmd_timeout_ms */
    bool timer_on;
    unsigned rounds;
    lr_discovery_fn done;
    void *arg;
    struct lr_result res;
    bool finished;
    struct iscsi_text text; /* the SendTargets answer, over its Text Responses */
};

static int text_request(struct ini_conn *c, uint32_t ttt, const char *kv, uint32_t len)
{
    struct lr_session *s = c->s;
    struct wire_pdu *p = ini_conn_pdu(c);
    if (!p)
        return INI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_init(h, ISCSI_OP_TEXT_REQ, ISCSI_FLAG_FINAL);
    h->b[0] |= ISCSI_BHS_IMMEDIATE;
    bhs_put32(h, BHS_ITT, INI_TEXT_ITT);
    bhs_put32(h, BHS_TTT, ttt);
    bhs_put32(h, BHS_CMDSN, s->cmdsn);
    bhs_put32(h, BHS_EXPSTATSN, c->expstatsn);
    void *copy = NULL;
    if (len) {
        copy = malloc(len);
        if (copy)
            memcpy(copy, kv, len);
        else
            len = 0;
    }
    p->owned = copy;
    ini_conn_send(c, p, copy, len);
    return INI_OK;
}

static void disc_free(void *arg)
{
    struct disc *d = arg;
    lr_session_destroy(d->s);
    iscsi_text_free(&d->text);
    free(d);
}

static void disc_logged_out(void *arg, const struct lr_result *res)
{
    struct disc *d = arg;
    (void)res;
    reactor_defer(d->s->r, &d->free_d, disc_free, d);
}

static void disc_finish(struct disc *d, const struct lr_result *res)
{
    if (d->finished)
        return;
    d->finished = true;
    struct lr_session *s = d->s;
    if (d->timer_on)
        reactor_timer_stop(s->r, &d->timer);
    d->timer_on = false;
    d->done(d->arg, res, d->text.data, d->text.len);
    /* no memory for the Logout (-1, and disc_logged_out will not run): freed at once, the
     * session's destroy dropping the connection */
    if (res->err != LR_OK || lr_session_logout(s, disc_logged_out, d) < 0)
        reactor_defer(s->r, &d->free_d, disc_free, d);
}

static void disc_timeout(void *arg)
{
    struct disc *d = arg;
    d->timer_on = false;
    struct lr_result r = {.err = LR_ERR_TIMEOUT, .what = "no complete SendTargets answer in time"};
    disc_finish(d, &r);
}

static void disc_login_done(void *arg, const struct lr_result *res)
{
    struct disc *d = arg;
    if (res->err != LR_OK) {
        disc_finish(d, res);
        return;
    }
    static const char kv[] = "SendTargets=All";
    d->timer_on = true;
    reactor_timer_start(d->s->r, &d->timer, d->s->o.cmd_timeout_ms, disc_timeout, d);
    struct ini_conn *c = d->s->conns[0];
    ini_conn_fail(c, text_request(c, ISCSI_RSVD_TAG, kv, sizeof(kv)));
}

/* A Text Response on the discovery session (s->text_rsp): its status. */
static int disc_text_rsp(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen)
{
    struct disc *d = c->s->text_arg;
    if (get_be32(hdr + BHS_ITT) != INI_TEXT_ITT)
        return INI_ERR_TEXT_RSP;
    if (d->finished)
        return INI_OK;
    if (dlen && iscsi_text_append(&d->text, data, dlen) < 0) {
        struct lr_result r = {.err = LR_ERR_PROTOCOL, .what = "SendTargets answer too long"};
        disc_finish(d, &r);
        return INI_OK;
    }
    if (!(hdr[BHS_FLAGS] & ISCSI_FLAG_FINAL) || (hdr[BHS_FLAGS] & ISCSI_FLAG_CONTINUE)) {
        /* §11.11.1-§11.11.2: not final (C implies it: the text goes on in the next PDU); ask
         * for the rest with an empty request carrying the target's TTT, a bounded number of
         * times. */
        if (++d->rounds >= INI_TEXT_ROUNDS_MAX) {
            struct lr_result r = {.err = LR_ERR_PROTOCOL, .what = "SendTargets answer never ends"};
            disc_finish(d, &r);
            return INI_OK;
        }
        return text_request(c, get_be32(hdr + BHS_TTT), NULL, 0);
    }
    struct lr_result r = {.err = LR_OK};
    disc_finish(d, &r);
    return INI_OK;
}

int lr_discover(struct reactor *r, const char *host, uint16_t port, const char *initiator_name,
                lr_discovery_fn done, void *arg)
{
    struct lr_session_opts o = {.initiator_name = initiator_name, .host = host, .port = port};
    return lr_discover_opts(r, &o, done, arg);
}

int lr_discover_opts(struct reactor *r, const struct lr_session_opts *opts, lr_discovery_fn done,
                     void *arg)
{
    struct lr_session_opts o = *opts;
    o.target_name = NULL; /* a discovery session */
    o.connections = 1;
    struct disc *d = calloc(1, sizeof(*d));
    if (!d)
        return -1;
    d->s = lr_session_create(r, &o);
    if (!d->s) {
        free(d);
        return -1;
    }
    d->done = done;
    d->arg = arg;
    iscsi_text_init(&d->text);
    d->s->text_rsp = disc_text_rsp;
    d->s->text_arg = d;
    return lr_session_login(d->s, disc_login_done, d);
}

void lr_url_wipe(struct lr_url *u)
{
    chap_wipe(u->chap_secret, sizeof(u->chap_secret));
}

/* iscsi://[USER%SECRET@]HOST[:PORT]/IQN/LUN, HOST possibly a bracketed IPv6 address. */
static int url_parse(const char *s, struct lr_url *u)
{
    memset(u, 0, sizeof(*u));
    u->port = 3260;
    if (strncmp(s, "iscsi://", 8) != 0)
        return -1;
    s += 8;
    const char *slash = strchr(s, '/');
    if (!slash)
        return -1;
    /* libiscsi's spelling of CHAP credentials: USER%SECRET@ before the host */
    const char *at = memchr(s, '@', (size_t)(slash - s));
    if (at) {
        const char *pct = memchr(s, '%', (size_t)(at - s));
        if (!pct || pct == s || at == pct + 1 || (size_t)(pct - s) >= sizeof(u->chap_user) ||
            (size_t)(at - pct - 1) >= sizeof(u->chap_secret))
            return -1;
        memcpy(u->chap_user, s, (size_t)(pct - s));
        memcpy(u->chap_secret, pct + 1, (size_t)(at - pct - 1));
        s = at + 1;
    }
    const char *hend = slash;
    const char *colon = NULL;
    if (*s == '[') {
        const char *rb = memchr(s, ']', (size_t)(slash - s));
        if (!rb)
            return -1;
        if (rb + 1 < slash && rb[1] == ':')
            colon = rb + 1;
        s++;
        hend = rb;
    } else {
        colon = memchr(s, ':', (size_t)(slash - s));
        if (colon)
            hend = colon;
    }
    if (hend == s || (size_t)(hend - s) >= sizeof(u->host))
        return -1;
    memcpy(u->host, s, (size_t)(hend - s));
    if (colon) {
        char *end;
        unsigned long p = strtoul(colon + 1, &end, 10);
        if (end != slash || p == 0 || p > 65535)
            return -1;
        u->port = (uint16_t)p;
    }
    const char *iqn = slash + 1;
    const char *last = strrchr(iqn, '/');
    if (!last || last == iqn || (size_t)(last - iqn) >= sizeof(u->target))
        return -1;
    memcpy(u->target, iqn, (size_t)(last - iqn));
    char *end;
    unsigned long long lun = strtoull(last + 1, &end, 10);
    if (end == last + 1 || *end || lun >= 16384)
        return -1;
    u->lun = lun;
    return 0;
}

int lr_url_parse(const char *s, struct lr_url *u)
{
    int rc = url_parse(s, u);
    if (rc < 0)
        lr_url_wipe(u); /* nothing half-parsed stays behind */
    return rc;
}

const char *lr_err_name(enum lr_err e)
{
    switch (e) {
    case LR_OK:
        return "ok";
    case LR_SCSI_STATUS:
        return "SCSI status";
    case LR_ERR_LOGIN:
        return "login refused";
    case LR_ERR_CONN_LOST:
        return "connection lost";
    case LR_ERR_TIMEOUT:
        return "timeout";
    case LR_ERR_PROTOCOL:
        return "protocol error";
    case LR_ERR_NO_CONN:
        return "no connection";
    case LR_ERR_IO:
        return "I/O error";
    case LR_ERR_ABORTED:
        return "aborted";
    case LR_ERR_TASK_ABORTED:
        return "task aborted";
    }
    return "?";
}
