/* Logging: one line per event, with a level; the daemon sets the threshold from --log-level.
 * Lines go to stderr as "HH:MM:SS.mmm LEVEL message" (UTC), to journald as "<PRIORITY>message"
 * when stderr is the journal's stream (JOURNAL_STREAM), or to syslog(3) with --syslog.
 * The events an operator searches for (login, logout, connection closed, session ended, LUN
 * and target added or removed) are written as "event=NAME key=value ..." (docs/logging.md):
 * that form is stable; the wording of other lines is not. */
#ifndef LR_UTIL_LOG_H
#define LR_UTIL_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int log_level_parse(const char *name);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Where lines go. Called once at start, before other threads log. */
enum log_dest { LOG_DEST_STDERR, LOG_DEST_SYSLOG };
/* LOG_DEST_STDERR: stderr, with "<N>" priority prefixes instead of the time stamp when
 * stderr is the stream systemd's JOURNAL_STREAM names. LOG_DEST_SYSLOG: syslog(3) as `ident`,
 * facility daemon. */
void log_set_dest(enum log_dest dest, const char *ident);
/* Parses "stderr" or "syslog"; -1 for anything else. */
int log_dest_parse(const char *name);

/* A value for an event line: s as is when it has no space, '"', '\\' or control character
 * and is not empty, else double-quoted with '"' and '\\' escaped and control characters as
 * '?'. Returns buf (truncated to len, always terminated). */
const char *log_quote(char *buf, size_t len, const char *s);

/* s with every control character (below 0x20, and 0x7f) written as "\\xNN", into out
 * (truncated to len, always terminated, an escape never cut). Returns the length written.
 * log_msg passes every message through it: a line is one line whatever a peer sent. */
size_t log_escape_controls(char *out, size_t len, const char *s);

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
