/* Reading gateway.conf out of RADOS. librados is loaded at run time (dlopen of its soname, as
 * the rbd store is a module of its own): linerate-ctl links no Ceph library, so a machine
 * without Ceph needs none, and only `import ceph-iscsi POOL/OBJECT` asks for it. The calls and
 * their types are librados' C API (rados/librados.h); handles are opaque pointers there. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl/ceph.h"

#define MAX_OBJECT (64u << 20) /* gateway.conf of a large cluster is well under 1 MiB */

typedef void *rados_handle;

struct rados_api {
    int (*create)(rados_handle *cluster, const char *id);
    int (*conf_read_file)(rados_handle cluster, const char *path);
    int (*conf_parse_env)(rados_handle cluster, const char *var);
    int (*conf_set)(rados_handle cluster, const char *option, const char *value);
    int (*connect)(rados_handle cluster);
    void (*shutdown)(rados_handle cluster);
    int (*ioctx_create)(rados_handle cluster, const char *pool, rados_handle *io);
    void (*ioctx_destroy)(rados_handle io);
    int (*stat)(rados_handle io, const char *oid, uint64_t *size, time_t *mtime);
    int (*read)(rados_handle io, const char *oid, char *buf, size_t len, uint64_t off);
};

static int load(struct rados_api *a, char *err, size_t errlen)
{
    void *h = dlopen("librados.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load librados (install librados2, or import a file): %s",
                 dlerror());
        return -1;
    }
    static const char *const names[] = {"rados_create",         "rados_conf_read_file",
                                        "rados_conf_parse_env", "rados_conf_set",
                                        "rados_connect",        "rados_shutdown",
                                        "rados_ioctx_create",   "rados_ioctx_destroy",
                                        "rados_stat",           "rados_read"};
    void **slots[] = {(void **)&a->create,         (void **)&a->conf_read_file,
                      (void **)&a->conf_parse_env, (void **)&a->conf_set,
                      (void **)&a->connect,        (void **)&a->shutdown,
                      (void **)&a->ioctx_create,   (void **)&a->ioctx_destroy,
                      (void **)&a->stat,           (void **)&a->read};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *slots[i] = dlsym(h, names[i]);
        if (!*slots[i]) {
            snprintf(err, errlen, "librados has no %s", names[i]);
            return -1;
        }
    }
    return 0; /* the library stays loaded: linerate-ctl exits soon */
}

int ceph_rados_read(const char *pool, const char *object, char **text, size_t *len, char *err,
                    size_t errlen)
{
    struct rados_api a;
    if (load(&a, err, errlen) < 0)
        return -1;
    rados_handle cl = NULL, io = NULL;
    const char *step = "rados_create";
    int r = a.create(&cl, NULL);
    /* CEPH_CONF or the default places; CEPH_ARGS for --id, --keyring, ... (as rados(8)) */
    if (r == 0)
        step = "reading ceph.conf", r = a.conf_read_file(cl, NULL);
    if (r == 0)
        step = "CEPH_ARGS", r = a.conf_parse_env(cl, NULL);
    if (r == 0) /* a cluster that does not answer is an error, not a hang */
        a.conf_set(cl, "client_mount_timeout", "30");
    if (r == 0)
        step = "connecting to the cluster", r = a.connect(cl);
    if (r == 0)
        step = "opening the pool", r = a.ioctx_create(cl, pool, &io);
    uint64_t size = 0;
    time_t mtime;
    if (r == 0)
        step = "stat of the object", r = a.stat(io, object, &size, &mtime);
    if (r == 0 && size > MAX_OBJECT)
        step = "the object's size", r = -EFBIG;
    char *buf = NULL;
    if (r == 0) {
        buf = malloc(size + 1);
        r = buf ? 0 : -ENOMEM;
    }
    /* read to the end: another gateway may be rewriting it (ceph-iscsi rereads until the
     * JSON parses; a short or torn read shows here as JSON that does not parse) */
    uint64_t got = 0;
    while (r == 0 && got < size) {
        step = "reading the object";
        int n = a.read(io, object, buf + got, (size_t)(size - got), got);
        if (n < 0)
            r = n;
        else if (n == 0)
            break;
        else
            got += (uint64_t)n;
    }
    if (io)
        a.ioctx_destroy(io);
    if (cl)
        a.shutdown(cl);
    if (r < 0) {
        free(buf);
        snprintf(err, errlen, "%s/%s: %s: %s", pool, object, step, strerror(-r));
        return -1;
    }
    buf[got] = 0;
    *text = buf;
    *len = (size_t)got;
    return 0;
}
