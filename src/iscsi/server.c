/* The iSCSI server object: the nodes it serves, the session table, node lookup and ACLs, and
 * closing every connection of a reactor at shutdown. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iscsi/auth.h"
#include "iscsi/conn.h"
#include "util/log.h"

int iscsi_server_init(struct iscsi_server *srv)
{
    memset(srv, 0, sizeof(*srv));
    pthread_mutex_init(&srv->sessions_lock, NULL);
    srv->next_tsih = 1;
    srv->nop_interval_s = 15;
    srv->nop_timeout_s = 30;
    srv->login_timeout_s = 15;
    srv->auth_guard = auth_guard_new();
    return srv->auth_guard ? 0 : -1;
}

void iscsi_server_destroy(struct iscsi_server *srv)
{
    free(srv->sessions);
    srv->sessions = NULL;
    auth_guard_free(srv->auth_guard);
    srv->auth_guard = NULL;
    chap_wipe(&srv->discovery_chap, sizeof(srv->discovery_chap));
    pthread_mutex_destroy(&srv->sessions_lock);
}

/* iSCSI names compare case-insensitively: they are normalised to lower case (RFC 7143 §4.2.7.2,
 * stringprep per RFC 3722). */
struct iscsi_node *iscsi_server_find_node(struct iscsi_server *srv, const char *name)
{
    for (unsigned i = 0; i < srv->nnodes; i++)
        if (strcasecmp(srv->nodes[i]->name, name) == 0)
            return srv->nodes[i];
    return NULL;
}

bool iscsi_node_allows(const struct iscsi_node *node, const char *initiator_name)
{
    if (node->nallow == 0)
        return true;
    for (unsigned i = 0; i < node->nallow; i++)
        if (strcasecmp(node->allow[i], initiator_name) == 0)
            return true;
    return false;
}

static bool conn_on_reactor(const struct iscsi_session *s, const struct iscsi_conn *c,
                            const void *arg)
{
    (void)s;
    return c->reactor == arg;
}

/* Runs on reactor r: every connection whose session lives here (and every connection still in
 * login) is found through the session table and the reactor's load; connections close, which
 * fails their queued commands and releases in-flight ones when the store completes them. */
void iscsi_server_close_reactor_conns(struct iscsi_server *srv, struct reactor *r)
{
    session_close_conns_where(srv, conn_on_reactor, r, "target shutting down");
}
