/* linerate-ctl's human-readable output: one table per kind of answer, columns sized to their
 * contents. --json prints the result as the daemon sent it instead (app/ctl_main.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"

#define COLS_MAX 10

/* A table built row by row, printed with each column as wide as its widest cell. */
struct table {
    unsigned ncols, nrows;
    char **cells; /* nrows * ncols */
};

static void table_row(struct table *t, const char *const *cells)
{
    char **grown = realloc(t->cells, (size_t)(t->nrows + 1) * t->ncols * sizeof(*grown));
    if (!grown)
        return;
    t->cells = grown;
    for (unsigned c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = strdup(cells[c] ? cells[c] : "");
    t->nrows++;
}

static void table_print(FILE *out, struct table *t)
{
    size_t w[COLS_MAX] = {0};
    for (unsigned r = 0; r < t->nrows; r++)
        for (unsigned c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            size_t n = s ? strlen(s) : 0;
            if (n > w[c])
                w[c] = n;
        }
    for (unsigned r = 0; r < t->nrows; r++) {
        for (unsigned c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            if (c + 1 == t->ncols)
                fprintf(out, "%s\n", s ? s : "");
            else
                fprintf(out, "%-*s  ", (int)w[c], s ? s : "");
            free(t->cells[r * t->ncols + c]);
        }
    }
    free(t->cells);
    t->cells = NULL;
    t->nrows = 0;
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static long long num(json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

static bool flag(json_t *o, const char *k)
{
    return json_is_true(json_object_get(o, k));
}

static const char *human_bytes(unsigned long long b, char *buf, size_t len)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    snprintf(buf, len, i ? "%.4g %s" : "%.0f %s", v, u[i]);
    return buf;
}

static const char *human_age(double s, char *buf, size_t len)
{
    long long t = (long long)s;
    if (t < 60)
        snprintf(buf, len, "%llds", t);
    else if (t < 3600)
        snprintf(buf, len, "%lldm%02llds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, len, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, len, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
    return buf;
}

static char *join(json_t *arr)
{
    size_t len = 1;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) len +=
        strlen(json_string_value(v) ? json_string_value(v) : "") + 1;
    char *s = calloc(1, len);
    if (!s)
        return NULL;
    json_array_foreach(arr, i, v)
    {
        if (i)
            strcat(s, ",");
        strcat(s, json_string_value(v) ? json_string_value(v) : "");
    }
    return s;
}

static void print_targets(FILE *out, json_t *r)
{
    struct table t = {.ncols = 6};
    table_row(&t, (const char *[]){"TARGET", "ALIAS", "PORTALS", "LUNS", "SESSIONS", "ACCESS"});
    size_t i;
    json_t *o;
    json_array_foreach(r, i, o)
    {
        char *portals = join(json_object_get(o, "portals"));
        char *allow = join(json_object_get(o, "allow"));
        char luns[16], sess[32], access[512];
        snprintf(luns, sizeof(luns), "%lld", num(o, "luns"));
        snprintf(sess, sizeof(sess), "%lld%s", num(o, "sessions"),
                 flag(o, "draining") ? " (draining)" : "");
        char entries[64] = "";
        if (num(o, "host_entries"))
            snprintf(entries, sizeof(entries), "%s%lld host entr%s", allow && *allow ? ", " : "",
                     num(o, "host_entries"), num(o, "host_entries") == 1 ? "y" : "ies");
        snprintf(access, sizeof(access), "%s%s%s",
                 allow && *allow      ? allow
                 : entries[0] == '\0' ? "everyone"
                                      : "",
                 entries, flag(o, "chap") ? " (CHAP)" : "");
        table_row(&t, (const char *[]){str(o, "name"), *str(o, "alias") ? str(o, "alias") : "-",
                                       portals, luns, sess, access});
        free(portals);
        free(allow);
    }
    table_print(out, &t);
}

static void lun_row(struct table *t, json_t *o)
{
    char lun[16], size[32], bs[16], cmds[24];
    const char *alua = str(json_object_get(o, "alua"), "state");
    snprintf(lun, sizeof(lun), "%lld", num(o, "lun"));
    human_bytes((unsigned long long)num(o, "bytes"), size, sizeof(size));
    snprintf(bs, sizeof(bs), "%lld", num(o, "block_size"));
    snprintf(cmds, sizeof(cmds), "%lld", num(o, "commands"));
    const char *limits = str(json_object_get(o, "limits"), "text");
    table_row(t,
              (const char *[]){str(o, "target"), lun, size, bs, flag(o, "read_only") ? "ro" : "rw",
                               *alua ? alua : "-", cmds, *limits ? limits : "-", str(o, "store")});
}

static const char *const lun_head[] = {"TARGET", "LUN",       "SIZE",   "BLOCK", "MODE",
                                       "ALUA",   "IN-FLIGHT", "LIMITS", "STORE"};

static void print_luns(FILE *out, json_t *r)
{
    struct table t = {.ncols = 9};
    table_row(&t, lun_head);
    size_t i;
    json_t *o;
    json_array_foreach(r, i, o) lun_row(&t, o);
    table_print(out, &t);
}

static void print_sessions(FILE *out, json_t *r)
{
    if (json_array_size(r) == 0) {
        fprintf(out, "no sessions\n");
        return;
    }
    size_t i;
    json_t *s;
    json_array_foreach(r, i, s)
    {
        char age[32];
        json_t *p = json_object_get(s, "parameters");
        char chap[300] = "";
        if (str(s, "chap_user")[0])
            snprintf(chap, sizeof(chap), "CHAP user %s  ", str(s, "chap_user"));
        fprintf(out, "TSIH %lld  %s  ISID %s  %s%s%s  age %s  commands in flight %lld\n",
                num(s, "tsih"), str(s, "initiator"), str(s, "isid"), chap,
                strcmp(str(s, "type"), "discovery") == 0 ? "discovery session" : "target ",
                strcmp(str(s, "type"), "discovery") == 0 ? "" : str(s, "target"),
                human_age(json_real_value(json_object_get(s, "age_seconds")), age, sizeof(age)),
                num(s, "commands_in_flight"));
        fprintf(out,
                "  HeaderDigest=%s DataDigest=%s ErrorRecoveryLevel=%lld MaxConnections=%lld "
                "InitialR2T=%s ImmediateData=%s\n"
                "  MaxRecvDataSegmentLength=%lld (initiator %lld) MaxBurstLength=%lld "
                "FirstBurstLength=%lld MaxOutstandingR2T=%lld\n",
                flag(p, "header_digest") ? "CRC32C" : "None",
                flag(p, "data_digest") ? "CRC32C" : "None", num(p, "error_recovery_level"),
                num(p, "max_connections"), flag(p, "initial_r2t") ? "Yes" : "No",
                flag(p, "immediate_data") ? "Yes" : "No", num(p, "max_recv_data_segment_length"),
                num(p, "initiator_max_recv_data_segment_length"), num(p, "max_burst_length"),
                num(p, "first_burst_length"), num(p, "max_outstanding_r2t"));
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(s, "connections"), k, c)
        {
            fprintf(out, "  CID %lld  %s -> %s  reactor %lld  digests %s/%s\n", num(c, "cid"),
                    str(c, "peer"), str(c, "portal"), num(c, "reactor"), str(c, "header_digest"),
                    str(c, "data_digest"));
        }
    }
}

static void print_connections(FILE *out, json_t *r)
{
    struct table t = {.ncols = 8};
    table_row(&t, (const char *[]){"TSIH", "CID", "INITIATOR", "PEER", "PORTAL", "REACTOR",
                                   "HDIGEST", "DDIGEST"});
    size_t i;
    json_t *c;
    json_array_foreach(r, i, c)
    {
        char tsih[16], cid[16], re[16];
        snprintf(tsih, sizeof(tsih), "%lld", num(c, "tsih"));
        snprintf(cid, sizeof(cid), "%lld", num(c, "cid"));
        snprintf(re, sizeof(re), "%lld", num(c, "reactor"));
        table_row(&t,
                  (const char *[]){tsih, cid, str(c, "initiator"), str(c, "peer"), str(c, "portal"),
                                   re, str(c, "header_digest"), str(c, "data_digest")});
    }
    table_print(out, &t);
}

static void print_portals(FILE *out, json_t *r)
{
    struct table t = {.ncols = 4};
    table_row(&t, (const char *[]){"PORTAL", "TPGT", "STATE", "TARGETS"});
    size_t i;
    json_t *o;
    json_array_foreach(r, i, o)
    {
        char tpgt[16];
        snprintf(tpgt, sizeof(tpgt), "%lld", num(o, "tpgt"));
        char *targets = join(json_object_get(o, "targets"));
        table_row(&t, (const char *[]){str(o, "portal"), tpgt,
                                       flag(o, "listening") ? "listening" : "closed", targets});
        free(targets);
    }
    table_print(out, &t);
}

/* One row per entry: its maps as HOST=TARGET[ro] */
static void print_hosts(FILE *out, json_t *r)
{
    struct table t = {.ncols = 5};
    table_row(&t, (const char *[]){"TARGET", "ENTRY", "INITIATORS", "MAP (HOST=TARGET)", "CHAP"});
    size_t i;
    json_t *o;
    json_array_foreach(r, i, o)
    {
        char entry[128], map[1024] = "", chap[160];
        snprintf(entry, sizeof(entry), "%s %s", str(o, "kind"), str(o, "name"));
        size_t off = 0, k;
        json_t *m;
        json_array_foreach(json_object_get(o, "maps"), k, m)
        {
            if (off < sizeof(map))
                off += (size_t)snprintf(map + off, sizeof(map) - off, "%s%lld=%lld%s", k ? " " : "",
                                        num(m, "host_lun"), num(m, "lun"),
                                        flag(m, "read_only") ? "(ro)" : "");
        }
        snprintf(chap, sizeof(chap), "%s%s%s", *str(o, "chap_user") ? str(o, "chap_user") : "-",
                 *str(o, "chap_mutual_user") ? ", mutual " : "", str(o, "chap_mutual_user"));
        char *inis = join(json_object_get(o, "initiators"));
        table_row(&t, (const char *[]){str(o, "target"), entry, inis ? inis : "",
                                       map[0] ? map : "-", chap});
        free(inis);
    }
    table_print(out, &t);
}

/* The sessions of initiators a change shut out (add allow, the entry verbs), if any. */
static void shut_out(FILE *out, json_t *r, const char *what)
{
    if (num(r, "sessions"))
        fprintf(out, "%lld session%s of initiators no longer %s %s\n", num(r, "sessions"),
                num(r, "sessions") == 1 ? "" : "s", what,
                flag(r, "sessions_ended") ? "logged out"
                : num(r, "sessions") == 1 ? "carries on (--force logs it out)"
                                          : "carry on (--force logs them out)");
}

void ctl_print_result(FILE *out, const char *kind, json_t *r)
{
    if (strcmp(kind, "targets") == 0) {
        print_targets(out, r);
    } else if (strcmp(kind, "luns") == 0) {
        print_luns(out, r);
    } else if (strcmp(kind, "lun") == 0) {
        struct table t = {.ncols = 9};
        table_row(&t, lun_head);
        lun_row(&t, r);
        table_print(out, &t);
    } else if (strcmp(kind, "alua") == 0) {
        fprintf(out, "target %s: ALUA group %lld %s (%lld LUN%s changed)\n", str(r, "target"),
                num(r, "group"), str(r, "state"), num(r, "luns_changed"),
                num(r, "luns_changed") == 1 ? "" : "s");
    } else if (strcmp(kind, "sessions") == 0) {
        print_sessions(out, r);
    } else if (strcmp(kind, "connections") == 0) {
        print_connections(out, r);
    } else if (strcmp(kind, "portals") == 0) {
        print_portals(out, r);
    } else if (strcmp(kind, "hosts") == 0) {
        print_hosts(out, r);
    } else if (strcmp(kind, "removed") == 0) {
        if (flag(r, "closed"))
            fprintf(out, "target %s: LUN %lld removed (waited %lld ms for its commands)\n",
                    str(r, "target"), num(r, "lun"), num(r, "waited_ms"));
        else
            fprintf(out,
                    "target %s: LUN %lld removed; %lld commands still hold it, its store "
                    "closes when they end\n",
                    str(r, "target"), num(r, "lun"), num(r, "commands_left"));
    } else if (strcmp(kind, "logout") == 0) {
        fprintf(out, "session TSIH %lld: %s (%lld ms)\n", num(r, "tsih"),
                flag(r, "forced") ? "no logout in time; its connections were closed" : "logged out",
                num(r, "waited_ms"));
    } else if (strcmp(kind, "dropped") == 0) {
        fprintf(out, "session TSIH %lld: connection CID %lld closed\n", num(r, "tsih"),
                num(r, "cid"));
    } else if (strcmp(kind, "log-level") == 0) {
        fprintf(out, "log level %s (was %s)\n", str(r, "level"), str(r, "was"));
    } else if (strcmp(kind, "reload") == 0) {
        size_t i;
        json_t *v;
        fprintf(out, "reloaded %s\n", str(r, "config"));
        json_array_foreach(json_object_get(r, "applied"), i, v)
            fprintf(out, "  applied: %s\n", json_string_value(v));
        json_array_foreach(json_object_get(r, "needs_restart"), i, v)
            fprintf(out, "  not applied (needs a restart): %s\n", json_string_value(v));
        if (!json_array_size(json_object_get(r, "applied")) &&
            !json_array_size(json_object_get(r, "needs_restart")))
            fprintf(out, "  no change\n");
    } else if (strcmp(kind, "add_portal") == 0) {
        fprintf(out, "target %s: portal %s added (listening)\n", str(r, "target"),
                str(r, "portal"));
    } else if (strcmp(kind, "remove_portal") == 0) {
        fprintf(out, "target %s: portal %s removed%s; %lld session%s on it carr%s on\n",
                str(r, "target"), str(r, "portal"),
                flag(r, "listener_closed") ? ", its listener closed" : "", num(r, "sessions_on_it"),
                num(r, "sessions_on_it") == 1 ? "" : "s",
                num(r, "sessions_on_it") == 1 ? "ies" : "y");
    } else if (strcmp(kind, "add_allow") == 0) {
        fprintf(out, "target %s: %s allowed%s\n", str(r, "target"), str(r, "initiator"),
                flag(r, "was_open") ? " (the target was open to every initiator: now only to "
                                      "those allowed)"
                                    : "");
        /* the sessions of the initiators that closing it left out */
        shut_out(out, r, "allowed");
    } else if (strcmp(kind, "remove_allow") == 0) {
        fprintf(out,
                "target %s: %s no longer allowed; %lld session%s of initiators no longer "
                "allowed %s\n",
                str(r, "target"), str(r, "initiator"), num(r, "sessions"),
                num(r, "sessions") == 1 ? "" : "s",
                flag(r, "sessions_ended") ? "logged out"
                : num(r, "sessions") == 1 ? "carries on (--force logs it out)"
                                          : "carry on (--force logs them out)");
    } else if (strcmp(kind, "host") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(r, "applied"), i, v)
            fprintf(out, "%s\n", json_string_value(v));
        shut_out(out, r, "admitted");
    } else if (strcmp(kind, "saved") == 0) {
        size_t i;
        json_t *v;
        fprintf(out, "saved %s: %lld lines kept, %lld changed, %lld added, %lld removed\n",
                str(r, "file"), num(r, "lines_kept"), num(r, "lines_changed"),
                num(r, "lines_added"), num(r, "lines_removed"));
        json_array_foreach(json_object_get(r, "differences"), i, v)
            fprintf(out, "  still differs from what runs: %s\n", json_string_value(v));
    } else if (strcmp(kind, "target-added") == 0) {
        char *portals = join(json_object_get(r, "portals"));
        fprintf(out, "target %s added on %s with %lld LUN%s\n", str(r, "target"),
                portals ? portals : "", num(r, "luns"), num(r, "luns") == 1 ? "" : "s");
        free(portals);
    } else if (strcmp(kind, "target-removed") == 0) {
        fprintf(out, "target %s removed (%lld session%s ended, %lld LUN%s removed%s)\n",
                str(r, "target"), num(r, "sessions_ended"),
                num(r, "sessions_ended") == 1 ? "" : "s", num(r, "luns_removed"),
                num(r, "luns_removed") == 1 ? "" : "s",
                num(r, "commands_left") ? "; some commands still hold a store" : "");
    } else if (strcmp(kind, "version") == 0) {
        fprintf(out, "linerate-target %s, pid %lld, %lld reactor threads, log level %s\n",
                str(r, "version"), num(r, "pid"), num(r, "reactors"), str(r, "log_level"));
    } else {
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_ENCODE_ANY);
        fprintf(out, "%s\n", s ? s : "");
        free(s);
    }
}
