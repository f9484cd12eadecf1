/* COMPARE AND WRITE issued again by the multipath device (mpath_caw.c): a CAW whose first copy
 * may have run on a path that died is judged by reading its blocks back after a MISCOMPARE. */
#ifndef LR_INITIATOR_MPATH_CAW_H
#define LR_INITIATOR_MPATH_CAW_H

#include <stdbool.h>
#include <stdint.h>

#include "linerate/initiator.h"

/* A COMPARE AND WRITE (SBC-4 §5.3) that failed with MISCOMPARE (0Eh/1Dh): its block range
 * in *lba and *blocks. False for any other command or outcome. */
bool ini_caw_miscompare(const uint8_t *cdb, unsigned cdb_len, const struct lr_result *res,
                        uint64_t *lba, uint32_t *blocks);
/* The blocks read back hold the CAW's write half (buf holds verify data then write data, len
 * bytes): its own earlier copy landed. */
bool ini_caw_landed(const void *caw_buf, uint32_t caw_len, const void *read, uint32_t read_len);

#endif
