/* ceph-iscsi's gateway.conf, versions 3 to 11 (ceph-iscsi-config 2.x, ceph-iscsi 3.x), to one
 * linerate.conf per gateway host. What ceph-iscsi does with it, and so what a host saw:
 * - every disk is a LIO user:rbd storage object served by tcmu-runner (or, from version 5's
 *   `backstore`, perhaps the kernel's "rbd"), created on every gateway with the same `wwn`,
 *   which LIO keeps as the unit serial: VPD 80h is the wwn and VPD 83h the NAA LIO derives
 *   from it (lio_naa.c);
 * - each gateway has one TPG per address of the target's ip_list, tag = position + 1, only its
 *   own enabled: its TPGT and ALUA target port group; the disk's owner gateway is
 *   active/optimized for it, the others active/non-optimized;
 * - clients are node ACLs with LUN maps ("lun_id") and CHAP, host groups give their members
 *   one map; a target with acl_enabled false is LIO's demo mode: anyone, with the target's
 *   own CHAP; port 3260 everywhere.
 * The versions, as ceph_iscsi_config/common.py's _upgrade_config moves between them: 4 moved
 * version 3's one target (gateways.iqn, clients, groups and controls at the top) into
 * targets.IQN; 5 added each disk's `backstore`; 6 each target's `acl_enabled`; 7 keyed disks
 * "POOL/IMAGE" instead of "POOL.IMAGE"; 8 split the "USER/SECRET" strings into `username`,
 * `password` and `password_encryption_enabled` (and `mutual_` ones); 9 gave each gateway a
 * list, `portal_ip_addresses`; 10 named gateways by FQDN; 11 added the target's `auth` and
 * made its `disks` an object of `lun_id`s. All are read into one shape (a "view") first. What
 * has no linerate meaning goes to the report (issue 31 item 4). */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctl/ceph.h"
#include "ctl/ceph_auth.h"
#include "ctl/import_json.h"
#include "ctl/lio.h"

#define ISCSI_PORT 3260 /* ceph-iscsi's portals all listen there */

struct cctx {
    struct imp i;
    json_t *gateways; /* host -> object */
    json_t *disks;    /* "POOL.IMAGE" -> disk */
    json_t *views;    /* target IQN -> view (below) */
    json_t *served;   /* "POOL.IMAGE" -> the target IQN that serves it */
    const char *disc_user;
    bool chap_any;   /* discovery-chap-match = no is written (discovery_note) */
    bool tcmu_noted; /* the VPD layout note is in the report */
    const char *secrets_path;
    int version;
    char *disc_lines;  /* discovery-chap-* lines for every gateway */
    json_t *hosts_exp; /* the current target's entries as `expect` holds them (ceph.h) */
};

/* An address as linerate's portal line takes it: hex digits, '.' and ':' only. */
static bool addr_ok(const char *a)
{
    size_t n = strlen(a);
    return n && n < 64 && strspn(a, "0123456789abcdefABCDEF.:") == n;
}

/* The osd_op_timeout a disk's tcmu-runner config string carries: its control (a number, or
 * a string of digits), else ceph-iscsi's default, 30 (settings.py disk_default_controls). */
static const char *osd_op_timeout(json_t *d)
{
    static char buf[24];
    json_t *v = json_object_get(json_object_get(d, "controls"), "osd_op_timeout");
    const char *sv = json_is_string(v) ? json_string_value(v) : NULL;
    if (json_is_integer(v) && json_integer_value(v) > 0)
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
    else if (sv && *sv && strlen(sv) < sizeof(buf) && strspn(sv, "0123456789") == strlen(sv))
        snprintf(buf, sizeof(buf), "%s", sv);
    else
        snprintf(buf, sizeof(buf), "30");
    return buf;
}

/* One disk's LUN spec without its ALUA options, or NULL when it cannot be served. The identity
 * is LIO's for a user:rbd object: vendor LIO-ORG, product and revision as tcmu-runner's devices
 * answer them (as lio_import.c writes them), the wwn as serial, its NAA. */
static char *disk_spec(struct cctx *c, const char *key, json_t *d, const char *jp, json_t *ident)
{
    json_t *pool = imp_member(&c->i, d, jp, "pool", JSON_STRING, false);
    json_t *image = imp_member(&c->i, d, jp, "image", JSON_STRING, false);
    json_t *wwn = imp_member(&c->i, d, jp, "wwn", JSON_STRING, false);
    imp_member(&c->i, d, jp, "owner", JSON_STRING, false);
    /* version 5 names the backstore: "user:rbd" (tcmu-runner), or "rbd" (the kernel's
     * target_core_rbd of some distributions, which answers INQUIRY with LIO's own strings) */
    json_t *bs = imp_member(&c->i, d, jp, "backstore", JSON_STRING, false);
    if (c->i.failed)
        return NULL;
    const char *bsn = bs ? json_string_value(bs) : "user:rbd";
    if (strcmp(bsn, "user:rbd") != 0 && strcmp(bsn, "rbd") != 0) {
        imp_lost(&c->i, true, "%s: backstore '%s' is not one linerate serves: not served", jp, bsn);
        return NULL;
    }
    if (strcmp(bsn, "rbd") == 0)
        imp_lost(&c->i, true,
                 "%s: backstore 'rbd' (target_core_rbd): served as an RBD image with its serial "
                 "and NAA, but INQUIRY's product and revision are tcmu-runner's; set product= and "
                 "revision= on its LUN as a gateway answers them (sg_inq)",
                 jp);
    char pi[1024];
    int pn;
    /* the early version 3 disk had only wwn and owner: its key is "POOL.IMAGE" */
    if (pool && image)
        pn = snprintf(pi, sizeof(pi), "%s/%s", json_string_value(pool), json_string_value(image));
    else if (strchr(key, c->version >= 7 ? '/' : '.')) { /* version 7 keys disks "POOL/IMAGE" */
        const char *sep = strchr(key, c->version >= 7 ? '/' : '.');
        /* pools and images may hold dots: "a.b.c" could be a/b.c or a.b/c */
        if (c->version < 7 && strchr(sep + 1, '.')) {
            imp_lost(&c->i, true,
                     "%s: no 'pool' and 'image', and the key has more than one '.': which is "
                     "the pool and which the image is not known; not served (add 'pool' and "
                     "'image' to the disk)",
                     jp);
            return NULL;
        }
        pn = snprintf(pi, sizeof(pi), "%.*s/%s", (int)(sep - key), key, sep + 1);
    } else {
        imp_bad(&c->i, jp, "no 'pool' and 'image', and the key is not POOL%cIMAGE",
                c->version >= 7 ? '/' : '.');
        return NULL;
    }
    /* cut short, it would name another image (or lose its '/') */
    if (pn < 0 || (size_t)pn >= sizeof(pi)) {
        imp_bad(&c->i, jp, "the RBD pool/image is too long (%zu bytes at most)", sizeof(pi) - 1);
        return NULL;
    }
    const char *slash = strchr(pi, '/');
    if (!imp_name_ok(pi) || !slash || strchr(slash + 1, '/')) {
        imp_bad(&c->i, jp, "the RBD pool/image '%s' has a character linerate.conf cannot hold", pi);
        return NULL;
    }
    char *s = NULL;
    if (!wwn || !*json_string_value(wwn)) {
        imp_lost(&c->i, true,
                 "%s: no 'wwn': LIO gave this disk a unit serial gateway.conf does not hold; "
                 "read it from a gateway (VPD 80h) and add serial= and naa= to its LUN",
                 jp);
        if (asprintf(&s, "rbd:%s", pi) < 0)
            s = NULL;
        return s;
    }
    const char *w = json_string_value(wwn);
    if (!imp_name_ok(w) || strlen(w) > 64) {
        imp_lost(&c->i, true, "%s: wwn '%s' cannot be a linerate serial=; set serial= by hand", jp,
                 w);
        if (asprintf(&s, "rbd:%s", pi) < 0)
            s = NULL;
        return s;
    }
    char naa[33];
    lio_naa_from_wwn(w, naa);
    /* LIO hands INQUIRY of a user:rbd object to tcmu-runner, which lays VPD 80h and 83h out its
     * own way, the config string ceph-iscsi gave the object in a designator of 83h
     * ("rbd/POOL/IMAGE;osd_op_timeout=N", N the disk's control or ceph-iscsi's default 30):
     * vpd-style=tcmu (docs/migrate.md "Disk identity") */
    char cfg[LIO_TCMU_CONFIG_MAX + 2], tcmu[sizeof(cfg) + 40] = "";
    int cn = snprintf(cfg, sizeof(cfg), "rbd/%s;osd_op_timeout=%s", pi, osd_op_timeout(d));
    if (cn > 0 && (size_t)cn < sizeof(cfg) - 1)
        snprintf(tcmu, sizeof(tcmu), ",vpd-style=tcmu,tcmu-config=%s", cfg);
    else
        imp_lost(&c->i, true,
                 "%s: tcmu-runner's config string is longer than tcmu-config= holds: VPD 80h and "
                 "83h laid out as linerate's, the NAA and serial kept",
                 jp);
    if (!c->tcmu_noted && tcmu[0])
        imp_lost(&c->i, false,
                 "disks: VPD 83h carries the config string ceph-iscsi gave tcmu-runner with the "
                 "osd_op_timeout of the disk's controls or 30; a gateway whose "
                 "iscsi-gateway.cfg set another, or a ceph conf other than /etc/ceph/ceph.conf "
                 "(';conf='), sent another: set tcmu-config= as sg_inq -p 0x83 shows it");
    c->tcmu_noted = c->tcmu_noted || tcmu[0];
    if (asprintf(&s, "rbd:%s,vendor=LIO-ORG,product=TCMU device,revision=0002,serial=%s,naa=%s%s",
                 pi, w, naa, tcmu) < 0)
        s = NULL;
    /* what --check expects of the LUN (lio_check.c) */
    json_t *id = json_pack("{s:s, s:s, s:s, s:s, s:s}", "vendor", "LIO-ORG", "product",
                           "TCMU device", "revision", "0002", "serial", w, "naa", naa);
    if (tcmu[0])
        json_object_set_new(id, "vpd_style", json_string("tcmu"));
    json_object_update(ident, id);
    json_decref(id);
    json_t *ctl = json_object_get(d, "controls");
    const char *k;
    json_t *v;
    json_object_foreach(ctl, k, v)
    {
        imp_lost(&c->i, false, "%s.controls.%s: a tcmu-runner setting with no linerate meaning", jp,
                 k);
    }
    return s;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The target's LUNs: [{"key", "lun", "spec", "owner"}]. Before version 11 numbered in the sorted
 * order of its disk list, as ceph-iscsi numbers them (its upgrade to version 11 writes each
 * disk's lun_id as its place in sorted(target['disks'])); from version 11 by that lun_id. */
static json_t *target_luns(struct cctx *c, const char *iqn, json_t *view, const char *jp)
{
    json_t *out = json_array();
    json_t *list = json_object_get(view, "disks");
    size_t n = json_array_size(list), i;
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    assert(keys);
    json_t *k;
    json_array_foreach(list, i, k)
    {
        keys[i] = json_string_value(k);
        if (!keys[i]) {
            char dp[512];
            snprintf(dp, sizeof(dp), "%sdisks[%zu]", jp, i);
            imp_bad(&c->i, dp, "not a string");
            n = 0;
        }
    }
    qsort(keys, n, sizeof(*keys), by_name);
    json_t *ids = json_object_get(view, "lun_ids"), *taken = json_object();
    if (!json_is_object(ids))
        ids = NULL; /* before version 11 */
    for (i = 0; i < n; i++) {
        char dp[512];
        const char *key = keys[i];
        json_int_t lun = (json_int_t)i;
        if (ids) {
            snprintf(dp, sizeof(dp), "%sdisks[\"%s\"]", jp, key);
            json_t *id =
                imp_member(&c->i, json_object_get(ids, key), dp, "lun_id", JSON_INTEGER, true);
            if (c->i.failed)
                break;
            lun = json_integer_value(id);
            char num[32];
            snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, lun);
            if (lun < 0 || json_object_get(taken, num)) {
                imp_bad(&c->i, dp, "'lun_id' is negative or another disk's");
                break;
            }
            json_object_set_new(taken, num, json_true());
            /* SAM-5 section 4.7.7: flat space addressing reaches 16383 */
            if (lun > 16383) {
                imp_lost(&c->i, true,
                         "%s: target LUN %" JSON_INTEGER_FORMAT " is above linerate's 16383: "
                         "not served",
                         dp, lun);
                continue;
            }
        }
        snprintf(dp, sizeof(dp), "disks[\"%s\"]", key);
        json_t *d = json_object_get(c->disks, key);
        if (!json_is_object(d)) {
            imp_bad(&c->i, dp, "missing or not an object (the target lists it)");
            break;
        }
        json_t *other = json_object_get(c->served, key);
        if (other) {
            imp_lost(&c->i, true,
                     "%s: also a disk of target %s; linerate serves a disk in one target: give "
                     "the hosts of %s [host] entries there",
                     dp, json_string_value(other), iqn);
            json_array_append_new(out,
                                  json_pack("{s:s, s:I, s:n}", "key", key, "lun", lun, "spec"));
            continue;
        }
        json_object_set_new(c->served, key, json_string(iqn));
        json_t *ident = json_object();
        char *spec = disk_spec(c, key, d, dp, ident);
        if (c->i.failed) {
            json_decref(ident);
            free(spec);
            break;
        }
        json_t *owner = json_object_get(d, "owner");
        /* in LUN order, as LIO lists them */
        size_t at = json_array_size(out);
        while (at && json_integer_value(json_object_get(json_array_get(out, at - 1), "lun")) > lun)
            at--;
        json_array_insert_new(out, at,
                              json_pack("{s:s, s:I, s:s?, s:s?, s:o}", "key", key, "lun", lun,
                                        "spec", spec, "owner", json_string_value(owner), "ident",
                                        ident));
        free(spec);
    }
    json_decref(taken);
    free(keys);
    return out;
}

/* The target LUN number of disk `key`, or -1. */
static long lun_of(json_t *luns, const char *key)
{
    size_t i;
    json_t *l;
    json_array_foreach(luns, i, l)
    {
        if (strcmp(json_string_value(json_object_get(l, "key")), key) == 0)
            return json_is_string(json_object_get(l, "spec"))
                       ? (long)json_integer_value(json_object_get(l, "lun"))
                       : -1;
    }
    return -1;
}

/* `map` lines of a {"POOL.IMAGE": {"lun_id": N}} object. */
static void map_lines(struct cctx *c, json_t *disks, const char *jp, json_t *luns, FILE *out,
                      json_t *maps)
{
    const char *k;
    json_t *v;
    json_object_foreach(disks, k, v)
    {
        char mp[1024];
        snprintf(mp, sizeof(mp), "%s[\"%s\"]", jp, k);
        json_t *id = imp_object(&c->i, v, mp)
                         ? imp_member(&c->i, v, mp, "lun_id", JSON_INTEGER, true)
                         : NULL;
        if (c->i.failed)
            return;
        json_int_t h = json_integer_value(id);
        if (h < 0) {
            imp_bad(&c->i, mp, "'lun_id' is negative");
            return;
        }
        /* linerate numbers host LUNs 0..16383 (flat space addressing, SAM-5 §4.7.7), LIO 0..65535
         */
        if (h > 16383) {
            imp_lost(&c->i, true,
                     "%s: host LUN %" JSON_INTEGER_FORMAT " is above linerate's 16383: not "
                     "mapped; the host must see the disk under another number",
                     mp, h);
            continue;
        }
        long n = lun_of(luns, k);
        if (n < 0) {
            imp_lost(&c->i, true, "%s: maps disk %s, which this target does not serve here", mp, k);
            continue;
        }
        fprintf(out, "map = %" JSON_INTEGER_FORMAT " %ld\n", h, n);
        char hl[32];
        snprintf(hl, sizeof(hl), "%" JSON_INTEGER_FORMAT, h);
        json_object_set_new(maps, hl,
                            json_pack("{s:I, s:b}", "lun", (json_int_t)n, "read_only", 0));
    }
}

/* linerate's group names (linerate.conf(5), HOST ENTRIES). */
static bool group_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= '0' && s[i] <= '9') && !(s[i] >= 'a' && s[i] <= 'z') &&
            !(s[i] >= 'A' && s[i] <= 'Z') && !strchr("-_.:", s[i]))
            return false;
    return true;
}

/* One [host IQN] entry: its CHAP, and the map of `disks`. Counts a CHAP user that is not the
 * discovery user in *chap_hosts (see discovery_note). */
static void host_entry(struct cctx *c, const char *iqn, json_t *client, json_t *disks,
                       const char *jp, const char *mapjp, json_t *luns, FILE *out,
                       size_t *chap_hosts)
{
    if (!imp_iscsi_name_ok(iqn)) {
        imp_bad(&c->i, jp,
                "not an iSCSI name (iqn., eui. or naa.; no space, control character or [ ] # , =)");
        return;
    }
    fprintf(out, "\n[host %s]\n", iqn);
    char user[256], ap[1024];
    snprintf(ap, sizeof(ap), "%s.auth", jp);
    json_t *auth = client ? imp_member(&c->i, client, jp, "auth", JSON_OBJECT, false) : NULL;
    const char *u = ceph_chap_lines(&c->i, c->version, auth, ap, out, "", user);
    *chap_hosts += u && (!c->disc_user || strcmp(u, c->disc_user) != 0);
    json_t *maps = json_object();
    map_lines(c, disks, mapjp, luns, out, maps);
    json_object_set_new(c->hosts_exp, iqn, json_pack("{s:s?, s:o}", "chap_user", u, "maps", maps));
}

/* The target's host groups and clients as [group] and [host] entries. */
static char *entries(struct cctx *c, json_t *view, const char *jp, json_t *luns, size_t *chap_hosts)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert(out);
    json_t *clients = json_object_get(view, "clients");
    json_t *groups = json_object_get(view, "groups");
    if (json_is_true(json_object_get(view, "open"))) {
        /* no entries: linerate admits every initiator to a target without any, and each sees
         * the target's LUNs under their own numbers, as LIO's demo mode did */
        char user[256], ap[1024];
        snprintf(ap, sizeof(ap), "%sauth", jp);
        const char *u =
            ceph_chap_lines(&c->i, c->version, json_object_get(view, "auth"), ap, out, "", user);
        *chap_hosts += u && (!c->disc_user || strcmp(u, c->disc_user) != 0);
        if (json_object_size(clients) || json_object_size(groups))
            imp_lost(&c->i, true,
                     "%sacl_enabled is false, yet it has clients or groups: every initiator "
                     "logs in and sees every LUN; their maps and CHAP are not carried",
                     jp);
        fclose(out);
        return buf;
    }
    const char *tu = json_string_value(json_object_get(json_object_get(view, "auth"), "username"));
    if (tu && *tu)
        imp_lost(&c->i, false,
                 "%sauth: the target's CHAP applies to LIO's demo mode only (acl_enabled false); "
                 "with ACLs each client's own CHAP counts: not carried",
                 jp);
    json_t *grouped = json_object();
    const char *name;
    json_t *g;
    json_object_foreach(groups, name, g)
    {
        char gp[1024];
        snprintf(gp, sizeof(gp), "%sgroups[\"%s\"]", jp, name);
        if (!imp_object(&c->i, g, gp))
            break;
        json_t *members = imp_member(&c->i, g, gp, "members", JSON_ARRAY, true);
        json_t *disks = imp_member(&c->i, g, gp, "disks", JSON_OBJECT, true);
        if (c->i.failed)
            break;
        /* a [group] has one CHAP user for all its initiators: members with their own each get
         * a [host] entry with the group's map instead */
        bool one_auth = group_name_ok(name) && json_array_size(members) > 0;
        char *first = NULL;
        size_t i;
        json_t *m;
        json_array_foreach(members, i, m)
        {
            if (!json_is_string(m) || !imp_iscsi_name_ok(json_string_value(m))) {
                imp_bad(&c->i, gp, "members[%zu] is not an iSCSI name", i);
                break;
            }
            json_object_set_new(grouped, json_string_value(m), json_true());
            char *k = ceph_auth_key(c->version, json_object_get(clients, json_string_value(m)));
            if (!first)
                first = k;
            else {
                one_auth &= strcmp(first, k) == 0;
                free(k);
            }
        }
        free(first);
        if (c->i.failed)
            break;
        if (!one_auth) {
            imp_lost(&c->i, false,
                     "%s: members with their own CHAP users (or a name linerate's [group] "
                     "cannot take): written as one [host] entry each with the group's map",
                     gp);
            snprintf(gp + strlen(gp), sizeof(gp) - strlen(gp), ".disks");
            json_array_foreach(members, i, m)
            {
                char cp[1024];
                snprintf(cp, sizeof(cp), "%sclients[\"%s\"]", jp, json_string_value(m));
                host_entry(c, json_string_value(m), json_object_get(clients, json_string_value(m)),
                           disks, cp, gp, luns, out, chap_hosts);
            }
            continue;
        }
        fprintf(out, "\n[group %s]\n", name);
        json_array_foreach(members, i, m) fprintf(out, "initiator = %s\n", json_string_value(m));
        json_t *c0 = json_object_get(clients, json_string_value(json_array_get(members, 0)));
        char user[256], ap[1024];
        snprintf(ap, sizeof(ap), "%sclients[\"%s\"].auth", jp,
                 json_string_value(json_array_get(members, 0)));
        const char *u =
            ceph_chap_lines(&c->i, c->version, json_object_get(c0, "auth"), ap, out, "", user);
        if (u && (!c->disc_user || strcmp(u, c->disc_user) != 0))
            *chap_hosts += json_array_size(members);
        snprintf(gp + strlen(gp), sizeof(gp) - strlen(gp), ".disks");
        json_t *maps = json_object();
        map_lines(c, disks, gp, luns, out, maps);
        json_object_set_new(c->hosts_exp, name,
                            json_pack("{s:s?, s:o}", "chap_user", u, "maps", maps));
    }
    json_t *cl;
    json_object_foreach(clients, name, cl)
    {
        char cp[1024];
        snprintf(cp, sizeof(cp), "%sclients[\"%s\"]", jp, name);
        if (c->i.failed)
            break;
        if (!imp_object(&c->i, cl, cp))
            break;
        if (json_object_get(grouped, name))
            continue;
        json_t *gn = imp_member(&c->i, cl, cp, "group_name", JSON_STRING, false);
        json_t *maps = imp_member(&c->i, cl, cp, "luns", JSON_OBJECT, false);
        if (c->i.failed)
            break;
        if (gn && *json_string_value(gn))
            imp_lost(&c->i, false, "%s: its group '%s' is not in groups: its own map is used", cp,
                     json_string_value(gn));
        char mp[1100];
        snprintf(mp, sizeof(mp), "%s.luns", cp);
        host_entry(c, name, cl, maps, cp, mp, luns, out, chap_hosts);
    }
    json_decref(grouped);
    fclose(out);
    return buf;
}

/* LIO answers SendTargets with every target to any discovery session (that passed discovery
 * CHAP, if set); linerate lists a CHAP target only to a discovery session authenticated as the
 * initiator's own CHAP user unless discovery-chap-match is off (docs/hosts.md): the import turns
 * it off, as lio_import.c does, when a host's CHAP user is not the discovery user. */
static void discovery_note(struct cctx *c, const char *iqn, size_t chap_hosts, bool open)
{
    if (chap_hosts)
        imp_lost(&c->i, false,
                 "target %s: %zu %s with CHAP: discovery-chap-match = no, so that "
                 "SendTargets lists CHAP targets to every discovery session%s as LIO did",
                 iqn, chap_hosts, open ? "target" : "initiator(s)",
                 c->disc_user ? " that passed discovery CHAP" : "");
    c->chap_any |= chap_hosts != 0;
}

/* The version 3 object in the version 4 shape: one target, gateways.iqn. */
static void views_v3(struct cctx *c, json_t *root)
{
    json_t *gws = c->gateways;
    json_t *iqn = imp_member(&c->i, gws, "gateways", "iqn", JSON_STRING, false);
    json_t *ips = imp_member(&c->i, gws, "gateways", "ip_list", JSON_ARRAY, false);
    json_t *clients = imp_member(&c->i, root, "(top)", "clients", JSON_OBJECT, false);
    json_t *groups = imp_member(&c->i, root, "(top)", "groups", JSON_OBJECT, false);
    json_t *controls = imp_member(&c->i, root, "(top)", "controls", JSON_OBJECT, false);
    if (c->i.failed)
        return;
    json_t *portals = json_object(), *disks = json_array(), *hosts = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(gws, k, v)
    {
        if (!json_is_object(v))
            continue; /* iqn, ip_list, created, updated */
        json_object_set(portals, k, v);
        json_object_set_new(hosts, k, json_object());
    }
    c->gateways = hosts;
    if (!iqn) { /* no target defined yet */
        json_decref(portals);
        json_decref(disks);
        return;
    }
    json_object_foreach(c->disks, k, v) json_array_append_new(disks, json_string(k));
    json_object_set_new(c->views, json_string_value(iqn),
                        json_pack("{s:o, s:o, s:O?, s:O?, s:O?, s:O?, s:s}", "portals", portals,
                                  "disks", disks, "clients", clients, "groups", groups, "controls",
                                  controls, "ip_list", ips, "jp", ""));
}

static void views_v4(struct cctx *c, json_t *root)
{
    json_t *ts = imp_member(&c->i, root, "(top)", "targets", JSON_OBJECT, false);
    json_t *da = imp_member(&c->i, root, "(top)", "discovery_auth", JSON_OBJECT, false);
    const char *k;
    json_t *t;
    json_object_foreach(ts, k, t)
    {
        /* RFC 7143 section 4.2.7.1: an iSCSI name is at most 223 bytes (refused later when
         * longer, but first its JSON path must fit, with the '.' after it) */
        if (strlen(k) > 223) {
            imp_bad(&c->i, "targets", "a target name is longer than 223 bytes");
            return;
        }
        char jp[256];
        int n = snprintf(jp, sizeof(jp), "targets[\"%s\"].", k);
        assert(n > 0 && (size_t)n < sizeof(jp));
        jp[n - 1] = '\0'; /* the '.' goes back after the members are read */
        if (!imp_object(&c->i, t, jp))
            return;
        json_t *disks =
            imp_member(&c->i, t, jp, "disks", c->version >= 11 ? JSON_OBJECT : JSON_ARRAY, true);
        /* version 6: false is LIO's demo mode (generate_node_acls): every initiator logs in,
         * with the target's own CHAP (`auth`, version 11), and sees all its LUNs */
        json_t *acl = imp_member(&c->i, t, jp, "acl_enabled", JSON_TRUE, false);
        json_t *tauth = imp_member(&c->i, t, jp, "auth", JSON_OBJECT, false);
        json_t *clients = imp_member(&c->i, t, jp, "clients", JSON_OBJECT, false);
        json_t *portals = imp_member(&c->i, t, jp, "portals", JSON_OBJECT, true);
        json_t *groups = imp_member(&c->i, t, jp, "groups", JSON_OBJECT, false);
        json_t *controls = imp_member(&c->i, t, jp, "controls", JSON_OBJECT, false);
        json_t *ips = imp_member(&c->i, t, jp, "ip_list", JSON_ARRAY, true);
        if (c->i.failed)
            return;
        jp[n - 1] = '.';
        json_t *ids = NULL;
        if (c->version >= 11) { /* the keys, and their lun_id apart */
            ids = disks;
            disks = json_array();
            const char *dk;
            json_t *dv;
            json_object_foreach(ids, dk, dv) json_array_append_new(disks, json_string(dk));
        } else
            json_incref(disks);
        bool open = acl && !json_is_true(acl) && !json_integer_value(acl);
        json_object_set_new(c->views, k,
                            json_pack("{s:O, s:o, s:O?, s:O?, s:O?, s:O, s:s, s:O?, s:b, s:O?}",
                                      "portals", portals, "disks", disks, "clients", clients,
                                      "groups", groups, "controls", controls, "ip_list", ips, "jp",
                                      jp, "lun_ids", ids, "open", open, "auth", tauth));
    }
    if (!da)
        return;
    char *buf = NULL, user[256];
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert(out);
    c->disc_user =
        ceph_chap_lines(&c->i, c->version, da, "discovery_auth", out, "discovery-", user);
    if (c->disc_user)
        c->disc_user = strdup(user);
    fclose(out);
    free(c->disc_lines);
    c->disc_lines = buf;
}

/* The ALUA target port group of the gateway whose portal is `ip` in the target: its place in
 * ip_list + 1, as ceph-iscsi numbers the TPGs (one per address, in that order). 0: not there. */
static unsigned group_of(json_t *view, const char *ip)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(view, "ip_list"), i, a)
    {
        if (json_is_string(a) && strcmp(json_string_value(a), ip) == 0)
            return (unsigned)i + 1;
    }
    return 0;
}

/* The `n`th portal address of `host` in the target, or NULL (none, or malformed:
 * c->i.failed). Version 9 gave each gateway a list (portal_ip_addresses), before one. */
static const char *portal_of(struct cctx *c, json_t *view, const char *host, size_t n)
{
    json_t *p = json_object_get(json_object_get(view, "portals"), host);
    if (!p)
        return NULL;
    char jp[1024];
    /* version 3 keeps a gateway's portal in gateways.HOST, version 4 in the target */
    const char *tjp = json_string_value(json_object_get(view, "jp"));
    snprintf(jp, sizeof(jp), "%s%s[\"%s\"]", tjp, *tjp ? "portals" : "gateways", host);
    bool list = c->version >= 9;
    const char *key = list ? "portal_ip_addresses" : "portal_ip_address";
    json_t *ip = imp_object(&c->i, p, jp)
                     ? imp_member(&c->i, p, jp, key, list ? JSON_ARRAY : JSON_STRING, true)
                     : NULL;
    if (c->i.failed)
        return NULL;
    if (list && !json_array_size(ip) && n == 0) {
        imp_bad(&c->i, jp, "'%s' is empty", key);
        return NULL;
    }
    if (list)
        ip = json_array_get(ip, n);
    else if (n)
        return NULL;
    if (!ip)
        return NULL;
    if (!json_is_string(ip) || !addr_ok(json_string_value(ip))) {
        imp_bad(&c->i, jp, "'%s' is not an IPv4 or IPv6 address", key);
        return NULL;
    }
    if (!group_of(view, json_string_value(ip))) {
        imp_bad(&c->i, jp, "'%s' %s is not in the target's ip_list", key, json_string_value(ip));
        return NULL;
    }
    return json_string_value(ip);
}

/* Whether `ip` is the first address of a gateway of the target other than `host`: the target
 * port group linerate's gateway there serves under. */
static bool peer_group(struct cctx *c, json_t *view, const char *host, const char *ip)
{
    const char *h;
    json_t *v;
    json_object_foreach(json_object_get(view, "portals"), h, v)
    {
        const char *first = strcmp(h, host) != 0 ? portal_of(c, view, h, 0) : NULL;
        if (first && strcmp(first, ip) == 0)
            return true;
    }
    return false;
}

/* One target's section for gateway `host`: its portals, its group and the peers', each LUN
 * active/optimized on its owner's gateway and active/non-optimized on the others. */
static void target_section(struct cctx *c, const char *iqn, json_t *view, json_t *luns,
                           const char *ents, const char *host, FILE *out)
{
    const char *ip = portal_of(c, view, host, 0);
    if (!ip)
        return;
    unsigned me = group_of(view, ip);
    fprintf(out, "\n[target %s]\n", iqn);
    for (size_t n = 0; (ip = portal_of(c, view, host, n)); n++) {
        bool v6 = strchr(ip, ':') != NULL;
        fprintf(out, "portal = %s%s%s:%d\n", v6 ? "[" : "", ip, v6 ? "]" : "", ISCSI_PORT);
    }
    fprintf(out, "alua-group = %u\n", me);
    fputs("alua-state = active/non-optimized\n", out);
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(view, "ip_list"), i, a)
    {
        if (i + 1 != me && json_is_string(a) && peer_group(c, view, host, json_string_value(a)))
            fprintf(out, "alua-peer = %zu:active/non-optimized\n", i + 1);
    }
    json_t *l;
    json_array_foreach(luns, i, l)
    {
        const char *spec = json_string_value(json_object_get(l, "spec"));
        if (!spec)
            continue;
        const char *owner = json_string_value(json_object_get(l, "owner"));
        const char *oip = owner ? portal_of(c, view, owner, 0) : NULL;
        unsigned og = oip ? group_of(view, oip) : 0;
        fprintf(out, "lun %" JSON_INTEGER_FORMAT " = %s",
                json_integer_value(json_object_get(l, "lun")), spec);
        if (og == me)
            fputs(",alua=active/optimized", out);
        else if (og)
            fprintf(out, ",alua-peer=%u:active/optimized", og);
        fputc('\n', out);
    }
    fputs(ents, out);
}

/* What a host sees of target `view` (its LUNs `luns`), as struct ceph_gw's `expect` holds it. */
static json_t *target_expect(json_t *view, json_t *luns)
{
    json_t *ex = json_object();
    size_t i;
    json_t *l;
    json_array_foreach(luns, i, l)
    {
        if (!json_is_string(json_object_get(l, "spec")))
            continue;
        char n[32];
        snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(l, "lun")));
        json_t *w = json_deep_copy(json_object_get(l, "ident"));
        json_object_set_new(w, "read_only", json_false());
        json_object_set_new(ex, n, w);
    }
    return json_pack("{s:o, s:O}", "luns", ex, "hosts", json_object_get(view, "hosts_exp"));
}

static char *gateway_conf(struct cctx *c, int version, const char *host, json_t *luns_of,
                          json_t *ents_of, json_t *expect)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert(out);
    fprintf(out,
            "# linerate.conf for gateway %s, imported from ceph-iscsi's gateway.conf (version "
            "%d)\n# by linerate-ctl import ceph-iscsi (docs/migrate.md); each LUN keeps the "
            "serial and NAA LIO gave it.\n",
            host, version);
    if (json_object_size(c->i.secrets))
        fprintf(out, "chap-secrets = %s\n", c->secrets_path);
    if (c->chap_any)
        fputs("discovery-chap-match = no\n", out);
    fputs(c->disc_lines ? c->disc_lines : "", out);
    const char *iqn;
    json_t *view;
    json_object_foreach(c->views, iqn, view)
    {
        json_t *luns = json_object_get(luns_of, iqn);
        if (!json_object_get(json_object_get(view, "portals"), host))
            continue;
        target_section(c, iqn, view, luns, json_string_value(json_object_get(ents_of, iqn)), host,
                       out);
        json_object_set_new(expect, iqn, target_expect(view, luns));
    }
    fclose(out);
    return buf;
}

/* Per target, once for all gateways: its LUNs and its entries; what does not carry reported. */
static void targets(struct cctx *c, json_t *luns_of, json_t *ents_of)
{
    const char *iqn;
    json_t *view;
    json_object_foreach(c->views, iqn, view)
    {
        const char *jp = json_string_value(json_object_get(view, "jp"));
        char tp[1024];
        snprintf(tp, sizeof(tp), "%s", *jp ? "targets" : "gateways.iqn");
        if (!imp_iscsi_name_ok(iqn)) {
            imp_bad(&c->i, tp, "target name '%s' is not an iSCSI name", iqn);
            return;
        }
        json_t *luns = target_luns(c, iqn, view, jp);
        json_object_set_new(luns_of, iqn, luns);
        size_t chap_hosts = 0;
        if (c->i.failed)
            return;
        json_object_set_new(view, "hosts_exp", json_object());
        c->hosts_exp = json_object_get(view, "hosts_exp");
        char *e = entries(c, view, jp, luns, &chap_hosts);
        json_object_set_new(ents_of, iqn, json_string(e ? e : ""));
        free(e);
        if (c->i.failed)
            return;
        if (!json_object_size(json_object_get(view, "clients")) &&
            !json_object_size(json_object_get(view, "groups")) &&
            !json_is_true(json_object_get(view, "open")))
            imp_lost(&c->i, false, "target %s has no client: no initiator may log in", iqn);
        discovery_note(c, iqn, chap_hosts, json_is_true(json_object_get(view, "open")));
        /* ceph-iscsi gives each gateway a disabled TPG per other gateway's address with
         * tpg_enabled_sendtargets=0, so that SendTargets through one lists them all */
        if (json_array_size(json_object_get(view, "ip_list")) > 1)
            imp_lost(&c->i, true,
                     "target %s: SendTargets through one ceph-iscsi gateway listed every "
                     "gateway's portal, linerate lists its own: give hosts every gateway's "
                     "address for discovery (VMware: each in Dynamic Discovery; Linux: "
                     "iscsiadm -m discovery -t st -p PORTAL, once per portal), else a host that "
                     "discovers again finds one path; the node records hosts have keep working",
                     iqn);
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(view, "controls"), k, v)
        {
            imp_lost(&c->i, false,
                     "%scontrols.%s: a LIO TPG setting with no linerate meaning (linerate "
                     "negotiates with its own limits, docs/configuration.md); not carried",
                     jp, k);
        }
        json_object_foreach(json_object_get(view, "portals"), k, v)
        {
            if (!json_object_get(c->gateways, k))
                imp_lost(&c->i, true, "%sportals[\"%s\"]: not a gateway in gateways; not served",
                         jp, k);
            else if (!portal_of(c, view, k, 0))
                return;
            else if (portal_of(c, view, k, 1))
                /* ceph-iscsi made a TPG per address, each its own target port group */
                imp_lost(&c->i, true,
                         "%sportals[\"%s\"]: several addresses, each a TPG of its own in LIO: "
                         "linerate serves them all under the first one's group %u, so the "
                         "others' paths report another target port group",
                         jp, k, group_of(view, portal_of(c, view, k, 0)));
        }
    }
}

int ceph_import(const char *name, const char *text, size_t len, const char *only_gw,
                const char *secrets_path, struct ceph_import *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: not valid JSON (truncated?): %s", name, je.line, je.column,
                 je.text);
        return -1;
    }
    char *rbuf = NULL;
    size_t rlen = 0;
    struct cctx c = {.i = {.file = name, .err = err, .errlen = errlen},
                     .secrets_path = secrets_path};
    c.i.report = open_memstream(&rbuf, &rlen);
    c.i.secrets = json_object();
    c.views = json_object();
    c.served = json_object();
    assert(c.i.report);
    json_t *luns_of = json_object(), *ents_of = json_object();
    json_t *ver = NULL;
    if (imp_object(&c.i, root, "(top)"))
        ver = imp_member(&c.i, root, "(top)", "version", JSON_INTEGER, true);
    json_int_t version = ver ? json_integer_value(ver) : 0;
    if (ver && (version < 3 || version > 11))
        imp_bad(&c.i, "version",
                "%" JSON_INTEGER_FORMAT ": this importer reads gateway.conf versions 3 to 11 "
                "(ceph-iscsi-config 2.x, ceph-iscsi 3.x)",
                version);
    c.version = (int)version;
    /* version 10 renamed each gateway to its FQDN, one gateway at a time, listing the ones
     * done here until all were: names and owners stay consistent meanwhile */
    if (!c.i.failed && json_object_get(root, "gateways_upgraded"))
        imp_lost(&c.i, false,
                 "gateways_upgraded: the gateways' move to FQDN names was under way; the "
                 "files are named as gateway.conf names each gateway now");
    c.gateways = imp_member(&c.i, root, "(top)", "gateways", JSON_OBJECT, true);
    c.disks = imp_member(&c.i, root, "(top)", "disks", JSON_OBJECT, true);
    bool gw_owned = false;
    if (!c.i.failed && version == 3) {
        views_v3(&c, root);
        gw_owned = c.gateways != json_object_get(root, "gateways");
    } else if (!c.i.failed) {
        views_v4(&c, root);
    }
    if (!c.i.failed)
        targets(&c, luns_of, ents_of);
    if (!c.i.failed && only_gw && !json_object_get(c.gateways, only_gw))
        imp_bad(&c.i, "gateways", "no gateway '%s' (--gateway)", only_gw);
    if (!c.i.failed && !json_object_size(c.gateways))
        imp_bad(&c.i, "gateways", "no gateway: nothing to serve");
    const char *host;
    json_t *v;
    if (!c.i.failed) {
        out->gw = calloc(json_object_size(c.gateways), sizeof(*out->gw));
        assert(out->gw);
        json_object_foreach(c.gateways, host, v)
        {
            if (only_gw && strcmp(host, only_gw) != 0)
                continue;
            if (!json_is_object(v)) {
                imp_bad(&c.i, "gateways", "'%s' is not an object", host);
                break;
            }
            /* the host name becomes a file name (-o DIR/HOST.conf): no path in it */
            if (!imp_name_ok(host) || strchr(host, '/') || host[0] == '.') {
                imp_bad(&c.i, "gateways", "'%s' cannot be a gateway's file name", host);
                break;
            }
            struct ceph_gw *g = &out->gw[out->ngw++];
            g->host = strdup(host);
            g->expect = json_object();
            g->conf = gateway_conf(&c, (int)version, host, luns_of, ents_of, g->expect);
            if (c.i.failed)
                break;
        }
    }
    fclose(c.i.report);
    out->report = rbuf;
    out->lossy = c.i.lossy;
    out->secrets = imp_secrets_text(&c.i);
    if (gw_owned)
        json_decref(c.gateways);
    json_decref(c.i.secrets);
    json_decref(c.views);
    json_decref(c.served);
    json_decref(luns_of);
    json_decref(ents_of);
    json_decref(root);
    free((char *)c.disc_user);
    free(c.disc_lines);
    if (c.i.failed) {
        ceph_import_free(out);
        return -1;
    }
    return 0;
}

void ceph_import_free(struct ceph_import *r)
{
    for (size_t i = 0; i < r->ngw; i++) {
        free(r->gw[i].host);
        free(r->gw[i].conf);
        json_decref(r->gw[i].expect);
    }
    free(r->gw);
    free(r->secrets);
    free(r->report);
    memset(r, 0, sizeof(*r));
}
