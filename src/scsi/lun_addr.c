/* A LUN as the rest of the core looks it up: by number on the data path, its size and number,
 * and SAM-5 §4.7 LUN addressing on the wire. */
#include <string.h>

#include "scsi/scsi_internal.h"

/* The data path's lookup: the slot array never moves, a LUN is published with release. */
struct scsi_lun *scsi_target_lun(struct scsi_target *t, uint64_t lun)
{
    return lun < __atomic_load_n(&t->nluns, __ATOMIC_ACQUIRE)
               ? __atomic_load_n(&t->luns[lun], __ATOMIC_ACQUIRE)
               : NULL;
}

uint64_t scsi_lun_size_bytes(const struct scsi_lun *lu)
{
    return lu->nblocks << lu->block_shift;
}

uint64_t scsi_lun_id(const struct scsi_lun *lu)
{
    return lu->id;
}

/* --- SAM-5 §4.7 LUN addressing --- */

uint64_t scsi_lun_from_wire(const uint8_t w[8])
{
    switch (w[0] >> 6) {
    case 0: /* peripheral device addressing, bus 0 */
        return w[0] == 0 ? w[1] : UINT64_MAX;
    case 1: /* flat space addressing */
        return (uint64_t)(w[0] & 0x3f) << 8 | w[1];
    default:
        return UINT64_MAX; /* logical unit / extended addressing: no such LUN */
    }
}

void scsi_lun_to_wire(uint64_t lun, uint8_t w[8])
{
    memset(w, 0, 8);
    if (lun < 256) {
        w[1] = (uint8_t)lun;
    } else {
        w[0] = 0x40 | (uint8_t)((lun >> 8) & 0x3f);
        w[1] = (uint8_t)lun;
    }
}
