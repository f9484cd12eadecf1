/* Path choice of the multipath device (see mpath_pick.h). SPC-4 §5.16.2.4: active/optimized
 * ports are the ones to use, active/non-optimized ones work at a cost (on a gateway, the
 * other gateway's lock or cache), the others refuse I/O. dm-multipath does the same with
 * `prio alua` and group_by_prio: the highest priority group holds the I/O. */
#include "initiator/mpath_pick.h"

#include <assert.h>

#include "linerate/multipath.h"

static int rank(uint8_t state)
{
    if (state == LR_ALUA_AO)
        return 0;
    if (state == LR_ALUA_AN)
        return 1;
    return -1; /* standby, unavailable, transitioning, unknown: no I/O */
}

int ini_mpath_pick(const struct ini_mpath_cand *c, unsigned n, uint32_t exclude, unsigned *rr)
{
    assert(n <= 32);
    int best = -1;
    unsigned count = 0;
    for (unsigned i = 0; i < n; i++) {
        int r = rank(c[i].state);
        if (!c[i].up || (exclude >> i & 1) || r < 0)
            continue;
        if (best < 0 || r < best) {
            best = r;
            count = 0;
        }
        count += r == best;
    }
    if (best < 0)
        return -1;
    unsigned want = (*rr)++ % count;
    for (unsigned i = 0; i < n; i++)
        if (c[i].up && !(exclude >> i & 1) && rank(c[i].state) == best && want-- == 0)
            return (int)i;
    return -1;
}
