/* libFuzzer harness for the metrics endpoint's HTTP request handling (src/daemon/metrics.c):
 * the input is what one client sends on one TCP connection to the endpoint of an in-process
 * daemon (fuzz_daemon.h), followed by the end of its writes. The reading loop, the head
 * framing (CRLF CRLF or LF LF, 4 KiB cap, NUL bytes), the request-line parse and the answer
 * all run as they do for a scraper; a valid GET /metrics takes stats.c's exposition too.
 *
 * Checked beyond "no crash": the endpoint answers at most once and closes, an answer is a
 * status line "HTTP/1.1 NNN ..." whose Content-Length is the length of the body that follows,
 * and a head with its empty line always gets one. */
#include "fuzz_daemon.h"

#define MAX_INPUT (16u * 1024)

static void check_answer(const uint8_t *in, size_t len, const char *out, size_t olen)
{
    bool complete = false;
    for (size_t i = 0; i + 1 < len && i < 4095 && !complete; i++)
        complete = (in[i] == '\n' && in[i + 1] == '\n') ||
                   (i + 3 < len && i + 3 < 4095 && memcmp(in + i, "\r\n\r\n", 4) == 0);
    if (olen == 0) {
        /* nothing to answer only when no whole head arrived within the cap */
        if (complete) {
            fprintf(stderr, "fuzz_http: a complete request head got no answer\n");
            abort();
        }
        return;
    }
    if (olen < 13 || memcmp(out, "HTTP/1.1 ", 9) != 0 || out[9] < '1' || out[9] > '5' ||
        out[10] < '0' || out[10] > '9' || out[11] < '0' || out[11] > '9' || out[12] != ' ') {
        fprintf(stderr, "fuzz_http: not a status line: %.60s\n", out);
        abort();
    }
    const char *body = strstr(out, "\r\n\r\n");
    const char *cl = strstr(out, "Content-Length: ");
    if (!body || !cl || cl > body) {
        fprintf(stderr, "fuzz_http: answer without a head or Content-Length: %.200s\n", out);
        abort();
    }
    body += 4;
    unsigned long want = strtoul(cl + 16, NULL, 10);
    if (want != olen - (size_t)(body - out)) {
        fprintf(stderr, "fuzz_http: Content-Length %lu, body %zu bytes\n", want,
                olen - (size_t)(body - out));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fd_daemon_up();
    if (size > MAX_INPUT)
        return 0;
    int s = fd_connect_tcp(FD.metrics_port);
    if (s < 0) {
        fprintf(stderr, "fuzz_http: cannot connect to the endpoint: %s\n", strerror(errno));
        abort();
    }
    char *out = NULL;
    size_t olen = fd_exchange(s, data, size, &out);
    close(s);
    check_answer(data, size, out, olen);
    free(out);
    return 0;
}
