/* Readiness for a service manager (Type=notify, util/sdnotify.h): at start and when a reload
 * ends. */
#include <string.h>

#include "daemon/daemon.h"
#include "util/sdnotify.h"

/* Tell a service manager (NOTIFY_SOCKET) that the daemon serves, and what (`note`, if any,
 * goes after it in the STATUS line). */
void daemon_notify_ready(const struct daemon *d, const char *note)
{
    unsigned luns = 0;
    for (unsigned t = 0; t < d->cfg.ntargets; t++)
        luns += d->cfg.targets[t].nluns;
    int rc = sd_notifyf_lr("READY=1\nSTATUS=serving %u target%s, %u LUN%s on %u portal%s%s%s",
                           d->cfg.ntargets, d->cfg.ntargets == 1 ? "" : "s", luns,
                           luns == 1 ? "" : "s", d->cfg.nlisten, d->cfg.nlisten == 1 ? "" : "s",
                           note ? "; " : "", note ? note : "");
    if (rc < 0)
        LOG_WARN("NOTIFY_SOCKET: cannot notify the service manager: %s", strerror(-rc));
}
