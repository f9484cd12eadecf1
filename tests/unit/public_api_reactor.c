/* Compiled with only include/ on the include path, linerate/reactor.h first: it stands alone.
 * A timer that stops its reactor, for test_public_api. */
#include "linerate/reactor.h"

#include <stddef.h>

#include "public_api.h"

static void stop_now(void *arg)
{
    struct public_api_run *run = arg;
    run->timer_fired = lr_reactor_self() == run->r;
    lr_reactor_stop(run->r);
}

void public_api_arm_stop(void *arg)
{
    struct public_api_run *run = arg;
    run->timer = lr_timer_new(run->r, stop_now, run);
    if (run->timer)
        lr_timer_start(run->timer, 1);
}
