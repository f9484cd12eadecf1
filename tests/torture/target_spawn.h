/* Starting linerate-target for the torture programs (torture.c, abort_task.c). */
#ifndef LINERATE_TESTS_TARGET_SPAWN_H
#define LINERATE_TESTS_TARGET_SPAWN_H

#include <sys/types.h>

/* Fork and exec ARGV (ARGV[0] the binary's path, NULL-terminated) with its stdout to URL
 * (truncated) and its stderr appended to LOG; it dies with the caller (PR_SET_PDEATHSIG).
 * Returns its pid once it has printed its URL (it listens by then), or -1 after it exited or
 * was not ready in 10 s (killed and reaped): the caller may try again. Exits 2 when fork fails. */
pid_t target_spawn(const char *const argv[], const char *url, const char *log);

#endif
