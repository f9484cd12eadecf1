/* Thin provisioning (SBC-4 §4.7): UNMAP, WRITE SAME 10/16 (with the UNMAP bit, NDOB, and a
 * zero NUMBER OF LOGICAL BLOCKS meaning "to the end of the medium"), GET LBA STATUS; plus the
 * sequence runner and pattern buffer that WRITE SAME and SANITIZE share. Space is released
 * through the store's BS_UNMAP; provisioning state comes from its lba_status op. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "reactor/reactor.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

/* Bytes one WRITE SAME / SANITIZE step writes: large enough to amortise a submit, small
 * enough that a whole-LUN fill never allocates more than this. */
#define FILL_CHUNK SCSI_FILL_CHUNK
/* Steps run back to back on a reactor before the runner yields to other connections. */
#define SEQ_BUDGET 64

/* --- the sequence runner --- */

static void seq_io_done(struct bs_io *io, int err);

static void seq_resume(void *arg)
{
    sbc_seq_run(arg);
}

/* A paced sequence that is ahead of its rate waits on a timer; true if it now waits. */
static bool seq_pace(struct sbc_seq *s)
{
    if (!s->rate)
        return false;
    struct reactor *r = reactor_self();
    if (!r)
        return false;
    uint64_t now = reactor_now_ms();
    if (!s->start_ms) {
        s->start_ms = now;
        return false;
    }
    uint64_t due = s->start_ms + s->bytes * 1000 / s->rate;
    if (due <= now)
        return false;
    reactor_timer_start(r, &s->pace_timer, due - now, seq_resume, s);
    return true;
}

/* Inline completions (the RAM store) come back inside bs_submit: they only mark the step done
 * and this loop issues the next one, so a 1 TiB fill does not recurse a million deep. */
void sbc_seq_run(struct sbc_seq *s)
{
    unsigned budget = SEQ_BUDGET;
    while (!s->err) {
        if (budget-- == 0) {
            struct reactor *r = reactor_self();
            if (r) {
                reactor_yield(r, &s->yield_msg, seq_resume, s);
                return;
            }
            budget = SEQ_BUDGET;
        }
        if (seq_pace(s))
            return;
        memset(&s->io, 0, sizeof(s->io));
        if (!s->next(s, &s->io))
            break;
        if (s->io.op != BS_UNMAP)
            s->bytes += s->io.length;
        s->io.done = seq_io_done;
        s->io.arg = s;
        s->inline_done = false;
        s->in_submit = true;
        scsi_task_submit(s->task, s->bs, &s->io);
        s->in_submit = false;
        if (!s->inline_done)
            return; /* seq_io_done continues */
    }
    s->done(s, s->err);
}

static void seq_io_done(struct bs_io *io, int err)
{
    struct sbc_seq *s = io->arg;
    if (err)
        s->err = err;
    if (s->in_submit) {
        s->inline_done = true;
        return;
    }
    sbc_seq_run(s);
}

uint8_t *sbc_pattern_buffer(size_t len, uint32_t block_size, const uint8_t *pat, size_t plen)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, len))
        return NULL;
    uint8_t *b = p;
    for (size_t i = 0; i < block_size; i += plen)
        memcpy(b + i, pat, block_size - i < plen ? block_size - i : plen);
    for (size_t off = block_size; off < len;) { /* doubling copies */
        size_t n = off < len - off ? off : len - off;
        memcpy(b + off, b, n);
        off += n;
    }
    return b;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

static scsi_sr io_reason(int err)
{
    return sbc_io_reason(BS_WRITE, err);
}

/* --- UNMAP (SBC-4 §5.32) --- */

struct unmap_ctx {
    struct sbc_seq seq;
    struct scsi_task *t;
    struct scsi_rl_req lock;
    const uint8_t *desc; /* next block descriptor */
    unsigned left;       /* descriptors still to do */
};

scsi_sr sbc_parse_unmap(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    scsi_sr sr = sbc_write_protect(t->lu);
    if (sr)
        return sr;
    if (!sbc_thin(t->lu)) /* LBPU=0: the command is not offered by this LUN */
        return SR_INVALID_OPCODE;
    if (t->cdb[1] & 0x01) /* ANCHOR: anchored LBAs are not offered (ANC_SUP=0) */
        return SR_CDB_FIELD(1, 0);
    uint32_t len = get_be16(t->cdb + 7);
    if (len && len < 8)
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = len;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

static bool unmap_next(struct sbc_seq *s, struct bs_io *io)
{
    struct unmap_ctx *u = container_of(s, struct unmap_ctx, seq);
    const struct scsi_lun *lu = u->t->lu;
    while (u->left) {
        uint64_t lba = get_be64(u->desc);
        uint32_t n = get_be32(u->desc + 8);
        u->desc += 16;
        u->left--;
        if (!n)
            continue;
        io->op = BS_UNMAP;
        io->offset = lba << lu->block_shift;
        io->length = (uint64_t)n << lu->block_shift;
        return true;
    }
    return false;
}

static void unmap_done(struct sbc_seq *s, int err)
{
    struct unmap_ctx *u = container_of(s, struct unmap_ctx, seq);
    struct scsi_task *t = u->t;
    scsi_rl_release(&t->lu->rl, &u->lock);
    free(u);
    scsi_task_complete(t, err ? io_reason(err) : SR_OK);
}

static void unmap_granted(struct scsi_rl_req *q)
{
    struct unmap_ctx *u = q->arg;
    sbc_seq_run(&u->seq);
}

/* The whole list is checked before anything is unmapped, so a refused command changes
 * nothing. A BLOCK DESCRIPTOR DATA LENGTH beyond the parameter list is cut to what arrived;
 * a partial last descriptor is ignored (§5.32.2). */
void sbc_exec_unmap(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    uint32_t len = t->xfer_len;
    if (len < 8) { /* no parameter list: nothing to do */
        scsi_task_complete(t, SR_OK);
        return;
    }
    const uint8_t *p = t->iov[0].iov_base;
    uint32_t bddl = get_be16(p + 2);
    if (bddl > len - 8)
        bddl = len - 8;
    unsigned count = bddl / 16;
    if (count > SBC_MAX_UNMAP_DESCRIPTORS) {
        scsi_task_complete(t, SR_PARAM_FIELD(2, -1));
        return;
    }
    uint64_t total = 0, max_blocks = SBC_MAX_UNMAP_BLOCKS;
    for (unsigned i = 0; i < count; i++) {
        const uint8_t *d = p + 8 + 16 * i;
        uint64_t lba = get_be64(d);
        uint32_t n = get_be32(d + 8);
        if (lba > lu->nblocks || n > lu->nblocks - lba) {
            scsi_task_complete(t, SR_LBA_OUT_OF_RANGE);
            return;
        }
        total += n;
        if (total > max_blocks) {
            scsi_task_complete(t, SR_PARAM_FIELD(8 + 16 * i + 8, -1));
            return;
        }
    }
    if (!total) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    struct unmap_ctx *u = calloc(1, sizeof(*u));
    if (!u) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    u->t = t;
    u->desc = p + 8;
    u->left = count;
    u->seq.bs = lu->bs;
    u->seq.task = t;
    u->seq.next = unmap_next;
    u->seq.done = unmap_done;
    /* Over the whole LUN: waits for a COMPARE AND WRITE or SANITIZE in progress, and on a
     * store that keeps no block whole (order_rw) for the READs whose Data-In still point
     * into the file's pages (sbc.c read_in_place) */
    u->lock = (struct scsi_rl_req){.off = 0,
                                   .len = scsi_lun_size_bytes(lu),
                                   .mode = lu->bs->order_rw ? SCSI_RL_WRITE : SCSI_RL_SHARED,
                                   .granted = unmap_granted,
                                   .arg = u};
    if (scsi_rl_acquire(&lu->rl, &u->lock))
        sbc_seq_run(&u->seq);
}

/* --- WRITE SAME 10/16 (SBC-4 §5.49, §5.50) --- */

bool sbc_fill_next(struct sbc_fill *f, struct bs_io *io)
{
    if (f->off >= f->end)
        return false;
    if (f->unmap) { /* one call: the store frees the whole range */
        io->op = BS_UNMAP;
        io->offset = f->off;
        io->length = f->end - f->off;
        f->off = f->end;
        return true;
    }
    if (f->same) {
        f->iov.iov_base = f->chunk;
        f->iov.iov_len = f->chunk_len;
        io->op = BS_WRITE_SAME;
        io->offset = f->off;
        io->length = f->end - f->off;
        io->iov = &f->iov;
        io->iovcnt = 1;
        io->fua = f->fua;
        f->off = f->end;
        return true;
    }
    uint64_t n = f->end - f->off < f->chunk_len ? f->end - f->off : f->chunk_len;
    f->iov.iov_base = f->chunk;
    f->iov.iov_len = (size_t)n;
    io->op = BS_WRITE;
    io->offset = f->off;
    io->length = n;
    io->iov = &f->iov;
    io->iovcnt = 1;
    io->fua = f->fua;
    f->off += n;
    return true;
}

struct ws_ctx {
    struct sbc_seq seq;
    struct scsi_task *t;
    struct scsi_rl_req lock;
    struct sbc_fill fill; /* the bytes still to write or unmap */
};

scsi_sr sbc_parse_write_same(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    const uint8_t *cdb = t->cdb;
    struct scsi_lun *lu = t->lu;
    scsi_sr sr = sbc_write_protect(lu);
    if (sr)
        return sr;   /* before the data-out checks: ReadOnly tests send WS UNMAP without data */
    if (cdb[1] >> 5) /* WRPROTECT: no protection information */
        return SR_CDB_FIELD(1, 7);
    bool anchor = cdb[1] & 0x10, ndob = c->cdb_len == 16 && (cdb[1] & 1);
    if (anchor) /* ANCHOR without UNMAP is invalid; with it, ANC_SUP=0 says no anchors */
        return SR_CDB_FIELD(1, 4);
    r->lba = scsi_cdb_field(cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(cdb, c->tl_off, c->tl_len);
    if (!r->nblocks && r->lba <= lu->nblocks) /* WSNZ=0: zero means up to the last LBA */
        r->nblocks = lu->nblocks - r->lba;
    if (r->nblocks > SBC_MAX_WRITE_SAME_BLOCKS)
        return SR_CDB_FIELD(c->tl_off, -1);
    if (ndob) { /* no data-out: the block is zeros */
        r->xfer_len = 0;
        return SR_OK;
    }
    /* one block of data-out: more is a malformed command, refused before any data moves
     * (libiscsi WriteSame*.InvalidDataOutSize); less is setup's data-out shortfall rule */
    if (t->edtl_write && t->edtl > lu->block_size)
        return SR_INVALID_FIELD_IN_IU;
    r->xfer_len = lu->block_size;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

static bool ws_next(struct sbc_seq *s, struct bs_io *io)
{
    struct ws_ctx *w = container_of(s, struct ws_ctx, seq);
    return sbc_fill_next(&w->fill, io);
}

static void ws_done(struct sbc_seq *s, int err)
{
    struct ws_ctx *w = container_of(s, struct ws_ctx, seq);
    struct scsi_task *t = w->t;
    scsi_rl_release(&t->lu->rl, &w->lock);
    free(w->fill.chunk);
    free(w);
    scsi_task_complete(t, err ? io_reason(err) : SR_OK);
}

static void ws_granted(struct scsi_rl_req *q)
{
    struct ws_ctx *w = q->arg;
    sbc_seq_run(&w->seq);
}

/* With UNMAP=1 on a thin LUN the range is released and reads back as zeros (LBPRZ=1): SBC-4
 * §5.49 lets the device server either write the block or unmap each LBA, whatever the block
 * holds (as LIO does; libiscsi's UnmapUntilEnd sends a block of FFh and expects zeros). A
 * fully provisioned LUN writes instead. Otherwise the block is replicated into a buffer of at most
 * FILL_CHUNK bytes that is written over the range again and again, so a whole-LUN WRITE SAME costs
 * one megabyte of memory. */
void sbc_exec_write_same(struct scsi_task *t, const struct scsi_cmd *c)
{
    struct scsi_lun *lu = t->lu;
    if (!scsi_task_range(t)->length) {
        scsi_task_complete(t, SR_OK);
        return;
    }
    bool ndob = c->cdb_len == 16 && (t->cdb[1] & 1);
    const uint8_t *block = ndob ? NULL : t->iov[0].iov_base;
    bool zero = ndob || all_zero(block, lu->block_size);
    struct ws_ctx *w = calloc(1, sizeof(*w));
    if (!w) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    w->t = t;
    w->fill.off = scsi_task_range(t)->offset;
    w->fill.end = scsi_task_range(t)->offset + scsi_task_range(t)->length;
    w->fill.fua = scsi_task_range(t)->fua;
    w->fill.unmap = (t->cdb[1] & 0x08) && sbc_thin(lu);
    /* a store that repeats the block itself (rbd_aio_writesame) gets one request and one
     * block instead of a megabyte of pattern written chunk by chunk */
    w->fill.same = !w->fill.unmap && lu->bs->write_same;
    if (w->fill.same) {
        void *p = NULL;
        if (!posix_memalign(&p, 4096, lu->block_size)) {
            if (zero)
                memset(p, 0, lu->block_size);
            else
                memcpy(p, block, lu->block_size);
        }
        w->fill.chunk = p;
        w->fill.chunk_len = lu->block_size;
        if (!w->fill.chunk) {
            free(w);
            scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
            return;
        }
    } else if (!w->fill.unmap) {
        w->fill.chunk_len = scsi_task_range(t)->length < FILL_CHUNK
                                ? (size_t)scsi_task_range(t)->length
                                : FILL_CHUNK;
        if (zero) {
            void *p = NULL;
            if (!posix_memalign(&p, 4096, w->fill.chunk_len))
                memset(p, 0, w->fill.chunk_len);
            w->fill.chunk = p;
        } else {
            w->fill.chunk =
                sbc_pattern_buffer(w->fill.chunk_len, lu->block_size, block, lu->block_size);
        }
        if (!w->fill.chunk) {
            free(w);
            scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
            return;
        }
    }
    w->seq.bs = lu->bs;
    w->seq.task = t;
    w->seq.next = ws_next;
    w->seq.done = ws_done;
    /* a WRITE as sbc.c submit_locked takes it: on order_rw stores it waits for READs */
    w->lock = (struct scsi_rl_req){.off = scsi_task_range(t)->offset,
                                   .len = scsi_task_range(t)->length,
                                   .mode = lu->bs->order_rw ? SCSI_RL_WRITE : SCSI_RL_SHARED,
                                   .granted = ws_granted,
                                   .arg = w};
    if (scsi_rl_acquire(&lu->rl, &w->lock))
        sbc_seq_run(&w->seq);
}

/* --- GET LBA STATUS (SBC-4 §5.7) --- */

/* Descriptors per reply and bytes of the LUN looked at per command: the rest can be asked for
 * by a further command starting where this reply ends (§5.7.2 allows fewer descriptors). */
#define LBAS_MAX_DESC 64u
#define LBAS_MAX_SCAN (16ull << 30)

scsi_sr sbc_parse_get_lba_status(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    uint64_t lba = get_be64(t->cdb + 2);
    if (lba >= t->lu->nblocks)
        return SR_LBA_OUT_OF_RANGE;
    uint32_t alloc = get_be32(t->cdb + 10);
    uint32_t full = 8 + 16 * LBAS_MAX_DESC;
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Runs of one state from the starting LBA, merged, one descriptor each (PROVISIONING STATUS 0
 * mapped, 1 deallocated). The first descriptor starts at the STARTING LOGICAL BLOCK ADDRESS.
 * Fills d (8 + 16 * LBAS_MAX_DESC bytes, zeroed) and its length; SR_OK or the reason. */
static scsi_sr lbas_build(struct scsi_lun *lu, const uint8_t *cdb, uint32_t xfer_len, uint8_t *d,
                          uint32_t *dlen)
{
    unsigned want = xfer_len > 8 ? (xfer_len - 8 + 15) / 16 : 1;
    if (want > LBAS_MAX_DESC)
        want = LBAS_MAX_DESC;
    uint64_t pos = get_be64(cdb + 2) << lu->block_shift;
    uint64_t end = scsi_lun_size_bytes(lu);
    if (end - pos > LBAS_MAX_SCAN)
        end = pos + LBAS_MAX_SCAN;
    unsigned n = 0;
    uint64_t run_start = pos, run_len = 0;
    bool run_mapped = false;
    while (pos < end) {
        uint64_t len = end - pos;
        bool mapped;
        int err = bs_lba_status(lu->bs, pos, &len, &mapped);
        if (err)
            return SR_READ_ERROR;
        if (!len)
            len = 1;
        if (run_len && mapped != run_mapped) {
            if (n + 1 == want)
                break; /* the last descriptor slot: close this run and stop */
            n++;
            run_start = pos;
            run_len = 0;
        }
        uint64_t max_run = 0xffffffffull << lu->block_shift; /* NUMBER OF LOGICAL BLOCKS */
        if (run_len + len > max_run) {
            len = max_run - run_len;
            if (!len) {
                if (n + 1 == want)
                    break;
                n++;
                run_start = pos;
                run_len = 0;
                continue;
            }
        }
        run_mapped = mapped;
        run_len += len;
        pos += len;
        uint8_t *e = d + 8 + 16 * n;
        put_be64(e, run_start >> lu->block_shift);
        /* a store's run may end inside a block only at the scan limit: round up */
        put_be32(e + 8, (uint32_t)((run_len + lu->block_size - 1) >> lu->block_shift));
        e[12] = mapped ? 0 : 1;
    }
    n++;
    put_be32(d, 4 + 16 * n); /* PARAMETER DATA LENGTH: bytes after this field */
    *dlen = 8 + 16 * n;
    return SR_OK;
}

/* A store whose allocation map lives in the cluster (rbd) is asked on the SCSI core's helper
 * thread; the reply goes out on the task's reactor. */
struct lbas_job {
    struct scsi_offload off;
    struct scsi_task *t;
    scsi_sr sr;
    uint32_t dlen;
    uint8_t d[8 + 16 * LBAS_MAX_DESC];
};

static void lbas_work(struct scsi_offload *o)
{
    struct lbas_job *j = (struct lbas_job *)o;
    j->sr = lbas_build(j->t->lu, j->t->cdb, j->t->xfer_len, j->d, &j->dlen);
}

static void lbas_done(struct scsi_offload *o)
{
    struct lbas_job *j = (struct lbas_job *)o;
    struct scsi_task *t = j->t;
    if (j->sr)
        scsi_task_complete(t, j->sr);
    else
        scsi_task_put_data(t, j->d, j->dlen);
    free(j);
}

void sbc_exec_get_lba_status(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    if (lu->bs->lba_status_blocks) {
        struct lbas_job *j = calloc(1, sizeof(*j));
        if (!j) {
            scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
            return;
        }
        j->t = t;
        j->off.work = lbas_work;
        j->off.done = lbas_done;
        scsi_offload_submit(&j->off);
        return;
    }
    uint8_t d[8 + 16 * LBAS_MAX_DESC];
    memset(d, 0, sizeof(d));
    uint32_t dlen = 0;
    scsi_sr sr = lbas_build(lu, t->cdb, t->xfer_len, d, &dlen);
    if (sr)
        scsi_task_complete(t, sr);
    else
        scsi_task_put_data(t, d, dlen);
}
