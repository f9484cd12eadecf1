#include "util/stream_copy.h"

#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* Below this an ordinary copy is as cheap: the fence and the partial lines at either end cost
 * what the streamed middle saves. */
#define STREAM_MIN 1024u

void stream_copy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    if (n < STREAM_MIN) {
        memcpy(d, s, n);
        return;
    }
    /* the head up to a 16-byte boundary (what _mm_stream_si128 needs), then 64 bytes (one
     * cache line's worth) per round, then the tail */
    size_t head = (16u - ((uintptr_t)d & 15u)) & 15u;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    /* Non-temporal stores are weakly ordered: fenced before anything that publishes the data
     * (the command's completion, a lock release) can be seen. */
    _mm_sfence();
    memcpy(d, s, n);
}

#else

void stream_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

#endif
