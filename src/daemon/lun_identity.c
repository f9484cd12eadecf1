/* A LUN's identity as an admin sets it (",vendor=", ",product=", ",revision=", ",serial=",
 * ",naa=", ",rotation=", ",vpd-style=", ",tcmu-config="): checked against SPC-4 and SBC-3 when the
 * spec is parsed, written back by save, and one NAA per LUN of the daemon. What hosts then read is
 * built in scsi/target.c and scsi/spc.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

/* INQUIRY's identification fields are ASCII graphic characters and spaces (SPC-4 §6.6.2), as
 * is the unit serial number (§7.8.15). Leading or trailing spaces would vanish in the padding
 * or in the config file's trimming, and " #" starts a comment there: refused, so that what is
 * saved reads back the same. */
static int ascii_value(const char *name, const char *v, size_t max, char *out, const char *spec,
                       char *err, size_t errlen)
{
    size_t n = strlen(v);
    const char *why = NULL;
    if (n == 0 || n > max)
        why = "length";
    for (size_t i = 0; !why && i < n; i++)
        if (v[i] < 0x20 || v[i] > 0x7e || (v[i] == '#' && i && v[i - 1] == ' '))
            why = "character";
    if (!why && (v[0] == ' ' || v[n - 1] == ' '))
        why = "space";
    if (why) {
        snprintf(err, errlen,
                 "bad %s= '%s' in LUN spec '%s': 1 to %zu characters of printable ASCII, no "
                 "space at either end and no ' #' (SPC-4 §6.6.2)",
                 name, v, spec, max);
        return -1;
    }
    memcpy(out, v, n + 1);
    return 1;
}

/* An NAA designator (SPC-4 §7.8.6.6) as hex digits, "0x" or "naa." before them allowed (the
 * forms /dev/disk/by-id and multipath print): 16 digits for NAA 2h (IEEE extended), 3h
 * (locally assigned) and 5h (IEEE registered), 32 for 6h (IEEE registered extended). */
static int naa_value(const char *v, struct scsi_lun_identity *id, const char *spec, char *err,
                     size_t errlen)
{
    const char *hex = v;
    if (strncasecmp(hex, "0x", 2) == 0)
        hex += 2;
    else if (strncasecmp(hex, "naa.", 4) == 0)
        hex += 4;
    size_t n = strlen(hex);
    bool digits = n == 16 || n == 32;
    for (size_t i = 0; digits && i < n; i++)
        digits = isxdigit((unsigned char)hex[i]) != 0;
    int kind = digits ? (isdigit((unsigned char)hex[0]) ? hex[0] - '0' : -1) : -1;
    bool fits = n == 16 ? (kind == 2 || kind == 3 || kind == 5) : kind == 6;
    if (!digits || !fits) {
        snprintf(err, errlen,
                 "bad naa= '%s' in LUN spec '%s': an NAA designator is 16 hex digits starting "
                 "with 2, 3 or 5 (e.g. 3 for locally assigned), or 32 starting with 6 "
                 "(SPC-4 §7.8.6.6)",
                 v, spec);
        return -1;
    }
    for (size_t i = 0; i < n / 2; i++) {
        char byte[3] = {hex[2 * i], hex[2 * i + 1], 0};
        id->naa[i] = (uint8_t)strtoul(byte, NULL, 16);
    }
    id->naa_len = (uint8_t)(n / 2);
    return 1;
}

/* VPD B1h MEDIUM ROTATION RATE (SBC-3 §6.5.2): "ssd" (0001h, non-rotating) or a nominal
 * rate in rpm, 0401h to FFFEh. */
static int rotation_value(const char *v, struct scsi_lun_identity *id, const char *spec, char *err,
                          size_t errlen)
{
    char *end;
    unsigned long rpm = isdigit((unsigned char)v[0]) ? strtoul(v, &end, 10) : 0;
    if (strcmp(v, "ssd") == 0 || strcmp(v, "non-rotating") == 0)
        rpm = 1;
    else if (!rpm || *end || rpm < 0x401 || rpm > 0xfffe) {
        snprintf(err, errlen,
                 "bad rotation= '%s' in LUN spec '%s': ssd (non-rotating) or the disk's "
                 "rpm, 1025 to 65534, e.g. 7200 (SBC-3 §6.5.2)",
                 v, spec);
        return -1;
    }
    id->rotation = (uint16_t)rpm;
    return 1;
}

/* ",vpd-style=lio": VPD 80h and 83h laid out as LIO lays them out, "tcmu" as tcmu-runner does
 * (a ceph-iscsi disk), for a LUN moved from either (docs/migrate.md "Disk identity");
 * "linerate", linerate's own, is the default. */
static int vpd_style_value(const char *v, struct scsi_lun_identity *id, const char *spec, char *err,
                           size_t errlen)
{
    static const struct {
        const char *name;
        enum scsi_vpd_style style;
    } styles[] = {{"linerate", SCSI_VPD_LINERATE}, {"lio", SCSI_VPD_LIO}, {"tcmu", SCSI_VPD_TCMU}};
    for (size_t i = 0; i < sizeof(styles) / sizeof(styles[0]); i++)
        if (strcmp(v, styles[i].name) == 0) {
            id->vpd_style = styles[i].style;
            return 1;
        }
    snprintf(err, errlen,
             "bad vpd-style= '%s' in LUN spec '%s': linerate (the default), lio or tcmu (VPD 80h "
             "and 83h as LIO or tcmu-runner answers them)",
             v, spec);
    return -1;
}

int target_lun_identity_opt(struct target_lun_conf *lun, const char *tok, const char *spec,
                            char *err, size_t errlen)
{
    struct scsi_lun_identity *id = &lun->identity;
    const char *eq = strchr(tok, '=');
    if (!eq)
        return 0;
    size_t k = (size_t)(eq - tok);
    const char *v = eq + 1;
#define IS(word) (k == strlen(word) && strncmp(tok, word, k) == 0)
    if (IS("vendor"))
        return ascii_value("vendor", v, sizeof(id->vendor) - 1, id->vendor, spec, err, errlen);
    if (IS("product"))
        return ascii_value("product", v, sizeof(id->product) - 1, id->product, spec, err, errlen);
    if (IS("revision"))
        return ascii_value("revision", v, sizeof(id->revision) - 1, id->revision, spec, err,
                           errlen);
    if (IS("serial"))
        return ascii_value("serial", v, sizeof(id->serial) - 1, id->serial, spec, err, errlen);
    if (IS("naa"))
        return naa_value(v, id, spec, err, errlen);
    if (IS("rotation"))
        return rotation_value(v, id, spec, err, errlen);
    if (IS("vpd-style"))
        return vpd_style_value(v, id, spec, err, errlen);
    /* the config string of a tcmu-runner device, for vpd-style=tcmu (spc.c) */
    if (IS("tcmu-config"))
        return ascii_value("tcmu-config", v, sizeof(id->tcmu_config) - 1, id->tcmu_config, spec,
                           err, errlen);
#undef IS
    return 0;
}

int target_lun_identity_format(const struct scsi_lun_identity *id, char *buf, size_t len)
{
    size_t off = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (off < len)                                                                             \
            off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__);                            \
    } while (0)
    if (len)
        buf[0] = '\0';
    if (id->vendor[0])
        ADD(",vendor=%s", id->vendor);
    if (id->product[0])
        ADD(",product=%s", id->product);
    if (id->revision[0])
        ADD(",revision=%s", id->revision);
    if (id->serial[0])
        ADD(",serial=%s", id->serial);
    if (id->naa_len) {
        char hex[33];
        target_lun_naa_text(id, hex, sizeof(hex));
        ADD(",naa=%s", hex);
    }
    if (id->rotation == 1)
        ADD(",rotation=ssd");
    else if (id->rotation)
        ADD(",rotation=%u", (unsigned)id->rotation);
    if (id->vpd_style == SCSI_VPD_LIO)
        ADD(",vpd-style=lio");
    else if (id->vpd_style == SCSI_VPD_TCMU)
        ADD(",vpd-style=tcmu");
    if (id->tcmu_config[0])
        ADD(",tcmu-config=%s", id->tcmu_config);
#undef ADD
    return off < len ? 0 : -1;
}

void target_lun_naa_text(const struct scsi_lun_identity *id, char *buf, size_t len)
{
    size_t off = 0;
    for (unsigned i = 0; i < id->naa_len && off + 2 < len; i++, off += 2)
        snprintf(buf + off, len - off, "%02x", id->naa[i]);
    if (len)
        buf[off < len ? off : len - 1] = '\0';
}

bool target_lun_identity_same(const struct scsi_lun_identity *a, const struct scsi_lun_identity *b)
{
    return strcmp(a->vendor, b->vendor) == 0 && strcmp(a->product, b->product) == 0 &&
           strcmp(a->revision, b->revision) == 0 && strcmp(a->serial, b->serial) == 0 &&
           a->naa_len == b->naa_len && memcmp(a->naa, b->naa, a->naa_len) == 0 &&
           a->rotation == b->rotation && a->vpd_style == b->vpd_style &&
           strcmp(a->tcmu_config, b->tcmu_config) == 0;
}

/* An NAA names one logical unit wherever it is seen (SPC-4 §7.8.6.6): two LUNs of one daemon
 * with the same would be joined by a host's multipath into one disk. */
int target_node_naa_clash(const struct target_node_conf *n, const char *target,
                          const struct target_lun_conf *l, char *err, size_t errlen)
{
    const struct scsi_lun_identity *id = &l->identity;
    for (unsigned i = 0; id->naa_len && i < n->nluns; i++) {
        const struct target_lun_conf *o = &n->luns[i];
        if (o == l || o->identity.naa_len != id->naa_len ||
            memcmp(o->identity.naa, id->naa, id->naa_len) != 0)
            continue;
        char hex[33];
        target_lun_naa_text(id, hex, sizeof(hex));
        snprintf(err, errlen,
                 "naa=%s of target %s LUN %llu is already the NAA of target %s LUN %llu (%s): "
                 "two LUNs may not share an NAA",
                 hex, target, (unsigned long long)l->lun, n->name, (unsigned long long)o->lun,
                 o->origin);
        return -1;
    }
    return 0;
}

int target_lun_naa_clash(const struct target_config *cfg, const char *target,
                         const struct target_lun_conf *l, char *err, size_t errlen)
{
    for (unsigned t = 0; t < cfg->ntargets; t++)
        if (target_node_naa_clash(&cfg->targets[t], target, l, err, errlen) < 0)
            return -1;
    return 0;
}
