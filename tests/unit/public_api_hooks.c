/* Compiled with only include/ on the include path, linerate/initiator_test.h first: it stands
 * alone. What the test hooks say of a session that never logged in, for test_public_api. */
#include "linerate/initiator_test.h"

#include "public_api.h"

bool public_api_hooks_idle(struct lr_session *s)
{
    lr_session_next_conn(s, 0); /* nothing to steer yet: harmless */
    return lr_session_conn_port(s, 0) == 0 && lr_session_inflight(s) == 0;
}
