/* CHAP building blocks shared by target and initiator (RFC 7143 §12.1.3, RFC 1994): the
 * algorithm table, the response digest through OpenSSL's EVP interface, the binary value
 * encodings of §6.1, CHAP_I, random challenges and constant-time comparison. */
#include "iscsi/chap.h"
#include "iscsi/keys.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

struct chap_alg_def {
    int alg;
    unsigned bit;
    const char *name;
    size_t len;
    const EVP_MD *(*md)(void);
};

/* Strongest first: chap_pick_alg walks this order. */
static const struct chap_alg_def algs[] = {
    {CHAP_ALG_SHA3_256, CHAP_ALGS_SHA3_256, "sha3-256", 32, EVP_sha3_256},
    {CHAP_ALG_SHA256, CHAP_ALGS_SHA256, "sha256", 32, EVP_sha256},
    {CHAP_ALG_MD5, CHAP_ALGS_MD5, "md5", 16, EVP_md5},
};
#define NALGS (sizeof(algs) / sizeof(algs[0]))

static const struct chap_alg_def *alg_find(int alg)
{
    for (size_t i = 0; i < NALGS; i++)
        if (algs[i].alg == alg)
            return &algs[i];
    return NULL;
}

unsigned chap_alg_bit(int alg)
{
    const struct chap_alg_def *d = alg_find(alg);
    return d ? d->bit : 0;
}

size_t chap_digest_len(int alg)
{
    const struct chap_alg_def *d = alg_find(alg);
    return d ? d->len : 0;
}

const char *chap_alg_name(int alg)
{
    const struct chap_alg_def *d = alg_find(alg);
    return d ? d->name : "?";
}

int chap_algs_parse(const char *list, unsigned *out, char *err, size_t errlen)
{
    unsigned set = 0;
    const char *p = list;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        bool found = false;
        for (size_t i = 0; i < NALGS && n; i++) {
            if (strlen(algs[i].name) == n && strncasecmp(p, algs[i].name, n) == 0) {
                set |= algs[i].bit;
                found = true;
            }
        }
        /* "sha-256" and "sha3_256" are common spellings too */
        if (!found && n == 7 && strncasecmp(p, "sha-256", 7) == 0)
            set |= CHAP_ALGS_SHA256, found = true;
        if (!found && n == 8 && strncasecmp(p, "sha3_256", 8) == 0)
            set |= CHAP_ALGS_SHA3_256, found = true;
        if (!found) {
            snprintf(err, errlen, "unknown CHAP algorithm '%.*s': expected sha3-256, sha256 or md5",
                     (int)(n > 32 ? 32 : n), p);
            return -1;
        }
        p += n;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',') {
            snprintf(err, errlen, "bad CHAP algorithm list '%s'", list);
            return -1;
        }
        p++;
    }
    *out = set;
    return 0;
}

int chap_pick_alg(const char *list, unsigned allowed)
{
    if (!allowed)
        allowed = CHAP_ALGS_ALL;
    unsigned offered = 0;
    const char *p = list;
    if (!*p)
        return -1;
    for (;;) {
        size_t n = strcspn(p, ",");
        uint32_t v;
        /* §6.2.1: values we do not understand are skipped, but the list must be well formed */
        if (iscsi_parse_number(p, n, &v) < 0)
            return -1;
        offered |= chap_alg_bit((int)v);
        p += n;
        if (!*p)
            break;
        p++;
    }
    for (size_t i = 0; i < NALGS; i++)
        if (offered & allowed & algs[i].bit)
            return algs[i].alg;
    return -1;
}

int chap_response(int alg, uint8_t id, const uint8_t *secret, size_t secret_len,
                  const uint8_t *challenge, size_t challenge_len, uint8_t *out)
{
    const struct chap_alg_def *d = alg_find(alg);
    if (!d)
        return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -1;
    unsigned len = 0;
    int ok = EVP_DigestInit_ex(ctx, d->md(), NULL) == 1 && EVP_DigestUpdate(ctx, &id, 1) == 1 &&
             EVP_DigestUpdate(ctx, secret, secret_len) == 1 &&
             EVP_DigestUpdate(ctx, challenge, challenge_len) == 1 &&
             EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == d->len;
    /* the context held the secret's state */
    EVP_MD_CTX_free(ctx);
    return ok ? (int)len : -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static int decode_hex(const char *s, size_t n, uint8_t *out, size_t max)
{
    size_t bytes = (n + 1) / 2;
    if (n == 0 || bytes > max)
        return -1;
    size_t o = 0, i = 0;
    if (n % 2) { /* §6.1: an odd number of digits has an implied leading zero */
        int v = hexval(s[0]);
        if (v < 0)
            return -1;
        out[o++] = (uint8_t)v;
        i = 1;
    }
    for (; i < n; i += 2) {
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[o++] = (uint8_t)(hi << 4 | lo);
    }
    return (int)o;
}

static int decode_b64(const char *s, size_t n, uint8_t *out, size_t max)
{
    /* strip up to two '=' of padding; then the length must be a possible base64 length */
    size_t pad = 0;
    while (n && s[n - 1] == '=' && pad < 2) {
        n--;
        pad++;
    }
    if (n == 0 || n % 4 == 1 || (pad && (n + pad) % 4))
        return -1;
    size_t bytes = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (bytes > max)
        return -1;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64val(s[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    /* RFC 4648 §3.5: the leftover bits must be zero (one encoding per value) */
    if (acc & ((1u << bits) - 1))
        return -1;
    return (int)o;
}

int chap_decode(const char *value, uint8_t *out, size_t max)
{
    size_t n = strlen(value);
    /* bound the text before looking at it: 2 hex digits or 4/3 base64 characters a byte */
    if (n < 3 || n > 2 + 2 * max + 4 || value[0] != '0')
        return -1;
    if (value[1] == 'x' || value[1] == 'X')
        return decode_hex(value + 2, n - 2, out, max);
    if (value[1] == 'b' || value[1] == 'B')
        return decode_b64(value + 2, n - 2, out, max);
    return -1;
}

int chap_encode_hex(const uint8_t *bin, size_t n, char *out, size_t outlen)
{
    static const char digits[] = "0123456789abcdef";
    if (outlen < 2 * n + 3)
        return -1;
    out[0] = '0';
    out[1] = 'x';
    for (size_t i = 0; i < n; i++) {
        out[2 + 2 * i] = digits[bin[i] >> 4];
        out[3 + 2 * i] = digits[bin[i] & 15];
    }
    out[2 + 2 * n] = '\0';
    return 0;
}

int chap_parse_id(const char *value, uint8_t *id)
{
    uint32_t v;
    if (iscsi_parse_number(value, strlen(value), &v) < 0 || v > 255)
        return -1;
    *id = (uint8_t)v;
    return 0;
}

int chap_random(uint8_t *out, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

bool chap_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

void chap_wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}
