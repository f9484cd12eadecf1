/* libFuzzer harness for a whole iSCSI exchange with the target (src/iscsi: login, full feature
 * phase, SCSI commands with immediate, unsolicited and solicited data, Text, NOP, TMFs, SNACK,
 * Logout, and the SCSI core behind them) as a sequence of PDUs on one connection, at
 * ErrorRecoveryLevel 0 or 2. It shares fuzz_pdu.c's rig (one reactor, a socketpair per input,
 * the target's own connection code from iscsi_conn_accept, the peer written and drained until
 * the connection is gone; a connection that does not go away is a hang) but gives the fuzzer
 * structure, so that its mutations land in full feature phase rather than in the framing:
 *
 * byte 0: bit 0: ErrorRecoveryLevel=2 offered (else 0); bit 1: ImmediateData=No and
 *         InitialR2T=Yes (else Yes/No). A valid Login Request for a normal session with these
 *         goes first, straight to full feature phase.
 * then records, each: op (1 byte: the BHS opcode with its immediate bit; bit 7 set = send the
 *         BHS exactly as given, no fix-ups), flags (1 byte, BHS byte 1), data length (2 bytes,
 *         big endian; at most what is left of the input), BHS bytes 8..47 (40 bytes: LUN or
 *         ISID/TSIH, ITT, the opcode-specific fields), then the data segment.
 *         DataSegmentLength is always the data's length and TotalAHSLength 0 (no AHS: a wrong
 *         length only loses the framing, which fuzz_pdu covers). Unless bit 7, for the PDUs that
 * carry one CmdSN is the session's next (advanced by each non-immediate command), so commands run
 * instead of falling outside the window. The padding to 4 bytes is added. */
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
#define MAX_CONNS 4   /* connections one after the other per input */
#define CONN_END 0x3e /* a record op (no such opcode): this connection ends, the next logs in */

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
    uint8_t rsp[ISCSI_BHS_LEN];
    size_t rsp_got;
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
    G.node.params.erl = 2; /* offered; the login prefix chooses 0 or 2 */
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
struct login_args {
    unsigned opts;
    uint16_t tsih, cid; /* tsih 0: a new session (leading login) */
    uint32_t cmdsn;
};

static size_t make_login(uint8_t *out, size_t cap, bool discovery, const struct login_args *la)
{
    char text[1024];
    size_t tl = 0;
    unsigned opts = la->opts;
    /* a connection joining a session sends no session-wide (leading-only) keys */
    const char *joining[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        "MaxRecvDataSegmentLength=65536",
    };
    const char *leading[] = {
        "InitiatorName=" FUZZ_INITIATOR,
        discovery ? "SessionType=Discovery" : "SessionType=Normal",
        discovery ? NULL : "TargetName=" FUZZ_TARGET,
        "HeaderDigest=None",
        "DataDigest=None",
        opts & 2 ? "ImmediateData=No" : "ImmediateData=Yes",
        opts & 2 ? "InitialR2T=Yes" : "InitialR2T=No",
        "MaxRecvDataSegmentLength=65536",
        "MaxBurstLength=262144",
        "FirstBurstLength=65536",
        "MaxOutstandingR2T=2",
        opts & 1 ? "ErrorRecoveryLevel=2" : "ErrorRecoveryLevel=0",
        "DefaultTime2Wait=0",
        "DefaultTime2Retain=1",
    };
    const char **keys = la->tsih ? joining : leading;
    size_t nkeys =
        la->tsih ? sizeof(joining) / sizeof(joining[0]) : sizeof(leading) / sizeof(leading[0]);
    for (size_t i = 0; i < nkeys; i++) {
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
    out[BHS_ISID + 6] = (uint8_t)(la->tsih >> 8);
    out[BHS_ISID + 7] = (uint8_t)la->tsih;
    out[BHS_ITT] = 0x10; /* an ITT no record is likely to use */
    out[BHS_ITT + 3] = 1;
    out[20] = (uint8_t)(la->cid >> 8); /* CID */
    out[21] = (uint8_t)la->cid;
    out[BHS_CMDSN] = (uint8_t)(la->cmdsn >> 24);
    out[BHS_CMDSN + 1] = (uint8_t)(la->cmdsn >> 16);
    out[BHS_CMDSN + 2] = (uint8_t)(la->cmdsn >> 8);
    out[BHS_CMDSN + 3] = (uint8_t)la->cmdsn;
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
        /* the Login Response's BHS: the TSIH the next connection joins with */
        if (ru->rsp_got < ISCSI_BHS_LEN) {
            size_t k =
                ISCSI_BHS_LEN - ru->rsp_got < (size_t)n ? ISCSI_BHS_LEN - ru->rsp_got : (size_t)n;
            memcpy(ru->rsp + ru->rsp_got, sink, k);
            ru->rsp_got += k;
        }
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
        fprintf(stderr, "fuzz_session: connection still open after %u reactor turns\n", ru->turns);
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

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The PDUs of the records, fixed up, after the login: the wire. */
static size_t build_wire(const uint8_t *data, size_t size, uint8_t *wire, size_t off, size_t *used,
                         uint32_t *cmdsnp, uint8_t *marker)
{
    uint32_t cmdsn = *cmdsnp; /* the login's CmdSN: an immediate login does not advance it */
    size_t p = 0;
    *marker = 0;
    while (p + 4 + 40 <= size) {
        uint8_t op = data[p], flags = data[p + 1];
        if (op == CONN_END) {
            *marker = flags | 0x80;
            p += 2;
            break;
        }
        size_t dlen = (size_t)data[p + 2] << 8 | data[p + 3];
        const uint8_t *rest = data + p + 4;
        p += 44;
        if (dlen > size - p)
            dlen = size - p;
        uint8_t *b = wire + off;
        memset(b, 0, ISCSI_BHS_LEN);
        b[0] = op & 0x7f;
        b[1] = flags;
        memcpy(b + 8, rest, 40);
        b[5] = (uint8_t)(dlen >> 16);
        b[6] = (uint8_t)(dlen >> 8);
        b[7] = (uint8_t)dlen;
        uint8_t opcode = op & 0x3f;
        bool has_cmdsn = opcode == ISCSI_OP_NOP_OUT || opcode == ISCSI_OP_SCSI_CMD ||
                         opcode == ISCSI_OP_TMF_REQ || opcode == ISCSI_OP_TEXT_REQ ||
                         opcode == ISCSI_OP_LOGOUT_REQ;
        if (!(op & 0x80) && has_cmdsn) {
            put32(b + 24, cmdsn);
            if (!(op & ISCSI_BHS_IMMEDIATE))
                cmdsn++;
        }
        off += ISCSI_BHS_LEN;
        memcpy(wire + off, data + p, dlen);
        p += dlen;
        off += dlen;
        size_t pad = (4 - dlen % 4) % 4;
        memset(wire + off, 0, pad);
        off += pad;
    }
    *used = p;
    *cmdsnp = cmdsn;
    return off;
}

/* One connection: the wire written, the target's answers drained, until it is gone. The first
 * BHS the target sent goes to rsp. */
static void run_conn(const uint8_t *wire, size_t len, uint8_t rsp[ISCSI_BHS_LEN])
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct run ru = {.peer = sv[1], .data = wire, .len = len};
    struct start st = {.ru = &ru, .fd = sv[0]};
    reactor_post(G.r, &st.msg, start, &st);
    reactor_run(G.r);
    if (atomic_load(&G.srv.nconns) != 0) {
        fprintf(stderr, "fuzz_session: reactor stopped with a connection alive\n");
        abort();
    }
    if (!ru.hard_closed)
        close(ru.peer);
    memcpy(rsp, ru.rsp, ISCSI_BHS_LEN);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup_once();
    if (size < 1 || size > MAX_INPUT)
        return 0;
    struct login_args la = {.opts = data[0]};
    data++;
    size--;
    /* each record grows by at most its padding and 4 bytes of BHS over its 44 */
    uint8_t *wire = malloc(ISCSI_BHS_LEN + 1024 + 2 * size + 64);
    if (!wire)
        return 0;
    for (unsigned conn = 0; conn < MAX_CONNS; conn++) {
        size_t ll = make_login(wire, ISCSI_BHS_LEN + 1024, false, &la);
        size_t used = 0;
        uint8_t marker = 0;
        size_t len = build_wire(data, size, wire, ll, &used, &la.cmdsn, &marker);
        uint8_t rsp[ISCSI_BHS_LEN];
        run_conn(wire, len, rsp);
        data += used;
        size -= used;
        if (!marker)
            break;
        /* The next connection: into the same session (the TSIH this login got, when it
         * succeeded) with CID 0 (reinstating the one just lost) or 1 (a new one, from which
         * the lost one's tasks can be reassigned); a new session if the login failed. */
        bool in = (rsp[0] & 0x3f) == ISCSI_OP_LOGIN_RSP && rsp[36] == 0;
        uint16_t tsih = (uint16_t)(rsp[14] << 8 | rsp[15]);
        la.tsih = in ? tsih : 0;
        la.cid = marker & 1;
        if (!la.tsih)
            la.cmdsn = 0;
    }
    free(wire);
    return 0;
}
