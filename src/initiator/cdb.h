/* CDBs the initiator builds itself (cdb.c): READ/WRITE of a block range, shared by the
 * session's lr_read/lr_write and the multipath device's. */
#ifndef LR_INITIATOR_CDB_H
#define LR_INITIATOR_CDB_H

#include <stdbool.h>
#include <stdint.h>

/* READ/WRITE (10), or (16) when the LBA or the block count does not fit: fills cdb (16 bytes)
 * and returns its length. */
unsigned ini_cdb_rw(uint8_t cdb[16], bool write, uint64_t lba, uint32_t blocks);

#endif
