/* linerate-ctl import lio FILE [-o OUT] [--secrets OUT]: the command around lio_import.c.
 * Everything is translated in memory first, so a malformed or truncated input writes nothing;
 * the secrets file is created with mode 600 (docs/security.md) before it holds a byte. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl/ceph.h"
#include "ctl/ctl.h"
#include "ctl/import_json.h"
#include "ctl/lio.h"

/* The secrets (when any) and the config (when -o), all or nothing (import_write.c). */
static int write_both(const char *secrets, const char *stext, const char *out, const char *ctext)
{
    const char *paths[2], *texts[2];
    mode_t modes[2];
    size_t n = 0;
    if (secrets)
        paths[n] = secrets, texts[n] = stext, modes[n++] = 0600;
    if (out)
        paths[n] = out, texts[n] = ctext, modes[n++] = 0644;
    return imp_write_all(paths, texts, modes, n);
}

static const char import_usage[] =
    "usage: linerate-ctl import lio FILE [-o OUT] [--secrets OUT]\n"
    "       linerate-ctl import ceph-iscsi [POOL/OBJECT | FILE] [--gateway HOST] [-o OUT]\n"
    "           [--secrets OUT]   (see linerate-ctl import ceph-iscsi --help)\n"
    "       linerate-ctl [--socket PATH] import lio FILE --check\n"
    "  FILE: LIO's saved configuration (targetcli's /etc/target/saveconfig.json)\n"
    "  -o OUT: write the linerate.conf there (default: print it)\n"
    "  --secrets OUT: the CHAP secrets file (mode 600); needed when FILE has CHAP users\n"
    "exit 0: all carried; 1: something a host would see was not carried (see the report on\n"
    "stderr; the files are written); 2: bad usage or input, nothing written\n"
    "--check: compare the running linerate with FILE (LUN identities, read-only, ACL maps,\n"
    "CHAP users); exit 0 when a host would see no difference, 1 when it would\n";

/* --check: nothing written; the differences on stdout, exit 1 when there are any. */
static int check(const char *socket, unsigned wait_s, const char *file)
{
    struct lio_import r;
    char err[1024];
    if (lio_import(file, "/dev/null", &r, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl import: %s\n", err);
        return CTL_EXIT_USAGE;
    }
    int n = lio_check(socket, r.expect, wait_s, stdout, err, sizeof(err));
    lio_import_free(&r);
    if (n < 0) {
        fprintf(stderr, "linerate-ctl import --check: %s\n", err);
        return CTL_EXIT_NO_DAEMON;
    }
    printf("%d difference%s a host would see between %s and the running linerate\n", n,
           n == 1 ? "" : "s", file);
    return n ? CTL_EXIT_FAILED : CTL_EXIT_OK;
}

int ctl_import_main(const char *socket, unsigned wait_s, int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *secrets = NULL;
    bool check_mode = false;
    if (argc >= 2 && strcmp(argv[1], "ceph-iscsi") == 0)
        return ctl_import_ceph_main(socket, wait_s, argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], "lio") != 0) {
        fputs(import_usage, stderr);
        return CTL_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--secrets") == 0 && i + 1 < argc)
            secrets = argv[++i];
        else if (strcmp(argv[i], "--check") == 0)
            check_mode = true;
        else if (argv[i][0] != '-' && !file)
            file = argv[i];
        else {
            fputs(import_usage, stderr);
            return CTL_EXIT_USAGE;
        }
    }
    if (!file || (check_mode && (out || secrets))) {
        fputs(import_usage, stderr);
        return CTL_EXIT_USAGE;
    }
    if (check_mode)
        return check(socket, wait_s, file);
    /* the config names the secrets file by an absolute path (linerate.conf(5)) */
    char abs[PATH_MAX];
    if (imp_secrets_abs(secrets, abs, sizeof(abs)) < 0)
        return CTL_EXIT_USAGE;
    struct lio_import r;
    char err[1024];
    if (lio_import(file, abs, &r, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl import: %s; nothing written\n", err);
        return CTL_EXIT_USAGE;
    }
    int rc = r.lossy ? CTL_EXIT_FAILED : CTL_EXIT_OK;
    if (*r.secrets && !secrets) {
        imp_no_secrets(file);
        rc = CTL_EXIT_USAGE;
    } else if ((*r.secrets || out) &&
               write_both(*r.secrets ? secrets : NULL, r.secrets, out, r.conf) < 0) {
        rc = CTL_EXIT_USAGE;
    } else if (!out) {
        fputs(r.conf, stdout);
    }
    if (rc != CTL_EXIT_USAGE)
        imp_report(r.report, r.lossy);
    lio_import_free(&r);
    return rc;
}
