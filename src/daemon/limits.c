/* The global limit keys of the config file (docs/limits.md): what one peer, or all of them
 * together, may make the daemon hold. A table row per key: name, range, where it goes. */
#include <stdio.h>
#include <string.h>

#include "daemon/config.h"
#include "util/size.h"

struct limit_key {
    const char *name;
    uint64_t lo, hi;
    size_t off; /* in struct iscsi_limits */
    bool wide;  /* a uint64_t field, else unsigned */
};

#define LIM(f) offsetof(struct iscsi_limits, f)

/* 0 turns a limit off (for a benchmark or a closed network), except max-tx-backlog, which
 * is at least one largest reply so that any single answer can be queued, max-task-buffers,
 * at least the largest command (8 MiB of data and 8 MiB of the medium's copy), and
 * data-out-timeout, which is never off (ERL 0 has no other end for a stalled write). */
static const struct limit_key limit_keys[] = {
    {"max-tx-backlog", 64u << 10, 1ull << 32, LIM(max_tx_backlog), true},
    {"max-pending-logins", 0, 1u << 20, LIM(max_pending_logins), false},
    {"max-pending-logins-per-address", 0, 1u << 20, LIM(max_pending_logins_per_addr), false},
    {"max-sessions", 0, 65535, LIM(max_sessions), false},
    /* at most the target's I_T nexus slots (each session holds one) */
    {"max-sessions-per-target", 0, SCSI_NEXUS_MAX, LIM(max_sessions_per_target), false},
    {"max-discovery-sessions", 0, 65535, LIM(max_discovery_sessions), false},
    {"max-discovery-sessions-per-address", 0, 65535, LIM(max_discovery_sessions_per_addr), false},
    /* seconds */
    {"discovery-idle-timeout", 0, 86400, LIM(discovery_idle_timeout_s), false},
    {"data-out-timeout", 1, 3600, LIM(data_out_timeout_s), false},
    {"max-task-buffers", 16u << 20, 1ull << 40, LIM(max_task_buffers), true},
};

bool target_limits_is_key(const char *key)
{
    for (size_t i = 0; i < sizeof(limit_keys) / sizeof(limit_keys[0]); i++)
        if (strcmp(key, limit_keys[i].name) == 0)
            return true;
    return false;
}

int target_limits_key(struct iscsi_limits *l, const char *key, const char *val, char *err,
                      size_t errlen)
{
    for (size_t i = 0; i < sizeof(limit_keys) / sizeof(limit_keys[0]); i++) {
        const struct limit_key *k = &limit_keys[i];
        if (strcmp(key, k->name) != 0)
            continue;
        uint64_t x;
        if (size_parse(val, &x) < 0 || x < k->lo || x > k->hi) {
            snprintf(err, errlen, "bad value '%s' for %s: expected %llu..%llu", val, key,
                     (unsigned long long)k->lo, (unsigned long long)k->hi);
            return -1;
        }
        char *f = (char *)l + k->off;
        if (k->wide)
            *(uint64_t *)f = x;
        else
            *(unsigned *)f = (unsigned)x;
        return 1;
    }
    return 0;
}

void target_limits_write(FILE *f, const struct iscsi_limits *l)
{
    struct iscsi_limits def;
    iscsi_limits_default(&def);
    for (size_t i = 0; i < sizeof(limit_keys) / sizeof(limit_keys[0]); i++) {
        const struct limit_key *k = &limit_keys[i];
        const char *a = (const char *)l + k->off, *b = (const char *)&def + k->off;
        uint64_t v = k->wide ? *(const uint64_t *)a : *(const unsigned *)a;
        uint64_t dv = k->wide ? *(const uint64_t *)b : *(const unsigned *)b;
        if (v != dv)
            fprintf(f, "%s = %llu\n", k->name, (unsigned long long)v);
    }
}
