/* The importers' results written all or nothing (import_json.h): a malformed input or a full
 * disk never leaves a config naming a secrets file that is not there, nor half of a cluster's
 * gateway files. A secrets file is created with its mode (600) before it holds a byte. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl/import_json.h"

/* `text` into `path`.import-tmp (its name in `tmp`), synced. 0, or -1 with errno. */
static int write_tmp(const char *path, const char *text, mode_t mode, char *tmp, size_t tmplen)
{
    if (snprintf(tmp, tmplen, "%s.import-tmp", path) >= (int)tmplen) {
        errno = ENAMETOOLONG;
        return -1;
    }
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
    if (!ok) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int imp_write_all(const char *const *paths, const char *const *texts, const mode_t *modes, size_t n)
{
    char(*tmp)[PATH_MAX] = calloc(n ? n : 1, PATH_MAX);
    if (!tmp) {
        fputs("linerate-ctl import: out of memory; nothing written\n", stderr);
        return -1;
    }
    size_t written = 0, renamed = 0;
    const char *failed = NULL;
    while (written < n && !failed) {
        if (write_tmp(paths[written], texts[written], modes[written], tmp[written], PATH_MAX) < 0)
            failed = paths[written];
        else
            written++;
    }
    while (renamed < n && !failed) {
        if (rename(tmp[renamed], paths[renamed]) < 0)
            failed = paths[renamed];
        else
            renamed++;
    }
    int e = errno;
    /* on failure: the temporary files go, and what was already renamed is taken back */
    for (size_t i = 0; failed && i < written; i++)
        unlink(i < renamed ? paths[i] : tmp[i]);
    free(tmp);
    if (!failed)
        return 0;
    fprintf(stderr, "linerate-ctl import: %s: %s; nothing written\n", failed, strerror(e));
    return -1;
}

int imp_secrets_abs(const char *secrets, char *abs, size_t len)
{
    char cwd[PATH_MAX];
    int n;
    if (!secrets)
        n = snprintf(abs, len, "(give --secrets FILE)");
    else if (secrets[0] != '/' && getcwd(cwd, sizeof(cwd)))
        n = snprintf(abs, len, "%s/%s", cwd, secrets);
    else
        n = snprintf(abs, len, "%s", secrets);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
