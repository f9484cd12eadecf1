/* ALUA as an initiator reads it (alua.c): the REPORT TARGET PORT GROUPS CDB and answer, the
 * target port group of a path from VPD page 0x83, and the sense data that say a path's access
 * state changed or does not allow the command (SPC-4 §5.16, §6.27, §7.8.6). No I/O here. */
#ifndef LR_INITIATOR_ALUA_H
#define LR_INITIATOR_ALUA_H

#include <stdint.h>

#include "linerate/multipath.h"

/* REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah; SPC-4 §6.27), length-only
 * format, alloc bytes at most: fills cdb (12 bytes), returns 12. */
unsigned ini_alua_rtpg_cdb(uint8_t cdb[12], uint32_t alloc);

/* INQUIRY VPD page 0x83 (Device Identification; SPC-4 §7.8.6), alloc bytes at most. */
unsigned ini_alua_vpd83_cdb(uint8_t cdb[6], uint16_t alloc);

struct ini_alua_group {
    uint16_t id;
    uint8_t state; /* enum lr_alua_state */
};

/* The target port groups of an RTPG answer of len bytes (either format), max at most into
 * out. Returns how many, or -1 when the answer is malformed (a descriptor past its end). */
int ini_alua_rtpg_parse(const uint8_t *buf, uint32_t len, struct ini_alua_group *out, unsigned max);

/* The TARGET PORT GROUP designator (type 5, association: target port) of a VPD 0x83 page:
 * 0 and *group set, or -1 when there is none. */
int ini_alua_vpd83_group(const uint8_t *buf, uint32_t len, uint16_t *group);

/* What a command's sense data say about its path. */
enum ini_alua_sense {
    INI_SENSE_OTHER,       /* nothing about ALUA: the command's own outcome */
    INI_SENSE_AAS_CHANGED, /* UNIT ATTENTION 2Ah/06h: states changed, ask RTPG again */
    INI_SENSE_STANDBY,     /* NOT READY 04h/0Bh: this port is standby for the LU */
    INI_SENSE_UNAVAILABLE, /* NOT READY 04h/0Ch */
    INI_SENSE_TRANSITION,  /* NOT READY 04h/0Ah: the state is changing */
};
enum ini_alua_sense ini_alua_sense(const uint8_t *sense, uint32_t len);

/* Sense key, ASC and ASCQ of fixed or descriptor sense data (SPC-4 §4.5); 0 when too short. */
void ini_sense_kaa(const uint8_t *sense, uint32_t len, uint8_t *key, uint8_t *asc, uint8_t *ascq);

#endif
