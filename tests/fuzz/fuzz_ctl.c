/* libFuzzer harness for the control protocol (src/daemon/ctl.c, ctl_cmds.c, ctl_targets.c,
 * ctl_access.c, ctl_reload.c): the input is what one linerate-ctl client sends on the control
 * socket of an in-process daemon (fuzz_daemon.h), one JSON-RPC request per line, followed by
 * the end of its writes. The daemon reads, frames, parses and serves every line as it does for
 * linerate-ctl, changing its targets, LUNs, portals and allow lists; that state carries from
 * one input to the next (a restart per input would cost more than the requests).
 *
 * Left out (the line is not sent): requests that would write outside the scratch directory or
 * take the machine's memory, whatever a fuzzer spells: `save` (its "file" is any path), LUN
 * specs naming a file store ("file:" creates and extends files) or prealloc (memory up front).
 * The harness decides on the decoded JSON, so escapes do not get past it. The requests that
 * listen (add_portal, add_target) are sent: the daemon runs in a network namespace of its own.
 *
 * Checked beyond "no crash": every request line gets exactly one response line, in order, and
 * each is a JSON-RPC 2.0 response object with a result or an error (with an integer code and a
 * message) and the id of its request. */
#include <jansson.h>

#include "fuzz_daemon.h"

#define MAX_INPUT (64u * 1024)

/* Whether any string in v (keys and values, at any depth) contains what. */
static bool has_string(json_t *v, const char *what)
{
    if (json_is_string(v))
        return strstr(json_string_value(v), what) != NULL;
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (has_string(e, what)) return true;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach(v, k, e) if (strstr(k, what) || has_string(e, what)) return true;
    }
    return false;
}

static bool line_allowed(const char *line, size_t len)
{
    json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    if (!req)
        return true; /* answered as a parse error */
    bool ok = true;
    const char *m = json_string_value(json_object_get(req, "method"));
    if (m && strcmp(m, "save") == 0)
        ok = false;
    if (has_string(req, "file:") || has_string(req, "prealloc"))
        ok = false;
    json_decref(req);
    return ok;
}

/* One response per request line, in order, each well formed. */
static void check_answers(char *const *ids, unsigned nreq, char *out, size_t olen)
{
    unsigned got = 0;
    char *p = out;
    while (p < out + olen) {
        char *nl = memchr(p, '\n', (size_t)(out + olen - p));
        if (!nl) {
            fprintf(stderr, "fuzz_ctl: response line without its newline: %.200s\n", p);
            abort();
        }
        json_error_t jerr;
        json_t *r = json_loadb(p, (size_t)(nl - p), 0, &jerr);
        const char *ver = r ? json_string_value(json_object_get(r, "jsonrpc")) : NULL;
        json_t *res = r ? json_object_get(r, "result") : NULL;
        json_t *err = r ? json_object_get(r, "error") : NULL;
        if (!r || !ver || strcmp(ver, "2.0") != 0 || !!res == !!err ||
            (err && (!json_is_integer(json_object_get(err, "code")) ||
                     !json_is_string(json_object_get(err, "message"))))) {
            fprintf(stderr, "fuzz_ctl: not a JSON-RPC response: %.*s\n", (int)(nl - p), p);
            abort();
        }
        if (got < nreq && ids[got]) {
            char *id = json_dumps(json_object_get(r, "id"), JSON_ENCODE_ANY | JSON_COMPACT);
            if (!id || strcmp(id, ids[got]) != 0) {
                fprintf(stderr, "fuzz_ctl: response %u has id %s, its request %s\n", got,
                        id ? id : "(none)", ids[got]);
                abort();
            }
            free(id);
        }
        json_decref(r);
        got++;
        p = nl + 1;
    }
    if (got != nreq) {
        fprintf(stderr, "fuzz_ctl: %u request lines, %u responses\n", nreq, got);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fd_daemon_up();
    if (size > MAX_INPUT)
        return 0;
    /* The lines that go out, and the id each response must carry when the request is a valid
     * object with a string or integer id (NULL: not checked). Lines as the daemon splits them
     * (ctl.c client_serve_lines): at '\n', one '\r' before it dropped, empty ones skipped; a
     * NUL byte ends nothing. */
    char *send_buf = malloc(size + 1);
    char **ids = calloc(size + 1, sizeof(*ids));
    if (!send_buf || !ids)
        abort();
    size_t sl = 0;
    unsigned nreq = 0;
    for (size_t start = 0; start < size;) {
        const uint8_t *nl = memchr(data + start, '\n', size - start);
        size_t end = nl ? (size_t)(nl - data) : size;
        size_t len = end - start;
        const char *line = (const char *)data + start;
        size_t ll = len && line[len - 1] == '\r' ? len - 1 : len;
        if (ll && line_allowed(line, ll)) {
            memcpy(send_buf + sl, line, len);
            sl += len;
            send_buf[sl++] = '\n';
            json_t *req = json_loadb(line, ll, JSON_REJECT_DUPLICATES, NULL);
            json_t *id = req ? json_object_get(req, "id") : NULL;
            if (id && (json_is_string(id) || json_is_integer(id)) &&
                json_is_string(json_object_get(req, "method")))
                ids[nreq] = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
            json_decref(req);
            nreq++;
        }
        start = end + 1;
    }
    int s = fd_connect_unix(FD.ctl_path);
    if (s < 0) {
        fprintf(stderr, "fuzz_ctl: cannot connect to the control socket: %s\n", strerror(errno));
        abort();
    }
    char *out = NULL;
    size_t olen = fd_exchange(s, (const uint8_t *)send_buf, sl, &out);
    close(s);
    check_answers(ids, nreq, out, olen);
    /* set_log_level debug would flood the fuzzer's output from here on */
    log_set_level(getenv("FUZZ_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERROR);
    for (unsigned i = 0; i < nreq; i++)
        free(ids[i]);
    free(ids);
    free(out);
    free(send_buf);
    return 0;
}
