/* The fixture the SCSI core unit tests share: a test store without map(), LUN and nexus setup,
 * one command run through scsi_task_setup/exec as a transport runs it, and sense checks. Each
 * test file keeps its own struct fx and thin wrappers that say how it runs commands. */
#ifndef LINERATE_TESTS_UNIT_SCSI_FIXTURE_H
#define LINERATE_TESTS_UNIT_SCSI_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scsi/scsi.h"

/* A store in memory without map(): reads and writes go through submit() and are counted,
 * with the FUA bit of the last write; FLUSH is counted and completes at once. */
struct sfx_store {
    uint8_t *mem;
    int reads, writes, flushes;
    bool last_fua;
    /* A stand-in for a store whose completions come from elsewhere (rbd): nonzero fail_err
     * completes every request with it, untouched. With bs->write_same / bs->caw_unit set the
     * store serves BS_WRITE_SAME and BS_COMPARE_AND_WRITE itself and counts them. */
    int fail_err;
    int write_sames, caws;
    uint64_t last_same_len;
    /* A request whose op has its bit (1u << op) in hold is counted (and a WRITE's data
     * stored) but kept in held, not completed: the test completes it (held->done(held, err))
     * when it wants, as a slow store would. */
    unsigned hold;
    struct bs_io *held;
};

struct bs *sfx_store_open(uint64_t size, bool write_cache, struct sfx_store **out);

/* done() of the commands sfx_run() starts: counts its calls since the last sfx_run(). */
extern int sfx_done_calls;
void sfx_on_done(struct scsi_task *t);

/* Adds a LUN on bs (asserted non-NULL) with block size bsz. */
void sfx_add_lun(struct scsi_target *tg, uint64_t lun, struct bs *bs, uint32_t bsz, bool ro);

/* The nexus of initiator "iqn.2024-01.test:init<id>" with ISID 80 00 00 00 00 <id>. */
struct scsi_nexus *sfx_nexus_get(struct scsi_target *tg, uint8_t id);

/* Releases t, puts the nexuses that are not NULL, destroys tg. */
void sfx_target_down(struct scsi_target *tg, struct scsi_task *t, struct scsi_nexus *n1,
                     struct scsi_nexus *n2, struct scsi_nexus *n3);

/* The two-gateway ALUA fixtures (test_alua.c, test_mpath_pick.c): a gateway, target tg named
 * name in target port group group with state own, knowing one peer group and its state. */
void sfx_gateway_init(struct scsi_target *tg, const char *name, uint16_t group,
                      enum scsi_alua_state own, uint16_t peer, enum scsi_alua_state peer_state);
/* Their state: gateways a and b, one nexus on each, a task. */
struct sfx_gateways {
    struct scsi_target a, b;
    struct scsi_nexus *na, *nb;
    struct scsi_task t;
};
/* cmocka teardown of a struct sfx_gateways *state (calloc'ed): releases t, puts the nexuses,
 * destroys both targets, frees it. */
int sfx_gateways_teardown(void **state);

/* What sfx_run() asserts besides running the command. */
enum {
    SFX_CHECK_DONE = 1,    /* done() ran once after exec, and not at all on a setup refusal */
    SFX_CHECK_REFUSAL = 2, /* a setup refusal is CHECK CONDITION */
};

/* Runs one command on t: init, setup, min(out_len, transfer length) bytes of data-out copied
 * in, exec. EDTL is out_len with data-out, read_edtl without. Returns the status; t stays set
 * up for inspection until the next run. */
int sfx_run(struct scsi_task *t, struct scsi_target *tg, struct scsi_nexus *n, uint64_t lun,
            const uint8_t *cdb, const void *out, size_t out_len, uint32_t read_edtl,
            unsigned checks);

/* What sfx_assert_sense() checks besides status, sense key, ASC and ASCQ. */
enum {
    SFX_SENSE_LEN = 1,   /* 18 bytes of sense */
    SFX_SENSE_FIXED = 2, /* fixed format: response code 70h, additional length 10 */
};

void sfx_assert_sense(const struct scsi_task *t, unsigned checks, uint8_t key, uint8_t asc,
                      uint8_t ascq);

/* The sense-key specific field pointer: SKSV with C/D (0xc0 CDB, 0x80 parameter list), byte. */
void sfx_assert_field_pointer(const struct scsi_task *t, uint8_t sksv_cd, unsigned byte);

/* PERSISTENT RESERVE OUT (SPC-4 §6.16) with service action sa and type, and its 24-byte
 * parameter list with RESERVATION KEY rk and SERVICE ACTION RESERVATION KEY sark. */
void sfx_prout24(uint8_t cdb[16], uint8_t list[24], unsigned sa, unsigned type, uint64_t rk,
                 uint64_t sark);

/* A 10-byte READ/WRITE-style CDB in c[16] (the rest zeroed): op, byte 1, LBA, block count. */
void sfx_cdb10(uint8_t *c, uint8_t op, uint8_t b1, uint32_t lba, uint16_t n);

/* A store error and the sense the SCSI core must answer it with. */
struct sfx_err_case {
    int err;
    uint8_t key, asc, ascq;                /* writes, and reads unless read_key */
    uint8_t read_key, read_asc, read_ascq; /* READ, when it differs */
};

/* t ended CHECK CONDITION with e's sense (its READ sense when read and e has one). */
void sfx_assert_err_case(const struct scsi_task *t, const struct sfx_err_case *e, bool read);

#endif
