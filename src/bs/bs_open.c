/* The --lun SPEC parser ("ram:SIZE", "null:SIZE", "file:PATH[,size=SIZE][,direct][,ro]",
 * "rbd:POOL/IMAGE[,...]") that turns a line of configuration into an open store: the table of
 * store types, and each type's options. The stores themselves are bs_null.c, bs_ram.c,
 * bs_file.c and bs_rbd.c (loaded by bs_rbd_load.c); this file sits above them all. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bs/bs_store.h"
#include "util/size.h"

#define BS_SECTOR 512

static void bs_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bs_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Parse a size and insist on whole 512-byte sectors: every LUN exports 512-byte blocks at
 * least, and a partial last block could be neither read nor written. `who` prefixes the
 * message ("ram", "file:/x"). */
static int bs_parse_size(const char *who, const char *s, uint64_t *out, char *err, size_t errlen)
{
    if (!*s) {
        bs_err(err, errlen, "%s: size missing", who);
        return -1;
    }
    if (size_parse(s, out) < 0) {
        bs_err(err, errlen, "%s: bad size '%s' (expected e.g. 512, 4k, 1G)", who, s);
        return -1;
    }
    if (*out == 0 || *out % BS_SECTOR) {
        bs_err(err, errlen, "%s: size %s is not a positive multiple of 512", who, s);
        return -1;
    }
    return 0;
}

/* "ram:SIZE[,prealloc][,send-min=SIZE]" and "null:SIZE"; any other option is named as
 * unknown. */
static struct bs *bs_open_mem(const char *type, char *rest, bool *transient, char *err,
                              size_t errlen)
{
    (void)transient;
    bool ram = strcmp(type, "ram") == 0, prealloc = false;
    uint64_t send_min = BS_RAM_SEND_MIN;
    char *opts = strchr(rest, ',');
    if (opts)
        *opts++ = '\0';
    while (opts) {
        char *opt = opts;
        opts = strchr(opts, ',');
        if (opts)
            *opts++ = '\0';
        if (ram && strcmp(opt, "prealloc") == 0) {
            prealloc = true;
        } else if (ram && strncmp(opt, "send-min=", 9) == 0) {
            if (strcmp(opt + 9, "off") == 0)
                send_min = UINT64_MAX;
            else if (bs_parse_size("ram: send-min", opt + 9, &send_min, err, errlen) < 0)
                return NULL;
        } else {
            bs_err(err, errlen, "%s: unknown option '%s'", type, opt);
            return NULL;
        }
    }
    uint64_t size;
    if (bs_parse_size(type, rest, &size, err, errlen) < 0)
        return NULL;
    struct bs *bs =
        ram ? bs_ram_open(size, prealloc, err, errlen) : bs_null_open(size, err, errlen);
    if (bs && ram)
        bs_ram_set_send_min(bs, send_min);
    return bs;
}

static struct bs *bs_open_file(const char *type, char *rest, bool *transient, char *err,
                               size_t errlen)
{
    (void)type;
    (void)transient;
    char *path = rest;
    char *opts = strchr(rest, ',');
    if (opts)
        *opts++ = '\0';
    if (!*path) {
        bs_err(err, errlen, "file: path missing");
        return NULL;
    }
    char who[300];
    snprintf(who, sizeof(who), "file:%.280s", path);

    uint64_t size = 0, send_min = BS_FILE_SEND_MIN;
    bool direct = false, read_only = false, write_inline = true, send_min_set = false;
    while (opts) {
        char *opt = opts;
        opts = strchr(opts, ',');
        if (opts)
            *opts++ = '\0';
        if (strncmp(opt, "size=", 5) == 0) {
            if (bs_parse_size(who, opt + 5, &size, err, errlen) < 0)
                return NULL;
        } else if (strcmp(opt, "direct") == 0) {
            direct = true;
        } else if (strcmp(opt, "ro") == 0) {
            read_only = true; /* a read-only LUN: the file needs no write permission */
        } else if (strncmp(opt, "send-min=", 9) == 0) {
            send_min_set = true;
            if (strcmp(opt + 9, "off") == 0)
                send_min = UINT64_MAX;
            else if (bs_parse_size(who, opt + 9, &send_min, err, errlen) < 0)
                return NULL;
        } else if (strncmp(opt, "write-inline=", 13) == 0) {
            if (strcmp(opt + 13, "on") == 0 || strcmp(opt + 13, "off") == 0) {
                write_inline = opt[14] == 'n';
            } else {
                bs_err(err, errlen, "%s: bad write-inline '%s' (expected on or off)", who,
                       opt + 13);
                return NULL;
            }
        } else {
            bs_err(err, errlen, "%s: unknown option '%s'", who, opt);
            return NULL;
        }
    }
    if (direct && send_min_set && send_min != UINT64_MAX) {
        /* it sends from the page cache, which direct skips */
        bs_err(err, errlen, "%s: send-min needs the page cache (not with direct)", who);
        return NULL;
    }
    if (direct)
        send_min = UINT64_MAX;
    struct bs *bs = bs_file_open(path, size, direct, read_only, err, errlen);
    if (bs && send_min != UINT64_MAX)
        bs_file_set_send_min(bs, send_min);
    if (bs && !write_inline)
        bs_file_set_write_inline(bs, false);
    return bs;
}

/* "rbd:POOL/IMAGE[,conf=PATH][,id=CLIENT][,size=SIZE][,timeout=SECONDS][,ro]" */
static struct bs *bs_open_rbd(const char *type, char *rest, bool *transient, char *err,
                              size_t errlen)
{
    (void)type;
    char *opts = strchr(rest, ',');
    if (opts)
        *opts++ = '\0';
    char *slash = strchr(rest, '/');
    if (!slash || slash == rest || !slash[1] || strchr(slash + 1, '/')) {
        bs_err(err, errlen, "rbd:%s: expected rbd:POOL/IMAGE", rest);
        return NULL;
    }
    *slash = '\0';
    struct bs_rbd_params p = {.timeout_s = BS_RBD_DEFAULT_TIMEOUT_S};
    if (strlen(rest) >= sizeof(p.pool) || strlen(slash + 1) >= sizeof(p.image)) {
        bs_err(err, errlen, "rbd: pool or image name too long");
        return NULL;
    }
    snprintf(p.pool, sizeof(p.pool), "%s", rest);
    snprintf(p.image, sizeof(p.image), "%s", slash + 1);
    char who[300];
    snprintf(who, sizeof(who), "rbd:%s/%s", p.pool, p.image);
    while (opts) {
        char *opt = opts;
        opts = strchr(opts, ',');
        if (opts)
            *opts++ = '\0';
        if (strncmp(opt, "size=", 5) == 0) {
            if (bs_parse_size(who, opt + 5, &p.size, err, errlen) < 0)
                return NULL;
        } else if (strncmp(opt, "conf=", 5) == 0 && opt[5] && strlen(opt + 5) < sizeof(p.conf)) {
            snprintf(p.conf, sizeof(p.conf), "%s", opt + 5);
        } else if (strncmp(opt, "id=", 3) == 0 && opt[3] && strlen(opt + 3) < sizeof(p.client_id)) {
            snprintf(p.client_id, sizeof(p.client_id), "%s", opt + 3);
        } else if (strncmp(opt, "timeout=", 8) == 0) {
            char *end;
            unsigned long v = strtoul(opt + 8, &end, 10);
            if (!opt[8] || *end || v < 1 || v > 3600) {
                bs_err(err, errlen, "%s: bad timeout '%s' (expected seconds, 1..3600)", who,
                       opt + 8);
                return NULL;
            }
            p.timeout_s = (unsigned)v;
        } else if (strcmp(opt, "ro") == 0) {
            p.read_only = true;
        } else {
            bs_err(err, errlen, "%s: unknown or bad option '%s'", who, opt);
            return NULL;
        }
    }
#ifdef LR_HAVE_RBD
    return bs_rbd_module_open(&p, transient, err, errlen);
#else
    (void)transient;
    bs_err(err, errlen,
           "%s: this linerate-target was built without librbd (install librbd-dev "
           "and rebuild)",
           who);
    return NULL;
#endif
}

/* The store types, by the name before the colon of a spec. A new store adds its row here, its
 * constructor to bs_store.h and its file to meson.build. */
static const struct bs_type {
    const char *name;
    /* Parse the options after "TYPE:" (rest, which it may cut up) and open the store. */
    struct bs *(*open)(const char *type, char *rest, bool *transient, char *err, size_t errlen);
} bs_types[] = {
    {"ram", bs_open_mem},
    {"null", bs_open_mem},
    {"file", bs_open_file},
    {"rbd", bs_open_rbd},
};

static const struct bs_type *bs_type_find(const char *name)
{
    for (size_t i = 0; i < sizeof(bs_types) / sizeof(bs_types[0]); i++)
        if (strcmp(bs_types[i].name, name) == 0)
            return &bs_types[i];
    return NULL;
}

struct bs *bs_open_spec(const char *spec, char *err, size_t errlen)
{
    return bs_open_spec_ex(spec, NULL, err, errlen);
}

struct bs *bs_open_spec_ex(const char *spec, bool *transient, char *err, size_t errlen)
{
    if (transient)
        *transient = false;
    if (!spec || !*spec) {
        bs_err(err, errlen, "empty store spec (expected ram:SIZE, null:SIZE or file:PATH)");
        return NULL;
    }
    char *copy = strdup(spec);
    if (!copy) {
        bs_err(err, errlen, "out of memory");
        return NULL;
    }
    char *colon = strchr(copy, ':');
    char *rest = "";
    if (colon) {
        *colon = '\0';
        rest = colon + 1;
    }
    struct bs *bs = NULL;
    const struct bs_type *t = bs_type_find(copy);
    if (t)
        bs = t->open(copy, rest, transient, err, errlen);
    else
        bs_err(err, errlen, "unknown store type '%s' (expected ram, null, file or rbd)", copy);
    if (bs)
        snprintf(bs->desc, sizeof(bs->desc), "%s", spec);
    free(copy);
    return bs;
}
