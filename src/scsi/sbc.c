/* Block commands (SBC-3): READ/WRITE/VERIFY/WRITE AND VERIFY 6/10/12/16 parsed by one function
 * from the table's field offsets, SYNCHRONIZE CACHE, READ CAPACITY 10/16, START STOP UNIT.
 * Range and length checks are not here: task.c does them once for every medium command. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

/* SBC-3 §5.8/§5.11/§5.15...: the LBA and TRANSFER LENGTH fields sit where the row says. The
 * 6-byte forms have a 21-bit LBA and take TRANSFER LENGTH 0 as 256 blocks (§5.13); the others
 * carry RDPROTECT/WRPROTECT, which must be 0 without protection information (§4.22). */
scsi_sr sbc_parse_rw(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    const uint8_t *cdb = t->cdb;
    uint64_t lba = scsi_cdb_field(cdb, c->lba_off, c->lba_len);
    uint64_t nblocks = scsi_cdb_field(cdb, c->tl_off, c->tl_len);
    bool write = c->flags & CMD_WRITES;

    if (c->cdb_len == 6) {
        lba &= 0x1fffff;
        if (nblocks == 0)
            nblocks = 256;
    } else {
        if (cdb[1] >> 5)
            return SR_CDB_FIELD(1, 7);
        r->fua = cdb[1] & 0x08;
        if (write && (c->opcode & 0x0f) == 0x0e)
            r->fua = true; /* WRITE AND VERIFY: the verify reads the medium, so write through */
    }
    r->lba = lba;
    r->nblocks = nblocks;
    r->xfer_len = nblocks << t->lu->block_shift;
    r->dir = write ? SCSI_DIR_WRITE : SCSI_DIR_READ;
    return SR_OK;
}

/* VERIFY (SBC-4 §5.33): BYTCHK 00b checks the range only, 01b compares the data-out with the
 * medium, 11b compares one data-out block with each block of the range; 10b is reserved. */
scsi_sr sbc_parse_verify(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    const uint8_t *cdb = t->cdb;
    unsigned shift = t->lu->block_shift;
    if (cdb[1] >> 5)
        return SR_CDB_FIELD(1, 7);
    unsigned bytchk = (cdb[1] >> 1) & 3;
    r->lba = scsi_cdb_field(cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(cdb, c->tl_off, c->tl_len);
    r->dir = SCSI_DIR_WRITE;
    switch (bytchk) {
    case 0:
        r->xfer_len = 0;
        break;
    case 1:
        r->xfer_len = r->nblocks << shift;
        break;
    case 3:
        if ((r->nblocks << shift) > SCSI_MAX_XFER_BYTES) /* bounds the medium read */
            return SR_CDB_FIELD(c->tl_off, -1);
        r->xfer_len = r->nblocks ? 1u << shift : 0;
        break;
    default:
        return SR_CDB_FIELD(1, 2);
    }
    return SR_OK;
}

/* SYNCHRONIZE CACHE (SBC-3 §5.22): NUMBER OF LOGICAL BLOCKS 0 means "to the end"; the range is
 * still checked. IMMED=1 is accepted and answered after the flush, which the standard allows. */
scsi_sr sbc_parse_sync(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    r->lba = scsi_cdb_field(t->cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(t->cdb, c->tl_off, c->tl_len);
    return SR_OK;
}

/* READ CAPACITY (SBC-3 §5.15/§5.16): with PMI=0 the LOGICAL BLOCK ADDRESS field must be 0. */
scsi_sr sbc_parse_readcap10(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    if (!(t->cdb[8] & 1) && get_be32(t->cdb + 2))
        return SR_CDB_FIELD(2, -1);
    r->xfer_len = 8;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

scsi_sr sbc_parse_readcap16(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    if (!(t->cdb[14] & 1) && get_be64(t->cdb + 2))
        return SR_CDB_FIELD(2, -1);
    uint32_t alloc = get_be32(t->cdb + 10);
    r->xfer_len = alloc < 32 ? alloc : 32;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* START STOP UNIT (SBC-3 §5.20): nothing to check beyond the usage mask; sbc_removable.c runs
 * it (LOEJ ejects and loads a removable medium; otherwise START, LOEJ and a power condition
 * change nothing: the medium is always ready). */
scsi_sr sbc_parse_start_stop(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)t, (void)c, (void)r;
    return SR_OK;
}

/* What a store's error says to the initiator. Every store may fail with -EIO (a MEDIUM ERROR
 * for the direction) or -ENOSPC (a thin store out of space); a network store (rbd) also with
 * -EROFS (the medium became read-only: a snapshot, a lost exclusive lock), -ETIMEDOUT (its
 * cluster did not answer within the store's timeout: retryable) and -ESHUTDOWN (the store gave
 * the LUN up, e.g. the cluster blocklisted this gateway: only an operator can help). */
scsi_sr sbc_io_reason(enum bs_op op, int err)
{
    switch (err) {
    case -ENOSPC:
        return SR_SPACE_ALLOC_FAILED;
    case -EROFS:
        return SR_WRITE_PROTECTED;
    case -ETIMEDOUT:
        return SR_LU_TIMEOUT;
    case -ESHUTDOWN:
        return SR_NOT_READY_MANUAL;
    default:
        return op == BS_READ ? SR_READ_ERROR : SR_WRITE_ERROR;
    }
}

static void rw_done(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    if (err) {
        scsi_task_complete(t, sbc_io_reason(io->op, err));
        return;
    }
    if (io->op == BS_READ)
        t->data_len = t->xfer_len;
    scsi_task_complete(t, SR_OK);
}

static void submit(struct scsi_task *t, enum bs_op op, void (*done)(struct bs_io *, int))
{
    struct bs_io *io = &scsi_core(t)->io;
    io->op = op;
    if (op == BS_READ || op == BS_WRITE) {
        io->iov = t->iov;
        io->iovcnt = t->iovcnt;
    } else {
        io->iov = NULL;
        io->iovcnt = 0;
    }
    io->done = done;
    io->arg = t;
    scsi_task_submit(t, t->lu->bs, io);
}

/* READ and WRITE hold their range in the LUN's range lock, so a COMPARE AND WRITE, ORWRITE or
 * WRITE ATOMIC (exclusive) sees each of them either finished or not begun. On a store that
 * keeps every block whole against concurrent requests itself (RAM copies under its own locks,
 * RBD's objects) they hold it shared, and the common case costs two atomic operations: no
 * mutex, no allocation; only while an exclusive holder exists does a request get a record and
 * maybe wait (queued, never blocking the reactor). On a store that does not (bs->order_rw: a
 * file, whose page cache copies without excluding readers), they always take a record, READ
 * excluding overlapping WRITEs and WRITE overlapping READs and WRITEs. */
struct rw_slow {
    struct scsi_rl_req q;
    struct scsi_task *t;
    enum bs_op op;
};

static void rw_fast_done(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    scsi_rl_release_fast(&t->lu->rl);
    rw_done(io, err);
}

static void rw_slow_done(struct bs_io *io, int err)
{
    struct rw_slow *s = io->arg;
    struct scsi_task *t = s->t;
    scsi_rl_release(&t->lu->rl, &s->q);
    free(s);
    io->arg = t;
    rw_done(io, err);
}

static bool read_in_place(struct scsi_task *t);

static void rw_slow_granted(struct scsi_rl_req *q)
{
    struct rw_slow *s = q->arg;
    struct scsi_task *t = s->t;
    struct bs_io *io = &scsi_core(t)->io;
    if (s->op == BS_READ && t->lu->bs->order_rw && read_in_place(t)) {
        /* the store keeps nothing whole itself: this READ record keeps WRITEs off the pages
         * its Data-In point into until scsi_task_release (task.c frees s through it) */
        _Static_assert(offsetof(struct rw_slow, q) == 0, "the record must head struct rw_slow");
        scsi_core(t)->rl_held = true;
        io->arg = &s->q;
        scsi_task_complete(t, SR_OK);
        return;
    }
    io->op = s->op;
    io->iov = t->iov;
    io->iovcnt = t->iovcnt;
    io->done = rw_slow_done;
    io->arg = s;
    scsi_task_submit(t, t->lu->bs, io);
}

/* A READ the store serves in place (bs read_pin: a RAM LUN, or a file LUN whose pages are in
 * the page cache, at least its send-min): the task's data is the LUN's memory (the file's
 * mapping), not a copy, and the store (RAM) or the READ's range lock record (a file) keeps
 * those pages from changing until scsi_task_release, after the transport let go of the last
 * PDU that points into them (docs/performance.md, "RAM LUN reads without the copy"). */
static bool read_in_place(struct scsi_task *t)
{
    struct bs *bs = t->lu->bs;
    const struct bs_io *io = &scsi_core(t)->io;
    if (!bs->ops->read_pin || io->length != t->xfer_len || t->keeps_data)
        return false;
    int n = bs->ops->read_pin(bs, io->offset, io->length, t->iov, SCSI_TASK_IOV_MAX);
    if (!n)
        return false;
    t->iovcnt = n;
    scsi_core(t)->pinned = true;
    t->data_len = t->xfer_len;
    return true;
}

static void submit_locked(struct scsi_task *t, enum bs_op op)
{
    struct scsi_range_lock *rl = &t->lu->rl;
    bool order = t->lu->bs->order_rw;
    if (!order && scsi_rl_try_fast(rl)) {
        if (op == BS_READ && read_in_place(t)) {
            scsi_rl_release_fast(rl);
            scsi_task_complete(t, SR_OK);
            return;
        }
        submit(t, op, rw_fast_done);
        return;
    }
    struct rw_slow *s = malloc(sizeof(*s));
    if (!s) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    s->t = t;
    s->op = op;
    const struct bs_io *io = &scsi_core(t)->io;
    enum scsi_rl_mode mode = !order ? SCSI_RL_SHARED : op == BS_READ ? SCSI_RL_READ : SCSI_RL_WRITE;
    s->q = (struct scsi_rl_req){
        .off = io->offset, .len = io->length, .mode = mode, .granted = rw_slow_granted, .arg = s};
    if (scsi_rl_acquire(rl, &s->q))
        rw_slow_granted(&s->q);
}

void sbc_exec_read(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    if (!t->xfer_len) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    submit_locked(t, BS_READ);
}

void sbc_exec_write(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    if (!scsi_core(t)->io.length) { /* nothing to store (possibly cut to EDTL by setup) */
        scsi_task_complete(t, SR_OK);
        return;
    }
    submit_locked(t, BS_WRITE);
}

/* Compare the data-out with the medium; on a difference report MISCOMPARE with the offset of
 * the first differing byte in INFORMATION (SBC-3 §5.33). */
static void verify_compare(struct scsi_task *t, const uint8_t *medium)
{
    const uint8_t *data = t->iov[0].iov_base;
    uint32_t bsz = t->lu->block_size;
    bool one_block = ((t->cdb[1] >> 1) & 3) == 3;
    uint64_t len = scsi_core(t)->io.length;
    for (uint64_t off = 0; off < len; off += bsz) {
        const uint8_t *want = one_block ? data : data + off;
        if (memcmp(want, medium + off, bsz) == 0)
            continue;
        uint32_t i = 0;
        while (want[i] == medium[off + i])
            i++;
        scsi_task_set_reason_info(t, SR_MISCOMPARE, (uint32_t)(off + i));
        t->done(t);
        return;
    }
    scsi_task_complete(t, SR_OK);
}

static void verify_read_done(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    if (err) {
        scsi_task_complete(t, sbc_io_reason(BS_READ, err));
        return;
    }
    verify_compare(t, t->iov[1].iov_base);
}

void sbc_exec_verify(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    if (!t->xfer_len) { /* BYTCHK=0: the medium is RAM or a file; there is nothing to check */
        scsi_task_complete(t, SR_OK);
        return;
    }
    struct scsi_task_core *k = scsi_core(t);
    struct bs_io *io = &k->io;
    /* setup left room for the medium's copy after the data-out in the same buffer (the row's
     * CMD_SCRATCH), RAM LUNs too: a copy taken under the store's locks is whole blocks */
    t->iov[1].iov_base = (uint8_t *)k->buf + ((t->xfer_len + 4095) & ~4095u);
    t->iov[1].iov_len = io->length;
    io->op = BS_READ;
    io->iov = &t->iov[1];
    io->iovcnt = 1;
    io->done = verify_read_done;
    io->arg = t;
    scsi_task_submit(t, t->lu->bs, io);
}

static void sync_done(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    scsi_task_complete(t, err ? sbc_io_reason(BS_FLUSH, err) : SR_OK);
}

void sbc_exec_sync(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    submit(t, BS_FLUSH, sync_done);
}

void sbc_exec_readcap10(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    uint8_t d[8];
    uint64_t last = t->lu->nblocks - 1;
    put_be32(d, last > 0xffffffffu ? 0xffffffffu : (uint32_t)last); /* use READ CAPACITY 16 */
    put_be32(d + 4, t->lu->block_size);
    scsi_task_put_data(t, d, sizeof(d));
}

void sbc_exec_readcap16(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    uint8_t d[32] = {0};
    put_be64(d, t->lu->nblocks - 1);
    put_be32(d + 8, t->lu->block_size);
    /* byte 12 P_TYPE/PROT_EN 0: no protection. Byte 13 LOGICAL BLOCKS PER PHYSICAL BLOCK
     * EXPONENT: 0 unless the LUN was given a physical block size (the RAM store writes every
     * block alone; its 4 KiB allocation unit is told by VPD 0xB0's granularities). Byte 14
     * LBPME and LBPRZ on a thin LUN (SBC-4 §5.16.2; VPD 0xB2 says the same). */
    d[13] = t->lu->phys_exp;
    if (sbc_thin(t->lu))
        d[14] = 0x80 | 0x40;
    scsi_task_put_data(t, d, sizeof(d));
}
