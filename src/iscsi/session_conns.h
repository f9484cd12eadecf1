/* A session's connections (session_conns.c): joining, leaving, and closing them (RFC 7143 §6.3). */
#ifndef LR_ISCSI_SESSION_CONNS_H
#define LR_ISCSI_SESSION_CONNS_H

#include <stdbool.h>
#include <stdint.h>

#include "iscsi/node.h"
#include "iscsi/session.h"
#include "scsi/scsi.h"

struct iscsi_conn;

struct iscsi_session *session_create(struct iscsi_conn *c, const struct iscsi_params *p);
/* Detach a connection; the last one out frees the session. */
void session_remove_conn(struct iscsi_session *s, struct iscsi_conn *c);
void session_add_conn(struct iscsi_session *s, struct iscsi_conn *c);
/* Close every connection of any session with this initiator name + ISID + node (§6.3.5). Each
 * one closed counts in closed (NULL: none) until its close has aborted its commands. */
void session_reinstate(struct iscsi_server *srv, const char *initiator, const uint8_t isid[6],
                       struct iscsi_node *node, struct iscsi_conn *except,
                       struct scsi_join *closed);
/* A new connection c takes over from connections being closed for it (session reinstatement,
 * RFC 7143 §6.3.5; connection reinstatement below ERL 2, §6.3.4): it reads nothing more until
 * they have closed and the commands their close aborted have left the store, so that the
 * initiator's retry of a write can never be overwritten by the write it replaces (SAM-5
 * §6.3.4: the tasks of a lost I_T nexus are aborted); for a leading login also when nothing
 * closes for it, as a connection lost just before may have left aborted writes in the store.
 * begin: the join the closes count in (NULL: out of memory, nobody waits); end: after they
 * were asked to close. */
struct scsi_join *session_takeover_begin(struct iscsi_conn *c);
void session_takeover_end(struct scsi_join *closed);
/* Whether a connection with this CID is in the session now (no pointer: the connection lives
 * on its own reactor, which may free it the moment the lock is dropped). */
bool session_has_conn(struct iscsi_session *s, uint16_t cid);
/* Ask the connections to close, each on its own reactor. */
void session_close_other_conns(struct iscsi_session *s, struct iscsi_conn *keep);
/* fn(s, arg) for every session in the table, with sessions_lock and then s->lock held (the
 * order session.h gives). */
void sessions_for_each(struct iscsi_server *srv, void (*fn)(struct iscsi_session *s, void *arg),
                       void *arg);
/* Close (by message to its reactor) every connection c of every live session s for which
 * match(s, c, arg) holds; the session table and each session are locked meanwhile. */
void session_close_conns_where(struct iscsi_server *srv,
                               bool (*match)(const struct iscsi_session *s,
                                             const struct iscsi_conn *c, const void *arg),
                               const void *arg, const char *why);
/* Close the connection with that CID (by message to its reactor). terminate: its tasks end
 * with it (a Logout "close the connection", §11.14.5 a); else at ERL 2 they are kept for
 * reassignment (a reinstatement or a Logout "remove the connection for recovery", §6.3.4).
 * exp_statsn (NULL: none): the Logout's ExpStatSN for that connection (§11.14.4); the answers
 * below it were received and their tasks are not kept.
 * At ERL 2 the acknowledgement goes to the last connection with the CID: stored there for its
 * teardown if that has not published its orphan group yet, else (and for a CID gone) taken
 * from the group at once (orphans_ack_statsn). Returns the answered orphans that ended so. */
unsigned session_close_conn_by_cid(struct iscsi_session *s, uint16_t cid, bool terminate,
                                   const uint32_t *exp_statsn, struct scsi_join *closed);

#endif
