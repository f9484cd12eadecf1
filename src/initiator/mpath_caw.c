/* The false miscompare of a COMPARE AND WRITE issued again (linerate/multipath.h): its first
 * copy went out on a path that died before the answer, so it may have run; the copy issued on
 * another path then compares against the data the first one wrote and fails with MISCOMPARE,
 * although the block holds what the caller asked for. ESXi's VMFS hit this on its ATS
 * heartbeat and reads the block back after a miscompare (5.5U2 and later); lr_mpath does the
 * same, only for a CAW whose earlier copy's outcome is unknown. */
#include <string.h>

#include "initiator/alua.h"
#include "initiator/mpath_caw.h"
#include "util/bytes.h"

#define CAW_OPCODE 0x89

bool ini_caw_miscompare(const uint8_t *cdb, unsigned cdb_len, const struct lr_result *res,
                        uint64_t *lba, uint32_t *blocks)
{
    if (cdb_len < 16 || cdb[0] != CAW_OPCODE || res->err != LR_SCSI_STATUS)
        return false;
    uint8_t key, asc, ascq;
    ini_sense_kaa(res->sense, res->sense_len, &key, &asc, &ascq);
    /* MISCOMPARE, MISCOMPARE DURING VERIFY OPERATION (SBC-4 §5.3: the sense key, ASC 1Dh) */
    if (key != 0x0e || asc != 0x1d)
        return false;
    *lba = get_be64(cdb + 2);
    *blocks = cdb[13]; /* NUMBER OF LOGICAL BLOCKS, SBC-4 §5.3 table 32 */
    return *blocks != 0;
}

bool ini_caw_landed(const void *caw_buf, uint32_t caw_len, const void *read, uint32_t read_len)
{
    /* the Data-Out buffer is the verify instance, then the write instance (SBC-4 §5.3) */
    if (caw_len % 2 || read_len != caw_len / 2)
        return false;
    return memcmp((const uint8_t *)caw_buf + read_len, read, read_len) == 0;
}
