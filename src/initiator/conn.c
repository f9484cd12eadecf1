/* One initiator TCP connection: opened for a slot of the session (the first time, or again
 * for a reconnect), non-blocking connect, sending, failing, and its side of the wire engine
 * (iscsi/wire.h): Data-In payloads placed straight into the task's buffer, complete PDUs
 * handed to login or full feature phase through the session's conn_ops, whose status fails
 * the connection here, the one place a handler's verdict does. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "initiator/conn.h"
#include "initiator/ini.h"
#include "initiator/lock.h"
#include "initiator/login.h"
#include "initiator/table.h"
#include "util/log.h"

#define INI_RXBUF (512u * 1024u)
#define INI_RX_LARGE (32u * 1024u) /* payloads this big: read headers alone, payloads direct */

static void conn_io(void *arg, uint32_t events);
static const struct wire_ops ini_wire_ops;

struct ini_conn *ini_conn_new(struct lr_session *s, unsigned idx, uint16_t cid)
{
    struct ini_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->s = s;
    c->idx = idx;
    c->cid = cid;
    c->state = ICS_IDLE;
    c->r = s->r;
    list_init(&c->inbox);
    c->peer_mrdsl = 8192; /* RFC 7143 §13.12 default until declared */
    wire_init(&c->w, &ini_wire_ops, c, "initiator");
    wire_set_limits(&c->w, WIRE_LOGIN_DSL, INI_RXBUF);
    c->w.rx_large_min = INI_RX_LARGE;
    /* A bad data digest fails the task it belongs to, not the connection (§7.8). */
    c->w.ddigest_deliver = true;
    ini_conn_set_faults(c);
    return c;
}

/* Fault injection (the bench's --inject) on this connection's transmit path. Only the PDUs
 * that ErrorRecoveryLevel 1 repairs from the target's side of the wire may be dropped: a lost
 * SCSI Command leaves a CmdSN hole that the initiator plugs by retrying it (RFC 7143 §7.2.1),
 * a lost Data-Out a DataSN/offset hole that the target fills with a recovery R2T (§7.8, §7.9).
 * Login, Text, Logout, NOP-Out, SNACK and TMF requests are never dropped. Data digests are
 * corrupted on any PDU that has data (the engine does so only once DataDigest is negotiated):
 * the target Rejects it (reason 0x02) and recovers. At ERL 0 the same faults end in what ERL 0
 * does: commands that time out or fail, counted by the caller. */
void ini_conn_set_faults(struct ini_conn *c)
{
    const struct lr_faults *f = &c->s->faults;
    struct wire_faults wf = {
        .digest_error = f->digest_error,
        .drop_pdu = f->drop_pdu,
        .drop_ops = 1ull << ISCSI_OP_SCSI_CMD | 1ull << ISCSI_OP_DATA_OUT,
        /* per connection and session, so that two connections do not fault in step */
        .seed = 0x9e3779b97f4a7c15ull * (c->idx + 1) ^ get_be32(c->s->isid + 1),
    };
    wire_set_faults(&c->w, &wf);
}

void ini_conn_free(struct ini_conn *c)
{
    if (!c)
        return;
    reactor_timer_stop(c->s->r, &c->login_timer);
    wire_free(&c->w);
    if (c->login_active)
        ini_login_free(&c->login);
    free(c);
}

int ini_conn_connect(struct ini_conn *c, const char *host, uint16_t port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0 || !ai) {
        LOG_ERR("initiator: cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc < 0 && errno != EINPROGRESS) {
        LOG_ERR("initiator: connect %s:%u: %m", host, port);
        close(fd);
        return -1;
    }
    c->state = ICS_CONNECTING;
    /* Writable means connected: nothing is written until then. */
    c->w.tx_hold = true;
    c->w.want_write = true;
    if (wire_attach(&c->w, c->r, fd, conn_io, c) < 0) {
        close(fd);
        c->w.fd = -1;
        return -1;
    }
    return 0;
}

/* A connection we give up on must not deliver what is still in its send queue: lr_mpath
 * issues the failed commands again on another path, and the caller may write newer data to
 * the same blocks there; a late WRITE from this queue (the link comes back seconds later)
 * would land over it. A graceful close keeps sending that queue (the orphaned socket goes on
 * retransmitting after close(2), FIN_WAIT1); SO_LINGER {1, 0} makes close(2) abortive
 * (socket(7)): Linux's tcp_close() then calls tcp_disconnect(), which sends RST and purges the
 * write and retransmit queues, also after shutdown(SHUT_WR). Only when the queue is not empty
 * (SIOCOUTQ, tcp(7): unsent plus unacknowledged bytes): after a Logout Response everything we
 * sent was acknowledged, and that close stays graceful. The target never does this: its
 * Logout Response must reach the peer. */
static void conn_abort_unsent(int fd)
{
    int queued = 0;
    if (fd < 0 || ioctl(fd, SIOCOUTQ, &queued) < 0 || queued <= 0)
        return;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

void ini_conn_close(struct ini_conn *c, const char *why)
{
    if (c->state == ICS_DEAD)
        return;
    c->fail_why = why;
    c->state = ICS_DEAD;
    conn_abort_unsent(c->w.fd);
    wire_close(&c->w);
    c->s->conn_ops->down(c);
}

/* Each status and the reason it ends a connection with: what lr_result.what says of the
 * tasks that fail with it, and what the log line says. */
static const struct {
    int status;
    const char *why;
} reasons[] = {
    {INI_OK, "ok"},
    {INI_ERR_NOMEM, "out of memory"},
    {INI_ERR_LOGIN, "login failed"},
    {INI_ERR_UNEXPECTED_PDU, "unexpected PDU in full feature phase"},
    {INI_ERR_TEXT_RSP, "unexpected Text Response"},
    {INI_ERR_DATA_IN_RANGE, "Data-In outside the task's buffer"},
    {INI_ERR_BAD_R2T, "bad R2T"},
    {INI_ERR_R2T_AGAIN, "R2T for data already sent (recovery R2T below ErrorRecoveryLevel 1)"},
    {INI_ERR_PING_FLOOD, "the target sends pings faster than it reads the answers"},
    {INI_ERR_RESEND_FLOOD, "the target asks for data again faster than it reads it"},
    {INI_ERR_ASYNC_DROP, "target asked to drop the connection"},
    {INI_END_ASYNC_DROP_CONN, "target will drop the connection (Async event 2)"},
    {INI_END_ASYNC_DROP_ALL, "target will drop the session's connections (Async event 3)"},
    {INI_END_LOGGED_OUT, "logged out"},
    {INI_END_ASKED_OUT, "terminated by the logout the target asked for"},
    {INI_END_CONN_LOGGED_OUT, "logged out at the target's request"},
    {INI_END_RECOVERY_OUT, "logged out for recovery"},
};

const char *ini_status_str(int status)
{
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (reasons[i].status == status)
            return reasons[i].why;
    return "?";
}

int ini_conn_fail(struct ini_conn *c, int status)
{
    if (status >= 0)
        return status;
    const char *why = ini_status_str(status);
    if (status == INI_ERR_LOGIN && c->login.why)
        why = c->login.why;
    ini_conn_close(c, why);
    return status;
}

static void conn_fail_msg(void *arg)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    c->s->msgs--;
    if (c->r != reactor_self())
        c->fail_req = NULL; /* it moved meanwhile: the next tick asks its new thread */
    else if (c->fail_req)
        ini_conn_close(c, c->fail_req);
    ini_unlock(c->s);
}

void ini_conn_close_any(struct ini_conn *c, const char *why)
{
    if (!c->s->mt || c->r == reactor_self()) {
        ini_conn_close(c, why);
        return;
    }
    if (c->state == ICS_DEAD || c->fail_req)
        return;
    c->fail_req = why;
    if (reactor_post(c->r, &c->fail_msg, conn_fail_msg, c))
        c->s->msgs++;
}

/* A socket call failed: keep its errno for the log line. */
static void conn_fail_sys(struct ini_conn *c, const char *why)
{
    c->fail_errno = errno;
    ini_conn_close(c, why);
}

struct wire_pdu *ini_conn_pdu(struct ini_conn *c)
{
    return wire_pdu_get(&c->w);
}

void ini_conn_send(struct ini_conn *c, struct wire_pdu *p, const void *data, uint32_t len)
{
    if (len) {
        p->data[0].iov_base = (void *)data;
        p->data[0].iov_len = len;
        p->datacnt = 1;
    }
    p->dlen = len;
    wire_send(&c->w, p);
}

void ini_conn_flush(struct ini_conn *c)
{
    if (c->state != ICS_CONNECTING && c->state != ICS_DEAD)
        wire_flush(&c->w);
}

/* ---- the engine's view of this connection ---- */

/* Where the payload of the PDU whose header is hdr goes: the task's buffer for a Data-In, or
 * NULL for the engine's buffer. */
static uint8_t *rx_dest(struct ini_conn *c, const uint8_t *hdr, uint32_t dlen)
{
    if ((hdr[0] & ISCSI_OPCODE_MASK) != ISCSI_OP_DATA_IN)
        return NULL;
    struct ini_task *t = ini_task_lookup(c->s, get_be32(hdr + BHS_ITT));
    if (!t || t->conn != c || t->dir != LR_DIR_READ)
        return NULL;
    uint32_t off = get_be32(hdr + BHS_BUFFER_OFFSET);
    if (off > t->len || dlen > t->len - off)
        return NULL; /* checked again (and refused) when the PDU is handled */
    return t->buf + off;
}

/* Data-In goes straight into the task's buffer; everything else to the engine's buffer. */
static int ini_wire_hdr(void *ctx, struct iscsi_pdu_in *p)
{
    struct ini_conn *c = ctx;
    if (c->state != ICS_FFP || !p->dlen)
        return 0;
    uint8_t *dest = rx_dest(c, p->bhs.b, p->dlen);
    if (dest) {
        p->dst[0].iov_base = dest;
        p->dst[0].iov_len = p->dlen;
        p->dstcnt = 1;
    }
    return 0;
}

/* The PDU dispatch: login phase or full feature phase. A handler's negative status fails the
 * connection here, the one place it does (the engine then stops); its own failures come
 * through ini_wire_fail. */
static int ini_wire_pdu(void *ctx, struct iscsi_pdu_in *p)
{
    struct ini_conn *c = ctx;
    const uint8_t *data = p->data ? p->data : p->dstcnt ? p->dst[0].iov_base : NULL;
    int rc;
    if (c->state == ICS_LOGIN)
        rc = c->s->conn_ops->login_rx(c, p->bhs.b, data, p->dlen);
    else
        rc = c->s->conn_ops->ffp_rx(c, p->bhs.b, data, p->dlen, !p->data_digest_bad);
    if (rc < 0) {
        ini_conn_fail(c, rc);
        return WIRE_E_OWNER;
    }
    return WIRE_OK;
}

static void ini_wire_fail(void *ctx, int status)
{
    struct ini_conn *c = ctx;
    const char *why;
    switch (status) {
    case WIRE_E_PEER_CLOSED:
        why = "connection closed by the target";
        break;
    case WIRE_E_PEER_GONE:
        why = "connection reset by the target";
        break;
    case WIRE_E_OVERSIZED:
        why = "data segment longer than MaxRecvDataSegmentLength";
        break;
    case WIRE_E_HDIGEST:
        why = "header digest error";
        break;
    case WIRE_E_DDIGEST:
        why = "data digest error";
        break;
    default:
        why = wire_status_str(status);
        break;
    }
    c->fail_errno = c->w.fail_errno;
    ini_conn_close(c, why ? why : "protocol error");
}

static void ini_wire_lock(void *ctx)
{
    ini_lock(((struct ini_conn *)ctx)->s);
}

static void ini_wire_unlock(void *ctx)
{
    ini_unlock(((struct ini_conn *)ctx)->s);
}

/* Only this thread touches the queue and the socket: other threads hand tasks over through
 * the inbox, so the session lock need not be held across a socket call. */
static bool ini_wire_io_release(void *ctx)
{
    return ini_io_release(((struct ini_conn *)ctx)->s);
}

static void ini_wire_io_retake(void *ctx, bool released)
{
    ini_io_retake(((struct ini_conn *)ctx)->s, released);
}

static const struct wire_ops ini_wire_ops = {
    .hdr = ini_wire_hdr,
    .pdu = ini_wire_pdu,
    .fail = ini_wire_fail,
    .lock = ini_wire_lock,
    .unlock = ini_wire_unlock,
    .io_release = ini_wire_io_release,
    .io_retake = ini_wire_io_retake,
};

int ini_conn_feed(struct ini_conn *c, const void *bytes, uint32_t len)
{
    wire_feed(&c->w, bytes, len);
    return c->state == ICS_DEAD ? -1 : 0;
}

static void conn_io_locked(struct ini_conn *c, uint32_t events)
{
    if (c->state == ICS_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof(err);
        getsockopt(c->w.fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            errno = err;
            conn_fail_sys(c, "connect failed");
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(c->w.fd, (struct sockaddr *)&ss, &sl) == 0)
            c->local_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                           : ((struct sockaddr_in *)&ss)->sin_port);
        c->state = ICS_LOGIN;
        c->w.tx_hold = false;
        if (ini_conn_fail(c, c->s->conn_ops->connected(c)) == INI_OK && c->state != ICS_DEAD)
            wire_flush(&c->w); /* the first Login Request, and EPOLLOUT off */
        return;
    }
    wire_event(&c->w, events);
}

static void conn_io(void *arg, uint32_t events)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    conn_io_locked(c, events);
    ini_unlock(c->s);
}

/* ---- the session's connections ---- */

static void login_timeout(void *arg)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    ini_conn_close(c, "login timed out");
    ini_unlock(c->s);
}

struct ini_conn *ini_conn_add(struct lr_session *s)
{
    unsigned i = s->nconns;
    struct ini_conn *c = ini_conn_new(s, i, (uint16_t)i);
    if (!c)
        return NULL;
    c->leading = i == 0;
    s->conns[s->nconns++] = c;
    c->login_active = true; /* login phase until full feature phase (texts are zeroed) */
    reactor_timer_start(s->r, &c->login_timer, s->o.login_timeout_ms, login_timeout, c);
    if (ini_conn_connect(c, s->host, s->o.port) < 0) {
        ini_conn_close(c, "cannot connect");
        return NULL;
    }
    return c;
}

/* A retired connection's buffers, once the loop turn that retired it is over. */
static void conn_free_buffers(void *arg)
{
    struct ini_conn *c = arg;
    wire_free(&c->w);
}

struct ini_conn *ini_conn_reconnect(struct lr_session *s, unsigned i, bool leading)
{
    assert(i < s->nconns && s->conns[i]->state == ICS_DEAD);
    struct ini_conn *old = s->conns[i];
    struct ini_conn *c = ini_conn_new(s, i, old->cid);
    if (!c)
        return NULL;
    /* The old one stays allocated (messages may still name it) and counted (fault totals);
     * its engine is closed already, its buffers go at the end of this loop turn: not now,
     * since we may be inside its own receive path (a connection that failed while reading,
     * logged in again at once at Time2Wait 0), which is still parsing out of the reactor's
     * shared buffer and gives it back on the way out (torture seed 1003). */
    reactor_defer(s->r, &old->free_d, conn_free_buffers,
                  old); /* we run on s->r (orphan.c, relogin.c) */
    c->retired = old;
    c->reconnect = true;
    c->leading = leading;
    s->conns[i] = c;
    c->login_active = true;
    reactor_timer_start(s->r, &c->login_timer, s->o.login_timeout_ms, login_timeout, c);
    if (ini_conn_connect(c, s->host, s->o.port) < 0) {
        ini_conn_close(c, "cannot connect");
        return NULL;
    }
    return c;
}
