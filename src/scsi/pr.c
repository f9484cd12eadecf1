/* Reservations of a logical unit: SPC-4 persistent reservations (PERSISTENT RESERVE IN/OUT,
 * registrations keyed by I_T nexus: initiator port name and relative target port identifier,
 * the TPGT of the gateway the command came through; one initiator port through two gateways
 * is two nexuses, registered, holding and preempted each on its own), the APTPL state file that
 * carries them across restarts, SPC-2 RESERVE/RELEASE, and the conflict check scsi_task_setup makes
 * for every command while anything is reserved.
 *
 * Shared state (a store with obj_* ops: an RBD image that several gateways export). The state
 * then lives in the cluster, in one object next to the image ("<image>.linerate-pr", the text
 * format of the APTPL file plus "aptpl" and "spc2" lines), and each gateway keeps a mirror of
 * it in lu->pr that the conflict check reads, so a READ or WRITE costs nothing more than on a
 * RAM LUN. A change (PERSISTENT RESERVE OUT, RESERVE, RELEASE, the SPC-2 release on nexus loss
 * or reset) runs on the SCSI core's helper thread (offload.c), never on a reactor: read the
 * object and its version, apply the service action to that fresh copy, write it back only if
 * the version is still the one read (compare and swap in the OSD; on a race, start over), then
 * notify the object's watchers with the new state, its version and the side effects (unit
 * attentions, PREEMPT AND ABORT's victims) and wait until every gateway has acknowledged. Each
 * gateway's watch installs the state into its mirror (newer versions only) and raises the unit
 * attentions / aborts the tasks of its own nexuses before it acknowledges; only then does the
 * command complete. So once an initiator has been told its reservation is taken, every gateway
 * that answered the notify refuses conflicting commands. A gateway that does not answer within
 * PR_NOTIFY_TIMEOUT_MS (dead or cut off) is logged; its own watch breaks, and until it has
 * re-read the object it refuses every command that the reservation rules check (ABORTED
 * COMMAND / TIMEOUT ON LOGICAL UNIT, which initiators retry) rather than act on a stale copy.
 * PERSISTENT RESERVE IN re-reads the object first. The state outlives any one gateway: it belongs
 * to the image, as the registrations of a disk belong to the disk (PTPL_C is reported; APTPL is
 * recorded). The same watch carries resets ("event reset", pr_tell_reset): a LOGICAL UNIT
 * RESET or target reset through one gateway raises its unit attention on the nexuses of every
 * other gateway, which acknowledge only once they did (target.c, scsi_lun_reset_elsewhere). */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scsi/scsi_internal.h"
#include "util/atomic_file.h"
#include "util/bytes.h"
#include "util/log.h"

#define PR_PORT_MAX 256 /* sizeof(struct scsi_nexus.initiator_port) */

/* SPC-4 §6.15.3 table 171: persistent reservation types */
enum {
    PR_WE = 1,
    PR_EA = 3,
    PR_WE_RO = 5,
    PR_EA_RO = 6,
    PR_WE_AR = 7,
    PR_EA_AR = 8,
};

/* PERSISTENT RESERVE OUT service actions (SPC-4 §6.16.2) */
enum {
    PRO_REGISTER,
    PRO_RESERVE,
    PRO_RELEASE,
    PRO_CLEAR,
    PRO_PREEMPT,
    PRO_PREEMPT_ABORT,
    PRO_REGISTER_IGNORE,
    PRO_REGISTER_MOVE,
};

struct pr_reg {
    uint64_t key;
    char port[PR_PORT_MAX]; /* as the transport names it (scsi_transport.port_name) */
    uint16_t tport;         /* relative target port identifier (ALL_TG_PT is not supported) */
};

struct pr_state {
    struct pr_reg *regs;
    unsigned nregs, cap;
    uint32_t generation;      /* PRGENERATION (SPC-4 §6.15.2) */
    uint8_t type;             /* PR_*; 0: no persistent reservation */
    char holder[PR_PORT_MAX]; /* holder's port; unused for all-registrants types */
    uint16_t holder_tport;    /* and its relative target port */
    bool aptpl;               /* activate persist through power loss is in force */
    char spc2[PR_PORT_MAX];   /* SPC-2 RESERVE holder; "" when none */
    uint16_t spc2_tport;      /* and its relative target port */
    /* not part of the state itself: */
    uint16_t local;     /* this gateway's relative target port: state text without one */
    char *path;         /* APTPL state file; NULL: none */
    bool ptpl_c;        /* APTPL can be honoured (a state file or the shared object) */
    bool shared;        /* the state lives in the store's shared object (see the top) */
    bool stale;         /* shared: the watch broke; the mirror may be behind until re-read */
    uint64_t version;   /* shared: the object version the mirror holds */
    uint64_t token;     /* shared: names this gateway in its notifies */
    unsigned jobs;      /* shared: helper-thread jobs in flight (lu->lock) */
    bool closing;       /* shared: pr_lun_drain waits; a failing re-read stops retrying */
    bool reload_queued; /* shared: a re-read job waits for the helper thread */
    pthread_cond_t idle;
};

/* How long a change waits for every gateway to acknowledge it. */
#define PR_NOTIFY_TIMEOUT_MS 10000
/* How long a reset waits for the other gateways (the TMF response waits with it); a gateway
 * that does not answer is dead or cut off, and so are its nexuses. */
#define PR_RESET_NOTIFY_TIMEOUT_MS 5000
/* Compare-and-swap attempts before a change gives up (ABORTED COMMAND: the initiator retries). */
#define PR_CAS_TRIES 64

static bool type_valid(unsigned type)
{
    return type == PR_WE || type == PR_EA || (type >= PR_WE_RO && type <= PR_EA_AR);
}

static bool type_all_reg(unsigned type)
{
    return type == PR_WE_AR || type == PR_EA_AR;
}

static bool type_reg_only(unsigned type)
{
    return type == PR_WE_RO || type == PR_EA_RO;
}

static bool type_excl_access(unsigned type)
{
    return type == PR_EA || type == PR_EA_RO || type == PR_EA_AR;
}

static const char *nexus_port(const struct scsi_task *t)
{
    return t->nexus ? t->nexus->initiator_port : "";
}

/* The relative target port identifier of a gateway: its TPGT, as VPD 0x83 reports it. */
static uint16_t rel_port(const struct scsi_target *tg)
{
    return tg->tpgt ? tg->tpgt : 1;
}

/* Whether (port, tport) and (port2, tport2) name the same I_T nexus. */
static bool nexus_is(const char *port, uint16_t tport, const char *port2, uint16_t tport2)
{
    return tport == tport2 && strcmp(port, port2) == 0;
}

static int reg_find(const struct pr_state *ps, const char *port, uint16_t tport)
{
    for (unsigned i = 0; i < ps->nregs; i++)
        if (nexus_is(ps->regs[i].port, ps->regs[i].tport, port, tport))
            return (int)i;
    return -1;
}

static bool is_holder(const struct pr_state *ps, const char *port, uint16_t tport)
{
    if (!ps->type)
        return false;
    if (type_all_reg(ps->type)) /* every registrant nexus holds it (SPC-4 §5.13.10) */
        return reg_find(ps, port, tport) >= 0;
    return nexus_is(ps->holder, ps->holder_tport, port, tport);
}

/* A reservation of type for the nexus (port, tport): nobody in particular for the
 * all-registrants types. */
static void set_holder(struct pr_state *ps, unsigned type, const char *port, uint16_t tport)
{
    ps->type = (uint8_t)type;
    snprintf(ps->holder, sizeof(ps->holder), "%s", type_all_reg(type) ? "" : port);
    ps->holder_tport = type_all_reg(type) ? 0 : tport;
}

static int reg_add(struct pr_state *ps, const char *port, uint16_t tport, uint64_t key)
{
    if (ps->nregs == ps->cap) {
        unsigned cap = ps->cap ? ps->cap * 2 : 8;
        struct pr_reg *r = realloc(ps->regs, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        ps->regs = r;
        ps->cap = cap;
    }
    struct pr_reg *r = &ps->regs[ps->nregs++];
    r->key = key;
    snprintf(r->port, sizeof(r->port), "%s", port);
    r->tport = tport;
    return 0;
}

/* Drops registration i. The reservation goes with its holder's registration, or with the last
 * registration of an all-registrants type (SPC-4 §5.13.11.2.3). Returns whether it went. */
static bool reg_remove(struct pr_state *ps, unsigned i)
{
    bool released = false;
    if (ps->type && !type_all_reg(ps->type) &&
        nexus_is(ps->holder, ps->holder_tport, ps->regs[i].port, ps->regs[i].tport))
        released = true;
    ps->regs[i] = ps->regs[--ps->nregs];
    if (ps->type && type_all_reg(ps->type) && ps->nregs == 0)
        released = true;
    if (released)
        ps->type = 0;
    return released;
}

static void resv_update(struct scsi_lun *lu)
{
    const struct pr_state *ps = lu->pr;
    /* a stale mirror sends every command through pr_check, which refuses them */
    unsigned v = (ps->spc2[0] ? RESV_SPC2 : 0) | (ps->type || ps->stale ? RESV_PR : 0) |
                 (ps->nregs ? RESV_REGS : 0);
    atomic_store_explicit(&lu->resv, v, memory_order_release);
}

/* Whether the nexus (port, tport) can be one of this gateway's: tport is its own, or 0 (a
 * notify from a gateway that names initiator ports only: every nexus of the port). */
static bool tport_here(const struct scsi_lun *lu, uint16_t tport)
{
    return !tport || tport == rel_port(lu->target);
}

/* Unit attention to the nexus (port, tport), if it exists here (registrations outlive
 * sessions; a port that never logged in since a restart has nothing to report to; another
 * gateway's target port is that gateway's to tell). */
static void ua_port(struct scsi_lun *lu, const char *port, uint16_t tport, unsigned bits)
{
    struct scsi_target *t = lu->target;
    struct scsi_target_priv *p = t->priv;
    if (!tport_here(lu, tport))
        return;
    pthread_mutex_lock(&t->lock);
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        if (p->nexus[s] && strcmp(p->nexus[s]->pub.initiator_port, port) == 0) {
            scsi_ua_raise(lu, s, bits);
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

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
static void nexus_put(FILE *f, const char *port, uint16_t tport)
{
    fputc(' ', f);
    field_put(f, port);
    fprintf(f, " %u", tport);
}

/* The side effects of a change, recorded as text lines while the state is changed ("ua BITS
 * PORT TPORT", "abort PORT TPORT") and carried out once it is committed: here, and on every
 * other gateway from the notify (shared state), each for the nexuses it has. */
static void fx_ua(FILE *fx, const char *port, uint16_t tport, unsigned bits)
{
    fprintf(fx, "ua %u", bits);
    nexus_put(fx, port, tport);
    fputc('\n', fx);
}

/* UA to every registrant nexus of ps except (port, tport). */
static void fx_ua_registrants(FILE *fx, const struct pr_state *ps, const char *port, uint16_t tport,
                              unsigned bits)
{
    for (unsigned i = 0; i < ps->nregs; i++)
        if (!nexus_is(ps->regs[i].port, ps->regs[i].tport, port, tport))
            fx_ua(fx, ps->regs[i].port, ps->regs[i].tport, bits);
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
    if (!t->abort_nexus_tasks || !tport_here(lu, tport))
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
static void fx_apply(struct scsi_lun *lu, const char *text, struct scsi_join *join)
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
                    ua_port(lu, port, tport, (unsigned)bits);
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
static char *state_format(const struct pr_state *ps)
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
            nexus_put(f, ps->holder, ps->holder_tport);
        fputc('\n', f);
    }
    if (ps->shared && ps->aptpl)
        fprintf(f, "aptpl 1\n");
    if (ps->shared && ps->spc2[0]) {
        fputs("spc2", f);
        nexus_put(f, ps->spc2, ps->spc2_tport);
        fputc('\n', f);
    }
    for (unsigned i = 0; i < ps->nregs; i++) {
        fprintf(f, "reg %016" PRIx64, ps->regs[i].key);
        nexus_put(f, ps->regs[i].port, ps->regs[i].tport);
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
static int state_parse(struct pr_state *ps, const char *text, bool notify, const char *what,
                       char *err, size_t errlen)
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
            set_holder(ps, (unsigned)a, nobody ? "" : port, nobody ? 0 : tp);
        } else if (nt >= 3 && !strcmp(k, "reg") && num_get(tok[1], 16, &a) && a &&
                   state_nexus(ps, tok + 2, nt - 2, port, &tp)) {
            if (reg_add(ps, port, tp, a) < 0) {
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
    if (ps->type && !type_all_reg(ps->type) && reg_find(ps, ps->holder, ps->holder_tport) < 0) {
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
    char *text = state_format(ps);
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
static int state_persist(struct pr_state *ps, bool was_aptpl)
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

/* A copy of the state proper (not the fields after it) into a zeroed snap, to put back a
 * change that could not be saved; -ENOMEM. */
static int state_snapshot(struct pr_state *snap, const struct pr_state *ps)
{
    if (ps->nregs) {
        snap->regs = malloc(ps->nregs * sizeof(*ps->regs));
        if (!snap->regs)
            return -ENOMEM;
        memcpy(snap->regs, ps->regs, ps->nregs * sizeof(*ps->regs));
    }
    snap->nregs = snap->cap = ps->nregs;
    snap->generation = ps->generation;
    snap->type = ps->type;
    snap->aptpl = ps->aptpl;
    memcpy(snap->holder, ps->holder, sizeof(snap->holder));
    snap->holder_tport = ps->holder_tport;
    memcpy(snap->spc2, ps->spc2, sizeof(snap->spc2));
    snap->spc2_tport = ps->spc2_tport;
    return 0;
}

/* Put snap back into ps (snap's registrations move there). */
static void state_restore(struct pr_state *ps, struct pr_state *snap)
{
    free(ps->regs);
    ps->regs = snap->regs;
    ps->nregs = snap->nregs;
    ps->cap = snap->cap;
    snap->regs = NULL;
    ps->generation = snap->generation;
    ps->type = snap->type;
    ps->aptpl = snap->aptpl;
    memcpy(ps->holder, snap->holder, sizeof(ps->holder));
    ps->holder_tport = snap->holder_tport;
    memcpy(ps->spc2, snap->spc2, sizeof(ps->spc2));
    ps->spc2_tport = snap->spc2_tport;
}

static int state_load(struct pr_state *ps, char *err, size_t errlen)
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
    int rc = state_parse(ps, n > 0 ? text : "", false, ps->path, err, errlen);
    free(text);
    ps->aptpl = rc == 0 && ps->nregs > 0;
    return rc;
}

/* ---------------- shared state: the mirror and the cluster ---------------- */

static void state_clear(struct pr_state *ps)
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
static void mirror_install(struct scsi_lun *lu, struct pr_state *src, uint64_t ver)
{
    struct pr_state *ps = lu->pr;
    if (ver < ps->version || (ver == ps->version && !ps->stale))
        return;
    free(ps->regs);
    ps->regs = src->regs;
    ps->nregs = src->nregs;
    ps->cap = src->cap;
    src->regs = NULL;
    src->nregs = src->cap = 0;
    ps->generation = src->generation;
    ps->type = src->type;
    memcpy(ps->holder, src->holder, sizeof(ps->holder));
    ps->holder_tport = src->holder_tport;
    ps->aptpl = src->aptpl;
    memcpy(ps->spc2, src->spc2, sizeof(ps->spc2));
    ps->spc2_tport = src->spc2_tport;
    ps->version = ver;
    ps->stale = false;
    resv_update(lu);
}

/* ---------------- jobs: a change of the state, local or through the cluster ---------------- */

enum pr_kind {
    PRJ_OUT,       /* PERSISTENT RESERVE OUT */
    PRJ_RESERVE,   /* SPC-2 RESERVE */
    PRJ_RELEASE,   /* SPC-2 RELEASE */
    PRJ_SPC2_DROP, /* SPC-2 reservation ends: nexus loss (port), reset ("") */
    PRJ_IN,        /* PERSISTENT RESERVE IN: re-read the shared state first */
    PRJ_RELOAD,    /* the watch broke: re-arm it and re-read */
    PRJ_RESET,     /* a reset here: the other gateways raise its unit attention too */
};

/* A PERSISTENT RESERVE OUT answers once the tasks its PREEMPT AND ABORT aborted are marked
 * (join) and have left the store (w): SPC-4 §5.13.11.2.5 with SAM-5 §7.1, no aborted command
 * may change the medium after the preemption's status. */
struct pr_aborts {
    struct scsi_join join; /* 1 for the answer itself, + 1 per nexus whose tasks are aborted */
    struct scsi_wait w;
    struct reactor *r; /* the task's */
    struct reactor_msg msg;
    struct scsi_task *t;
    scsi_sr sr;
};

struct pr_job {
    struct scsi_offload off;
    struct pr_aborts *aborts; /* a PR OUT command's, until its answer is handed to it */
    struct scsi_lun *lu;
    struct scsi_task *t; /* NULL: no command waits for this one */
    enum pr_kind kind;
    char port[PR_PORT_MAX]; /* the sender's initiator port */
    uint16_t tport;         /* and the relative target port it came through */
    scsi_sr sr;
    int err;     /* the cluster's answer, PRJ_RELOAD */
    unsigned ua; /* PRJ_RESET: the reset's UA_* bit */
    /* PRJ_RESET: called on the submitting reactor once the job is done (NULL: nobody waits) */
    void (*cb)(void *arg);
    void *cb_arg;
};

static scsi_sr prout_apply(struct scsi_task *t, struct pr_state *ps, FILE *fx);

/* Whether the SPC-2 reservation is held by the nexus (port, tport). */
static bool spc2_holds(const struct pr_state *ps, const char *port, uint16_t tport)
{
    return ps->spc2[0] && nexus_is(ps->spc2, ps->spc2_tport, port, tport);
}

/* SPC-2 RESERVE: conflicts with any persistent registration or another holder nexus. */
static scsi_sr spc2_reserve(struct pr_state *ps, const char *me, uint16_t tport)
{
    if (ps->nregs || ps->type || (ps->spc2[0] && !spc2_holds(ps, me, tport)))
        return SR_RESERVATION_CONFLICT;
    snprintf(ps->spc2, sizeof(ps->spc2), "%s", me);
    ps->spc2_tport = tport;
    return SR_OK;
}

/* Releasing a reservation held by someone else, or none, is a successful no-op (SPC-2 §7.23). */
static scsi_sr spc2_release(struct pr_state *ps, const char *me, uint16_t tport)
{
    if (ps->nregs || ps->type)
        return SR_RESERVATION_CONFLICT;
    if (spc2_holds(ps, me, tport))
        ps->spc2[0] = '\0';
    return SR_OK;
}

/* The change a job makes, applied to ps (the mirror, or a fresh copy from the cluster), its
 * side effects written to fx. */
static scsi_sr job_apply(struct pr_job *j, struct pr_state *ps, FILE *fx)
{
    scsi_sr sr = SR_OK;
    switch (j->kind) {
    case PRJ_OUT:
        sr = prout_apply(j->t, ps, fx);
        break;
    case PRJ_RESERVE:
        sr = spc2_reserve(ps, j->port, j->tport);
        break;
    case PRJ_RELEASE:
        sr = spc2_release(ps, j->port, j->tport);
        break;
    case PRJ_SPC2_DROP:
        if (!j->port[0] || spc2_holds(ps, j->port, j->tport))
            ps->spc2[0] = '\0';
        break;
    default:
        break;
    }
    /* APTPL ends with the last registration (SPC-4 §5.13.5); state_persist sees to it for the
     * state file */
    if (ps->shared && ps->nregs == 0)
        ps->aptpl = false;
    return sr;
}

/* In memory (RAM and file LUNs): under the LUN lock, the APTPL file kept in step; the side
 * effects once the lock is dropped. A command's change that the file cannot be brought in step
 * with is undone and refused: it must not be reported done and then be gone after a power loss
 * (SPC-4 §5.13.5). Nothing in SPC-4 names this failure; the device server could not keep its
 * nonvolatile state, which is HARDWARE ERROR (SPC-4 §4.5.6), INTERNAL TARGET FAILURE. A change
 * no command asked for (the SPC-2 release on a reset or nexus loss) touches nothing saved. */
static scsi_sr job_local(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct pr_state *ps = lu->pr;
    char *fxt = NULL;
    size_t fxlen = 0;
    struct pr_state snap = {0};
    FILE *fx = open_memstream(&fxt, &fxlen);
    if (!fx)
        return SR_INSUFFICIENT_RESOURCES;
    pthread_mutex_lock(&lu->lock);
    if (ps->path && j->t && state_snapshot(&snap, ps) < 0) {
        pthread_mutex_unlock(&lu->lock);
        fclose(fx);
        free(fxt);
        return SR_INSUFFICIENT_RESOURCES;
    }
    bool was_aptpl = ps->aptpl;
    uint32_t gen = ps->generation;
    uint8_t type = ps->type;
    scsi_sr sr = job_apply(j, ps, fx);
    bool undone = false;
    if ((ps->generation != gen || ps->type != type || ps->aptpl != was_aptpl) &&
        state_persist(ps, was_aptpl) < 0 && j->t) {
        state_restore(ps, &snap);
        /* the new file may be in place all the same (its directory could not be synced):
         * put the state the initiators keep being told of back, as far as it goes */
        state_persist(ps, true);
        sr = SR_INTERNAL_FAILURE;
        undone = true; /* and its side effects with it */
    }
    resv_update(lu);
    pthread_mutex_unlock(&lu->lock);
    free(snap.regs);
    if (fclose(fx) == 0 && !undone)
        fx_apply(lu, fxt, j->aborts ? &j->aborts->join : NULL);
    free(fxt);
    return sr;
}

static scsi_sr cluster_sr(int err)
{
    if (err == -ETIMEDOUT)
        return SR_LU_TIMEOUT; /* ABORTED COMMAND: the initiator retries */
    if (err == -ESHUTDOWN)
        return SR_NOT_READY_MANUAL; /* blocklisted (bs_rbd.c) */
    return SR_INTERNAL_FAILURE;
}

/* Read the shared object into a fresh state (shared, PTPL capable). 0 or -errno. */
static int shared_read(struct scsi_lun *lu, struct pr_state *fresh, uint64_t *ver)
{
    struct bs *bs = lu->bs;
    char *buf = NULL;
    size_t len = 0;
    *fresh = (struct pr_state){.shared = true, .ptpl_c = true, .local = lu->pr->local};
    int ret = bs->ops->obj_read(bs, "pr", &buf, &len, ver);
    if (ret < 0)
        return ret;
    char err[PR_PORT_MAX + 64];
    ret = state_parse(fresh, buf ? buf : "", false, "shared reservation state", err, sizeof(err));
    free(buf);
    if (ret < 0) {
        LOG_ERR("LUN %" PRIu64 " (%s): %s", lu->id, bs->desc, err);
        state_clear(fresh);
        return -EBADMSG;
    }
    return 0;
}

/* On the helper thread: the compare-and-swap loop and the notify (see the top of the file). */
static void shared_commit(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct bs *bs = lu->bs;
    for (unsigned tries = 0; tries < PR_CAS_TRIES; tries++) {
        struct pr_state fresh;
        uint64_t ver;
        int ret = shared_read(lu, &fresh, &ver);
        if (ret < 0) {
            j->sr = cluster_sr(ret);
            return;
        }
        char *before = state_format(&fresh), *fxt = NULL, *after = NULL, *note = NULL;
        size_t fxlen = 0, notelen = 0;
        FILE *fx = before ? open_memstream(&fxt, &fxlen) : NULL;
        if (fx) {
            j->sr = job_apply(j, &fresh, fx);
            if (fclose(fx) == 0)
                after = state_format(&fresh);
        }
        uint64_t nv = ver;
        bool retry = false, ok = false;
        if (!after) {
            j->sr = SR_INSUFFICIENT_RESOURCES;
        } else if (strcmp(before, after) != 0) {
            ret = bs->ops->obj_write(bs, "pr", after, strlen(after), ver, &nv);
            if (ret == -ECANCELED)
                retry = true; /* another gateway changed it first: start over */
            else if (ret < 0)
                j->sr = cluster_sr(ret);
            else
                ok = true;
        } else {
            ok = true; /* nothing changed (a refusal, a no-op): nothing to write */
        }
        if (ok) {
            pthread_mutex_lock(&lu->lock);
            uint64_t token = lu->pr->token;
            mirror_install(lu, &fresh, nv);
            pthread_mutex_unlock(&lu->lock);
            fx_apply(lu, fxt, j->aborts ? &j->aborts->join : NULL);
            if (nv != ver) {
                /* the new state, its version, who sent it and the side effects: every
                 * gateway installs it and acts before it acknowledges */
                FILE *f = open_memstream(&note, &notelen);
                if (f) {
                    fprintf(f, "%sversion %" PRIu64 "\nfrom %" PRIx64 "\n%s", after, nv, token,
                            fxt);
                    if (fclose(f) != 0) {
                        free(note);
                        note = NULL;
                    }
                }
                ret = note ? bs->ops->obj_notify(bs, "pr", note, strlen(note), PR_NOTIFY_TIMEOUT_MS)
                           : -ENOMEM;
                if (ret < 0)
                    LOG_WARN("LUN %" PRIu64 " (%s): reservation change %" PRIu64
                             " committed, but not every gateway acknowledged it: %s",
                             lu->id, bs->desc, nv, strerror(-ret));
            }
        }
        state_clear(&fresh);
        free(before);
        free(after);
        free(fxt);
        free(note);
        if (!retry)
            return;
    }
    LOG_WARN("LUN %" PRIu64 " (%s): reservation change lost %u races in a row: giving up", lu->id,
             bs->desc, PR_CAS_TRIES);
    j->sr = SR_LU_TIMEOUT;
}

static void pr_notified(void *arg, const void *buf, size_t len, int err);

/* On the helper thread: a reset through this gateway, told to every other gateway of the LU
 * on the object's watch ("event reset BITS", who sent it), which raise the unit attention
 * for their own nexuses before they acknowledge. Nothing is written: a reset changes no
 * reservation state but the SPC-2 one, which spc2_drop commits before (same thread, in
 * order). */
static void shared_tell_reset(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    struct bs *bs = lu->bs;
    char note[96];
    int n =
        snprintf(note, sizeof(note), "event reset %u\nfrom %" PRIx64 "\n", j->ua, lu->pr->token);
    int ret = bs->ops->obj_notify(bs, "pr", note, (size_t)n, PR_RESET_NOTIFY_TIMEOUT_MS);
    if (ret < 0)
        LOG_WARN("LUN %" PRIu64 " (%s): reset, but not every other gateway acknowledged it: "
                 "%s",
                 lu->id, bs->desc, strerror(-ret));
}

static void job_work(struct scsi_offload *o)
{
    struct pr_job *j = (struct pr_job *)o;
    struct scsi_lun *lu = j->lu;
    if (j->kind == PRJ_RESET) {
        shared_tell_reset(j);
        return;
    }
    if (j->kind == PRJ_IN || j->kind == PRJ_RELOAD) {
        int ret = 0;
        if (j->kind == PRJ_RELOAD) {
            pthread_mutex_lock(&lu->lock);
            lu->pr->reload_queued = false;
            pthread_mutex_unlock(&lu->lock);
            ret = lu->bs->ops->obj_watch(lu->bs, "pr", pr_notified, lu);
        }
        struct pr_state fresh;
        uint64_t ver = 0;
        if (ret == 0)
            ret = shared_read(lu, &fresh, &ver);
        if (ret == 0) {
            pthread_mutex_lock(&lu->lock);
            mirror_install(lu, &fresh, ver);
            pthread_mutex_unlock(&lu->lock);
            state_clear(&fresh);
        }
        j->err = ret;
        j->sr = ret < 0 ? cluster_sr(ret) : SR_OK;
        return;
    }
    shared_commit(j);
}

static uint8_t *prin_build(struct scsi_task *t, uint32_t *len);
static void job_submit(struct pr_job *j);

static void aborts_answer(void *arg)
{
    struct pr_aborts *a = arg;
    scsi_task_complete(a->t, a->sr);
    free(a);
}

/* On the task's reactor, every abort marked: the wait for the store. A command aborted itself
 * meanwhile answers nothing, and waits for nothing. */
static void aborts_quiesce(void *arg)
{
    struct pr_aborts *a = arg;
    a->w.fn = aborts_answer;
    a->w.arg = a;
    if (scsi_task_commit(a->t) && scsi_lun_quiesce(a->t->lu, &a->w))
        return;
    aborts_answer(a);
}

static void aborts_marked(struct scsi_join *join)
{
    struct pr_aborts *a = (struct pr_aborts *)join;
    if (a->r)
        reactor_post(a->r, &a->msg, aborts_quiesce, a);
    else
        aborts_quiesce(a);
}

/* The answer sr to a PR OUT job's command, given once its aborts are done. */
static void job_answer(struct pr_job *j, scsi_sr sr)
{
    struct pr_aborts *a = j->aborts;
    j->aborts = NULL;
    a->sr = sr;
    a->r = reactor_self();
    scsi_join_done(&a->join);
}

static void job_done(struct scsi_offload *o)
{
    struct pr_job *j = (struct pr_job *)o;
    struct scsi_lun *lu = j->lu;
    struct pr_state *ps = lu->pr;
    if (j->kind == PRJ_RELOAD && j->err == -ESHUTDOWN) {
        /* fenced meanwhile: the store refuses everything; a stale mirror no longer matters */
        pthread_mutex_lock(&lu->lock);
        ps->stale = false;
        resv_update(lu);
        pthread_mutex_unlock(&lu->lock);
    } else if (j->kind == PRJ_RELOAD && j->err < 0 && !ps->closing) {
        /* still cut off from the cluster: try again in a second (the mirror stays stale, so
         * the LUN refuses what the reservation rules check) */
        LOG_WARN("LUN %" PRIu64 " (%s): cannot re-read the reservation state: %s", lu->id,
                 lu->bs->desc, strerror(-j->err));
        sleep(1);
        scsi_offload_submit(&j->off);
        return;
    }
    if (j->t && j->kind == PRJ_IN && !j->sr) {
        uint32_t len = 0;
        pthread_mutex_lock(&lu->lock);
        uint8_t *d = prin_build(j->t, &len);
        pthread_mutex_unlock(&lu->lock);
        if (d) {
            scsi_task_put_data(j->t, d, len);
            free(d);
        } else {
            scsi_task_complete(j->t, SR_INSUFFICIENT_RESOURCES);
        }
    } else if (j->aborts) {
        job_answer(j, j->sr);
    } else if (j->t) {
        scsi_task_complete(j->t, j->sr);
    }
    if (j->cb)
        j->cb(j->cb_arg);
    free(j);
    pthread_mutex_lock(&lu->lock);
    if (--ps->jobs == 0)
        pthread_cond_broadcast(&ps->idle);
    pthread_mutex_unlock(&lu->lock);
}

/* Run a job: on the helper thread for shared state, right here otherwise. */
static void job_submit(struct pr_job *j)
{
    struct scsi_lun *lu = j->lu;
    if (!lu->pr->shared) {
        scsi_sr sr = job_local(j);
        if (j->aborts)
            job_answer(j, sr);
        else if (j->t)
            scsi_task_complete(j->t, sr);
        free(j);
        return;
    }
    pthread_mutex_lock(&lu->lock);
    lu->pr->jobs++;
    pthread_mutex_unlock(&lu->lock);
    j->off.work = job_work;
    j->off.done = job_done;
    j->off.detached = !j->t && !j->cb; /* nobody to answer: never block the caller */
    scsi_offload_submit(&j->off);
}

/* A job for the nexus (port, this gateway's target port). */
static struct pr_job *job_new(struct scsi_lun *lu, struct scsi_task *t, enum pr_kind kind,
                              const char *port)
{
    struct pr_job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    if (t && kind == PRJ_OUT) {
        j->aborts = calloc(1, sizeof(*j->aborts));
        if (!j->aborts) {
            free(j);
            return NULL;
        }
        atomic_init(&j->aborts->join.n, 1);
        j->aborts->join.fn = aborts_marked;
        j->aborts->t = t;
    }
    j->lu = lu;
    j->t = t;
    j->kind = kind;
    snprintf(j->port, sizeof(j->port), "%s", port);
    j->tport = rel_port(lu->target);
    return j;
}

/* A task's job; a task that cannot have one is answered here. */
static void job_run(struct scsi_task *t, enum pr_kind kind)
{
    struct pr_job *j = job_new(t->lu, t, kind, nexus_port(t));
    if (!j) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    job_submit(j);
}

/* The watch (a store thread): a notify carries a newer state and the side effects for this
 * gateway's nexuses; a broken watch (buf NULL) makes the mirror stale until re-read. */
static void pr_notified(void *arg, const void *buf, size_t len, int err)
{
    struct scsi_lun *lu = arg;
    struct pr_state *ps = lu->pr;
    if (!buf && err == -ESHUTDOWN)
        return; /* fenced: the store refuses every command from now on (bs_rbd.c) */
    if (!buf) {
        pthread_mutex_lock(&lu->lock);
        /* one re-read queued at a time (one that already started re-arms a watch that may be
         * this broken one: another follows it), none once pr_lun_drain has started */
        bool skip = ps->reload_queued || ps->closing;
        ps->reload_queued = !ps->closing;
        ps->stale = true;
        resv_update(lu);
        pthread_mutex_unlock(&lu->lock);
        struct pr_job *j = skip ? NULL : job_new(lu, NULL, PRJ_RELOAD, "");
        if (j)
            job_submit(j);
        return;
    }
    char *text = malloc(len + 1);
    if (!text)
        return;
    memcpy(text, buf, len);
    text[len] = '\0';
    uint64_t ver = 0, from = 0;
    const char *v = strstr(text, "\nversion ");
    const char *f = strstr(text, "\nfrom ");
    if (v)
        sscanf(v + 1, "version %" SCNu64, &ver);
    if (f)
        sscanf(f + 1, "from %" SCNx64, &from);
    unsigned ua = 0;
    if (sscanf(text, "event reset %u", &ua) == 1) {
        if (from != ps->token) /* the sender reset its own nexuses */
            scsi_lun_reset_elsewhere(lu, ua & UA_RESETS);
        free(text);
        return;
    }
    struct pr_state fresh = {.shared = true, .ptpl_c = true, .local = ps->local};
    char why[PR_PORT_MAX + 64] = "no version";
    if (ver && state_parse(&fresh, text, true, "reservation notify", why, sizeof(why)) == 0) {
        pthread_mutex_lock(&lu->lock);
        mirror_install(lu, &fresh, ver);
        pthread_mutex_unlock(&lu->lock);
        if (from != ps->token) { /* the sender carried out its own */
            /* its PREEMPT AND ABORT answers once this gateway acknowledges: the aborted
             * commands gone from the store first (SAM-5 §7.1) */
            struct scsi_sync_wait *sw = strstr(text, "\nabort ") ? scsi_sync_wait_new(lu) : NULL;
            fx_apply(lu, text, scsi_sync_wait_join(sw));
            if (sw && !scsi_sync_wait_finish(sw, SCSI_ELSEWHERE_WAIT_MS))
                LOG_WARN("LUN %" PRIu64 " (%s): PREEMPT AND ABORT through another gateway: "
                         "aborted commands still in the store after %u ms; acknowledging anyway",
                         lu->id, lu->bs->desc, SCSI_ELSEWHERE_WAIT_MS);
        }
    } else {
        LOG_WARN("LUN %" PRIu64 " (%s): ignoring a malformed reservation notify: %s", lu->id,
                 lu->bs->desc, why);
    }
    state_clear(&fresh);
    free(text);
}

/* Shared state: the object is created if missing, read into the mirror, and watched. Runs
 * where the store was opened (before the reactors, or on the control thread). */
static int shared_init(struct scsi_lun *lu, char *err, size_t errlen)
{
    struct bs *bs = lu->bs;
    struct pr_state *ps = lu->pr;
    struct pr_state fresh;
    uint64_t ver = 0;
    int ret = shared_read(lu, &fresh, &ver);
    if (ret == 0 && ver == 0) {
        char *text = state_format(&fresh);
        uint64_t nv;
        ret = text ? bs->ops->obj_write(bs, "pr", text, strlen(text), 0, &nv) : -ENOMEM;
        free(text);
        if (ret == -ECANCELED) /* another gateway created it meanwhile */
            ret = 0;
        if (ret == 0)
            ret = shared_read(lu, &fresh, &ver);
    }
    if (ret == 0)
        ret = bs->ops->obj_watch(bs, "pr", pr_notified, lu);
    if (ret < 0) {
        snprintf(err, errlen, "LUN %" PRIu64 " (%s): persistent reservation state: %s", lu->id,
                 bs->desc, strerror(-ret));
        state_clear(&fresh);
        return -1;
    }
    ps->stale = true; /* so that mirror_install takes version `ver` even if it is ps->version */
    mirror_install(lu, &fresh, ver);
    state_clear(&fresh);
    if (ps->nregs || ps->spc2[0])
        LOG_INFO("LUN %" PRIu64 ": %u persistent reservation key(s)%s%s from the cluster "
                 "(%s)",
                 lu->id, ps->nregs, ps->type ? " and a reservation" : "",
                 ps->spc2[0] ? ", an SPC-2 reservation" : "", bs->desc);
    return 0;
}

static void pr_lun_free(struct scsi_lun *lu);

static int pr_lun_init(struct scsi_lun *lu, const char *state_path, char *err, size_t errlen)
{
    struct pr_state *ps = calloc(1, sizeof(*ps));
    if (!ps || (state_path && !(ps->path = strdup(state_path)))) {
        free(ps);
        snprintf(err, errlen, "LUN %" PRIu64 ": out of memory", lu->id);
        return -1;
    }
    lu->pr = ps;
    ps->local = rel_port(lu->target);
    pthread_cond_init(&ps->idle, NULL);
    atomic_init(&lu->resv, 0);
    const struct bs_ops *o = lu->bs->ops;
    ps->shared = o->obj_read && o->obj_write && o->obj_notify && o->obj_watch;
    if (ps->shared) {
        if (ps->path) {
            LOG_INFO("LUN %" PRIu64 " (%s): reservations live in the cluster; no state file",
                     lu->id, lu->bs->desc);
            free(ps->path);
            ps->path = NULL;
        }
        ps->ptpl_c = true;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ps->token = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)lu;
        if (shared_init(lu, err, errlen) < 0) {
            pr_lun_free(lu);
            return -1;
        }
        return 0;
    }
    ps->ptpl_c = ps->path != NULL;
    if (ps->path && state_load(ps, err, errlen) < 0) {
        pr_lun_free(lu);
        return -1;
    }
    if (ps->nregs)
        LOG_INFO("LUN %" PRIu64 ": %u persistent reservation key(s)%s restored from %s", lu->id,
                 ps->nregs, ps->type ? " and a reservation" : "", ps->path);
    resv_update(lu);
    return 0;
}

static void pr_lun_drain(struct scsi_lun *lu)
{
    struct pr_state *ps = lu->pr;
    if (!ps)
        return;
    pthread_mutex_lock(&lu->lock);
    ps->closing = true;
    while (ps->jobs)
        pthread_cond_wait(&ps->idle, &lu->lock);
    pthread_mutex_unlock(&lu->lock);
}

static void pr_lun_free(struct scsi_lun *lu)
{
    struct pr_state *ps = lu->pr;
    if (!ps)
        return;
    assert(ps->jobs == 0);
    pthread_cond_destroy(&ps->idle);
    free(ps->regs);
    free(ps->path);
    free(ps);
    lu->pr = NULL;
}

/* ---------------- the conflict check ---------------- */

/* SBC-3 table 13: START STOP UNIT is allowed only to start (START=1, LOEJ=0, no power
 * condition); PREVENT ALLOW MEDIUM REMOVAL only to allow. */
static bool cdb_allowed(const uint8_t *cdb)
{
    if (cdb[0] == 0x1b)
        return (cdb[4] & 0xf3) == 0x01;
    if (cdb[0] == 0x1e)
        return (cdb[4] & 0x03) == 0;
    return false;
}

scsi_sr pr_check(struct scsi_task *t, struct scsi_lun *lu, const struct scsi_cmd *c, unsigned resv)
{
    unsigned cls = c->pr;
    if (cls == PRC_DEFAULT)
        cls = (c->flags & CMD_NOLUN_OK) ? PRC_ANY : (c->flags & CMD_WRITES) ? PRC_WRITE : PRC_READ;
    if (cls == PRC_ANY)
        return SR_OK;
    /* registrations alone block nothing but SPC-2 RESERVE/RELEASE */
    if (!(resv & (RESV_SPC2 | RESV_PR)) && cls != PRC_SPC2)
        return SR_OK;

    struct pr_state *ps = lu->pr;
    const char *me = nexus_port(t); /* through this gateway's target port, ps->local */
    bool conflict = false;
    pthread_mutex_lock(&lu->lock);
    if (ps->stale) {
        /* shared state this gateway may have missed changes of: only the commands that go
         * to the cluster themselves (PERSISTENT RESERVE IN/OUT) and those no reservation
         * restricts pass until it has been re-read; the others end in ABORTED COMMAND /
         * TIMEOUT ON LOGICAL UNIT, which initiators retry */
        bool refuse = cls != PRC_PR && cls != PRC_ALLOW;
        pthread_mutex_unlock(&lu->lock);
        return refuse ? SR_LU_TIMEOUT : SR_OK;
    } else if (ps->spc2[0]) {
        /* SPC-2 §5.5.1: PERSISTENT RESERVE IN/OUT conflict whoever holds the RESERVE;
         * RESERVE/RELEASE decide for themselves; other commands pass only for the holder. */
        if (cls == PRC_PR)
            conflict = true;
        else if (cls != PRC_SPC2)
            conflict = !spc2_holds(ps, me, ps->local);
    } else if (cls == PRC_SPC2) {
        /* SPC-4 §5.13.3: RESERVE and RELEASE conflict while anything is registered */
        conflict = ps->nregs > 0 || ps->type;
    } else if (ps->type && cls != PRC_PR && cls != PRC_ALLOW && !is_holder(ps, me, ps->local)) {
        /* SPC-4 §5.13.1 / table 66: registrants of a registrants-only or all-registrants
         * reservation have full access; everyone else meets the type's restrictions. */
        bool registered = reg_find(ps, me, ps->local) >= 0;
        bool full = registered && (type_reg_only(ps->type) || type_all_reg(ps->type));
        if (!full) {
            if (cls == PRC_CDB)
                conflict = !cdb_allowed(t->cdb);
            else if (cls == PRC_WRITE)
                conflict = true;
            else
                conflict = type_excl_access(ps->type);
        }
    }
    pthread_mutex_unlock(&lu->lock);
    return conflict ? SR_RESERVATION_CONFLICT : SR_OK;
}

/* ---------------- SPC-2 RESERVE / RELEASE ---------------- */

/* RESERVE(6)/(10), RELEASE(6)/(10) (SPC-2 §7.21-7.24): logical unit reservations only; the
 * third-party and extent forms are refused by the usage masks. On shared state they hold
 * across gateways like persistent reservations (the holder is the "spc2" line). */
scsi_sr pr_parse_spc2(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)t, (void)c, (void)r;
    return SR_OK;
}

void pr_exec_reserve(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    job_run(t, PRJ_RESERVE);
}

void pr_exec_release(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    job_run(t, PRJ_RELEASE);
}

/* Nexus loss and resets end SPC-2 reservations: in the mirror at once (this gateway's next
 * command sees it), and in the shared object by a job no command waits for. A gateway that
 * dies holding one leaves it in the cluster until a LOGICAL UNIT RESET or target reset
 * through any gateway ends it. */
static void spc2_drop(struct scsi_lun *lu, const char *port)
{
    if (!(atomic_load_explicit(&lu->resv, memory_order_acquire) & RESV_SPC2))
        return;
    struct pr_state *ps = lu->pr;
    pthread_mutex_lock(&lu->lock);
    /* the nexus that is lost is (port, this gateway's target port) */
    bool had = ps->spc2[0] && (!port[0] || spc2_holds(ps, port, ps->local));
    if (had)
        ps->spc2[0] = '\0';
    resv_update(lu);
    pthread_mutex_unlock(&lu->lock);
    if (had && ps->shared) {
        struct pr_job *j = job_new(lu, NULL, PRJ_SPC2_DROP, port);
        if (j)
            job_submit(j);
        else
            LOG_WARN("LUN %" PRIu64 ": out of memory: the SPC-2 reservation stays in the "
                     "cluster",
                     lu->id);
    }
}

static void pr_spc2_release_all(struct scsi_lun *lu)
{
    spc2_drop(lu, "");
}

static void pr_spc2_release_nexus(struct scsi_lun *lu, const struct scsi_nexus *n)
{
    spc2_drop(lu, n->initiator_port);
}

static bool pr_tell_reset(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg)
{
    if (!lu->pr->shared)
        return false;
    struct pr_job *j = job_new(lu, NULL, PRJ_RESET, "");
    if (!j) {
        LOG_WARN("LUN %" PRIu64 ": out of memory: the other gateways are not told of the reset",
                 lu->id);
        return false;
    }
    j->ua = ua;
    j->cb = done;
    j->cb_arg = arg;
    job_submit(j);
    return true;
}

/* A reset releases the SPC-2 reservation (SPC-2 §5.5.1; persistent reservations survive,
 * SPC-4 §5.13.1), and a shared LU tells the other gateways. */
static bool pr_lun_reset(struct scsi_lun *lu, unsigned ua, void (*done)(void *arg), void *arg)
{
    pr_spc2_release_all(lu);
    return pr_tell_reset(lu, ua, done, arg);
}

static int pr_lun_hook_init(struct scsi_lun *lu, const struct scsi_lun_config *cfg, char *err,
                            size_t errlen)
{
    return pr_lun_init(lu, cfg->pr_state_path, err, errlen);
}

const struct scsi_lun_hooks pr_lun_hooks = {
    .name = "reservations",
    .init = pr_lun_hook_init,
    .stop = pr_lun_drain,
    .free = pr_lun_free,
    .lun_nexus_lost = pr_spc2_release_nexus,
    .reset = pr_lun_reset,
};

/* ---------------- PERSISTENT RESERVE IN (SPC-4 §6.15) ---------------- */

scsi_sr pr_parse_in(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    r->xfer_len = get_be16(t->cdb + 7);
    r->dir = SCSI_DIR_READ;
    return SR_OK;
}

/* Builds the reply with the LUN lock held; returns a malloc'd buffer and its length. */
static uint8_t *prin_build(struct scsi_task *t, uint32_t *len)
{
    const struct pr_state *ps = t->lu->pr;
    /* a task of no I_T nexus has no transport to name ports in: no TransportIDs */
    const struct scsi_transport *tp = t->nexus ? t->nexus->transport : NULL;
    unsigned sa = t->cdb[1] & 0x1f;
    size_t cap = 8;
    if (sa == 0)
        cap += 8 * (size_t)ps->nregs;
    else if (sa == 1)
        cap += 16;
    else if (sa == 3)
        for (unsigned i = 0; i < ps->nregs; i++)
            cap += 24 + (tp ? tp->tid_len(ps->regs[i].port) : 0);
    uint8_t *d = calloc(1, cap);
    if (!d)
        return NULL;
    uint8_t *p = d + 8;
    switch (sa) {
    case 0: /* READ KEYS (§6.15.2) */
        put_be32(d, ps->generation);
        for (unsigned i = 0; i < ps->nregs; i++, p += 8)
            put_be64(p, ps->regs[i].key);
        put_be32(d + 4, 8 * ps->nregs); /* the whole list, whatever the allocation length */
        break;
    case 1: /* READ RESERVATION (§6.15.3) */
        put_be32(d, ps->generation);
        if (ps->type) {
            /* an all-registrants reservation reports key 0 (§6.15.3.2) */
            int h = type_all_reg(ps->type) ? -1 : reg_find(ps, ps->holder, ps->holder_tport);
            put_be64(p, h >= 0 ? ps->regs[h].key : 0);
            p[13] = ps->type; /* SCOPE 0h: logical unit */
            p += 16;
            put_be32(d + 4, 16);
        }
        break;
    case 2: /* REPORT CAPABILITIES (§6.15.4) */
        put_be16(d, 8);
        /* CRH 0, SIP_C 0, ATP_C 0 (SPEC_I_PT and ALL_TG_PT are refused); PTPL_C when there
         * is a state file or shared state */
        d[2] = ps->ptpl_c ? 0x01 : 0;
        /* TMV 1; ALLOW COMMANDS 001b: TEST UNIT READY passes WE and EA reservations */
        d[3] = 0x80 | (1u << 4) | (ps->aptpl ? 0x01 : 0);
        d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02; /* WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX */
        d[5] = 0x01;                             /* EX_AC_AR */
        break;
    case 3: /* READ FULL STATUS (§6.15.5) */
        put_be32(d, ps->generation);
        for (unsigned i = 0; i < ps->nregs; i++) {
            const struct pr_reg *rg = &ps->regs[i];
            bool holder = is_holder(ps, rg->port, rg->tport);
            put_be64(p, rg->key);
            p[12] = holder ? 0x01 : 0; /* ALL_TG_PT 0, R_HOLDER */
            p[13] = holder ? ps->type : 0;
            put_be16(p + 18, rg->tport); /* the registrant nexus's own target port */
            uint32_t tidlen = tp ? tp->tid_len(rg->port) : 0;
            put_be32(p + 20, tidlen);
            if (tp)
                tp->tid_put(p + 24, rg->port);
            p += 24 + tidlen;
        }
        put_be32(d + 4, (uint32_t)(p - d - 8));
        break;
    }
    *len = sa == 2 ? 8 : (uint32_t)(p - d);
    return d;
}

void pr_exec_in(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    struct scsi_lun *lu = t->lu;
    if (lu->pr->shared) {
        /* re-read the cluster's state first: one round trip, on the helper thread */
        job_run(t, PRJ_IN);
        return;
    }
    uint32_t len = 0;
    pthread_mutex_lock(&lu->lock);
    uint8_t *d = prin_build(t, &len);
    pthread_mutex_unlock(&lu->lock);
    if (!d) {
        scsi_task_complete(t, SR_INSUFFICIENT_RESOURCES);
        return;
    }
    scsi_task_put_data(t, d, len);
    free(d);
}

/* ---------------- PERSISTENT RESERVE OUT (SPC-4 §6.16) ---------------- */

#define PROUT_PARAM_LEN 24
#define PROUT_TID_MAX 4096

scsi_sr pr_parse_out(struct scsi_task *t, const struct scsi_cmd *c, struct scsi_req *r)
{
    (void)c;
    unsigned sa = t->cdb[1] & 0x1f;
    unsigned scope = t->cdb[2] >> 4, type = t->cdb[2] & 0x0f;
    uint32_t pll = get_be32(t->cdb + 5);
    /* SCOPE and TYPE matter to these; REGISTER, REGISTER AND IGNORE and CLEAR ignore them */
    bool typed = sa == PRO_RESERVE || sa == PRO_RELEASE || sa == PRO_PREEMPT ||
                 sa == PRO_PREEMPT_ABORT || sa == PRO_REGISTER_MOVE;
    if (typed && scope != 0)
        return SR_CDB_FIELD(2, 7); /* only LU_SCOPE (§6.16.3.2) */
    if (typed && !type_valid(type))
        return SR_CDB_FIELD(2, 3);
    /* §6.16.3: the basic parameter list is 24 bytes; longer lists only come with SPEC_I_PT
     * (refused once the list is read) or with REGISTER AND MOVE's TransportID. */
    if (pll < PROUT_PARAM_LEN || pll > PROUT_PARAM_LEN + PROUT_TID_MAX)
        return SR_PARAM_LIST_LENGTH;
    r->xfer_len = pll;
    r->dir = SCSI_DIR_WRITE;
    return SR_OK;
}

struct prout {
    struct scsi_task *t;
    struct pr_state *ps; /* the mirror, or a fresh copy of the shared state */
    const char *me;      /* the sender's nexus: initiator port */
    uint16_t tport;      /* and relative target port */
    int mine;            /* index of the sender's registration, -1 if not registered */
    uint64_t rk, sark;   /* RESERVATION KEY, SERVICE ACTION RESERVATION KEY */
    unsigned type;
    bool aptpl;
    const uint8_t *param;
    uint32_t pll;
    FILE *fx;   /* side effects (fx_*) */
    bool abort; /* PREEMPT AND ABORT: preempted nexuses lose their tasks */
};

static bool is_me(const struct prout *x, const struct pr_reg *rg)
{
    return nexus_is(rg->port, rg->tport, x->me, x->tport);
}

/* A registrant nexus other than the sender's is preempted: UA REGISTRATIONS PREEMPTED, and
 * for PREEMPT AND ABORT its tasks go. */
static void fx_preempted(const struct prout *x, const struct pr_reg *rg)
{
    fx_ua(x->fx, rg->port, rg->tport, UA_REG_PREEMPTED);
    if (x->abort) {
        fputs("abort", x->fx);
        nexus_put(x->fx, rg->port, rg->tport);
        fputc('\n', x->fx);
    }
}

/* Removes every registration with key, the sender's excepted when keep_me, each other nexus
 * preempted. Returns how many went. */
static unsigned remove_key(struct prout *x, uint64_t key, bool keep_me)
{
    struct pr_state *ps = x->ps;
    unsigned n = 0;
    for (unsigned i = 0; i < ps->nregs;) {
        struct pr_reg *rg = &ps->regs[i];
        if (rg->key != key || (keep_me && is_me(x, rg))) {
            i++;
            continue;
        }
        if (!is_me(x, rg))
            fx_preempted(x, rg);
        reg_remove(ps, i); /* moves the last one into i */
        n++;
    }
    return n;
}

/* REGISTER / REGISTER AND IGNORE EXISTING KEY (§5.13.7) */
static scsi_sr pro_register(struct prout *x, bool ignore)
{
    struct pr_state *ps = x->ps;
    if (x->mine < 0) {
        if (!ignore && x->rk)
            return SR_RESERVATION_CONFLICT;
        if (!x->sark)
            return SR_OK; /* nothing to register, nothing changes */
        if (reg_add(ps, x->me, x->tport, x->sark) < 0)
            return SR_INSUFFICIENT_RESOURCES;
        ps->aptpl = x->aptpl;
        ps->generation++;
        return SR_OK;
    }
    if (!ignore && x->rk != ps->regs[x->mine].key)
        return SR_RESERVATION_CONFLICT;
    if (x->sark) {
        ps->regs[x->mine].key = x->sark;
        ps->aptpl = x->aptpl;
    } else {
        /* unregistering: a registrants-only reservation its holder leaves is released, and
         * the other registrants hear of it (§5.13.11.2.3) */
        uint8_t type = ps->type;
        if (reg_remove(ps, (unsigned)x->mine) && type_reg_only(type))
            fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
    }
    ps->generation++;
    return SR_OK;
}

/* RESERVE (§5.13.9): the generation does not change. */
static scsi_sr pro_reserve(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (ps->type) {
        /* the holder asking again for the same thing succeeds; anything else conflicts */
        if (is_holder(ps, x->me, x->tport) && ps->type == x->type)
            return SR_OK;
        return SR_RESERVATION_CONFLICT;
    }
    set_holder(ps, x->type, x->me, x->tport);
    return SR_OK;
}

/* RELEASE (§5.13.11.2.2) */
static scsi_sr pro_release(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (!ps->type || !is_holder(ps, x->me, x->tport))
        return SR_OK; /* nothing of ours to release: no-op */
    if (ps->type != x->type)
        return SR_INVALID_RELEASE_OF_PR;
    uint8_t type = ps->type;
    ps->type = 0;
    if (type_reg_only(type) || type_all_reg(type))
        fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
    return SR_OK;
}

/* CLEAR (§5.13.11.2.6): every registration and the reservation go. */
static scsi_sr pro_clear(struct prout *x)
{
    struct pr_state *ps = x->ps;
    fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_PREEMPTED);
    ps->nregs = 0;
    ps->type = 0;
    ps->generation++;
    return SR_OK;
}

/* PREEMPT / PREEMPT AND ABORT (§5.13.11.2.4, .5) */
static scsi_sr pro_preempt(struct prout *x)
{
    struct pr_state *ps = x->ps;
    if (!ps->type || (type_all_reg(ps->type) && x->sark)) {
        /* no reservation (or an all-registrants one and a key): remove registrations only */
        if (!x->sark)
            return SR_PARAM_FIELD(8, -1);
        if (!remove_key(x, x->sark, false))
            return SR_RESERVATION_CONFLICT;
    } else if (type_all_reg(ps->type)) {
        /* SARK 0 preempts an all-registrants reservation: everyone else is unregistered and
         * the sender holds the new one */
        for (unsigned i = 0; i < ps->nregs;) {
            if (is_me(x, &ps->regs[i])) {
                i++;
                continue;
            }
            fx_preempted(x, &ps->regs[i]);
            ps->regs[i] = ps->regs[--ps->nregs];
        }
        set_holder(ps, x->type, x->me, x->tport);
    } else {
        int h = reg_find(ps, ps->holder, ps->holder_tport);
        if (h >= 0 && ps->regs[h].key == x->sark) {
            /* preempting the reservation: its holder's key loses its registrations (the
             * sender's own excepted) and the sender holds a reservation of the new type */
            uint8_t old = ps->type;
            remove_key(x, x->sark, true);
            set_holder(ps, x->type, x->me, x->tport);
            if (old != x->type)
                fx_ua_registrants(x->fx, ps, x->me, x->tport, UA_RESV_RELEASED);
        } else {
            if (!x->sark)
                return SR_PARAM_FIELD(8, -1);
            if (!remove_key(x, x->sark, false))
                return SR_RESERVATION_CONFLICT;
        }
    }
    ps->generation++;
    return SR_OK;
}

/* The initiator port a TransportID (of the sender's transport) names, into port; a field the
 * transport refuses is pointed at in the parameter list, where the TransportID starts at byte
 * 24 (PROUT_PARAM_LEN). */
static scsi_sr parse_transport_id(struct scsi_task *t, const uint8_t *tid, uint32_t len, char *port,
                                  size_t portlen)
{
    uint32_t bad = 0;
    if (!t->nexus || t->nexus->transport->tid_parse(tid, len, port, portlen, &bad) < 0)
        return SR_PARAM_FIELD(PROUT_PARAM_LEN + bad, -1);
    return SR_OK;
}

/* Whether tport is a relative target port of the LU: this gateway's or another's (each
 * gateway's ALUA target port group is its one target port, alua.c). */
static bool tport_known(const struct scsi_lun *lu, uint16_t tport)
{
    if (tport == rel_port(lu->target))
        return true;
    for (unsigned i = 0; i < lu->alua_ngroups; i++)
        if (lu->alua[i].id == tport)
            return true;
    return false;
}

/* REGISTER AND MOVE (§5.13.8): the holder hands its reservation to another I_T nexus, the
 * TransportID's initiator port through the RELATIVE TARGET PORT IDENTIFIER's target port,
 * registering it with SARK, and may unregister itself (UNREG). */
static scsi_sr pro_register_move(struct prout *x)
{
    struct pr_state *ps = x->ps;
    const uint8_t *p = x->param;
    if (!ps->type || type_all_reg(ps->type) || !is_holder(ps, x->me, x->tport))
        return SR_RESERVATION_CONFLICT;
    if (!x->sark)
        return SR_PARAM_FIELD(8, -1);
    uint16_t dtport = get_be16(p + 18);
    if (!tport_known(x->t->lu, dtport))
        return SR_PARAM_FIELD(18, -1); /* no such relative target port */
    uint32_t tidlen = get_be32(p + 20);
    if (tidlen > x->pll - PROUT_PARAM_LEN)
        return SR_PARAM_LIST_LENGTH;
    char dest[PR_PORT_MAX];
    scsi_sr sr = parse_transport_id(x->t, p + PROUT_PARAM_LEN, tidlen, dest, sizeof(dest));
    if (sr)
        return sr;
    if (nexus_is(dest, dtport, x->me, x->tport))
        return SR_PARAM_FIELD(24, -1); /* moving to itself */
    int d = reg_find(ps, dest, dtport);
    if (d >= 0)
        ps->regs[d].key = x->sark;
    else if (reg_add(ps, dest, dtport, x->sark) < 0)
        return SR_INSUFFICIENT_RESOURCES;
    set_holder(ps, x->type, dest, dtport);
    if (p[17] & 0x02) { /* UNREG */
        int m = reg_find(ps, x->me, x->tport);
        if (m >= 0)
            reg_remove(ps, (unsigned)m);
    }
    ps->aptpl = p[17] & 0x01;
    ps->generation++;
    return SR_OK;
}

/* Checks the parameter list fields every service action shares (§6.16.3). */
static scsi_sr prout_param_check(const struct prout *x, unsigned sa)
{
    const uint8_t *p = x->param;
    if (sa == PRO_REGISTER_MOVE) {
        if ((p[17] & 0x01) && !x->ps->ptpl_c)
            return SR_PARAM_FIELD(17, 0); /* APTPL without PTPL_C */
        return SR_OK;
    }
    if (p[20] & 0x08)
        return SR_PARAM_FIELD(20, 3); /* SPEC_I_PT: SIP_C is 0 */
    if (x->pll != PROUT_PARAM_LEN)
        return SR_PARAM_LIST_LENGTH;
    bool reg = sa == PRO_REGISTER || sa == PRO_REGISTER_IGNORE;
    if (reg && (p[20] & 0x04))
        return SR_PARAM_FIELD(20, 2); /* ALL_TG_PT: ATP_C is 0 */
    if (reg && (p[20] & 0x01) && !x->ps->ptpl_c)
        return SR_PARAM_FIELD(20, 0); /* APTPL: PTPL_C is 0 */
    return SR_OK;
}

/* A PERSISTENT RESERVE OUT applied to ps (see job_apply). */
static scsi_sr prout_apply(struct scsi_task *t, struct pr_state *ps, FILE *fx)
{
    unsigned sa = t->cdb[1] & 0x1f;
    struct prout x = {
        .t = t,
        .ps = ps,
        .me = nexus_port(t),
        .tport = rel_port(t->target),
        .type = t->cdb[2] & 0x0f,
        .param = t->iov[0].iov_base,
        .pll = t->xfer_len,
        .fx = fx,
        .abort = sa == PRO_PREEMPT_ABORT,
    };
    x.rk = get_be64(x.param);
    x.sark = get_be64(x.param + 8);
    x.aptpl = x.param[20] & 0x01;
    scsi_sr sr = prout_param_check(&x, sa);
    x.mine = reg_find(ps, x.me, x.tport);
    if (sr)
        return sr; /* refused before anything changes */
    if (sa == PRO_REGISTER || sa == PRO_REGISTER_IGNORE)
        return pro_register(&x, sa == PRO_REGISTER_IGNORE);
    /* every other service action needs the sender registered under that key */
    if (x.mine < 0 || x.rk != ps->regs[x.mine].key)
        return SR_RESERVATION_CONFLICT;
    switch (sa) {
    case PRO_RESERVE:
        return pro_reserve(&x);
    case PRO_RELEASE:
        return pro_release(&x);
    case PRO_CLEAR:
        return pro_clear(&x);
    case PRO_PREEMPT:
    case PRO_PREEMPT_ABORT:
        return pro_preempt(&x);
    case PRO_REGISTER_MOVE:
        return pro_register_move(&x);
    default:
        return SR_CDB_FIELD(1, 4);
    }
}

/* PREEMPT AND ABORT's aborts run once the change is committed (fx_apply), on this gateway
 * through the transport's abort_nexus_tasks and on the others from the notify. */
void pr_exec_out(struct scsi_task *t, const struct scsi_cmd *c)
{
    (void)c;
    job_run(t, PRJ_OUT);
}
