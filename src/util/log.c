/* Logging to stderr (or the journal's stream, or syslog) with a level threshold. One write(2)
 * per line so lines from reactor threads never interleave. */
#include "util/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* Changed at run time by linerate-ctl's set log-level while every thread logs: relaxed
 * atomic, a plain load on the hot path. */
static _Atomic enum log_level log_threshold = LOG_LVL_INFO;

void log_set_level(enum log_level level)
{
    atomic_store_explicit(&log_threshold, level, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
    return atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

/* Set once by log_set_dest before the reactor threads start, read-only after. */
static enum log_dest log_dest = LOG_DEST_STDERR;
static bool log_journal; /* stderr is journald's stream: "<N>" prefixes, no time stamp */

/* systemd sets JOURNAL_STREAM=DEV:INODE of the stream it connected to stderr; a child whose
 * stderr was redirected elsewhere inherits the variable but not the stream (systemd.exec(5)). */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_dest(enum log_dest dest, const char *ident)
{
    log_dest = dest;
    log_journal = dest == LOG_DEST_STDERR && stderr_is_journal();
    if (dest == LOG_DEST_SYSLOG)
        openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

int log_dest_parse(const char *name)
{
    if (strcmp(name, "stderr") == 0)
        return LOG_DEST_STDERR;
    if (strcmp(name, "syslog") == 0)
        return LOG_DEST_SYSLOG;
    return -1;
}

const char *log_quote(char *buf, size_t len, const char *s)
{
    assert(len >= 3);
    bool plain = s[0] != '\0';
    for (const char *p = s; *p && plain; p++)
        plain = (unsigned char)*p > ' ' && *p != '"' && *p != '\\' && *p != 0x7f;
    if (plain) {
        snprintf(buf, len, "%s", s);
        return buf;
    }
    size_t n = 0;
    buf[n++] = '"';
    for (const char *p = s; *p && n + 3 < len; p++) {
        if (*p == '"' || *p == '\\')
            buf[n++] = '\\';
        buf[n++] = (unsigned char)*p < ' ' || *p == 0x7f ? '?' : *p;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

size_t log_escape_controls(char *out, size_t len, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    assert(len >= 1);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool ctl = *p < ' ' || *p == 0x7f;
        if (n + (ctl ? 4 : 1) >= len)
            break;
        if (ctl) {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 0xf];
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
    return n;
}

int log_level_parse(const char *name)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    if (level > log_get_level())
        return;
    /* The message may hold what a peer sent: its control characters are escaped here, so
     * that it stays one line and cannot forge another (or a journald "<N>" priority). */
    char msg[1024], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_dest == LOG_DEST_SYSLOG) {
        log_escape_controls(line, sizeof(line), msg);
        syslog(prio[level], "%s", line);
        return;
    }
    int n;
    if (log_journal) { /* journald keeps its own time stamp; sd-daemon(3) priority prefix */
        n = snprintf(line, sizeof(line), "<%d>", prio[level]);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level]);
    }
    n += (int)log_escape_controls(line + n, sizeof(line) - (size_t)n - 1, msg);
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

bool log_limit_allow(struct log_limit *l, unsigned long long now_ms, unsigned *suppressed)
{
    *suppressed = 0;
    if (now_ms - l->window_start_ms >= LOG_LIMIT_WINDOW_MS || l->window_start_ms == 0) {
        l->window_start_ms = now_ms ? now_ms : 1;
        l->in_window = 0;
    }
    if (l->in_window >= LOG_LIMIT_BURST) {
        l->suppressed++;
        return false;
    }
    l->in_window++;
    *suppressed = log_limit_take_suppressed(l);
    return true;
}

unsigned log_limit_take_suppressed(struct log_limit *l)
{
    unsigned n = l->suppressed;
    l->suppressed = 0;
    return n;
}
