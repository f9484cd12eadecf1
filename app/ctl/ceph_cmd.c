/* linerate-ctl import ceph-iscsi [POOL/OBJECT | FILE] [--gateway HOST] [-o OUT] [--secrets OUT]:
 * the command around ceph_import.c. Everything is translated in memory first and written all
 * or nothing (import_write.c), so a malformed or truncated object writes nothing. */
#include <assert.h>
#include <errno.h>
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

static const char usage[] =
    "usage: linerate-ctl import ceph-iscsi [POOL/OBJECT | FILE] [--gateway HOST] [-o OUT]\n"
    "           [--secrets OUT]\n"
    "       linerate-ctl [--socket PATH] import ceph-iscsi [POOL/OBJECT | FILE] --gateway HOST\n"
    "           --check\n"
    "  ceph-iscsi's gateway.conf (versions 3 to 11): read through librados from POOL/OBJECT\n"
    "  (default rbd/gateway.conf; ceph.conf from CEPH_CONF, the user from CEPH_ARGS=--id NAME)\n"
    "  or from FILE (an existing file is always read as a file)\n"
    "  --gateway HOST: that gateway only (default: every gateway it names)\n"
    "  -o OUT: with --gateway, the linerate.conf's path; without, a directory that gets one\n"
    "          HOST.conf per gateway (default: print them)\n"
    "  --secrets OUT: the CHAP secrets file (mode 600) all gateways use; needed when there are\n"
    "          CHAP users\n"
    "exit 0: all carried; 1: something a host would see was not carried (see the report on\n"
    "stderr; the files are written); 2: bad usage or input, nothing written\n"
    "--check: compare the running linerate (gateway HOST's successor) with what HOST served\n"
    "(LUN identities, read-only, maps, CHAP users); exit 0 when a host would see no\n"
    "difference, 1 when it would\n";

/* The input: a file when `src` names one, else POOL/OBJECT through librados. */
static int read_source(const char *src, char **text, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    if (stat(src, &st) == 0) {
        FILE *f = fopen(src, "r");
        if (!f || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
            snprintf(err, errlen, "%s: %s", src,
                     f ? "not a regular file of at most 64 MiB" : strerror(errno));
            if (f)
                fclose(f);
            return -1;
        }
        *text = malloc((size_t)st.st_size + 1);
        *len = *text ? fread(*text, 1, (size_t)st.st_size, f) : 0;
        bool ok = *text && !ferror(f);
        fclose(f);
        if (!ok) {
            free(*text);
            snprintf(err, errlen, "%s: cannot read it", src);
            return -1;
        }
        (*text)[*len] = 0;
        return 0;
    }
    const char *slash = strchr(src, '/');
    if (!slash || slash == src || !slash[1] || strchr(slash + 1, '/')) {
        snprintf(err, errlen, "%s: no such file, and not POOL/OBJECT", src);
        return -1;
    }
    char pool[256];
    if ((size_t)(slash - src) >= sizeof(pool)) {
        snprintf(err, errlen, "%s: pool name too long", src);
        return -1;
    }
    snprintf(pool, sizeof(pool), "%.*s", (int)(slash - src), src);
    return ceph_rados_read(pool, slash + 1, text, len, err, errlen);
}

/* The files to write: the secrets (when any) and each gateway's config (when -o). */
static int write_out(const struct ceph_import *r, const char *out, bool one, const char *secrets)
{
    size_t n = 0, max = r->ngw + 1;
    const char **paths = calloc(max, sizeof(*paths)), **texts = calloc(max, sizeof(*texts));
    mode_t *modes = calloc(max, sizeof(*modes));
    char **owned = calloc(max, sizeof(*owned));
    int rc = -1;
    if (!paths || !texts || !modes || !owned)
        goto done;
    if (*r->secrets)
        paths[n] = secrets, texts[n] = r->secrets, modes[n++] = 0600;
    for (size_t i = 0; out && i < r->ngw; i++) {
        if (one)
            paths[n] = out;
        else if (asprintf(&owned[i], "%s/%s.conf", out, r->gw[i].host) < 0)
            goto done;
        else
            paths[n] = owned[i];
        texts[n] = r->gw[i].conf, modes[n++] = 0644;
    }
    rc = imp_write_all(paths, texts, modes, n);
done:
    for (size_t i = 0; owned && i < max; i++)
        free(owned[i]);
    free(owned);
    free(paths);
    free(texts);
    free(modes);
    return rc;
}

/* --check: nothing written; the differences on stdout, exit 1 when there are any. The gateway's
 * targets are compared as lio_check() compares LIO's: ceph-iscsi's gateways are LIO. */
static int check(const char *socket, unsigned wait_s, const char *src, const struct ceph_import *r)
{
    char err[1024];
    assert(r->ngw == 1);
    int n = lio_check(socket, r->gw[0].expect, wait_s, stdout, err, sizeof(err));
    if (n < 0) {
        fprintf(stderr, "linerate-ctl import --check: %s\n", err);
        return CTL_EXIT_NO_DAEMON;
    }
    printf("%d difference%s a host would see between gateway %s of %s and the running "
           "linerate\n",
           n, n == 1 ? "" : "s", r->gw[0].host, src);
    return n ? CTL_EXIT_FAILED : CTL_EXIT_OK;
}

int ctl_import_ceph_main(const char *socket, unsigned wait_s, int argc, char **argv)
{
    const char *src = "rbd/gateway.conf", *out = NULL, *secrets = NULL, *gw = NULL;
    bool have_src = false, check_mode = false;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--secrets") == 0 && i + 1 < argc)
            secrets = argv[++i];
        else if (strcmp(argv[i], "--gateway") == 0 && i + 1 < argc)
            gw = argv[++i];
        else if (strcmp(argv[i], "--check") == 0)
            check_mode = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return CTL_EXIT_OK;
        } else if (argv[i][0] != '-' && !have_src)
            src = argv[i], have_src = true;
        else {
            fputs(usage, stderr);
            return CTL_EXIT_USAGE;
        }
    }
    /* --check compares one gateway: the one the running linerate replaces */
    if (check_mode && (!gw || out || secrets)) {
        fputs("linerate-ctl import ceph-iscsi --check: give --gateway HOST, and neither -o nor "
              "--secrets\n",
              stderr);
        fputs(usage, stderr);
        return CTL_EXIT_USAGE;
    }
    /* the configs name the secrets file by an absolute path (linerate.conf(5)) */
    char abs[PATH_MAX];
    if (imp_secrets_abs(secrets, abs, sizeof(abs)) < 0)
        return CTL_EXIT_USAGE;
    char err[1024], *text = NULL;
    size_t len = 0;
    if (read_source(src, &text, &len, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl import: %s; nothing written\n", err);
        return CTL_EXIT_USAGE;
    }
    struct ceph_import r;
    int got = ceph_import(src, text, len, gw, abs, &r, err, sizeof(err));
    free(text);
    if (got < 0) {
        fprintf(stderr, "linerate-ctl import: %s; nothing written\n", err);
        return CTL_EXIT_USAGE;
    }
    if (check_mode) {
        int crc = check(socket, wait_s, src, &r);
        ceph_import_free(&r);
        return crc;
    }
    int rc = r.lossy ? CTL_EXIT_FAILED : CTL_EXIT_OK;
    struct stat st;
    if (*r.secrets && !secrets) {
        imp_no_secrets(src);
        rc = CTL_EXIT_USAGE;
    } else if (out && !gw && (stat(out, &st) < 0 || !S_ISDIR(st.st_mode))) {
        fprintf(stderr,
                "linerate-ctl import: -o %s: not a directory (without --gateway, -o "
                "names the directory for HOST.conf files); nothing written\n",
                out);
        rc = CTL_EXIT_USAGE;
    } else if ((*r.secrets || out) && write_out(&r, out, gw != NULL, secrets) < 0) {
        rc = CTL_EXIT_USAGE;
    } else if (!out) {
        for (size_t i = 0; i < r.ngw; i++)
            printf("%s# ---- gateway %s\n%s", i ? "\n" : "", r.gw[i].host, r.gw[i].conf);
    }
    if (rc != CTL_EXIT_USAGE)
        imp_report(r.report, r.lossy);
    ceph_import_free(&r);
    return rc;
}
