/* map-write: what does a cached WRITE into a file cost, per way of writing it? A model of a
 * file LUN's WRITE whose pages are in the page cache: one thread writes SIZE bytes at random
 * SIZE-aligned offsets of an existing file (all of it written once first, so every page is
 * cached and backed by blocks), for SECS seconds per variant:
 *   pwrite  pwrite(2): the file system's buffered write path on every call (on ext4
 *           ext4_da_write_begin / block_commit_write per 4 KiB block);
 *   mmap    memcpy into a shared writable mapping of the file: the file system sees a page
 *           only at its first write after a writeback (page_mkwrite);
 *   anon    memcpy into anonymous memory of the same size: what a RAM LUN pays.
 * Printed per variant: MB/s and the thread's CPU per KB (user + system, getrusage).
 * Usage: map-write FILE [SIZE_BYTES] [SECS]   (the file's first 1 GiB, or all of a smaller one)
 * e.g. dd if=/dev/zero of=/tmp/f.img bs=1M count=1024; taskset -c 0 build/map-write /tmp/f.img
 * 65536 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void)
{
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

enum variant { V_PWRITE, V_MMAP, V_ANON };
static const char *const variant_name[] = {"pwrite", "mmap", "anon"};

static int run(int fd, size_t span, size_t size, double secs, enum variant v)
{
    uint8_t *dst = NULL;
    if (v == V_MMAP)
        dst = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    else if (v == V_ANON)
        dst = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    if (dst == MAP_FAILED) {
        perror("mmap");
        return -1;
    }
    uint8_t *src = aligned_alloc(4096, size);
    if (!src)
        return -1;
    memset(src, 0x5a, size);
    uint64_t slots = span / size, done = 0, seed = 88172645463325252ull;
    double c0 = cpu_seconds(), t0 = now_seconds(), t1;
    do {
        for (int i = 0; i < 256; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17; /* xorshift64 */
            size_t off = (size_t)(seed % slots) * size;
            if (v == V_PWRITE) {
                if (pwrite(fd, src, size, (off_t)off) != (ssize_t)size) {
                    perror("pwrite");
                    return -1;
                }
            } else {
                memcpy(dst + off, src, size);
            }
            done++;
        }
        t1 = now_seconds();
    } while (t1 - t0 < secs);
    double cpu = cpu_seconds() - c0, kib = (double)done * (double)size / 1024;
    printf("%-7s %8zu B  %8.0f MB/s  %.3f us/KB\n", variant_name[v], size,
           kib * 1024 / (t1 - t0) / 1e6, cpu * 1e6 / kib);
    free(src);
    if (dst)
        munmap(dst, span);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: map-write FILE [SIZE_BYTES] [SECS]\n");
        return 2;
    }
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 65536;
    double secs = argc > 3 ? atof(argv[3]) : 4;
    int fd = open(argv[1], O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(argv[1]);
        return 1;
    }
    size_t span = (size_t)st.st_size < (1ul << 30) ? (size_t)st.st_size : 1ul << 30;
    if (size == 0 || size % 4096 || span < size) {
        fprintf(stderr, "map-write: SIZE must be a multiple of 4096, at most the file's size\n");
        return 2;
    }
    for (int v = V_PWRITE; v <= V_ANON; v++)
        if (run(fd, span, size, secs, (enum variant)v) < 0)
            return 1;
    return 0;
}
