/* The fixture the SCSI core unit tests share (see scsi_fixture.h): the test store, LUN and
 * nexus setup, running one command as a transport would, and the sense checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bs/bs.h"
#include "scsi_fixture.h"
#include "util/bytes.h"
#include "iscsi/scsi_port.h"

static void store_submit(struct bs *bs, struct bs_io *io)
{
    struct sfx_store *m = bs->priv;
    uint64_t off = io->offset;
    if (m->fail_err) {
        io->done(io, m->fail_err);
        return;
    }
    if (io->op == BS_FLUSH && (m->hold & 1u << BS_FLUSH)) {
        m->flushes++;
        m->held = io;
        return;
    }
    switch (io->op) {
    case BS_WRITE_SAME: {
        size_t plen = io->iov[0].iov_len;
        assert_true(bs->write_same && plen && io->length % plen == 0);
        for (uint64_t o = 0; o < io->length; o += plen)
            memcpy(m->mem + io->offset + o, io->iov[0].iov_base, plen);
        m->write_sames++;
        m->last_same_len = io->length;
        m->last_fua = io->fua;
        break;
    }
    case BS_COMPARE_AND_WRITE: {
        assert_true(bs->caw_unit && io->iovcnt == 2);
        assert_int_equal(io->offset / bs->caw_unit, (io->offset + io->length - 1) / bs->caw_unit);
        m->caws++;
        const uint8_t *cmp = io->iov[0].iov_base;
        for (uint64_t i = 0; i < io->length; i++) {
            if (cmp[i] != m->mem[io->offset + i]) {
                io->miscompare = i;
                io->done(io, -EILSEQ);
                return;
            }
        }
        memcpy(m->mem + io->offset, io->iov[1].iov_base, io->length);
        break;
    }
    case BS_READ:
    case BS_WRITE:
        for (int i = 0; i < io->iovcnt && off < io->offset + io->length; i++) {
            size_t n = io->iov[i].iov_len;
            if (n > io->offset + io->length - off)
                n = io->offset + io->length - off;
            if (io->op == BS_READ)
                memcpy(io->iov[i].iov_base, m->mem + off, n);
            else
                memcpy(m->mem + off, io->iov[i].iov_base, n);
            off += n;
        }
        if (io->op == BS_WRITE) {
            m->writes++;
            m->last_fua = io->fua;
        } else {
            m->reads++;
        }
        break;
    case BS_FLUSH:
        m->flushes++;
        break;
    default:
        break;
    }
    if (io->op == BS_WRITE && (m->hold & 1u << BS_WRITE)) {
        m->held = io;
        return;
    }
    io->done(io, 0);
}

static void store_close(struct bs *bs)
{
    struct sfx_store *m = bs->priv;
    free(m->mem);
    free(m);
}

static const struct bs_ops store_ops = {
    .name = "test", .submit = store_submit, .close = store_close};

struct bs *sfx_store_open(uint64_t size, bool write_cache, struct sfx_store **out)
{
    struct bs *bs = calloc(1, sizeof(*bs));
    struct sfx_store *m = calloc(1, sizeof(*m));
    m->mem = calloc(1, size);
    bs->ops = &store_ops;
    bs->size = size;
    bs->write_cache = write_cache;
    bs->write_atomic = true; /* synchronous copies on one thread: all or nothing */
    bs->priv = m;
    *out = m;
    return bs;
}

int sfx_done_calls;

void sfx_on_done(struct scsi_task *t)
{
    (void)t;
    sfx_done_calls++;
}

void sfx_add_lun(struct scsi_target *tg, uint64_t lun, struct bs *bs, uint32_t bsz, bool ro)
{
    char err[128];
    assert_non_null(bs);
    struct scsi_lun_config c = {.lun = lun, .bs = bs, .block_size = bsz, .read_only = ro};
    assert_int_equal(scsi_target_add_lun(tg, &c, err, sizeof(err)), 0);
}

struct scsi_nexus *sfx_nexus_get(struct scsi_target *tg, uint8_t id)
{
    char name[64];
    const uint8_t isid[6] = {0x80, 0, 0, 0, 0, id};
    snprintf(name, sizeof(name), "iqn.2024-01.test:init%u", (unsigned)id);
    return scsi_nexus_get(tg, &iscsi_scsi_transport, name, isid);
}

void sfx_target_down(struct scsi_target *tg, struct scsi_task *t, struct scsi_nexus *n1,
                     struct scsi_nexus *n2, struct scsi_nexus *n3)
{
    scsi_task_release(t);
    if (n1)
        scsi_nexus_put(n1);
    if (n2)
        scsi_nexus_put(n2);
    if (n3)
        scsi_nexus_put(n3);
    scsi_target_destroy(tg);
}

void sfx_gateway_init(struct scsi_target *tg, const char *name, uint16_t group,
                      enum scsi_alua_state own, uint16_t peer, enum scsi_alua_state peer_state)
{
    assert_int_equal(scsi_target_init(tg, name, group), 0);
    tg->alua_state = own;
    tg->alua_peers[0] = (struct scsi_alua_group){.id = peer, .state = (uint8_t)peer_state};
    tg->alua_npeers = 1;
}

int sfx_gateways_teardown(void **state)
{
    struct sfx_gateways *f = *state;
    scsi_task_release(&f->t);
    scsi_nexus_put(f->nb);
    scsi_target_destroy(&f->b);
    sfx_target_down(&f->a, &f->t, f->na, NULL, NULL);
    free(f);
    return 0;
}

int sfx_run(struct scsi_task *t, struct scsi_target *tg, struct scsi_nexus *n, uint64_t lun,
            const uint8_t *cdb, const void *out, size_t out_len, uint32_t read_edtl,
            unsigned checks)
{
    scsi_task_release(t);
    scsi_task_init(t);
    memcpy(t->cdb, cdb, SCSI_CDB_MAX);
    t->lun = lun;
    t->target = tg;
    t->nexus = n;
    t->done = sfx_on_done;
    t->edtl = out ? (uint32_t)out_len : read_edtl; /* as a transport fills it from the PDU */
    t->edtl_write = out != NULL;
    t->edtl_read = out == NULL;
    sfx_done_calls = 0;
    if (scsi_task_setup(t) == 0) {
        if (t->dir == SCSI_DIR_WRITE) {
            /* like the transport: min(CDB length, EDTL) bytes arrive */
            size_t off = 0, want = out_len < t->xfer_len ? out_len : t->xfer_len;
            for (int i = 0; i < t->iovcnt && off < want; i++) {
                size_t k = t->iov[i].iov_len < want - off ? t->iov[i].iov_len : want - off;
                memcpy(t->iov[i].iov_base, (const uint8_t *)out + off, k);
                off += k;
            }
        }
        scsi_task_exec(t);
        if (checks & SFX_CHECK_DONE)
            assert_int_equal(sfx_done_calls, 1);
    } else {
        if (checks & SFX_CHECK_DONE)
            assert_int_equal(sfx_done_calls, 0);
        if (checks & SFX_CHECK_REFUSAL)
            assert_int_equal(t->status, SCSI_STATUS_CHECK_CONDITION);
    }
    return t->status;
}

void sfx_assert_sense(const struct scsi_task *t, unsigned checks, uint8_t key, uint8_t asc,
                      uint8_t ascq)
{
    assert_int_equal(t->status, SCSI_STATUS_CHECK_CONDITION);
    if (checks & SFX_SENSE_LEN)
        assert_int_equal(t->sense_len, 18);
    if (checks & SFX_SENSE_FIXED) {
        assert_int_equal(t->sense[0] & 0x7f, 0x70);
        assert_int_equal(t->sense[7], 10);
    }
    assert_int_equal(t->sense[2] & 0x0f, key);
    assert_int_equal(t->sense[12], asc);
    assert_int_equal(t->sense[13], ascq);
}

void sfx_assert_field_pointer(const struct scsi_task *t, uint8_t sksv_cd, unsigned byte)
{
    assert_int_equal(t->sense[15] & 0xc0, sksv_cd);
    assert_int_equal(get_be16(t->sense + 16), byte);
}

void sfx_prout24(uint8_t cdb[16], uint8_t list[24], unsigned sa, unsigned type, uint64_t rk,
                 uint64_t sark)
{
    memset(cdb, 0, 16);
    memset(list, 0, 24);
    cdb[0] = 0x5f;
    cdb[1] = (uint8_t)sa;
    cdb[2] = (uint8_t)type;
    put_be32(cdb + 5, 24);
    put_be64(list, rk);
    put_be64(list + 8, sark);
}

void sfx_cdb10(uint8_t *c, uint8_t op, uint8_t b1, uint32_t lba, uint16_t n)
{
    memset(c, 0, 16);
    c[0] = op;
    c[1] = b1;
    put_be32(c + 2, lba);
    put_be16(c + 7, n);
}

void sfx_assert_err_case(const struct scsi_task *t, const struct sfx_err_case *e, bool read)
{
    bool own = read && e->read_key;
    sfx_assert_sense(t, 0, own ? e->read_key : e->key, own ? e->read_asc : e->asc,
                     own ? e->read_ascq : e->ascq);
}
