/* The daemon-wide budget of task data memory (taskmem.c). */
#ifndef LR_ISCSI_TASKMEM_H
#define LR_ISCSI_TASKMEM_H

#include <stdbool.h>
#include <stdint.h>

struct iscsi_server;

/* taskmem.c: the daemon-wide budget of task data memory (limits.max_task_buffers). charge
 * takes n bytes if they fit (false: nothing taken); uncharge gives them back; refused counts
 * and logs (rate limited) a command turned away for it. */
bool taskmem_charge(struct iscsi_server *srv, uint64_t n);
void taskmem_uncharge(struct iscsi_server *srv, uint64_t n);
void taskmem_refused(struct iscsi_server *srv, const char *peer, uint64_t n);

#endif
