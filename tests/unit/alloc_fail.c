/* Allocation failure on demand (alloc_fail.h). */
#include <stdatomic.h>
#include <stdlib.h>

#include "alloc_fail.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);

static atomic_size_t fail_size; /* 0: nothing armed */
static atomic_int fail_skip;    /* allocations of fail_size still let through */
static atomic_int fired;

void af_fail_sized(size_t size, unsigned skip)
{
    atomic_store(&fired, 0);
    atomic_store(&fail_skip, (int)skip);
    atomic_store(&fail_size, size);
}

int af_fired(void)
{
    return atomic_load(&fired);
}

static int should_fail(size_t size)
{
    if (size == 0 || atomic_load(&fail_size) != size)
        return 0;
    if (atomic_fetch_sub(&fail_skip, 1) > 0)
        return 0;
    atomic_store(&fail_size, 0);
    atomic_store(&fired, 1);
    return 1;
}

void *__wrap_malloc(size_t size)
{
    return should_fail(size) ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return n == 1 && should_fail(size) ? NULL : __real_calloc(n, size);
}
