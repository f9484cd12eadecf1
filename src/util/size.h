/* Parsing human sizes ("512", "4k", "1G", "512M") as used on the command line and in configs. */
#ifndef LR_UTIL_SIZE_H
#define LR_UTIL_SIZE_H

#include <stdint.h>

/* Binary suffixes k/K, m/M, g/G, t/T (optionally followed by "iB" or "B"; "b", bits, is
 * refused). Returns 0, or -1 on garbage, an unknown suffix or overflow. */
int size_parse(const char *s, uint64_t *out);

#endif
