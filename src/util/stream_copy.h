/* Copying into memory that will not be read again soon (a RAM LUN's blocks being written):
 * non-temporal stores write whole cache lines straight to memory, without first reading each
 * destination line in (the read-for-ownership an ordinary store costs on a cold line) and
 * without evicting the data the target is still working on. */
#ifndef LR_UTIL_STREAM_COPY_H
#define LR_UTIL_STREAM_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "util/iov.h"

/* memcpy(dst, src, n), with non-temporal stores where the CPU has them and n is large enough
 * to pay for the fence; the bytes are visible to every thread once it returns. */
void stream_copy(void *dst, const void *src, size_t n);

/* iov_copy_in (util/iov.h) with stream_copy. */
static inline void iov_stream_in(const struct iovec *dst, int n, uint64_t off, const void *buf,
                                 uint64_t len)
{
    iov_copy_in_with(dst, n, off, buf, len, stream_copy);
}

#endif
