/* Block commands with nothing to move: PRE-FETCH 10/16 (SBC-4 §5.9, §5.10) and READ DEFECT
 * DATA 10/12 (§5.20, §5.21). The LUN is memory or a file behind the page cache, so there is
 * no separate cache to load and no grown or primary defects to report. */
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

/* PRE-FETCH: the range is checked centrally; PREFETCH LENGTH 0 means "to the last LBA", which
 * is always in range. Answered GOOD ("the cache may not hold all of it", §5.9.1) rather than
 * CONDITION MET, which is what initiators and libiscsi's Prefetch tests expect; IMMED changes
 * nothing since there is no work to wait for. */
scsi_sr sbc_parse_prefetch(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    r->lba = scsi_cdb_field(t->cdb, c->lba_off, c->lba_len);
    r->nblocks = scsi_cdb_field(t->cdb, c->tl_off, c->tl_len);
    return SR_OK;
}

/* READ DEFECT DATA: a header with an empty list in the format asked for. REQ_PLIST/REQ_GLIST
 * come back as PLISTV/GLISTV: the lists asked for are valid, and empty. */
scsi_sr sbc_parse_read_defect(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    bool ten = c->cdb_len == 10;
    uint32_t alloc = ten ? get_be16(t->cdb + 7) : get_be32(t->cdb + 6);
    uint32_t full = ten ? 4 : 8;
    r->xfer_len = alloc < full ? alloc : full;
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

void sbc_exec_read_defect(struct scsi_task *t, const struct scsi_cmd *c)
{
    uint8_t d[8] = {0};
    bool ten = c->cdb_len == 10;
    uint8_t req = ten ? t->cdb[2] : t->cdb[1];
    d[1] = req & 0x1f; /* PLISTV, GLISTV, DEFECT LIST FORMAT; list length 0 */
    scsi_task_put_data(t, d, ten ? 4 : 8);
}
