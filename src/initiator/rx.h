/* The full feature phase receive path (rx.c). */
#ifndef LR_INITIATOR_RX_H
#define LR_INITIATOR_RX_H

#include "initiator/ini.h"

/* A complete full-feature-phase PDU arrived: its handler's status. */
int ini_rx_ffp(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
               bool data_digest_ok);

#endif
