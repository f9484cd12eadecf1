/* Mode parameters (SPC-4 §6.11-§6.14, §7.5; SBC-3 §6.4): MODE SENSE 6/10 and MODE SELECT 6/10
 * over the caching (08h), control (0Ah) and informational exceptions control (1Ch) pages.
 * Only WCE and SWP can change; a change raises MODE PARAMETERS CHANGED on the other nexuses. */
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"
#include "util/bytes.h"

enum { PC_CURRENT, PC_CHANGEABLE, PC_DEFAULT, PC_SAVED };

struct mode_page {
    uint8_t code;
    uint8_t len; /* PAGE LENGTH: bytes after byte 1 */
    void (*fill)(const struct scsi_lun *lu, int pc, uint8_t *p);
};

/* Caching (SBC-3 §6.4.5): WCE in byte 2 bit 2; RCD 0 (reads may use a cache). */
static void fill_caching(const struct scsi_lun *lu, int pc, uint8_t *p)
{
    bool wce = pc == PC_CHANGEABLE ? true
               : pc == PC_DEFAULT  ? lu->bs->write_cache
                                   : atomic_load(&lu->wce);
    p[2] = wce ? 0x04 : 0;
}

/* Control (SPC-4 §7.5.8): unrestricted reordering (QUEUE ALGORITHM MODIFIER 1), QERR 0,
 * fixed-format sense (D_SENSE 0), GLTSD 1 since no log parameters are saved. SWP (byte 4 bit
 * 3) can change: software write protect for the whole LUN, every nexus (TST 000b). */
static void fill_control(const struct scsi_lun *lu, int pc, uint8_t *p)
{
    if (pc == PC_CHANGEABLE) {
        p[4] = 0x08;
        return;
    }
    p[2] = 0x02;
    p[3] = 0x10;
    if (pc == PC_CURRENT && atomic_load(&((struct scsi_lun *)lu)->swp))
        p[4] = 0x08;
}

/* Informational exceptions control (SPC-4 §7.5.14): no failure prediction, so DEXCPT=1. */
static void fill_iec(const struct scsi_lun *lu, int pc, uint8_t *p)
{
    (void)lu;
    if (pc == PC_CHANGEABLE)
        return;
    p[2] = 0x08;
}

/* in page-code order: page 3Fh returns them in this order (SPC-4 §6.11) */
static const struct mode_page mode_pages[] = {
    {0x08, 0x12, fill_caching},
    {0x0a, 0x0a, fill_control},
    {0x1c, 0x0a, fill_iec},
};
#define NPAGES (sizeof(mode_pages) / sizeof(mode_pages[0]))

static const struct mode_page *find_page(uint8_t code)
{
    for (size_t i = 0; i < NPAGES; i++)
        if (mode_pages[i].code == code)
            return &mode_pages[i];
    return NULL;
}

static uint8_t *put_page(const struct mode_page *pg, const struct scsi_lun *lu, int pc, uint8_t *p)
{
    memset(p, 0, 2u + pg->len);
    p[0] = pg->code; /* PS 0: pages cannot be saved */
    p[1] = pg->len;
    pg->fill(lu, pc, p);
    return p + 2 + pg->len;
}

static bool is_ms10(const struct scsi_task *t)
{
    return t->cdb[0] == 0x5a || t->cdb[0] == 0x55;
}

scsi_sr mode_parse_sense(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    uint8_t pc = t->cdb[2] >> 6, page = t->cdb[2] & 0x3f, subpage = t->cdb[3];
    if (pc == PC_SAVED)
        return SR_SAVING_NOT_SUPPORTED; /* SPC-4 §6.11.3 */
    if (page != 0x3f && !find_page(page))
        return SR_CDB_FIELD(2, 5);
    if (subpage != 0 && subpage != 0xff) /* no subpages: 0 or "all subpages" only */
        return SR_CDB_FIELD(3, -1);
    r->xfer_len = is_ms10(t) ? get_be16(t->cdb + 7) : t->cdb[4];
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

void mode_exec_sense(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    const struct scsi_lun *lu = t->lu;
    bool ten = is_ms10(t);
    bool dbd = t->cdb[1] & 0x08, llbaa = ten && (t->cdb[1] & 0x10);
    int pc = t->cdb[2] >> 6;
    uint8_t page = t->cdb[2] & 0x3f;
    uint8_t d[256] = {0};
    unsigned hdr = ten ? 8 : 4;
    uint8_t *p = d + hdr;

    /* device-specific parameter (SBC-3 §6.4.1): WP (read-only or SWP), DPOFUA (FUA is
     * honoured) */
    bool map_ro = false; /* mapped read-only for this host (scsi_target_host_map) */
    if (t->nexus)
        scsi_nexus_lun(t->nexus, t->lun, &map_ro);
    uint8_t dsp = (map_ro || sbc_write_protect(lu) ? 0x80 : 0) | 0x10;
    unsigned bdl = 0;
    if (!dbd) {
        uint64_t nb = pc == PC_CHANGEABLE ? 0 : lu->nblocks;
        uint32_t bl = pc == PC_CHANGEABLE ? 0 : lu->block_size;
        if (llbaa) { /* long LBA block descriptor (SBC-3 §6.4.2.3) */
            put_be64(p, nb);
            put_be32(p + 12, bl);
            bdl = 16;
        } else { /* short block descriptor (SBC-3 §6.4.2.2) */
            put_be32(p, nb > 0xffffffffu ? 0xffffffffu : (uint32_t)nb);
            put_be24(p + 5, bl);
            bdl = 8;
        }
        p += bdl;
    }
    for (size_t i = 0; i < NPAGES; i++)
        if (page == 0x3f || mode_pages[i].code == page)
            p = put_page(&mode_pages[i], lu, pc, p);

    uint32_t len = (uint32_t)(p - d);
    if (ten) {
        put_be16(d, (uint16_t)(len - 2));
        d[3] = dsp;
        d[4] = llbaa && bdl ? 0x01 : 0; /* LONGLBA */
        put_be16(d + 6, (uint16_t)bdl);
    } else {
        d[0] = (uint8_t)(len - 1);
        d[2] = dsp;
        d[3] = (uint8_t)bdl;
    }
    scsi_task_put_data(t, d, len);
}

scsi_sr mode_parse_select(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    bool ten = is_ms10(t);
    if (t->cdb[1] & 0x01) /* SP: saved pages are not supported (SPC-4 §6.9) */
        return SR_CDB_FIELD(1, 0);
    uint32_t len = ten ? get_be16(t->cdb + 7) : t->cdb[4];
    if (len && len < (ten ? 8u : 4u)) /* not even a header */
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = len;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

/* Checks the whole parameter list against the changeable mask, before anything is applied, so
 * a bad page leaves every parameter unchanged: the WCE and SWP it asks for. */
static scsi_sr mode_select_parse(struct scsi_task *t, const uint8_t *d, uint32_t len, bool *wce_out,
                                 bool *swp_out)
{
    struct scsi_lun *lu = t->lu;
    bool ten = is_ms10(t);
    uint32_t hdr = ten ? 8 : 4;
    uint32_t bdl = ten ? get_be16(d + 6) : d[3];
    bool longlba = ten && (d[4] & 1);
    uint32_t off = hdr;

    if (bdl) {
        uint32_t want = longlba ? 16 : 8;
        if (bdl != want)
            return SR_PARAM_FIELD(ten ? 6 : 3, -1);
        if (hdr + bdl > len)
            return SR_PARAM_LIST_LENGTH;
        const uint8_t *b = d + hdr;
        uint64_t nb = longlba ? get_be64(b) : get_be32(b);
        uint32_t bl = longlba ? get_be32(b + 12) : get_be24(b + 5);
        if (bl != lu->block_size) /* block size cannot change */
            return SR_PARAM_FIELD(hdr + (longlba ? 12 : 5), -1);
        if (nb && nb != lu->nblocks && !(nb == 0xffffffffu && !longlba))
            return SR_PARAM_FIELD(hdr, -1); /* nor can the capacity */
        off += bdl;
    }

    bool wce = atomic_load(&lu->wce), swp = atomic_load(&lu->swp);
    while (off < len) {
        if (len - off < 2)
            return SR_PARAM_LIST_LENGTH;
        uint8_t code = d[off] & 0x3f; /* PS is reserved in MODE SELECT */
        if (d[off] & 0x40)            /* SPF: no subpages */
            return SR_PARAM_FIELD(off, 6);
        const struct mode_page *pg = find_page(code);
        if (!pg)
            return SR_PARAM_FIELD(off, 5);
        if (d[off + 1] != pg->len)
            return SR_PARAM_FIELD(off + 1, -1);
        if (off + 2 + pg->len > len)
            return SR_PARAM_LIST_LENGTH;
        uint8_t cur[64], mask[64];
        put_page(pg, lu, PC_CURRENT, cur);
        put_page(pg, lu, PC_CHANGEABLE, mask);
        for (unsigned i = 2; i < 2u + pg->len; i++) {
            uint8_t bad = (uint8_t)((d[off + i] ^ cur[i]) & ~mask[i]);
            if (bad)
                return SR_PARAM_FIELD(off + i, 31 - __builtin_clz(bad));
        }
        if (code == 0x08)
            wce = d[off + 2] & 0x04;
        if (code == 0x0a)
            swp = d[off + 4] & 0x08;
        off += 2 + pg->len;
    }
    *wce_out = wce;
    *swp_out = swp;
    return SR_OK;
}

/* Apply WCE and SWP; wce_was is WCE from before this MODE SELECT (which turned it off already
 * when it had to flush). */
static void mode_select_commit(struct scsi_task *t, bool wce_was, bool wce, bool swp)
{
    struct scsi_lun *lu = t->lu;
    pthread_mutex_lock(&lu->lock);
    bool changed = wce_was != wce || atomic_load(&lu->swp) != swp;
    atomic_store(&lu->wce, wce);
    atomic_store(&lu->swp, swp);
    pthread_mutex_unlock(&lu->lock);
    if (changed) /* SPC-4 §7.5.1: the other I_T nexuses learn by UA 2Ah/01h */
        scsi_ua_raise_all(lu, t->nexus, UA_MODE_CHANGED);
}

static void wce_off_flushed(struct bs_io *io, int err)
{
    struct scsi_task *t = io->arg;
    struct scsi_lun *lu = t->lu;
    if (err) {
        /* the cache still holds acknowledged writes: WCE stays on, so the initiator goes on
         * sending SYNCHRONIZE CACHE, and the MODE SELECT fails as that would */
        pthread_mutex_lock(&lu->lock);
        atomic_store(&lu->wce, true);
        pthread_mutex_unlock(&lu->lock);
        scsi_task_complete(t, sbc_io_reason(BS_FLUSH, err));
        return;
    }
    mode_select_commit(t, true, false, scsi_core(t)->mode_swp);
    scsi_task_complete(t, SR_OK);
}

/* The writes in the store when WCE went off were set up with it on (no FUA) and may finish
 * after a flush that starts now: the flush waits for them, by an exclusive hold of the whole
 * LUN's range lock, which is granted once every write holding it shared is done (writes set up
 * after WCE went off are FUA and need nothing). */
struct wce_off {
    struct scsi_rl_req lock;
    struct scsi_task *t;
};

static void wce_off_drained(struct scsi_rl_req *q)
{
    struct wce_off *w = q->arg;
    struct scsi_task *t = w->t;
    scsi_rl_release(&t->lu->rl, q);
    free(w);
    scsi_core(t)->io = (struct bs_io){.op = BS_FLUSH, .done = wce_off_flushed, .arg = t};
    bs_submit(t->lu->bs, &scsi_core(t)->io);
}

void mode_exec_select(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    bool wce, swp;
    scsi_sr sr =
        t->xfer_len ? mode_select_parse(t, t->iov[0].iov_base, t->xfer_len, &wce, &swp) : SR_OK;
    if (!t->xfer_len || sr) {
        scsi_task_complete(t, sr);
        return;
    }
    struct wce_off *w = NULL;
    pthread_mutex_lock(&lu->lock);
    bool wce_was = atomic_load(&lu->wce);
    /* a store without a volatile cache (RAM) has nothing to flush: WCE is only a bit there */
    bool flush = wce_was && !wce && lu->bs->write_cache;
    if (flush && (w = malloc(sizeof(*w))) != NULL)
        atomic_store(&lu->wce, false); /* writes set up from now on are FUA */
    pthread_mutex_unlock(&lu->lock);
    if (flush) {
        /* Turning the write cache off: an initiator stops sending SYNCHRONIZE CACHE once it
         * reads WCE=0 (Linux does), so the writes acknowledged into the cache before are made
         * stable first, asynchronously as SYNCHRONIZE CACHE does; the answer waits for it. */
        if (!w) {
            scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
            return;
        }
        scsi_core(t)->mode_swp = swp;
        w->t = t;
        w->lock = (struct scsi_rl_req){.off = 0,
                                       .len = UINT64_MAX,
                                       .mode = SCSI_RL_EXCL,
                                       .granted = wce_off_drained,
                                       .arg = w};
        if (scsi_rl_acquire(&lu->rl, &w->lock))
            wce_off_drained(&w->lock);
        return;
    }
    mode_select_commit(t, wce_was, wce, swp);
    scsi_task_complete(t, SR_OK);
}
