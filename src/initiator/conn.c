/* One initiator TCP connection: non-blocking connect, a transmit queue flushed with one
 * sendmsg per loop turn, and the receive path: one recv into the connection buffer, then a
 * resumable parser (header, header digest, data, pad + data digest) over every complete PDU,
 * with large Data-In payloads read straight into the task's buffer (readv). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "initiator/ini.h"
#include "util/crc32c.h"
#include "util/log.h"

#define INI_RXBUF (512u * 1024u)
#define INI_RX_DIRECT_MIN 4096u /* below this, copying out of the rx buffer is cheaper */
#define INI_TX_IOV 192
#define INI_RX_LOOPS 16
#define INI_RX_LARGE (32u * 1024u) /* Data-In this big: place payloads directly */

static void conn_io(void *arg, uint32_t events);

struct ini_conn *ini_conn_new(struct lr_session *s, unsigned idx, uint16_t cid)
{
    struct ini_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->s = s;
    c->idx = idx;
    c->cid = cid;
    c->fd = -1;
    c->state = ICS_IDLE;
    c->r = s->r;
    list_init(&c->inbox);
    c->peer_mrdsl = 8192; /* RFC 7143 §13.12 default until declared */
    list_init(&c->txq);
    list_init(&c->txfree);
    c->rx_cap = INI_RXBUF;
    c->rxbuf = malloc(c->rx_cap);
    uint32_t mrdsl = s->o.max_recv_dsl ? s->o.max_recv_dsl : 262144;
    c->rx_data_cap = mrdsl > ISCSI_TEXT_MAX ? mrdsl : ISCSI_TEXT_MAX;
    c->rx_data = malloc(c->rx_data_cap + 8);
    if (!c->rxbuf || !c->rx_data) {
        free(c->rxbuf);
        free(c->rx_data);
        free(c);
        return NULL;
    }
    return c;
}

static void pdu_release(struct ini_conn *c, struct ini_txpdu *p)
{
    free(p->owned);
    p->owned = NULL;
    p->cmd_of = NULL;
    list_add_tail(&c->txfree, &p->node);
}

static void conn_drop_txq(struct ini_conn *c)
{
    struct list_node *n;
    while ((n = list_pop(&c->txq)) != NULL)
        pdu_release(c, list_entry(n, struct ini_txpdu, node));
    c->tx_off = 0;
}

void ini_conn_free(struct ini_conn *c)
{
    if (!c)
        return;
    if (c->registered)
        reactor_fd_del(c->r, &c->rfd);
    if (c->fd >= 0)
        close(c->fd);
    reactor_timer_stop(c->s->r, &c->login_timer);
    conn_drop_txq(c);
    struct list_node *n;
    while ((n = list_pop(&c->txfree)) != NULL)
        free(list_entry(n, struct ini_txpdu, node));
    if (c->login_active)
        ini_login_free(&c->login);
    free(c->rxbuf);
    free(c->rx_data);
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
    c->fd = fd;
    c->state = ICS_CONNECTING;
    if (reactor_fd_add(c->r, &c->rfd, fd, EPOLLOUT, conn_io, c) < 0) {
        close(fd);
        c->fd = -1;
        return -1;
    }
    c->registered = true;
    c->want_out = true;
    return 0;
}

void ini_conn_fail(struct ini_conn *c, const char *why)
{
    if (c->state == ICS_DEAD)
        return;
    c->fail_why = why;
    if (c->registered) {
        reactor_fd_del(c->r, &c->rfd);
        c->registered = false;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->state = ICS_DEAD;
    conn_drop_txq(c);
    c->rx_state = IRX_HDR;
    c->rx_start = c->rx_end = 0;
    ini_session_conn_down(c);
}

static void conn_fail_msg(void *arg)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    c->s->msgs--;
    if (c->r != reactor_self())
        c->fail_req = NULL; /* it moved meanwhile: the next tick asks its new thread */
    else if (c->fail_req)
        ini_conn_fail(c, c->fail_req);
    ini_unlock(c->s);
}

void ini_conn_fail_any(struct ini_conn *c, const char *why)
{
    if (!c->s->mt || c->r == reactor_self()) {
        ini_conn_fail(c, why);
        return;
    }
    if (c->state == ICS_DEAD || c->fail_req)
        return;
    c->fail_req = why;
    if (reactor_post(c->r, &c->fail_msg, conn_fail_msg, c))
        c->s->msgs++;
}

void ini_conn_move(struct ini_conn *c, struct reactor *to)
{
    struct lr_session *s = c->s;
    ini_lock(s); /* held twice: the flush below keeps it through its sendmsg */
    /* What this thread still owes the connection goes out from here first. */
    ini_conn_drain_inbox(c);
    if (reactor_undefer(&c->flush_d))
        ini_conn_flush(c);
    if (c->registered) {
        reactor_fd_del(c->r, &c->rfd);
        c->registered = false;
    }
    c->r = to;
    c->moves++; /* kicks go to it with the other inbox message */
    if (c->fd >= 0 && c->state != ICS_DEAD) {
        if (reactor_fd_add(to, &c->rfd, c->fd, EPOLLIN | (c->want_out ? EPOLLOUT : 0), conn_io, c) <
            0)
            ini_conn_fail(c, "cannot move the connection to its thread");
        else
            c->registered = true;
    }
    ini_unlock(s);
}

/* A socket call failed: keep its errno for the log line. */
static void conn_fail_sys(struct ini_conn *c, const char *why)
{
    c->fail_errno = errno;
    ini_conn_fail(c, why);
}

struct ini_txpdu *ini_conn_pdu(struct ini_conn *c)
{
    struct list_node *n = list_pop(&c->txfree);
    struct ini_txpdu *p = n ? list_entry(n, struct ini_txpdu, node) : malloc(sizeof(*p));
    if (!p)
        return NULL;
    p->owned = NULL;
    p->cmd_of = NULL;
    return p;
}

static void conn_flush_deferred(void *arg)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    ini_conn_flush(c);
    ini_unlock(c->s);
}

/* Digests are computed as the PDU is queued (RFC 7143 §10.2.3: CRC32C over the BHS+AHS and over
 * the data segment with its padding). During login no digest is in force yet. */
void ini_conn_send(struct ini_conn *c, struct ini_txpdu *p, const void *data, uint32_t len)
{
    if (c->state == ICS_DEAD) {
        pdu_release(c, p);
        return;
    }
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_set_dlength(h, len);
    p->hdr_len = ISCSI_BHS_LEN;
    if (c->hdr_digest) {
        put_le32(p->hdr + ISCSI_BHS_LEN, crc32c(p->hdr, ISCSI_BHS_LEN));
        p->hdr_len += ISCSI_DIGEST_LEN;
    }
    p->data = data;
    p->data_len = len;
    p->trailer_len = 0;
    if (len) {
        uint32_t pad = ISCSI_PAD(len) - len;
        memset(p->trailer, 0, 4);
        p->trailer_len = (uint8_t)pad;
        if (c->data_digest) {
            uint32_t crc = crc32c_update(CRC32C_INIT, data, len);
            if (pad)
                crc = crc32c_update(crc, p->trailer, pad);
            put_le32(p->trailer + pad, crc32c_final(crc));
            p->trailer_len += ISCSI_DIGEST_LEN;
        }
    }
    list_add_tail(&c->txq, &p->node);
    if (c->registered)
        reactor_defer(c->r, &c->flush_d, conn_flush_deferred, c);
}

static void conn_set_out(struct ini_conn *c, bool on)
{
    if (c->want_out == on || !c->registered)
        return;
    c->want_out = on;
    reactor_fd_mod(c->r, &c->rfd, EPOLLIN | (on ? EPOLLOUT : 0));
}

/* Everything queued in one loop turn goes out in as few sendmsg calls as possible (corking). */
void ini_conn_flush(struct ini_conn *c)
{
    if (c->fd < 0 || c->state == ICS_CONNECTING || c->state == ICS_DEAD)
        return;
    while (!list_empty(&c->txq)) {
        struct iovec iov[INI_TX_IOV];
        int n = 0;
        uint32_t skip = c->tx_off;
        for (struct list_node *it = c->txq.next; it != &c->txq && n + 3 <= INI_TX_IOV;
             it = it->next) {
            struct ini_txpdu *p = list_entry(it, struct ini_txpdu, node);
            const void *base[3] = {p->hdr, p->data, p->trailer};
            uint32_t lens[3] = {p->hdr_len, p->data_len, p->trailer_len};
            for (int k = 0; k < 3; k++) {
                uint32_t l = lens[k];
                const uint8_t *b = base[k];
                if (skip >= l) {
                    skip -= l;
                    continue;
                }
                iov[n].iov_base = (void *)(b + skip);
                iov[n].iov_len = l - skip;
                skip = 0;
                n++;
            }
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        /* Only this thread touches the queue and the socket: other threads hand tasks over
         * through the inbox, so the session lock need not be held across the call. */
        bool rel = ini_io_release(c->s);
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        ini_io_retake(c->s, rel); /* keeps errno */
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_set_out(c, true);
                return;
            }
            if (errno == EINTR)
                continue;
            conn_fail_sys(c, "send failed");
            return;
        }
        c->tx_bytes += (uint64_t)w;
        uint64_t left = (uint64_t)w + c->tx_off;
        while (!list_empty(&c->txq)) {
            struct ini_txpdu *p = list_entry(c->txq.next, struct ini_txpdu, node);
            uint64_t total = (uint64_t)p->hdr_len + p->data_len + p->trailer_len;
            if (left < total)
                break;
            left -= total;
            list_del(&p->node);
            if (p->cmd_of)
                p->cmd_of->cmd_sent = true;
            pdu_release(c, p);
        }
        c->tx_off = (uint32_t)left;
    }
    conn_set_out(c, false);
}

/* ---- receive ---- */

static void conn_rx_dispatch(struct ini_conn *c, const uint8_t *data, bool dd_ok)
{
    if (c->state == ICS_LOGIN) {
        ini_session_login_rx(c, c->rx_hdr, data, c->rx_dlen);
        return;
    }
    ini_rx_ffp(c, c->rx_hdr, data, c->rx_dlen, dd_ok);
}

/* Walk every complete PDU in the buffer. Returns -1 once the connection has failed. */
static int conn_rx_parse(struct ini_conn *c)
{
    for (;;) {
        if (c->state == ICS_DEAD)
            return -1;
        uint32_t avail = c->rx_end - c->rx_start;
        const uint8_t *p = c->rxbuf + c->rx_start;
        switch (c->rx_state) {
        case IRX_HDR: {
            if (avail < ISCSI_BHS_LEN)
                return 0;
            uint32_t ahs = (uint32_t)p[BHS_TOTAL_AHS_LEN] * 4u;
            uint32_t hlen = ISCSI_BHS_LEN + ahs + (c->hdr_digest ? ISCSI_DIGEST_LEN : 0);
            if (avail < hlen)
                return 0;
            if (c->hdr_digest &&
                crc32c(p, ISCSI_BHS_LEN + ahs) != get_le32(p + ISCSI_BHS_LEN + ahs)) {
                /* RFC 7143 §7.8: a header digest error at ERL 0 ends the connection. */
                ini_conn_fail(c, "header digest error");
                return -1;
            }
            memcpy(c->rx_hdr, p, ISCSI_BHS_LEN); /* AHS is skipped: none is used here */
            c->rx_start += hlen;
            c->rx_dlen = get_be24(c->rx_hdr + BHS_DATA_SEG_LEN);
            if ((c->rx_hdr[0] & ISCSI_OPCODE_MASK) == ISCSI_OP_DATA_IN)
                c->rx_large = c->rx_dlen >= INI_RX_LARGE;
            c->rx_got = c->rx_tgot = 0;
            if (c->rx_dlen == 0) {
                conn_rx_dispatch(c, NULL, true);
                continue;
            }
            uint32_t pad = ISCSI_PAD(c->rx_dlen) - c->rx_dlen;
            c->rx_tneed = pad + (c->data_digest ? ISCSI_DIGEST_LEN : 0);
            c->rx_dest = c->state == ICS_FFP ? ini_task_rx_dest(c, c->rx_hdr, c->rx_dlen) : NULL;
            if (!c->rx_dest) {
                if (c->rx_dlen > c->rx_data_cap) {
                    ini_conn_fail(c, "data segment longer than MaxRecvDataSegmentLength");
                    return -1;
                }
                c->rx_dest = c->rx_data;
            }
            c->rx_state = IRX_DATA;
            continue;
        }
        case IRX_DATA: {
            uint32_t want = c->rx_dlen - c->rx_got;
            uint32_t n = avail < want ? avail : want;
            memcpy(c->rx_dest + c->rx_got, p, n);
            c->rx_got += n;
            c->rx_start += n;
            if (c->rx_got < c->rx_dlen)
                return 0;
            c->rx_state = IRX_TRAILER;
            continue;
        }
        case IRX_TRAILER: {
            uint32_t want = c->rx_tneed - c->rx_tgot;
            uint32_t n = avail < want ? avail : want;
            memcpy(c->rx_trailer + c->rx_tgot, p, n);
            c->rx_tgot += n;
            c->rx_start += n;
            if (c->rx_tgot < c->rx_tneed)
                return 0;
            bool ok = true;
            if (c->data_digest) {
                uint32_t pad = c->rx_tneed - ISCSI_DIGEST_LEN;
                uint32_t crc = crc32c_update(CRC32C_INIT, c->rx_dest, c->rx_dlen);
                if (pad)
                    crc = crc32c_update(crc, c->rx_trailer, pad);
                ok = crc32c_final(crc) == get_le32(c->rx_trailer + pad);
            }
            c->rx_state = IRX_HDR;
            conn_rx_dispatch(c, c->rx_dest, ok);
            continue;
        }
        }
    }
}

int ini_conn_feed(struct ini_conn *c, const void *bytes, uint32_t len)
{
    while (len) {
        if (c->rx_start == c->rx_end)
            c->rx_start = c->rx_end = 0;
        if (c->rx_end == c->rx_cap) {
            memmove(c->rxbuf, c->rxbuf + c->rx_start, c->rx_end - c->rx_start);
            c->rx_end -= c->rx_start;
            c->rx_start = 0;
        }
        uint32_t n = c->rx_cap - c->rx_end;
        if (n > len)
            n = len;
        memcpy(c->rxbuf + c->rx_end, bytes, n);
        c->rx_end += n;
        bytes = (const uint8_t *)bytes + n;
        len -= n;
        if (conn_rx_parse(c) < 0)
            return -1;
    }
    return 0;
}

/* How much to read into the rx buffer at a PDU boundary. While large Data-In PDUs stream in,
 * only the rest of the current PDU's trailer and the next header: its payload is then read
 * straight into the task's buffer instead of being copied out of ours. Otherwise as much as
 * fits (many small PDUs per call). */
static uint32_t rx_buffer_ask(const struct ini_conn *c)
{
    uint32_t room = c->rx_cap - c->rx_end;
    if (!c->rx_large || c->rx_start != c->rx_end)
        return room;
    uint32_t ask = ISCSI_BHS_LEN + (c->hdr_digest ? ISCSI_DIGEST_LEN : 0);
    if (c->rx_state == IRX_TRAILER)
        ask += c->rx_tneed - c->rx_tgot;
    else if (c->rx_state == IRX_DATA)
        ask += c->rx_tneed;
    return ask < room ? ask : room;
}

/* The LRO lesson: take everything the socket has in one call, then parse it all. While a large
 * payload is being received and nothing else is buffered, read it into its final place and
 * let the trailer and the next header land in the rx buffer (direct data placement). */
static void conn_readable(struct ini_conn *c)
{
    for (int loop = 0; loop < INI_RX_LOOPS && c->state != ICS_DEAD; loop++) {
        ssize_t n;
        size_t asked;
        if (c->rx_start == c->rx_end)
            c->rx_start = c->rx_end = 0;
        if (c->rx_state == IRX_DATA && c->rx_start == c->rx_end && c->rx_dest != c->rx_data &&
            c->rx_dlen - c->rx_got >= INI_RX_DIRECT_MIN) {
            uint32_t want = c->rx_dlen - c->rx_got;
            struct iovec iov[2] = {{c->rx_dest + c->rx_got, want}, {c->rxbuf, rx_buffer_ask(c)}};
            asked = want + iov[1].iov_len;
            bool rel = ini_io_release(c->s);
            n = readv(c->fd, iov, 2);
            ini_io_retake(c->s, rel); /* keeps errno */
            if (n > 0) {
                uint32_t take = (uint32_t)n < want ? (uint32_t)n : want;
                c->rx_got += take;
                c->rx_end = (uint32_t)n - take;
                if (c->rx_got == c->rx_dlen)
                    c->rx_state = IRX_TRAILER;
            }
        } else {
            if (c->rx_start != c->rx_end && c->rx_cap - c->rx_end < 64 * 1024) {
                memmove(c->rxbuf, c->rxbuf + c->rx_start, c->rx_end - c->rx_start);
                c->rx_end -= c->rx_start;
                c->rx_start = 0;
            }
            asked = rx_buffer_ask(c);
            bool rel = ini_io_release(c->s);
            n = recv(c->fd, c->rxbuf + c->rx_end, asked, MSG_DONTWAIT);
            ini_io_retake(c->s, rel); /* keeps errno */
            if (n > 0)
                c->rx_end += (uint32_t)n;
        }
        if (n == 0) {
            ini_conn_fail(c, "connection closed by the target");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            conn_fail_sys(c, "receive failed");
            return;
        }
        c->rx_bytes += (uint64_t)n;
        if (conn_rx_parse(c) < 0)
            return;
        if ((size_t)n < asked)
            return; /* the socket is drained */
    }
}

static void conn_io_locked(struct ini_conn *c, uint32_t events)
{
    if (c->state == ICS_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            errno = err;
            conn_fail_sys(c, "connect failed");
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) == 0)
            c->local_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                           : ((struct sockaddr_in *)&ss)->sin_port);
        c->state = ICS_LOGIN;
        c->want_out = false;
        reactor_fd_mod(c->r, &c->rfd, EPOLLIN);
        ini_session_conn_connected(c);
        return;
    }
    if (events & EPOLLIN)
        conn_readable(c);
    if (c->state == ICS_DEAD)
        return;
    if (events & EPOLLOUT)
        ini_conn_flush(c);
    if (c->state != ICS_DEAD && (events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN))
        ini_conn_fail(c, "connection error");
}

static void conn_io(void *arg, uint32_t events)
{
    struct ini_conn *c = arg;
    ini_lock(c->s);
    conn_io_locked(c, events);
    ini_unlock(c->s);
}
