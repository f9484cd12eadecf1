/* ErrorRecoveryLevel >= 1 (snack.c, RFC 7143 §7.1-§7.9, §11.16). */
#ifndef LR_INITIATOR_SNACK_H
#define LR_INITIATOR_SNACK_H

#include "initiator/ini.h"

/* A numbered response with StatSN arrived (held: its task still misses data). */
int ini_snack_statsn(struct ini_conn *c, uint32_t statsn, bool held);
/* A numbered response was discarded (data digest error): ask for it again. */
int ini_snack_statsn_lost(struct ini_conn *c, uint32_t statsn);
int ini_snack_data_in(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                      const uint8_t *data, uint32_t dlen, bool dd_ok);
int ini_snack_scsi_rsp(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr,
                       const uint8_t *data, uint32_t dlen, bool dd_ok);
/* An R2T: an R2TSN gap asks for the missing R2Ts; old ones (recovery) are answered too. */
int ini_snack_r2t(struct ini_conn *c, struct ini_task *t, const uint8_t *hdr);
/* A Reject (data: the rejected header): a command with a bad immediate-data digest is
 * retried, a refused SNACK ends what it asked for. *handled says whether it was dealt with. */
int ini_snack_reject(struct ini_conn *c, const uint8_t *hdr, const uint8_t *data, uint32_t dlen,
                     bool *handled);
/* The answer to our NOP-Out ping. */
int ini_snack_pong(struct ini_conn *c, const uint8_t *hdr);
/* The session tick (any thread, with the lock): a connection with tasks and no progress for
 * a quiet period gets a recovery round on its own thread. */
void ini_snack_tick(struct ini_conn *c, uint64_t now);
/* Set at full feature phase: StatSN tracking starts at expstatsn. */
void ini_snack_start(struct ini_conn *c);

#endif
