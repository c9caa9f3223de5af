/*
** rebuild.c: metadata from the packs alone (see rebuild.h).
**
** Three passes. Scan: every record of every pack, block records kept in a
** table with the hash of the base a delta names, manifests decoded. Chunks:
** for each hash the record to use (standalone first), inserted after the
** record of its base, so the chunk rows' depth and chain come out right.
** Files: the inodes of the newest manifests made and named, then every
** manifest committed as a version in time order; fsck's repair of the
** reference counts finishes the job.
*/
#include "rebuild.h"
#include "codec.h"
#include "common.h"
#include "manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

struct rec {
    struct fsm_chunk c;  /* id 0 until inserted */
    uint64_t base_hash;  /* the base a delta names; 0: standalone */
    int state;           /* 0 new, 1 inserting, 2 inserted, 3 unusable */
    int verified;        /* replay: decoded and hash-checked */
};

/* A manifest as kept while rebuilding: its path on the heap, not in a
** 4 KiB array (a store may hold millions). */
struct mani {
    uint64_t ino, size;
    int64_t time, mtime, ctime; /* time -1: not to be made a version */
    uint32_t mode, uid, gid, flags, n;
    struct manifest_ext *ext;   /* n of them, owned */
    char *path;
    struct fsm_chunk c;         /* its record */
};

struct scan {
    struct store *st;
    uint32_t pack, from_pack; /* scanning pack; first pack to scan */
    uint64_t from_off;        /* where in from_pack: the replay mark */
    int replay;               /* rebuild_replay: meta.db has rows already */
    int unsure;               /* a manifest or pack could not be read */
    struct rec *r;
    size_t nr, capr;
    struct mani *m;
    size_t nm, capm;
    int err;
    struct rebuild_report *rep;
};

/* ---- scan ---- */

static int add_manifest(struct scan *s, uint64_t off, const struct pack_rec *pr)
{
    uint8_t *buf = malloc(pr->stored_len ? pr->stored_len : 1);
    if (!buf) return -ENOMEM;
    struct pack_rec want = *pr;
    int rc = pack_read(s->st->packs, s->pack, off, &want, buf);
    static _Thread_local struct manifest m;
    if (rc < 0 && rc != -ENOMEM) rc = 1, s->unsure = 1; /* unreadable: skipped */
    if (rc == 0 && (pr->codec != CODEC_RAW || pr->raw_len != pr->stored_len ||
                    XXH3_64bits(buf, pr->stored_len) != pr->hash ||
                    manifest_decode(buf, pr->stored_len, &m) < 0))
        rc = 1; /* damaged: skipped */
    free(buf);
    if (rc) return rc < 0 ? rc : 0;
    if (ck_grow((void **)&s->m, &s->capm, s->nm, sizeof *s->m) < 0) {
        manifest_free(&m);
        return -ENOMEM;
    }
    struct mani *x = &s->m[s->nm];
    *x = (struct mani){.ino = m.ino, .size = m.size, .time = m.time, .mtime = m.mtime,
                       .ctime = m.ctime, .mode = m.mode, .uid = m.uid, .gid = m.gid,
                       .flags = m.flags, .n = m.n, .ext = m.ext, .path = strdup(m.path)};
    x->c = (struct fsm_chunk){.pack = s->pack, .off = off, .raw_len = pr->raw_len,
                              .stored_len = pr->stored_len, .codec = pr->codec,
                              .hash = pr->hash, .chain = pr->stored_len};
    if (!x->path) {
        manifest_free(&m);
        return -ENOMEM;
    }
    s->nm++;
    s->rep->manifests++;
    return 0;
}

static int add_block(struct scan *s, uint64_t off, const struct pack_rec *pr)
{
    uint64_t bh = 0;
    if (pr->codec > CODEC_MAX) return 0; /* a codec this build does not know */
    if (pr->codec >= CODEC_TENSOR) {
        uint8_t head[16];
        size_t n = CK_MIN(sizeof head, (size_t)pr->stored_len);
        if (pack_peek(s->st->packs, s->pack, off, head, n) < 0 ||
            codec_base_hash(pr->codec, head, n, &bh) < 0)
            return 0;
    }
    if (ck_grow((void **)&s->r, &s->capr, s->nr, sizeof *s->r) < 0) return -ENOMEM;
    s->r[s->nr++] = (struct rec){
        .c = {.pack = s->pack, .off = off, .raw_len = pr->raw_len,
              .stored_len = pr->stored_len, .codec = pr->codec, .hash = pr->hash,
              .chain = pr->stored_len},
        .base_hash = bh};
    return 0;
}

static int scan_one(void *ctx, uint64_t off, const struct pack_rec *pr)
{
    struct scan *s = ctx;
    s->rep->records++;
    int rc = pr->flags & PACK_REC_MANIFEST ? add_manifest(s, off, pr) : add_block(s, off, pr);
    return rc < 0 ? (s->err = rc) : 0;
}

static int scan_packs(struct scan *s)
{
    uint32_t max = pack_max_id(s->st->packs);
    for (uint32_t id = s->from_pack ? s->from_pack : 1; id <= max; id++) {
        uint64_t size, skipped = 0;
        if (pack_size(s->st->packs, id, &size) < 0) continue; /* removed by gc */
        s->pack = id;
        uint64_t from = id == s->from_pack ? s->from_off : 0;
        int rc = pack_scan_all(s->st->packs, id, from, scan_one, s, &skipped);
        if (s->err) return s->err;
        if (rc < 0)
            ck_log(CK_LOG_WARN, "pack %u: unreadable header, skipped (%s)", id, strerror(-rc));
        s->unsure |= rc < 0;
        s->rep->packs += rc == 0;
        s->rep->skipped_bytes += skipped;
    }
    return 0;
}

/* ---- chunks: hash -> the record to use ---- */

struct index {
    size_t *slot; /* rec index + 1; 0 empty */
    size_t mask;
};

static size_t *find_slot(struct index *x, uint64_t h, const struct rec *r)
{
    for (size_t i = (size_t)(h * 0x9E3779B97F4A7C15ull) & x->mask;; i = (i + 1) & x->mask)
        if (!x->slot[i] || r[x->slot[i] - 1].c.hash == h) return &x->slot[i];
}

/* Better of two records of the same bytes: standalone, then shorter chain. */
static int better(const struct rec *a, const struct rec *b)
{
    if ((a->state == 2) != (b->state == 2)) return a->state == 2; /* meta.db's own */
    if (!a->base_hash != !b->base_hash) return !a->base_hash;
    return a->c.stored_len < b->c.stored_len;
}

static int build_index(struct scan *s, struct index *x)
{
    size_t cap = 16;
    while (cap < 2 * s->nr + 2) cap *= 2;
    x->slot = calloc(cap, sizeof *x->slot);
    x->mask = cap - 1;
    if (!x->slot) return -ENOMEM;
    for (size_t i = 0; i < s->nr; i++) {
        size_t *p = find_slot(x, s->r[i].c.hash, s->r);
        if (!*p || better(&s->r[i], &s->r[*p - 1])) *p = i + 1;
    }
    return 0;
}

static struct rec *lookup(struct scan *s, struct index *x, uint64_t h)
{
    size_t *p = find_slot(x, h, s->r);
    return *p ? &s->r[*p - 1] : NULL;
}

/* Insert r's chunk row after its base's; 0, or -ENOENT if r cannot be
** decoded (its base is missing, or a cycle). */
static int insert_rec(struct scan *s, struct index *x, struct rec *r, int depth)
{
    if (r->state == 2) return 0;
    if (r->state == 3 || r->state == 1 || depth > 64) return -ENOENT;
    r->state = 1;
    int rc = 0;
    if (r->base_hash) {
        struct rec *b = lookup(s, x, r->base_hash);
        rc = b ? insert_rec(s, x, b, depth + 1) : -ENOENT;
        if (rc == 0) r->c.base = b->c.id;
    }
    if (rc == 0) rc = fsmeta_chunk_add(s->st->meta, &r->c);
    r->state = rc == 0 ? 2 : 3;
    return rc == -ENOENT || rc == 0 ? rc : (s->err = rc);
}

/* ---- files ---- */

static int by_time(const void *a, const void *b)
{
    const struct mani *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    if (x->c.pack != y->c.pack) return x->c.pack < y->c.pack ? -1 : 1;
    return x->c.off < y->c.off ? -1 : x->c.off > y->c.off;
}

/* Resolve m's extents to chunks; 0, or -ENOENT if a block is missing. */
static int resolve(struct scan *s, struct index *x, const struct mani *m, struct fsm_extent *e)
{
    for (uint32_t i = 0; i < m->n; i++) {
        struct rec *r = lookup(s, x, m->ext[i].hash);
        if (!r || r->c.raw_len != m->ext[i].raw_len) return -ENOENT;
        CK_TRY(insert_rec(s, x, r, 0));
        e[i] = (struct fsm_extent){.file_off = m->ext[i].off, .c = r->c};
    }
    return 0;
}

/* The directory for the parent of path (made as needed, like the root);
** *leaf points at the last component. */
static int parent_dir(fsmeta *meta, const struct fsm_attr *root, char *path, uint64_t *dir,
                      char **leaf)
{
    *dir = FSMETA_ROOT_INO;
    char *p = path, *slash;
    while ((slash = strchr(p, '/')) != NULL) {
        *slash = 0;
        uint64_t next;
        int rc = *p ? fsmeta_lookup(meta, *dir, p, &next) : 0;
        if (*p && rc == -ENOENT) {
            struct fsm_attr a = {.mode = S_IFDIR | 0755, .uid = root->uid, .gid = root->gid,
                                 .nlink = 2, .atime = root->mtime, .mtime = root->mtime,
                                 .ctime = root->mtime};
            rc = fsmeta_create(meta, *dir, p, &a, NULL, 0);
            next = a.ino;
        }
        *slash = '/';
        if (rc < 0) return rc;
        if (*p) *dir = next;
        p = slash + 1;
    }
    *leaf = p;
    return *p ? 0 : -EINVAL;
}

/* Make inode m->ino as its newest manifest m says (unnamed yet). */
static int make_inode(struct scan *s, const struct mani *m)
{
    struct fsm_attr a = {.ino = m->ino, .mode = S_IFREG | (m->mode & 07777),
                         .uid = m->uid, .gid = m->gid, .nlink = 1, .atime = m->mtime,
                         .mtime = m->mtime, .ctime = m->ctime};
    return fsmeta_mkinode_at(s->st->meta, &a);
}

/* Name inode m->ino by its newest manifest m. */
static int name_file(struct scan *s, const struct fsm_attr *root, const struct mani *m)
{
    fsmeta *meta = s->st->meta;
    char path[MANIFEST_PATH_MAX + 1], *leaf;
    snprintf(path, sizeof path, "%s", m->path);
    uint64_t dir;
    int rc = parent_dir(meta, root, path, &dir, &leaf);
    if (rc == 0) rc = fsmeta_link(meta, dir, leaf, m->ino);
    if (rc == 0) return 0;
    /* The name is taken (or the path unusable): /lost+found/INO-NAME. */
    char name[64];
    const char *base = strrchr(m->path, '/');
    snprintf(name, sizeof name, "%llu-%.40s", (unsigned long long)m->ino,
             base ? base + 1 : m->path);
    snprintf(path, sizeof path, "lost+found/%s", name);
    CK_TRY(parent_dir(meta, root, path, &dir, &leaf));
    s->rep->lost_found++;
    return fsmeta_link(meta, dir, leaf, m->ino);
}

/* Commit manifest m as a version of its inode. */
static int add_version(struct scan *s, struct index *x, struct mani *m)
{
    struct fsm_extent *e = malloc((m->n ? m->n : 1) * sizeof *e);
    if (!e) return -ENOMEM;
    int rc = resolve(s, x, m, e);
    if (rc == 0) {
        struct fsm_chunk c = m->c;
        rc = fsmeta_set_content(s->st->meta, m->ino, e, m->n, m->size, m->mtime,
                                m->ctime, 0, &c);
    }
    free(e);
    if (rc == 0) s->rep->versions++;
    return rc;
}

/* A replay trusts meta.db's blocks, and checks those it adds (a crash may
** have left a valid header over a torn payload); a rebuild leaves that to
** ckptctl verify. */
static int checked(struct scan *s, struct rec *r)
{
    if (!s->replay || r->verified) return 0;
    uint8_t *buf = malloc(r->c.raw_len ? r->c.raw_len : 1);
    int rc = buf ? store_verify_block(s->st, &r->c, buf) : -ENOMEM;
    free(buf);
    r->verified = rc == 0;
    return rc;
}

/* Drop (mark with time -1) manifests that cannot be versions: a
** provisional one the next commit of its inode replaced, one naming a
** missing block. m is sorted by time. */
static void drop_unusable(struct scan *s, struct index *x)
{
    for (size_t i = 0; i < s->nm; i++) {
        struct mani *m = &s->m[i];
        int later = 0;
        if (m->time < 0) continue;
        for (size_t j = i + 1; j < s->nm && (m->flags & MANIFEST_PROVISIONAL); j++)
            if (s->m[j].ino == m->ino) {
                later = (s->m[j].flags & MANIFEST_REPLACES) != 0;
                break;
            }
        int complete = 1;
        for (uint32_t k = 0; k < m->n && complete; k++) {
            struct rec *r = lookup(s, x, m->ext[k].hash);
            complete = r && r->c.raw_len == m->ext[k].raw_len &&
                       insert_rec(s, x, r, 0) == 0 && checked(s, r) == 0;
        }
        if (!complete) s->rep->incomplete++;
        if (later || !complete) m->time = -1;
    }
}

static int make_files(struct scan *s, struct index *x)
{
    fsmeta *meta = s->st->meta;
    struct fsm_attr root;
    CK_TRY(fsmeta_getattr(meta, FSMETA_ROOT_INO, &root));
    qsort(s->m, s->nm, sizeof *s->m, by_time);
    CK_TRY(fsmeta_begin(meta, 0));
    drop_unusable(s, x);
    CK_TRY(fsmeta_end(meta, s->err));
    /* Every file's inode first (directories made next must not take their
    ** numbers), then names, newest first: a name goes to the inode that
    ** had it last. newest[i]: m[i] is its inode's newest usable one. */
    char *newest = calloc(s->nm ? s->nm : 1, 1);
    if (!newest) return -ENOMEM;
    int rc = fsmeta_begin(meta, 0);
    if (rc == 0) {
        for (size_t i = s->nm; rc == 0 && i-- > 0;) {
            struct fsm_attr a;
            if (s->m[i].time < 0 || fsmeta_getattr(meta, s->m[i].ino, &a) == 0) continue;
            newest[i] = 1;
            rc = make_inode(s, &s->m[i]);
        }
        rc = fsmeta_end(meta, rc);
    }
    for (size_t i = s->nm; rc == 0 && i-- > 0;) {
        if (!newest[i]) continue;
        if ((rc = fsmeta_begin(meta, 0)) == 0) rc = fsmeta_end(meta, name_file(s, &root, &s->m[i]));
        s->rep->files++;
    }
    free(newest);
    CK_TRY(rc);
    for (size_t i = 0; i < s->nm; i++) {
        if (s->m[i].time < 0) continue;
        CK_TRY(fsmeta_begin(meta, 0));
        CK_TRY(fsmeta_end(meta, add_version(s, x, &s->m[i])));
    }
    return 0;
}

static void scan_free(struct scan *s, struct index *x)
{
    for (size_t i = 0; i < s->nm; i++) {
        free(s->m[i].ext);
        free(s->m[i].path);
    }
    free(s->m);
    free(s->r);
    free(x->slot);
}

/* ---- replay ---- */

/* Keep the manifests newer than every version meta.db has of their inode
** (the rest are its own, moved, pruned or replaced ones); their count. */
static size_t keep_newer(struct scan *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nm; i++) {
        struct fsm_version v;
        int rc = fsmeta_version_at(s->st->meta, s->m[i].ino, UINT64_MAX, &v);
        if (rc == 0 && s->m[i].time <= v.time) s->m[i].time = -1;
        else n++;
    }
    return n;
}

static int by_place(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    if (x->c.pack != y->c.pack) return x->c.pack < y->c.pack ? -1 : 1;
    return x->c.off < y->c.off ? -1 : x->c.off > y->c.off;
}

static int add_known(void *ctx, const struct fsm_chunk *c, int64_t refs)
{
    (void)refs;
    struct scan *s = ctx;
    if (ck_grow((void **)&s->r, &s->capr, s->nr, sizeof *s->r) < 0) return s->err = -ENOMEM;
    s->r[s->nr++] = (struct rec){.c = *c, .state = 2, .verified = 1};
    return 0;
}

/* meta.db's chunk rows join the scanned records (a lost commit may share
** blocks with kept ones); a scanned record meta.db has is dropped. */
static int load_known(struct scan *s)
{
    size_t scanned = s->nr;
    CK_TRY(fsmeta_all_chunks(s->st->meta, add_known, s));
    CK_TRY(s->err);
    qsort(s->r + scanned, s->nr - scanned, sizeof *s->r, by_place);
    size_t k = 0;
    for (size_t i = 0; i < scanned; i++)
        if (!bsearch(&s->r[i], s->r + scanned, s->nr - scanned, sizeof *s->r, by_place))
            s->r[k++] = s->r[i];
    memmove(s->r + k, s->r + scanned, (s->nr - scanned) * sizeof *s->r);
    s->nr = k + (s->nr - scanned);
    return 0;
}

/* Where a replay starts: the pack of the manifest committed last, or the
** replay mark when that is further on. */
static int replay_start(struct scan *s)
{
    uint32_t pack = 1, mpack;
    uint64_t moff, size;
    int rc = fsmeta_last_manifest_pack(s->st->meta, &pack);
    if (rc < 0 && rc != -ENOENT) return rc;
    s->from_pack = rc == 0 ? pack : 1;
    if (store_replay_mark(s->st, &mpack, &moff) < 0 || mpack < s->from_pack) return 0;
    s->from_pack = mpack;
    /* A pack shorter than its mark is not the one marked: scanned whole. */
    s->from_off = pack_size(s->st->packs, mpack, &size) == 0 && size >= moff ? moff : 0;
    return 0;
}

int rebuild_replay(struct store *st, struct rebuild_report *rep)
{
    memset(rep, 0, sizeof *rep);
    struct scan s = {.st = st, .rep = rep, .replay = 1};
    struct index x = {0};
    int rc = replay_start(&s);
    if (rc == 0) rc = scan_packs(&s);
    if (rc == 0 && keep_newer(&s) > 0) {
        /* Blocks by hash: a standalone record of the same bytes is no
        ** better than meta.db's own, whose base hash this does not know. */
        rc = load_known(&s);
        if (rc == 0) rc = build_index(&s, &x);
        if (rc == 0) rc = make_files(&s, &x);
        if (rc == 0) rc = fsmeta_compress_requeue(st->meta);
        if (rc == 0) rc = fsmeta_sync(st->meta);
    }
    if (rc == 0 && !s.unsure) rc = store_replayed(st);
    scan_free(&s, &x);
    return rc;
}

int rebuild_store(struct store *st, struct rebuild_report *rep)
{
    memset(rep, 0, sizeof *rep);
    struct scan s = {.st = st, .rep = rep};
    struct index x = {0};
    fsmeta_group(st->meta, 1); /* many small transactions: commit them together */
    int rc = scan_packs(&s);
    if (rc == 0) rc = build_index(&s, &x);
    if (rc == 0) rc = make_files(&s, &x);
    /* Unused records become chunk rows too, as garbage gc reclaims. */
    if (rc == 0 && (rc = fsmeta_begin(st->meta, 0)) == 0) {
        for (size_t i = 0; i < s.nr && !s.err; i++)
            if (s.r[i].state == 0) insert_rec(&s, &x, &s.r[i], 0);
        rc = fsmeta_end(st->meta, s.err);
    }
    int rc2 = fsmeta_group(st->meta, 0);
    if (rc == 0) rc = rc2;
    if (rc == 0) rc = fsmeta_check(st->meta, 1, NULL, NULL); /* reference counts */
    if (rc > 0) rc = 0;
    if (rc == 0) rc = fsmeta_compress_requeue(st->meta); /* the hints are lost */
    if (rc == 0) rc = fsmeta_sync(st->meta);
    if (rc == 0 && !s.unsure) rc = store_replayed(st);
    scan_free(&s, &x);
    return rc;
}
