/* iSCSI as a SCSI transport protocol: the initiator port name "<iSCSI name>,i,0x<ISID>"
 * (RFC 7143 §4.2.7.1) and the iSCSI TransportID that carries it in PERSISTENT RESERVE
 * commands (SPC-4 §7.6.4.6), for the SCSI core, which knows neither. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "iscsi/scsi_port.h"
#include "util/bytes.h"

#define TID_ISCSI_PORT 0x45 /* FORMAT CODE 01b (a port), PROTOCOL IDENTIFIER 5h (iSCSI) */

/* ISID digits in lower case, as a TransportID's are folded to (tid_parse). */
static void port_name(char *out, size_t n, const char *initiator_name, const void *port_id)
{
    const uint8_t *isid = port_id;
    snprintf(out, n, "%.200s,i,0x%02x%02x%02x%02x%02x%02x", initiator_name, isid[0], isid[1],
             isid[2], isid[3], isid[4], isid[5]);
}

/* Format 01b: the port name, NUL, padded to a multiple of 4 and at least 20 bytes after the
 * 4-byte header. */
static uint32_t tid_len(const char *port)
{
    uint32_t n = ((uint32_t)strlen(port) + 1 + 3) & ~3u;
    return 4 + (n < 20 ? 20 : n);
}

static void tid_put(uint8_t *p, const char *port)
{
    uint32_t len = tid_len(port);
    memset(p, 0, len);
    p[0] = TID_ISCSI_PORT;
    put_be16(p + 2, (uint16_t)(len - 4));
    memcpy(p + 4, port, strlen(port));
}

/* n hex digits at s. */
static bool hex_run(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* An iSCSI name as RFC 7143 §4.2.7 defines it, n bytes at s: "iqn." a year and month, '.',
 * a reversed domain name and optionally ':' and more; "eui." and 16 hex digits; "naa." and 16
 * or 32 hex digits; at most 223 bytes. Of the characters stringprep allows only the ASCII
 * ones: letters (names compare without case), digits, '-', '.', ':'. */
static bool name_valid(const char *s, size_t n)
{
    if (n <= 4 || n > 223)
        return false;
    if (!strncasecmp(s, "eui.", 4))
        return n == 20 && hex_run(s + 4, 16);
    if (!strncasecmp(s, "naa.", 4))
        return (n == 20 || n == 36) && hex_run(s + 4, n - 4);
    if (strncasecmp(s, "iqn.", 4) || n < 13)
        return false;
    const char *d = s + 4; /* YYYY-MM.x */
    for (unsigned i = 0; i < 7; i++)
        if (i == 4 ? d[i] != '-' : d[i] < '0' || d[i] > '9')
            return false;
    unsigned month = (unsigned)(d[5] - '0') * 10 + (unsigned)(d[6] - '0');
    if (month < 1 || month > 12 || d[7] != '.' || d[8] == ':')
        return false;
    for (size_t i = 12; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.' || c == ':';
        if (!ok)
            return false;
    }
    return true;
}

/* Byte 0: FORMAT CODE 01b (a port: name, ",i,0x", 12 hex digits of ISID; 00b names a whole
 * initiator, no port) with the reserved bits 0 and PROTOCOL IDENTIFIER 5h; bytes 2-3:
 * ADDITIONAL LENGTH, at least 20, a multiple of 4, within len; then the text, NUL-terminated
 * and NUL-padded to it. The port name comes out as port_name spells it (ISID digits in lower
 * case). */
static int tid_parse(const uint8_t *tid, uint32_t len, char *port, size_t portlen, uint32_t *bad)
{
    if (len < 4 || tid[0] != TID_ISCSI_PORT)
        return *bad = 0, -1;
    uint32_t n = get_be16(tid + 2);
    if (n < 20 || n % 4 || n + 4 > len)
        return *bad = 2, -1;
    *bad = 4; /* the text */
    const char *s = (const char *)tid + 4;
    size_t sl = strnlen(s, n);
    if (sl == n || sl >= portlen)
        return -1;
    for (size_t i = sl; i < n; i++)
        if (s[i])
            return -1; /* NUL-padded */
    const char *sep = memchr(s, ',', sl);
    if (!sep || (size_t)(s + sl - sep) != 17 || memcmp(sep, ",i,0x", 5) != 0 ||
        !hex_run(sep + 5, 12) || !name_valid(s, (size_t)(sep - s)))
        return -1;
    for (size_t i = 0; i < sl; i++)
        port[i] = sep + 5 <= s + i && s[i] >= 'A' && s[i] <= 'F' ? (char)(s[i] - 'A' + 'a') : s[i];
    port[sl] = '\0';
    return 0;
}

/* RFC 7143 §4.2.7.2: the target port name is the target's iSCSI name and its TPGT. */
static void target_port_name(char *out, size_t n, const char *target_name, uint16_t tpgt)
{
    snprintf(out, n, "%.224s,t,0x%04x", target_name, tpgt);
}

const struct scsi_transport iscsi_scsi_transport = {
    .port_name = port_name,
    .protocol_id = 0x5,           /* iSCSI (SPC-4 table 444) */
    .version_descriptor = 0x0960, /* iSCSI (no version claimed), SPC-4 table 146 */
    .target_port_name = target_port_name,
    .tid_len = tid_len,
    .tid_put = tid_put,
    .tid_parse = tid_parse,
};
