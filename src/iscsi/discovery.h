/* Text requests and SendTargets (discovery.c, RFC 7143 §11.10, Appendix C). */
#ifndef LR_ISCSI_DISCOVERY_H
#define LR_ISCSI_DISCOVERY_H

#include "iscsi/keys.h"
#include "iscsi/pdu.h"

struct iscsi_conn;

int text_handle(struct iscsi_conn *c, struct iscsi_pdu_in *p);
/* Append SendTargets results for `which` ("All" or a name) visible to this initiator. */
void discovery_send_targets(struct iscsi_conn *c, const char *which, struct iscsi_text *out);

#endif
