/* The importers' results written all or nothing (import_json.h): a malformed input or a full
 * disk never leaves a config naming a secrets file that is not there, nor half of a cluster's
 * gateway files, and a failed rename puts back the files that were there before. A secrets
 * file is created new, with its mode (600), before it holds a byte. */
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
    /* A file of that name made before (by another user, or still open somewhere) is never
     * written into: it could be read through a descriptor opened before the secrets went in.
     * It goes, and the file is created new (O_EXCL, which also refuses a symbolic link). */
    if (unlink(tmp) < 0 && errno != ENOENT)
        return -1;
    /* a file replaced keeps the mode its owner gave it; a secrets file never gets wider */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        mode = (st.st_mode & 0777) & (mode & 077 ? 0777 : mode);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
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

/* `path` copied to `old` (new, mode `mode`), synced. 0, or -1 with errno (and no `old`). */
static int copy_old(const char *path, const char *old, mode_t mode)
{
    int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return -1;
    int out = open(old, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    bool ok = out >= 0 && fchmod(out, mode) == 0;
    char buf[8192];
    for (ssize_t n; ok && (n = read(in, buf, sizeof(buf))) != 0;) {
        if (n < 0 && errno == EINTR)
            continue;
        for (ssize_t off = 0; ok && n > 0 && off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            ok = w > 0;
            off += ok ? w : 0;
        }
        ok = ok && n > 0;
    }
    ok = ok && fsync(out) == 0;
    int e = errno;
    close(in);
    if (out >= 0 && close(out) < 0 && ok)
        ok = false, e = errno;
    if (!ok) {
        if (out >= 0)
            unlink(old);
        errno = e;
        return -1;
    }
    return 0;
}

/* A hard link `path`.import-old to what is at `path` now (its name in `old`): 1, 0 when
 * nothing is there, -1 with errno. A link, not a copy: the rename that replaces `path` leaves
 * the old file whole under the second name (a copy where no link can be made). */
static int keep_old(const char *path, char *old, size_t oldlen)
{
    if (snprintf(old, oldlen, "%s.import-old", path) >= (int)oldlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (unlink(old) < 0 && errno != ENOENT)
        return -1;
    if (link(path, old) == 0)
        return 1;
    /* a directory cannot be linked, nor replaced: its rename fails and takes the others back */
    struct stat st;
    int e = errno;
    if (e == EPERM && lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    /* no hard link here (a file system without them, or protected_hardlinks and a file of
     * another owner): a copy, its mode kept, to put back */
    if ((e == EPERM || e == EXDEV || e == EMLINK || e == ENOTSUP) && lstat(path, &st) == 0 &&
        S_ISREG(st.st_mode))
        return copy_old(path, old, st.st_mode & 0777) < 0 ? -1 : 1;
    errno = e;
    return e == ENOENT ? 0 : -1;
}

/* The renames made durable: each path's directory synced (a crash after the import returns
 * leaves the new files, not the old ones); a failure here is not the import's. */
static void sync_dirs(const char *const *paths, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char dir[PATH_MAX];
        const char *slash = strrchr(paths[i], '/');
        if (!slash)
            snprintf(dir, sizeof(dir), ".");
        else if (snprintf(dir, sizeof(dir), "%.*s", (int)(slash - paths[i] + (slash == paths[i])),
                          paths[i]) >= (int)sizeof(dir))
            continue;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
}

int imp_write_all(const char *const *paths, const char *const *texts, const mode_t *modes, size_t n)
{
    char(*tmp)[PATH_MAX] = calloc(n ? n : 1, PATH_MAX);
    char(*old)[PATH_MAX] = calloc(n ? n : 1, PATH_MAX);
    int *had = calloc(n ? n : 1, sizeof(*had));
    if (!tmp || !old || !had) {
        free(tmp);
        free(old);
        free(had);
        fputs("linerate-ctl import: out of memory; nothing written\n", stderr);
        return -1;
    }
    size_t written = 0, kept = 0, renamed = 0;
    const char *failed = NULL;
    while (written < n && !failed) {
        if (write_tmp(paths[written], texts[written], modes[written], tmp[written], PATH_MAX) < 0)
            failed = paths[written];
        else
            written++;
    }
    while (kept < n && !failed) {
        if ((had[kept] = keep_old(paths[kept], old[kept], PATH_MAX)) < 0)
            failed = paths[kept];
        else
            kept++;
    }
    while (renamed < n && !failed) {
        if (rename(tmp[renamed], paths[renamed]) < 0)
            failed = paths[renamed];
        else
            renamed++;
    }
    int e = errno;
    if (!failed)
        sync_dirs(paths, n);
    /* On failure the temporary files go, and what was renamed is taken back: the file that was
     * at that path before is renamed back into place, or the new one removed when there was
     * none. On success the links to the old files go. */
    for (size_t i = 0; i < written; i++) {
        bool back = failed && i < renamed; /* path holds the new file, to be taken back */
        if (failed && !back)
            unlink(tmp[i]);
        if (back && !had[i])
            unlink(paths[i]);
        if (i >= kept || had[i] != 1)
            continue;
        if (!back)
            unlink(old[i]);
        else if (rename(old[i], paths[i]) < 0)
            fprintf(stderr, "linerate-ctl import: %s: cannot put it back (%s); it is %s\n",
                    paths[i], strerror(errno), old[i]);
    }
    free(tmp);
    free(old);
    free(had);
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
    if (n < 0 || (size_t)n >= len || !imp_line_ok(abs)) {
        fputs("linerate-ctl import: --secrets: path too long, or with a character a line of "
              "linerate.conf cannot hold (newline, ' #', a blank at its end)\n",
              stderr);
        return -1;
    }
    return 0;
}

void imp_no_secrets(const char *src)
{
    fprintf(stderr,
            "linerate-ctl import: %s has CHAP secrets: give --secrets FILE; nothing written\n",
            src);
}

void imp_report(const char *report, bool lossy)
{
    fputs(report, stderr);
    if (lossy)
        fputs("linerate-ctl import: some of what hosts see was NOT CARRIED (above)\n", stderr);
}

bool imp_line_ok(const char *s)
{
    /* a control character ends or breaks the line, " #" begins a comment (linerate.conf(5)),
     * and the line's end is trimmed: each would name another file */
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return n && s[n - 1] != ' ' && s[n - 1] != '\t' && !strstr(s, " #") && !strstr(s, "\t#");
}
