/* The iSCSI wire engine both ends run on (RFC 7143 §11, §12.1): the resumable receive machine
 * (BHS, AHS, header digest, data, pad, data digest) that walks every complete PDU of one recv,
 * places large payloads straight where the header handler says, and hands each PDU to its
 * owner through a small ops table; and the transmit queue (header + digest, data from where it
 * lives, pad, data digest) gathered into as few sendmsg calls as possible once per loop turn.
 *
 * The engine never calls into a side by name: a negative status from an op, or any error the
 * engine finds itself (peer closed, recv/send failure, oversized segment, digest error at
 * ERL 0), stops it and goes to ops->fail, the one place the owner closes the connection.
 *
 * Test seam: an engine with no socket (fd -1, never attached) takes bytes through wire_feed()
 * as if recv had returned them, and wire_take_tx() serializes its transmit queue into a buffer
 * (running the PDUs' sent callbacks), so both ends can be unit-tested without sockets:
 *
 *     struct wire w;
 *     wire_init(&w, &my_ops, my_ctx, "test");
 *     wire_feed(&w, bytes, len);            // my_ops.hdr / my_ops.pdu run for each PDU
 *     st = wire_status(&w);                 // WIRE_OK, or why it stopped (ops->fail ran)
 *     n = wire_take_tx(&w, buf, sizeof buf); // what the handlers queued, as on the wire
 *     wire_free(&w);
 */
#ifndef LR_ISCSI_WIRE_H
#define LR_ISCSI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "iscsi/pdu.h"
#include "reactor/reactor.h"
#include "util/iostats.h"
#include "util/list.h"

/* Pieces one transmitted data segment may live in (a task's scatter list, SCSI_TASK_IOV_MAX). */
#define WIRE_DATA_IOV_MAX 16
/* RFC 7143 §13.12: during login a PDU carries at most 8192 bytes of data. */
#define WIRE_LOGIN_DSL 8192u
/* What one queued PDU counts against the tx backlog besides the bytes it owns: the PDU itself
 * and a share of the task it answers, which it keeps alive until sent. */
#define WIRE_PDU_CHARGE 1024u
/* Early flush (wire.tx_early_pdus): the data the queued answers may hold at most. Past it one
 * send is already large, and cutting it costs more than the overlap gives back. */
#define WIRE_EARLY_FLUSH_BYTES (64u * 1024)
/* ... and the fewest PDUs it sends once the next answer would take the data past that. */
#define WIRE_EARLY_FLUSH_MIN_PDUS 4u

/* Why the engine stopped. Owners number their own statuses from WIRE_E_OWNER down. */
enum wire_status {
    WIRE_OK = 0,
    WIRE_E_PEER_CLOSED = -1, /* recv returned 0 */
    WIRE_E_PEER_GONE = -2,   /* reset, broken pipe, or an error/hangup while not reading */
    WIRE_E_RECV = -3,
    WIRE_E_SEND = -4,
    WIRE_E_OVERSIZED = -5, /* a data segment over the MaxRecvDataSegmentLength we declared */
    WIRE_E_HDIGEST = -6,   /* header digest error at ERL 0 */
    WIRE_E_DDIGEST = -7,   /* data digest error at ERL 0 */
    WIRE_E_NOMEM = -8,
    WIRE_E_OWNER = -64,
};

/* A line for the log; NULL for an owner's status the engine does not know. */
const char *wire_status_str(int status);

/* How the engine reaches its owner. ctx is the owner's connection. */
struct wire_ops {
    /* Header (and AHS, header digest) complete: set p->dst/dstcnt to place the data segment,
     * p->discard to swallow it, p->task, p->reject_reason. Otherwise the data segment lands in
     * the engine's buffer and p->data points at it in pdu(). < 0 stops the engine. */
    int (*hdr)(void *ctx, struct iscsi_pdu_in *p);
    /* The PDU is complete (data placed, digests checked). < 0 stops the engine. */
    int (*pdu)(void *ctx, struct iscsi_pdu_in *p);
    /* The engine stopped with `status`: close the connection (which calls wire_close). Called
     * once, never after wire_close. */
    void (*fail)(void *ctx, int status);
    /* Optional: a flush (or wire_take_tx) left the transmit queue empty. */
    void (*drained)(void *ctx);
    /* Optional: the lock the engine's own deferred work (flush, receive resume) runs under,
     * and dropping it around a socket call (released: whether it was dropped). */
    void (*lock)(void *ctx);
    void (*unlock)(void *ctx);
    bool (*io_release)(void *ctx);
    void (*io_retake)(void *ctx, bool released);
};

/* Faults injected on transmit, for the tests and the bench (off by default: all zero). */
struct wire_faults {
    double digest_error; /* fraction of data-carrying PDUs whose data digest is corrupted */
    double drop_pdu;     /* fraction of PDUs dropped (never written, reported as sent) */
    uint64_t drop_ops;   /* opcodes that may be dropped, bit per opcode; 0: any */
    uint64_t seed;       /* the PRNG seed (per connection, so runs repeat) */
};

/* One PDU to send. The owner fills hdr (the BHS; DataSegmentLength and digests are set by
 * wire_send), data/datacnt/dlen (where the data segment lives, not copied), and optionally
 * owned (freed once the PDU is done with), sent and arg. */
struct wire_pdu {
    struct list_node node;
    uint8_t hdr[ISCSI_BHS_LEN + ISCSI_DIGEST_LEN];
    uint32_t hdr_len;
    struct iovec data[WIRE_DATA_IOV_MAX];
    int datacnt;
    uint32_t dlen;
    uint8_t trailer[3 + ISCSI_DIGEST_LEN]; /* pad + data digest */
    uint32_t trailer_len;
    bool dropped; /* fault injection: retired without being written */
    /* The data segment is memory that can vanish (a file LUN's mapping, bs_ops pin_can_fault):
     * the engine reads it (data digest, copy-away) under util/fault_guard. Set by the owner
     * before wire_send; other PDUs are read plainly and never install the SIGBUS handler. */
    bool may_fault;
    uint32_t charge;
    void *owned;
    /* Runs once: ok when the PDU is entirely in the socket, !ok when the connection closed
     * with it still queued. */
    void (*sent)(struct wire_pdu *p, bool ok);
    void *arg;
};

enum wire_rx_state { WRX_BHS, WRX_AHS, WRX_HDIGEST, WRX_DATA, WRX_DDIGEST };

struct wire_stats {
    uint64_t rx_bytes, tx_bytes;
    uint64_t hdigest_errors, ddigest_errors; /* seen at ERL >= 1 (ERL 0 closes) */
    uint64_t injected_digest_errors, injected_drops;
};

struct wire {
    const struct wire_ops *ops;
    void *ctx;
    const char *name; /* the peer, for log lines */

    /* the socket: owned by the engine once attached; the owner's event function gets the
     * epoll events and calls wire_event() */
    int fd;
    struct reactor *r;
    struct reactor_fd rfd;
    reactor_fd_fn event_fn;
    void *event_arg;
    bool registered;
    bool tx_hold;   /* not writable yet (a connect in progress): queue only */
    bool dead;      /* closed: nothing is read or written any more */
    int status;     /* why it stopped (enum wire_status, an owner's, or WIRE_E_OWNER) */
    int fail_errno; /* errno of the socket call that failed, 0 otherwise */

    /* negotiated (RFC 7143 §13): digests and ErrorRecoveryLevel after login, and the data
     * segment limit we declared (8192 until login completes, §13.12) */
    bool hdigest, ddigest;
    uint8_t erl;
    /* At ERL 0, deliver a PDU whose data digest is bad (data_digest_bad) instead of stopping:
     * the initiator discards it and fails only its task (RFC 7143 §7.8 b); the target closes. */
    bool ddigest_deliver;
    uint32_t max_recv_dsl;

    /* receive */
    enum wire_rx_state rx_state;
    uint32_t rx_got;    /* bytes of the current state's part received */
    uint32_t rx_padded; /* data segment + pad */
    uint32_t rx_crc;
    uint8_t rx_digest[ISCSI_DIGEST_LEN];
    bool rx_skip;   /* ERL >= 1 header digest error: skip this PDU's data, deliver nothing */
    bool rx_in_buf; /* the data segment goes to databuf */
    bool rx_large;  /* the last PDU's large payload was placed: read headers alone */
    struct iscsi_pdu_in in; /* the PDU being received */
    uint8_t *rxbuf;
    uint32_t rxbuf_size;
    uint32_t rxbuf_want; /* size the receive buffer grows to at the next read (owner's choice) */
    uint32_t rx_head, rx_tail;
    uint64_t rx_ns;   /* CLOCK_MONOTONIC when the bytes being parsed were read */
    uint8_t *rx_own;  /* rxbuf, while rxbuf is the reactor's scratch for one read (rx_borrow) */
    uint8_t *databuf; /* data segments nobody placed, grown after the length was checked */
    uint32_t databuf_size;
    uint32_t rx_large_min; /* payloads this big switch on header-alone reads (0: never) */
    bool rx_paused;
    bool rx_held; /* by the owner (wire_rx_hold), at a PDU boundary */
    struct reactor_deferred rx_resume_hook;

    /* transmit */
    struct list_node txq;
    uint32_t tx_off; /* bytes of the head PDU already written */
    struct list_node tx_free;
    unsigned tx_free_count;
    struct reactor_deferred flush_hook;
    bool want_write;
    /* Memory held by unsent PDUs (WIRE_PDU_CHARGE each plus what they own); past max_backlog
     * (0: no limit) the engine stops reading until it drains to half. */
    uint64_t tx_backlog;
    uint64_t max_backlog;
    unsigned txq_pdus; /* PDUs queued */
    uint64_t txq_data; /* the bytes of their data segments */
    /* 0 (the default): what a read's parse queues goes out after the parse, in one send.
     * Otherwise, while the reactor had been idle before this read (reactor_was_idle), the
     * queue is also sent part-way through the parse, once it holds this many PDUs and at most
     * WIRE_EARLY_FLUSH_BYTES of data, or sooner, from WIRE_EARLY_FLUSH_MIN_PDUS on, when one
     * more answer of the same size would take it past that (8 answers of 8 KiB, 4 of 16 KiB:
     * larger ones would never go early otherwise). A peer that sends a batch of commands and
     * waits for the answers then starts on the first ones while the rest are being made: two
     * half batches in flight instead of one batch ping-ponging between two CPUs. */
    unsigned tx_early_pdus;

    struct wire_faults faults;
    bool faults_on;
    uint64_t prng;

    struct wire_stats stats;
    /* Where a target's connection counts digest errors too (session, portal; NULL: not). */
    struct iostats_shard *digest_count[2];
};

/* An engine with no socket, login limits, no digests, ERL 0. */
void wire_init(struct wire *w, const struct wire_ops *ops, void *ctx, const char *name);
/* Close (if still open) and release the engine's memory. */
void wire_free(struct wire *w);

/* Take the socket and watch it on r; fn(arg, events) gets the events and calls wire_event. */
int wire_attach(struct wire *w, struct reactor *r, int fd, reactor_fd_fn fn, void *arg);
/* Watch the socket on another reactor (on the thread that owns it now). */
int wire_move(struct wire *w, struct reactor *r);
/* Stop watching, close the socket, drop the transmit queue (sent(p, false)). Idempotent; the
 * engine stays valid (wire_send just drops) until wire_free. */
void wire_close(struct wire *w);
/* The owner's event function passes epoll events here: read, write, notice a hangup. Returns
 * WIRE_OK or the status the engine stopped with. */
int wire_event(struct wire *w, uint32_t events);
/* Read what the socket has (within a per-wake-up budget) and handle every complete PDU. */
int wire_rx(struct wire *w);
/* Ask for EPOLLOUT (a connect in progress) or not. */
void wire_want_write(struct wire *w, bool on);
/* The owner stops reading (on) from the next PDU boundary on, or goes on (off): what was
 * received meanwhile is parsed first. Transmitting goes on throughout. */
void wire_rx_hold(struct wire *w, bool on);
/* The owner stops writing (on): PDUs queue, nothing reaches the socket, reading goes on; or
 * writes again (off), the queue first. A test hook (the torture run's one-direction stalls);
 * not while a connect is in progress, which holds the same way until it completes. */
void wire_tx_hold(struct wire *w, bool on);

/* Negotiated values, after login (RFC 7143 §13.1, §13.12, §13.20). */
void wire_set_digests(struct wire *w, bool header, bool data);
void wire_set_limits(struct wire *w, uint32_t max_recv_dsl, uint32_t rxbuf_size);
void wire_set_faults(struct wire *w, const struct wire_faults *f);

/* A PDU from the pool, BHS zeroed; NULL when memory ran out. */
struct wire_pdu *wire_pdu_get(struct wire *w);
/* Give back a PDU that was never sent. */
void wire_pdu_put(struct wire *w, struct wire_pdu *p);
/* Queue p (digests computed now) and flush it at the end of this loop turn. On a dead engine
 * the PDU is dropped at once: sent(p, false). */
void wire_send(struct wire *w, struct wire_pdu *p);
/* What becomes of a queued PDU whose owner lets go of the memory its data segment points into
 * (a task ended while its data still waited to go out): nothing (not one of those), DROP
 * (retired unsent: sent(p, false)), or COPY (it goes out from a copy: by default one the PDU
 * owns, or, when fn sets *into, dlen bytes at *into that the owner keeps alive for as long as
 * the PDU is queued, e.g. a buffer of the task the PDU holds a reference to). */
enum wire_forget { WIRE_FORGET_NOT, WIRE_FORGET_DROP, WIRE_FORGET_COPY };
/* Each queued PDU to fn (*into NULL on entry), which says what becomes of it. A PDU to drop
 * whose first bytes are written already is copied instead (the byte stream must go on). When
 * memory for a copy runs out, or a may_fault segment faults, the engine closes (wire_close:
 * everything queued is dropped) and -1 is returned; else 0. Afterwards no queued PDU fn named
 * points into the owner's memory. A copy counts in the tx backlog as an owned segment does. */
int wire_forget(struct wire *w, enum wire_forget (*fn)(struct wire_pdu *p, void *arg, void **into),
                void *arg);
/* Write as much of the queue as the socket takes. */
int wire_flush(struct wire *w);
static inline bool wire_tx_empty(const struct wire *w)
{
    return list_empty(&w->txq);
}
/* Unsent PDUs (for logs). */
unsigned wire_tx_count(const struct wire *w);

/* Test seam: bytes in as if recv returned them (an engine with no socket). Returns how many
 * were taken: fewer when the engine stopped (see wire_status) or paused reading because its
 * replies are not being taken. */
size_t wire_feed(struct wire *w, const void *bytes, size_t len);
/* WIRE_OK while the engine runs, else the status it stopped with (WIRE_E_OWNER: the owner
 * closed it). */
int wire_status(const struct wire *w);
/* Test seam: take up to cap bytes of the transmit queue as the socket would (a PDU may be
 * split across calls), running sent(p, true) for each PDU taken whole and the drained op once
 * the queue is empty. Returns the byte count. */
size_t wire_take_tx(struct wire *w, void *buf, size_t cap);

/* The PDU being received, while its data segment is still arriving (NULL otherwise): the
 * owner uses it to stop placing data into a task it frees. */
struct iscsi_pdu_in *wire_rx_current(struct wire *w);

#endif
