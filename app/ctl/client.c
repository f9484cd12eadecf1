/* One round trip to the daemon's control socket: connect, send a JSON-RPC request line, read
 * the response line (bounded in time and size), parse it. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

#define RESPONSE_MAX (64u << 20)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int ctl_call(const char *path, const char *method, json_t *params, unsigned timeout_s,
             json_t **response, char *err, size_t errlen)
{
    *response = NULL;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path)) {
        snprintf(err, errlen, "socket path too long: %s", path);
        return -1;
    }
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        /* Only a missing or dead socket means no daemon; a refused permission is the
         * user's (the socket is mode 0600: root or the daemon's user). */
        int e = errno;
        if (e == EACCES || e == EPERM)
            snprintf(err, errlen,
                     "cannot connect to %s: %s (the control socket is for root and the "
                     "daemon's user only: run linerate-ctl as one of them)",
                     path, strerror(e));
        else
            snprintf(err, errlen,
                     "cannot connect to %s: %s (is linerate-target running? see "
                     "--socket and LINERATE_CTL_SOCKET)",
                     path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    json_t *req = json_pack("{s:s, s:i, s:s, s:O}", "jsonrpc", "2.0", "id", 1, "method", method,
                            "params", params);
    char *line = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!line) {
        snprintf(err, errlen, "out of memory");
        close(fd);
        return -1;
    }
    size_t n = strlen(line);
    int rc = send_all(fd, line, n) < 0 || send_all(fd, "\n", 1) < 0 ? -1 : 0;
    free(line);
    /* A daemon that turns the client away (permission, busy) answers at once and closes: the
     * send may fail, its answer is still there to read. */
    if (rc < 0 && errno != EPIPE && errno != ECONNRESET) {
        snprintf(err, errlen, "cannot send to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    long long deadline = now_ms() + (long long)timeout_s * 1000;
    for (;;) {
        if (len && memchr(buf, '\n', len))
            break;
        long long left = deadline - now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = left > 0 ? poll(&pfd, 1, left > 60000 ? 60000 : (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            if (left > 0 && pr == 0)
                continue;
            snprintf(err, errlen, "no answer from %s within %u s", path, timeout_s);
            goto fail;
        }
        if (len + 4096 + 1 > cap) {
            if (cap >= RESPONSE_MAX) {
                snprintf(err, errlen, "answer from %s too long", path);
                goto fail;
            }
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                snprintf(err, errlen, "out of memory");
                goto fail;
            }
            buf = nb;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (len) /* the daemon closed after a last line without newline */
                break;
            snprintf(err, errlen, "%s closed the connection without answering", path);
            goto fail;
        }
        len += (size_t)r;
    }
    close(fd);
    char *nl = memchr(buf, '\n', len);
    size_t linelen = nl ? (size_t)(nl - buf) : len;
    json_error_t je;
    *response = json_loadb(buf, linelen, 0, &je);
    free(buf);
    if (!json_is_object(*response)) {
        json_decref(*response);
        *response = NULL;
        snprintf(err, errlen, "not a JSON-RPC answer from %s: %s", path, je.text);
        return -1;
    }
    return 0;
fail:
    free(buf);
    close(fd);
    return -1;
}
