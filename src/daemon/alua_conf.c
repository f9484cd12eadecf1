/* Configuration of implicit ALUA across gateways (SPC-4 §5.16): each linerate daemon exporting
 * a shared store is one target port group. Keys of the global or a [target] section:
 *   alua-group = ID          this daemon's group (1..65535), also its TPGT and the relative
 *                            target port ID INQUIRY VPD 0x83 reports; default 1
 *   alua-state = STATE       this group's state for LUNs that name none; default
 *                            active/optimized
 *   alua-peer  = ID:STATE    another gateway's group and its state (repeatable)
 *   alua-explicit = yes|no   explicit ALUA too (SPC-4 §5.16.2.3: TPGS 11b, SET TARGET PORT
 *                            GROUPS, for initiators that drive failover); default no
 * and LUN spec options ",alua=STATE" and ",alua-peer=ID:STATE". A daemon cannot ask its peers
 * for their states: every gateway is given the same picture, so that REPORT TARGET PORT GROUPS
 * says the same thing on every path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/conf_keys.h"
#include "daemon/config.h"

static int parse_group_id(const char *s, size_t n, uint16_t *out)
{
    if (n == 0 || n > 5)
        return -1;
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

/* "ID:STATE" into g. */
static int parse_peer(const char *val, struct scsi_alua_group *g, char *err, size_t errlen)
{
    const char *colon = strchr(val, ':');
    enum scsi_alua_state st;
    if (!colon || parse_group_id(val, (size_t)(colon - val), &g->id) < 0 ||
        scsi_alua_state_parse(colon + 1, &st) < 0) {
        snprintf(err, errlen,
                 "bad ALUA peer '%s': expected GROUP:STATE, GROUP 1..65535, STATE "
                 "active/optimized, active/non-optimized or standby",
                 val);
        return -1;
    }
    g->state = (uint8_t)st;
    return 0;
}

/* Add or replace (same id) a peer group in a list of at most SCSI_ALUA_GROUPS_MAX - 1. */
static int put_peer(struct scsi_alua_group *list, unsigned *n, const struct scsi_alua_group *g,
                    char *err, size_t errlen)
{
    for (unsigned i = 0; i < *n; i++)
        if (list[i].id == g->id) {
            list[i] = *g;
            return 0;
        }
    if (*n >= SCSI_ALUA_GROUPS_MAX - 1) {
        snprintf(err, errlen, "too many ALUA peer groups: at most %d", SCSI_ALUA_GROUPS_MAX - 1);
        return -1;
    }
    list[(*n)++] = *g;
    return 0;
}

static int bad_state(const char *what, const char *val, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "bad value '%s' for %s: expected active/optimized, active/non-optimized or standby",
             val, what);
    return -1;
}

/* "1s", "500ms", "2" (seconds): milliseconds in [lo, hi], or -1. */
static int parse_ms(const char *val, unsigned lo, unsigned hi, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(val, &end, 10);
    if (end == val || errno || v > hi)
        return -1;
    if (strcmp(end, "ms") == 0)
        ;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        v *= 1000;
    else
        return -1;
    if (v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

int target_alua_key(struct target_alua_conf *a, const char *key, const char *val, char *err,
                    size_t errlen)
{
    if (strcmp(key, "alua-mode") == 0) {
        if (strcmp(val, "failover") == 0 || strcmp(val, "all-active") == 0) {
            a->failover = val[0] == 'f';
            return 1;
        }
        snprintf(err, errlen, "bad value '%s' for alua-mode: expected all-active or failover", val);
        return -1;
    }
    if (strcmp(key, "failover-heartbeat") == 0 || strcmp(key, "failover-timeout") == 0) {
        bool hb = key[9] == 'h';
        if (parse_ms(val, hb ? 100 : 1000, 600000,
                     hb ? &a->failover_hb_ms : &a->failover_timeout_ms) < 0) {
            snprintf(err, errlen, "bad value '%s' for %s: expected a time like %s (%s to 600s)",
                     val, key, hb ? "1s or 500ms" : "5s", hb ? "100ms" : "1s");
            return -1;
        }
        return 1;
    }
    if (strcmp(key, "alua-group") == 0) {
        if (parse_group_id(val, strlen(val), &a->group) < 0) {
            snprintf(err, errlen, "bad value '%s' for alua-group: expected 1..65535", val);
            return -1;
        }
        return 1;
    }
    if (strcmp(key, "alua-state") == 0) {
        if (scsi_alua_state_parse(val, &a->state) < 0)
            return bad_state(key, val, err, errlen);
        return 1;
    }
    if (strcmp(key, "alua-explicit") == 0) {
        if (conf_parse_bool(val, &a->explicit_alua) < 0) {
            snprintf(err, errlen, "bad value '%s' for alua-explicit: expected yes or no", val);
            return -1;
        }
        return 1;
    }
    if (strcmp(key, "alua-peer") == 0) {
        struct scsi_alua_group g;
        if (parse_peer(val, &g, err, errlen) < 0 || put_peer(a->peers, &a->npeers, &g, err, errlen))
            return -1;
        return 1;
    }
    return 0;
}

/* A gateway whose failover thread did not run for more than 2 heartbeats + 1 s restarts its
 * peers' silence (the stall rule of alua_failover.c's fo_tick): a failover-timeout below that
 * would let a gateway that merely stalled be taken over while it may still write. */
int target_alua_check(const struct target_alua_conf *a, char *err, size_t errlen)
{
    unsigned hb = a->failover_hb_ms ? a->failover_hb_ms : 1000;
    unsigned to = a->failover_timeout_ms ? a->failover_timeout_ms : 5000;
    if (a->failover && to < 2 * hb + 1000) {
        snprintf(err, errlen,
                 "failover-timeout %ums is below 2 * failover-heartbeat (%ums) + 1s: it must be "
                 "at least %ums",
                 to, hb, 2 * hb + 1000);
        return -1;
    }
    return 0;
}

int target_alua_lun_opt(struct target_lun_conf *l, const char *tok, char *err, size_t errlen)
{
    if (strncmp(tok, "alua=", 5) == 0) {
        if (scsi_alua_state_parse(tok + 5, &l->alua_state) < 0)
            return bad_state("alua", tok + 5, err, errlen);
        l->alua_state_set = true;
        return 1;
    }
    if (strncmp(tok, "alua-peer=", 10) == 0) {
        struct scsi_alua_group g;
        if (parse_peer(tok + 10, &g, err, errlen) < 0 ||
            put_peer(l->alua_peers, &l->alua_npeers, &g, err, errlen) < 0)
            return -1;
        return 1;
    }
    return 0;
}

static uint16_t target_alua_tpgt_of(const struct target_alua_conf *a)
{
    return a->group ? a->group : 1;
}

uint16_t target_alua_tpgt(const struct target_node_conf *c)
{
    return target_alua_tpgt_of(&c->alua);
}

void target_alua_apply(const struct target_node_conf *c, struct scsi_target *scsi)
{
    uint16_t own = target_alua_tpgt(c);
    scsi->alua_state = c->alua.state;
    /* reactors read it (INQUIRY, scsi_cmd_offered): written only when the target is built, as a
     * change takes a restart; ctl_alua.c calls this again on a serving target for the rest */
    if (scsi->alua_explicit != c->alua.explicit_alua)
        scsi->alua_explicit = c->alua.explicit_alua;
    /* read when a LUN is added: a change takes a restart (target_alua_same_groups) */
    scsi->alua_failover = c->alua.failover;
    scsi->failover_hb_ms = c->alua.failover_hb_ms;
    scsi->failover_timeout_ms = c->alua.failover_timeout_ms;
    scsi->alua_npeers = 0;
    for (unsigned i = 0; i < c->alua.npeers; i++)
        if (c->alua.peers[i].id != own) /* naming itself a peer would list the group twice */
            scsi->alua_peers[scsi->alua_npeers++] = c->alua.peers[i];
}

static bool same_groups(const struct scsi_alua_group *a, const struct scsi_alua_group *b,
                        unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (a[i].id != b[i].id || a[i].state != b[i].state)
            return false;
    return true;
}

bool target_alua_same(const struct target_alua_conf *a, const struct target_alua_conf *b)
{
    return target_alua_tpgt_of(a) == target_alua_tpgt_of(b) && a->state == b->state &&
           a->explicit_alua == b->explicit_alua && a->failover == b->failover &&
           a->failover_hb_ms == b->failover_hb_ms &&
           a->failover_timeout_ms == b->failover_timeout_ms && a->npeers == b->npeers &&
           same_groups(a->peers, b->peers, a->npeers);
}

void target_alua_describe(const struct target_node_conf *c, char *buf, size_t len)
{
    size_t off =
        (size_t)snprintf(buf, len, "ALUA target port group %u (%s)", (unsigned)target_alua_tpgt(c),
                         scsi_alua_state_name(c->alua.state));
    if (c->alua.explicit_alua && off < len)
        off += (size_t)snprintf(buf + off, len - off, ", explicit");
    if (c->alua.failover && off < len)
        off += (size_t)snprintf(buf + off, len - off, ", failover");
    for (unsigned i = 0; i < c->alua.npeers && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s %u (%s)", i ? "," : ", peers",
                                (unsigned)c->alua.peers[i].id,
                                scsi_alua_state_name((enum scsi_alua_state)c->alua.peers[i].state));
}

bool target_alua_lun_same(const struct target_lun_conf *a, const struct target_lun_conf *b)
{
    if (a->alua_state_set != b->alua_state_set || a->alua_npeers != b->alua_npeers)
        return false;
    if (a->alua_state_set && a->alua_state != b->alua_state)
        return false;
    return same_groups(a->alua_peers, b->alua_peers, a->alua_npeers);
}

/* The same set of ids (the order of the lines changes nothing). */
static bool same_ids(const struct scsi_alua_group *a, unsigned na, const struct scsi_alua_group *b,
                     unsigned nb)
{
    if (na != nb)
        return false;
    for (unsigned i = 0; i < na; i++) {
        bool found = false;
        for (unsigned k = 0; k < nb && !found; k++)
            found = a[i].id == b[k].id;
        if (!found)
            return false;
    }
    return true;
}

bool target_alua_same_groups(const struct target_alua_conf *a, const struct target_alua_conf *b)
{
    return target_alua_tpgt_of(a) == target_alua_tpgt_of(b) &&
           a->explicit_alua == b->explicit_alua && a->failover == b->failover &&
           a->failover_hb_ms == b->failover_hb_ms &&
           a->failover_timeout_ms == b->failover_timeout_ms &&
           same_ids(a->peers, a->npeers, b->peers, b->npeers);
}

bool target_alua_lun_same_groups(const struct target_lun_conf *a, const struct target_lun_conf *b)
{
    return same_ids(a->alua_peers, a->alua_npeers, b->alua_peers, b->alua_npeers);
}
