/* linerate-ctl import lio FILE --check: what a running linerate serves against what the LIO
 * configuration says hosts see: every LUN's identity (INQUIRY vendor, product, revision; VPD
 * 80h serial; VPD 83h NAA) and read-only state, every ACL's map and CHAP user, and nothing
 * more (a LUN or an entry the source lacks is a difference too). Asked through show_luns and
 * show_hosts (docs/ctl-protocol.md). */
#include <stdio.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/lio.h"

/* The daemon's answer to `method`, or NULL with the reason in err. */
static json_t *ask(const char *socket, const char *method, unsigned wait_s, char *err,
                   size_t errlen)
{
    json_t *resp, *params = json_object();
    int rc = ctl_call(socket, method, params, wait_s, &resp, err, errlen);
    json_decref(params);
    if (rc < 0)
        return NULL;
    json_t *res = json_incref(json_object_get(resp, "result"));
    if (!json_is_array(res)) {
        const char *m =
            json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
        snprintf(err, errlen, "%s: %s", method, m ? m : "no array in the answer");
        json_decref(res);
        res = NULL;
    }
    json_decref(resp);
    return res;
}

/* INQUIRY pads with spaces; the daemon may report a field padded or not. */
static bool same_text(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    while (na && a[na - 1] == ' ')
        na--;
    while (nb && b[nb - 1] == ' ')
        nb--;
    return na == nb && strncmp(a, b, na) == 0;
}

static void compare_lun(const char *t, const char *n, json_t *want, json_t *got, FILE *out,
                        int *diffs)
{
    static const char *const fields[] = {"vendor", "product", "revision",
                                         "serial", "naa",     "vpd_style"};
    json_t *id = json_object_get(got, "identity");
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const char *w = json_string_value(json_object_get(want, fields[i]));
        const char *g = json_string_value(json_object_get(id, fields[i]));
        if (w && (!g || !same_text(w, g))) {
            fprintf(out, "target %s LUN %s: %s '%s', LIO answered '%s'\n", t, n, fields[i],
                    g ? g : "(none)", w);
            (*diffs)++;
        }
    }
    if (json_is_true(json_object_get(want, "read_only")) !=
        json_is_true(json_object_get(got, "read_only"))) {
        fprintf(out, "target %s LUN %s: read-only differs from LIO\n", t, n);
        (*diffs)++;
    }
}

static void compare_host(const char *t, const char *h, json_t *want, json_t *got, FILE *out,
                         int *diffs)
{
    const char *wu = json_string_value(json_object_get(want, "chap_user"));
    const char *gu = json_string_value(json_object_get(got, "chap_user"));
    if ((wu || gu) && (!wu || !gu || strcmp(wu, gu) != 0)) {
        fprintf(out, "target %s host %s: CHAP user '%s', LIO had '%s'\n", t, h, gu ? gu : "",
                wu ? wu : "");
        (*diffs)++;
    }
    json_t *wmaps = json_object_get(want, "maps"), *seen = json_object();
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(got, "maps"), i, m)
    {
        char k[32];
        snprintf(k, sizeof(k), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(m, "host_lun")));
        json_object_set_new(seen, k, json_true());
        json_t *w = json_object_get(wmaps, k);
        if (!w ||
            json_integer_value(json_object_get(w, "lun")) !=
                json_integer_value(json_object_get(m, "lun")) ||
            json_is_true(json_object_get(w, "read_only")) !=
                json_is_true(json_object_get(m, "read_only"))) {
            fprintf(out, "target %s host %s: its LUN %s is not what LIO mapped\n", t, h, k);
            (*diffs)++;
        }
    }
    const char *k;
    json_t *w;
    json_object_foreach(wmaps, k, w)
    {
        if (!json_object_get(seen, k)) {
            fprintf(out, "target %s host %s: LUN %s that LIO mapped is missing\n", t, h, k);
            (*diffs)++;
        }
    }
    json_decref(seen);
}

/* The LUNs or hosts (`kind`) of target t in the source that the daemon does not serve. */
static int missing(json_t *served, const char *t, json_t *members, const char *kind, FILE *out)
{
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(members, k, v)
    {
        /* a key cut short is no served one (the daemon's names fit): missing */
        char key[600];
        int kn = snprintf(key, sizeof(key), "%s %s %s", t, kind, k);
        if (kn < 0 || (size_t)kn >= sizeof(key) || !json_object_get(served, key)) {
            fprintf(out, "target %s %s %s: in the LIO configuration, not served\n", t, kind, k);
            n++;
        }
    }
    return n;
}

int lio_check(const char *socket, json_t *expect, unsigned wait_s, FILE *out, char *err,
              size_t errlen)
{
    json_t *luns = ask(socket, "show_luns", wait_s, err, errlen);
    json_t *hosts = luns ? ask(socket, "show_hosts", wait_s, err, errlen) : NULL;
    if (!hosts) {
        json_decref(luns);
        return -1;
    }
    int diffs = 0;
    json_t *served = json_object(); /* "TARGET LUN N" and "TARGET host NAME" seen */
    size_t i;
    json_t *v;
    json_array_foreach(luns, i, v)
    {
        const char *t = json_string_value(json_object_get(v, "target"));
        char n[32], key[600];
        snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(v, "lun")));
        if (snprintf(key, sizeof(key), "%s LUN %s", t ? t : "", n) < (int)sizeof(key))
            json_object_set_new(served, key, json_true()); /* (cut short: matches none) */
        json_t *want = json_object_get(json_object_get(json_object_get(expect, t), "luns"), n);
        if (!want) {
            fprintf(out, "target %s LUN %s: served, but not in the LIO configuration\n", t, n);
            diffs++;
            continue;
        }
        compare_lun(t, n, want, v, out, &diffs);
    }
    json_array_foreach(hosts, i, v)
    {
        const char *t = json_string_value(json_object_get(v, "target"));
        const char *h = json_string_value(json_object_get(v, "name"));
        char key[600];
        if (snprintf(key, sizeof(key), "%s host %s", t ? t : "", h ? h : "") < (int)sizeof(key))
            json_object_set_new(served, key, json_true());
        json_t *want = json_object_get(json_object_get(json_object_get(expect, t), "hosts"), h);
        if (!want) {
            fprintf(out, "target %s: entry %s is not an ACL of the LIO configuration\n", t, h);
            diffs++;
            continue;
        }
        compare_host(t, h, want, v, out, &diffs);
    }
    const char *t;
    json_t *tv;
    json_object_foreach(expect, t, tv)
    {
        diffs += missing(served, t, json_object_get(tv, "luns"), "LUN", out);
        diffs += missing(served, t, json_object_get(tv, "hosts"), "host", out);
    }
    json_decref(served);
    json_decref(luns);
    json_decref(hosts);
    return diffs;
}
