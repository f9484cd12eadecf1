/* What iSCSI tells the SCSI core about its initiator ports: their names (RFC 7143 §4.2.7.1)
 * and their TransportIDs (SPC-4 §7.6.4.6). */
#ifndef LR_ISCSI_SCSI_PORT_H
#define LR_ISCSI_SCSI_PORT_H

#include "scsi/scsi.h"

/* port_id of scsi_nexus_get: the session's 6-byte ISID */
extern const struct scsi_transport iscsi_scsi_transport;

#endif
