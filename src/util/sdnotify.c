/* sd_notify without libsystemd: the socket is a path ("/run/systemd/notify") or, starting with
 * '@', a name in the abstract namespace (sd_notify(3), "NOTIFY_SOCKET"). */
#include "util/sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sd_notifyf_lr(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path))
        return -EINVAL;
    memcpy(sa.sun_path, path, plen);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract: the name is the bytes after the NUL, no terminator */
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);

    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t w = sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (const struct sockaddr *)&sa, salen);
    int e = errno;
    close(fd);
    return w == n ? 1 : -(w < 0 ? e : EMSGSIZE);
}
