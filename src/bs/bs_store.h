/* Private to src/bs: the constructor of each store type, which the spec parser (bs_open.c)
 * calls with the options it parsed. Each store file defines its own and calls nothing above it. */
#ifndef LR_BS_STORE_H
#define LR_BS_STORE_H

#include "bs/bs.h"

/* Each returns a filled struct bs (ops, size, flags, priv, desc left to the caller) or NULL
 * with a one-line reason in err. */
struct bs *bs_null_open(uint64_t size, char *err, size_t errlen);
/* prealloc: the memory is allocated (and touched) now and the LUN is fully provisioned. */
struct bs *bs_ram_open(uint64_t size, bool prealloc, char *err, size_t errlen);
/* READs of at least the LUN option ",send-min=SIZE" are sent from the RAM LUN's memory in
 * place (bs_ops read_pin), shorter ones copied out (",send-min=off": every READ). The default
 * is measured, and safe for shared LUNs since a stalled reader's queued Data-In is copied away
 * after a second (iSCSI rsp_unpin_stalled): docs/performance.md, "RAM LUN reads without the
 * copy". */
#define BS_RAM_SEND_MIN (4u * 1024u)
void bs_ram_set_send_min(struct bs *bs, uint64_t min);
/* size 0: use the file's or device's own size. */
struct bs *bs_file_open(const char *path, uint64_t size, bool direct, bool read_only, char *err,
                        size_t errlen);
/* ",send-min=SIZE" on a file LUN opened without direct: READs of at least SIZE whose pages are
 * in the page cache are sent from a mapping of the file (bs_ops read_pin); UINT64_MAX
 * (",send-min=off", and always with direct): every READ is read into a buffer. A file shrunk
 * under the LUN then fails the connections sending from the pages it lost (util/fault_guard)
 * where a copied READ would get MEDIUM ERROR (docs/performance.md, "File LUN reads from the
 * page cache"). The default is measured there: 0.98-1.10x a RAM LUN's CPU per KB at 64-256 KiB
 * READs against 1.45-1.47x copied. */
#define BS_FILE_SEND_MIN (16u * 1024u)
void bs_file_set_send_min(struct bs *bs, uint64_t min);
/* ",write-inline=off" on a file LUN: every WRITE goes through io_uring. On (the default), a
 * buffered non-FUA WRITE of whole pages is written into the page cache on the reactor thread,
 * backing off to the ring for a while after one that blocked (no effect with direct). */
void bs_file_set_write_inline(struct bs *bs, bool on);

/* rbd:POOL/IMAGE (bs_rbd.c, built when librbd is found: LR_HAVE_RBD). Empty strings mean "the
 * default": conf the Ceph search path ($CEPH_CONF, /etc/ceph/ceph.conf), client_id "admin". */
#define BS_RBD_DEFAULT_TIMEOUT_S 30
struct bs_rbd_params {
    char pool[128];
    char image[128];
    char conf[256];
    char client_id[64];
    uint64_t size;      /* create the image with this size when it is missing; 0: never */
    unsigned timeout_s; /* an OSD or monitor silent this long fails the request: -ETIMEDOUT */
    bool read_only;
};
/* Blocks while it connects: call before the reactors run. On failure *transient (if not
 * NULL) says the cluster did not answer in time: trying again later may succeed. */
struct bs *bs_rbd_open(const struct bs_rbd_params *p, bool *transient, char *err, size_t errlen);
#ifdef LR_HAVE_RBD
/* bs_rbd_open() of the rbd module (bs_rbd_load.c), loaded the first time it is needed. */
struct bs *bs_rbd_module_open(const struct bs_rbd_params *p, bool *transient, char *err,
                              size_t errlen);
#endif

#endif
