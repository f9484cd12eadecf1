/* libFuzzer harness for the SCSI core (src/scsi): every CDB the target accepts with its data-out
 * (the parameter lists of PERSISTENT RESERVE OUT, UNMAP, EXTENDED COPY, WRITE SAME, MODE SELECT,
 * COMPARE AND WRITE, SANITIZE, ...), several commands per input from three I_T nexuses so that
 * reservations, unit attentions, sense and LUN state carry from one to the next, with aborts,
 * resets and nexus events in between.
 *
 * Each input gets a fresh target: LUN 0 (a 1 MiB RAM store), LUN 1 (256 KiB, RAM or null), and
 * no LUN 7, run on one reactor on the fuzzer's thread as a transport runs them
 * (scsi_task_setup, data-out into t->iov, scsi_task_exec, done), until every command has
 * answered and no background work (an IMMED sanitize, a copy) holds a LUN, then torn down.
 *
 * Input: byte 0 = configuration (bit 0: LUN 0 has 4096-byte blocks; bit 1: LUN 0 removable;
 * bit 2: APTPL allowed, its state file in a scratch directory, removed before each input; bit 3:
 * LUN 1 on the null store; bit 4: host LUN maps, so each nexus addresses the LUNs by its own
 * numbers, one read-only, and the third sees none), then records, each starting with a byte k:
 *   k & 7 = 0..3: a command: 16 CDB bytes, EDTL (2 bytes, big endian), 1 byte with the R (bit 0)
 *                 and W (bit 1) flags; with W, EDTL bytes of data-out follow (as many as the
 *                 input has, zeros after). k bit 3: the next record starts without waiting for
 *                 this command to answer (commands overlap).
 *           = 4: abort the oldest command that has not answered;
 *           = 5: LOGICAL UNIT RESET of the record's LUN;  6: I_T nexus loss unit attention and
 *                "commands cleared by a protocol event" on the record's nexus;
 *           = 7: target reset (k bit 3: cold).
 *   k bits 4-5: the nexus (0, 1, 2; 3 = 0); bits 6-7: the LUN (0, 1: LUN 0; 2: LUN 1; 3: LUN 7).
 *
 * Checked beyond "no crash": done() runs exactly once per command that got to exec (never for
 * a setup refusal), the status is one SAM-5 defines, CHECK CONDITION carries well-formed sense
 * (fixed or descriptor format, its additional length matching its length), a read sends no
 * more than the buffers setup gave it nor more than the CDB asked for, and no command hangs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bs/bs.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/log.h"
#include "iscsi/scsi_port.h"

#define MAX_RECORDS 48
#define HANG_MS 20000

struct cmd {
    struct scsi_task t;
    int done_calls;
    bool execd, answered, refused, released;
};

struct run {
    const uint8_t *p, *end;
    unsigned cfg;
    struct scsi_target tg;
    struct scsi_nexus *nx[3];
    struct cmd *cmds[MAX_RECORDS];
    unsigned ncmds, records;
    unsigned inflight; /* commands and resets not answered */
    bool all_started;
    uint64_t t0;
    struct reactor_msg step_msg, tick_msg;
    bool step_queued;
};

static struct {
    struct reactor *r;
    char dir[256];
    char pr_path[300];
    struct run *ru; /* the input being run */
} G;

static void setup_once(void)
{
    if (G.r)
        return;
    log_set_level(getenv("FUZZ_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    const char *tmp = getenv("TMPDIR"); /* run.sh: a directory in the build dir */
    snprintf(G.dir, sizeof(G.dir), "%s/fuzz_scsi.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(G.dir))
        abort();
    snprintf(G.pr_path, sizeof(G.pr_path), "%s/pr-lun0", G.dir);
    G.r = reactor_create(0);
    if (!G.r)
        abort();
}

static void step(void *arg);

static void kick(struct run *ru)
{
    if (!ru->step_queued) {
        ru->step_queued = true;
        reactor_yield(G.r, &ru->step_msg, step, ru);
    }
}

static void check_done(const struct cmd *c)
{
    const struct scsi_task *t = &c->t;
    switch (t->status) {
    case SCSI_STATUS_GOOD:
    case SCSI_STATUS_CHECK_CONDITION:
    case SCSI_STATUS_CONDITION_MET:
    case SCSI_STATUS_BUSY:
    case SCSI_STATUS_RESERVATION_CONFLICT:
    case SCSI_STATUS_TASK_SET_FULL:
    case SCSI_STATUS_ACA_ACTIVE:
    case SCSI_STATUS_TASK_ABORTED:
        break;
    default:
        fprintf(stderr, "fuzz_scsi: status %#x\n", t->status);
        abort();
    }
    if (t->status == SCSI_STATUS_CHECK_CONDITION) {
        unsigned rc = t->sense[0] & 0x7f;
        bool fixed = rc == 0x70 || rc == 0x71, desc = rc == 0x72 || rc == 0x73;
        if (t->sense_len < 8 || t->sense_len > SCSI_SENSE_MAX || (!fixed && !desc) ||
            (fixed && t->sense_len < 18) || t->sense[7] + 8u != t->sense_len) {
            fprintf(stderr,
                    "fuzz_scsi: op %#x: bad sense: %u bytes, response code %#x, additional "
                    "length %u\n",
                    t->cdb[0], t->sense_len, t->sense[0], t->sense[7]);
            abort();
        }
    }
    if (t->dir == SCSI_DIR_READ && t->status != SCSI_STATUS_TASK_ABORTED) {
        size_t room = 0;
        for (int i = 0; i < t->iovcnt; i++)
            room += t->iov[i].iov_len;
        if (t->data_len > t->xfer_len || t->data_len > room) {
            fprintf(stderr, "fuzz_scsi: op %#x: %u bytes of data-in, %u asked for, %zu of room\n",
                    t->cdb[0], t->data_len, t->xfer_len, room);
            abort();
        }
    }
}

static void on_done(struct scsi_task *t)
{
    struct cmd *c = t->transport_priv;
    struct run *ru = G.ru;
    c->done_calls++;
    if (c->done_calls > 1 || !c->execd) {
        fprintf(stderr, "fuzz_scsi: op %#x: done() %s\n", t->cdb[0],
                c->execd ? "called twice" : "called before exec");
        abort();
    }
    c->answered = true;
    check_done(c);
    ru->inflight--;
    kick(ru);
}

static void reset_done(void *arg)
{
    struct run *ru = arg;
    ru->inflight--;
    kick(ru);
}

static struct scsi_lun *lun_of(struct run *ru, unsigned sel)
{
    return scsi_target_lun(&ru->tg, sel == 2 ? 1 : sel == 3 ? 7 : 0);
}

static const uint8_t *take(struct run *ru, size_t n, uint8_t *buf)
{
    size_t have = (size_t)(ru->end - ru->p);
    size_t k = have < n ? have : n;
    memset(buf, 0, n);
    memcpy(buf, ru->p, k);
    ru->p += k;
    return buf;
}

/* Starts one command; false when it must be waited for before the next record. */
static bool start_cmd(struct run *ru, uint8_t k)
{
    uint8_t hdr[SCSI_CDB_MAX + 3];
    take(ru, sizeof(hdr), hdr);
    struct cmd *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    ru->cmds[ru->ncmds++] = c;
    struct scsi_task *t = &c->t;
    scsi_task_init(t);
    memcpy(t->cdb, hdr, SCSI_CDB_MAX);
    unsigned sel = k >> 6;
    t->lun = sel == 2 ? 1 : sel == 3 ? 7 : 0;
    t->target = &ru->tg;
    t->nexus = ru->nx[((k >> 4) & 3) % 3];
    t->edtl = (uint32_t)hdr[SCSI_CDB_MAX] << 8 | hdr[SCSI_CDB_MAX + 1];
    t->edtl_read = hdr[SCSI_CDB_MAX + 2] & 1;
    t->edtl_write = hdr[SCSI_CDB_MAX + 2] & 2;
    t->done = on_done;
    t->transport_priv = c;
    size_t out_len = t->edtl_write ? t->edtl : 0;
    const uint8_t *out = ru->p;
    size_t have = (size_t)(ru->end - ru->p);
    if (out_len > have)
        out_len = have;
    ru->p += out_len;
    if (scsi_task_setup(t) < 0) {
        c->refused = true;
        if (t->status != SCSI_STATUS_CHECK_CONDITION && t->status != SCSI_STATUS_BUSY &&
            t->status != SCSI_STATUS_RESERVATION_CONFLICT &&
            t->status != SCSI_STATUS_TASK_SET_FULL) {
            fprintf(stderr, "fuzz_scsi: op %#x refused with status %#x\n", t->cdb[0], t->status);
            abort();
        }
        check_done(c);
        return true;
    }
    if (t->dir == SCSI_DIR_WRITE) {
        /* as the transport places data-out: what arrived, the rest of the buffer zeroed */
        size_t off = 0;
        for (int i = 0; i < t->iovcnt; i++) {
            size_t n = t->iov[i].iov_len;
            size_t from_input = off < out_len ? (out_len - off < n ? out_len - off : n) : 0;
            memcpy(t->iov[i].iov_base, out + off, from_input);
            memset((uint8_t *)t->iov[i].iov_base + from_input, 0, n - from_input);
            off += n;
        }
    }
    c->execd = true;
    ru->inflight++;
    scsi_task_exec(t);
    return (k & 8) != 0;
}

static void step(void *arg)
{
    struct run *ru = arg;
    ru->step_queued = false;
    while (!ru->all_started) {
        if (ru->p >= ru->end || ru->records == MAX_RECORDS) {
            ru->all_started = true;
            break;
        }
        uint8_t k = *ru->p++;
        ru->records++;
        unsigned kind = k & 7;
        struct scsi_nexus *n = ru->nx[((k >> 4) & 3) % 3];
        bool go_on = true;
        if (kind <= 3) {
            go_on = start_cmd(ru, k);
        } else if (kind == 4) {
            for (unsigned i = 0; i < ru->ncmds; i++) {
                if (ru->cmds[i]->execd && !ru->cmds[i]->answered) {
                    scsi_task_abort(&ru->cmds[i]->t);
                    break;
                }
            }
        } else if (kind == 5) {
            struct scsi_lun *lu = lun_of(ru, k >> 6);
            if (lu) {
                ru->inflight++;
                if (!scsi_lun_reset_wait(lu, n, reset_done, ru))
                    ru->inflight--;
            }
        } else if (kind == 6) {
            scsi_nexus_loss_ua(n);
            scsi_nexus_tasks_terminated(n, 0);
        } else {
            ru->inflight++;
            if (!scsi_target_reset_wait(&ru->tg, n, (k & 8) != 0, reset_done, ru))
                ru->inflight--;
        }
        if (!go_on && ru->inflight)
            break;
    }
}

/* Answered commands are released (as the transport does once their response is out): a task
 * holds its LUN until then, and a READ sent in place its pages, which a WRITE over them waits
 * for; so on every tick, not only once nothing is in flight. */
static void release_answered(struct run *ru)
{
    for (unsigned i = 0; i < ru->ncmds; i++) {
        struct cmd *c = ru->cmds[i];
        if (!c->released && (c->answered || c->refused)) {
            scsi_task_release(&c->t);
            c->released = true;
        }
    }
}

/* What still holds a LUN once every command is released is background work. */
static bool background_idle(struct run *ru)
{
    release_answered(ru);
    for (unsigned l = 0; l < 2; l++) {
        struct scsi_lun *lu = scsi_target_lun(&ru->tg, l);
        if (lu && scsi_lun_users(lu) > 0)
            return false;
    }
    return true;
}

static void tick(void *arg)
{
    struct run *ru = arg;
    release_answered(ru);
    if (ru->all_started && ru->inflight == 0 && !ru->step_queued && background_idle(ru)) {
        reactor_stop(G.r);
        return;
    }
    if (reactor_now_ms() - ru->t0 > HANG_MS) {
        fprintf(stderr, "fuzz_scsi: %u commands or resets still unanswered after %u ms\n",
                ru->inflight, HANG_MS);
        abort();
    }
    reactor_yield(G.r, &ru->tick_msg, tick, ru);
}

static void start(void *arg)
{
    struct run *ru = arg;
    step(ru);
    tick(ru);
}

static struct bs *open_store(const char *spec)
{
    char err[256];
    struct bs *bs = bs_open_spec(spec, err, sizeof(err));
    if (!bs) {
        fprintf(stderr, "fuzz_scsi: %s: %s\n", spec, err);
        abort();
    }
    return bs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_once();
    if (size < 1 || size > 256 * 1024)
        return 0;
    struct run *ru = calloc(1, sizeof(*ru));
    if (!ru)
        abort();
    ru->cfg = data[0];
    ru->p = data + 1;
    ru->end = data + size;
    ru->t0 = reactor_now_ms();
    G.ru = ru;
    char err[256];
    if (scsi_target_init(&ru->tg, "iqn.2026-11.org.linerate:fuzz-scsi", 1) < 0)
        abort();
    unlink(G.pr_path);
    struct scsi_lun_config l0 = {.lun = 0,
                                 .bs = open_store("ram:1M"),
                                 .block_size = ru->cfg & 1 ? 4096 : 512,
                                 .removable = ru->cfg & 2,
                                 .pr_state_path = ru->cfg & 4 ? G.pr_path : NULL};
    struct scsi_lun_config l1 = {
        .lun = 1, .bs = open_store(ru->cfg & 8 ? "null:256k" : "ram:256k"), .block_size = 512};
    if (scsi_target_add_lun(&ru->tg, &l0, err, sizeof(err)) < 0 ||
        scsi_target_add_lun(&ru->tg, &l1, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_scsi: scsi_target_add_lun: %s\n", err);
        abort();
    }
    /* Host LUN maps (issue 29): fuzz-init0 sees LUN 1 as 0, read-only, and LUN 0 as 1;
     * fuzz-init1 sees LUN 0 as 7; fuzz-init2 has no entry and sees nothing. */
    if (ru->cfg & 16 && (scsi_target_host_add(&ru->tg, "iqn.2026-11.org.linerate:fuzz-init0", err,
                                              sizeof(err)) < 0 ||
                         scsi_target_host_add(&ru->tg, "iqn.2026-11.org.linerate:fuzz-init1", err,
                                              sizeof(err)) < 0 ||
                         scsi_target_host_map(&ru->tg, "iqn.2026-11.org.linerate:fuzz-init0", 0, 1,
                                              true, err, sizeof(err)) < 0 ||
                         scsi_target_host_map(&ru->tg, "iqn.2026-11.org.linerate:fuzz-init0", 1, 0,
                                              false, err, sizeof(err)) < 0 ||
                         scsi_target_host_map(&ru->tg, "iqn.2026-11.org.linerate:fuzz-init1", 7, 0,
                                              false, err, sizeof(err)) < 0)) {
        fprintf(stderr, "fuzz_scsi: host maps: %s\n", err);
        abort();
    }
    for (uint8_t i = 0; i < 3; i++) {
        char name[64];
        const uint8_t isid[6] = {0x80, 0, 0, 0, 0, (uint8_t)(i + 1)};
        snprintf(name, sizeof(name), "iqn.2026-11.org.linerate:fuzz-init%u", i);
        ru->nx[i] = scsi_nexus_get(&ru->tg, &iscsi_scsi_transport, name, isid);
        if (!ru->nx[i])
            abort();
    }
    struct reactor_msg m = {0};
    reactor_post(G.r, &m, start, ru);
    reactor_run(G.r);
    for (unsigned i = 0; i < ru->ncmds; i++) {
        struct cmd *c = ru->cmds[i];
        if (c->execd && c->done_calls != 1) {
            fprintf(stderr, "fuzz_scsi: op %#x: done() called %d times\n", c->t.cdb[0],
                    c->done_calls);
            abort();
        }
        if (!c->released)
            scsi_task_release(&c->t);
        free(c);
    }
    for (unsigned i = 0; i < 3; i++)
        scsi_nexus_put(ru->nx[i]);
    scsi_target_destroy(&ru->tg);
    free(ru);
    return 0;
}
