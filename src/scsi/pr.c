/* Reservations of a logical unit: SPC-4 persistent reservations (PERSISTENT RESERVE IN/OUT,
 * registrations keyed by I_T nexus: initiator port name and relative target port identifier,
 * the TPGT of the gateway the command came through; one initiator port through two gateways
 * is two nexuses, registered, holding and preempted each on its own), the APTPL state file that
 * carries them across restarts, SPC-2 RESERVE/RELEASE, and the conflict check scsi_task_setup makes
 * for every command while anything is reserved.
 *
 * This file runs the jobs that change the state (locally or through the cluster) and the LUN's
 * reservation life (pr_lun_hooks). The state and its helpers are in pr_state.c, its text (the
 * state file, the shared object, side effects) in pr_text.c, the conflict check and SPC-2
 * RESERVE/RELEASE in pr_check.c, the commands in pr_in.c and pr_out.c.
 *
 * Shared state (a store with obj_* ops: an RBD image that several gateways export). The state
 * then lives in the cluster, in one object next to the image ("<image>.linerate-pr", the text
 * format of the APTPL file plus "aptpl" and "spc2" lines), and each gateway keeps a mirror of
 * it in lu->pr that the conflict check reads, so a READ or WRITE costs nothing more than on a
 * RAM LUN. A change (PERSISTENT RESERVE OUT, RESERVE, RELEASE, the SPC-2 release on nexus loss
 * or reset) runs on the SCSI core's helper thread (offload.c), never on a reactor: read the
 * object and its version, apply the service action to that fresh copy, write it back only if
 * the version is still the one read (compare and swap in the OSD; on a race, start over), then
 * notify the object's watchers with the new state, its version and the side effects (unit
 * attentions, PREEMPT AND ABORT's victims) and wait until every gateway has acknowledged. Each
 * gateway's watch installs the state into its mirror (newer versions only) and raises the unit
 * attentions / aborts the tasks of its own nexuses before it acknowledges; only then does the
 * command complete. So once an initiator has been told its reservation is taken, every gateway
 * that answered the notify refuses conflicting commands. A gateway that does not answer within
 * PR_NOTIFY_TIMEOUT_MS (dead or cut off) is logged; its own watch breaks, and until it has
 * re-read the object it refuses every command that the reservation rules check (ABORTED
 * COMMAND / TIMEOUT ON LOGICAL UNIT, which initiators retry) rather than act on a stale copy.
 * PERSISTENT RESERVE IN re-reads the object first. The state outlives any one gateway: it belongs
 * to the image, as the registrations of a disk belong to the disk (PTPL_C is reported; APTPL is
 * recorded). The same watch carries resets ("event reset", pr_tell_reset): a LOGICAL UNIT
 * RESET or target reset through one gateway raises its unit attention on the nexuses of every
 * other gateway, which acknowledge only once they did (reset.c, scsi_lun_reset_elsewhere). */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scsi/pr.h"
#include "scsi/pr_text.h"
#include "util/log.h"

/* How long a change waits for every gateway to acknowledge it. */
#define PR_NOTIFY_TIMEOUT_MS 10000
/* How long a reset waits for the other gateways (the TMF response waits with it); a gateway
 * that does not answer is dead or cut off, and so are its nexuses. */
#define PR_RESET_NOTIFY_TIMEOUT_MS 5000
/* Compare-and-swap attempts before a change gives up (ABORTED COMMAND: the initiator retries). */
#define PR_CAS_TRIES 64

/* A PERSISTENT RESERVE OUT answers once the tasks its PREEMPT AND ABORT aborted are marked
 * (join) and have left the store (w): SPC-4 §5.13.11.2.5 with SAM-5 §7.1, no aborted command
 * may change the medium after the preemption's status. */
struct pr_aborts {
    struct scsi_join join; /* 1 for the answer itself, + 1 per nexus whose tasks are aborted */
    struct scsi_wait w;
    struct reactor *r; /* the task's */
    struct reactor_msg msg;
    struct scsi_task *t;
    scsi_sr sr;
};

struct pr_job {
    struct scsi_offload off;
    struct pr_aborts *aborts; /* a PR OUT command's, until its answer is handed to it */
    struct scsi_lun *lu;
    struct scsi_task *t; /* NULL: no command waits for this one */
    enum pr_kind kind;
    char port[PR_PORT_MAX]; /* the sender's initiator port */
    uint16_t tport;         /* and the relative target port it came through */
    scsi_sr sr;
    int err;     /* the cluster's answer, PRJ_RELOAD */
    unsigned ua; /* PRJ_RESET: the reset's UA_* bit */
    /* PRJ_RESET: called on the submitting reactor once the job is done (NULL: nobody waits) */
    void (*cb)(void *arg);
    /* the command's own step: PRJ_OUT its change, PRJ_IN its reply (pr_job_run) */
    pr_apply_fn apply;
    pr_build_fn build;
    void *cb_arg;
};

/* SPC-2 RESERVE: conflicts with any persistent registration or another holder nexus. */
static scsi_sr spc2_reserve(struct pr_state *ps, const char *me, uint16_t tport)
{
    if (ps->nregs || ps->type || (ps->spc2[0] && !spc2_holds(ps, me, tport)))
        return SR_RESERVATION_CONFLICT;
    snprintf(ps->spc2, sizeof(ps->spc2), "%s", me);
    ps->spc2_tport = tport;
    return SR_OK;
}

/* Releasing a reservation held by someone else, or none, is a successful no-op (SPC-2 §7.23). */
static scsi_sr spc2_release(struct pr_state *ps, const char *me, uint16_t tport)
{
    if (ps->nregs || ps->type)
        return SR_RESERVATION_CONFLICT;
    if (spc2_holds(ps, me, tport))
        ps->spc2[0] = '\0';
    return SR_OK;
}

/* The change a job makes, applied to ps (the mirror, or a fresh copy from the cluster), its
 * side effects written to fx. */
static scsi_sr job_apply(struct pr_job *j, struct pr_state *ps, FILE *fx)
{
    scsi_sr sr = SR_OK;
    switch (j->kind) {
    case PRJ_OUT:
        sr = j->apply(j->t, ps, fx);
        break;
    case PRJ_RESERVE:
        sr = spc2_reserve(ps, j->port, j->tport);
        break;
    case PRJ_RELEASE:
        sr = spc2_release(ps, j->port, j->tport);
        break;
    case PRJ_SPC2_DROP:
        if (!j->port[0] || spc2_holds(ps, j->port, j->tport))
            ps->spc2[0] = '\0';
        break;
    default:
        break;
    }
    /* APTPL ends with the last registration (SPC-4 §5.13.5); pr_state_persist sees to it for the
     * state file */
    if (ps->shared && ps->nregs == 0)
        ps->aptpl = false;
    return sr;
}

/* In memory (RAM and file LUNs): under the LUN lock, the APTPL file kept in step; the side
 * effects once the lock is dropped. A command's change that the file cannot be brought in step
 * with is undone and refused: it must not be reported done and then be gone after a power loss
 * (SPC-4 §5.13.5). Nothing in SPC-4 names this failure; the device server could not keep its
 * nonvolatile state, which is HARDWARE ERROR (SPC-4 §4.5.6), INTERNAL TARGET FAILURE. A change
 * no command asked for (the SPC-2 release on a reset or nexus loss) touches nothing saved. */
static scsi_sr job_local(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct pr_state *ps = lu->pr;
    char *fxt = NULL;
    size_t fxlen = 0;
    struct pr_state snap = {0};
    FILE *fx = open_memstream(&fxt, &fxlen);
    if (!fx)
        return SR_INSUFFICIENT_RESOURCES;
    pthread_mutex_lock(&lu->lock);
    if (ps->path && j->t && pr_state_snapshot(&snap, ps) < 0) {
        pthread_mutex_unlock(&lu->lock);
        fclose(fx);
        free(fxt);
        return SR_INSUFFICIENT_RESOURCES;
    }
    bool was_aptpl = ps->aptpl;
    uint32_t gen = ps->generation;
    uint8_t type = ps->type;
    scsi_sr sr = job_apply(j, ps, fx);
    bool undone = false;
    if ((ps->generation != gen || ps->type != type || ps->aptpl != was_aptpl) &&
        pr_state_persist(ps, was_aptpl) < 0 && j->t) {
        pr_state_restore(ps, &snap);
        /* the new file may be in place all the same (its directory could not be synced):
         * put the state the initiators keep being told of back, as far as it goes */
        pr_state_persist(ps, true);
        sr = SR_INTERNAL_FAILURE;
        undone = true; /* and its side effects with it */
    }
    pr_resv_update(lu);
    pthread_mutex_unlock(&lu->lock);
    free(snap.regs);
    if (fclose(fx) == 0 && !undone)
        pr_fx_apply(lu, fxt, j->aborts ? &j->aborts->join : NULL);
    free(fxt);
    return sr;
}

static scsi_sr cluster_sr(int err)
{
    if (err == -ETIMEDOUT)
        return SR_LU_TIMEOUT; /* ABORTED COMMAND: the initiator retries */
    if (err == -ESHUTDOWN)
        return SR_NOT_READY_MANUAL; /* blocklisted (bs_rbd.c) */
    return SR_INTERNAL_FAILURE;
}

/* Read the shared object into a fresh state (shared, PTPL capable). 0 or -errno. */
static int shared_read(struct scsi_lun *lu, struct pr_state *fresh, uint64_t *ver)
{
    struct bs *bs = lu->bs;
    char *buf = NULL;
    size_t len = 0;
    *fresh = (struct pr_state){.shared = true, .ptpl_c = true, .local = lu->pr->local};
    int ret = bs->ops->obj_read(bs, "pr", &buf, &len, ver);
    if (ret < 0)
        return ret;
    char err[PR_PORT_MAX + 64];
    ret =
        pr_state_parse(fresh, buf ? buf : "", false, "shared reservation state", err, sizeof(err));
    free(buf);
    if (ret < 0) {
        LOG_ERR("LUN %" PRIu64 " (%s): %s", lu->id, bs->desc, err);
        pr_state_clear(fresh);
        return -EBADMSG;
    }
    return 0;
}

/* On the helper thread: the compare-and-swap loop and the notify (see the top of the file). */
static void shared_commit(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct bs *bs = lu->bs;
    for (unsigned tries = 0; tries < PR_CAS_TRIES; tries++) {
        struct pr_state fresh;
        uint64_t ver;
        int ret = shared_read(lu, &fresh, &ver);
        if (ret < 0) {
            j->sr = cluster_sr(ret);
            return;
        }
        char *before = pr_state_format(&fresh), *fxt = NULL, *after = NULL, *note = NULL;
        size_t fxlen = 0, notelen = 0;
        FILE *fx = before ? open_memstream(&fxt, &fxlen) : NULL;
        if (fx) {
            j->sr = job_apply(j, &fresh, fx);
            if (fclose(fx) == 0)
                after = pr_state_format(&fresh);
        }
        uint64_t nv = ver;
        bool retry = false, ok = false;
        if (!after) {
            j->sr = SR_INSUFFICIENT_RESOURCES;
        } else if (strcmp(before, after) != 0) {
            ret = bs->ops->obj_write(bs, "pr", after, strlen(after), ver, &nv);
            if (ret == -ECANCELED)
                retry = true; /* another gateway changed it first: start over */
            else if (ret < 0)
                j->sr = cluster_sr(ret);
            else
                ok = true;
        } else {
            ok = true; /* nothing changed (a refusal, a no-op): nothing to write */
        }
        if (ok) {
            pthread_mutex_lock(&lu->lock);
            uint64_t token = lu->pr->token;
            pr_mirror_install(lu, &fresh, nv);
            pthread_mutex_unlock(&lu->lock);
            pr_fx_apply(lu, fxt, j->aborts ? &j->aborts->join : NULL);
            if (nv != ver) {
                /* the new state, its version, who sent it and the side effects: every
                 * gateway installs it and acts before it acknowledges */
                FILE *f = open_memstream(&note, &notelen);
                if (f) {
                    fprintf(f, "%sversion %" PRIu64 "\nfrom %" PRIx64 "\n%s", after, nv, token,
                            fxt);
                    if (fclose(f) != 0) {
                        free(note);
                        note = NULL;
                    }
                }
                ret = note ? bs->ops->obj_notify(bs, "pr", note, strlen(note), PR_NOTIFY_TIMEOUT_MS)
                           : -ENOMEM;
                if (ret < 0)
                    LOG_WARN("LUN %" PRIu64 " (%s): reservation change %" PRIu64
                             " committed, but not every gateway acknowledged it: %s",
                             lu->id, bs->desc, nv, strerror(-ret));
            }
        }
        pr_state_clear(&fresh);
        free(before);
        free(after);
        free(fxt);
        free(note);
        if (!retry)
            return;
    }
    LOG_WARN("LUN %" PRIu64 " (%s): reservation change lost %u races in a row: giving up", lu->id,
             bs->desc, PR_CAS_TRIES);
    j->sr = SR_LU_TIMEOUT;
}

static void pr_notified(void *arg, const void *buf, size_t len, int err);

/* On the helper thread: a reset through this gateway, told to every other gateway of the LU
 * on the object's watch ("event reset BITS", who sent it), which raise the unit attention
 * for their own nexuses before they acknowledge. Nothing is written: a reset changes no
 * reservation state but the SPC-2 one, which spc2_drop commits before (same thread, in
 * order). */
static void shared_tell_reset(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct bs *bs = lu->bs;
    char note[96];
    int n =
        snprintf(note, sizeof(note), "event reset %u\nfrom %" PRIx64 "\n", j->ua, lu->pr->token);
    int ret = bs->ops->obj_notify(bs, "pr", note, (size_t)n, PR_RESET_NOTIFY_TIMEOUT_MS);
    if (ret < 0)
        LOG_WARN("LUN %" PRIu64 " (%s): reset, but not every other gateway acknowledged it: "
                 "%s",
                 lu->id, bs->desc, strerror(-ret));
}

static void job_work(struct scsi_offload *o)
{
    struct pr_job *j = (struct pr_job *)o;
    struct scsi_lun *lu = j->lu;
    if (j->kind == PRJ_RESET) {
        shared_tell_reset(j);
        return;
    }
    if (j->kind == PRJ_IN || j->kind == PRJ_RELOAD) {
        int ret = 0;
        if (j->kind == PRJ_RELOAD) {
            pthread_mutex_lock(&lu->lock);
            lu->pr->reload_queued = false;
            pthread_mutex_unlock(&lu->lock);
            ret = lu->bs->ops->obj_watch(lu->bs, "pr", pr_notified, lu);
        }
        struct pr_state fresh;
        uint64_t ver = 0;
        if (ret == 0)
            ret = shared_read(lu, &fresh, &ver);
        if (ret == 0) {
            pthread_mutex_lock(&lu->lock);
            pr_mirror_install(lu, &fresh, ver);
            pthread_mutex_unlock(&lu->lock);
            pr_state_clear(&fresh);
        }
        j->err = ret;
        j->sr = ret < 0 ? cluster_sr(ret) : SR_OK;
        return;
    }
    shared_commit(j);
}

static void job_submit(struct pr_job *j);

static void aborts_answer(void *arg)
{
    struct pr_aborts *a = arg;
    scsi_task_complete(a->t, a->sr);
    free(a);
}

/* On the task's reactor, every abort marked: the wait for the store. A command aborted itself
 * meanwhile answers nothing, and waits for nothing. */
static void aborts_quiesce(void *arg)
{
    struct pr_aborts *a = arg;
    a->w.fn = aborts_answer;
    a->w.arg = a;
    if (scsi_task_commit(a->t) && scsi_lun_quiesce(a->t->lu, &a->w))
        return;
    aborts_answer(a);
}

static void aborts_marked(struct scsi_join *join)
{
    struct pr_aborts *a = (struct pr_aborts *)join;
    if (a->r)
        reactor_post(a->r, &a->msg, aborts_quiesce, a);
    else
        aborts_quiesce(a);
}

/* The answer sr to a PR OUT job's command, given once its aborts are done. */
static void job_answer(struct pr_job *j, scsi_sr sr)
{
    struct pr_aborts *a = j->aborts;
    j->aborts = NULL;
    a->sr = sr;
    a->r = reactor_self();
    scsi_join_done(&a->join);
}

static void job_done(struct scsi_offload *o)
{
    struct pr_job *j = (struct pr_job *)o;
    struct scsi_lun *lu = j->lu;
    struct pr_state *ps = lu->pr;
    if (j->kind == PRJ_RELOAD && j->err == -ESHUTDOWN) {
        /* fenced meanwhile: the store refuses everything; a stale mirror no longer matters */
        pthread_mutex_lock(&lu->lock);
        ps->stale = false;
        pr_resv_update(lu);
        pthread_mutex_unlock(&lu->lock);
    } else if (j->kind == PRJ_RELOAD && j->err < 0 && !ps->closing) {
        /* still cut off from the cluster: try again in a second (the mirror stays stale, so
         * the LUN refuses what the reservation rules check) */
        LOG_WARN("LUN %" PRIu64 " (%s): cannot re-read the reservation state: %s", lu->id,
                 lu->bs->desc, strerror(-j->err));
        sleep(1);
        scsi_offload_submit(&j->off);
        return;
    }
    if (j->t && j->kind == PRJ_IN && !j->sr) {
        uint32_t len = 0;
        pthread_mutex_lock(&lu->lock);
        uint8_t *d = j->build(j->t, &len);
        pthread_mutex_unlock(&lu->lock);
        if (d) {
            scsi_task_put_data(j->t, d, len);
            free(d);
        } else {
            scsi_task_complete(j->t, SR_INSUFFICIENT_RESOURCES);
        }
    } else if (j->aborts) {
        job_answer(j, j->sr);
    } else if (j->t) {
        scsi_task_complete(j->t, j->sr);
    }
    if (j->cb)
        j->cb(j->cb_arg);
    free(j);
    pthread_mutex_lock(&lu->lock);
    if (--ps->jobs == 0)
        pthread_cond_broadcast(&ps->idle);
    pthread_mutex_unlock(&lu->lock);
}

/* Run a job: on the helper thread for shared state, right here otherwise. */
static void job_submit(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    if (!lu->pr->shared) {
        scsi_sr sr = job_local(j);
        if (j->aborts)
            job_answer(j, sr);
        else if (j->t)
            scsi_task_complete(j->t, sr);
        free(j);
        return;
    }
    pthread_mutex_lock(&lu->lock);
    lu->pr->jobs++;
    pthread_mutex_unlock(&lu->lock);
    j->off.work = job_work;
    j->off.done = job_done;
    j->off.detached = !j->t && !j->cb; /* nobody to answer: never block the caller */
    scsi_offload_submit(&j->off);
}

/* A job for the nexus (port, this gateway's target port). */
static struct pr_job *job_new(struct scsi_lun *lu, struct scsi_task *t, enum pr_kind kind,
                              const char *port)
{
    struct pr_job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    if (t && kind == PRJ_OUT) {
        j->aborts = calloc(1, sizeof(*j->aborts));
        if (!j->aborts) {
            free(j);
            return NULL;
        }
        atomic_init(&j->aborts->join.n, 1);
        j->aborts->join.fn = aborts_marked;
        j->aborts->t = t;
    }
    j->lu = lu;
    j->t = t;
    j->kind = kind;
    snprintf(j->port, sizeof(j->port), "%s", port);
    j->tport = rel_port(lu->target);
    return j;
}

void pr_job_run(struct scsi_task *t, enum pr_kind kind, pr_apply_fn apply, pr_build_fn build)
{
    struct pr_job *j = job_new(t->lu, t, kind, nexus_port(t));
    if (!j) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    j->apply = apply;
    j->build = build;
    job_submit(j);
}

/* The watch (a store thread): a notify carries a newer state and the side effects for this
 * gateway's nexuses; a broken watch (buf NULL) makes the mirror stale until re-read. */
static void pr_notified(void *arg, const void *buf, size_t len, int err)
{
    struct scsi_lun *lu = arg;
    struct pr_state *ps = lu->pr;
    if (!buf && err == -ESHUTDOWN)
        return; /* fenced: the store refuses every command from now on (bs_rbd.c) */
    if (!buf) {
        pthread_mutex_lock(&lu->lock);
        /* one re-read queued at a time (one that already started re-arms a watch that may be
         * this broken one: another follows it), none once pr_lun_drain has started */
        bool skip = ps->reload_queued || ps->closing;
        ps->reload_queued = !ps->closing;
        ps->stale = true;
        pr_resv_update(lu);
        pthread_mutex_unlock(&lu->lock);
        struct pr_job *j = skip ? NULL : job_new(lu, NULL, PRJ_RELOAD, "");
        if (j)
            job_submit(j);
        return;
    }
    char *text = malloc(len + 1);
    if (!text)
        return;
    memcpy(text, buf, len);
    text[len] = '\0';
    uint64_t ver = 0, from = 0;
    const char *v = strstr(text, "\nversion ");
    const char *f = strstr(text, "\nfrom ");
    if (v)
        sscanf(v + 1, "version %" SCNu64, &ver);
    if (f)
        sscanf(f + 1, "from %" SCNx64, &from);
    unsigned ua = 0;
    if (sscanf(text, "event reset %u", &ua) == 1) {
        if (from != ps->token) /* the sender reset its own nexuses */
            scsi_lun_reset_elsewhere(lu, ua & UA_RESETS);
        free(text);
        return;
    }
    struct pr_state fresh = {.shared = true, .ptpl_c = true, .local = ps->local};
    char why[PR_PORT_MAX + 64] = "no version";
    if (ver && pr_state_parse(&fresh, text, true, "reservation notify", why, sizeof(why)) == 0) {
        pthread_mutex_lock(&lu->lock);
        pr_mirror_install(lu, &fresh, ver);
        pthread_mutex_unlock(&lu->lock);
        if (from != ps->token) { /* the sender carried out its own */
            /* its PREEMPT AND ABORT answers once this gateway acknowledges: the aborted
             * commands gone from the store first (SAM-5 §7.1) */
            struct scsi_sync_wait *sw = strstr(text, "\nabort ") ? scsi_sync_wait_new(lu) : NULL;
            pr_fx_apply(lu, text, scsi_sync_wait_join(sw));
            if (sw && !scsi_sync_wait_finish(sw, SCSI_ELSEWHERE_WAIT_MS))
                LOG_WARN("LUN %" PRIu64 " (%s): PREEMPT AND ABORT through another gateway: "
                         "aborted commands still in the store after %u ms; acknowledging anyway",
                         lu->id, lu->bs->desc, SCSI_ELSEWHERE_WAIT_MS);
        }
    } else {
        LOG_WARN("LUN %" PRIu64 " (%s): ignoring a malformed reservation notify: %s", lu->id,
                 lu->bs->desc, why);
    }
    pr_state_clear(&fresh);
    free(text);
}

/* Shared state: the object is created if missing, read into the mirror, and watched. Runs
 * where the store was opened (before the reactors, or on the control thread). */
static int shared_init(struct scsi_lun *lu, char *err, size_t errlen)
{
    struct bs *bs = lu->bs;
    struct pr_state *ps = lu->pr;
    struct pr_state fresh;
    uint64_t ver = 0;
    int ret = shared_read(lu, &fresh, &ver);
    if (ret == 0 && ver == 0) {
        char *text = pr_state_format(&fresh);
        uint64_t nv;
        ret = text ? bs->ops->obj_write(bs, "pr", text, strlen(text), 0, &nv) : -ENOMEM;
        free(text);
        if (ret == -ECANCELED) /* another gateway created it meanwhile */
            ret = 0;
        if (ret == 0)
            ret = shared_read(lu, &fresh, &ver);
    }
    if (ret == 0)
        ret = bs->ops->obj_watch(bs, "pr", pr_notified, lu);
    if (ret < 0) {
        snprintf(err, errlen, "LUN %" PRIu64 " (%s): persistent reservation state: %s", lu->id,
                 bs->desc, strerror(-ret));
        pr_state_clear(&fresh);
        return -1;
    }
    ps->stale = true; /* so that pr_mirror_install takes version `ver` even if it is ps->version */
    pr_mirror_install(lu, &fresh, ver);
    pr_state_clear(&fresh);
    if (ps->nregs || ps->spc2[0])
        LOG_INFO("LUN %" PRIu64 ": %u persistent reservation key(s)%s%s from the cluster "
                 "(%s)",
                 lu->id, ps->nregs, ps->type ? " and a reservation" : "",
                 ps->spc2[0] ? ", an SPC-2 reservation" : "", bs->desc);
    return 0;
}

static void pr_lun_free(struct scsi_lun *lu);

static int pr_lun_init(struct scsi_lun *lu, const char *state_path, char *err, size_t errlen)
{
    struct pr_state *ps = calloc(1, sizeof(*ps));
    if (!ps || (state_path && !(ps->path = strdup(state_path)))) {
        free(ps);
        snprintf(err, errlen, "LUN %" PRIu64 ": out of memory", lu->id);
        return -1;
    }
    lu->pr = ps;
    ps->local = rel_port(lu->target);
    pthread_cond_init(&ps->idle, NULL);
    atomic_init(&lu->resv, 0);
    const struct bs_ops *o = lu->bs->ops;
    ps->shared = o->obj_read && o->obj_write && o->obj_notify && o->obj_watch;
    if (ps->shared) {
        if (ps->path) {
            LOG_INFO("LUN %" PRIu64 " (%s): reservations live in the cluster; no state file",
                     lu->id, lu->bs->desc);
            free(ps->path);
            ps->path = NULL;
        }
        ps->ptpl_c = true;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ps->token = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)lu;
        if (shared_init(lu, err, errlen) < 0) {
            pr_lun_free(lu);
            return -1;
        }
        return 0;
    }
    ps->ptpl_c = ps->path != NULL;
    if (ps->path && pr_state_load(ps, err, errlen) < 0) {
        pr_lun_free(lu);
        return -1;
    }
    if (ps->nregs)
        LOG_INFO("LUN %" PRIu64 ": %u persistent reservation key(s)%s restored from %s", lu->id,
                 ps->nregs, ps->type ? " and a reservation" : "", ps->path);
    pr_resv_update(lu);
    return 0;
}

static void pr_lun_drain(struct scsi_lun *lu)
{
    struct pr_state *ps = lu->pr;
    if (!ps)
        return;
    pthread_mutex_lock(&lu->lock);
    ps->closing = true;
    while (ps->jobs)
        pthread_cond_wait(&ps->idle, &lu->lock);
    pthread_mutex_unlock(&lu->lock);
}

static void pr_lun_free(struct scsi_lun *lu)
{
    struct pr_state *ps = lu->pr;
    if (!ps)
        return;
    assert(ps->jobs == 0);
    pthread_cond_destroy(&ps->idle);
    free(ps->regs);
    free(ps->path);
    free(ps);
    lu->pr = NULL;
}

/* Nexus loss and resets end SPC-2 reservations: in the mirror at once (this gateway's next
 * command sees it), and in the shared object by a job no command waits for. A gateway that
 * dies holding one leaves it in the cluster until a LOGICAL UNIT RESET or target reset
 * through any gateway ends it. */
static void spc2_drop(struct scsi_lun *lu, const char *port)
{
    if (!(atomic_load_explicit(&lu->resv, memory_order_acquire) & RESV_SPC2))
        return;
    struct pr_state *ps = lu->pr;
    pthread_mutex_lock(&lu->lock);
    /* the nexus that is lost is (port, this gateway's target port) */
    bool had = ps->spc2[0] && (!port[0] || spc2_holds(ps, port, ps->local));
    if (had)
        ps->spc2[0] = '\0';
    pr_resv_update(lu);
    pthread_mutex_unlock(&lu->lock);
    if (had && ps->shared) {
        struct pr_job *j = job_new(lu, NULL, PRJ_SPC2_DROP, port);
        if (j)
            job_submit(j);
        else
            LOG_WARN("LUN %" PRIu64 ": out of memory: the SPC-2 reservation stays in the "
                     "cluster",
                     lu->id);
    }
}

static void pr_spc2_release_all(struct scsi_lun *lu)
{
    spc2_drop(lu, "");
}

static void pr_spc2_release_nexus(struct scsi_lun *lu, const struct scsi_nexus *n)
{
    spc2_drop(lu, n->initiator_port);
}

static bool pr_tell_reset(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg)
{
    if (!lu->pr->shared)
        return false;
    struct pr_job *j = job_new(lu, NULL, PRJ_RESET, "");
    if (!j) {
        LOG_WARN("LUN %" PRIu64 ": out of memory: the other gateways are not told of the reset",
                 lu->id);
        return false;
    }
    j->ua = ua;
    j->cb = done;
    j->cb_arg = arg;
    job_submit(j);
    return true;
}

/* A reset releases the SPC-2 reservation (SPC-2 §5.5.1; persistent reservations survive,
 * SPC-4 §5.13.1), and a shared LU tells the other gateways. */
static bool pr_lun_reset(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg)
{
    pr_spc2_release_all(lu);
    return pr_tell_reset(lu, ua, done, arg);
}

static int pr_lun_hook_init(struct scsi_lun *lu, const struct scsi_lun_config *cfg, char *err,
                            size_t errlen)
{
    return pr_lun_init(lu, cfg->pr_state_path, err, errlen);
}

/* Nexus loss and resets end SPC-2 reservations; persistent ones stay (SPC-4 §5.13.1). */
const struct scsi_lun_hooks pr_lun_hooks = {.name = "reservations",
                                            .init = pr_lun_hook_init,
                                            .stop = pr_lun_drain,
                                            .free = pr_lun_free,
                                            .lun_nexus_lost = pr_spc2_release_nexus,
                                            .reset = pr_lun_reset};
