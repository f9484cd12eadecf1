/* The target that fuzz_pdu and fuzz_session write to: an iscsi_server with two nodes (a 1 MiB
 * RAM LUN each; the second, FUZZ_CHAP_TARGET, wants mutual CHAP so that raw login input reaches
 * the CHAP exchange) and one reactor, built once per process. tg_run_conn() hands one end of a
 * socketpair to iscsi_conn_accept(), writes the wire into the other end followed by a write
 * shutdown, and runs the reactor until the connection has closed and been freed (or a bounded
 * number of turns, after which the peer is closed hard; a connection that still does not go
 * away is a hang and aborts). What the target sends is read and dropped, all but its first BHS. */
#ifndef LR_FUZZ_TARGET_H
#define LR_FUZZ_TARGET_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bs/bs.h"
#include "iscsi/conn.h"
#include "iscsi/node.h"
#include "reactor/reactor.h"
#include "scsi/scsi.h"
#include "util/log.h"

#define FUZZ_TARGET "iqn.2026-11.org.linerate:fuzz"
#define FUZZ_INITIATOR "iqn.2026-11.org.linerate:fuzz-initiator"
#define FUZZ_CHAP_TARGET "iqn.2026-11.org.linerate:fuzz-chap"
#define TURNS_SOFT 2000 /* then the peer end is closed completely */
#define TURNS_HARD 4000 /* then the connection is stuck: a bug */

static struct {
    const char *name; /* the harness, for its abort messages */
    struct scsi_target scsi;
    struct iscsi_node node, chap_node;
    struct iscsi_node *nodes[2];
    struct iscsi_portal_addr portal;
    struct iscsi_server srv;
    struct reactor *r;
} TG;

struct tg_run {
    int peer;
    const uint8_t *data;
    size_t len, off;
    bool shut, hard_closed, accepted;
    unsigned turns;
    struct reactor_msg tick_msg;
    uint8_t rsp[ISCSI_BHS_LEN]; /* the first BHS the target sent */
    size_t rsp_got;
};

/* Build the target once; erl is the ErrorRecoveryLevel its nodes offer. */
static void tg_setup_once(const char *name, uint32_t erl)
{
    static bool done;
    if (done)
        return;
    done = true;
    TG.name = name;
    log_set_level(getenv("FUZZ_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    char err[256] = "";
    if (scsi_target_init(&TG.scsi, FUZZ_TARGET, 1) < 0)
        abort();
    struct bs *bs = bs_open_spec("ram:1M", err, sizeof(err));
    if (!bs) {
        fprintf(stderr, "bs_open_spec: %s\n", err);
        abort();
    }
    struct scsi_lun_config lc = {.lun = 0, .bs = bs, .block_size = 512, .read_only = false};
    if (scsi_target_add_lun(&TG.scsi, &lc, err, sizeof(err)) < 0) {
        fprintf(stderr, "scsi_target_add_lun: %s\n", err);
        abort();
    }
    snprintf(TG.portal.text, sizeof(TG.portal.text), "127.0.0.1:3260");
    TG.portal.tpgt = 1;
    snprintf(TG.node.name, sizeof(TG.node.name), "%s", FUZZ_TARGET);
    TG.node.scsi = &TG.scsi;
    TG.node.portals = &TG.portal;
    TG.node.nportals = 1;
    TG.node.tpgt = 1;
    /* both target resets done, so that the fuzzer reaches their paths too */
    TG.node.warm_reset = TG.node.cold_reset = true;
    /* The daemon's defaults (src/daemon/config.c target_params_default). */
    iscsi_params_default(&TG.node.params);
    TG.node.params.max_recv_dsl = 256u * 1024;
    TG.node.params.max_burst = 1024u * 1024;
    TG.node.params.first_burst = 256u * 1024;
    TG.node.params.immediate_data = true;
    TG.node.params.initial_r2t = false;
    TG.node.params.max_connections = 8;
    TG.node.params.max_outstanding_r2t = 8;
    TG.node.params.header_digest = true;
    TG.node.params.data_digest = true;
    TG.node.params.erl = erl;
    /* the same LUN behind a target with mutual CHAP (alice / tgt, see seeds.py) */
    TG.chap_node = TG.node;
    snprintf(TG.chap_node.name, sizeof(TG.chap_node.name), "%s", FUZZ_CHAP_TARGET);
    struct chap_creds *cr = &TG.chap_node.chap;
    snprintf(cr->user, sizeof(cr->user), "alice");
    memcpy(cr->secret, "fuzz-secret-alice", 17);
    cr->secret_len = 17;
    snprintf(cr->mutual_user, sizeof(cr->mutual_user), "tgt");
    memcpy(cr->mutual_secret, "fuzz-secret-target", 18);
    cr->mutual_secret_len = 18;
    iscsi_server_init(&TG.srv);
    TG.nodes[0] = &TG.node;
    TG.nodes[1] = &TG.chap_node;
    iscsi_server_set_nodes(&TG.srv, TG.nodes, 2);
    TG.r = reactor_create(0);
    if (!TG.r)
        abort();
    if (iscsi_server_set_reactors(&TG.srv, &TG.r, 1) < 0)
        abort();
}

static void tg_drain_peer(struct tg_run *ru)
{
    static uint8_t sink[256 * 1024];
    if (ru->hard_closed)
        return;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(ru->peer, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0)
            break;
        if (ru->rsp_got < ISCSI_BHS_LEN) {
            size_t k =
                ISCSI_BHS_LEN - ru->rsp_got < (size_t)n ? ISCSI_BHS_LEN - ru->rsp_got : (size_t)n;
            memcpy(ru->rsp + ru->rsp_got, sink, k);
            ru->rsp_got += k;
        }
    }
}

static void tg_tick(void *arg)
{
    struct tg_run *ru = arg;
    ru->turns++;
    if (ru->accepted && atomic_load(&TG.srv.nconns) == 0) {
        reactor_stop(TG.r);
        return;
    }
    if (!ru->hard_closed) {
        while (ru->off < ru->len) {
            ssize_t n =
                send(ru->peer, ru->data + ru->off, ru->len - ru->off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n <= 0)
                break;
            ru->off += (size_t)n;
        }
        if (ru->off == ru->len && !ru->shut) {
            shutdown(ru->peer, SHUT_WR);
            ru->shut = true;
        }
        tg_drain_peer(ru);
    }
    if (ru->turns == TURNS_SOFT && !ru->hard_closed) {
        close(ru->peer);
        ru->peer = -1;
        ru->hard_closed = true;
    }
    if (ru->turns >= TURNS_HARD) {
        fprintf(stderr, "%s: connection still open after %u reactor turns\n", TG.name, ru->turns);
        abort();
    }
    reactor_yield(TG.r, &ru->tick_msg, tg_tick, ru);
}

struct tg_start {
    struct tg_run *ru;
    int fd;
    struct reactor_msg msg;
};

static void tg_start(void *arg)
{
    struct tg_start *st = arg;
    iscsi_conn_accept(&TG.srv, TG.r, st->fd, &TG.portal);
    st->ru->accepted = true;
    tg_tick(st->ru);
}

/* One connection: the wire written, the target's answers drained, until it is gone. The first
 * BHS the target sent goes to rsp (zeros if it sent none). */
static void tg_run_conn(const uint8_t *wire, size_t len, uint8_t rsp[ISCSI_BHS_LEN])
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct tg_run ru = {.peer = sv[1], .data = wire, .len = len};
    struct tg_start st = {.ru = &ru, .fd = sv[0]};
    reactor_post(TG.r, &st.msg, tg_start, &st);
    reactor_run(TG.r);
    if (atomic_load(&TG.srv.nconns) != 0) {
        fprintf(stderr, "%s: reactor stopped with a connection alive\n", TG.name);
        abort();
    }
    if (!ru.hard_closed)
        close(ru.peer);
    memcpy(rsp, ru.rsp, ISCSI_BHS_LEN);
}

#endif
