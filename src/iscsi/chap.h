/* CHAP for iSCSI (RFC 7143 §12.1.3, RFC 1994), the parts both sides share: the algorithms
 * (MD5 = 5, SHA-256 = 7, SHA3-256 = 8; digests through OpenSSL's EVP), the binary value
 * encodings of CHAP_C/CHAP_R (RFC 7143 §6.1: "0x" hex, "0b" base64), CHAP_I, random
 * challenges (getrandom) and the constant-time compare. No state, no sockets: the target's
 * exchange is iscsi/auth.c, the initiator's is in src/initiator/login.c. */
#ifndef LR_ISCSI_CHAP_H
#define LR_ISCSI_CHAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CHAP_A values (IANA "PPP Authentication Algorithms", RFC 7143 §12.1.3). */
enum chap_alg {
    CHAP_ALG_MD5 = 5,
    CHAP_ALG_SHA256 = 7,
    CHAP_ALG_SHA3_256 = 8,
};

/* Sets of algorithms, one bit each. */
#define CHAP_ALGS_MD5 0x1u
#define CHAP_ALGS_SHA256 0x2u
#define CHAP_ALGS_SHA3_256 0x4u
#define CHAP_ALGS_ALL (CHAP_ALGS_MD5 | CHAP_ALGS_SHA256 | CHAP_ALGS_SHA3_256)

#define CHAP_DIGEST_MAX 32      /* SHA-256 and SHA3-256; MD5 is 16 */
#define CHAP_CHALLENGE_LEN 32   /* our challenges: at least 16 bytes (§12.1.3), 32 for SHA-2/3 */
#define CHAP_CHALLENGE_MAX 1024 /* the longest challenge we take from a peer */
#define CHAP_NAME_MAX 255       /* CHAP_N, like every text value (§6.1) */
/* RFC 7143 §12.1.3: secrets of at least 96 bits; 128 are recommended. */
#define CHAP_SECRET_MIN 12
#define CHAP_SECRET_GOOD 16
#define CHAP_SECRET_MAX 255

/* One side's credentials: the name and secret a peer must prove (user), and the name and
 * secret this side answers with when the peer challenges it (mutual). Empty user: no CHAP. */
struct chap_creds {
    char user[CHAP_NAME_MAX + 1];
    uint8_t secret[CHAP_SECRET_MAX];
    size_t secret_len;
    char mutual_user[CHAP_NAME_MAX + 1]; /* "" : no mutual CHAP */
    uint8_t mutual_secret[CHAP_SECRET_MAX];
    size_t mutual_secret_len;
    unsigned algs; /* CHAP_ALGS_* allowed; 0 means all */
};

/* The bit of a CHAP_A value, 0 if we do not implement it. */
unsigned chap_alg_bit(int alg);
/* Digest length of an algorithm (0 if unknown) and its name ("md5", "sha256", "sha3-256"). */
size_t chap_digest_len(int alg);
const char *chap_alg_name(int alg);
/* "sha3-256,sha256,md5" -> a CHAP_ALGS_* set. Returns 0, or -1 naming the bad item in err. */
int chap_algs_parse(const char *list, unsigned *algs, char *err, size_t errlen);
/* The strongest algorithm of a CHAP_A list ("5", "7,5", "0x8,5", unknown numbers ignored)
 * that `allowed` contains; -1 when none (or the list is malformed). Our order of strength:
 * SHA3-256, SHA-256, MD5. */
int chap_pick_alg(const char *list, unsigned allowed);

/* RFC 1994 §4.1: response = H(identifier || secret || challenge). Writes chap_digest_len(alg)
 * bytes to out; returns that length, or -1. */
int chap_response(int alg, uint8_t id, const uint8_t *secret, size_t secret_len,
                  const uint8_t *challenge, size_t challenge_len, uint8_t *out);

/* Decode a binary value (RFC 7143 §6.1): "0x"/"0X" hex (an odd digit count implies a leading
 * zero) or "0b"/"0B" base64 (RFC 4648, padding optional). The length is checked against max
 * before anything is decoded. Returns the byte count, or -1 (malformed, empty or too long). */
int chap_decode(const char *value, uint8_t *out, size_t max);
/* "0x" + lower-case hex; returns 0 or -1 if out (NUL included) is too small. */
int chap_encode_hex(const uint8_t *bin, size_t n, char *out, size_t outlen);
/* CHAP_I: a number 0..255, decimal or hex (§6.1 numerical values). Returns 0 or -1. */
int chap_parse_id(const char *value, uint8_t *id);
/* n random bytes from the kernel's CSPRNG (getrandom). Returns 0 or -1. */
int chap_random(uint8_t *out, size_t n);
/* Equal, in time independent of where they differ (CRYPTO_memcmp). */
bool chap_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* Wipe a buffer that held a secret (explicit_bzero: not optimised away). */
void chap_wipe(void *p, size_t n);

#endif
