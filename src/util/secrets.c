/* The CHAP secrets file reader: permission checks on the open descriptor (no race between
 * checking and reading), "NAME SECRET" lines, secret length bounds (RFC 7143 §12.1.3), and
 * explicit_bzero on everything that held a line. */
#include "util/secrets.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

static int check_file(int fd, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s: owned by uid %u, not by this process's user (uid %u)", path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen,
                 "%s: group or others may access it (mode %04o); it holds secrets: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 07777), path);
        return -1;
    }
    return 0;
}

/* One line: "NAME SECRET"; the secret is the rest of the line without the white space
 * around it (it may contain spaces and '#'). Returns 0, or -1 with err set. */
static int take_line(char *line, size_t len, const char *path, unsigned lineno,
                     struct secret_want *want, unsigned nwant, char *err, size_t errlen)
{
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                   line[len - 1] == '\t'))
        line[--len] = '\0';
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    char *name = p;
    p += strcspn(p, " \t");
    if (*p == '\0') {
        snprintf(err, errlen, "%s:%u: expected 'NAME SECRET'", path, lineno);
        return -1;
    }
    *p++ = '\0';
    while (*p == ' ' || *p == '\t')
        p++;
    size_t slen = strlen(p);
    for (unsigned i = 0; i < nwant; i++) {
        if (strcmp(want[i].name, name) != 0)
            continue;
        if (want[i].found) {
            snprintf(err, errlen, "%s:%u: user %s is listed twice", path, lineno, name);
            return -1;
        }
        if (slen < SECRETS_MIN_LEN || slen > SECRETS_MAX_LEN) {
            snprintf(err, errlen,
                     "%s:%u: the secret of user %s is %zu bytes: %d to %d are required "
                     "(RFC 7143 12.1.3: at least 96 bits)",
                     path, lineno, name, slen, SECRETS_MIN_LEN, SECRETS_MAX_LEN);
            return -1;
        }
        if (slen < SECRETS_GOOD_LEN)
            LOG_WARN("%s:%u: the secret of user %s is %zu bytes; %d or more are recommended", path,
                     lineno, name, slen, SECRETS_GOOD_LEN);
        memcpy(want[i].secret, p, slen);
        want[i].len = slen;
        want[i].found = true;
    }
    return 0;
}

int secrets_load(const char *path, struct secret_want *want, unsigned nwant, char *err,
                 size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open the CHAP secrets file: %s", path, strerror(errno));
        return -1;
    }
    if (check_file(fd, path, err, errlen) < 0) {
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    /* no stdio buffer: what it would hold of the file could not be wiped */
    setvbuf(f, NULL, _IONBF, 0);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, '\0', (size_t)len)) {
            snprintf(err, errlen, "%s:%u: NUL byte", path, lineno);
            rc = -1;
        } else {
            rc = take_line(line, (size_t)len, path, lineno, want, nwant, err, errlen);
        }
        explicit_bzero(line, cap);
    }
    if (line)
        explicit_bzero(line, cap);
    free(line);
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    for (unsigned i = 0; rc == 0 && i < nwant; i++) {
        if (!want[i].found) {
            snprintf(err, errlen, "%s: no secret for CHAP user %s", path, want[i].name);
            rc = -1;
        }
    }
    return rc;
}
