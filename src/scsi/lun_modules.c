/* The per-LUN modules (struct scsi_lun_hooks) every target runs: adding a part of the core
 * that keeps state per LUN or per I_T nexus is adding its row here. */
#include <stddef.h>

#include "scsi/scsi_internal.h"

/* Set up in this order, stopped and freed in reverse: the resize watch, which uses the store,
 * ends before the reservations' helper-thread jobs are waited for. */
const struct scsi_lun_hooks *const scsi_lun_modules[] = {
    &alua_lun_hooks,        &sbc_removable_lun_hooks, &pr_lun_hooks, &xcopy_lun_hooks,
    &scsi_lun_resize_hooks, &alua_failover_lun_hooks, NULL,
};
