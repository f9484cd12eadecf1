/* Thin provisioning and the other block commands without sockets: UNMAP, WRITE SAME, GET LBA
 * STATUS, COMPARE AND WRITE, ORWRITE, WRITE ATOMIC, PRE-FETCH, READ DEFECT DATA, SANITIZE,
 * software write protect, and the range lock that orders them. Each command's effect on the
 * data, and each refusal's sense, as SBC-4 and libiscsi's iscsi-test-cu expect them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scsi/scsi.h"
#include "scsi/scsi_internal.h"
#include "scsi/scsi_internal.h"
#include "util/bytes.h"

#include "scsi_fixture.h"

/* --- fixture: LUN 0 ram 4M/512 (thin), LUN 1 test store 1M (full, no map), LUN 2 read-only
 * ram 1M, LUN 3 file 4M (thin, holes), LUN 4 ram 1M/4096 --- */
#define RAM_BLOCKS ((4u << 20) / 512)
struct fx {
    struct scsi_target tg;
    struct scsi_nexus *n1, *n2;
    struct sfx_store *m; /* LUN 1: fully provisioned, no map() */
    struct scsi_task t;
    char path[64];
};

/* One command: setup, out_len data-out bytes (EDTL), exec. Returns the status. */
static int run(struct fx *f, uint64_t lun, const uint8_t *cdb, const void *out, size_t out_len)
{
    return sfx_run(&f->t, &f->tg, f->n1, lun, cdb, out, out_len, 4096, SFX_CHECK_DONE);
}

static const uint8_t *data(struct fx *f)
{
    return f->t.iov[0].iov_base;
}

static void assert_sense(const struct scsi_task *t, uint8_t key, uint8_t asc, uint8_t ascq)
{
    sfx_assert_sense(t, 0, key, asc, ascq);
}

static void cdb16(uint8_t *c, uint8_t op, uint8_t b1, uint64_t lba, uint32_t n)
{
    memset(c, 0, 16);
    c[0] = op;
    c[1] = b1;
    put_be64(c + 2, lba);
    put_be32(c + 10, n);
}

static void write_blocks(struct fx *f, uint64_t lun, uint32_t lba, uint16_t n, uint8_t byte,
                         uint32_t bsz)
{
    uint8_t c[16];
    uint8_t *buf = malloc((size_t)n * bsz);
    memset(buf, byte, (size_t)n * bsz);
    sfx_cdb10(c, 0x2a, 0, lba, n);
    assert_int_equal(run(f, lun, c, buf, (size_t)n * bsz), SCSI_STATUS_GOOD);
    free(buf);
}

/* READ(10) and compare every byte with `byte` */
static void assert_blocks(struct fx *f, uint64_t lun, uint32_t lba, uint16_t n, uint8_t byte,
                          uint32_t bsz)
{
    uint8_t c[16];
    sfx_cdb10(c, 0x28, 0, lba, n);
    f->t.edtl = 0;
    assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
    for (size_t i = 0; i < (size_t)n * bsz; i++)
        if (data(f)[i] != byte)
            fail_msg("LUN %u LBA %u byte %zu: %02x, want %02x", (unsigned)lun, lba, i, data(f)[i],
                     byte);
}

static const uint8_t TUR[16] = {0x00};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[128], spec[96];
    assert_int_equal(scsi_target_init(&f->tg, "iqn.2024-01.io.linerate:sbcx", 1), 0);
    sfx_add_lun(&f->tg, 0, bs_open_spec("ram:4M", err, sizeof(err)), 512, false);
    sfx_add_lun(&f->tg, 1, sfx_store_open(1 << 20, false, &f->m), 512, false);
    sfx_add_lun(&f->tg, 2, bs_open_spec("ram:1M", err, sizeof(err)), 512, true);
    snprintf(f->path, sizeof(f->path), "/tmp/lr-sbcx-XXXXXX");
    int fd = mkstemp(f->path);
    assert_true(fd >= 0);
    close(fd);
    snprintf(spec, sizeof(spec), "file:%s,size=4M", f->path);
    sfx_add_lun(&f->tg, 3, bs_open_spec(spec, err, sizeof(err)), 512, false);
    sfx_add_lun(&f->tg, 4, bs_open_spec("ram:1M", err, sizeof(err)), 4096, false);
    f->n1 = sfx_nexus_get(&f->tg, 1);
    f->n2 = sfx_nexus_get(&f->tg, 2);
    for (uint64_t lun = 0; lun < 5; lun++)
        run(f, lun, TUR, NULL, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    sfx_target_down(&f->tg, &f->t, f->n1, f->n2, NULL);
    unlink(f->path);
    free(f);
    return 0;
}

/* --- VPD and READ CAPACITY say what the store is --- */

static void test_provisioning_reported(void **state)
{
    struct fx *f = *state;
    uint8_t inq[16] = {0x12, 1, 0xb0, 0, 255};
    assert_int_equal(run(f, 0, inq, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    assert_int_equal(d[4] & 1, 0);              /* WSNZ 0 */
    assert_int_equal(d[5], SBC_MAX_CAW_BLOCKS); /* MAXIMUM COMPARE AND WRITE LENGTH */
    assert_int_equal(get_be32(d + 20), SBC_MAX_UNMAP_BLOCKS);
    assert_int_equal(get_be32(d + 24), SBC_MAX_UNMAP_DESCRIPTORS);
    assert_int_equal(get_be32(d + 28), 8); /* OPTIMAL UNMAP GRANULARITY: 4 KiB */
    assert_int_equal(d[32] & 0x80, 0x80);  /* UGAVALID */
    assert_int_equal(get_be64(d + 36), SBC_MAX_WRITE_SAME_BLOCKS);
    assert_int_equal(get_be32(d + 44), SBC_MAX_ATOMIC_BYTES / 512);
    assert_true(get_be32(d + 44) <= get_be32(d + 8)); /* atomic <= maximum transfer */
    run(f, 3, inq, NULL, 0); /* a file: no WRITE ATOMIC (not atomic across a power loss) */
    assert_int_equal(get_be32(data(f) + 44), 0);
    run(f, 1, inq, NULL, 0); /* fully provisioned: no UNMAP limits */
    assert_int_equal(get_be32(data(f) + 20), 0);
    assert_int_equal(get_be32(data(f) + 24), 0);
    /* a store that releases whole units only (rbd: 4 MiB objects) says its unit */
    struct bs *bs = scsi_target_lun(&f->tg, 0)->bs;
    bs->unmap_unit = 4 << 20;
    run(f, 0, inq, NULL, 0);
    assert_int_equal(get_be32(data(f) + 28), (4 << 20) / 512);
    bs->unmap_unit = 0;

    inq[2] = 0xb2;
    run(f, 0, inq, NULL, 0);
    assert_int_equal(data(f)[5], 0x80 | 0x40 | 0x20 | 0x04); /* LBPU LBPWS LBPWS10 LBPRZ */
    assert_int_equal(data(f)[6] & 7, 2);                     /* thin */
    run(f, 3, inq, NULL, 0);
    assert_int_equal(data(f)[6] & 7, 2);
    run(f, 1, inq, NULL, 0);
    assert_int_equal(data(f)[5], 0);
    assert_int_equal(data(f)[6] & 7, 0);

    inq[2] = 0xb1;
    run(f, 0, inq, NULL, 0);
    assert_int_equal(data(f)[7] >> 6, 1); /* WABEREQ 01b */

    uint8_t rc16[16] = {0x9e, 0x10};
    put_be32(rc16 + 10, 32);
    run(f, 0, rc16, NULL, 0);
    assert_int_equal(data(f)[14] & 0xc0, 0xc0); /* LBPME LBPRZ */
    run(f, 1, rc16, NULL, 0);
    assert_int_equal(data(f)[14] & 0xc0, 0);
}

/* --- UNMAP --- */

static size_t unmap_list(uint8_t *p, const uint64_t *lba, const uint32_t *n, unsigned count)
{
    memset(p, 0, 8 + 16 * count);
    put_be16(p, (uint16_t)(6 + 16 * count));
    put_be16(p + 2, (uint16_t)(16 * count));
    for (unsigned i = 0; i < count; i++) {
        put_be64(p + 8 + 16 * i, lba[i]);
        put_be32(p + 16 + 16 * i, n[i]);
    }
    return 8 + 16 * count;
}

static void test_unmap(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], p[8 + 16 * 3];
    for (uint64_t lun = 0; lun < 4; lun += 3) { /* RAM and file */
        write_blocks(f, lun, 0, 64, 0xa5, 512);
        uint64_t lba[] = {0, 16, 40};
        uint32_t n[] = {8, 0, 24};
        size_t len = unmap_list(p, lba, n, 3);
        sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len);
        assert_int_equal(run(f, lun, c, p, len), SCSI_STATUS_GOOD);
        assert_blocks(f, lun, 0, 8, 0, 512);
        assert_blocks(f, lun, 8, 32, 0xa5, 512);
        assert_blocks(f, lun, 40, 24, 0, 512);
    }
    /* no parameter list, and a list without descriptors: nothing to do */
    sfx_cdb10(c, 0x42, 0, 0, 0);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    size_t len = unmap_list(p, NULL, NULL, 0);
    sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len);
    assert_int_equal(run(f, 0, c, p, len), SCSI_STATUS_GOOD);
    /* zero blocks at the end of the LUN is in range */
    uint64_t end = RAM_BLOCKS;
    uint32_t zero = 0;
    len = unmap_list(p, &end, &zero, 1);
    sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len);
    assert_int_equal(run(f, 0, c, p, len), SCSI_STATUS_GOOD);
}

static void test_unmap_refusals(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], p[8 + 16];
    uint64_t lba = 0;
    uint32_t n = 1;
    size_t len = unmap_list(p, &lba, &n, 1);

    sfx_cdb10(c, 0x42, 0x01, 0, (uint16_t)len); /* ANCHOR: ANC_SUP=0 */
    run(f, 0, c, p, len);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sfx_cdb10(c, 0x42, 0, 0, 7); /* shorter than the header */
    run(f, 0, c, p, 7);
    assert_sense(&f->t, 0x5, 0x1a, 0x00);
    sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len); /* data-out cut short */
    run(f, 0, c, p, len - 4);
    assert_sense(&f->t, 0x5, 0x0e, 0x03);

    lba = RAM_BLOCKS - 1, n = 2; /* past the end */
    unmap_list(p, &lba, &n, 1);
    run(f, 0, c, p, len);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    lba = 0, n = SBC_MAX_UNMAP_BLOCKS + 1; /* more than MAXIMUM UNMAP LBA COUNT */
    unmap_list(p, &lba, &n, 1);
    char err[64];
    struct scsi_lun_config big = {.lun = 5, .bs = bs_open_spec("ram:1G", err, sizeof(err))};
    assert_int_equal(scsi_target_add_lun(&f->tg, &big, err, sizeof(err)), 0);
    run(f, 5, TUR, NULL, 0);
    run(f, 5, c, p, len);
    assert_sense(&f->t, 0x5, 0x26, 0x00);

    /* more descriptors than MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT */
    size_t many = 8 + 16 * (SBC_MAX_UNMAP_DESCRIPTORS + 1);
    uint8_t *q = calloc(1, many);
    put_be16(q + 2, (uint16_t)(many - 8));
    sfx_cdb10(c, 0x42, 0, 0, (uint16_t)many);
    run(f, 0, c, q, many);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    free(q);

    sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len);
    lba = 0, n = 1;
    unmap_list(p, &lba, &n, 1);
    run(f, 1, c, p, len); /* a fully provisioned LUN does not offer UNMAP (LBPU=0) */
    assert_sense(&f->t, 0x5, 0x20, 0x00);
    run(f, 2, c, p, len); /* read-only */
    assert_sense(&f->t, 0x7, 0x27, 0x00);
}

/* --- WRITE SAME --- */

static void test_write_same(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], block[512];
    for (int i = 0; i < 512; i++)
        block[i] = (uint8_t)i;

    /* 10 and 16 replicate one block, on RAM, a file and the test store */
    for (uint64_t lun = 0; lun < 4; lun += (lun == 1 ? 2 : 1)) {
        sfx_cdb10(c, 0x41, 0, 10, 20);
        assert_int_equal(run(f, lun, c, block, 512), SCSI_STATUS_GOOD);
        sfx_cdb10(c, 0x28, 0, 10, 20);
        run(f, lun, c, NULL, 0);
        for (int b = 0; b < 20; b++)
            assert_memory_equal(data(f) + 512 * b, block, 512);
        uint32_t n = lun == 1 ? 1900 : 3000; /* 1.5 MB: more than one 1 MB fill chunk */
        cdb16(c, 0x93, 0, 100, n);
        assert_int_equal(run(f, lun, c, block, 512), SCSI_STATUS_GOOD);
        sfx_cdb10(c, 0x28, 0, 100 + n - 1, 1);
        run(f, lun, c, NULL, 0);
        assert_memory_equal(data(f), block, 512);
    }

    /* UNMAP=1 on a thin LUN releases the range whatever the block holds (LBPRZ: zeros) */
    write_blocks(f, 0, 0, 16, 0xff, 512);
    sfx_cdb10(c, 0x41, 0x08, 0, 16);
    assert_int_equal(run(f, 0, c, block, 512), SCSI_STATUS_GOOD);
    assert_blocks(f, 0, 0, 16, 0, 512);
    /* on a fully provisioned LUN it writes */
    run(f, 1, c, block, 512);
    sfx_cdb10(c, 0x28, 0, 15, 1);
    run(f, 1, c, NULL, 0);
    assert_memory_equal(data(f), block, 512);

    /* NDOB: no data-out, the block is zeros */
    write_blocks(f, 3, 0, 8, 0x11, 512);
    cdb16(c, 0x93, 0x01, 0, 8);
    assert_int_equal(run(f, 3, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_blocks(f, 3, 0, 8, 0, 512);

    /* 0 blocks: to the end of the medium (WSNZ=0) */
    write_blocks(f, 4, 250, 6, 0x77, 4096);
    uint8_t big[4096];
    memset(big, 0x33, sizeof(big));
    cdb16(c, 0x93, 0, 252, 0);
    assert_int_equal(run(f, 4, c, big, 4096), SCSI_STATUS_GOOD);
    assert_blocks(f, 4, 250, 2, 0x77, 4096);
    assert_blocks(f, 4, 252, 4, 0x33, 4096);
    cdb16(c, 0x93, 0x08, 255, 0); /* and with UNMAP, up to the last block */
    assert_int_equal(run(f, 4, c, big, 4096), SCSI_STATUS_GOOD);
    assert_blocks(f, 4, 255, 1, 0, 4096);
}

static void test_write_same_refusals(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], block[1024] = {0};
    sfx_cdb10(c, 0x41, 0x08, 0, 1);
    run(f, 0, c, block, 256); /* data-out of half a block */
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
    run(f, 0, c, block, 1024); /* and of two blocks */
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
    sfx_cdb10(c, 0x41, 0x20, 0, 1); /* WRPROTECT without protection information */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sfx_cdb10(c, 0x41, 0x10, 0, 1); /* ANCHOR without UNMAP */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sfx_cdb10(c, 0x41, 0x18, 0, 1); /* ANCHOR with UNMAP: ANC_SUP=0 */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    cdb16(c, 0x93, 0, 0, SBC_MAX_WRITE_SAME_BLOCKS + 1); /* over MAXIMUM WRITE SAME LENGTH */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    assert_int_equal(get_be16(f->t.sense + 16), 10); /* the NUMBER OF LOGICAL BLOCKS field */
    sfx_cdb10(c, 0x41, 0, RAM_BLOCKS - 1, 2);        /* past the end */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    sfx_cdb10(c, 0x41, 0, RAM_BLOCKS + 1, 0); /* 0 blocks past the end */
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    sfx_cdb10(c, 0x41, 0x08, 0, 1); /* read-only, before looking at the data-out */
    run(f, 2, c, NULL, 0);
    assert_sense(&f->t, 0x7, 0x27, 0x00);
}

/* --- GET LBA STATUS --- */

static void get_lba_status(struct fx *f, uint64_t lun, uint64_t lba, uint32_t alloc)
{
    uint8_t c[16] = {0x9e, 0x12};
    put_be64(c + 2, lba);
    put_be32(c + 10, alloc);
    assert_int_equal(run(f, lun, c, NULL, 0), SCSI_STATUS_GOOD);
}

static void test_get_lba_status(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], p[8 + 16];
    for (uint64_t lun = 0; lun < 4; lun += 3) {
        /* blocks only read stay deallocated (RAM: the shared zero page is not the LUN's) */
        assert_blocks(f, lun, 0, 64, 0, 512);
        get_lba_status(f, lun, 0, 8 + 16 * 4);
        assert_int_equal(get_be32(data(f)), 4 + 16); /* one descriptor: the whole LUN */
        assert_int_equal(get_be64(data(f) + 8), 0);
        assert_int_equal(get_be32(data(f) + 16), RAM_BLOCKS);
        assert_int_equal(data(f)[20], 1); /* deallocated */

        write_blocks(f, lun, 16, 16, 0x5a, 512); /* [16, 32) mapped */
        get_lba_status(f, lun, 8, 8 + 16 * 4);
        assert_int_equal(get_be32(data(f)), 4 + 16 * 3);
        assert_int_equal(get_be64(data(f) + 8), 8); /* starts at the LBA asked for */
        assert_int_equal(get_be32(data(f) + 16), 8);
        assert_int_equal(data(f)[20], 1);
        assert_int_equal(get_be64(data(f) + 24), 16);
        assert_int_equal(get_be32(data(f) + 32), 16);
        assert_int_equal(data(f)[36], 0); /* mapped */
        assert_int_equal(get_be64(data(f) + 40), 32);
        assert_int_equal(get_be32(data(f) + 48), RAM_BLOCKS - 32);
        assert_int_equal(data(f)[52], 1);

        get_lba_status(f, lun, 20, 24); /* room for one descriptor */
        assert_int_equal(get_be64(data(f) + 8), 20);
        assert_int_equal(get_be32(data(f) + 16), 12);
        assert_int_equal(data(f)[20], 0);

        uint64_t lba = 16;
        uint32_t n = 16;
        size_t len = unmap_list(p, &lba, &n, 1);
        sfx_cdb10(c, 0x42, 0, 0, (uint16_t)len);
        run(f, lun, c, p, len);
        get_lba_status(f, lun, 0, 8 + 16 * 4);
        assert_int_equal(get_be32(data(f)), 4 + 16);
        assert_int_equal(data(f)[20], 1);
    }
    /* a store without lba_status: everything mapped */
    get_lba_status(f, 1, 0, 64);
    assert_int_equal(get_be32(data(f) + 16), (1u << 20) / 512);
    assert_int_equal(data(f)[20], 0);

    uint8_t oob[16] = {0x9e, 0x12};
    put_be64(oob + 2, RAM_BLOCKS);
    put_be32(oob + 10, 24);
    run(f, 0, oob, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    put_be64(oob + 2, ~0ull);
    run(f, 0, oob, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
}

/* --- COMPARE AND WRITE, ORWRITE, WRITE ATOMIC --- */

static void caw_cdb(uint8_t *c, uint64_t lba, uint8_t n)
{
    memset(c, 0, 16);
    c[0] = 0x89;
    put_be64(c + 2, lba);
    c[13] = n;
}

static void test_compare_and_write(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[4 * 512];
    for (uint64_t lun = 0; lun < 4; lun += (lun == 1 ? 2 : 1)) { /* RAM, test store, file */
        write_blocks(f, lun, 7, 2, 'A', 512);
        memset(buf, 'A', 1024);
        memset(buf + 1024, 'B', 1024);
        caw_cdb(c, 7, 2);
        assert_int_equal(run(f, lun, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
        assert_blocks(f, lun, 7, 2, 'B', 512);

        /* a miscompare writes nothing and says where the first difference is */
        memset(buf, 'B', 1024);
        buf[1024 - 27] = 'C';
        memset(buf + 1024, 'D', 1024);
        run(f, lun, c, buf, sizeof(buf));
        assert_sense(&f->t, 0xe, 0x1d, 0x00);
        assert_int_equal(f->t.sense[0] & 0x80, 0x80); /* VALID */
        assert_int_equal(get_be32(f->t.sense + 3), 1024 - 27);
        assert_blocks(f, lun, 7, 2, 'B', 512);
    }
    caw_cdb(c, 0, 0); /* zero blocks: nothing compared, nothing written */
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(run(f, 0, c, buf, 512), SCSI_STATUS_GOOD);
}

/* --- the transport's admit: every byte of data memory a command will hold, asked first --- */
static size_t admit_asked;
static bool admit_ok = true;
static enum scsi_refusal admit_why;

static bool test_admit(struct scsi_task *t, size_t bytes, enum scsi_refusal *why)
{
    (void)t;
    admit_asked = bytes;
    *why = admit_why;
    return admit_ok;
}

/* Setup of a command sending out_len bytes on LUN lun, with test_admit as the transport's. */
static int setup_admit(struct fx *f, uint64_t lun, const uint8_t *cdb, uint32_t out_len)
{
    struct scsi_task *t = &f->t;
    scsi_task_release(t);
    scsi_task_init(t);
    memcpy(t->cdb, cdb, SCSI_CDB_MAX);
    t->target = &f->tg;
    t->lun = lun;
    t->nexus = f->n1;
    t->done = sfx_on_done;
    t->edtl = out_len;
    t->edtl_write = out_len != 0;
    t->admit = test_admit;
    admit_asked = 0;
    return scsi_task_setup(t);
}

/* What a command holds beside its data-out is asked for too (LUN 1: a store without map, so a
 * compare reads the medium into memory of its own): VERIFY BYTCHK=3's copy of the range, WRITE
 * SAME's fill pattern, COMPARE AND WRITE's copy of the blocks, EXTENDED COPY's bounce buffer;
 * a buffer counts at the size class it is allocated in. Refused, the command gets TASK SET
 * FULL or BUSY (SAM-5 §5.3.1) and nothing is allocated. */
static void test_admit_counts_all_memory(void **state)
{
    struct fx *f = *state;
    uint8_t c[16];
    admit_ok = true;
    cdb16(c, 0x8a, 0, 0, 8); /* WRITE(16), 4 KiB: its buffer */
    assert_int_equal(setup_admit(f, 1, c, 4096), 0);
    assert_int_equal(admit_asked, 4096);
    assert_int_equal(f->t.mem, 4096);
    cdb16(c, 0x8f, 0x06, 0, 1024); /* VERIFY(16) BYTCHK=3: a block, and 512 KiB read back */
    assert_int_equal(setup_admit(f, 1, c, 512), 0);
    assert_int_equal(admit_asked, 1u << 20); /* 4 KiB + 512 KiB in the 1 MiB class */
    cdb16(c, 0x93, 0, 0, 1024); /* WRITE SAME(16) over 512 KiB: a block, and the pattern */
    assert_int_equal(setup_admit(f, 1, c, 512), 0);
    assert_int_equal(admit_asked, 4096 + (512u << 10));
    caw_cdb(c, 0, 2); /* COMPARE AND WRITE of 2 blocks: 2 KiB of data, 1 KiB of the medium */
    assert_int_equal(setup_admit(f, 1, c, 2048), 0);
    assert_int_equal(admit_asked, 4096 + 1024);
    memset(c, 0, 16); /* EXTENDED COPY with a 32-byte list: the list and the bounce buffer */
    c[0] = 0x83;
    put_be32(c + 10, 32);
    assert_int_equal(setup_admit(f, 1, c, 32), 0);
    assert_int_equal(admit_asked, 4096 + SCSI_COPY_CHUNK);
    memset(c, 0, 16); /* TEST UNIT READY: no data, nothing asked */
    assert_int_equal(setup_admit(f, 1, c, 0), 0);
    assert_int_equal(admit_asked, 0);
    assert_int_equal(f->t.mem, 0);

    admit_ok = false;
    for (int busy = 0; busy < 2; busy++) {
        admit_why = busy ? SCSI_REFUSE_BUSY : SCSI_REFUSE_TASK_SET_FULL;
        cdb16(c, 0x8a, 0, 0, 8);
        assert_int_equal(setup_admit(f, 1, c, 4096), -1);
        assert_int_equal(f->t.status, busy ? SCSI_STATUS_BUSY : SCSI_STATUS_TASK_SET_FULL);
        assert_int_equal(f->t.sense_len, 0);
        assert_false(f->t.buffered);
        assert_int_equal(f->t.iovcnt, 0);
        assert_int_equal(f->t.dir, SCSI_DIR_NONE);
        assert_int_equal(f->t.mem, 0);
    }
    admit_ok = true;
}

/* Set up a command on t as a transport would (no data yet); returns setup's result. */
static int setup_only(struct fx *f, struct scsi_task *t, const uint8_t *cdb, uint32_t out_len)
{
    scsi_task_init(t);
    memcpy(t->cdb, cdb, SCSI_CDB_MAX);
    t->target = &f->tg;
    t->nexus = f->n1;
    t->done = sfx_on_done;
    t->edtl = out_len;
    t->edtl_write = true;
    return scsi_task_setup(t);
}

/* A WRITE on a RAM LUN is received into a buffer of the task's own and copied into the LUN at
 * exec, under the range lock: a COMPARE AND WRITE waiting for the range sees it whole or not
 * at all, and the LUN's memory holds none of it until then (so a READ cannot see part). */
static void test_caw_ordered_with_write(void **state)
{
    struct fx *f = *state;
    write_blocks(f, 0, 7, 1, 'A', 512);
    struct scsi_task w;
    uint8_t wcdb[16], rcdb[16], c[16], buf[1024];
    sfx_cdb10(wcdb, 0x2a, 0, 7, 1);
    assert_int_equal(setup_only(f, &w, wcdb, 512), 0);
    assert_true(w.buffered);             /* not the LUN's memory */
    memset(w.iov[0].iov_base, 'Z', 256); /* half of its data has arrived */
    sfx_cdb10(rcdb, 0x28, 0, 7, 1);
    assert_int_equal(run(f, 0, rcdb, NULL, 0), SCSI_STATUS_GOOD);
    assert_blocks(f, 0, 7, 1, 'A', 512); /* a READ meanwhile: the old block, whole */

    memset(buf, 'A', 512);
    memset(buf + 512, 'B', 512);
    caw_cdb(c, 7, 1);
    sfx_done_calls = 0;
    scsi_task_release(&f->t); /* the READ's */
    assert_int_equal(setup_only(f, &f->t, c, sizeof(buf)), 0);
    memcpy(f->t.iov[0].iov_base, buf, sizeof(buf));
    scsi_task_exec(&f->t);
    assert_int_equal(sfx_done_calls, 1); /* found 'A': wrote 'B' */
    assert_int_equal(f->t.status, SCSI_STATUS_GOOD);

    memset((uint8_t *)w.iov[0].iov_base + 256, 'Z', 256); /* the rest arrives */
    scsi_task_exec(&w);
    assert_int_equal(sfx_done_calls, 2);
    assert_blocks(f, 0, 7, 1, 'Z', 512);
    scsi_task_release(&w);
}

static void test_compare_and_write_refusals(void **state)
{
    struct fx *f = *state;
    uint8_t c[16];
    uint8_t *buf = calloc(1, 2 * 256 * 512);
    caw_cdb(c, 0, 1);
    run(f, 0, c, buf, 4 * 512); /* data-out too large for 1 block */
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
    caw_cdb(c, 0, 3);
    run(f, 0, c, buf, 4 * 512); /* and too small for 3 */
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
    caw_cdb(c, 0, 0); /* 256 blocks meant, the 8-bit field wrapped to 0 */
    run(f, 0, c, buf, 2 * 256 * 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    assert_int_equal(get_be16(f->t.sense + 16), 13);
    caw_cdb(c, RAM_BLOCKS - 1, 2);
    run(f, 0, c, buf, 4 * 512);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    caw_cdb(c, 0, 1);
    c[1] = 0x20; /* WRPROTECT */
    run(f, 0, c, buf, 1024);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    c[1] = 0x18; /* DPO and FUA are fine (DPOFUA=1) */
    assert_int_equal(run(f, 0, c, buf, 1024), SCSI_STATUS_GOOD);
    c[1] = 0;
    run(f, 2, c, buf, 1024);
    assert_sense(&f->t, 0x7, 0x27, 0x00);
    free(buf);
}

static void test_orwrite_and_atomic(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], buf[2 * 512];
    for (uint64_t lun = 0; lun < 4; lun += (lun == 1 ? 2 : 1)) {
        write_blocks(f, lun, 3, 2, 0x0f, 512);
        memset(buf, 0xa0, sizeof(buf));
        cdb16(c, 0x8b, 0, 3, 2);
        assert_int_equal(run(f, lun, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
        assert_blocks(f, lun, 3, 2, 0xaf, 512);

        memset(buf, 0x42, sizeof(buf));
        memset(c, 0, 16);
        c[0] = 0x9c;
        put_be64(c + 2, 3);
        put_be16(c + 12, 2);
        if (lun == 3) { /* a file: not atomic across a power loss, so not offered */
            run(f, lun, c, buf, sizeof(buf));
            assert_sense(&f->t, 0x5, 0x20, 0x00); /* INVALID COMMAND OPERATION CODE */
            assert_blocks(f, lun, 3, 2, 0xaf, 512);
            continue;
        }
        assert_int_equal(run(f, lun, c, buf, sizeof(buf)), SCSI_STATUS_GOOD);
        assert_blocks(f, lun, 3, 2, 0x42, 512);
    }
    memset(c, 0, 16);
    c[0] = 0x9c;
    put_be16(c + 12, 2);
    run(f, 0, c, buf, 512); /* all or nothing: a data-out cut short is refused */
    assert_sense(&f->t, 0x5, 0x0e, 0x03);
    put_be16(c + 12, SBC_MAX_ATOMIC_BYTES / 512 + 1); /* over MAXIMUM ATOMIC TRANSFER LENGTH */
    run(f, 0, c, buf, sizeof(buf));
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    put_be16(c + 12, 0);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    cdb16(c, 0x8b, 0x40, 0, 1); /* ORPROTECT */
    run(f, 0, c, buf, 512);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
}

/* --- PRE-FETCH, READ DEFECT DATA --- */

static void test_prefetch_and_defects(void **state)
{
    struct fx *f = *state;
    uint8_t c[16];
    sfx_cdb10(c, 0x34, 0x02, 0, 16); /* IMMED */
    c[6] = 3;                        /* GROUP NUMBER */
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    sfx_cdb10(c, 0x34, 0, RAM_BLOCKS + 1, 0);
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);
    cdb16(c, 0x90, 0, RAM_BLOCKS - 1, 1);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    cdb16(c, 0x90, 0, ~0ull, 0);
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x5, 0x21, 0x00);

    uint8_t rdd10[16] = {0x37, 0, 0x18 | 0x05, 0, 0, 0, 0, 0, 32};
    assert_int_equal(run(f, 0, rdd10, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 4);
    assert_int_equal(data(f)[1], 0x1d); /* PLISTV GLISTV, format echoed, empty list */
    assert_int_equal(get_be16(data(f) + 2), 0);
    uint8_t rdd12[16] = {0xb7, 0x08 | 0x04, 0, 0, 0, 0, 0, 0, 0, 64};
    assert_int_equal(run(f, 0, rdd12, NULL, 0), SCSI_STATUS_GOOD);
    assert_int_equal(f->t.data_len, 8);
    assert_int_equal(data(f)[1], 0x0c);
    assert_int_equal(get_be32(data(f) + 4), 0);
}

/* --- SANITIZE --- */

static void sanitize_cdb(uint8_t *c, uint8_t b1, uint16_t len)
{
    memset(c, 0, 16);
    c[0] = 0x48;
    c[1] = b1;
    put_be16(c + 7, len);
}

static void test_sanitize(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], p[4 + 512];
    /* OVERWRITE with a 4-byte pattern, twice, inverted between passes: the last pass is the
     * inverse */
    for (uint64_t lun = 1; lun < 5; lun += 2) { /* test store, ram 4096 */
        uint32_t bsz = lun == 4 ? 4096 : 512;
        write_blocks(f, lun, 0, 2, 0x11, bsz);
        p[0] = 0x80 | 2;
        p[1] = 0;
        put_be16(p + 2, 4);
        memcpy(p + 4, "\x01\x02\x03\x04", 4);
        sanitize_cdb(c, 0x01, 8);
        assert_int_equal(run(f, lun, c, p, 8), SCSI_STATUS_GOOD);
        sfx_cdb10(c, 0x28, 0, 1, 1);
        run(f, lun, c, NULL, 0);
        for (uint32_t i = 0; i < bsz; i++)
            assert_int_equal(data(f)[i], (uint8_t) ~(1 + i % 4));
    }
    /* BLOCK ERASE on a thin LUN: everything deallocated and zero */
    write_blocks(f, 0, 100, 8, 0x99, 512);
    sanitize_cdb(c, 0x82, 0); /* IMMED */
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_blocks(f, 0, 100, 8, 0, 512);
    get_lba_status(f, 0, 0, 64);
    assert_int_equal(get_be32(data(f) + 16), RAM_BLOCKS);
    assert_int_equal(data(f)[20], 1);
    /* on a fully provisioned one: zeros written */
    write_blocks(f, 1, 5, 1, 0x99, 512);
    sanitize_cdb(c, 0x02, 0);
    assert_int_equal(run(f, 1, c, NULL, 0), SCSI_STATUS_GOOD);
    assert_blocks(f, 1, 5, 1, 0, 512);
    sanitize_cdb(c, 0x1f, 0); /* EXIT FAILURE MODE, not in failure mode: nothing to do */
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
}

static void test_sanitize_refusals(void **state)
{
    struct fx *f = *state;
    uint8_t c[16], p[4 + 520] = {0};
    sanitize_cdb(c, 0x01, 4); /* OVERWRITE needs a header and 1..block-size pattern bytes */
    run(f, 0, c, p, 4);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sanitize_cdb(c, 0x01, 512 + 5);
    run(f, 0, c, p, 512 + 5);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    put_be16(p + 2, 512); /* OVERWRITE COUNT 0 */
    sanitize_cdb(c, 0x01, 4 + 512);
    run(f, 0, c, p, 4 + 512);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    p[0] = 1;
    put_be16(p + 2, 0); /* INITIALIZATION PATTERN LENGTH 0 */
    run(f, 0, c, p, 4 + 512);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    put_be16(p + 2, 516); /* longer than a block */
    run(f, 0, c, p, 4 + 512);
    assert_sense(&f->t, 0x5, 0x26, 0x00);
    sanitize_cdb(c, 0x02, 8); /* BLOCK ERASE and EXIT FAILURE MODE take no list */
    run(f, 0, c, p, 8);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sanitize_cdb(c, 0x1f, 8);
    run(f, 0, c, p, 8);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sanitize_cdb(c, 0x03, 0); /* CRYPTO ERASE: nothing is encrypted, so not offered */
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sanitize_cdb(c, 0x42, 0); /* reserved bit */
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x5, 0x24, 0x00);
    sanitize_cdb(c, 0x02, 0);
    run(f, 2, c, NULL, 0); /* read-only */
    assert_sense(&f->t, 0x7, 0x27, 0x00);
}

/* While a sanitize runs only INQUIRY, REPORT LUNS and REQUEST SENSE get through; after one
 * failed, medium access is refused until EXIT FAILURE MODE. */
static void test_sanitize_gate(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 0);
    uint8_t c[16];
    atomic_store(&lu->sanitize, SANITIZE_RUNNING);
    run(f, 0, TUR, NULL, 0);
    assert_sense(&f->t, 0x2, 0x04, 0x1b);
    sfx_cdb10(c, 0x28, 0, 0, 1);
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x2, 0x04, 0x1b);
    uint8_t inq[16] = {0x12, 0, 0, 0, 96};
    assert_int_equal(run(f, 0, inq, NULL, 0), SCSI_STATUS_GOOD);
    sanitize_cdb(c, 0x02, 0);
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x2, 0x04, 0x1b);

    atomic_store(&lu->sanitize, SANITIZE_FAILED);
    sfx_cdb10(c, 0x28, 0, 0, 1);
    run(f, 0, c, NULL, 0);
    assert_sense(&f->t, 0x3, 0x31, 0x03);
    assert_int_equal(run(f, 0, TUR, NULL, 0), SCSI_STATUS_GOOD);
    sanitize_cdb(c, 0x1f, 0);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    sfx_cdb10(c, 0x28, 0, 0, 1);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
}

/* --- software write protect (control mode page SWP) --- */

static void test_software_write_protect(void **state)
{
    struct fx *f = *state;
    uint8_t ms[16] = {0x1a, 0x08, 0x0a, 0, 255}; /* MODE SENSE(6) control page, DBD */
    assert_int_equal(run(f, 0, ms, NULL, 0), SCSI_STATUS_GOOD);
    uint8_t page[4 + 12];
    memcpy(page, data(f), sizeof(page));
    assert_int_equal(page[2] & 0x80, 0); /* WP 0 */
    page[0] = 0;
    page[2] = 0;
    page[4 + 4] |= 0x08; /* SWP */
    uint8_t sel[16] = {0x15, 0x10, 0, 0, sizeof(page)};
    assert_int_equal(run(f, 0, sel, page, sizeof(page)), SCSI_STATUS_GOOD);
    run(f, 0, ms, NULL, 0);
    assert_int_equal(data(f)[2] & 0x80, 0x80); /* WP now 1 */
    assert_int_equal(data(f)[4 + 4] & 0x08, 0x08);
    uint8_t c[16], block[512] = {0};
    sfx_cdb10(c, 0x2a, 0, 0, 1);
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x7, 0x27, 0x02);
    sfx_cdb10(c, 0x41, 0x08, 0, 1);
    run(f, 0, c, block, 512);
    assert_sense(&f->t, 0x7, 0x27, 0x02);
    sfx_cdb10(c, 0x28, 0, 0, 1); /* reads still work */
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    ms[2] = 0x4a; /* changeable values: SWP can change */
    run(f, 0, ms, NULL, 0);
    assert_int_equal(data(f)[4 + 4] & 0x08, 0x08);
    page[4 + 4] &= (uint8_t)~0x08;
    assert_int_equal(run(f, 0, sel, page, sizeof(page)), SCSI_STATUS_GOOD);
    sfx_cdb10(c, 0x2a, 0, 0, 1);
    assert_int_equal(run(f, 0, c, block, 512), SCSI_STATUS_GOOD);
}

/* --- REPORT SUPPORTED OPERATION CODES lists every new row --- */

static void test_rsoc_lists_rows(void **state)
{
    struct fx *f = *state;
    static const struct {
        uint8_t op;
        uint16_t sa;
    } want[] = {{0x34, 0}, {0x37, 0}, {0x41, 0}, {0x42, 0}, {0x48, 1}, {0x48, 2},    {0x48, 0x1f},
                {0x89, 0}, {0x8b, 0}, {0x90, 0}, {0x93, 0}, {0x9c, 0}, {0x9e, 0x12}, {0xb7, 0}};
    uint8_t c[16] = {0xa3, 0x0c, 0};
    put_be32(c + 6, 4096);
    assert_int_equal(run(f, 0, c, NULL, 0), SCSI_STATUS_GOOD);
    const uint8_t *d = data(f);
    uint32_t len = get_be32(d);
    for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
        bool seen = false;
        for (uint32_t off = 4; off < 4 + len; off += 8)
            seen |= d[off] == want[w].op && get_be16(d + off + 2) == want[w].sa;
        if (!seen)
            fail_msg("opcode %02x/%02x missing from RSOC", want[w].op, want[w].sa);
    }
    uint8_t one[16] = {0xa3, 0x0c, 0x02, 0x48, 0, 0x03}; /* CRYPTO ERASE: not supported */
    put_be32(one + 6, 64);
    run(f, 0, one, NULL, 0);
    assert_int_equal(data(f)[1] & 7, 1);
    uint8_t atomic[16] = {0xa3, 0x0c, 0x01, 0x9c}; /* WRITE ATOMIC(16) */
    put_be32(atomic + 6, 64);
    run(f, 0, atomic, NULL, 0); /* RAM: supported */
    assert_int_equal(data(f)[1] & 7, 3);
    run(f, 3, atomic, NULL, 0); /* a file: not offered */
    assert_int_equal(data(f)[1] & 7, 1);
    assert_int_equal(run(f, 3, c, NULL, 0), SCSI_STATUS_GOOD); /* nor listed */
    d = data(f);
    for (uint32_t off = 4; off < 4 + get_be32(d); off += 8)
        assert_int_not_equal(d[off], 0x9c);
}

/* --- the range lock --- */

static int granted_calls;
static void count_granted(struct scsi_rl_req *q)
{
    (void)q;
    granted_calls++;
}

static void test_range_lock(void **state)
{
    (void)state;
    struct scsi_range_lock rl;
    scsi_rl_init(&rl);
    granted_calls = 0;
    struct scsi_rl_req a = {.off = 0, .len = 4096, .granted = count_granted};
    struct scsi_rl_req b = {
        .off = 1024, .len = 512, .mode = SCSI_RL_EXCL, .granted = count_granted};
    struct scsi_rl_req c = {.off = 8192, .len = 512, .granted = count_granted};
    struct scsi_rl_req d = {.off = 1024, .len = 512, .granted = count_granted};
    assert_true(scsi_rl_acquire(&rl, &a));  /* shared */
    assert_false(scsi_rl_acquire(&rl, &b)); /* exclusive, overlapping: waits */
    assert_true(scsi_rl_acquire(&rl, &c));  /* elsewhere: goes */
    assert_false(scsi_rl_acquire(&rl, &d)); /* behind the waiting exclusive one */
    assert_false(scsi_rl_try_fast(&rl));    /* the fast path is closed while one exists */
    scsi_rl_release(&rl, &a);
    assert_int_equal(granted_calls, 1); /* b */
    scsi_rl_release(&rl, &b);
    assert_int_equal(granted_calls, 2); /* d */
    scsi_rl_release(&rl, &c);
    scsi_rl_release(&rl, &d);
    /* an exclusive request waits for the fast holders to drain */
    assert_true(scsi_rl_try_fast(&rl));
    assert_false(scsi_rl_acquire(&rl, &b));
    scsi_rl_release_fast(&rl);
    assert_int_equal(granted_calls, 3);
    scsi_rl_release(&rl, &b);
    assert_true(scsi_rl_try_fast(&rl));
    scsi_rl_release_fast(&rl);
    scsi_rl_destroy(&rl);
}

/* READ and WRITE modes (stores with order_rw): READs share, a WRITE excludes overlapping READs
 * and WRITEs, neither excludes a shared holder (UNMAP, WRITE SAME), disjoint ranges go. */
static void test_range_lock_read_write(void **state)
{
    (void)state;
    struct scsi_range_lock rl;
    scsi_rl_init(&rl);
    granted_calls = 0;
    struct scsi_rl_req r1 = {.off = 0, .len = 4096, .mode = SCSI_RL_READ, .granted = count_granted};
    struct scsi_rl_req r2 = {
        .off = 512, .len = 512, .mode = SCSI_RL_READ, .granted = count_granted};
    struct scsi_rl_req w1 = {
        .off = 3584, .len = 1024, .mode = SCSI_RL_WRITE, .granted = count_granted};
    struct scsi_rl_req w2 = {
        .off = 4096, .len = 512, .mode = SCSI_RL_WRITE, .granted = count_granted};
    struct scsi_rl_req sh = {.off = 0, .len = 8192, .granted = count_granted};
    struct scsi_rl_req w3 = {
        .off = 8192, .len = 512, .mode = SCSI_RL_WRITE, .granted = count_granted};
    assert_true(scsi_rl_acquire(&rl, &r1));
    assert_true(scsi_rl_acquire(&rl, &r2));  /* reads share */
    assert_false(scsi_rl_acquire(&rl, &w1)); /* overlaps r1: waits */
    assert_false(scsi_rl_acquire(&rl, &w2)); /* overlaps the waiting w1: behind it */
    struct scsi_rl_req r3 = {
        .off = 4096, .len = 512, .mode = SCSI_RL_READ, .granted = count_granted};
    assert_false(scsi_rl_acquire(&rl, &r3)); /* a READ behind the waiting WRITEs too */
    assert_true(scsi_rl_acquire(&rl, &sh));  /* shared: not excluded by either */
    assert_true(scsi_rl_acquire(&rl, &w3));  /* elsewhere: goes */
    assert_true(scsi_rl_try_fast(&rl));      /* no exclusive request: the fast path is open */
    scsi_rl_release_fast(&rl);
    scsi_rl_release(&rl, &r2);
    assert_int_equal(granted_calls, 0);
    scsi_rl_release(&rl, &r1);
    assert_int_equal(granted_calls, 1); /* w1 */
    scsi_rl_release(&rl, &w1);
    assert_int_equal(granted_calls, 2); /* w2 */
    scsi_rl_release(&rl, &w2);
    assert_int_equal(granted_calls, 3); /* r3 */
    scsi_rl_release(&rl, &r3);
    scsi_rl_release(&rl, &w3);
    scsi_rl_release(&rl, &sh);
    scsi_rl_destroy(&rl);
}

/* A COMPARE AND WRITE queued behind another exclusive holder of its range runs when that one
 * lets go, and a WRITE on a store that is not memory waits for it the same way. */
static void test_caw_waits_for_range(void **state)
{
    struct fx *f = *state;
    struct scsi_lun *lu = scsi_target_lun(&f->tg, 1);
    write_blocks(f, 1, 0, 1, 'A', 512);
    struct scsi_rl_req hold = {
        .off = 0, .len = 512, .mode = SCSI_RL_EXCL, .granted = count_granted};
    assert_true(scsi_rl_acquire(&lu->rl, &hold));

    uint8_t c[16], buf[1024];
    memset(buf, 'A', 512);
    memset(buf + 512, 'B', 512);
    caw_cdb(c, 0, 1);
    struct scsi_task *t = &f->t;
    scsi_task_release(t);
    scsi_task_init(t);
    memcpy(t->cdb, c, 16);
    t->target = &f->tg;
    t->lun = 1;
    t->nexus = f->n1;
    t->done = sfx_on_done;
    t->edtl = sizeof(buf);
    t->edtl_write = true;
    sfx_done_calls = 0;
    assert_int_equal(scsi_task_setup(t), 0);
    memcpy(t->iov[0].iov_base, buf, sizeof(buf));
    int writes = f->m->writes;
    scsi_task_exec(t);
    assert_int_equal(sfx_done_calls, 0); /* queued */
    assert_int_equal(f->m->writes, writes);
    scsi_rl_release(&lu->rl, &hold); /* no reactor here: the grant runs inline */
    assert_int_equal(sfx_done_calls, 1);
    assert_int_equal(t->status, SCSI_STATUS_GOOD);
    assert_blocks(f, 1, 0, 1, 'B', 512);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_provisioning_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_same, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_same_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_lba_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compare_and_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caw_ordered_with_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compare_and_write_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orwrite_and_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefetch_and_defects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sanitize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sanitize_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sanitize_gate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_software_write_protect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rsoc_lists_rows, setup, teardown),
        cmocka_unit_test(test_range_lock),
        cmocka_unit_test(test_range_lock_read_write),
        cmocka_unit_test_setup_teardown(test_caw_waits_for_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admit_counts_all_memory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
