/* CHAP on the target (RFC 7143 §12.1.3 with RFC 1994): the per-connection exchange
 *   I->T AuthMethod=CHAP          T->I AuthMethod=CHAP
 *   I->T CHAP_A=<A1,A2..>          T->I CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>
 *   I->T CHAP_N CHAP_R [CHAP_I CHAP_C]   T->I [CHAP_N CHAP_R]  (mutual in brackets)
 * and the server-wide guard against guessing and replays. Every failure is the same login
 * status (0201h) whatever went wrong, so a prober learns nothing; the reason goes to the
 * log only, never with a secret, a response or a challenge in it. */
#include "iscsi/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct iscsi_auth *iscsi_auth_new(const struct chap_creds *creds)
{
    struct iscsi_auth *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->creds = *creds;
    a->state = AUTH_WAIT_METHOD;
    return a;
}

void iscsi_auth_free(struct iscsi_auth *a)
{
    if (!a)
        return;
    chap_wipe(a, sizeof(*a));
    free(a);
}

static enum iscsi_login_status auth_bad(struct iscsi_auth *a, const char *why)
{
    a->why = why;
    return ISCSI_LOGIN_AUTH_FAILED;
}

/* The hook: decode each CHAP key as it comes; lengths are bounded before decoding. */
enum iscsi_login_status iscsi_auth_key(void *ctx, const char *key, const char *value,
                                       struct iscsi_text *out)
{
    struct iscsi_auth *a = ctx;
    (void)out;
    if (!strcmp(key, "CHAP_A")) {
        if (strlen(value) > ISCSI_VALUE_MAX)
            return auth_bad(a, "CHAP_A too long");
        strcpy(a->a, value);
        a->got_a = true;
    } else if (!strcmp(key, "CHAP_I")) {
        if (chap_parse_id(value, &a->peer_id) < 0)
            return auth_bad(a, "malformed CHAP_I");
        a->got_i = true;
    } else if (!strcmp(key, "CHAP_C")) {
        a->peer_challenge_len = chap_decode(value, a->peer_challenge, sizeof(a->peer_challenge));
        if (a->peer_challenge_len <= 0)
            return auth_bad(a, "malformed or oversized CHAP_C");
        a->got_c = true;
    } else if (!strcmp(key, "CHAP_N")) {
        if (strlen(value) > CHAP_NAME_MAX)
            return auth_bad(a, "CHAP_N too long");
        strcpy(a->n, value);
        a->got_n = true;
    } else if (!strcmp(key, "CHAP_R")) {
        a->r_len = chap_decode(value, a->r, sizeof(a->r));
        if (a->r_len <= 0)
            return auth_bad(a, "malformed or oversized CHAP_R");
        a->got_r = true;
    } else {
        return auth_bad(a, "unexpected CHAP key");
    }
    return ISCSI_LOGIN_OK;
}

static void request_reset(struct iscsi_auth *a)
{
    a->got_a = a->got_i = a->got_c = a->got_n = a->got_r = false;
    chap_wipe(a->peer_challenge, sizeof(a->peer_challenge));
    chap_wipe(a->r, sizeof(a->r));
    a->peer_challenge_len = a->r_len = 0;
}

/* CHAP_A received: choose the algorithm and challenge the initiator. */
static enum iscsi_login_status auth_challenge(struct iscsi_auth *a, struct iscsi_text *out)
{
    a->alg = chap_pick_alg(a->a, a->creds.algs);
    if (a->alg < 0) {
        /* §12.1.3: no acceptable algorithm: Reject, and the login ends */
        iscsi_text_add(out, "CHAP_A", "Reject");
        return auth_bad(a, "no CHAP_A algorithm both sides allow");
    }
    /* RFC 1994 §2.3: identifier and challenge unpredictable; 32 random bytes (§12.1.3: at
     * least as long as the digest, and at least 16) */
    if (chap_random(&a->id, 1) < 0 || chap_random(a->challenge, sizeof(a->challenge)) < 0)
        return auth_bad(a, "no random bytes for a challenge");
    char hex[2 * CHAP_CHALLENGE_LEN + 3];
    chap_encode_hex(a->challenge, sizeof(a->challenge), hex, sizeof(hex));
    iscsi_text_addf(out, "CHAP_A", "%d", a->alg);
    iscsi_text_addf(out, "CHAP_I", "%u", a->id);
    iscsi_text_add(out, "CHAP_C", hex);
    a->state = AUTH_WAIT_NR;
    return ISCSI_LOGIN_OK;
}

/* CHAP_N and CHAP_R received: check them, then answer the initiator's challenge if any. */
static enum iscsi_login_status auth_verify(struct iscsi_auth *a, struct auth_guard *g,
                                           struct iscsi_text *out)
{
    const struct chap_creds *cr = &a->creds;
    if (!a->got_n || !a->got_r)
        return auth_bad(a, "no CHAP_N and CHAP_R");
    /* The response is computed whatever the name, so that an unknown user and a wrong
     * secret take the same path and time. */
    uint8_t want[CHAP_DIGEST_MAX];
    int wl = chap_response(a->alg, a->id, cr->secret, cr->secret_len, a->challenge,
                           sizeof(a->challenge), want);
    bool r_ok = wl > 0 && a->r_len == wl && chap_equal(a->r, want, (size_t)wl);
    bool n_ok = strcmp(a->n, cr->user) == 0;
    chap_wipe(want, sizeof(want));
    if (!n_ok)
        return auth_bad(a, "CHAP_N is not the configured user");
    if (!r_ok)
        return auth_bad(a, "wrong CHAP_R (wrong secret)");
    bool mutual_asked = a->got_i || a->got_c;
    if (a->got_i != a->got_c)
        return auth_bad(a, "CHAP_I without CHAP_C or the reverse");
    if (!mutual_asked && cr->mutual_user[0])
        return auth_bad(a, "mutual CHAP is configured and the initiator did not challenge us");
    if (mutual_asked && !cr->mutual_user[0])
        return auth_bad(a, "the initiator asked for mutual CHAP, which is not configured");
    if (mutual_asked) {
        /* §12.1.3: a challenge that is ours sent back would make us compute the answer to
         * our own question (reflection); a challenge seen recently is a replay. */
        if ((size_t)a->peer_challenge_len == sizeof(a->challenge) &&
            chap_equal(a->peer_challenge, a->challenge, sizeof(a->challenge)))
            return auth_bad(a, "initiator's CHAP_C reflects ours");
        if (!auth_guard_challenge_fresh(g, a->peer_challenge, (size_t)a->peer_challenge_len))
            return auth_bad(a, "initiator's CHAP_C was used recently (replay)");
        uint8_t rsp[CHAP_DIGEST_MAX];
        int rl = chap_response(a->alg, a->peer_id, cr->mutual_secret, cr->mutual_secret_len,
                               a->peer_challenge, (size_t)a->peer_challenge_len, rsp);
        if (rl < 0)
            return auth_bad(a, "digest failed");
        char hex[2 * CHAP_DIGEST_MAX + 3];
        chap_encode_hex(rsp, (size_t)rl, hex, sizeof(hex));
        iscsi_text_add(out, "CHAP_N", cr->mutual_user);
        iscsi_text_add(out, "CHAP_R", hex);
        chap_wipe(rsp, sizeof(rsp));
        chap_wipe(hex, sizeof(hex));
    }
    snprintf(a->user, sizeof(a->user), "%s", cr->user);
    chap_wipe(a->challenge, sizeof(a->challenge));
    a->state = AUTH_DONE;
    return ISCSI_LOGIN_OK;
}

enum iscsi_login_status iscsi_auth_step(struct iscsi_auth *a, const struct iscsi_neg *neg,
                                        struct auth_guard *g, struct iscsi_text *out,
                                        bool *may_transit)
{
    enum iscsi_login_status st = ISCSI_LOGIN_OK;
    bool any = a->got_a || a->got_i || a->got_c || a->got_n || a->got_r;
    *may_transit = false;
    bool agreed_now = false;
    if (a->state == AUTH_WAIT_METHOD) {
        if (!neg->auth_chap_agreed) {
            if (any)
                st = auth_bad(a, "CHAP key before AuthMethod=CHAP");
            goto done;
        }
        a->state = AUTH_WAIT_A;
        agreed_now = true;
    }
    switch (a->state) {
    case AUTH_WAIT_A:
        if (a->got_i || a->got_c || a->got_n || a->got_r)
            st = auth_bad(a, "CHAP_I, CHAP_C, CHAP_N or CHAP_R before CHAP_A");
        else if (a->got_a)
            st = auth_challenge(a, out);
        else if (!agreed_now)
            st = auth_bad(a, "no CHAP_A"); /* an empty request would loop for ever */
        break;
    case AUTH_WAIT_NR:
        if (a->got_a)
            st = auth_bad(a, "CHAP_A sent twice");
        else
            st = auth_verify(a, g, out);
        *may_transit = st == ISCSI_LOGIN_OK;
        break;
    case AUTH_DONE:
        if (any)
            st = auth_bad(a, "CHAP key after authentication");
        *may_transit = st == ISCSI_LOGIN_OK;
        break;
    case AUTH_WAIT_METHOD:
        break;
    }
done:
    request_reset(a);
    return st;
}

/* ---- the guard ---- */

struct guard_addr {
    char addr[48];
    unsigned count;
    uint64_t last_ms;
    uint64_t next_ms; /* the next CHAP response from there is not checked before this */
};

struct auth_guard {
    pthread_mutex_t lock;
    struct guard_addr addrs[AUTH_GUARD_ADDRS];
    uint8_t seen[AUTH_GUARD_CHALLENGES][32]; /* SHA-256 of recent initiator challenges */
    unsigned nseen, next_seen;
};

struct auth_guard *auth_guard_new(void)
{
    struct auth_guard *g = calloc(1, sizeof(*g));
    if (g)
        pthread_mutex_init(&g->lock, NULL);
    return g;
}

void auth_guard_free(struct auth_guard *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* The entry of addr, or a slot for it: an empty one, else the oldest (the table is bounded,
 * so a flood of addresses forgets the quietest). */
static struct guard_addr *guard_slot(struct auth_guard *g, const char *addr, uint64_t now,
                                     bool create)
{
    struct guard_addr *oldest = NULL, *empty = NULL;
    for (unsigned i = 0; i < AUTH_GUARD_ADDRS; i++) {
        struct guard_addr *e = &g->addrs[i];
        if (e->count && now - e->last_ms > AUTH_FORGET_MS)
            e->count = 0;
        if (!e->count) {
            if (!empty)
                empty = e;
            continue;
        }
        if (!strcmp(e->addr, addr))
            return e;
        if (!oldest || e->last_ms < oldest->last_ms)
            oldest = e;
    }
    if (!create)
        return NULL;
    struct guard_addr *e = empty ? empty : oldest;
    memset(e, 0, sizeof(*e));
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    return e;
}

/* 1 s, 2 s, 4 s, 8 s, then 10 s after n failures in a row */
static uint32_t guard_delay(unsigned n)
{
    uint64_t delay = (uint64_t)AUTH_DELAY_FIRST_MS << (n - 1 < 8 ? n - 1 : 8);
    return delay > AUTH_DELAY_MAX_MS ? AUTH_DELAY_MAX_MS : (uint32_t)delay;
}

uint32_t auth_guard_failed(struct auth_guard *g, const char *addr, unsigned *count)
{
    uint64_t now = reactor_now_ms();
    pthread_mutex_lock(&g->lock);
    struct guard_addr *e = guard_slot(g, addr, now, true);
    if (e->count < 64)
        e->count++;
    e->last_ms = now;
    unsigned n = e->count;
    uint32_t delay = guard_delay(n);
    if (e->next_ms < now + delay)
        e->next_ms = now + delay;
    pthread_mutex_unlock(&g->lock);
    if (count)
        *count = n;
    return delay;
}

uint32_t auth_guard_reserve(struct auth_guard *g, const char *addr)
{
    uint64_t now = reactor_now_ms();
    pthread_mutex_lock(&g->lock);
    struct guard_addr *e = guard_slot(g, addr, now, false);
    uint64_t at = now;
    if (e && e->count) {
        /* one check per delay: a response waiting here holds the slot after it too */
        at = e->next_ms > now ? e->next_ms : now;
        e->next_ms = at + guard_delay(e->count);
        e->last_ms = now;
    }
    pthread_mutex_unlock(&g->lock);
    return (uint32_t)(at - now);
}

void auth_guard_succeeded(struct auth_guard *g, const char *addr)
{
    pthread_mutex_lock(&g->lock);
    struct guard_addr *e = guard_slot(g, addr, reactor_now_ms(), false);
    if (e)
        e->count = 0, e->next_ms = 0;
    pthread_mutex_unlock(&g->lock);
}

bool auth_guard_challenge_fresh(struct auth_guard *g, const uint8_t *c, size_t len)
{
    uint8_t h[32];
    if (chap_response(CHAP_ALG_SHA256, 0, NULL, 0, c, len, h) != 32)
        return false;
    bool fresh = true;
    pthread_mutex_lock(&g->lock);
    for (unsigned i = 0; i < g->nseen && fresh; i++)
        fresh = memcmp(g->seen[i], h, sizeof(h)) != 0;
    if (fresh) {
        memcpy(g->seen[g->next_seen], h, sizeof(h));
        g->next_seen = (g->next_seen + 1) % AUTH_GUARD_CHALLENGES;
        if (g->nseen < AUTH_GUARD_CHALLENGES)
            g->nseen++;
    }
    pthread_mutex_unlock(&g->lock);
    return fresh;
}
