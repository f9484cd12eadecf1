/* A per-LUN byte-range lock that never blocks a thread: a request that cannot be granted is
 * queued and resumed later on its reactor. Exclusive holders (COMPARE AND WRITE, ORWRITE,
 * WRITE ATOMIC, SANITIZE) exclude every overlapping holder; on stores that keep blocks whole
 * themselves, the others (READ, WRITE, WRITE SAME, UNMAP, EXTENDED COPY's writes) share and
 * only exclude exclusive ones; on a store that does not (a file in the page cache), a READ
 * excludes overlapping writers and each writer (WRITE, WRITE SAME, UNMAP, EXTENDED COPY's
 * destination) overlapping READs and writers, so no block is returned half written. The mutex
 * guards list updates only, never I/O. */
#ifndef LR_SCSI_RANGE_LOCK_H
#define LR_SCSI_RANGE_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "reactor/reactor.h"
#include "util/list.h"

/* How a holder shares its range (see the top of the file). */
enum scsi_rl_mode {
    SCSI_RL_SHARED = 0,
    SCSI_RL_READ,  /* excludes SCSI_RL_WRITE and SCSI_RL_EXCL */
    SCSI_RL_WRITE, /* excludes SCSI_RL_READ, SCSI_RL_WRITE and SCSI_RL_EXCL */
    SCSI_RL_EXCL,  /* excludes everything */
};

struct scsi_rl_req {
    uint64_t off, len; /* bytes */
    enum scsi_rl_mode mode;
    /* Called once the request is granted, when scsi_rl_acquire() returned false: on the
     * reactor that asked (a message), or directly on a thread without a reactor. */
    void (*granted)(struct scsi_rl_req *q);
    void *arg;
    /* private */
    struct reactor *r;
    struct list_node node; /* in held or waiting */
    struct scsi_rl_req *ready;
    struct reactor_msg grant_msg;
};

struct scsi_range_lock {
    pthread_mutex_t m;
    atomic_uint excl; /* exclusive requests held or waiting: the fast path is closed */
    atomic_uint fast; /* shared holders admitted without the mutex (ranges not recorded) */
    struct list_node held, waiting;
    /* Under m: WRITE and EXCL requests held or waiting. While there are none, a READ is
     * granted without looking through the lists (a file LUN's READs at a high queue depth
     * would otherwise scan each other). */
    unsigned writers;
};

void scsi_rl_init(struct scsi_range_lock *rl);
void scsi_rl_destroy(struct scsi_range_lock *rl);

/* Shared admission for the data path, without a request record: true when admitted (release
 * with scsi_rl_release_fast); false while an exclusive request is held or waiting, and the
 * caller takes the slow path with scsi_rl_acquire. Two atomic operations, no mutex. */
bool scsi_rl_try_fast(struct scsi_range_lock *rl);
void scsi_rl_release_fast(struct scsi_range_lock *rl);

/* true: granted now, go on. false: queued; q->granted(q) runs when it is granted. Requests
 * that overlap are granted in arrival order; an exclusive one also waits for the fast
 * holders to drain. */
bool scsi_rl_acquire(struct scsi_range_lock *rl, struct scsi_rl_req *q);
void scsi_rl_release(struct scsi_range_lock *rl, struct scsi_rl_req *q);

#endif
