/* How a handler finishes its task: the status from a sense reason, or GOOD with a response
 * copied into the task's buffer; then the transport's done(). */
#include <string.h>

#include "scsi/scsi_internal.h"

void scsi_task_complete(struct scsi_task *t, scsi_sr sr)
{
    scsi_task_set_reason(t, sr);
    t->done(t);
}

void scsi_task_put_data(struct scsi_task *t, const void *src, uint32_t len)
{
    uint32_t n = len < t->xfer_len ? len : t->xfer_len;
    uint32_t off = 0;
    for (int i = 0; i < t->iovcnt && off < n; i++) {
        uint32_t k = (uint32_t)t->iov[i].iov_len;
        if (k > n - off)
            k = n - off;
        memcpy(t->iov[i].iov_base, (const uint8_t *)src + off, k);
        off += k;
    }
    t->data_len = n;
    scsi_task_complete(t, SR_OK);
}
