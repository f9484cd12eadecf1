/* The `--inject LIST` syntax (util/inject.h): parsing with a reason for every refusal, and the
 * canonical form for reports. */
#include "util/inject.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum inject_kind { INJ_KILL, INJ_DIGEST, INJ_DROP, INJ_DELAY, INJ_COUNT };

static const char *const inject_names[INJ_COUNT] = {"kill-connection", "digest-error", "drop-pdu",
                                                    "store-delay"};

static double *inject_field(struct inject_spec *s, enum inject_kind k)
{
    switch (k) {
    case INJ_KILL:
        return &s->kill_conn_s;
    case INJ_DIGEST:
        return &s->digest_error;
    case INJ_DELAY:
        return &s->store_delay_ms;
    default:
        return &s->drop_pdu;
    }
}

/* A plain decimal number ("0.0001", "1e-4", "2"): no sign, no hex, no inf/nan, nothing after. */
static int parse_decimal(const char *s, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strspn(buf, "0123456789.eE-") != n || buf[0] == '-' || buf[0] == 'e' || buf[0] == 'E')
        return -1;
    char *end;
    double v = strtod(buf, &end);
    if (*end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int item_fail(char *err, size_t errlen, const char *item, size_t n, const char *why)
{
    snprintf(err, errlen, "'%.*s': %s", (int)(n > 64 ? 64 : n), item, why);
    return -1;
}

int inject_parse(const char *list, struct inject_spec *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!list[0]) {
        snprintf(err, errlen,
                 "empty list: expected kill-connection=SECONDS, digest-error=RATE, "
                 "drop-pdu=RATE or store-delay=MS, comma-separated");
        return -1;
    }
    bool seen[INJ_COUNT] = {false};
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        if (!eq)
            return item_fail(err, errlen, p, n, "expected NAME=VALUE");
        size_t nl = (size_t)(eq - p);
        int k = -1;
        for (int i = 0; i < INJ_COUNT; i++)
            if (strlen(inject_names[i]) == nl && memcmp(p, inject_names[i], nl) == 0)
                k = i;
        if (k < 0)
            return item_fail(err, errlen, p, n,
                             "unknown fault (expected kill-connection, digest-error, drop-pdu or "
                             "store-delay)");
        if (seen[k])
            return item_fail(err, errlen, p, n, "given twice");
        seen[k] = true;
        double v;
        bool ok = parse_decimal(eq + 1, n - nl - 1, &v) == 0;
        if (k == INJ_KILL) {
            if (!ok || v < INJECT_KILL_MIN_S || v > INJECT_KILL_MAX_S)
                return item_fail(err, errlen, p, n,
                                 "expected seconds between cuts, 0.01..3600 (e.g. "
                                 "kill-connection=1)");
        } else if (k == INJ_DELAY) {
            if (!ok || v < 1 || v > 10000 || v != (double)(unsigned)v)
                return item_fail(err, errlen, p, n,
                                 "expected whole milliseconds, 1..10000 (e.g. store-delay=500)");
        } else if (!ok || v < 0 || v >= 1) {
            return item_fail(err, errlen, p, n,
                             "expected a rate, 0 <= RATE < 1 (e.g. digest-error=0.0001)");
        }
        *inject_field(out, (enum inject_kind)k) = v;
        if (!p[n])
            break;
        p += n + 1;
    }
    return 0;
}

bool inject_any(const struct inject_spec *s)
{
    return s->kill_conn_s > 0 || s->digest_error > 0 || s->drop_pdu > 0 || s->store_delay_ms > 0;
}

void inject_format(const struct inject_spec *s, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < INJ_COUNT; k++) {
        double v = *inject_field((struct inject_spec *)s, (enum inject_kind)k);
        if (v <= 0 || off >= len)
            continue;
        int w = snprintf(buf + off, len - off, "%s%s=%g", off ? "," : "", inject_names[k], v);
        if (w > 0)
            off += (size_t)w;
    }
    if (!off)
        snprintf(buf, len, "none");
}

int inject_check_available(const struct inject_spec *s, char *err, size_t errlen)
{
    /* Every fault is applied now: kill-connection by the ends themselves, digest-error and
     * drop-pdu by the wire engine's transmit path (iscsi/wire.h, struct wire_faults). */
    (void)s;
    (void)err;
    (void)errlen;
    return 0;
}
