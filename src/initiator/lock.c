/* The session lock: a recursive mutex, only when the session's connections live on other
 * reactors (conn_reactors); a no-op otherwise. Held by every reactor callback of the session
 * and during the caller's task callbacks; dropped around a socket call by its one holder. */
#include <errno.h>

#include "initiator/ini.h"
#include "initiator/lock.h"

void ini_lock_init(struct lr_session *s)
{
    if (!s->mt)
        return;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
}

void ini_lock_destroy(struct lr_session *s)
{
    if (s->mt)
        pthread_mutex_destroy(&s->mu);
}

void ini_lock(struct lr_session *s)
{
    if (!s->mt)
        return;
    pthread_mutex_lock(&s->mu);
    s->depth++;
}

void ini_unlock(struct lr_session *s)
{
    if (!s->mt)
        return;
    s->depth--;
    pthread_mutex_unlock(&s->mu);
}

bool ini_io_release(struct lr_session *s)
{
    if (!s->mt || s->depth != 1)
        return false;
    s->depth = 0;
    pthread_mutex_unlock(&s->mu);
    return true;
}

void ini_io_retake(struct lr_session *s, bool released)
{
    if (released) {
        int e = errno; /* of the socket call just made */
        pthread_mutex_lock(&s->mu);
        s->depth = 1;
        errno = e;
    }
}

void lr_session_lock(struct lr_session *s)
{
    ini_lock(s);
}

void lr_session_unlock(struct lr_session *s)
{
    ini_unlock(s);
}
