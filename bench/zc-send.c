/* zc-send: what does sending RAM LUN data cost the sender, per way of sending it (issue 32
 * item 2)? A model of the target's Data-In on one loopback TCP connection: a sender thread on
 * CPU 0 sends batches of 8 "PDUs" (a 48-byte header and SIZE bytes of data from a 512 MiB
 * prefilled "LUN", walked in order so the data is as cold as a big LUN's) per sendmsg, a
 * receiver thread on CPU 1 drains the socket. Variants, alternating round by round:
 *   bounce  the data copied into a per-slot buffer first, then sent (today's RAM READ: the
 *           copy into the task buffer that keeps blocks whole, then the kernel's copy);
 *   direct  sendmsg straight from the LUN (the kernel's copy only);
 *   zc      sendmsg with MSG_ZEROCOPY from the LUN, completions read from the error queue;
 *   uzc     io_uring IORING_OP_SENDMSG_ZC from the LUN, completions as notification CQEs;
 *   splice  each PDU's header by send(MSG_MORE), its data spliced from the LUN's file (a memfd:
 *           page cache pages) through a pipe into the socket: the page references go into
 *           the socket, no copy on the sender (issue 32 item 1: a file LUN's READ by splice).
 * The "LUN" is a memfd mapped shared, so direct is also a file LUN's READ sent from its
 * mapping (send-min) and splice sends the same pages.
 * Reported per size: MB/s and the sender thread's CPU per KB (on loopback the receive path's
 * softirq runs on the sender's CPU, so it counts there), medians over rounds, and ratios to
 * bounce; and how many zero-copy completions said the kernel copied after all.
 * Usage: zc-send [SECS_PER_CELL] [ROUNDS] [SIZES_KIB...] */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR_LEN 48u
#define BATCH 8u
#define LUN_BYTES (512ull << 20)
#define ZC_MAX_OUT 64u /* zero-copy sends awaiting their completion */

enum variant { V_BOUNCE, V_DIRECT, V_ZC, V_UZC, V_SPLICE, V_COUNT };
static const char *const vname[V_COUNT] = {"bounce", "direct", "zc", "uzc", "splice"};

static uint8_t *lun;
static int lun_fd, pipe_fd[2];
static int rx_fd;

static void die(const char *what)
{
    fprintf(stderr, "zc-send: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static double now_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *receiver(void *arg)
{
    (void)arg;
    pin(1);
    size_t n = 1u << 20;
    uint8_t *buf = malloc(n);
    for (;;) {
        ssize_t r = recv(rx_fd, buf, n, 0);
        if (r <= 0)
            break;
    }
    free(buf);
    return NULL;
}

/* zero-copy completions: the error queue reports ranges [lo, hi] of send numbers */
struct zc_state {
    uint32_t next, done;
    uint64_t notes, copied;
};

static void zc_drain(int fd, struct zc_state *z, bool wait)
{
    for (;;) {
        if (wait) {
            struct pollfd p = {.fd = fd, .events = 0};
            poll(&p, 1, 100);
        }
        char ctl[128];
        struct msghdr mh = {.msg_control = ctl, .msg_controllen = sizeof(ctl)};
        if (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
            if (errno == EAGAIN)
                return;
            die("recvmsg errqueue");
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            struct sock_extended_err *e = (void *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            z->done += e->ee_data - e->ee_info + 1;
            z->notes++;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                z->copied++;
        }
        wait = false;
    }
}

/* One io_uring completion: a send's result (it must have sent `want` bytes; a notification
 * follows when it has IORING_CQE_F_MORE) or a notification that the pages are free. */
static void uzc_reap(struct io_uring *ring, uint32_t *out, struct zc_state *z, bool *sent,
                     size_t want)
{
    struct io_uring_cqe *cqe;
    if (io_uring_wait_cqe(ring, &cqe))
        die("io_uring_wait_cqe");
    if (cqe->flags & IORING_CQE_F_NOTIF) {
        (*out)--;
        z->notes++;
    } else {
        if (cqe->res != (int)want) {
            errno = cqe->res < 0 ? -cqe->res : EIO;
            die("sendmsg_zc");
        }
        *sent = true;
        if (cqe->flags & IORING_CQE_F_MORE)
            (*out)++;
    }
    io_uring_cqe_seen(ring, cqe);
}

struct cell {
    double mbs, cpu_per_kb;
};

/* One PDU the splice way: the header (MSG_MORE: the data follows), then the data from the
 * LUN's file through the pipe into the socket, as much as the pipe holds at a time. */
static void splice_pdu(int fd, const uint8_t *hdr, uint64_t off, size_t size)
{
    if (send(fd, hdr, HDR_LEN, MSG_MORE) != (ssize_t)HDR_LEN)
        die("send");
    loff_t o = (loff_t)off;
    size_t left = size;
    while (left) {
        ssize_t in = splice(lun_fd, &o, pipe_fd[1], NULL, left, SPLICE_F_MORE);
        if (in <= 0)
            die("splice in");
        ssize_t n = in;
        while (n > 0) {
            ssize_t out = splice(pipe_fd[0], NULL, fd, NULL, (size_t)n, SPLICE_F_MORE);
            if (out <= 0)
                die("splice out");
            n -= out;
        }
        left -= (size_t)in;
    }
}

/* Does a write to the file after its pages were spliced change what the receiver reads? The
 * pipe and then the socket hold references to the page cache pages themselves, not copies, so
 * on this kernel it does, for as long as the bytes wait in the pipe or in the receiver's
 * socket: a READ sent by splice must keep WRITEs off its blocks until the initiator has read
 * them, not only until they are in the socket. Run before the receiver starts. */
static bool splice_sees_later_write(int fd)
{
    uint8_t a[4096], got[4096];
    memset(lun, 'A', sizeof(a));
    loff_t o = 0;
    if (splice(lun_fd, &o, pipe_fd[1], NULL, sizeof(a), 0) != (ssize_t)sizeof(a) ||
        splice(pipe_fd[0], NULL, fd, NULL, sizeof(a), 0) != (ssize_t)sizeof(a))
        die("splice check");
    memset(a, 'B', sizeof(a));
    if (pwrite(lun_fd, a, sizeof(a), 0) != (ssize_t)sizeof(a) ||
        recv(rx_fd, got, sizeof(got), MSG_WAITALL) != (ssize_t)sizeof(got))
        die("splice check io");
    return got[0] == 'B';
}

static struct cell run(int fd, struct io_uring *ring, enum variant v, size_t size, double secs,
                       struct zc_state *z, uint8_t *bounce)
{
    uint8_t hdr[BATCH][HDR_LEN];
    memset(hdr, 0x5a, sizeof(hdr));
    uint64_t off = 0, bytes = 0;
    uint32_t uzc_out = 0;
    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    double t1 = t0;
    while (t1 - t0 < secs) {
        for (int k = 0; k < 16; k++) {
            struct iovec iov[2 * BATCH];
            for (unsigned i = 0; i < BATCH; i++) {
                if (off + size > LUN_BYTES)
                    off = 0;
                uint8_t *src = lun + off;
                if (v == V_BOUNCE) {
                    memcpy(bounce + i * size, src, size);
                    src = bounce + i * size;
                }
                iov[2 * i] = (struct iovec){hdr[i], HDR_LEN};
                iov[2 * i + 1] = (struct iovec){src, size};
                off += size;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2 * BATCH};
            size_t want = BATCH * (HDR_LEN + size);
            if (v == V_SPLICE) {
                for (unsigned i = 0; i < BATCH; i++)
                    splice_pdu(fd, hdr[i], (uint64_t)((uint8_t *)iov[2 * i + 1].iov_base - lun),
                               size);
            } else if (v == V_UZC) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
                io_uring_prep_sendmsg_zc(sqe, fd, &mh, MSG_WAITALL);
                io_uring_submit(ring);
                bool sent = false;
                while (!sent || uzc_out > ZC_MAX_OUT)
                    uzc_reap(ring, &uzc_out, z, &sent, want);
            } else {
                size_t done = 0;
                int flags = v == V_ZC ? MSG_ZEROCOPY : 0;
                while (done < want) {
                    ssize_t r = sendmsg(fd, &mh, flags);
                    if (r < 0)
                        die("sendmsg");
                    if (v == V_ZC)
                        z->next++;
                    done += (size_t)r;
                    while (r > 0) { /* skip what went */
                        size_t k0 =
                            mh.msg_iov[0].iov_len < (size_t)r ? mh.msg_iov[0].iov_len : (size_t)r;
                        mh.msg_iov[0].iov_base = (uint8_t *)mh.msg_iov[0].iov_base + k0;
                        mh.msg_iov[0].iov_len -= k0;
                        r -= (ssize_t)k0;
                        if (!mh.msg_iov[0].iov_len) {
                            mh.msg_iov++;
                            mh.msg_iovlen--;
                        }
                    }
                }
                if (v == V_ZC) {
                    zc_drain(fd, z, false);
                    while (z->next - z->done > ZC_MAX_OUT)
                        zc_drain(fd, z, true);
                }
            }
            bytes += BATCH * size;
        }
        t1 = now_s(CLOCK_MONOTONIC);
    }
    /* what is still in flight belongs to this cell */
    while (v == V_ZC && z->next != z->done)
        zc_drain(fd, z, true);
    bool sent = true;
    while (v == V_UZC && uzc_out)
        uzc_reap(ring, &uzc_out, z, &sent, 0);
    double c1 = now_s(CLOCK_THREAD_CPUTIME_ID);
    t1 = now_s(CLOCK_MONOTONIC);
    return (struct cell){bytes / (t1 - t0) / 1e6, (c1 - c0) * 1e6 / ((double)bytes / 1024)};
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    size_t sizes[16] = {4, 16, 64, 256};
    int nsizes = 4;
    if (argc > 3) {
        nsizes = 0;
        for (int i = 3; i < argc && nsizes < 16; i++)
            sizes[nsizes++] = (size_t)atoi(argv[i]);
    }
    if (rounds < 1 || rounds > 64)
        rounds = 5;
    lun_fd = memfd_create("zc-send-lun", 0);
    if (lun_fd < 0 || ftruncate(lun_fd, (off_t)LUN_BYTES) < 0)
        die("memfd");
    lun = mmap(NULL, LUN_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, lun_fd, 0);
    if (lun == MAP_FAILED)
        die("mmap");
    if (pipe(pipe_fd) < 0)
        die("pipe");
    fcntl(pipe_fd[1], F_SETPIPE_SZ, 1 << 20); /* a 256 KiB PDU in one pass (if allowed) */
    for (uint64_t i = 0; i < LUN_BYTES; i += 4096)
        memset(lun + i, (int)(i >> 12), 4096);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1) ||
        getsockname(ls, (void *)&a, &al))
        die("listen");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (void *)&a, sizeof(a)))
        die("connect");
    rx_fd = accept(ls, NULL, NULL);
    if (rx_fd < 0)
        die("accept");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bool zc_ok = setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0;
    struct io_uring ring;
    bool uzc_ok = io_uring_queue_init(256, &ring, 0) == 0;
    bool shares = splice_sees_later_write(fd);
    pthread_t th;
    pthread_create(&th, NULL, receiver, NULL);
    pin(0);
    printf("# zc-send: %.1f s cells, %d rounds, %u PDUs per sendmsg; SO_ZEROCOPY %s, "
           "io_uring %s\n",
           secs, rounds, BATCH, zc_ok ? "yes" : "no", uzc_ok ? "yes" : "no");
    printf("# a write after the splice, before the receiver read: the receiver got %s data\n",
           shares ? "the new" : "the old");
    printf("| size | variant | MB/s | sender µs/KB | MB/s / bounce | µs/KB / bounce | zc "
           "completions (copied) |\n|---|---|---:|---:|---:|---:|---|\n");
    for (int s = 0; s < nsizes; s++) {
        size_t size = sizes[s] * 1024;
        uint8_t *bounce = aligned_alloc(4096, BATCH * size);
        if (!bounce)
            die("alloc");
        memset(bounce, 0, BATCH * size);
        double mbs[V_COUNT][64], cpu[V_COUNT][64], rm[V_COUNT][64], rc[V_COUNT][64];
        struct zc_state z[V_COUNT] = {0};
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < V_COUNT; i++) {
                enum variant v = (enum variant)((i + r) % V_COUNT); /* order rotates */
                if ((v == V_ZC && !zc_ok) || (v == V_UZC && !uzc_ok)) {
                    mbs[v][r] = cpu[v][r] = 0;
                    continue;
                }
                struct cell c = run(fd, &ring, v, size, secs, &z[v], bounce);
                mbs[v][r] = c.mbs;
                cpu[v][r] = c.cpu_per_kb;
            }
            for (int v = 0; v < V_COUNT; v++) {
                rm[v][r] = mbs[v][r] / mbs[V_BOUNCE][r];
                rc[v][r] = cpu[v][r] / cpu[V_BOUNCE][r];
            }
        }
        for (int v = 0; v < V_COUNT; v++)
            printf("| %zu KiB | %s | %.0f | %.4f | %.2f | %.2f | %llu (%llu) |\n", sizes[s],
                   vname[v], median(mbs[v], rounds), median(cpu[v], rounds), median(rm[v], rounds),
                   median(rc[v], rounds), (unsigned long long)z[v].notes,
                   (unsigned long long)z[v].copied);
        fflush(stdout);
        free(bounce);
    }
    shutdown(fd, SHUT_WR);
    close(fd);
    pthread_join(th, NULL);
    return 0;
}
