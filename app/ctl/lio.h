/* `linerate-ctl import lio`: LIO's saved configuration (rtslib-fb's saveconfig.json) turned into
 * a linerate.conf and a CHAP secrets file. The identity rule (lio_naa.c), the translation
 * (lio_import.c) and the command (import_cmd.c) are separate; see docs/migrate.md. */
#ifndef LR_CTL_LIO_H
#define LR_CTL_LIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

/* The NAA IEEE Registered Extended designator (SPC-4 §7.8.6.6.5) LIO's target_core answers in
 * VPD 83h for a storage object whose unit serial (saveconfig.json's `wwn`) is `wwn`, as 32
 * lowercase hex digits. */
void lio_naa_from_wwn(const char *wwn, char out[33]);

/* The longest tcmu-runner config string a LUN's tcmu-config= holds (scsi.h
 * SCSI_TCMU_CONFIG_MAX: its designator's one-byte length counts a NUL). */
#define LIO_TCMU_CONFIG_MAX 254

/* The result of one translation. `conf` and `secrets` are NUL-terminated texts (secrets empty
 * when no CHAP user was imported); `report` lists, one line each, what did not carry over.
 * `lossy` is set when something a host would see could not be carried. */
struct lio_import {
    char *conf;
    char *secrets;
    char *report;
    bool lossy;
    /* What hosts should see, per target IQN: {"luns": {"N": {vendor, product, revision,
     * serial, naa, read_only}}, "hosts": {IQN: {chap_user, maps: {"HOST-LUN": {lun,
     * read_only}}}}} (lio_check.c compares a running daemon with it). */
    json_t *expect;
};

/* Translate the JSON text of `path` (already read). `secrets_path` is the absolute path the
 * config's `chap-secrets` line names. Returns 0, or -1 with "PATH: JSON-PATH: reason" in err
 * (malformed or truncated input; nothing to write). */
int lio_import(const char *path, const char *secrets_path, struct lio_import *out, char *err,
               size_t errlen);
void lio_import_free(struct lio_import *r);

/* Compare what the daemon on `socket` serves with `expect`: each difference a host would see
 * printed on `out`. Returns the number of differences, or -1 (message in err) when the
 * daemon cannot be asked. */
int lio_check(const char *socket, json_t *expect, unsigned wait_s, FILE *out, char *err,
              size_t errlen);

/* linerate-ctl import lio FILE [-o OUT] [--secrets OUT] | --check: argv starts at "import";
 * `socket` and `wait_s` for --check. */
int ctl_import_main(const char *socket, unsigned wait_s, int argc, char **argv);

#endif
