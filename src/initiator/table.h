/* The session's task table (table.c); taking a slot is inline in ini.h. */
#ifndef LR_INITIATOR_TABLE_H
#define LR_INITIATOR_TABLE_H

#include "initiator/ini.h"

/* ini_table_init: ntasks slots, all free (-1: no memory). */
int ini_table_init(struct lr_session *s, uint32_t ntasks);
void ini_table_free(struct lr_session *s);
/* The active task an ITT names, or NULL. */
struct ini_task *ini_task_lookup(struct lr_session *s, uint32_t itt);
/* t's slot in s->tasks: the low itt_idx_bits of its ITT. */
uint32_t ini_task_idx(const struct lr_session *s, const struct ini_task *t);
/* t ends with *res: its slot is free again, then its callback runs. */
void ini_task_complete(struct lr_session *s, struct ini_task *t, struct lr_result *res);

#endif
