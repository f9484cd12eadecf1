/* The rbd store: a Ceph RBD image through librbd's asynchronous API. READ and WRITE go to
 * rbd_aio_readv/rbd_aio_writev straight from the task's iovecs, FLUSH to rbd_aio_flush, UNMAP to
 * rbd_aio_discard, WRITE SAME to rbd_aio_writesame and COMPARE AND WRITE within one 512-byte sector
 * to rbd_aio_compare_and_write. librbd completes on its own finisher thread; the callback only
 * records the result and posts the request's embedded message back to the reactor that submitted
 * it, where done() runs, so the SCSI core never sees another thread.
 *
 * Blocking calls happen only off the reactors: the image is opened (and created with size=)
 * by bs_rbd_open() while the target is being built, before any reactor runs, or on the
 * control thread when linerate-ctl adds the LUN; it is resized (grow) and closed there too, or
 * by bs_close() after the reactors stopped. A thread without a reactor (unit tests, the shutdown
 * flush) waits for each completion itself.
 *
 * Cluster trouble becomes an errno the SCSI core maps to sense (sbc_io_reason): -ETIMEDOUT
 * when an OSD does not answer within timeout= (rados_osd_op_timeout), -EROFS, -ENOSPC as
 * librbd says. -ESHUTDOWN (EBLOCKLISTED: the cluster fenced this client) is final: the store
 * logs it once and fails every later request at once with -ESHUTDOWN rather than queue I/O
 * that can never be written.
 *
 * The image's size may change under the store (`rbd resize`, another gateway's grow): librbd's
 * update watch calls size_watch's callback on a librbd thread, which only hands it on; the SCSI
 * core reads the new size (size_refresh, blocking) on its helper thread.
 *
 * Besides the image: GET LBA STATUS from its allocation (rbd_diff_iterate2, whole objects;
 * blocking, so lba_status_blocks sends it to the SCSI core's helper thread), and the shared
 * object "<image>.linerate-<name>" in the image's pool (librados: versioned reads, writes
 * asserting the version read, watch/notify) where persistent reservations live so that every
 * gateway of the image agrees on them (pr.c). Those calls block too and come from the helper
 * thread, or from where the LUN is created. */
#include <limits.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "bs/bs_io.h"
#include "bs/bs_store.h"
#include "util/log.h"

/* librados says EBLOCKLISTED for ESHUTDOWN (ceph's include/errno.h); the C headers do not. */
#define RBD_EBLOCKLISTED ESHUTDOWN

struct bs_rbd {
    struct bs *bs; /* the store this is the private part of */
    rados_t cluster;
    rados_ioctx_t ioctx;
    rbd_image_t image;
    atomic_bool fenced; /* blocklisted: every request fails with -ESHUTDOWN */
    uint64_t obj_size;  /* bytes per RADOS object of the image */
    char image_name[128];
    /* The shared object (obj_* ops): its own I/O context, so that rados_get_last_version
     * reads this thread's operation and not another's; used by one thread at a time (the
     * SCSI core's helper thread, or the failover thread: obj_lock keeps them apart). The watch and
     * its acknowledgements use ioctx (librbd works on its own copies of it). */
    rados_ioctx_t obj_ioctx;
    bool have_obj_ioctx;
    pthread_mutex_t obj_lock; /* an operation and its rados_get_last_version together */
    uint64_t watch;           /* rados_watch2 handle, 0: none */
    char watch_oid[200];
    void (*watch_cb)(void *arg, const void *buf, size_t len, int err);
    void *watch_arg;
    /* librbd's update watch on the image header (size_watch) */
    uint64_t update_handle;
    bool update_watched;
    void (*size_cb)(void *arg);
    void *size_arg;
};

/* st.done: the request's one step, the operation itself. librbd's cache is off (rbd_conf), so
 * a write completes only once the OSDs have it: a FUA write needs no flush after it. */
enum { STEP_OP = 0 };

/* ---- the part of the caller's iovec that covers length ---------------------------------- */

/* librbd transfers the sum of the entries; the caller's vector may be longer than length
 * (bs_io_check allows it). Trim the last entry in place, restored before done(). */
static int rbd_iov_fit(struct bs_io *io)
{
    uint64_t acc = 0;
    int j = 0;
    while (acc + io->iov[j].iov_len < io->length) {
        acc += io->iov[j].iov_len;
        j++;
    }
    io->st.tail = -1;
    if (io->iov[j].iov_len > io->length - acc) {
        io->st.tail = j;
        io->st.tail_orig = io->iov[j];
        io->iov[j].iov_len = (size_t)(io->length - acc);
    }
    return j + 1;
}

static void rbd_iov_restore(struct bs_io *io)
{
    if ((io->op == BS_READ || io->op == BS_WRITE) && io->st.tail >= 0) {
        io->iov[io->st.tail] = io->st.tail_orig;
        io->st.tail = -1;
    }
}

/* ---- completion -------------------------------------------------------------------------- */

static int rbd_start(struct bs_rbd *b, struct bs_io *io);

static void rbd_fenced(struct bs *bs)
{
    struct bs_rbd *b = bs->priv;
    if (!atomic_exchange(&b->fenced, true))
        LOG_ERR("bs %s: this client was blocklisted by the Ceph cluster: giving up the LUN "
                "(every command fails from now on; restart the gateway once the cluster "
                "lets it back)",
                bs->desc);
}

/* Any call into the cluster may be the first to learn of the fence (a watch re-armed, a size
 * read, a reservation change): the LUN is given up then, not only at the next I/O. */
static int rbd_fence_check(struct bs *bs, int ret)
{
    if (ret == -RBD_EBLOCKLISTED)
        rbd_fenced(bs);
    return ret;
}

/* The SCSI core wants the first differing byte relative to the start of the compare. librbd
 * means to report it as an image offset, but 16.2 reports the start of the object plus the
 * offset within the compare; both are told apart because a compare never crosses a 512-byte
 * sector (caw_unit), so it starts either at the object's start or 512 bytes or more into it. */
static uint64_t rbd_miscompare_rel(const struct bs_io *io, uint64_t obj_size)
{
    uint64_t m = io->miscompare;
    if (m >= io->offset && m - io->offset < io->length)
        return m - io->offset;
    if (obj_size && m % obj_size < io->length)
        return m % obj_size;
    return 0;
}

/* On the submitting thread: the next step or the caller's done(). */
static void rbd_step_done(struct bs_io *io)
{
    struct bs *bs = io->st.bs;
    int res = io->st.res;
    if (res == -RBD_EBLOCKLISTED)
        rbd_fenced(bs);
    rbd_iov_restore(io);
    if (io->op == BS_COMPARE_AND_WRITE && res == -EILSEQ)
        io->miscompare = rbd_miscompare_rel(io, ((struct bs_rbd *)bs->priv)->obj_size);
    if (res != 0 && res != -RBD_EBLOCKLISTED && res != -EILSEQ)
        LOG_DEBUG("bs %s: op %d at %llu+%llu: %s", bs->desc, (int)io->op,
                  (unsigned long long)io->offset, (unsigned long long)io->length, strerror(-res));
    io->done(io, res);
}

static void rbd_on_reactor(void *arg)
{
    rbd_step_done(arg);
}

/* librbd's finisher thread: record the result, hand the request back. Nothing here may
 * touch the SCSI core. */
static void rbd_cb(rbd_completion_t c, void *arg)
{
    struct bs_io *io = arg;
    ssize_t r = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    io->st.res = r < 0 ? (int)r : 0;
    reactor_post(io->st.r, &io->st.msg, rbd_on_reactor, io);
}

/* Issue the current step of io. With a reactor the completion comes back through rbd_cb;
 * without one this thread waits for it and finishes the step itself. 0 when the step was
 * issued (and, without a reactor, completed: st.res holds its result), or -errno when librbd
 * refused it. */
static int rbd_issue(struct bs_rbd *b, struct bs_io *io)
{
    rbd_completion_t c;
    bool async = io->st.r != NULL;
    int ret = rbd_aio_create_completion(io, async ? rbd_cb : NULL, &c);
    if (ret < 0)
        return ret;
    switch (io->op) {
    case BS_READ:
        ret = rbd_aio_readv(b->image, io->iov, rbd_iov_fit(io), io->offset, c);
        break;
    case BS_WRITE:
        ret = rbd_aio_writev(b->image, io->iov, rbd_iov_fit(io), io->offset, c);
        break;
    case BS_FLUSH:
        ret = rbd_aio_flush(b->image, c);
        break;
    case BS_UNMAP:
        ret = rbd_aio_discard(b->image, io->offset, io->length, c);
        break;
    case BS_WRITE_SAME:
        ret = rbd_aio_writesame(b->image, io->offset, io->length, io->iov[0].iov_base,
                                io->iov[0].iov_len, c, 0);
        break;
    case BS_COMPARE_AND_WRITE:
        /* one RADOS operation (cmpext + write) on one object: atomic in the cluster,
         * so across gateways too; a mismatch is -EILSEQ */
        io->miscompare = 0;
        ret = (int)rbd_aio_compare_and_write(b->image, io->offset, io->length, io->iov[0].iov_base,
                                             io->iov[1].iov_base, c, &io->miscompare, 0);
        break;
    default:
        ret = -EINVAL;
    }
    if (ret < 0) {
        rbd_iov_restore(io);
        rbd_aio_release(c);
        return ret;
    }
    if (!async) {
        rbd_aio_wait_for_complete(c);
        ssize_t r = rbd_aio_get_return_value(c);
        rbd_aio_release(c);
        io->st.res = r < 0 ? (int)r : 0;
    }
    return 0;
}

/* Start the current step; without a reactor run the request to its end here. */
static int rbd_start(struct bs_rbd *b, struct bs_io *io)
{
    int ret = rbd_issue(b, io);
    if (ret < 0 || io->st.r)
        return ret;
    rbd_step_done(io); /* synchronous: the step is complete */
    return 0;
}

static void bs_rbd_submit(struct bs *bs, struct bs_io *io)
{
    struct bs_rbd *b = bs->priv;
    int err = bs_io_check(bs, io);
    if (err) {
        io->done(io, err);
        return;
    }
    if (atomic_load_explicit(&b->fenced, memory_order_relaxed)) {
        io->done(io, -RBD_EBLOCKLISTED);
        return;
    }
    if ((io->op == BS_READ || io->op == BS_WRITE || io->op == BS_UNMAP) && io->length == 0) {
        io->done(io, 0);
        return;
    }
    io->st.bs = bs;
    io->st.done = STEP_OP;
    io->st.tail = io->st.head = -1;
    io->st.res = 0;
    io->st.r = reactor_self();
    io->st.msg = (struct reactor_msg){0};
    err = rbd_start(b, io);
    if (err < 0) {
        if (err == -RBD_EBLOCKLISTED)
            rbd_fenced(bs);
        io->done(io, err);
    }
}

/* ---- GET LBA STATUS: the image's allocation ------------------------------------------- */

struct rbd_lbas {
    uint64_t offset, end; /* the range asked about */
    uint64_t first;       /* start of the first allocated extent at or after offset */
    uint64_t run_end;     /* end of the allocated run starting at offset (when first == offset) */
    bool found;
};

/* rbd_diff_iterate2 reports allocated extents in order; whole_object rounds them to RADOS
 * objects (the allocation unit). Stops (-ECANCELED) once the run from offset is known. */
static int rbd_lbas_cb(uint64_t off, size_t len, int exists, void *arg)
{
    struct rbd_lbas *l = arg;
    if (!exists)
        return 0;
    uint64_t s = off < l->offset ? l->offset : off, e = off + len;
    if (e <= s)
        return 0;
    if (!l->found) {
        l->found = true;
        l->first = s;
        l->run_end = e;
        return s > l->offset ? -ECANCELED : 0; /* a hole first: its end is all we need */
    }
    if (s > l->run_end)
        return -ECANCELED; /* the allocated run from offset ended */
    if (e > l->run_end)
        l->run_end = e;
    return 0;
}

/* Blocks on the cluster (lba_status_blocks): the SCSI core calls it on its helper thread. */
static int bs_rbd_lba_status(struct bs *bs, uint64_t offset, uint64_t *len, bool *mapped)
{
    struct bs_rbd *b = bs->priv;
    struct rbd_lbas l = {.offset = offset, .end = offset + *len};
    int ret = rbd_diff_iterate2(b->image, NULL, offset, *len, 1, 1, rbd_lbas_cb, &l);
    if (ret < 0 && ret != -ECANCELED)
        return rbd_fence_check(bs, ret);
    if (!l.found || l.first > offset) {
        *mapped = false;
        *len = (l.found ? l.first : l.end) - offset;
    } else {
        *mapped = true;
        *len = (l.run_end < l.end ? l.run_end : l.end) - offset;
    }
    return 0;
}

/* ---- the shared object: "<image>.linerate-<name>" in the image's pool ------------------ */

static void rbd_obj_oid(const struct bs_rbd *b, const char *name, char *oid, size_t n)
{
    snprintf(oid, n, "%s.linerate-%s", b->image_name, name);
}

#define RBD_OBJ_MAX (1u << 20) /* far more than any reservation state needs */

static int bs_rbd_obj_read(struct bs *bs, const char *name, char **buf, size_t *len, uint64_t *ver)
{
    struct bs_rbd *b = bs->priv;
    char oid[200];
    rbd_obj_oid(b, name, oid, sizeof(oid));
    *buf = NULL;
    *len = 0;
    *ver = 0;
    char *d = malloc(RBD_OBJ_MAX);
    if (!d)
        return -ENOMEM;
    pthread_mutex_lock(&b->obj_lock);
    int ret = rados_read(b->obj_ioctx, oid, d, RBD_OBJ_MAX - 1, 0);
    uint64_t v = ret >= 0 ? rados_get_last_version(b->obj_ioctx) : 0;
    pthread_mutex_unlock(&b->obj_lock);
    if (ret == -ENOENT) {
        free(d);
        return 0;
    }
    if (ret < 0 || ret == (int)RBD_OBJ_MAX - 1) {
        free(d);
        return ret < 0 ? rbd_fence_check(bs, ret) : -EFBIG;
    }
    d[ret] = '\0';
    *ver = v;
    *buf = d;
    *len = (size_t)ret;
    return 0;
}

static int bs_rbd_obj_write(struct bs *bs, const char *name, const void *buf, size_t len,
                            uint64_t ver, uint64_t *newver)
{
    struct bs_rbd *b = bs->priv;
    char oid[200];
    rbd_obj_oid(b, name, oid, sizeof(oid));
    rados_write_op_t op = rados_create_write_op();
    if (!op)
        return -ENOMEM;
    /* compare and swap in one RADOS operation: the OSD applies the write only if the object
     * is still at the version read (or still absent) */
    if (ver == 0)
        rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
    else
        rados_write_op_assert_version(op, ver);
    rados_write_op_write_full(op, buf, len);
    pthread_mutex_lock(&b->obj_lock);
    int ret = rados_write_op_operate(op, b->obj_ioctx, oid, NULL, 0);
    uint64_t v = ret == 0 ? rados_get_last_version(b->obj_ioctx) : 0;
    pthread_mutex_unlock(&b->obj_lock);
    rados_release_write_op(op);
    if (ret == -ERANGE || ret == -EOVERFLOW || ret == -EEXIST)
        return -ECANCELED;
    if (ret < 0)
        return rbd_fence_check(bs, ret);
    *newver = v;
    return 0;
}

static int bs_rbd_obj_notify(struct bs *bs, const char *name, const void *buf, size_t len,
                             unsigned timeout_ms)
{
    struct bs_rbd *b = bs->priv;
    char oid[200];
    rbd_obj_oid(b, name, oid, sizeof(oid));
    char *reply = NULL;
    size_t reply_len = 0;
    int ret = rados_notify2(b->obj_ioctx, oid, buf, (int)len, timeout_ms, &reply, &reply_len);
    if (reply)
        rados_buffer_free(reply);
    return rbd_fence_check(bs, ret);
}

/* librados's watch thread: the owner's callback, then the acknowledgement the notifier
 * waits for. */
static void rbd_watch_cb(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                         void *data, size_t data_len)
{
    (void)notifier_id;
    struct bs_rbd *b = arg;
    b->watch_cb(b->watch_arg, data, data_len, 0);
    rados_notify_ack(b->ioctx, b->watch_oid, notify_id, handle, NULL, 0);
}

static void rbd_watch_err(void *arg, uint64_t handle, int err)
{
    (void)handle;
    struct bs_rbd *b = arg;
    if (rbd_fence_check(b->bs, err) != -RBD_EBLOCKLISTED)
        LOG_WARN("rbd:%s: watch on %s broke (%s): re-arming it", b->image_name, b->watch_oid,
                 strerror(-err));
    b->watch_cb(b->watch_arg, NULL, 0, err);
}

static int bs_rbd_obj_watch(struct bs *bs, const char *name,
                            void (*cb)(void *arg, const void *buf, size_t len, int err), void *arg)
{
    struct bs_rbd *b = bs->priv;
    if (b->watch) {
        rados_unwatch2(b->ioctx, b->watch);
        b->watch = 0;
    }
    rbd_obj_oid(b, name, b->watch_oid, sizeof(b->watch_oid));
    b->watch_cb = cb;
    b->watch_arg = arg;
    uint64_t h = 0;
    int ret = rados_watch2(b->ioctx, b->watch_oid, &h, rbd_watch_cb, rbd_watch_err, b);
    if (ret == 0)
        b->watch = h;
    return rbd_fence_check(bs, ret);
}

/* librbd's thread, after any change of the image header (a resize, a snapshot, a lock
 * moving): only the owner's callback, which does not block. */
static void rbd_update_cb(void *arg)
{
    struct bs_rbd *b = arg;
    b->size_cb(b->size_arg);
}

static int bs_rbd_size_watch(struct bs *bs, void (*cb)(void *arg), void *arg)
{
    struct bs_rbd *b = bs->priv;
    if (b->update_watched) {
        /* waits for a callback in flight: none runs once this returns */
        int ret = rbd_update_unwatch(b->image, b->update_handle);
        if (ret < 0)
            LOG_WARN("bs %s: ending the image update watch: %s", bs->desc, strerror(-ret));
        b->update_watched = false;
    }
    if (!cb)
        return 0;
    b->size_cb = cb;
    b->size_arg = arg;
    int ret = rbd_update_watch(b->image, &b->update_handle, rbd_update_cb, b);
    b->update_watched = ret == 0;
    return ret;
}

/* Blocks: librbd refreshes the image header from the cluster first when a notification said
 * it changed. */
static int bs_rbd_size_refresh(struct bs *bs, uint64_t *size)
{
    struct bs_rbd *b = bs->priv;
    if (atomic_load(&b->fenced))
        return -RBD_EBLOCKLISTED;
    int ret = rbd_get_size(b->image, size);
    if (ret < 0)
        return rbd_fence_check(bs, ret);
    __atomic_store_n(&bs->size, *size, __ATOMIC_RELEASE);
    return 0;
}

/* This client's address as the cluster knows it: what `ceph osd blocklist add` takes. */
static int bs_rbd_client_addr(struct bs *bs, char *buf, size_t len)
{
    struct bs_rbd *b = bs->priv;
    char *addrs = NULL;
    int ret = rados_getaddrs(b->cluster, &addrs);
    if (ret < 0 || !addrs)
        return ret < 0 ? ret : -ENOENT;
    /* a truncated address would be fenced as given: some other client, or none */
    int n = snprintf(buf, len, "%s", addrs);
    rados_buffer_free(addrs);
    return n >= 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* After a fence: the image's exclusive lock, if another client holds it, is broken now. librbd
 * would break it by itself at our first write, but only after asking the holder to release it
 * and waiting for an answer a hung holder (stopped, not dead: its connection lives) never
 * gives, rbd_request_timed_out_seconds (30 s). The holder is blocklisted, so breaking its lock
 * is safe. Best effort: the first write still gets the lock the slow way if this fails. */
static void rbd_break_fenced_lock(struct bs_rbd *b)
{
    int mine = 0;
    if (rbd_is_exclusive_lock_owner(b->image, &mine) < 0 || mine)
        return;
    char *owners[4];
    size_t n = 4;
    rbd_lock_mode_t mode;
    int ret = rbd_lock_get_owners(b->image, &mode, owners, &n);
    if (ret < 0)
        return; /* -ENOENT: nobody holds it */
    for (size_t i = 0; i < n; i++) {
        ret = rbd_lock_break(b->image, mode, owners[i]);
        if (ret < 0)
            LOG_WARN("bs %s: breaking the exclusive lock of %s: %s", b->bs->desc, owners[i],
                     strerror(-ret));
        else
            LOG_INFO("bs %s: broke the exclusive lock of fenced %s", b->bs->desc, owners[i]);
    }
    rbd_lock_get_owners_cleanup(owners, n);
}

/* How long a fence lasts. Ceph's default is one hour, after which a gateway stalled that long
 * would write again; a client's address carries a nonce never used again, so an entry that
 * lasts ten years costs one map entry and removes nothing it should not. */
#define RBD_FENCE_EXPIRE_S (10.0 * 365 * 24 * 3600)

/* Blocklist another client of the cluster (the fence of a failover, docs/gateways.md): from
 * the monitors' answer on, the OSDs refuse that client's operations and drop its watches, so
 * librbd here may break the exclusive lock it held. Blocks on the monitors. Needs the mon cap
 * `allow command "osd blocklist"` (the admin user has it). */
static int bs_rbd_fence(struct bs *bs, const char *addr, char *err, size_t errlen)
{
    struct bs_rbd *b = bs->priv;
    char cmd[400];
    /* The address comes from a peer's heartbeat object: only the characters of an entity
     * address (IPv4, [IPv6]:port/nonce, v2:..., lists with ','), so nothing can end the JSON
     * string below or add a field to the mon command. */
    if (!*addr || strspn(addr, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               ".:/[],-") != strlen(addr)) {
        snprintf(err, errlen, "bad client address");
        return -EINVAL;
    }
    snprintf(cmd, sizeof(cmd),
             "{\"prefix\": \"osd blocklist\", \"blocklistop\": \"add\", "
             "\"addr\": \"%s\", \"expire\": %.1f}",
             addr, RBD_FENCE_EXPIRE_S);
    const char *cmds[1] = {cmd};
    char *outs = NULL, *outbuf = NULL;
    size_t outs_len = 0, outbuf_len = 0;
    int ret = rados_mon_command(b->cluster, cmds, 1, "", 0, &outbuf, &outbuf_len, &outs, &outs_len);
    snprintf(err, errlen, "%.*s", (int)(outs_len > 200 ? 200 : outs_len), outs ? outs : "");
    if (outs)
        rados_buffer_free(outs);
    if (outbuf)
        rados_buffer_free(outbuf);
    if (ret < 0)
        return rbd_fence_check(bs, ret);
    /* The OSDs refuse the fenced client once they have the map with its entry: wait for it
     * here, so the role is taken only when the old holder cannot write any more. */
    ret = rados_wait_for_latest_osdmap(b->cluster);
    if (ret < 0) {
        snprintf(err, errlen, "waiting for the OSD map with the fence: %s", strerror(-ret));
        return rbd_fence_check(bs, ret);
    }
    rbd_break_fenced_lock(b);
    return 0;
}

static void bs_rbd_close(struct bs *bs)
{
    struct bs_rbd *b = bs->priv;
    bs_rbd_size_watch(bs, NULL, NULL);
    if (b->watch) {
        rados_unwatch2(b->ioctx, b->watch);
        rados_watch_flush(b->cluster); /* no callback runs after this */
    }
    if (b->have_obj_ioctx)
        rados_ioctx_destroy(b->obj_ioctx);
    pthread_mutex_destroy(&b->obj_lock);
    /* rbd_close flushes librbd's cache (writes acknowledged without FUA). */
    int ret = rbd_close(b->image);
    if (ret < 0)
        LOG_ERR("bs %s: closing the image: %s", bs->desc, strerror(-ret));
    rados_ioctx_destroy(b->ioctx);
    rados_shutdown(b->cluster);
    free(b);
}

/* linerate-ctl grow, on the daemon's control thread (rbd_resize blocks on the cluster, so it
 * never runs on a reactor). An image someone already grew with `rbd resize` is taken at the
 * size asked for as it is. */
static int bs_rbd_grow(struct bs *bs, uint64_t size, char *err, size_t errlen)
{
    struct bs_rbd *b = bs->priv;
    uint64_t have;
    int ret = rbd_get_size(b->image, &have);
    if (ret == 0 && have < size)
        ret = rbd_resize(b->image, size);
    if (ret < 0) {
        snprintf(err, errlen, "%s: cannot resize the image to %llu bytes: %s", bs->desc,
                 (unsigned long long)size, strerror(-ret));
        return -1;
    }
    return 0;
}

static const struct bs_ops bs_rbd_ops = {
    .name = "rbd",
    .submit = bs_rbd_submit,
    .close = bs_rbd_close,
    .grow = bs_rbd_grow,
    .lba_status = bs_rbd_lba_status,
    .obj_read = bs_rbd_obj_read,
    .obj_write = bs_rbd_obj_write,
    .obj_notify = bs_rbd_obj_notify,
    .obj_watch = bs_rbd_obj_watch,
    .size_watch = bs_rbd_size_watch,
    .size_refresh = bs_rbd_size_refresh,
    .client_addr = bs_rbd_client_addr,
    .fence = bs_rbd_fence,
};

/* Settings the store relies on, whatever ceph.conf says. */
static int rbd_conf(rados_t cluster, const char *who, unsigned timeout_s, char *err, size_t errlen)
{
    char t[16];
    snprintf(t, sizeof(t), "%u", timeout_s);
    const char *const set[][2] = {
        /* An OSD or monitor that does not answer becomes -ETIMEDOUT, which the initiator may
         * retry, instead of a command that never completes. */
        {"rados_osd_op_timeout", t},
        {"rados_mon_op_timeout", t},
        {"client_mount_timeout", t},
        /* UNMAP promises zeros (LBPRZ): a discard that does not cover whole objects must zero
         * its range instead of being skipped. */
        {"rbd_skip_partial_discard", "false"},
        /* librbd's cache (write-around by default since Ceph 16) reports a write done when it
         * is sent, and a failed write's error to at most one later flush: a FUA write or
         * SYNCHRONIZE CACHE could be answered GOOD for data the cluster refused (a fenced
         * gateway, a partition). Off, a write completes when the OSDs have it, or fails. */
        {"rbd_cache", "false"},
        /* The persistent write-log cache (rbd_plugins=pwl_cache) acknowledges writes from a
         * local SSD or pmem log, which a fenced or failed gateway keeps: the same lost errors,
         * and the survivor of a failover would not see those writes. */
        {"rbd_persistent_cache_mode", "disabled"},
    };
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++) {
        int ret = rados_conf_set(cluster, set[i][0], set[i][1]);
        if (ret < 0) {
            snprintf(err, errlen, "%s: setting %s: %s", who, set[i][0], strerror(-ret));
            return -1;
        }
    }
    return 0;
}

/* An errno alone does not tell an operator what to fix when the cluster turns the gateway
 * away: name the Ceph user it tried to be, and where its key was looked for. */
static void rbd_open_err(rados_t cluster, const struct bs_rbd_params *p, const char *who,
                         const char *stage, bool connecting, int ret, char *err, size_t errlen)
{
    char user[80], keyring[256], mon_host[256] = "";
    /* the name librados settled on: id=, or CEPH_ARGS' --id/--name, or client.admin */
    if (rados_conf_get(cluster, "name", user, sizeof(user)) < 0 || !user[0])
        snprintf(user, sizeof(user), "client.%s", p->client_id[0] ? p->client_id : "admin");
    if (connecting && ret == -ENOENT &&
        (rados_conf_get(cluster, "mon_host", mon_host, sizeof(mon_host)) < 0 || !mon_host[0])) {
        /* librados says ENOENT too when it knows no monitor to ask */
        snprintf(err, errlen,
                 "%s: %s as %s: no monitor address (mon_host): no ceph.conf with one was "
                 "read (conf=, CEPH_CONF, /etc/ceph/ceph.conf)",
                 who, stage, user);
    } else if (connecting && ret == -ENOENT) {
        /* cephx and no keyring holding the user's key */
        if (rados_conf_get(cluster, "keyring", keyring, sizeof(keyring)) < 0)
            snprintf(keyring, sizeof(keyring), "?");
        snprintf(err, errlen,
                 "%s: %s as %s: no key for %s (cephx): none of the keyrings exists (keyring = %s)",
                 who, stage, user, user, keyring);
    } else if (connecting && (ret == -EACCES || ret == -EPERM)) {
        snprintf(err, errlen,
                 "%s: %s as %s: refused by the cluster (cephx): no such user, or a key that "
                 "is not the user's",
                 who, stage, user);
    } else if (connecting && ret == -ETIMEDOUT) {
        snprintf(err, errlen, "%s: %s as %s: no monitor answered within %u s", who, stage, user,
                 p->timeout_s);
    } else if (ret == -EPERM || ret == -EACCES) {
        snprintf(err, errlen,
                 "%s: %s: %s: %s's caps do not allow it (an rbd gateway needs mon 'profile rbd' "
                 "osd 'profile rbd pool=%s')",
                 who, stage, strerror(-ret), user, p->pool);
    } else {
        snprintf(err, errlen, "%s: %s: %s", who, stage, strerror(-ret));
    }
}

/* How far bs_rbd_open got: the step under way names the error, the rest says what to undo. */
struct rbd_opening {
    const struct bs_rbd_params *p;
    const char *who;   /* "rbd:POOL/IMAGE", the start of every message */
    const char *stage; /* the step under way, for the error */
    bool connecting;   /* in rados_connect: its errors name the user and the keyring */
    bool said;         /* the error is written already: not one to explain with rbd_open_err */
    bool have_cluster, have_ioctx, have_image;
};

/* Connect to the cluster as the configured user and open the pool twice: one context for the
 * image, one for the shared objects. Returns 0 or a negative errno. */
static int rbd_connect(struct bs_rbd *b, struct rbd_opening *o, char *err, size_t errlen)
{
    const struct bs_rbd_params *p = o->p;
    o->stage = "rados_create";
    int ret = rados_create(&b->cluster, p->client_id[0] ? p->client_id : NULL);
    if (ret < 0) {
        snprintf(err, errlen, "%s: %s: %s", o->who, o->stage, strerror(-ret));
        o->said = true;
        return ret;
    }
    o->have_cluster = true;
    /* conf= or else $CEPH_CONF or the default search path (/etc/ceph/ceph.conf, ...). */
    o->stage = "reading the Ceph configuration";
    ret = rados_conf_read_file(b->cluster, p->conf[0] ? p->conf : NULL);
    if (ret < 0)
        return ret;
    rados_conf_parse_env(b->cluster, NULL); /* CEPH_ARGS */
    if (rbd_conf(b->cluster, o->who, p->timeout_s, err, errlen) < 0) {
        o->said = true;
        return -EINVAL;
    }
    o->stage = "connecting to the cluster";
    o->connecting = true;
    ret = rados_connect(b->cluster);
    if (ret < 0)
        return ret;
    o->connecting = false;
    o->stage = "opening the pool";
    ret = rados_ioctx_create(b->cluster, p->pool, &b->ioctx);
    if (ret < 0)
        return ret;
    o->have_ioctx = true;
    o->stage = "opening the pool for the shared objects";
    ret = rados_ioctx_create(b->cluster, p->pool, &b->obj_ioctx);
    if (ret < 0)
        return ret;
    b->have_obj_ioctx = true;
    return 0;
}

/* Open the image; size= creates it when it is missing. Returns 0 or a negative errno. */
static int rbd_open_image(struct bs_rbd *b, struct rbd_opening *o)
{
    const struct bs_rbd_params *p = o->p;
    snprintf(b->image_name, sizeof(b->image_name), "%s", p->image);
    o->stage = "opening the image";
    int ret = p->read_only ? rbd_open_read_only(b->ioctx, p->image, &b->image, NULL)
                           : rbd_open(b->ioctx, p->image, &b->image, NULL);
    if (ret == -ENOENT && p->size && !p->read_only) {
        /* size= creates a missing image, with the default features of the cluster */
        o->stage = "creating the image";
        int order = 0;
        ret = rbd_create(b->ioctx, p->image, p->size, &order);
        if (ret == 0) {
            LOG_INFO("%s: created, %llu bytes", o->who, (unsigned long long)p->size);
            o->stage = "opening the image";
            ret = rbd_open(b->ioctx, p->image, &b->image, NULL);
        }
    }
    if (ret < 0)
        return ret;
    o->have_image = true;
    return 0;
}

/* The image's size, which must be whole 512-byte blocks. Returns 0 or a negative errno. */
static int rbd_check_size(struct bs_rbd *b, struct rbd_opening *o, uint64_t *size, char *err,
                          size_t errlen)
{
    const struct bs_rbd_params *p = o->p;
    o->stage = "reading the image size";
    int ret = rbd_get_size(b->image, size);
    if (ret < 0)
        return ret;
    if (p->size && p->size != *size)
        LOG_WARN("%s: the image has %llu bytes, not size=%llu: exporting %llu (size= only "
                 "creates a missing image)",
                 o->who, (unsigned long long)*size, (unsigned long long)p->size,
                 (unsigned long long)*size);
    if (*size == 0 || *size % 512) {
        snprintf(err, errlen, "%s: image size %llu is not a positive multiple of 512", o->who,
                 (unsigned long long)*size);
        o->said = true;
        return -EINVAL;
    }
    return 0;
}

/* The pool or the image may set rbd_cache (or the persistent cache) itself (`rbd config pool/image
 * set`), which overrides rbd_conf: an image that still caches is refused, since its write errors
 * could not reach the initiator. Returns 0 or a negative errno. */
static int rbd_check_cache(struct bs_rbd *b, struct rbd_opening *o, char *err, size_t errlen)
{
    o->stage = "reading the image's configuration";
    int max = 0;
    int ret = rbd_config_image_list(b->image, NULL, &max);
    if (ret != -ERANGE)
        return ret < 0 ? ret : -ENOENT; /* librbd lists every rbd_* option, rbd_cache too */
    rbd_config_option_t *opts = max > 0 ? calloc((size_t)max, sizeof(*opts)) : NULL;
    if (!opts)
        return -ENOMEM;
    ret = rbd_config_image_list(b->image, opts, &max);
    if (ret < 0) {
        free(opts);
        return ret;
    }
    for (int i = 0; i < max; i++) {
        const char *name = opts[i].name, *v = opts[i].value;
        bool cache = strcmp(name, "rbd_cache") == 0 && strcmp(v, "false") != 0;
        bool pwl = (strcmp(name, "rbd_persistent_cache_mode") == 0 && strcmp(v, "disabled") != 0) ||
                   (strcmp(name, "rbd_plugins") == 0 && strstr(v, "pwl_cache"));
        if (!cache && !pwl)
            continue;
        bool image = opts[i].source == RBD_CONFIG_SOURCE_IMAGE;
        snprintf(err, errlen,
                 "%s: %s is %s for this %s: a gateway must report every write error, "
                 "so it runs without librbd's %scache (rbd config %s remove %s%s%s %s)",
                 o->who, name, v, image ? "image" : "pool", pwl ? "persistent " : "",
                 image ? "image" : "pool", o->p->pool, image ? "/" : "", image ? o->p->image : "",
                 name);
        o->said = true;
        ret = -EINVAL;
    }
    rbd_config_image_list_cleanup(opts, max);
    free(opts);
    return ret < 0 ? ret : 0;
}

/* What the store offers the SCSI layer, from the open image. */
static void rbd_describe(struct bs *bs, struct bs_rbd *b, const struct bs_rbd_params *p,
                         uint64_t size)
{
    /* The image id is the image's own, the same from every client: what a designator shared
     * by several gateways is derived from. */
    if (rbd_get_id(b->image, bs->medium_id, sizeof(bs->medium_id)) < 0)
        bs->medium_id[0] = '\0';
    bs->ops = &bs_rbd_ops;
    bs->size = size;
    bs->read_only = p->read_only;
    /* librbd's cache is off (rbd_conf, rbd_check_cache): no volatile cache, so the caching
     * page says WCE=0 and a write is answered once the cluster has it. */
    bs->write_cache = false;
    /* Discarded objects are deleted, partial ones zeroed (rbd_skip_partial_discard off). */
    bs->thin = true;
    bs->write_same = true;
    /* GET LBA STATUS asks the cluster (rbd_diff_iterate2): off the reactors */
    bs->lba_status_blocks = true;
    rbd_image_info_t info;
    if (rbd_stat(b->image, &info, sizeof(info)) == 0)
        b->obj_size = info.obj_size;
    /* A discard gives back whole objects only (it zeroes the rest of its range), and GET LBA
     * STATUS maps whole objects: VPD B0h's OPTIMAL UNMAP GRANULARITY says so. With fancy
     * striping (stripe unit below the object size) consecutive stripe units go round
     * stripe_count objects, so only a whole object set, object size x stripe count, frees
     * objects: that is the granularity then. */
    bs->unmap_unit = b->obj_size;
    uint64_t su = 0, sc = 0;
    if (rbd_get_stripe_unit(b->image, &su) == 0 && rbd_get_stripe_count(b->image, &sc) == 0 && su &&
        su < b->obj_size && sc > 1)
        bs->unmap_unit = b->obj_size * sc;
    /* librbd 16 compares and writes only within one 512-byte sector (-EINVAL otherwise): a
     * one-block COMPARE AND WRITE on a 512-byte-block LUN (VMware's ATS heartbeat) is served
     * by the cluster; longer ones, and any on a 4 KiB-block LUN, could not be atomic across
     * gateways, so VPD 0xB0 says so and they are refused (sbc_caw_max_blocks). */
    bs->caw_unit = 512;
    bs->priv = b;
}

/* A step failed: say why (unless the step did), then undo what was opened, last first. */
static void rbd_open_fail(struct bs_rbd *b, struct rbd_opening *o, int ret, bool *transient,
                          char *err, size_t errlen)
{
    if (!o->said) {
        rbd_open_err(b->cluster, o->p, o->who, o->stage, o->connecting, ret, err, errlen);
        /* no monitor or OSD answered within timeout=: the cluster may be starting (a gateway
         * booted before it), so the caller may try again; anything else needs an operator */
        if (transient)
            *transient = ret == -ETIMEDOUT;
    }
    if (o->have_image)
        rbd_close(b->image);
    if (b->have_obj_ioctx)
        rados_ioctx_destroy(b->obj_ioctx);
    if (o->have_ioctx)
        rados_ioctx_destroy(b->ioctx);
    if (o->have_cluster)
        rados_shutdown(b->cluster);
}

struct bs *bs_rbd_open(const struct bs_rbd_params *p, bool *transient, char *err, size_t errlen)
{
    char who[300];
    snprintf(who, sizeof(who), "rbd:%s/%s", p->pool, p->image);
    struct bs_rbd *b = calloc(1, sizeof(*b));
    struct bs *bs = calloc(1, sizeof(*bs));
    if (b)
        b->bs = bs;
    if (!b || !bs) {
        snprintf(err, errlen, "%s: out of memory", who);
        free(b);
        free(bs);
        return NULL;
    }
    pthread_mutex_init(&b->obj_lock, NULL);
    struct rbd_opening o = {.p = p, .who = who};
    uint64_t size = 0;
    int ret = rbd_connect(b, &o, err, errlen);
    if (ret == 0)
        ret = rbd_open_image(b, &o);
    if (ret == 0)
        ret = rbd_check_cache(b, &o, err, errlen);
    if (ret == 0)
        ret = rbd_check_size(b, &o, &size, err, errlen);
    if (ret < 0) {
        rbd_open_fail(b, &o, ret, transient, err, errlen);
        pthread_mutex_destroy(&b->obj_lock);
        free(b);
        free(bs);
        return NULL;
    }
    rbd_describe(bs, b, p, size);
    /* The client address is what an operator fences (ceph osd blocklist add ADDR) to take
     * this gateway off the image. */
    char *addrs = NULL;
    if (rados_getaddrs(b->cluster, &addrs) == 0 && addrs) {
        LOG_INFO("%s: image id %s, %llu bytes, Ceph client %s", who, bs->medium_id,
                 (unsigned long long)size, addrs);
        rados_buffer_free(addrs);
    }
    return bs;
}
