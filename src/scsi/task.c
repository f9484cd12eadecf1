/* The life of a task: setup (refuse early, check ranges once, decide where the data lives),
 * exec (dispatch to the row's handler), release; and the per-thread cache of task buffers. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"

void scsi_task_init(struct scsi_task *t)
{
    memset(t, 0, sizeof(*t));
}

/* Bits set outside the usage mask are reserved (or unsupported) fields: SPC-4 §4.3.2 says
 * a nonzero reserved field is INVALID FIELD IN CDB, pointing at the highest offending bit. */
static scsi_sr check_reserved(const uint8_t *cdb, const struct scsi_cmd *c)
{
    for (unsigned i = 1; i + 1 < c->cdb_len; i++) {
        uint8_t bad = cdb[i] & (uint8_t)~c->usage[i];
        if (bad)
            return SR_CDB_FIELD(i, 31 - __builtin_clz(bad));
    }
    /* control byte (SAM-5 §5.2): NACA=1 needs ACA, which is not offered; LINK is obsolete */
    uint8_t ctl = cdb[c->cdb_len - 1];
    if (ctl & 0x07)
        return SR_CDB_FIELD(c->cdb_len - 1, 31 - __builtin_clz(ctl & 0x07));
    return SR_OK;
}

/* Task buffers are kept for reuse per thread, by power-of-two size class from 4 KiB: a fresh
 * buffer of 128 KiB or more is a new mapping whose every page faults in when the data is
 * copied in, which cost a 256 KiB READ of a RAM LUN more than the copy itself. A buffer goes
 * back to the cache of the thread that releases the task (the one it runs on), up to
 * BUF_CACHE_BYTES per thread: to make room, buffers of other sizes are freed first (the load
 * changed), and a buffer of a size that alone fills the cache is freed. */
#define BUF_CLASSES 13 /* 4 KiB .. 16 MiB: a VERIFY's 8 MiB of data and 8 MiB of medium */
#define BUF_CACHE_BYTES (32u << 20)
#define BUF_NO_CLASS 0xff

struct buf_cache {
    void *head[BUF_CLASSES]; /* each buffer's first bytes point to the next */
    size_t bytes;
    bool registered; /* with buf_cache_key, so the thread's end frees the cache */
};
static _Thread_local struct buf_cache buf_cache;
static pthread_key_t buf_cache_key;
static pthread_once_t buf_cache_once = PTHREAD_ONCE_INIT;

/* Free cached buffers, largest first and none of class `keep`, until `room` more bytes fit. */
static void buf_cache_trim(struct buf_cache *bc, size_t room, unsigned keep)
{
    for (unsigned c = BUF_CLASSES; c-- > 0;)
        while (c != keep && bc->head[c] && bc->bytes + room > BUF_CACHE_BYTES) {
            void *p = bc->head[c];
            bc->head[c] = *(void **)p;
            bc->bytes -= (size_t)4096 << c;
            free(p);
        }
}

static void buf_cache_drain(void *arg)
{
    buf_cache_trim(arg, BUF_CACHE_BYTES + 1, BUF_CLASSES);
}

/* exit() runs no key destructor for the thread calling it: its cache is freed here */
static void buf_cache_drain_at_exit(void)
{
    buf_cache_drain(&buf_cache);
}

static void buf_cache_key_init(void)
{
    pthread_key_create(&buf_cache_key, buf_cache_drain);
    atexit(buf_cache_drain_at_exit);
}

static void *buf_get(size_t n, uint8_t *cls)
{
    unsigned c = 0;
    while (c < BUF_CLASSES && ((size_t)4096 << c) < n)
        c++;
    void *p = NULL;
    if (c == BUF_CLASSES) { /* larger than any class: not cached */
        *cls = BUF_NO_CLASS;
        return posix_memalign(&p, 4096, n) ? NULL : p;
    }
    *cls = (uint8_t)c;
    struct buf_cache *bc = &buf_cache;
    if (bc->head[c]) {
        p = bc->head[c];
        bc->head[c] = *(void **)p;
        bc->bytes -= (size_t)4096 << c;
        return p;
    }
    return posix_memalign(&p, 4096, (size_t)4096 << c) ? NULL : p;
}

static void buf_put(void *p, uint8_t cls)
{
    struct buf_cache *bc = &buf_cache;
    size_t n = (size_t)4096 << cls;
    if (p && cls != BUF_NO_CLASS && bc->bytes + n > BUF_CACHE_BYTES)
        buf_cache_trim(bc, n, cls);
    if (!p || cls == BUF_NO_CLASS || bc->bytes + n > BUF_CACHE_BYTES) {
        free(p);
        return;
    }
    if (!bc->registered) {
        pthread_once(&buf_cache_once, buf_cache_key_init);
        pthread_setspecific(buf_cache_key, bc);
        bc->registered = true;
    }
    *(void **)p = bc->head[cls];
    bc->head[cls] = p;
    bc->bytes += n;
}

/* page aligned: an O_DIRECT file store takes the buffer as it is */
static size_t buffer_request(uint32_t xfer_len, size_t extra)
{
    return (((size_t)xfer_len + 4095) & ~(size_t)4095) + ((extra + 4095) & ~(size_t)4095);
}

/* What buf_get really takes for that: its size class (the memory the task holds). */
static size_t buffer_bytes(uint32_t xfer_len, size_t extra)
{
    size_t n = buffer_request(xfer_len, extra);
    for (unsigned c = 0; c < BUF_CLASSES; c++)
        if (((size_t)4096 << c) >= n)
            return (size_t)4096 << c;
    return n;
}

static scsi_sr alloc_buffer(struct scsi_task *t, size_t extra)
{
    struct scsi_task_core *k = scsi_core(t);
    void *p = buf_get(buffer_request(t->xfer_len, extra), &k->buf_class);
    if (!p)
        return SR_INSUFFICIENT_RESOURCES;
    k->buf = p;
    t->buffered = true;
    t->iov[0].iov_base = p;
    t->iov[0].iov_len = t->xfer_len;
    t->iovcnt = 1;
    return SR_OK;
}

/* Data memory a command's execution allocates beside the buffer setup gives it: WRITE SAME's
 * and SANITIZE's fill pattern, the medium's copy COMPARE AND WRITE and ORWRITE read (a mapped
 * store is read in place), EXTENDED COPY's bounce buffer. Upper bounds: the transport charges
 * them up front, so nothing a command allocates later escapes its accounting. */
static size_t exec_memory(const struct scsi_cmd *c, const struct scsi_lun *lu, uint64_t range)
{
    if (c->exec == sbc_exec_write_same)
        return range < SCSI_FILL_CHUNK ? range : SCSI_FILL_CHUNK;
    if (c->exec == sbc_exec_sanitize)
        return SCSI_FILL_CHUNK;
    if ((c->exec == sbc_exec_caw || c->exec == sbc_exec_orwrite) && lu && !lu->mapped)
        return range;
    if (c->exec == xcopy_exec)
        return SCSI_COPY_CHUNK;
    return 0;
}

/* Asks the transport for room for n bytes of data memory before any is allocated. */
static scsi_sr admit_memory(struct scsi_task *t, size_t n)
{
    enum scsi_refusal why = SCSI_REFUSE_TASK_SET_FULL;
    if (!n || !t->admit)
        return SR_OK;
    if (!t->admit(t, n, &why))
        return why == SCSI_REFUSE_BUSY ? SR_BUSY : SR_TASK_SET_FULL;
    t->mem = n;
    return SR_OK;
}

/* The checks that refuse a command before its CDB is parsed, in the order SAM-5 and SPC-4 give
 * them: no such LUN, a pending unit attention (SAM-5 §5.14), an unknown opcode or service
 * action, the LUN's state (ALUA, sanitize, medium), reserved CDB bits, reservations. c is the
 * row (NULL: none), known whether its opcode is. */
static scsi_sr setup_refusal(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c,
                             bool known)
{
    scsi_sr sr;
    if (!t->target)
        return SR_LUN_NOT_SUPPORTED;
    if (!lu) {
        if (!c || !(c->flags & CMD_NOLUN_OK))
            return SR_LUN_NOT_SUPPORTED;
    } else if (t->nexus && !(c && (c->flags & CMD_UA_OK)) &&
               atomic_load_explicit(scsi_lun_ua(lu, scsi_nexus_slot(t->nexus)),
                                    memory_order_relaxed)) {
        /* SAM-5 §5.14: a pending UA ends any command but INQUIRY, REPORT LUNS and REQUEST
         * SENSE, and is cleared by being reported. */
        sr = scsi_ua_take(lu, t->nexus);
        if (sr)
            return sr;
    }
    if (!c) {
        /* SPC-4 §4.3.3: unknown service action of a known opcode is a bad field */
        return known ? SR_CDB_FIELD(1, 4) : SR_INVALID_OPCODE;
    }
    if (!scsi_cmd_offered(lu, c))
        return SR_INVALID_OPCODE; /* not on this LUN's store (libiscsi then skips its tests) */
    if (lu && (sr = scsi_lun_gates(lu, c)))
        return sr;
    sr = check_reserved(t->cdb, c);
    if (sr)
        return sr;
    /* Reservations (SPC-4 §5.13, SBC-3 §4.17): one relaxed load while nothing is reserved. */
    unsigned resv = lu ? atomic_load_explicit(&lu->resv, memory_order_relaxed) : 0;
    return resv ? pr_check(t, lu, c, resv) : SR_OK;
}

/* The medium range a CMD_MEDIUM row addresses, checked once for every READ/WRITE/VERIFY/SYNC
 * variant (SBC-3 §4.5), into the task's io; *scratch the room VERIFY with BYTCHK needs to read
 * the medium into. */
static scsi_sr setup_range(struct scsi_task *t, const struct scsi_cmd *c, const struct scsi_req *r,
                           size_t *scratch)
{
    struct scsi_task_core *k = scsi_core(t);
    struct scsi_lun *lu = t->lu;
    scsi_sr sr;
    if (r->xfer_len > SCSI_MAX_XFER_BYTES)
        return SR_CDB_FIELD(c->tl_off, -1);
    if (r->lba > lu->nblocks || r->nblocks > lu->nblocks - r->lba)
        return SR_LBA_OUT_OF_RANGE;
    if ((c->flags & CMD_WRITES) && (sr = sbc_write_protect(lu)))
        return sr; /* read-only LUN or software write protect (SWP) */
    k->io.offset = r->lba << lu->block_shift;
    k->io.length = r->nblocks << lu->block_shift;
    /* caching page WCE=0: every write is write-through (SBC-3 §6.4.5) */
    k->io.fua = r->fua || !atomic_load_explicit(&lu->wce, memory_order_relaxed);
    if ((c->flags & CMD_SCRATCH) && r->xfer_len)
        *scratch = k->io.length; /* room to read the medium for the compare */
    return SR_OK;
}

int scsi_task_setup(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    /* The number the initiator sent, through its host's LUN map if the target has any. */
    bool map_ro = false;
    struct scsi_lun *lu = t->nexus    ? scsi_nexus_lun(t->nexus, t->lun, &map_ro)
                          : t->target ? scsi_target_lun(t->target, t->lun)
                                      : NULL;
    t->lu = lu;
    /* Held until release, so a LUN removed at run time outlives the commands using it. */
    k->lu_held = lu != NULL;
    if (lu)
        scsi_lun_user_get(lu);
    t->dir = SCSI_DIR_NONE;
    t->xfer_len = 0;
    t->iovcnt = 0;
    t->data_len = 0;
    t->status = SCSI_STATUS_GOOD;
    t->sense_len = 0;
    t->buffered = false;
    t->mem = 0;
    k->buf = NULL;
    k->cmd = NULL;

    bool known;
    const struct scsi_cmd *c = scsi_cmd_lookup(t->cdb[0], t->cdb[1] & 0x1f, &known);
    scsi_sr sr = setup_refusal(t, lu, c, known);
    if (!sr && map_ro && (c->flags & (CMD_WRITES | CMD_LU_STATE)))
        sr = SR_WRITE_PROTECTED; /* mapped read-only for this host (scsi_target_host_map) */
    if (sr)
        goto refuse;

    struct scsi_req r = {.dir = SCSI_DIR_NONE};
    sr = c->parse(t, c, &r);
    if (sr)
        goto refuse;

    size_t scratch = 0;
    if (c->flags & CMD_MEDIUM) {
        sr = setup_range(t, c, &r, &scratch);
        if (sr)
            goto refuse;
    } else if (r.xfer_len > SCSI_MAX_XFER_BYTES) {
        r.xfer_len = SCSI_MAX_XFER_BYTES; /* parse caps allocation lengths; belt and braces */
    }
    t->xfer_len = (uint32_t)r.xfer_len;
    t->dir = t->xfer_len ? r.dir : SCSI_DIR_NONE;
    uint32_t avail = t->edtl_write ? t->edtl : 0;
    if (t->dir == SCSI_DIR_WRITE && avail < t->xfer_len) {
        /* Data-out shortfall: EDTL (or no W bit) below what the CDB asks to send. FCP-4
         * §9.4.2, which initiators and libiscsi's iSCSIResiduals tests apply to iSCSI, allows
         * a) processing the command up to EDTL, b) CHECK CONDITION, ILLEGAL REQUEST, INVALID
         * FIELD IN COMMAND INFORMATION UNIT with nothing transferred, or c) ABORTED COMMAND.
         * The rule here, for every data-out command: a) when what arrives is itself a complete
         * command, i.e. a plain block write (WRITE, WRITE AND VERIFY) and EDTL a whole number of
         * blocks: those blocks are stored, GOOD (EDTL 0: none; LIO does the same; libiscsi
         * 1.19's Write*Residuals require GOOD and the first block written for 2 blocks with
         * EDTL 512); b) otherwise, nothing written: a torn block, part of a parameter list, of
         * COMPARE AND WRITE's compare data, of WRITE SAME's block or of an atomic write is no
         * command. In both, dir and xfer_len stay the CDB's so the transport reports the overflow
         * residual (RFC 7143 §11.4.5.1: xfer_len - EDTL); with b) it takes none of the data. EDTL
         * above the CDB's need (underflow) is served normally. */
        bool blocks = (c->flags & (CMD_DIRECT | CMD_WRITES)) == (CMD_DIRECT | CMD_WRITES);
        if (!blocks || (avail & (lu->block_size - 1))) {
            scsi_task_set_reason(t, SR_INVALID_FIELD_IN_IU);
            return -1;
        }
        k->io.length = avail; /* the rest of the range stays untouched */
    }
    /* Every transfer has a buffer of the task's own, RAM LUNs included: the data is copied
     * between it and the store under the store's or the range lock's exclusion, so a READ
     * never returns a block half written, and what the transport sends (and digests) is
     * memory nobody else writes. */
    size_t mem = exec_memory(c, lu, k->io.length);
    if (t->xfer_len)
        mem += buffer_bytes(t->xfer_len, scratch);
    sr = admit_memory(t, mem);
    if (sr)
        goto refuse;
    if (t->xfer_len) {
        sr = alloc_buffer(t, scratch);
        if (sr)
            goto refuse;
    }
    k->cmd = c;
    return 0;

refuse:
    scsi_task_set_reason(t, sr);
    t->dir = SCSI_DIR_NONE;
    t->xfer_len = 0;
    return -1;
}

void scsi_task_exec(struct scsi_task *t)
{
    const struct scsi_cmd *c = scsi_core(t)->cmd;
    scsi_task_enter(t);
    if (!c) { /* refused by setup or the transport: status and sense are already set */
        t->done(t);
        return;
    }
    /* commands that move the medium's data are what a LUN's caps count (throttle.c) */
    if ((c->flags & CMD_MEDIUM) &&
        (rate_limit_on(&t->lu->limit) || (t->limit && rate_limit_on(t->limit))) && scsi_throttle(t))
        return;
    c->exec(t, c);
}

bool scsi_task_pinned(const struct scsi_task *t)
{
    return scsi_core((struct scsi_task *)t)->pinned;
}

bool scsi_task_pin_can_fault(const struct scsi_task *t)
{
    return scsi_task_pinned(t) && t->lu->bs->ops->pin_can_fault;
}

/* Every transfer has one (scsi_task_setup: alloc_buffer), in-place READs included. */
void *scsi_task_buffer(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    assert(!k->buf || t->buffered);
    return k->buf;
}

/* Nothing sends from the store's pages any more (sbc.c read_in_place): a RAM LUN's pins go,
 * a file LUN's READ record leaves the range lock (it heads the allocation sbc.c made), and the
 * WRITEs waiting there run. */
void scsi_task_unpin(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    if (k->pinned) {
        k->pinned = false;
        t->lu->bs->ops->unpin(t->lu->bs, k->io.offset, k->io.length);
    }
    if (k->rl_held) {
        k->rl_held = false;
        scsi_rl_release(&t->lu->rl, k->io.arg);
        free(k->io.arg);
        k->io.arg = NULL;
    }
}

void scsi_task_release(struct scsi_task *t)
{
    struct scsi_task_core *k = scsi_core(t);
    scsi_task_unpin(t);
    buf_put(k->buf, k->buf_class);
    k->buf = NULL;
    t->buffered = false;
    t->iovcnt = 0;
    k->cmd = NULL;
    if (k->lu_held) {
        k->lu_held = false;
        scsi_lun_user_put(t->lu);
    }
}

void scsi_task_refuse(struct scsi_task *t, enum scsi_refusal why)
{
    scsi_task_release(t);
    switch (why) {
    case SCSI_REFUSE_TASK_SET_FULL:
    case SCSI_REFUSE_BUSY:
        scsi_task_set_reason(t, why == SCSI_REFUSE_BUSY ? SR_BUSY : SR_TASK_SET_FULL);
        t->dir = SCSI_DIR_NONE;
        t->xfer_len = 0;
        return;
    case SCSI_REFUSE_PROTOCOL_CRC_ERROR:
        scsi_task_set_reason(t, SR_PROTOCOL_CRC_ERROR);
        return;
    }
    assert(!"unknown scsi_refusal");
}
