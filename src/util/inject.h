/* Fault injection, a testing aid shared by linerate-bench and linerate-target: the `--inject
 * LIST` syntax, its validation and its description in reports. What each fault does is up to
 * the end that applies it. LIST is comma-separated NAME=VALUE items, each NAME at most once:
 *
 *   kill-connection=SECONDS  cut one connection that often (0.01..3600, fractions allowed)
 *   digest-error=RATE        corrupt that fraction of the data digests sent (0 <= RATE < 1)
 *   drop-pdu=RATE            leave that fraction of the PDUs unsent (0 <= RATE < 1)
 *   store-delay=MS           the target's file and rbd LUNs start a request MS ms per MiB it
 *                            moves late (1..10000): aborts and resets meet writes in the store
 *
 * e.g. "kill-connection=1,digest-error=0.0001". */
#ifndef LR_UTIL_INJECT_H
#define LR_UTIL_INJECT_H

#include <stdbool.h>
#include <stddef.h>

#define INJECT_KILL_MIN_S 0.01
#define INJECT_KILL_MAX_S 3600.0

struct inject_spec {
    double kill_conn_s;    /* 0: connections are never cut */
    double digest_error;   /* fraction of data digests sent corrupted */
    double drop_pdu;       /* fraction of PDUs not sent */
    double store_delay_ms; /* target only: ms per MiB file and rbd requests start later */
};

/* Parse LIST into *out (zeroed first). Returns 0, or -1 with a reason naming the item in err. */
int inject_parse(const char *list, struct inject_spec *out, char *err, size_t errlen);

/* Anything to inject at all. */
bool inject_any(const struct inject_spec *s);

/* The faults set, in LIST syntax ("kill-connection=1.5,digest-error=0.0001"; "none"). */
void inject_format(const struct inject_spec *s, char *buf, size_t len);

/* Whether this build can apply every fault asked for (a fault it could not apply is refused
 * rather than silently ignored): all of them now, kill-connection by the ends, digest-error
 * and drop-pdu by the wire engine's transmit path. Returns 0, or -1 with a reason in err. */
int inject_check_available(const struct inject_spec *s, char *err, size_t errlen);

#endif
