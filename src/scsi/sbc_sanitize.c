/* SANITIZE (SBC-4 §5.30, §4.11): OVERWRITE writes the initialization pattern over every block
 * of the LUN, OVERWRITE COUNT times (inverting it between passes if asked); BLOCK ERASE
 * releases every block of a thin LUN (reads return zeros, WABEREQ=01b) and zero-fills a
 * fully provisioned one; EXIT FAILURE MODE leaves the failure state a failed sanitize left.
 * CRYPTO ERASE has no row: nothing is encrypted, so it is refused as an unknown service
 * action. While a sanitize runs, setup answers other commands NOT READY, SANITIZE IN
 * PROGRESS (sbc_sanitize_gate); the work holds the whole LUN exclusively in the range lock,
 * so writes already in flight on a file store finish first. */
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#define SA_OVERWRITE 0x01
#define SA_BLOCK_ERASE 0x02
#define SA_EXIT_FAILURE 0x1f
#define SANITIZE_CHUNK SCSI_FILL_CHUNK

struct sanitize_ctx {
    struct sbc_seq seq;
    struct scsi_lun *lu;
    struct scsi_task *t; /* NULL once answered early (IMMED=1) */
    struct scsi_rl_req lock;
    bool invert;
    unsigned passes, pass;
    struct sbc_fill fill; /* one pass over the whole LUN */
};

scsi_sr sbc_parse_sanitize(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    scsi_sr sr = sbc_write_protect(t->lu);
    if (sr)
        return sr;
    uint32_t len = get_be16(t->cdb + 7);
    if (c->sa == SA_OVERWRITE) {
        /* a header and a pattern of 1 to block-size bytes (§5.30.2.2) */
        if (len < 5 || len > t->lu->block_size + 4)
            return SR_CDB_FIELD(7, -1);
        r->xfer_len = len;
        r->dir = SCSI_DIR_WRITE;
    } else if (len) { /* BLOCK ERASE and EXIT FAILURE MODE take no parameter list */
        return SR_CDB_FIELD(7, -1);
    }
    return SR_OK;
}

static bool sanitize_next(struct sbc_seq *s, struct bs_io *io)
{
    struct sanitize_ctx *z = container_of(s, struct sanitize_ctx, seq);
    if (z->t && scsi_task_aborted(z->t)) {
        /* SBC-4 §4.11: task management does not stop a sanitize operation. Its task ends now
         * (TASK ABORTED, so the TMF answers at once) and the operation goes on as with IMMED:
         * the LUN answers NOT READY, SANITIZE IN PROGRESS until it is done. */
        struct scsi_task *t = z->t;
        z->t = NULL;
        scsi_task_complete(t, SR_OK);
    }
    if (z->fill.off >= z->fill.end) {
        if (++z->pass >= z->passes)
            return false;
        z->fill.off = 0;
        if (z->invert) /* §5.30.2.2: the pattern is inverted between consecutive passes */
            for (size_t i = 0; i < z->fill.chunk_len; i++)
                z->fill.chunk[i] = (uint8_t)~z->fill.chunk[i];
    }
    return sbc_fill_next(&z->fill, io);
}

static void sanitize_done(struct sbc_seq *s, int err)
{
    struct sanitize_ctx *z = container_of(s, struct sanitize_ctx, seq);
    struct scsi_lun *lu = z->lu;
    struct scsi_task *t = z->t;
    scsi_rl_release(&lu->rl, &z->lock);
    atomic_store(&lu->sanitize, err ? SANITIZE_FAILED : SANITIZE_IDLE);
    free(z->fill.chunk);
    free(z);
    if (t)
        scsi_task_complete(t, err ? SR_SANITIZE_FAILED : SR_OK);
    scsi_lun_user_put(lu); /* taken when the run began: it may outlive its task (IMMED) */
}

static void sanitize_granted(struct scsi_rl_req *q)
{
    struct sanitize_ctx *z = q->arg;
    sbc_seq_run(&z->seq);
}

/* OVERWRITE's parameter list (§5.30.2.2): INVERT, TEST, OVERWRITE COUNT, INITIALIZATION
 * PATTERN LENGTH, pattern. */
static scsi_sr overwrite_params(const struct scsi_task *t, const uint8_t *p, unsigned *count,
                                bool *invert, uint32_t *plen)
{
    *invert = p[0] & 0x80;
    *count = p[0] & 0x1f;
    *plen = get_be16(p + 2);
    if ((p[0] >> 5) & 3) /* TEST: vendor-specific test modes are not offered */
        return SR_PARAM_FIELD(0, 6);
    if (!*count)
        return SR_PARAM_FIELD(0, 4);
    if (!*plen || *plen > t->lu->block_size || *plen + 4 > t->xfer_len)
        return SR_PARAM_FIELD(2, -1);
    return SR_OK;
}

void sbc_exec_sanitize(struct scsi_task *t, const struct scsi_cmd *c)
{
    struct scsi_lun *lu = t->lu;
    if (c->sa == SA_EXIT_FAILURE) {
        int failed = SANITIZE_FAILED;
        atomic_compare_exchange_strong(&lu->sanitize, &failed, SANITIZE_IDLE);
        scsi_task_complete(t, SR_OK);
        return;
    }
    unsigned count = 1;
    bool invert = false;
    uint32_t plen = 0;
    const uint8_t *p = t->iov[0].iov_base;
    if (c->sa == SA_OVERWRITE) {
        scsi_sr sr = overwrite_params(t, p, &count, &invert, &plen);
        if (sr) {
            scsi_task_complete(t, sr);
            return;
        }
    }
    struct sanitize_ctx *z = calloc(1, sizeof(*z));
    if (!z) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    z->lu = lu;
    z->t = t;
    z->fill.end = scsi_lun_size_bytes(lu);
    z->fill.fua = true; /* sanitized means on the medium, not in a cache */
    z->passes = count;
    z->invert = invert;
    z->fill.unmap = c->sa == SA_BLOCK_ERASE && sbc_thin(lu);
    if (!z->fill.unmap) {
        static const uint8_t zero[1];
        z->fill.chunk_len = z->fill.end < SANITIZE_CHUNK ? (size_t)z->fill.end : SANITIZE_CHUNK;
        z->fill.chunk = plen ? sbc_pattern_buffer(z->fill.chunk_len, lu->block_size, p + 4, plen)
                             : sbc_pattern_buffer(z->fill.chunk_len, lu->block_size, zero, 1);
        if (!z->fill.chunk) {
            free(z);
            scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
            return;
        }
    }
    int idle = SANITIZE_IDLE, failed = SANITIZE_FAILED;
    if (!atomic_compare_exchange_strong(&lu->sanitize, &idle, SANITIZE_RUNNING) &&
        !atomic_compare_exchange_strong(&lu->sanitize, &failed, SANITIZE_RUNNING)) {
        free(z->fill.chunk);
        free(z);
        scsi_task_complete(t, SR_SANITIZE_IN_PROGRESS); /* another one got there first */
        return;
    }
    /* The run holds the LUN like a task does, so a LUN removed at run time waits for it. */
    scsi_lun_user_get(lu);
    if (t->cdb[1] & 0x80) { /* IMMED: answer now, work on; the parameters are copied */
        z->t = NULL;
        scsi_task_complete(t, SR_OK);
    }
    z->seq.bs = lu->bs; /* seq.task NULL: an abort does not stop the operation (sanitize_next) */
    z->seq.rate = lu->sanitize_rate;
    z->seq.next = sanitize_next;
    z->seq.done = sanitize_done;
    z->lock = (struct scsi_rl_req){
        .off = 0, .len = z->fill.end, .mode = SCSI_RL_EXCL, .granted = sanitize_granted, .arg = z};
    if (scsi_rl_acquire(&lu->rl, &z->lock))
        sbc_seq_run(&z->seq);
}
