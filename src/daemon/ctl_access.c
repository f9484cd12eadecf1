/* A running target's portals and allow list (linerate-ctl add/remove portal and allow,
 * reload). The iSCSI node's lists are what logins and SendTargets read (under its
 * access_lock, iscsi/server.c); the running configuration follows them, for reload and save.
 * A portal no target has any more stops listening, but connections that came through it carry
 * on: removing a portal or an allow entry never cuts a session by itself. A change of the allow
 * list with force (add or remove allow --force, reload --force) logs out every session of the
 * target whose initiator the list no longer lets in: closing an open target with its first
 * entry ends the others' sessions as removing an entry ends that initiator's. Control thread
 * only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/daemon.h"

int ctl_portal_add(struct daemon *d, unsigned t, const struct target_portal *p, char *err,
                   size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    if (iscsi_node_has_portal(n, p->text)) {
        snprintf(err, errlen, "target %s has portal %s already", n->name, p->text);
        return -EEXIST;
    }
    if (daemon_listen_portal(d, p, err, errlen) < 0)
        return -EADDRNOTAVAIL;
    struct target_node_conf *c = &d->cfg.targets[t];
    if (target_node_add_portal(c, p) < 0 || iscsi_node_add_portal(n, p->text, n->tpgt) < 0) {
        target_node_remove_portal(c, p->text);
        if (!ctl_portal_in_use(d, p->text))
            daemon_unlisten_portal(d, p->text);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    target_config_finish(&d->cfg);
    LOG_INFO("event=portal-added target=%s portal=%s", n->name, p->text);
    return 0;
}

int ctl_portal_remove(struct daemon *d, unsigned t, const char *text, bool last_ok, bool *closed,
                      char *err, size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    *closed = false;
    if (!iscsi_node_has_portal(n, text)) {
        snprintf(err, errlen, "target %s has no portal %s", n->name, text);
        return -ENOENT;
    }
    if (n->nportals == 1 && !last_ok) {
        snprintf(err, errlen,
                 "%s is the last portal of target %s: add another first, or remove the target",
                 text, n->name);
        return -EBUSY;
    }
    int rc = iscsi_node_remove_portal(n, text);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    target_node_remove_portal(&d->cfg.targets[t], text);
    target_config_finish(&d->cfg);
    if (!ctl_portal_in_use(d, text)) {
        rc = daemon_unlisten_portal(d, text);
        *closed = rc == 0;
        if (rc < 0)
            LOG_WARN("portal %s: no target has it, but its listener did not close: %s", text,
                     strerror(-rc));
    }
    LOG_INFO("event=portal-removed target=%s portal=%s listener-closed=%s", n->name, text,
             *closed ? "yes" : "no");
    return 0;
}

/* After a change of target n's allow list: the sessions of initiators it no longer lets in,
 * counted into *sessions and logged out with force; nothing when sessions is NULL (reload,
 * which does it once its whole list is in place). */
static void disallowed_after(struct daemon *d, struct iscsi_node *n, const char *event,
                             const char *iqn, bool force, unsigned timeout_s, unsigned *sessions)
{
    if (!sessions) {
        LOG_INFO("event=%s target=%s initiator=%s", event, n->name, iqn);
        return;
    }
    *sessions =
        force ? ctl_end_disallowed_sessions(d, n, timeout_s) : ctl_disallowed_sessions(d, n);
    LOG_INFO("event=%s target=%s initiator=%s sessions-not-allowed=%u sessions-ended=%s", event,
             n->name, iqn, *sessions, force ? "yes" : "no");
}

int ctl_allow_add(struct daemon *d, unsigned t, const char *iqn, bool force, unsigned timeout_s,
                  unsigned *sessions, char *err, size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    struct target_node_conf *c = &d->cfg.targets[t];
    if (sessions)
        *sessions = 0;
    if (target_node_add_allow(c, iqn) < 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = iscsi_node_add_allow(n, iqn);
    if (rc == -EEXIST) {
        snprintf(err, errlen, "target %s allows %s already", n->name, iqn);
        return rc;
    }
    if (rc < 0) {
        target_node_remove_allow(c, iqn);
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    /* From here the others' new logins are refused (if it was open); their sessions too go
     * with force. */
    disallowed_after(d, n, "allow-added", iqn, force, timeout_s, sessions);
    return 0;
}

int ctl_allow_remove(struct daemon *d, unsigned t, const char *iqn, bool last_ok, bool force,
                     unsigned timeout_s, unsigned *sessions, char *err, size_t errlen)
{
    struct iscsi_node *n = d->built.nodes[t];
    if (sessions)
        *sessions = 0;
    bool there = false;
    for (unsigned i = 0; i < n->nallow && !there; i++)
        there = strcasecmp(n->allow[i], iqn) == 0;
    if (!there) {
        snprintf(err, errlen, "target %s has no allow entry %s", n->name, iqn);
        return -ENOENT;
    }
    /* An empty list lets everyone in: never the surprise of removing one name. */
    if (n->nallow == 1 && !last_ok) {
        snprintf(err, errlen,
                 "%s is the last allow entry of target %s: without it every initiator may log "
                 "in; add another first (or drop the allow lines from the config file and "
                 "reload)",
                 iqn, n->name);
        return -EBUSY;
    }
    int rc = iscsi_node_remove_allow(n, iqn);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    target_node_remove_allow(&d->cfg.targets[t], iqn);
    /* From here new logins of iqn are refused; its sessions are counted, and ended with force. */
    disallowed_after(d, n, "allow-removed", iqn, force, timeout_s, sessions);
    return 0;
}
