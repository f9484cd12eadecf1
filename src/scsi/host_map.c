/* Host LUN maps (scsi.h "host LUN maps"): which LUNs each initiator of a target sees, under which
 * numbers, read-only or not. The control thread keeps the entries under the target lock and, on
 * each change, builds a new immutable map and swaps it into every nexus of that initiator; the
 * data path reads its nexus's map with one acquire load and no lock (lun_addr.c). A replaced
 * map is retired: the caller frees it once every reactor has finished the turn it was in, as it
 * frees a detached LUN (scsi_target_host_retired_take). */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scsi/scsi_internal.h"

/* What a nexus of an initiator without an entry reads once the target has entries: no LUN. */
static const struct scsi_host_map host_map_none = {.nslots = 0};

struct host_entry {
    char name[224];
    struct scsi_host_mapping *rows; /* in host_lun order */
    unsigned nrows, cap;
    struct scsi_host_map *map; /* the rows as published to its nexuses */
    /* The entry's counters, one set per target LUN it maps (scsi.h "per-entry counters"), in
     * two parallel arrays; their maps point at them. */
    uint64_t *st_lun;
    struct iostats **st;
    unsigned nst, stcap;
};

struct scsi_host_table {
    struct host_entry **e;
    unsigned n, cap;
    unsigned rows;                 /* of all entries: bounded by SCSI_HOST_ROWS_MAX */
    struct scsi_host_map *retired; /* replaced, not freed yet */
};

static struct scsi_host_table *table(struct scsi_target *t)
{
    return ((struct scsi_target_priv *)t->priv)->hosts;
}

/* With the target lock. Names compare case-blind (RFC 3722 folds iSCSI names to lower case). */
static struct host_entry *entry_find(struct scsi_host_table *h, const char *name, unsigned *idx)
{
    for (unsigned i = 0; h && i < h->n; i++) {
        if (strcasecmp(h->e[i]->name, name) == 0) {
            if (idx)
                *idx = i;
            return h->e[i];
        }
    }
    return NULL;
}

/* The map a nexus of initiator `name` reads: NULL (every LUN as it is numbered) while the
 * target has no entries. */
static const struct scsi_host_map *map_for(struct scsi_host_table *h, const char *name)
{
    if (!h || h->n == 0)
        return NULL;
    struct host_entry *e = entry_find(h, name, NULL);
    return e ? e->map : &host_map_none;
}

void scsi_host_map_bind_locked(struct scsi_target *t, struct scsi_nexus_impl *n)
{
    atomic_store_explicit(&n->map, map_for(table(t), n->pub.initiator_name), memory_order_release);
}

bool scsi_host_map_shows_locked(const struct scsi_nexus_impl *n, uint64_t lun)
{
    const struct scsi_host_map *m = atomic_load_explicit(&n->map, memory_order_relaxed);
    if (!m)
        return true;
    for (uint32_t i = 0; i < m->nslots; i++)
        if ((m->slot[i] & HOST_SLOT_LUN) == lun + 1)
            return true;
    return false;
}

/* With the target lock: nexus slot s reads want from now on; if that is not the map it read,
 * REPORTED LUNS DATA HAS CHANGED (SPC-4 §6.33: its logical unit inventory changed) on every LUN
 * of the target, so the next command it sends, to whatever number, reports it. */
static void bind_locked(struct scsi_target *t, unsigned s, const struct scsi_host_map *want)
{
    struct scsi_nexus_impl *n = ((struct scsi_target_priv *)t->priv)->nexus[s];
    if (atomic_load_explicit(&n->map, memory_order_relaxed) == want)
        return;
    atomic_store_explicit(&n->map, want, memory_order_release);
    for (uint32_t i = 0; i < t->nluns; i++)
        if (t->luns[i])
            scsi_ua_raise(t->luns[i], s, UA_LUNS_CHANGED);
}

/* With the target lock: the nexuses of initiator `name` read want; the other hosts see
 * nothing. With name NULL (the first entry added, the last removed: what every initiator sees
 * changes) every nexus reads its own initiator's. */
static void rebind_locked(struct scsi_target *t, const char *name, const struct scsi_host_map *want)
{
    struct scsi_target_priv *p = t->priv;
    for (unsigned s = 0; s < SCSI_NEXUS_MAX; s++) {
        struct scsi_nexus_impl *n = p->nexus[s];
        if (!n)
            continue;
        if (!name)
            bind_locked(t, s, map_for(p->hosts, n->pub.initiator_name));
        else if (strcasecmp(n->pub.initiator_name, name) == 0)
            bind_locked(t, s, want);
    }
}

static void retire(struct scsi_host_table *h, struct scsi_host_map *m)
{
    if (!m)
        return;
    m->retired_next = h->retired;
    h->retired = m;
}

/* e's counters for target LUN lun, made if it has none; NULL out of memory (or built without
 * metrics): that LUN is then not counted for the entry, and works. */
static struct iostats *stats_for(struct host_entry *e, uint64_t lun)
{
    for (unsigned i = 0; i < e->nst; i++)
        if (e->st_lun[i] == lun)
            return e->st[i];
    if (e->nst == e->stcap) {
        unsigned cap = e->stcap ? e->stcap * 2 : 4;
        uint64_t *nl = realloc(e->st_lun, cap * sizeof(*nl));
        if (!nl)
            return NULL;
        e->st_lun = nl;
        struct iostats **ns = realloc(e->st, cap * sizeof(*ns));
        if (!ns)
            return NULL;
        e->st = ns;
        e->stcap = cap;
    }
    struct iostats *st = iostats_new();
    if (!st)
        return NULL;
    e->st_lun[e->nst] = lun;
    e->st[e->nst++] = st;
    return st;
}

/* A map of nslots slots and their counter pointers, in one allocation. */
static struct scsi_host_map *map_alloc(uint32_t nslots)
{
    size_t at = sizeof(struct scsi_host_map) + nslots * sizeof(uint16_t);
    at = (at + _Alignof(struct iostats *) - 1) & ~(_Alignof(struct iostats *) - 1);
    struct scsi_host_map *m = calloc(1, at + nslots * sizeof(struct iostats *));
    if (!m)
        return NULL;
    m->nslots = nslots;
    m->stats = (struct iostats **)((char *)m + at);
    return m;
}

/* The map of e's rows, or NULL out of memory. */
static struct scsi_host_map *map_build(struct host_entry *e)
{
    uint32_t nslots = e->nrows ? (uint32_t)e->rows[e->nrows - 1].host_lun + 1 : 0;
    struct scsi_host_map *m = map_alloc(nslots);
    if (!m)
        return NULL;
    for (unsigned i = 0; i < e->nrows; i++) {
        const struct scsi_host_mapping *r = &e->rows[i];
        m->slot[r->host_lun] = (uint16_t)((r->lun + 1) | (r->read_only ? HOST_SLOT_RO : 0));
        m->stats[r->host_lun] = stats_for(e, r->lun);
    }
    return m;
}

static bool row_maps(const struct host_entry *e, uint64_t lun)
{
    for (unsigned i = 0; i < e->nrows; i++)
        if (e->rows[i].lun == lun)
            return true;
    return false;
}

/* With the target lock, after e's map was published: the counters of LUNs e no longer maps
 * go to a retired (empty) map that frees them with itself, once no reactor can count into
 * them. Out of memory they stay with e, and come back if the LUN is mapped again. */
static void stats_prune_locked(struct scsi_host_table *h, struct host_entry *e)
{
    unsigned gone = 0;
    for (unsigned i = 0; i < e->nst; i++)
        gone += !row_maps(e, e->st_lun[i]);
    if (!gone)
        return;
    struct scsi_host_map *holder = map_alloc(0);
    struct iostats **owned = holder ? calloc(gone, sizeof(*owned)) : NULL;
    if (!owned) {
        free(holder);
        return;
    }
    unsigned keep = 0;
    for (unsigned i = 0; i < e->nst; i++) {
        if (row_maps(e, e->st_lun[i])) {
            e->st_lun[keep] = e->st_lun[i];
            e->st[keep++] = e->st[i];
        } else {
            owned[holder->nowned++] = e->st[i];
        }
    }
    e->nst = keep;
    holder->owned = owned;
    retire(h, holder);
}

/* With the target lock: publish e's rows (a new map to its nexuses, the old one retired). */
static int publish_locked(struct scsi_target *t, struct host_entry *e, char *err, size_t errlen)
{
    struct scsi_host_map *m = map_build(e);
    if (!m) {
        snprintf(err, errlen, "initiator %s: out of memory", e->name);
        return -1;
    }
    struct scsi_host_map *old = e->map;
    e->map = m;
    rebind_locked(t, e->name, m);
    retire(table(t), old);
    stats_prune_locked(table(t), e);
    return 0;
}

int scsi_target_host_add(struct scsi_target *t, const char *initiator_name, char *err,
                         size_t errlen)
{
    struct scsi_target_priv *p = t->priv;
    size_t len = strlen(initiator_name);
    if (len == 0 || len >= sizeof(((struct host_entry *)0)->name)) {
        snprintf(err, errlen, "initiator name of %zu characters (want 1 to 223)", len);
        return -1;
    }
    pthread_mutex_lock(&t->lock);
    int rc = -1;
    if (!p->hosts && !(p->hosts = calloc(1, sizeof(*p->hosts)))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    struct scsi_host_table *h = p->hosts;
    if (entry_find(h, initiator_name, NULL)) {
        snprintf(err, errlen, "initiator %s: already has an entry on target %s", initiator_name,
                 t->name);
        goto out;
    }
    if (h->n >= SCSI_HOST_ENTRIES_MAX) {
        snprintf(err, errlen, "target %s: already %u initiator entries (the most a target has)",
                 t->name, SCSI_HOST_ENTRIES_MAX);
        goto out;
    }
    if (h->n == h->cap) {
        unsigned cap = h->cap ? h->cap * 2 : 8;
        struct host_entry **ne = realloc(h->e, cap * sizeof(*ne));
        if (!ne) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        h->e = ne;
        h->cap = cap;
    }
    struct host_entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->map = map_build(e))) {
        free(e);
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    memcpy(e->name, initiator_name, len + 1);
    h->e[h->n++] = e;
    rebind_locked(t, h->n == 1 ? NULL : e->name, e->map);
    rc = 0;
out:
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int scsi_target_host_remove(struct scsi_target *t, const char *initiator_name, char *err,
                            size_t errlen)
{
    pthread_mutex_lock(&t->lock);
    struct scsi_host_table *h = table(t);
    unsigned i;
    struct host_entry *e = entry_find(h, initiator_name, &i);
    if (!e) {
        pthread_mutex_unlock(&t->lock);
        snprintf(err, errlen, "initiator %s: no entry on target %s", initiator_name, t->name);
        return -1;
    }
    h->e[i] = h->e[--h->n];
    h->rows -= e->nrows;
    /* before its map is retired: no nexus reads it after this turn */
    rebind_locked(t, h->n == 0 ? NULL : e->name, &host_map_none);
    /* its counters go with its last map: a reactor may count into them until its turn ends */
    e->map->owned = e->st;
    e->map->nowned = e->nst;
    retire(h, e->map);
    pthread_mutex_unlock(&t->lock);
    free(e->st_lun);
    free(e->rows);
    free(e);
    return 0;
}

/* With the target lock: initiator_name's entry, or NULL with a reason in err. */
static struct host_entry *entry_or_err(struct scsi_target *t, const char *initiator_name, char *err,
                                       size_t errlen)
{
    struct host_entry *e = entry_find(table(t), initiator_name, NULL);
    if (!e)
        snprintf(err, errlen, "initiator %s: no entry on target %s", initiator_name, t->name);
    return e;
}

/* The row of e at host_lun, or where it would go (rows in host_lun order). */
static unsigned row_at(const struct host_entry *e, uint64_t host_lun)
{
    unsigned lo = 0, hi = e->nrows;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (e->rows[mid].host_lun < host_lun)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Row `row` into e at index at (rows stay in host LUN order): 0, or -1 (err) without memory. */
static int row_insert(struct host_entry *e, unsigned at, struct scsi_host_mapping row, char *err,
                      size_t errlen)
{
    if (e->nrows == e->cap) {
        unsigned cap = e->cap ? e->cap * 2 : 4;
        struct scsi_host_mapping *nr = realloc(e->rows, cap * sizeof(*nr));
        if (!nr) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        e->rows = nr;
        e->cap = cap;
    }
    memmove(e->rows + at + 1, e->rows + at, (e->nrows - at) * sizeof(*e->rows));
    e->rows[at] = row;
    e->nrows++;
    return 0;
}

/* Row at out of e; returns it. */
static struct scsi_host_mapping row_remove(struct host_entry *e, unsigned at)
{
    assert(at < e->nrows);
    struct scsi_host_mapping was = e->rows[at];
    memmove(e->rows + at, e->rows + at + 1, (e->nrows - at - 1) * sizeof(*e->rows));
    e->nrows--;
    return was;
}

/* t's lock taken and the entry of initiator_name; NULL with the lock given back and err set
 * when the initiator has none. */
static struct host_entry *lock_entry(struct scsi_target *t, const char *initiator_name, char *err,
                                     size_t errlen)
{
    pthread_mutex_lock(&t->lock);
    struct host_entry *e = entry_or_err(t, initiator_name, err, errlen);
    if (!e)
        pthread_mutex_unlock(&t->lock);
    return e;
}

/* scsi_target_host_map under t's lock, for e: a row replaced or added, then published. */
static int map_locked(struct scsi_target *t, struct host_entry *e, const char *initiator_name,
                      struct scsi_host_mapping row, char *err, size_t errlen)
{
    /* One number per LUN and host: a host seeing one logical unit twice would take the two
     * for two disks (or two paths) and write each as if the other did not exist. */
    for (unsigned i = 0; i < e->nrows; i++) {
        if (e->rows[i].lun == row.lun && e->rows[i].host_lun != row.host_lun) {
            snprintf(err, errlen, "initiator %s: LUN %" PRIu64 " is already mapped as %" PRIu64,
                     initiator_name, row.lun, e->rows[i].host_lun);
            return -1;
        }
    }
    unsigned at = row_at(e, row.host_lun);
    int rc;
    if (at < e->nrows && e->rows[at].host_lun == row.host_lun) {
        struct scsi_host_mapping was = e->rows[at];
        if (was.lun == row.lun && was.read_only == row.read_only)
            return 0; /* as it is: nothing changes, nobody is told */
        e->rows[at] = row;
        if ((rc = publish_locked(t, e, err, errlen)) < 0)
            e->rows[at] = was;
        return rc;
    }
    struct scsi_host_table *h = table(t);
    if (h->rows >= SCSI_HOST_ROWS_MAX) {
        snprintf(err, errlen, "target %s: already %u mappings (the most a target has)", t->name,
                 SCSI_HOST_ROWS_MAX);
        return -1;
    }
    if (row_insert(e, at, row, err, errlen) < 0)
        return -1;
    if ((rc = publish_locked(t, e, err, errlen)) < 0)
        row_remove(e, at);
    else
        h->rows++;
    return rc;
}

int scsi_target_host_map(struct scsi_target *t, const char *initiator_name, uint64_t host_lun,
                         uint64_t lun, bool read_only, char *err, size_t errlen)
{
    if (host_lun >= SCSI_LUN_SLOTS || lun >= SCSI_LUN_SLOTS) {
        snprintf(err, errlen, "LUN %" PRIu64 " as %" PRIu64 ": above %u (flat space addressing)",
                 lun, host_lun, SCSI_LUN_SLOTS - 1);
        return -1;
    }
    struct host_entry *e = lock_entry(t, initiator_name, err, errlen);
    if (!e)
        return -1;
    struct scsi_host_mapping row = {.host_lun = host_lun, .lun = lun, .read_only = read_only};
    int rc = map_locked(t, e, initiator_name, row, err, errlen);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int scsi_target_host_unmap(struct scsi_target *t, const char *initiator_name, uint64_t host_lun,
                           char *err, size_t errlen)
{
    struct host_entry *e = lock_entry(t, initiator_name, err, errlen);
    if (!e)
        return -1;
    unsigned at = row_at(e, host_lun);
    int rc = -1;
    if (at == e->nrows || e->rows[at].host_lun != host_lun) {
        snprintf(err, errlen, "initiator %s: nothing mapped as LUN %" PRIu64, initiator_name,
                 host_lun);
    } else {
        struct scsi_host_mapping was = row_remove(e, at);
        rc = publish_locked(t, e, err, errlen);
        if (rc < 0) {
            int back = row_insert(e, at, was, err, errlen); /* into its own room: no malloc */
            assert(back == 0);
            (void)back;
        } else {
            table(t)->rows--;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int scsi_target_host_maps(struct scsi_target *t, const char *initiator_name,
                          struct scsi_host_mapping *out, unsigned max)
{
    pthread_mutex_lock(&t->lock);
    struct host_entry *e = entry_find(table(t), initiator_name, NULL);
    int n = -1;
    if (e) {
        n = (int)e->nrows;
        if (e->nrows && max) /* (an entry without a map has no rows array: memcpy takes none) */
            memcpy(out, e->rows, (e->nrows < max ? e->nrows : max) * sizeof(*out));
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

struct scsi_host_map *scsi_target_host_retired_take(struct scsi_target *t)
{
    pthread_mutex_lock(&t->lock);
    struct scsi_host_table *h = table(t);
    struct scsi_host_map *m = h ? h->retired : NULL;
    if (h)
        h->retired = NULL;
    pthread_mutex_unlock(&t->lock);
    return m;
}

int scsi_target_host_stats(struct scsi_target *t, const char *initiator_name, uint64_t lun,
                           struct iostats_values *out)
{
    pthread_mutex_lock(&t->lock);
    struct host_entry *e = entry_find(table(t), initiator_name, NULL);
    int rc = -1;
    for (unsigned i = 0; e && i < e->nst; i++) {
        if (e->st_lun[i] == lun) {
            struct iostats_values v;
            iostats_read(e->st[i], &v);
            iostats_add(out, &v);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

static void owned_free(struct iostats **st, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        iostats_free(st[i]);
    free(st);
}

void scsi_host_maps_free(struct scsi_host_map *m)
{
    while (m) {
        struct scsi_host_map *next = m->retired_next;
        assert(m != &host_map_none);
        owned_free(m->owned, m->nowned);
        free(m);
        m = next;
    }
}

void scsi_host_table_free(struct scsi_target *t)
{
    struct scsi_host_table *h = table(t);
    if (!h)
        return;
    for (unsigned i = 0; i < h->n; i++) {
        owned_free(h->e[i]->st, h->e[i]->nst);
        free(h->e[i]->st_lun);
        free(h->e[i]->map);
        free(h->e[i]->rows);
        free(h->e[i]);
    }
    scsi_host_maps_free(h->retired);
    free(h->e);
    free(h);
    ((struct scsi_target_priv *)t->priv)->hosts = NULL;
}
