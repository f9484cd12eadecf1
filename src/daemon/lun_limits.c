/* A LUN's IOPS and MiB/s caps as an admin sets them (",iops=", ",read-iops=", ",write-iops=",
 * ",mbps=", ",read-mbps=", ",write-mbps=", ",burst="), in the LUN spec and from linerate-ctl
 * ("set lun T N iops=500,mbps=100"): parsed and written back here; enforced per gateway by the
 * SCSI core (scsi/throttle.c, util/rate_limit.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

#define MIB (1024u * 1024u)
/* caps above these are no caps anyone means: a typo, refused */
#define IOPS_MAX 100000000ull
#define MBPS_MAX 10000000ull

static const struct {
    const char *name;
    enum rate_dim dim;
    bool mib;
} keys[] = {
    {"iops", RATE_IOPS, false},
    {"read-iops", RATE_READ_IOPS, false},
    {"write-iops", RATE_WRITE_IOPS, false},
    {"mbps", RATE_BPS, true},
    {"read-mbps", RATE_READ_BPS, true},
    {"write-mbps", RATE_WRITE_BPS, true},
};

static bool whole(const char *v, unsigned long long max, unsigned long long *out)
{
    char *end;
    if (!isdigit((unsigned char)v[0]))
        return false;
    *out = strtoull(v, &end, 10);
    return !*end && *out <= max;
}

/* burst=N, Nms or Ns: milliseconds' worth of every cap */
static bool burst_value(const char *v, uint32_t *ms)
{
    char *end;
    if (!isdigit((unsigned char)v[0]))
        return false;
    unsigned long long x = strtoull(v, &end, 10);
    if (strcmp(end, "s") == 0) {
        /* checked before multiplying: 18446744073709552s would wrap to 384 ms */
        if (x > RATE_BURST_MS_MAX / 1000)
            return false;
        x *= 1000;
    } else if (*end && strcmp(end, "ms") != 0)
        return false;
    if (x > RATE_BURST_MS_MAX)
        return false;
    *ms = (uint32_t)x;
    return true;
}

int target_lun_limits_opt(struct rate_limit_conf *c, const char *tok, const char *spec, char *err,
                          size_t errlen)
{
    const char *eq = strchr(tok, '=');
    if (!eq)
        return 0;
    size_t k = (size_t)(eq - tok);
    const char *v = eq + 1;
    if (k == 5 && strncmp(tok, "burst", 5) == 0) {
        if (!burst_value(v, &c->burst_ms)) {
            snprintf(err, errlen,
                     "bad burst= '%s' in '%s': milliseconds of every cap a LUN that was idle "
                     "lets through at once, e.g. 100ms or 1s, at most %us",
                     v, spec, RATE_BURST_MS_MAX / 1000);
            return -1;
        }
        return 1;
    }
    for (unsigned i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (k != strlen(keys[i].name) || strncmp(tok, keys[i].name, k) != 0)
            continue;
        unsigned long long x;
        if (!whole(v, keys[i].mib ? MBPS_MAX : IOPS_MAX, &x)) {
            snprintf(err, errlen, "bad %s= '%s' in '%s': %s per second on this gateway, 0 for none",
                     keys[i].name, v, spec, keys[i].mib ? "whole MiB (1048576 bytes)" : "commands");
            return -1;
        }
        c->cap[keys[i].dim] = keys[i].mib ? x * MIB : x;
        return 1;
    }
    return 0;
}

int target_lun_limits_parse(struct rate_limit_conf *c, const char *text, char *err, size_t errlen)
{
    if (strcmp(text, "none") == 0 || strcmp(text, "unlimited") == 0) {
        memset(c, 0, sizeof(*c));
        return 0;
    }
    for (const char *tok = text; *tok;) {
        size_t n = strcspn(tok, ",");
        char one[64];
        if (n == 0 || n >= sizeof(one)) {
            snprintf(err, errlen, "bad limits '%s': e.g. iops=500,mbps=100,burst=100ms", text);
            return -1;
        }
        memcpy(one, tok, n);
        one[n] = '\0';
        int r = target_lun_limits_opt(c, one, text, err, errlen);
        if (r == 0)
            snprintf(err, errlen,
                     "'%s' in '%s' is no limit: iops=, read-iops=, write-iops=, mbps=, "
                     "read-mbps=, write-mbps=, burst=, or none",
                     one, text);
        if (r <= 0)
            return -1;
        tok += n;
        if (*tok == ',')
            tok++;
    }
    return 0;
}

int target_lun_limits_format(const struct rate_limit_conf *c, char *buf, size_t len)
{
    size_t off = 0;
    if (len)
        buf[0] = '\0';
    for (unsigned i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        uint64_t x = c->cap[keys[i].dim];
        if (x && off < len)
            off += (size_t)snprintf(buf + off, len - off, ",%s=%llu", keys[i].name,
                                    (unsigned long long)(keys[i].mib ? x / MIB : x));
    }
    if (c->burst_ms && rate_limit_conf_any(c) && off < len)
        off += (size_t)snprintf(buf + off, len - off, ",burst=%ums", (unsigned)c->burst_ms);
    return off < len ? 0 : -1;
}
