/* What every store shares whatever its type: growing and closing one through its ops (bs.h).
 * Opening one from a --lun spec is bs_open.c's. */
#include <stdio.h>
#include <stdlib.h>

#include "bs/bs.h"

int bs_grow(struct bs *bs, uint64_t size, char *err, size_t errlen)
{
    if (size < bs->size) {
        snprintf(err, errlen, "%s: cannot shrink (%llu < %llu bytes): data would be lost", bs->desc,
                 (unsigned long long)size, (unsigned long long)bs->size);
        return -1;
    }
    if (size == bs->size)
        return 0;
    if (!bs->ops->grow) {
        snprintf(err, errlen, "%s: a %s store cannot grow", bs->desc, bs->ops->name);
        return -1;
    }
    if (bs->read_only) {
        snprintf(err, errlen, "%s: opened read-only, cannot grow", bs->desc);
        return -1;
    }
    if (bs->ops->grow(bs, size, err, errlen) < 0)
        return -1;
    /* Last: a reader that sees the new size finds the store able to serve it. */
    __atomic_store_n(&bs->size, size, __ATOMIC_RELEASE);
    return 0;
}

void bs_close(struct bs *bs)
{
    if (!bs)
        return;
    if (bs->ops->close)
        bs->ops->close(bs);
    free(bs);
}
