/* Human size parsing for --lun and config files. */
#include "util/size.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int size_parse(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    case 't':
    case 'T':
        shift = 40;
        end++;
        break;
    case '\0':
        break;
    default:
        return -1;
    }
    /* "1GiB" and "1GB" are bytes; a lower-case b is bits ("1Gb", a gigabit), never taken
     * for bytes. */
    if (shift && (strcmp(end, "B") == 0 || strcasecmp(end, "iB") == 0) &&
        end[strlen(end) - 1] == 'B')
        end += strlen(end);
    if (*end != '\0')
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
