/* A small adversarial iSCSI target for the initiator's tests: a loopback listener and a
 * script run on a thread of its own with blocking sockets, which logs connections in as told
 * and then answers (or does not) PDU by PDU, as a hostile or broken target would. The test's
 * thread drives the initiator library on its reactor meanwhile (ft_run_until). CRC32C digests
 * as each struct ft_conn says (sent right or wrong, never checked). */
#ifndef LR_TESTS_UNIT_FAKE_TARGET_H
#define LR_TESTS_UNIT_FAKE_TARGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/pdu.h"
#include "reactor/reactor.h"

struct ft;
typedef void (*ft_script_fn)(struct ft *f);

struct ft {
    int lfd;
    uint16_t port;
    pthread_t th;
    ft_script_fn script;
    void *arg;
    atomic_int logins;  /* logins completed */
    atomic_int stage;   /* what the script has reached (the script's own numbering) */
    atomic_bool failed; /* the script saw something it did not expect */
    char why[160];      /* ... what */
    uint16_t next_tsih;
};

/* One connection in full feature phase. */
struct ft_conn {
    int fd;
    uint8_t isid[6];
    uint16_t tsih, cid;
    uint16_t asked_tsih; /* the TSIH of the first Login Request: 0 for a new session */
    uint32_t statsn;     /* the next StatSN */
    uint32_t expcmdsn, maxcmdsn;
    uint32_t login_cmdsn;
    bool hd, dd;         /* CRC32C header / data digests on this connection, both ways */
    bool bad_hd, bad_dd; /* the next PDU sent carries a wrong header / data digest */
};

struct ft_pdu {
    uint8_t h[ISCSI_BHS_LEN];
    uint8_t data[65536];
    uint32_t dlen;
};

int ft_start(struct ft *f, ft_script_fn script, void *arg);
/* Waits for the script to end (the listener is closed first). */
void ft_stop(struct ft *f);
/* Inside a script: note a failure (the test checks f->failed). */
void ft_fail(struct ft *f, const char *why);

/* A connection, within ms; -1 if none. */
int ft_accept(struct ft *f, int ms);
/* One PDU within ms: 0, -1 on close, timeout or an oversize data segment. */
int ft_recv(int fd, struct ft_pdu *p, int ms);
int ft_send(int fd, const uint8_t *h, const void *data, uint32_t dlen);
/* The same on a connection in full feature phase: digests as c says (not checked on receipt) */
int ft_recv_c(struct ft_conn *c, struct ft_pdu *p, int ms);
int ft_send_c(struct ft_conn *c, const uint8_t *h, const void *data, uint32_t dlen);
/* A whole login without authentication on fd, the operational answer being op_keys
 * (key=value\0..., op_len bytes; a non-leading login gets connection keys only); window:
 * MaxCmdSN - ExpCmdSN + 1. 0 once in full feature phase, c filled in. */
int ft_login(struct ft *f, int fd, struct ft_conn *c, const char *op_keys, uint32_t op_len,
             uint32_t window);
/* A scripted login: the k-th Login Request on fd is answered with steps[k] (the last one
 * again past n): its flags (T, C, CSG, NSG) and text, status 0. Returns once the initiator
 * closes the connection or a step reaches full feature phase: the requests seen. */
struct ft_step {
    uint8_t flags;
    const char *text;
    uint32_t len;
};
int ft_login_steps(struct ft *f, int fd, const struct ft_step *steps, int n);
/* Response headers with the connection's StatSN (taken), ExpCmdSN and MaxCmdSN. */
void ft_rsp(struct ft_conn *c, uint8_t *h, enum iscsi_opcode op, uint8_t flags, uint32_t itt);
/* A READ's data and GOOD status in one Data-In (phase collapse), its EDTL long. */
int ft_read_done(struct ft_conn *c, const struct ft_pdu *cmd, uint8_t fill);
/* Async Message event ev with Parameter3 p3 (§11.9.1). */
int ft_async(struct ft_conn *c, uint8_t ev, uint16_t p3);
/* The Logout Response (response 0) to req. */
int ft_logout_rsp(struct ft_conn *c, const struct ft_pdu *req);

/* The test's side: poll the reactor until done(arg) or ms passed; true if done. */
bool ft_run_until(struct reactor *r, bool (*done)(void *arg), void *arg, int ms);

#endif
