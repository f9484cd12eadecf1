/* Connections not yet logged in, server-wide (max-pending-logins and its per-address share),
 * and the limiter for lines about them. */
#ifndef LR_ISCSI_PENDING_H
#define LR_ISCSI_PENDING_H

#include <stdbool.h>
#include <stdint.h>

struct iscsi_server;

/* The server's table of them: init returns -1 when memory ran out; destroy frees what is left. */
int pending_init(struct iscsi_server *srv);
void pending_destroy(struct iscsi_server *srv);

/* add returns false, counting nothing, when a limit is reached. */
bool iscsi_server_pending_add(struct iscsi_server *srv, const uint8_t *addr, uint8_t len,
                              const char *peer);
void iscsi_server_pending_del(struct iscsi_server *srv, const uint8_t *addr, uint8_t len);
/* The server-wide limiter for lines about connections that never logged in. */
bool iscsi_server_log_allow(struct iscsi_server *srv, unsigned *suppressed);

#endif
