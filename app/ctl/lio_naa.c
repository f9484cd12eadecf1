/* How LIO names a disk: the NAA designator of VPD 83h from the storage object's unit serial.
 * LIO (the kernel's drivers/target/target_core_spc.c, spc_gen_naa_6h_vendor_specific())
 * builds an NAA IEEE Registered Extended designator (NAA 6h, SPC-4 §7.8.6.6.5): the 24-bit
 * IEEE company id 001405h (LIO's OUI, the device's default company_id), then the first 25 hex
 * digits of the unit serial, characters that are not hex digits skipped, upper case read as
 * lower; when the serial runs out first the remaining nibbles stay zero. rtslib-fb saves that
 * unit serial as the storage object's `wwn` (a UUID, so its dashes are skipped). Rule and
 * citations: docs/migrate.md "Disk identity". */
#include <assert.h>
#include <ctype.h>
#include <string.h>

#include "ctl/lio.h"

void lio_naa_from_wwn(const char *wwn, char out[33])
{
    static const char prefix[] = "6001405"; /* NAA 6h, then company id 00 14 05 */
    memcpy(out, prefix, 7);
    size_t n = 7;
    for (const char *p = wwn; *p && n < 32; p++)
        if (isxdigit((unsigned char)*p))
            out[n++] = (char)tolower((unsigned char)*p);
    while (n < 32)
        out[n++] = '0';
    out[32] = 0;
    assert(strlen(out) == 32);
}
