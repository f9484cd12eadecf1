/* libFuzzer harness for the key negotiation engine: the input is a peer's text, fed to a
 * target-side negotiation in the security and then the operational stage, and to an
 * initiator-side one that has made its offers (so answer checking is fuzzed too). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "iscsi/keys.h"
#include "util/log.h"

static enum iscsi_login_status accept_chap(void *ctx, const char *key, const char *value,
                                           struct iscsi_text *out)
{
    (void)ctx;
    (void)value;
    iscsi_text_add(out, key, "x");
    return ISCSI_LOGIN_OK;
}

/* The first byte picks options, the rest is the text (split once at a 0xff byte into two
 * PDUs' worth, so that cross-PDU duplicate tracking is exercised). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        log_set_level(LOG_LVL_ERROR);
    if (size < 1 || size > ISCSI_TEXT_MAX)
        return 0;
    uint8_t opt = data[0];
    const char *text = (const char *)data + 1;
    uint32_t len = (uint32_t)(size - 1);
    const char *split = memchr(text, 0xff, len);
    uint32_t len1 = split ? (uint32_t)(split - text) : len;
    const char *text2 = split ? split + 1 : text + len;
    uint32_t len2 = split ? len - len1 - 1 : 0;

    struct iscsi_params local;
    iscsi_params_default(&local);
    local.header_digest = opt & 1;
    local.data_digest = opt & 2;
    local.initial_r2t = opt & 4;
    local.max_recv_dsl = 262144;

    struct iscsi_text out;
    iscsi_text_init(&out);
    struct iscsi_neg n;

    iscsi_neg_init(&n, ISCSI_SIDE_TARGET, &local);
    n.leading = !(opt & 8);
    n.auth_required = opt & 16;
    n.auth_key = (opt & 32) ? accept_chap : NULL;
    if (iscsi_neg_handle(&n, ISCSI_STAGE_SECURITY, text, len1, &out) == ISCSI_LOGIN_OK) {
        iscsi_text_reset(&out);
        if (iscsi_neg_handle(&n, ISCSI_STAGE_OPERATIONAL, text2, len2, &out) == ISCSI_LOGIN_OK)
            iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out);
    }
    iscsi_text_reset(&out);
    iscsi_neg_init(&n, ISCSI_SIDE_TARGET, &local);
    iscsi_neg_handle(&n, ISCSI_STAGE_OPERATIONAL, text, len, &out);
    iscsi_neg_restart(&n);
    iscsi_text_reset(&out);
    iscsi_neg_handle(&n, ISCSI_STAGE_FULL_FEATURE, text, len, &out);

    /* initiator side: the text is the target's answer to our offers */
    iscsi_neg_init(&n, ISCSI_SIDE_INITIATOR, &local);
    n.session_type = (opt & 64) ? ISCSI_SESSION_DISCOVERY : ISCSI_SESSION_NORMAL;
    iscsi_text_reset(&out);
    iscsi_neg_offer(&n, ISCSI_STAGE_OPERATIONAL, &out);
    iscsi_text_reset(&out);
    iscsi_neg_handle(&n, (opt & 128) ? ISCSI_STAGE_SECURITY : ISCSI_STAGE_OPERATIONAL, text, len,
                     &out);
    struct iscsi_params r;
    iscsi_neg_result(&n, &r);
    iscsi_neg_settled(&n);

    iscsi_text_free(&out);
    return 0;
}
