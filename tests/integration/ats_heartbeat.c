/* ESXi's ATS heartbeat, emulated over lr_mpath (issue 30 item 6, target_ats.py drives it):
 * each host owns one heartbeat slot (a block) and, every interval, runs COMPARE AND WRITE on
 * it, comparing with what it last wrote and writing the next generation, as VMFS does
 * (5.5U2 and later use ATS for the heartbeat). Each host is an lr_mpath device over its own
 * list of portals, all on one reactor.
 *
 * usage: ats_heartbeat --target IQN --host H:P[,H:P...] [--host ...] [--seconds N]
 *                      [--interval-ms N] [--lba N] [--steal-at K] [--cmd-timeout-ms N]
 *                      [--stop-file PATH]
 * Host i's slot is block LBA + i. --steal-at K: once host 0 has K good heartbeats it WRITEs a
 * foreign block over host 1's slot (what another host reclaiming a dead one's heartbeat
 * does): host 1's next CAW must come back MISCOMPARE, a real one.
 * After a MISCOMPARE the host reads its slot back: holding the data it just tried to write,
 * the miscompare was false (its own earlier copy landed: lr_mpath should have said GOOD);
 * anything else is real. Either way it adopts what it read and goes on. Prints "ats: ready"
 * once logged in, a line per good heartbeat and per miscompare, and at the end (--seconds
 * passed, or PATH of --stop-file exists), once no heartbeat is outstanding, a summary line per
 * host and one per path; exit 0 unless the setup failed (the driver judges the counts). */
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "linerate/multipath.h"
#include "linerate/reactor.h"

#define MAX_HOSTS 4
#define BS_MAX 4096

struct host {
    int id;
    struct lr_mpath *m;
    struct reactor *r;
    uint64_t lba;
    uint32_t bs;
    uint8_t caw[2 * BS_MAX]; /* compare half (what we last wrote), then the write half */
    uint8_t rd[BS_MAX];
    uint8_t steal[BS_MAX];
    uint64_t gen;
    bool busy, have_last;
    uint64_t sent, good, errors, false_mis, real_mis, late;
    double last_good, longest_gap, start, sent_at;
};

static struct host hosts[MAX_HOSTS];
static unsigned nhosts;
static struct reactor *R;
static struct lr_timer *tick, *end;
static unsigned interval_ms = 1000, seconds = 10, steal_at;
static const char *stop_file;
static bool stolen, ending;
static double end_at;
static int pending_login, failed;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void stamp(uint8_t *b, uint32_t bs, int id, uint64_t gen, const char *who)
{
    memset(b, 'a' + id, bs);
    int n = snprintf((char *)b, bs, "%s host %d gen %llu ", who, id, (unsigned long long)gen);
    b[n] = '.';
}

static void gap_to(struct host *h, double t)
{
    double gap = t - h->last_good;
    if (gap > h->longest_gap)
        h->longest_gap = gap;
}

/* Read the slot back: after a miscompare (to judge it), an error, and at start. */
static void on_read(void *arg, const struct lr_result *res);
static void read_slot(struct host *h)
{
    h->busy = true;
    if (lr_mpath_read(h->m, h->lba, 1, h->bs, h->rd, on_read, h) < 0) {
        h->busy = false;
        h->errors++;
    }
}

static int mis_pending[MAX_HOSTS]; /* the read judges a miscompare */

static void on_read(void *arg, const struct lr_result *res)
{
    struct host *h = arg;
    h->busy = false;
    if (res->err != LR_OK) {
        fprintf(stderr, "ats: host %d: READ of its slot: %s\n", h->id,
                res->what ? res->what : lr_err_name(res->err));
        h->errors++;
        mis_pending[h->id] = 0;
        return;
    }
    if (mis_pending[h->id]) {
        bool mine = memcmp(h->rd, h->caw + h->bs, h->bs) == 0;
        if (mine)
            h->false_mis++;
        else
            h->real_mis++;
        printf("ats: host %d: MISCOMPARE at gen %llu: %s (slot holds \"%.28s\")\n", h->id,
               (unsigned long long)h->gen, mine ? "FALSE, the slot holds our new data" : "real",
               (const char *)h->rd);
        fflush(stdout);
        mis_pending[h->id] = 0;
    }
    memcpy(h->caw, h->rd, h->bs); /* what the slot holds is what we compare with next */
    h->have_last = true;
}

static void on_steal(void *arg, const struct lr_result *res)
{
    (void)arg;
    printf("ats: host 0 wrote over host 1's slot: %s\n",
           res->err == LR_OK ? "GOOD" : (res->what ? res->what : lr_err_name(res->err)));
    fflush(stdout);
}

static int sense_key(const struct lr_result *res);

static void on_caw(void *arg, const struct lr_result *res)
{
    struct host *h = arg;
    double t = now_s();
    h->busy = false;
    if (res->err == LR_OK) {
        h->good++;
        gap_to(h, t);
        h->last_good = t;
        memcpy(h->caw, h->caw + h->bs, h->bs);
        printf("ats: host %d: gen %llu GOOD through path %d in %.0f ms\n", h->id,
               (unsigned long long)h->gen, res->conn, (t - h->sent_at) * 1000);
        fflush(stdout);
        if (h->id == 0 && steal_at && h->good == steal_at && nhosts > 1 && !stolen) {
            stolen = true;
            stamp(h->steal, h->bs, 1, 0, "stolen by");
            if (lr_mpath_write(h->m, hosts[1].lba, 1, h->bs, h->steal, on_steal, NULL) < 0)
                failed = 1;
        }
        return;
    }
    if (res->err == LR_SCSI_STATUS && sense_key(res) == 0x0e) { /* MISCOMPARE, SBC-4 §5.3 */
        mis_pending[h->id] = 1;
    } else {
        h->errors++;
        fprintf(stderr, "ats: host %d: COMPARE AND WRITE gen %llu failed: %s\n", h->id,
                (unsigned long long)h->gen, res->what ? res->what : lr_err_name(res->err));
    }
    read_slot(h); /* what is there now, before the next heartbeat */
}

/* fixed or descriptor sense data (SPC-4 §4.5) */
static int sense_key(const struct lr_result *res)
{
    if (res->sense_len >= 3 && (res->sense[0] & 0x7e) == 0x70)
        return res->sense[2] & 0x0f;
    if (res->sense_len >= 2 && (res->sense[0] & 0x7e) == 0x72)
        return res->sense[1] & 0x0f;
    return -1;
}

static void beat(struct host *h)
{
    if (h->busy || !h->have_last) {
        h->late++; /* VMFS skips a beat while the last one is outstanding */
        return;
    }
    h->gen++;
    stamp(h->caw + h->bs, h->bs, h->id, h->gen, "ats");
    /* COMPARE AND WRITE (SBC-4 §5.3): one block; Data-Out = compare then write data */
    uint8_t cdb[16] = {0x89};
    for (int i = 0; i < 8; i++)
        cdb[2 + i] = (uint8_t)(h->lba >> (56 - 8 * i));
    cdb[13] = 1;
    h->busy = true;
    h->sent++;
    h->sent_at = now_s();
    if (lr_mpath_scsi(h->m, cdb, 16, LR_DIR_WRITE, h->caw, 2 * h->bs, on_caw, h) < 0) {
        h->busy = false;
        h->errors++;
    }
}

static void on_tick(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < nhosts; i++)
        beat(&hosts[i]);
    lr_timer_start(tick, interval_ms);
}

static void summary(void);

/* Every 100 ms: the end (time up or the stop file), then no heartbeat outstanding (at most
 * a minute more: lr_mpath gives up on a command after its failover timeout). */
static void on_end(void *arg)
{
    (void)arg;
    double t = now_s();
    if (!ending && (t >= end_at || (stop_file && access(stop_file, F_OK) == 0))) {
        ending = true;
        end_at = t + 60;
        lr_timer_stop(tick);
    }
    bool busy = false;
    for (unsigned i = 0; i < nhosts; i++)
        busy |= hosts[i].busy;
    if (ending && (!busy || t >= end_at))
        summary();
    else
        lr_timer_start(end, 100);
}

static int logout_pending;
static void on_logout(void *arg, const struct lr_result *res)
{
    (void)arg;
    (void)res;
    if (--logout_pending == 0)
        lr_reactor_stop(R);
}

static void summary(void)
{
    double t = now_s();
    for (unsigned i = 0; i < nhosts; i++) {
        struct host *h = &hosts[i];
        gap_to(h, t); /* a host still without a heartbeat at the end counts too */
        uint64_t lost, reissued, checked, landed;
        lr_mpath_counts(h->m, &lost, &reissued);
        lr_mpath_caw_counts(h->m, &checked, &landed);
        printf("ats: host %d: heartbeats sent %llu good %llu errors %llu skipped %llu; "
               "miscompares false %llu real %llu; longest gap %.2f s; paths lost %llu, "
               "commands issued again %llu, CAW read back %llu, own data found %llu\n",
               h->id, (unsigned long long)h->sent, (unsigned long long)h->good,
               (unsigned long long)h->errors, (unsigned long long)h->late,
               (unsigned long long)h->false_mis, (unsigned long long)h->real_mis, h->longest_gap,
               (unsigned long long)lost, (unsigned long long)reissued, (unsigned long long)checked,
               (unsigned long long)landed);
        struct lr_mpath_path_info pi;
        for (unsigned k = 0; lr_mpath_path_info(h->m, k, &pi); k++)
            printf("ats: host %d: path %u %s:%u %s%s: %llu commands\n", h->id, k, pi.host, pi.port,
                   lr_alua_state_name(pi.state), pi.lost ? " (lost)" : "",
                   (unsigned long long)pi.commands);
    }
    fflush(stdout);
    logout_pending = (int)nhosts;
    for (unsigned i = 0; i < nhosts; i++)
        lr_mpath_logout(hosts[i].m, on_logout, NULL);
}

static void on_cap(void *arg, const struct lr_result *res, uint64_t blocks, uint32_t bs)
{
    struct host *h = arg;
    (void)blocks;
    if (res->err != LR_OK || bs == 0 || bs > BS_MAX) {
        fprintf(stderr, "ats: host %d: READ CAPACITY failed\n", h->id);
        failed = 1;
        lr_reactor_stop(R);
        return;
    }
    h->bs = bs;
    read_slot(h);
    if (--pending_login == 0) {
        double t = now_s();
        for (unsigned i = 0; i < nhosts; i++)
            hosts[i].start = hosts[i].last_good = t;
        printf("ats: ready\n");
        fflush(stdout);
        end_at = t + seconds;
        lr_timer_start(tick, interval_ms);
        lr_timer_start(end, 100);
    }
}

static void on_login(void *arg, const struct lr_result *res)
{
    struct host *h = arg;
    if (res->err != LR_OK || lr_mpath_read_capacity(h->m, on_cap, h) < 0) {
        fprintf(stderr, "ats: host %d: login failed: %s\n", h->id,
                res->what ? res->what : lr_err_name(res->err));
        failed = 1;
        lr_reactor_stop(R);
    }
}

static int add_host(struct lr_mpath_opts *mo, char *list)
{
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon || mo->npaths >= LR_MPATH_MAX_PATHS)
            return -1;
        *colon = '\0';
        mo->hosts[mo->npaths] = tok;
        mo->ports[mo->npaths] = (uint16_t)atoi(colon + 1);
        mo->npaths++;
    }
    return mo->npaths ? 0 : -1;
}

int main(int argc, char **argv)
{
    static struct lr_mpath_opts mo[MAX_HOSTS];
    static char names[MAX_HOSTS][64];
    const char *target = NULL;
    uint64_t lba = 100;
    uint32_t cmd_timeout = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--target"))
            target = v;
        else if (!strcmp(k, "--host") && nhosts < MAX_HOSTS && !add_host(&mo[nhosts], argv[i + 1]))
            nhosts++;
        else if (!strcmp(k, "--seconds"))
            seconds = (unsigned)atoi(v);
        else if (!strcmp(k, "--interval-ms"))
            interval_ms = (unsigned)atoi(v);
        else if (!strcmp(k, "--lba"))
            lba = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--steal-at"))
            steal_at = (unsigned)atoi(v);
        else if (!strcmp(k, "--stop-file"))
            stop_file = v;
        else if (!strcmp(k, "--cmd-timeout-ms"))
            cmd_timeout = (unsigned)atoi(v);
        else {
            fprintf(stderr, "ats_heartbeat: bad argument %s\n", k);
            return 2;
        }
    }
    if (!target || !nhosts || argc % 2 == 0) {
        fprintf(stderr, "usage: ats_heartbeat --target IQN --host H:P[,H:P] [--host ...] "
                        "[--seconds N] [--interval-ms N] [--lba N] [--steal-at K]\n");
        return 2;
    }
    R = lr_reactor_create(0);
    tick = lr_timer_new(R, on_tick, NULL);
    end = lr_timer_new(R, on_end, NULL);
    for (unsigned i = 0; i < nhosts; i++) {
        struct host *h = &hosts[i];
        snprintf(names[i], sizeof(names[i]), "iqn.2026-11.org.linerate:esx-%u", i);
        mo[i].session.initiator_name = names[i];
        mo[i].session.target_name = target;
        mo[i].session.cmd_timeout_ms = cmd_timeout;
        mo[i].session.max_tasks = 16;
        h->id = (int)i;
        h->r = R;
        h->lba = lba + i;
        h->m = lr_mpath_create(R, &mo[i]);
        if (!h->m || lr_mpath_login(h->m, on_login, h) < 0) {
            fprintf(stderr, "ats_heartbeat: cannot start host %u\n", i);
            return 1;
        }
        pending_login++;
    }
    lr_reactor_run(R);
    for (unsigned i = 0; i < nhosts; i++)
        lr_mpath_destroy(hosts[i].m);
    lr_timer_free(tick);
    lr_timer_free(end);
    lr_reactor_destroy(R);
    return failed;
}
