/* CRC32C through ISA-L. crc32_iscsi() takes the running (non-inverted) register and returns
 * it without the final inversion, which is what lets digests run over a segment as it passes. */
#include "util/crc32c.h"

#include <isa-l/crc.h>
#include <limits.h>

#if defined(__x86_64__)
#include <immintrin.h>

/* On a CPU with AVX-512 and VPCLMULQDQ, ISA-L runs crc32_iscsi_by16_10, which returns with the
 * upper halves of the vector registers in use: it has no VZEROUPPER and leaves that to its
 * caller (intel/isa-l#24). Until something clears them, every legacy-SSE instruction after it,
 * ours and libc's, waits on the AVX-SSE transition. With digests on, that was a quarter of the
 * target's CPU at 4 KiB reads (perf put it on the first SSE instruction after each digest,
 * in wire_send and conn_wire_hdr), on top of the CRC itself. VZEROUPPER costs next to
 * nothing; it exists only where the CPU has AVX. */
__attribute__((target("avx"))) static void vector_upper_clear(void)
{
    _mm256_zeroupper();
}

static void after_isal(void)
{
    if (__builtin_cpu_supports("avx"))
        vector_upper_clear();
}
#else
static void after_isal(void)
{
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        int chunk = len > (size_t)INT_MAX ? INT_MAX : (int)len;
        crc = crc32_iscsi((unsigned char *)p, chunk, crc);
        p += chunk;
        len -= (size_t)chunk;
    }
    after_isal();
    return crc;
}

uint32_t crc32c(const void *buf, size_t len)
{
    return crc32c_final(crc32c_update(CRC32C_INIT, buf, len));
}

uint32_t crc32c_iov(const struct iovec *iov, int iovcnt)
{
    uint32_t crc = CRC32C_INIT;
    for (int i = 0; i < iovcnt; i++)
        crc = crc32c_update(crc, iov[i].iov_base, iov[i].iov_len);
    return crc32c_final(crc);
}
