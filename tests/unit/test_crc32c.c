/* CRC32C against the iSCSI test vectors of RFC 7143 Appendix B.4 (originally RFC 3720 B.4):
 * the digest as transmitted, compared byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/crc32c.h"

/* The RFC lists the CRC bytes in transmission order; a digest goes on the wire little-endian. */
static void assert_digest_bytes(uint32_t crc, const uint8_t expect[4])
{
    uint8_t got[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                      (uint8_t)(crc >> 24)};
    assert_memory_equal(got, expect, 4);
}

static void test_zeros(void **state)
{
    (void)state;
    uint8_t buf[32] = {0};
    static const uint8_t expect[4] = {0xaa, 0x36, 0x91, 0x8a};
    assert_digest_bytes(crc32c(buf, sizeof(buf)), expect);
}

static void test_ones(void **state)
{
    (void)state;
    uint8_t buf[32];
    memset(buf, 0xff, sizeof(buf));
    static const uint8_t expect[4] = {0x43, 0xab, 0xa8, 0x62};
    assert_digest_bytes(crc32c(buf, sizeof(buf)), expect);
}

static void test_incrementing(void **state)
{
    (void)state;
    uint8_t buf[32];
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    static const uint8_t expect[4] = {0x4e, 0x79, 0xdd, 0x46};
    assert_digest_bytes(crc32c(buf, sizeof(buf)), expect);
}

static void test_decrementing(void **state)
{
    (void)state;
    uint8_t buf[32];
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    static const uint8_t expect[4] = {0x5c, 0xdb, 0x3f, 0x11};
    assert_digest_bytes(crc32c(buf, sizeof(buf)), expect);
}

static void test_scsi_read_pdu(void **state)
{
    (void)state;
    static const uint8_t pdu[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                    0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    static const uint8_t expect[4] = {0x56, 0x3a, 0x96, 0xd9};
    assert_digest_bytes(crc32c(pdu, sizeof(pdu)), expect);
}

/* A digest computed piecewise over an iovec equals the one over the joined buffer. */
static void test_iov_matches_flat(void **state)
{
    (void)state;
    uint8_t buf[4096];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    struct iovec iov[3] = {{buf, 1}, {buf + 1, 1000}, {buf + 1001, sizeof(buf) - 1001}};
    assert_int_equal(crc32c_iov(iov, 3), crc32c(buf, sizeof(buf)));
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* XGETBV with ECX=1 reads XINUSE: which register states are not in their initial state. Bit 2
 * is the upper halves of YMM0-15, bit 6 the upper halves of ZMM0-15. */
static bool xinuse_readable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return false;
    return __get_cpuid_count(0xd, 1, &a, &b, &c, &d) && (a & (1u << 2));
}

static uint64_t xinuse(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return ((uint64_t)hi << 32) | lo;
}

__attribute__((target("avx"))) static void upper_clear(void)
{
    _mm256_zeroupper();
}

/* A digest leaves no vector register's upper half in use: otherwise every SSE instruction the
 * target runs afterwards waits on the AVX-SSE transition (ISA-L's AVX-512 CRC has no
 * VZEROUPPER; crc32c.c adds it). Checked only where the CPU shows it: it can read XINUSE, and
 * right after a VZEROUPPER of ours it reports those halves as not in use (a CPU may report a
 * state in use that is not). */
static void test_leaves_vector_upper_clean(void **state)
{
    (void)state;
    const uint64_t upper = (1u << 2) | (1u << 6);
    if (!__builtin_cpu_supports("avx") || !xinuse_readable())
        skip();
    upper_clear();
    if (xinuse() & upper)
        skip();
    static uint8_t buf[65536];
    memset(buf, 0x5a, sizeof(buf));
    const size_t lens[] = {48, 512, 4096, sizeof(buf)};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        (void)crc32c(buf, lens[i]);
        uint64_t in_use = xinuse();
        assert_int_equal(in_use & upper, 0);
    }
}
#else
static void test_leaves_vector_upper_clean(void **state)
{
    (void)state;
    skip();
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeros),
        cmocka_unit_test(test_ones),
        cmocka_unit_test(test_incrementing),
        cmocka_unit_test(test_decrementing),
        cmocka_unit_test(test_scsi_read_pdu),
        cmocka_unit_test(test_iov_matches_flat),
        cmocka_unit_test(test_leaves_vector_upper_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
