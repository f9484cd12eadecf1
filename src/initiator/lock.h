/* The session lock (lock.c). */
#ifndef LR_INITIATOR_LOCK_H
#define LR_INITIATOR_LOCK_H

#include "initiator/ini.h"

/* The session lock; all no-ops unless s->mt. ini_io_release drops it around a socket
 * call when held exactly once (an outermost reactor callback) and says whether it did. */
void ini_lock_init(struct lr_session *s);
void ini_lock_destroy(struct lr_session *s);
void ini_lock(struct lr_session *s);
void ini_unlock(struct lr_session *s);
bool ini_io_release(struct lr_session *s);
void ini_io_retake(struct lr_session *s, bool released);

#endif
