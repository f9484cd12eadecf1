/* The IOPS and bytes/s caps of an initiator entry ([host IQN] / [group NAME], issue 29 item 5):
 * one limiter per entry, shared by every session of every initiator of the entry (a group's
 * cap is the group's together, not each member's). Sessions take a reference at login and
 * charge it with each command (cmd.c sets scsi_task.limit; the SCSI core waits, throttle.c);
 * a reload that drops or replaces the entry drops the node's references, and the limiter
 * goes with the last session, so no waiting command ever points at freed memory. */
#include <stdlib.h>
#include <strings.h>

#include "iscsi/node.h"

struct iscsi_host_limit *iscsi_host_limit_new(const struct rate_limit_conf *c)
{
    struct iscsi_host_limit *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    rate_limit_init(&l->limit, c);
    atomic_init(&l->refs, 1);
    return l;
}

void iscsi_host_limit_get(struct iscsi_host_limit *l)
{
    atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
}

void iscsi_host_limit_put(struct iscsi_host_limit *l)
{
    if (l && atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1)
        free(l);
}

struct iscsi_host_limit *iscsi_node_host_limit(struct iscsi_node *node, const char *initiator)
{
    struct iscsi_host_limit *l = NULL;
    pthread_mutex_lock(&node->access_lock);
    for (unsigned i = 0; !l && i < node->nhosts; i++)
        if (node->hosts[i].limit && strcasecmp(node->hosts[i].name, initiator) == 0) {
            l = node->hosts[i].limit;
            iscsi_host_limit_get(l);
        }
    pthread_mutex_unlock(&node->access_lock);
    return l;
}

struct iscsi_host_limit *iscsi_node_host_limit_peek(const struct iscsi_node *node,
                                                    const char *initiator)
{
    for (unsigned i = 0; i < node->nhosts; i++)
        if (strcasecmp(node->hosts[i].name, initiator) == 0)
            return node->hosts[i].limit;
    return NULL;
}
