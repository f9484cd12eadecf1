/* Path life of the multipath device (mpath_path.c): each path's session, its login and its
 * logging in again with back-off after a loss, its target port group and ALUA state (VPD 0x83,
 * REPORT TARGET PORT GROUPS). Knows nothing of the device's commands: mpath.c calls in here,
 * and is told through lr_mpath.state_known when a path's state is known. */
#ifndef LR_INITIATOR_MPATH_PATH_H
#define LR_INITIATOR_MPATH_PATH_H

#include <stdbool.h>
#include <stdint.h>

#include "initiator/mpath_dev.h"

/* Each path of m from its options: a session (not logged in), its ISID, its timer for logging
 * in again; and m's reaper. -1 when one could not be made (lr_mpath_destroy cleans up). */
int ini_mpath_paths_init(struct lr_mpath *m);
/* Every path's session destroyed: no callback of a path runs after this. */
void ini_mpath_paths_end(struct lr_mpath *m);
/* The paths' timers freed (after ini_mpath_paths_end). */
void ini_mpath_paths_free(struct lr_mpath *m);

/* A failure kind that may mean the path's session is lost (not a command's own answer). */
bool ini_mpath_lost_kind(enum lr_err e);
/* The session of p cannot complete anything any more. */
bool ini_mpath_session_gone(const struct mp_path *p);
/* The failure res comes from the recovery of p's session (the connection is recovering). */
bool ini_mpath_recovery_kind(const struct mp_path *p, const struct lr_result *res);
/* p's session is recovering a lost connection. */
bool ini_mpath_session_recovering(const struct mp_path *p);
/* A path logged in again whose RTPG could not be sent yet. */
bool ini_mpath_fresh_unasked(const struct lr_mpath *m);

/* p is lost (why is logged): its session is reaped and logged in again later. */
void ini_mpath_path_dead(struct mp_path *p, const char *why);
/* p's port said it does not take I/O for the LU now: state for its group until RTPG says
 * otherwise. */
void ini_mpath_not_here(struct lr_mpath *m, struct mp_path *p, uint8_t state);
/* Every live path tells its state again (RTPG). */
void ini_mpath_refresh(struct lr_mpath *m);

#endif
