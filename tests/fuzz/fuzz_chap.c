/* libFuzzer harness for the target's CHAP exchange (src/iscsi/auth.c) and the CHAP value
 * parsers it uses (src/iscsi/chap.c).
 *
 * Input: the first byte picks the configuration, the rest is a list of connections separated
 * by 0xfe bytes, each a list of login requests' texts (key=value\0 ...) separated by 0xff
 * bytes (neither byte occurs in a well-formed text, so seeds stay readable).
 *   bit 0     mutual CHAP configured (the initiator must challenge us)
 *   bits 1-3  CHAP_ALGS_* allowed (0: all)
 *   bit 4     keys go straight to iscsi_auth_key(), as if AuthMethod=CHAP had been agreed,
 *             instead of through the negotiation engine (so any key name reaches the hook)
 *   bit 5     with bit 4: AuthMethod=CHAP is agreed only from the second request on
 *   bit 6     each connection comes from its own address (else all from one)
 * Each connection gets a fresh negotiation and exchange, as login.c makes them: every request
 * goes through iscsi_neg_handle() in the security stage (which hands the CHAP_* keys to
 * iscsi_auth_key()), then iscsi_auth_step(); the first refusal ends the connection, as it ends
 * the login. The connections of one input share one guard, so a replayed initiator challenge
 * is refused as it would be on a server, and each connection's outcome is reported to it as
 * login.c does (the failure count and back-off are checked); a new guard per input keeps runs
 * reproducible.
 *
 * The target's CHAP_I and CHAP_C come from getrandom() and src/ has no hook to fix them (one
 * in the daemon's code would be a way to make challenges predictable), so once a challenge is
 * issued the harness overwrites it (struct iscsi_auth is public) with the fixed FUZZ_ID and
 * fuzz_challenge below. Seeds can then carry correct responses (tests/fuzz/seeds.py computes
 * them with hashlib from the same constants) and the fuzzer reaches the success and mutual
 * paths from them. Whenever the exchange succeeds the
 * harness checks, independently of auth.c, that the initiator's response really was right and
 * that our mutual answer is right: an accepted wrong response is a finding (abort).
 *
 * Then every token of the input (split at NUL, 0xff and 0xfe; the part after '=' if any) goes
 * through chap_decode, chap_parse_id, chap_pick_alg and chap_algs_parse with light checks:
 * decoded lengths within the bound, hex round trips, a picked algorithm that was allowed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/auth.h"
#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "util/log.h"

/* Keep in step with seeds.py. */
#define FUZZ_USER "alice"
#define FUZZ_SECRET "alice-secret-16b"
#define FUZZ_MUTUAL_USER "iqn.2026-11.org.linerate:fuzz"
#define FUZZ_MUTUAL_SECRET "target-secret-16"
#define FUZZ_ID 0x2a
/* fuzz_challenge[i] = i * 37 + 11 (mod 256), filled in by setup() */
static uint8_t fuzz_challenge[CHAP_CHALLENGE_LEN];
/* FUZZ_LOG set: say how each connection ended (to see what a seed or a find reaches) */
static bool trace;

#define MAX_CONNS 8
#define MAX_ROUNDS 16

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_chap: %s\n", what);
        abort();
    }
}

static void setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    trace = getenv("FUZZ_LOG") != NULL;
    log_set_level(trace ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    for (size_t i = 0; i < sizeof(fuzz_challenge); i++)
        fuzz_challenge[i] = (uint8_t)(i * 37 + 11);
}

static void creds_init(struct chap_creds *cr, uint8_t opt)
{
    memset(cr, 0, sizeof(*cr));
    snprintf(cr->user, sizeof(cr->user), "%s", FUZZ_USER);
    cr->secret_len = strlen(FUZZ_SECRET);
    memcpy(cr->secret, FUZZ_SECRET, cr->secret_len);
    if (opt & 1) {
        snprintf(cr->mutual_user, sizeof(cr->mutual_user), "%s", FUZZ_MUTUAL_USER);
        cr->mutual_secret_len = strlen(FUZZ_MUTUAL_SECRET);
        memcpy(cr->mutual_secret, FUZZ_MUTUAL_SECRET, cr->mutual_secret_len);
    }
    cr->algs = (opt >> 1) & CHAP_ALGS_ALL;
}

/* The value of the key `want` in a key=value\0 text we produced, or NULL. */
static const char *text_get(struct iscsi_text_iter *it, const struct iscsi_text *t,
                            const char *want)
{
    const char *k, *v;
    iscsi_text_iter_init(it, t->data, t->len);
    while (iscsi_text_next(it, &k, &v) == 1)
        if (!strcmp(k, want))
            return v;
    return NULL;
}

/* What the hook decoded from this request, saved before iscsi_auth_step() wipes it. */
struct seen {
    bool got_r, got_c;
    uint8_t r[CHAP_DIGEST_MAX];
    int r_len;
    char n[CHAP_NAME_MAX + 1];
    uint8_t peer_id;
    uint8_t peer_challenge[CHAP_CHALLENGE_MAX];
    int peer_challenge_len;
};

/* The exchange just succeeded: recompute both responses here and compare. */
static void check_success(const struct iscsi_auth *a, const struct chap_creds *cr,
                          const struct seen *s, const struct iscsi_text *out)
{
    uint8_t want[CHAP_DIGEST_MAX];
    int wl = chap_response(a->alg, FUZZ_ID, cr->secret, cr->secret_len, fuzz_challenge,
                           sizeof(fuzz_challenge), want);
    check(wl > 0 && s->got_r && s->r_len == wl && !memcmp(s->r, want, (size_t)wl),
          "CHAP accepted a wrong CHAP_R");
    check(!strcmp(s->n, cr->user), "CHAP accepted a wrong CHAP_N");
    check(chap_alg_bit(a->alg) & (cr->algs ? cr->algs : CHAP_ALGS_ALL),
          "CHAP succeeded with an algorithm not allowed");
    struct iscsi_text_iter *it = malloc(sizeof(*it));
    check(it != NULL, "out of memory");
    const char *r = text_get(it, out, "CHAP_R");
    if (cr->mutual_user[0]) {
        check(s->got_c && r != NULL, "mutual CHAP succeeded without our CHAP_R");
        uint8_t got[CHAP_DIGEST_MAX];
        int gl = chap_decode(r, got, sizeof(got));
        wl = chap_response(a->alg, s->peer_id, cr->mutual_secret, cr->mutual_secret_len,
                           s->peer_challenge, (size_t)s->peer_challenge_len, want);
        check(gl == wl && !memcmp(got, want, (size_t)wl), "our mutual CHAP_R is wrong");
        const char *n = text_get(it, out, "CHAP_N");
        check(n && !strcmp(n, cr->mutual_user), "our mutual CHAP_N is wrong");
    } else {
        check(r == NULL, "one-way CHAP answered with a CHAP_R");
    }
    free(it);
}

/* Keys straight into the hook (option bit 4). */
static enum iscsi_login_status feed_direct(struct iscsi_auth *a, const char *text, uint32_t len,
                                           struct iscsi_text *out)
{
    struct iscsi_text_iter *it = malloc(sizeof(*it));
    check(it != NULL, "out of memory");
    const char *k, *v;
    int rc;
    enum iscsi_login_status st = ISCSI_LOGIN_OK;
    iscsi_text_iter_init(it, text, len);
    while (st == ISCSI_LOGIN_OK && (rc = iscsi_text_next(it, &k, &v)) == 1)
        st = iscsi_auth_key(a, k, v, out);
    if (st == ISCSI_LOGIN_OK && rc < 0)
        st = ISCSI_LOGIN_INITIATOR_ERROR;
    free(it);
    return st;
}

/* Failures in a row per source address, as the guard should count them. */
struct addrs {
    unsigned fails[MAX_CONNS];
};

/* One connection's login: requests separated by 0xff. */
static void run_conn(uint8_t opt, const char *p, size_t len, struct auth_guard *g, int conn,
                     struct addrs *ad)
{
    struct chap_creds cr;
    creds_init(&cr, opt);
    struct iscsi_params local;
    iscsi_params_default(&local);
    struct iscsi_neg neg;
    iscsi_neg_init(&neg, ISCSI_SIDE_TARGET, &local);
    struct iscsi_auth *a = iscsi_auth_new(&cr);
    check(a != NULL, "out of memory");
    /* as login_pick_node() sets them up when the node has CHAP */
    neg.auth_required = true;
    neg.auth_key = iscsi_auth_key;
    neg.auth_ctx = a;
    if ((opt & 48) == 16)
        neg.auth_chap_agreed = true;
    struct iscsi_text out;
    iscsi_text_init(&out);
    struct seen s;
    const char *how = "all requests taken";
    bool failed = false;
    int round;

    const char *end = p + len;
    for (round = 0; round < MAX_ROUNDS && p <= end; round++) {
        const char *sep = memchr(p, 0xff, (size_t)(end - p));
        uint32_t n = (uint32_t)((sep ? sep : end) - p);
        iscsi_text_reset(&out);
        enum iscsi_login_status st;
        if (opt & 16)
            st = feed_direct(a, p, n, &out);
        else
            st = iscsi_neg_handle(&neg, ISCSI_STAGE_SECURITY, p, n, &out);
        if (st != ISCSI_LOGIN_OK) {
            how = a->why ? a->why : "keys refused";
            failed = true;
            break;
        }
        memset(&s, 0, sizeof(s));
        s.got_r = a->got_r;
        s.got_c = a->got_c;
        memcpy(s.r, a->r, sizeof(s.r));
        s.r_len = a->r_len;
        memcpy(s.n, a->n, sizeof(s.n));
        s.peer_id = a->peer_id;
        memcpy(s.peer_challenge, a->peer_challenge, sizeof(s.peer_challenge));
        s.peer_challenge_len = a->peer_challenge_len;
        enum auth_state before = a->state;
        bool may_transit;
        st = iscsi_auth_step(a, &neg, g, &out, &may_transit);
        if (st != ISCSI_LOGIN_OK) {
            check(a->why != NULL, "a CHAP failure without a reason");
            check(a->state != AUTH_DONE || before == AUTH_DONE, "failed into AUTH_DONE");
            how = a->why;
            failed = true;
            break;
        }
        check(!may_transit || a->state == AUTH_DONE, "may transit before authentication");
        if (a->state == AUTH_WAIT_NR && before != AUTH_WAIT_NR) {
            /* just challenged: pin the challenge (see the top of the file) */
            a->id = FUZZ_ID;
            memcpy(a->challenge, fuzz_challenge, sizeof(a->challenge));
        }
        if (a->state == AUTH_DONE && before != AUTH_DONE)
            check_success(a, &cr, &s, &out);
        if (opt & 16)
            neg.auth_chap_agreed = true;
        if (!sep)
            break;
        p = sep + 1;
    }
    if (trace)
        fprintf(stderr, "fuzz_chap: %s, %d requests: state %d, %s\n",
                cr.mutual_user[0] ? "mutual" : "one-way", round + 1, (int)a->state, how);
    /* login.c: every failure counts against the address and is answered after a growing
     * delay; a completed login (here: authenticated) starts its count over */
    int ai = (opt & 64) ? conn : 0;
    char addr[32];
    snprintf(addr, sizeof(addr), "192.0.2.%d", ai + 1);
    if (failed) {
        unsigned n = 0;
        uint32_t ms = auth_guard_failed(g, addr, &n);
        ad->fails[ai]++;
        check(n == ad->fails[ai], "the guard miscounted failures");
        check(ms >= AUTH_DELAY_FIRST_MS && ms <= AUTH_DELAY_MAX_MS, "back-off out of range");
    } else if (a->state == AUTH_DONE) {
        auth_guard_succeeded(g, addr);
        ad->fails[ai] = 0;
    }
    iscsi_text_free(&out);
    iscsi_auth_free(a);
}

/* One token through the value parsers. */
static void parsers(uint8_t opt, const char *tok)
{
    static uint8_t buf[CHAP_CHALLENGE_MAX], again[CHAP_CHALLENGE_MAX];
    static const size_t maxes[] = {1, 16, CHAP_DIGEST_MAX, CHAP_CHALLENGE_MAX};
    for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
        int n = chap_decode(tok, buf, maxes[i]);
        check(n == -1 || (n > 0 && (size_t)n <= maxes[i]), "chap_decode length out of bounds");
        if (n > 0) {
            /* the canonical hex form decodes to the same bytes */
            static char hex[2 * CHAP_CHALLENGE_MAX + 3];
            check(chap_encode_hex(buf, (size_t)n, hex, sizeof(hex)) == 0, "chap_encode_hex");
            int m = chap_decode(hex, again, maxes[i]);
            check(m == n && !memcmp(buf, again, (size_t)n), "chap_decode hex round trip");
        }
    }
    uint8_t id;
    if (chap_parse_id(tok, &id) == 0)
        check(tok[0] >= '0' && tok[0] <= '9', "chap_parse_id took a non-number");
    unsigned allowed = (opt >> 1) & CHAP_ALGS_ALL;
    int alg = chap_pick_alg(tok, allowed);
    check(alg == -1 || (chap_alg_bit(alg) & (allowed ? allowed : CHAP_ALGS_ALL)),
          "chap_pick_alg picked an algorithm not allowed");
    unsigned set;
    char err[128];
    if (chap_algs_parse(tok, &set, err, sizeof(err)) == 0)
        check(set && !(set & ~CHAP_ALGS_ALL), "chap_algs_parse gave an empty or unknown set");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1 || size > ISCSI_TEXT_MAX)
        return 0;
    uint8_t opt = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    struct auth_guard *g = auth_guard_new();
    check(g != NULL, "out of memory");
    struct addrs ad = {{0}};
    const char *p = text, *end = text + len;
    for (int c = 0; c < MAX_CONNS && p <= end; c++) {
        const char *sep = memchr(p, 0xfe, (size_t)(end - p));
        run_conn(opt, p, (size_t)((sep ? sep : end) - p), g, c, &ad);
        if (!sep)
            break;
        p = sep + 1;
    }
    auth_guard_free(g);

    /* NUL-terminated copy, every separator a terminator */
    char *copy = malloc(len + 1);
    check(copy != NULL, "out of memory");
    memcpy(copy, text, len);
    copy[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)copy[i] == 0xff || (uint8_t)copy[i] == 0xfe)
            copy[i] = '\0';
    for (size_t i = 0; i <= len;) {
        char *tok = copy + i;
        size_t n = strlen(tok);
        char *eq = strchr(tok, '=');
        parsers(opt, eq ? eq + 1 : tok);
        i += n + 1;
    }
    free(copy);
    return 0;
}
