/* Shared by the three files of test_public_api, which are built with include/ as their only
 * project include directory: an application's view of linerate. */
#ifndef LINERATE_TESTS_UNIT_PUBLIC_API_H
#define LINERATE_TESTS_UNIT_PUBLIC_API_H

#include <stdbool.h>

#include "linerate/initiator.h"

struct public_api_run {
    struct reactor *r;
    struct lr_timer *timer;
    bool timer_fired;
    bool hooks_idle;
};

/* On run->r: start a 1 ms timer that stops run->r (sets timer_fired on the right thread). */
void public_api_arm_stop(void *arg);
/* The test hooks on a session that is not logged in: no connection, nothing in flight. */
bool public_api_hooks_idle(struct lr_session *s);

#endif
