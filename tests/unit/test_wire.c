/* The wire engine without a side: bytes fed in (split at every boundary, several PDUs at once,
 * AHS, digests good and bad at ERL 0 and 1, oversized segments, direct placement, discard),
 * the transmit queue taken out (gathering, pad, digests), fault injection, a socketpair run
 * through recv/readv/sendmsg, and two connections sharing their reactor's receive buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "iscsi/wire.h"
#include "reactor/reactor.h"
#include "util/crc32c.h"

/* ---- a recording owner ---- */

#define MAX_SEEN 64

struct seen {
    uint8_t op;
    uint32_t itt, dlen;
    bool placed, dd_bad;
    uint8_t data[300];
};

struct owner {
    struct wire w;
    int hdrs, pdus, fails, last_fail;
    struct seen seen[MAX_SEEN];
    /* header-phase choice: place into dst, or discard */
    struct iovec dst[2];
    int dstcnt;
    bool discard;
    int sent_ok, sent_fail;
    int pause_at; /* > 0: after that many PDUs, queue a reply past a backlog limit of 1 */
    /* > 0: answer every PDU with a Data-In of this many bytes, after noting how many answers
     * were still queued (unsent) when it arrived */
    uint32_t answer_len;
    unsigned queued_at[MAX_SEEN];
};

static void answer(struct owner *o, uint32_t itt);

static void pause_reply(struct owner *o);

static int own_hdr(void *ctx, struct iscsi_pdu_in *p)
{
    struct owner *o = ctx;
    o->hdrs++;
    if (o->dstcnt) {
        memcpy(p->dst, o->dst, sizeof(o->dst));
        p->dstcnt = o->dstcnt;
    }
    p->discard = o->discard;
    return WIRE_OK;
}

static int own_pdu(void *ctx, struct iscsi_pdu_in *p)
{
    struct owner *o = ctx;
    assert_true(o->pdus < MAX_SEEN);
    struct seen *s = &o->seen[o->pdus++];
    s->op = bhs_opcode(&p->bhs);
    s->itt = bhs_get32(&p->bhs, BHS_ITT);
    s->dlen = p->dlen;
    s->dd_bad = p->data_digest_bad;
    s->placed = p->data == NULL;
    if (p->data)
        memcpy(s->data, p->data, p->dlen < sizeof(s->data) ? p->dlen : sizeof(s->data));
    if (o->pdus == o->pause_at) {
        o->w.max_backlog = 1;
        pause_reply(o);
    }
    if (o->answer_len) {
        o->queued_at[o->pdus - 1] = wire_tx_count(&o->w);
        answer(o, s->itt);
    }
    return WIRE_OK;
}

static void own_fail(void *ctx, int status)
{
    struct owner *o = ctx;
    o->fails++;
    o->last_fail = status;
    wire_close(&o->w);
}

static const struct wire_ops own_ops = {.hdr = own_hdr, .pdu = own_pdu, .fail = own_fail};

static void owner_init(struct owner *o, bool hd, bool dd, uint8_t erl)
{
    memset(o, 0, sizeof(*o));
    wire_init(&o->w, &own_ops, o, "test");
    wire_set_digests(&o->w, hd, dd);
    wire_set_limits(&o->w, 65536, 0);
    o->w.erl = erl;
}

/* Feed everything; WIRE_OK, or the status the engine stopped with. */
static int feed(struct owner *o, const void *b, size_t n)
{
    size_t used = wire_feed(&o->w, b, n);
    if (o->w.dead)
        return wire_status(&o->w);
    assert_int_equal(used, n);
    return WIRE_OK;
}

/* ---- building PDUs as a peer would ---- */

struct stream {
    uint8_t b[8192];
    size_t len;
};

static size_t put_pdu(struct stream *s, enum iscsi_opcode op, uint32_t itt, uint32_t ahs_words,
                      const void *data, uint32_t dlen, bool hd, bool dd)
{
    size_t start = s->len;
    uint8_t *h = s->b + s->len;
    memset(h, 0, ISCSI_BHS_LEN);
    h[0] = (uint8_t)op;
    h[1] = ISCSI_FLAG_FINAL;
    h[BHS_TOTAL_AHS_LEN] = (uint8_t)ahs_words;
    put_be24(h + BHS_DATA_SEG_LEN, dlen);
    put_be32(h + BHS_ITT, itt);
    s->len += ISCSI_BHS_LEN;
    for (uint32_t i = 0; i < ahs_words * 4; i++)
        s->b[s->len++] = (uint8_t)(0xa0 + i);
    if (hd) {
        put_le32(s->b + s->len, crc32c(h, ISCSI_BHS_LEN + ahs_words * 4));
        s->len += 4;
    }
    if (dlen) {
        uint8_t *d = s->b + s->len;
        memcpy(d, data, dlen);
        memset(d + dlen, 0, ISCSI_PAD(dlen) - dlen);
        s->len += ISCSI_PAD(dlen);
        if (dd) {
            put_le32(s->b + s->len, crc32c(d, ISCSI_PAD(dlen)));
            s->len += 4;
        }
    }
    return start;
}

static const char text5[] = "hello";

/* Three PDUs: no data; 5 bytes (3 of pad); 2 words of AHS and 200 bytes. */
static void three_pdus(struct stream *s, uint8_t *big, bool hd, bool dd)
{
    for (int i = 0; i < 200; i++)
        big[i] = (uint8_t)(i * 7 + 1);
    s->len = 0;
    put_pdu(s, ISCSI_OP_NOP_IN, 1, 0, NULL, 0, hd, dd);
    put_pdu(s, ISCSI_OP_TEXT_RSP, 2, 0, text5, 5, hd, dd);
    put_pdu(s, ISCSI_OP_SCSI_RSP, 3, 2, big, 200, hd, dd);
}

static void check_three(const struct owner *o, const uint8_t *big)
{
    assert_int_equal(o->fails, 0);
    assert_int_equal(o->pdus, 3);
    assert_int_equal(o->seen[0].op, ISCSI_OP_NOP_IN);
    assert_int_equal(o->seen[0].dlen, 0);
    assert_int_equal(o->seen[1].itt, 2);
    assert_int_equal(o->seen[1].dlen, 5);
    assert_memory_equal(o->seen[1].data, text5, 5);
    assert_int_equal(o->seen[2].op, ISCSI_OP_SCSI_RSP);
    assert_int_equal(o->seen[2].dlen, 200);
    assert_memory_equal(o->seen[2].data, big, 200);
}

/* ---- receive ---- */

static void test_split_everywhere(void **state)
{
    (void)state;
    static struct stream s;
    uint8_t big[200];
    for (int mode = 0; mode < 4; mode++) {
        bool hd = mode & 1, dd = mode & 2;
        three_pdus(&s, big, hd, dd);
        for (size_t cut = 0; cut <= s.len; cut++) {
            struct owner o;
            owner_init(&o, hd, dd, 0);
            assert_int_equal(feed(&o, s.b, cut), WIRE_OK);
            assert_int_equal(feed(&o, s.b + cut, s.len - cut), WIRE_OK);
            check_three(&o, big);
            wire_free(&o.w);
        }
        /* and one byte at a time */
        struct owner o;
        owner_init(&o, hd, dd, 0);
        for (size_t i = 0; i < s.len; i++)
            assert_int_equal(feed(&o, s.b + i, 1), WIRE_OK);
        check_three(&o, big);
        assert_int_equal(o.w.stats.rx_bytes, s.len);
        wire_free(&o.w);
    }
}

static void test_header_digest_error(void **state)
{
    (void)state;
    static struct stream s;
    uint8_t big[200];
    three_pdus(&s, big, true, true);
    /* damage the second PDU's header digest: its first byte follows BHS+digest of PDU 1 */
    size_t second = ISCSI_BHS_LEN + 4;
    s.b[second + ISCSI_BHS_LEN] ^= 0x40;

    /* ERL 0: the connection ends (RFC 7143 §7.8) */
    struct owner o;
    owner_init(&o, true, true, 0);
    assert_int_equal(feed(&o, s.b, s.len), WIRE_E_HDIGEST);
    assert_int_equal(o.fails, 1);
    assert_int_equal(o.last_fail, WIRE_E_HDIGEST);
    assert_int_equal(o.pdus, 1);
    assert_true(o.w.dead);
    wire_free(&o.w);

    /* ERL 1: that PDU is dropped silently, its data skipped by its length, the next arrives */
    owner_init(&o, true, true, 1);
    assert_int_equal(feed(&o, s.b, s.len), WIRE_OK);
    assert_int_equal(o.fails, 0);
    assert_int_equal(o.pdus, 2);
    assert_int_equal(o.hdrs, 2);
    assert_int_equal(o.seen[0].itt, 1);
    assert_int_equal(o.seen[1].itt, 3);
    assert_memory_equal(o.seen[1].data, big, 200);
    assert_int_equal(o.w.stats.hdigest_errors, 1);
    wire_free(&o.w);
}

static void test_data_digest_error(void **state)
{
    (void)state;
    static struct stream s;
    uint8_t big[200];
    three_pdus(&s, big, true, true);
    s.b[s.len - 1] ^= 0x01; /* the last PDU's data digest */

    struct owner o;
    owner_init(&o, true, true, 0);
    assert_int_equal(feed(&o, s.b, s.len), WIRE_E_DDIGEST);
    assert_int_equal(o.last_fail, WIRE_E_DDIGEST);
    assert_int_equal(o.pdus, 2);
    wire_free(&o.w);

    /* ERL 0 on an initiator: delivered marked, it fails only that task (§7.8 b) */
    owner_init(&o, true, true, 0);
    o.w.ddigest_deliver = true;
    assert_int_equal(feed(&o, s.b, s.len), WIRE_OK);
    assert_int_equal(o.pdus, 3);
    assert_true(o.seen[2].dd_bad);
    wire_free(&o.w);

    /* ERL 1: delivered, marked, for the side to Reject (reason 0x02) and recover */
    owner_init(&o, true, true, 1);
    assert_int_equal(feed(&o, s.b, s.len), WIRE_OK);
    assert_int_equal(o.pdus, 3);
    assert_false(o.seen[1].dd_bad);
    assert_true(o.seen[2].dd_bad);
    assert_int_equal(o.w.stats.ddigest_errors, 1);
    /* the engine carries on with the next PDU */
    struct stream t = {.len = 0};
    put_pdu(&t, ISCSI_OP_TEXT_RSP, 9, 0, text5, 5, true, true);
    assert_int_equal(feed(&o, t.b, t.len), WIRE_OK);
    assert_int_equal(o.pdus, 4);
    assert_false(o.seen[3].dd_bad);
    wire_free(&o.w);
}

/* The segment length is checked before anything is allocated or read for it (§13.12). */
static void test_oversized_refused_before_allocation(void **state)
{
    (void)state;
    struct owner o;
    owner_init(&o, false, false, 0);
    wire_set_limits(&o.w, WIRE_LOGIN_DSL, 0); /* login: 8192 */
    uint8_t h[ISCSI_BHS_LEN] = {ISCSI_OP_LOGIN_RSP};
    put_be24(h + BHS_DATA_SEG_LEN, WIRE_LOGIN_DSL + 1);
    assert_int_equal(feed(&o, h, sizeof(h)), WIRE_E_OVERSIZED);
    assert_int_equal(o.hdrs, 0);
    assert_null(o.w.databuf);
    assert_int_equal(o.w.databuf_size, 0);
    wire_free(&o.w);

    /* within the limit: the buffer grows once, to the limit */
    owner_init(&o, false, false, 0);
    wire_set_limits(&o.w, WIRE_LOGIN_DSL, 0);
    static struct stream s;
    uint8_t d[100] = {0};
    s.len = 0;
    put_pdu(&s, ISCSI_OP_LOGIN_RSP, 1, 0, d, 100, false, false);
    assert_int_equal(feed(&o, s.b, s.len), WIRE_OK);
    assert_int_equal(o.w.databuf_size, WIRE_LOGIN_DSL);
    wire_free(&o.w);

    /* ERL 1: a damaged header is skipped by its length only if the length is within bounds */
    owner_init(&o, true, false, 1);
    wire_set_limits(&o.w, 4096, 0);
    memset(h, 0, sizeof(h));
    h[0] = ISCSI_OP_DATA_IN;
    put_be24(h + BHS_DATA_SEG_LEN, 1u << 20);
    assert_int_equal(feed(&o, h, sizeof(h)), WIRE_E_OVERSIZED);
    assert_null(o.w.databuf);
    wire_free(&o.w);
}

/* Direct placement: the data lands in the owner's two pieces, the pad and digest after it
 * go nowhere near them. */
static void test_direct_placement(void **state)
{
    (void)state;
    static struct stream s;
    uint8_t data[203];
    for (int i = 0; i < 203; i++)
        data[i] = (uint8_t)(i ^ 0x5a);
    s.len = 0;
    put_pdu(&s, ISCSI_OP_DATA_IN, 7, 0, data, 203, true, true);
    put_pdu(&s, ISCSI_OP_NOP_IN, 8, 0, NULL, 0, true, true);
    for (size_t cut = 0; cut <= s.len; cut++) {
        uint8_t a[100 + 8], b[103 + 8];
        memset(a, 0xee, sizeof(a));
        memset(b, 0xee, sizeof(b));
        struct owner o;
        owner_init(&o, true, true, 0);
        o.dst[0] = (struct iovec){a, 100};
        o.dst[1] = (struct iovec){b, 103};
        o.dstcnt = 2;
        assert_int_equal(feed(&o, s.b, cut), WIRE_OK);
        assert_int_equal(feed(&o, s.b + cut, s.len - cut), WIRE_OK);
        assert_int_equal(o.pdus, 2);
        assert_true(o.seen[0].placed);
        assert_memory_equal(a, data, 100);
        assert_memory_equal(b, data + 100, 103);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(a[100 + i], 0xee);
            assert_int_equal(b[103 + i], 0xee);
        }
        assert_null(o.w.databuf); /* nothing went through the engine's buffer */
        wire_free(&o.w);
    }
}

static void test_discard(void **state)
{
    (void)state;
    static struct stream s;
    uint8_t big[200];
    three_pdus(&s, big, false, true);
    struct owner o;
    owner_init(&o, false, true, 0);
    o.discard = true;
    assert_int_equal(feed(&o, s.b, s.len), WIRE_OK);
    assert_int_equal(o.pdus, 3);
    assert_true(o.seen[1].placed && o.seen[2].placed); /* no data handed over */
    assert_null(o.w.databuf);
    wire_free(&o.w);
}

/* ---- transmit ---- */

static void on_sent(struct wire_pdu *p, bool ok)
{
    struct owner *o = p->arg;
    if (ok)
        o->sent_ok++;
    else
        o->sent_fail++;
}

static void queue(struct owner *o, enum iscsi_opcode op, uint32_t itt, const struct iovec *iov,
                  int n)
{
    struct wire_pdu *p = wire_pdu_get(&o->w);
    assert_non_null(p);
    bhs_init((struct iscsi_bhs *)p->hdr, op, ISCSI_FLAG_FINAL);
    bhs_put32((struct iscsi_bhs *)p->hdr, BHS_ITT, itt);
    p->dlen = 0;
    for (int i = 0; i < n; i++) {
        p->data[i] = iov[i];
        p->dlen += (uint32_t)iov[i].iov_len;
    }
    p->datacnt = n;
    p->sent = on_sent;
    p->arg = o;
    wire_send(&o->w, p);
}

static void pause_reply(struct owner *o)
{
    queue(o, ISCSI_OP_NOP_IN, 0xffffffffu, NULL, 0);
}

static void answer(struct owner *o, uint32_t itt)
{
    static uint8_t payload[32 * 1024];
    assert_true(o->answer_len <= sizeof(payload));
    struct iovec iov = {payload, o->answer_len};
    queue(o, ISCSI_OP_DATA_IN, itt, &iov, 1);
}

static void test_tx_gather_and_digests(void **state)
{
    (void)state;
    struct owner tx;
    owner_init(&tx, true, true, 0);
    uint8_t d1[] = "abc", d2[] = "defgh", d3[] = "ij";
    struct iovec iov[3] = {{d1, 3}, {d2, 5}, {d3, 2}};
    queue(&tx, ISCSI_OP_DATA_IN, 1, iov, 3); /* 10 bytes: 2 of pad */
    queue(&tx, ISCSI_OP_NOP_IN, 2, NULL, 0);
    assert_int_equal(wire_tx_count(&tx.w), 2);
    assert_int_equal(tx.w.tx_backlog, 2 * WIRE_PDU_CHARGE);
    static uint8_t out[4096];
    size_t n = wire_take_tx(&tx.w, out, sizeof(out));
    assert_int_equal(n, (48 + 4 + 12 + 4) + (48 + 4));
    assert_int_equal(tx.sent_ok, 2);
    assert_int_equal(tx.w.tx_backlog, 0);
    assert_true(wire_tx_empty(&tx.w));
    /* the bytes, as the RFC lays them out */
    assert_int_equal(get_be24(out + BHS_DATA_SEG_LEN), 10);
    assert_int_equal(get_le32(out + 48), crc32c(out, 48)); /* LSB first (§12.1) */
    assert_memory_equal(out + 52, "abcdefghij\0\0", 12);
    assert_int_equal(get_le32(out + 64), crc32c(out + 52, 12));
    /* ... and another engine reads them back */
    struct owner rx;
    owner_init(&rx, true, true, 0);
    assert_int_equal(feed(&rx, out, n), WIRE_OK);
    assert_int_equal(rx.pdus, 2);
    assert_memory_equal(rx.seen[0].data, "abcdefghij", 10);
    assert_int_equal(rx.seen[1].itt, 2);
    wire_free(&rx.w);
    /* a closed engine drops what is queued, and what is sent after */
    queue(&tx, ISCSI_OP_NOP_IN, 3, NULL, 0);
    wire_close(&tx.w);
    assert_int_equal(tx.sent_fail, 1);
    queue(&tx, ISCSI_OP_NOP_IN, 4, NULL, 0);
    assert_int_equal(tx.sent_fail, 2);
    wire_free(&tx.w);
}

/* wire_forget: what fn names DROP leaves the queue unsent (sent(p, false)), but for a PDU
 * whose first bytes are written already, which goes on from a copy like the COPY ones: the
 * owner's memory may change at once, and the stream stays whole. ITT 10 is copied into memory
 * the owner names (*into), which it keeps until the PDU is sent. */
static uint8_t forget_into[64];

static enum wire_forget forget_itt7(struct wire_pdu *p, void *arg, void **into)
{
    (void)arg;
    uint32_t itt = get_be32(p->hdr + BHS_ITT);
    if (itt == 10)
        *into = forget_into;
    return itt == 7 ? WIRE_FORGET_DROP : itt == 8 || itt == 10 ? WIRE_FORGET_COPY : WIRE_FORGET_NOT;
}

static void test_forget(void **state)
{
    (void)state;
    struct owner tx;
    owner_init(&tx, false, true, 0);
    static uint8_t mem[4][64];
    for (int i = 0; i < 4; i++)
        memset(mem[i], 'a' + i, sizeof(mem[i]));
    struct iovec iov[4] = {{mem[0], 64}, {mem[1], 64}, {mem[2], 64}, {mem[3], 64}};
    queue(&tx, ISCSI_OP_DATA_OUT, 7, &iov[0], 1); /* partly written below */
    queue(&tx, ISCSI_OP_DATA_OUT, 7, &iov[1], 1); /* dropped */
    queue(&tx, ISCSI_OP_SCSI_CMD, 8, &iov[2], 1); /* copied */
    queue(&tx, ISCSI_OP_NOP_OUT, 9, NULL, 0);     /* not named */
    queue(&tx, ISCSI_OP_DATA_IN, 10, &iov[3], 1); /* copied into forget_into */
    uint64_t backlog = tx.w.tx_backlog;
    static uint8_t out[4096];
    size_t n = wire_take_tx(&tx.w, out, 60); /* the first PDU's header and 12 bytes of data */
    assert_int_equal(n, 60);
    assert_int_equal(wire_forget(&tx.w, forget_itt7, NULL), 0);
    assert_int_equal(tx.sent_fail, 1);
    assert_int_equal(wire_tx_count(&tx.w), 4);
    /* the dropped one's charge left; the three copies count as owned segments do */
    assert_int_equal(tx.w.tx_backlog, backlog - WIRE_PDU_CHARGE + 3 * 64);
    memset(mem, 'z', sizeof(mem)); /* the owner's memory is its own again */
    static const uint8_t d[64] = {[0 ... 63] = 'd'};
    assert_memory_equal(forget_into, d, 64);
    n += wire_take_tx(&tx.w, out + n, sizeof(out) - n);
    assert_int_equal(tx.sent_ok, 4);
    assert_int_equal(tx.w.tx_backlog, 0);
    struct owner rx;
    owner_init(&rx, false, true, 0);
    assert_int_equal(feed(&rx, out, n), WIRE_OK);
    assert_int_equal(rx.pdus, 4);
    static const uint8_t a[64] = {[0 ... 63] = 'a'}, c[64] = {[0 ... 63] = 'c'};
    assert_int_equal(rx.seen[0].itt, 7);
    assert_memory_equal(rx.seen[0].data, a, 64); /* whole, digest right (checked by rx) */
    assert_int_equal(rx.seen[1].itt, 8);
    assert_memory_equal(rx.seen[1].data, c, 64);
    assert_int_equal(rx.seen[2].itt, 9);
    assert_int_equal(rx.seen[3].itt, 10);
    assert_memory_equal(rx.seen[3].data, d, 64);
    wire_free(&rx.w);
    wire_free(&tx.w);
}

/* ---- fault injection ---- */

static void test_faults(void **state)
{
    (void)state;
    uint8_t d[16] = "0123456789abcdef";
    struct iovec iov = {d, 16};
    /* every data digest corrupted: an ERL 1 receiver sees each one, headers stay good */
    struct owner tx, rx;
    owner_init(&tx, true, true, 1);
    struct wire_faults f = {.digest_error = 1.0, .seed = 42};
    wire_set_faults(&tx.w, &f);
    for (uint32_t i = 0; i < 10; i++)
        queue(&tx, ISCSI_OP_DATA_IN, i, &iov, 1);
    queue(&tx, ISCSI_OP_NOP_IN, 99, NULL, 0);
    static uint8_t out[8192];
    size_t n = wire_take_tx(&tx.w, out, sizeof(out));
    owner_init(&rx, true, true, 1);
    assert_int_equal(feed(&rx, out, n), WIRE_OK);
    assert_int_equal(rx.pdus, 11);
    for (int i = 0; i < 10; i++)
        assert_true(rx.seen[i].dd_bad);
    assert_false(rx.seen[10].dd_bad);
    assert_int_equal(tx.w.stats.injected_digest_errors, 10);
    wire_free(&tx.w);
    wire_free(&rx.w);

    /* half the Data-In dropped, nothing else; the same seed drops the same ones */
    uint32_t pattern[2][40];
    int got[2];
    for (int run = 0; run < 2; run++) {
        owner_init(&tx, false, false, 0);
        struct wire_faults g = {.drop_pdu = 0.5, .drop_ops = 1ull << ISCSI_OP_DATA_IN, .seed = 7};
        wire_set_faults(&tx.w, &g);
        for (uint32_t i = 0; i < 40; i++)
            queue(&tx, i & 1 ? ISCSI_OP_NOP_IN : ISCSI_OP_DATA_IN, i, &iov, 1);
        n = wire_take_tx(&tx.w, out, sizeof(out));
        assert_int_equal(tx.sent_ok, 40); /* dropped ones count as sent: lost on the wire */
        owner_init(&rx, false, false, 0);
        assert_int_equal(feed(&rx, out, n), WIRE_OK);
        got[run] = rx.pdus;
        for (int i = 0; i < rx.pdus; i++)
            pattern[run][i] = rx.seen[i].itt;
        int nops = 0;
        for (int i = 0; i < rx.pdus; i++)
            nops += rx.seen[i].op == ISCSI_OP_NOP_IN;
        assert_int_equal(nops, 20);
        assert_true(rx.pdus > 20 && rx.pdus < 40);
        assert_int_equal(tx.w.stats.injected_drops, 40 - (uint64_t)rx.pdus);
        wire_free(&tx.w);
        wire_free(&rx.w);
    }
    assert_int_equal(got[0], got[1]);
    assert_memory_equal(pattern[0], pattern[1], (size_t)got[0] * sizeof(uint32_t));
}

/* ---- through a socket: recv, readv straight into the destination, sendmsg ---- */

static void test_socketpair_direct(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    enum { N = 6, LEN = 65536 + 12 };
    static uint8_t src[LEN], dst[LEN];
    for (int i = 0; i < LEN; i++)
        src[i] = (uint8_t)(i * 13 + i / 256);
    struct owner tx, rx;
    owner_init(&tx, true, true, 0);
    owner_init(&rx, true, true, 0);
    wire_set_limits(&rx.w, 1u << 20, 256 * 1024);
    rx.w.rx_large_min = 32 * 1024;
    tx.w.fd = sv[0];
    rx.w.fd = sv[1];
    rx.dst[0] = (struct iovec){dst, LEN};
    rx.dstcnt = 1;
    struct iovec iov[2] = {{src, 1000}, {src + 1000, LEN - 1000}};
    for (uint32_t i = 0; i < N; i++)
        queue(&tx, ISCSI_OP_DATA_IN, i, iov, 2);
    for (int spins = 0; spins < 10000 && rx.pdus < N; spins++) {
        assert_true(wire_flush(&tx.w) == WIRE_OK);
        assert_int_equal(wire_rx(&rx.w), WIRE_OK);
    }
    assert_int_equal(rx.pdus, N);
    assert_int_equal(rx.fails, 0);
    assert_int_equal(tx.sent_ok, N);
    assert_true(rx.seen[N - 1].placed);
    assert_memory_equal(dst, src, LEN);
    assert_null(rx.w.databuf);
    /* the peer closing is the engine's status, reported once */
    wire_free(&tx.w);
    assert_int_equal(wire_rx(&rx.w), WIRE_E_PEER_CLOSED);
    assert_int_equal(rx.fails, 1);
    wire_free(&rx.w);
}

/* ---- two connections on one reactor: reads go through its shared scratch buffer ---- */

static void on_rx_event(void *arg, uint32_t events)
{
    struct owner *o = arg;
    (void)wire_event(&o->w, events);
}

/* Connection A reads straight through; B stops reading after its third PDU (its reply is over
 * the backlog limit) with the rest of a read still unparsed, which has to survive the shared
 * buffer being used by A meanwhile, and is parsed when B's reply has drained. */
static void test_shared_rx_scratch(void **state)
{
    (void)state;
    enum { N = 16, LEN = 256 };
    struct reactor *r = reactor_create(0);
    assert_non_null(r);
    static struct owner tx[2], rx[2];
    int sv[2][2];
    for (int c = 0; c < 2; c++) {
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv[c]), 0);
        owner_init(&tx[c], false, true, 0);
        owner_init(&rx[c], false, true, 0);
        wire_set_limits(&rx[c].w, 65536, 64 * 1024);
        tx[c].w.fd = sv[c][0];
        assert_int_equal(wire_attach(&rx[c].w, r, sv[c][1], on_rx_event, &rx[c]), 0);
    }
    rx[1].pause_at = 3;
    static uint8_t data[2][N][LEN];
    for (int c = 0; c < 2; c++) {
        for (uint32_t i = 0; i < N; i++) {
            for (int b = 0; b < LEN; b++)
                data[c][i][b] = (uint8_t)(c * 101 + i * 7 + b);
            struct iovec iov = {data[c][i], LEN};
            queue(&tx[c], ISCSI_OP_TEXT_RSP, i, &iov, 1);
        }
        assert_int_equal(wire_flush(&tx[c].w), WIRE_OK); /* all of it in one read's reach */
    }
    for (int turns = 0; turns < 1000 && (rx[0].pdus < N || rx[1].pdus < N); turns++)
        reactor_poll(r);
    for (int c = 0; c < 2; c++) {
        assert_int_equal(rx[c].fails, 0);
        assert_int_equal(rx[c].pdus, N);
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(rx[c].seen[i].itt, i);
            assert_int_equal(rx[c].seen[i].dlen, LEN);
            assert_memory_equal(rx[c].seen[i].data, data[c][i], LEN);
        }
    }
    assert_int_equal(rx[1].sent_ok, 1); /* B's reply went out, so B had resumed */
    assert_false(reactor_scratch(r)->busy);
    for (int c = 0; c < 2; c++) {
        wire_free(&tx[c].w);
        wire_free(&rx[c].w);
    }
    reactor_destroy(r);
}

/* The most answers ever found queued when a command arrived, over PDUs [from, to). */
static unsigned most_queued(const struct owner *o, int from, int to)
{
    unsigned most = 0;
    for (int i = from; i < to; i++)
        most = o->queued_at[i] > most ? o->queued_at[i] : most;
    return most;
}

/* `batches` of N commands, each batch in one read and the next sent only after a reactor turn
 * (the reactor is idle before the first batch only); each command answered as it is parsed,
 * the answers read back in order at the other end. early: the engine's tx_early_pdus. */
static void early_flush_run(unsigned early, uint32_t answer_len, int batches, struct owner *rx)
{
    enum { N = 10 };
    struct reactor *r = reactor_create(0);
    assert_non_null(r);
    static struct owner tx;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    owner_init(&tx, false, false, 0);
    owner_init(rx, false, false, 0);
    rx->answer_len = answer_len;
    rx->w.tx_early_pdus = early;
    tx.w.fd = sv[0];
    assert_int_equal(wire_attach(&rx->w, r, sv[1], on_rx_event, rx), 0);
    static uint8_t back[1 << 20];
    size_t got = 0;
    ssize_t k;
    for (int b = 0; b < batches; b++) {
        for (uint32_t i = 0; i < N; i++)
            queue(&tx, ISCSI_OP_NOP_OUT, (uint32_t)b * N + i, NULL, 0);
        assert_int_equal(wire_flush(&tx.w), WIRE_OK); /* one read's worth */
        reactor_poll(r);
        assert_int_equal(rx->pdus, (b + 1) * N);
    }
    for (int turns = 0; turns < 1000 && (rx->sent_ok < batches * N || got == 0); turns++) {
        reactor_poll(r); /* what did not fit in the socket goes on EPOLLOUT */
        while ((k = recv(sv[0], back + got, sizeof(back) - got, 0)) > 0)
            got += (size_t)k;
    }
    assert_int_equal(rx->sent_ok, batches * N);
    while ((k = recv(sv[0], back + got, sizeof(back) - got, 0)) > 0)
        got += (size_t)k;
    /* every answer arrives, whole and in order */
    size_t pdu = ISCSI_BHS_LEN + ISCSI_PAD(answer_len);
    assert_int_equal(got, (size_t)batches * N * pdu);
    for (int i = 0; i < batches * N; i++) {
        assert_int_equal(back[i * pdu] & ISCSI_OPCODE_MASK, ISCSI_OP_DATA_IN);
        assert_int_equal(get_be32(back + i * pdu + BHS_ITT), (uint32_t)i);
    }
    wire_free(&tx.w);
    wire_free(&rx->w);
    reactor_destroy(r);
}

static void test_early_flush(void **state)
{
    (void)state;
    static struct owner rx;
    /* off: all ten answers wait for the end of the parse */
    early_flush_run(0, 512, 1, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 9);
    /* on, the reactor idle before the read: sent after every fourth */
    early_flush_run(4, 512, 1, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 3);
    assert_int_equal(rx.queued_at[4], 0);
    /* answers holding more data than WIRE_EARLY_FLUSH_BYTES by the fourth: one send */
    early_flush_run(4, 20 * 1024, 1, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 9);
    /* 16 KiB answers with the count set past the batch: sent once a fifth would take them past
     * WIRE_EARLY_FLUSH_BYTES (four, 64 KiB), after every fourth; 512-byte ones wait */
    early_flush_run(12, 16 * 1024, 1, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 3);
    assert_int_equal(rx.queued_at[4], 0);
    early_flush_run(12, 512, 1, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 9);
    /* a second batch read right after a busy turn: the reactor was not idle, one send */
    early_flush_run(4, 512, 2, &rx);
    assert_int_equal(most_queued(&rx, 0, 10), 3);
    assert_int_equal(most_queued(&rx, 10, 20), 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_everywhere),
        cmocka_unit_test(test_header_digest_error),
        cmocka_unit_test(test_data_digest_error),
        cmocka_unit_test(test_oversized_refused_before_allocation),
        cmocka_unit_test(test_direct_placement),
        cmocka_unit_test(test_discard),
        cmocka_unit_test(test_tx_gather_and_digests),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_socketpair_direct),
        cmocka_unit_test(test_shared_rx_scratch),
        cmocka_unit_test(test_early_flush),
        cmocka_unit_test(test_forget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
