/* Private to src/bs, below every store: the request check each store's submit() runs first, and
 * the memory<->iovec copies of the memory stores. Inline, as they sit on every request's path. */
#ifndef LR_BS_IO_H
#define LR_BS_IO_H

#include <errno.h>
#include <string.h>

#include "bs/bs.h"

/* Validate a request against the store before touching anything: 0 or -EINVAL. The SCSI core
 * checks LBA ranges centrally; this only keeps a caller bug from reaching memory or disk. */
static inline int bs_io_check(const struct bs *bs, const struct bs_io *io)
{
    switch (io->op) {
    case BS_READ:
    case BS_WRITE:
    case BS_UNMAP:
        break;
    case BS_FLUSH:
        return 0;
    case BS_WRITE_SAME:
        if (!bs->write_same || io->iovcnt < 1 || !io->iov || !io->iov[0].iov_len ||
            io->length % io->iov[0].iov_len)
            return -EINVAL;
        break;
    case BS_COMPARE_AND_WRITE:
        if (!bs->caw_unit || io->iovcnt != 2 || !io->iov || io->iov[0].iov_len != io->length ||
            io->iov[1].iov_len != io->length ||
            io->offset / bs->caw_unit != (io->offset + io->length - 1) / bs->caw_unit)
            return -EINVAL;
        break;
    default:
        return -EINVAL;
    }
    if (io->offset > bs->size || io->length > bs->size - io->offset)
        return -EINVAL;
    if (io->op == BS_UNMAP || io->op == BS_WRITE_SAME || io->op == BS_COMPARE_AND_WRITE)
        return 0;
    if (io->iovcnt < 0 || (io->iovcnt > 0 && !io->iov))
        return -EINVAL;
    uint64_t total = 0;
    for (int i = 0; i < io->iovcnt && total < io->length; i++)
        total += io->iov[i].iov_len;
    return total < io->length ? -EINVAL : 0;
}

/* Copy len bytes from src into the iovec (READ from a memory store). A buffer that already is
 * the source (the caller used bs_map() and submitted anyway) is left alone: memcpy onto
 * itself is undefined. */
static inline void bs_copy_to_iov(const struct iovec *iov, const uint8_t *src, uint64_t len)
{
    for (int i = 0; len; i++) {
        size_t n = iov[i].iov_len < len ? iov[i].iov_len : (size_t)len;
        if (iov[i].iov_base != src)
            memcpy(iov[i].iov_base, src, n);
        src += n;
        len -= n;
    }
}

static inline void bs_copy_from_iov(uint8_t *dst, const struct iovec *iov, uint64_t len)
{
    for (int i = 0; len; i++) {
        size_t n = iov[i].iov_len < len ? iov[i].iov_len : (size_t)len;
        if (iov[i].iov_base != dst)
            memcpy(dst, iov[i].iov_base, n);
        dst += n;
        len -= n;
    }
}

#endif
