/* Logout (logout.c, RFC 7143 §11.14-§11.15). */
#ifndef LR_INITIATOR_LOGOUT_H
#define LR_INITIATOR_LOGOUT_H

#include "initiator/ini.h"

/* An immediate Logout Request on c (§11.14): reason, CID, ITT, ExpStatSN. A status. */
int ini_logout_send(struct ini_conn *c, uint8_t reason, uint16_t cid, uint32_t itt,
                    uint32_t expstatsn);
/* The session's Logout on its first connection up (0, or -1: no memory). */
int ini_logout_start(struct lr_session *s);
/* The same once every connection is home (session_gather); failing, they all close. */
void ini_logout_gathered(struct lr_session *s);
/* Connection c went down while the session logs out: if it carried the Logout, unanswered,
 * the others close and the logout ends with LR_ERR_CONN_LOST. */
void ini_logout_conn_lost(struct ini_conn *c);
/* The answer to the session's Logout (ITT INI_LOGOUT_ITT): every connection ends. */
int ini_logout_rsp(struct ini_conn *c, const uint8_t *hdr);

#endif
