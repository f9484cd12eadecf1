/* Logging: one line per event, with a level; the daemon sets the threshold from --log-level.
 * Lines go to stderr as "LEVEL [thread] message". */
#ifndef LR_UTIL_LOG_H
#define LR_UTIL_LOG_H

#include <stdbool.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int log_level_parse(const char *name);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rate limiting for lines a peer can cause at will (one per rejected PDU, one per refused
 * connection): at most LOG_LIMIT_BURST lines per LOG_LIMIT_WINDOW_MS per limiter, and the count
 * of the ones dropped is reported with the next line let through (or by the owner when it goes
 * away, see log_limit_take_suppressed). Not thread-safe: one limiter per owner thread, or a
 * lock around it. */
#define LOG_LIMIT_BURST 10u
#define LOG_LIMIT_WINDOW_MS 10000u

struct log_limit {
    unsigned long long window_start_ms;
    unsigned in_window;  /* lines let through in this window */
    unsigned suppressed; /* dropped since the last line let through */
};

/* Whether a line may be written now. When it may and lines were dropped before it, their
 * number is stored in *suppressed (else 0) for the caller to say so. */
bool log_limit_allow(struct log_limit *l, unsigned long long now_ms, unsigned *suppressed);
/* The number of lines dropped and not yet reported (then reset). */
unsigned log_limit_take_suppressed(struct log_limit *l);

#define LOG_ERR(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...)                                                                             \
    do {                                                                                           \
        if (log_get_level() >= LOG_LVL_DEBUG)                                                      \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                                   \
    } while (0)

#endif
