/* The iSCSI wire engine (see wire.h): receive machine, direct data placement, transmit queue,
 * digests (RFC 7143 §12.1) and transmit fault injection, shared by target and initiator. */
#include "iscsi/wire.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/crc32c.h"
#include "util/fault_guard.h"
#include "util/iov.h"
#include "util/log.h"
#include "util/stream_copy.h"

#define TX_IOV_MAX 256
#define TX_FREE_KEEP 256
#define RX_DIRECT_MIN 4096u        /* below this, copying out of the rx buffer is cheaper */
#define RX_BUDGET_BYTES (4u << 20) /* per wake-up, so one busy peer cannot starve others */
#define RX_LOGIN_BUF (16u * 1024u)

static void rx_resume(void *arg);
static void flush_deferred(void *arg);

const char *wire_status_str(int status)
{
    switch (status) {
    case WIRE_OK:
        return "ok";
    case WIRE_E_PEER_CLOSED:
        return "peer closed the connection";
    case WIRE_E_PEER_GONE:
        return "peer went away";
    case WIRE_E_RECV:
        return "receive failed";
    case WIRE_E_SEND:
        return "send failed";
    case WIRE_E_OVERSIZED:
        return "oversized data segment (protocol error)";
    case WIRE_E_HDIGEST:
        return "header digest error (ERL 0)";
    case WIRE_E_DDIGEST:
        return "data digest error (ERL 0)";
    case WIRE_E_NOMEM:
        return "out of memory";
    default:
        return NULL;
    }
}

void wire_init(struct wire *w, const struct wire_ops *ops, void *ctx, const char *name)
{
    memset(w, 0, sizeof(*w));
    w->ops = ops;
    w->ctx = ctx;
    w->name = name ? name : "?";
    w->fd = -1;
    w->max_recv_dsl = WIRE_LOGIN_DSL;
    w->rxbuf_want = RX_LOGIN_BUF;
    list_init(&w->txq);
    list_init(&w->tx_free);
}

/* ---------------- stopping ---------------- */

/* The one way out: the owner hears the status once and closes. */
static int wire_fail(struct wire *w, int status)
{
    assert(status < 0);
    if (w->dead)
        return status;
    w->status = status;
    w->ops->fail(w->ctx, status);
    if (!w->dead)
        wire_close(w);
    return status;
}

static void tx_release(struct wire *w, struct wire_pdu *p)
{
    free(p->owned);
    p->owned = NULL;
    if (w->tx_free_count < TX_FREE_KEEP) {
        w->tx_free_count++;
        list_add_tail(&w->tx_free, &p->node);
    } else {
        free(p);
    }
}

void wire_close(struct wire *w)
{
    if (w->dead)
        return;
    w->dead = true;
    if (!w->status)
        w->status = WIRE_E_OWNER; /* the owner closed it */
    reactor_undefer(&w->rx_resume_hook);
    reactor_undefer(&w->flush_hook);
    if (w->registered) {
        reactor_fd_del(w->r, &w->rfd);
        w->registered = false;
    }
    if (w->fd >= 0) {
        shutdown(w->fd, SHUT_RDWR);
        close(w->fd);
        w->fd = -1;
    }
    /* Drop everything queued: the PDUs' owners learn they were not sent. */
    struct list_node *n;
    while ((n = list_pop(&w->txq)) != NULL) {
        struct wire_pdu *p = list_entry(n, struct wire_pdu, node);
        w->tx_backlog -= p->charge;
        if (p->sent)
            p->sent(p, false);
        tx_release(w, p);
    }
    w->txq_pdus = 0;
    w->txq_data = 0;
    w->tx_off = 0;
    w->rx_state = WRX_BHS;
    w->rx_got = 0;
    w->rx_head = w->rx_tail = 0;
}

void wire_free(struct wire *w)
{
    assert(!w->rx_own); /* not while parsing out of the shared buffer */
    wire_close(w);
    struct list_node *n;
    while ((n = list_pop(&w->tx_free)) != NULL)
        free(list_entry(n, struct wire_pdu, node));
    w->tx_free_count = 0;
    free(w->rxbuf);
    free(w->databuf);
    w->rxbuf = w->databuf = NULL;
    w->rxbuf_size = w->databuf_size = 0;
}

/* ---------------- the socket ---------------- */

/* Not reading: past the transmit backlog, or held by the owner. */
static bool rx_stopped(const struct wire *w)
{
    return w->rx_paused || w->rx_held;
}

static void update_events(struct wire *w)
{
    if (!w->registered)
        return;
    reactor_fd_mod(w->r, &w->rfd,
                   (rx_stopped(w) ? 0 : EPOLLIN | EPOLLRDHUP) | (w->want_write ? EPOLLOUT : 0));
}

int wire_attach(struct wire *w, struct reactor *r, int fd, reactor_fd_fn fn, void *arg)
{
    assert(!w->registered);
    w->fd = fd;
    w->r = r;
    w->event_fn = fn;
    w->event_arg = arg;
    uint32_t ev = (rx_stopped(w) ? 0 : EPOLLIN | EPOLLRDHUP) | (w->want_write ? EPOLLOUT : 0);
    if (reactor_fd_add(r, &w->rfd, fd, ev, fn, arg) < 0)
        return -1;
    w->registered = true;
    return 0;
}

int wire_move(struct wire *w, struct reactor *r)
{
    if (w->registered) {
        reactor_fd_del(w->r, &w->rfd);
        w->registered = false;
    }
    w->r = r;
    if (w->dead || w->fd < 0)
        return 0;
    return wire_attach(w, r, w->fd, w->event_fn, w->event_arg);
}

void wire_want_write(struct wire *w, bool on)
{
    if (w->want_write == on || w->dead)
        return;
    w->want_write = on;
    update_events(w);
}

void wire_set_digests(struct wire *w, bool header, bool data)
{
    w->hdigest = header;
    w->ddigest = data;
}

void wire_set_limits(struct wire *w, uint32_t max_recv_dsl, uint32_t rxbuf_size)
{
    w->max_recv_dsl = max_recv_dsl;
    if (rxbuf_size)
        w->rxbuf_want = rxbuf_size;
}

void wire_set_faults(struct wire *w, const struct wire_faults *f)
{
    w->faults = *f;
    w->faults_on = f->digest_error > 0 || f->drop_pdu > 0;
    w->prng = f->seed ? f->seed : 0x9e3779b97f4a7c15ull;
}

/* ---------------- receive back-pressure ---------------- */

/* A peer that sends requests and does not read the answers would make the reply queue grow
 * without bound: past max_backlog the engine stops reading from it, so its requests wait in
 * the socket and TCP flow control pushes back on the sender. */
static bool tx_over(const struct wire *w)
{
    return w->max_backlog && w->tx_backlog > w->max_backlog;
}

static void rx_pause(struct wire *w)
{
    if (w->rx_paused)
        return;
    w->rx_paused = true;
    LOG_DEBUG("%s: %llu bytes of replies unsent: not reading until they drain", w->name,
              (unsigned long long)w->tx_backlog);
    update_events(w);
}

static void rx_maybe_resume(struct wire *w)
{
    if (!w->rx_paused || w->tx_backlog > w->max_backlog / 2)
        return;
    w->rx_paused = false;
    update_events(w);
    /* Bytes already received when the engine paused are parsed before anything new is read. */
    if (w->r && !w->rx_held)
        reactor_defer(w->r, &w->rx_resume_hook, rx_resume, w);
}

void wire_rx_hold(struct wire *w, bool on)
{
    if (w->rx_held == on || w->dead)
        return;
    w->rx_held = on;
    update_events(w);
    if (!on && !w->rx_paused && w->r)
        reactor_defer(w->r, &w->rx_resume_hook, rx_resume, w);
}

void wire_tx_hold(struct wire *w, bool on)
{
    if (w->tx_hold == on || w->dead)
        return;
    w->tx_hold = on;
    if (on) /* no EPOLLOUT while held: wire_flush would return at once, and it would fire on */
        wire_want_write(w, false);
    else if (w->registered && !list_empty(&w->txq))
        reactor_defer(w->r, &w->flush_hook, flush_deferred, w);
}

/* ---------------- receive ---------------- */

/* The data segment of the current PDU is complete (with its pad). */
static int rx_deliver(struct wire *w)
{
    struct iscsi_pdu_in *p = &w->in;
    w->rx_state = WRX_BHS;
    w->rx_got = 0;
    if (w->rx_skip) {
        /* ERL >= 1: the header was damaged, so nothing in it can be trusted (§7.8): dropped,
         * the peer's own recovery (or ours, for a gap) brings it back. */
        w->rx_skip = false;
        return WIRE_OK;
    }
    /* Data-less PDUs between large payloads (R2T, status) keep the mode on. */
    if (p->dlen)
        w->rx_large = w->rx_large_min && p->dstcnt > 0 && p->dlen >= w->rx_large_min;
    p->data = w->rx_in_buf ? w->databuf : NULL;
    int st = w->ops->pdu(w->ctx, p);
    return st < 0 ? wire_fail(w, st) : WIRE_OK;
}

static int rx_data_done(struct wire *w)
{
    w->rx_got = 0;
    if (w->ddigest && w->in.dlen) {
        w->rx_state = WRX_DDIGEST;
        return WIRE_OK;
    }
    return rx_deliver(w);
}

/* Header, AHS and header digest complete: let the owner choose where the data goes. */
static int rx_header_complete(struct wire *w)
{
    struct iscsi_pdu_in *p = &w->in;
    w->rx_got = 0;
    w->rx_crc = CRC32C_INIT;
    w->rx_in_buf = false;
    if (w->rx_skip) {
        p->discard = true; /* nothing of this PDU is delivered */
    } else {
        int st = w->ops->hdr(w->ctx, p);
        if (st < 0)
            return wire_fail(w, st);
        if (w->dead)
            return WIRE_E_OWNER;
        if (p->dlen && p->dstcnt == 0 && !p->discard) {
            if (p->dlen > w->databuf_size) {
                /* p->dlen was bounded by max_recv_dsl before anything was allocated; grow once
                 * to that bound so later segments find room. */
                uint32_t size = p->dlen > w->max_recv_dsl ? p->dlen : w->max_recv_dsl;
                uint8_t *b = realloc(w->databuf, size);
                if (!b)
                    return wire_fail(w, WIRE_E_NOMEM);
                w->databuf = b;
                w->databuf_size = size;
            }
            p->dst[0].iov_base = w->databuf;
            p->dst[0].iov_len = p->dlen;
            p->dstcnt = 1;
            w->rx_in_buf = true;
        }
    }
    if (w->rx_padded == 0)
        return rx_deliver(w);
    w->rx_state = WRX_DATA;
    return WIRE_OK;
}

/* The BHS is complete: bound its data segment before anything is read or allocated for it. */
static int rx_bhs_complete(struct wire *w)
{
    struct iscsi_pdu_in *p = &w->in;
    p->dlen = bhs_dlength(&p->bhs);
    p->data = NULL;
    p->dstcnt = 0;
    p->dst_cold = false;
    p->discard = false;
    p->data_digest_bad = false;
    p->reject_reason = 0;
    p->task = NULL;
    w->rx_padded = ISCSI_PAD(p->dlen);
    w->rx_got = 0;
    w->rx_skip = false;
    /* §13.12: the data segment is bounded by what we declared, 8192 during login. This also
     * bounds what an ERL >= 1 header digest error skips. */
    if (p->dlen > w->max_recv_dsl) {
        LOG_WARN("%s: %s data segment of %u bytes exceeds MaxRecvDataSegmentLength %u", w->name,
                 iscsi_opcode_name(bhs_opcode(&p->bhs)), p->dlen, w->max_recv_dsl);
        return wire_fail(w, WIRE_E_OVERSIZED);
    }
    if (w->hdigest)
        w->rx_crc = crc32c_update(CRC32C_INIT, p->bhs.b, ISCSI_BHS_LEN);
    if (bhs_ahs_bytes(&p->bhs))
        w->rx_state = WRX_AHS;
    else if (w->hdigest)
        w->rx_state = WRX_HDIGEST;
    else
        return rx_header_complete(w);
    return WIRE_OK;
}

/* A 4-byte digest is complete in rx_digest: check it against the running CRC. The digest is
 * the CRC32C sent least significant byte first (RFC 7143 §12.1, as libiscsi, the Linux
 * initiator and target, and qemu write it). */
static int rx_digest_done(struct wire *w, bool header)
{
    uint32_t want = crc32c_final(w->rx_crc), got = get_le32(w->rx_digest);
    if (want == got)
        return header ? rx_header_complete(w) : rx_deliver(w);
    const struct iscsi_bhs *h = &w->in.bhs;
    for (unsigned i = 0; i < 2; i++)
        iostats_event(w->digest_count[i], IOSTATS_DIGEST_ERROR);
    if (w->erl == 0 && (header || !w->ddigest_deliver)) {
        /* RFC 7143 §7.8: at ERL 0 a digest error ends the connection. */
        LOG_WARN("%s: %s digest error on %s ITT 0x%08x (got 0x%08x, computed 0x%08x)", w->name,
                 header ? "header" : "data", iscsi_opcode_name(bhs_opcode(h)),
                 bhs_get32(h, BHS_ITT), got, want);
        return wire_fail(w, header ? WIRE_E_HDIGEST : WIRE_E_DDIGEST);
    }
    if (header) {
        /* §7.8: the PDU is dropped silently; its length was still bounded above. */
        w->stats.hdigest_errors++;
        w->rx_skip = true;
        return rx_header_complete(w);
    }
    /* §7.8: the PDU goes to its handler: a target Rejects it (reason 0x02) and recovers, an
     * initiator discards it and recovers or fails the task. */
    w->stats.ddigest_errors++;
    w->in.data_digest_bad = true;
    return rx_deliver(w);
}

/* See wire.tx_early_pdus. Only on a socket the reactor reads, and not for an owner that
 * releases its lock around socket calls (the parse runs under it). */
static bool early_flush_due(const struct wire *w)
{
    /* a closed engine (dead) has fd -1 too */
    if (!w->tx_early_pdus || w->txq_data > WIRE_EARLY_FLUSH_BYTES || w->fd < 0 || w->tx_hold ||
        w->ops->io_release)
        return false;
    /* By bytes too, once one more answer of the queue's average size would pass the cap
     * (data * (n + 1) / n > cap, multiplied out: no division per PDU). 12 answers of 8 KiB
     * (96 KiB) never went early, and with digests one session's 8 KiB reads ping-ponged at
     * half speed; sending after 8 of them gave 1.44 x (bench/results/early-flush-20261203.md). */
    uint64_t n = w->txq_pdus;
    bool enough = n >= w->tx_early_pdus || (n >= WIRE_EARLY_FLUSH_MIN_PDUS &&
                                            w->txq_data * (n + 1) > WIRE_EARLY_FLUSH_BYTES * n);
    return enough && reactor_was_idle();
}

/* Walk the bytes in rxbuf[head, tail). */
static int rx_parse(struct wire *w)
{
    int st = WIRE_OK;
    while (!w->dead && st == WIRE_OK && w->rx_head < w->rx_tail) {
        if (w->rx_held && w->rx_state == WRX_BHS && w->rx_got == 0)
            return WIRE_OK; /* the rest stays in rxbuf until the owner lets go */
        if (tx_over(w)) {
            rx_pause(w); /* the rest stays in rxbuf until the replies drain */
            return WIRE_OK;
        }
        const uint8_t *b = w->rxbuf + w->rx_head;
        uint32_t avail = w->rx_tail - w->rx_head, n;
        struct iscsi_pdu_in *p = &w->in;
        switch (w->rx_state) {
        case WRX_BHS:
            n = ISCSI_BHS_LEN - w->rx_got;
            n = n < avail ? n : avail;
            memcpy(p->bhs.b + w->rx_got, b, n);
            w->rx_got += n;
            w->rx_head += n;
            if (w->rx_got == ISCSI_BHS_LEN)
                st = rx_bhs_complete(w);
            break;
        case WRX_AHS: {
            /* No AHS is used by either end (no extended CDB, no bidirectional): skipped, but
             * covered by the header digest. The handler sees TotalAHSLength in the BHS. */
            uint32_t total = bhs_ahs_bytes(&p->bhs);
            n = total - w->rx_got;
            n = n < avail ? n : avail;
            if (w->hdigest)
                w->rx_crc = crc32c_update(w->rx_crc, b, n);
            w->rx_got += n;
            w->rx_head += n;
            if (w->rx_got < total)
                break;
            w->rx_got = 0;
            if (w->hdigest)
                w->rx_state = WRX_HDIGEST;
            else
                st = rx_header_complete(w);
            break;
        }
        case WRX_HDIGEST:
        case WRX_DDIGEST:
            n = ISCSI_DIGEST_LEN - w->rx_got;
            n = n < avail ? n : avail;
            memcpy(w->rx_digest + w->rx_got, b, n);
            w->rx_got += n;
            w->rx_head += n;
            if (w->rx_got == ISCSI_DIGEST_LEN)
                st = rx_digest_done(w, w->rx_state == WRX_HDIGEST);
            break;
        case WRX_DATA:
            n = w->rx_padded - w->rx_got;
            n = n < avail ? n : avail;
            if (w->ddigest)
                w->rx_crc = crc32c_update(w->rx_crc, b, n);
            /* into the destination at offset rx_got; the pad falls off its end */
            if (!p->discard && w->rx_got < p->dlen) {
                uint32_t k = n < p->dlen - w->rx_got ? n : p->dlen - w->rx_got;
                if (p->dst_cold)
                    iov_stream_in(p->dst, p->dstcnt, w->rx_got, b, k);
                else
                    iov_copy_in(p->dst, p->dstcnt, w->rx_got, b, k);
            }
            w->rx_got += n;
            w->rx_head += n;
            if (w->rx_got == w->rx_padded)
                st = rx_data_done(w);
            break;
        }
        if (st == WIRE_OK && early_flush_due(w))
            st = wire_flush(w);
    }
    if (w->rx_head == w->rx_tail)
        w->rx_head = w->rx_tail = 0;
    return st;
}

static void rx_resume(void *arg)
{
    struct wire *w = arg;
    if (w->ops->lock)
        w->ops->lock(w->ctx);
    if (!w->dead && !rx_stopped(w))
        rx_parse(w);
    if (w->ops->unlock)
        w->ops->unlock(w->ctx);
}

/* How much to read into the rx buffer. While large payloads stream in and nothing is
 * buffered, only the rest of the current PDU's trailer and the next header: the next payload
 * is then read straight into its place instead of being copied out of ours. Otherwise as much
 * as fits (many small PDUs per call). */
static uint32_t rx_ask(const struct wire *w)
{
    uint32_t room = w->rxbuf_size - w->rx_tail;
    if (!w->rx_large || w->rx_head != w->rx_tail)
        return room;
    uint32_t hd = w->hdigest ? ISCSI_DIGEST_LEN : 0, dd = w->ddigest ? ISCSI_DIGEST_LEN : 0;
    uint32_t ask = ISCSI_BHS_LEN + hd;
    switch (w->rx_state) {
    case WRX_BHS:
        ask -= w->rx_got;
        break;
    case WRX_DATA: {
        uint32_t data_end = w->rx_got > w->in.dlen ? w->rx_got : w->in.dlen;
        ask += w->rx_padded - data_end + (w->in.dlen ? dd : 0);
        break;
    }
    case WRX_DDIGEST:
        ask += ISCSI_DIGEST_LEN - w->rx_got;
        break;
    default:
        return room;
    }
    return ask < room ? ask : room;
}

static bool io_release(struct wire *w)
{
    return w->ops->io_release ? w->ops->io_release(w->ctx) : false;
}

static void io_retake(struct wire *w, bool rel)
{
    if (w->ops->io_retake)
        w->ops->io_retake(w->ctx, rel); /* keeps errno */
}

/* Direct data placement: the rx buffer is empty and a large payload is due, so read it
 * straight into its destination; the pad, digest and what follows land in the rx buffer. */
static ssize_t rx_read_direct(struct wire *w, size_t *asked)
{
    struct iscsi_pdu_in *p = &w->in;
    struct iovec iov[ISCSI_PDU_DST_MAX + 1];
    int n = iov_slice(p->dst, p->dstcnt, w->rx_got, p->dlen - w->rx_got, iov, ISCSI_PDU_DST_MAX);
    uint32_t direct = 0;
    for (int i = 0; i < n; i++)
        direct += (uint32_t)iov[i].iov_len;
    w->rx_head = w->rx_tail = 0;
    iov[n].iov_base = w->rxbuf;
    iov[n].iov_len = rx_ask(w);
    *asked = direct + iov[n].iov_len;
    bool rel = io_release(w);
    ssize_t r = readv(w->fd, iov, n + 1);
    io_retake(w, rel);
    if (r <= 0)
        return r;
    uint32_t into_dst = (uint32_t)r < direct ? (uint32_t)r : direct;
    if (w->ddigest) {
        uint32_t left = into_dst;
        for (int i = 0; i < n && left; i++) {
            uint32_t k = iov[i].iov_len < left ? (uint32_t)iov[i].iov_len : left;
            w->rx_crc = crc32c_update(w->rx_crc, iov[i].iov_base, k);
            left -= k;
        }
    }
    w->rx_got += into_dst;
    w->rx_tail = (uint32_t)r - into_dst;
    return r;
}

static bool rx_direct_due(const struct wire *w)
{
    const struct iscsi_pdu_in *p = &w->in;
    return w->rx_state == WRX_DATA && !p->discard && w->rx_head == w->rx_tail &&
           w->rx_got < p->dlen && p->dlen - w->rx_got >= RX_DIRECT_MIN;
}

/* Read into the reactor's scratch buffer instead of ours when ours holds nothing unparsed:
 * with hundreds of connections on a thread, each reading into a buffer of its own, every read
 * landed in cold memory twice over, written by the kernel's copy and read back by the parse
 * (issue 14: 256 sessions of 4 KiB writes); the shared buffer stays in cache. Only when the
 * scratch is free (not a wire's further up this thread's stack) and at least as large as ours,
 * so that reads are the sizes they would have been. */
static bool rx_borrow(struct wire *w)
{
    if (!w->r || reactor_self() != w->r || w->rx_head != w->rx_tail)
        return false;
    struct reactor_scratch *s = reactor_scratch(w->r);
    if (!s || s->busy || s->size < w->rxbuf_size)
        return false;
    s->busy = true;
    w->rx_own = w->rxbuf;
    w->rxbuf = s->buf;
    w->rx_head = w->rx_tail = 0;
    return true;
}

/* Back to our own buffer, with what parsing left in the scratch: it stops short only when the
 * engine pauses (parsed on resume) or fails. */
static void rx_give_back(struct wire *w)
{
    struct reactor_scratch *s = reactor_scratch(w->r);
    assert(w->rx_own && s && s->busy && w->rxbuf == s->buf);
    uint32_t left = w->rx_tail - w->rx_head;
    if (left)
        memcpy(w->rx_own, w->rxbuf + w->rx_head, left);
    w->rxbuf = w->rx_own;
    w->rx_own = NULL;
    s->busy = false;
    w->rx_head = 0;
    w->rx_tail = left;
}

/* What one read brought: count it and parse it. > 0: read again; WIRE_OK: the socket is
 * drained (or the engine paused); < 0: the engine stopped. */
static int rx_took(struct wire *w, ssize_t r, size_t asked, uint32_t *budget)
{
    if (r == 0)
        return wire_fail(w, WIRE_E_PEER_CLOSED);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return WIRE_OK;
        if (errno == EINTR)
            return 1;
        w->fail_errno = errno;
        return wire_fail(w, errno == ECONNRESET ? WIRE_E_PEER_GONE : WIRE_E_RECV);
    }
    w->stats.rx_bytes += (uint64_t)r;
    w->rx_ns = iostats_now_ns(); /* one clock reading per read, not per PDU */
    *budget = (uint32_t)r >= *budget ? 0 : *budget - (uint32_t)r;
    int st = WIRE_OK;
    if (w->rx_state == WRX_DATA && w->rx_got == w->rx_padded)
        st = rx_data_done(w); /* the direct read ended exactly with the segment */
    if (st == WIRE_OK)
        st = rx_parse(w);
    if (st < 0)
        return st;
    /* A short read drained the socket: the next recv would only say EAGAIN. Epoll is
     * level-triggered, so anything arriving later wakes us again. */
    return rx_stopped(w) || (size_t)r < asked ? WIRE_OK : 1;
}

/* One read, into the payload's place, the shared buffer or ours, and its parse. */
static int rx_read_once(struct wire *w, uint32_t *budget)
{
    if (rx_direct_due(w)) {
        size_t asked;
        ssize_t r = rx_read_direct(w, &asked);
        return rx_took(w, r, asked, budget);
    }
    /* parsing consumes every byte unless paused, and a paused engine does not read */
    assert(w->rx_tail < w->rxbuf_size);
    bool borrowed = rx_borrow(w);
    size_t asked = rx_ask(w);
    bool rel = io_release(w);
    ssize_t r = recv(w->fd, w->rxbuf + w->rx_tail, asked, MSG_DONTWAIT);
    io_retake(w, rel);
    if (r > 0)
        w->rx_tail += (uint32_t)r;
    int st = rx_took(w, r, asked, budget);
    if (borrowed)
        rx_give_back(w);
    return st;
}

int wire_rx(struct wire *w)
{
    if (w->dead)
        return WIRE_E_OWNER;
    if (w->rxbuf_size < w->rxbuf_want) {
        /* realloc keeps bytes not parsed yet (offsets are relative) */
        uint8_t *b = realloc(w->rxbuf, w->rxbuf_want);
        if (!b)
            return wire_fail(w, WIRE_E_NOMEM);
        w->rxbuf = b;
        w->rxbuf_size = w->rxbuf_want;
    }
    uint32_t budget = RX_BUDGET_BYTES;
    while (!w->dead && budget) {
        if (w->rx_held)
            return WIRE_OK;
        if (w->rx_paused || tx_over(w)) {
            rx_pause(w);
            return WIRE_OK;
        }
        int st = rx_read_once(w, &budget);
        if (st < 0)
            return st;
        if (st == WIRE_OK)
            break;
    }
    return w->dead ? WIRE_E_OWNER : WIRE_OK;
}

int wire_event(struct wire *w, uint32_t events)
{
    if (w->dead)
        return WIRE_E_OWNER;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
        if (rx_stopped(w) && (events & (EPOLLERR | EPOLLHUP)))
            return wire_fail(w, WIRE_E_PEER_GONE); /* not read while paused: nothing else
                                                       would notice */
        if (!rx_stopped(w)) {
            int st = wire_rx(w);
            if (st < 0)
                return st;
        }
    }
    /* What this read produced (answers, R2Ts, the initiator's next commands) goes out now, in
     * one sendmsg, instead of at the end of the loop turn: with hundreds of connections ready
     * at once, a turn's tasks and PDUs no longer fit in the cache by the time the end-of-turn
     * flush walks them (issue 14: CPU per command grew ~40% from 8 to 256 sessions). Replies
     * produced later in the turn (completions posted by other threads) still wait for it. */
    if (!w->dead && ((events & EPOLLOUT) || reactor_undefer(&w->flush_hook)))
        return wire_flush(w);
    return w->dead ? WIRE_E_OWNER : WIRE_OK;
}

size_t wire_feed(struct wire *w, const void *bytes, size_t len)
{
    const uint8_t *src = bytes;
    size_t used = 0;
    while (used < len && !w->dead && !rx_stopped(w)) {
        if (w->rxbuf_size < w->rxbuf_want) {
            uint8_t *b = realloc(w->rxbuf, w->rxbuf_want);
            if (!b) {
                wire_fail(w, WIRE_E_NOMEM);
                break;
            }
            w->rxbuf = b;
            w->rxbuf_size = w->rxbuf_want;
        }
        uint32_t n = w->rxbuf_size - w->rx_tail;
        n = len - used < n ? (uint32_t)(len - used) : n;
        memcpy(w->rxbuf + w->rx_tail, src + used, n);
        w->rx_tail += n;
        w->stats.rx_bytes += n;
        w->rx_ns = iostats_now_ns();
        used += n;
        rx_parse(w);
    }
    return used;
}

int wire_status(const struct wire *w)
{
    return w->dead ? w->status : WIRE_OK;
}

struct iscsi_pdu_in *wire_rx_current(struct wire *w)
{
    return w->rx_state == WRX_DATA || w->rx_state == WRX_DDIGEST ? &w->in : NULL;
}

/* ---------------- transmit ---------------- */

struct wire_pdu *wire_pdu_get(struct wire *w)
{
    struct list_node *n = list_pop(&w->tx_free);
    struct wire_pdu *p;
    if (n) {
        w->tx_free_count--;
        p = list_entry(n, struct wire_pdu, node);
    } else {
        p = malloc(sizeof(*p));
        if (!p)
            return NULL;
    }
    memset(p->hdr, 0, ISCSI_BHS_LEN);
    p->datacnt = 0;
    p->dlen = 0;
    p->dropped = false;
    p->may_fault = false;
    p->owned = NULL;
    p->sent = NULL;
    p->arg = NULL;
    list_init(&p->node);
    return p;
}

void wire_pdu_put(struct wire *w, struct wire_pdu *p)
{
    tx_release(w, p);
}

/* xorshift64*: deterministic per connection, so a failing run repeats with its seed. */
static double fault_rand(struct wire *w)
{
    uint64_t x = w->prng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->prng = x;
    return (double)((x * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

static void apply_faults(struct wire *w, struct wire_pdu *p)
{
    unsigned op = p->hdr[0] & ISCSI_OPCODE_MASK;
    if (w->faults.drop_pdu > 0 && (!w->faults.drop_ops || (w->faults.drop_ops >> op) & 1) &&
        fault_rand(w) < w->faults.drop_pdu) {
        p->dropped = true;
        w->stats.injected_drops++;
        return;
    }
    if (w->faults.digest_error > 0 && w->ddigest && p->dlen &&
        fault_rand(w) < w->faults.digest_error) {
        p->trailer[p->trailer_len - 1] ^= 0x01; /* the digest's last byte */
        w->stats.injected_digest_errors++;
    }
}

struct data_crc {
    const struct wire_pdu *p;
    uint32_t crc;
};

/* The data segment's CRC; under fault_guard_run when it may be a file's mapping. */
static void data_crc_run(void *arg)
{
    struct data_crc *dc = arg;
    for (int i = 0; i < dc->p->datacnt; i++)
        dc->crc = crc32c_update(dc->crc, dc->p->data[i].iov_base, dc->p->data[i].iov_len);
}

/* Digests are computed as the PDU is queued (RFC 7143 §12.1: CRC32C over BHS + AHS, and over
 * the data segment with its padding), written least significant byte first. */
void wire_send(struct wire *w, struct wire_pdu *p)
{
    if (w->dead) {
        if (p->sent)
            p->sent(p, false);
        tx_release(w, p);
        return;
    }
    struct iscsi_bhs *h = (struct iscsi_bhs *)p->hdr;
    bhs_set_dlength(h, p->dlen);
    p->hdr_len = ISCSI_BHS_LEN;
    if (w->hdigest) {
        put_le32(p->hdr + ISCSI_BHS_LEN, crc32c(p->hdr, ISCSI_BHS_LEN));
        p->hdr_len += ISCSI_DIGEST_LEN;
    }
    uint32_t pad = ISCSI_PAD(p->dlen) - p->dlen;
    memset(p->trailer, 0, 3);
    p->trailer_len = pad;
    if (w->ddigest && p->dlen) {
        struct data_crc dc = {.p = p, .crc = CRC32C_INIT};
        int rc = 0;
        if (!p->may_fault) /* our own memory: no guard, and no SIGBUS handler installed */
            data_crc_run(&dc);
        else
            rc = fault_guard_run(data_crc_run, &dc);
        if (rc < 0) {
            /* The segment's pages are gone (a file LUN's mapping past a new, shorter end):
             * the send faults on the same pages and fails the connection through the usual
             * path; if the file grew back meanwhile, this digest (of nothing sent) makes the
             * initiator drop it (RFC 7143 §7.8). */
            LOG_WARN("%s: a Data-In's pages vanished (the file shrank?)", w->name);
            dc.crc = CRC32C_INIT;
        } else if (pad) {
            dc.crc = crc32c_update(dc.crc, p->trailer, pad);
        }
        put_le32(p->trailer + pad, crc32c_final(dc.crc));
        p->trailer_len += ISCSI_DIGEST_LEN;
    }
    if (w->faults_on)
        apply_faults(w, p);
    p->charge = WIRE_PDU_CHARGE + (p->owned ? p->dlen : 0);
    w->tx_backlog += p->charge;
    w->txq_pdus++;
    w->txq_data += p->dlen;
    list_add_tail(&w->txq, &p->node);
    if (w->registered && !w->tx_hold)
        reactor_defer(w->r, &w->flush_hook, flush_deferred, w);
}

static uint64_t pdu_wire_len(const struct wire_pdu *p)
{
    return p->dropped ? 0 : (uint64_t)p->hdr_len + p->dlen + p->trailer_len;
}

/* The pieces of p from byte `skip` on, appended to iov[*n]; returns false if they do not fit. */
static bool gather(const struct wire_pdu *p, uint32_t skip, struct iovec *iov, int *n, int max)
{
    if (p->dropped)
        return true;
    if (*n + p->datacnt + 2 > max)
        return false;
    struct iovec parts[WIRE_DATA_IOV_MAX + 2];
    int np = 0;
    parts[np++] = (struct iovec){(void *)p->hdr, p->hdr_len};
    for (int i = 0; i < p->datacnt; i++)
        parts[np++] = p->data[i];
    if (p->trailer_len)
        parts[np++] = (struct iovec){(void *)p->trailer, p->trailer_len};
    for (int i = 0; i < np; i++) {
        if (skip >= parts[i].iov_len) {
            skip -= (uint32_t)parts[i].iov_len;
            continue;
        }
        iov[*n].iov_base = (char *)parts[i].iov_base + skip;
        iov[*n].iov_len = parts[i].iov_len - skip;
        skip = 0;
        (*n)++;
    }
    return true;
}

/* The unwritten part of the queue, from its head, as far as TX_IOV_MAX pieces go. */
static int gather_queue(const struct wire *w, struct iovec iov[TX_IOV_MAX])
{
    int n = 0;
    uint32_t skip = w->tx_off;
    for (const struct list_node *ln = w->txq.next; ln != &w->txq; ln = ln->next) {
        if (!gather(list_entry(ln, struct wire_pdu, node), skip, iov, &n, TX_IOV_MAX))
            break;
        skip = 0;
    }
    return n;
}

/* p leaves the queue: written whole (sent), or dropped unsent. */
static void tx_unqueue(struct wire *w, struct wire_pdu *p, bool sent)
{
    list_del(&p->node);
    w->tx_backlog -= p->charge;
    w->txq_pdus--;
    w->txq_data -= p->dlen;
    if (p->sent)
        p->sent(p, sent);
    tx_release(w, p);
}

/* `bytes` more of the queue are on the wire: retire every PDU now fully written. */
static void tx_retire(struct wire *w, uint64_t bytes)
{
    uint64_t done = bytes + w->tx_off;
    while (!w->dead && !list_empty(&w->txq)) {
        struct wire_pdu *p = list_entry(w->txq.next, struct wire_pdu, node);
        uint64_t len = pdu_wire_len(p);
        if (done < len)
            break;
        done -= len;
        tx_unqueue(w, p, true);
    }
    w->tx_off = w->dead ? 0 : (uint32_t)done;
}

/* p's data segment into memory p owns: the same bytes (the digest was computed from them); a
 * head PDU partly written goes on from tx_off, which counts the same bytes. */
struct own_copy {
    const struct wire_pdu *p;
    uint8_t *copy;
};

/* Under fault_guard_run when the segment may be a file's mapping, seconds after it was
 * queued. */
static void own_copy_run(void *arg)
{
    struct own_copy *oc = arg;
    size_t off = 0;
    for (int i = 0; i < oc->p->datacnt; i++) {
        memcpy(oc->copy + off, oc->p->data[i].iov_base, oc->p->data[i].iov_len);
        off += oc->p->data[i].iov_len;
    }
    assert(off == oc->p->dlen);
}

/* p's segment copied to `into` (the owner's memory, alive while p is queued) or to memory p
 * owns: 1 when copied, 0 when there was nothing to copy, -1 on no memory or vanished pages. */
static int pdu_own_data(struct wire_pdu *p, void *into)
{
    if (p->owned || !p->dlen)
        return 0;
    uint8_t *copy = into ? into : malloc(p->dlen);
    if (!copy)
        return -1;
    struct own_copy oc = {.p = p, .copy = copy};
    if (!p->may_fault) {
        own_copy_run(&oc);
    } else if (fault_guard_run(own_copy_run, &oc) < 0) {
        /* a file LUN's pages past a new, shorter end: the bytes the digest covered are gone,
         * so the caller ends the connection */
        LOG_WARN("a queued Data-In's pages vanished (the file shrank?): closing");
        if (!into)
            free(copy);
        return -1;
    }
    p->may_fault = false;
    if (!into)
        p->owned = copy;
    p->data[0].iov_base = copy;
    p->data[0].iov_len = p->dlen;
    p->datacnt = 1;
    return 1;
}

int wire_forget(struct wire *w, enum wire_forget (*fn)(struct wire_pdu *p, void *arg, void **into),
                void *arg)
{
    bool dropped = false;
    struct list_node *n = w->txq.next;
    while (n != &w->txq) {
        struct wire_pdu *p = list_entry(n, struct wire_pdu, node);
        n = n->next;
        void *into = NULL;
        enum wire_forget what = fn(p, arg, &into);
        if (what == WIRE_FORGET_NOT)
            continue;
        bool started = &p->node == w->txq.next && w->tx_off > 0;
        if (what == WIRE_FORGET_DROP && !started) {
            tx_unqueue(w, p, false);
            dropped = true;
            continue;
        }
        int copied = pdu_own_data(p, into);
        if (copied < 0) {
            wire_close(w); /* nothing of the queue may go out from the owner's memory now */
            return -1;
        }
        if (copied) { /* the copy counts as wire_send counts an owned segment */
            p->charge += p->dlen;
            w->tx_backlog += p->dlen;
        }
    }
    if (dropped)
        rx_maybe_resume(w);
    return 0;
}

/* Write as much of the queue as the socket takes, in as few sendmsg calls as possible. */
int wire_flush(struct wire *w)
{
    if (w->dead)
        return WIRE_E_OWNER;
    if (w->fd < 0 || w->tx_hold)
        return WIRE_OK;
    while (!w->dead && !list_empty(&w->txq)) {
        struct iovec iov[TX_IOV_MAX];
        int n = gather_queue(w, iov);
        ssize_t sent = 0;
        if (n) {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            bool rel = io_release(w);
            sent = sendmsg(w->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            io_retake(w, rel);
            if (sent < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    wire_want_write(w, true);
                    return WIRE_OK;
                }
                if (errno == EINTR)
                    continue;
                w->fail_errno = errno;
                return wire_fail(w, errno == EPIPE || errno == ECONNRESET ? WIRE_E_PEER_GONE
                                                                          : WIRE_E_SEND);
            }
            w->stats.tx_bytes += (uint64_t)sent;
        }
        tx_retire(w, (uint64_t)sent);
        rx_maybe_resume(w);
    }
    if (w->dead)
        return WIRE_E_OWNER;
    wire_want_write(w, false);
    if (w->ops->drained)
        w->ops->drained(w->ctx);
    return w->dead ? WIRE_E_OWNER : WIRE_OK;
}

static void flush_deferred(void *arg)
{
    struct wire *w = arg;
    if (w->ops->lock)
        w->ops->lock(w->ctx);
    wire_flush(w);
    if (w->ops->unlock)
        w->ops->unlock(w->ctx);
}

unsigned wire_tx_count(const struct wire *w)
{
    return w->txq_pdus;
}

size_t wire_take_tx(struct wire *w, void *buf, size_t cap)
{
    uint8_t *out = buf;
    size_t used = 0;
    while (!w->dead && !list_empty(&w->txq) && used < cap) {
        struct iovec iov[TX_IOV_MAX];
        int n = gather_queue(w, iov);
        size_t k = (size_t)iov_copy_out(iov, n, out + used, cap - used);
        used += k;
        w->stats.tx_bytes += k;
        tx_retire(w, k);
        rx_maybe_resume(w);
    }
    /* as after a flush that emptied the queue */
    if (!w->dead && list_empty(&w->txq) && w->ops->drained)
        w->ops->drained(w->ctx);
    return used;
}
