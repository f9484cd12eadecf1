/* Logging to stderr with a level threshold. One write(2) per line so lines from reactor
 * threads never interleave. */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
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
    if (level > log_get_level())
        return;
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
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
