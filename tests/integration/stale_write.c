/* A late WRITE from a dropped path must not land over newer data (initiator_stale_write.py
 * drives it): lr_mpath over two portals, the first a relay that holds one WRITE.
 *
 * usage: stale_write --target IQN --host H:P,H:P [--cmd-timeout-ms N]
 * Writes generation 1, 2, ... of block 0 (16 KiB each, all immediate data) until one WRITE
 * was issued again (the relay held it: its path timed out, lr_mpath carried it to the other
 * gateway), then writes one newer generation, prints "newer N", waits for a line on stdin (the
 * driver lets the relay deliver what it held to the first gateway meanwhile), reads block 0
 * back and prints "read gen N" (N: the generation it holds). Once the first path logged in
 * again it prints "relogged" and waits for another line (the driver asks the first gateway
 * which ISID it sees). Exit 0 unless the setup failed; the driver judges the results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linerate/multipath.h"
#include "linerate/reactor.h"

#define WLEN (16u * 1024u)

static struct reactor *R;
static struct lr_mpath *M;
static uint32_t bs;
static uint64_t gen;
static int failed = 1, held;
static uint8_t wbuf[WLEN], rbuf[WLEN];

static void stamp(uint64_t g)
{
    memset(wbuf, 'x', WLEN);
    snprintf((char *)wbuf, 64, "gen %llu ", (unsigned long long)g);
}

static void on_logout(void *arg, const struct lr_result *res)
{
    (void)arg;
    (void)res;
    lr_reactor_stop(R);
}

/* Path A (0) logged in again through the relay (it may have at once, or not yet): then
 * "relogged", a line on stdin (the test read the ISID gateway A sees now), logout. */
static struct lr_timer *again_t;
static unsigned again_ticks;

static void again(void *arg)
{
    (void)arg;
    struct lr_mpath_path_info pi;
    if (lr_mpath_path_info(M, 0, &pi) && pi.relogins > 0 && pi.up) {
        printf("relogged\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin))
            failed = 1;
    } else if (++again_ticks < 600) {
        lr_timer_start(again_t, 50); /* at most 30 s */
        return;
    } else {
        fprintf(stderr, "stale_write: path A did not log in again\n");
    }
    lr_mpath_logout(M, on_logout, NULL);
}

static void on_read(void *arg, const struct lr_result *res)
{
    (void)arg;
    if (res->err == LR_OK) {
        unsigned long long g = 0;
        if (sscanf((const char *)rbuf, "gen %llu ", &g) == 1)
            failed = 0;
        printf("read gen %llu\n", g);
        fflush(stdout);
    } else {
        fprintf(stderr, "stale_write: READ: %s\n", res->what ? res->what : lr_err_name(res->err));
    }
    again(NULL);
}

static void write_next(void);

static void on_write(void *arg, const struct lr_result *res)
{
    (void)arg;
    uint64_t lost, reissued;
    lr_mpath_counts(M, &lost, &reissued);
    if (res->err != LR_OK) {
        fprintf(stderr, "stale_write: WRITE gen %llu: %s\n", (unsigned long long)gen,
                res->what ? res->what : lr_err_name(res->err));
        lr_reactor_stop(R);
        return;
    }
    printf("wrote gen %llu through path %d (issued again so far: %llu)\n", (unsigned long long)gen,
           res->conn, (unsigned long long)reissued);
    fflush(stdout);
    if (held) { /* the newer generation is in: let the relay deliver the old copy */
        printf("newer %llu\n", (unsigned long long)gen);
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin) ||
            lr_mpath_read(M, 0, WLEN / bs, bs, rbuf, on_read, NULL) < 0)
            lr_reactor_stop(R);
        return;
    }
    if (reissued > 0)
        held = 1;
    else if (gen >= 8) {
        fprintf(stderr, "stale_write: no WRITE was held by the relay\n");
        lr_reactor_stop(R);
        return;
    }
    write_next();
}

static void write_next(void)
{
    stamp(++gen);
    if (lr_mpath_write(M, 0, WLEN / bs, bs, wbuf, on_write, NULL) < 0)
        lr_reactor_stop(R);
}

static void on_cap(void *arg, const struct lr_result *res, uint64_t blocks, uint32_t b)
{
    (void)arg;
    (void)blocks;
    if (res->err != LR_OK || b == 0 || WLEN % b) {
        fprintf(stderr, "stale_write: READ CAPACITY failed\n");
        lr_reactor_stop(R);
        return;
    }
    bs = b;
    printf("ready\n");
    fflush(stdout);
    write_next();
}

static void on_login(void *arg, const struct lr_result *res)
{
    (void)arg;
    if (res->err != LR_OK || lr_mpath_read_capacity(M, on_cap, NULL) < 0) {
        fprintf(stderr, "stale_write: login failed\n");
        lr_reactor_stop(R);
    }
}

int main(int argc, char **argv)
{
    static struct lr_mpath_opts mo;
    char *hosts = NULL;
    mo.session.initiator_name = "iqn.2026-12.org.linerate:stale";
    mo.session.cmd_timeout_ms = 2000;
    mo.session.max_tasks = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--target"))
            mo.session.target_name = argv[i + 1];
        else if (!strcmp(argv[i], "--host"))
            hosts = argv[i + 1];
        else if (!strcmp(argv[i], "--cmd-timeout-ms"))
            mo.session.cmd_timeout_ms = (uint32_t)atoi(argv[i + 1]);
    }
    for (char *save = NULL, *tok = hosts ? strtok_r(hosts, ",", &save) : NULL;
         tok && mo.npaths < LR_MPATH_MAX_PATHS; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon)
            return 2;
        *colon = '\0';
        mo.hosts[mo.npaths] = tok;
        mo.ports[mo.npaths++] = (uint16_t)atoi(colon + 1);
    }
    if (!mo.session.target_name || mo.npaths < 2) {
        fprintf(stderr, "usage: stale_write --target IQN --host H:P,H:P [--cmd-timeout-ms N]\n");
        return 2;
    }
    R = lr_reactor_create(0);
    again_t = R ? lr_timer_new(R, again, NULL) : NULL;
    if (!again_t)
        return 1;
    M = lr_mpath_create(R, &mo);
    if (!M || lr_mpath_login(M, on_login, NULL) < 0)
        return 1;
    lr_reactor_run(R);
    lr_mpath_destroy(M);
    lr_timer_free(again_t);
    lr_reactor_destroy(R);
    return failed;
}
