/* Unit tests for CHAP (RFC 7143 §12.1.3, RFC 1994): the digests against vectors computed
 * independently with Python's hashlib, the binary encodings of §6.1 (hex, base64, bounds),
 * CHAP_A choice, and the target's exchange (iscsi/auth.c) through the negotiation engine:
 * one-way, mutual, wrong user, wrong secret, malformed keys, reflection and replay of the
 * initiator's challenge, keys out of order, and the failure back-off; and the initiator
 * library's login state machine (src/initiator/login.c) against that target engine in memory:
 * one-way, mutual, algorithm choice, and each side refusing the other. No sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "initiator/ini.h"
#include "iscsi/auth.h"
#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "util/log.h"

/* ---- vectors ---- */

static void hex2bin(const char *hex, uint8_t *out)
{
    for (size_t i = 0; hex[2 * i]; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

/* python3: hashlib.new(alg, bytes([id]) + b"linerate-secret-16" + bytes(range(0x10, 0x30))) */
static void test_vectors(void **state)
{
    (void)state;
    static const struct {
        int alg;
        uint8_t id;
        const char *hex;
    } v[] = {
        {CHAP_ALG_MD5, 0, "7fd6a5cd750ec4603d5dbfad70500351"},
        {CHAP_ALG_MD5, 1, "164ff645b62a94aa709a9d36e413ce41"},
        {CHAP_ALG_MD5, 0xab, "a4e36086ad3208e0a3bee36841c7aafb"},
        {CHAP_ALG_SHA256, 0, "ef95cc9785297e89024617df1daa2a54a200af70dbaf050ced25da306a3b447a"},
        {CHAP_ALG_SHA256, 1, "db5add6be01003b80a4257bd05f4838d73b71d5d5aebfa1b5e4ac2a815ff6910"},
        {CHAP_ALG_SHA256, 0xab, "1b9a7b0e5537ff3dbea87ab5c143f0a43165f62c35cc6e15f95dcc659fdf38c7"},
        {CHAP_ALG_SHA3_256, 0, "57fe72e5770d61eb275c63dab11915085c40248130954eff1472ca2768a989b1"},
        {CHAP_ALG_SHA3_256, 1, "90f967f4d10e480626aaede81371e0e5fca8001d539b4bc6c6f47cdeba8a88e3"},
        {CHAP_ALG_SHA3_256, 0xab,
         "106d006ec054f7140b36fdd138353113b463c3842c25a36bd5cf551689906528"},
    };
    const char *secret = "linerate-secret-16";
    uint8_t chal[32];
    for (int i = 0; i < 32; i++)
        chal[i] = (uint8_t)(0x10 + i);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t want[32], got[32];
        size_t n = strlen(v[i].hex) / 2;
        hex2bin(v[i].hex, want);
        assert_int_equal(chap_digest_len(v[i].alg), n);
        assert_int_equal(chap_response(v[i].alg, v[i].id, (const uint8_t *)secret, strlen(secret),
                                       chal, sizeof(chal), got),
                         (int)n);
        assert_memory_equal(got, want, n);
    }
    /* python3: hashlib.md5(bytes([1]) + b"password1234" + bytes(16)) */
    uint8_t want[16], got[16], zero[16] = {0};
    hex2bin("1426a094841cc6c63a2157e8bd42f329", want);
    assert_int_equal(
        chap_response(CHAP_ALG_MD5, 1, (const uint8_t *)"password1234", 12, zero, 16, got), 16);
    assert_memory_equal(got, want, 16);
    assert_int_equal(chap_response(6, 1, zero, 1, zero, 1, got), -1); /* SHA-1: not offered */
}

/* ---- encodings ---- */

static void test_decode(void **state)
{
    (void)state;
    uint8_t b[64], chal[32];
    for (int i = 0; i < 32; i++)
        chal[i] = (uint8_t)(0x10 + i);
    /* hex, both cases, odd digit count with an implied leading zero (§6.1) */
    assert_int_equal(chap_decode("0x0aFf", b, sizeof(b)), 2);
    assert_int_equal(b[0], 0x0a);
    assert_int_equal(b[1], 0xff);
    assert_int_equal(chap_decode("0Xabc", b, sizeof(b)), 2);
    assert_int_equal(b[0], 0x0a);
    assert_int_equal(b[1], 0xbc);
    /* base64 (python3: base64.b64encode(bytes(range(0x10, 0x30)))) with and without padding */
    assert_int_equal(chap_decode("0bEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8=", b, sizeof(b)),
                     32);
    assert_memory_equal(b, chal, 32);
    assert_int_equal(chap_decode("0BEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8", b, sizeof(b)),
                     32);
    assert_memory_equal(b, chal, 32);
    assert_int_equal(chap_decode("0bAAE=", b, sizeof(b)), 2);
    /* malformed */
    const char *bad[] = {"",       "0x",  "0b",     "x12",    "12",    "0x1g",   "0y12",
                         "0b@@@@", "0bA", "0bAB=C", "0bAAF=", "0x 12", "0b====", "0bAA==="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(chap_decode(bad[i], b, sizeof(b)), -1);
    /* bounded: 65 bytes into 64 is refused (hex and base64), 64 fit */
    char hex[2 + 2 * 65 + 1] = "0x";
    memset(hex + 2, 'a', 130);
    hex[132] = '\0';
    assert_int_equal(chap_decode(hex, b, sizeof(b)), -1);
    hex[130] = '\0';
    assert_int_equal(chap_decode(hex, b, sizeof(b)), 64);
    char b64[2 + 88 + 1] = "0b";
    memset(b64 + 2, 'A', 88); /* 66 bytes */
    b64[90] = '\0';
    assert_int_equal(chap_decode(b64, b, sizeof(b)), -1);
    /* a huge value is refused on its length alone */
    static char huge[100000];
    memset(huge, 'f', sizeof(huge) - 1);
    huge[0] = '0';
    huge[1] = 'x';
    assert_int_equal(chap_decode(huge, b, sizeof(b)), -1);

    char out[2 * 32 + 3];
    assert_int_equal(chap_encode_hex(chal, 2, out, sizeof(out)), 0);
    assert_string_equal(out, "0x1011");
    assert_int_equal(chap_encode_hex(chal, 32, out, 10), -1);

    uint8_t id;
    assert_int_equal(chap_parse_id("0", &id), 0);
    assert_int_equal(chap_parse_id("255", &id), 0);
    assert_int_equal(id, 255);
    assert_int_equal(chap_parse_id("0x1f", &id), 0);
    assert_int_equal(id, 31);
    assert_int_equal(chap_parse_id("256", &id), -1);
    assert_int_equal(chap_parse_id("-1", &id), -1);
    assert_int_equal(chap_parse_id("", &id), -1);
    assert_int_equal(chap_parse_id("12a", &id), -1);
}

static void test_algs(void **state)
{
    (void)state;
    assert_int_equal(chap_pick_alg("5", 0), CHAP_ALG_MD5);
    assert_int_equal(chap_pick_alg("5,7,8", 0), CHAP_ALG_SHA3_256);
    assert_int_equal(chap_pick_alg("7,5", CHAP_ALGS_ALL), CHAP_ALG_SHA256);
    assert_int_equal(chap_pick_alg("8,7,5", CHAP_ALGS_MD5), CHAP_ALG_MD5);
    assert_int_equal(chap_pick_alg("6,5", 0), CHAP_ALG_MD5); /* unknown values skipped */
    assert_int_equal(chap_pick_alg("0x7", 0), CHAP_ALG_SHA256);
    assert_int_equal(chap_pick_alg("6", 0), -1);
    assert_int_equal(chap_pick_alg("5", CHAP_ALGS_SHA256), -1);
    assert_int_equal(chap_pick_alg("", 0), -1);
    assert_int_equal(chap_pick_alg("5,,7", 0), -1);
    assert_int_equal(chap_pick_alg("md5", 0), -1);
    assert_int_equal(chap_pick_alg("99999999999", 0), -1);

    unsigned set;
    char err[128];
    assert_int_equal(chap_algs_parse("sha3-256,sha256,md5", &set, err, sizeof(err)), 0);
    assert_int_equal(set, CHAP_ALGS_ALL);
    assert_int_equal(chap_algs_parse("md5", &set, err, sizeof(err)), 0);
    assert_int_equal(set, CHAP_ALGS_MD5);
    assert_int_equal(chap_algs_parse("SHA256, sha3-256", &set, err, sizeof(err)), 0);
    assert_int_equal(set, CHAP_ALGS_SHA256 | CHAP_ALGS_SHA3_256);
    assert_int_equal(chap_algs_parse("sha1", &set, err, sizeof(err)), -1);
    assert_int_equal(chap_algs_parse("md5,,sha256", &set, err, sizeof(err)), -1);
}

/* ---- the target's exchange ---- */

struct fx {
    struct chap_creds creds;
    struct iscsi_neg neg;
    struct iscsi_auth *auth;
    struct auth_guard *guard;
    struct iscsi_text out;
    bool may_transit;
};

static const char USER_SECRET[] = "initiator-secret-1";
static const char TARGET_SECRET[] = "target-secret-22";

static void fx_init(struct fx *f, bool mutual, unsigned algs)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->creds.user, sizeof(f->creds.user), "alice");
    memcpy(f->creds.secret, USER_SECRET, strlen(USER_SECRET));
    f->creds.secret_len = strlen(USER_SECRET);
    if (mutual) {
        snprintf(f->creds.mutual_user, sizeof(f->creds.mutual_user), "tgt");
        memcpy(f->creds.mutual_secret, TARGET_SECRET, strlen(TARGET_SECRET));
        f->creds.mutual_secret_len = strlen(TARGET_SECRET);
    }
    f->creds.algs = algs;
    iscsi_neg_init(&f->neg, ISCSI_SIDE_TARGET, NULL);
    f->auth = iscsi_auth_new(&f->creds);
    f->guard = auth_guard_new();
    f->neg.auth_required = true;
    f->neg.auth_key = iscsi_auth_key;
    f->neg.auth_ctx = f->auth;
    iscsi_text_init(&f->out);
}

static void fx_free(struct fx *f)
{
    iscsi_auth_free(f->auth);
    auth_guard_free(f->guard);
    iscsi_text_free(&f->out);
}

/* One security-stage request: the pairs through the engine, then the exchange's step. */
static enum iscsi_login_status fx_round(struct fx *f, ...)
{
    struct iscsi_text in;
    iscsi_text_init(&in);
    va_list ap;
    va_start(ap, f);
    const char *pair;
    while ((pair = va_arg(ap, const char *)) != NULL)
        assert_int_equal(iscsi_text_append(&in, pair, (uint32_t)strlen(pair) + 1), 0);
    va_end(ap);
    iscsi_text_reset(&f->out);
    f->may_transit = false;
    enum iscsi_login_status st =
        iscsi_neg_handle(&f->neg, ISCSI_STAGE_SECURITY, in.data, in.len, &f->out);
    iscsi_text_free(&in);
    if (st != ISCSI_LOGIN_OK)
        return st;
    return iscsi_auth_step(f->auth, &f->neg, f->guard, &f->out, &f->may_transit);
}

static const char *find(const struct iscsi_text *t, const char *key)
{
    static char buf[4][1024];
    static int next;
    struct iscsi_text_iter it;
    const char *k, *v;
    iscsi_text_iter_init(&it, t->data, t->len);
    while (iscsi_text_next(&it, &k, &v) == 1)
        if (!strcmp(k, key)) {
            char *b = buf[next++ % 4];
            snprintf(b, 1024, "%s", v);
            return b;
        }
    return NULL;
}

/* Up to the target's challenge: returns the algorithm, fills id and challenge. */
static int fx_to_challenge(struct fx *f, const char *algs, uint8_t *id, uint8_t *chal)
{
    assert_int_equal(fx_round(f, "AuthMethod=CHAP,None", NULL), ISCSI_LOGIN_OK);
    assert_string_equal(find(&f->out, "AuthMethod"), "CHAP");
    assert_false(f->may_transit);
    char a[64];
    snprintf(a, sizeof(a), "CHAP_A=%s", algs);
    assert_int_equal(fx_round(f, a, NULL), ISCSI_LOGIN_OK);
    assert_false(f->may_transit);
    const char *ca = find(&f->out, "CHAP_A"), *ci = find(&f->out, "CHAP_I"),
               *cc = find(&f->out, "CHAP_C");
    assert_non_null(ca);
    assert_non_null(ci);
    assert_non_null(cc);
    assert_int_equal(chap_parse_id(ci, id), 0);
    /* at least 16 random bytes (§12.1.3); ours are 32 */
    assert_int_equal(chap_decode(cc, chal, CHAP_CHALLENGE_MAX), CHAP_CHALLENGE_LEN);
    return atoi(ca);
}

/* "CHAP_R=0x..." for this secret. */
static void response_kv(char *kv, size_t len, const char *key, int alg, uint8_t id,
                        const char *secret, const uint8_t *chal, size_t clen)
{
    uint8_t r[CHAP_DIGEST_MAX];
    int n = chap_response(alg, id, (const uint8_t *)secret, strlen(secret), chal, clen, r);
    assert_true(n > 0);
    char hex[2 * CHAP_DIGEST_MAX + 3];
    chap_encode_hex(r, (size_t)n, hex, sizeof(hex));
    snprintf(kv, len, "%s=%s", key, hex);
}

static void test_one_way(void **state)
{
    (void)state;
    static const struct {
        const char *offer;
        unsigned allowed;
        int want;
    } cases[] = {
        {"5", 0, CHAP_ALG_MD5},
        {"5,7", CHAP_ALGS_ALL, CHAP_ALG_SHA256},
        {"7,5,8", CHAP_ALGS_ALL, CHAP_ALG_SHA3_256},
        {"8,7,5", CHAP_ALGS_MD5 | CHAP_ALGS_SHA256, CHAP_ALG_SHA256},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fx f;
        fx_init(&f, false, cases[i].allowed);
        uint8_t id, chal[CHAP_CHALLENGE_MAX];
        int alg = fx_to_challenge(&f, cases[i].offer, &id, chal);
        assert_int_equal(alg, cases[i].want);
        char r[128];
        response_kv(r, sizeof(r), "CHAP_R", alg, id, USER_SECRET, chal, CHAP_CHALLENGE_LEN);
        assert_int_equal(fx_round(&f, "CHAP_N=alice", r, NULL), ISCSI_LOGIN_OK);
        assert_true(f.may_transit);
        assert_int_equal(f.auth->state, AUTH_DONE);
        assert_string_equal(f.auth->user, "alice");
        assert_null(find(&f.out, "CHAP_R")); /* no mutual answer unless asked */
        fx_free(&f);
    }
}

static void test_base64_response(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, false, 0);
    uint8_t id, chal[CHAP_CHALLENGE_MAX];
    int alg = fx_to_challenge(&f, "5", &id, chal);
    uint8_t r[16];
    chap_response(alg, id, (const uint8_t *)USER_SECRET, strlen(USER_SECRET), chal,
                  CHAP_CHALLENGE_LEN, r);
    /* base64 by hand: 16 bytes -> 22 characters + "==" */
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char kv[64] = "CHAP_R=0b";
    char *o = kv + strlen(kv);
    for (int i = 0; i < 16; i += 3) {
        uint32_t v = (uint32_t)r[i] << 16 | (i + 1 < 16 ? (uint32_t)r[i + 1] << 8 : 0) |
                     (i + 2 < 16 ? r[i + 2] : 0);
        *o++ = tbl[v >> 18 & 63];
        *o++ = tbl[v >> 12 & 63];
        *o++ = i + 1 < 16 ? tbl[v >> 6 & 63] : '=';
        *o++ = i + 2 < 16 ? tbl[v & 63] : '=';
    }
    *o = '\0';
    assert_int_equal(fx_round(&f, "CHAP_N=alice", kv, NULL), ISCSI_LOGIN_OK);
    assert_true(f.may_transit);
    fx_free(&f);
}

static void test_mutual(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, true, 0);
    uint8_t id, chal[CHAP_CHALLENGE_MAX];
    int alg = fx_to_challenge(&f, "7,5", &id, chal);
    assert_int_equal(alg, CHAP_ALG_SHA256);
    char r[128];
    response_kv(r, sizeof(r), "CHAP_R", alg, id, USER_SECRET, chal, CHAP_CHALLENGE_LEN);
    uint8_t ichal[20];
    for (int i = 0; i < 20; i++)
        ichal[i] = (uint8_t)(0xa0 + i);
    char c[64];
    strcpy(c, "CHAP_C=");
    chap_encode_hex(ichal, sizeof(ichal), c + 7, sizeof(c) - 7);
    assert_int_equal(fx_round(&f, "CHAP_N=alice", r, "CHAP_I=77", c, NULL), ISCSI_LOGIN_OK);
    assert_true(f.may_transit);
    assert_string_equal(find(&f.out, "CHAP_N"), "tgt");
    char want[128];
    response_kv(want, sizeof(want), "CHAP_R", alg, 77, TARGET_SECRET, ichal, sizeof(ichal));
    assert_string_equal(find(&f.out, "CHAP_R"), want + strlen("CHAP_R="));
    fx_free(&f);
}

/* Each of these ends the exchange with 0201h, the same answer whatever the cause. */
enum bad_kind {
    BAD_SECRET,
    BAD_USER,
    BAD_NO_MUTUAL,
    BAD_REFLECT,
    BAD_REPLAY,
    BAD_R_HEX,
    BAD_R_LEN,
    BAD_I,
    BAD_C_HUGE,
    BAD_N_ONLY,
    BAD_A_AGAIN,
    BAD_I_WITHOUT_C,
};

static void run_bad(enum bad_kind kind)
{
    struct fx f;
    bool mutual = kind == BAD_NO_MUTUAL || kind == BAD_REFLECT || kind == BAD_REPLAY ||
                  kind == BAD_I_WITHOUT_C;
    fx_init(&f, mutual, 0);
    uint8_t id, chal[CHAP_CHALLENGE_MAX];
    int alg = fx_to_challenge(&f, "5", &id, chal);
    char r[128], c[128], cwrong[128];
    response_kv(r, sizeof(r), "CHAP_R", alg, id, USER_SECRET, chal, CHAP_CHALLENGE_LEN);
    response_kv(cwrong, sizeof(cwrong), "CHAP_R", alg, id, "not-the-secret-9", chal,
                CHAP_CHALLENGE_LEN);
    strcpy(c, "CHAP_C=");
    chap_encode_hex(chal, CHAP_CHALLENGE_LEN, c + 7, sizeof(c) - 7);
    static char huge[4000];
    enum iscsi_login_status st = ISCSI_LOGIN_OK;
    switch (kind) {
    case BAD_SECRET:
        st = fx_round(&f, "CHAP_N=alice", cwrong, NULL);
        break;
    case BAD_USER:
        st = fx_round(&f, "CHAP_N=mallory", r, NULL);
        break;
    case BAD_NO_MUTUAL:
        st = fx_round(&f, "CHAP_N=alice", r, NULL);
        break;
    case BAD_REFLECT: /* our own challenge sent back */
        st = fx_round(&f, "CHAP_N=alice", r, "CHAP_I=1", c, NULL);
        break;
    case BAD_REPLAY: {
        /* the same initiator challenge on a second connection */
        char c2[64] = "CHAP_C=0x00112233445566778899aabbccddeeff";
        assert_int_equal(auth_guard_challenge_fresh(f.guard,
                                                    (const uint8_t *)"\x00\x11\x22\x33"
                                                                     "\x44\x55\x66\x77"
                                                                     "\x88\x99\xaa\xbb"
                                                                     "\xcc\xdd\xee\xff",
                                                    16),
                         true);
        st = fx_round(&f, "CHAP_N=alice", r, "CHAP_I=1", c2, NULL);
        break;
    }
    case BAD_R_HEX:
        st = fx_round(&f, "CHAP_N=alice", "CHAP_R=0xzz", NULL);
        break;
    case BAD_R_LEN:
        st = fx_round(&f, "CHAP_N=alice", "CHAP_R=0x00112233", NULL);
        break;
    case BAD_I:
        st = fx_round(&f, "CHAP_N=alice", r, "CHAP_I=300", NULL);
        break;
    case BAD_C_HUGE:
        memset(huge, 'a', sizeof(huge) - 1);
        memcpy(huge, "CHAP_C=0x", 9);
        st = fx_round(&f, "CHAP_N=alice", r, "CHAP_I=1", huge, NULL);
        break;
    case BAD_N_ONLY:
        st = fx_round(&f, "CHAP_N=alice", NULL);
        break;
    case BAD_A_AGAIN:
        st = fx_round(&f, "CHAP_A=5", "CHAP_N=alice", r, NULL);
        break;
    case BAD_I_WITHOUT_C:
        st = fx_round(&f, "CHAP_N=alice", r, "CHAP_I=1", NULL);
        break;
    }
    assert_false(f.may_transit);
    assert_int_not_equal(f.auth->state, AUTH_DONE);
    if (kind == BAD_A_AGAIN) {
        /* a key sent twice is the engine's refusal (0200h); login.c answers every refusal of
         * a CHAP security stage with 0201h */
        assert_int_equal(st, ISCSI_LOGIN_INITIATOR_ERROR);
    } else {
        assert_int_equal(st, ISCSI_LOGIN_AUTH_FAILED);
        assert_non_null(f.auth->why);
    }
    fx_free(&f);
}

static void test_failures(void **state)
{
    (void)state;
    for (int k = BAD_SECRET; k <= BAD_I_WITHOUT_C; k++)
        run_bad((enum bad_kind)k);
}

static void test_out_of_order(void **state)
{
    (void)state;
    struct fx f;
    /* CHAP keys before AuthMethod is agreed: refused by the engine */
    fx_init(&f, false, 0);
    assert_int_not_equal(fx_round(&f, "CHAP_A=5", NULL), ISCSI_LOGIN_OK);
    fx_free(&f);
    /* AuthMethod=None only, with CHAP required */
    fx_init(&f, false, 0);
    assert_int_equal(fx_round(&f, "AuthMethod=None", NULL), ISCSI_LOGIN_AUTH_FAILED);
    fx_free(&f);
    /* CHAP_R before CHAP_A */
    fx_init(&f, false, 0);
    assert_int_equal(fx_round(&f, "AuthMethod=CHAP", NULL), ISCSI_LOGIN_OK);
    assert_int_equal(fx_round(&f, "CHAP_N=alice", "CHAP_R=0x00", NULL), ISCSI_LOGIN_AUTH_FAILED);
    fx_free(&f);
    /* an empty request while CHAP_A is awaited would loop */
    fx_init(&f, false, 0);
    assert_int_equal(fx_round(&f, "AuthMethod=CHAP", NULL), ISCSI_LOGIN_OK);
    assert_int_equal(fx_round(&f, NULL), ISCSI_LOGIN_AUTH_FAILED);
    fx_free(&f);
    /* no algorithm in common */
    fx_init(&f, false, CHAP_ALGS_SHA256);
    assert_int_equal(fx_round(&f, "AuthMethod=CHAP", NULL), ISCSI_LOGIN_OK);
    assert_int_equal(fx_round(&f, "CHAP_A=5", NULL), ISCSI_LOGIN_AUTH_FAILED);
    assert_string_equal(find(&f.out, "CHAP_A"), "Reject");
    fx_free(&f);
    /* AuthMethod and CHAP_A in one request */
    fx_init(&f, false, 0);
    assert_int_equal(fx_round(&f, "AuthMethod=CHAP", "CHAP_A=5", NULL), ISCSI_LOGIN_OK);
    assert_non_null(find(&f.out, "CHAP_C"));
    fx_free(&f);
}

/* libiscsi with CHAP credentials, answered AuthMethod=None, declares its names again in
 * the operational stage: the same declaration in a later request is accepted, a different
 * one or a duplicate inside one request is still refused (RFC 7143 §6.2). */
static void test_repeated_declaration(void **state)
{
    (void)state;
    struct iscsi_text in, out;
    struct iscsi_neg n;
    static const char sec[] = "InitiatorName=iqn.2026-11.x:i\0TargetName=iqn.2026-11.x:t\0"
                              "SessionType=Normal\0AuthMethod=CHAP,None";
    static const char op_same[] = "InitiatorName=iqn.2026-11.x:i\0TargetName=iqn.2026-11.x:t\0"
                                  "SessionType=Normal\0MaxBurstLength=8192";
    static const char op_other[] = "InitiatorName=iqn.2026-11.x:other";
    static const char twice[] = "InitiatorName=iqn.2026-11.x:i\0InitiatorName=iqn.2026-11.x:i";
    iscsi_text_init(&in);
    iscsi_text_init(&out);
    iscsi_neg_init(&n, ISCSI_SIDE_TARGET, NULL);
    assert_int_equal(iscsi_neg_handle(&n, ISCSI_STAGE_SECURITY, sec, sizeof(sec), &out), 0);
    assert_int_equal(iscsi_neg_handle(&n, ISCSI_STAGE_OPERATIONAL, op_same, sizeof(op_same), &out),
                     0);
    assert_int_not_equal(
        iscsi_neg_handle(&n, ISCSI_STAGE_OPERATIONAL, op_other, sizeof(op_other), &out), 0);
    iscsi_neg_init(&n, ISCSI_SIDE_TARGET, NULL);
    assert_int_not_equal(iscsi_neg_handle(&n, ISCSI_STAGE_SECURITY, twice, sizeof(twice), &out), 0);
    iscsi_text_free(&in);
    iscsi_text_free(&out);
}

/* ---- the initiator library against the target engine ---- */

static void creds(struct chap_creds *c, const char *user, const char *secret, const char *muser,
                  const char *msecret, unsigned algs)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->user, sizeof(c->user), "%s", user);
    c->secret_len = strlen(secret);
    memcpy(c->secret, secret, c->secret_len);
    if (muser) {
        snprintf(c->mutual_user, sizeof(c->mutual_user), "%s", muser);
        c->mutual_secret_len = strlen(msecret);
        memcpy(c->mutual_secret, msecret, c->mutual_secret_len);
    }
    c->algs = algs;
}

/* A login between ini_login and a minimal target built on the negotiation engine and
 * iscsi_auth (login.c's stage rules). Returns 0 when the initiator reached full feature
 * phase, else the failing status; *who says which side refused ('I' or 'T'), *alg the CHAP
 * algorithm used. */
static int pair_login(const struct chap_creds *ic, const struct chap_creds *tc, char *who, int *alg)
{
    struct iscsi_params local;
    iscsi_params_default(&local);
    struct ini_login l;
    static const uint8_t isid[6] = {0x80, 0, 0, 0, 0, 1};
    ini_login_init(&l, &local, true, false, "iqn.2026-11.x:i", "iqn.2026-11.x:t", isid, 0, 0, 1, 1);
    l.chap = ic;
    struct iscsi_neg tn;
    iscsi_neg_init(&tn, ISCSI_SIDE_TARGET, NULL);
    struct iscsi_auth *a = tc ? iscsi_auth_new(tc) : NULL;
    struct auth_guard *g = auth_guard_new();
    if (a) {
        tn.auth_required = true;
        tn.auth_key = iscsi_auth_key;
        tn.auth_ctx = a;
    }
    struct iscsi_text out;
    iscsi_text_init(&out);
    struct iscsi_bhs req, rsp;
    int result = -1;
    *who = '?';
    assert_int_equal(ini_login_start(&l, &req), 0);
    for (int round = 0; round < 12 && result < 0; round++) {
        uint8_t f = req.b[1];
        enum iscsi_stage csg = (enum iscsi_stage)ISCSI_LOGIN_CSG(f);
        bool transit = f & ISCSI_LOGIN_TRANSIT;
        iscsi_text_reset(&out);
        uint16_t st = (uint16_t)iscsi_neg_handle(&tn, csg, l.tx.data, l.tx.len, &out);
        if (!st && csg == ISCSI_STAGE_SECURITY && a) {
            bool may;
            st = (uint16_t)iscsi_auth_step(a, &tn, g, &out, &may);
            if (!st && transit && !may)
                transit = false;
        }
        if (!st && csg != ISCSI_STAGE_SECURITY && a && a->state != AUTH_DONE)
            st = ISCSI_LOGIN_AUTH_FAILED;
        if (st && csg == ISCSI_STAGE_SECURITY && a)
            st = ISCSI_LOGIN_AUTH_FAILED; /* login.c: every security refusal is 0201h */
        uint8_t rf = (uint8_t)(csg << 2);
        if (transit && !st)
            rf |= (uint8_t)(ISCSI_LOGIN_TRANSIT | ISCSI_LOGIN_NSG(f));
        bhs_init(&rsp, ISCSI_OP_LOGIN_RSP, st ? 0 : rf);
        bhs_put32(&rsp, BHS_ITT, 1);
        bhs_put32(&rsp, BHS_STATSN, (uint32_t)round);
        if (transit && ISCSI_LOGIN_NSG(f) == ISCSI_STAGE_FULL_FEATURE)
            put_be16(rsp.b + BHS_TSIH, 5);
        rsp.b[BHS_STATUS_CLASS] = (uint8_t)(st >> 8);
        rsp.b[BHS_STATUS_DETAIL] = (uint8_t)st;
        if (st)
            *who = 'T';
        enum ini_login_step step =
            ini_login_rx(&l, &rsp, (const uint8_t *)out.data, st ? 0 : out.len, &req);
        if (step == ILSTEP_DONE)
            result = 0;
        else if (step == ILSTEP_FAILED) {
            result = l.status;
            if (!st)
                *who = 'I';
        }
    }
    *alg = l.chap_alg;
    ini_login_free(&l);
    iscsi_text_free(&out);
    iscsi_auth_free(a);
    auth_guard_free(g);
    return result;
}

static void test_initiator_pairs(void **state)
{
    (void)state;
    struct chap_creds ic, tc;
    char who;
    int alg;
    /* one-way, every algorithm: the strongest both allow */
    creds(&ic, "alice", USER_SECRET, NULL, NULL, 0);
    creds(&tc, "alice", USER_SECRET, NULL, NULL, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), 0);
    assert_int_equal(alg, CHAP_ALG_SHA3_256);
    tc.algs = CHAP_ALGS_MD5 | CHAP_ALGS_SHA256;
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), 0);
    assert_int_equal(alg, CHAP_ALG_SHA256);
    ic.algs = CHAP_ALGS_MD5;
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), 0);
    assert_int_equal(alg, CHAP_ALG_MD5);
    /* no common algorithm */
    tc.algs = CHAP_ALGS_SHA256;
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'T');
    /* mutual */
    creds(&ic, "alice", USER_SECRET, "tgt", TARGET_SECRET, 0);
    creds(&tc, "alice", USER_SECRET, "tgt", TARGET_SECRET, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), 0);
    /* wrong secret: the target refuses */
    creds(&ic, "alice", "another-secret-99", NULL, NULL, 0);
    creds(&tc, "alice", USER_SECRET, NULL, NULL, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'T');
    /* wrong user */
    creds(&ic, "mallory", USER_SECRET, NULL, NULL, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'T');
    /* the target's mutual secret is wrong: the initiator refuses */
    creds(&ic, "alice", USER_SECRET, "tgt", TARGET_SECRET, 0);
    creds(&tc, "alice", USER_SECRET, "tgt", "an-impostor-secret", 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'I');
    /* the target answers as another user */
    creds(&tc, "alice", USER_SECRET, "other", TARGET_SECRET, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'I');
    /* mutual asked of a one-way target, and the reverse: the target refuses both */
    creds(&tc, "alice", USER_SECRET, NULL, NULL, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'T');
    creds(&ic, "alice", USER_SECRET, NULL, NULL, 0);
    creds(&tc, "alice", USER_SECRET, "tgt", TARGET_SECRET, 0);
    assert_int_equal(pair_login(&ic, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
    assert_int_equal(who, 'T');
    /* one-way credentials and a target without CHAP: AuthMethod=None is accepted */
    assert_int_equal(pair_login(&ic, NULL, &who, &alg), 0);
    /* mutual credentials and a target without CHAP: the initiator insists (only "CHAP") */
    creds(&ic, "alice", USER_SECRET, "tgt", TARGET_SECRET, 0);
    assert_int_not_equal(pair_login(&ic, NULL, &who, &alg), 0);
    /* no credentials and a CHAP target: refused */
    assert_int_equal(pair_login(NULL, &tc, &who, &alg), ISCSI_LOGIN_AUTH_FAILED);
}

static void test_url(void **state)
{
    (void)state;
    struct lr_url u;
    assert_int_equal(lr_url_parse("iscsi://alice%s3cr%et-x@127.0.0.1:3299/iqn.2026-11.x:t/1", &u),
                     0);
    assert_string_equal(u.chap_user, "alice");
    assert_string_equal(u.chap_secret, "s3cr%et-x");
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 3299);
    assert_string_equal(u.target, "iqn.2026-11.x:t");
    assert_int_equal(lr_url_parse("iscsi://bob%pw@[::1]/iqn.x:y/0", &u), 0);
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.chap_user, "bob");
    assert_int_equal(lr_url_parse("iscsi://127.0.0.1/iqn.x:y/0", &u), 0);
    assert_string_equal(u.chap_user, "");
    assert_int_equal(lr_url_parse("iscsi://alice@h/iqn.x:y/0", &u), -1);  /* no secret */
    assert_int_equal(lr_url_parse("iscsi://%pw@h/iqn.x:y/0", &u), -1);    /* no user */
    assert_int_equal(lr_url_parse("iscsi://alice%@h/iqn.x:y/0", &u), -1); /* empty secret */
    assert_int_equal(lr_url_parse("iscsi://alice%secret@h/iqn", &u), -1);
    assert_string_equal(u.chap_secret, ""); /* a failed parse leaves no secret behind */
}

static void test_backoff(void **state)
{
    (void)state;
    struct auth_guard *g = auth_guard_new();
    unsigned n;
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 1000);
    assert_int_equal(n, 1);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 2000);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 4000);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 8000);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 10000);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 10000);
    assert_int_equal(n, 6);
    assert_int_equal(auth_guard_failed(g, "10.0.0.2", &n), 1000); /* another address */
    auth_guard_succeeded(g, "10.0.0.1");
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 1000);
    /* the table is bounded: many addresses do not grow it, and the newest are kept */
    char a[32];
    for (unsigned i = 0; i < 3 * AUTH_GUARD_ADDRS; i++) {
        snprintf(a, sizeof(a), "192.168.%u.%u", i / 256, i % 256);
        auth_guard_failed(g, a, &n);
    }
    assert_int_equal(auth_guard_failed(g, a, &n), 2000);
    auth_guard_free(g);
}

/* The delay holds the next check from the address, not only the failure's answer: waiting
 * responses are checked one per delay, and a success frees the address. */
static void test_backoff_turns(void **state)
{
    (void)state;
    struct auth_guard *g = auth_guard_new();
    unsigned n;
    assert_int_equal(auth_guard_reserve(g, "10.0.0.1"), 0); /* no failure: at once */
    assert_int_equal(auth_guard_reserve(g, "10.0.0.1"), 0);
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 1000);
    /* the next response waits for the failure's delay, the one after it for one more */
    assert_in_range(auth_guard_reserve(g, "10.0.0.1"), 900, 1000);
    assert_in_range(auth_guard_reserve(g, "10.0.0.1"), 1900, 2000);
    assert_int_equal(auth_guard_reserve(g, "10.0.0.2"), 0); /* another address */
    /* a failure while responses wait does not bring the turn forward */
    assert_int_equal(auth_guard_failed(g, "10.0.0.1", &n), 2000);
    assert_in_range(auth_guard_reserve(g, "10.0.0.1"), 2900, 3000);
    auth_guard_succeeded(g, "10.0.0.1");
    assert_int_equal(auth_guard_reserve(g, "10.0.0.1"), 0);
    auth_guard_free(g);
}

int main(void)
{
    log_set_level(LOG_LVL_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_algs),
        cmocka_unit_test(test_one_way),
        cmocka_unit_test(test_base64_response),
        cmocka_unit_test(test_mutual),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_out_of_order),
        cmocka_unit_test(test_initiator_pairs),
        cmocka_unit_test(test_url),
        cmocka_unit_test(test_backoff_turns),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_repeated_declaration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
