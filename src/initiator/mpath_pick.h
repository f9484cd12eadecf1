/* Which path a multipath command takes (mpath_pick.c): by ALUA access state, round robin
 * among the paths of the best state. No I/O; the unit tests drive it directly. */
#ifndef LR_INITIATOR_MPATH_PICK_H
#define LR_INITIATOR_MPATH_PICK_H

#include <stdbool.h>
#include <stdint.h>

struct ini_mpath_cand {
    bool up;       /* logged in and not lost */
    uint8_t state; /* enum lr_alua_state */
};

/* The path for the next command among n (at most 32): up, not in the `exclude` bit mask,
 * active/optimized if any such is, else active/non-optimized; never standby, unavailable,
 * transitioning or unknown. Round robin among equals through *rr. -1 when none fits. */
int ini_mpath_pick(const struct ini_mpath_cand *c, unsigned n, uint32_t exclude, unsigned *rr);

#endif
