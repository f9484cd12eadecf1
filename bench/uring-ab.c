/* uring-ab: would io_uring sockets beat the reactor's epoll + recv/sendmsg for 4 KiB traffic?
 * A standalone model of the target's wire pattern on loopback (issue 14): one server thread,
 * one client thread driving N connections, each "command" a 48-byte header (plus 4 KiB for a
 * write) answered by a 48-byte "response" (plus 4 KiB for a read). Server variants:
 *   epoll  level-triggered epoll as src/reactor/reactor.c, recv/readv as src/iscsi/wire.c
 *          (payload read straight into its destination), one sendmsg per connection per read;
 *   uring  multishot recv into a provided buffer ring (payload copied out to its destination),
 *          one SENDMSG per connection per turn, the whole turn in one io_uring_submit_and_wait;
 *   zc     uring with IORING_OP_SENDMSG_ZC for read responses;
 *   epoll-copy  epoll without direct placement: payloads recv'd with what follows, copied out.
 * Variants alternate round by round; the server thread's CPU (schedstat), syscalls and sleeps
 * per op are reported as medians and paired ratios to the first variant. */
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR_LEN 48u
#define BLOCK 4096u
#define LUN_BLOCKS 4096u /* a 16 MiB RAM "LUN": reads send from it, writes land in it */
#define RXBUF 16384u     /* the epoll variant's per-connection receive buffer */
#define SLOTS 1024u      /* responses a connection may hold, queued or awaiting a ZC notif */
#define TX_IOV_MAX 256   /* as wire.c */
#define ZC_RECS 64u      /* zero-copy sends awaiting their notification, per connection */
#define MAX_EVENTS 128   /* as reactor.c */
#define OP_WRITE 1
#define OP_READ 2

enum variant { V_EPOLL, V_URING, V_ZC, V_EPOLL_COPY, V_COUNT };
static const char *const variant_name[V_COUNT] = {"epoll", "uring", "zc", "epoll-copy"};

static void die(const char *what)
{
    fprintf(stderr, "uring-ab: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void die_res(const char *what, int res)
{
    errno = -res;
    die(what);
}

/* ---- wire format ------------------------------------------------------------------------ */

struct hdr {
    uint8_t op;
    uint8_t pad[3];
    uint32_t tag;
    uint64_t lba;
    uint32_t dlen;
    uint8_t rest[HDR_LEN - 20];
};
_Static_assert(sizeof(struct hdr) == HDR_LEN, "header is 48 bytes like a BHS");

/* ---- server connection: receive machine and transmit queue, shared by all variants ------- */

struct slot {
    struct hdr h;
    const uint8_t *data; /* points into the LUN: must stay valid until sent (or notified) */
    uint32_t len;        /* HDR_LEN + data length */
};

struct zc_rec {
    uint32_t end; /* slot index the send reached, set at its completion */
    bool completed, notified;
};

struct sconn {
    int fd;
    bool closed, large, want_out, dirty, send_busy;
    /* receive: header bytes gathered, then the payload into its destination */
    struct hdr in;
    uint32_t in_got;
    uint8_t *dst;
    uint32_t data_left;
    uint8_t *rxbuf; /* epoll only */
    uint32_t rx_head, rx_tail;
    /* transmit: slots [tx_free, tx_head) sent but held for a ZC notification, [tx_head,
     * tx_tail) queued, the first tx_skip bytes of tx_head already sent */
    struct slot *slots;
    uint32_t tx_free, tx_head, tx_tail, tx_skip;
    struct iovec iov[TX_IOV_MAX]; /* a send in flight: io_uring reads it after the prep */
    struct msghdr mh;
    struct zc_rec zc[ZC_RECS];
    uint32_t zc_head, zc_tail;
};

struct server {
    enum variant v;
    int nconns;
    struct sconn *c;
    uint8_t *lun;
    int bufsize, nbufs;
    /* published for the main thread (relaxed stores, read while running) */
    int tid;
    uint64_t syscalls, copied;
    int ready;
};

static void tx_queue(struct server *s, struct sconn *c, const struct hdr *cmd)
{
    if (c->tx_tail - c->tx_free >= SLOTS) {
        fprintf(stderr, "uring-ab: response slots exhausted\n");
        exit(1);
    }
    struct slot *sl = &c->slots[c->tx_tail++ % SLOTS];
    memset(&sl->h, 0, sizeof(sl->h));
    sl->h.op = cmd->op | 0x80;
    sl->h.tag = cmd->tag;
    sl->data = NULL;
    sl->len = HDR_LEN;
    if (cmd->op == OP_READ) {
        sl->h.dlen = BLOCK;
        sl->data = s->lun + (cmd->lba % LUN_BLOCKS) * BLOCK;
        sl->len += BLOCK;
    }
    c->dirty = true;
}

/* A whole header arrived: a read is answered at once, a write waits for its payload. */
static void rx_header(struct server *s, struct sconn *c)
{
    c->in_got = 0;
    if (c->in.op == OP_WRITE) {
        c->large = true;
        c->dst = s->lun + (c->in.lba % LUN_BLOCKS) * BLOCK;
        c->data_left = BLOCK;
    } else {
        c->large = false;
        tx_queue(s, c, &c->in);
    }
}

/* Parse received bytes: header bytes into c->in, payload bytes copied to the destination. */
static void rx_consume(struct server *s, struct sconn *c, const uint8_t *p, uint32_t n)
{
    while (n) {
        if (c->data_left) {
            uint32_t k = n < c->data_left ? n : c->data_left;
            memcpy(c->dst + (BLOCK - c->data_left), p, k);
            s->copied += k;
            c->data_left -= k;
            p += k;
            n -= k;
            if (!c->data_left)
                tx_queue(s, c, &c->in);
            continue;
        }
        uint32_t k = HDR_LEN - c->in_got < n ? HDR_LEN - c->in_got : n;
        memcpy((uint8_t *)&c->in + c->in_got, p, k);
        c->in_got += k;
        p += k;
        n -= k;
        if (c->in_got == HDR_LEN)
            rx_header(s, c);
    }
}

/* The queued part of the transmit queue as iovecs, from tx_head on; returns the count. */
static int tx_gather(struct sconn *c, struct iovec *iov)
{
    int n = 0;
    uint32_t skip = c->tx_skip;
    for (uint32_t i = c->tx_head; i != c->tx_tail && n + 2 <= TX_IOV_MAX; i++) {
        struct slot *sl = &c->slots[i % SLOTS];
        if (skip < HDR_LEN) {
            iov[n].iov_base = (uint8_t *)&sl->h + skip;
            iov[n++].iov_len = HDR_LEN - skip;
            skip = 0;
        } else {
            skip -= HDR_LEN;
        }
        if (sl->data) {
            iov[n].iov_base = (uint8_t *)sl->data + skip;
            iov[n++].iov_len = BLOCK - skip;
        }
        skip = 0;
    }
    return n;
}

/* `n` bytes went out: move tx_head over the slots they finished. */
static void tx_sent(struct sconn *c, uint32_t n)
{
    while (n) {
        uint32_t left = c->slots[c->tx_head % SLOTS].len - c->tx_skip;
        if (n < left) {
            c->tx_skip += n;
            return;
        }
        n -= left;
        c->tx_skip = 0;
        c->tx_head++;
    }
}

static void conn_init(struct sconn *c, int fd, bool rxbuf)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->slots = calloc(SLOTS, sizeof(*c->slots));
    c->rxbuf = rxbuf ? malloc(RXBUF) : NULL;
    if (!c->slots || (rxbuf && !c->rxbuf))
        die("calloc");
}

/* ---- variant epoll: as reactor.c + wire.c ---------------------------------------------- */

static void ep_flush(int ep, struct sconn *c, uint64_t *sys)
{
    while (c->tx_head != c->tx_tail) {
        struct msghdr mh = {.msg_iov = c->iov, .msg_iovlen = (size_t)tx_gather(c, c->iov)};
        ssize_t r = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        (*sys)++;
        if (r < 0 && errno != EAGAIN)
            die("sendmsg");
        if (r < 0)
            break;
        tx_sent(c, (uint32_t)r);
    }
    c->tx_free = c->tx_head;
    bool want = c->tx_head != c->tx_tail;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
            die("epoll_ctl");
        (*sys)++;
        c->want_out = want;
    }
}

/* wire_rx: while a write payload is due and nothing is buffered, readv it straight into its
 * destination with the next header behind it; otherwise recv as much as fits and parse it.
 * A short read means the socket is drained (epoll is level-triggered). */
static void ep_rx(struct server *s, struct sconn *c, uint64_t *sys)
{
    bool direct = s->v == V_EPOLL;
    for (;;) {
        ssize_t r;
        size_t asked;
        if (c->rx_head == c->rx_tail)
            c->rx_head = c->rx_tail = 0;
        if (direct && c->data_left && c->rx_head == c->rx_tail) {
            struct iovec iov[2] = {{c->dst + (BLOCK - c->data_left), c->data_left},
                                   {c->rxbuf, HDR_LEN}};
            asked = c->data_left + HDR_LEN;
            r = readv(c->fd, iov, 2);
            (*sys)++;
            if (r > 0) {
                uint32_t into = (uint32_t)r < c->data_left ? (uint32_t)r : c->data_left;
                c->data_left -= into;
                if (!c->data_left)
                    tx_queue(s, c, &c->in);
                c->rx_tail = (uint32_t)r - into;
            }
        } else {
            uint32_t room = RXBUF - c->rx_tail;
            asked = direct && c->large && c->rx_head == c->rx_tail ? HDR_LEN - c->in_got : room;
            r = recv(c->fd, c->rxbuf + c->rx_tail, asked, MSG_DONTWAIT);
            (*sys)++;
            if (r > 0)
                c->rx_tail += (uint32_t)r;
        }
        if (r == 0) {
            c->closed = true;
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN)
                return;
            die("recv");
        }
        /* what the buffer holds is parsed; a payload in it is copied out (wire.c does too) */
        uint32_t n = c->rx_tail - c->rx_head;
        rx_consume(s, c, c->rxbuf + c->rx_head, n);
        c->rx_head += n;
        if ((size_t)r < asked)
            return;
    }
}

static void run_epoll(struct server *s)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    for (int i = 0; i < s->nconns; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->c[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, s->c[i].fd, &ev) < 0)
            die("epoll_ctl");
    }
    uint64_t sys = 0;
    int open = s->nconns;
    struct epoll_event evs[MAX_EVENTS];
    while (open) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        sys++;
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct sconn *c = evs[i].data.ptr;
            if (c->closed)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                ep_rx(s, c, &sys);
            if (c->closed) {
                close(c->fd);
                open--;
                continue;
            }
            /* as wire_event: what this read produced goes out now, in one sendmsg */
            if (c->dirty || (evs[i].events & EPOLLOUT)) {
                c->dirty = false;
                ep_flush(ep, c, &sys);
            }
        }
        __atomic_store_n(&s->syscalls, sys, __ATOMIC_RELAXED);
    }
    close(ep);
}

/* ---- variants uring and zc --------------------------------------------------------------- */

#define UD_RECV 1u
#define UD_SEND 2u
#define UD(kind, conn, rec) ((uint64_t)(kind) | (uint64_t)(rec) << 8 | (uint64_t)(conn) << 32)
#define BGID 1

struct uring_srv {
    struct io_uring ring;
    struct io_uring_buf_ring *br;
    uint8_t *bufs;
    int mask, nadd;
};

static struct io_uring_sqe *get_sqe(struct io_uring *ring, uint64_t *sys)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) { /* the SQ ring is full: submit what is there and carry on */
        int r = io_uring_submit(ring);
        (*sys)++;
        if (r < 0)
            die_res("io_uring_submit", r);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

static void arm_recv(struct uring_srv *u, int idx, int fd, uint64_t *sys)
{
    struct io_uring_sqe *sqe = get_sqe(&u->ring, sys);
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, UD(UD_RECV, idx, 0));
}

static void uring_send(struct server *s, struct uring_srv *u, int idx, uint64_t *sys)
{
    struct sconn *c = &s->c[idx];
    c->mh = (struct msghdr){.msg_iov = c->iov, .msg_iovlen = (size_t)tx_gather(c, c->iov)};
    struct io_uring_sqe *sqe = get_sqe(&u->ring, sys);
    bool zc = s->v == V_ZC;
    if (zc && c->zc_tail - c->zc_head == ZC_RECS)
        zc = false; /* too many notifications outstanding: copy this one */
    uint32_t rec = 0;
    if (zc) {
        rec = c->zc_tail++ % ZC_RECS;
        c->zc[rec] = (struct zc_rec){0};
        io_uring_prep_sendmsg_zc(sqe, c->fd, &c->mh, MSG_NOSIGNAL | MSG_WAITALL);
    } else {
        io_uring_prep_sendmsg(sqe, c->fd, &c->mh, MSG_NOSIGNAL | MSG_WAITALL);
        rec = ZC_RECS; /* not a ZC send */
    }
    io_uring_sqe_set_data64(sqe, UD(UD_SEND, idx, rec));
    c->send_busy = true;
}

/* Slots can be reused once the kernel is done with them: at the completion of a copying send,
 * at the notification of a zero-copy one (notifications may come out of order). */
static void zc_release(struct sconn *c)
{
    while (c->zc_head != c->zc_tail) {
        struct zc_rec *z = &c->zc[c->zc_head % ZC_RECS];
        if (!z->completed || !z->notified)
            break;
        c->tx_free = z->end;
        c->zc_head++;
    }
    if (c->zc_head == c->zc_tail)
        c->tx_free = c->tx_head;
}

static void on_send(struct sconn *c, uint32_t rec, struct io_uring_cqe *cqe)
{
    struct zc_rec *z = rec < ZC_RECS ? &c->zc[rec] : NULL;
    if (cqe->flags & IORING_CQE_F_NOTIF) {
        z->notified = true;
        zc_release(c);
        return;
    }
    if (cqe->res < 0)
        die_res("send", cqe->res);
    tx_sent(c, (uint32_t)cqe->res);
    c->send_busy = false;
    c->dirty = c->tx_head != c->tx_tail; /* a short send, or responses queued meanwhile */
    if (z) {
        z->completed = true;
        z->end = c->tx_head;
        z->notified = !(cqe->flags & IORING_CQE_F_MORE); /* no notification will follow */
        zc_release(c);
    } else if (c->zc_head == c->zc_tail) {
        c->tx_free = c->tx_head;
    }
}

static void run_uring(struct server *s)
{
    struct uring_srv u = {0};
    struct io_uring_params p = {0};
    /* one thread owns the ring: task work runs only when it waits (DEFER_TASKRUN, 6.1) */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
    p.cq_entries = 4096;
    int r = io_uring_queue_init_params(256, &u.ring, &p);
    if (r < 0)
        die_res("io_uring_queue_init_params", r);

    /* liburing 2.3 has no io_uring_setup_buf_ring (2.4): allocate and register by hand */
    size_t ring_bytes = (size_t)s->nbufs * sizeof(struct io_uring_buf);
    if (posix_memalign((void **)&u.br, 4096, ring_bytes) ||
        posix_memalign((void **)&u.bufs, 4096, (size_t)s->nbufs * (size_t)s->bufsize))
        die("posix_memalign");
    struct io_uring_buf_reg reg = {
        .ring_addr = (uint64_t)(uintptr_t)u.br, .ring_entries = (uint32_t)s->nbufs, .bgid = BGID};
    r = io_uring_register_buf_ring(&u.ring, &reg, 0);
    if (r < 0)
        die_res("io_uring_register_buf_ring", r);
    io_uring_buf_ring_init(u.br);
    u.mask = io_uring_buf_ring_mask((uint32_t)s->nbufs);
    for (int i = 0; i < s->nbufs; i++)
        io_uring_buf_ring_add(u.br, u.bufs + (size_t)i * (size_t)s->bufsize, (unsigned)s->bufsize,
                              (unsigned short)i, u.mask, i);
    io_uring_buf_ring_advance(u.br, s->nbufs);

    uint64_t sys = 0;
    for (int i = 0; i < s->nconns; i++)
        arm_recv(&u, i, s->c[i].fd, &sys);
    int open = s->nconns;
    int *dirty = malloc(sizeof(int) * (size_t)s->nconns);
    if (!dirty)
        die("malloc");
    while (open) {
        /* submits the turn's sends and re-arms in the same io_uring_enter that waits */
        r = io_uring_submit_and_wait(&u.ring, 1);
        sys++;
        if (r < 0 && r != -EINTR)
            die_res("io_uring_submit_and_wait", r);
        unsigned head, seen = 0;
        int ndirty = 0, nadd = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&u.ring, head, cqe)
        {
            seen++;
            uint64_t ud = io_uring_cqe_get_data64(cqe);
            int idx = (int)(ud >> 32);
            struct sconn *c = &s->c[idx];
            if ((ud & 0xff) == UD_SEND) {
                on_send(c, (uint32_t)(ud >> 8) & 0xffffff, cqe);
            } else if (cqe->res > 0) {
                unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
                uint8_t *b = u.bufs + (size_t)bid * (size_t)s->bufsize;
                rx_consume(s, c, b, (uint32_t)cqe->res);
                io_uring_buf_ring_add(u.br, b, (unsigned)s->bufsize, (unsigned short)bid, u.mask,
                                      nadd++);
            } else if (cqe->res == 0) {
                c->closed = true;
                open--;
            } else if (cqe->res != -ENOBUFS) {
                die_res("recv", cqe->res);
            }
            if ((ud & 0xff) == UD_RECV && !c->closed && !(cqe->flags & IORING_CQE_F_MORE))
                arm_recv(&u, idx, c->fd, &sys); /* ENOBUFS or the kernel ended it */
            /* one send per connection in flight: it gathers all queued when prepared */
            if (c->dirty && !c->send_busy && !c->closed) {
                c->dirty = false;
                c->send_busy = true;
                dirty[ndirty++] = idx;
            }
        }
        io_uring_cq_advance(&u.ring, seen);
        io_uring_buf_ring_advance(u.br, nadd);
        for (int i = 0; i < ndirty; i++)
            uring_send(s, &u, dirty[i], &sys);
        __atomic_store_n(&s->syscalls, sys, __ATOMIC_RELAXED);
    }
    free(dirty);
    io_uring_queue_exit(&u.ring);
    for (int i = 0; i < s->nconns; i++)
        close(s->c[i].fd);
    free(u.br);
    free(u.bufs);
}

/* ---- threads ----------------------------------------------------------------------------- */

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0)
        die("sched_setaffinity");
}

static int g_pin_server = -1, g_pin_client = -1;

static void *server_main(void *arg)
{
    struct server *s = arg;
    if (g_pin_server >= 0)
        pin(g_pin_server);
    __atomic_store_n(&s->tid, gettid(), __ATOMIC_RELEASE);
    if (s->v == V_EPOLL || s->v == V_EPOLL_COPY)
        run_epoll(s);
    else
        run_uring(s);
    return NULL;
}

struct cconn {
    int fd;
    uint32_t outstanding;
    uint8_t *tx;
    size_t tx_len, tx_off;
    bool want_out;
    uint32_t hdr_got, data_left;
    uint8_t hdr[HDR_LEN];
};

struct client {
    int nconns, qd, rw, port;
    uint64_t ops; /* published */
    int stop;
};

static void client_queue(struct cconn *c, int rw, uint64_t *rnd, uint32_t tag)
{
    struct hdr h = {.op = (uint8_t)rw, .tag = tag};
    *rnd ^= *rnd << 13;
    *rnd ^= *rnd >> 7;
    *rnd ^= *rnd << 17;
    h.lba = *rnd % LUN_BLOCKS;
    if (rw == OP_WRITE)
        h.dlen = BLOCK;
    memcpy(c->tx + c->tx_len, &h, HDR_LEN);
    c->tx_len += HDR_LEN;
    if (rw == OP_WRITE) {
        memset(c->tx + c->tx_len, (int)(tag & 0xff), BLOCK);
        c->tx_len += BLOCK;
    }
    c->outstanding++;
}

static void client_flush(int ep, struct cconn *c)
{
    while (c->tx_off < c->tx_len) {
        ssize_t r =
            send(c->fd, c->tx + c->tx_off, c->tx_len - c->tx_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0 && errno != EAGAIN)
            die("client send");
        if (r < 0)
            break;
        c->tx_off += (size_t)r;
    }
    if (c->tx_off == c->tx_len)
        c->tx_off = c->tx_len = 0;
    bool want = c->tx_len != 0;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
            die("epoll_ctl");
        c->want_out = want;
    }
}

static void *client_main(void *arg)
{
    struct client *cl = arg;
    if (g_pin_client >= 0)
        pin(g_pin_client);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct cconn *cs = calloc((size_t)cl->nconns, sizeof(*cs));
    size_t rxcap = 256 * 1024;
    uint8_t *rx = malloc(rxcap);
    if (ep < 0 || !cs || !rx)
        die("client setup");
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)cl->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint64_t rnd = 88172645463325252ull, ops = 0, tag = 0, outstanding = 0;
    for (int i = 0; i < cl->nconns; i++) {
        struct cconn *c = &cs[i];
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            die("connect");
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->tx = malloc((size_t)cl->qd * (HDR_LEN + BLOCK) * 2);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (!c->tx || epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            die("client conn");
    }
    for (int i = 0; i < cl->nconns; i++) {
        for (int k = 0; k < cl->qd; k++)
            client_queue(&cs[i], cl->rw, &rnd, (uint32_t)tag++);
        outstanding += (uint64_t)cl->qd;
        client_flush(ep, &cs[i]);
    }
    struct epoll_event evs[MAX_EVENTS];
    bool stopping = false;
    while (!stopping || outstanding) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, 50);
        if (n < 0 && errno != EINTR)
            die("client epoll_wait");
        stopping = __atomic_load_n(&cl->stop, __ATOMIC_RELAXED);
        for (int i = 0; i < n; i++) {
            struct cconn *c = evs[i].data.ptr;
            if (evs[i].events & EPOLLIN) {
                ssize_t r = recv(c->fd, rx, rxcap, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN))
                    die("client recv");
                for (ssize_t off = 0; r > 0 && off < r;) {
                    size_t left = (size_t)(r - off);
                    if (c->data_left) { /* a read's payload: the initiator would place it */
                        size_t k = left < c->data_left ? left : c->data_left;
                        c->data_left -= (uint32_t)k;
                        off += (ssize_t)k;
                    } else {
                        size_t k = HDR_LEN - c->hdr_got < left ? HDR_LEN - c->hdr_got : left;
                        memcpy(c->hdr + c->hdr_got, rx + off, k);
                        c->hdr_got += (uint32_t)k;
                        off += (ssize_t)k;
                        if (c->hdr_got < HDR_LEN)
                            continue;
                        c->hdr_got = 0;
                        c->data_left = ((struct hdr *)c->hdr)->dlen;
                    }
                    if (c->data_left || c->hdr_got)
                        continue;
                    /* a response is complete: the next command goes out from it */
                    ops++;
                    c->outstanding--;
                    outstanding--;
                    if (!stopping) {
                        client_queue(c, cl->rw, &rnd, (uint32_t)tag++);
                        outstanding++;
                    }
                }
            }
            client_flush(ep, c);
        }
        __atomic_store_n(&cl->ops, ops, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < cl->nconns; i++) {
        close(cs[i].fd);
        free(cs[i].tx);
    }
    free(cs);
    free(rx);
    close(ep);
    return NULL;
}

/* ---- measurement ------------------------------------------------------------------------- */

struct snap {
    double t;
    uint64_t ops, sys, run_ns, utick, stick, vcsw;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The server thread's time on CPU (schedstat, ns), user and system ticks (stat fields 14 and
 * 15) and voluntary context switches (sleeps). */
static void thread_cpu(int tid, struct snap *sn)
{
    char path[96], buf[2048];
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%lu", &sn->run_ns) != 1)
        die("schedstat");
    fclose(f);
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof(buf), f))
        die("stat");
    fclose(f);
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &sn->utick,
                     &sn->stick) != 2)
        die("stat fields");
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    f = fopen(path, "r");
    if (!f)
        die("status");
    while (fgets(buf, sizeof(buf), f))
        if (sscanf(buf, "voluntary_ctxt_switches: %lu", &sn->vcsw) == 1)
            break;
    fclose(f);
}

struct result {
    double ops_s, cpu_us, busy, sys_share, sys_per_op, sleeps_per_op, copy_per_op;
};

struct opts {
    int conns[8], nconn, rws[2], nrw, variants[V_COUNT], nvar;
    int qd, rounds, port, bufsize, nbufs;
    double secs, warmup;
};

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 256) < 0)
        die("listen");
    return fd;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static struct result run_cell(const struct opts *o, enum variant v, int rw, int nconns)
{
    int qd = o->qd / nconns > 0 ? o->qd / nconns : 1;
    int lfd = listen_on(o->port);
    struct client cl = {.nconns = nconns, .qd = qd, .rw = rw, .port = o->port};
    struct server s = {.v = v, .nconns = nconns, .bufsize = o->bufsize, .nbufs = o->nbufs};
    s.c = calloc((size_t)nconns, sizeof(*s.c));
    s.lun = aligned_alloc(4096, (size_t)LUN_BLOCKS * BLOCK);
    if (!s.c || !s.lun)
        die("alloc");
    memset(s.lun, 0xa5, (size_t)LUN_BLOCKS * BLOCK);
    pthread_t ct, st;
    if (pthread_create(&ct, NULL, client_main, &cl))
        die("pthread_create");
    for (int i = 0; i < nconns; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), one = 1;
        if (fd < 0)
            die("accept");
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_init(&s.c[i], fd, v == V_EPOLL || v == V_EPOLL_COPY);
    }
    close(lfd);
    if (pthread_create(&st, NULL, server_main, &s))
        die("pthread_create");
    int tid;
    while (!(tid = __atomic_load_n(&s.tid, __ATOMIC_ACQUIRE)))
        sleep_s(0.001);
    sleep_s(o->warmup);
    struct snap a = {0}, b = {0};
    uint64_t copied0 = __atomic_load_n(&s.copied, __ATOMIC_RELAXED);
    a.t = now();
    a.ops = __atomic_load_n(&cl.ops, __ATOMIC_RELAXED);
    a.sys = __atomic_load_n(&s.syscalls, __ATOMIC_RELAXED);
    thread_cpu(tid, &a);
    sleep_s(o->secs);
    b.t = now();
    b.ops = __atomic_load_n(&cl.ops, __ATOMIC_RELAXED);
    b.sys = __atomic_load_n(&s.syscalls, __ATOMIC_RELAXED);
    thread_cpu(tid, &b);
    uint64_t copied1 = __atomic_load_n(&s.copied, __ATOMIC_RELAXED);
    __atomic_store_n(&cl.stop, 1, __ATOMIC_RELAXED);
    pthread_join(ct, NULL);
    pthread_join(st, NULL);
    for (int i = 0; i < nconns; i++) {
        free(s.c[i].slots);
        free(s.c[i].rxbuf);
    }
    free(s.c);
    free(s.lun);
    double ops = (double)(b.ops - a.ops);
    if (ops <= 0)
        ops = 1;
    struct result r = {
        .ops_s = ops / (b.t - a.t),
        .cpu_us = (double)(b.run_ns - a.run_ns) / 1e3 / ops,
        .busy = (double)(b.run_ns - a.run_ns) / 1e9 / (b.t - a.t),
        .sys_per_op = (double)(b.sys - a.sys) / ops,
        .sleeps_per_op = (double)(b.vcsw - a.vcsw) / ops,
        .copy_per_op = (double)(copied1 - copied0) / ops,
    };
    uint64_t ticks = (b.utick - a.utick) + (b.stick - a.stick);
    r.sys_share = ticks ? (double)(b.stick - a.stick) / (double)ticks : 0;
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_list(const char *arg, int *out, int max, int (*one)(const char *))
{
    char *dup = strdup(arg), *save = NULL;
    int n = 0;
    for (char *t = strtok_r(dup, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        out[n++] = one(t);
    free(dup);
    return n;
}

static int parse_int(const char *t)
{
    int v = atoi(t);
    if (v <= 0) {
        fprintf(stderr, "uring-ab: bad number '%s'\n", t);
        exit(2);
    }
    return v;
}

static int parse_rw(const char *t)
{
    if (!strcmp(t, "write"))
        return OP_WRITE;
    if (!strcmp(t, "read"))
        return OP_READ;
    fprintf(stderr, "uring-ab: bad --rw '%s'\n", t);
    exit(2);
}

static int parse_variant(const char *t)
{
    for (int v = 0; v < V_COUNT; v++)
        if (!strcmp(t, variant_name[v]))
            return v;
    fprintf(stderr, "uring-ab: bad variant '%s'\n", t);
    exit(2);
}

static void usage(void)
{
    fprintf(stderr, "usage: uring-ab [--variants epoll,uring,zc,epoll-copy] [--rw write,read]\n"
                    "                [--conns 1,8,64] [--qd TOTAL] [--seconds S] [--warmup S]\n"
                    "                [--rounds R] [--port P]"
                    " [--buf-size BYTES] [--bufs N] [--no-pin]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct opts o = {.conns = {1, 8, 64},
                     .nconn = 3,
                     .rws = {OP_WRITE, OP_READ},
                     .nrw = 2,
                     .variants = {V_EPOLL, V_URING},
                     .nvar = 2,
                     .qd = 32,
                     .rounds = 5,
                     .port = 47000,
                     .bufsize = 16384,
                     .nbufs = 256,
                     .secs = 3,
                     .warmup = 0.5};
    bool pin_threads = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-pin")) {
            pin_threads = false;
            continue;
        }
        if (!val)
            usage();
        i++;
        if (!strcmp(a, "--variants"))
            o.nvar = parse_list(val, o.variants, V_COUNT, parse_variant);
        else if (!strcmp(a, "--rw"))
            o.nrw = parse_list(val, o.rws, 2, parse_rw);
        else if (!strcmp(a, "--conns"))
            o.nconn = parse_list(val, o.conns, 8, parse_int);
        else if (!strcmp(a, "--qd"))
            o.qd = parse_int(val);
        else if (!strcmp(a, "--seconds"))
            o.secs = atof(val);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atof(val);
        else if (!strcmp(a, "--rounds"))
            o.rounds = parse_int(val);
        else if (!strcmp(a, "--port"))
            o.port = parse_int(val);
        else if (!strcmp(a, "--buf-size"))
            o.bufsize = parse_int(val);
        else if (!strcmp(a, "--bufs"))
            o.nbufs = parse_int(val);
        else
            usage();
    }
    if ((o.nbufs & (o.nbufs - 1)) || o.nbufs > 32768) {
        fprintf(stderr, "uring-ab: --bufs must be a power of two up to 32768\n");
        return 2;
    }
    cpu_set_t set;
    if (pin_threads && !sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) >= 2) {
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
            if (!CPU_ISSET(cpu, &set))
                continue;
            if (g_pin_server < 0)
                g_pin_server = cpu;
            else if (g_pin_client < 0)
                g_pin_client = cpu;
        }
    }
    fprintf(stderr, "uring-ab: server on CPU %d, client on CPU %d (-1: not pinned)\n", g_pin_server,
            g_pin_client);

    int ncells = o.nrw * o.nconn;
    struct result *res = calloc((size_t)(ncells * V_COUNT * o.rounds), sizeof(*res));
    if (!res)
        die("calloc");
#define RES(cell, v, round) res[((cell)*V_COUNT + (v)) * o.rounds + (round)]
    printf(
        "round,variant,rw,conns,qd_per_conn,ops_per_s,server_cpu_us_per_op,server_busy,sys_share,"
        "syscalls_per_op,sleeps_per_op,user_copy_bytes_per_op\n");
    for (int round = 0; round < o.rounds; round++) {
        for (int cell = 0; cell < ncells; cell++) {
            int rw = o.rws[cell / o.nconn], nconns = o.conns[cell % o.nconn];
            /* alternate the order round by round, so drifting load hits every variant alike */
            for (int k = 0; k < o.nvar; k++) {
                int v = o.variants[round % 2 ? o.nvar - 1 - k : k];
                if (v == V_ZC && rw == OP_WRITE)
                    continue; /* write responses carry no data: zc would be uring */
                struct result r = run_cell(&o, (enum variant)v, rw, nconns);
                RES(cell, v, round) = r;
                printf("%d,%s,%s,%d,%d,%.0f,%.3f,%.2f,%.2f,%.3f,%.4f,%.0f\n", round,
                       variant_name[v], rw == OP_WRITE ? "write" : "read", nconns,
                       o.qd / nconns > 0 ? o.qd / nconns : 1, r.ops_s, r.cpu_us, r.busy,
                       r.sys_share, r.sys_per_op, r.sleeps_per_op, r.copy_per_op);
                fflush(stdout);
            }
        }
    }

    /* Medians over rounds, and the median of the per-round ratios to the first variant. */
    printf("\n| rw | conns | variant | kIOPS | server CPU µs/op | ratio | syscalls/op | "
           "sleeps/op | sys share | IOPS ratio | server busy |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    double *tmp = malloc(sizeof(double) * (size_t)o.rounds);
    if (!tmp)
        die("malloc");
    for (int cell = 0; cell < ncells; cell++) {
        int rw = o.rws[cell / o.nconn], nconns = o.conns[cell % o.nconn];
        int base = o.variants[0];
        for (int k = 0; k < o.nvar; k++) {
            int v = o.variants[k];
            if (v == V_ZC && rw == OP_WRITE)
                continue;
            double m[8];
            for (int f = 0; f < 8; f++) {
                for (int rd = 0; rd < o.rounds; rd++) {
                    struct result *x = &RES(cell, v, rd), *y = &RES(cell, base, rd);
                    double vals[8] = {x->ops_s,
                                      x->cpu_us,
                                      x->sys_per_op,
                                      x->sleeps_per_op,
                                      x->sys_share,
                                      x->cpu_us / y->cpu_us,
                                      x->ops_s / y->ops_s,
                                      x->busy};
                    tmp[rd] = vals[f];
                }
                m[f] = median(tmp, o.rounds);
            }
            printf("| %s | %d | %s | %.1f | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f |\n",
                   rw == OP_WRITE ? "write" : "read", nconns, variant_name[v], m[0] / 1e3, m[1],
                   m[5], m[2], m[3], m[4], m[6], m[7]);
        }
    }
    free(tmp);
    free(res);
    return 0;
}
