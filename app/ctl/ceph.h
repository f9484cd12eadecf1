/* `linerate-ctl import ceph-iscsi`: ceph-iscsi's gateway.conf (the JSON object its gateways
 * keep in RADOS) turned into one linerate.conf per gateway host, set up as linerate's own HA
 * gateways (docs/gateways.md), and one CHAP secrets file. The translation (ceph_import.c),
 * reading the object through librados (ceph_rados.c) and the command (ceph_cmd.c) are separate;
 * see docs/migrate.md. */
#ifndef LR_CTL_CEPH_H
#define LR_CTL_CEPH_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* One gateway's configuration. */
struct ceph_gw {
    char *host; /* the gateway's name in gateway.conf */
    char *conf;
    /* What hosts should see through this gateway, per target IQN, in the shape lio_check()
     * compares a running daemon with (struct lio_import's `expect`, lio.h). */
    json_t *expect;
};

struct ceph_import {
    struct ceph_gw *gw;
    size_t ngw;
    char *secrets; /* "USER SECRET" lines; empty when no CHAP user was imported */
    char *report;  /* what did not carry over, one line each */
    bool lossy;    /* something a host would see could not be carried */
};

/* Translate gateway.conf's JSON `text` (`len` bytes; `name` in messages) for every gateway it
 * names, or only `only_gw` when not NULL. `secrets_path` is the absolute path the configs'
 * `chap-secrets` line names. Returns 0, or -1 with "NAME: JSON-PATH: reason" in err (malformed,
 * truncated or of another version: nothing to write). */
int ceph_import(const char *name, const char *text, size_t len, const char *only_gw,
                const char *secrets_path, struct ceph_import *out, char *err, size_t errlen);
void ceph_import_free(struct ceph_import *r);

/* The object `object` of pool `pool`, read through librados (loaded at run time: linerate-ctl
 * links no Ceph library) as client.admin or the CEPH_ARGS' --id, with ceph.conf from CEPH_CONF
 * or its default places. Returns 0 with a malloc'ed NUL-terminated copy in *text and its length,
 * or -1 with a reason in err. */
int ceph_rados_read(const char *pool, const char *object, char **text, size_t *len, char *err,
                    size_t errlen);

/* linerate-ctl import ceph-iscsi ...: argv starts at "ceph-iscsi"; `socket` and `wait_s` for
 * --check. Returns an exit code. */
int ctl_import_ceph_main(const char *socket, unsigned wait_s, int argc, char **argv);

#endif
