/* The parameters of a control request (docs/ctl-protocol.md) read from its JSON, and the
 * targets and LUNs they name found in the running daemon; a request's error (ctl_req.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "daemon/ctl_req.h"

json_t *ctl_fail(struct req_err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return NULL;
}

const char *ctl_param_str(json_t *params, const char *key, bool required, struct req_err *e)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v) {
        if (required)
            ctl_fail(e, ERR_INVALID_PARAMS, "missing parameter '%s'", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        ctl_fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be a string", key);
        return NULL;
    }
    return json_string_value(v);
}

int ctl_param_uint(json_t *params, const char *key, uint64_t max, uint64_t *out, struct req_err *e)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max) {
        ctl_fail(e, ERR_INVALID_PARAMS, "parameter '%s' must be an integer from 0 to %llu", key,
                 (unsigned long long)max);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

int ctl_param_uint_req(json_t *params, const char *key, uint64_t max, uint64_t *out,
                       struct req_err *e)
{
    int rc = ctl_param_uint(params, key, max, out, e);
    if (rc == 0)
        ctl_fail(e, ERR_INVALID_PARAMS, "missing parameter '%s'", key);
    return rc == 1 ? 0 : -1;
}

bool ctl_param_bool(json_t *params, const char *key)
{
    return params && json_is_true(json_object_get(params, key));
}

struct iscsi_node *ctl_find_node(struct daemon *d, const char *name, unsigned *idx)
{
    for (unsigned i = 0; i < d->built.n; i++) {
        if (strcasecmp(d->built.nodes[i]->name, name) == 0) {
            if (idx)
                *idx = i;
            return d->built.nodes[i];
        }
    }
    return NULL;
}

/* The target a request names by its "target" parameter, and its index (idx may be NULL). */
struct iscsi_node *ctl_param_target(struct daemon *d, json_t *params, unsigned *idx,
                                    struct req_err *e)
{
    const char *name = ctl_param_str(params, "target", true, e);
    if (!name)
        return NULL;
    struct iscsi_node *n = ctl_find_node(d, name, idx);
    if (!n)
        ctl_fail(e, ERR_NOT_FOUND, "no target named '%s'", name);
    return n;
}

/* The target of a LUN verb: the one named, or, when the request names none (linerate-ctl set
 * lun N ro, the spelling), the daemon's only target. */
struct iscsi_node *ctl_param_lun_target(struct daemon *d, json_t *params, unsigned *idx,
                                        struct req_err *e)
{
    if (params && json_object_get(params, "target"))
        return ctl_param_target(d, params, idx, e);
    if (d->built.n == 1) {
        *idx = 0;
        return d->built.nodes[0];
    }
    if (d->built.n == 0)
        ctl_fail(e, ERR_NOT_FOUND, "no target is served");
    else
        ctl_fail(e, ERR_INVALID_PARAMS, "several targets: name one (TARGET N)");
    return NULL;
}

struct scsi_lun *ctl_param_lun(struct iscsi_node *n, json_t *params, uint64_t *num,
                               struct req_err *e)
{
    if (ctl_param_uint_req(params, "lun", SCSI_LUN_SLOTS - 1, num, e) < 0)
        return NULL;
    struct scsi_lun *lu = scsi_target_lun(n->scsi, *num);
    if (!lu)
        ctl_fail(e, ERR_NOT_FOUND, "target %s has no LUN %llu", n->name, (unsigned long long)*num);
    return lu;
}

struct target_lun_conf *ctl_conf_lun_find(struct daemon *d, unsigned t, uint64_t lun)
{
    struct target_node_conf *c = &d->cfg.targets[t];
    for (unsigned i = 0; i < c->nluns; i++)
        if (c->luns[i].lun == lun)
            return &c->luns[i];
    return NULL;
}

/* A LUN's caps on this gateway as set (0: none; mbps in MiB/s) and the text that sets them. */
json_t *ctl_limits_json(const struct rate_limit *r)
{
    struct rate_limit_conf c;
    rate_limit_get(r, &c);
    char text[256];
    target_lun_limits_format(&c, text, sizeof(text));
    const uint64_t mib = 1024 * 1024;
    return json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:i}", "text", text[0] ? text + 1 : "", "iops",
        (json_int_t)c.cap[RATE_IOPS], "read_iops", (json_int_t)c.cap[RATE_READ_IOPS], "write_iops",
        (json_int_t)c.cap[RATE_WRITE_IOPS], "mbps", (json_int_t)(c.cap[RATE_BPS] / mib),
        "read_mbps", (json_int_t)(c.cap[RATE_READ_BPS] / mib), "write_mbps",
        (json_int_t)(c.cap[RATE_WRITE_BPS] / mib), "burst_ms", (int)c.burst_ms);
}

/* LUN lu of target t. Its store as the configuration has it: what the LUN was opened with
 * until a resize, which writes the new size there (conf_lun_resized). */
json_t *ctl_lun_json(struct daemon *d, unsigned t, const struct scsi_lun *lu)
{
    struct scsi_lun_info li;
    scsi_lun_get_info(lu, &li);
    const struct target_lun_conf *c = ctl_conf_lun_find(d, t, li.lun);
    const char *target = d->built.nodes[t]->name;
    /* the identity hosts read, defaults included: what to pin with ,serial= and ,naa= before
     * the disk moves */
    const struct scsi_lun_identity *id = li.identity;
    char naa[33];
    target_lun_naa_text(id, naa, sizeof(naa));
    json_t *ident = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s}", "vendor", id->vendor,
                              "product", id->product, "revision", id->revision, "serial",
                              id->serial, "naa", naa, "rotation", (int)id->rotation, "vpd_style",
                              id->vpd_style == SCSI_VPD_LIO    ? "lio"
                              : id->vpd_style == SCSI_VPD_TCMU ? "tcmu"
                                                               : "linerate");
    json_t *o =
        json_pack("{s:s, s:I, s:s, s:I, s:i, s:i, s:b, s:b, s:b, s:I, s:o*}", "target", target,
                  "lun", (json_int_t)li.lun, "store", c ? c->bs_spec : li.store, "bytes",
                  (json_int_t)li.bytes, "block_size", (int)li.block_size, "physical_block_size",
                  (int)li.phys_block_size, "read_only", li.read_only, "removable", li.removable,
                  "thin", li.thin, "commands", (json_int_t)li.users, "identity", ident);
    json_object_set_new(o, "limits", ctl_limits_json(scsi_lun_rate_limit((struct scsi_lun *)lu)));
    return o;
}
