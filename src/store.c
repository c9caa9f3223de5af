/*
** store.c: opening a store and block I/O (see store.h).
*/
#include "store.h"
#include "codec.h"
#include "bbuf.h"
#include "common.h"
#include "extmap.h"
#include "scratch.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

void store_default_opts(struct store_opts *o)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (struct store_opts){
        .block_size = 1 << 20,
        .zstd_level = 1,
        .threads = n > 0 ? 2 * (int)CK_MIN(n, 128) : 2,
        .cache_bytes = 64 << 20,
        .buffer_bytes = 64 << 20,
        .worker_nice = 10,
        .reserve_bytes = 64 << 20,
        .max_pack_bytes = 1ull << 30,
        .behind_bytes = 16 << 20,
    };
}

static int open_subdir(int dirfd, const char *name, int create, int *fd)
{
    if (create && mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST) return -errno;
    *fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return *fd < 0 ? -errno : 0;
}

static int take_lock(struct store *st)
{
    st->lockfd = openat(st->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (st->lockfd < 0) return -errno;
    if (flock(st->lockfd, LOCK_EX | LOCK_NB) < 0)
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
    return 0;
}

/* meta.db's pre-commit hook: rows never name records a crash could lose. */
static int sync_packs(void *ctx)
{
    struct store *st = ctx;
    return st->packs ? pack_sync_dirty(st->packs) : 0;
}

/* Rename meta.db and its WAL and index to meta.db.before-rebuild-TIME
** (with -wal and -shm), a database SQLite can still open; under the lock. */
static int set_meta_aside(struct store *st)
{
    if (faccessat(st->dirfd, "meta.db", F_OK, 0) < 0) return errno == ENOENT ? 0 : -errno;
    snprintf(st->meta_aside, sizeof st->meta_aside, "meta.db.before-rebuild-%lld",
             (long long)(ck_now_ns() / 1000000000));
    static const char *const tails[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char from[32], to[96];
        snprintf(from, sizeof from, "meta.db%s", tails[i]);
        snprintf(to, sizeof to, "%s%s", st->meta_aside, tails[i]);
        if (renameat(st->dirfd, from, st->dirfd, to) < 0 && errno != ENOENT) return -errno;
    }
    return fsync(st->dirfd) < 0 ? -errno : 0;
}

/* ---- the replay mark ---- */

#define REPLAY_KEY "replay_from"

/* The newest pack that exists and its size; pack 0 if there is none. */
static void packs_end(struct store *st, uint32_t *pack, uint64_t *size)
{
    *size = 0;
    for (*pack = pack_max_id(st->packs); *pack > 0; --*pack)
        if (pack_size(st->packs, *pack, size) == 0) return;
}

int store_replay_mark(struct store *st, uint32_t *pack, uint64_t *off)
{
    char v[64];
    unsigned long p;
    unsigned long long o;
    CK_TRY(fsmeta_config_get(st->meta, REPLAY_KEY, v, sizeof v));
    if (sscanf(v, "%lu %llu", &p, &o) != 2 || p > UINT32_MAX) return -ENOENT;
    *pack = (uint32_t)p;
    *off = o;
    return 0;
}

static int set_mark(struct store *st)
{
    uint32_t pack;
    uint64_t size;
    char v[64];
    packs_end(st, &pack, &size);
    snprintf(v, sizeof v, "%lu %llu", (unsigned long)pack, (unsigned long long)size);
    CK_TRY(fsmeta_config_set(st->meta, REPLAY_KEY, v));
    return fsmeta_sync(st->meta);
}

int store_replayed(struct store *st)
{
    CK_TRY(set_mark(st));
    st->replayed = 1;
    return 0;
}

void store_note_unreplayed(struct store *st)
{
    __atomic_store_n(&st->unreplayed, 1, __ATOMIC_RELEASE);
}

/* At open: nothing was appended since the mark (a clean close). */
static int mark_at_end(struct store *st)
{
    uint32_t pack, end;
    uint64_t off, size;
    if (store_replay_mark(st, &pack, &off) < 0) return 0;
    packs_end(st, &end, &size);
    return end < pack || (end == pack && size == off);
}

static int open_parts(struct store *st)
{
    const struct store_opts *o = &st->o;
    char p[4096];
    int rw = !o->readonly && !o->shared;
    if (rw) CK_TRY(take_lock(st));
    if (rw && o->rebuild) CK_TRY(set_meta_aside(st));
    CK_TRY(open_subdir(st->dirfd, "staging", rw, &st->stagefd));
    snprintf(p, sizeof p, "%s/meta.db", st->path);
    if (!rw && access(p, F_OK) < 0) return -ENOENT;
    CK_TRY(fsmeta_open(p, o->readonly, getuid(), getgid(), &st->meta));
    fsmeta_set_pre_commit(st->meta, sync_packs, st);
    snprintf(p, sizeof p, "%s/packs", st->path);
    struct pack_opts po = {.max_pack_bytes = o->max_pack_bytes,
                           .reserve_bytes = o->reserve_bytes,
                           .behind_bytes = o->behind_bytes, .readonly = !rw};
    CK_TRY(pack_open(p, &po, &st->packs));
    st->replayed = rw && mark_at_end(st);
    return bcache_create(o->cache_bytes, &st->cache);
}

int store_reopen_meta(struct store *st)
{
    char p[64];
    /* By the directory descriptor: a relative store path no longer holds
    ** after the daemon's chdir("/"). */
    snprintf(p, sizeof p, "/proc/self/fd/%d/meta.db", st->dirfd);
    /* Close first: a second connection opened beside the inherited one would
    ** share its (copied, stale) lock state and take no lock either. */
    fsmeta_close(st->meta);
    st->meta = NULL;
    CK_TRY(fsmeta_open(p, st->o.readonly, getuid(), getgid(), &st->meta));
    fsmeta_set_pre_commit(st->meta, sync_packs, st);
    return 0;
}

int store_start(struct store *st)
{
    if (st->workers) return 0; /* a read-only store's decode ahead for readers */
    /* The queue is the write buffer: a save up to its size returns without
    ** waiting for compression; at least two blocks per worker keep them busy. */
    size_t budget = CK_MAX(st->o.buffer_bytes, 2 * (size_t)st->o.threads * st->o.block_size);
    CK_TRY(pool_create(st->o.threads, budget, st->o.worker_nice, &st->workers));
    /* Not at the workers' nice: a reader waits for a block a thread has
    ** claimed, and a starved claimant stalls the reader it works for. One
    ** per CPU: more would share the CPUs among the blocks ahead, and the
    ** one wanted next would be done later. */
    size_t ahead = 2 * STORE_AHEAD_BLOCKS * st->o.block_size;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return pool_create(ncpu > 0 ? (int)CK_MIN(ncpu, 128) : 1, ahead, 0, &st->readers);
}

/* Names a store directory holds besides meta.db. */
static int store_name(const char *n)
{
    static const char *const names[] = {"meta.db-wal", "meta.db-shm", "meta.db-journal",
                                        "packs", "staging", "lock", "ctl.sock", "backups",
                                        "remote.snapshot", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(n, names[i]) == 0) return 1;
    return strncmp(n, "meta.db.", 8) == 0; /* set aside by a rebuild */
}

/* Refuse, before anything is written there, a directory that is not a
** store: a meta.db that is not ckptfs's (-EMEDIUMTYPE), packs without a
** meta.db (-ENOMEDIUM: its metadata is lost), or other files and no meta.db
** (-ENOTEMPTY, unless init_nonempty). A missing or empty one is fine. */
static int check_dir(const char *path, const struct store_opts *o)
{
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : -errno;
    int meta = 0, other = 0, packs = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        if (!strcmp(n, "meta.db")) meta = 1;
        else if (!strcmp(n, "packs")) packs = 1;
        else if (!store_name(n)) other = 1;
    }
    closedir(d);
    char p[4096];
    if (meta) {
        snprintf(p, sizeof p, "%s/meta.db", path);
        return fsmeta_probe(p);
    }
    if (packs && !o->rebuild) {
        snprintf(p, sizeof p, "%s/packs", path);
        DIR *pd = opendir(p);
        int n = 0;
        while (pd && (e = readdir(pd)) != NULL) n += strstr(e->d_name, ".pack") != NULL;
        if (pd) closedir(pd);
        if (n) return -ENOMEDIUM;
    }
    return other && !o->init_nonempty ? -ENOTEMPTY : 0;
}

int store_open(const char *path, const struct store_opts *o, struct store **out)
{
    CK_TRY(check_dir(path, o));
    if (!o->readonly && mkdir(path, 0700) < 0 && errno != EEXIST) return -errno;
    struct store *st = calloc(1, sizeof *st);
    if (!st) return -ENOMEM;
    st->o = *o;
    st->stagefd = st->lockfd = -1;
    pthread_mutex_init(&st->pin_mu, NULL);
    st->path = strdup(path);
    st->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = !st->path ? -ENOMEM : st->dirfd < 0 ? -errno : open_parts(st);
    if (rc < 0) {
        store_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

const char *store_strerror(int rc)
{
    switch (rc) {
    case -EMEDIUMTYPE:
        return "its meta.db is not a ckptfs store's (another program's database, or not "
               "SQLite); left untouched";
    case -ENOMEDIUM:
        return "it has packs but no meta.db: its metadata is lost; `ckptctl rebuild STORE` "
               "makes it anew from the packs; left untouched";
    case -ENOTEMPTY:
        return "a directory holding other files is not a store (-o init_nonempty makes "
               "one there anyway); left untouched";
    case -EBUSY:
        return "its lock is held";
    default:
        return strerror(-rc);
    }
}

void store_close(struct store *st)
{
    if (!st) return;
    int rw = st->meta && !st->o.readonly && !st->o.shared;
    pool_destroy(st->workers);
    pool_destroy(st->readers);
    if (rw && st->replayed && !__atomic_load_n(&st->unreplayed, __ATOMIC_ACQUIRE) &&
        !fsmeta_lost(st->meta) && set_mark(st) < 0)
        ck_log(CK_LOG_WARN, "could not mark the packs replayed: the next mount scans them");
    bcache_destroy(st->cache);
    pack_close(st->packs);
    fsmeta_close(st->meta);
    if (st->stagefd >= 0) close(st->stagefd);
    if (st->lockfd >= 0) close(st->lockfd);
    if (st->dirfd >= 0) close(st->dirfd);
    free(st->path);
    pthread_mutex_destroy(&st->pin_mu);
    free(st);
}

void store_pin(struct store *st, struct store_pin *p)
{
    if (p->st) return;
    pthread_mutex_lock(&st->pin_mu);
    p->st = st;
    p->pack = pack_limit(st->packs);
    p->since = ck_now_ns();
    p->prev = NULL;
    p->next = st->pins;
    if (st->pins) st->pins->prev = p;
    st->pins = p;
    pthread_mutex_unlock(&st->pin_mu);
}

void store_pin_advance(struct store *st, struct store_pin *p)
{
    if (!p->st) return;
    pthread_mutex_lock(&st->pin_mu);
    p->pack = pack_limit(st->packs);
    pthread_mutex_unlock(&st->pin_mu);
}

void store_unpin(struct store *st, struct store_pin *p)
{
    if (!p->st) return;
    pthread_mutex_lock(&st->pin_mu);
    p->st = NULL;
    if (p->prev) p->prev->next = p->next;
    else st->pins = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL;
    pthread_mutex_unlock(&st->pin_mu);
}

void store_pins_floor(struct store *st, uint32_t *pack, int64_t *since)
{
    *pack = UINT32_MAX;
    *since = INT64_MAX;
    pthread_mutex_lock(&st->pin_mu);
    for (const struct store_pin *p = st->pins; p; p = p->next) {
        *pack = CK_MIN(*pack, p->pack);
        *since = CK_MIN(*since, p->since);
    }
    pthread_mutex_unlock(&st->pin_mu);
}

/* Per-thread encode buffer (scratch.h), sized for the largest block seen:
** a pack frame (pack.h), so that large records go from it to the disk. */
_Static_assert(PACK_FRAME_ALIGN <= SCRATCH_ALIGN, "a frame is aligned for direct I/O");

/* A frame for a payload of up to need bytes (at frame + PACK_REC_HDR). */
static uint8_t *scratch(size_t need)
{
    return scratch_get(SCRATCH_FRAME, PACK_FRAME_CAP(need));
}

static int load_block(struct store *st, const struct fsm_chunk *c, void *dst);
static int fill_cache(struct store *st, const struct fsm_chunk *c, uint64_t key,
                      size_t off, size_t len, void *dst, int cold);

/* How block_copy uses the cache (bcache.h): a reader's block (hot), a block
** of a writer's base chain (cold), a writer's base (its last use). */
enum { GET_HOT, GET_COLD, GET_LAST };

/* c's whole block into *out (bbuf.h): from the cache, else decoded and
** cached (GET_LAST: taken out of the cache, or decoded and not cached: its
** successor is about to take its place). *hit (if not NULL): it was
** cached. */
static int block_copy(struct store *st, const struct fsm_chunk *c, int how, uint8_t **out,
                      int *hit)
{
    uint64_t key = bcache_key(c->pack, c->off);
    if (how == GET_LAST && (*out = bcache_take(st->cache, key, c->raw_len))) {
        if (hit) *hit = 1;
        return 0;
    }
    if (!(*out = bbuf_alloc(c->raw_len))) return -ENOMEM;
    int cached = how != GET_LAST &&
                 bcache_get_claim(st->cache, key, 0, c->raw_len, *out, 1) == BCACHE_HIT;
    if (hit) *hit = cached;
    int rc = cached            ? 0
             : how == GET_LAST ? load_block(st, c, *out)
                               : fill_cache(st, c, key, 0, c->raw_len, *out, how == GET_COLD);
    if (rc < 0) {
        bbuf_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The base block to encode against (read as `how`), when the chain bound
** allows one more delta; NULL otherwise. *hit: it was cached. A base whose
** chain is full is marked as the first to go: the keyframe written instead
** takes its place. An unreadable base only costs the delta (it was
** logged). */
static uint8_t *base_for(struct store *st, const struct store_hint *h, const struct fsm_chunk *b,
                         size_t len, int how, int *hit)
{
    *hit = 0;
    if (!b || !h->width || !b->id) return NULL;
    if (b->depth >= STORE_MAX_DEPTH ||
        b->chain > CK_MAX((uint64_t)STORE_MAX_CHAIN_X * len, (uint64_t)STORE_CHAIN_FLOOR)) {
        if (how == GET_LAST) *hit = bcache_mark_last(st->cache, bcache_key(b->pack, b->off));
        return NULL;
    }
    uint8_t *buf;
    block_copy(st, b, how, &buf, hit);
    return buf;
}

/* What to do with a block just written, in the decoded block cache. */
enum { KEEP_NONE, KEEP_HOT, KEEP_COLD };

/* Append the record of a block encoded as stored[0..len) (codec id codec;
** inside frame, a pack frame, unless that is NULL) whose raw bytes are
** raw[0..raw_len), of XXH3 hash, a delta against base unless NULL; fill *c
** (id 0). A
** tensor block is the likely base of the next version's block: keep
** (KEEP_*) it decoded so that delta need not rebuild it from the pack.
** own (if not NULL) is a buffer (bbuf.h) holding raw, given up: cached
** itself instead of a copy, or freed. */
static int append_block(struct store *st, uint8_t codec, uint8_t *frame, const void *stored,
                        size_t len, const void *raw, size_t raw_len, uint64_t hash,
                        const struct fsm_chunk *base, int keep, struct fsm_chunk *c, void *own)
{
    struct pack_rec r = {.codec = codec, .raw_len = (uint32_t)raw_len,
                         .stored_len = (uint32_t)len, .hash = hash};
    *c = (struct fsm_chunk){.raw_len = r.raw_len, .stored_len = r.stored_len,
                            .codec = codec, .hash = r.hash, .chain = len};
    if (base) {
        c->base = base->id;
        c->depth = base->depth + 1;
        c->chain = base->chain + len;
    }
    int rc = frame ? pack_append_frame(st->packs, &r, frame, &c->pack, &c->off)
                   : pack_append(st->packs, &r, stored, &c->pack, &c->off);
    /* A block filling most of own is cached in it; a smaller one is copied:
    ** the cache counts block bytes, and its buffers must not hold much more
    ** (a tail is sized to its block, so at least 4/5 full: bbuf.c). */
    uint8_t *copy = rc < 0 || keep == KEEP_NONE                  ? NULL
                    : own && raw_len >= bbuf_cap(own) / 4 * 3 ? own
                                                                 : bbuf_alloc(raw_len);
    if (copy != own) {
        if (copy) memcpy(copy, raw, raw_len);
        bbuf_free(own);
    }
    if (copy) bcache_put(st->cache, bcache_key(c->pack, c->off), copy, raw_len, keep == KEEP_COLD);
    return rc;
}

int store_put_manifest(struct store *st, const void *raw, size_t len, struct fsm_chunk *c)
{
    struct pack_rec r = {.codec = CODEC_RAW, .flags = PACK_REC_MANIFEST,
                         .raw_len = (uint32_t)len, .stored_len = (uint32_t)len,
                         .hash = XXH3_64bits(raw, len)};
    *c = (struct fsm_chunk){.raw_len = r.raw_len, .stored_len = r.stored_len,
                            .codec = CODEC_RAW, .hash = r.hash, .chain = len};
    return pack_append(st->packs, &r, raw, &c->pack, &c->off);
}

/* The encoder's hints of h, for a block's background re-encoding. */
static struct fsm_pred pred_hints(const struct store_hint *h)
{
    return (struct fsm_pred){.width = (uint8_t)h->width,
                             .flags = (uint8_t)((h->is_float ? FSM_PRED_FLOAT : 0) |
                                                (h->plain ? FSM_PRED_PLAIN : 0))};
}

/* A new version's block, of XXH3 hash, against its predecessor p
** (pred_only): identical bytes share p's chunk (1 returned, *c is p); else
** the pair is recorded in *c for the background to make p a delta against
** this block. */
static int pred_block(size_t len, uint64_t hash, const struct store_hint *h,
                      struct fsm_chunk *c, void *own)
{
    const struct fsm_chunk *p = &h->base;
    if (p->raw_len == len && p->id && hash == p->hash) {
        *c = *p;
        c->pred = (struct fsm_pred){0};
        bbuf_free(own);
        return 1;
    }
    c->pred = pred_hints(h);
    c->pred.older = p->raw_len == len ? p->id : 0;
    return 0;
}

/* store_put_block, giving up own (see append_block). */
static int put_block(struct store *st, const void *raw, size_t len,
                     const struct store_hint *h, struct fsm_chunk *c, void *own)
{
    uint64_t hash = XXH3_64bits(raw, len);
    struct fsm_pred pred = {0};
    struct store_hint alone;
    if (h && h->has_base && h->pred_only) { /* standalone, the pair recorded */
        if (pred_block(len, hash, h, c, own)) return 0;
        pred = c->pred;
        alone = *h;
        alone.has_base = 0;
        h = &alone;
    }
    uint8_t *frame = scratch(codec_bound(len));
    if (!frame) {
        bbuf_free(own);
        return -ENOMEM;
    }
    uint8_t *dst = frame + PACK_REC_HDR;
    uint8_t codec;
    size_t stored;
    int delta;
    int same = h && h->has_base && h->base.raw_len == len, hit = 0, nhit;
    uint8_t *base = same ? base_for(st, h, &h->base, len, GET_LAST, &hit) : NULL;
    /* A model block serves the masters of two blocks of fp32: cached. */
    uint8_t *narrow = h && h->has_narrow ? base_for(st, h, &h->narrow, len, GET_HOT, &nhit) : NULL;
    struct codec_hint ch = {h ? h->width : 0, h ? h->is_float : 0, base,
                            base ? h->base.hash : 0, narrow,
                            narrow ? h->narrow.raw_len : 0, narrow ? h->narrow.hash : 0,
                            h ? h->narrow_off : 0, st->o.no_group, h ? h->plain : 0};
    int rc = codec_encode(raw, len, dst, codec_bound(len), st->o.zstd_level,
                          ch.width ? &ch : NULL, &codec, &stored, &delta);
    bbuf_free(base);
    bbuf_free(narrow);
    if (rc < 0) {
        bbuf_free(own);
        return rc;
    }
    if (h && h->below && stored >= h->below) { /* not worth a record */
        bbuf_free(own);
        return 1;
    }
    const struct fsm_chunk *b = delta == CODEC_BASE_SAME     ? &h->base
                                : delta == CODEC_BASE_NARROW ? &h->narrow
                                                             : NULL;
    /* Kept: tensor blocks, and plain ones of a checkpoint (with a base);
    ** hot when they take the place of a cached base, else cold (bcache.h). */
    int keep = !h || !h->width || (h->plain && !h->has_base) ? KEEP_NONE
               : hit                                         ? KEEP_HOT
                                                             : KEEP_COLD;
    rc = append_block(st, codec, frame, dst, stored, raw, len, hash, b, keep, c, own);
    c->pred = pred;
    return rc;
}

int store_put_block(struct store *st, const void *raw, size_t len,
                    const struct store_hint *h, struct fsm_chunk *c)
{
    return put_block(st, raw, len, h, c, NULL);
}

int store_put_block_own(struct store *st, void *raw, size_t len, const struct store_hint *h,
                        struct fsm_chunk *c)
{
    return put_block(st, raw, len, h, c, raw);
}

int store_put_raw(struct store *st, void *raw, size_t len, const struct store_hint *h,
                  struct fsm_chunk *c)
{
    uint64_t hash = XXH3_64bits(raw, len);
    struct fsm_pred p = h ? pred_hints(h) : (struct fsm_pred){0};
    if (h && h->has_base && h->pred_only) {
        if (pred_block(len, hash, h, c, raw)) return 0;
        p = c->pred;
    }
    p.flags |= FSM_PRED_RAW | (h && h->hold ? FSM_PRED_HOLD : 0);
    if (h && h->has_narrow) p.narrow = h->narrow.id, p.narrow_off = h->narrow_off;
    int rc = append_block(st, CODEC_RAW, NULL, raw, len, raw, len, hash, NULL, KEEP_NONE, c,
                          raw);
    c->pred = p;
    return rc;
}

int store_put_encoded(struct store *st, uint8_t codec, const void *stored, size_t len,
                      const void *raw, size_t raw_len, const struct fsm_chunk *base,
                      struct fsm_chunk *c)
{
    return append_block(st, codec, NULL, stored, len, raw, raw_len, XXH3_64bits(raw, raw_len),
                        base, KEEP_HOT, c, NULL);
}

/* store_space, and with raw the margin store_space_raw keeps. */
static int space_for(struct store *st, uint64_t len, int raw)
{
    struct statvfs sv;
    if (fstatvfs(st->stagefd, &sv) < 0) return -errno;
    uint64_t margin = raw ? CK_MAX((uint64_t)sv.f_blocks * sv.f_frsize / 10, (uint64_t)1 << 30)
                          : 0;
    uint64_t need = len + margin + st->o.reserve_bytes + store_queued(st);
    return (uint64_t)sv.f_bavail * sv.f_frsize < need ? -ENOSPC : 0;
}

int store_space(struct store *st, uint64_t len) { return space_for(st, len, 0); }

int store_space_raw(struct store *st, uint64_t len) { return space_for(st, len, 1); }

void store_queued_add(struct store *st, int64_t delta)
{
    __atomic_add_fetch(&st->queued, (uint64_t)delta, __ATOMIC_RELAXED);
}

uint64_t store_queued(struct store *st) { return __atomic_load_n(&st->queued, __ATOMIC_RELAXED); }

#define DECODE_MAX_NEST 64 /* far beyond any chain the bounds let form */
static _Thread_local int nest; /* bases being rebuilt by this thread */

/* Before rebuilding delta c, start reading the records of its chain, down
** to the first base in the cache, all at once: each level then reads from
** the page cache instead of waiting for the disk in turn. */
static void willneed_chain(struct store *st, const struct fsm_chunk *c)
{
    struct fsm_chunk b = *c;
    for (int i = 0; i < DECODE_MAX_NEST; i++) {
        pack_willneed(st->packs, b.pack, b.off, PACK_REC_HDR + (uint64_t)b.stored_len);
        if (!b.base || fsmeta_chunk_get(st->meta, b.base, &b) < 0 ||
            bcache_get(st->cache, bcache_key(b.pack, b.off), 0, 0, NULL))
            return;
    }
}

/* Decode a delta: rebuild its base first, through the cache but as the
** first to go. A base is seldom wanted again for itself (each block has
** its own chain), and a deep chain cached as hot would push out the
** blocks a reader is about to use. */
static int decode_delta(struct store *st, const struct fsm_chunk *c, const void *src,
                        void *dst)
{
    /* Bases are rebuilt recursively, each under a claim: a loop in a
    ** corrupt index must end in EIO, not in a wait on our own claim. */
    if (nest >= DECODE_MAX_NEST) return -EIO;
    struct fsm_chunk b;
    int rc = fsmeta_chunk_get(st->meta, c->base, &b);
    if (rc < 0) return rc == -ENOENT ? -EIO : rc; /* a lost base is corruption */
    uint8_t *base;
    nest++;
    rc = block_copy(st, &b, GET_COLD, &base, NULL);
    nest--;
    CK_TRY(rc);
    rc = codec_decode_based(c->codec, src, c->stored_len, dst, c->raw_len, base, b.raw_len,
                            b.hash);
    bbuf_free(base);
    return rc;
}

/* Decode c's record at c->pack, c->off into dst, checking its hash. */
static int load_at(struct store *st, const struct fsm_chunk *c, void *dst)
{
    struct pack_rec r = {.codec = c->codec, .raw_len = c->raw_len,
                         .stored_len = c->stored_len, .hash = c->hash};
    int rc;
    if (c->base && nest == 0) willneed_chain(st, c);
    if (c->codec == CODEC_RAW) {
        rc = pack_read(st->packs, c->pack, c->off, &r, dst);
    } else {
        void *hold = NULL;
        const uint8_t *src = NULL;
        rc = pack_read_held(st->packs, c->pack, c->off, &r, &hold, &src);
        if (rc == 0 && codec_needs_base(c->codec, src, c->stored_len))
            rc = c->base ? decode_delta(st, c, src, dst) : -EIO;
        else if (rc == 0)
            rc = codec_decode(c->codec, src, c->stored_len, dst, c->raw_len, NULL, 0);
        bbuf_free(hold);
    }
    if (rc == 0 && XXH3_64bits(dst, c->raw_len) != c->hash) rc = -EIO;
    return rc;
}

/* load_at; a reader's copy of a chunk row may predate a gc that moved its
** record (gc.h): then read it where meta.db says it is now. */
static int load_block(struct store *st, const struct fsm_chunk *c, void *dst)
{
    int rc = load_at(st, c, dst);
    struct fsm_chunk now;
    if (rc == -EIO && c->id && fsmeta_chunk_get(st->meta, c->id, &now) == 0 &&
        (now.pack != c->pack || now.off != c->off)) {
        c = &now;
        rc = load_at(st, c, dst);
    }
    if (rc == -EIO)
        ck_log(CK_LOG_ERR, "corrupt block: pack %u offset %llu (%u bytes)", c->pack,
               (unsigned long long)c->off, c->raw_len);
    return rc;
}

int store_verify_block(struct store *st, const struct fsm_chunk *c, void *dst)
{
    return load_block(st, c, dst);
}

/* Decode c's block, claimed by the caller, into a new buffer (bbuf.h); on
** failure the claim ends. */
static int decode_claimed(struct store *st, const struct fsm_chunk *c, uint64_t key,
                          uint8_t **out)
{
    uint8_t *buf = bbuf_alloc(c->raw_len);
    int rc = buf ? load_block(st, c, buf) : -ENOMEM;
    if (rc < 0) {
        bbuf_free(buf);
        bcache_unclaim(st->cache, key);
        return rc;
    }
    *out = buf;
    return 0;
}

/* Decode c's block, claimed by the caller (bcache_get_claim), into the
** cache (cold: as the first to go), first copying [off, off + len) of it to
** dst unless dst is NULL. */
static int fill_cache(struct store *st, const struct fsm_chunk *c, uint64_t key,
                      size_t off, size_t len, void *dst, int cold)
{
    uint8_t *buf;
    CK_TRY(decode_claimed(st, c, key, &buf));
    if (dst) memcpy(dst, buf + off, len);
    bcache_put(st->cache, key, buf, c->raw_len, cold);
    return 0;
}

int store_read_block(struct store *st, const struct fsm_chunk *c, size_t off,
                     size_t len, void *dst)
{
    uint64_t key = bcache_key(c->pack, c->off);
    if (bcache_get_claim(st->cache, key, off, len, dst, 1) == BCACHE_HIT) return 0;
    return fill_cache(st, c, key, off, len, dst, 0);
}

void store_prefetch_block(struct store *st, const struct fsm_chunk *c)
{
    uint8_t probe;
    uint64_t key = bcache_key(c->pack, c->off);
    /* A block someone is decoding already is left to them. */
    if (c->raw_len && bcache_get_claim(st->cache, key, 0, 1, &probe, 0) == BCACHE_MINE)
        fill_cache(st, c, key, 0, 0, NULL, 0); /* a reader meets and reports errors */
}

void store_drop_block(struct store *st, const struct fsm_chunk *c)
{
    if (c->raw_len) bbuf_free(bcache_take(st->cache, bcache_key(c->pack, c->off), c->raw_len));
}

/* fdatasync once each pack the chunks at c, c + stride, ... (n of them) use. */
static int sync_packs_of(struct store *st, const struct fsm_chunk *c, size_t n, size_t stride)
{
    uint32_t done[8];
    int ndone = 0;
    for (size_t i = 0; i < n; i++, c = (const void *)((const char *)c + stride)) {
        int seen = 0;
        for (int j = 0; j < ndone; j++) seen |= done[j] == c->pack;
        if (seen) continue;
        CK_TRY(pack_sync(st->packs, c->pack));
        if (ndone < 8) done[ndone++] = c->pack;
    }
    return 0;
}

int store_sync_extents(struct store *st, const struct fsm_extent *ext, size_t n)
{
    return n ? sync_packs_of(st, &ext[0].c, n, sizeof *ext) : 0;
}

int store_swap_records(struct store *st, const struct fsm_chunk *nc, const uint64_t *old_base,
                       size_t n, size_t *moved)
{
    *moved = 0;
    if (n == 0) return 0;
    CK_TRY(sync_packs_of(st, nc, n, sizeof *nc));
    return fsmeta_rebase_commit(st->meta, nc, old_base, n, moved);
}

int store_stage_open(struct store *st, uint64_t ino, int create)
{
    char name[32];
    snprintf(name, sizeof name, "%llu", (unsigned long long)ino);
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
    int fd = openat(st->stagefd, name, flags, 0600);
    return fd < 0 ? -errno : fd;
}

int store_stage_remove(struct store *st, uint64_t ino)
{
    char name[32];
    snprintf(name, sizeof name, "%llu", (unsigned long long)ino);
    if (unlinkat(st->stagefd, name, 0) < 0 && errno != ENOENT) return -errno;
    return 0;
}

/* [off, off + len) of c's block, decoded through the cache, pinned there
** (*at, *pin), or copied to dst when it cannot be cached (*pin NULL). */
static int pin_block(struct store *st, const struct fsm_chunk *c, size_t off, size_t len,
                     void *dst, const uint8_t **at, void **pin)
{
    uint64_t key = bcache_key(c->pack, c->off);
    *pin = NULL;
    if (bcache_pin_claim(st->cache, key, off, len, at, pin) == BCACHE_HIT) return 0;
    uint8_t *buf;
    CK_TRY(decode_claimed(st, c, key, &buf));
    if ((*pin = bcache_put_pin(st->cache, key, buf, c->raw_len)) != NULL) {
        *at = buf + off;
        return 0;
    }
    memcpy(dst, buf + off, len);
    bbuf_free(buf);
    return 0;
}

void store_iov_release(struct store_iov *v)
{
    for (int i = 0; i < v->n; i++)
        if (v->pin[i]) bcache_unpin(v->cache, v->pin[i]);
    v->n = 0;
}

void store_iov_buf(struct store_iov *out, void *buf, size_t len)
{
    out->v[0] = (struct iovec){buf, len};
    out->pin[0] = NULL;
    out->n = 1;
}

size_t store_iov_len(const struct store_iov *v)
{
    size_t n = 0;
    for (int i = 0; i < v->n; i++) n += v->v[i].iov_len;
    return n;
}

size_t store_iov_gather(struct store_iov *v, void *buf)
{
    uint8_t *p = buf;
    for (int i = 0; i < v->n; p += v->v[i++].iov_len)
        if (v->v[i].iov_base != p) memcpy(p, v->v[i].iov_base, v->v[i].iov_len);
    store_iov_release(v);
    return (size_t)(p - (uint8_t *)buf);
}

/* Append [p, p + len) (pinned by pin, or in the caller's buffer) to out,
** merged with the piece before when contiguous; -ENOSPC when out is full. */
static int iov_add(struct store_iov *out, const void *p, size_t len, void *pin)
{
    struct iovec *last = out->n ? &out->v[out->n - 1] : NULL;
    if (!pin && last && !out->pin[out->n - 1] &&
        (const uint8_t *)last->iov_base + last->iov_len == (const uint8_t *)p) {
        last->iov_len += len;
        return 0;
    }
    if (out->n == STORE_IOV_MAX) return -ENOSPC;
    out->v[out->n] = (struct iovec){(void *)p, len};
    out->pin[out->n++] = pin;
    return 0;
}

/* Fill out with [off, off + len) of ext; -ENOSPC when it takes more pieces
** than out holds. With copy, every block is copied into buf: pieces of buf
** only, which merge into one. */
static int read_pieces(struct store *st, const struct fsm_extent *ext, size_t next,
                       uint8_t *buf, size_t len, uint64_t off, int copy, struct store_iov *out)
{
    uint64_t end = off + len, done = off; /* [off, done) is in out */
    for (size_t i = extmap_first_after(ext, next, off); i < next && ext[i].file_off < end; i++) {
        const struct fsm_extent *e = &ext[i];
        uint64_t a = CK_MAX(done, e->file_off);
        uint64_t b = CK_MIN(end, e->file_off + e->c.raw_len);
        if (e->c.raw_len == 0 || a >= b) continue; /* a hole: zeros */
        if (a > done) {
            memset(buf + (done - off), 0, a - done);
            CK_TRY(iov_add(out, buf + (done - off), a - done, NULL));
        }
        const uint8_t *at = buf + (a - off);
        void *pin = NULL;
        CK_TRY(copy ? store_read_block(st, &e->c, a - e->file_off, b - a, buf + (a - off))
                    : pin_block(st, &e->c, a - e->file_off, b - a, buf + (a - off), &at, &pin));
        int rc = iov_add(out, at, b - a, pin);
        if (rc < 0 && pin) bcache_unpin(st->cache, pin);
        CK_TRY(rc);
        done = b;
    }
    if (end > done) {
        memset(buf + (done - off), 0, end - done);
        CK_TRY(iov_add(out, buf + (done - off), end - done, NULL));
    }
    return 0;
}

int store_read_iov(struct store *st, const struct fsm_extent *ext, size_t next, void *buf,
                   size_t len, uint64_t off, struct store_iov *out)
{
    *out = (struct store_iov){.cache = st->cache};
    int rc = read_pieces(st, ext, next, buf, len, off, 0, out);
    if (rc == 0) return 0;
    store_iov_release(out);
    if (rc != -ENOSPC) return rc;
    CK_TRY(store_read_range(st, ext, next, buf, len, off)); /* too many pieces: copy */
    store_iov_buf(out, buf, len);
    return 0;
}

int store_read_range(struct store *st, const struct fsm_extent *ext, size_t next,
                     void *dst, size_t len, uint64_t off)
{
    struct store_iov v = {.cache = st->cache};
    return read_pieces(st, ext, next, dst, len, off, 1, &v); /* one piece: dst */
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Remove all but the newest keep backups (their names sort by time). */
static void rotate_backups(int dfd, int keep)
{
    DIR *d = ck_dir_of(dfd);
    char *names[4096];
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && n < 4096)
        if (strncmp(e->d_name, "meta-", 5) == 0 && strstr(e->d_name, ".db") &&
            !strstr(e->d_name, ".tmp") && (names[n] = strdup(e->d_name)) != NULL)
            n++;
    if (d) closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        if (i + (size_t)keep < n && unlinkat(dfd, names[i], 0) < 0)
            ck_log(CK_LOG_WARN, "cannot remove old backup %s: %s", names[i], strerror(errno));
        free(names[i]);
    }
}

int store_backup_meta(struct store *st, int keep)
{
    if (mkdirat(st->dirfd, "backups", 0700) < 0 && errno != EEXIST) return -errno;
    int dfd = openat(st->dirfd, "backups", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    char name[64], tmp[72], path[128];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(name, sizeof name, "meta-%Y%m%dT%H%M%SZ.db", &tm);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    snprintf(path, sizeof path, "/proc/self/fd/%d/%s", dfd, tmp);
    unlinkat(dfd, tmp, 0);
    int rc = fsmeta_backup(st->meta, path);
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0) rc = -errno;
    if (rc == 0 && fsync(dfd) < 0) rc = -errno;
    if (rc < 0) unlinkat(dfd, tmp, 0);
    if (rc == 0) rotate_backups(dfd, keep);
    close(dfd);
    return rc;
}
