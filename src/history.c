/*
** history.c: paths over time and retention (see history.h).
**
** A path is resolved one name at a time, carrying spans: the root is one
** directory for all time; each name narrows every directory span to the
** entries that bore it, cut to the part of their life inside the span.
*/
#include "history.h"
#include "common.h"
#include "cutter.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct span_list {
    struct hist_span *v;
    size_t n, cap;
    const struct hist_span *within; /* the parent span being narrowed */
    int err;
};

static int add_span(void *ctx, const struct fsm_hentry *e)
{
    struct span_list *l = ctx;
    uint64_t from = CK_MAX(l->within->from, e->born), to = CK_MIN(l->within->to, e->died);
    if (from >= to) return 0;
    if ((l->err = ck_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v)) < 0) return 1;
    l->v[l->n++] = (struct hist_span){e->ino, e->mode, from, to};
    return 0;
}

int history_resolve(fsmeta *m, const char *path, struct hist_span **out, size_t *n)
{
    struct span_list cur = {0};
    CK_TRY(ck_grow((void **)&cur.v, &cur.cap, 0, sizeof *cur.v));
    cur.v[cur.n++] = (struct hist_span){FSMETA_ROOT_INO, S_IFDIR | 0755, 0, FSM_SEQ_NOW};
    int rc = 0;
    for (const char *p = path; rc == 0 && *p;) {
        while (*p == '/') p++;
        size_t len = strcspn(p, "/");
        if (len == 0) break;
        char name[256];
        if (len > 255) {
            rc = -ENAMETOOLONG;
            break;
        }
        memcpy(name, p, len);
        name[len] = 0;
        p += len;
        struct span_list next = {0};
        for (size_t i = 0; rc == 0 && i < cur.n; i++) {
            if (!S_ISDIR(cur.v[i].mode)) continue;
            next.within = &cur.v[i];
            rc = fsmeta_hist_all(m, cur.v[i].ino, name, add_span, &next);
            if (rc == 0) rc = next.err;
        }
        free(cur.v);
        cur = next;
    }
    if (rc < 0) {
        free(cur.v);
        return rc;
    }
    *out = cur.v;
    *n = cur.n;
    return 0;
}

struct ver_list {
    struct fsm_version *v;
    size_t n, cap;
    int err;
};

static int add_version(void *ctx, const struct fsm_version *v)
{
    struct ver_list *l = ctx;
    if ((l->err = ck_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v)) < 0) return 1;
    l->v[l->n++] = *v;
    return 0;
}

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const struct fsm_version *)a)->seq, y = ((const struct fsm_version *)b)->seq;
    return (x > y) - (x < y);
}

/* Versions of one inode visible during [from, to): each is current from its
** seq until the next version's. */
static int visible_in(fsmeta *m, const struct hist_span *sp, struct ver_list *out)
{
    struct ver_list all = {0};
    int rc = fsmeta_versions(m, sp->ino, add_version, &all);
    if (rc == 0) rc = all.err;
    for (size_t i = 0; rc == 0 && i < all.n; i++) {
        uint64_t end = i + 1 < all.n ? all.v[i + 1].seq : FSM_SEQ_NOW;
        if (all.v[i].seq < sp->to && end > sp->from && all.v[i].state != FSM_VER_PRUNED)
            if (add_version(out, &all.v[i])) rc = out->err;
    }
    free(all.v);
    return rc;
}

int history_versions(fsmeta *m, const struct hist_span *sp, size_t n,
                     struct fsm_version **out, size_t *nv)
{
    struct ver_list l = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (S_ISREG(sp[i].mode)) rc = visible_in(m, &sp[i], &l);
    if (rc < 0) {
        free(l.v);
        return rc;
    }
    if (l.n) qsort(l.v, l.n, sizeof *l.v, by_seq);
    size_t k = 0; /* a version seen through two spans (renamed back) once */
    for (size_t i = 0; i < l.n; i++)
        if (k == 0 || l.v[k - 1].id != l.v[i].id) l.v[k++] = l.v[i];
    *out = l.v;
    *nv = k;
    return 0;
}

struct name_list {
    char **v;
    size_t n, cap, bytes;
    const struct hist_span *within;
    int err;
};

static int add_name(void *ctx, const struct fsm_hentry *e)
{
    struct name_list *l = ctx;
    if (CK_MAX(l->within->from, e->born) >= CK_MIN(l->within->to, e->died)) return 0;
    if ((l->err = ck_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v)) < 0) return 1;
    if (!(l->v[l->n] = strdup(e->name))) return l->err = -ENOMEM, 1;
    l->bytes += strlen(e->name) + 1;
    l->n++;
    return 0;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted, unique names packed into one block: pointers, then the strings. */
static int pack_names(struct name_list *l, char ***names, size_t *nn)
{
    if (l->n) qsort(l->v, l->n, sizeof *l->v, by_str);
    char **blk = malloc((l->n + 1) * sizeof *blk + l->bytes + 1);
    if (!blk) return -ENOMEM;
    char *w = (char *)(blk + l->n + 1);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (k && strcmp(blk[k - 1], l->v[i]) == 0) continue;
        blk[k++] = strcpy(w, l->v[i]);
        w += strlen(w) + 1;
    }
    blk[k] = NULL;
    *names = blk;
    *nn = k;
    return 0;
}

int history_names(fsmeta *m, const struct hist_span *sp, size_t n, char ***names,
                  size_t *nn)
{
    struct name_list l = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!S_ISDIR(sp[i].mode)) continue;
        l.within = &sp[i];
        rc = fsmeta_hist_all(m, sp[i].ino, NULL, add_name, &l);
        if (rc == 0) rc = l.err;
    }
    if (rc == 0) rc = pack_names(&l, names, nn);
    for (size_t i = 0; i < l.n; i++) free(l.v[i]);
    free(l.v);
    return rc;
}

struct alive_at {
    uint64_t seq;
    struct fsm_hentry e;
    int found;
};

static int find_alive(void *ctx, const struct fsm_hentry *e)
{
    struct alive_at *a = ctx;
    if (e->born <= a->seq && a->seq < e->died) {
        a->e = *e;
        a->found = 1;
    }
    return a->found;
}

int history_path_at(fsmeta *m, uint64_t ino, uint64_t seq, char *buf, size_t cap)
{
    /* Built from the leaf up at the end of buf, then moved to the front. */
    size_t at = cap - 1;
    buf[at] = 0;
    for (int hops = 0; ino != FSMETA_ROOT_INO; hops++) {
        struct alive_at a = {.seq = seq};
        if (hops > 4096) return -ELOOP;
        CK_TRY(fsmeta_hist_of(m, ino, find_alive, &a));
        if (!a.found) return -ENOENT;
        size_t l = strlen(a.e.name);
        if (l + 1 > at) return -ENAMETOOLONG;
        at -= l;
        memcpy(buf + at, a.e.name, l);
        buf[--at] = '/';
        ino = a.e.parent;
    }
    if (at == cap - 1) buf[--at] = '/';
    memmove(buf, buf + at, cap - at);
    return 0;
}

/* ---- retention ---- */

struct cand {
    struct fsm_version v;
    char *key;      /* family of the last path; NULL: never shown */
    char *path;
    int64_t ended;  /* when it stopped being current; INT64_MAX: it still is */
    int current;    /* the current version of a live file */
};

/* Where v was last seen: the entry of its inode alive latest within v's life
** [v->seq, end). */
struct last_seen {
    uint64_t from, end, best_t;
    struct fsm_hentry e;
    int found;
};

static int pick_last(void *ctx, const struct fsm_hentry *e)
{
    struct last_seen *l = ctx;
    uint64_t lo = CK_MAX(e->born, l->from), hi = CK_MIN(e->died, l->end);
    if (lo < hi && (!l->found || hi - 1 >= l->best_t)) {
        l->best_t = hi - 1;
        l->e = *e;
        l->found = 1;
    }
    return 0;
}

static int describe(fsmeta *m, struct cand *c, uint64_t end, uint64_t last_seq)
{
    struct last_seen l = {.from = c->v.seq, .end = end};
    CK_TRY(fsmeta_hist_of(m, c->v.ino, pick_last, &l));
    struct fsm_attr a;
    c->current = end == FSM_SEQ_NOW && fsmeta_getattr(m, c->v.ino, &a) == 0 && a.nlink > 0;
    c->ended = INT64_MAX;
    uint64_t stop = CK_MIN(end, l.found ? l.e.died : end);
    if (stop != FSM_SEQ_NOW && fsmeta_seq_time(m, stop, &c->ended) < 0) c->ended = 0;
    if (!l.found) return 0;
    char dir[4096];
    uint64_t t = CK_MIN(l.best_t, last_seq);
    if (history_path_at(m, l.e.parent, t, dir, sizeof dir) < 0) return 0;
    size_t len = strlen(dir) + strlen(l.e.name) + 2;
    c->path = malloc(len);
    c->key = malloc(len);
    if (!c->path || !c->key) return -ENOMEM;
    snprintf(c->path, len, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", l.e.name);
    cutter_family_key(c->path, c->key);
    return 0;
}

static int by_key_seq(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    int k = !x->key - !y->key;
    if (k == 0 && x->key) k = strcmp(x->key, y->key);
    if (k) return k;
    return (x->v.seq > y->v.seq) - (x->v.seq < y->v.seq);
}

static int keeps(const struct hist_policy *p, const struct cand *c, size_t ordinal,
                 size_t from_end, int64_t now)
{
    if (c->current) return 1;
    if (!c->key) return 0;
    if (p->keep_last && from_end < p->keep_last) return 1;
    if (p->keep_every && ordinal % p->keep_every == 0) return 1;
    return p->keep_within_ns && c->ended >= now - p->keep_within_ns;
}

/* Every version with its group key, sorted by group then seq. */
static int load_cands(fsmeta *m, struct cand **out, size_t *n)
{
    struct ver_list all = {0};
    uint64_t last_seq;
    int rc = fsmeta_seq_last(m, &last_seq);
    if (rc == 0) rc = fsmeta_versions(m, 0, add_version, &all);
    if (rc == 0) rc = all.err;
    struct cand *c = rc == 0 && all.n ? calloc(all.n, sizeof *c) : NULL;
    if (rc == 0 && all.n && !c) rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < all.n; i++) {
        c[i].v = all.v[i];
        int same = i + 1 < all.n && all.v[i + 1].ino == all.v[i].ino;
        rc = describe(m, &c[i], same ? all.v[i + 1].seq : FSM_SEQ_NOW, last_seq);
    }
    free(all.v);
    if (rc == 0 && all.n) qsort(c, all.n, sizeof *c, by_key_seq);
    *out = c;
    *n = all.n;
    return rc;
}

int history_prune(fsmeta *m, const struct hist_policy *p, int64_t now, int dry_run,
                  history_prune_cb cb, void *ctx, struct hist_prune_stats *st)
{
    *st = (struct hist_prune_stats){0};
    struct cand *c = NULL;
    size_t n = 0;
    int rc = load_cands(m, &c, &n);
    for (size_t g = 0; rc == 0 && g < n;) {
        size_t e = g + 1;
        while (e < n && c[g].key && c[e].key && strcmp(c[g].key, c[e].key) == 0) e++;
        /* --keep-every counts every version ever made (stable ordinals);
        ** --keep-last counts the versions still there. */
        size_t left = 0;
        for (size_t i = g; i < e; i++) left += c[i].v.state != FSM_VER_PRUNED;
        for (size_t i = g; rc == 0 && i < e; i++) {
            if (c[i].v.state == FSM_VER_PRUNED) continue;
            st->versions++;
            if (keeps(p, &c[i], i - g, --left, now)) {
                st->kept++;
                continue;
            }
            if (!dry_run) rc = fsmeta_version_prune(m, c[i].v.id);
            if (rc == -EBUSY) { /* became current meanwhile: keep it */
                rc = 0;
                st->kept++;
                continue;
            }
            st->pruned++;
            st->pruned_bytes += c[i].v.size;
            if (cb) cb(ctx, &(struct hist_pruned){c[i].path ? c[i].path : "", &c[i].v});
        }
        g = e;
    }
    for (size_t i = 0; i < n; i++) free(c[i].path), free(c[i].key);
    free(c);
    return rc;
}

int history_parse_duration(const char *s, int64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    static const struct { char u; int64_t ns; } units[] = {
        {'s', 1000000000LL}, {'m', 60000000000LL}, {'h', 3600000000000LL},
        {'d', 86400000000000LL}, {'w', 604800000000000LL}};
    if (end != s && v == 0 && end[0] == 0) return *ns = 0, 0;
    if (end == s || v < 0 || end[0] == 0 || end[1] != 0) return -EINVAL;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (*end != units[i].u) continue;
        if (v > 9e18 / (double)units[i].ns) return -EINVAL;
        *ns = (int64_t)(v * (double)units[i].ns);
        return 0;
    }
    return -EINVAL;
}

/* ---- extended attributes ---- */

int history_is_xattr(const char *name)
{
    for (const char *n = HISTORY_XATTRS; n < HISTORY_XATTRS + HISTORY_XATTRS_LEN;
         n += strlen(n) + 1)
        if (strcmp(n, name) == 0) return 1;
    return 0;
}

int history_codec_mix(fsmeta *m, uint64_t ver, char *buf, size_t cap)
{
    struct fsm_mix x;
    CK_TRY(fsmeta_version_mix(m, ver, &x));
    /* Delta blocks are tensor-coded: report them apart from standalone ones. */
    const char *names[] = {"raw", "zstd", "tensor", "tensor-delta", "lossy", "wide"};
    uint64_t bytes[] = {x.raw[0], x.raw[1], x.raw[2] - CK_MIN(x.delta, x.raw[2]), x.delta,
                        x.raw[3], x.raw[4]};
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof x.raw / sizeof *x.raw; i++) total += x.raw[i];
    size_t len = 0;
    buf[0] = 0;
    for (int i = (int)(sizeof names / sizeof *names) - 1; i >= 0 && total; i--) {
        if (!bytes[i]) continue;
        int k = snprintf(buf + len, cap - len, "%s%s %.1f%%", len ? " " : "", names[i],
                         100.0 * (double)bytes[i] / (double)total);
        if (k < 0 || (size_t)k >= cap - len) return -ERANGE;
        len += (size_t)k;
    }
    if (!total) snprintf(buf, cap, "none");
    return 0;
}

int history_xattr(fsmeta *m, uint64_t ver, const char *name, char *buf, size_t cap)
{
    if (!history_is_xattr(name)) return -ENODATA;
    struct fsm_version v = {0};
    if (ver) CK_TRY(fsmeta_version_get(m, ver, &v));
    char val[160];
    const char *what = name + strlen("user.ckptfs.");
    if (strcmp(what, "version") == 0)
        snprintf(val, sizeof val, "%llu", (unsigned long long)v.seq);
    else if (strcmp(what, "stored_bytes") == 0)
        snprintf(val, sizeof val, "%llu", (unsigned long long)v.stored);
    else if (strcmp(what, "ratio") == 0 && v.stored)
        snprintf(val, sizeof val, "%.3f", (double)v.size / (double)v.stored);
    else if (strcmp(what, "ratio") == 0)
        snprintf(val, sizeof val, v.size ? "inf" : "1.000");
    else if (ver)
        CK_TRY(history_codec_mix(m, ver, val, sizeof val));
    else
        snprintf(val, sizeof val, "none");
    size_t len = strlen(val);
    if (cap == 0) return (int)len;
    if (len > cap) return -ERANGE;
    memcpy(buf, val, len);
    return (int)len;
}
