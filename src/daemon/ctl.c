/* The control socket: a Unix stream socket (never TCP) that linerate-ctl talks to, one JSON-RPC
 * request per line and one response line each (docs/ctl-protocol.md). It runs on a thread and
 * event loop of its own, so a slow request or a misbehaving client never holds a reactor; what
 * a request changes reaches the reactors through their messages or the documented locks
 * (ctl_cmds.c). Requests are served one at a time, in arrival order.
 *
 * Only root or the daemon's own user may connect (SO_PEERCRED), on top of the socket's mode
 * 0600. Lines are capped at CTL_LINE_MAX, clients at CTL_CLIENTS_MAX (more, or any when the
 * daemon is out of descriptors, are answered busy), idle clients are closed after CTL_IDLE_MS:
 * bad input gets an error line, never a stuck or crashed daemon. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "util/list.h"

#define CTL_LINE_MAX (64u * 1024u) /* a request line, newline excluded */
#define CTL_CLIENTS_MAX 64u        /* connected at once; more are answered busy */
#define CTL_IDLE_MS 60000u         /* a client silent this long is closed */
#define CTL_OUT_MAX (64u << 20)    /* unread responses one client may leave queued */
#define CTL_REAP_MS 1000u /* removed LUNs still in use, draining targets: looked at this often */
#define CTL_BACKLOG 1024

/* JSON-RPC error codes the transport itself answers with (ctl_cmds.c has the others). */
#define CTL_ERR_DENIED (-32001)
#define CTL_ERR_BUSY (-32002)
#define CTL_ERR_TOO_LONG (-32003)

struct ctl_client {
    struct ctl_server *srv;
    int fd;
    struct reactor_fd h;
    struct reactor_timer idle;
    char in[CTL_LINE_MAX + 1];
    size_t inlen;
    char *out;
    size_t outlen, outoff, outcap;
    bool eof;     /* no more requests: close once the responses are out */
    bool writing; /* EPOLLOUT is armed */
    struct list_node node;
};

struct ctl_server {
    struct daemon *d;
    char path[TARGET_CTL_PATH_MAX];
    int fd;
    dev_t dev;
    ino_t ino;
    struct reactor *r;
    struct reactor_fd h;
    pthread_t thread;
    bool thread_started;
    struct list_node clients;
    unsigned nclients;
    struct reactor_timer reap;
    struct reactor_msg stop_msg;
    struct reactor_msg reload_msg; /* SIGHUP */
    struct log_limit refuse_log;
    struct metrics_server *metrics; /* --metrics: served on this thread too (metrics.c) */
    int spare_fd; /* /dev/null, given up to accept a client when out of descriptors */
};

/* --- clients --- */

static void client_close(struct ctl_client *c)
{
    struct ctl_server *s = c->srv;
    reactor_timer_stop(s->r, &c->idle);
    reactor_fd_del(s->r, &c->h);
    close(c->fd);
    list_del(&c->node);
    s->nclients--;
    free(c->out);
    free(c);
}

static void client_idle(void *arg)
{
    client_close(arg);
}

static void client_touch(struct ctl_client *c)
{
    reactor_timer_stop(c->srv->r, &c->idle);
    reactor_timer_start(c->srv->r, &c->idle, CTL_IDLE_MS, client_idle, c);
}

static void client_events(struct ctl_client *c)
{
    uint32_t ev = (c->eof ? 0 : EPOLLIN) | (c->outlen > c->outoff ? EPOLLOUT : 0);
    reactor_fd_mod(c->srv->r, &c->h, ev);
    c->writing = ev & EPOLLOUT;
}

/* Send what is queued; returns -1 if the client is gone (closed here). */
static int client_flush(struct ctl_client *c)
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
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        client_close(c);
        return -1;
    }
    if (c->outoff == c->outlen) {
        c->outoff = c->outlen = 0;
        if (c->eof) {
            client_close(c);
            return -1;
        }
    }
    if (c->writing != (c->outlen > c->outoff) || c->eof)
        client_events(c);
    return 0;
}

/* Queue one response line (takes `line`); false if the client must go (out of memory, or it
 * does not read its answers). */
static bool client_queue(struct ctl_client *c, char *line)
{
    if (!line)
        return false;
    size_t n = strlen(line);
    size_t want = c->outlen + n + 1;
    if (want > CTL_OUT_MAX) {
        free(line);
        return false;
    }
    if (want > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 4096;
        while (cap < want)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p) {
            free(line);
            return false;
        }
        c->out = p;
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, line, n);
    c->out[c->outlen + n] = '\n';
    c->outlen += n + 1;
    free(line);
    return true;
}

/* Serve every complete line in the input buffer. Returns -1 if the client was closed. */
static int client_serve_lines(struct ctl_client *c)
{
    size_t start = 0;
    for (;;) {
        char *nl = memchr(c->in + start, '\n', c->inlen - start);
        if (!nl)
            break;
        size_t len = (size_t)(nl - (c->in + start));
        char *line = c->in + start;
        start += len + 1;
        if (len && line[len - 1] == '\r')
            len--;
        if (len == 0)
            continue;
        if (!client_queue(c, ctl_request(c->srv->d, line, len))) {
            client_close(c);
            return -1;
        }
    }
    memmove(c->in, c->in + start, c->inlen - start);
    c->inlen -= start;
    if (c->inlen == CTL_LINE_MAX) {
        /* No newline within the cap: answer once and stop reading (the rest of the line
         * cannot be told from the next request). */
        char msg[96];
        snprintf(msg, sizeof(msg), "request line longer than %u bytes", CTL_LINE_MAX);
        c->eof = true;
        c->inlen = 0;
        if (!client_queue(c, ctl_error_line(CTL_ERR_TOO_LONG, msg))) {
            client_close(c);
            return -1;
        }
    }
    return 0;
}

static void client_on_event(void *arg, uint32_t events)
{
    struct ctl_client *c = arg;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        while (!c->eof) {
            ssize_t n = recv(c->fd, c->in + c->inlen, CTL_LINE_MAX - c->inlen, MSG_DONTWAIT);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n <= 0) {
                /* The client is done sending: a last line without its newline still counts. */
                c->eof = true;
                if (n < 0) {
                    client_close(c);
                    return;
                }
                if (c->inlen) {
                    c->in[c->inlen++] = '\n';
                    if (client_serve_lines(c) < 0)
                        return;
                }
                break;
            }
            c->inlen += (size_t)n;
            if (client_serve_lines(c) < 0)
                return;
        }
        client_touch(c);
    }
    client_flush(c);
}

/* --- accepting --- */

static bool peer_allowed(int fd, uid_t *uid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return false;
    *uid = cr.uid;
    return cr.uid == 0 || cr.uid == geteuid();
}

/* A client turned away gets one error line, best effort, and the door. */
static void refuse(struct ctl_server *s, int fd, int code, const char *msg)
{
    char *line = ctl_error_line(code, msg);
    if (line) {
        size_t n = strlen(line);
        struct iovec iov[2] = {{line, n}, {"\n", 1}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        (void)!sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        free(line);
    }
    unsigned sup;
    if (log_limit_allow(&s->refuse_log, reactor_now_ms(), &sup)) {
        if (sup)
            LOG_WARN("control socket: %u more clients refused (not logged)", sup);
        LOG_WARN("control socket: client refused: %s", msg);
    }
    close(fd);
}

static void on_accept(void *arg, uint32_t events)
{
    struct ctl_server *s = arg;
    (void)events;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && s->spare_fd >= 0) {
            /* Out of descriptors. The listening socket stays readable (level-triggered), so
             * leaving the client queued would spin this thread and leave it unanswered: give
             * up the spare to take it, tell it busy, and take the spare back. */
            close(s->spare_fd);
            fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0)
                refuse(s, fd, CTL_ERR_BUSY, "busy: out of file descriptors; try again");
            s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd >= 0)
                continue;
        }
        if (fd < 0)
            return; /* EAGAIN (or out of descriptors without a spare): the next wake-up */
        uid_t uid = (uid_t)-1;
        char msg[128];
        if (!peer_allowed(fd, &uid)) {
            snprintf(msg, sizeof(msg), "permission denied: uid %d is neither root nor uid %d",
                     (int)uid, (int)geteuid());
            refuse(s, fd, CTL_ERR_DENIED, msg);
            continue;
        }
        if (s->nclients >= CTL_CLIENTS_MAX) {
            snprintf(msg, sizeof(msg), "busy: %u clients connected already; try again",
                     CTL_CLIENTS_MAX);
            refuse(s, fd, CTL_ERR_BUSY, msg);
            continue;
        }
        struct ctl_client *c = calloc(1, sizeof(*c));
        if (!c) {
            refuse(s, fd, CTL_ERR_BUSY, "out of memory");
            continue;
        }
        c->srv = s;
        c->fd = fd;
        if (reactor_fd_add(s->r, &c->h, fd, EPOLLIN, client_on_event, c) < 0) {
            free(c);
            close(fd);
            continue;
        }
        list_add_tail(&s->clients, &c->node);
        s->nclients++;
        client_touch(c);
    }
}

static void reap_tick(void *arg)
{
    struct ctl_server *s = arg;
    ctl_reap_zombies(s->d, false);
    ctl_reap_drained(s->d);
    if (s->spare_fd < 0) /* lost to another thread's open between close and reopen */
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    reactor_timer_start(s->r, &s->reap, CTL_REAP_MS, reap_tick, s);
}

/* --- the socket file --- */

static int mkdir_parent(const char *path)
{
    char dir[TARGET_CTL_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(dir, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* A socket file left by a daemon that died is removed; one another daemon answers on, or a
 * file that is no socket, is left alone (returns -1 with the reason). */
static int clear_stale(const char *path, char *why, size_t whylen)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : (snprintf(why, whylen, "%s", strerror(errno)), -1);
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, whylen, "exists and is not a socket");
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    close(fd);
    if (rc == 0) {
        snprintf(why, whylen, "another linerate-target is serving it");
        return -1;
    }
    if (e != ECONNREFUSED) {
        snprintf(why, whylen, "%s", strerror(e));
        return -1;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        snprintf(why, whylen, "cannot remove the stale socket: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int ctl_bind(struct ctl_server *s, char *why, size_t whylen)
{
    if (mkdir_parent(s->path) < 0) {
        snprintf(why, whylen, "cannot create its directory: %s", strerror(errno));
        return -1;
    }
    if (clear_stale(s->path, why, whylen) < 0)
        return -1;
    s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", s->path);
    /* Created 0600 from the start: no other thread runs yet, so the umask is ours to change
     * for the moment of bind(); the chmod makes sure of it. */
    mode_t old = umask(0177);
    int rc = bind(s->fd, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    umask(old);
    if (rc < 0) {
        snprintf(why, whylen, "%s", strerror(e));
        return -1;
    }
    struct stat st;
    if (chmod(s->path, 0600) < 0 || stat(s->path, &st) < 0 || listen(s->fd, CTL_BACKLOG) < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        unlink(s->path);
        return -1;
    }
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return 0;
}

static void ctl_free(struct ctl_server *s)
{
    metrics_close(s->metrics);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    if (s->fd >= 0)
        close(s->fd);
    if (s->r)
        reactor_destroy(s->r);
    free(s);
}

int ctl_open(struct daemon *d)
{
    d->ctl = NULL;
    const struct target_config *cfg = &d->cfg;
    /* The metrics endpoint runs on this thread too (it reads what requests change), so the
     * thread runs for it even without a socket. */
    if (!cfg->ctl_socket[0] && !cfg->metrics_on)
        return 0;
    struct ctl_server *s = calloc(1, sizeof(*s));
    if (!s) {
        fprintf(stderr, "linerate-target: out of memory\n");
        return -1;
    }
    s->d = d;
    s->fd = -1;
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    snprintf(s->path, sizeof(s->path), "%s", cfg->ctl_socket);
    list_init(&s->clients);
    char why[256];
    if (cfg->ctl_socket[0] && ctl_bind(s, why, sizeof(why)) < 0) {
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        if (!cfg->ctl_socket_set) {
            LOG_WARN("control socket %s: %s; running without one (give --ctl-socket PATH)",
                     cfg->ctl_socket, why);
        } else {
            LOG_ERR("control socket %s: %s", cfg->ctl_socket, why);
            fprintf(stderr, "linerate-target: control socket %s: %s\n", cfg->ctl_socket, why);
            ctl_free(s);
            return -1;
        }
        if (!cfg->metrics_on) {
            ctl_free(s);
            return 0;
        }
    }
    if (s->fd < 0)
        s->path[0] = '\0'; /* no socket: the thread serves the metrics only */
    /* A reactor id past the data reactors', for log lines */
    s->r = reactor_create(TARGET_THREADS_MAX);
    if (!s->r || (s->fd >= 0 && reactor_fd_add(s->r, &s->h, s->fd, EPOLLIN, on_accept, s) < 0)) {
        if (s->path[0])
            unlink(s->path);
        ctl_free(s);
        fprintf(stderr, "linerate-target: control socket: cannot start its event loop\n");
        return -1;
    }
    if (cfg->metrics_on && !(s->metrics = metrics_open(d, s->r))) {
        if (s->path[0])
            unlink(s->path);
        ctl_free(s);
        return -1;
    }
    reactor_timer_start(s->r, &s->reap, CTL_REAP_MS, reap_tick, s);
    d->ctl = s;
    return 0;
}

static void *ctl_thread(void *arg)
{
    struct ctl_server *s = arg;
    reactor_run(s->r);
    return NULL;
}

int ctl_start(struct daemon *d)
{
    struct ctl_server *s = d->ctl;
    if (!s)
        return 0;
    int rc = pthread_create(&s->thread, NULL, ctl_thread, s);
    if (rc != 0) {
        LOG_ERR("cannot start the control thread: %s", strerror(rc));
        return -1;
    }
    s->thread_started = true;
    if (s->path[0])
        LOG_INFO("control socket %s (mode 0600; linerate-ctl --socket %s)", s->path, s->path);
    return 0;
}

static void reload_run(struct daemon *d)
{
    char err[2048];
    json_t *r = ctl_reload(d, false, err, sizeof(err));
    if (r)
        json_decref(r);
    else
        LOG_ERR("reload: %s; nothing changed", err);
}

static void reload_on_thread(void *arg)
{
    struct ctl_server *s = arg;
    reload_run(s->d);
}

void ctl_reload_signal(struct daemon *d)
{
    LOG_INFO("SIGHUP: reloading %s", d->cfg.config_path[0] ? d->cfg.config_path : "(no --config)");
    /* On the control thread, in line with the requests that change the same state. */
    if (d->ctl && d->ctl->thread_started)
        reactor_post(d->ctl->r, &d->ctl->reload_msg, reload_on_thread, d->ctl);
    else
        reload_run(d);
}

static void stop_on_thread(void *arg)
{
    struct ctl_server *s = arg;
    while (!list_empty(&s->clients))
        client_close(list_entry(s->clients.next, struct ctl_client, node));
    reactor_timer_stop(s->r, &s->reap);
    if (s->fd >= 0)
        reactor_fd_del(s->r, &s->h);
    metrics_close(s->metrics);
    s->metrics = NULL;
    reactor_stop(s->r);
}

void ctl_stop(struct daemon *d)
{
    struct ctl_server *s = d->ctl;
    if (!s)
        return;
    atomic_store(&d->ctl_stopping, true);
    if (s->thread_started) {
        reactor_post(s->r, &s->stop_msg, stop_on_thread, s);
        pthread_join(s->thread, NULL);
    } else {
        stop_on_thread(s);
    }
    /* Only our own file: another daemon may have replaced it meanwhile. */
    struct stat st;
    if (s->path[0] && stat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
        unlink(s->path);
    ctl_free(s);
    d->ctl = NULL;
}
