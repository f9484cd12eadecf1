/* stream_copy and iov_stream_in (util/stream_copy.h) copy exactly what memcpy would: every
 * length around the streaming threshold and the 64-byte rounds, every destination and source
 * alignment within 16 bytes, and nothing outside the destination range touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/stream_copy.h"

#define AREA 9000

static uint8_t src[AREA], dst[AREA + 64], want[AREA + 64];

static void fill(void)
{
    for (size_t i = 0; i < AREA; i++)
        src[i] = (uint8_t)(i * 31 + (i >> 8));
}

static void test_lengths_and_alignments(void **state)
{
    (void)state;
    fill();
    const size_t lens[] = {0, 1, 15, 63, 64, 1023, 1024, 1025, 1087, 4096, 4097, 4159, 8192};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (size_t da = 0; da < 16; da++) {
            for (size_t sa = 0; sa < 16; sa += 5) {
                memset(dst, 0xee, sizeof(dst));
                memset(want, 0xee, sizeof(want));
                memcpy(want + 16 + da, src + sa, lens[l]);
                stream_copy(dst + 16 + da, src + sa, lens[l]);
                assert_memory_equal(dst, want, sizeof(dst));
            }
        }
    }
}

static void test_iov_stream_in(void **state)
{
    (void)state;
    fill();
    memset(dst, 0, sizeof(dst));
    memset(want, 0, sizeof(want));
    /* three pieces, the copy starting 700 bytes in: 1300 of the first, all of the second,
     * 1000 of the third */
    struct iovec iov[3] = {{dst, 2000}, {dst + 3000, 3000}, {dst + 7000, 1500}};
    iov_stream_in(iov, 3, 700, src, 1300 + 3000 + 1000);
    memcpy(want + 700, src, 1300);
    memcpy(want + 3000, src + 1300, 3000);
    memcpy(want + 7000, src + 4300, 1000);
    assert_memory_equal(dst, want, sizeof(dst));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths_and_alignments),
        cmocka_unit_test(test_iov_stream_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
