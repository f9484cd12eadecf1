/* The librbd/librados stand-in of test_bs_rbd (see rbd_fake.h): exactly the calls bs_rbd.c
 * makes, with librbd's signatures, so that a call bs_rbd.c starts to make and this file does
 * not define fails the link instead of reaching a real cluster library. */
#include <errno.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rbd_fake.h"
#include "util/iov.h"

struct rbd_fake rbd_fake;

struct fake_comp {
    rbd_callback_t cb;
    void *arg;
    ssize_t ret;
    bool complete;
    uint64_t *mismatch; /* compare and write: where the mismatch offset goes */
};

static struct fake_comp *pending[RBD_FAKE_LOG_MAX];
static int npending;

static void fake_die(const char *what)
{
    /* not a cmocka assertion: this may run on the fake's completion thread */
    fprintf(stderr, "rbd_fake: %s\n", what);
    abort();
}

void rbd_fake_reset(uint64_t size)
{
    free(rbd_fake.mem);
    memset(&rbd_fake, 0, sizeof(rbd_fake));
    rbd_fake.mem = calloc(1, size);
    rbd_fake.size = size;
    rbd_fake.obj_size = 4u << 20;
    rbd_fake.exists = true;
    npending = 0;
}

void rbd_fake_free(void)
{
    free(rbd_fake.mem);
    rbd_fake.mem = NULL;
}

void rbd_fake_script(ssize_t result)
{
    if (rbd_fake.next_script == rbd_fake.nscript) /* all used: start over */
        rbd_fake.next_script = rbd_fake.nscript = 0;
    if (rbd_fake.nscript == RBD_FAKE_SCRIPT_MAX)
        fake_die("script full");
    rbd_fake.script[rbd_fake.nscript++] = result;
}

int rbd_fake_pending(void)
{
    return npending;
}

static void *finisher(void *arg)
{
    struct fake_comp **list = arg;
    for (int i = 0; list[i]; i++) {
        struct fake_comp *c = list[i];
        /* librbd fills the mismatch offset in before it completes */
        if (c->ret == -EILSEQ && c->mismatch)
            *c->mismatch = rbd_fake.mismatch_image_off;
        c->complete = true;
        c->cb(c, c->arg); /* may release c */
    }
    return NULL;
}

int rbd_fake_complete(void)
{
    struct fake_comp *list[RBD_FAKE_LOG_MAX + 1];
    int n = npending;
    memcpy(list, pending, (size_t)n * sizeof(list[0]));
    list[n] = NULL;
    npending = 0; /* callbacks may issue new requests only through the reactor, later */
    pthread_t th;
    if (pthread_create(&th, NULL, finisher, list) != 0)
        fake_die("pthread_create");
    pthread_join(th, NULL);
    return n;
}

/* ---- completions -------------------------------------------------------------------- */

int rbd_aio_create_completion(void *cb_arg, rbd_callback_t complete_cb, rbd_completion_t *c)
{
    struct fake_comp *fc = calloc(1, sizeof(*fc));
    if (!fc)
        return -ENOMEM;
    fc->cb = complete_cb;
    fc->arg = cb_arg;
    __atomic_fetch_add(&rbd_fake.completions, 1, __ATOMIC_RELAXED);
    *c = fc;
    return 0;
}

ssize_t rbd_aio_get_return_value(rbd_completion_t c)
{
    struct fake_comp *fc = c;
    if (!fc->complete)
        fake_die("rbd_aio_get_return_value before completion");
    return fc->ret;
}

int rbd_aio_wait_for_complete(rbd_completion_t c)
{
    struct fake_comp *fc = c;
    if (!fc->complete) /* only a completion without a callback is waited for here */
        fake_die("waiting for a completion that has a callback");
    return 0;
}

void rbd_aio_release(rbd_completion_t c)
{
    __atomic_fetch_sub(&rbd_fake.completions, 1, __ATOMIC_RELAXED);
    free(c);
}

/* Log the request, take its scripted result; without a callback it completes now, with
 * one it waits for rbd_fake_complete(). Returns the result, for the data transfer. */
static ssize_t fake_issue(rbd_completion_t c, struct rbd_fake_req r, uint64_t *mismatch)
{
    struct fake_comp *fc = c;
    if (rbd_fake.nlog == RBD_FAKE_LOG_MAX)
        fake_die("request log full");
    r.result = r.op == FAKE_READ ? (ssize_t)r.len : 0;
    if (rbd_fake.next_script < rbd_fake.nscript)
        r.result = rbd_fake.script[rbd_fake.next_script++];
    r.has_cb = fc->cb != NULL;
    rbd_fake.log[rbd_fake.nlog++] = r;
    fc->ret = r.result;
    fc->mismatch = mismatch;
    if (fc->cb) {
        pending[npending++] = fc;
    } else {
        if (r.result == -EILSEQ && mismatch)
            *mismatch = rbd_fake.mismatch_image_off;
        fc->complete = true;
    }
    return r.result;
}

static int fake_refuse(void)
{
    int e = rbd_fake.submit_err;
    rbd_fake.submit_err = 0;
    return e;
}

static uint64_t iov_sum(const struct iovec *iov, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += iov[i].iov_len;
    return s;
}

static bool in_image(uint64_t off, uint64_t len)
{
    return off <= rbd_fake.size && len <= rbd_fake.size - off;
}

int rbd_aio_readv(rbd_image_t image, const struct iovec *iov, int iovcnt, uint64_t off,
                  rbd_completion_t c)
{
    (void)image;
    if (rbd_fake.submit_err)
        return fake_refuse();
    uint64_t len = iov_sum(iov, iovcnt);
    if (!in_image(off, len))
        fake_die("readv beyond the image");
    struct rbd_fake_req r = {.op = FAKE_READ, .off = off, .len = len, .iovcnt = iovcnt};
    if (fake_issue(c, r, NULL) >= 0)
        iov_copy_in(iov, iovcnt, 0, rbd_fake.mem + off, len);
    return 0;
}

int rbd_aio_writev(rbd_image_t image, const struct iovec *iov, int iovcnt, uint64_t off,
                   rbd_completion_t c)
{
    (void)image;
    if (rbd_fake.submit_err)
        return fake_refuse();
    uint64_t len = iov_sum(iov, iovcnt);
    if (!in_image(off, len))
        fake_die("writev beyond the image");
    struct rbd_fake_req r = {.op = FAKE_WRITE, .off = off, .len = len, .iovcnt = iovcnt};
    if (fake_issue(c, r, NULL) >= 0)
        iov_copy_out(iov, iovcnt, rbd_fake.mem + off, len);
    return 0;
}

int rbd_aio_flush(rbd_image_t image, rbd_completion_t c)
{
    (void)image;
    if (rbd_fake.submit_err)
        return fake_refuse();
    fake_issue(c, (struct rbd_fake_req){.op = FAKE_FLUSH}, NULL);
    return 0;
}

int rbd_aio_discard(rbd_image_t image, uint64_t off, uint64_t len, rbd_completion_t c)
{
    (void)image;
    if (rbd_fake.submit_err)
        return fake_refuse();
    if (!in_image(off, len))
        fake_die("discard beyond the image");
    if (fake_issue(c, (struct rbd_fake_req){.op = FAKE_DISCARD, .off = off, .len = len}, NULL) >= 0)
        memset(rbd_fake.mem + off, 0, len);
    return 0;
}

int rbd_aio_writesame(rbd_image_t image, uint64_t off, size_t len, const char *buf, size_t data_len,
                      rbd_completion_t c, int op_flags)
{
    (void)image;
    (void)op_flags;
    if (rbd_fake.submit_err)
        return fake_refuse();
    if (!in_image(off, len) || !data_len || len % data_len)
        fake_die("bad writesame");
    struct rbd_fake_req r = {.op = FAKE_WRITESAME, .off = off, .len = len, .data_len = data_len};
    if (fake_issue(c, r, NULL) >= 0)
        for (uint64_t o = 0; o < len; o += data_len)
            memcpy(rbd_fake.mem + off + o, buf, data_len);
    return 0;
}

ssize_t rbd_aio_compare_and_write(rbd_image_t image, uint64_t off, size_t len, const char *cmp_buf,
                                  const char *buf, rbd_completion_t c, uint64_t *mismatch_off,
                                  int op_flags)
{
    (void)image;
    (void)cmp_buf;
    (void)op_flags;
    if (rbd_fake.submit_err)
        return fake_refuse();
    if (!in_image(off, len))
        fake_die("compare and write beyond the image");
    struct rbd_fake_req r = {.op = FAKE_CAW, .off = off, .len = len};
    if (fake_issue(c, r, mismatch_off) >= 0)
        memcpy(rbd_fake.mem + off, buf, len);
    return 0;
}

/* ---- the image ---------------------------------------------------------------------- */

int rbd_open(rados_ioctx_t io, const char *name, rbd_image_t *image, const char *snap_name)
{
    (void)io;
    (void)name;
    (void)snap_name;
    if (!rbd_fake.exists)
        return -ENOENT;
    rbd_fake.opened_read_only = false;
    *image = &rbd_fake;
    return 0;
}

int rbd_open_read_only(rados_ioctx_t io, const char *name, rbd_image_t *image,
                       const char *snap_name)
{
    int ret = rbd_open(io, name, image, snap_name);
    rbd_fake.opened_read_only = ret == 0;
    return ret;
}

int rbd_create(rados_ioctx_t io, const char *name, uint64_t size, int *order)
{
    (void)io;
    (void)name;
    (void)order;
    if (size != rbd_fake.size)
        return -EINVAL; /* the fake's memory is sized by rbd_fake_reset */
    rbd_fake.exists = true;
    return 0;
}

int rbd_close(rbd_image_t image)
{
    (void)image;
    return 0;
}

int rbd_get_size(rbd_image_t image, uint64_t *size)
{
    (void)image;
    *size = rbd_fake.size;
    return 0;
}

int rbd_get_id(rbd_image_t image, char *id, size_t id_len)
{
    (void)image;
    snprintf(id, id_len, "%s", "10f2a5b7c3d9");
    return 0;
}

int rbd_stat(rbd_image_t image, rbd_image_info_t *info, size_t infosize)
{
    (void)image;
    (void)infosize;
    memset(info, 0, sizeof(*info));
    info->size = rbd_fake.size;
    info->obj_size = rbd_fake.obj_size;
    return 0;
}

int rbd_get_stripe_unit(rbd_image_t image, uint64_t *stripe_unit)
{
    (void)image;
    *stripe_unit = rbd_fake.stripe_unit ? rbd_fake.stripe_unit : rbd_fake.obj_size;
    return 0;
}

int rbd_get_stripe_count(rbd_image_t image, uint64_t *stripe_count)
{
    (void)image;
    *stripe_count = rbd_fake.stripe_count ? rbd_fake.stripe_count : 1;
    return 0;
}

int rbd_resize(rbd_image_t image, uint64_t size)
{
    (void)image;
    (void)size;
    return -EOPNOTSUPP;
}

int rbd_diff_iterate2(rbd_image_t image, const char *fromsnapname, uint64_t ofs, uint64_t len,
                      uint8_t include_parent, uint8_t whole_object,
                      int (*cb)(uint64_t, size_t, int, void *), void *arg)
{
    (void)image;
    (void)fromsnapname;
    (void)include_parent;
    (void)whole_object;
    int ret = cb(ofs, (size_t)len, 1, arg); /* all allocated */
    return ret < 0 ? ret : 0;
}

int rbd_update_watch(rbd_image_t image, uint64_t *handle, rbd_update_callback_t watch_cb, void *arg)
{
    (void)image;
    (void)watch_cb;
    (void)arg;
    rbd_fake.update_watched = true;
    *handle = rbd_fake.update_handle = 7;
    return 0;
}

int rbd_update_unwatch(rbd_image_t image, uint64_t handle)
{
    (void)image;
    if (!rbd_fake.update_watched || handle != rbd_fake.update_handle)
        return -ENOENT;
    rbd_fake.update_watched = false;
    return 0;
}

/* ---- the cluster -------------------------------------------------------------------- */

int rados_create(rados_t *cluster, const char *const id)
{
    snprintf(rbd_fake.client_id, sizeof(rbd_fake.client_id), "%s", id ? id : "");
    *cluster = &rbd_fake;
    return 0;
}

int rados_conf_read_file(rados_t cluster, const char *path)
{
    (void)cluster;
    (void)path;
    return 0;
}

int rados_conf_parse_env(rados_t cluster, const char *var)
{
    (void)cluster;
    (void)var;
    return 0;
}

int rados_conf_set(rados_t cluster, const char *option, const char *value)
{
    (void)cluster;
    if (strcmp(option, "rados_osd_op_timeout") == 0)
        snprintf(rbd_fake.osd_op_timeout, sizeof(rbd_fake.osd_op_timeout), "%s", value);
    else if (strcmp(option, "rbd_cache") == 0)
        snprintf(rbd_fake.rbd_cache, sizeof(rbd_fake.rbd_cache), "%s", value);
    else if (strcmp(option, "rbd_persistent_cache_mode") == 0)
        snprintf(rbd_fake.pwl_mode, sizeof(rbd_fake.pwl_mode), "%s", value);
    else if (strcmp(option, "rbd_skip_partial_discard") == 0)
        snprintf(rbd_fake.skip_partial_discard, sizeof(rbd_fake.skip_partial_discard), "%s", value);
    return 0;
}

/* Only what bs_rbd.c reads back for its messages: the client's name, the monitors and the
 * keyring it looked in. */
int rados_conf_get(rados_t cluster, const char *option, char *buf, size_t len)
{
    (void)cluster;
    if (strcmp(option, "keyring") == 0)
        snprintf(buf, len, "/etc/ceph/ceph.client.fake.keyring");
    else if (strcmp(option, "mon_host") == 0)
        snprintf(buf, len, "127.0.0.1:6789");
    else if (strcmp(option, "name") == 0)
        snprintf(buf, len, "client.%s", rbd_fake.client_id[0] ? rbd_fake.client_id : "admin");
    else
        return -ENOENT;
    return 0;
}

/* Three options as librbd lists them: rbd_cache (the image's own setting over the client's),
 * rbd_persistent_cache_mode (the client's; librbd's default is disabled) and rbd_plugins (the
 * pool's own setting, else empty). */
int rbd_config_image_list(rbd_image_t image, rbd_config_option_t *options, int *max_options)
{
    (void)image;
    if (*max_options < 3) {
        *max_options = 3;
        return -ERANGE;
    }
    bool own = rbd_fake.image_rbd_cache[0] != '\0';
    options[0].name = strdup("rbd_cache");
    options[0].value = strdup(own                     ? rbd_fake.image_rbd_cache
                              : rbd_fake.rbd_cache[0] ? rbd_fake.rbd_cache
                                                      : "true");
    options[0].source = own ? RBD_CONFIG_SOURCE_IMAGE : RBD_CONFIG_SOURCE_CONFIG;
    options[1].name = strdup("rbd_persistent_cache_mode");
    options[1].value = strdup(rbd_fake.pwl_mode[0] ? rbd_fake.pwl_mode : "disabled");
    options[1].source = RBD_CONFIG_SOURCE_CONFIG;
    options[2].name = strdup("rbd_plugins");
    options[2].value = strdup(rbd_fake.pool_plugins);
    options[2].source =
        rbd_fake.pool_plugins[0] ? RBD_CONFIG_SOURCE_POOL : RBD_CONFIG_SOURCE_CONFIG;
    *max_options = 3;
    return 0;
}

void rbd_config_image_list_cleanup(rbd_config_option_t *options, int max_options)
{
    for (int i = 0; i < max_options; i++) {
        free(options[i].name);
        free(options[i].value);
    }
}

int rados_wait_for_latest_osdmap(rados_t cluster)
{
    (void)cluster;
    return 0;
}

int rados_connect(rados_t cluster)
{
    (void)cluster;
    return 0;
}

void rados_shutdown(rados_t cluster)
{
    (void)cluster;
}

int rados_getaddrs(rados_t cluster, char **addrs)
{
    (void)cluster;
    *addrs = strdup("v2:127.0.0.1:0/4242");
    return *addrs ? 0 : -ENOMEM;
}

int rbd_is_exclusive_lock_owner(rbd_image_t image, int *is_owner)
{
    (void)image;
    *is_owner = 1;
    return 0;
}

int rbd_lock_get_owners(rbd_image_t image, rbd_lock_mode_t *lock_mode, char **lock_owners,
                        size_t *max_lock_owners)
{
    (void)image, (void)lock_mode, (void)lock_owners, (void)max_lock_owners;
    return -ENOENT;
}

void rbd_lock_get_owners_cleanup(char **lock_owners, size_t lock_owner_count)
{
    (void)lock_owners, (void)lock_owner_count;
}

int rbd_lock_break(rbd_image_t image, rbd_lock_mode_t lock_mode, const char *lock_owner)
{
    (void)image, (void)lock_mode, (void)lock_owner;
    return -ENOENT;
}

/* The fake has no monitor: every command is refused (test_fence_address counts on it). */
int rados_mon_command(rados_t cluster, const char **cmd, size_t cmdlen, const char *inbuf,
                      size_t inbuflen, char **outbuf, size_t *outbuflen, char **outs,
                      size_t *outslen)
{
    (void)cluster, (void)cmd, (void)cmdlen, (void)inbuf, (void)inbuflen;
    *outbuf = *outs = NULL;
    *outbuflen = *outslen = 0;
    return -EOPNOTSUPP;
}

void rados_buffer_free(char *buf)
{
    free(buf);
}

int rados_ioctx_create(rados_t cluster, const char *pool_name, rados_ioctx_t *ioctx)
{
    (void)cluster;
    (void)pool_name;
    *ioctx = &rbd_fake;
    return 0;
}

void rados_ioctx_destroy(rados_ioctx_t io)
{
    (void)io;
}

/* The shared object: one, versioned, compare-and-swap by version as the OSD does it. */

int rados_read(rados_ioctx_t io, const char *oid, char *buf, size_t len, uint64_t off)
{
    (void)io;
    (void)oid;
    if (!rbd_fake.obj_ver)
        return -ENOENT;
    if (off >= rbd_fake.obj_len)
        return 0;
    size_t n = rbd_fake.obj_len - (size_t)off < len ? rbd_fake.obj_len - (size_t)off : len;
    memcpy(buf, rbd_fake.obj + off, n);
    return (int)n;
}

uint64_t rados_get_last_version(rados_ioctx_t io)
{
    (void)io;
    return rbd_fake.obj_ver;
}

struct fake_wop {
    bool exclusive, assert_ver;
    uint64_t ver;
    char buf[sizeof(rbd_fake.obj)];
    size_t len;
};

rados_write_op_t rados_create_write_op(void)
{
    return calloc(1, sizeof(struct fake_wop));
}

void rados_release_write_op(rados_write_op_t write_op)
{
    free(write_op);
}

void rados_write_op_create(rados_write_op_t write_op, int exclusive, const char *category)
{
    (void)category;
    ((struct fake_wop *)write_op)->exclusive = exclusive == LIBRADOS_CREATE_EXCLUSIVE;
}

void rados_write_op_assert_version(rados_write_op_t write_op, uint64_t ver)
{
    struct fake_wop *w = write_op;
    w->assert_ver = true;
    w->ver = ver;
}

void rados_write_op_write_full(rados_write_op_t write_op, const char *buffer, size_t len)
{
    struct fake_wop *w = write_op;
    if (len > sizeof(w->buf))
        fake_die("shared object too large");
    memcpy(w->buf, buffer, len);
    w->len = len;
}

int rados_write_op_operate(rados_write_op_t write_op, rados_ioctx_t io, const char *oid,
                           time_t *mtime, int flags)
{
    (void)io;
    (void)oid;
    (void)mtime;
    (void)flags;
    struct fake_wop *w = write_op;
    if (w->exclusive && rbd_fake.obj_ver)
        return -EEXIST;
    if (w->assert_ver && w->ver != rbd_fake.obj_ver)
        return -ERANGE;
    memcpy(rbd_fake.obj, w->buf, w->len);
    rbd_fake.obj_len = w->len;
    rbd_fake.obj_ver++;
    return 0;
}

int rados_watch2(rados_ioctx_t io, const char *o, uint64_t *cookie, rados_watchcb2_t watchcb,
                 rados_watcherrcb_t watcherrcb, void *arg)
{
    (void)io;
    (void)o;
    (void)watchcb;
    (void)watcherrcb;
    (void)arg;
    *cookie = 9;
    return 0;
}

int rados_unwatch2(rados_ioctx_t io, uint64_t cookie)
{
    (void)io;
    (void)cookie;
    return 0;
}

int rados_watch_flush(rados_t cluster)
{
    (void)cluster;
    return 0;
}

int rados_notify2(rados_ioctx_t io, const char *o, const char *buf, int buf_len,
                  uint64_t timeout_ms, char **reply_buffer, size_t *reply_buffer_len)
{
    (void)io;
    (void)o;
    (void)buf;
    (void)buf_len;
    (void)timeout_ms;
    *reply_buffer = NULL;
    *reply_buffer_len = 0;
    return 0;
}

int rados_notify_ack(rados_ioctx_t io, const char *o, uint64_t notify_id, uint64_t cookie,
                     const char *buf, int buf_len)
{
    (void)io;
    (void)o;
    (void)notify_id;
    (void)cookie;
    (void)buf;
    (void)buf_len;
    return 0;
}
