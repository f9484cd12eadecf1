/* Finding the rbd store: bs_rbd.c is a module of its own (linerate-rbd.so, see meson.build), so
 * that the daemon links no Ceph library; it is loaded (dlopen) by the first rbd: LUN. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bs/bs_store.h"

/* bs_rbd.c when it is linked in (its unit test, over a fake librbd): called directly. */
struct bs *bs_rbd_open(const struct bs_rbd_params *p, bool *transient, char *err, size_t errlen)
    __attribute__((weak));

typedef struct bs *(*rbd_open_fn)(const struct bs_rbd_params *p, bool *transient, char *err,
                                  size_t errlen);
static pthread_once_t rbd_once = PTHREAD_ONCE_INIT;
static rbd_open_fn rbd_fn;
static char rbd_why[512];

/* The rbd module, loaded once by the first rbd: LUN: a build tree's beside its daemon
 * (build/linerate-target, build/src/bs/linerate-rbd.so), else the installed one. Only those
 * two paths, never one from the environment: the daemon runs as root. */
static void rbd_load(void)
{
    char exe[PATH_MAX], local[PATH_MAX + 32];
    const char *paths[2];
    unsigned n = 0;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash = len > 0 ? (exe[len] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        snprintf(local, sizeof(local), "%s/src/bs/linerate-rbd.so", exe);
        if (access(local, F_OK) == 0)
            paths[n++] = local;
    }
    paths[n++] = LR_RBD_MODULE;
    for (unsigned i = 0; i < n && !rbd_fn; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = h ? NULL : dlerror();
        if (h)
            rbd_fn = (rbd_open_fn)dlsym(h, "bs_rbd_open");
        if (!rbd_fn)
            snprintf(rbd_why, sizeof(rbd_why), "%s", e ? e : "no bs_rbd_open in it");
    }
}

struct bs *bs_rbd_module_open(const struct bs_rbd_params *p, bool *transient, char *err,
                              size_t errlen)
{
    if (bs_rbd_open)
        return bs_rbd_open(p, transient, err, errlen);
    pthread_once(&rbd_once, rbd_load);
    if (!rbd_fn) {
        if (err && errlen)
            snprintf(err, errlen,
                     "rbd:%s/%s: the rbd store is not installed (%s): install the linerate-rbd "
                     "package",
                     p->pool, p->image, rbd_why);
        return NULL;
    }
    return rbd_fn(p, transient, err, errlen);
}
