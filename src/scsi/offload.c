/* The SCSI core's helper thread: work that blocks (a Ceph round trip for persistent
 * reservations held in the cluster, the image's allocation map for GET LBA STATUS) runs here,
 * never on a reactor, and its completion is posted back to the reactor that submitted it.
 * One thread serves every LUN, in submission order: the work is rare (PERSISTENT RESERVE OUT,
 * GET LBA STATUS) and the order keeps one gateway's reservation changes in the order its
 * initiators sent them. The thread starts on first use and lives as long as the process. */
#include <pthread.h>
#include <stdlib.h>

#include "scsi/scsi_internal.h"
#include "util/log.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct scsi_offload *head, *tail;
static bool started;

static void offload_done(void *arg)
{
    struct scsi_offload *o = arg;
    o->done(o);
}

static void *offload_thread(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!head)
            pthread_cond_wait(&cond, &lock);
        struct scsi_offload *o = head;
        head = o->next;
        if (!head)
            tail = NULL;
        pthread_mutex_unlock(&lock);
        o->work(o);
        if (o->r)
            reactor_post(o->r, &o->msg, offload_done, o);
        else
            o->done(o);
    }
    return NULL;
}

static void offload_start(void)
{
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &a, offload_thread, NULL) == 0;
    pthread_attr_destroy(&a);
    if (!started)
        LOG_WARN("cannot start the SCSI helper thread: blocking work runs on the caller");
}

void scsi_offload_submit(struct scsi_offload *o)
{
    o->r = o->detached ? NULL : reactor_self();
    o->msg = (struct reactor_msg){0};
    o->next = NULL;
    if (!o->r && !o->detached) {
        /* no reactor to come back to (unit tests, the control thread): blocking is allowed */
        o->work(o);
        o->done(o);
        return;
    }
    pthread_once(&once, offload_start);
    if (!started) {
        o->work(o);
        o->done(o);
        return;
    }
    pthread_mutex_lock(&lock);
    if (tail)
        tail->next = o;
    else
        head = o;
    tail = o;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}
