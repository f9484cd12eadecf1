/* The daemon shell around the iSCSI engine: what the command line and the config file describe
 * (targets, portals, LUNs, ACLs, session defaults), how that becomes SCSI targets and iSCSI
 * nodes, and the daemon that listens, hands connections to reactors and shuts down on signals. */
#ifndef LR_DAEMON_CONFIG_H
#define LR_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "iscsi/chap.h"
#include "iscsi/keys.h"
#include "iscsi/node.h"
#include "util/inject.h"
#include "util/log.h"

#define TARGET_DEFAULT_NAME "iqn.2026-11.org.linerate:default"
#define TARGET_DEFAULT_PORTAL "127.0.0.1:3260"
#define TARGET_DEFAULT_LUN "ram:1G"
#define TARGET_DEFAULT_PORT 3260
/* md's default sync_speed_max (200000 KiB/s): background sanitize leaves room for other LUNs */
#define TARGET_DEFAULT_SANITIZE_RATE (200ull << 20)
#define TARGET_THREADS_MAX 256
/* poll-us: how long a reactor polls after a busy turn before it sleeps (reactor_set_poll_us). */
#define TARGET_POLL_US_DEFAULT 50
#define TARGET_POLL_US_MAX 10000
#define TARGET_LUN_MAX 16383 /* flat space addressing (SAM-5 §4.7.7) */
#define TARGET_ORIGIN_MAX 512

/* Exit codes of linerate-target. */
enum target_exit {
    TARGET_EXIT_OK = 0,
    TARGET_EXIT_RUNTIME = 1, /* could not listen, flush failed, out of memory, ... */
    TARGET_EXIT_USAGE = 2,   /* bad argument or bad config */
};

/* A listen address, parsed. `text` is the canonical form SendTargets reports
 * ("127.0.0.1:3260", "[::1]:3260"). */
struct target_portal {
    char text[80];
    struct sockaddr_storage addr;
    socklen_t addrlen;
};

/* The store type of a LUN spec, from its prefix (in this order: lun_spec.c). */
enum target_store {
    TARGET_STORE_RAM,
    TARGET_STORE_NULL,
    TARGET_STORE_FILE,
    TARGET_STORE_RBD,
    TARGET_STORE_OTHER, /* bs_open_spec names what is wrong with it */
};

/* One LUN, its spec parsed once (lun_spec.c): the store's part as bs_open_spec takes it (LUN
 * options removed), what the daemon itself needs of it, and the LUN options. */
struct target_lun_conf {
    uint64_t lun;
    char *bs_spec; /* "ram:1G", "file:/x,size=1G,direct" */
    enum target_store store;
    uint64_t size;       /* ram:/null: SIZE, file:/rbd: size= (0: none given) */
    bool prealloc;       /* ram:SIZE,prealloc */
    uint32_t block_size; /* 512 or 4096 */
    bool read_only;
    bool removable; /* ",removable": RMB=1, START STOP UNIT ejects/loads, PREVENT ALLOW holds */
    uint32_t phys_block_size; /* ",pbs=SIZE": physical block size told to initiators; 0: = bs */
    uint64_t sanitize_rate;   /* ",sanitize-rate=SIZE": bytes/s a SANITIZE writes; 0 unlimited */
    /* ",alua=STATE": this gateway's ALUA state for the LUN (else the target's alua-state);
     * ",alua-peer=ID:STATE" (repeatable): another gateway's, over the target's alua-peer */
    bool alua_state_set;
    enum scsi_alua_state alua_state;
    struct scsi_alua_group alua_peers[SCSI_ALUA_GROUPS_MAX - 1];
    unsigned alua_npeers;
    /* ",vendor=", ",product=", ",revision=", ",serial=", ",naa=", ",rotation=" (lun_identity.c):
     * what hosts are told the LU is; zero fields keep the defaults */
    struct scsi_lun_identity identity;
    /* ",iops=", ",mbps=", their read- and write- forms, ",burst=" (lun_limits.c): caps on this
     * gateway; all zero: none */
    struct rate_limit_conf limits;
    char origin[TARGET_ORIGIN_MAX]; /* "FILE:LINE" or "--lun SPEC", for error messages */
};

/* Implicit ALUA across gateways (alua_conf.c): which target port group this daemon is, the
 * default state of its LUNs, and the other gateways' groups with their default states. */
struct target_alua_conf {
    uint16_t group; /* alua-group: also the TPGT and relative target port ID; 0 means 1 */
    enum scsi_alua_state state;                             /* alua-state */
    struct scsi_alua_group peers[SCSI_ALUA_GROUPS_MAX - 1]; /* alua-peer = ID:STATE */
    unsigned npeers;
    bool explicit_alua; /* alua-explicit: TPGS 11b, SET TARGET PORT GROUPS */
    /* alua-mode = failover (else all-active, the states as configured): one gateway
     * active/optimized per LUN, the others standby, handed over through the cluster;
     * failover-heartbeat and failover-timeout in ms (0: 1000 and 5000) */
    bool failover;
    unsigned failover_hb_ms, failover_timeout_ms;
};

/* An initiator entry of a target (host_conf.c): one initiator ([host IQN]) or a named group of
 * them ([group NAME]), the target LUNs it sees under which numbers, and its own CHAP user. */
struct target_host_map {
    uint64_t host_lun; /* the number the host addresses */
    uint64_t lun;      /* the target's LUN */
    bool read_only;
    unsigned line; /* of its `map =` line, for errors */
};
#define TARGET_GROUP_NAME_MAX 63
struct target_host_conf {
    bool group;
    char group_name[TARGET_GROUP_NAME_MAX + 1]; /* [group NAME]; "" for a [host IQN] */
    char (*initiators)[ISCSI_NAME_MAX + 1];     /* one for a host, the members of a group */
    unsigned *initiator_lines;                  /* the line of each, for errors */
    unsigned ninitiators;
    struct target_host_map *maps;
    unsigned nmaps;
    /* chap-user / chap-mutual-user: over the target's for these initiators (secrets from
     * chap-secrets, algorithms the target's) */
    struct chap_creds chap;
    /* iops, mbps, their read- and write- forms, burst (lun_limits.c's keys): the caps on this
     * gateway of all the entry's sessions together (a group's members share them) */
    struct rate_limit_conf limits;
    char origin[TARGET_ORIGIN_MAX];
};

struct target_node_conf {
    char name[ISCSI_NAME_MAX + 1];
    char alias[ISCSI_VALUE_MAX + 1];
    struct target_portal *portals;
    unsigned nportals;
    struct target_lun_conf *luns;
    unsigned nluns;
    char (*allow)[ISCSI_NAME_MAX + 1];
    unsigned nallow;
    /* [host] / [group] entries: with any, only their initiators log in (and the allow list,
     * if any, must admit them too) and each sees its map */
    struct target_host_conf *hosts;
    unsigned nhosts;
    struct iscsi_params params;
    /* chap-user / chap-mutual-user / chap-algorithms; the secrets come from chap-secrets */
    struct chap_creds chap;
    struct target_alua_conf alua;
    /* target-warm-reset / target-cold-reset: whether an initiator's TARGET WARM RESET or TARGET
     * COLD RESET is done (it reaches every initiator of the target) or answered "function
     * rejected". Warm: yes by default; cold: no. */
    bool warm_reset, cold_reset;
    char origin[TARGET_ORIGIN_MAX];
};

#define TARGET_DEFAULT_STATE_DIR "/var/lib/linerate"
/* The control socket linerate-ctl talks to (docs/ctl-protocol.md). */
#define TARGET_DEFAULT_CTL_SOCKET "/run/linerate/ctl.sock"
#define TARGET_CTL_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) */

struct target_config {
    unsigned threads; /* 0: online CPUs */
    unsigned poll_us; /* poll-us, TARGET_POLL_US_DEFAULT unless set */
    enum log_level log_level;
    /* log = stderr | syslog (--syslog): where log lines go; fixed until a restart. */
    bool log_syslog;
    unsigned nop_interval_s;
    unsigned nop_timeout_s;
    unsigned login_timeout_s;
    /* rbd-timeout: an OSD or monitor silent this long fails the command with a retryable
     * sense (rados_osd_op_timeout); the default of rbd: LUNs without timeout=. 0: the store's
     * own default. */
    unsigned rbd_timeout_s;
    /* Where persistent reservations with APTPL are kept across restarts (SPC-4 §5.13.5). */
    char state_dir[256];
    /* The control socket: "" with ctl_socket_set means "none" (no control socket). Unless
     * set (--ctl-socket or ctl-socket), the default path is tried and a failure to use it is
     * only a warning; a path that was asked for must work or the daemon does not start. */
    char ctl_socket[TARGET_CTL_PATH_MAX];
    bool ctl_socket_set;
    /* --metrics / metrics: the Prometheus endpoint's address (metrics.c); off unless set. */
    struct target_portal metrics;
    bool metrics_on;
    /* --config FILE, for reload ("" without); which settings the command line fixed over it. */
    char config_path[1024];
    bool cli_log_level, cli_threads, cli_poll_us, cli_state_dir, cli_syslog, cli_metrics;
    /* --max-task-buffers, --data-out-timeout: over the file's, at start and at reload */
    bool cli_max_task_buffers, cli_data_out_timeout;
    bool cli_ctl_socket;        /* --ctl-socket, over the file's ctl-socket */
    struct iscsi_limits limits; /* the limit keys (conf_keys_table.c) */
    struct target_node_conf *targets;
    unsigned ntargets;
    /* CHAP: the secrets file, discovery-chap-user / discovery-chap-mutual-user, and the
     * default chap-algorithms (0: all) for targets that name none. */
    char chap_secrets[1024];
    struct chap_creds discovery_chap;
    bool discovery_chap_match; /* discovery-chap-match (iscsi_server's) */
    unsigned chap_algs;
    /* --inject: faults for tests (util/inject.h); all zero in normal use. */
    struct inject_spec inject;
    /* Union of every target's portals: what the daemon listens on. */
    struct target_portal *listen;
    unsigned nlisten;
};

/* --- conf_model.c: the model and the validators of its values --- */
void target_config_init(struct target_config *cfg);
void target_config_free(struct target_config *cfg);
/* The session parameters a target prefers unless told otherwise. */
void target_params_default(struct iscsi_params *p);
/* Add a target named `name` (validated by the caller); returns it or NULL on ENOMEM. */
struct target_node_conf *target_config_add_node(struct target_config *cfg, const char *name,
                                                const char *origin);
/* Drop target idx (its LUN specs, portals, allow list, CHAP) from cfg. */
void target_config_remove_node(struct target_config *cfg, unsigned idx);
/* Append a deep copy of src to cfg; NULL on ENOMEM (cfg unchanged). */
struct target_node_conf *target_config_copy_node(struct target_config *cfg,
                                                 const struct target_node_conf *src);
/* Compute cfg->listen as the union of all targets' portals. Returns 0 or -1 (ENOMEM). */
int target_config_finish(struct target_config *cfg);
/* "64M" for 67108864: the largest whole unit (k, M, G, T), else bytes. */
void target_size_text(uint64_t bytes, char *buf, size_t len);

/* --- config.c: the config file parser --- */
/* Load a config file. On error returns -1 with "FILE:LINE: reason" in err. */
int target_config_load(struct target_config *cfg, const char *path, char *err, size_t errlen);
/* What a [target] section takes from the global section of its file unless it says otherwise
 * (session keys, ALUA), for writing a new section into that file. */
struct target_section_defaults {
    struct iscsi_params params;
    struct target_alua_conf alua;
    unsigned chap_algs; /* the global chap-algorithms (0: all) */
};
/* target_config_load, also giving the file's section defaults (defs may be NULL). */
int target_config_load_defaults(struct target_config *cfg, const char *path,
                                struct target_section_defaults *defs, char *err, size_t errlen);
/* A line of a config file: without its line end ("\n", "\r\n"), its length (it may hold NUL
 * bytes) and its number from 1. Returns 0 to go on with the next line, -1 to stop. */
typedef int (*target_line_fn)(void *arg, char *line, size_t len, unsigned lineno);
/* What target_config_read_lines returns when the file itself fails; errno says why. */
enum {
    TARGET_LINES_EOPEN = -2, /* it cannot be opened */
    TARGET_LINES_EREAD = -3, /* reading it failed after the lines given */
};
/* Give each line of the file at path to fn: the one line reader of the config loader and of
 * ctl save (which keeps the file's layout). Returns 0 after the last line, -1 when fn stopped,
 * or TARGET_LINES_EOPEN / TARGET_LINES_EREAD. */
int target_config_read_lines(const char *path, target_line_fn fn, void *arg);

/* Validators of values (conf_model.c), shared by the key table, cli.c and linerate-ctl's
 * requests; on error they return -1 and write a reason (without the origin) into err. */
/* --metrics ADDR:PORT, or "none"/"off": the port is required (no default for it). */
int target_set_metrics(struct target_config *cfg, const char *val, char *err, size_t errlen);
int target_parse_portal(const char *s, struct target_portal *p, char *err, size_t errlen);
int target_check_iscsi_name(const char *s, char *err, size_t errlen);
/* --- lun_identity.c: the identity options of a LUN spec --- */
/* One identity option (tok, of the LUN spec spec) into lun->identity: 1 taken, 0 not one,
 * -1 a bad value (err names the option). */
int target_lun_identity_opt(struct target_lun_conf *lun, const char *tok, const char *spec,
                            char *err, size_t errlen);
/* The options set, each as ",key=value" in the spec's syntax ("" for none); -1 if cut. */
int target_lun_identity_format(const struct scsi_lun_identity *id, char *buf, size_t len);
/* lun_limits.c: one LUN option (1 taken, 0 not a limit, -1 bad, with err); a list of them as
 * linerate-ctl sends it ("iops=500,burst=1s", or "none"), over what c holds (0 or -1); and c
 * written back as LUN options (",iops=500,burst=1000ms"; 0, or -1 if len is too short). */
int target_lun_limits_opt(struct rate_limit_conf *c, const char *tok, const char *spec, char *err,
                          size_t errlen);
int target_lun_limits_parse(struct rate_limit_conf *c, const char *text, char *err, size_t errlen);
int target_lun_limits_format(const struct rate_limit_conf *c, char *buf, size_t len);
void target_lun_naa_text(const struct scsi_lun_identity *id, char *buf, size_t len);
bool target_lun_identity_same(const struct scsi_lun_identity *a, const struct scsi_lun_identity *b);
/* -1 (err says which LUN has it) if l's naa= is another LUN's of node n, or of any target of
 * cfg; l itself may be among them. */
int target_node_naa_clash(const struct target_node_conf *n, const char *target,
                          const struct target_lun_conf *l, char *err, size_t errlen);
int target_lun_naa_clash(const struct target_config *cfg, const char *target,
                         const struct target_lun_conf *l, char *err, size_t errlen);

/* --- lun_spec.c: a LUN spec parsed into a target_lun_conf, and written back --- */
int target_parse_lun_spec(const char *spec, struct target_lun_conf *lun, char *err, size_t errlen);
/* The global rbd-timeout as an rbd: LUN's timeout= when its spec names none (as a config line
 * gets it; linerate-ctl's LUNs too). 0, or -1 when out of memory. */
int target_lun_rbd_timeout(struct target_lun_conf *l, unsigned rbd_timeout_s);
/* The spec bs_open_spec opens l's store with (read-only for a read-only file or image).
 * 0, or -1 if it does not fit. */
int target_lun_open_spec(const struct target_lun_conf *l, char *buf, size_t len);
/* A resized LUN's spec says its new size where it gives one (ram:SIZE, null:SIZE, size=), so
 * that save writes it and reload does not take it back. */
void target_lun_set_size(struct target_lun_conf *l, uint64_t bytes);
/* A warning when the thin RAM LUNs of cfg add up to more than the machine's memory. */
void target_config_warn_thin_ram(const struct target_config *cfg);
/* The failover timings together (alua_failover.c): 0 or -1 with the reason in err. */
int target_alua_check(const struct target_alua_conf *a, char *err, size_t errlen);
/* ALUA keys (alua-group, alua-state, alua-peer) of the global or a target section: 1 taken,
 * 0 not an ALUA key, -1 bad value (reason in err). */
int target_alua_key(struct target_alua_conf *a, const char *key, const char *val, char *err,
                    size_t errlen);
/* A LUN spec option (alua=STATE, alua-peer=ID:STATE): 1 taken, 0 not one, -1 bad value. */
int target_alua_lun_opt(struct target_lun_conf *l, const char *tok, char *err, size_t errlen);
/* The TPGT (= target port group, = relative target port ID) a target's portals carry. */
uint16_t target_alua_tpgt(const struct target_node_conf *c);
/* Give a SCSI target made for c (scsi_target_init with target_alua_tpgt) its peer groups. */
void target_alua_apply(const struct target_node_conf *c, struct scsi_target *scsi);
/* The same target ALUA settings (reload). */
bool target_alua_same(const struct target_alua_conf *a, const struct target_alua_conf *b);
/* "ALUA target port group 1 (active/optimized), peers 2 (standby)" for the start-up log. */
void target_alua_describe(const struct target_node_conf *c, char *buf, size_t len);
/* The same LUN ALUA settings (reload). */
bool target_alua_lun_same(const struct target_lun_conf *a, const struct target_lun_conf *b);
/* The same groups, states aside: what a reload can change live (ctl_alua.c). */
bool target_alua_same_groups(const struct target_alua_conf *a, const struct target_alua_conf *b);
bool target_alua_lun_same_groups(const struct target_lun_conf *a, const struct target_lun_conf *b);
int target_node_add_portal(struct target_node_conf *n, const struct target_portal *p);
int target_node_add_lun(struct target_node_conf *n, struct target_lun_conf *lun, char *err,
                        size_t errlen);
int target_node_add_allow(struct target_node_conf *n, const char *iqn);
/* Drop a portal (by its canonical text) or an allow entry (names compare without case);
 * nothing if it is not there. */
void target_node_remove_portal(struct target_node_conf *n, const char *text);
void target_node_remove_allow(struct target_node_conf *n, const char *iqn);
/* Whether the node lists that portal (canonical text) or allow entry (without case): the
 * lists are sets, their order changes nothing a login sees. */
bool target_node_has_portal(const struct target_node_conf *n, const char *text);
bool target_node_has_allow(const struct target_node_conf *n, const char *iqn);
/* --ctl-socket / ctl-socket: an absolute path shorter than TARGET_CTL_PATH_MAX, or "none". */
int target_set_ctl_socket(struct target_config *cfg, const char *val, char *err, size_t errlen);
/* error-recovery-level: 0..2, and at most ISCSI_ERL_IMPLEMENTED. */
int target_parse_erl(const char *val, uint32_t *out, char *err, size_t errlen);

/* --- conf_write.c: the model as config file text (linerate-ctl save) --- */

/* "lun N = SPEC\n" */
void target_conf_write_lun(FILE *f, const struct target_lun_conf *l);
/* One [host IQN] or [group NAME] entry: its header, initiators, maps and CHAP users. */
void target_conf_write_host(FILE *f, const struct target_host_conf *h);
/* A whole [target] section: its keys, session keys and ALUA only where they differ from inh. */
void target_conf_write_section(FILE *f, const struct target_node_conf *c,
                               const struct target_section_defaults *inh);
/* The global keys of cfg that differ from the defaults (a daemon started without a file),
 * with `level` as the log level. */
void target_conf_write_globals(FILE *f, const struct target_config *cfg, enum log_level level);
/* s without the white space around it (cut in place), as the config parser reads a line. */
char *conf_trim(char *s);
/* The spec a `lun =` line takes for l (store spec and LUN options). 0, or -1 if truncated
 * (lun_spec.c). */
int target_lun_spec_format(const struct target_lun_conf *l, char *buf, size_t len);
/* The same, whole, in a malloc'd string (a file path may be near PATH_MAX): NULL only when out
 * of memory. What writes a config uses this: a cut spec would be saved as another LUN. */
char *target_lun_spec_dup(const struct target_lun_conf *l);

/* --- host_conf.c: the [host IQN] and [group NAME] entries of a target --- */
/* Open an entry of n (group: a [group NAME], else a [host IQN] named `name`): NULL with a
 * reason in err (a bad name, out of memory). */
struct target_host_conf *target_host_open(struct target_node_conf *n, bool group, const char *name,
                                          const char *origin, unsigned line, char *err,
                                          size_t errlen);
/* `map = HOST-LUN TARGET-LUN[,ro]` and a group's `initiator = IQN`: 0 or -1 (reason in err). */
int target_host_map_line(struct target_host_conf *h, const char *val, unsigned line, char *err,
                         size_t errlen);
int target_host_add_initiator(struct target_host_conf *h, const char *iqn, unsigned line, char *err,
                              size_t errlen);
/* Checks of a target's entries once its sections are read (a map to a LUN it lacks, a host
 * number twice, one IQN in two entries, an empty group): 0, or -1 with "FILE:LINE: reason". */
int target_hosts_check(const struct target_node_conf *n, const char *path, char *err,
                       size_t errlen);
/* The entry an initiator belongs to, NULL if none (names compare without case). */
const struct target_host_conf *target_host_find(const struct target_node_conf *n, const char *iqn);
/* The first entry that maps target LUN lun, NULL if none. */
const struct target_host_conf *target_host_mapping(const struct target_node_conf *n, uint64_t lun);
void target_hosts_free(struct target_node_conf *n);
/* Give the SCSI target built for n each entry's map (scsi_target_host_add, _map), a group's for
 * each member. 0, or -1 with "ORIGIN: reason" in err. */
int target_hosts_apply(const struct target_node_conf *n, struct scsi_target *scsi, char *err,
                       size_t errlen);
/* A deep copy of src's entries into dst (whose own are dropped): 0 or -1 (ENOMEM). */
int target_hosts_copy(struct target_node_conf *dst, const struct target_node_conf *src);

/* --- cli.c --- */
/* Parse argv into cfg. Returns -1 to go on and serve, or an exit code (0 after --help or
 * --version, 2 after a bad argument, the message already printed). */
int target_cli_parse(struct target_config *cfg, int argc, char **argv);

/* --- chap_conf.c: CHAP keys of the config file and command line, and the secrets --- */
/* A CHAP key (chap-secrets, discovery-chap-user, discovery-chap-mutual-user, chap-algorithms
 * globally; chap-user, chap-mutual-user, chap-algorithms in a target, node != NULL).
 * Returns 1 if it was one (applied), 0 if not a CHAP key, -1 with a reason in err. */
int target_chap_key(struct target_config *cfg, struct target_node_conf *node, const char *key,
                    const char *val, char *err, size_t errlen);
/* chap-user / chap-mutual-user of a [host] or [group] entry: 1, or -1 with a reason in err. */
int target_chap_host_key(struct target_host_conf *h, const char *key, const char *val, char *err,
                         size_t errlen);
/* Once everything is parsed: read the secrets of every configured user from chap_secrets.
 * Returns 0, or -1 with "FILE...: reason" in err (never a secret). */
int target_chap_load(struct target_config *cfg, char *err, size_t errlen);

/* --- build.c: config -> SCSI targets + iSCSI nodes --- */
struct bs;
struct target_built {
    struct scsi_target **scsi;
    struct iscsi_node **nodes;
    unsigned n;
};
/* Open every store and build the targets. On error returns -1 with "ORIGIN: reason" in err, or
 * -2 when what failed was a store that could not be reached for now (an rbd: LUN's cluster
 * did not answer): the configuration may be right, and a later start may succeed. */
int target_build(const struct target_config *cfg, struct target_built *b, char *err, size_t errlen);
/* The iSCSI node of a configured target (portals, allow list, CHAP, parameters) on `scsi`;
 * NULL when out of memory. target_node_free releases it (not the SCSI target). */
struct iscsi_node *target_node_make(const struct target_node_conf *c, struct scsi_target *scsi);
void target_node_free(struct iscsi_node *n);
/* Open one LUN's store and add it to `scsi` (at start, and when linerate-ctl adds one).
 * state_dir may be NULL (no APTPL). On error returns -1 with "ORIGIN: reason" in err. */
int target_build_lun(const char *state_dir, const char *target, const struct target_lun_conf *l,
                     struct scsi_target *scsi, const struct target_built *built, char *err,
                     size_t errlen);
/* The same; *transient (if not NULL) says the store could not be opened for now. */
int target_build_lun_ex(const char *state_dir, const char *target, const struct target_lun_conf *l,
                        struct scsi_target *scsi, const struct target_built *built, bool *transient,
                        char *err, size_t errlen);
/* The same in two steps, so that a reload opens every new store before it changes anything:
 * open the store (NULL with "ORIGIN: reason" in err), then add it (the LUN takes the store;
 * on error it is closed). */
struct bs *target_open_lun_store(const struct target_lun_conf *l, char *err, size_t errlen);
/* The same; *transient says the store could not be opened for now (bs_open_spec_ex). */
struct bs *target_open_lun_store_ex(const struct target_lun_conf *l, bool *transient, char *err,
                                    size_t errlen);
/* built (may be NULL): the daemon's targets, none of whose LUNs (nor scsi's) may already have
 * the NAA the new LUN would have, its own or its default (refused, naming both). */
int target_add_lun_store(const char *state_dir, const char *target, const struct target_lun_conf *l,
                         struct bs *bs, struct scsi_target *scsi, const struct target_built *built,
                         char *err, size_t errlen);
/* cfg's state directory, created if missing; NULL (with a warning) if it cannot be. */
const char *target_state_dir(const struct target_config *cfg);
/* Flush every LUN's store; returns the number of LUNs that failed to flush. */
int target_built_flush(struct target_built *b);
void target_built_free(struct target_built *b);

/* --- main.c --- */
/* The whole program: parse, build, listen, serve until SIGTERM/SIGINT. Returns the exit code. */
int target_main(int argc, char **argv);

#endif
