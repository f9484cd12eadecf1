/* The LUN spec ("ram:1G,ro,bs=4096", "file:/x,size=1G,direct"), parsed once into a
 * target_lun_conf: the store's part (its type and size, and the text bs_open_spec takes) and
 * the LUN options; and the struct written back as a spec (save, reload messages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "util/log.h"
#include "util/size.h"

#define SECTOR 512

/* A LUN option (after the store's part): 1 taken, 0 not a LUN option, -1 bad value. */
static int lun_opt(struct target_lun_conf *lun, const char *tok, const char *spec, char *err,
                   size_t errlen)
{
    uint64_t x;
    if (strcmp(tok, "ro") == 0 || strcmp(tok, "rw") == 0) {
        lun->read_only = tok[1] == 'o';
        return 1;
    }
    if (strcmp(tok, "removable") == 0) {
        lun->removable = true;
        return 1;
    }
    if (strncmp(tok, "pbs=", 4) == 0) {
        if (size_parse(tok + 4, &x) < 0 || x > 65536) {
            snprintf(err, errlen,
                     "bad physical block size '%s' in LUN spec '%s': e.g. 4k, at most 64k", tok + 4,
                     spec);
            return -1;
        }
        lun->phys_block_size = (uint32_t)x;
        return 1;
    }
    int r = target_alua_lun_opt(lun, tok, err, errlen);
    if (r == 0)
        r = target_lun_identity_opt(lun, tok, spec, err, errlen);
    if (r == 0)
        r = target_lun_limits_opt(&lun->limits, tok, spec, err, errlen);
    if (r != 0)
        return r;
    if (strncmp(tok, "sanitize-rate=", 14) == 0) {
        if (size_parse(tok + 14, &lun->sanitize_rate) < 0) {
            snprintf(err, errlen,
                     "bad sanitize rate '%s' in LUN spec '%s': bytes per second, "
                     "e.g. 200M, or 0 for no limit",
                     tok + 14, spec);
            return -1;
        }
        return 1;
    }
    if (strncmp(tok, "bs=", 3) == 0 || strncmp(tok, "block-size=", 11) == 0) {
        const char *v = strchr(tok, '=') + 1;
        if (size_parse(v, &x) < 0 || (x != 512 && x != 4096)) {
            snprintf(err, errlen, "bad block size '%s' in LUN spec '%s': 512 or 4096", v, spec);
            return -1;
        }
        lun->block_size = (uint32_t)x;
        return 1;
    }
    return 0;
}

/* The store's type from its prefix, and its size where the spec gives one: SIZE of ram: and
 * null: (checked here, with the store's words, so that --check and a config load refuse
 * "ram:1Gb" rather than the start), size= of file: and rbd: (checked by the store). */
static int store_part(struct target_lun_conf *lun, const char *store, char *err, size_t errlen)
{
    static const char *const types[] = {"ram:", "null:", "file:", "rbd:"};
    lun->store = TARGET_STORE_OTHER;
    for (unsigned i = 0; i < 4; i++)
        if (strncmp(store, types[i], strlen(types[i])) == 0)
            lun->store = (enum target_store)i;
    const char *size = NULL;
    if (lun->store == TARGET_STORE_RAM || lun->store == TARGET_STORE_NULL)
        size = strchr(store, ':') + 1;
    else if (lun->store != TARGET_STORE_OTHER && (size = strstr(store, ",size=")))
        size += 6;
    lun->prealloc = lun->store == TARGET_STORE_RAM && strstr(store, ",prealloc") != NULL;
    if (!size)
        return 0;
    char text[64];
    size_t n = strcspn(size, ",");
    snprintf(text, sizeof(text), "%.*s", (int)(n < sizeof(text) ? n : sizeof(text) - 1), size);
    if (lun->store != TARGET_STORE_RAM && lun->store != TARGET_STORE_NULL) {
        size_parse(text, &lun->size); /* the store says what is wrong with it */
        return 0;
    }
    const char *type = lun->store == TARGET_STORE_RAM ? "ram" : "null";
    if (!text[0]) {
        snprintf(err, errlen, "%s: size missing", type);
        return -1;
    }
    if (size_parse(text, &lun->size) < 0) {
        snprintf(err, errlen, "%s: bad size '%s' (expected e.g. 512, 4k, 1G)", type, text);
        return -1;
    }
    if (lun->size == 0 || lun->size % SECTOR) {
        snprintf(err, errlen, "%s: size %s is not a positive multiple of 512", type, text);
        return -1;
    }
    return 0;
}

/* Split the LUN options (",ro", ",rw", ",removable", ",bs=512|4096", ",pbs=SIZE",
 * ",sanitize-rate=SIZE", ",alua=STATE", ",alua-peer=ID:STATE", the identity of
 * lun_identity.c and the caps of lun_limits.c) off a store spec; the rest
 * goes to bs_open_spec() unchanged. lun->lun and origin are left to the caller. */
int target_parse_lun_spec(const char *spec, struct target_lun_conf *lun, char *err, size_t errlen)
{
    lun->block_size = 512;
    lun->read_only = false;
    lun->removable = false;
    lun->sanitize_rate = TARGET_DEFAULT_SANITIZE_RATE;
    lun->phys_block_size = 0;
    lun->alua_state_set = false;
    lun->alua_npeers = 0;
    memset(&lun->identity, 0, sizeof(lun->identity));
    memset(&lun->limits, 0, sizeof(lun->limits));
    lun->bs_spec = NULL;
    lun->size = 0;
    if (!strchr(spec, ':')) {
        snprintf(err, errlen, "bad LUN spec '%s': expected ram:SIZE, null:SIZE or file:PATH", spec);
        return -1;
    }
    size_t len = strlen(spec);
    char *store = malloc(len + 1); /* the store's part, options kept in their order */
    if (!store) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t off = 0;
    for (const char *tok = spec; *tok;) {
        size_t n = strcspn(tok, ",");
        char one[512]; /* room for the longest option, tcmu-config= (lun_identity.c) */
        int r = 0;
        if (off && n && n < sizeof(one)) { /* the first is the store's own */
            memcpy(one, tok, n);
            one[n] = '\0';
            r = lun_opt(lun, one, spec, err, errlen);
        }
        if (r < 0) {
            free(store);
            return -1;
        }
        if (r == 0 && n) {
            if (off)
                store[off++] = ',';
            memcpy(store + off, tok, n);
            off += n;
        }
        tok += n + (tok[n] == ',');
    }
    store[off] = '\0';
    if (!off) {
        free(store);
        snprintf(err, errlen, "bad LUN spec '%s'", spec);
        return -1;
    }
    if (store_part(lun, store, err, errlen) < 0) {
        free(store);
        return -1;
    }
    lun->bs_spec = store;
    return 0;
}

int target_lun_rbd_timeout(struct target_lun_conf *l, unsigned rbd_timeout_s)
{
    if (!rbd_timeout_s || l->store != TARGET_STORE_RBD || strstr(l->bs_spec, ",timeout="))
        return 0;
    size_t len = strlen(l->bs_spec) + 32;
    char *spec = realloc(l->bs_spec, len);
    if (!spec)
        return -1;
    snprintf(spec + strlen(spec), 32, ",timeout=%u", rbd_timeout_s);
    l->bs_spec = spec;
    return 0;
}

int target_lun_open_spec(const struct target_lun_conf *l, char *buf, size_t len)
{
    /* A read-only file or rbd LUN opens its file or image read-only (the SCSI core refuses
     * the writes). */
    bool ro_store = l->store == TARGET_STORE_FILE || l->store == TARGET_STORE_RBD;
    int n = snprintf(buf, len, "%s%s", l->bs_spec, l->read_only && ro_store ? ",ro" : "");
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

void target_lun_set_size(struct target_lun_conf *l, uint64_t bytes)
{
    char size[32], *spec = l->bs_spec;
    target_size_text(bytes, size, sizeof(size));
    const char *start = NULL;
    if (l->store == TARGET_STORE_RAM || l->store == TARGET_STORE_NULL)
        start = strchr(spec, ':') + 1;
    else if ((start = strstr(spec, ",size=")))
        start += 6;
    if (!start)
        return; /* a file or image that keeps its size itself */
    const char *end = start + strcspn(start, ",");
    char *grown = NULL;
    if (asprintf(&grown, "%.*s%s%s", (int)(start - spec), spec, size, end) < 0)
        return;
    free(l->bs_spec);
    l->bs_spec = grown;
    l->size = bytes;
}

int target_lun_spec_format(const struct target_lun_conf *l, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "%s", l->bs_spec);
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (off < len)                                                                             \
            off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__);                            \
    } while (0)
    if (l->read_only)
        ADD(",ro");
    if (l->removable)
        ADD(",removable");
    if (l->block_size != 512)
        ADD(",bs=%u", l->block_size);
    if (l->phys_block_size)
        ADD(",pbs=%u", l->phys_block_size);
    if (l->sanitize_rate != TARGET_DEFAULT_SANITIZE_RATE) {
        char s[32];
        target_size_text(l->sanitize_rate, s, sizeof(s));
        ADD(",sanitize-rate=%s", s);
    }
    if (l->alua_state_set)
        ADD(",alua=%s", scsi_alua_state_name(l->alua_state));
    for (unsigned i = 0; i < l->alua_npeers; i++)
        ADD(",alua-peer=%u:%s", (unsigned)l->alua_peers[i].id,
            scsi_alua_state_name((enum scsi_alua_state)l->alua_peers[i].state));
    if (off < len && target_lun_identity_format(&l->identity, buf + off, len - off) < 0)
        off = len;
    if (off < len) {
        size_t used = strlen(buf);
        if (target_lun_limits_format(&l->limits, buf + used, len - used) < 0)
            off = len;
    }
#undef ADD
    return off < len ? 0 : -1;
}

char *target_lun_spec_dup(const struct target_lun_conf *l)
{
    /* the options and identity are bounded and short; the store spec is what may be long */
    size_t len = strlen(l->bs_spec) + 2048;
    for (;;) {
        char *buf = malloc(len);
        if (!buf || target_lun_spec_format(l, buf, len) == 0)
            return buf;
        free(buf);
        if (len > SIZE_MAX / 2)
            return NULL;
        len *= 2;
    }
}

/* Thin RAM LUNs take memory as they are written: more of them than the machine has is legal
 * (a LUN is rarely written full) but a write past memory ends in the OOM killer, not in a
 * SCSI error. Said once at start (and by --check), with the numbers. */
void target_config_warn_thin_ram(const struct target_config *cfg)
{
    uint64_t thin = 0;
    unsigned n = 0;
    for (unsigned t = 0; t < cfg->ntargets; t++)
        for (unsigned i = 0; i < cfg->targets[t].nluns; i++) {
            const struct target_lun_conf *l = &cfg->targets[t].luns[i];
            if (l->store == TARGET_STORE_RAM && !l->prealloc) {
                thin += l->size;
                n++;
            }
        }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!n || pages <= 0 || page <= 0)
        return;
    uint64_t mem = (uint64_t)pages * (uint64_t)page;
    if (thin <= mem)
        return;
    LOG_WARN("thin RAM LUN%s (%.1f GiB in all) exceed%s this machine's memory (%.1f GiB): "
             "writing %s full "
             "fails (out of memory), not with a SCSI error; use a smaller size, ,prealloc or a "
             "file: LUN",
             n == 1 ? "" : "s", (double)thin / (1 << 30), n == 1 ? "s" : "",
             (double)mem / (1 << 30), n == 1 ? "it" : "them");
}
