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

/* short names: the tests are mostly tables of these */
#define SEC ISCSI_STAGE_SECURITY
#define OP ISCSI_STAGE_OPERATIONAL
#define FFP ISCSI_STAGE_FULL_FEATURE
#define LOGIN_OK ISCSI_LOGIN_OK
#define IERR ISCSI_LOGIN_INITIATOR_ERROR

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

/* Answer of a fresh target (limits tweaked by `tweak`) to one operational-stage pair, or
 * "(none)"; the status must be OK. */
static const char *ask(void (*tweak)(struct iscsi_params *), const char *pair)
{
    struct iscsi_neg n;
    char key[64];
    size_t kl = strcspn(pair, "=");
    snprintf(key, sizeof(key), "%.*s", (int)kl, pair);
    target_with(&n, tweak);
    assert_int_equal(feed(&n, OP, &out, pair, NULL), LOGIN_OK);
    const char *answer = find(&out, key);
    return answer ? answer : "(none)";
}

static void local_no(struct iscsi_params *p)
{
    p->initial_r2t = false;
    p->immediate_data = false;
    p->data_pdu_in_order = false;
    p->data_sequence_in_order = false;
}

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

static void local_digests(struct iscsi_params *p)
{
    p->header_digest = true;
    p->data_digest = true;
}

/* ---- Boolean result functions (§6.2.2, §13.10, §13.11, §13.18, §13.19) ---- */

static void test_bool_results(void **state)
{
    (void)state;
    /* OR: No only if both say No */
    assert_string_equal(ask(local_no, "InitialR2T=No"), "No");
    assert_string_equal(ask(NULL, "InitialR2T=No"), "Yes");
    assert_string_equal(ask(local_no, "InitialR2T=Yes"), "Yes");
    assert_string_equal(ask(local_no, "DataPDUInOrder=No"), "No");
    assert_string_equal(ask(NULL, "DataPDUInOrder=No"), "Yes");
    assert_string_equal(ask(local_no, "DataSequenceInOrder=Yes"), "Yes");
    assert_string_equal(ask(NULL, "DataSequenceInOrder=No"), "Yes");
    /* AND: Yes only if both say Yes */
    assert_string_equal(ask(NULL, "ImmediateData=Yes"), "Yes");
    assert_string_equal(ask(NULL, "ImmediateData=No"), "No");
    assert_string_equal(ask(local_no, "ImmediateData=Yes"), "No");
    assert_string_equal(ask(NULL, "RDMAExtensions=Yes"), "No"); /* TCP only */

    /* and the result is recorded */
    struct iscsi_neg n;
    target_with(&n, local_no);
    assert_int_equal(feed(&n, OP, &out, "InitialR2T=No", "ImmediateData=Yes", "DataPDUInOrder=No",
                          "DataSequenceInOrder=Yes", NULL),
                     LOGIN_OK);
    assert_false(n.result.initial_r2t);
    assert_false(n.result.immediate_data);
    assert_false(n.result.data_pdu_in_order);
    assert_true(n.result.data_sequence_in_order);
}

/* ---- numerical result functions ---- */

static void test_numeric_results(void **state)
{
    (void)state;
    /* Minimum */
    assert_string_equal(ask(local_small, "MaxBurstLength=262144"), "65536");
    assert_string_equal(ask(local_small, "MaxBurstLength=4096"), "4096");
    assert_string_equal(ask(local_small, "FirstBurstLength=8192"), "8192");
    assert_string_equal(ask(local_small, "FirstBurstLength=65536"), "16384");
    assert_string_equal(ask(local_small, "MaxConnections=16"), "4");
    assert_string_equal(ask(local_small, "MaxOutstandingR2T=2"), "2");
    assert_string_equal(ask(local_small, "DefaultTime2Retain=60"), "10");
    assert_string_equal(ask(local_small, "ErrorRecoveryLevel=2"), "1");
    assert_string_equal(ask(NULL, "iSCSIProtocolLevel=2"), "1"); /* RFC 7143 = level 1 */
    /* Maximum */
    assert_string_equal(ask(local_small, "DefaultTime2Wait=2"), "5");
    assert_string_equal(ask(local_small, "DefaultTime2Wait=30"), "30");
    /* §6.1: hex constants are numbers too; we answer in decimal */
    assert_string_equal(ask(NULL, "MaxBurstLength=0x10000"), "65536");
    assert_string_equal(ask(NULL, "FirstBurstLength=0X1000"), "4096");
    /* range limits themselves are admissible */
    assert_string_equal(ask(NULL, "MaxBurstLength=512"), "512");
    assert_string_equal(ask(NULL, "MaxOutstandingR2T=65535"), "1");

    struct iscsi_neg n;
    target_with(&n, local_small);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=262144", "FirstBurstLength=8192",
                          "DefaultTime2Wait=30", "ErrorRecoveryLevel=2", NULL),
                     LOGIN_OK);
    assert_int_equal(n.result.max_burst, 65536);
    assert_int_equal(n.result.first_burst, 8192);
    assert_int_equal(n.result.default_time2wait, 30);
    assert_int_equal(n.result.erl, 1);
}

static void test_reject_bad_values(void **state)
{
    (void)state;
    /* §6.2.2: out of range, not a number, not a boolean -> Reject */
    const char *bad[] = {"MaxBurstLength=511",
                         "FirstBurstLength=16777216",
                         "MaxOutstandingR2T=0",
                         "ErrorRecoveryLevel=3",
                         "DefaultTime2Wait=3601",
                         "MaxConnections=abc",
                         "DefaultTime2Retain=0x",
                         "iSCSIProtocolLevel=-1",
                         "MaxBurstLength=99999999999999999999",
                         "MaxBurstLength= 512",
                         "InitialR2T=yes",
                         "ImmediateData=True",
                         "DataPDUInOrder=",
                         "HeaderDigest=",
                         "TaskReporting=FastAbort"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_string_equal(ask(NULL, bad[i]), "Reject");
    /* and the key keeps its default */
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=1", "InitialR2T=x", NULL), LOGIN_OK);
    assert_int_equal(n.result.max_burst, 262144);
    assert_true(n.result.initial_r2t);
    /* §6.2: Reject/Irrelevant/NotUnderstood are answers, never proposals */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=Reject", NULL), IERR);
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
    assert_int_equal(feed(&n, OP, &out, "MaxRecvDataSegmentLength=65536", NULL), LOGIN_OK);
    /* not an answer: our own declaration, exactly once */
    assert_answer(&out, "MaxRecvDataSegmentLength", "262144");
    assert_int_equal(n.result.peer_max_recv_dsl, 65536);
    assert_int_equal(n.result.max_recv_dsl, 262144);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_int_equal(npairs(&out), 1);

    /* the target declares even if the initiator never did; the peer value stays 8192 */
    target_with(&n, local_mrdsl);
    assert_int_equal(feed(&n, OP, &out, "InitialR2T=Yes", NULL), LOGIN_OK);
    assert_answer(&out, "MaxRecvDataSegmentLength", "262144");
    assert_int_equal(n.result.peer_max_recv_dsl, 8192);

    /* an impossible declaration cannot be answered: the login fails */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxRecvDataSegmentLength=511", NULL), IERR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxRecvDataSegmentLength=junk", NULL), IERR);

    /* initiator side: the target's declaration is our send limit */
    struct iscsi_params local;
    iscsi_params_default(&local);
    local.max_recv_dsl = 131072;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    assert_int_equal(feed(&n, OP, &out, "MaxRecvDataSegmentLength=16384", NULL), LOGIN_OK);
    assert_int_equal(n.result.peer_max_recv_dsl, 16384);
    assert_int_equal(out.len, 0); /* the initiator's own declaration goes with offer() */
}

/* ---- list negotiation (§6.2.1): digests (§13.1), TaskReporting (RFC 7144) ---- */

static void test_list_selection(void **state)
{
    (void)state;
    /* we support CRC32C: the initiator's first supported choice wins */
    assert_string_equal(ask(local_digests, "HeaderDigest=CRC32C,None"), "CRC32C");
    assert_string_equal(ask(local_digests, "DataDigest=None,CRC32C"), "None");
    assert_string_equal(ask(local_digests, "DataDigest=CRC32C"), "CRC32C");
    assert_string_equal(ask(local_digests, "HeaderDigest=MD5,CRC32C"), "CRC32C"); /* ignored */
    /* digests off here: None when offered, Reject when only CRC32C is */
    assert_string_equal(ask(NULL, "HeaderDigest=CRC32C,None"), "None");
    assert_string_equal(ask(NULL, "DataDigest=CRC32C"), "Reject");
    assert_string_equal(ask(NULL, "TaskReporting=FastAbort,RFC3720"), "RFC3720");

    struct iscsi_neg n;
    target_with(&n, local_digests);
    assert_int_equal(feed(&n, OP, &out, "HeaderDigest=CRC32C,None", "DataDigest=None,CRC32C", NULL),
                     LOGIN_OK);
    assert_true(n.result.header_digest);
    assert_false(n.result.data_digest);
}

/* ---- NotUnderstood, Irrelevant, obsolete keys ---- */

static void test_not_understood(void **state)
{
    (void)state;
    assert_string_equal(ask(NULL, "X-com.example.Frob=1"), "NotUnderstood");
    assert_string_equal(ask(NULL, "X#NodeArchitecture=linux"), "NotUnderstood");
    assert_string_equal(ask(NULL, "headerdigest=None"), "NotUnderstood"); /* case-sensitive */
    assert_string_equal(ask(NULL, "Bogus=1"), "NotUnderstood");
    assert_string_equal(ask(NULL, "X-org.foo=NotUnderstood"), "(none)"); /* never answer one */
}

static void test_irrelevant_in_discovery(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_digests);
    /* SessionType comes last: it still decides for the keys before it */
    assert_int_equal(feed(&n, OP, &out, "InitialR2T=No", "ImmediateData=Yes", "MaxBurstLength=4096",
                          "FirstBurstLength=4096", "MaxConnections=2", "MaxOutstandingR2T=2",
                          "DataPDUInOrder=No", "DataSequenceInOrder=No", "HeaderDigest=CRC32C,None",
                          "DefaultTime2Wait=0", "ErrorRecoveryLevel=0",
                          "InitiatorName=iqn.2024-01.org.example:host", "SessionType=Discovery",
                          NULL),
                     LOGIN_OK);
    const char *irr[] = {"InitialR2T",       "ImmediateData",      "MaxBurstLength",
                         "FirstBurstLength", "MaxConnections",     "MaxOutstandingR2T",
                         "DataPDUInOrder",   "DataSequenceInOrder"};
    for (size_t i = 0; i < sizeof(irr) / sizeof(irr[0]); i++)
        assert_answer(&out, irr[i], "Irrelevant");
    assert_answer(&out, "HeaderDigest", "CRC32C"); /* relevant in discovery */
    assert_answer(&out, "DefaultTime2Wait", "2");
    assert_answer(&out, "ErrorRecoveryLevel", "0");
    assert_int_equal(n.session_type, ISCSI_SESSION_DISCOVERY);
    assert_int_equal(n.result.max_burst, 262144);
}

static void test_obsolete_markers(void **state)
{
    (void)state;
    /* RFC 7143 §13.26: markers SHOULD, marker intervals MUST be answered Reject */
    assert_string_equal(ask(NULL, "OFMarker=No"), "Reject");
    assert_string_equal(ask(NULL, "IFMarker=Yes"), "Reject");
    assert_string_equal(ask(NULL, "OFMarkInt=2048~8192"), "Reject");
    assert_string_equal(ask(NULL, "IFMarkInt=2048"), "Reject");
}

/* ---- protocol errors that fail the login ---- */

static void test_duplicate_key(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=4096", "MaxBurstLength=8192", NULL), IERR);
    /* across PDUs of the same login too */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "InitialR2T=No", NULL), LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "InitialR2T=Yes", NULL), IERR);
    /* and for declarations */
    target_with(&n, NULL);
    assert_int_equal(
        feed(&n, SEC, &out, "InitiatorName=iqn.2024-01.org.example:a", "AuthMethod=None", NULL),
        LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "InitiatorName=iqn.2024-01.org.example:b", NULL), IERR);

    /* TargetAddress may repeat (§13.8) */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(
        feed(&n, SEC, &out, "TargetAddress=10.0.0.1:3260,1", "TargetAddress=10.0.0.2:3260,1", NULL),
        LOGIN_OK);
}

/* §13.21: the first text fixes the session type; a normal session cannot become a
 * discovery one later in the login (and then ask SendTargets=All). */
static void test_session_type_fixed(void **state)
{
    (void)state;
    struct iscsi_neg n;
    /* no SessionType at first: Normal, and Discovery later is refused */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "InitiatorName=iqn.2024-01.org.example:a",
                          "TargetName=iqn.2024-01.org.example:t", "AuthMethod=None", NULL),
                     LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "SessionType=Discovery", NULL), IERR);
    assert_int_not_equal(n.session_type, ISCSI_SESSION_DISCOVERY);
    /* in the first operational text when the login starts there: the same */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "InitiatorName=iqn.2024-01.org.example:a",
                          "TargetName=iqn.2024-01.org.example:t", NULL),
                     LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=8192", "SessionType=Discovery", NULL),
                     IERR);
    /* declared Normal first, Discovery later: refused */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "SessionType=Normal", "AuthMethod=None", NULL), LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "SessionType=Discovery", NULL), IERR);
    /* repeating the type of the first text is harmless, declared or by default */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "SessionType=Discovery", "AuthMethod=None", NULL),
                     LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "SessionType=Discovery", NULL), LOGIN_OK);
    assert_int_equal(n.session_type, ISCSI_SESSION_DISCOVERY);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=None", NULL), LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "SessionType=Normal", NULL), LOGIN_OK);
}

static void test_wrong_direction(void **state)
{
    (void)state;
    struct iscsi_neg n;
    const char *from_target_only[] = {"TargetPortalGroupTag=1", "TargetAlias=disk",
                                      "TargetAddress=10.0.0.1:3260,1"};
    for (size_t i = 0; i < 3; i++) {
        target_with(&n, NULL);
        assert_int_equal(feed(&n, SEC, &out, from_target_only[i], NULL), IERR);
    }
    const char *from_initiator_only[] = {"InitiatorName=iqn.2024-01.org.example:a",
                                         "SessionType=Normal", "InitiatorAlias=me",
                                         "TargetName=iqn.2024-01.org.example:t"};
    for (size_t i = 0; i < 4; i++) {
        iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
        assert_int_equal(feed(&n, SEC, &out, from_initiator_only[i], NULL), IERR);
    }
    /* ...but the target does list TargetName in a SendTargets answer, repeatedly */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    assert_int_equal(feed(&n, FFP, &out, "TargetName=iqn.2024-01.org.x:a",
                          "TargetAddress=10.0.0.1:3260,1", "TargetName=iqn.2024-01.org.x:b",
                          "TargetAddress=10.0.0.1:3260,1", NULL),
                     LOGIN_OK);

    /* the initiator records what the target declares */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(
        feed(&n, SEC, &out, "TargetPortalGroupTag=0x10", "TargetAlias=fast disk", NULL), LOGIN_OK);
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
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=None", "MaxBurstLength=4096", NULL), IERR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "MaxRecvDataSegmentLength=8192", NULL), IERR);
    /* security keys belong to the security stage */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "AuthMethod=None", NULL), IERR);
    /* the leading declarations are fine in either login stage */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "InitiatorName=iqn.2024-01.org.example:a",
                          "SessionType=Normal", "TargetName=iqn.2024-01.org.example:t",
                          "InitiatorAlias=host a", NULL),
                     LOGIN_OK);
    assert_string_equal(n.initiator_name, "iqn.2024-01.org.example:a");
    assert_string_equal(n.target_name, "iqn.2024-01.org.example:t");
    assert_string_equal(n.initiator_alias, "host a");
    assert_int_equal(n.session_type, ISCSI_SESSION_NORMAL);
    assert_null(find(&out, "InitiatorName")); /* declarations are not answered */
    /* full feature phase: only ALL/FFPO keys */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, FFP, &out, "InitialR2T=No", NULL), IERR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "SendTargets=All", NULL), IERR);
    target_with(&n, NULL);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    assert_int_equal(feed(&n, FFP, &out, "SendTargets=All", NULL), LOGIN_OK);
    assert_true(n.send_targets_seen);
    assert_string_equal(n.send_targets, "All");
    assert_int_equal(out.len, 0);
    /* SendTargets=All is for discovery sessions only */
    target_with(&n, NULL);
    n.session_type = ISCSI_SESSION_NORMAL;
    assert_int_equal(feed(&n, FFP, &out, "SendTargets=All", NULL), LOGIN_OK);
    assert_answer(&out, "SendTargets", "Reject");
    assert_false(n.send_targets_seen);
}

static void test_leading_only(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    n.leading = false;
    assert_int_equal(
        feed(&n, OP, &out, "HeaderDigest=None", "MaxRecvDataSegmentLength=65536", NULL), LOGIN_OK);
    assert_answer(&out, "HeaderDigest", "None");
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=4096", NULL), IERR);
    target_with(&n, NULL);
    n.leading = false;
    assert_int_equal(feed(&n, SEC, &out, "SessionType=Normal", NULL), IERR);
}

static void test_bad_declarations(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "SessionType=Bogus", NULL),
                     ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED);
    const char *bad[] = {"InitiatorName=", "InitiatorName=host1", "InitiatorName=iqn.a b",
                         "TargetName=iqn."};
    for (size_t i = 0; i < 4; i++) {
        target_with(&n, NULL);
        assert_int_equal(feed(&n, SEC, &out, bad[i], NULL), IERR);
    }
    char name[300]; /* "iqn.2024-01.org.example:" is 24 bytes: 224 bytes, then 223 */
    snprintf(name, sizeof(name), "InitiatorName=iqn.2024-01.org.example:%0200d", 0);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, name, NULL), IERR);
    snprintf(name, sizeof(name), "InitiatorName=iqn.2024-01.org.example:%0199d", 0);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, name, NULL), LOGIN_OK);
    assert_int_equal(strlen(n.initiator_name), 223);

    /* a value over 255 bytes: Reject for a negotiated key, failure for a declaration */
    char big[400] = "MaxBurstLength=";
    memset(big + strlen(big), '1', 300);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, big, NULL), LOGIN_OK);
    assert_answer(&out, "MaxBurstLength", "Reject");
    char alias[400] = "InitiatorAlias=";
    memset(alias + strlen(alias), 'x', 300);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, alias, NULL), IERR);
}

static void test_malformed_text(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "HeaderDigest", NULL), IERR);
    target_with(&n, NULL);
    const char unterminated[] = "InitialR2T=Yes\0ImmediateData=No";
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_handle(&n, OP, unterminated, sizeof(unterminated) - 1, &out), IERR);
    /* an empty text is fine (e.g. an empty Login Request to keep transiting) */
    target_with(&n, NULL);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_handle(&n, SEC, NULL, 0, &out), LOGIN_OK);
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
    return LOGIN_OK;
}

static void test_auth_method(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=CHAP,None", NULL), LOGIN_OK);
    assert_answer(&out, "AuthMethod", "None");
    assert_true(n.auth_none_agreed);
    /* CHAP keys without AuthMethod=CHAP are a protocol error */
    assert_int_equal(feed(&n, SEC, &out, "CHAP_A=5", NULL), IERR);

    target_with(&n, NULL);
    n.auth_required = true;
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=None", NULL), ISCSI_LOGIN_AUTH_FAILED);
    assert_answer(&out, "AuthMethod", "Reject");
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=KRB5,SRP", NULL), ISCSI_LOGIN_AUTH_FAILED);
    assert_answer(&out, "AuthMethod", "Reject");

    /* CHAP required: agreed, then CHAP_* go to the hook */
    target_with(&n, NULL);
    n.auth_required = true;
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=SRP,CHAP,None", NULL), LOGIN_OK);
    assert_answer(&out, "AuthMethod", "CHAP");
    assert_true(n.auth_chap_agreed);
    assert_false(n.auth_none_agreed);
    assert_int_equal(feed(&n, SEC, &out, "CHAP_A=5", NULL),
                     ISCSI_LOGIN_AUTH_FAILED); /* no authenticator yet */
    target_with(&n, NULL);
    n.auth_required = true;
    n.auth_key = chap_hook;
    hook_calls = 0;
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=CHAP", NULL), LOGIN_OK);
    assert_int_equal(feed(&n, SEC, &out, "CHAP_A=5", NULL), LOGIN_OK);
    assert_int_equal(hook_calls, 1);
    assert_answer(&out, "CHAP_A", "5");

    /* initiator side: the target's AuthMethod is the answer to the login code's offer */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=None", NULL), LOGIN_OK);
    assert_true(n.auth_none_agreed);
    assert_int_equal(out.len, 0);
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=Reject", NULL), ISCSI_LOGIN_AUTH_FAILED);
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, NULL);
    n.auth_required = true; /* we insist on CHAP: None is not acceptable */
    assert_int_equal(feed(&n, SEC, &out, "AuthMethod=None", NULL), ISCSI_LOGIN_AUTH_FAILED);
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
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    /* every operational proposal once, in table order; then our declaration */
    const char want[] = "HeaderDigest=CRC32C,None\0DataDigest=None\0MaxConnections=1\0"
                        "InitialR2T=No\0ImmediateData=Yes\0MaxBurstLength=1048576\0"
                        "FirstBurstLength=131072\0DefaultTime2Wait=0\0DefaultTime2Retain=0\0"
                        "MaxOutstandingR2T=4\0DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
                        "ErrorRecoveryLevel=0\0MaxRecvDataSegmentLength=131072";
    assert_int_equal(out.len, sizeof(want));
    assert_memory_equal(out.data, want, sizeof(want));
    assert_false(iscsi_neg_settled(&n));
    /* offering again adds nothing */
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_int_equal(out.len, 0);
    /* nothing offered in the security stage (the login code adds its declarations) */
    assert_int_equal(iscsi_neg_offer(&n, SEC, &out), 0);
    assert_int_equal(out.len, 0);

    /* a non-leading connection offers connection-scope keys only */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    n.leading = false;
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_int_equal(npairs(&out), 3);
    assert_non_null(find(&out, "HeaderDigest"));
    assert_non_null(find(&out, "DataDigest"));
    assert_non_null(find(&out, "MaxRecvDataSegmentLength"));

    /* a discovery session does not offer what is irrelevant there */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    n.session_type = ISCSI_SESSION_DISCOVERY;
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
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
    assert_int_equal(iscsi_neg_offer(&n, OP, &tiny), -1);
    iscsi_text_free(&tiny);
}

static enum iscsi_login_status answer_one(const char *pair)
{
    struct iscsi_params local;
    initiator_local(&local);
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    return feed(&n, OP, &out, pair, NULL);
}

static void test_initiator_checks_answers(void **state)
{
    (void)state;
    /* legal answers */
    assert_int_equal(answer_one("MaxBurstLength=65536"), LOGIN_OK);
    assert_int_equal(answer_one("DefaultTime2Wait=5"), LOGIN_OK);
    assert_int_equal(answer_one("InitialR2T=Yes"), LOGIN_OK);
    assert_int_equal(answer_one("HeaderDigest=None"), LOGIN_OK);
    assert_int_equal(answer_one("HeaderDigest=CRC32C"), LOGIN_OK);
    assert_int_equal(answer_one("MaxBurstLength=Irrelevant"), LOGIN_OK);
    assert_int_equal(answer_one("ImmediateData=No"), LOGIN_OK);
    /* Reject leaves the default: fine only if it is within our limits */
    assert_int_equal(answer_one("MaxBurstLength=Reject"), LOGIN_OK);   /* 262144 <= 1M */
    assert_int_equal(answer_one("DefaultTime2Wait=Reject"), LOGIN_OK); /* 2 >= 0 */
    assert_int_equal(answer_one("DefaultTime2Retain=Reject"), IERR);
    /* illegal answers */
    assert_int_equal(answer_one("MaxBurstLength=2097152"), IERR);
    assert_int_equal(answer_one("MaxBurstLength=100"), IERR);
    assert_int_equal(answer_one("MaxBurstLength=lots"), IERR);
    assert_int_equal(answer_one("ErrorRecoveryLevel=1"), IERR);
    assert_int_equal(answer_one("DefaultTime2Wait=3601"), IERR);
    assert_int_equal(answer_one("DataDigest=CRC32C"), IERR);
    assert_int_equal(answer_one("HeaderDigest=CRC32C,None"), IERR);
    assert_int_equal(answer_one("DataPDUInOrder=No"), IERR); /* OR */
    assert_int_equal(answer_one("InitialR2T=Maybe"), IERR);
    assert_int_equal(answer_one("MaxBurstLength=NotUnderstood"), IERR);

    /* AND with our No: the result is No without an answer, and a Yes answer is illegal */
    struct iscsi_params local;
    initiator_local(&local);
    local.immediate_data = false;
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_false(n.result.immediate_data);
    assert_int_equal(feed(&n, OP, &out, "ImmediateData=Yes", NULL), IERR);
}

static void test_settled_without_optional_answers(void **state)
{
    (void)state;
    struct iscsi_params local;
    initiator_local(&local);
    local.initial_r2t = true;     /* OR with Yes: decided */
    local.immediate_data = false; /* AND with No: decided */
    struct iscsi_neg n;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_int_equal(feed(&n, OP, &out, "HeaderDigest=None", "DataDigest=None", "MaxConnections=1",
                          "MaxBurstLength=262144", "FirstBurstLength=65536", "DefaultTime2Wait=2",
                          "DefaultTime2Retain=0", "MaxOutstandingR2T=1", "DataPDUInOrder=Yes",
                          "DataSequenceInOrder=Yes", "ErrorRecoveryLevel=0",
                          "MaxRecvDataSegmentLength=8192", NULL),
                     LOGIN_OK);
    assert_true(iscsi_neg_settled(&n));
    assert_true(n.result.initial_r2t);
    assert_false(n.result.immediate_data);
}

/* ---- ErrorRecoveryLevel (RFC 7143 §13.20): Minimum, 0..2, leading connection only ---- */

static uint32_t erl_local;
static void local_erl(struct iscsi_params *p)
{
    p->erl = erl_local;
}

/* The target's answer to ErrorRecoveryLevel=`offer` when configured with `local`. */
static const char *erl_answer(uint32_t local, const char *offer)
{
    char pair[64];
    snprintf(pair, sizeof(pair), "ErrorRecoveryLevel=%s", offer);
    erl_local = local;
    return ask(local_erl, pair);
}

static void test_erl_negotiation(void **state)
{
    (void)state;
    /* Whatever a build performs, the table allows 0..2 and never more */
    _Static_assert(ISCSI_ERL_IMPLEMENTED <= 2, "RFC 7143 defines levels 0, 1 and 2");
    /* the result is the smaller of the two levels, whichever side is lower */
    for (uint32_t mine = 0; mine <= 2; mine++)
        for (uint32_t theirs = 0; theirs <= 2; theirs++) {
            char offer[4], want[4];
            snprintf(offer, sizeof(offer), "%u", theirs);
            snprintf(want, sizeof(want), "%u", mine < theirs ? mine : theirs);
            assert_string_equal(erl_answer(mine, offer), want);
        }
    /* a target at ERL 0 answers 0 to an initiator asking for 2, and holds to it */
    struct iscsi_neg n;
    erl_local = 0;
    target_with(&n, local_erl);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=2", NULL), LOGIN_OK);
    assert_answer(&out, "ErrorRecoveryLevel", "0");
    struct iscsi_params r;
    iscsi_neg_result(&n, &r);
    assert_int_equal(r.erl, 0);
    erl_local = 2;
    target_with(&n, local_erl);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=0x1", NULL), LOGIN_OK);
    assert_answer(&out, "ErrorRecoveryLevel", "1"); /* §6.1 hex, answered in decimal */
    assert_int_equal(n.result.erl, 1);

    /* §6.2.2: a value outside 0..2, or not a number, is answered Reject and the level keeps
     * its default, 0 (§13.20), even on a target that could do 2 */
    const char *bad[] = {"3", "4294967295", "4294967296", "-1", "1.0", "one", "", "0x", " 1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_string_equal(erl_answer(2, bad[i]), "Reject");
        erl_local = 2;
        target_with(&n, local_erl);
        char pair[64];
        snprintf(pair, sizeof(pair), "ErrorRecoveryLevel=%s", bad[i]);
        assert_int_equal(feed(&n, OP, &out, pair, NULL), LOGIN_OK);
        assert_int_equal(n.result.erl, 0);
    }
    /* "Reject"/"Irrelevant"/"NotUnderstood" are answers, never offers: the login fails */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=Reject", NULL), IERR);

    /* where it may appear: operational stage of the leading connection, once (§6.2, §13.20
     * "LO", §6.3: not in the security stage, not renegotiated in full feature phase) */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, SEC, &out, "ErrorRecoveryLevel=1", NULL), IERR);
    target_with(&n, NULL);
    n.leading = false;
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=0", NULL), IERR);
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=0", NULL), LOGIN_OK);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=0", NULL), IERR); /* twice */
    target_with(&n, NULL);
    iscsi_neg_restart(&n);
    assert_int_equal(feed(&n, FFP, &out, "ErrorRecoveryLevel=0", NULL), IERR);

    /* the initiator: it offers its level, and only an answer at or below it is legal */
    struct iscsi_params il;
    initiator_local(&il);
    il.erl = 2;
    const struct {
        const char *answer;
        enum iscsi_login_status st;
        uint32_t result;
    } answers[] = {
        {"ErrorRecoveryLevel=2", LOGIN_OK, 2}, {"ErrorRecoveryLevel=1", LOGIN_OK, 1},
        {"ErrorRecoveryLevel=0", LOGIN_OK, 0}, {"ErrorRecoveryLevel=3", IERR, 0},
        {"ErrorRecoveryLevel=x", IERR, 0},     {"ErrorRecoveryLevel=Reject", LOGIN_OK, 0},
    };
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &il);
        iscsi_text_reset(&out);
        assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
        assert_answer(&out, "ErrorRecoveryLevel", "2");
        assert_int_equal(feed(&n, OP, &out, answers[i].answer, NULL), answers[i].st);
        if (answers[i].st == LOGIN_OK)
            assert_int_equal(n.result.erl, answers[i].result);
    }
    /* an initiator at 0 cannot be raised by the target (the same holds for any level) */
    il.erl = 0;
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &il);
    iscsi_text_reset(&out);
    assert_int_equal(iscsi_neg_offer(&n, OP, &out), 0);
    assert_int_equal(feed(&n, OP, &out, "ErrorRecoveryLevel=2", NULL), IERR);
    /* a discovery session negotiates it too (it is not "Irrelevant" there) */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "SessionType=Discovery", "ErrorRecoveryLevel=1", NULL),
                     LOGIN_OK);
    assert_answer(&out, "ErrorRecoveryLevel", "0");
}

/* ---- a whole login, in memory ---- */

static void exchange(struct iscsi_neg *from, struct iscsi_neg *to, enum iscsi_stage stage,
                     struct iscsi_text *msg, struct iscsi_text *reply)
{
    (void)from;
    iscsi_text_reset(reply);
    assert_int_equal(iscsi_neg_handle(to, stage, msg->data, msg->len, reply), LOGIN_OK);
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
    assert_int_equal(iscsi_neg_offer(&ini, SEC, &req), 0);
    exchange(&ini, &tgt, SEC, &req, &rsp);
    assert_true(tgt.auth_none_agreed);
    assert_string_equal(tgt.initiator_name, "iqn.2024-01.org.example:ini");
    assert_int_equal(tgt.session_type, ISCSI_SESSION_NORMAL);
    iscsi_text_add(&rsp, "TargetPortalGroupTag", "1");
    exchange(&tgt, &ini, SEC, &rsp, &req);
    assert_true(ini.auth_none_agreed);
    assert_int_equal(req.len, 0);

    /* operational stage */
    iscsi_text_reset(&req);
    assert_int_equal(iscsi_neg_offer(&ini, OP, &req), 0);
    exchange(&ini, &tgt, OP, &req, &rsp);
    assert_int_equal(iscsi_neg_offer(&tgt, OP, &rsp), 0);
    assert_answer(&rsp, "MaxRecvDataSegmentLength", "65536");
    exchange(&tgt, &ini, OP, &rsp, &req);
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

/* §13.14: FirstBurstLength MUST NOT exceed MaxBurstLength, and the answer is what the target
 * enforces: the answer itself is clamped, whichever key comes first in the text (issue 11: a
 * 64 KiB FirstBurstLength answered as offered, then enforced as 16 KiB). */
static void test_first_burst_clamped(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=16384", "FirstBurstLength=65536", NULL),
                     LOGIN_OK);
    assert_answer(&out, "FirstBurstLength", "16384");
    assert_answer(&out, "MaxBurstLength", "16384");
    assert_int_equal(n.result.first_burst, 16384);
    struct iscsi_params r;
    iscsi_neg_result(&n, &r);
    assert_int_equal(r.max_burst, 16384);
    assert_int_equal(r.first_burst, 16384);

    target_with(&n, NULL); /* FirstBurstLength before MaxBurstLength in the text */
    assert_int_equal(feed(&n, OP, &out, "FirstBurstLength=65536", "MaxBurstLength=16384", NULL),
                     LOGIN_OK);
    assert_answer(&out, "FirstBurstLength", "16384");
    assert_int_equal(n.result.first_burst, 16384);

    target_with(&n, NULL); /* not negotiated: bounded by the RFC default MaxBurstLength */
    assert_int_equal(feed(&n, OP, &out, "FirstBurstLength=1048576", NULL), LOGIN_OK);
    assert_answer(&out, "FirstBurstLength", "65536"); /* ours (the RFC default) is lower */

    /* A MaxBurstLength below the FirstBurstLength agreed in an earlier text cannot be answered
     * without breaking the earlier answer: the login fails. */
    target_with(&n, NULL);
    assert_int_equal(feed(&n, OP, &out, "FirstBurstLength=65536", NULL), LOGIN_OK);
    assert_answer(&out, "FirstBurstLength", "65536");
    assert_int_equal(feed(&n, OP, &out, "MaxBurstLength=16384", NULL), IERR);
}

static void test_ffp_restart(void **state)
{
    (void)state;
    struct iscsi_neg n;
    target_with(&n, local_no);
    assert_int_equal(feed(&n, OP, &out, "MaxRecvDataSegmentLength=65536", "InitialR2T=No", NULL),
                     LOGIN_OK);
    iscsi_neg_restart(&n);
    assert_int_equal(feed(&n, FFP, &out, "MaxRecvDataSegmentLength=16384", NULL), LOGIN_OK);
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
        cmocka_unit_test(test_bool_results),
        cmocka_unit_test(test_numeric_results),
        cmocka_unit_test(test_reject_bad_values),
        cmocka_unit_test(test_mrdsl_declarative),
        cmocka_unit_test(test_list_selection),
        cmocka_unit_test(test_not_understood),
        cmocka_unit_test(test_irrelevant_in_discovery),
        cmocka_unit_test(test_obsolete_markers),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_session_type_fixed),
        cmocka_unit_test(test_wrong_direction),
        cmocka_unit_test(test_stage_rules),
        cmocka_unit_test(test_leading_only),
        cmocka_unit_test(test_bad_declarations),
        cmocka_unit_test(test_malformed_text),
        cmocka_unit_test(test_auth_method),
        cmocka_unit_test(test_initiator_offer),
        cmocka_unit_test(test_initiator_checks_answers),
        cmocka_unit_test(test_settled_without_optional_answers),
        cmocka_unit_test(test_erl_negotiation),
        cmocka_unit_test(test_full_negotiation),
        cmocka_unit_test(test_first_burst_clamped),
        cmocka_unit_test(test_ffp_restart),
        cmocka_unit_test(test_text_cap),
        cmocka_unit_test(test_iter_edges),
        cmocka_unit_test(test_opcode_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
