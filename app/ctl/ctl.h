/* linerate-ctl, the command-line client of the daemon's control socket: the verbs an operator
 * types turned into JSON-RPC requests (request.c), one round trip over the Unix socket
 * (client.c), and the answers printed as tables or as JSON (print.c). */
#ifndef LR_CTL_H
#define LR_CTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* Exit codes of linerate-ctl. */
enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAILED = 1,   /* the daemon answered with an error */
    CTL_EXIT_USAGE = 2,    /* bad command line */
    CTL_EXIT_NO_DAEMON = 3 /* cannot connect, or no valid answer */
};

/* A request built from the command line: the method and its params (owned). `kind` names the
 * printer for the answer. */
struct ctl_req {
    const char *method;
    json_t *params;
    const char *kind;
};

/* Turn VERB ... into a request. Returns 0, or -1 with a message in err. */
int ctl_req_from_argv(int argc, char **argv, struct ctl_req *req, char *err, size_t errlen);

/* Send one request on the socket at `path` and read the answer (a JSON-RPC response object,
 * owned by the caller). Waits at most timeout_s for it. Returns 0, or -1 with a reason. */
int ctl_call(const char *path, const char *method, json_t *params, unsigned timeout_s,
             json_t **response, char *err, size_t errlen);

/* linerate-ctl stats ARGS... (argv[0] is "stats"): two or more `stats` snapshots turned into
 * per-LUN and per-session IOPS, MB/s, p50/p99 over each interval. Returns an exit code. */
int ctl_stats_main(const char *path, bool as_json, unsigned wait_s, int argc, char **argv);

/* Print a successful result of the given kind as a human-readable table. */
void ctl_print_result(FILE *out, const char *kind, json_t *result);

#endif
