/* The target's side of CHAP (RFC 7143 §12.1.3): one exchange per connection in the security
 * stage, fed the CHAP_* keys by the negotiation engine's hook, plus the server-wide guard
 * that slows down guessing (a growing delay before each failure answer per source address)
 * and remembers recent initiator challenges (so that a reflected or replayed challenge is
 * refused). No sockets here: login.c sends what this decides. */
#ifndef LR_ISCSI_AUTH_H
#define LR_ISCSI_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "reactor/reactor.h"

enum auth_state {
    AUTH_WAIT_METHOD, /* AuthMethod=CHAP not agreed yet */
    AUTH_WAIT_A,      /* agreed: waiting for CHAP_A */
    AUTH_WAIT_NR,     /* CHAP_A/I/C sent: waiting for CHAP_N and CHAP_R */
    AUTH_DONE,        /* the initiator proved itself (and we did, if it asked) */
};

/* One connection's exchange. Values of the keys received in the current request are
 * decoded as they arrive (bounded first) and used once the whole request is in. */
struct iscsi_auth {
    /* A copy taken when the login began: a reload may change the target's credentials
     * meanwhile (iscsi_server.chap_lock); this exchange finishes with the ones it began with. */
    struct chap_creds creds;
    enum auth_state state;
    int alg;
    uint8_t id;
    uint8_t challenge[CHAP_CHALLENGE_LEN];
    /* keys of the current request */
    bool got_a, got_i, got_c, got_n, got_r;
    bool agreed_before; /* AuthMethod was already agreed when this request came */
    char a[ISCSI_VALUE_MAX + 1];
    uint8_t peer_id;
    uint8_t peer_challenge[CHAP_CHALLENGE_MAX];
    int peer_challenge_len;
    char n[CHAP_NAME_MAX + 1];
    uint8_t r[CHAP_DIGEST_MAX];
    int r_len;
    const char *why;              /* for the log: what went wrong (never a secret) */
    char user[CHAP_NAME_MAX + 1]; /* who authenticated (for discovery filtering) */
    /* a CHAP response waiting for its turn to be checked (auth_guard_reserve), and the
     * request's transit flags to finish it with */
    bool waiting, waited;
    uint8_t wait_flags;
    /* a failure waiting for its delayed answer, and its log line's reason */
    bool failing;
    char detail[CHAP_NAME_MAX + 256];
    struct reactor_timer fail_timer;
};

/* Start an exchange for these credentials (creds->user non-empty). */
struct iscsi_auth *iscsi_auth_new(const struct chap_creds *creds);
/* Wipe and free (NULL is fine); the caller stops fail_timer first. */
void iscsi_auth_free(struct iscsi_auth *a);
/* The negotiation engine's hook (iscsi_auth_key_fn): ctx is the struct iscsi_auth. */
enum iscsi_login_status iscsi_auth_key(void *ctx, const char *key, const char *value,
                                       struct iscsi_text *out);

struct auth_guard;
/* Once a request's keys went through the engine: advance the exchange, append our CHAP keys
 * to out. *may_transit tells whether the security stage may end with this response.
 * Returns ISCSI_LOGIN_OK or ISCSI_LOGIN_AUTH_FAILED (a->why says why). */
enum iscsi_login_status iscsi_auth_step(struct iscsi_auth *a, const struct iscsi_neg *neg,
                                        struct auth_guard *g, struct iscsi_text *out,
                                        bool *may_transit);

/* ---- the server-wide guard ---- */

#define AUTH_GUARD_ADDRS 1024     /* source addresses tracked at most (oldest forgotten) */
#define AUTH_GUARD_CHALLENGES 256 /* recent initiator challenges remembered */
#define AUTH_DELAY_FIRST_MS 1000u
#define AUTH_DELAY_MAX_MS 10000u
#define AUTH_FORGET_MS (15u * 60u * 1000u) /* a quiet address starts over */

struct auth_guard *auth_guard_new(void);
void auth_guard_free(struct auth_guard *g);
/* A failed login from addr (no port): returns the delay before the answer and the number of
 * failures in a row from there. */
uint32_t auth_guard_failed(struct auth_guard *g, const char *addr, unsigned *count);
/* A CHAP response from addr is about to be checked: how long it must wait first (0 when
 * the address has no failure in a row). After a failure the next response from that address
 * is checked no earlier than the failure's delay, and each waiting response takes the next
 * slot, one per delay: a guesser gains nothing by giving up on a connection that does not
 * answer at once and trying another. */
uint32_t auth_guard_reserve(struct auth_guard *g, const char *addr);
/* A successful login from addr: its count starts over. */
void auth_guard_succeeded(struct auth_guard *g, const char *addr);
/* Remember an initiator's challenge; false if it was seen recently (a replay). */
bool auth_guard_challenge_fresh(struct auth_guard *g, const uint8_t *c, size_t len);

#endif
