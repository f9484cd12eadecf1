/* libFuzzer harness for the target's PDU receive path (src/iscsi/conn.c and everything it
 * dispatches to: login, SCSI command / R2T / Data-Out, TMF, Text, NOP, Logout, Reject).
 *
 * An iscsi_server with two nodes (a 1 MiB RAM LUN each; the second, FUZZ_CHAP_TARGET, wants
 * mutual CHAP so that raw login input reaches the CHAP exchange) and one reactor are built once.
 * For every input, one end of a socketpair is handed to iscsi_conn_accept(); the input is written
 * into the other end, followed by a write shutdown, and the reactor runs until the connection has
 * closed and been freed (or a bounded number of turns, after which the peer is closed hard;
 * a connection that still does not go away is a hang and aborts). Everything the target sends
 * is read and discarded.
 *
 * The first input byte chooses what precedes the rest of the input on the wire:
 *   bits 0-1 = 0: nothing (raw bytes into the login phase)
 *            = 1, 3: a valid single-PDU Login Request to the node (normal session, skips the
 *              security stage, ImmediateData=Yes, InitialR2T=No), so the rest reaches FFP
 *            = 2: a valid Login Request for a discovery session. */
#include <errno.h>
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
#define MAX_INPUT (1u << 20)

static struct {
    struct scsi_target scsi;
    struct iscsi_node node, chap_node;
    struct iscsi_node *nodes[2];
    struct iscsi_portal_addr portal;
    struct iscsi_server srv;
    struct reactor *r;
} G;

struct run {
    int peer;
    const uint8_t *data;
    size_t len, off;
    bool shut, hard_closed, accepted;
    unsigned turns;
    struct reactor_msg tick_msg;
};

static void setup_once(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    log_set_level(getenv("FUZZ_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    char err[256] = "";
    if (scsi_target_init(&G.scsi, FUZZ_TARGET, 1) < 0)
        abort();
    struct bs *bs = bs_open_spec("ram:1M", err, sizeof(err));
    if (!bs) {
        fprintf(stderr, "bs_open_spec: %s\n", err);
        abort();
    }
    struct scsi_lun_config lc = {.lun = 0, .bs = bs, .block_size = 512, .read_only = false};
    if (scsi_target_add_lun(&G.scsi, &lc, err, sizeof(err)) < 0) {
        fprintf(stderr, "scsi_target_add_lun: %s\n", err);
        abort();
    }
    snprintf(G.portal.text, sizeof(G.portal.text), "127.0.0.1:3260");
    G.portal.tpgt = 1;
    snprintf(G.node.name, sizeof(G.node.name), "%s", FUZZ_TARGET);
    G.node.scsi = &G.scsi;
    G.node.portals = &G.portal;
    G.node.nportals = 1;
    G.node.tpgt = 1;
    /* both target resets done, so that the fuzzer reaches their paths too */
    G.node.warm_reset = G.node.cold_reset = true;
    /* The daemon's defaults (src/daemon/config.c target_params_default). */
    iscsi_params_default(&G.node.params);
    G.node.params.max_recv_dsl = 256u * 1024;
    G.node.params.max_burst = 1024u * 1024;
    G.node.params.first_burst = 256u * 1024;
    G.node.params.immediate_data = true;
    G.node.params.initial_r2t = false;
    G.node.params.max_connections = 8;
    G.node.params.max_outstanding_r2t = 8;
    G.node.params.header_digest = true;
    G.node.params.data_digest = true;
    /* the same LUN behind a target with mutual CHAP (alice / tgt, see seeds.py) */
    G.chap_node = G.node;
    snprintf(G.chap_node.name, sizeof(G.chap_node.name), "%s", FUZZ_CHAP_TARGET);
    struct chap_creds *cr = &G.chap_node.chap;
    snprintf(cr->user, sizeof(cr->user), "alice");
    memcpy(cr->secret, "fuzz-secret-alice", 17);
    cr->secret_len = 17;
    snprintf(cr->mutual_user, sizeof(cr->mutual_user), "tgt");
    memcpy(cr->mutual_secret, "fuzz-secret-target", 18);
    cr->mutual_secret_len = 18;
    iscsi_server_init(&G.srv);
    G.nodes[0] = &G.node;
    G.nodes[1] = &G.chap_node;
    iscsi_server_set_nodes(&G.srv, G.nodes, 2);
    G.r = reactor_create(0);
    if (!G.r)
        abort();
    if (iscsi_server_set_reactors(&G.srv, &G.r, 1) < 0)
        abort();
}

/* A Login Request that goes straight from the operational stage to full feature phase. */
static size_t make_login(uint8_t *out, size_t cap, bool discovery)
{
    char text[1024];
    size_t tl = 0;
    const char *keys[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        discovery ? "SessionType=Discovery" : "SessionType=Normal",
        discovery ? NULL : "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        "ImmediateData=Yes",
        "InitialR2T=No",
        "MaxRecvDataSegmentLength=65536",
        "MaxBurstLength=262144",
        "FirstBurstLength=65536",
        "MaxOutstandingR2T=2",
        "ErrorRecoveryLevel=0",
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (!keys[i])
            continue;
        size_t k = strlen(keys[i]) + 1;
        memcpy(text + tl, keys[i], k);
        tl += k;
    }
    size_t padded = (tl + 3) & ~(size_t)3;
    if (ISCSI_BHS_LEN + padded > cap)
        abort();
    memset(out, 0, ISCSI_BHS_LEN + padded);
    out[0] = ISCSI_BHS_IMMEDIATE | ISCSI_OP_LOGIN_REQ;
    out[1] = ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) | ISCSI_STAGE_FULL_FEATURE;
    out[5] = (uint8_t)(tl >> 16);
    out[6] = (uint8_t)(tl >> 8);
    out[7] = (uint8_t)tl;
    static const uint8_t isid[6] = {0x80, 0x12, 0x34, 0x56, 0x00, 0x01};
    memcpy(out + BHS_ISID, isid, 6);
    out[BHS_ITT + 3] = 1; /* ITT 1; CID 0; CmdSN 0; ExpStatSN 0 */
    memcpy(out + ISCSI_BHS_LEN, text, tl);
    return ISCSI_BHS_LEN + padded;
}

static void drain_peer(struct run *ru)
{
    static uint8_t sink[256 * 1024];
    if (ru->hard_closed)
        return;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(ru->peer, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0)
            break;
    }
}

static void tick(void *arg)
{
    struct run *ru = arg;
    ru->turns++;
    if (ru->accepted && atomic_load(&G.srv.nconns) == 0) {
        reactor_stop(G.r);
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
        drain_peer(ru);
    }
    if (ru->turns == TURNS_SOFT && !ru->hard_closed) {
        close(ru->peer);
        ru->peer = -1;
        ru->hard_closed = true;
    }
    if (ru->turns >= TURNS_HARD) {
        fprintf(stderr, "fuzz_pdu: connection still open after %u reactor turns\n", ru->turns);
        abort();
    }
    reactor_yield(G.r, &ru->tick_msg, tick, ru);
}

struct start {
    struct run *ru;
    int fd;
    struct reactor_msg msg;
};

static void start(void *arg)
{
    struct start *st = arg;
    iscsi_conn_accept(&G.srv, G.r, st->fd, &G.portal);
    st->ru->accepted = true;
    tick(st->ru);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_once();
    if (size < 1 || size > MAX_INPUT)
        return 0;
    unsigned mode = data[0] & 3;
    data++;
    size--;

    uint8_t login[ISCSI_BHS_LEN + 1024];
    size_t ll = mode == 0 ? 0 : make_login(login, sizeof(login), mode == 2);
    uint8_t *wire = malloc(ll + size + 1);
    if (!wire)
        return 0;
    memcpy(wire, login, ll);
    if (size)
        memcpy(wire + ll, data, size);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct run ru = {.peer = sv[1], .data = wire, .len = ll + size};
    struct start st = {.ru = &ru, .fd = sv[0]};
    reactor_post(G.r, &st.msg, start, &st);
    reactor_run(G.r);
    if (atomic_load(&G.srv.nconns) != 0) {
        fprintf(stderr, "fuzz_pdu: reactor stopped with a connection alive\n");
        abort();
    }
    if (!ru.hard_closed)
        close(ru.peer);
    free(wire);
    return 0;
}
