/* The configuration keys as data: one row per key of linerate.conf (name, type, range, default,
 * scope, whether a reload applies it, its command-line option and help). The config parser,
 * `linerate-ctl save`, the reload diff, --help and --list-keys all read this one table, so a
 * new key is a row (conf_keys_table.c) plus the code that uses its value. */
#ifndef LR_DAEMON_CONF_KEYS_H
#define LR_DAEMON_CONF_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "daemon/config.h"

/* Where a key may stand: the global section, a [target] section, or both (the session keys
 * and the ALUA keys: in the global section they are the defaults of the targets that follow);
 * CONF_HOST: a [host IQN] or [group NAME] entry of a target (host_conf.c). */
enum conf_scope {
    CONF_GLOBAL = 1u,
    CONF_TARGET = 2u,
    CONF_BOTH = 3u,
    CONF_HOST = 4u,
};

/* What a reload does with a changed value. */
enum conf_reload {
    CONF_RESTART, /* listed as needing a restart (the row's `note`) */
    CONF_LIVE,    /* applied by the reload (ctl_reload.c) */
    CONF_OWN,     /* compared by code of its own: CHAP (secrets are no key), ALUA (one
                   * group of keys), ctl-socket (a --ctl-socket leaves no mark to skip it by),
                   * rbd-timeout (it reaches the rbd: LUNs' specs, which are compared) */
};

enum conf_type {
    CONF_UINT,    /* a count: N */
    CONF_SECONDS, /* seconds (the message says so) */
    CONF_SIZE,    /* bytes, k M G T suffixes; shown as "64M" */
    CONF_BOOL,    /* yes/no (true/false, on/off, 1/0) */
    CONF_TEXT,    /* anything else: the row's own set and fmt */
    CONF_LIST,    /* portal, lun, allow, map, initiator: repeatable entries the parser keeps */
};

/* Which object a row's `off` is into (NONE: a key the table does not hold the value of). */
enum conf_where { CONF_IN_NONE, CONF_IN_CFG, CONF_IN_LIMITS, CONF_IN_PARAMS, CONF_IN_NODE };

/* What a key is set on: the configuration, the [target] section being read (NULL in the
 * global section), and the session keys and ALUA settings that section's keys go to (the
 * global defaults, or the target's own). */
struct conf_obj {
    struct target_config *cfg;
    struct target_node_conf *node;
    struct iscsi_params *params;
    struct target_alua_conf *alua;
    struct target_host_conf *host; /* the [host] / [group] entry being read, or NULL */
};

struct conf_key;
typedef int (*conf_set_fn)(const struct conf_key *k, const struct conf_obj *o, const char *val,
                           char *err, size_t errlen);
/* The value as a config line writes it; "" when there is nothing to write (not set). */
typedef void (*conf_fmt_fn)(const struct conf_key *k, const struct conf_obj *o, char *buf,
                            size_t len);

struct conf_key {
    const char *name;
    enum conf_type type;
    unsigned scope; /* enum conf_scope bits */
    enum conf_reload reload;
    bool repeatable; /* may stand more than once in a section (alua-peer, portal, ...) */
    uint64_t lo, hi; /* CONF_UINT, CONF_SECONDS, CONF_SIZE */
    enum conf_where where;
    size_t off;      /* of the value in its object (CONF_UINT..CONF_BOOL) */
    unsigned width;  /* its size: 1 (bool), 4 or 8 */
    conf_set_fn set; /* CONF_TEXT, or to check more than the range */
    conf_fmt_fn fmt; /* CONF_TEXT; NULL: written by code of its own (ALUA, CHAP algorithms) */
    /* The reload's "needs a restart" line; keys that share one are listed together. */
    const char *note;
    /* The default as the man page words it, where it is not the value formatted
     * ("online CPUs"); NULL: the built-in value (or no default, for a key with none). */
    const char *shown_default;
    /* Said after "'KEY' belongs in ..." when the key stands in the wrong section. */
    const char *misplaced_hint;
    /* The command-line option of the same meaning (without "--"), its argument and its
     * --help text (lines after the first indented by 25 spaces), or NULL. */
    const char *flag, *flag_arg, *help;
    /* A bool of target_config saying the command line set it, over the file: the reload
     * leaves it alone. 0: none. */
    size_t cli_off;
};

/* At most this many rows (the parser keeps a line number per key and section). */
#define CONF_KEYS_MAX 96
extern const struct conf_key conf_keys[];
extern const size_t conf_nkeys;

/* The row of a key ("lun 3" is "lun"), or NULL. */
const struct conf_key *conf_key_find(const char *name);
/* The row whose command-line option is `flag` (without "--"), or NULL. */
const struct conf_key *conf_key_by_flag(const char *flag);
/* Set k from val on o. 0, or -1 with the reason (without the origin) in err. */
int conf_key_set(const struct conf_key *k, const struct conf_obj *o, const char *val, char *err,
                 size_t errlen);
/* The value of k on o as a config line writes it ("" when there is none to write). */
void conf_key_text(const struct conf_key *k, const struct conf_obj *o, char *buf, size_t len);
/* The built-in default as the man page shows it ("" when the key has none). */
void conf_key_default_text(const struct conf_key *k, char *buf, size_t len);
/* `KEY = VALUE` lines for the keys whose value is in one of the objects of where_mask (bits
 * 1 << enum conf_where) and differs on o from that on inh, in table order. */
#define CONF_MASK(w) (1u << (w))
void conf_keys_write(FILE *f, unsigned where_mask, const struct conf_obj *o,
                     const struct conf_obj *inh);
/* A value as the loader reads it back (quoted where it must be), and the line end. */
void conf_write_value(FILE *f, const char *v);
/* The "needs a restart" notes of the CONF_RESTART keys in `scope` that differ between run and
 * file (a key the command line set is skipped), each note once, as `add(arg, note)`. */
void conf_keys_diff(unsigned scope, const struct conf_obj *run, const struct conf_obj *file,
                    void (*add)(void *arg, const char *note), void *arg);
/* --list-keys: one line per key, "NAME<TAB>SCOPE<TAB>RELOAD<TAB>DEFAULT<TAB>--FLAG" ("-" for
 * none), for the test that the man pages document every key and option. */
void conf_keys_list(FILE *f);
/* --help lines of the rows with a command-line option, in table order. */
void conf_keys_help(FILE *f);

/* The shared value parsers of the rows. */
int conf_parse_bool(const char *v, bool *out);
int conf_parse_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out);

#endif
