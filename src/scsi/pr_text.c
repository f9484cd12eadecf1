/* The reservation state as text: its escaped fields, the side-effect lines a change leaves for
 * every gateway (unit attentions, aborts), the APTPL state file (SPC-4 §5.13.5) and the mirror
 * of the shared state. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scsi/pr_text.h"
#include "util/atomic_file.h"
#include "util/log.h"

/* ---------------- the state text's fields ---------------- */

/* Initiator port names come from the peer (its login, a REGISTER AND MOVE TransportID) and go
 * into text that is split into lines and lines into fields at single spaces: the state file,
 * the shared object, its notify, the side-effect lines. So they are written with every byte
 * that could break that framing as %XX (two upper-case hex digits): a control character, a
 * space, DEL, '%' itself, and every byte of a non-ASCII character. field_get is the reverse
 * and refuses a field that is not written that way. Files written before names were escaped
 * read unchanged: a valid iSCSI name (RFC 7143 §4.2.7.2: letters, digits, '-', '.', ':', and
 * non-ASCII characters) never held a space, a control character or a '%', and the non-ASCII
 * bytes such a file may hold raw are still taken as they are. */
#define PR_LINE_MAX (3 * PR_PORT_MAX + 64) /* a line of the text, its field escaped */
#define PR_TOKENS 4                        /* fields in a line, at most */

static void field_put(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p <= ' ' || *p >= 0x7f || *p == '%')
            fprintf(f, "%%%02X", *p);
        else
            fputc(*p, f);
    }
}

static int hex_val(char c)
{
    static const char digits[] = "0123456789abcdef";
    int lc = tolower((unsigned char)c);
    const char *d = lc ? strchr(digits, lc) : NULL;
    return d ? (int)(d - digits) : -1;
}

/* One field into out: 0, or -1 when it is malformed (a bad escape, an escaped NUL, a raw
 * control character) or too long. */
static int field_get(const char *s, char *out, size_t outlen)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int c = *p;
        if (c == '%') {
            int hi = hex_val((char)p[1]), lo = hi < 0 ? -1 : hex_val((char)p[2]);
            if (lo < 0 || (hi | lo) == 0)
                return -1;
            c = hi << 4 | lo;
            p += 2;
        } else if (c <= ' ' || c == 0x7f) {
            return -1;
        }
        if (n + 1 >= outlen)
            return -1;
        out[n++] = (char)c;
    }
    if (n == 0)
        return -1;
    out[n] = '\0';
    return 0;
}

/* Splits line (changed in place) at single spaces into at most PR_TOKENS fields; their
 * count, or 0 when the line is empty, has an empty field (a leading, trailing or doubled
 * space) or too many. */
static unsigned line_split(char *line, char **tok)
{
    unsigned nt = 0;
    for (char *p = line;;) {
        char *sp = strchr(p, ' ');
        if (nt == PR_TOKENS || p == sp || !*p)
            return 0;
        tok[nt++] = p;
        if (!sp)
            return nt;
        *sp = '\0';
        p = sp + 1;
    }
}

/* A number field, all of it digits of base (no sign, no space). */
static bool num_get(const char *s, int base, uint64_t *v)
{
    if (hex_val(*s) < 0 || hex_val(*s) >= base)
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, base);
    if (*end || errno)
        return false;
    *v = x;
    return true;
}

/* A relative target port identifier field: 1 to 65535, in decimal. */
static bool tport_get(const char *s, uint16_t *tport)
{
    uint64_t v;
    if (!num_get(s, 10, &v) || v == 0 || v > UINT16_MAX)
        return false;
    *tport = (uint16_t)v;
    return true;
}

/* A nexus, as the text writes it: " PORT TPORT" (the port escaped). */
void pr_field_nexus(FILE *f, const char *port, uint16_t tport)
{
    fputc(' ', f);
    field_put(f, port);
    fprintf(f, " %u", tport);
}

/* The side effects of a change, recorded as text lines while the state is changed ("ua BITS
 * PORT TPORT", "abort PORT TPORT") and carried out once it is committed: here, and on every
 * other gateway from the notify (shared state), each for the nexuses it has. */
void pr_fx_ua(FILE *fx, const char *port, uint16_t tport, unsigned bits)
{
    fprintf(fx, "ua %u", bits);
    pr_field_nexus(fx, port, tport);
    fputc('\n', fx);
}

/* UA to every registrant nexus of ps except (port, tport). */
void pr_fx_ua_registrants(FILE *fx, const struct pr_state *ps, const char *port, uint16_t tport,
                          unsigned bits)
{
    for (unsigned i = 0; i < ps->nregs; i++)
        if (!nexus_is(ps->regs[i].port, ps->regs[i].tport, port, tport))
            pr_fx_ua(fx, ps->regs[i].port, ps->regs[i].tport, bits);
}

/* One side-effect line, split into tok[0..nt): "ua" (its bits in *bits) or "abort", and the
 * nexus. A line without the TPORT field (a gateway that names initiator ports only) gives
 * tport 0: every nexus of the port. Whether it is one. */
static bool fx_parse(char **tok, unsigned nt, uint64_t *bits, char *port, uint16_t *tport)
{
    if (nt < 2)
        return false;
    unsigned at = strcmp(tok[0], "ua") == 0 ? 2 : strcmp(tok[0], "abort") == 0 ? 1 : 0;
    if (!at || (at == 2 && (!num_get(tok[1], 10, bits) || *bits > UINT32_MAX)))
        return false;
    *tport = 0;
    if (nt == at + 2 && !tport_get(tok[at + 1], tport))
        return false;
    return (nt == at + 1 || nt == at + 2) && field_get(tok[at], port, PR_PORT_MAX) == 0;
}

/* PREEMPT AND ABORT: the tasks of the nexus (port, tport) on this LUN are aborted (as ABORT
 * TASK SET would), by the gateway whose target port it is: a gateway has at most one nexus of
 * an initiator port, and the same port through another gateway is another nexus. */
static void abort_port(struct scsi_lun *lu, const char *port, uint16_t tport,
                       struct scsi_join *join)
{
    struct scsi_target *t = lu->target;
    if (!t->abort_nexus_tasks || !pr_tport_here(lu, tport))
        return;
    struct scsi_target_priv *p = t->priv;
    struct scsi_nexus *victim = NULL;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        struct scsi_nexus_impl *n = p->nexus[s];
        if (n && n->refs > 0 && strcmp(n->pub.initiator_port, port) == 0) {
            n->refs++; /* held until the abort hook has run */
            victim = &n->pub;
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (victim) {
        t->abort_nexus_tasks(t, victim, lu, join);
        scsi_nexus_put(victim);
    }
}

/* Carry out the effect lines of text (other lines are ignored). Without lu->lock. The aborts
 * count in join (NULL: nobody waits for them). */
void pr_fx_apply(struct scsi_lun *lu, const char *text, struct scsi_join *join)
{
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        char line[PR_LINE_MAX], port[PR_PORT_MAX], *tok[PR_TOKENS];
        if (n < sizeof(line)) {
            memcpy(line, l, n);
            line[n] = '\0';
            unsigned nt = line_split(line, tok);
            uint64_t bits = 0;
            uint16_t tport;
            if (fx_parse(tok, nt, &bits, port, &tport)) {
                if (tok[0][0] == 'u')
                    pr_ua_port(lu, port, tport, (unsigned)bits);
                else
                    abort_port(lu, port, tport, join);
            }
        }
        l = nl ? nl + 1 : NULL;
    }
}

/* ---------------- APTPL state file ---------------- */

/* Text, one item a line: "linerate-pr 1", "generation N", "reservation TYPE HOLDER TPORT" or
 * "reservation TYPE -" (all registrants), "reg KEY PORT TPORT" (each PORT escaped: field_put;
 * TPORT the nexus's relative target port, in decimal); the shared object adds "aptpl 1" and
 * "spc2 PORT TPORT" (the state file has no use for them: APTPL is in force while it exists, and
 * SPC-2 reservations do not survive a restart). A malloc'd string, NULL when out of memory. */
char *pr_state_format(const struct pr_state *ps)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "linerate-pr 1\ngeneration %" PRIu32 "\n", ps->generation);
    if (ps->type) {
        fprintf(f, "reservation %u", ps->type);
        /* "-" is no port name (iSCSI's always hold ",i,0x", RFC 7143 §4.2.7.1) */
        if (type_all_reg(ps->type) || !ps->holder[0])
            fputs(" -", f);
        else
            pr_field_nexus(f, ps->holder, ps->holder_tport);
        fputc('\n', f);
    }
    if (ps->shared && ps->aptpl)
        fprintf(f, "aptpl 1\n");
    if (ps->shared && ps->spc2[0]) {
        fputs("spc2", f);
        pr_field_nexus(f, ps->spc2, ps->spc2_tport);
        fputc('\n', f);
    }
    for (unsigned i = 0; i < ps->nregs; i++) {
        fprintf(f, "reg %016" PRIx64, ps->regs[i].key);
        pr_field_nexus(f, ps->regs[i].port, ps->regs[i].tport);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The nexus fields tok[0] (PORT) and, if there is one, tok[1] (TPORT), nt of them. State
 * written before registrations named their target port has no TPORT field: such a file or
 * shared object is read as registrations through this gateway's own target port (ps->local),
 * which for a LUN of one gateway is what they were. Whether they are well formed. */
static bool state_nexus(const struct pr_state *ps, char **tok, unsigned nt, char *port,
                        uint16_t *tport)
{
    *tport = ps->local;
    return (nt == 1 || (nt == 2 && tport_get(tok[1], tport))) &&
           field_get(tok[0], port, PR_PORT_MAX) == 0;
}

/* The reverse, into ps (empty on entry; ps->local set). Lines of a notify that are not state
 * ("version", "from", effects) are skipped when `notify`. 0, or -1 with a reason in err. */
int pr_state_parse(struct pr_state *ps, const char *text, bool notify, const char *what, char *err,
                   size_t errlen)
{
    unsigned lineno = 0;
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        char line[PR_LINE_MAX], port[PR_PORT_MAX], *tok[PR_TOKENS];
        uint64_t a, b;
        uint16_t tp;
        const char *cur = l;
        lineno++;
        l = nl ? nl + 1 : NULL;
        if (n >= sizeof(line))
            goto bad;
        memcpy(line, cur, n);
        line[n] = '\0';
        if (n == 0 && lineno > 1)
            continue;
        unsigned nt = line_split(line, tok);
        const char *k = nt ? tok[0] : "";
        if (lineno == 1) {
            if (nt != 2 || strcmp(k, "linerate-pr") || strcmp(tok[1], "1"))
                goto bad;
        } else if (nt == 2 && !strcmp(k, "generation") && num_get(tok[1], 10, &a) &&
                   a <= UINT32_MAX) {
            ps->generation = (uint32_t)a;
        } else if (nt >= 3 && !strcmp(k, "reservation") && num_get(tok[1], 10, &a) &&
                   type_valid((unsigned)a) && a < 16 &&
                   state_nexus(ps, tok + 2, nt - 2, port, &tp)) {
            bool nobody = !strcmp(port, "-");
            if (nobody && nt != 3)
                goto bad;
            pr_set_holder(ps, (unsigned)a, nobody ? "" : port, nobody ? 0 : tp);
        } else if (nt >= 3 && !strcmp(k, "reg") && num_get(tok[1], 16, &a) && a &&
                   state_nexus(ps, tok + 2, nt - 2, port, &tp)) {
            if (pr_reg_add(ps, port, tp, a) < 0) {
                snprintf(err, errlen, "%s: out of memory", what);
                return -1;
            }
        } else if (ps->shared && nt == 2 && !strcmp(k, "aptpl") && !strcmp(tok[1], "1")) {
            ps->aptpl = true;
        } else if (ps->shared && nt >= 2 && !strcmp(k, "spc2") &&
                   state_nexus(ps, tok + 1, nt - 1, port, &tp)) {
            snprintf(ps->spc2, sizeof(ps->spc2), "%s", port);
            ps->spc2_tport = tp;
        } else if (notify && ((nt == 2 && !strcmp(k, "version") && num_get(tok[1], 10, &a)) ||
                              (nt == 2 && !strcmp(k, "from") && num_get(tok[1], 16, &a)) ||
                              fx_parse(tok, nt, &b, port, &tp))) {
            /* the notify's own lines */
        } else {
            goto bad;
        }
        continue;
    bad:
        snprintf(err, errlen, "%s line %u: not a persistent reservation state line", what, lineno);
        return -1;
    }
    if (ps->type && !type_all_reg(ps->type) && pr_reg_find(ps, ps->holder, ps->holder_tport) < 0) {
        snprintf(err, errlen, "%s: reservation holder %s is not registered", what, ps->holder);
        return -1;
    }
    if (ps->type && ps->nregs == 0)
        ps->type = 0;
    return 0;
}

/* Replaced whole or not at all (atomic_file.h: a fresh temporary file, synced, renamed over
 * the old one, the directory synced), mode 0600: a crash leaves the old state or the new one.
 * 0 or -errno. */
static int state_save(const struct pr_state *ps)
{
    char *text = pr_state_format(ps);
    if (!text)
        return -ENOMEM;
    int rc = atomic_file_write(ps->path, text, strlen(text), 0600);
    free(text);
    return rc;
}

/* After every change: keep the file in step while APTPL is in force; once nothing is
 * registered APTPL ends and the file goes (SPC-4 §5.13.5). 0, or -errno when the file could
 * not be brought in step (it then holds the state from before the change: state_save replaces
 * it whole or not at all). */
int pr_state_persist(struct pr_state *ps, bool was_aptpl)
{
    if (!ps->path)
        return 0;
    if (ps->nregs == 0)
        ps->aptpl = false;
    int rc = 0;
    if (ps->aptpl)
        rc = state_save(ps);
    else if (was_aptpl && unlink(ps->path) != 0 && errno != ENOENT)
        rc = -errno;
    if (rc < 0)
        LOG_WARN("persistent reservations: cannot update %s: %s", ps->path, strerror(-rc));
    return rc;
}

/* The state's own fields beside its registrations: what a snapshot holds and the shared
 * object stores. */
static void fields_copy(struct pr_state *dst, const struct pr_state *src)
{
    dst->generation = src->generation;
    dst->type = src->type;
    dst->aptpl = src->aptpl;
    memcpy(dst->holder, src->holder, sizeof(dst->holder));
    dst->holder_tport = src->holder_tport;
    memcpy(dst->spc2, src->spc2, sizeof(dst->spc2));
    dst->spc2_tport = src->spc2_tport;
}

/* dst takes src's registrations (src is left with none) and its fields. */
static void state_take(struct pr_state *dst, struct pr_state *src)
{
    free(dst->regs);
    dst->regs = src->regs;
    dst->nregs = src->nregs;
    dst->cap = src->cap;
    src->regs = NULL;
    src->nregs = src->cap = 0;
    fields_copy(dst, src);
}

/* A copy of the state proper (not the fields after it) into a zeroed snap, to put back a
 * change that could not be saved; -ENOMEM. */
int pr_state_snapshot(struct pr_state *snap, const struct pr_state *ps)
{
    if (ps->nregs) {
        snap->regs = malloc(ps->nregs * sizeof(*ps->regs));
        if (!snap->regs)
            return -ENOMEM;
        memcpy(snap->regs, ps->regs, ps->nregs * sizeof(*ps->regs));
    }
    snap->nregs = snap->cap = ps->nregs;
    fields_copy(snap, ps);
    return 0;
}

/* Put snap back into ps (snap's registrations move there). */
void pr_state_restore(struct pr_state *ps, struct pr_state *snap)
{
    state_take(ps, snap);
}

int pr_state_load(struct pr_state *ps, char *err, size_t errlen)
{
    atomic_file_sweep(ps->path); /* what a save cut by a crash left beside it */
    FILE *f = fopen(ps->path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: %s", ps->path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, '\0', f);
    fclose(f);
    int rc = pr_state_parse(ps, n > 0 ? text : "", false, ps->path, err, errlen);
    free(text);
    ps->aptpl = rc == 0 && ps->nregs > 0;
    return rc;
}

/* ---------------- shared state: the mirror and the cluster ---------------- */

void pr_state_clear(struct pr_state *ps)
{
    free(ps->regs);
    ps->regs = NULL;
    ps->nregs = ps->cap = 0;
    ps->generation = 0;
    ps->type = 0;
    ps->holder[0] = ps->spc2[0] = '\0';
    ps->holder_tport = ps->spc2_tport = 0;
    ps->aptpl = false;
}

/* Move the state of src (a fresh copy read from the cluster or a notify, at version ver) into
 * the LUN's mirror if it is newer than what the mirror holds. With lu->lock. */
void pr_mirror_install(struct scsi_lun *lu, struct pr_state *src, uint64_t ver)
{
    struct pr_state *ps = lu->pr;
    if (ver < ps->version || (ver == ps->version && !ps->stale))
        return;
    state_take(ps, src);
    ps->version = ver;
    ps->stale = false;
    pr_resv_update(lu);
}
