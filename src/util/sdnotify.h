/* The service manager's notification protocol (sd_notify(3)): one datagram of "KEY=VALUE"
 * lines to the AF_UNIX socket named by $NOTIFY_SOCKET. Written here rather than linking
 * libsystemd: the protocol is a documented stable interface of a few lines, and the daemon
 * keeps running on systems without libsystemd. */
#ifndef LR_UTIL_SDNOTIFY_H
#define LR_UTIL_SDNOTIFY_H

/* Send the state (e.g. "READY=1\nSTATUS=serving"), formatted, to $NOTIFY_SOCKET. Returns 1
 * when sent, 0 when there is no NOTIFY_SOCKET (not run by a service manager), or -errno. */
int sd_notifyf_lr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
