/* CRC32C through ISA-L. crc32_iscsi() takes the running (non-inverted) register and returns
 * it without the final inversion, which is what lets digests run over a segment as it passes. */
#include "util/crc32c.h"

#include <isa-l/crc.h>
#include <limits.h>

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        int chunk = len > (size_t)INT_MAX ? INT_MAX : (int)len;
        crc = crc32_iscsi((unsigned char *)p, chunk, crc);
        p += chunk;
        len -= (size_t)chunk;
    }
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
