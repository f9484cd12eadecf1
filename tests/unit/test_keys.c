/* Unit tests for the key negotiation engine (keys.c), the text buffer and iterator (text.c):
 * every result rule of RFC 7143 §13, the answer constants of §6.2, the stage/direction/
 * duplicate rules, and a whole initiator <-> target negotiation in memory. No sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "iscsi/keys.h"
#include "util/log.h"

/* ---- helpers ---- */

/* Build a peer text from "key=value" strings (NULL-terminated list). */
static void build(struct iscsi_text *t, va_list ap)
{
    const char *pair;
    while ((pair = va_arg(ap, const char *)) != NULL)
        assert_int_equal(iscsi_text_append(t, pair, (uint32_t)strlen(pair) + 1), 0);
}

/* Feed pairs to n in `stage`; answers go to out (reset first). */
static enum iscsi_login_status feed(struct iscsi_neg *n, enum iscsi_stage stage,
                                    struct iscsi_text *out, ...)
{
    struct iscsi_text in;
    iscsi_text_init(&in);
    va_list ap;
    va_start(ap, out);
    build(&in, ap);
    va_end(ap);
    iscsi_text_reset(out);
    enum iscsi_login_status st = iscsi_neg_handle(n, stage, in.data, in.len, out);
    iscsi_text_free(&in);
    return st;
}

/* Value of `key` in t, or NULL; fails the test if the key appears twice. */
static const char *find(const struct iscsi_text *t, const char *key)
{
    static char buf[8192];
    struct iscsi_text_iter it;
    const char *k, *v, *found = NULL;
    iscsi_text_iter_init(&it, t->data, t->len);
    while (iscsi_text_next(&it, &k, &v) == 1)
        if (!strcmp(k, key)) {
            assert_null(found);
            snprintf(buf, sizeof(buf), "%s", v);
            found = buf;
        }
    return found;
}

static int npairs(const struct iscsi_text *t)
{
    struct iscsi_text_iter it;
    const char *k, *v;
    int n = 0;
    iscsi_text_iter_init(&it, t->data, t->len);
    while (iscsi_text_next(&it, &k, &v) == 1)
        n++;
    return n;
}

#define assert_answer(t, key, val) assert_string_equal(find(t, key) ? find(t, key) : "(none)", val)

static struct iscsi_text out;

static int setup(void **state)
{
    (void)state;
    iscsi_text_init(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    iscsi_text_free(&out);
    return 0;
}

static void target_with(struct iscsi_neg *n, void (*tweak)(struct iscsi_params *))
{
    struct iscsi_params local;
    iscsi_params_default(&local);
    if (tweak)
        tweak(&local);
    iscsi_neg_init(n, ISCSI_SIDE_TARGET, &local);
}

/* ---- defaults ---- */

static void test_defaults(void **state)
{
    (void)state;
    struct iscsi_params p;
    iscsi_params_default(&p);
    /* RFC 7143 §13 defaults */
    assert_false(p.header_digest);
    assert_false(p.data_digest);
    assert_int_equal(p.max_connections, 1);
    assert_true(p.initial_r2t);
    assert_true(p.immediate_data);
    assert_int_equal(p.max_recv_dsl, 8192);
    assert_int_equal(p.peer_max_recv_dsl, 8192);
    assert_int_equal(p.max_burst, 262144);
    assert_int_equal(p.first_burst, 65536);
    assert_int_equal(p.default_time2wait, 2);
    assert_int_equal(p.default_time2retain, 20);
    assert_int_equal(p.max_outstanding_r2t, 1);
    assert_true(p.data_pdu_in_order);
    assert_true(p.data_sequence_in_order);
    assert_int_equal(p.erl, 0);
}

/* ---- Boolean result functions (§6.2.2, §13.10, §13.11, §13.18, §13.19) ---- */

static void local_no_r2t_no_immediate(struct iscsi_params *p)
{
    p->initial_r2t = false;
    p->immediate_data = false;
    p->data_pdu_in_order = false;
    p->data_sequence_in_order = false;
}

static void test_bool_or(void **state)
{
    (void)state;
    struct iscsi_neg n;
    /* OR: No only if both say No */
    target_with(&n, local_no_r2t_no_immediate);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=No",
                          "DataPDUInOrder=No", "DataSequenceInOrder=Yes", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "InitialR2T", "No");
    assert_answer(&out, "DataPDUInOrder", "No");
    assert_answer(&out, "DataSequenceInOrder", "Yes");
    assert_false(n.result.initial_r2t);
    assert_false(n.result.data_pdu_in_order);
    assert_true(n.result.data_sequence_in_order);

    target_with(&n, NULL); /* we want Yes: a No offer still ends Yes */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=No", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "InitialR2T", "Yes");
    assert_true(n.result.initial_r2t);
}

static void test_bool_and(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "ImmediateData=Yes", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "ImmediateData", "Yes");
    assert_true(n.result.immediate_data);

    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "ImmediateData=No", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "ImmediateData", "No");
    assert_false(n.result.immediate_data);

    target_with(&n, local_no_r2t_no_immediate); /* AND: our No wins over a Yes */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "ImmediateData=Yes",
                          "RDMAExtensions=Yes", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "ImmediateData", "No");
    assert_answer(&out, "RDMAExtensions", "No"); /* TCP only */
    assert_false(n.result.immediate_data);
}

/* ---- numerical result functions ---- */

static void local_small(struct iscsi_params *p)
{
    p->max_burst = 65536;
    p->first_burst = 16384;
    p->max_connections = 4;
    p->max_outstanding_r2t = 8;
    p->default_time2wait = 5;
    p->default_time2retain = 10;
    p->erl = 1;
}

static void test_numeric_min(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_small);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=262144",
                          "FirstBurstLength=8192", "MaxConnections=16", "MaxOutstandingR2T=2",
                          "DefaultTime2Retain=60", "ErrorRecoveryLevel=2", "iSCSIProtocolLevel=2",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "65536"); /* ours is smaller */
    assert_answer(&out, "FirstBurstLength", "8192"); /* theirs is smaller */
    assert_answer(&out, "MaxConnections", "4");
    assert_answer(&out, "MaxOutstandingR2T", "2");
    assert_answer(&out, "DefaultTime2Retain", "10");
    assert_answer(&out, "ErrorRecoveryLevel", "1");
    assert_answer(&out, "iSCSIProtocolLevel", "1"); /* RFC 7143 = level 1 */
    assert_int_equal(n.result.max_burst, 65536);
    assert_int_equal(n.result.first_burst, 8192);
    assert_int_equal(n.result.max_connections, 4);
    assert_int_equal(n.result.max_outstanding_r2t, 2);
    assert_int_equal(n.result.default_time2retain, 10);
    assert_int_equal(n.result.erl, 1);
}

static void test_numeric_max(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_small); /* ours 5 */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "DefaultTime2Wait=2", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "DefaultTime2Wait", "5");
    assert_int_equal(n.result.default_time2wait, 5);
    target_with(&n, local_small);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "DefaultTime2Wait=30", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "DefaultTime2Wait", "30");
}

static void test_numeric_hex(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    /* §6.1: hex constants are numbers too; we answer in decimal */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=0x10000",
                          "FirstBurstLength=0X1000", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "65536");
    assert_answer(&out, "FirstBurstLength", "4096");
}

static void test_reject_bad_values(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    /* §6.2.2: out of range / not a number / not a boolean -> Reject, key keeps its default */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=511",
                          "FirstBurstLength=16777216", "MaxOutstandingR2T=0",
                          "ErrorRecoveryLevel=3", "DefaultTime2Wait=3601", "MaxConnections=abc",
                          "DefaultTime2Retain=0x", "iSCSIProtocolLevel=-1",
                          "InitialR2T=yes", "ImmediateData=True", "DataPDUInOrder=",
                          NULL),
                     ISCSI_LOGIN_OK);
    const char *keys[] = {"MaxBurstLength", "FirstBurstLength", "MaxOutstandingR2T",
                          "ErrorRecoveryLevel", "DefaultTime2Wait", "MaxConnections",
                          "DefaultTime2Retain", "iSCSIProtocolLevel", "InitialR2T",
                          "ImmediateData", "DataPDUInOrder"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_answer(&out, keys[i], "Reject");
    struct iscsi_params def;
    iscsi_params_default(&def);
    assert_int_equal(n.result.max_burst, def.max_burst);
    assert_int_equal(n.result.first_burst, def.first_burst);
    assert_true(n.result.initial_r2t);

    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=99999999999999999999",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "Reject");
    /* range limits themselves are fine */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=512",
                          "MaxOutstandingR2T=65535", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "512");
    assert_answer(&out, "MaxOutstandingR2T", "1");
}

static void test_answer_constant_as_offer(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    /* §6.2: Reject/Irrelevant/NotUnderstood are answers, never proposals */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=Reject", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
}

/* ---- declarative MaxRecvDataSegmentLength (§13.12) ---- */

static void local_mrdsl(struct iscsi_params *p)
{
    p->max_recv_dsl = 262144;
}

static void test_mrdsl_declarative(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_mrdsl);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxRecvDataSegmentLength=65536",
                          NULL),
                     ISCSI_LOGIN_OK);
    /* not an answer: our own declaration, exactly once */
    assert_answer(&out, "MaxRecvDataSegmentLength", "262144");
    assert_int_equal(n.result.peer_max_recv_dsl, 65536);
    assert_int_equal(n.result.max_recv_dsl, 262144);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_int_equal(npairs(&out), 1);

    /* the target declares even if the initiator never did; the peer value stays 8192 */
    target_with(&n, local_mrdsl);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=Yes", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxRecvDataSegmentLength", "262144");
    assert_int_equal(n.result.peer_max_recv_dsl, 8192);

    /* an impossible declaration cannot be answered: the login fails */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxRecvDataSegmentLength=511",
                          NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxRecvDataSegmentLength=junk",
                          NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);

    /* initiator side: the target's declaration is our send limit */
    struct iscsi_params local;
    iscsi_params_default(&local);
    local.max_recv_dsl = 131072;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxRecvDataSegmentLength=16384",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(n.result.peer_max_recv_dsl, 16384);
    assert_int_equal(out.len, 0); /* the initiator's own declaration goes with offer() */
}

/* ---- list negotiation: digests (§6.2.1, §13.1) ---- */

static void local_digests(struct iscsi_params *p)
{
    p->header_digest = true;
    p->data_digest = true;
}

static void test_digest_selection(void **state)
{
    (void)state;
    struct iscsi_neg n;
    /* we support CRC32C: the initiator's first supported choice wins */
    target_with(&n, local_digests);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest=CRC32C,None",
                          "DataDigest=None,CRC32C", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "HeaderDigest", "CRC32C");
    assert_answer(&out, "DataDigest", "None");
    assert_true(n.result.header_digest);
    assert_false(n.result.data_digest);

    /* unknown values in the list are ignored */
    target_with(&n, local_digests);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest=MD5,CRC32C",
                          "DataDigest=CRC32C", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "HeaderDigest", "CRC32C");
    assert_answer(&out, "DataDigest", "CRC32C");

    /* digests off here: None when offered, Reject when only CRC32C is */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest=CRC32C,None",
                          "DataDigest=CRC32C", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "HeaderDigest", "None");
    assert_answer(&out, "DataDigest", "Reject");
    assert_false(n.result.header_digest);
    assert_false(n.result.data_digest);
}

static void test_task_reporting(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "TaskReporting=FastAbort,RFC3720",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "TaskReporting", "RFC3720");
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "TaskReporting=FastAbort", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "TaskReporting", "Reject");
}

/* ---- NotUnderstood, Irrelevant, obsolete keys ---- */

static void test_not_understood(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "X-com.example.Frob=1",
                          "X#NodeArchitecture=linux", "headerdigest=None", "Bogus=1",
                          "X-org.foo=NotUnderstood", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "X-com.example.Frob", "NotUnderstood");
    assert_answer(&out, "X#NodeArchitecture", "NotUnderstood");
    assert_answer(&out, "headerdigest", "NotUnderstood"); /* key names are case-sensitive */
    assert_answer(&out, "Bogus", "NotUnderstood");
    assert_null(find(&out, "X-org.foo")); /* never answer an answer */
}

static void test_irrelevant_in_discovery(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_digests);
    /* SessionType comes last: it still decides for the keys before it */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=No",
                          "ImmediateData=Yes", "MaxBurstLength=4096", "FirstBurstLength=4096",
                          "MaxConnections=2", "MaxOutstandingR2T=2", "DataPDUInOrder=No",
                          "DataSequenceInOrder=No", "HeaderDigest=CRC32C,None",
                          "DefaultTime2Wait=0", "ErrorRecoveryLevel=0",
                          "InitiatorName=iqn.2024-01.org.example:host",
                          "SessionType=Discovery", NULL),
                     ISCSI_LOGIN_OK);
    const char *irr[] = {"InitialR2T",        "ImmediateData",  "MaxBurstLength",
                         "FirstBurstLength",  "MaxConnections", "MaxOutstandingR2T",
                         "DataPDUInOrder",    "DataSequenceInOrder"};
    for (size_t i = 0; i < sizeof(irr) / sizeof(irr[0]); i++)
        assert_answer(&out, irr[i], "Irrelevant");
    assert_answer(&out, "HeaderDigest", "CRC32C"); /* relevant in discovery */
    assert_answer(&out, "DefaultTime2Wait", "2");
    assert_answer(&out, "ErrorRecoveryLevel", "0");
    assert_int_equal(n.session_type, ISCSI_SESSION_DISCOVERY);
    struct iscsi_params def;
    iscsi_params_default(&def);
    assert_int_equal(n.result.max_burst, def.max_burst);
}

static void test_obsolete_markers(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    /* RFC 7143 §13.26: markers SHOULD, marker intervals MUST be answered Reject */
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "OFMarker=No", "IFMarker=Yes",
                          "OFMarkInt=2048~8192", "IFMarkInt=2048", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "OFMarker", "Reject");
    assert_answer(&out, "IFMarker", "Reject");
    assert_answer(&out, "OFMarkInt", "Reject");
    assert_answer(&out, "IFMarkInt", "Reject");
}

/* ---- protocol errors that fail the login ---- */

static void test_duplicate_key(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=4096",
                          "MaxBurstLength=8192", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    /* across PDUs of the same login too */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=No", NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "InitialR2T=Yes", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    /* and for declarations */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out,
                          "InitiatorName=iqn.2024-01.org.example:a", "AuthMethod=None", NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out,
                          "InitiatorName=iqn.2024-01.org.example:b", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);

    /* TargetAddress may repeat (§13.8) */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "TargetAddress=10.0.0.1:3260,1",
                          "TargetAddress=10.0.0.2:3260,1", NULL),
                     ISCSI_LOGIN_OK);
}

static void test_wrong_direction(void **state)
{
    (void)state;
    struct iscsi_neg n;
    const char *from_target_only[] = {"TargetPortalGroupTag=1", "TargetAlias=disk",
                                      "TargetAddress=10.0.0.1:3260,1"};
    for (size_t i = 0; i < 3; i++) {
        target_with(&n, NULL);
        assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, from_target_only[i], NULL),
                         ISCSI_LOGIN_INITIATOR_ERROR);
    }
    const char *from_initiator_only[] = {"InitiatorName=iqn.2024-01.org.example:a",
                                         "SessionType=Normal", "InitiatorAlias=me",
                                         "TargetName=iqn.2024-01.org.example:t"};
    for (size_t i = 0; i < 4; i++) {
        iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
        assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, from_initiator_only[i], NULL),
                         ISCSI_LOGIN_INITIATOR_ERROR);
    }
    /* ...but the target does list TargetName in a SendTargets answer, repeatedly */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    assert_int_equal(feed(&n, ISCSI_STAGE_FULL_FEATURE, &out, "TargetName=iqn.2024-01.org.x:a",
                          "TargetAddress=10.0.0.1:3260,1", "TargetName=iqn.2024-01.org.x:b",
                          "TargetAddress=10.0.0.1:3260,1", NULL),
                     ISCSI_LOGIN_OK);

    /* the initiator records what the target declares */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "TargetPortalGroupTag=0x10",
                          "TargetAlias=fast disk", NULL),
                     ISCSI_LOGIN_OK);
    assert_true(n.tpgt_seen);
    assert_int_equal(n.tpgt, 16);
    assert_string_equal(n.target_alias, "fast disk");
}

static void test_stage_rules(void **state)
{
    (void)state;
    struct iscsi_neg n;
    /* operational keys wait for the operational stage (§6.3) */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=None",
                          "MaxBurstLength=4096", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "MaxRecvDataSegmentLength=8192", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    /* security keys belong to the security stage */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "AuthMethod=None", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    /* the leading declarations are fine in either login stage */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out,
                          "InitiatorName=iqn.2024-01.org.example:a", "SessionType=Normal",
                          "TargetName=iqn.2024-01.org.example:t", "InitiatorAlias=host a",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_string_equal(n.initiator_name, "iqn.2024-01.org.example:a");
    assert_string_equal(n.target_name, "iqn.2024-01.org.example:t");
    assert_string_equal(n.initiator_alias, "host a");
    assert_int_equal(n.session_type, ISCSI_SESSION_NORMAL);
    assert_null(find(&out, "InitiatorName")); /* declarations are not answered */
    /* full feature phase: only ALL/FFPO keys */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_FULL_FEATURE, &out, "InitialR2T=No", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "SendTargets=All", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    assert_int_equal(feed(&n, ISCSI_STAGE_FULL_FEATURE, &out, "SendTargets=All", NULL),
                     ISCSI_LOGIN_OK);
    assert_true(n.send_targets_seen);
    assert_string_equal(n.send_targets, "All");
    assert_int_equal(out.len, 0);
    /* SendTargets=All is for discovery sessions only */
    target_with(&n, NULL);
    n.session_type = ISCSI_SESSION_NORMAL;
    assert_int_equal(feed(&n, ISCSI_STAGE_FULL_FEATURE, &out, "SendTargets=All", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "SendTargets", "Reject");
    assert_false(n.send_targets_seen);
}

static void test_leading_only(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    n.leading = false;
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest=None",
                          "MaxRecvDataSegmentLength=65536", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "HeaderDigest", "None");
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=4096", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    n.leading = false;
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "SessionType=Normal", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
}

static void test_bad_declarations(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "SessionType=Bogus", NULL),
                     ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED);
    const char *bad[] = {"InitiatorName=", "InitiatorName=host1", "InitiatorName=iqn.a b",
                         "TargetName=iqn."};
    for (size_t i = 0; i < 4; i++) {
        target_with(&n, NULL);
        assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, bad[i], NULL),
                         ISCSI_LOGIN_INITIATOR_ERROR);
    }
    char name[300] = "InitiatorName=iqn.2024-01.org.example:";
    size_t l = strlen(name);
    memset(name + l, 'a', 224 - (l - strlen("InitiatorName=")));
    name[l + 224 - (l - strlen("InitiatorName="))] = '\0'; /* a 224-byte name */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, name, NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    name[strlen(name) - 1] = '\0'; /* 223 bytes is the limit */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, name, NULL), ISCSI_LOGIN_OK);
    assert_int_equal(strlen(n.initiator_name), 223);

    /* a value over 255 bytes: Reject for a negotiated key, failure for a declaration */
    char big[400] = "MaxBurstLength=";
    memset(big + strlen(big), '1', 300);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, big, NULL), ISCSI_LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "Reject");
    char alias[400] = "InitiatorAlias=";
    memset(alias + strlen(alias), 'x', 300);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, alias, NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
}

static void test_malformed_text(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    target_with(&n, NULL);
    const char unterminated[] = "InitialR2T=Yes\0ImmediateData=No";
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_handle(&n, ISCSI_STAGE_OPERATIONAL, unterminated,
                                      sizeof(unterminated) - 1, &out),
                     ISCSI_LOGIN_INITIATOR_ERROR);
    /* an empty text is fine (e.g. an empty Login Request to keep transiting) */
    target_with(&n, NULL);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_handle(&n, ISCSI_STAGE_SECURITY, NULL, 0, &out), ISCSI_LOGIN_OK);
    assert_int_equal(out.len, 0);
}

/* ---- AuthMethod and the CHAP hook ---- */

static int hook_calls;

static enum iscsi_login_status chap_hook(void *ctx, const char *key, const char *value,
                                         struct iscsi_text *o)
{
    (void)ctx;
    hook_calls++;
    if (!strcmp(key, "CHAP_A") && !strcmp(value, "5"))
        iscsi_text_add(o, "CHAP_A", "5");
    return ISCSI_LOGIN_OK;
}

static void test_auth_method(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=CHAP,None", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "AuthMethod", "None");
    assert_true(n.auth_none_agreed);
    /* CHAP keys without AuthMethod=CHAP are a protocol error */
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "CHAP_A=5", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);

    target_with(&n, NULL);
    n.auth_required = true;
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=None", NULL),
                     ISCSI_LOGIN_AUTH_FAILED);
    assert_answer(&out, "AuthMethod", "Reject");
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=KRB5,SRP", NULL),
                     ISCSI_LOGIN_AUTH_FAILED);
    assert_answer(&out, "AuthMethod", "Reject");

    /* CHAP required: agreed, then CHAP_* go to the hook */
    target_with(&n, NULL);
    n.auth_required = true;
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=SRP,CHAP,None", NULL),
                     ISCSI_LOGIN_OK);
    assert_answer(&out, "AuthMethod", "CHAP");
    assert_true(n.auth_chap_agreed);
    assert_false(n.auth_none_agreed);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "CHAP_A=5", NULL),
                     ISCSI_LOGIN_AUTH_FAILED); /* no authenticator yet */
    target_with(&n, NULL);
    n.auth_required = true;
    n.auth_key = chap_hook;
    hook_calls = 0;
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=CHAP", NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "CHAP_A=5", NULL), ISCSI_LOGIN_OK);
    assert_int_equal(hook_calls, 1);
    assert_answer(&out, "CHAP_A", "5");

    /* initiator side: the target's AuthMethod is the answer to the login code's offer */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=None", NULL),
                     ISCSI_LOGIN_OK);
    assert_true(n.auth_none_agreed);
    assert_int_equal(out.len, 0);
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=Reject", NULL),
                     ISCSI_LOGIN_AUTH_FAILED);
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    n.auth_required = true; /* we insist on CHAP: None is not acceptable */
    assert_int_equal(feed(&n, ISCSI_STAGE_SECURITY, &out, "AuthMethod=None", NULL),
                     ISCSI_LOGIN_AUTH_FAILED);
}

/* ---- the initiator side: offers and checking answers ---- */

static void initiator_local(struct iscsi_params *p)
{
    iscsi_params_default(p);
    p->header_digest = true;
    p->data_digest = false;
    p->max_connections = 1;
    p->initial_r2t = false;
    p->immediate_data = true;
    p->max_recv_dsl = 131072;
    p->max_burst = 1048576;
    p->first_burst = 131072;
    p->default_time2wait = 0;
    p->default_time2retain = 0;
    p->max_outstanding_r2t = 4;
    p->erl = 0;
}

static void test_initiator_offer(void **state)
{
    (void)state;
    struct iscsi_params local;
    initiator_local(&local);
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_answer(&out, "HeaderDigest", "CRC32C,None");
    assert_answer(&out, "DataDigest", "None");
    assert_answer(&out, "MaxConnections", "1");
    assert_answer(&out, "InitialR2T", "No");
    assert_answer(&out, "ImmediateData", "Yes");
    assert_answer(&out, "MaxRecvDataSegmentLength", "131072");
    assert_answer(&out, "MaxBurstLength", "1048576");
    assert_answer(&out, "FirstBurstLength", "131072");
    assert_answer(&out, "DefaultTime2Wait", "0");
    assert_answer(&out, "DefaultTime2Retain", "0");
    assert_answer(&out, "MaxOutstandingR2T", "4");
    assert_answer(&out, "DataPDUInOrder", "Yes");
    assert_answer(&out, "DataSequenceInOrder", "Yes");
    assert_answer(&out, "ErrorRecoveryLevel", "0");
    assert_int_equal(npairs(&out), 14);
    assert_false(iscsi_neg_settled(&n));
    /* offering again adds nothing */
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_int_equal(out.len, 0);
    /* nothing offered in the security stage (the login code adds its declarations) */
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_SECURITY, &out), 0);
    assert_int_equal(out.len, 0);

    /* a non-leading connection offers connection-scope keys only */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    n.leading = false;
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_int_equal(npairs(&out), 3);
    assert_non_null(find(&out, "HeaderDigest"));
    assert_non_null(find(&out, "DataDigest"));
    assert_non_null(find(&out, "MaxRecvDataSegmentLength"));

    /* a discovery session does not offer what is irrelevant there */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_null(find(&out, "MaxBurstLength"));
    assert_null(find(&out, "InitialR2T"));
    assert_null(find(&out, "MaxConnections"));
    assert_non_null(find(&out, "DefaultTime2Wait"));
    assert_non_null(find(&out, "ErrorRecoveryLevel"));

    /* a full buffer is reported */
    struct iscsi_text tiny;
    iscsi_text_init(&tiny);
    char pad[1024];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    while (iscsi_text_add(&tiny, "X-pad", pad) == 0)
        ;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &tiny), -1);
    iscsi_text_free(&tiny);
}

static enum iscsi_login_status answer_one(const char *pair)
{
    struct iscsi_params local;
    initiator_local(&local);
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    return feed(&n, ISCSI_STAGE_OPERATIONAL, &out, pair, NULL);
}

static void test_initiator_checks_answers(void **state)
{
    (void)state;
    /* legal answers */
    assert_int_equal(answer_one("MaxBurstLength=65536"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("DefaultTime2Wait=5"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("InitialR2T=Yes"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("HeaderDigest=None"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("HeaderDigest=CRC32C"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("MaxBurstLength=Irrelevant"), ISCSI_LOGIN_OK);
    assert_int_equal(answer_one("ImmediateData=No"), ISCSI_LOGIN_OK);
    /* Reject leaves the default: fine only if it is within our limits */
    assert_int_equal(answer_one("MaxBurstLength=Reject"), ISCSI_LOGIN_OK);   /* 262144 <= 1M */
    assert_int_equal(answer_one("DefaultTime2Wait=Reject"), ISCSI_LOGIN_OK); /* 2 >= 0 */
    assert_int_equal(answer_one("DefaultTime2Retain=Reject"), ISCSI_LOGIN_INITIATOR_ERROR);
    /* illegal answers */
    assert_int_equal(answer_one("MaxBurstLength=2097152"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("MaxBurstLength=100"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("MaxBurstLength=lots"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("ErrorRecoveryLevel=1"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("DefaultTime2Wait=3601"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("DataDigest=CRC32C"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("HeaderDigest=CRC32C,None"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("DataPDUInOrder=No"), ISCSI_LOGIN_INITIATOR_ERROR); /* OR */
    assert_int_equal(answer_one("InitialR2T=Maybe"), ISCSI_LOGIN_INITIATOR_ERROR);
    assert_int_equal(answer_one("MaxBurstLength=NotUnderstood"), ISCSI_LOGIN_INITIATOR_ERROR);

    /* AND with our No: the result is No without an answer, and a Yes answer is illegal */
    struct iscsi_params local;
    initiator_local(&local);
    local.immediate_data = false;
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_false(n.result.immediate_data);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "ImmediateData=Yes", NULL),
                     ISCSI_LOGIN_INITIATOR_ERROR);
}

static void test_settled_without_optional_answers(void **state)
{
    (void)state;
    struct iscsi_params local;
    initiator_local(&local);
    local.initial_r2t = true;      /* OR with Yes: decided */
    local.immediate_data = false;  /* AND with No: decided */
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out), 0);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "HeaderDigest=None",
                          "DataDigest=None", "MaxConnections=1", "MaxBurstLength=262144",
                          "FirstBurstLength=65536", "DefaultTime2Wait=2",
                          "DefaultTime2Retain=0", "MaxOutstandingR2T=1",
                          "DataPDUInOrder=Yes", "DataSequenceInOrder=Yes",
                          "ErrorRecoveryLevel=0", "MaxRecvDataSegmentLength=8192", NULL),
                     ISCSI_LOGIN_OK);
    assert_true(iscsi_neg_settled(&n));
    assert_true(n.result.initial_r2t);
    assert_false(n.result.immediate_data);
}

/* ---- a whole login, in memory ---- */

static void exchange(struct iscsi_neg *from, struct iscsi_neg *to, enum iscsi_stage stage,
                     struct iscsi_text *msg, struct iscsi_text *reply)
{
    (void)from;
    iscsi_text_reset(reply);
    assert_int_equal(iscsi_neg_handle(to, stage, msg->data, msg->len, reply), ISCSI_LOGIN_OK);
}

static void test_full_negotiation(void **state)
{
    (void)state;
    struct iscsi_params il, tl;
    initiator_local(&il);
    iscsi_params_default(&tl);
    tl.header_digest = true;
    tl.data_digest = true;
    tl.max_connections = 8;
    tl.initial_r2t = false;
    tl.max_recv_dsl = 65536;
    tl.max_burst = 262144;
    tl.first_burst = 65536;
    tl.default_time2wait = 2;
    tl.default_time2retain = 20;
    tl.max_outstanding_r2t = 16;
    tl.erl = 2;

    struct iscsi_neg ini, tgt;
    iscsi_neg_init(&ini, ISCSI_SIDE_INITIATOR, &il);
    iscsi_neg_init(&tgt, ISCSI_SIDE_TARGET, &tl);
    struct iscsi_text req, rsp;
    iscsi_text_init(&req);
    iscsi_text_init(&rsp);

    /* security stage: the login code's declarations and AuthMethod */
    iscsi_text_add(&req, "InitiatorName", "iqn.2024-01.org.example:ini");
    iscsi_text_add(&req, "TargetName", "iqn.2024-01.org.example:tgt");
    iscsi_text_add(&req, "SessionType", "Normal");
    iscsi_text_add(&req, "AuthMethod", "None");
    assert_int_equal(iscsi_neg_offer(&ini, ISCSI_STAGE_SECURITY, &req), 0);
    exchange(&ini, &tgt, ISCSI_STAGE_SECURITY, &req, &rsp);
    assert_true(tgt.auth_none_agreed);
    assert_string_equal(tgt.initiator_name, "iqn.2024-01.org.example:ini");
    assert_int_equal(tgt.session_type, ISCSI_SESSION_NORMAL);
    iscsi_text_add(&rsp, "TargetPortalGroupTag", "1");
    exchange(&tgt, &ini, ISCSI_STAGE_SECURITY, &rsp, &req);
    assert_true(ini.auth_none_agreed);
    assert_int_equal(req.len, 0);

    /* operational stage */
    iscsi_text_reset(&req);
    assert_int_equal(iscsi_neg_offer(&ini, ISCSI_STAGE_OPERATIONAL, &req), 0);
    exchange(&ini, &tgt, ISCSI_STAGE_OPERATIONAL, &req, &rsp);
    assert_int_equal(iscsi_neg_offer(&tgt, ISCSI_STAGE_OPERATIONAL, &rsp), 0);
    assert_answer(&rsp, "MaxRecvDataSegmentLength", "65536");
    exchange(&tgt, &ini, ISCSI_STAGE_OPERATIONAL, &rsp, &req);
    assert_int_equal(req.len, 0); /* every answer was acceptable, nothing to say */
    assert_true(iscsi_neg_settled(&ini));
    assert_true(iscsi_neg_settled(&tgt));

    struct iscsi_params ri, rt;
    iscsi_neg_result(&ini, &ri);
    iscsi_neg_result(&tgt, &rt);
    assert_true(ri.header_digest && rt.header_digest);
    assert_false(ri.data_digest || rt.data_digest);
    assert_int_equal(ri.max_connections, 1);
    assert_false(ri.initial_r2t);
    assert_true(ri.immediate_data);
    assert_int_equal(ri.max_burst, 262144);
    assert_int_equal(ri.first_burst, 65536);
    assert_int_equal(ri.default_time2wait, 2);
    assert_int_equal(ri.default_time2retain, 0);
    assert_int_equal(ri.max_outstanding_r2t, 4);
    assert_int_equal(ri.erl, 0);
    /* each side's receive limit is the other's send limit */
    assert_int_equal(ri.max_recv_dsl, 131072);
    assert_int_equal(ri.peer_max_recv_dsl, 65536);
    assert_int_equal(rt.max_recv_dsl, ri.peer_max_recv_dsl);
    assert_int_equal(rt.peer_max_recv_dsl, ri.max_recv_dsl);
    /* everything else agrees */
    rt.max_recv_dsl = ri.max_recv_dsl;
    rt.peer_max_recv_dsl = ri.peer_max_recv_dsl;
    assert_memory_equal(&ri, &rt, sizeof(ri));
    assert_true(ini.tpgt_seen);

    iscsi_text_free(&req);
    iscsi_text_free(&rsp);
}

static void test_first_burst_clamped(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxBurstLength=16384",
                          "FirstBurstLength=65536", NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(n.result.first_burst, 65536);
    struct iscsi_params r;
    iscsi_neg_result(&n, &r);
    assert_int_equal(r.max_burst, 16384);
    assert_int_equal(r.first_burst, 16384); /* §13.14: never above MaxBurstLength */
}

static void test_ffp_restart(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_no_r2t_no_immediate);
    assert_int_equal(feed(&n, ISCSI_STAGE_OPERATIONAL, &out, "MaxRecvDataSegmentLength=65536",
                          "InitialR2T=No", NULL),
                     ISCSI_LOGIN_OK);
    iscsi_neg_restart(&n);
    assert_int_equal(feed(&n, ISCSI_STAGE_FULL_FEATURE, &out, "MaxRecvDataSegmentLength=16384",
                          NULL),
                     ISCSI_LOGIN_OK);
    assert_int_equal(n.result.peer_max_recv_dsl, 16384);
    assert_false(n.result.initial_r2t); /* results survive */
}

/* ---- the text buffer and iterator ---- */

static void test_text_cap(void **state)
{
    (void)state;
    struct iscsi_text t;
    iscsi_text_init(&t);
    char v[1000];
    memset(v, 'v', sizeof(v) - 1);
    v[sizeof(v) - 1] = '\0';
    int n = 0;
    while (iscsi_text_add(&t, "X-k", v) == 0)
        n++;
    assert_true(t.overflow);
    assert_int_equal(n, ISCSI_TEXT_MAX / (4 + 999 + 1));
    assert_true(t.len <= ISCSI_TEXT_MAX && t.cap <= ISCSI_TEXT_MAX);
    uint32_t len = t.len;
    assert_int_equal(iscsi_text_addf(&t, "X-k", "%s", v), -1);
    assert_int_equal(t.len, len); /* a failed append leaves the text intact */
    iscsi_text_reset(&t);
    assert_false(t.overflow);
    assert_int_equal(t.len, 0);
    assert_int_equal(iscsi_text_addf(&t, "MaxBurstLength", "%u", 65536u), 0);
    assert_int_equal(t.len, strlen("MaxBurstLength=65536") + 1);
    assert_memory_equal(t.data, "MaxBurstLength=65536", t.len);
    assert_int_equal(iscsi_text_append(&t, "", ISCSI_TEXT_MAX), -1);
    assert_true(t.overflow);
    iscsi_text_free(&t);
}

static void test_iter_edges(void **state)
{
    (void)state;
    struct iscsi_text_iter it;
    const char *k, *v;

    iscsi_text_iter_init(&it, NULL, 0);
    assert_int_equal(iscsi_text_next(&it, &k, &v), 0);

    const char padded[] = "a=b\0\0\0\0"; /* zero padding of the data segment */
    iscsi_text_iter_init(&it, padded, sizeof(padded) - 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), 1);
    assert_string_equal(k, "a");
    assert_string_equal(v, "b");
    assert_int_equal(iscsi_text_next(&it, &k, &v), 0);

    const char eq[] = "CHAP_R=0bAB==\0K=\0";
    iscsi_text_iter_init(&it, eq, sizeof(eq) - 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), 1);
    assert_string_equal(k, "CHAP_R");
    assert_string_equal(v, "0bAB=="); /* only the first '=' splits */
    assert_int_equal(iscsi_text_next(&it, &k, &v), 1);
    assert_string_equal(k, "K");
    assert_string_equal(v, "");
    assert_int_equal(iscsi_text_next(&it, &k, &v), 0);

    const char trailing[] = "a=b\0c=d";
    iscsi_text_iter_init(&it, trailing, sizeof(trailing) - 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), -1);

    const char *bad[] = {"novalue", "=v", ""};
    for (int i = 0; i < 2; i++) {
        iscsi_text_iter_init(&it, bad[i], (uint32_t)strlen(bad[i]) + 1);
        assert_int_equal(iscsi_text_next(&it, &k, &v), -1);
    }

    char key[100];
    memset(key, 'K', 63);
    strcpy(key + 63, "=1");
    iscsi_text_iter_init(&it, key, (uint32_t)strlen(key) + 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), 1); /* 63 bytes: the limit */
    memset(key, 'K', 64);
    strcpy(key + 64, "=1");
    iscsi_text_iter_init(&it, key, (uint32_t)strlen(key) + 1);
    assert_int_equal(iscsi_text_next(&it, &k, &v), -1);

    /* a pair longer than the scratch space is malformed, not truncated */
    static char huge[9000];
    memset(huge, 'x', sizeof(huge));
    memcpy(huge, "X-a=", 4);
    huge[sizeof(huge) - 1] = '\0';
    iscsi_text_iter_init(&it, huge, sizeof(huge));
    assert_int_equal(iscsi_text_next(&it, &k, &v), -1);
}

static void test_opcode_name(void **state)
{
    (void)state;
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_LOGIN_REQ), "Login-Request");
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_DATA_IN), "Data-In");
    assert_string_equal(iscsi_opcode_name((enum iscsi_opcode)0x1f), "Unknown");
}

int main(void)
{
    log_set_level(LOG_LVL_ERROR); /* the failure paths log warnings by design */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bool_or),
        cmocka_unit_test(test_bool_and),
        cmocka_unit_test(test_numeric_min),
        cmocka_unit_test(test_numeric_max),
        cmocka_unit_test(test_numeric_hex),
        cmocka_unit_test(test_reject_bad_values),
        cmocka_unit_test(test_answer_constant_as_offer),
        cmocka_unit_test(test_mrdsl_declarative),
        cmocka_unit_test(test_digest_selection),
        cmocka_unit_test(test_task_reporting),
        cmocka_unit_test(test_not_understood),
        cmocka_unit_test(test_irrelevant_in_discovery),
        cmocka_unit_test(test_obsolete_markers),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_wrong_direction),
        cmocka_unit_test(test_stage_rules),
        cmocka_unit_test(test_leading_only),
        cmocka_unit_test(test_bad_declarations),
        cmocka_unit_test(test_malformed_text),
        cmocka_unit_test(test_auth_method),
        cmocka_unit_test(test_initiator_offer),
        cmocka_unit_test(test_initiator_checks_answers),
        cmocka_unit_test(test_settled_without_optional_answers),
        cmocka_unit_test(test_full_negotiation),
        cmocka_unit_test(test_first_burst_clamped),
        cmocka_unit_test(test_ffp_restart),
        cmocka_unit_test(test_text_cap),
        cmocka_unit_test(test_iter_edges),
        cmocka_unit_test(test_opcode_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
