/* Connections not yet logged in, server-wide: max-pending-logins and its per-address share,
 * counted from accept until login ends, and the limiter for lines about such connections.
 * Below the connection: it knows addresses, not connections. */
#include <stdlib.h>
#include <string.h>

#include "iscsi/node.h"
#include "iscsi/pending.h"
#include "reactor/reactor.h"
#include "util/log.h"

#define PENDING_HASH_SIZE 1024u

/* Connections not yet logged in from one source address. */
struct iscsi_pending_addr {
    struct iscsi_pending_addr *next;
    unsigned count;
    uint8_t len;
    uint8_t addr[16];
};

int pending_init(struct iscsi_server *srv)
{
    srv->pending_hash = calloc(PENDING_HASH_SIZE, sizeof(*srv->pending_hash));
    if (!srv->pending_hash)
        return -1;
    pthread_mutex_init(&srv->pending_lock, NULL);
    return 0;
}

void pending_destroy(struct iscsi_server *srv)
{
    for (unsigned i = 0; srv->pending_hash && i < PENDING_HASH_SIZE; i++) {
        while (srv->pending_hash[i]) {
            struct iscsi_pending_addr *e = srv->pending_hash[i];
            srv->pending_hash[i] = e->next;
            free(e);
        }
    }
    free(srv->pending_hash);
    srv->pending_hash = NULL;
    pthread_mutex_destroy(&srv->pending_lock);
}

static unsigned pending_bucket(const uint8_t *addr, uint8_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint8_t i = 0; i < len; i++)
        h = (h ^ addr[i]) * 16777619u;
    return h & (PENDING_HASH_SIZE - 1);
}

static struct iscsi_pending_addr **pending_find(struct iscsi_server *srv, const uint8_t *addr,
                                                uint8_t len)
{
    struct iscsi_pending_addr **pp = &srv->pending_hash[pending_bucket(addr, len)];
    while (*pp && ((*pp)->len != len || memcmp((*pp)->addr, addr, len) != 0))
        pp = &(*pp)->next;
    return pp;
}

/* Count a new connection against max-pending-logins and its address's share; false (and
 * nothing counted) when either is full. Runs before anything is allocated for it. */
bool iscsi_server_pending_add(struct iscsi_server *srv, const uint8_t *addr, uint8_t len,
                              const char *peer)
{
    const struct iscsi_limits *l = &srv->limits;
    const char *why = NULL;
    pthread_mutex_lock(&srv->pending_lock);
    struct iscsi_pending_addr **pp = pending_find(srv, addr, len);
    if (l->max_pending_logins && srv->npending >= l->max_pending_logins)
        why = "max-pending-logins";
    else if (l->max_pending_logins_per_addr && *pp &&
             (*pp)->count >= l->max_pending_logins_per_addr)
        why = "max-pending-logins-per-address";
    if (!why && !*pp) {
        struct iscsi_pending_addr *e = calloc(1, sizeof(*e));
        if (!e)
            why = "out of memory";
        else {
            e->len = len;
            memcpy(e->addr, addr, len);
            *pp = e;
        }
    }
    if (!why) {
        (*pp)->count++;
        srv->npending++;
    } else {
        unsigned sup;
        if (log_limit_allow(&srv->refuse_log, reactor_now_ms(), &sup)) {
            if (sup)
                LOG_WARN("%u more connections refused (not logged)", sup);
            LOG_WARN("%s: connection refused: %s reached (%u not logged in)", peer, why,
                     srv->npending);
        }
    }
    pthread_mutex_unlock(&srv->pending_lock);
    return why == NULL;
}

bool iscsi_server_log_allow(struct iscsi_server *srv, unsigned *suppressed)
{
    pthread_mutex_lock(&srv->pending_lock);
    bool ok = log_limit_allow(&srv->login_log, reactor_now_ms(), suppressed);
    pthread_mutex_unlock(&srv->pending_lock);
    return ok;
}

void iscsi_server_pending_del(struct iscsi_server *srv, const uint8_t *addr, uint8_t len)
{
    pthread_mutex_lock(&srv->pending_lock);
    struct iscsi_pending_addr **pp = pending_find(srv, addr, len);
    if (*pp) {
        srv->npending--;
        if (--(*pp)->count == 0) {
            struct iscsi_pending_addr *e = *pp;
            *pp = e->next;
            free(e);
        }
    }
    pthread_mutex_unlock(&srv->pending_lock);
}
