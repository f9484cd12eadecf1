/* The PDUs that fuzz_pdu and fuzz_session write around the fuzzer's bytes: a Login Request that
 * goes straight to full feature phase, and a PDU's framing (DataSegmentLength and the padding of
 * the data segment to 4 bytes, RFC 7143 §11.2). The committed corpora were found behind exactly
 * these bytes: change them and the corpora lose what they reach. */
#ifndef LR_FUZZ_PDU_BUILD_H
#define LR_FUZZ_PDU_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/pdu.h"
#include "util/bytes.h"

/* Set the header's DataSegmentLength to dlen; returns the segment's length on the wire, padded
 * to 4 bytes (RFC 7143 §11.2.1: the padding is not counted in the field). */
static size_t fpb_frame(uint8_t *bhs, size_t dlen)
{
    put_be24(bhs + BHS_DATA_SEG_LEN, (uint32_t)dlen);
    return (dlen + 3) & ~(size_t)3;
}

/* The fields of a Login Request that differ between logins (the ISID is always the same). */
struct fpb_login {
    uint32_t itt;
    uint16_t tsih; /* 0: a new session (a leading login) */
    uint16_t cid;
    uint32_t cmdsn;
};

/* A Login Request from the operational stage straight to full feature phase (Transit, no
 * security stage), immediate, with keys (NULL entries left out) as its text, into out (cap
 * bytes; aborts if it does not fit). Returns its length on the wire. */
static size_t fpb_login(uint8_t *out, size_t cap, const char *const *keys, size_t nkeys,
                        const struct fpb_login *l)
{
    char text[1024];
    size_t tl = 0;
    for (size_t i = 0; i < nkeys; i++) {
        if (!keys[i])
            continue;
        size_t k = strlen(keys[i]) + 1;
        if (tl + k > sizeof(text))
            abort();
        memcpy(text + tl, keys[i], k);
        tl += k;
    }
    if (ISCSI_BHS_LEN + ((tl + 3) & ~(size_t)3) > cap)
        abort();
    memset(out, 0, ISCSI_BHS_LEN);
    out[0] = ISCSI_BHS_IMMEDIATE | ISCSI_OP_LOGIN_REQ;
    out[1] = ISCSI_LOGIN_TRANSIT | (ISCSI_STAGE_OPERATIONAL << 2) | ISCSI_STAGE_FULL_FEATURE;
    size_t padded = fpb_frame(out, tl);
    static const uint8_t isid[6] = {0x80, 0x12, 0x34, 0x56, 0x00, 0x01};
    memcpy(out + BHS_ISID, isid, sizeof(isid));
    put_be16(out + BHS_TSIH, l->tsih);
    put_be32(out + BHS_ITT, l->itt);
    put_be16(out + BHS_CID, l->cid);
    put_be32(out + BHS_CMDSN, l->cmdsn);
    memcpy(out + ISCSI_BHS_LEN, text, tl);
    memset(out + ISCSI_BHS_LEN + tl, 0, padded - tl);
    return ISCSI_BHS_LEN + padded;
}

#endif
