/* ALUA for the initiator (see alua.h): REPORT TARGET PORT GROUPS and VPD 0x83 read, and the
 * sense data that speak of access states. Pure functions over bytes, for mpath.c and the
 * unit tests. */
#include "initiator/alua.h"

#include <string.h>

#include "util/bytes.h"

unsigned ini_alua_rtpg_cdb(uint8_t cdb[12], uint32_t alloc)
{
    memset(cdb, 0, 12);
    cdb[0] = 0xa3; /* MAINTENANCE IN */
    cdb[1] = 0x0a; /* REPORT TARGET PORT GROUPS, PARAMETER DATA FORMAT 000b (length only) */
    put_be32(cdb + 6, alloc);
    return 12;
}

unsigned ini_alua_vpd83_cdb(uint8_t cdb[6], uint16_t alloc)
{
    memset(cdb, 0, 6);
    cdb[0] = 0x12;
    cdb[1] = 0x01; /* EVPD */
    cdb[2] = 0x83;
    put_be16(cdb + 3, alloc);
    return 6;
}

/* SPC-4 §6.27.2: a 4-byte header (RETURN DATA LENGTH), or 8 bytes when byte 4 says FORMAT
 * TYPE 001b (extended header); then per group 8 bytes and 4 per target port. The answer may
 * be cut at the allocation length: a descriptor that does not fit whole is left out, one
 * whose port count runs past the stated length is malformed. */
int ini_alua_rtpg_parse(const uint8_t *buf, uint32_t len, struct ini_alua_group *out, unsigned max)
{
    if (len < 4)
        return -1;
    uint64_t end = 4 + (uint64_t)get_be32(buf);
    uint32_t off = 4;
    if (len >= 8 && (buf[4] & 0x70) == 0x10)
        off = 8;
    if (end > len)
        end = len; /* truncated by our allocation length: read what came */
    unsigned n = 0;
    while (off + 8 <= end) {
        uint32_t ports = buf[off + 7];
        uint64_t next = off + 8 + 4ull * ports;
        if (next > 4 + (uint64_t)get_be32(buf))
            return -1;
        if (next > end)
            break;
        if (n < max) {
            out[n].id = get_be16(buf + off + 2);
            out[n].state = buf[off] & 0x0f;
        }
        n++;
        off = (uint32_t)next;
    }
    return (int)(n < max ? n : max);
}

/* SPC-4 §7.8.6: 4-byte page header, designators of 4 bytes + DESIGNATOR LENGTH each; the
 * target port group one (§7.8.6.8) has association 01b and type 5h, the group in bytes 2-3. */
int ini_alua_vpd83_group(const uint8_t *buf, uint32_t len, uint16_t *group)
{
    if (len < 4 || buf[1] != 0x83)
        return -1;
    uint32_t end = 4 + get_be16(buf + 2);
    if (end > len)
        end = len;
    for (uint32_t off = 4; off + 4 <= end;) {
        uint32_t dlen = buf[off + 3];
        if (off + 4 + dlen > end)
            break;
        if ((buf[off + 1] & 0x0f) == 0x5 && ((buf[off + 1] >> 4) & 0x3) == 0x1 && dlen >= 4) {
            *group = get_be16(buf + off + 4 + 2);
            return 0;
        }
        off += 4 + dlen;
    }
    return -1;
}

void ini_sense_kaa(const uint8_t *sense, uint32_t len, uint8_t *key, uint8_t *asc, uint8_t *ascq)
{
    *key = *asc = *ascq = 0;
    if (len < 3)
        return;
    if ((sense[0] & 0x7f) >= 0x72) { /* descriptor format */
        *key = sense[1] & 0x0f;
        if (len >= 4) {
            *asc = sense[2];
            *ascq = sense[3];
        }
        return;
    }
    *key = sense[2] & 0x0f;
    if (len >= 14) {
        *asc = sense[12];
        *ascq = sense[13];
    }
}

/* SPC-4 §5.16.2.5: a change of access state is reported with UNIT ATTENTION, ASYMMETRIC ACCESS
 * STATE CHANGED; §5.16.2.4.5-.7: commands a standby, unavailable or transitioning port does
 * not allow end with NOT READY, LOGICAL UNIT NOT ACCESSIBLE + the reason. */
static const struct {
    uint8_t key, asc, ascq;
    enum ini_alua_sense says;
} alua_senses[] = {
    {0x6, 0x2a, 0x06, INI_SENSE_AAS_CHANGED},
    {0x2, 0x04, 0x0b, INI_SENSE_STANDBY},
    {0x2, 0x04, 0x0c, INI_SENSE_UNAVAILABLE},
    {0x2, 0x04, 0x0a, INI_SENSE_TRANSITION},
};

enum ini_alua_sense ini_alua_sense(const uint8_t *sense, uint32_t len)
{
    uint8_t key, asc, ascq;
    ini_sense_kaa(sense, len, &key, &asc, &ascq);
    for (unsigned i = 0; i < sizeof(alua_senses) / sizeof(alua_senses[0]); i++)
        if (key == alua_senses[i].key && asc == alua_senses[i].asc && ascq == alua_senses[i].ascq)
            return alua_senses[i].says;
    return INI_SENSE_OTHER;
}
