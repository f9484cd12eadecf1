/* One initiator connection (conn.c). */
#ifndef LR_INITIATOR_CONN_H
#define LR_INITIATOR_CONN_H

#include "initiator/ini.h"

/* The reason a status ends a connection with ("?" for an unknown value). */
const char *ini_status_str(int status);

struct ini_conn *ini_conn_new(struct lr_session *s, unsigned idx, uint16_t cid);
void ini_conn_free(struct ini_conn *c);
/* Non-blocking connect; the session hears of the outcome through ini_session_conn_ready. */
int ini_conn_connect(struct ini_conn *c, const char *host, uint16_t port);
/* The session's injected faults (lr_session_set_faults) onto c's transmit path. */
void ini_conn_set_faults(struct ini_conn *c);
struct wire_pdu *ini_conn_pdu(struct ini_conn *c);
/* Append a PDU (hdr filled except digests and DataSegmentLength, which are set here). */
void ini_conn_send(struct ini_conn *c, struct wire_pdu *p, const void *data, uint32_t len);
void ini_conn_flush(struct ini_conn *c);
/* Close the socket, mark the connection dead, tell the session. Idempotent. For what ends a
 * connection outside the PDU handlers: timeouts, the session's end, socket failures. */
void ini_conn_close(struct ini_conn *c, const char *why);
/* The same from any thread holding the session lock: done on the connection's own thread. */
void ini_conn_close_any(struct ini_conn *c, const char *why);
/* Close for a negative status (its reason from ini_status_str(), or the login machine's for
 * INI_ERR_LOGIN); nothing for INI_OK. Returns status. */
int ini_conn_fail(struct ini_conn *c, int status);
/* Push received bytes through the parser as if recv() had returned them (tests): 0, or -1 once
 * the connection failed. */
int ini_conn_feed(struct ini_conn *c, const void *bytes, uint32_t len);
/* The next connection of the session (slot nconns, CID = slot) connecting for its login. */
struct ini_conn *ini_conn_add(struct lr_session *s);
/* A new connection for slot i (same CID): a non-leading login with the session's TSIH (ERL 2
 * reconnects, relogin.c), or with leading the leading login of a new session (TSIH 0, same
 * ISID; relogin.c); the old one is kept as retired. Returns it, or NULL. */
struct ini_conn *ini_conn_reconnect(struct lr_session *s, unsigned i, bool leading);

#endif
