/* Logging: one line per event, with a level; the daemon sets the threshold from --log-level.
 * Lines go to stderr as "LEVEL [thread] message". */
#ifndef LR_UTIL_LOG_H
#define LR_UTIL_LOG_H

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int log_level_parse(const char *name);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_ERR(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...)                                                                             \
    do {                                                                                           \
        if (log_get_level() >= LOG_LVL_DEBUG)                                                      \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                                   \
    } while (0)

#endif
