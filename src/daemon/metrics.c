/* The Prometheus endpoint (--metrics ADDR:PORT): a minimal HTTP/1.x server answering
 * `GET /metrics` with the text exposition format (stats.c) and nothing else. It lives on the
 * control thread's event loop (ctl.c), never on a reactor, and reads what the `stats` method
 * reads, the same way.
 *
 * An endpoint on TCP is reachable by whoever can reach the address, so it is hardened against
 * what such peers send: a request head is at most METRICS_REQ_MAX bytes (larger: 431 and
 * closed), must arrive whole within METRICS_REQ_MS of the connect (a slow sender is closed:
 * slowloris) and the answer be taken within METRICS_SEND_MS, at most METRICS_PER_ADDR_MAX
 * connections at once from one source address and METRICS_CLIENTS_MAX in all (more are
 * answered 503 and closed at once), one request per connection (Connection: close). So a
 * host that opens connections and sends nothing holds a few slots for a second at a time,
 * and a scraper from another address is always let in. Anything but GET gets 405, any path
 * but /metrics 404, a request line that is not HTTP 400. Bodies are never read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "util/list.h"

#define METRICS_REQ_MAX 4096u   /* request line and headers */
#define METRICS_CLIENTS_MAX 64u /* connected at once */
#define METRICS_PER_ADDR_MAX 4u /* ... from one source address */
#define METRICS_REQ_MS 1000u    /* to send the whole request head */
#define METRICS_SEND_MS 10000u  /* to take the whole answer (a scraper's usual timeout) */
#define METRICS_BACKLOG 64

struct metrics_client {
    struct metrics_server *srv;
    int fd;
    struct sockaddr_storage peer; /* the source address (port cleared) */
    struct reactor_fd h;
    struct reactor_timer deadline;
    char in[METRICS_REQ_MAX];
    size_t inlen;
    char *out; /* the response once the request is read */
    size_t outlen, outoff;
    struct list_node node; /* srv->clients */
};

struct metrics_server {
    struct daemon *d;
    struct reactor *r;
    int fd;
    struct reactor_fd h;
    struct list_node clients;
    unsigned nclients;
    /* one limiter a warning: a flood of either must not silence the other */
    struct log_limit busy_log;  /* clients refused with 503 */
    struct log_limit pause_log; /* accepting paused, out of descriptors */
    /* out of descriptors (or memory): the pending connection stays in the backlog and the
     * socket readable, so accepting stops for ACCEPT_PAUSE_MS instead of spinning */
    struct reactor_timer accept_pause;
    bool accept_paused;
};

#define METRICS_ACCEPT_PAUSE_MS 200

static void client_close(struct metrics_client *c)
{
    struct metrics_server *s = c->srv;
    reactor_timer_stop(s->r, &c->deadline);
    reactor_fd_del(s->r, &c->h);
    close(c->fd);
    list_del(&c->node);
    s->nclients--;
    free(c->out);
    free(c);
}

static void client_timeout(void *arg)
{
    client_close(arg);
}

/* Send what is left; the connection closes once all is out (or on any error). */
static void client_flush(struct metrics_client *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n =
            send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->outoff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            reactor_fd_mod(c->srv->r, &c->h, EPOLLOUT);
            return;
        }
        break;
    }
    client_close(c);
}

static void respond(struct metrics_client *c, const char *status, const char *type,
                    const char *body, size_t bodylen)
{
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, type, bodylen);
    c->out = malloc((size_t)hl + bodylen);
    if (!c->out) {
        client_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)hl);
    if (bodylen)
        memcpy(c->out + hl, body, bodylen);
    c->outlen = (size_t)hl + bodylen;
    c->outoff = 0;
    /* no more reading: the answer goes out, then the door closes */
    reactor_timer_stop(c->srv->r, &c->deadline);
    reactor_timer_start(c->srv->r, &c->deadline, METRICS_SEND_MS, client_timeout, c);
    reactor_fd_mod(c->srv->r, &c->h, EPOLLOUT);
    client_flush(c);
}

static void respond_error(struct metrics_client *c, const char *status)
{
    char body[128];
    int n = snprintf(body, sizeof(body), "%s\n", status);
    respond(c, status, "text/plain; charset=utf-8", body, (size_t)n);
}

/* A complete request head is in c->in (NUL-terminated): answer it. */
static void serve(struct metrics_client *c)
{
    char *eol = strpbrk(c->in, "\r\n");
    if (eol)
        *eol = '\0';
    /* request-line = method SP request-target SP HTTP-version (RFC 9112 §3) */
    char *method = c->in, *sp1 = strchr(method, ' ');
    char *target = sp1 ? sp1 + 1 : NULL, *sp2 = target ? strchr(target, ' ') : NULL;
    if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || strchr(sp2 + 1, ' ')) {
        respond_error(c, "400 Bad Request");
        return;
    }
    *sp1 = *sp2 = '\0';
    if (strcmp(method, "GET") != 0) {
        respond_error(c, "405 Method Not Allowed");
        return;
    }
    size_t plen = strcspn(target, "?");
    if (plen != strlen("/metrics") || strncmp(target, "/metrics", plen) != 0) {
        respond_error(c, "404 Not Found");
        return;
    }
    if (!IOSTATS_ENABLED) {
        /* 501: the server lacks what the request needs (RFC 9110 §15.6.2); the body says what */
        static const char body[] = STATS_NONE_MSG "\n";
        respond(c, "501 Not Implemented", "text/plain; charset=utf-8", body, sizeof(body) - 1);
        return;
    }
    size_t len = 0;
    char *text = stats_prometheus(c->srv->d, &len);
    if (!text) {
        respond_error(c, "500 Internal Server Error");
        return;
    }
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

static void client_on_event(void *arg, uint32_t events)
{
    struct metrics_client *c = arg;
    if (c->out) {
        if (events & (EPOLLERR | EPOLLHUP))
            client_close(c);
        else
            client_flush(c);
        return;
    }
    for (;;) {
        size_t room = sizeof(c->in) - 1 - c->inlen;
        if (room == 0) {
            respond_error(c, "431 Request Header Fields Too Large");
            return;
        }
        ssize_t n = recv(c->fd, c->in + c->inlen, room, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* closed or reset before a whole request: nothing to answer */
            client_close(c);
            return;
        }
        size_t from = c->inlen >= 3 ? c->inlen - 3 : 0;
        c->inlen += (size_t)n;
        c->in[c->inlen] = '\0';
        /* the head ends with an empty line: CRLF CRLF, or bare LFs (RFC 9112 §2.2). Looked
         * for in the bytes, not as a string: a NUL byte before it must not hide the end of
         * the head (that head is answered 400 below, however the bytes were segmented). */
        const char *tail = c->in + from;
        size_t tl = c->inlen - from;
        if (memmem(tail, tl, "\r\n\r\n", 4) || memmem(tail, tl, "\n\n", 2)) {
            if (memchr(c->in, '\0', c->inlen)) { /* a NUL byte in the head */
                respond_error(c, "400 Bad Request");
                return;
            }
            serve(c);
            return;
        }
    }
}

/* The source address of a peer, without its port (nor IPv6 flow label): what the per-address
 * bound counts. */
static void peer_key(struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        ((struct sockaddr_in *)a)->sin_port = 0;
    else if (a->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)a)->sin6_port = ((struct sockaddr_in6 *)a)->sin6_flowinfo = 0;
}

/* Whether peer has METRICS_PER_ADDR_MAX clients connected already (the list is short: a walk
 * at accept only). */
static bool addr_full(const struct metrics_server *s, const struct sockaddr_storage *peer)
{
    unsigned same = 0;
    for (const struct list_node *ln = s->clients.next; ln != &s->clients; ln = ln->next) {
        const struct metrics_client *c = list_entry(ln, struct metrics_client, node);
        same += memcmp(&c->peer, peer, sizeof(*peer)) == 0;
    }
    return same >= METRICS_PER_ADDR_MAX;
}

static void accept_resume(void *arg)
{
    struct metrics_server *s = arg;
    s->accept_paused = false;
    reactor_fd_mod(s->r, &s->h, EPOLLIN);
}

static void on_accept(void *arg, uint32_t events)
{
    struct metrics_server *s = arg;
    (void)events;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        memset(&peer, 0, sizeof(peer));
        int fd = accept4(s->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            unsigned sup;
            if (log_limit_allow(&s->pause_log, reactor_now_ms(), &sup))
                LOG_WARN("metrics: accept: %s; pausing accepts for %d ms (%u more like it "
                         "not logged)",
                         strerror(errno), METRICS_ACCEPT_PAUSE_MS, sup);
            s->accept_paused = true;
            reactor_fd_mod(s->r, &s->h, 0);
            reactor_timer_start(s->r, &s->accept_pause, METRICS_ACCEPT_PAUSE_MS, accept_resume, s);
            return;
        }
        if (fd < 0)
            return;
        peer_key(&peer);
        bool all = s->nclients >= METRICS_CLIENTS_MAX;
        if (all || addr_full(s, &peer)) {
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                       "Connection: close\r\n\r\n";
            (void)!send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(fd);
            unsigned sup;
            if (log_limit_allow(&s->busy_log, reactor_now_ms(), &sup))
                LOG_WARN("metrics: %u clients connected already%s: one more refused (503; %u "
                         "more refusals not logged)",
                         all ? METRICS_CLIENTS_MAX : METRICS_PER_ADDR_MAX,
                         all ? "" : " from its address", sup);
            continue;
        }
        struct metrics_client *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->srv = s;
        c->fd = fd;
        c->peer = peer;
        if (reactor_fd_add(s->r, &c->h, fd, EPOLLIN, client_on_event, c) < 0) {
            free(c);
            close(fd);
            continue;
        }
        list_add_tail(&s->clients, &c->node);
        s->nclients++;
        reactor_timer_start(s->r, &c->deadline, METRICS_REQ_MS, client_timeout, c);
    }
}

struct metrics_server *metrics_open(struct daemon *d, struct reactor *r)
{
    const struct target_portal *p = &d->cfg.metrics;
    struct metrics_server *s = calloc(1, sizeof(*s));
    if (!s) {
        fprintf(stderr, "linerate-target: out of memory\n");
        return NULL;
    }
    s->d = d;
    s->r = r;
    list_init(&s->clients);
    s->fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->fd >= 0)
        setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (s->fd < 0 || bind(s->fd, (const struct sockaddr *)&p->addr, p->addrlen) < 0 ||
        listen(s->fd, METRICS_BACKLOG) < 0 ||
        reactor_fd_add(r, &s->h, s->fd, EPOLLIN, on_accept, s) < 0) {
        int e = errno;
        LOG_ERR("metrics: cannot listen on %s: %s", p->text, strerror(e));
        fprintf(stderr, "linerate-target: metrics: cannot listen on %s: %s\n", p->text,
                strerror(e));
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        return NULL;
    }
    if (IOSTATS_ENABLED)
        LOG_INFO("metrics at http://%s/metrics", p->text);
    else
        LOG_WARN("metrics at http://%s/metrics: %s; it answers 501", p->text, STATS_NONE_MSG);
    return s;
}

void metrics_close(struct metrics_server *s)
{
    if (!s)
        return;
    while (!list_empty(&s->clients))
        client_close(list_entry(s->clients.next, struct metrics_client, node));
    if (s->accept_paused)
        reactor_timer_stop(s->r, &s->accept_pause);
    reactor_fd_del(s->r, &s->h);
    close(s->fd);
    free(s);
}
