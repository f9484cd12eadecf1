/* iovec helpers: the data of a task lives in up to a few iovecs (RAM LUN memory or a buffer);
 * PDUs and receive destinations are windows [off, off+len) into them. */
#ifndef LR_UTIL_IOV_H
#define LR_UTIL_IOV_H

#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

/* Fill dst (at most max entries) with the window [off, off+len) of src. Returns the entry
 * count; the window is cut short if src or max runs out. */
static inline int iov_slice(const struct iovec *src, int n, uint64_t off, uint64_t len,
                            struct iovec *dst, int max)
{
    int k = 0;
    for (int i = 0; i < n && len && k < max; i++) {
        if (off >= src[i].iov_len) {
            off -= src[i].iov_len;
            continue;
        }
        uint64_t take = src[i].iov_len - off;
        if (take > len)
            take = len;
        dst[k].iov_base = (uint8_t *)src[i].iov_base + off;
        dst[k].iov_len = (size_t)take;
        k++;
        len -= take;
        off = 0;
    }
    return k;
}

/* Copy len bytes from buf into the iovec at offset off, piece by piece with copy(); bytes past
 * its end are dropped. */
static inline void iov_copy_in_with(const struct iovec *dst, int n, uint64_t off, const void *buf,
                                    uint64_t len, void (*copy)(void *, const void *, size_t))
{
    const uint8_t *p = buf;
    for (int i = 0; i < n && len; i++) {
        if (off >= dst[i].iov_len) {
            off -= dst[i].iov_len;
            continue;
        }
        uint64_t k = dst[i].iov_len - off;
        if (k > len)
            k = len;
        copy((uint8_t *)dst[i].iov_base + off, p, (size_t)k);
        p += k;
        len -= k;
        off = 0;
    }
}

static inline void iov_memcpy(void *d, const void *s, size_t n)
{
    memcpy(d, s, n);
}

/* iov_copy_in_with memcpy. */
static inline void iov_copy_in(const struct iovec *dst, int n, uint64_t off, const void *buf,
                               uint64_t len)
{
    iov_copy_in_with(dst, n, off, buf, len, iov_memcpy);
}

/* Copy up to len bytes of the iovec, from its start, into buf. Returns the bytes copied (fewer
 * when the iovec is shorter). */
static inline uint64_t iov_copy_out(const struct iovec *src, int n, void *buf, uint64_t len)
{
    uint8_t *p = buf;
    uint64_t done = 0;
    for (int i = 0; i < n && done < len; i++) {
        uint64_t k = src[i].iov_len < len - done ? src[i].iov_len : len - done;
        memcpy(p + done, src[i].iov_base, (size_t)k);
        done += k;
    }
    return done;
}

#endif
