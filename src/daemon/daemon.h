/* Private to src/daemon: the running daemon's state, shared by main.c (start, serve, stop),
 * the listeners (listen.c) and the control thread (ctl*.c), which reads it and changes
 * targets and LUNs while the reactors serve.
 *
 * Layers (issue 28): each file calls only files named after it, never back up:
 *   main.c (start, signals, stop) > ctl.c (the control socket; metrics.c) > ctl_cmds.c (the
 *   method table) > ctl_save.c > ctl_reload.c > ctl_hosts.c, ctl_access.c, ctl_show.c >
 * ctl_targets.c > ctl_luns.c (LUNs added and removed) > listen.c (the listeners), notify.c,
 * stats.c, ctl_params.c, build.c and the configuration files > this header (struct daemon).
 */
#ifndef LR_TARGET_DAEMON_H
#define LR_TARGET_DAEMON_H

#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "reactor/reactor.h"
#include "daemon/config.h"

struct ctl_server;
struct metrics_server;

struct daemon;

struct listener {
    struct reactor_fd h;
    int fd;
    struct iscsi_portal_addr portal;
    struct daemon *d;
    struct listener *next; /* in d->extra_listeners */
};

/* A function run on a reactor's thread while the main thread waits for it. */
struct sync_call {
    struct daemon *d;
    struct reactor *r;
    void (*fn)(struct daemon *d, struct reactor *r);
    sem_t done;
    struct reactor_msg msg;
};

struct daemon {
    struct target_config cfg;
    /* The --config file as the daemon last read or wrote it (start, reload, save into it):
     * what runs and is not in it was changed with linerate-ctl, which a reload does not drop
     * without force (ctl_reload.c). Control thread only, after start. */
    struct target_config file_cfg;
    struct target_built built;
    struct iscsi_server srv;
    bool srv_ready;
    struct reactor **reactors;
    pthread_t *threads;
    unsigned nreactors;
    unsigned nthreads_started;
    struct listener *listeners;
    unsigned nlisteners;
    /* Listeners opened at run time for a target or portal added by linerate-ctl: linked (and
     * watched) on reactor 0, freed at exit. A listener whose portal no target has any more is
     * closed (fd -1) but kept, initial ones too: connections point at its portal. */
    struct listener *extra_listeners;
    /* Accept throttling when out of descriptors; touched only on reactor 0. */
    struct reactor_timer accept_pause;
    bool accept_paused;
    bool accept_warned;
    unsigned next_rr; /* tie-break among equally loaded reactors */
    /* The control socket (ctl.c); NULL when there is none. */
    struct ctl_server *ctl;
    /* Set by ctl_stop (main thread) once stopping has begun, read by the control thread: a
     * request's long waits give up. */
    atomic_bool ctl_stopping;
    /* LUNs removed by linerate-ctl that commands still held when it stopped waiting: freed
     * by the control thread once their last user lets go, or at exit. Control thread only
     * (and the main thread after the control thread stopped). */
    struct ctl_zombie *zombies;
    /* Targets removed at run time: their node and SCSI target (LUNs gone already) stay until
     * exit, as sessions that were ending may still point at them. */
    struct ctl_retired *retired;
};

/* --- listen.c: the listening sockets --- */
/* At start, before any thread runs: open the configuration's listeners. 0, or -1 (printed). */
int daemon_open_listeners(struct daemon *d);
/* At start, before reactor 0 runs: watch them on it. 0, or -1 (logged). */
int daemon_watch_listeners(struct daemon *d);
/* On reactor 0's thread at shutdown: stop accepting and close every listener. */
void daemon_close_listeners(struct daemon *d, struct reactor *r);
/* At exit, once no reactor runs: free the listeners. */
void daemon_free_listeners(struct daemon *d);
/* For the control thread: make sure the daemon listens on portal p (opening and watching a new
 * socket on reactor 0 if no listener has its address). 0, or -1 with a reason in err. */
int daemon_listen_portal(struct daemon *d, const struct target_portal *p, char *err, size_t errlen);
/* Stop listening on the address `text` (a portal no target has any more): the socket closes on
 * reactor 0; connections accepted through it carry on. 0 (also when not listening), or
 * -errno. */
int daemon_unlisten_portal(struct daemon *d, const char *text);

/* --- notify.c --- */
/* READY=1 with a STATUS= line saying what is served (and `note`, NULL for none) to the
 * service manager, if NOTIFY_SOCKET names one: at start, and when a reload ends. */
void daemon_notify_ready(const struct daemon *d, const char *note);

/* Whether ctl_stop has begun: long waits in a request give up. */
static inline bool ctl_stopping(const struct daemon *d)
{
    return atomic_load(&d->ctl_stopping);
}

/* --- ctl.c: the control socket (docs/ctl-protocol.md), on a thread of its own --- */
/* Create cfg.ctl_socket (mode 0600), before any other thread runs. Returns 0 with d->ctl set,
 * or NULL when there is to be none ("none", or the default path could not be used: a
 * warning); -1 when a path that was asked for could not be used (the reason printed). */
int ctl_open(struct daemon *d);
/* Start serving it (after the reactors run). 0 or -1. */
int ctl_start(struct daemon *d);
/* Stop serving, remove the socket file, free the server; d->ctl becomes NULL. Nothing if
 * there is none. Waits for the request being served (its waits end early on stop). */
void ctl_stop(struct daemon *d);

/* --- stats.c: the metrics, read on the control thread --- */
/* What `stats` and the endpoint answer in a build without counters (meson -Dmetrics=false,
 * util/iostats.h: IOSTATS_ENABLED), rather than zeros that look like an idle target. */
#define STATS_NONE_MSG                                                                             \
    "this linerate-target was built with -Dmetrics=false: it has no I/O counters (rebuild "        \
    "with -Dmetrics=true for stats and the metrics endpoint)"
/* The `stats` method's result (docs/ctl-protocol.md); NULL when out of memory. */
json_t *stats_json(struct daemon *d);
/* The Prometheus text exposition of the same, malloc'd, its length in *len; NULL: no memory. */
char *stats_prometheus(struct daemon *d, size_t *len);

/* --- metrics.c: the Prometheus endpoint, on the control thread's event loop r --- */
/* Listen on cfg.metrics and watch it on r (before r runs). NULL (reason printed) on failure. */
struct metrics_server *metrics_open(struct daemon *d, struct reactor *r);
/* On r's thread (or before it ran): close every client and the listener. */
void metrics_close(struct metrics_server *s);

/* --- ctl_cmds.c: the requests --- */
/* Serve one request line (JSON-RPC 2.0, without its newline): the response line, malloc'd,
 * without newline; NULL only when out of memory. */
char *ctl_request(struct daemon *d, const char *line, size_t len);
/* The answer to a request that could not be read (too long, ...): a JSON-RPC error object
 * with a null id, malloc'd; NULL when out of memory. */
char *ctl_error_line(int code, const char *message);

/* --- ctl_luns.c: LUNs added and removed at run time --- */
/* Add LUN l to target number t (d->built / d->cfg index) on the store bs, or on one opened
 * now (bs NULL); the initiators get REPORTED LUNS DATA HAS CHANGED and l (its bs_spec taken)
 * joins the running configuration. -1 with "ORIGIN: reason" in err (bs closed). */
int ctl_lun_add(struct daemon *d, unsigned t, struct target_lun_conf *l, struct bs *bs, char *err,
                size_t errlen);
/* Remove LUN `lun` of target number t: detach, wait (at most timeout_s) for the commands
 * holding it, close its store, or leave that to ctl_reap_zombies. -1 if there is no such LUN. */
struct ctl_removed {
    uint64_t waited_ms;
    long left; /* commands still holding it */
    bool closed;
};
int ctl_lun_remove(struct daemon *d, unsigned t, uint64_t lun, unsigned timeout_s,
                   struct ctl_removed *out);
/* Free the removed LUNs whose last user let go; all of them with `all` (at exit, once no
 * reactor runs). */
void ctl_reap_zombies(struct daemon *d, bool all);

/* --- ctl_alua.c: ALUA states at run time --- */
/* Reload: take the file's ALUA states for running target t (f: the file's section) where its
 * groups are the same, and bring the LUNs to them; a line in applied when any changed. */
void ctl_alua_reload(struct daemon *d, unsigned t, const struct target_node_conf *f,
                     json_t *applied);

/* --- ctl_targets.c: whole targets at run time --- */
/* Serve target c (copied): listeners for its portals, its LUNs, its node in the server's
 * table. -1 with a reason (ORIGIN: for a LUN) in err, nothing added. */
int ctl_target_add(struct daemon *d, const struct target_node_conf *c, char *err, size_t errlen);
struct ctl_target_removed {
    unsigned sessions; /* that had to end */
    unsigned luns;
    long commands_left; /* still holding a removed LUN at the timeout */
};
/* Stop serving a target: refused (-EBUSY) while it has sessions unless force, which asks them
 * to log out and closes what is left after timeout_s; then its LUNs are removed. -ENOENT,
 * -EBUSY, -ENOMEM with a reason in err, or 0. */
int ctl_target_remove(struct daemon *d, const char *name, bool force, unsigned timeout_s,
                      struct ctl_target_removed *out, char *err, size_t errlen);
/* Hide target t (a d->built index) from new logins and SendTargets, leaving its sessions be;
 * ctl_reap_drained removes it once they have ended. Returns how many sessions it has now (0:
 * remove it at once). */
unsigned ctl_target_drain(struct daemon *d, unsigned t);
/* Whether target t is draining (hidden, waiting for its sessions to end). */
bool ctl_target_draining(struct daemon *d, unsigned t);
/* Serve a draining target t to new logins again (a reload whose file has it again): true if
 * it was draining and is served now. */
bool ctl_target_undrain(struct daemon *d, unsigned t);
/* From the control thread's timer: remove the draining targets whose sessions have ended. */
void ctl_reap_drained(struct daemon *d);
/* Whether any served target has the portal `text`. */
bool ctl_portal_in_use(struct daemon *d, const char *text);
/* At exit, once no reactor runs: free the removed targets' nodes and SCSI targets. */
void ctl_free_retired(struct daemon *d);
/* End the normal sessions of node n (only those of `initiator`, unless NULL): each is asked to
 * log out, and what is left after timeout_s is closed (`why` in the log). Returns how many
 * there were. */
unsigned ctl_end_sessions(struct daemon *d, struct iscsi_node *n, const char *initiator,
                          unsigned timeout_s, const char *why);
/* The normal sessions of node n whose initiator its allow list does not let in now (an entry
 * added to an open target, or one removed, without force): how many there are, or ended as
 * ctl_end_sessions does (asked to log out, closed after timeout_s), returning how many. */
unsigned ctl_disallowed_sessions(struct daemon *d, struct iscsi_node *n);
/* How many normal sessions node n has now. */
unsigned ctl_node_sessions(struct daemon *d, const struct iscsi_node *n);
/* Every reactor has finished the turn it was in (ctl_luns.c): 0, or -1 if one did not answer
 * in time. */
int ctl_reactors_barrier(struct daemon *d);
/* ctl_hosts.c: bring running target t's [host]/[group] entries to the file's f (the SCSI
 * maps, who may log in and with which CHAP user, the model); notes in applied or restart.
 * Dropping the last entry while the target has sessions (they would see every LUN) only with
 * force, which logs them out first (closed after timeout_s). Whether the entries changed (who
 * may log in may have). */
bool ctl_hosts_apply(struct daemon *d, unsigned t, const struct target_node_conf *f, bool force,
                     unsigned timeout_s, json_t *applied, json_t *restart);
/* ctl_hosts.c: every entry's map of target t's LUN lun dropped, live (its hosts told
 * REPORTED LUNS DATA HAS CHANGED): how many maps went, or -1 with a reason in err (nothing
 * changed). */
int ctl_hosts_drop_lun(struct daemon *d, unsigned t, uint64_t lun, char *err, size_t errlen);
/* The same CHAP users, secrets and algorithms. */
bool ctl_chap_same(const struct chap_creds *a, const struct chap_creds *b);
/* Whether two targets have the same entries (names, maps, CHAP users and secrets). */
bool ctl_hosts_same(const struct target_node_conf *a, const struct target_node_conf *b);
unsigned ctl_end_disallowed_sessions(struct daemon *d, struct iscsi_node *n, unsigned timeout_s);

/* --- ctl_access.c: a running target's portals and allow list --- */
/* Serve target t on portal p too (listening on it if nothing does yet). 0, or -EEXIST,
 * -ENOMEM, -EADDRNOTAVAIL... with a reason in err. */
int ctl_portal_add(struct daemon *d, unsigned t, const struct target_portal *p, char *err,
                   size_t errlen);
/* Stop serving target t on the portal `text`: new logins through it no longer reach the
 * target, SendTargets stops listing it; sessions already on it carry on. The listener closes
 * when no target has the portal any more (*closed). `last_ok`: the target's last portal may
 * go (reload, whose file gives it another). 0, -ENOENT or -EBUSY (its last) with err. */
int ctl_portal_remove(struct daemon *d, unsigned t, const char *text, bool last_ok, bool *closed,
                      char *err, size_t errlen);
/* Let initiator `iqn` log in to target t (the first entry closes an open target to everyone
 * else). *sessions: the target's sessions of initiators the list no longer lets in (those of
 * others than iqn when it was open, and any left by an earlier change without force); they
 * carry on unless force, which logs them out (closed after timeout_s). sessions NULL: neither
 * (the caller does it after more changes). 0, -EEXIST or -ENOMEM with err. */
int ctl_allow_add(struct daemon *d, unsigned t, const char *iqn, bool force, unsigned timeout_s,
                  unsigned *sessions, char *err, size_t errlen);
/* Refuse new logins of `iqn` to target t (Authorization failure, 0202h). *sessions: the
 * target's sessions of initiators the list no longer lets in (iqn's, and any left by an
 * earlier change without force); they carry on unless force, which logs them out (closed
 * after timeout_s); sessions NULL: neither. `last_ok`: the last entry may go, opening the
 * target to every initiator (reload; then no session is of an initiator not allowed). 0,
 * -ENOENT, -EBUSY (the last entry) or -ENOMEM with err. */
int ctl_allow_remove(struct daemon *d, unsigned t, const char *iqn, bool last_ok, bool force,
                     unsigned timeout_s, unsigned *sessions, char *err, size_t errlen);

/* --- ctl_reload.c: reload (linerate-ctl reload, SIGHUP) --- */
/* Re-read cfg.config_path and apply what can change at run time: targets added and removed
 * (with force, a removed target's sessions are logged out; without, a target with sessions
 * stays), LUNs added, removed and write-protected, the log level; the rest is listed as
 * needing a restart. A file with an
 * error, or a new store that cannot be opened, changes nothing (err: "FILE:LINE: reason").
 * Returns the report (a JSON object, caller owns it) or NULL. On the control thread (or the
 * main thread when there is none). */
struct json_t;
struct json_t *ctl_reload(struct daemon *d, bool force, char *err, size_t errlen);
/* SIGHUP: run a reload on the control thread (or here when there is none) and log it. */
void ctl_reload_signal(struct daemon *d);
/* Every way the configuration `file` differs from what runs (what a reload would change or
 * list as needing a restart), one string each appended to `out`. */
void ctl_config_diff(const struct daemon *d, const struct target_config *file, struct json_t *out);
/* The same LUN configuration: store spec, options and write protection. */
bool ctl_lun_conf_same(const struct target_lun_conf *a, const struct target_lun_conf *b);

/* --- ctl_save.c: linerate-ctl save --- */
/* Write the running configuration to `path` (absolute; NULL: the --config file), keeping the
 * --config file's lines where their entries still hold; atomic (temporary file + rename, same
 * mode and owner). The report (a JSON object: file, lines kept/changed/added/removed, and the
 * differences that remain between the saved file and what runs) or NULL with err. */
struct json_t *ctl_save(struct daemon *d, const char *path, char *err, size_t errlen);

#endif
