/* Read-modify-write block commands, each atomic against every other command that takes the
 * LUN's range lock: COMPARE AND WRITE (SBC-4 §5.3), ORWRITE(16) (§5.14) and WRITE ATOMIC(16)
 * (§5.48). They hold the range exclusively from before the read to after the write, so two
 * VMware ATS heartbeats on one sector, or a WRITE to a file store racing a compare, are
 * ordered; the reactor thread never waits for the lock (a blocked command is queued and
 * resumed by message). READ and WRITE hold the range lock too (sbc.c), so they see each of
 * these finished or not begun. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

enum rmw_kind { RMW_CAW, RMW_OR, RMW_ATOMIC };

struct rmw_ctx {
    struct scsi_task *t;
    enum rmw_kind kind;
    struct scsi_rl_req lock;
    struct bs_io io;
    struct iovec iov;
    struct iovec caw_iov[2]; /* the store's own COMPARE AND WRITE: verify, write instances */
    uint8_t *medium;         /* the range as read (stores without map) */
};

/* WRPROTECT/ORPROTECT nonzero asks for protection information, which is not offered. */
static scsi_sr common_checks(const struct scsi_task *t)
{
    scsi_sr sr = sbc_write_protect(t->lu);
    if (sr)
        return sr;
    if (t->cdb[1] >> 5)
        return SR_CDB_FIELD(1, 7);
    return SR_OK;
}

/* A store whose medium other gateways share (caw_unit set: rbd) must compare and write in the
 * medium itself, since the range lock orders only this gateway's commands; it does so for a
 * range within one aligned unit of caw_unit bytes, which one block always is when the unit is
 * at least a block (the unit is a power of two, as block sizes are). Two blocks may straddle
 * units, and a block larger than the unit never fits: no COMPARE AND WRITE then (0), rather
 * than one that is silently not atomic across gateways. A store of one gateway (RAM, file)
 * is served under the range lock, any length. */
uint8_t sbc_caw_max_blocks(const struct scsi_lun *lu)
{
    const struct bs *bs = lu->bs;
    if (!bs->caw_unit)
        return SBC_MAX_CAW_BLOCKS;
    return bs->caw_unit >= lu->block_size ? 1 : 0;
}

/* COMPARE AND WRITE: NUMBER OF LOGICAL BLOCKS in byte 13; the data-out is the verify instance
 * followed by the write instance, 2 * n blocks. Zero blocks is not an error and moves nothing.
 * More blocks than MAXIMUM COMPARE AND WRITE LENGTH is INVALID FIELD IN CDB (SBC-4 §5.3). A
 * data-out that is not 2 * n blocks is refused before any data moves (0Eh/03h); one larger
 * than any allowed compare says the initiator meant more blocks than MAXIMUM COMPARE AND WRITE
 * LENGTH (its 8-bit field wrapped), INVALID FIELD IN CDB. */
scsi_sr sbc_parse_caw(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    scsi_sr sr = common_checks(t);
    if (sr)
        return sr;
    unsigned shift = t->lu->block_shift;
    uint64_t n = t->cdb[13];
    uint64_t max = sbc_caw_max_blocks(t->lu);
    uint64_t edtl = t->edtl_write ? t->edtl : 0;
    if (n > max || edtl > ((2ull * SBC_MAX_CAW_BLOCKS) << shift))
        return SR_CDB_FIELD(13, -1);
    r->lba = get_be64(t->cdb + 2);
    r->nblocks = n;
    r->fua = t->cdb[1] & 0x08;
    if (!n)
        return SR_OK;
    /* more data-out than the compare and write blocks: malformed (libiscsi
     * CompareAndWrite.InvalidDataOutSize); less is setup's data-out shortfall rule */
    if (edtl > (2 * n) << shift)
        return SR_INVALID_FIELD_IN_IU;
    r->xfer_len = (2 * n) << shift;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

scsi_sr sbc_parse_orwrite(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    scsi_sr sr = common_checks(t);
    if (sr)
        return sr;
    r->lba = scsi_cdb_field(t->cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(t->cdb, c->tl_off, c->tl_len);
    r->xfer_len = r->nblocks << t->lu->block_shift;
    r->dir = SCSI_DIR_WRITE;
    r->fua = t->cdb[1] & 0x08;
    return SR_OK;
}

/* WRITE ATOMIC is all or nothing for a READ (which holds its range in the range lock while
 * the write holds it exclusively) and across a crash: only a store whose writes survive a
 * crash whole or not at all (bs->write_atomic: RAM, where nothing survives one) offers it. A
 * file's page cache writes back page by page, a device promises at most its own atomic unit,
 * and librbd splits a write at object boundaries into independent RADOS operations. */
uint32_t sbc_atomic_max_bytes(const struct scsi_lun *lu)
{
    return lu->bs->write_atomic ? SBC_MAX_ATOMIC_BYTES : 0;
}

/* WRITE ATOMIC(16): TRANSFER LENGTH in bytes 12-13, at most MAXIMUM ATOMIC TRANSFER LENGTH (0
 * where it is not offered: any block is refused); no alignment or granularity rules (VPD 0xB0
 * says 0). A data-out cut short is refused by setup (nothing written), as for every data-out
 * command. */
scsi_sr sbc_parse_write_atomic(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    scsi_sr sr = common_checks(t);
    if (sr)
        return sr;
    unsigned shift = t->lu->block_shift;
    r->lba = scsi_cdb_field(t->cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(t->cdb, c->tl_off, c->tl_len);
    if ((r->nblocks << shift) > sbc_atomic_max_bytes(t->lu))
        return SR_CDB_FIELD(c->tl_off, -1);
    r->xfer_len = r->nblocks << shift;
    r->dir = SCSI_DIR_WRITE;
    r->fua = t->cdb[1] & 0x08;
    return SR_OK;
}

static void rmw_finish(struct rmw_ctx *x, scsi_sr sr, bool has_info, uint32_t info)
{
    struct scsi_task *t = x->t;
    scsi_rl_release(&t->lu->rl, &x->lock);
    free(x->medium);
    free(x);
    if (has_info) {
        scsi_task_set_reason_info(t, sr, info);
        t->done(t);
    } else {
        scsi_task_complete(t, sr);
    }
}

static void rmw_write_done(struct bs_io *io, int err)
{
    struct rmw_ctx *x = io->arg;
    rmw_finish(x, err ? sbc_io_reason(BS_WRITE, err) : SR_OK, false, 0);
}

static void rmw_write(struct rmw_ctx *x, void *data)
{
    struct scsi_task *t = x->t;
    x->iov.iov_base = data;
    x->iov.iov_len = scsi_task_range(t)->length;
    x->io = (struct bs_io){.op = BS_WRITE,
                           .offset = scsi_task_range(t)->offset,
                           .length = scsi_task_range(t)->length,
                           .iov = &x->iov,
                           .iovcnt = 1,
                           .fua = scsi_task_range(t)->fua,
                           .done = rmw_write_done,
                           .arg = x};
    scsi_task_submit(x->t, t->lu->bs, &x->io);
}

/* The medium's copy of the range is in hand (memory of a RAM LUN, or read into x->medium):
 * compare, OR, and write. */
static void rmw_modify(struct rmw_ctx *x, uint8_t *medium)
{
    struct scsi_task *t = x->t;
    uint8_t *data = t->iov[0].iov_base;
    size_t len = scsi_task_range(t)->length;
    if (x->kind == RMW_CAW) {
        if (memcmp(data, medium, len) != 0) {
            /* MISCOMPARE with the offset of the first differing byte (SBC-4 §5.3) */
            uint32_t i = 0;
            while (data[i] == medium[i])
                i++;
            rmw_finish(x, SR_MISCOMPARE, true, i);
            return;
        }
        rmw_write(x, data + len);
        return;
    }
    /* ORWRITE: the result goes where the data-out was, and is written as a WRITE is (on a RAM
     * LUN, under the store's locks, which a VERIFY or an EXTENDED COPY reading the blocks
     * without the range lock relies on) */
    for (size_t i = 0; i < len; i++)
        data[i] |= medium[i];
    rmw_write(x, data);
}

static void rmw_read_done(struct bs_io *io, int err)
{
    struct rmw_ctx *x = io->arg;
    if (err) {
        rmw_finish(x, sbc_io_reason(BS_READ, err), false, 0);
        return;
    }
    rmw_modify(x, x->medium);
}

static void caw_store_done(struct bs_io *io, int err)
{
    struct rmw_ctx *x = io->arg;
    if (err == -EILSEQ) /* MISCOMPARE with the offset of the first differing byte */
        rmw_finish(x, SR_MISCOMPARE, true, (uint32_t)io->miscompare);
    else
        rmw_finish(x, err ? sbc_io_reason(BS_WRITE, err) : SR_OK, false, 0);
}

/* A store that compares and writes itself (rbd: one RADOS operation on one object) is atomic
 * for every client of the medium, other gateways included, which the range lock alone is
 * not; the lock still orders the command with this LUN's other users. sbc_parse_caw let
 * through only what fits the store's unit (sbc_caw_max_blocks). */
static bool caw_in_store(struct rmw_ctx *x)
{
    struct scsi_task *t = x->t;
    struct bs *bs = t->lu->bs;
    const struct bs_io *r = scsi_task_range(t);
    if (x->kind != RMW_CAW || !bs->caw_unit)
        return false;
    assert(r->offset / bs->caw_unit == (r->offset + r->length - 1) / bs->caw_unit);
    uint8_t *data = t->iov[0].iov_base;
    x->caw_iov[0] = (struct iovec){.iov_base = data, .iov_len = r->length};
    x->caw_iov[1] = (struct iovec){.iov_base = data + r->length, .iov_len = r->length};
    x->io = (struct bs_io){.op = BS_COMPARE_AND_WRITE,
                           .offset = r->offset,
                           .length = r->length,
                           .iov = x->caw_iov,
                           .iovcnt = 2,
                           .fua = r->fua,
                           .done = caw_store_done,
                           .arg = x};
    scsi_task_submit(x->t, bs, &x->io);
    return true;
}

static void rmw_start(struct rmw_ctx *x)
{
    struct scsi_task *t = x->t;
    struct scsi_lun *lu = t->lu;
    if (caw_in_store(x))
        return;
    if (x->kind == RMW_ATOMIC) {
        rmw_write(x, t->iov[0].iov_base);
        return;
    }
    if (lu->mapped) {
        rmw_modify(x, bs_map_read(lu->bs, scsi_task_range(t)->offset, scsi_task_range(t)->length));
        return;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, scsi_task_range(t)->length)) {
        rmw_finish(x, SR_INSUFFICIENT_RESOURCES, false, 0);
        return;
    }
    x->medium = p;
    x->iov.iov_base = p;
    x->iov.iov_len = scsi_task_range(t)->length;
    x->io = (struct bs_io){.op = BS_READ,
                           .offset = scsi_task_range(t)->offset,
                           .length = scsi_task_range(t)->length,
                           .iov = &x->iov,
                           .iovcnt = 1,
                           .done = rmw_read_done,
                           .arg = x};
    scsi_task_submit(x->t, lu->bs, &x->io);
}

static void rmw_granted(struct scsi_rl_req *q)
{
    rmw_start(q->arg);
}

static void rmw_exec(struct scsi_task *t, enum rmw_kind kind)
{
    if (!scsi_task_range(t)->length) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    struct rmw_ctx *x = calloc(1, sizeof(*x));
    if (!x) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    x->t = t;
    x->kind = kind;
    x->lock = (struct scsi_rl_req){.off = scsi_task_range(t)->offset,
                                   .len = scsi_task_range(t)->length,
                                   .mode = SCSI_RL_EXCL,
                                   .granted = rmw_granted,
                                   .arg = x};
    if (scsi_rl_acquire(&t->lu->rl, &x->lock))
        rmw_start(x);
}

void sbc_exec_caw(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    rmw_exec(t, RMW_CAW);
}

void sbc_exec_orwrite(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    rmw_exec(t, RMW_OR);
}

void sbc_exec_write_atomic(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    rmw_exec(t, RMW_ATOMIC);
}
