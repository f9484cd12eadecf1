/* Hooks into an initiator session for tests and the bench's --verify and connection-kill
 * modes: steer a task to one connection, find or drop a connection. Not for applications: a
 * session chooses its connections itself, and recovers from losing one on its own. */
#ifndef LINERATE_INITIATOR_TEST_H
#define LINERATE_INITIATOR_TEST_H

#include <stdint.h>

#include "linerate/initiator.h"

/* Send the next submitted task on connection idx if it is up (connection allegiance then
 * keeps all of that task there): read back on another connection than the one that wrote. */
void lr_session_next_conn(struct lr_session *s, int idx);
/* The local TCP port of connection i (0 if down), to find it from outside (ss, iptables). */
uint16_t lr_session_conn_port(const struct lr_session *s, unsigned i);
/* Drop connection i as if the network had (shutdown of the socket). */
void lr_session_conn_kill(struct lr_session *s, unsigned i);

#endif
