/* CDBs built by the initiator: READ/WRITE of a block range (see cdb.h). */
#include "initiator/cdb.h"

#include <string.h>

#include "util/bytes.h"

/* SBC-4 §5.15/§5.16 and §5.40/§5.41: the 10-byte forms carry a 32-bit LBA and a 16-bit block
 * count; anything larger takes the 16-byte forms. */
unsigned ini_cdb_rw(uint8_t cdb[16], bool write, uint64_t lba, uint32_t blocks)
{
    memset(cdb, 0, 16);
    if (lba <= 0xffffffffu && blocks <= 0xffffu && lba + blocks <= 0x100000000ull) {
        cdb[0] = write ? 0x2a : 0x28;
        put_be32(cdb + 2, (uint32_t)lba);
        put_be16(cdb + 7, (uint16_t)blocks);
        return 10;
    }
    cdb[0] = write ? 0x8a : 0x88;
    put_be64(cdb + 2, lba);
    put_be32(cdb + 10, blocks);
    return 16;
}
