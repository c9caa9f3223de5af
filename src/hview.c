/*
** hview.c: the read-only history view (see hview.h).
**
** A node is described by a key: what it shows. Its inode number is a hash of
** the key, so a listing can give numbers without keeping nodes; only nodes
** the kernel holds references to live in the table, which is what maps a
** number back to its key. Contents of a version are read like any file's:
** its extents through store_read_range.
*/
#include "hview.h"
#include "common.h"
#include "history.h"
#include "extmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

enum hkind {
    HK_TOP = 1, /* .ckptfs */
    HK_SEQS,    /* .ckptfs/seq */
    HK_TIMES,   /* .ckptfs/time */
    HK_PATH,    /* .ckptfs/versions and below: path "" is versions itself */
    HK_SNAP,    /* a directory of the tree at seq */
    HK_FILE,    /* the content of one version */
    HK_EMPTY,   /* a file of the tree at seq with no version committed yet */
    HK_LINK,    /* a symlink of the tree at seq (its history row) */
};

struct hkey {
    enum hkind kind;
    uint64_t seq, ino, ver, hid;
    uint32_t mode; /* HK_SNAP, HK_EMPTY: the entry's bits */
    char *path;    /* HK_PATH (owned by the node, or borrowed while looking) */
};

struct hnode {
    uint64_t id; /* inode number */
    struct hkey k;
    uint64_t nlookup;
    struct extmap *map; /* HK_FILE: loaded at first read */
    struct hnode *next;
};

/* The table of nodes the kernel holds grows with them: a listing of
** .ckptfs/seq hands out one reference per change ever made. */
#define NBUCKET_MIN 1024

struct hview {
    struct store *st;
    pthread_mutex_t mu;
    struct hnode **bucket;
    size_t nbucket, count; /* nbucket: a power of two */
};

/* Bucket of inode number id: its hash bits mixed down (view inode numbers
** share their top bits and bit 4). */
static size_t slot_of(const hview *h, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (h->nbucket - 1);
}

/* Under h->mu: twice the buckets once there are two nodes per bucket. */
static void grow(hview *h)
{
    if (h->count <= 2 * h->nbucket) return;
    size_t old = h->nbucket;
    struct hnode **b = calloc(2 * old, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    struct hnode **ob = h->bucket;
    h->bucket = b;
    h->nbucket = 2 * old;
    for (size_t i = 0; i < old; i++)
        for (struct hnode *n = ob[i], *next; n; n = next) {
            next = n->next;
            size_t j = slot_of(h, n->id);
            n->next = b[j];
            b[j] = n;
        }
    free(ob);
}

static uint64_t key_ino(const struct hkey *k)
{
    switch (k->kind) {
    case HK_TOP: case HK_SEQS: case HK_TIMES:
        return HVIEW_INO_MIN + k->kind;
    case HK_PATH:
        if (!k->path || !k->path[0]) return HVIEW_INO_MIN + HK_PATH;
        break;
    default:
        break;
    }
    uint64_t v[5] = {k->kind, k->seq, k->ino, k->ver, k->hid};
    XXH64_hash_t h = XXH3_64bits_withSeed(v, sizeof v, 0);
    if (k->path) h = XXH3_64bits_withSeed(k->path, strlen(k->path), h);
    return HVIEW_INO_MIN | (h & (HVIEW_INO_MIN - 1)) | 16; /* never a fixed one */
}

int hview_create(struct store *st, hview **out)
{
    hview *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->st = st;
    h->nbucket = NBUCKET_MIN;
    h->bucket = calloc(h->nbucket, sizeof *h->bucket);
    if (!h->bucket) {
        free(h);
        return -ENOMEM;
    }
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return 0;
}

static void free_node(struct hnode *n)
{
    extmap_put(n->map);
    free(n->k.path);
    free(n);
}

void hview_destroy(hview *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->nbucket; i++)
        for (struct hnode *n = h->bucket[i], *next; n; n = next) {
            next = n->next;
            free_node(n);
        }
    pthread_mutex_destroy(&h->mu);
    free(h->bucket);
    free(h);
}

/* Under h->mu. */
static struct hnode *find(hview *h, uint64_t id)
{
    for (struct hnode *n = h->bucket[slot_of(h, id)]; n; n = n->next)
        if (n->id == id) return n;
    return NULL;
}

/* Copy of the key of a node the kernel knows (path strdup'd). */
static int key_of(hview *h, uint64_t ino, struct hkey *k)
{
    struct hkey fixed = {.kind = (enum hkind)(ino - HVIEW_INO_MIN), .path = ""};
    if (ino >= HVIEW_INO_MIN + HK_TOP && ino <= HVIEW_INO_MIN + HK_PATH) {
        *k = fixed;
        k->path = strdup("");
        return k->path ? 0 : -ENOMEM;
    }
    pthread_mutex_lock(&h->mu);
    struct hnode *n = find(h, ino);
    int rc = n ? 0 : -ESTALE;
    if (n) {
        *k = n->k;
        k->path = n->k.path ? strdup(n->k.path) : NULL;
        if (n->k.path && !k->path) rc = -ENOMEM;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* Count one kernel reference to the node of k (taking over k->path). */
static int remember(hview *h, struct hkey *k, uint64_t id)
{
    pthread_mutex_lock(&h->mu);
    struct hnode *n = find(h, id);
    if (!n && (n = calloc(1, sizeof *n))) {
        n->id = id;
        n->k = *k;
        k->path = NULL;
        size_t j = slot_of(h, id);
        n->next = h->bucket[j];
        h->bucket[j] = n;
        h->count++;
        grow(h);
    }
    if (n) n->nlookup++;
    pthread_mutex_unlock(&h->mu);
    return n ? 0 : -ENOMEM;
}

void hview_forget(hview *h, uint64_t ino, uint64_t nlookup)
{
    pthread_mutex_lock(&h->mu);
    struct hnode **p = &h->bucket[slot_of(h, ino)];
    while (*p && (*p)->id != ino) p = &(*p)->next;
    struct hnode *n = *p;
    if (n && (n->nlookup -= CK_MIN(nlookup, n->nlookup)) == 0) {
        *p = n->next;
        h->count--;
        free_node(n);
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- attributes ---- */

static void set_time(struct timespec *ts, int64_t ns)
{
    ts->tv_sec = (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

/* The attributes of version v (the file key k shows). */
static void version_stat(const struct hkey *k, const struct fsm_version *v, struct stat *sb)
{
    memset(sb, 0, sizeof *sb);
    sb->st_ino = key_ino(k);
    sb->st_nlink = 1;
    sb->st_mode = S_IFREG | (v->mode & 07555);
    sb->st_uid = v->uid;
    sb->st_gid = v->gid;
    sb->st_size = (off_t)v->size;
    sb->st_blocks = (blkcnt_t)((v->stored + 4095) / 4096 * 8);
    set_time(&sb->st_mtim, v->mtime);
    set_time(&sb->st_atim, v->mtime);
    set_time(&sb->st_ctim, v->time);
}

static int stat_of(hview *h, const struct hkey *k, struct stat *sb)
{
    fsmeta *m = h->st->meta;
    if (k->kind == HK_FILE) {
        struct fsm_version v;
        CK_TRY(fsmeta_version_get(m, k->ver, &v));
        version_stat(k, &v, sb);
        return 0;
    }
    memset(sb, 0, sizeof *sb);
    sb->st_ino = key_ino(k);
    sb->st_nlink = 1;
    /* Everything else is owned like the root and dated by its change. */
    struct fsm_attr root;
    CK_TRY(fsmeta_getattr(m, FSMETA_ROOT_INO, &root));
    sb->st_uid = root.uid;
    sb->st_gid = root.gid;
    int64_t t = root.mtime;
    if (k->kind == HK_SNAP || k->kind == HK_EMPTY || k->kind == HK_LINK)
        fsmeta_seq_time(m, k->seq, &t);
    switch (k->kind) {
    case HK_SNAP: sb->st_mode = S_IFDIR | (k->mode & 07555); break;
    case HK_EMPTY: sb->st_mode = S_IFREG | (k->mode & 07555); break;
    case HK_LINK: sb->st_mode = S_IFLNK | 0777; break;
    default: sb->st_mode = S_IFDIR | 0555; break;
    }
    if (S_ISDIR(sb->st_mode)) sb->st_nlink = 2;
    if (k->kind == HK_LINK) {
        size_t len = 0;
        char buf[4096];
        if (fsmeta_hist_target(m, k->hid, buf, sizeof buf, &len) == 0) sb->st_size = (off_t)len;
    }
    set_time(&sb->st_mtim, t);
    set_time(&sb->st_atim, t);
    set_time(&sb->st_ctim, t);
    return 0;
}

int hview_getattr(hview *h, uint64_t ino, struct stat *sb)
{
    struct hkey k;
    CK_TRY(key_of(h, ino, &k));
    int rc = stat_of(h, &k, sb);
    free(k.path);
    return rc;
}

/* ---- names ---- */

/* "v%08llu-YYYYMMDDTHHMMSSZ": the change that committed v, then its time. */
static void version_name(const struct fsm_version *v, char *buf, size_t cap)
{
    time_t s = (time_t)(v->time / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(buf, cap, "v%08llu-%s", (unsigned long long)v->seq, when);
}

/* The seq of a version name ("v" digits, anything after); 0 if not one. */
static uint64_t version_seq(const char *name)
{
    if (name[0] != 'v' || name[1] < '0' || name[1] > '9') return 0;
    char *end;
    unsigned long long s = strtoull(name + 1, &end, 10);
    return *end == 0 || *end == '-' ? s : 0;
}

static uint64_t parse_seq(const char *name)
{
    if (name[0] < '1' || name[0] > '9') return 0;
    char *end;
    unsigned long long s = strtoull(name, &end, 10);
    return *end ? 0 : s;
}

/* A UTC time as listed (2026-11-21T10:00:00Z, fractions allowed) or
** @EPOCH_SECONDS; the last ns it names. -1 if not a time. */
static int64_t parse_time(const char *name)
{
    char *end;
    if (name[0] == '@') {
        long long s = strtoll(name + 1, &end, 10);
        return end == name + 1 || *end ? -1 : s * 1000000000LL + 999999999;
    }
    struct tm tm = {0};
    end = strptime(name, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end) return -1;
    int64_t frac = 999999999, scale = 100000000;
    if (*end == '.') {
        frac = 0;
        for (end++; *end >= '0' && *end <= '9'; end++, scale /= 10) frac += (*end - '0') * scale;
    }
    if (*end == 'Z') end++;
    if (*end) return -1;
    return (int64_t)timegm(&tm) * 1000000000LL + frac;
}

/* ---- lookup ---- */

/* The child of the tree at seq named by entry e; -ENOENT when its content
** of that time is pruned (or it is of a type the view does not show). */
/* The key of entry e of the tree at seq; known (if not NULL) is the
** version its inode had then, found already (NULL: looked up here). */
static int snap_child(fsmeta *m, uint64_t seq, const struct fsm_hentry *e,
                      const struct fsm_version **known, struct hkey *c)
{
    *c = (struct hkey){.seq = seq, .ino = e->ino, .mode = e->mode};
    if (S_ISDIR(e->mode)) {
        c->kind = HK_SNAP;
        return 0;
    }
    if (S_ISLNK(e->mode)) {
        *c = (struct hkey){.kind = HK_LINK, .hid = e->id, .seq = seq};
        return 0;
    }
    if (!S_ISREG(e->mode)) return -ENOENT;
    struct fsm_version v;
    int rc = known ? (*known ? 0 : -ENOENT) : fsmeta_version_at(m, e->ino, seq, &v);
    if (rc == -ENOENT) {
        c->kind = HK_EMPTY;
        return 0;
    }
    CK_TRY(rc);
    const struct fsm_version *w = known ? *known : &v;
    if (w->state == FSM_VER_PRUNED) return -ENOENT;
    *c = (struct hkey){.kind = HK_FILE, .ver = w->id};
    return 0;
}

struct one_entry {
    struct fsm_hentry e;
    int found;
};

static int take_entry(void *ctx, const struct fsm_hentry *e)
{
    struct one_entry *o = ctx;
    o->e = *e;
    o->found = 1;
    return 1;
}

static char *join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    if (path) snprintf(path, len, "%s/%s", dir, name);
    return path;
}

/* A version of the path dir named as listed (vSEQ-...); -ENOENT if none. */
static int version_child(fsmeta *m, const char *dir, uint64_t want, struct hkey *c)
{
    struct hist_span *sp;
    struct fsm_version *v;
    size_t n, nv;
    CK_TRY(history_resolve(m, dir[0] ? dir : "/", &sp, &n));
    int rc = history_versions(m, sp, n, &v, &nv);
    free(sp);
    CK_TRY(rc);
    rc = -ENOENT;
    for (size_t i = 0; i < nv; i++)
        if (v[i].seq == want) *c = (struct hkey){.kind = HK_FILE, .ver = v[i].id}, rc = 0;
    free(v);
    return rc;
}

static int path_child(fsmeta *m, const char *dir, const char *name, struct hkey *c)
{
    uint64_t want = version_seq(name);
    if (want && version_child(m, dir, want, c) == 0) return 0;
    char *path = join(dir, name);
    if (!path) return -ENOMEM;
    struct hist_span *sp;
    size_t n;
    int rc = history_resolve(m, path, &sp, &n);
    if (rc == 0) {
        free(sp);
        if (n == 0) rc = -ENOENT;
    }
    if (rc < 0) {
        free(path);
        return rc;
    }
    *c = (struct hkey){.kind = HK_PATH, .path = path};
    return 0;
}

/* The child key of parent k named name (c->path malloc'd when set). */
static int child(hview *h, const struct hkey *k, const char *name, struct hkey *c)
{
    fsmeta *m = h->st->meta;
    *c = (struct hkey){0};
    uint64_t seq, last;
    switch (k->kind) {
    case HK_TOP:
        if (strcmp(name, "seq") == 0) c->kind = HK_SEQS;
        else if (strcmp(name, "time") == 0) c->kind = HK_TIMES;
        else if (strcmp(name, "versions") == 0) c->kind = HK_PATH;
        else return -ENOENT;
        return 0;
    case HK_SEQS:
    case HK_TIMES:
        CK_TRY(fsmeta_seq_last(m, &last));
        if (k->kind == HK_SEQS) {
            seq = parse_seq(name);
        } else {
            int64_t t = parse_time(name);
            if (t < 0 || fsmeta_seq_at(m, t, &seq) < 0) seq = 0;
        }
        if (seq == 0 || seq > last) return -ENOENT;
        *c = (struct hkey){.kind = HK_SNAP, .seq = seq, .ino = FSMETA_ROOT_INO,
                           .mode = S_IFDIR | 0555};
        return 0;
    case HK_SNAP: {
        struct one_entry o = {0};
        CK_TRY(fsmeta_hist_at(m, k->seq, k->ino, name, 0, take_entry, &o));
        if (!o.found) return -ENOENT;
        return snap_child(m, k->seq, &o.e, NULL, c);
    }
    case HK_PATH:
        return path_child(m, k->path, name, c);
    default:
        return -ENOTDIR;
    }
}

int hview_lookup(hview *h, uint64_t parent, const char *name, struct stat *sb)
{
    struct hkey k, c;
    if (parent == FSMETA_ROOT_INO) {
        if (strcmp(name, HVIEW_NAME)) return -ENOENT;
        c = (struct hkey){.kind = HK_TOP};
    } else {
        CK_TRY(key_of(h, parent, &k));
        int rc = child(h, &k, name, &c);
        free(k.path);
        CK_TRY(rc);
    }
    int rc = stat_of(h, &c, sb);
    if (rc == 0) rc = remember(h, &c, sb->st_ino);
    free(c.path);
    return rc;
}

int hview_readlink(hview *h, uint64_t ino, char *buf, size_t cap, size_t *len)
{
    struct hkey k;
    CK_TRY(key_of(h, ino, &k));
    free(k.path);
    if (k.kind != HK_LINK) return -EINVAL;
    return fsmeta_hist_target(h->st->meta, k.hid, buf, cap, len);
}

/* ---- listing ---- */

struct lister {
    hview *h;
    int plus, full, err;
    hview_dirent_cb cb;
    void *ctx;
    uint64_t seq; /* HK_SNAP */
    /* HK_TIMES: the second being gathered */
    int64_t sec;
    uint64_t sec_seq;
};

/* Offer one entry of key c as name (v: its version, when c is one);
** returns 1 to stop. */
static int offer_v(struct lister *l, const char *name, struct hkey *c,
                   const struct fsm_version *v, uint64_t cookie)
{
    struct stat sb;
    if (v) version_stat(c, v, &sb);
    else if ((l->err = stat_of(l->h, c, &sb)) < 0) return 1;
    if (l->cb(l->ctx, name, &sb, cookie)) return l->full = 1;
    if (l->plus && (l->err = remember(l->h, c, sb.st_ino)) < 0) return 1;
    return 0;
}

static int offer(struct lister *l, const char *name, struct hkey *c, uint64_t cookie)
{
    return offer_v(l, name, c, NULL, cookie);
}

static int list_seq(void *ctx, uint64_t seq, int64_t time)
{
    (void)time;
    char name[24];
    snprintf(name, sizeof name, "%llu", (unsigned long long)seq);
    struct hkey c = {.kind = HK_SNAP, .seq = seq, .ino = FSMETA_ROOT_INO,
                     .mode = S_IFDIR | 0555};
    return offer(ctx, name, &c, seq + 2);
}

static int flush_second(struct lister *l)
{
    if (!l->sec_seq) return 0;
    char name[32];
    time_t s = (time_t)l->sec;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(name, sizeof name, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct hkey c = {.kind = HK_SNAP, .seq = l->sec_seq, .ino = FSMETA_ROOT_INO,
                     .mode = S_IFDIR | 0555};
    uint64_t seq = l->sec_seq;
    l->sec_seq = 0;
    return offer(l, name, &c, seq + 2);
}

/* One entry per second in which something changed: its last change. */
static int list_time(void *ctx, uint64_t seq, int64_t time)
{
    struct lister *l = ctx;
    int64_t sec = time / 1000000000;
    if (l->sec_seq && sec != l->sec && flush_second(l)) return 1;
    l->sec = sec;
    l->sec_seq = seq;
    return 0;
}

static int list_snap(void *ctx, const struct fsm_hentry *e, const struct fsm_version *v)
{
    struct lister *l = ctx;
    struct hkey c;
    int rc = snap_child(l->h->st->meta, l->seq, e, &v, &c);
    if (rc == -ENOENT) return 0;
    if (rc < 0) return l->err = rc, 1;
    return offer_v(l, e->name, &c, c.kind == HK_FILE ? v : NULL, e->id + 2);
}

static int list_path(struct lister *l, const char *dir, uint64_t after)
{
    fsmeta *m = l->h->st->meta;
    struct hist_span *sp;
    size_t n, nn = 0, nv = 0;
    char **names = NULL;
    struct fsm_version *v = NULL;
    CK_TRY(history_resolve(m, dir[0] ? dir : "/", &sp, &n));
    int rc = history_names(m, sp, n, &names, &nn);
    if (rc == 0) rc = history_versions(m, sp, n, &v, &nv);
    free(sp);
    for (size_t i = after > 2 ? after - 2 : 0; rc == 0 && i < nn + nv; i++) {
        struct hkey c;
        char vname[64];
        const char *name = vname;
        if (i < nn) { /* a name the spans held: its path resolves, by construction */
            name = names[i];
            c = (struct hkey){.kind = HK_PATH, .path = join(dir, name)};
            if (!c.path) rc = -ENOMEM;
        } else {
            version_name(&v[i - nn], vname, sizeof vname);
            c = (struct hkey){.kind = HK_FILE, .ver = v[i - nn].id};
        }
        int stop = rc == 0 && offer(l, name, &c, i + 3);
        free(c.path);
        if (stop) break;
    }
    free(names);
    free(v);
    return rc;
}

int hview_readdir(hview *h, uint64_t dir, uint64_t after, int plus, hview_dirent_cb cb,
                  void *ctx)
{
    struct hkey k;
    CK_TRY(key_of(h, dir, &k));
    int rc = 0;
    if (k.kind != HK_TOP && k.kind != HK_SEQS && k.kind != HK_TIMES && k.kind != HK_PATH &&
        k.kind != HK_SNAP)
        rc = -ENOTDIR;
    struct lister l = {.h = h, .plus = plus, .cb = cb, .ctx = ctx, .seq = k.seq};
    struct stat self;
    if (rc == 0) rc = stat_of(h, &k, &self);
    for (uint64_t c = after + 1; rc == 0 && c <= 2; c++)
        if (cb(ctx, c == 1 ? "." : "..", &self, c)) l.full = 1;
    if (rc < 0 || l.full) goto out;
    switch (k.kind) {
    case HK_TOP: {
        static const char *names[] = {"seq", "time", "versions"};
        static const enum hkind kinds[] = {HK_SEQS, HK_TIMES, HK_PATH};
        for (uint64_t i = after > 2 ? after - 2 : 0; i < 3; i++) {
            struct hkey c = {.kind = kinds[i]};
            if (offer(&l, names[i], &c, i + 3)) break;
        }
        break;
    }
    case HK_SEQS:
        rc = fsmeta_changes(h->st->meta, after > 2 ? after - 2 : 0, list_seq, &l);
        break;
    case HK_TIMES:
        rc = fsmeta_changes(h->st->meta, after > 2 ? after - 2 : 0, list_time, &l);
        if (rc == 0 && !l.full && !l.err) flush_second(&l);
        break;
    case HK_SNAP:
        rc = fsmeta_hist_at_versions(h->st->meta, k.seq, k.ino, after > 2 ? after - 2 : 0,
                                     list_snap, &l);
        break;
    default:
        rc = list_path(&l, k.path, after);
        break;
    }
out:
    free(k.path);
    return rc < 0 ? rc : l.err;
}

/* ---- content ---- */

int hview_version(hview *h, uint64_t ino, uint64_t *ver)
{
    struct hkey k;
    CK_TRY(key_of(h, ino, &k));
    free(k.path);
    if (k.kind == HK_EMPTY) *ver = 0;
    else if (k.kind == HK_FILE) *ver = k.ver;
    else return -EINVAL;
    return 0;
}

int hview_open(hview *h, uint64_t ino)
{
    struct hkey k;
    CK_TRY(key_of(h, ino, &k));
    free(k.path);
    if (k.kind == HK_FILE || k.kind == HK_EMPTY) return 0;
    return k.kind == HK_LINK ? -ELOOP : -EISDIR;
}

/* The extents of a file node, loaded once; a reference for the caller. */
static int map_of(hview *h, uint64_t ino, struct extmap **out, uint64_t *size)
{
    pthread_mutex_lock(&h->mu);
    struct hnode *n = find(h, ino);
    int rc = !n ? -ESTALE : n->k.kind == HK_EMPTY ? 1 : 0;
    struct fsm_version v = {0};
    if (rc == 0) rc = fsmeta_version_get(h->st->meta, n->k.ver, &v);
    /* Pruned since it was looked up: its extents are gone, never read zeros. */
    if (rc == 0 && !n->map && v.state == FSM_VER_PRUNED) rc = -ENOENT;
    if (rc == 0 && !n->map) {
        struct fsm_extent *e;
        size_t ne;
        rc = fsmeta_version_extents(h->st->meta, n->k.ver, &e, &ne);
        if (rc == 0) {
            n->map = extmap_new(e, ne);
            free(e);
            if (!n->map) rc = -ENOMEM;
        }
    }
    if (rc == 0) extmap_get(n->map);
    *out = rc == 0 ? n->map : NULL;
    *size = v.size;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int hview_read(hview *h, uint64_t ino, void *buf, size_t len, uint64_t off, size_t *got)
{
    struct extmap *m;
    uint64_t size;
    *got = 0;
    int rc = map_of(h, ino, &m, &size);
    if (rc != 0) return rc > 0 ? 0 : rc; /* an empty file */
    if (off < size) {
        *got = (size_t)CK_MIN((uint64_t)len, size - off);
        rc = store_read_range(h->st, m->e, m->n, buf, *got, off);
    }
    extmap_put(m);
    return rc;
}
