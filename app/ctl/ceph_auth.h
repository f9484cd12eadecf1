/* The CHAP credentials of ceph-iscsi's gateway.conf, as each version writes them: before
 * version 8 "USER/SECRET" strings (`chap`, `chap_mutual`), from version 8 `username`,
 * `password` and `password_encryption_enabled` (and their `mutual_` forms), the password
 * perhaps encrypted with the gateways' RSA key (ceph_iscsi_config/client.py, CHAP). Used by
 * ceph_import.c for clients, targets and discovery. */
#ifndef LR_CTL_CEPH_AUTH_H
#define LR_CTL_CEPH_AUTH_H

#include <stdio.h>

#include <jansson.h>

#include "ctl/import_json.h"

/* An auth object's CHAP and mutual CHAP as chap-user lines (`prefix` "" in an entry or a
 * target, "discovery-" at the top), the secrets kept. Returns the CHAP user name, copied into
 * the caller's `user`, or NULL without CHAP. */
const char *ceph_chap_lines(struct imp *i, int version, json_t *auth, const char *jp, FILE *out,
                            const char *prefix, char user[256]);
/* The CHAP users and secrets of a client's auth as one comparable text (`chap` and
 * `chap_mutual`; from version 8 the user names, passwords and encryption flags). */
char *ceph_auth_key(int version, json_t *client);

#endif
