/* CRC32C (Castagnoli) for iSCSI header and data digests (RFC 7143 §13.1, Appendix B.4),
 * computed by ISA-L's crc32_iscsi. */
#ifndef LR_UTIL_CRC32C_H
#define LR_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define CRC32C_INIT 0xffffffffu

/* Continue a running CRC over buf. Start with CRC32C_INIT, finish with crc32c_final(). */
uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);

static inline uint32_t crc32c_final(uint32_t crc)
{
    return crc ^ 0xffffffffu;
}

/* The digest of one buffer, as it goes on the wire (little-endian word, RFC 7143 §13.1). */
uint32_t crc32c(const void *buf, size_t len);
/* The digest over an iovec, e.g. a data segment that spans RAM LUN pages plus its padding. */
uint32_t crc32c_iov(const struct iovec *iov, int iovcnt);

#endif
