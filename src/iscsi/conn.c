/* A target connection's byte engine: the resumable receive state machine (BHS, AHS, header
 * digest, data, data digest) that walks every complete PDU in one recv's worth of bytes and
 * reads large payloads straight into their final place; the transmit queue flushed once per
 * loop turn with writev; NOP-In liveness pings; and teardown. */
#include <assert.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iscsi/conn.h"
#include "util/crc32c.h"
#include "util/iov.h"
#include "util/log.h"

#define TX_IOV_MAX 256
#define TX_FREE_KEEP 64
#define RX_DIRECT_MIN 4096u        /* payloads at least this big bypass the rx buffer */
#define RX_BUDGET_BYTES (4u << 20) /* per wake-up, so one busy peer cannot starve others */
#define LOGIN_DATA_MAX 8192u       /* RFC 7143 §13.12: login PDUs carry at most 8192 bytes */

static void conn_flush(void *arg);
static void conn_pending_done(struct iscsi_conn *c);
static void conn_timer_fire(void *arg);

/* ---------------- lifetime ---------------- */

void conn_get(struct iscsi_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void conn_free(void *arg)
{
    struct iscsi_conn *c = arg;
    struct list_node *n;
    while ((n = list_pop(&c->task_free)) != NULL)
        free(list_entry(n, struct iscsi_task, node));
    while ((n = list_pop(&c->tx_free)) != NULL)
        free(list_entry(n, struct tx_pdu, node));
    iscsi_text_free(&c->login_in);
    iscsi_text_free(&c->login_out);
    free(c->rxbuf);
    free(c->databuf);
    atomic_fetch_sub(&c->srv->nconns, 1);
    reactor_load_add(c->reactor, -1);
    free(c);
}

void conn_put(struct iscsi_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    /* The free always runs on the owner's thread: the rest of c is that thread's alone. */
    if (reactor_self() == c->reactor)
        reactor_defer(c->reactor, &c->free_hook, conn_free, c);
    else
        reactor_post(c->reactor, &c->free_msg, conn_free, c);
}

/* A connection's fields before it has a socket: login phase, login-sized buffers, empty
 * queues, counted in the server and the reactor's load. NULL when memory ran out. */
static struct iscsi_conn *conn_alloc(struct iscsi_server *srv, struct reactor *r,
                                     const struct iscsi_portal_addr *portal)
{
    /* The receive buffer is allocated when the first bytes arrive, at the login size, and the
     * data buffer starts at the login size too; both grow on first use in full feature phase:
     * hundreds of idle or half-open connections cost a few KiB each, not 512 KiB. */
    struct iscsi_conn *c = calloc(1, sizeof(*c));
    uint8_t *databuf = malloc(LOGIN_DATA_MAX);
    if (!c || !databuf) {
        free(c);
        free(databuf);
        return NULL;
    }
    c->srv = srv;
    c->reactor = r;
    c->fd = -1;
    c->portal = portal;
    c->databuf = databuf;
    c->databuf_size = LOGIN_DATA_MAX;
    c->refs = 1;
    c->phase = CONN_LOGIN;
    c->max_recv_dsl = LOGIN_DATA_MAX;
    c->max_send_dsl = LOGIN_DATA_MAX;
    c->next_ttt = 1;
    c->inject = srv->inject;
    list_init(&c->txq);
    list_init(&c->tx_free);
    list_init(&c->tasks);
    list_init(&c->retained);
    list_init(&c->task_free);
    list_init(&c->r2t_waiting);
    list_init(&c->released);
    list_init(&c->session_node);
    iscsi_text_init(&c->login_in);
    iscsi_text_init(&c->login_out);
    atomic_fetch_add(&srv->nconns, 1);
    reactor_load_add(r, 1);
    c->last_rx_ms = reactor_now_ms();
    c->accept_ms = c->last_rx_ms;
    return c;
}

void iscsi_conn_accept(struct iscsi_server *srv, struct reactor *r, int fd,
                       const struct iscsi_portal_addr *portal)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[48] = "?", peer[64];
    unsigned port = 0;
    uint8_t addr[16];
    uint8_t addr_len = 0;
    memset(&ss, 0, sizeof(ss));
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
            port = ntohs(sin->sin_port);
            memcpy(addr, &sin->sin_addr, 4);
            addr_len = 4;
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
            port = ntohs(sin6->sin6_port);
            memcpy(addr, &sin6->sin6_addr, 16);
            addr_len = 16;
        }
    }
    snprintf(peer, sizeof(peer), ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
    /* The pending-login limits are checked before anything is allocated for the connection:
     * past them it is closed at once, costing a descriptor for a moment and nothing else. */
    if (!iscsi_server_pending_add(srv, addr, addr_len, peer)) {
        close(fd);
        return;
    }
    struct iscsi_conn *c = conn_alloc(srv, r, portal);
    if (!c) {
        LOG_ERR("out of memory accepting a connection");
        iscsi_server_pending_del(srv, addr, addr_len);
        close(fd);
        return;
    }
    memcpy(c->peer_addr, addr, addr_len);
    c->peer_addr_len = addr_len;
    c->pending_counted = true;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->fd = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    if (reactor_fd_add(r, &c->rfd, fd, EPOLLIN | EPOLLRDHUP, NULL, c) < 0) {
        LOG_ERR("%s: cannot watch socket", c->peer);
        close(fd);
        c->fd = -1;
        conn_pending_done(c);
        conn_put(c);
        return;
    }
    c->rfd.fn = conn_on_event;
    reactor_timer_start(r, &c->timer, 1000, conn_timer_fire, c);
    LOG_DEBUG("%s: connected on portal %s", c->peer, portal ? portal->text : "?");
}

/* The connection is no longer one waiting to log in (logged in, or closing). */
static void conn_pending_done(struct iscsi_conn *c)
{
    if (!c->pending_counted)
        return;
    c->pending_counted = false;
    iscsi_server_pending_del(c->srv, c->peer_addr, c->peer_addr_len);
}

void conn_close(struct iscsi_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    c->logged_out = c->phase == CONN_LOGGED_OUT;
    c->phase = CONN_CLOSING;
    if (why)
        CONN_LOG_LOGIN(c, LOG_LVL_INFO, "%s: closing connection%s%s: %s", c->peer,
                       c->session && c->session->node ? " to " : "",
                       c->session && c->session->node ? c->session->node->name : "", why);
    conn_pending_done(c);
    unsigned sup = log_limit_take_suppressed(&c->log_rl);
    if (sup)
        LOG_INFO("%s: %u more lines not logged", c->peer, sup);
    reactor_undefer(&c->rx_resume_hook);
    reactor_timer_stop(c->reactor, &c->timer);
    reactor_timer_stop(c->reactor, &c->inject_timer);
    if (c->fd >= 0) { /* a detached connection (test seam) has none */
        reactor_fd_del(c->reactor, &c->rfd);
        shutdown(c->fd, SHUT_RDWR);
        close(c->fd);
        c->fd = -1;
    }
    /* Drop everything queued: the PDUs' owners learn they were not sent. */
    struct list_node *n;
    while ((n = list_pop(&c->txq)) != NULL) {
        struct tx_pdu *p = list_entry(n, struct tx_pdu, node);
        free(p->owned);
        p->owned = NULL;
        if (p->sent)
            p->sent(p, false);
        free(p);
    }
    if (c->rx_pdu.task) { /* closed in the middle of a PDU placed into a task */
        struct iscsi_task *t = c->rx_pdu.task;
        c->rx_pdu.task = NULL;
        task_put(t);
    }
    cmd_conn_teardown(c);
    login_conn_cleanup(c);
    if (c->session)
        session_remove_conn(c->session, c);
    conn_put(c);
}

int conn_fail(struct iscsi_conn *c, int status)
{
    if (status < 0)
        conn_close(c, iscsi_status_str(status));
    return status;
}

static void conn_close_msg_run(void *arg)
{
    struct iscsi_conn *c = arg;
    conn_close(c, atomic_load(&c->close_why));
    conn_put(c);
}

void conn_close_async(struct iscsi_conn *c, const char *why)
{
    assert(why);
    const char *none = NULL;
    if (!atomic_compare_exchange_strong(&c->close_why, &none, why))
        return;  /* already asked: that message closes it */
    conn_get(c); /* the message's, dropped once it has run */
    bool queued = reactor_post(c->reactor, &c->close_msg, conn_close_msg_run, c);
    assert(queued); /* close_why is set once, so close_msg is posted once */
    (void)queued;
}

/* ---------------- transmit ---------------- */

struct tx_pdu *conn_tx_alloc(struct iscsi_conn *c)
{
    struct list_node *n = list_pop(&c->tx_free);
    struct tx_pdu *p;
    if (n) {
        c->tx_free_count--;
        p = list_entry(n, struct tx_pdu, node);
    } else {
        p = malloc(sizeof(*p));
        if (!p)
            return NULL;
    }
    memset(p, 0, offsetof(struct tx_pdu, hdr) + ISCSI_BHS_LEN);
    p->datacnt = 0;
    p->dlen = 0;
    p->owned = NULL;
    p->sent = NULL;
    p->arg = NULL;
    list_init(&p->node);
    return p;
}

static void tx_release(struct iscsi_conn *c, struct tx_pdu *p)
{
    free(p->owned);
    if (c->tx_free_count < TX_FREE_KEEP) {
        c->tx_free_count++;
        list_add_tail(&c->tx_free, &p->node);
    } else {
        free(p);
    }
}

struct tx_pdu *conn_pdu_new(struct iscsi_conn *c, enum iscsi_opcode op, uint8_t flags)
{
    struct tx_pdu *p = conn_tx_alloc(c);
    if (!p)
        return NULL;
    bhs_init((struct iscsi_bhs *)p->hdr, op, flags);
    return p;
}

int conn_send_response(struct iscsi_conn *c, enum iscsi_opcode op, const struct iscsi_bhs *req,
                       uint8_t response)
{
    struct tx_pdu *p = conn_pdu_new(c, op, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_RESPONSE] = response;
    bhs_put32(h, BHS_ITT, bhs_get32(req, BHS_ITT));
    conn_fill_sn(c, h, true);
    conn_send(c, p);
    return ISCSI_OK;
}

/* What a queued PDU counts against max-tx-backlog: the bytes it owns (a copy: text, sense,
 * NOP-In echo, Reject) and its bookkeeping. Data-In sent from where the data lives (LUN memory,
 * a task buffer already bounded per connection) is not copied and costs only the bookkeeping. */
static uint64_t tx_charge(const struct tx_pdu *p)
{
    return ISCSI_TX_PDU_CHARGE + (p->owned ? p->dlen : 0);
}

void conn_send(struct iscsi_conn *c, struct tx_pdu *p)
{
    /* Handlers run on live connections only, and the asynchronous senders (store completions,
     * TMF answers, timers) check first. */
    assert(!c->dead);
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_set_dlength(h, p->dlen);
    p->hdr_len = ISCSI_BHS_LEN;
    if (c->hdigest) {
        uint32_t crc = crc32c(p->hdr, ISCSI_BHS_LEN);
        memcpy(p->hdr + ISCSI_BHS_LEN, &crc, 4); /* little-endian on the wire (x86/arm LE) */
        p->hdr_len += 4;
    }
    p->trailer_len = 0;
    uint32_t pad = ISCSI_PAD(p->dlen) - p->dlen;
    if (pad) {
        memset(p->trailer, 0, pad);
        p->trailer_len = pad;
    }
    if (c->ddigest && p->dlen) {
        uint32_t crc = CRC32C_INIT;
        for (int i = 0; i < p->datacnt; i++)
            crc = crc32c_update(crc, p->data[i].iov_base, p->data[i].iov_len);
        if (pad)
            crc = crc32c_update(crc, p->trailer, pad);
        crc = crc32c_final(crc);
        memcpy(p->trailer + pad, &crc, 4);
        p->trailer_len += 4;
    }
    if (conn_erl(c) >= 1)
        snack_keep_response(c, h, p->data, p->datacnt, p->dlen);
    list_add_tail(&c->txq, &p->node);
    c->tx_backlog += tx_charge(p);
    reactor_defer(c->reactor, &c->flush_hook, conn_flush, c);
}

int conn_send_copy(struct iscsi_conn *c, struct tx_pdu *p, const void *data, uint32_t len)
{
    if (len) {
        p->owned = malloc(len);
        if (!p->owned) {
            if (p->sent)
                p->sent(p, false);
            tx_release(c, p);
            return ISCSI_ERR_NOMEM;
        }
        memcpy(p->owned, data, len);
        p->data[0].iov_base = p->owned;
        p->data[0].iov_len = len;
        p->datacnt = 1;
    }
    p->dlen = len;
    conn_send(c, p);
    return ISCSI_OK;
}

static void conn_update_events(struct iscsi_conn *c)
{
    if (c->dead || c->fd < 0)
        return;
    reactor_fd_mod(c->reactor, &c->rfd,
                   (c->rx_paused ? 0 : EPOLLIN | EPOLLRDHUP) | (c->want_write ? EPOLLOUT : 0));
}

static void conn_set_want_write(struct iscsi_conn *c, bool on)
{
    if (c->want_write == on || c->dead)
        return;
    c->want_write = on;
    conn_update_events(c);
}

/* ---------------- receive back-pressure ---------------- */

/* A peer that sends requests and does not read the answers (a NOP-Out flood, rejected PDUs,
 * commands) would make the reply queue grow without bound: past max-tx-backlog the target
 * stops reading from it, so its requests wait in the socket and TCP flow control pushes back
 * on the sender. A stuck peer then also stops answering NOP-In and is dropped at nop-timeout. */
static bool conn_tx_over(const struct iscsi_conn *c)
{
    uint64_t max = c->srv->limits.max_tx_backlog;
    return max && c->tx_backlog > max;
}

static void conn_rx_pause(struct iscsi_conn *c)
{
    if (c->rx_paused)
        return;
    c->rx_paused = true;
    LOG_DEBUG("%s: %llu bytes of replies unsent: not reading until they drain", c->peer,
              (unsigned long long)c->tx_backlog);
    conn_update_events(c);
}

static int rx_parse(struct iscsi_conn *c);

/* Bytes already received when the connection paused are parsed before anything new is read. */
static void conn_rx_resume(void *arg)
{
    struct iscsi_conn *c = arg;
    assert(!c->dead); /* conn_close() undefers it, and only a live flush defers it */
    if (c->rx_paused || !c->rxbuf)
        return;
    conn_get(c);
    rx_parse(c);
    conn_put(c);
}

static void conn_rx_maybe_resume(struct iscsi_conn *c)
{
    if (!c->rx_paused || c->tx_backlog > c->srv->limits.max_tx_backlog / 2)
        return;
    c->rx_paused = false;
    conn_update_events(c);
    reactor_defer(c->reactor, &c->rx_resume_hook, conn_rx_resume, c);
}

/* The queued bytes from tx_off on, as at most `max` iovecs (whole PDUs while they fit). */
static int tx_gather(struct iscsi_conn *c, struct iovec *iov, int max)
{
    int n = 0;
    uint32_t skip = c->tx_off;
    for (struct list_node *ln = c->txq.next; ln != &c->txq && n <= max - (SCSI_TASK_IOV_MAX + 2);
         ln = ln->next) {
        struct tx_pdu *p = list_entry(ln, struct tx_pdu, node);
        struct iovec parts[SCSI_TASK_IOV_MAX + 2];
        int np = 0;
        parts[np++] = (struct iovec){p->hdr, p->hdr_len};
        for (int i = 0; i < p->datacnt; i++)
            parts[np++] = p->data[i];
        if (p->trailer_len)
            parts[np++] = (struct iovec){p->trailer, p->trailer_len};
        for (int i = 0; i < np; i++) {
            if (skip >= parts[i].iov_len) {
                skip -= (uint32_t)parts[i].iov_len;
                continue;
            }
            iov[n].iov_base = (char *)parts[i].iov_base + skip;
            iov[n].iov_len = parts[i].iov_len - skip;
            skip = 0;
            if (iov[n].iov_len)
                n++;
        }
    }
    return n;
}

/* `w` more bytes of the queue are on the wire: retire every PDU now fully written. */
static void tx_retire(struct iscsi_conn *c, uint64_t w)
{
    uint64_t done = w + c->tx_off;
    while (!list_empty(&c->txq)) {
        struct tx_pdu *p = list_entry(c->txq.next, struct tx_pdu, node);
        uint64_t len = p->hdr_len + p->dlen + p->trailer_len;
        if (done < len)
            break;
        done -= len;
        list_del(&p->node);
        c->tx_backlog -= tx_charge(p);
        if (p->sent)
            p->sent(p, true);
        tx_release(c, p);
    }
    c->tx_off = (uint32_t)done;
    conn_rx_maybe_resume(c);
}

/* Write as much of the queue as the socket takes, in as few writev calls as possible. */
static void conn_flush(void *arg)
{
    struct iscsi_conn *c = arg;
    if (c->fd < 0)
        return; /* detached (test seam): iscsi_conn_take_tx() empties the queue */
    while (!c->dead && !list_empty(&c->txq)) {
        struct iovec iov[TX_IOV_MAX];
        int n = tx_gather(c, iov, TX_IOV_MAX);
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_set_want_write(c, true);
                return;
            }
            if (errno == EINTR)
                continue;
            conn_close(c, errno == EPIPE || errno == ECONNRESET ? "peer went away" : "send failed");
            return;
        }
        tx_retire(c, (uint64_t)w);
    }
    if (c->dead)
        return;
    conn_set_want_write(c, false);
    if (c->phase == CONN_LOGGED_OUT && list_empty(&c->txq))
        conn_close(c, NULL);
}

/* ---------------- sequence numbers and common answers ---------------- */

void conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance)
{
    bhs_put32(h, BHS_STATSN, c->statsn);
    if (advance)
        c->statsn++;
    uint32_t exp, max;
    if (c->session) {
        session_window(c->session, &exp, &max);
    } else {
        exp = c->login_cmdsn;
        max = exp;
    }
    bhs_put32(h, BHS_EXPCMDSN, exp);
    bhs_put32(h, BHS_MAXCMDSN, max);
}

/* RFC 7143 §11.17: a Reject carries the offending header as its data. */
int conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason)
{
    struct tx_pdu *p = conn_pdu_new(c, ISCSI_OP_REJECT, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    h->b[BHS_REJECT_REASON] = reason;
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
    /* One line per rejected PDU would let a peer write the log at wire speed. */
    CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: reject %s (reason 0x%02x)", c->peer,
                     iscsi_opcode_name(bhs_opcode(bad)), reason);
    return conn_send_copy(c, p, bad->b, ISCSI_BHS_LEN);
}

/* ---------------- task lookup ---------------- */

static unsigned task_hash(uint32_t itt)
{
    return (itt ^ (itt >> 8) ^ (itt >> 16)) & (ISCSI_TASK_HASH_SIZE - 1);
}

void conn_task_hash_add(struct iscsi_conn *c, struct iscsi_task *t)
{
    unsigned b = task_hash(t->itt);
    t->hash_next = c->task_hash[b];
    c->task_hash[b] = t;
    t->in_hash = true;
}

void conn_task_hash_del(struct iscsi_conn *c, struct iscsi_task *t)
{
    if (!t->in_hash)
        return;
    struct iscsi_task **pp = &c->task_hash[task_hash(t->itt)];
    while (*pp && *pp != t)
        pp = &(*pp)->hash_next;
    if (*pp)
        *pp = t->hash_next;
    t->in_hash = false;
}

struct iscsi_task *conn_task_find(struct iscsi_conn *c, uint32_t itt)
{
    for (struct iscsi_task *t = c->task_hash[task_hash(itt)]; t; t = t->hash_next)
        if (t->itt == itt)
            return t;
    return NULL;
}

/* ---------------- receive ---------------- */

/* Where the data segment of the current PDU goes when no handler claimed it. */
static int rx_dest_databuf(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    if (p->dlen > c->databuf_size) {
        /* rx_check_header bounded dlen by what we declared (at most MRDSL_MAX) */
        uint32_t size = p->dlen > ISCSI_TARGET_MRDSL_MAX ? p->dlen : ISCSI_TARGET_MRDSL_MAX;
        uint8_t *b = realloc(c->databuf, size);
        if (!b)
            return ISCSI_ERR_NOMEM;
        c->databuf = b;
        c->databuf_size = size;
    }
    p->dst[0].iov_base = c->databuf;
    p->dst[0].iov_len = p->dlen;
    p->dstcnt = p->dlen ? 1 : 0;
    p->data = c->databuf;
    return ISCSI_OK;
}

static int rx_begin_data_or_finish(struct iscsi_conn *c)
{
    c->rx_got = 0;
    c->rx_crc = CRC32C_INIT;
    if (c->rx_padded == 0) {
        c->rx_state = RX_BHS;
        return conn_pdu_done(c, &c->rx_pdu);
    }
    c->rx_state = RX_DATA;
    return ISCSI_OK;
}

/* Header (and its digest) complete: the header phase decides where the data segment goes. */
static int rx_header_complete(struct iscsi_conn *c)
{
    struct iscsi_pdu_in *p = &c->rx_pdu;
    p->data = NULL;
    p->dstcnt = 0;
    p->discard = false;
    p->data_digest_bad = false;
    p->reject_reason = 0;
    assert(!p->task); /* released at the end of the previous PDU */
    int rc = conn_pdu_header(c, p);
    if (rc < 0)
        return rc;
    if (p->dstcnt == 0 && !p->discard) {
        rc = rx_dest_databuf(c, p);
        if (rc < 0)
            return conn_fail(c, rc);
    }
    return rx_begin_data_or_finish(c);
}

static int rx_check_header(struct iscsi_conn *c)
{
    struct iscsi_pdu_in *p = &c->rx_pdu;
    enum iscsi_opcode op = bhs_opcode(&p->bhs);
    p->dlen = bhs_dlength(&p->bhs);
    c->rx_padded = ISCSI_PAD(p->dlen);
    /* Checked before anything is allocated or read: the data segment is bounded by what we
     * declared (§13.12), 8192 during login. */
    uint32_t limit = c->phase == CONN_LOGIN ? LOGIN_DATA_MAX : c->max_recv_dsl;
    if (p->dlen > limit) {
        LOG_WARN("%s: %s data segment of %u bytes exceeds MaxRecvDataSegmentLength %u", c->peer,
                 iscsi_opcode_name(op), p->dlen, limit);
        return conn_fail(c, ISCSI_ERR_OVERSIZED);
    }
    return ISCSI_OK;
}

/* Collect a 4-byte digest from rxbuf and check it against the running CRC. Returns 1 once it
 * is complete and good, 0 while bytes are missing; a bad digest closes the connection (ERL 0
 * cannot recover, §7.8) and returns its status. */
static int rx_take_digest(struct iscsi_conn *c, const uint8_t *p, uint32_t avail, bool header)
{
    uint32_t n = 4 - c->rx_got;
    if (n > avail)
        n = avail;
    memcpy(c->rx_digest + c->rx_got, p, n);
    c->rx_got += n;
    c->rx_head += n;
    if (c->rx_got < 4)
        return 0;
    c->rx_got = 0;
    uint32_t want = crc32c_final(c->rx_crc), got;
    memcpy(&got, c->rx_digest, 4);
    if (want == got)
        return 1;
    if (!header && conn_erl(c) >= 1) {
        /* ERL >= 1: the handler rejects the PDU and recovers (RFC 7143 §7.8) */
        CONN_LOG_LIMITED(c, LOG_LVL_INFO, "%s: data digest error on %s ITT 0x%08x", c->peer,
                         iscsi_opcode_name(bhs_opcode(&c->rx_pdu.bhs)),
                         bhs_get32(&c->rx_pdu.bhs, BHS_ITT));
        c->rx_pdu.data_digest_bad = true;
        return 1;
    }
    LOG_WARN("%s: %s digest error on %s ITT 0x%08x (got 0x%08x, computed 0x%08x)", c->peer,
             header ? "header" : "data", iscsi_opcode_name(bhs_opcode(&c->rx_pdu.bhs)),
             bhs_get32(&c->rx_pdu.bhs, BHS_ITT), got, want);
    return conn_fail(c, header ? ISCSI_ERR_HDIGEST : ISCSI_ERR_DDIGEST);
}

/* Walk the bytes in rxbuf[head, tail). A negative status: the connection was closed. */
static int rx_parse(struct iscsi_conn *c)
{
    struct iscsi_pdu_in *pdu = &c->rx_pdu;
    int rc = ISCSI_OK;
    while (rc >= 0 && c->rx_head < c->rx_tail) {
        if (conn_tx_over(c)) {
            conn_rx_pause(c); /* the rest stays in rxbuf until the replies drain */
            return ISCSI_OK;
        }
        uint8_t *p = c->rxbuf + c->rx_head;
        uint32_t avail = c->rx_tail - c->rx_head;
        uint32_t n;
        switch (c->rx_state) {
        case RX_BHS:
            n = ISCSI_BHS_LEN - c->rx_got;
            if (n > avail)
                n = avail;
            memcpy(pdu->bhs.b + c->rx_got, p, n);
            c->rx_got += n;
            c->rx_head += n;
            if (c->rx_got < ISCSI_BHS_LEN)
                break;
            c->rx_got = 0;
            c->last_rx_ms = reactor_now_ms();
            rc = rx_check_header(c);
            if (rc < 0)
                break;
            if (c->hdigest)
                c->rx_crc = crc32c_update(CRC32C_INIT, pdu->bhs.b, ISCSI_BHS_LEN);
            if (bhs_ahs_bytes(&pdu->bhs))
                c->rx_state = RX_AHS;
            else if (c->hdigest)
                c->rx_state = RX_HDIGEST;
            else
                rc = rx_header_complete(c);
            break;
        case RX_AHS: {
            /* We use no AHS (no extended CDBs, no bidirectional): skip it, but keep it in the
             * header digest. The command handler refuses commands that needed it. */
            uint32_t total = bhs_ahs_bytes(&pdu->bhs);
            n = total - c->rx_got;
            if (n > avail)
                n = avail;
            c->rx_crc = crc32c_update(c->rx_crc, p, n);
            c->rx_got += n;
            c->rx_head += n;
            if (c->rx_got < total)
                break;
            c->rx_got = 0;
            if (c->hdigest)
                c->rx_state = RX_HDIGEST;
            else
                rc = rx_header_complete(c);
            break;
        }
        case RX_HDIGEST:
            rc = rx_take_digest(c, p, avail, true);
            if (rc > 0)
                rc = rx_header_complete(c);
            break;
        case RX_DATA: {
            n = c->rx_padded - c->rx_got;
            if (n > avail)
                n = avail;
            /* into the destination at offset rx_got (pad bytes fall off its end) */
            if (c->ddigest)
                c->rx_crc = crc32c_update(c->rx_crc, p, n);
            if (!pdu->discard)
                iov_copy_in(pdu->dst, pdu->dstcnt, c->rx_got, p, n);
            c->rx_got += n;
            c->rx_head += n;
            if (c->rx_got < c->rx_padded)
                break;
            c->rx_got = 0;
            if (c->ddigest) {
                c->rx_state = RX_DDIGEST;
            } else {
                c->rx_state = RX_BHS;
                rc = conn_pdu_done(c, pdu);
            }
            break;
        }
        case RX_DDIGEST:
            rc = rx_take_digest(c, p, avail, false);
            if (rc > 0) {
                c->rx_state = RX_BHS;
                rc = conn_pdu_done(c, pdu);
            }
            break;
        }
        /* Only a negative status closes the connection: nothing a handler calls closes it. */
        assert(rc < 0 || !c->dead);
    }
    if (rc < 0)
        return rc;
    if (c->rx_head == c->rx_tail)
        c->rx_head = c->rx_tail = 0;
    return ISCSI_OK;
}

/* Direct data placement: the rx buffer is empty and a large payload is due, so read it
 * straight into its destination; whatever follows it lands in the rx buffer. *status: a
 * negative one when the PDU it completed closed the connection. */
static ssize_t rx_read_direct(struct iscsi_conn *c, size_t *asked, int *status)
{
    struct iscsi_pdu_in *p = &c->rx_pdu;
    struct iovec iov[SCSI_TASK_IOV_MAX + 2];
    /* never past the data segment: padding and what follows go to the rx buffer */
    uint32_t data_left = p->dlen > c->rx_got ? p->dlen - c->rx_got : 0;
    int n = iov_slice(p->dst, p->dstcnt, c->rx_got, data_left, iov, SCSI_TASK_IOV_MAX + 1);
    uint32_t direct = 0;
    for (int i = 0; i < n; i++)
        direct += (uint32_t)iov[i].iov_len;
    iov[n].iov_base = c->rxbuf;
    iov[n].iov_len = c->rxbuf_size;
    *asked = 0;
    *status = ISCSI_OK;
    for (int i = 0; i <= n; i++)
        *asked += iov[i].iov_len;
    ssize_t r = readv(c->fd, iov, n + 1);
    if (r <= 0)
        return r;
    uint32_t into_dst = (uint32_t)r < direct ? (uint32_t)r : direct;
    if (c->ddigest) {
        uint32_t left = into_dst;
        for (int i = 0; i < n && left; i++) {
            uint32_t k = iov[i].iov_len < left ? (uint32_t)iov[i].iov_len : left;
            c->rx_crc = crc32c_update(c->rx_crc, iov[i].iov_base, k);
            left -= k;
        }
    }
    c->rx_got += into_dst;
    c->rx_head = 0;
    c->rx_tail = (uint32_t)r - into_dst;
    if (c->rx_got == c->rx_padded) {
        c->rx_got = 0;
        if (c->ddigest) {
            c->rx_state = RX_DDIGEST;
        } else {
            c->rx_state = RX_BHS;
            *status = conn_pdu_done(c, p);
        }
    }
    return r;
}

/* The receive buffer at the size of the connection's phase; false (closed) without memory. */
static bool conn_rxbuf_ready(struct iscsi_conn *c)
{
    uint32_t want = c->phase == CONN_LOGIN ? ISCSI_RXBUF_LOGIN_SIZE : ISCSI_RXBUF_SIZE;
    if (c->rxbuf_size < want) {
        /* realloc keeps bytes not parsed yet (offsets are relative) */
        uint8_t *b = realloc(c->rxbuf, want);
        if (!b) {
            conn_fail(c, ISCSI_ERR_NOMEM);
            return false;
        }
        c->rxbuf = b;
        c->rxbuf_size = want;
    }
    return true;
}

static void conn_rx(struct iscsi_conn *c)
{
    uint32_t budget = RX_BUDGET_BYTES;
    if (!conn_rxbuf_ready(c))
        return;
    while (budget) {
        if (c->rx_paused || conn_tx_over(c)) {
            conn_rx_pause(c);
            return;
        }
        ssize_t r;
        size_t asked;
        const struct iscsi_pdu_in *p = &c->rx_pdu;
        if (c->rx_state == RX_DATA && !p->discard && c->rx_head == c->rx_tail &&
            p->dlen - (c->rx_got < p->dlen ? c->rx_got : p->dlen) >= RX_DIRECT_MIN &&
            p->dlen > c->rx_got) {
            int st;
            r = rx_read_direct(c, &asked, &st);
            if (st < 0)
                return;
        } else {
            if (c->rx_tail == c->rxbuf_size) /* cannot happen: parse drains unless paused */
                c->rx_head = c->rx_tail = 0;
            asked = c->rxbuf_size - c->rx_tail;
            r = recv(c->fd, c->rxbuf + c->rx_tail, asked, MSG_DONTWAIT);
            if (r > 0)
                c->rx_tail += (uint32_t)r;
        }
        if (r == 0) {
            conn_close(c, c->phase == CONN_LOGGED_OUT ? NULL : "peer closed the connection");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            conn_close(c, "receive failed");
            return;
        }
        budget = (uint32_t)r >= budget ? 0 : budget - (uint32_t)r;
        if (rx_parse(c) < 0 || c->rx_paused)
            return;
        /* A short read drained the socket: the next recv would only say EAGAIN. Epoll is
         * level-triggered, so anything arriving later wakes us again. */
        if ((size_t)r < asked)
            break;
    }
}

void conn_on_event(void *arg, uint32_t events)
{
    struct iscsi_conn *c = arg;
    if (c->dead)
        return;
    conn_get(c);
    if (c->rx_paused && (events & (EPOLLERR | EPOLLHUP)))
        conn_close(c, "peer went away"); /* not read while paused: nothing else would see it */
    else if (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
        conn_rx(c);
    if (!c->dead && (events & EPOLLOUT))
        conn_flush(c);
    conn_put(c);
}

/* ---------------- PDU dispatch ---------------- */

static bool opcode_allowed_in_login(enum iscsi_opcode op)
{
    return op == ISCSI_OP_LOGIN_REQ;
}

static int pdu_header_dispatch(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    enum iscsi_opcode op = bhs_opcode(&p->bhs);
    if (c->phase == CONN_LOGIN) {
        if (!opcode_allowed_in_login(op)) {
            LOG_WARN("%s: %s before login completed", c->peer, iscsi_opcode_name(op));
            return ISCSI_ERR_NOT_IN_LOGIN;
        }
        return ISCSI_OK;
    }
    if (op != ISCSI_OP_LOGIN_REQ && (op != ISCSI_OP_SNACK || conn_erl(c) >= 1)) {
        c->exp_statsn = bhs_get32(&p->bhs, BHS_EXPSTATSN);
        /* ERL >= 1: what the initiator acknowledged needs keeping no longer (§4.2.2.2) */
        if (!list_empty(&c->retained))
            cmd_ack_statsn(c, c->exp_statsn);
    }
    switch (op) {
    case ISCSI_OP_SCSI_CMD:
        return cmd_handle_scsi_header(c, p);
    case ISCSI_OP_DATA_OUT:
        return cmd_handle_data_out_header(c, p);
    default:
        return ISCSI_OK;
    }
}

int conn_pdu_header(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    return conn_fail(c, pdu_header_dispatch(c, p));
}

static int nop_out_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint32_t itt = bhs_get32(req, BHS_ITT);
    uint32_t ttt = bhs_get32(req, BHS_TTT);
    if (!bhs_immediate(req) && c->session)
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    if (ttt != ISCSI_RSVD_TAG) {
        /* The answer to our ping (RFC 7143 §11.18). */
        if (c->nop_outstanding && ttt == c->nop_ttt)
            c->nop_outstanding = false;
        return ISCSI_OK;
    }
    if (itt == ISCSI_RSVD_TAG)
        return ISCSI_OK; /* a ping that asks for no answer */
    struct tx_pdu *rsp = conn_pdu_new(c, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL);
    if (!rsp)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)rsp->hdr;
    memcpy(h->b + BHS_LUN, req->b + BHS_LUN, 8);
    bhs_put32(h, BHS_ITT, itt);
    bhs_put32(h, BHS_TTT, ISCSI_RSVD_TAG);
    conn_fill_sn(c, h, true);
    return conn_send_copy(c, rsp, p->data, p->dlen); /* ping data echoed back */
}

static int logout_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    struct iscsi_bhs *req = &p->bhs;
    uint8_t reason = req->b[1] & 0x7f;
    uint8_t response = 0;
    if (!bhs_immediate(req) && c->session)
        session_consume_cmdsn(c->session, bhs_get32(req, BHS_CMDSN));
    struct iscsi_conn *victim = c;
    if (reason == ISCSI_LOGOUT_CLOSE_CONNECTION) {
        uint16_t cid = get_be16(req->b + BHS_CID);
        if (cid != c->cid) {
            victim = session_find_conn(c->session, cid);
            if (!victim)
                response = 1; /* CID not found */
        }
    } else if (reason == ISCSI_LOGOUT_REMOVE_FOR_RECOVERY) {
        response = 2; /* connection recovery is not supported (ERL 0) */
    } else if (reason != ISCSI_LOGOUT_CLOSE_SESSION) {
        return conn_send_reject(c, req, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    /* A logout that ends the session ends its I_T nexus before the answer goes out: the
     * initiator may act on another session the moment it has the Logout Response. */
    struct iscsi_session *s = c->session;
    if (response == 0 && s && s->nexus) {
        pthread_mutex_lock(&s->lock);
        bool ends_session = reason == ISCSI_LOGOUT_CLOSE_SESSION || (victim == c && s->nconns == 1);
        if (ends_session)
            s->logged_out = true;
        pthread_mutex_unlock(&s->lock);
        if (ends_session)
            scsi_nexus_logout(s->nexus);
    }
    /* Time2Wait and Time2Retain stay 0: nothing to wait for or retain at ERL 0 (§11.15). */
    int rc = conn_send_response(c, ISCSI_OP_LOGOUT_RSP, req, response);
    if (rc < 0 || response != 0)
        return rc;
    LOG_INFO("%s: logout (%s)", c->peer,
             reason == ISCSI_LOGOUT_CLOSE_SESSION ? "close session" : "close connection");
    if (reason == ISCSI_LOGOUT_CLOSE_SESSION && c->session)
        session_close_other_conns(c->session, c);
    else if (victim != c)
        session_close_conn_by_cid(c->session, victim->cid);
    if (victim == c || reason == ISCSI_LOGOUT_CLOSE_SESSION)
        c->phase = CONN_LOGGED_OUT; /* closes once the response is on the wire */
    return ISCSI_OK;
}

static int pdu_done_dispatch(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    enum iscsi_opcode op = bhs_opcode(&p->bhs);
    if (c->phase == CONN_LOGIN) {
        int rc = login_handle(c, p);
        if (c->phase != CONN_LOGIN)
            conn_pending_done(c); /* logged in, or refused and closing */
        return rc;
    }
    if (c->phase != CONN_FFP)
        return ISCSI_OK; /* logged out: ignore whatever else arrives */
    if (c->discovery && op != ISCSI_OP_TEXT_REQ && op != ISCSI_OP_LOGOUT_REQ &&
        op != ISCSI_OP_NOP_OUT) {
        /* RFC 7143 §4.3: a discovery session carries Text, NOP and Logout only. */
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_PROTOCOL_ERROR);
    }
    if (p->data_digest_bad && op != ISCSI_OP_SCSI_CMD && op != ISCSI_OP_DATA_OUT) {
        /* ERL >= 1 (ERL 0 closes): a request whose data digest is bad is rejected with reason
         * 0x02 and discarded, its CmdSN not received (RFC 7143 §7.3, §7.8); the initiator
         * sends it again. SCSI Command and Data-Out recover in their handlers. */
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_DIGEST_ERROR);
    }
    switch (op) {
    case ISCSI_OP_SCSI_CMD:
        return cmd_handle_scsi_data_done(c, p);
    case ISCSI_OP_DATA_OUT:
        return cmd_handle_data_out_done(c, p);
    case ISCSI_OP_NOP_OUT:
        return nop_out_handle(c, p);
    case ISCSI_OP_TEXT_REQ:
        return text_handle(c, p);
    case ISCSI_OP_TMF_REQ:
        return tmf_handle(c, p);
    case ISCSI_OP_LOGOUT_REQ:
        return logout_handle(c, p);
    case ISCSI_OP_LOGIN_REQ:
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_PROTOCOL_ERROR);
    case ISCSI_OP_SNACK:
        /* ERL 0: no SNACK support (RFC 7143 §11.16: only ERL > 0 must support it) */
        if (conn_erl(c) == 0)
            return conn_send_reject(c, &p->bhs, ISCSI_REJECT_CMD_NOT_SUPPORTED);
        return snack_handle(c, p);
    default:
        return conn_send_reject(c, &p->bhs, ISCSI_REJECT_CMD_NOT_SUPPORTED);
    }
}

int conn_pdu_done(struct iscsi_conn *c, struct iscsi_pdu_in *p)
{
    int rc = pdu_done_dispatch(c, p);
    if (p->task) {
        struct iscsi_task *t = p->task;
        p->task = NULL;
        task_put(t); /* the receive engine's: the data segment is in */
    }
    return conn_fail(c, rc);
}

/* ---------------- liveness ---------------- */

int conn_send_nop_ping(struct iscsi_conn *c)
{
    struct tx_pdu *p = conn_pdu_new(c, ISCSI_OP_NOP_IN, ISCSI_FLAG_FINAL);
    if (!p)
        return ISCSI_ERR_NOMEM;
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_put32(h, BHS_ITT, ISCSI_RSVD_TAG);
    c->nop_ttt = c->next_ttt++;
    if (c->nop_ttt == ISCSI_RSVD_TAG)
        c->nop_ttt = c->next_ttt++;
    bhs_put32(h, BHS_TTT, c->nop_ttt);
    conn_fill_sn(c, h, false); /* a ping does not consume a StatSN (§11.19) */
    c->nop_outstanding = true;
    c->nop_sent_ms = reactor_now_ms();
    conn_send(c, p);
    return ISCSI_OK;
}

/* --inject kill-connection: how often a connection looks at the server's deadline. A quarter
 * of the period keeps the cuts close to it; 5 ms at least, so that a tiny period cannot turn
 * into a busy loop, and 250 ms at most. */
static uint64_t inject_tick_ms(const struct iscsi_conn *c)
{
    uint64_t t = (uint64_t)(c->inject.kill_conn_s * 1000) / 4;
    return t < 5 ? 5 : t > 250 ? 250 : t;
}

static void conn_inject_fire(void *arg)
{
    struct iscsi_conn *c = arg;
    if (c->dead)
        return;
    struct iscsi_server *srv = c->srv;
    uint64_t now = reactor_now_ms();
    uint64_t due = atomic_load(&srv->inject_next_cut_ms);
    /* One cut per period server-wide: whoever moves the deadline on is the one cut. */
    if (now >= due &&
        atomic_compare_exchange_strong(&srv->inject_next_cut_ms, &due,
                                       now + (uint64_t)(c->inject.kill_conn_s * 1000))) {
        char why[96];
        snprintf(why, sizeof(why), "--inject kill-connection=%g (cut %u)", c->inject.kill_conn_s,
                 atomic_fetch_add(&srv->inject_cuts, 1) + 1);
        conn_close(c, why);
        return;
    }
    reactor_timer_start(c->reactor, &c->inject_timer, inject_tick_ms(c), conn_inject_fire, c);
}

void conn_inject_start(struct iscsi_conn *c)
{
    if (!(c->inject.kill_conn_s > 0))
        return;
    /* The first connection to log in starts the clock: the first cut comes a period later. */
    uint64_t unarmed = 0;
    atomic_compare_exchange_strong(&c->srv->inject_next_cut_ms, &unarmed,
                                   reactor_now_ms() + (uint64_t)(c->inject.kill_conn_s * 1000));
    reactor_timer_start(c->reactor, &c->inject_timer, inject_tick_ms(c), conn_inject_fire, c);
}

/* Once a second: the login deadline, the CmdSN gap check, NOP-In liveness. A negative status
 * closes the connection. */
static int conn_timer_check(struct iscsi_conn *c)
{
    uint64_t now = reactor_now_ms();
    struct iscsi_server *srv = c->srv;
    if (c->phase == CONN_LOGIN) {
        /* A deadline from accept, not an idle timer: a peer that keeps sending Login Requests
         * (or one byte a second) must not hold a pending-login slot for ever. */
        if (now - c->accept_ms >= (uint64_t)srv->login_timeout_s * 1000)
            return ISCSI_ERR_LOGIN_TIMEOUT;
    } else if (c->phase == CONN_FFP) {
        if (c->session)
            session_check_gap(c->session, now);
        if (conn_erl(c) >= 1) {
            int rc = cmd_check_stalled(c, now);
            if (rc < 0)
                return rc;
        }
        bool pings = srv->nop_interval_s != 0;
        if (pings && c->nop_outstanding) {
            if (now - c->nop_sent_ms > (uint64_t)srv->nop_timeout_s * 1000)
                return ISCSI_ERR_NOP_TIMEOUT;
        } else if (pings && now - c->last_rx_ms > (uint64_t)srv->nop_interval_s * 1000) {
            return conn_send_nop_ping(c);
        }
    }
    return ISCSI_OK;
}

static void conn_timer_fire(void *arg)
{
    struct iscsi_conn *c = arg;
    assert(!c->dead); /* conn_close() stops the timer */
    if (conn_fail(c, conn_timer_check(c)) == ISCSI_OK)
        reactor_timer_start(c->reactor, &c->timer, 1000, conn_timer_fire, c);
}

/* ---------------- test seams ---------------- */

struct iscsi_conn *iscsi_conn_new_detached(struct iscsi_server *srv, struct reactor *r)
{
    struct iscsi_conn *c = conn_alloc(srv, r, NULL);
    if (c)
        snprintf(c->peer, sizeof(c->peer), "detached");
    return c;
}

size_t iscsi_conn_feed(struct iscsi_conn *c, const void *bytes, size_t len)
{
    const uint8_t *src = bytes;
    size_t used = 0;
    conn_get(c);
    while (!c->dead && !c->rx_paused && used < len && conn_rxbuf_ready(c)) {
        if (c->rx_head == c->rx_tail)
            c->rx_head = c->rx_tail = 0;
        size_t n = len - used;
        if (n > c->rxbuf_size - c->rx_tail)
            n = c->rxbuf_size - c->rx_tail;
        if (n == 0)
            break;
        memcpy(c->rxbuf + c->rx_tail, src + used, n);
        c->rx_tail += (uint32_t)n;
        used += n;
        rx_parse(c);
    }
    conn_put(c);
    return used;
}

size_t iscsi_conn_take_tx(struct iscsi_conn *c, void *buf, size_t cap)
{
    uint8_t *dst = buf;
    size_t got = 0;
    while (!c->dead && !list_empty(&c->txq) && got < cap) {
        struct iovec iov[TX_IOV_MAX];
        int n = tx_gather(c, iov, TX_IOV_MAX);
        size_t w = 0;
        for (int i = 0; i < n && got + w < cap; i++) {
            size_t k = iov[i].iov_len < cap - got - w ? iov[i].iov_len : cap - got - w;
            memcpy(dst + got + w, iov[i].iov_base, k);
            w += k;
        }
        got += w;
        tx_retire(c, w);
    }
    /* What conn_flush() does once a logged-out connection's last answer is written. */
    if (!c->dead && c->phase == CONN_LOGGED_OUT && list_empty(&c->txq))
        conn_close(c, NULL);
    return got;
}

bool iscsi_conn_is_closed(const struct iscsi_conn *c)
{
    return c->dead;
}
