/* linerate-bench output: the seed's table (one row per size and op, one MB/s column per
 * digest/connections configuration, then IOPS, latency and CPU per KB), csv, json, and an SVG
 * of MB/s against block size (log x axis), one line per configuration. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *bench_rw_name(enum bench_rw rw)
{
    static const char *names[RW_COUNT] = {"read", "write", "randread", "randwrite", "mixed"};
    return rw < RW_COUNT ? names[rw] : "?";
}

static void size_name(uint32_t size, char *buf, size_t len)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, len, "%um", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%uk", size >> 10);
    else
        snprintf(buf, len, "%u", size);
}

/* An empty field for "unknown" (csv/json null). */
static void num(FILE *f, double v, const char *fmt, const char *empty)
{
    if (isnan(v))
        fputs(empty, f);
    else
        fprintf(f, fmt, v);
}

static void report_csv(const struct bench_cell *cells, unsigned n)
{
    printf("size,rw,digest,connections,qd,mb_per_s,iops,lat_p50_us,lat_p99_us,"
           "initiator_us_per_kb,target_us_per_kb\n");
    for (unsigned i = 0; i < n; i++) {
        const struct bench_cell *c = &cells[i];
        printf("%u,%s,%s,%u,%u,", c->size, bench_rw_name(c->rw), c->digest ? "on" : "off", c->conns,
               c->qd);
        num(stdout, c->mb_per_s, "%.2f", "");
        putchar(',');
        num(stdout, c->iops, "%.0f", "");
        putchar(',');
        num(stdout, c->p50_us, "%.1f", "");
        putchar(',');
        num(stdout, c->p99_us, "%.1f", "");
        putchar(',');
        num(stdout, c->ini_us_per_kb, "%.3f", "");
        putchar(',');
        num(stdout, c->tgt_us_per_kb, "%.3f", "");
        putchar('\n');
    }
}

static void report_json(const struct bench_cell *cells, unsigned n)
{
    printf("[\n");
    for (unsigned i = 0; i < n; i++) {
        const struct bench_cell *c = &cells[i];
        printf("  {\"size\": %u, \"rw\": \"%s\", \"digest\": \"%s\", \"connections\": %u, "
               "\"connections_asked\": %u, \"qd\": %u, \"mb_per_s\": ",
               c->size, bench_rw_name(c->rw), c->digest ? "on" : "off", c->conns, c->conns_asked,
               c->qd);
        num(stdout, c->mb_per_s, "%.2f", "null");
        printf(", \"iops\": ");
        num(stdout, c->iops, "%.0f", "null");
        printf(", \"lat_p50_us\": ");
        num(stdout, c->p50_us, "%.1f", "null");
        printf(", \"lat_p99_us\": ");
        num(stdout, c->p99_us, "%.1f", "null");
        printf(", \"initiator_us_per_kb\": ");
        num(stdout, c->ini_us_per_kb, "%.3f", "null");
        printf(", \"target_us_per_kb\": ");
        num(stdout, c->tgt_us_per_kb, "%.3f", "null");
        printf(", \"errors\": %llu, \"conns_cut\": %llu, \"digests_corrupted\": %llu, "
               "\"pdus_dropped\": %llu}%s\n",
               (unsigned long long)c->errors, (unsigned long long)c->conns_cut,
               (unsigned long long)c->digests_corrupted, (unsigned long long)c->pdus_dropped,
               i + 1 < n ? "," : "");
    }
    printf("]\n");
}

/* Configurations (digest x connections) in the order they ran. */
struct config {
    bool digest_asked, digest;
    uint32_t conns_asked, conns;
};

static unsigned configs(const struct bench_cell *cells, unsigned n, struct config *out,
                        unsigned max)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned j;
        for (j = 0; j < k; j++)
            if (out[j].digest_asked == cells[i].digest_asked &&
                out[j].conns_asked == cells[i].conns_asked)
                break;
        if (j == k && k < max)
            out[k++] = (struct config){cells[i].digest_asked, cells[i].digest, cells[i].conns_asked,
                                       cells[i].conns};
    }
    return k;
}

static void conn_label(const struct config *cf, char *b, size_t len)
{
    if (cf->conns != cf->conns_asked)
        snprintf(b, len, "%u of %u conns", cf->conns, cf->conns_asked);
    else
        snprintf(b, len, "%u conn%s", cf->conns, cf->conns == 1 ? "" : "s");
}

static const struct bench_cell *find(const struct bench_cell *cells, unsigned n,
                                     const struct config *cf, uint32_t size, enum bench_rw rw)
{
    for (unsigned i = 0; i < n; i++)
        if (cells[i].digest_asked == cf->digest_asked && cells[i].conns_asked == cf->conns_asked &&
            cells[i].size == size && cells[i].rw == rw)
            return &cells[i];
    return NULL;
}

static void report_table(const struct bench_opts *o, const struct bench_cell *cells, unsigned n)
{
    struct config cf[2 * BENCH_MAX_LIST];
    unsigned ncf = configs(cells, n, cf, 2 * BENCH_MAX_LIST);
    printf("%-14s", "Test");
    for (unsigned j = 0; j < ncf; j++)
        printf(" %-14s", cf[j].digest         ? "digest on"
                         : cf[j].digest_asked ? "digest refused"
                                              : "digest off");
    printf("\n%-14s", "");
    for (unsigned j = 0; j < ncf; j++) {
        char b[32];
        conn_label(&cf[j], b, sizeof(b));
        printf(" %-14s", b);
    }
    printf("\n%-14s", "");
    for (unsigned j = 0; j < ncf; j++)
        printf(" %-14s", "(MB/sec)");
    printf("\n");
    for (unsigned i = 0; i < 14 + 15 * ncf; i++)
        putchar('=');
    printf("\n");
    for (unsigned r = 0; r < o->nrws; r++) {
        for (unsigned s = 0; s < o->nsizes; s++) {
            char sz[16], row[40];
            size_name(o->sizes[s], sz, sizeof(sz));
            snprintf(row, sizeof(row), "%s-%s", sz, bench_rw_name(o->rws[r]));
            printf("%-14s", row);
            for (unsigned j = 0; j < ncf; j++) {
                const struct bench_cell *c = find(cells, n, &cf[j], o->sizes[s], o->rws[r]);
                if (c && !isnan(c->mb_per_s))
                    printf(" %-14.2f", c->mb_per_s);
                else
                    printf(" %-14s", "-");
            }
            printf("\n");
        }
        printf("\n");
    }
    printf("%-14s %-9s %-6s %10s %10s %10s %10s %10s\n", "Test", "digest", "conns", "IOPS",
           "p50 us", "p99 us", "ini us/KB", "tgt us/KB");
    for (unsigned i = 0; i < n; i++) {
        const struct bench_cell *c = &cells[i];
        if (!c->ran)
            continue;
        char sz[16], row[40];
        size_name(c->size, sz, sizeof(sz));
        snprintf(row, sizeof(row), "%s-%s", sz, bench_rw_name(c->rw));
        printf("%-14s %-9s %-6u ", row, c->digest ? "on" : "off", c->conns);
        double v[5] = {c->iops, c->p50_us, c->p99_us, c->ini_us_per_kb, c->tgt_us_per_kb};
        const char *fmt[5] = {"%10.0f ", "%10.1f ", "%10.1f ", "%10.3f ", "%10.3f "};
        for (int k = 0; k < 5; k++)
            num(stdout, v[k], fmt[k], "         - ");
        printf("\n");
    }
}

void bench_inject_summary(FILE *f, const struct bench_opts *o, const struct bench_cell *cells,
                          unsigned n)
{
    uint64_t cut = 0, corrupted = 0, dropped = 0, failed = 0;
    unsigned ran = 0;
    for (unsigned i = 0; i < n; i++) {
        ran += cells[i].ran;
        cut += cells[i].conns_cut;
        corrupted += cells[i].digests_corrupted;
        dropped += cells[i].pdus_dropped;
        failed += cells[i].errors;
    }
    char what[160];
    inject_format(&o->inject, what, sizeof(what));
    fprintf(f, "Injected: %s over %u cell%s:", what, ran, ran == 1 ? "" : "s");
    if (o->inject.kill_conn_s > 0)
        fprintf(f, " %llu connection%s cut,", (unsigned long long)cut, cut == 1 ? "" : "s");
    if (o->inject.digest_error > 0)
        fprintf(f, " %llu data digest%s corrupted,", (unsigned long long)corrupted,
                corrupted == 1 ? "" : "s");
    if (o->inject.drop_pdu > 0)
        fprintf(f, " %llu PDU%s dropped,", (unsigned long long)dropped, dropped == 1 ? "" : "s");
    fprintf(f, " %llu command%s failed (ErrorRecoveryLevel %u)\n", (unsigned long long)failed,
            failed == 1 ? "" : "s", o->erl);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n-1] */
static double pct(const double *v, unsigned n, double p)
{
    unsigned k = (unsigned)ceil(p / 100.0 * n);
    return v[k ? k - 1 : 0];
}

void bench_stall_summary(FILE *f, const struct bench_stall *st, unsigned n, uint64_t unmeasured,
                         uint64_t recovered)
{
    fprintf(f,
            "Recovery: %llu command%s carried over to another connection (TASK REASSIGN or "
            "retry); ",
            (unsigned long long)recovered, recovered == 1 ? "" : "s");
    if (!n) {
        fprintf(f, "no cut stalled a command (%llu cut%s had none to recover)\n",
                (unsigned long long)unmeasured, unmeasured == 1 ? "" : "s");
        return;
    }
    double *a = malloc(n * sizeof(*a)), *b = malloc(n * sizeof(*b));
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        a[i] = st[i].first_ms;
        b[i] = st[i].last_ms;
    }
    qsort(a, n, sizeof(*a), cmp_double);
    qsort(b, n, sizeof(*b), cmp_double);
    fprintf(f,
            "stall after a cut, %u cut%s measured (%llu had no command to recover): cut to the "
            "first recovered completion median %.1f ms, p90 %.1f ms, max %.1f ms; to the last "
            "median %.1f ms, p90 %.1f ms, max %.1f ms\n",
            n, n == 1 ? "" : "s", (unsigned long long)unmeasured, pct(a, n, 50), pct(a, n, 90),
            a[n - 1], pct(b, n, 50), pct(b, n, 90), b[n - 1]);
    free(a);
    free(b);
}

void bench_report(const struct bench_opts *o, const struct bench_cell *cells, unsigned n)
{
    switch (o->fmt) {
    case FMT_CSV:
        report_csv(cells, n);
        break;
    case FMT_JSON:
        report_json(cells, n);
        break;
    case FMT_TABLE:
        report_table(o, cells, n);
        if (inject_any(&o->inject)) {
            printf("\n");
            bench_inject_summary(stdout, o, cells, n);
        }
        break;
    }
    if (inject_any(&o->inject)) {
        fputs("linerate-bench: ", stderr);
        bench_inject_summary(stderr, o, cells, n);
    }
    fflush(stdout);
}

/* ---- SVG ---- */

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static double nice_ceiling(double v)
{
    if (v <= 0)
        return 1;
    double p = pow(10, floor(log10(v)));
    double steps[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
    for (int i = 0; i < 10; i++)
        if (steps[i] * p >= v)
            return steps[i] * p;
    return 10 * p;
}

int bench_svg(const char *path, const struct bench_opts *o, const struct bench_cell *cells,
              unsigned n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    const double W = 900, H = 560, L = 80, R = 260, T = 50, B = 70;
    const double pw = W - L - R, ph = H - T - B;
    uint32_t smin = UINT32_MAX, smax = 0;
    double ymax = 0;
    for (unsigned i = 0; i < n; i++) {
        if (cells[i].size < smin)
            smin = cells[i].size;
        if (cells[i].size > smax)
            smax = cells[i].size;
        if (!isnan(cells[i].mb_per_s) && cells[i].mb_per_s > ymax)
            ymax = cells[i].mb_per_s;
    }
    ymax = nice_ceiling(ymax * 1.05);
    double lx0 = log2(smin), lx1 = log2(smax);
    if (lx1 <= lx0)
        lx1 = lx0 + 1;
#define X(sz) (L + (log2((double)(sz)) - lx0) / (lx1 - lx0) * pw)
#define Y(v) (T + ph - (v) / ymax * ph)
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"%.0f\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">linerate-bench: "
            "%s/%llu, qd %u, %u session%s</text>\n",
            L + pw / 2, o->url.target, (unsigned long long)o->url.lun, o->qd, o->sessions,
            o->sessions == 1 ? "" : "s");
    /* axes, grid and ticks */
    fprintf(f,
            "<g stroke=\"#000\" fill=\"none\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
            "y2=\"%.1f\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            L, T + ph, L + pw, T + ph, L, T, L, T + ph);
    for (int k = 0; k <= 5; k++) {
        double v = ymax * k / 5, y = Y(v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                y, L + pw, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 6, y + 4,
                v);
    }
    for (unsigned s = 0; s < o->nsizes; s++) {
        char sz[16];
        size_name(o->sizes[s], sz, sizeof(sz));
        double x = X(o->sizes[s]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x,
                T + ph, x, T + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, T + ph + 20,
                sz);
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">block size (bytes, log "
            "scale)</text>\n",
            L + pw / 2, H - 20);
    fprintf(f,
            "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
            "%.1f)\">MB/s</text>\n",
            T + ph / 2, T + ph / 2);
    /* one line per configuration and op */
    struct config cf[2 * BENCH_MAX_LIST];
    unsigned ncf = configs(cells, n, cf, 2 * BENCH_MAX_LIST), line = 0;
    for (unsigned j = 0; j < ncf; j++)
        for (unsigned r = 0; r < o->nrws; r++, line++) {
            const char *color = palette[line % (sizeof(palette) / sizeof(palette[0]))];
            const char *dash = o->rws[r] == RW_WRITE || o->rws[r] == RW_RANDWRITE ? "6,3" : "";
            fprintf(f,
                    "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                    "stroke-dasharray=\"%s\" points=\"",
                    color, dash);
            for (unsigned s = 0; s < o->nsizes; s++) {
                const struct bench_cell *c = find(cells, n, &cf[j], o->sizes[s], o->rws[r]);
                if (c && !isnan(c->mb_per_s))
                    fprintf(f, "%.1f,%.1f ", X(c->size), Y(c->mb_per_s));
            }
            fprintf(f, "\"/>\n");
            for (unsigned s = 0; s < o->nsizes; s++) {
                const struct bench_cell *c = find(cells, n, &cf[j], o->sizes[s], o->rws[r]);
                if (c && !isnan(c->mb_per_s))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                            X(c->size), Y(c->mb_per_s), color);
            }
            double ly = T + 10 + line * 20;
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n",
                    L + pw + 20, ly, L + pw + 50, ly, color, dash);
            char conns[32];
            conn_label(&cf[j], conns, sizeof(conns));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s, digest %s, %s</text>\n", L + pw + 56,
                    ly + 4, bench_rw_name(o->rws[r]),
                    cf[j].digest         ? "on"
                    : cf[j].digest_asked ? "refused"
                                         : "off",
                    conns);
        }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return fclose(f);
}
