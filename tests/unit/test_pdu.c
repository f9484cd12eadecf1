/* The BHS codec (RFC 7143 §11): field accessors on a header laid out byte by byte as the RFC
 * draws it, data segment length and padding, serial number arithmetic (RFC 1982, §4.2.2.1)
 * and opcode names for log lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "iscsi/pdu.h"

/* RFC 7143 Appendix B.4's example: a SCSI Command PDU, READ(10) of 2 blocks. */
static const uint8_t rfc_read_pdu[48] = {
    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

static void test_scsi_command_fields(void **state)
{
    (void)state;
    struct iscsi_bhs h;
    memcpy(h.b, rfc_read_pdu, sizeof(h.b));
    assert_int_equal(bhs_opcode(&h), ISCSI_OP_SCSI_CMD);
    assert_false(bhs_immediate(&h));
    assert_true(h.b[BHS_FLAGS] & ISCSI_FLAG_FINAL);
    assert_true(h.b[BHS_FLAGS] & ISCSI_CMD_READ);
    assert_false(h.b[BHS_FLAGS] & ISCSI_CMD_WRITE);
    assert_int_equal(h.b[BHS_FLAGS] & ISCSI_CMD_ATTR_MASK, 0); /* untagged */
    assert_int_equal(bhs_ahs_bytes(&h), 0);
    assert_int_equal(bhs_dlength(&h), 0);
    assert_int_equal(bhs_get32(&h, BHS_ITT), 0x14000000u);
    assert_int_equal(bhs_get32(&h, BHS_EDTL), 1024);
    assert_int_equal(bhs_get32(&h, BHS_CMDSN), 0x14);
    assert_int_equal(bhs_get32(&h, BHS_EXPSTATSN), 0x18);
    assert_int_equal(h.b[BHS_CDB], 0x28); /* READ(10) */
    assert_int_equal(get_be16(h.b + BHS_CDB + 7), 2);
}

/* Building a response sets exactly the bytes the RFC layout names. */
static void test_build_data_in(void **state)
{
    (void)state;
    struct iscsi_bhs h;
    bhs_init(&h, ISCSI_OP_DATA_IN, ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW);
    h.b[BHS_STATUS] = 0;
    bhs_put32(&h, BHS_ITT, 0xdeadbeef);
    bhs_put32(&h, BHS_TTT, ISCSI_RSVD_TAG);
    bhs_put32(&h, BHS_STATSN, 7);
    bhs_put32(&h, BHS_EXPCMDSN, 8);
    bhs_put32(&h, BHS_MAXCMDSN, 135);
    bhs_put32(&h, BHS_DATASN, 3);
    bhs_put32(&h, BHS_BUFFER_OFFSET, 65536);
    bhs_put32(&h, BHS_RESIDUAL, 512);
    bhs_set_dlength(&h, 8192);
    static const uint8_t want[48] = {
        0x25, 0x83, 0,    0,    0,    0x00, 0x20, 0x00, 0, 0, 0, 0, 0, 0, 0, 0,
        0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 7, 0, 0, 0, 8,
        0,    0,    0,    135,  0,    0,    0,    3,    0, 1, 0, 0, 0, 0, 2, 0};
    assert_memory_equal(h.b, want, 48);
}

static void test_dlength_and_padding(void **state)
{
    (void)state;
    struct iscsi_bhs h;
    bhs_init(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL);
    const uint32_t lens[] = {0, 1, 3, 4, 5, 8191, 8192, 262144, ISCSI_MRDSL_MAX};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        bhs_set_dlength(&h, lens[i]);
        assert_int_equal(bhs_dlength(&h), lens[i]);
        assert_int_equal(h.b[BHS_TOTAL_AHS_LEN], 0); /* the 24-bit field leaves byte 4 alone */
        assert_int_equal(ISCSI_PAD(lens[i]) % 4, 0);
        assert_true(ISCSI_PAD(lens[i]) - lens[i] < 4);
    }
    h.b[BHS_TOTAL_AHS_LEN] = 3;
    assert_int_equal(bhs_ahs_bytes(&h), 12); /* counted in 4-byte words */
}

static void test_serial_arithmetic(void **state)
{
    (void)state;
    assert_true(sn_lt(1, 2));
    assert_false(sn_lt(2, 2));
    assert_true(sn_le(2, 2));
    assert_true(sn_lt(0xfffffff0u, 5)); /* wraps: 5 comes after 0xfffffff0 */
    assert_false(sn_lt(5, 0xfffffff0u));
    assert_true(sn_le(0xffffffffu, 0));
    /* up to 2^31 - 1 apart the order is defined and one-way (at exactly 2^31 RFC 1982 leaves it
     * undefined) */
    assert_true(sn_lt(0, 0x7fffffffu));
    assert_false(sn_lt(0x7fffffffu, 0));
}

static void test_opcode_names(void **state)
{
    (void)state;
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_SCSI_CMD), "SCSI-Command");
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_R2T), "R2T");
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_REJECT), "Reject");
    assert_non_null(iscsi_opcode_name((enum iscsi_opcode)0x3e)); /* unknown opcodes are named too */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scsi_command_fields), cmocka_unit_test(test_build_data_in),
        cmocka_unit_test(test_dlength_and_padding), cmocka_unit_test(test_serial_arithmetic),
        cmocka_unit_test(test_opcode_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
