/* The iSCSI server object: the nodes it serves, the session table, node lookup and ACLs, and
 * closing every connection of a reactor at shutdown. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iscsi/auth.h"
#include "iscsi/conn.h"
#include "iscsi/orphan.h"
#include "iscsi/pending.h"
#include "iscsi/task.h"
#include "iscsi/session.h"
#include "iscsi/session_conns.h"
#include "iscsi/tmf.h"
#include "reactor/reactor.h"
#include "util/log.h"

void iscsi_limits_default(struct iscsi_limits *l)
{
    l->max_tx_backlog = ISCSI_DEFAULT_MAX_TX_BACKLOG;
    l->max_pending_logins = ISCSI_DEFAULT_MAX_PENDING_LOGINS;
    l->max_pending_logins_per_addr = ISCSI_DEFAULT_MAX_PENDING_LOGINS_PER_ADDR;
    l->max_sessions = ISCSI_DEFAULT_MAX_SESSIONS;
    l->max_sessions_per_target = ISCSI_DEFAULT_MAX_SESSIONS_PER_TARGET;
    l->max_discovery_sessions = ISCSI_DEFAULT_MAX_DISCOVERY_SESSIONS;
    l->max_discovery_sessions_per_addr = ISCSI_DEFAULT_MAX_DISCOVERY_SESSIONS_PER_ADDR;
    l->discovery_idle_timeout_s = ISCSI_DEFAULT_DISCOVERY_IDLE_TIMEOUT_S;
    l->max_task_buffers = ISCSI_DEFAULT_MAX_TASK_BUFFERS;
    l->data_out_timeout_s = ISCSI_DEFAULT_DATA_OUT_TIMEOUT_S;
}

int iscsi_server_init(struct iscsi_server *srv)
{
    memset(srv, 0, sizeof(*srv));
    if (pending_init(srv) < 0)
        return -1;
    pthread_mutex_init(&srv->task_mem_log_lock, NULL);
    iscsi_limits_default(&srv->limits);
    pthread_mutex_init(&srv->sessions_lock, NULL);
    pthread_mutex_init(&srv->chap_lock, NULL);
    srv->next_tsih = 1;
    srv->nop_interval_s = 15;
    srv->nop_timeout_s = 30;
    srv->login_timeout_s = 15;
    srv->auth_guard = auth_guard_new();
    srv->nodes = calloc(ISCSI_NODES_MAX, sizeof(*srv->nodes));
    return srv->auth_guard && srv->nodes ? 0 : -1;
}

int iscsi_server_set_reactors(struct iscsi_server *srv, struct reactor **r, unsigned n)
{
    assert(!srv->local);
    srv->reactors = r;
    srv->nreactors = n;
    srv->local = calloc(n, sizeof(*srv->local));
    if (!srv->local)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        assert(reactor_id(r[i]) == (int)i);
        list_init(&srv->local[i].task_free);
    }
    return 0;
}

static void reactor_locals_free(struct iscsi_server *srv)
{
    for (unsigned i = 0; srv->local && i < srv->nreactors; i++) {
        struct list_node *n;
        while ((n = list_pop(&srv->local[i].task_free)) != NULL)
            free(list_entry(n, struct iscsi_task, node));
    }
    free(srv->local);
    srv->local = NULL;
}

void iscsi_server_destroy(struct iscsi_server *srv)
{
    reactor_locals_free(srv);
    free(srv->nodes);
    srv->nodes = NULL;
    srv->nnodes = 0;
    free(srv->sessions);
    srv->sessions = NULL;
    auth_guard_free(srv->auth_guard);
    srv->auth_guard = NULL;
    chap_wipe(&srv->discovery_chap, sizeof(srv->discovery_chap));
    pthread_mutex_destroy(&srv->sessions_lock);
    pthread_mutex_destroy(&srv->chap_lock);
    pending_destroy(srv);
    pthread_mutex_destroy(&srv->task_mem_log_lock);
}

int iscsi_server_add_node(struct iscsi_server *srv, struct iscsi_node *node)
{
    unsigned i = 0;
    while (i < ISCSI_NODES_MAX && srv->nodes[i])
        i++;
    if (i == ISCSI_NODES_MAX)
        return -ENOSPC;
    struct scsi_target *t = node->scsi;
    /* The SCSI core never sees a PDU: the tasks of a preempted nexus are ours to abort. */
    t->transport_ctx = srv;
    t->abort_nexus_tasks = iscsi_abort_nexus_tasks;
    /* Published whole, then the bound that lets readers look at it. */
    __atomic_store_n(&srv->nodes[i], node, __ATOMIC_RELEASE);
    if (i >= srv->nnodes)
        __atomic_store_n(&srv->nnodes, i + 1, __ATOMIC_RELEASE);
    return 0;
}

void iscsi_server_remove_node(struct iscsi_server *srv, struct iscsi_node *node)
{
    for (unsigned i = 0; i < srv->nnodes; i++)
        if (srv->nodes[i] == node)
            __atomic_store_n(&srv->nodes[i], NULL, __ATOMIC_RELEASE);
}

void iscsi_server_set_nodes(struct iscsi_server *srv, struct iscsi_node **nodes, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        int rc = iscsi_server_add_node(srv, nodes[i]);
        assert(rc == 0); /* the configuration is bounded far below ISCSI_NODES_MAX */
        (void)rc;
    }
}

unsigned iscsi_server_node_bound(struct iscsi_server *srv)
{
    return __atomic_load_n(&srv->nnodes, __ATOMIC_ACQUIRE);
}

struct iscsi_node *iscsi_server_node(struct iscsi_server *srv, unsigned i)
{
    return __atomic_load_n(&srv->nodes[i], __ATOMIC_ACQUIRE);
}

/* iSCSI names compare case-insensitively: they are normalised to lower case (RFC 7143 §4.2.7.2,
 * stringprep per RFC 3722). */
struct iscsi_node *iscsi_server_find_node(struct iscsi_server *srv, const char *name)
{
    unsigned n = iscsi_server_node_bound(srv);
    for (unsigned i = 0; i < n; i++) {
        struct iscsi_node *node = iscsi_server_node(srv, i);
        if (node && strcasecmp(node->name, name) == 0)
            return node;
    }
    return NULL;
}

bool iscsi_node_allows(struct iscsi_node *node, const char *initiator_name)
{
    pthread_mutex_lock(&node->access_lock);
    bool ok = node->nallow == 0;
    for (unsigned i = 0; !ok && i < node->nallow; i++)
        ok = strcasecmp(node->allow[i], initiator_name) == 0;
    bool entry = node->nhosts == 0;
    for (unsigned i = 0; !entry && i < node->nhosts; i++)
        entry = strcasecmp(node->hosts[i].name, initiator_name) == 0;
    pthread_mutex_unlock(&node->access_lock);
    return ok && entry;
}

const struct chap_creds *iscsi_node_chap_for(const struct iscsi_node *node,
                                             const char *initiator_name)
{
    for (unsigned i = 0; i < node->nhosts; i++)
        if (node->hosts[i].chap.user[0] && strcasecmp(node->hosts[i].name, initiator_name) == 0)
            return &node->hosts[i].chap;
    return &node->chap;
}

bool iscsi_node_has_portal(struct iscsi_node *node, const char *text)
{
    pthread_mutex_lock(&node->access_lock);
    bool ok = false;
    for (unsigned i = 0; !ok && i < node->nportals; i++)
        ok = strcmp(node->portals[i].text, text) == 0;
    pthread_mutex_unlock(&node->access_lock);
    return ok;
}

void iscsi_node_init_access(struct iscsi_node *node)
{
    pthread_mutex_init(&node->access_lock, NULL);
}

/* The arrays grow and shrink by a copy made outside the lock and swapped in under it, so a
 * reader never sees one half-changed. One writer at a time (the control thread), so reading
 * the current array to copy it needs no lock. */
enum access_list { ACCESS_PORTALS, ACCESS_ALLOW };

static bool access_match(enum access_list which, const void *elem, const char *key)
{
    if (which == ACCESS_PORTALS)
        return strcmp(((const struct iscsi_portal_addr *)elem)->text, key) == 0;
    return strcasecmp(elem, key) == 0; /* iSCSI names: RFC 7143 §4.2.7.2 */
}

/* Replace one of node's lists by a copy without the elements matching `drop` (unless NULL),
 * with `add` appended (unless NULL): 0, -ENOENT (drop matched nothing) or -ENOMEM. */
static int access_replace(struct iscsi_node *node, enum access_list which, const void *add,
                          const char *drop)
{
    bool portals = which == ACCESS_PORTALS;
    size_t size = portals ? sizeof(node->portals[0]) : sizeof(node->allow[0]);
    unsigned n = portals ? node->nportals : node->nallow, k = 0;
    const char *cur = portals ? (const char *)node->portals : (const char *)node->allow;
    char *a = calloc(n + 1, size);
    if (!a)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++)
        if (!drop || !access_match(which, cur + i * size, drop))
            memcpy(a + k++ * size, cur + i * size, size);
    if (drop && k == n) {
        free(a);
        return -ENOENT;
    }
    if (add)
        memcpy(a + k++ * size, add, size);
    void *old;
    pthread_mutex_lock(&node->access_lock);
    if (portals) {
        old = node->portals;
        node->portals = (struct iscsi_portal_addr *)(void *)a;
        node->nportals = k;
    } else {
        old = node->allow;
        node->allow = (char(*)[ISCSI_NAME_MAX + 1])(void *)a;
        node->nallow = k;
    }
    pthread_mutex_unlock(&node->access_lock);
    free(old);
    return 0;
}

int iscsi_node_add_portal(struct iscsi_node *node, const char *text, uint16_t tpgt)
{
    if (iscsi_node_has_portal(node, text))
        return -EEXIST;
    struct iscsi_portal_addr p = {.tpgt = tpgt};
    snprintf(p.text, sizeof(p.text), "%s", text);
    return access_replace(node, ACCESS_PORTALS, &p, NULL);
}

int iscsi_node_remove_portal(struct iscsi_node *node, const char *text)
{
    return access_replace(node, ACCESS_PORTALS, NULL, text);
}

int iscsi_node_add_allow(struct iscsi_node *node, const char *initiator_name)
{
    for (unsigned i = 0; i < node->nallow; i++)
        if (access_match(ACCESS_ALLOW, node->allow[i], initiator_name))
            return -EEXIST;
    char name[ISCSI_NAME_MAX + 1] = "";
    snprintf(name, sizeof(name), "%s", initiator_name);
    return access_replace(node, ACCESS_ALLOW, name, NULL);
}

int iscsi_node_remove_allow(struct iscsi_node *node, const char *initiator_name)
{
    return access_replace(node, ACCESS_ALLOW, NULL, initiator_name);
}

static bool conn_on_reactor(const struct iscsi_session *s, const struct iscsi_conn *c,
                            const void *arg)
{
    (void)s;
    return c->reactor == arg;
}

static void expire_orphans_on(struct iscsi_session *s, void *r)
{
    orphans_expire_all_locked(s, r);
}

/* Runs on reactor r: every connection whose session lives here (and every connection still in
 * login) is found through the session table and the reactor's load; connections close, which
 * fails their queued commands and releases in-flight ones when the store completes them. */
void iscsi_server_close_reactor_conns(struct iscsi_server *srv, struct reactor *r)
{
    session_close_conns_where(srv, conn_on_reactor, r, "target shutting down");
    /* ERL 2: tasks kept for reassignment whose timers run here end now */
    sessions_for_each(srv, expire_orphans_on, r);
}
