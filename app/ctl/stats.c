/* linerate-ctl stats: the daemon returns raw, ever-growing counters (the `stats` method,
 * docs/ctl-protocol.md); the rates an operator wants are computed here from two snapshots:
 * IOPS and MB/s are the differences over the interval, p50/p99 come from the difference of the
 * latency histograms (log2 buckets, interpolated linearly inside the bucket that holds the
 * quantile, as Prometheus' histogram_quantile does). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/ctl.h"

#define STATS_OPS 3 /* read, write, other */

static const char *const op_keys[STATS_OPS] = {"read", "write", "other"};

static long long jint(json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

enum kind { K_LUN, K_SESSION, K_PORTAL, K_HOST, K_N };
static const char *const kinds[K_N] = {"luns", "sessions", "portals", "hosts"};

/* A host entry's name: a [host IQN]'s "host", a [group NAME]'s "group". */
static const char *entry_name(json_t *e)
{
    const char *n = json_string_value(json_object_get(e, "host"));
    return n ? n : json_string_value(json_object_get(e, "group"));
}

static bool same_str(json_t *a, json_t *b, const char *k)
{
    const char *x = json_string_value(json_object_get(a, k));
    const char *y = json_string_value(json_object_get(b, k));
    return x && y && strcmp(x, y) == 0;
}

/* The entry of `prev` that is the same LUN, session or portal as `cur`. */
static json_t *match(json_t *prev, json_t *cur, enum kind kind)
{
    size_t i;
    json_t *e;
    json_array_foreach(prev, i, e)
    {
        bool same;
        switch (kind) {
        case K_LUN:
            same = jint(e, "lun") == jint(cur, "lun") && same_str(e, cur, "target");
            break;
        case K_SESSION:
            same = jint(e, "tsih") == jint(cur, "tsih") && same_str(e, cur, "isid");
            break;
        case K_HOST:
            same = jint(e, "lun") == jint(cur, "lun") && same_str(e, cur, "target") &&
                   same_str(e, cur, "kind") && entry_name(e) && entry_name(cur) &&
                   strcmp(entry_name(e), entry_name(cur)) == 0;
            break;
        default:
            same = same_str(e, cur, "portal");
            break;
        }
        if (same)
            return e;
    }
    return NULL;
}

static long long delta(json_t *cur, json_t *prev, const char *op, const char *key)
{
    json_t *c = json_object_get(json_object_get(json_object_get(cur, "counters"), op), key);
    json_t *p =
        prev ? json_object_get(json_object_get(json_object_get(prev, "counters"), op), key) : NULL;
    long long d = (long long)json_integer_value(c) - (p ? (long long)json_integer_value(p) : 0);
    return d > 0 ? d : 0;
}

static long long errors_total(json_t *e)
{
    long long n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(e, "counters"), "errors"), k, v)
    {
        (void)k;
        n += (long long)json_integer_value(v);
    }
    return n;
}

/* Quantile q of the histogram h[0..n-1] (bucket i below bounds[i], the last unbounded):
 * seconds, or NAN when it is empty. */
static double quantile(const double *h, unsigned n, json_t *bounds, double q)
{
    double total = 0;
    for (unsigned i = 0; i < n; i++)
        total += h[i];
    if (total <= 0)
        return NAN;
    double rank = q * total, cum = 0;
    for (unsigned i = 0; i < n; i++) {
        if (cum + h[i] >= rank && h[i] > 0) {
            double lo = i ? json_real_value(json_array_get(bounds, i - 1)) : 0;
            if (i >= json_array_size(bounds)) /* +Inf: the last finite bound is all we know */
                return lo;
            double hi = json_real_value(json_array_get(bounds, i));
            return lo + (hi - lo) * (rank - cum) / h[i];
        }
        cum += h[i];
    }
    return NAN;
}

/* The growth of counters.KEY (digest_errors, r2ts, aborts, resets) since prev. */
static long long event_delta(json_t *cur, json_t *prev, const char *key)
{
    long long c = jint(json_object_get(cur, "counters"), key);
    long long p = prev ? jint(json_object_get(prev, "counters"), key) : 0;
    return c > p ? c - p : 0;
}

struct rate {
    double iops, read_mbs, write_mbs, p50, p99;
    long long qd, errors;
    long long digest_errors, r2ts, aborts, resets; /* over the interval */
};

static void rate_of(json_t *cur, json_t *prev, json_t *bounds, double dt, struct rate *r)
{
    long long cmds = 0;
    double h[64] = {0};
    unsigned nb = 0;
    for (unsigned op = 0; op < STATS_OPS; op++) {
        cmds += delta(cur, prev, op_keys[op], "commands");
        json_t *cb = json_object_get(json_object_get(json_object_get(cur, "counters"), op_keys[op]),
                                     "latency_buckets");
        json_t *pb =
            prev ? json_object_get(json_object_get(json_object_get(prev, "counters"), op_keys[op]),
                                   "latency_buckets")
                 : NULL;
        nb = (unsigned)json_array_size(cb);
        if (nb > 64)
            nb = 64;
        for (unsigned i = 0; i < nb; i++) {
            double d = (double)json_integer_value(json_array_get(cb, i)) -
                       (pb ? (double)json_integer_value(json_array_get(pb, i)) : 0);
            h[i] += d > 0 ? d : 0;
        }
    }
    r->iops = (double)cmds / dt;
    r->read_mbs = (double)delta(cur, prev, "read", "bytes") / dt / 1e6;
    r->write_mbs = (double)delta(cur, prev, "write", "bytes") / dt / 1e6;
    r->p50 = quantile(h, nb, bounds, 0.50);
    r->p99 = quantile(h, nb, bounds, 0.99);
    r->qd = jint(cur, "queue_depth");
    long long e = errors_total(cur) - (prev ? errors_total(prev) : 0);
    r->errors = e > 0 ? e : 0;
    r->digest_errors = event_delta(cur, prev, "digest_errors");
    r->r2ts = event_delta(cur, prev, "r2ts");
    r->aborts = event_delta(cur, prev, "aborts");
    r->resets = event_delta(cur, prev, "resets");
}

static void lat_text(double s, char *out, size_t n)
{
    if (isnan(s))
        snprintf(out, n, "-");
    else if (s < 1e-5)
        snprintf(out, n, "%.1fus", s * 1e6);
    else if (s < 1e-3)
        snprintf(out, n, "%.0fus", s * 1e6);
    else if (s < 1)
        snprintf(out, n, "%.2fms", s * 1e3);
    else
        snprintf(out, n, "%.2fs", s);
}

static json_t *num_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

/* One table (or JSON object) from two snapshots. */
static void report(FILE *out, json_t *prev, json_t *cur, bool as_json)
{
    double dt = (double)(jint(cur, "time_ns") - jint(prev, "time_ns")) / 1e9;
    if (dt <= 0)
        dt = 1e-9;
    json_t *bounds = json_object_get(cur, "latency_bounds_s");
    json_t *jout = as_json ? json_pack("{s:f, s:[], s:[], s:[], s:[]}", "interval_s", dt, "luns",
                                       "sessions", "portals", "hosts")
                           : NULL;
    static const char *const heads[K_N] = {"LUN (TARGET/N)", "SESSION (TSIH INITIATOR)", "PORTAL",
                                           "HOST ENTRY (TARGET/LUN HOST|GROUP)"};
    for (enum kind k = K_LUN; k < K_N; k++) {
        json_t *list = json_object_get(cur, kinds[k]);
        if (k == K_HOST && !json_array_size(list) && !as_json)
            break; /* no entries: no table (and no such list from an older daemon) */
        bool lun = k == K_LUN;
        if (!as_json)
            fprintf(out, "%s%-52s %9s %10s %10s %9s %9s %5s %6s\n", k ? "\n" : "", heads[k], "IOPS",
                    "READ MB/s", "WRITE MB/s", "p50", "p99", "QD", "ERRORS");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
        {
            struct rate r;
            rate_of(e, match(json_object_get(prev, kinds[k]), e, k), bounds, dt, &r);
            char name[600];
            if (lun)
                snprintf(name, sizeof(name), "%s/%lld",
                         json_string_value(json_object_get(e, "target")), jint(e, "lun"));
            else if (k == K_SESSION)
                snprintf(name, sizeof(name), "%lld %s", jint(e, "tsih"),
                         json_string_value(json_object_get(e, "initiator")));
            else if (k == K_HOST)
                snprintf(name, sizeof(name), "%s/%lld %s %s",
                         json_string_value(json_object_get(e, "target")), jint(e, "lun"),
                         json_string_value(json_object_get(e, "kind")), entry_name(e));
            else
                snprintf(name, sizeof(name), "%s", json_string_value(json_object_get(e, "portal")));
            if (as_json) {
                json_t *o =
                    json_pack("{s:f, s:f, s:f, s:o, s:o, s:I, s:I}", "iops", r.iops,
                              "read_mb_per_s", r.read_mbs, "write_mb_per_s", r.write_mbs, "p50_s",
                              num_or_null(r.p50), "p99_s", num_or_null(r.p99), "queue_depth",
                              (json_int_t)r.qd, "errors", (json_int_t)r.errors);
                json_t *ev =
                    json_pack("{s:I, s:I, s:I, s:I}", "digest_errors", (json_int_t)r.digest_errors,
                              "r2ts", (json_int_t)r.r2ts, "aborts", (json_int_t)r.aborts, "resets",
                              (json_int_t)r.resets);
                json_object_update(o, ev);
                json_decref(ev);
                if (lun) {
                    json_object_set(o, "target", json_object_get(e, "target"));
                    json_object_set(o, "lun", json_object_get(e, "lun"));
                    /* the LUN's caps: commands waiting now, and those that waited since start */
                    json_t *th = json_object_get(e, "throttle");
                    if (th)
                        json_object_set(o, "throttle", th);
                } else if (k == K_PORTAL) {
                    json_object_set(o, "portal", json_object_get(e, "portal"));
                } else if (k == K_HOST) {
                    json_object_del(o, "queue_depth"); /* commands only (docs/metrics.md) */
                    json_object_set(o, "target", json_object_get(e, "target"));
                    json_object_set(o, "kind", json_object_get(e, "kind"));
                    json_object_set_new(o, json_string_value(json_object_get(e, "kind")),
                                        json_string(entry_name(e)));
                    json_object_set(o, "lun", json_object_get(e, "lun"));
                    json_object_set(o, "host_lun", json_object_get(e, "host_lun"));
                } else {
                    json_object_set(o, "tsih", json_object_get(e, "tsih"));
                    json_object_set(o, "initiator", json_object_get(e, "initiator"));
                    json_object_set(o, "target", json_object_get(e, "target"));
                }
                json_array_append_new(json_object_get(jout, kinds[k]), o);
                continue;
            }
            char p50[16], p99[16];
            lat_text(r.p50, p50, sizeof(p50));
            lat_text(r.p99, p99, sizeof(p99));
            fprintf(out, "%-52s %9.0f %10.1f %10.1f %9s %9s %5lld %6lld\n", name, r.iops,
                    r.read_mbs, r.write_mbs, p50, p99, r.qd, r.errors);
        }
    }
    if (as_json) {
        /* the initiator entries' caps: their delayed counters since start, as the daemon says */
        json_t *caps = json_object_get(cur, "host_limits");
        if (caps)
            json_object_set(jout, "host_limits", caps);
        char *s = json_dumps(jout, JSON_INDENT(2));
        fprintf(out, "%s\n", s ? s : "{}");
        free(s);
        json_decref(jout);
    }
    fflush(out);
}

static int snapshot(const char *path, unsigned wait_s, json_t **res)
{
    json_t *resp;
    char err[512];
    json_t *params = json_object();
    int crc = ctl_call(path, "stats", params, wait_s, &resp, err, sizeof(err));
    json_decref(params);
    if (crc < 0) {
        fprintf(stderr, "linerate-ctl: %s\n", err);
        return CTL_EXIT_NO_DAEMON;
    }
    json_t *error = json_object_get(resp, "error");
    json_t *result = json_object_get(resp, "result");
    if (error || !json_is_object(result)) {
        const char *msg = json_string_value(json_object_get(error, "message"));
        fprintf(stderr, "linerate-ctl: %s\n", msg ? msg : "no valid answer to stats");
        json_decref(resp);
        return error ? CTL_EXIT_FAILED : CTL_EXIT_NO_DAEMON;
    }
    *res = json_incref(result);
    json_decref(resp);
    return CTL_EXIT_OK;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

int ctl_stats_main(const char *path, bool as_json, unsigned wait_s, int argc, char **argv)
{
    double interval = 1;
    long count = 1; /* tables to print; --watch: until interrupted */
    bool watch = false;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--json") == 0) {
            as_json = true;
        } else if ((strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "--interval") == 0) &&
                   i + 1 < argc) {
            if (argv[i][2] == 'w')
                watch = true;
            interval = strtod(argv[++i], &end);
            if (*end || !(interval >= 0.1 && interval <= 3600)) {
                fprintf(stderr, "linerate-ctl: stats: %s: expected 0.1..3600 seconds\n",
                        argv[i - 1]);
                return CTL_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = strtol(argv[++i], &end, 10);
            if (*end || count < 1) {
                fprintf(stderr, "linerate-ctl: stats: --count: expected a number >= 1\n");
                return CTL_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--raw") == 0) {
            json_t *s;
            int rc = snapshot(path, wait_s, &s);
            if (rc == CTL_EXIT_OK) {
                char *t = json_dumps(s, JSON_INDENT(2));
                printf("%s\n", t ? t : "");
                free(t);
                json_decref(s);
            }
            return rc;
        } else {
            fprintf(stderr, "linerate-ctl: usage: stats [--watch SECONDS [--count N]] [--interval "
                            "SECONDS] [--json] [--raw]\n");
            return CTL_EXIT_USAGE;
        }
    }
    if (watch && count == 1) {
        bool given = false;
        for (int i = 1; i < argc; i++)
            given |= strcmp(argv[i], "--count") == 0;
        if (!given)
            count = -1;
    }
    json_t *prev;
    int rc = snapshot(path, wait_s, &prev);
    if (rc != CTL_EXIT_OK)
        return rc;
    for (long n = 0; count < 0 || n < count; n++) {
        sleep_s(interval);
        json_t *cur;
        rc = snapshot(path, wait_s, &cur);
        if (rc != CTL_EXIT_OK)
            break;
        if (watch && !as_json && n)
            fputc('\n', stdout);
        report(stdout, prev, cur, as_json);
        json_decref(prev);
        prev = cur;
    }
    json_decref(prev);
    return rc;
}
