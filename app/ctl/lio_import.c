/* rtslib-fb's saveconfig.json (saveconfig.json(5)) to linerate.conf: storage objects become
 * LUN specs carrying LIO's identity, each enabled TPG's portals and LUNs a [target], each node
 * ACL a [host] entry with its LUN map and CHAP user, the CHAP secrets a secrets file. What has
 * no linerate meaning goes to the report, never silently away (issue 31 item 4). */
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctl/import_json.h"
#include "ctl/lio.h"

struct ctx {
    struct imp i;          /* the input's name, the report, the secrets, lossy, failed, the error */
    FILE *targets;         /* the [target] sections, written after the global keys */
    json_t *specs;         /* "/backstores/KIND/NAME" -> LUN spec, or null when not carried */
    json_t *owner;         /* "/backstores/KIND/NAME" -> the target that serves it */
    json_t *ident;         /* "/backstores/KIND/NAME" -> {vendor, product, revision, serial, naa} */
    json_t *expect;        /* what hosts should see: struct lio_import's `expect` */
    const char *disc_user; /* discovery CHAP user, NULL without discovery authentication */
    bool chap_any;         /* discovery-chap-match = no is written (discovery()) */
};

/* A JSON path for messages ("targets[0].tpgs[1]"), cut if ever longer than the buffer. */
static void jpath(char *b, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, n, fmt, ap);
    va_end(ap);
}

/* An element `v` of an array, its JSON path (fmt, ...) written to `p`: false, with c->i.failed,
 * when it is not an object. */
static bool item(struct ctx *c, json_t *v, char *p, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, n, fmt, ap);
    va_end(ap);
    return imp_object(&c->i, v, p);
}

/* json_array_foreach over an array of objects, `p` (a char array) holding each one's JSON path
 * made from the format and arguments that follow; it stops, with c->i.failed, at an element that
 * is not an object. */
#define each_object(c, arr, i, v, p, ...)                                                          \
    for ((i) = 0; (i) < json_array_size(arr) && ((v) = json_array_get((arr), (i))) &&              \
                  item((c), (v), (p), sizeof(p), __VA_ARGS__);                                     \
         (i)++)

static bool flag(json_t *v)
{
    return v && (json_is_true(v) || (json_is_integer(v) && json_integer_value(v) != 0));
}

/* A text LIO may hold and linerate's config or secrets file may not: the admin retypes it. */
static bool plain(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] == ' ' || s[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            if (s[i] != ' ')
                return false;
    return strchr(s, ',') == NULL && strstr(s, " #") == NULL;
}

/* The identity LIO answers for a storage object: INQUIRY's vendor "LIO-ORG", the product and
 * revision its backend's driver sets (inquiry_prod and inquiry_rev in the kernel's
 * target_core_file.c, _iblock.c, _rd.c; for a user object tcmu-runner's
 * tcmu_emulate_std_inquiry()), VPD 80h the unit serial (the `wwn`) and VPD 83h the NAA derived
 * from it (lio_naa.c), both laid out as target_core_spc.c lays them out (vpd-style=lio), or
 * for a user object as tcmu-runner does (vpd-style=tcmu). */
static void identity(struct ctx *c, json_t *so, const char *kind, const char *name, const char *jp,
                     FILE *spec, const char *key)
{
    static const struct {
        const char *kind, *product, *revision;
    } prod[] = {{"fileio", "FILEIO", "4.0"},
                {"block", "IBLOCK", "4.0"},
                {"ramdisk", "RAMDISK-MCP", "4.0"},
                {"user", "TCMU device", "0002"}}; /* tcmu-runner answers INQUIRY itself */
    const char *product = NULL, *revision = NULL;
    for (size_t i = 0; i < sizeof(prod) / sizeof(prod[0]); i++)
        if (strcmp(prod[i].kind, kind) == 0)
            product = prod[i].product, revision = prod[i].revision;
    assert(product);
    json_t *attrs = imp_member(&c->i, so, jp, "attributes", JSON_OBJECT, false);
    /* emulate_model_alias: LIO answers the storage object's name as the product. */
    if (strcmp(kind, "user") != 0 && flag(json_object_get(attrs, "emulate_model_alias")) &&
        plain(name, 16))
        product = name;
    fprintf(spec, ",vendor=LIO-ORG,product=%s,revision=%s", product, revision);
    json_t *wwn = imp_member(&c->i, so, jp, "wwn", JSON_STRING, false);
    if (!wwn) {
        imp_lost(&c->i, true,
                 "%s: no 'wwn': LIO gave this disk a unit serial saveconfig.json does not hold; "
                 "read it from the old target (VPD 80h) and add serial= and naa= to its LUN",
                 jp);
        return;
    }
    const char *w = json_string_value(wwn);
    if (!plain(w, 64)) {
        imp_lost(&c->i, true, "%s: wwn '%s' cannot be a linerate serial=; set serial= by hand", jp,
                 w);
        return;
    }
    char naa[33];
    lio_naa_from_wwn(w, naa);
    /* tcmu-runner lays VPD 80h and 83h out its own way (vpd-style=tcmu: the T10 designator
     * first and without the product, a vendor specific one with the object's config string,
     * tcmu-config=; docs/migrate.md "Disk identity") */
    const char *style = "lio";
    if (strcmp(kind, "user") == 0) {
        const char *cfg = json_string_value(json_object_get(so, "config"));
        style = cfg && plain(cfg, LIO_TCMU_CONFIG_MAX) ? "tcmu" : "linerate";
        if (strcmp(style, "tcmu") == 0)
            fprintf(spec, ",serial=%s,naa=%s,vpd-style=tcmu,tcmu-config=%s", w, naa, cfg);
        else {
            fprintf(spec, ",serial=%s,naa=%s", w, naa);
            imp_lost(&c->i, false,
                     "%s: its 'config' cannot be a tcmu-config=: VPD 83h laid out as linerate's, "
                     "its NAA and unit serial kept",
                     jp);
        }
    } else
        fprintf(spec, ",serial=%s,naa=%s,vpd-style=lio", w, naa);
    json_object_set_new(c->ident, key,
                        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "vendor", "LIO-ORG", "product",
                                  product, "revision", revision, "serial", w, "naa", naa,
                                  "vpd_style", style));
}

/* One storage object's LUN spec, kept under its rtslib path for the LUNs that name it. */
static void storage_object(struct ctx *c, json_t *so, const char *jp)
{
    json_t *plugin = imp_member(&c->i, so, jp, "plugin", JSON_STRING, true);
    json_t *name = imp_member(&c->i, so, jp, "name", JSON_STRING, true);
    if (c->i.failed)
        return;
    const char *kind = json_string_value(plugin), *nm = json_string_value(name);
    json_t *dev = imp_member(&c->i, so, jp, "dev", JSON_STRING, false);
    json_t *size = imp_member(&c->i, so, jp, "size", JSON_INTEGER, false);
    json_t *cfg = imp_member(&c->i, so, jp, "config", JSON_STRING, false);
    if (c->i.failed)
        return;
    char *buf = NULL, dir[80];
    size_t len = 0;
    FILE *spec = open_memstream(&buf, &len);
    if (!spec) {
        imp_bad(&c->i, jp, "out of memory");
        return;
    }
    if (snprintf(dir, sizeof(dir), "%s", kind) >= (int)sizeof(dir))
        dir[0] = '\0'; /* refused with the key below */
    bool carried = true;
    long long bytes = size ? (long long)json_integer_value(size) : 0;
    if (strcmp(kind, "fileio") == 0 || strcmp(kind, "block") == 0) {
        if (!dev) {
            imp_bad(&c->i, jp, "'dev' is missing");
        } else if (!plain(json_string_value(dev), 4096)) {
            imp_lost(&c->i, true, "%s: path '%s' cannot be written in a LUN spec", jp,
                     json_string_value(dev));
            carried = false;
        } else {
            fprintf(spec, "file:%s", json_string_value(dev));
            if (strcmp(kind, "fileio") == 0 && bytes > 0)
                fprintf(spec, ",size=%lld", bytes);
            if (flag(json_object_get(so, "readonly")))
                fputs(",ro", spec);
        }
    } else if (strcmp(kind, "ramdisk") == 0) {
        if (bytes <= 0)
            imp_bad(&c->i, jp, "a ramdisk needs a positive 'size'");
        else
            fprintf(spec, "%s:%lld", flag(json_object_get(so, "nullio")) ? "null" : "ram", bytes);
        imp_lost(
            &c->i, false,
            "%s (ramdisk %s): RAM starts empty in linerate as in LIO; its contents are not moved",
            jp, nm);
    } else if (strcmp(kind, "user") == 0 && cfg &&
               strncmp(json_string_value(cfg), "rbd/", 4) == 0) {
        /* tcmu-runner's rbd handler: "rbd/POOL/IMAGE[;OPTIONS]" */
        const char *img = json_string_value(cfg) + 4;
        size_t n = strcspn(img, ";@");
        char pi[4096];
        snprintf(pi, sizeof(pi), "%.*s", (int)n, img);
        if (n >= sizeof(pi) || !imp_name_ok(pi))
            imp_bad(&c->i, jp,
                    "'config' of '%s': the RBD pool/image has a character linerate.conf "
                    "cannot hold",
                    nm);
        snprintf(dir, sizeof(dir), "user:rbd");
        fprintf(spec, "rbd:%.*s", (int)n, img);
        if (bytes > 0)
            fprintf(spec, ",size=%lld", bytes);
        if (img[n])
            imp_lost(&c->i, false,
                     "%s: rbd options '%s' not carried (see rbd: in linerate.conf(5))", jp,
                     img + n);
    } else {
        /* (a handler name too long for dir is refused with the key below) */
        if (strcmp(kind, "user") == 0 && cfg &&
            snprintf(dir, sizeof(dir), "user:%.*s", (int)strcspn(json_string_value(cfg), "/"),
                     json_string_value(cfg)) >= (int)sizeof(dir))
            dir[0] = '\0';
        imp_lost(&c->i, true,
                 "%s: %s storage object '%s' has no linerate store (linerate serves files, block "
                 "devices, RAM and RBD); copy its data into a file or an RBD image and add the LUN "
                 "by hand",
                 jp, dir, nm);
        carried = false;
    }
    /* The rtslib path the LUNs name it by: cut short, two long names could share one key and
     * one LUN would be served from the other's file or image. */
    char key[512];
    if (!dir[0] || snprintf(key, sizeof(key), "/backstores/%s/%s", dir, nm) >= (int)sizeof(key)) {
        imp_bad(&c->i, jp, "name too long");
        fclose(spec);
        free(buf);
        return;
    }
    if (carried && !c->i.failed) {
        if (flag(json_object_get(so, "write_back")))
            imp_lost(&c->i, false,
                     "%s: write_back: linerate reports the write cache as its store has it", jp);
        identity(c, so, strcmp(kind, "user") == 0 ? "user" : kind, nm, jp, spec, key);
    }
    fclose(spec);
    json_object_set_new(c->specs, key, carried && !c->i.failed ? json_string(buf) : json_null());
    free(buf);
}

/* userid/password and mutual_userid/mutual_password under `prefix` in `o` as chap-user lines
 * (`key_prefix` "" in a section, "discovery-" at the top). */
static void chap(struct ctx *c, json_t *o, const char *jp, const char *prefix, FILE *out,
                 const char *key_prefix)
{
    static const char *const kinds[2][3] = {
        {"userid", "password", "chap-user"},
        {"mutual_userid", "mutual_password", "chap-mutual-user"}};
    for (int m = 0; m < 2; m++) {
        char ku[64], kp[64];
        snprintf(ku, sizeof(ku), "%s%s", prefix, kinds[m][0]);
        snprintf(kp, sizeof(kp), "%s%s", prefix, kinds[m][1]);
        json_t *u = imp_member(&c->i, o, jp, ku, JSON_STRING, false);
        json_t *p = imp_member(&c->i, o, jp, kp, JSON_STRING, false);
        if (c->i.failed || !u || !*json_string_value(u))
            continue;
        bool nop = !p || !*json_string_value(p);
        if (nop)
            imp_lost(&c->i, true, "%s: %s without %s: add '%s SECRET' to the secrets file", jp, ku,
                     kp, json_string_value(u));
        char key[64];
        snprintf(key, sizeof(key), "%s%s", key_prefix, kinds[m][2]);
        imp_chap_line(&c->i, jp, out, key, json_string_value(u), nop ? NULL : json_string_value(p));
    }
}

/* One node ACL: a [host] entry with its map. */
static void node_acl(struct ctx *c, json_t *acl, const char *jp, json_t *tpg_luns, json_t *hosts,
                     FILE *t)
{
    json_t *wwn = imp_member(&c->i, acl, jp, "node_wwn", JSON_STRING, true);
    json_t *maps = imp_member(&c->i, acl, jp, "mapped_luns", JSON_ARRAY, false);
    if (c->i.failed)
        return;
    if (!imp_name_ok(json_string_value(wwn))) {
        imp_bad(&c->i, jp,
                "'node_wwn' is not an iSCSI name (a control character, space or one of "
                "[ ] # , =)");
        return;
    }
    fprintf(t, "\n[host %s]\n", json_string_value(wwn));
    chap(c, acl, jp, "chap_", t, "");
    json_t *cu = json_object_get(acl, "chap_userid");
    json_t *ex_maps = json_object();
    json_object_set_new(
        hosts, json_string_value(wwn),
        json_pack("{s:s?, s:o}", "chap_user",
                  json_is_string(cu) && *json_string_value(cu) ? json_string_value(cu) : NULL,
                  "maps", ex_maps));
    size_t i;
    json_t *m;
    char mp[300];
    each_object(c, maps, i, m, mp, "%s.mapped_luns[%zu]", jp, i)
    {
        json_t *h = imp_member(&c->i, m, mp, "index", JSON_INTEGER, true);
        json_t *tl = imp_member(&c->i, m, mp, "tpg_lun", JSON_INTEGER, true);
        json_t *wp = imp_member(&c->i, m, mp, "write_protect", JSON_TRUE, false);
        if (c->i.failed)
            return;
        char k[32];
        snprintf(k, sizeof(k), "%" JSON_INTEGER_FORMAT, json_integer_value(tl));
        if (!json_object_get(tpg_luns, k)) {
            imp_lost(&c->i, true, "%s: maps TPG LUN %s, which was not carried", mp, k);
            continue;
        }
        fprintf(t, "map = %" JSON_INTEGER_FORMAT " %s%s\n", json_integer_value(h), k,
                flag(wp) ? ",ro" : "");
        char hk[32];
        snprintf(hk, sizeof(hk), "%" JSON_INTEGER_FORMAT, json_integer_value(h));
        json_object_set_new(
            ex_maps, hk,
            json_pack("{s:I, s:b}", "lun", json_integer_value(tl), "read_only", flag(wp)));
    }
    json_t *attrs = imp_member(&c->i, acl, jp, "attributes", JSON_OBJECT, false);
    if (attrs && json_object_size(attrs))
        imp_lost(&c->i, false, "%s: ACL attributes (dataout_timeout, ...) have no linerate meaning",
                 jp);
}

static void portal(struct ctx *c, json_t *p, const char *jp, FILE *out)
{
    json_t *ip = imp_member(&c->i, p, jp, "ip_address", JSON_STRING, true);
    json_t *port = imp_member(&c->i, p, jp, "port", JSON_INTEGER, true);
    if (c->i.failed)
        return;
    const char *a = json_string_value(ip);
    /* an address only: hex digits, '.' and ':' (an IPv6 one may come in brackets) */
    size_t al = strlen(a), br = a[0] == '[' && al > 2 && a[al - 1] == ']';
    if (!al || strspn(a + br, "0123456789abcdefABCDEF.:") != al - 2 * br) {
        imp_bad(&c->i, jp, "'ip_address' is not an IPv4 or IPv6 address");
        return;
    }
    bool v6 = strchr(a, ':') && a[0] != '[';
    fprintf(out, "portal = %s%s%s:%" JSON_INTEGER_FORMAT "\n", v6 ? "[" : "", a, v6 ? "]" : "",
            json_integer_value(port));
    if (flag(json_object_get(p, "iser")) || flag(json_object_get(p, "offload")))
        imp_lost(&c->i, true, "%s: iSER or offload portal: linerate serves iSCSI over TCP only",
                 jp);
}

/* The LUNs of a TPG as "index -> spec" (not-carried ones reported). */
static json_t *tpg_luns(struct ctx *c, json_t *tpg, const char *jp, const char *iqn, bool quiet)
{
    json_t *luns = imp_member(&c->i, tpg, jp, "luns", JSON_ARRAY, false);
    json_t *out = json_object();
    size_t i;
    json_t *l;
    char lp[300];
    each_object(c, luns, i, l, lp, "%s.luns[%zu]", jp, i)
    {
        json_t *idx = imp_member(&c->i, l, lp, "index", JSON_INTEGER, true);
        json_t *so = imp_member(&c->i, l, lp, "storage_object", JSON_STRING, true);
        if (c->i.failed)
            break;
        json_t *spec = json_object_get(c->specs, json_string_value(so));
        if (!spec) {
            imp_bad(&c->i, lp, "storage object '%s' is not in storage_objects",
                    json_string_value(so));
            break;
        }
        if (json_is_null(spec)) {
            if (quiet)
                continue;
            imp_lost(&c->i, true,
                     "target %s LUN %" JSON_INTEGER_FORMAT " (%s) not carried: see above", iqn,
                     json_integer_value(idx), json_string_value(so));
            continue;
        }
        /* One LIO storage object behind two targets is one disk; two linerate LUNs would be
         * two disks (and may not share an NAA). */
        json_t *owner = json_object_get(c->owner, json_string_value(so));
        if (owner && strcmp(json_string_value(owner), iqn) != 0) {
            if (!quiet)
                imp_lost(
                    &c->i, true,
                    "target %s LUN %" JSON_INTEGER_FORMAT " (%s) is already a LUN of target %s; "
                    "linerate serves a disk in one target: give these hosts [host] entries "
                    "there",
                    iqn, json_integer_value(idx), json_string_value(so), json_string_value(owner));
            continue;
        }
        json_object_set_new(c->owner, json_string_value(so), json_string(iqn));
        char k[32];
        snprintf(k, sizeof(k), "%" JSON_INTEGER_FORMAT, json_integer_value(idx));
        json_object_set_new(out, k,
                            json_pack("{s:O, s:s}", "spec", spec, "so", json_string_value(so)));
    }
    return out;
}

static const char *const known_tpg_attrs[] = {"authentication", "generate_node_acls",
                                              "demo_mode_write_protect", "cache_dynamic_acls"};

static void tpg_settings(struct ctx *c, json_t *tpg, const char *jp)
{
    json_t *attrs = imp_member(&c->i, tpg, jp, "attributes", JSON_OBJECT, false);
    const char *k;
    json_t *v;
    json_object_foreach(attrs, k, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(known_tpg_attrs) / sizeof(known_tpg_attrs[0]); i++)
            known |= strcmp(k, known_tpg_attrs[i]) == 0;
        if (!known)
            imp_lost(&c->i, false, "%s.attributes.%s: no linerate meaning, not carried", jp, k);
    }
    json_t *params = imp_member(&c->i, tpg, jp, "parameters", JSON_OBJECT, false);
    if (params && json_object_size(params))
        imp_lost(&c->i, false,
                 "%s.parameters: iSCSI session parameters are negotiated by linerate with its own "
                 "limits (docs/configuration.md); not carried",
                 jp);
}

/* LIO's SendTargets (iscsit_build_sendtargets_response() in the kernel's
 * drivers/target/iscsi/iscsi_target.c, demo_mode_discovery on by default) lists every target to
 * every discovery session, which discovery authentication alone gates; an ACL's CHAP applies to
 * its normal sessions only. linerate lists a CHAP target only to a discovery session that
 * authenticated as the initiator's own CHAP user unless discovery-chap-match is off: the import
 * turns it off when a host's CHAP user is not the discovery user, so that every host finds by
 * discovery what it found before (docs/migrate.md "Discovery"). */
static void discovery(struct ctx *c, const char *jp, const char *iqn, json_t *hosts)
{
    size_t n = 0;
    const char *h;
    json_t *v;
    json_object_foreach(hosts, h, v)
    {
        const char *u = json_string_value(json_object_get(v, "chap_user"));
        n += u && (!c->disc_user || strcmp(u, c->disc_user) != 0);
    }
    if (n && !c->chap_any)
        imp_lost(
            &c->i, false,
            "%s: target %s: %zu ACL(s) with CHAP: discovery-chap-match = no, so that SendTargets "
            "lists CHAP targets to every discovery session%s as LIO did",
            jp, iqn, n, c->disc_user ? " that passed discovery CHAP" : "");
    c->chap_any |= n != 0;
}

/* What one target gathers over its TPGs before it is written. */
struct tgt {
    const char *iqn;
    json_t *luns; /* the first enabled TPG's LUNs, "index" -> {spec, so} (tpg_luns) */
    FILE *portals, *acls;
    char *portals_buf, *acls_buf;
    size_t portals_len, acls_len;
    json_t *seen_acls; /* initiator name -> true, for the ACLs taken already */
    json_t *hosts;     /* the target's "hosts" in c->expect */
    bool open_access;  /* a TPG with generate_node_acls */
    bool any;          /* an enabled TPG was taken */
};

/* A TPG's node ACLs into t->acls; an initiator with an ACL in an earlier TPG keeps that one. */
static void tpg_acls(struct ctx *c, json_t *nacls, const char *tp, struct tgt *t)
{
    size_t j;
    json_t *p;
    char ap[300];
    each_object(c, nacls, j, p, ap, "%s.node_acls[%zu]", tp, j)
    {
        const char *n = json_string_value(json_object_get(p, "node_wwn"));
        if (n && json_object_get(t->seen_acls, n)) {
            imp_lost(&c->i, false, "%s: %s has an ACL in an earlier TPG; that one is kept", ap, n);
            continue;
        }
        if (n)
            json_object_set_new(t->seen_acls, n, json_true());
        node_acl(c, p, ap, t->luns, t->hosts, t->acls);
    }
}

/* One TPG of a target. linerate has one LUN set per target: the first enabled TPG gives it; a
 * further TPG adds its portals and ACLs when its LUNs are the same, else it is reported. */
static void tpg(struct ctx *c, json_t *g, const char *tp, struct tgt *t)
{
    json_t *en = imp_member(&c->i, g, tp, "enable", JSON_TRUE, false);
    if (c->i.failed)
        return;
    if (en && !flag(en)) {
        imp_lost(&c->i, false, "%s: disabled in LIO, not served, not imported", tp);
        return;
    }
    json_t *l = tpg_luns(c, g, tp, t->iqn, t->luns != NULL);
    if (!c->i.failed && t->luns && !json_equal(t->luns, l))
        imp_lost(&c->i, true,
                 "%s: TPG with other LUNs than the target's first TPG; linerate has one LUN set "
                 "per target: give these LUNs a target of their own",
                 tp);
    if (c->i.failed || (t->luns && !json_equal(t->luns, l))) {
        json_decref(l);
        return;
    }
    json_t *tag = json_object_get(g, "tag");
    if (!t->luns && json_is_integer(tag) && json_integer_value(tag) != 1)
        imp_lost(&c->i, false,
                 "%s: TPG tag %" JSON_INTEGER_FORMAT ": LIO named the target port %s,t,0x%04x in "
                 "VPD 83h, linerate names it by its ALUA group (alua-group =, 1 by default)",
                 tp, json_integer_value(tag), t->iqn, (unsigned)(json_integer_value(tag) & 0xffff));
    if (!t->luns)
        t->luns = l;
    else
        json_decref(l);
    t->any = true;
    tpg_settings(c, g, tp);
    json_t *ps = imp_member(&c->i, g, tp, "portals", JSON_ARRAY, false);
    size_t j;
    json_t *p;
    json_array_foreach(ps, j, p)
    {
        char pp[300];
        jpath(pp, sizeof(pp), "%s.portals[%zu]", tp, j);
        portal(c, p, pp, t->portals);
    }
    json_t *attrs = json_object_get(g, "attributes");
    json_t *nacls = imp_member(&c->i, g, tp, "node_acls", JSON_ARRAY, false);
    if (c->i.failed)
        return;
    bool gen = flag(json_object_get(attrs, "generate_node_acls"));
    t->open_access |= gen;
    tpg_acls(c, nacls, tp, t);
    if (gen && flag(json_object_get(attrs, "demo_mode_write_protect")) && json_array_size(nacls))
        imp_lost(&c->i, true,
                 "%s: initiators without an ACL see the LUNs read-only in LIO; linerate "
                 "admits only the ACLs' initiators once it has any",
                 tp);
}

/* Whether hosts of a target without ACLs see its LUNs read-only; what LIO let in that
 * linerate would not (or the reverse) is reported. */
static bool target_access(struct ctx *c, json_t *tpgs, const char *jp, const struct tgt *t)
{
    if (json_object_size(t->seen_acls) == 0) {
        if (!t->open_access)
            imp_lost(&c->i, true,
                     "%s: no node ACL and no generate_node_acls: no initiator could log in to "
                     "LIO, any could to linerate; add [host] entries or drop the target",
                     jp);
        json_t *attrs = json_object_get(json_array_get(tpgs, 0), "attributes");
        return flag(json_object_get(attrs, "demo_mode_write_protect"));
    }
    if (t->open_access)
        imp_lost(&c->i, true,
                 "%s: generate_node_acls with ACLs: linerate admits only the ACLs' initiators", jp);
    return false;
}

/* The [target] section with its portals and LUNs, then its [host] entries; the LUNs' identity
 * into c->expect. */
static void target_write(struct ctx *c, json_t *tpgs, const char *jp, struct tgt *t)
{
    bool ro_all = target_access(c, tpgs, jp, t);
    fprintf(c->targets, "\n[target %s]\n%s", t->iqn, t->portals_buf);
    const char *k;
    json_t *spec;
    json_t *ex_luns = json_object();
    json_object_foreach(t->luns, k, spec)
    {
        fprintf(c->targets, "lun %s = %s%s\n", k, json_string_value(json_object_get(spec, "spec")),
                ro_all ? ",ro" : "");
        json_t *id = json_object_get(c->ident, json_string_value(json_object_get(spec, "so")));
        json_t *e = id ? json_deep_copy(id) : json_object();
        json_object_set_new(e, "read_only", json_boolean(ro_all));
        json_object_set_new(ex_luns, k, e);
    }
    json_object_set_new(json_object_get(c->expect, t->iqn), "luns", ex_luns);
    discovery(c, jp, t->iqn, t->hosts);
    fputs(t->acls_buf, c->targets);
}

static void target(struct ctx *c, json_t *tj, const char *jp)
{
    json_t *fabric = imp_member(&c->i, tj, jp, "fabric", JSON_STRING, false);
    json_t *wwn = imp_member(&c->i, tj, jp, "wwn", JSON_STRING, true);
    json_t *tpgs = imp_member(&c->i, tj, jp, "tpgs", JSON_ARRAY, true);
    if (c->i.failed)
        return;
    const char *iqn = json_string_value(wwn);
    if (fabric && strcmp(json_string_value(fabric), "iscsi") != 0) {
        imp_lost(&c->i, true, "%s: %s target %s: linerate serves iSCSI only", jp,
                 json_string_value(fabric), iqn);
        return;
    }
    if (!imp_name_ok(iqn)) {
        imp_bad(&c->i, jp,
                "'wwn' is not an iSCSI name (a control character, space or one of [ ] # , =)");
        return;
    }
    struct tgt t = {.iqn = iqn, .seen_acls = json_object(), .hosts = json_object()};
    t.portals = open_memstream(&t.portals_buf, &t.portals_len);
    t.acls = open_memstream(&t.acls_buf, &t.acls_len);
    assert(t.portals && t.acls);
    json_object_set_new(c->expect, iqn, json_pack("{s:o}", "hosts", t.hosts));
    size_t i;
    json_t *g;
    char tp[256];
    each_object(c, tpgs, i, g, tp, "%s.tpgs[%zu]", jp, i)
    {
        tpg(c, g, tp, &t);
        if (c->i.failed)
            break;
    }
    fclose(t.portals);
    fclose(t.acls);
    bool served = !c->i.failed && t.any && json_object_size(t.luns) != 0;
    if (!c->i.failed && t.any && !served)
        imp_lost(&c->i, true, "%s: target %s has no LUN that carried over; not served", jp, iqn);
    if (served)
        target_write(c, tpgs, jp, &t);
    else
        json_object_del(c->expect, iqn);
    json_decref(t.luns);
    json_decref(t.seen_acls);
    free(t.portals_buf);
    free(t.acls_buf);
}

/* Discovery authentication of the iscsi fabric module as discovery-chap-* lines on `out`. */
static void discovery_auth(struct ctx *c, json_t *fms, FILE *out)
{
    size_t i;
    json_t *v;
    json_array_foreach(fms, i, v)
    {
        char jp[64];
        jpath(jp, sizeof(jp), "fabric_modules[%zu]", i);
        if (c->i.failed || !json_is_object(v) || !json_is_string(json_object_get(v, "name")) ||
            strcmp(json_string_value(json_object_get(v, "name")), "iscsi") != 0)
            continue;
        if (flag(json_object_get(v, "discovery_enable_auth"))) {
            chap(c, v, jp, "discovery_", out, "discovery-");
            c->disc_user = json_string_value(json_object_get(v, "discovery_userid"));
        }
    }
}

/* The whole saveconfig.json: storage objects first (the LUNs name them), then discovery
 * authentication (global keys, on `disc`), then the targets (on c->targets). */
static void translate(struct ctx *c, json_t *root, FILE *disc)
{
    if (!json_is_object(root))
        imp_bad(&c->i, "(top)", "not an object");
    json_t *sos = imp_member(&c->i, root, "(top)", "storage_objects", JSON_ARRAY, false);
    json_t *ts = imp_member(&c->i, root, "(top)", "targets", JSON_ARRAY, false);
    json_t *fms = imp_member(&c->i, root, "(top)", "fabric_modules", JSON_ARRAY, false);
    size_t i;
    json_t *v;
    char jp[64];
    each_object(c, sos, i, v, jp, "storage_objects[%zu]", i)
    {
        storage_object(c, v, jp);
        if (c->i.failed)
            return;
    }
    discovery_auth(c, fms, disc);
    each_object(c, ts, i, v, jp, "targets[%zu]", i)
    {
        target(c, v, jp);
        if (c->i.failed)
            return;
    }
}

int lio_import(const char *path, const char *secrets_path, struct lio_import *out, char *err,
               size_t errlen)
{
    memset(out, 0, sizeof(*out));
    /* the path goes into the config's first line (a comment): a newline would begin another */
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(err, errlen,
                     "the input's path has a control character (a newline?) that "
                     "linerate.conf's first line, naming it, cannot hold");
            return -1;
        }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: not valid JSON (truncated?): %s", path, je.line, je.column,
                 je.text);
        return -1;
    }
    struct ctx c = {.i = {.file = path, .err = err, .errlen = errlen}};
    char *tbuf = NULL, *dbuf = NULL, *cbuf = NULL;
    size_t tlen = 0, dlen = 0, clen = 0, rlen = 0;
    c.targets = open_memstream(&tbuf, &tlen);
    c.i.report = open_memstream(&out->report, &rlen);
    FILE *disc = open_memstream(&dbuf, &dlen);
    FILE *conf = open_memstream(&cbuf, &clen);
    c.i.secrets = json_object();
    c.specs = json_object();
    c.owner = json_object();
    c.ident = json_object();
    c.expect = json_object();
    assert(c.targets && c.i.report && disc && conf);
    translate(&c, root, disc);
    fclose(disc);
    fclose(c.targets);
    fclose(c.i.report);
    fprintf(conf, "# linerate.conf imported from LIO's %s by linerate-ctl import lio\n", path);
    fprintf(conf, "# (docs/migrate.md); LUN identities are LIO's, byte for byte.\n");
    if (json_object_size(c.i.secrets))
        fprintf(conf, "chap-secrets = %s\n", secrets_path);
    if (c.chap_any)
        fputs("discovery-chap-match = no\n", conf);
    fputs(dbuf, conf);
    fputs(tbuf, conf);
    fclose(conf);
    free(dbuf);
    free(tbuf);
    out->conf = cbuf;
    out->secrets = imp_secrets_text(&c.i);
    out->lossy = c.i.lossy;
    out->expect = c.expect;
    json_decref(c.i.secrets);
    json_decref(c.specs);
    json_decref(c.owner);
    json_decref(c.ident);
    json_decref(root);
    if (c.i.failed) {
        lio_import_free(out);
        return -1;
    }
    return 0;
}

void lio_import_free(struct lio_import *r)
{
    free(r->conf);
    free(r->secrets);
    free(r->report);
    json_decref(r->expect);
    memset(r, 0, sizeof(*r));
}
