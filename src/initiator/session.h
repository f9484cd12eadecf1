/* The session (session.c): what conn.c's s->conn_ops lead to. */
#ifndef LR_INITIATOR_SESSION_H
#define LR_INITIATOR_SESSION_H

#include "initiator/ini.h"

/* The connection's TCP connect completed: its first Login Request (a status). */
int ini_session_conn_connected(struct ini_conn *c);
void ini_session_conn_down(struct ini_conn *c);
int ini_session_login_rx(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data,
                         uint32_t dlen);

#endif
