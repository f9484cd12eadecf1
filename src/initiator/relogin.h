/* Logging in again after a logout the target asked for (relogin.c, §11.9.1). */
#ifndef LR_INITIATOR_RELOGIN_H
#define LR_INITIATOR_RELOGIN_H

#include "initiator/ini.h"

/* A connection asked to log out (draining) is gone, logged out or dropped: its slot or the
 * whole session is to log in again. */
void ini_relogin_conn_lost(struct ini_conn *c);
/* The session tick (its reactor): the logins due. */
void ini_relogin_tick(struct lr_session *s, uint64_t now);
/* A login started by ini_relogin_tick reached full feature phase, or failed. */
void ini_relogin_done(struct ini_conn *c);
void ini_relogin_failed(struct ini_conn *c);

#endif
