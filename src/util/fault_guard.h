/* Touching memory that can vanish or be refused: a shared mapping of a file that another
 * process truncates raises SIGBUS on the pages past the new end (mmap(2), "SIGBUS"), and a
 * write fault the file system cannot back (ENOSPC, EDQUOT, EIO on a thin file) raises it too. */
#ifndef LR_UTIL_FAULT_GUARD_H
#define LR_UTIL_FAULT_GUARD_H

/* Runs fn(arg), which must only read or write such memory and memory of its own: 0 when it
 * returned, -EFAULT when it took SIGBUS (fn is cut short; it must hold no lock and own no
 * allocation then). Only the calling thread's SIGBUS inside fn is caught; a SIGBUS anywhere
 * else ends the process as it did before. Costs a sigsetjmp without the signal mask (no system
 * call); the handler is installed on the first call. */
int fault_guard_run(void (*fn)(void *arg), void *arg);

#endif
