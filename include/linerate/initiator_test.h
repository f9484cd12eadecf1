/* Hooks into an initiator session for tests and the bench's --verify and --inject modes:
 * steer a task to one connection, find or drop a connection, inject faults. Not for
 * applications: a session chooses its connections itself, and recovers from losing one on its
 * own. */
#ifndef LINERATE_INITIATOR_TEST_H
#define LINERATE_INITIATOR_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include "linerate/initiator.h"

/* Send the next submitted task on connection idx if it is up (connection allegiance then
 * keeps all of that task there): read back on another connection than the one that wrote. */
void lr_session_next_conn(struct lr_session *s, int idx);
/* The local TCP port of connection i (0 if down), to find it from outside (ss, iptables). */
uint16_t lr_session_conn_port(const struct lr_session *s, unsigned i);
/* Drop connection i as if the network had (shutdown of the socket). */
void lr_session_conn_kill(struct lr_session *s, unsigned i);
/* ERL 2: connection i, up, logs itself out with a Logout "remove the connection for recovery"
 * (RFC 7143 §11.14.1 reason 2) while its tasks run: no new command goes on it, the target
 * closes it after the answer and keeps its tasks, which are then reassigned (TASK REASSIGN) on
 * another connection after the answer's Time2Wait, and the slot logs in again. 0, or -1 with
 * errno EINVAL (not an ERL 2 session in full feature phase) or EAGAIN (connection i is not up,
 * or is logging out). An answer other than 0 leaves the connection as it was. */
int lr_session_conn_logout_recovery(struct lr_session *s, unsigned i);
/* Stall one direction of connection i: it stops reading (on) from the next PDU boundary, what
 * the target sends piles up in the socket, while it goes on sending; or reads again (off).
 * Timeouts run on meanwhile (a command past cmd_timeout_ms drops the connection). Holds the
 * connection now in slot i only: one that replaces it after a loss reads. */
void lr_session_conn_rx_hold(struct lr_session *s, unsigned i, bool on);
/* The other direction: connection i stops sending (on), its PDUs (commands, Data-Out, NOP-Out
 * answers to the target's pings) queue unsent while it goes on reading; or sends them (off).
 * Timeouts run on. Also the connection now in slot i only, and not one still connecting. */
void lr_session_conn_tx_hold(struct lr_session *s, unsigned i, bool on);
/* Fault injection (the bench's --inject), set before lr_session_login: the fraction of data
 * digests the session's connections send corrupted (once DataDigest is negotiated) and of
 * their SCSI Command and Data-Out PDUs they leave unsent (what ErrorRecoveryLevel 1 repairs),
 * each 0 <= rate < 1 (else -1, errno EINVAL). lr_session_fault_counts: what they did so far,
 * over all connections. */
struct lr_faults {
    double digest_error, drop_pdu;
};
struct lr_fault_counts {
    uint64_t digests_corrupted, pdus_dropped;
};
int lr_session_set_faults(struct lr_session *s, const struct lr_faults *f);
void lr_session_fault_counts(const struct lr_session *s, struct lr_fault_counts *out);

#endif
