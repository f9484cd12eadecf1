/* The adversarial target of the initiator's tests (fake_target.h): listener, PDU I/O with
 * deadlines, a plain login, and the few answers scripts build on. */
#include "fake_target.h"

#include "util/crc32c.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *ft_thread(void *arg)
{
    struct ft *f = arg;
    f->script(f);
    return NULL;
}

int ft_start(struct ft *f, ft_script_fn script, void *arg)
{
    memset(f, 0, sizeof(*f));
    f->script = script;
    f->arg = arg;
    f->next_tsih = 0x100;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f->lfd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(f->lfd, 8) < 0 ||
        getsockname(f->lfd, (struct sockaddr *)&a, &al) < 0) {
        close(f->lfd);
        return -1;
    }
    f->port = ntohs(a.sin_port);
    return pthread_create(&f->th, NULL, ft_thread, f) == 0 ? 0 : -1;
}

void ft_stop(struct ft *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

void ft_fail(struct ft *f, const char *why)
{
    if (!f->failed)
        snprintf(f->why, sizeof(f->why), "%s", why);
    f->failed = true;
}

int ft_accept(struct ft *f, int ms)
{
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0 || !(p.revents & POLLIN))
        return -1;
    int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

static int recv_exact(int fd, uint8_t *b, uint32_t n, uint64_t deadline)
{
    uint32_t got = 0;
    while (got < n) {
        uint64_t t = now_ms();
        if (t >= deadline)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - t)) <= 0)
            return -1;
        ssize_t r = recv(fd, b + got, n - got, 0);
        if (r <= 0)
            return -1;
        got += (uint32_t)r;
    }
    return 0;
}

int ft_recv_c(struct ft_conn *c, struct ft_pdu *p, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    uint8_t dg[4];
    if (recv_exact(c->fd, p->h, ISCSI_BHS_LEN, deadline) < 0)
        return -1;
    uint32_t ahs = p->h[BHS_TOTAL_AHS_LEN] * 4u;
    p->dlen = get_be24(p->h + BHS_DATA_SEG_LEN);
    uint32_t padded = (p->dlen + 3) & ~3u;
    uint8_t skip[1024];
    if (ahs > sizeof(skip) || padded > sizeof(p->data))
        return -1;
    if (ahs && recv_exact(c->fd, skip, ahs, deadline) < 0)
        return -1;
    if (c->hd && recv_exact(c->fd, dg, 4, deadline) < 0)
        return -1;
    if (padded && recv_exact(c->fd, p->data, padded, deadline) < 0)
        return -1;
    if (padded && c->dd && recv_exact(c->fd, dg, 4, deadline) < 0)
        return -1;
    return 0;
}

/* A connection without digests (any during login): ft_recv_c on a bare one. */
int ft_recv(int fd, struct ft_pdu *p, int ms)
{
    struct ft_conn c = {.fd = fd};
    return ft_recv_c(&c, p, ms);
}

int ft_send_c(struct ft_conn *c, const uint8_t *h, const void *data, uint32_t dlen)
{
    uint8_t buf[ISCSI_BHS_LEN + 4 + 65536 + 8];
    uint32_t n = ISCSI_BHS_LEN, padded = (dlen + 3) & ~3u;
    if (padded > 65536)
        return -1;
    memcpy(buf, h, ISCSI_BHS_LEN);
    put_be24(buf + BHS_DATA_SEG_LEN, dlen);
    if (c->hd) {
        put_le32(buf + n, crc32c(buf, ISCSI_BHS_LEN) ^ (c->bad_hd ? 1u : 0u));
        n += 4;
    }
    memset(buf + n, 0, padded);
    if (dlen)
        memcpy(buf + n, data, dlen);
    if (padded && c->dd) {
        put_le32(buf + n + padded, crc32c(buf + n, padded) ^ (c->bad_dd ? 1u : 0u));
        n += 4;
    }
    n += padded;
    c->bad_hd = c->bad_dd = false;
    return send(c->fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

int ft_send(int fd, const uint8_t *h, const void *data, uint32_t dlen)
{
    uint8_t hdr[ISCSI_BHS_LEN];
    memcpy(hdr, h, ISCSI_BHS_LEN);
    put_be24(hdr + BHS_DATA_SEG_LEN, dlen);
    static const uint8_t zero[4];
    if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != (ssize_t)sizeof(hdr))
        return -1;
    if (dlen && send(fd, data, dlen, MSG_NOSIGNAL) != (ssize_t)dlen)
        return -1;
    uint32_t pad = (4 - (dlen & 3)) & 3;
    if (pad && send(fd, zero, pad, MSG_NOSIGNAL) != (ssize_t)pad)
        return -1;
    return 0;
}

int ft_login(struct ft *f, int fd, struct ft_conn *c, const char *op_keys, uint32_t op_len,
             uint32_t window)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->statsn = 1;
    static _Thread_local struct ft_pdu
        req; /* one per script thread: two fake targets run at once */
    static const char sec[] = "AuthMethod=None";
    for (int round = 0; round < 8; round++) {
        if (ft_recv(fd, &req, 5000) < 0 || (req.h[0] & 0x3f) != ISCSI_OP_LOGIN_REQ)
            return -1;
        if (round == 0) {
            memcpy(c->isid, req.h + BHS_ISID, 6);
            c->tsih = c->asked_tsih = get_be16(req.h + BHS_TSIH);
            if (!c->tsih)
                c->tsih = f->next_tsih++;
            c->cid = get_be16(req.h + BHS_CID);
            c->login_cmdsn = get_be32(req.h + BHS_CMDSN);
            c->expcmdsn = c->login_cmdsn;
            c->maxcmdsn = c->login_cmdsn + window - 1;
        }
        unsigned csg = ISCSI_LOGIN_CSG(req.h[1]);
        uint8_t h[ISCSI_BHS_LEN] = {0};
        h[0] = ISCSI_OP_LOGIN_RSP;
        bool ffp = csg == ISCSI_STAGE_OPERATIONAL;
        h[1] = (uint8_t)(ISCSI_LOGIN_TRANSIT | csg << 2 |
                         (ffp ? ISCSI_STAGE_FULL_FEATURE : ISCSI_STAGE_OPERATIONAL));
        memcpy(h + BHS_ISID, c->isid, 6);
        put_be16(h + BHS_TSIH, ffp ? c->tsih : get_be16(req.h + BHS_TSIH));
        memcpy(h + BHS_ITT, req.h + BHS_ITT, 4);
        put_be32(h + BHS_STATSN, c->statsn);
        put_be32(h + BHS_EXPCMDSN, c->expcmdsn);
        put_be32(h + BHS_MAXCMDSN, c->maxcmdsn);
        if (ffp) {
            /* a connection added to a session settles connection keys only (§13.1) */
            static const char conn_keys[] = "HeaderDigest=None\0DataDigest=None\0"
                                            "MaxRecvDataSegmentLength=65536";
            if (c->asked_tsih) {
                op_keys = conn_keys;
                op_len = sizeof(conn_keys);
            }
            if (ft_send(fd, h, op_keys, op_len) < 0)
                return -1;
            c->statsn++;
            atomic_fetch_add(&f->logins, 1);
            return 0;
        }
        if (ft_send(fd, h, sec, sizeof(sec)) < 0)
            return -1;
    }
    return -1;
}

int ft_login_steps(struct ft *f, int fd, const struct ft_step *steps, int n)
{
    static _Thread_local struct ft_pdu
        req; /* one per script thread: two fake targets run at once */
    uint32_t statsn = 1;
    for (int k = 0; k < 64; k++) {
        if (ft_recv(fd, &req, 5000) < 0)
            return k;
        const struct ft_step *st = &steps[k < n ? k : n - 1];
        uint8_t h[ISCSI_BHS_LEN] = {0};
        h[0] = ISCSI_OP_LOGIN_RSP;
        h[1] = st->flags;
        memcpy(h + BHS_ISID, req.h + BHS_ISID, 6);
        bool ffp = (st->flags & ISCSI_LOGIN_TRANSIT) &&
                   ISCSI_LOGIN_NSG(st->flags) == ISCSI_STAGE_FULL_FEATURE;
        put_be16(h + BHS_TSIH, ffp ? f->next_tsih++ : 0);
        memcpy(h + BHS_ITT, req.h + BHS_ITT, 4);
        put_be32(h + BHS_STATSN, statsn++);
        put_be32(h + BHS_EXPCMDSN, get_be32(req.h + BHS_CMDSN));
        put_be32(h + BHS_MAXCMDSN, get_be32(req.h + BHS_CMDSN) + 31);
        if (ft_send(fd, h, st->text, st->len) < 0)
            return k + 1;
        if (ffp) {
            atomic_fetch_add(&f->logins, 1);
            return k + 1;
        }
    }
    return 64;
}

void ft_rsp(struct ft_conn *c, uint8_t *h, enum iscsi_opcode op, uint8_t flags, uint32_t itt)
{
    memset(h, 0, ISCSI_BHS_LEN);
    h[0] = (uint8_t)op;
    h[1] = flags;
    put_be32(h + BHS_ITT, itt);
    put_be32(h + BHS_STATSN, c->statsn++);
    put_be32(h + BHS_EXPCMDSN, c->expcmdsn);
    put_be32(h + BHS_MAXCMDSN, c->maxcmdsn);
}

int ft_read_done(struct ft_conn *c, const struct ft_pdu *cmd, uint8_t fill)
{
    static _Thread_local uint8_t data[65536]; /* one per script thread */
    uint32_t len = get_be32(cmd->h + BHS_EDTL);
    if (len > sizeof(data))
        return -1;
    uint32_t sn = get_be32(cmd->h + BHS_CMDSN);
    if (!(cmd->h[0] & ISCSI_BHS_IMMEDIATE) && sn_le(c->expcmdsn, sn))
        c->expcmdsn = sn + 1;
    memset(data, fill, len);
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(c, h, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS,
           get_be32(cmd->h + BHS_ITT));
    put_be32(h + BHS_TTT, ISCSI_RSVD_TAG);
    return ft_send_c(c, h, data, len);
}

int ft_async(struct ft_conn *c, uint8_t ev, uint16_t p3)
{
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(c, h, ISCSI_OP_ASYNC_MSG, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG);
    h[BHS_ASYNC_EVENT] = ev;
    put_be16(h + BHS_ASYNC_PARAM3, p3);
    return ft_send_c(c, h, NULL, 0);
}

int ft_logout_rsp(struct ft_conn *c, const struct ft_pdu *req)
{
    uint8_t h[ISCSI_BHS_LEN];
    ft_rsp(c, h, ISCSI_OP_LOGOUT_RSP, ISCSI_FLAG_FINAL, get_be32(req->h + BHS_ITT));
    return ft_send_c(c, h, NULL, 0);
}

bool ft_run_until(struct reactor *r, bool (*done)(void *arg), void *arg, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    while (!done(arg)) {
        if (now_ms() >= deadline)
            return false;
        if (reactor_poll(r) == 0)
            usleep(500);
    }
    return true;
}
