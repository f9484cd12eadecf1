/* Task management (tmf.c): the Task Management Function Request (RFC 7143 §11.5). */
#ifndef LR_ISCSI_TMF_H
#define LR_ISCSI_TMF_H

#include "iscsi/pdu.h"
#include "scsi/scsi.h"

struct iscsi_conn;

int tmf_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
void iscsi_abort_nexus_tasks(struct scsi_target *t, struct scsi_nexus *n, struct scsi_lun *lu,
                             struct scsi_join *join);

#endif
