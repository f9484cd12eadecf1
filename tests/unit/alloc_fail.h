/* Allocation failure on demand, for the tests of out-of-memory paths: an executable that links
 * alloc_fail.c is linked with -Wl,--wrap=malloc,--wrap=calloc (tests/unit/meson.build), so the
 * code under test (static libraries) allocates through here. Nothing fails unless asked. */
#ifndef LR_TESTS_UNIT_ALLOC_FAIL_H
#define LR_TESTS_UNIT_ALLOC_FAIL_H

#include <stddef.h>

/* The allocation of exactly size bytes after skip more of that size fails, once. */
void af_fail_sized(size_t size, unsigned skip);
/* Whether that failure has happened (and nothing more is armed). */
int af_fired(void);

#endif
