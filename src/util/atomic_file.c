/* Whole-or-nothing file replacement and the sweep of what a crash left (atomic_file.h). */
#include "util/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

/* The directory of path and its last component, into dir/base (PATH_MAX-sized). */
static int split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    int n;
    if (!slash)
        n = snprintf(dir, dirlen, ".");
    else
        n = snprintf(dir, dirlen, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    *base = slash ? slash + 1 : path;
    return n < 0 || (size_t)n >= dirlen || !**base ? -ENAMETOOLONG : 0;
}

static int sync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int err = fsync(dfd) != 0 ? -errno : 0;
    close(dfd);
    return err;
}

int atomic_file_write(const char *path, const char *text, size_t len, mode_t mode)
{
    char tmp[4096], dir[4096];
    const char *base;
    if (split_path(path, dir, sizeof(dir), &base) < 0 ||
        snprintf(tmp, sizeof(tmp), "%s/.%s.XXXXXX", dir, base) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -errno;
    int err = 0;
    for (size_t off = 0; off < len && !err;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno != EINTR)
            err = -errno;
        off += w > 0 ? (size_t)w : 0;
    }
    if (!err && (fchmod(fd, mode) != 0 || fsync(fd) != 0))
        err = -errno;
    if (close(fd) != 0 && !err)
        err = -errno;
    if (!err && rename(tmp, path) != 0)
        err = -errno;
    if (err) {
        unlink(tmp);
        return err;
    }
    return sync_dir(dir);
}

/* mkstemp's suffix: exactly six letters or digits. */
static int is_temp_of(const char *name, const char *base)
{
    size_t bl = strlen(base);
    if (name[0] != '.' || strncmp(name + 1, base, bl) != 0 || name[1 + bl] != '.')
        return 0;
    const char *x = name + 2 + bl;
    for (int i = 0; i < 6; i++)
        if (!((x[i] >= 'a' && x[i] <= 'z') || (x[i] >= 'A' && x[i] <= 'Z') ||
              (x[i] >= '0' && x[i] <= '9')))
            return 0;
    return x[6] == '\0';
}

int atomic_file_sweep(const char *path)
{
    char dir[4096];
    const char *base;
    if (split_path(path, dir, sizeof(dir), &base) < 0)
        return -ENAMETOOLONG;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_temp_of(e->d_name, base))
            continue;
        /* unlinkat on the directory we listed: a symlink named so is removed, not followed */
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            LOG_INFO("removed %s/%s, a temporary file an interrupted save of %s left", dir,
                     e->d_name, path);
            removed++;
        }
    }
    closedir(d);
    return removed;
}
