/* Third-party copy (SPC-4 §5.17, §6.4, §6.18): EXTENDED COPY (LID1) and RECEIVE COPY RESULTS.
 * The copy manager of a LUN copies block ranges within that LUN and between the LUNs of the same
 * target, named by identification CSCD descriptors (E4h) carrying the NAA designator VPD 0x83
 * reports. The whole parameter list is checked before a block moves; the blocks move in bounded
 * chunks through a bounce buffer with bs_submit, driven by the stores' completions (a RAM
 * store's copies then exclude concurrent READs and WRITEs of the blocks, block by block). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

/* The limits RECEIVE COPY RESULTS (OPERATING PARAMETERS) reports; the parser enforces these and
 * no others. VMware and QEMU send two CSCD descriptors and one segment. A list's worst case,
 * XCOPY_MAX_SEGS * XCOPY_MAX_SEG_BYTES, is what one command may move. */
enum {
    XCOPY_HDR_LEN = 16,            /* parameter list header (SPC-4 table 109) */
    XCOPY_CSCD_LEN = 32,           /* CSCD descriptors but the 64-byte IPv6/IP copy service ones */
    XCOPY_B2B_LEN = 28,            /* block device to block device segment descriptor */
    XCOPY_MAX_CSCD = 16,           /* MAXIMUM CSCD DESCRIPTOR COUNT */
    XCOPY_MAX_SEGS = 32,           /* MAXIMUM SEGMENT DESCRIPTOR COUNT */
    XCOPY_MAX_LIST = 1024,         /* MAXIMUM DESCRIPTOR LIST LENGTH */
    XCOPY_MAX_INLINE = 0,          /* no segment type reads inline data */
    XCOPY_CHUNK = SCSI_COPY_CHUNK, /* bytes per read and write (the bounce buffer) */
    XCOPY_MOVE_BUDGET = 16,        /* RAM-to-RAM chunks (16 MiB) per reactor turn */
    XCOPY_OWN_LUN = 0xffff,        /* CSCD index meaning the LUN that received the command */
    XCOPY_RCR_STATUS_LEN = 12,
    XCOPY_RCR_OPP_LEN = 46,
    XCOPY_RCR_FSD_HDR = 60,
};
#define XCOPY_MAX_SEG_BYTES (32u << 20) /* MAXIMUM SEGMENT LENGTH: 65535 blocks of 512 */

/* COPY MANAGER STATUS (SPC-4 table 370) */
enum { XCOPY_IN_PROGRESS = 0, XCOPY_DONE = 1, XCOPY_DONE_ERRORS = 2 };

/* RECEIVE COPY RESULTS service actions (SPC-4 table 367) */
enum { RCR_COPY_STATUS = 0x00, RCR_OPERATING_PARAMETERS = 0x03, RCR_FAILED_SEGMENT = 0x04 };

/* A reason with a field pointer into the parameter list (SPC-4 §4.5.2.4.2, C/D=0). */
#define SR_AT(reason, byte) ((scsi_sr)(reason) | SR_SKSV | ((uint32_t)(byte) << 16))

struct xcopy_seg {
    struct scsi_lun *src, *dst;
    uint64_t src_off, dst_off, bytes;
    bool backward; /* same LUN, destination above an overlapping source: copy from the end */
};

/* Where the chunk in flight is. */
enum xcopy_phase {
    XC_IDLE,    /* nothing in flight: pick the next chunk */
    XC_BOUNCE,  /* reading into the bounce buffer */
    XC_BOUNCED, /* the chunk is in the bounce buffer: write it next */
    XC_LAST,    /* the chunk's last I/O is in flight */
};

/* One EXTENDED COPY being processed. Lives from exec to completion; not shared. */
struct xcopy_op {
    struct scsi_task *t;
    uint8_t list_id;
    bool held;    /* LIST ID USAGE 00b/10b: the result is kept for RECEIVE COPY RESULTS */
    uint64_t seq; /* the held result this copy updates */
    unsigned nsegs, cur;
    struct xcopy_seg segs[XCOPY_MAX_SEGS];
    uint64_t seg_done; /* bytes of segs[cur] copied */
    uint64_t total;    /* bytes copied over all segments */
    enum xcopy_phase phase;
    uint64_t chunk, chunk_src, chunk_dst;
    int err;
    bool driving, again;
    unsigned moves;               /* RAM-to-RAM chunks since the reactor last had a turn */
    struct reactor_msg yield_msg; /* the next chunk, after the reactor's other events */
    /* The destination range of segs[cur], held shared in its LUN's range lock while the
     * segment is written, so a COMPARE AND WRITE there sees it either done or not begun. */
    struct scsi_rl_req lock;
    struct scsi_lun *locked; /* whose range lock holds op->lock; NULL when none */
    void *bounce;
    struct iovec iov;
    struct bs_io io;
    /* The other LUNs the descriptors named, held (scsi_lun_user_get) until the copy ends so
     * that removing one at run time waits for the copy. */
    struct scsi_lun *users[XCOPY_MAX_CSCD];
    unsigned nusers;
};

static void users_put(struct xcopy_op *op)
{
    for (unsigned i = 0; i < op->nusers; i++)
        scsi_lun_user_put(op->users[i]);
    op->nusers = 0;
}

/* --- parsing the parameter list (SPC-4 §6.4.3) --- */

/* The LUN of this target whose VPD 0x83 NAA designator this CSCD descriptor carries; NULL
 * when none does (the copy target is then unreachable, which only matters if a segment uses
 * it). Identification descriptor (SPC-4 §6.4.5.6): byte 1 holds the obsolete LU ID TYPE and NUL
 * bits (ignored) and the peripheral device type; bytes 4-7 a designation descriptor header;
 * bytes 28-31 the block device parameters (PAD, DISK BLOCK LENGTH). */
static scsi_sr parse_cscd(struct scsi_task *t, const uint8_t *d, unsigned off,
                          struct scsi_lun **out)
{
    *out = NULL;
    if (d[0] != 0xe4)
        return SR_AT(SR_UNSUPPORTED_CSCD_TYPE, off);
    if (d[1] & 0x1f) /* only block devices (type 00h) are copy targets here */
        return SR_AT(SR_UNSUPPORTED_CSCD_TYPE, off + 1);
    uint8_t code_set = d[4] & 0x0f, assoc = (d[5] >> 4) & 3, type = d[5] & 0x0f, len = d[7];
    if (len > 20)
        return SR_PARAM_FIELD(off + 7, -1);
    if (code_set != 0x01 || assoc != 0 || type != 0x03 || (len != 8 && len != 16))
        return SR_OK; /* not an NAA LU designator: nothing of ours answers to it */
    struct scsi_target *tg = t->target;
    for (uint32_t i = 0; i < tg->nluns; i++) {
        struct scsi_lun *lu = scsi_target_lun(tg, i);
        if (!lu || lu->ident.naa_len != len || memcmp(lu->ident.naa, d + 8, len) != 0)
            continue;
        /* a LUN the sender's host LUN map does not show it is none it may copy (host_map.c) */
        if (t->nexus && scsi_nexus_host_lun(t->nexus, lu->id, NULL) == UINT64_MAX)
            break;
        uint32_t bsz = get_be24(d + 29);
        if (bsz && bsz != lu->block_size)
            return SR_PARAM_FIELD(off + 29, -1);
        *out = lu;
        break;
    }
    return SR_OK;
}

/* Every check a command c (a row of the opcode table) sent by t's I_T nexus would meet on lu
 * before touching its medium, lu being any LUN of t's target: scsi_lun_gates, reservations
 * (pr_check as t's nexus) and, for a row with CMD_WRITES, write protect (sbc_write_protect). */
static scsi_sr lun_access(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c)
{
    scsi_sr sr = scsi_lun_gates(lu, c);
    unsigned resv = atomic_load_explicit(&lu->resv, memory_order_relaxed);
    if (!sr && resv)
        sr = pr_check(t, lu, c, resv);
    if (!sr && (c->flags & CMD_WRITES)) {
        bool map_ro = false; /* mapped read-only for the sender's host */
        if (t->nexus)
            scsi_nexus_host_lun(t->nexus, lu->id, &map_ro);
        sr = map_ro ? SR_WRITE_PROTECTED : sbc_write_protect(lu);
    }
    return sr;
}

/* Whether the nexus that sent t may read s's source and write its destination now: each LUN
 * meets what a READ(16) of the source and a WRITE(16) of the destination sent there by that
 * nexus would (lun_access: ALUA state, sanitize, medium, reservations, write protect),
 * whichever LUN received the EXTENDED COPY. Write protection keeps the DATA PROTECT sense a
 * WRITE gets. A copy target the copy manager may not touch for this nexus (a reservation
 * conflict, a standby port, no medium, a sanitize) ends the copy COPY ABORTED, COPY TARGET
 * DEVICE NOT REACHABLE, as for a copy target it cannot find (parse_cscd): the EXTENDED COPY
 * ends in the copy manager's sense (SPC-4 §6.4), and a RESERVATION CONFLICT status, which
 * carries no sense, is not passed through as if the command's own LUN were reserved. */
static scsi_sr segment_access(struct scsi_task *t, const struct xcopy_seg *s)
{
    bool known;
    scsi_sr sr = lun_access(t, s->src, scsi_cmd_lookup(0x88, 0, &known));
    if (!sr)
        sr = lun_access(t, s->dst, scsi_cmd_lookup(0x8a, 0, &known));
    if (SR_REASON(sr) == SR_WRITE_PROTECTED || SR_REASON(sr) == SR_SW_WRITE_PROTECTED)
        return sr;
    return sr ? SR_COPY_UNREACHABLE : SR_OK;
}

/* Block device to block device segment descriptor (SPC-4 §6.4.6.5). NUMBER OF BLOCKS counts
 * source blocks, or destination blocks with DC=1; the byte count must be whole blocks on both
 * sides since no residue is kept. Range and access (segment_access) are checked here so that a
 * list that cannot finish moves nothing, and access again as each chunk starts (step). */
static scsi_sr parse_b2b(struct scsi_task *t, const uint8_t *d, unsigned off,
                         struct scsi_lun *const *cscd, unsigned ncscd, struct xcopy_seg *s)
{
    if (get_be16(d + 2) != XCOPY_B2B_LEN - 4)
        return SR_PARAM_FIELD(off + 2, -1);
    if (d[1] & 0xfc)
        return SR_PARAM_FIELD(off + 1, 31 - __builtin_clz(d[1] & 0xfc));
    if (d[8] || d[9])
        return SR_PARAM_FIELD(off + (d[8] ? 8 : 9), -1);
    struct scsi_lun *lu[2];
    for (int k = 0; k < 2; k++) {
        uint16_t idx = get_be16(d + 4 + 2 * k);
        lu[k] = idx == XCOPY_OWN_LUN ? t->lu : idx < ncscd ? cscd[idx] : NULL;
        if (!lu[k])
            return SR_COPY_UNREACHABLE;
    }
    s->src = lu[0];
    s->dst = lu[1];
    bool dc = d[1] & 0x02;
    uint64_t nblk = get_be16(d + 10);
    s->bytes = nblk << (dc ? s->dst->block_shift : s->src->block_shift);
    if ((s->bytes & (s->src->block_size - 1)) || (s->bytes & (s->dst->block_size - 1)) ||
        s->bytes > XCOPY_MAX_SEG_BYTES)
        return SR_PARAM_FIELD(off + 10, -1);
    uint64_t src_lba = get_be64(d + 12), dst_lba = get_be64(d + 20);
    uint64_t src_n = s->bytes >> s->src->block_shift, dst_n = s->bytes >> s->dst->block_shift;
    /* a copy target refusing the LBA is the copy manager's COPY ABORTED (libiscsi
     * ExtendedCopy.ValidSegDescr expects it, as LIO answers) */
    if (src_lba > s->src->nblocks || src_n > s->src->nblocks - src_lba ||
        dst_lba > s->dst->nblocks || dst_n > s->dst->nblocks - dst_lba)
        return SR_COPY_UNREACHABLE;
    scsi_sr sr = segment_access(t, s);
    if (sr)
        return sr;
    s->src_off = src_lba << s->src->block_shift;
    s->dst_off = dst_lba << s->dst->block_shift;
    s->backward = s->src == s->dst && s->dst_off > s->src_off && s->dst_off < s->src_off + s->bytes;
    return SR_OK;
}

/* Length of the CSCD descriptor at d: 64 bytes for IPv6 (EAh) and IP copy service (EBh), 32 for
 * the others (SPC-4 §6.4.5). */
static unsigned cscd_len(const uint8_t *d)
{
    return d[0] == 0xea || d[0] == 0xeb ? 64 : XCOPY_CSCD_LEN;
}

/* Validates the whole list into op. Sizes first, then counts, then each descriptor, so the
 * errors come in the order libiscsi's ExtendedCopy tests expect: an over-long descriptor list is
 * a PARAMETER LIST LENGTH ERROR even when it also holds too many descriptors. */
static scsi_sr parse_list(struct scsi_task *t, const uint8_t *p, uint32_t len, struct xcopy_op *op)
{
    if (len < XCOPY_HDR_LEN)
        return SR_PARAM_LIST_LENGTH;
    if (p[1] & 0xc0)
        return SR_PARAM_FIELD(1, 31 - __builtin_clz(p[1] & 0xc0));
    for (unsigned i = 4; i < 8; i++)
        if (p[i])
            return SR_PARAM_FIELD(i, -1);
    unsigned usage = (p[1] >> 3) & 3;
    if (usage == 1)
        return SR_PARAM_FIELD(1, 4);
    op->list_id = p[0];
    op->held = usage != 3; /* 11b: the copy is not to be tracked (SNLID=1) */
    uint32_t clen = get_be16(p + 2), slen = get_be32(p + 8), ilen = get_be32(p + 12);
    if ((uint64_t)clen + slen > XCOPY_MAX_LIST)
        return SR_PARAM_LIST_LENGTH;
    if (ilen > XCOPY_MAX_INLINE)
        return SR_AT(SR_INLINE_DATA_EXCEEDED, 12);
    if (XCOPY_HDR_LEN + clen + slen > len)
        return SR_PARAM_LIST_LENGTH;

    const uint8_t *cs = p + XCOPY_HDR_LEN, *ss = cs + clen;
    unsigned ncscd = 0, nsegs = 0;
    for (uint32_t o = 0; o < clen; o += cscd_len(cs + o), ncscd++)
        if (o + cscd_len(cs + o) > clen)
            return SR_PARAM_FIELD(2, -1); /* the list length cuts a descriptor */
    if (ncscd > XCOPY_MAX_CSCD)
        return SR_AT(SR_TOO_MANY_CSCD, XCOPY_HDR_LEN + XCOPY_MAX_CSCD * XCOPY_CSCD_LEN);
    for (uint32_t o = 0; o < slen; o += 4u + get_be16(ss + o + 2), nsegs++)
        if (o + 4 > slen || o + 4u + get_be16(ss + o + 2) > slen)
            return SR_PARAM_FIELD(8, -1);
    if (nsegs > XCOPY_MAX_SEGS)
        return SR_AT(SR_TOO_MANY_SEGMENTS, XCOPY_HDR_LEN + clen);

    struct scsi_lun *cscd[XCOPY_MAX_CSCD];
    unsigned i = 0;
    for (uint32_t o = 0; o < clen; o += cscd_len(cs + o), i++) {
        scsi_sr sr = parse_cscd(t, cs + o, XCOPY_HDR_LEN + o, &cscd[i]);
        if (sr)
            return sr;
        if (cscd[i]) {
            scsi_lun_user_get(cscd[i]);
            op->users[op->nusers++] = cscd[i];
        }
    }
    i = 0;
    for (uint32_t o = 0; o < slen; o += 4u + get_be16(ss + o + 2), i++) {
        unsigned off = XCOPY_HDR_LEN + clen + o;
        if (ss[o] != 0x02)
            return SR_AT(SR_UNSUPPORTED_SEG_TYPE, off);
        scsi_sr sr = parse_b2b(t, ss + o, off, cscd, ncscd, &op->segs[i]);
        if (sr)
            return sr;
    }
    op->nsegs = nsegs;
    return SR_OK;
}

/* --- results held per I_T nexus (caller holds target->lock) --- */

static struct scsi_nexus_impl *impl(struct scsi_nexus *n)
{
    return (struct scsi_nexus_impl *)n;
}

static struct xcopy_result *held_find(struct scsi_nexus_impl *n, uint64_t lun, uint8_t list_id)
{
    for (unsigned i = 0; i < XCOPY_HELD_MAX; i++) {
        struct xcopy_result *r = &n->xcopy[i];
        if (r->seq && r->lun == lun && r->list_id == list_id)
            return r;
    }
    return NULL;
}

static struct xcopy_result *held_by_seq(struct scsi_nexus_impl *n, uint64_t seq)
{
    for (unsigned i = 0; i < XCOPY_HELD_MAX; i++)
        if (n->xcopy[i].seq == seq)
            return &n->xcopy[i];
    return NULL;
}

/* SPC-4 §6.4.3.2: a LIST IDENTIFIER still in use by this nexus is OPERATION IN PROGRESS; a
 * finished one is replaced. With every slot busy the copy is refused as a transient shortage. */
static scsi_sr held_begin(struct scsi_task *t, struct xcopy_op *op)
{
    if (!op->held || !t->nexus)
        return SR_OK;
    struct scsi_nexus_impl *n = impl(t->nexus);
    scsi_sr sr = SR_OK;
    pthread_mutex_lock(&t->target->lock);
    struct xcopy_result *r = held_find(n, t->lun, op->list_id);
    if (r && r->status == XCOPY_IN_PROGRESS) {
        sr = SR_OPERATION_IN_PROGRESS;
        goto out;
    }
    for (unsigned i = 0; !r && i < XCOPY_HELD_MAX; i++)
        if (!n->xcopy[i].seq)
            r = &n->xcopy[i];
    if (!r) { /* every slot taken: reuse the oldest finished one */
        for (unsigned i = 0; i < XCOPY_HELD_MAX; i++) {
            struct xcopy_result *c = &n->xcopy[i];
            if (c->status != XCOPY_IN_PROGRESS && (!r || c->seq < r->seq))
                r = c;
        }
    }
    if (!r) {
        sr = SR_INSUFFICIENT_RESOURCES;
        goto out;
    }
    memset(r, 0, sizeof(*r));
    r->seq = op->seq = ++n->xcopy_seq;
    r->lun = t->lun;
    r->list_id = op->list_id;
    r->status = XCOPY_IN_PROGRESS;
out:
    pthread_mutex_unlock(&t->target->lock);
    return sr;
}

/* Publish progress; with done, the final status and, after an error, the task's sense. */
static void held_update(struct xcopy_op *op, bool done)
{
    struct scsi_task *t = op->t;
    if (!op->seq)
        return;
    pthread_mutex_lock(&t->target->lock);
    struct xcopy_result *r = held_by_seq(impl(t->nexus), op->seq);
    if (r) { /* gone if the nexus was lost meanwhile */
        r->segments = (uint16_t)op->cur;
        r->bytes = op->total;
        if (done) {
            bool ok = t->status == SCSI_STATUS_GOOD;
            r->status = ok ? XCOPY_DONE : XCOPY_DONE_ERRORS;
            r->sense_len = 0;
            if (!ok)
                r->sense_len = t->sense_len < sizeof(r->sense) ? t->sense_len : sizeof(r->sense);
            memcpy(r->sense, t->sense, r->sense_len);
        }
    }
    pthread_mutex_unlock(&t->target->lock);
}

static void xcopy_nexus_lost(struct scsi_nexus *n)
{
    pthread_mutex_lock(&n->target->lock);
    memset(impl(n)->xcopy, 0, sizeof(impl(n)->xcopy));
    pthread_mutex_unlock(&n->target->lock);
}

const struct scsi_lun_hooks xcopy_lun_hooks = {.name = "extended copy",
                                               .nexus_lost = xcopy_nexus_lost};

/* --- running the copy --- */

static void unlock_segment(struct xcopy_op *op)
{
    if (op->locked) {
        scsi_rl_release(&op->locked->rl, &op->lock);
        op->locked = NULL;
    }
}

static void finish(struct xcopy_op *op, scsi_sr sr)
{
    struct scsi_task *t = op->t;
    unlock_segment(op);
    scsi_task_set_reason(t, sr);
    held_update(op, true);
    users_put(op);
    free(op->bounce);
    free(op);
    t->done(t);
}

static void io_done(struct bs_io *io, int err);

/* Submit op->chunk bytes at off of lu, from or into buf. */
static void submit(struct xcopy_op *op, struct scsi_lun *lu, enum bs_op bop, uint64_t off,
                   void *buf)
{
    op->iov = (struct iovec){.iov_base = buf, .iov_len = op->chunk};
    op->io.op = bop;
    op->io.offset = off;
    op->io.length = op->chunk;
    op->io.iov = &op->iov;
    op->io.iovcnt = buf ? 1 : 0;
    op->io.fua = bop == BS_WRITE && !atomic_load_explicit(&lu->wce, memory_order_relaxed);
    op->io.done = io_done;
    op->io.arg = op;
    scsi_task_submit(op->t, lu->bs, &op->io);
}

/* Whether [off, off+len) of a LUN holds no data at all (never written or unmapped). A store
 * whose answer blocks on the cluster (rbd) is not asked on the reactor: the range is copied. */
static bool range_deallocated(struct scsi_lun *lu, uint64_t off, uint64_t len)
{
    bool mapped;
    uint64_t run = len;
    return lu->bs->thin && !lu->bs->lba_status_blocks &&
           bs_lba_status(lu->bs, off, &run, &mapped) == 0 && !mapped && run == len;
}

static void drive(struct xcopy_op *op);

static void drive_yielded(void *arg)
{
    drive(arg);
}

static void segment_granted(struct scsi_rl_req *q)
{
    drive(q->arg);
}

/* Issues the next I/O, or copies mapped memory directly, or finishes. Returns true once op is
 * finished (and freed). */
static bool step(struct xcopy_op *op)
{
    for (;;) {
        if (!op->err && scsi_task_aborted(op->t))
            op->err = -ECANCELED; /* not one more chunk (the task's done says TASK ABORTED) */
        if (op->err) {
            finish(op, op->err == -ENOSPC ? SR_SPACE_ALLOC_FAILED : SR_COPY_TARGET_FAILURE);
            return true;
        }
        if (op->cur == op->nsegs) {
            finish(op, SR_OK);
            return true;
        }
        struct xcopy_seg *s = &op->segs[op->cur];
        if (op->phase == XC_BOUNCED) {
            op->phase = XC_LAST;
            submit(op, s->dst, BS_WRITE, op->chunk_dst, op->bounce);
            return false;
        }
        uint64_t left = s->bytes - op->seg_done;
        if (!left) {
            unlock_segment(op);
            op->cur++;
            op->seg_done = 0;
            held_update(op, false);
            continue;
        }
        if (!op->locked) {
            op->locked = s->dst;
            /* a WRITE's mode (sbc.c submit_locked): on order_rw stores it waits for the
             * READs whose Data-In still point into the destination's pages */
            op->lock =
                (struct scsi_rl_req){.off = s->dst_off,
                                     .len = s->bytes,
                                     .mode = s->dst->bs->order_rw ? SCSI_RL_WRITE : SCSI_RL_SHARED,
                                     .granted = segment_granted,
                                     .arg = op};
            if (!scsi_rl_acquire(&s->dst->rl, &op->lock))
                return false; /* segment_granted drives on */
        }
        /* Checked again now, as each chunk starts: a reservation taken, a write protect set,
         * a medium ejected or a port put in standby since the list was parsed stops the copy
         * before it touches either LUN again (a chunk already in flight ends first, as a
         * WRITE in flight does). */
        scsi_sr sr = segment_access(op->t, s);
        if (sr) {
            finish(op, sr);
            return true;
        }
        op->chunk = left < XCOPY_CHUNK ? left : XCOPY_CHUNK;
        uint64_t pos = s->backward ? left - op->chunk : op->seg_done;
        op->chunk_src = s->src_off + pos;
        op->chunk_dst = s->dst_off + pos;
        /* Chunks of RAM LUNs, and of file LUNs served from the page cache on the reactor
         * (bs_file's inline READs and WRITEs), complete inside bs_submit: the reactor gets a
         * turn every few chunks whatever the stores, so a copy of gigabytes does not stall the
         * other connections of this thread (a chunk that went to io_uring gave the reactor its
         * turn already; one more yield costs nothing). A file chunk costs a system call and a
         * copy each way, about as long as XCOPY_MOVE_BUDGET chunks of RAM. */
        unsigned budget = s->src->mapped && s->dst->mapped ? XCOPY_MOVE_BUDGET : 1;
        if (op->moves++ >= budget) {
            op->moves = 0;
            struct reactor *r = reactor_self();
            if (r) {
                reactor_yield(r, &op->yield_msg, drive_yielded, op);
                return false;
            }
        }
        if (s->src->mapped && s->dst->mapped) {
            if (range_deallocated(s->src, op->chunk_src, op->chunk)) {
                /* nothing written there: the destination is deallocated too (it then reads
                 * as zeros, LBPRZ), rather than filled with zeros, so a copy of a thin LUN
                 * stays thin */
                op->phase = XC_LAST;
                submit(op, s->dst, BS_UNMAP, op->chunk_dst, NULL);
                return false;
            }
        }
        /* read a chunk, then write it (overlapping ranges of one LUN are right: the chunk
         * order, backward when the destination is above, sees to it) */
        if (!op->bounce && posix_memalign(&op->bounce, 4096, XCOPY_CHUNK)) {
            op->bounce = NULL;
            op->err = -ENOMEM;
            continue;
        }
        op->phase = XC_BOUNCE;
        submit(op, s->src, BS_READ, op->chunk_src, op->bounce);
        return false;
    }
}

/* Runs steps until an I/O is left in flight. A store may complete inside bs_submit; then the
 * completion only asks for another turn here, so a long copy never recurses. */
static void drive(struct xcopy_op *op)
{
    op->driving = true;
    do {
        op->again = false;
        if (step(op))
            return;
    } while (op->again);
    op->driving = false;
}

static void io_done(struct bs_io *io, int err)
{
    struct xcopy_op *op = io->arg;
    if (err) {
        op->err = err;
    } else if (op->phase == XC_BOUNCE) {
        op->phase = XC_BOUNCED;
    } else {
        op->phase = XC_IDLE;
        op->seg_done += op->chunk;
        op->total += op->chunk;
    }
    if (op->driving)
        op->again = true;
    else
        drive(op);
}

/* --- EXTENDED COPY (LID1) (SPC-4 §6.4) --- */

scsi_sr xcopy_parse(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    uint32_t len = get_be32(t->cdb + 10);
    /* longer than any list we accept: refused before the data is transferred */
    if (len > XCOPY_HDR_LEN + XCOPY_MAX_LIST + XCOPY_MAX_INLINE)
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = len;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

void xcopy_exec(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    if (!t->xfer_len) { /* §6.4.1: PARAMETER LIST LENGTH 0 is not an error */
        scsi_task_complete(t, SR_OK);
        return;
    }
    struct xcopy_op *op = calloc(1, sizeof(*op));
    if (!op) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    op->t = t;
    scsi_sr sr = parse_list(t, t->iov[0].iov_base, t->xfer_len, op);
    if (!sr)
        sr = held_begin(t, op);
    if (sr) {
        users_put(op);
        free(op);
        scsi_task_complete(t, sr);
        return;
    }
    drive(op);
}

/* --- RECEIVE COPY RESULTS (SPC-4 §6.18) --- */

scsi_sr xcopy_parse_rcr(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    uint32_t full = c->sa == RCR_COPY_STATUS      ? XCOPY_RCR_STATUS_LEN
                    : c->sa == RCR_FAILED_SEGMENT ? XCOPY_RCR_FSD_HDR + 18
                                                  : XCOPY_RCR_OPP_LEN;
    uint32_t alloc = get_be32(t->cdb + 10);
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* OPERATING PARAMETERS (§6.18.4): the limits parse_list enforces. */
static uint32_t rcr_operating_parameters(uint8_t *d)
{
    put_be32(d, XCOPY_RCR_OPP_LEN - 4);
    d[4] = 0x01; /* SNLID: LIST ID USAGE 11b is accepted */
    put_be16(d + 8, XCOPY_MAX_CSCD);
    put_be16(d + 10, XCOPY_MAX_SEGS);
    put_be32(d + 12, XCOPY_MAX_LIST);
    put_be32(d + 16, XCOPY_MAX_SEG_BYTES);
    put_be32(d + 20, XCOPY_MAX_INLINE);
    /* HELD DATA LIMIT, MAXIMUM STREAM DEVICE TRANSFER SIZE: 0, nothing is held or streamed */
    put_be16(d + 34, XCOPY_HELD_MAX); /* TOTAL CONCURRENT COPIES */
    d[36] = XCOPY_HELD_MAX;           /* MAXIMUM CONCURRENT COPIES */
    /* the three granularities stay 0 (log2: 1 byte) */
    d[43] = 2; /* IMPLEMENTED DESCRIPTOR LIST LENGTH */
    d[44] = 0x02;
    d[45] = 0xe4;
    return XCOPY_RCR_OPP_LEN;
}

/* Third-party Copy VPD page 8Fh (SPC-4 §7.8.17), the descriptors after its 4-byte header: how
 * an initiator that reads VPD pages rather than OPERATING PARAMETERS (ESXi, Windows) learns
 * the commands, descriptor types and limits parse_list enforces. No ROD token descriptors:
 * POPULATE TOKEN / WRITE USING TOKEN are not offered. Returns the bytes written at d. */
uint32_t xcopy_vpd_descriptors(uint8_t *d)
{
    uint8_t *p = d;
    /* Supported Commands (0001h, §7.8.17.4): EXTENDED COPY (LID1) and the RECEIVE COPY
     * RESULTS service actions of the opcode table; each descriptor padded to 4 bytes */
    static const uint8_t cmds[] = {
        0x83, 1, 0x00, 0x84, 3, RCR_COPY_STATUS, RCR_OPERATING_PARAMETERS, RCR_FAILED_SEGMENT};
    put_be16(p, 0x0001);
    put_be16(p + 2, (4 + 1 + sizeof(cmds) + 3) / 4 * 4 - 4);
    p[4] = sizeof(cmds);
    memcpy(p + 5, cmds, sizeof(cmds));
    p += 4 + get_be16(p + 2);
    /* Parameter Data (0004h, §7.8.17.5) */
    put_be16(p, 0x0004);
    put_be16(p + 2, 28);
    put_be16(p + 8, XCOPY_MAX_CSCD);
    put_be16(p + 10, XCOPY_MAX_SEGS);
    put_be32(p + 12, XCOPY_MAX_LIST);
    put_be32(p + 16, XCOPY_MAX_INLINE);
    p += 32;
    /* Supported Descriptors (0008h, §7.8.17.6): the block to block segment and the
     * identification CSCD descriptor, as OPERATING PARAMETERS lists them */
    put_be16(p, 0x0008);
    put_be16(p + 2, 4);
    p[4] = 2;
    p[5] = 0x02;
    p[6] = 0xe4;
    p += 8;
    /* General Copy Operations (8001h, §7.8.17.10): the same counts and segment bound as
     * OPERATING PARAMETERS; granularities 0 (log2: 1 byte) */
    put_be16(p, 0x8001);
    put_be16(p + 2, 32);
    put_be32(p + 4, XCOPY_HELD_MAX); /* TOTAL CONCURRENT COPIES */
    put_be32(p + 8, XCOPY_HELD_MAX); /* MAXIMUM IDENTIFIED CONCURRENT COPIES */
    put_be32(p + 12, XCOPY_MAX_SEG_BYTES);
    p += 36;
    return (uint32_t)(p - d);
}

void xcopy_exec_rcr(struct scsi_task *t, const struct scsi_cmd *c)
{
    uint8_t d[XCOPY_RCR_FSD_HDR + 18] = {0};
    if (c->sa == RCR_OPERATING_PARAMETERS) {
        scsi_task_put_data(t, d, rcr_operating_parameters(d));
        return;
    }
    /* COPY STATUS and FAILED SEGMENT DETAILS name a copy of this nexus by LIST IDENTIFIER */
    struct xcopy_result r = {0};
    bool found = false;
    if (t->nexus) {
        pthread_mutex_lock(&t->target->lock);
        struct xcopy_result *h = held_find(impl(t->nexus), t->lun, t->cdb[2]);
        if (h && (c->sa == RCR_COPY_STATUS || h->status != XCOPY_IN_PROGRESS)) {
            found = true;
            r = *h;
            /* §6.18.3/§6.18.5 (as FreeBSD CTL): a finished copy's result goes once reported;
             * failed segment details stay until they fit the allocation length */
            if (r.status != XCOPY_IN_PROGRESS &&
                (c->sa == RCR_COPY_STATUS ||
                 t->xfer_len >= XCOPY_RCR_FSD_HDR + (uint32_t)r.sense_len))
                memset(h, 0, sizeof(*h));
        }
        pthread_mutex_unlock(&t->target->lock);
    }
    if (!found) { /* no such copy, or still running (failed segment details) */
        scsi_task_complete(t, SR_CDB_FIELD(2, -1));
        return;
    }
    if (c->sa == RCR_COPY_STATUS) {
        put_be32(d, XCOPY_RCR_STATUS_LEN - 4);
        d[4] = r.status; /* HDD 0: no held data */
        put_be16(d + 5, r.segments);
        if (r.bytes <= UINT32_MAX) {
            d[7] = 0x00; /* TRANSFER COUNT UNITS: bytes */
            put_be32(d + 8, (uint32_t)r.bytes);
        } else {
            d[7] = 0x01; /* kibibytes */
            put_be32(d + 8, (uint32_t)(r.bytes >> 10));
        }
        scsi_task_put_data(t, d, XCOPY_RCR_STATUS_LEN);
        return;
    }
    if (r.status != XCOPY_DONE_ERRORS) { /* AVAILABLE DATA 0: nothing failed */
        scsi_task_put_data(t, d, 4);
        return;
    }
    put_be32(d, XCOPY_RCR_FSD_HDR - 4 + r.sense_len);
    d[56] = SCSI_STATUS_CHECK_CONDITION; /* COPY COMMAND STATUS */
    put_be16(d + 58, r.sense_len);
    memcpy(d + 60, r.sense, r.sense_len);
    scsi_task_put_data(t, d, XCOPY_RCR_FSD_HDR + r.sense_len);
}
