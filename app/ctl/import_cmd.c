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

#include "ctl/ctl.h"
#include "ctl/lio.h"

/* Write `text` to `path` through a temporary file renamed over it. */
static int write_file(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.import-tmp", path) >= (int)sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    bool ok = fchmod(fd, mode) == 0;
    while (ok && len) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        if (ok)
            text += n, len -= (size_t)n;
    }
    ok = ok && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

static const char import_usage[] =
    "usage: linerate-ctl import lio FILE [-o OUT] [--secrets OUT]\n"
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
    char abs[PATH_MAX] = "(give --secrets FILE)", cwd[PATH_MAX];
    if (secrets && secrets[0] != '/' && getcwd(cwd, sizeof(cwd))) {
        if (snprintf(abs, sizeof(abs), "%s/%s", cwd, secrets) >= (int)sizeof(abs)) {
            fputs("linerate-ctl import: --secrets: path too long\n", stderr);
            return CTL_EXIT_USAGE;
        }
    } else if (secrets)
        snprintf(abs, sizeof(abs), "%s", secrets);
    struct lio_import r;
    char err[1024];
    if (lio_import(file, abs, &r, err, sizeof(err)) < 0) {
        fprintf(stderr, "linerate-ctl import: %s; nothing written\n", err);
        return CTL_EXIT_USAGE;
    }
    int rc = r.lossy ? CTL_EXIT_FAILED : CTL_EXIT_OK;
    if (*r.secrets && !secrets) {
        fprintf(stderr,
                "linerate-ctl import: %s has CHAP secrets: give --secrets FILE; nothing "
                "written\n",
                file);
        rc = CTL_EXIT_USAGE;
    } else if (*r.secrets && write_file(secrets, r.secrets, 0600) < 0) {
        fprintf(stderr, "linerate-ctl import: %s: %s\n", secrets, strerror(errno));
        rc = CTL_EXIT_USAGE;
    } else if (out && write_file(out, r.conf, 0644) < 0) {
        fprintf(stderr, "linerate-ctl import: %s: %s\n", out, strerror(errno));
        rc = CTL_EXIT_USAGE;
    } else if (!out) {
        fputs(r.conf, stdout);
    }
    if (rc != CTL_EXIT_USAGE) {
        fputs(r.report, stderr);
        if (r.lossy)
            fputs("linerate-ctl import: some of what hosts see was NOT CARRIED (above)\n", stderr);
    }
    lio_import_free(&r);
    return rc;
}
