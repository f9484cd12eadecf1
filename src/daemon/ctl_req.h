/* What the control requests share (ctl_params.c): the JSON-RPC error a request answers with,
 * and the parameters a request names (a target, a LUN) found in the running daemon; and the
 * read-only requests (ctl_show.c) the method table of ctl_cmds.c lists. */
#ifndef LR_DAEMON_CTL_REQ_H
#define LR_DAEMON_CTL_REQ_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* JSON-RPC 2.0 error codes (§5.1) and ours (-32000..-32099 are the server's to define). */
enum {
    ERR_PARSE = -32700,
    ERR_INVALID_REQUEST = -32600,
    ERR_NO_METHOD = -32601,
    ERR_INVALID_PARAMS = -32602,
    ERR_INTERNAL = -32603,
    ERR_FAILED = -32000,    /* the action was refused or failed; message says why */
    ERR_NOT_FOUND = -32004, /* no such target, LUN, session or connection */
};

/* A request's error: its JSON-RPC code and message (code 0: none). */
struct req_err {
    int code;
    char msg[512];
};

/* Set e and return NULL, for `return ctl_fail(e, ...)`. */
json_t *ctl_fail(struct req_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- ctl_params.c --- */
const char *ctl_param_str(json_t *params, const char *key, bool required, struct req_err *e);
/* An unsigned integer parameter in [0, max]: 1 found, 0 absent, -1 bad (e set). */
int ctl_param_uint(json_t *params, const char *key, uint64_t max, uint64_t *out, struct req_err *e);
/* The same, required: 0 or -1 (e set). */
int ctl_param_uint_req(json_t *params, const char *key, uint64_t max, uint64_t *out,
                       struct req_err *e);
bool ctl_param_bool(json_t *params, const char *key);
/* The served target of that name (without case), and its index (idx may be NULL). */
struct iscsi_node *ctl_find_node(struct daemon *d, const char *name, unsigned *idx);
/* The target a request names by its "target" parameter, and its index (idx may be NULL). */
struct iscsi_node *ctl_param_target(struct daemon *d, json_t *params, unsigned *idx,
                                    struct req_err *e);
/* The target of a LUN verb: the one named, or, when the request names none, the daemon's only
 * target. */
struct iscsi_node *ctl_param_lun_target(struct daemon *d, json_t *params, unsigned *idx,
                                        struct req_err *e);
/* The LUN of the "lun" parameter on n. */
struct scsi_lun *ctl_param_lun(struct iscsi_node *n, json_t *params, uint64_t *num,
                               struct req_err *e);
/* LUN `lun` of target t in the running configuration, or NULL. */
struct target_lun_conf *ctl_conf_lun_find(struct daemon *d, unsigned t, uint64_t lun);
/* LUN lu of target t as show luns, add lun and set lun answer it. */
json_t *ctl_lun_json(struct daemon *d, unsigned t, const struct scsi_lun *lu);
/* A LUN's caps (util/rate_limit.h) as show and set lun answer them. */
json_t *ctl_limits_json(const struct rate_limit *r);

/* --- ctl_alua.c --- */
json_t *ctl_set_alua(struct daemon *d, json_t *params, struct req_err *e);

/* --- ctl_host_edit.c: a running target's [host] / [group] entries --- */
json_t *ctl_add_host(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_add_group(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_remove_host(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_add_initiator(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_remove_initiator(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_map_lun(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_unmap_lun(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_set_host_chap(struct daemon *d, json_t *params, struct req_err *e);

/* --- ctl_show.c: the requests that only read --- */
json_t *ctl_show_targets(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_luns(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_stats(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_portals(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_hosts(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_sessions(struct daemon *d, json_t *params, struct req_err *e);
json_t *ctl_show_connections(struct daemon *d, json_t *params, struct req_err *e);

#endif
