/*
** gc.c: garbage collection of chunk rows and packs (see gc.h).
*/
#include "gc.h"
#include "common.h"
#include "fmt.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GC_REBASE_BATCH 64
#define GC_SEAL_MIN (1u << 20)  /* less garbage than this is not worth a new pack */
#define GC_PUNCH_MIN (1u << 20) /* nor a hole in a pack (step 6) */
#define GC_YIELD_US 20000       /* a copy waits this long while writers are busy ... */
#define GC_YIELD_MAX 50         /* ... this many times at most */

/* What one pass may touch: packs below limit, garbage dead before dead_before. */
struct bound {
    uint32_t limit;
    int64_t dead_before;
};

static void bound_now(struct store *st, const struct gc_opts *o, struct bound *b)
{
    uint32_t pinned;
    int64_t since;
    store_pins_floor(st, &pinned, &since);
    b->limit = CK_MIN(pack_limit(st->packs), pinned);
    b->dead_before = CK_MIN(ck_now_ns() - o->grace_ns, since);
}

static int stopped(const struct gc_opts *o) { return o->stop && *o->stop; }

/* fstat of a pack's file; -ENOENT if it is gone. By name, not through the
** pack set: a remote source would fetch a pack that is not here. */
static int pack_file_stat(struct store *st, uint32_t id, struct stat *sb)
{
    char name[48];
    snprintf(name, sizeof name, "packs/%08u.pack", id);
    return fstatat(st->dirfd, name, sb, 0) < 0 ? -errno : 0;
}

static uint64_t all_pack_bytes(struct store *st)
{
    uint64_t total = 0;
    struct stat sb;
    for (uint32_t id = 1, max = pack_max_id(st->packs); id <= max; id++)
        if (pack_file_stat(st, id, &sb) == 0) total += (uint64_t)sb.st_blocks * 512; /* disk */
    return total;
}

/* ---- step 3: deltas whose bases only pruned versions used ---- */

/* Re-encode o's block standalone into *nc (appended, not yet durable). */
static int standalone(struct store *st, const struct fsm_orphan *o, uint8_t *raw,
                      struct fsm_chunk *nc)
{
    CK_TRY(store_read_block(st, &o->c, 0, o->c.raw_len, raw));
    struct store_hint h = {.width = o->width, .is_float = fmt_dtype_is_float(o->dtype)};
    return store_put_block(st, raw, o->c.raw_len, o->width ? &h : NULL, nc);
}

/* One batch: returns how many deltas moved off their bases, or an error. */
static int rebase_batch(struct store *st, const struct fsm_orphan *v, size_t n)
{
    struct fsm_chunk *nc = calloc(n, sizeof *nc);
    uint64_t *ob = calloc(n, sizeof *ob);
    uint8_t *raw = NULL;
    size_t k = 0, moved = 0, big = 1;
    for (size_t i = 0; i < n; i++) big = CK_MAX(big, (size_t)v[i].c.raw_len);
    int rc = nc && ob && (raw = malloc(big)) ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = standalone(st, &v[i], raw, &nc[k]);
        if (rc == 0) nc[k].id = v[i].c.id, ob[k] = v[i].c.base, k++;
    }
    if (rc == -ENOSPC) rc = 0; /* keep what fitted; compaction may make room */
    if (rc == 0) rc = store_swap_records(st, nc, ob, k, &moved);
    free(nc), free(ob), free(raw);
    return rc < 0 ? rc : (int)moved;
}

static int rebase_orphans(struct store *st, const struct gc_opts *o, struct gc_stats *out)
{
    for (;;) {
        struct fsm_orphan *v;
        size_t n;
        if (stopped(o)) return 0;
        CK_TRY(fsmeta_orphan_deltas(st->meta, GC_REBASE_BATCH, &v, &n));
        int moved = n ? rebase_batch(st, v, n) : 0;
        free(v);
        CK_TRY(moved);
        out->rebased += (uint64_t)moved;
        if (moved == 0) return 0; /* none left, or none that would move */
    }
}

/* ---- steps 2 and 4: packs ---- */

struct live {
    struct fsm_chunk *c; /* rows in packs below the limit, by pack and offset */
    size_t n, cap;
    uint32_t limit, cur; /* cur: the pack taking appends, if below nothing */
    uint64_t cur_live;   /* record bytes of cur's rows */
    int err;
};

static int add_live(void *ctx, const struct fsm_chunk *c, int64_t refs)
{
    (void)refs; /* rows left after step 1 are all kept: live or in grace */
    struct live *l = ctx;
    if (c->pack == l->cur) l->cur_live += PACK_REC_HDR + (uint64_t)c->stored_len;
    if (c->pack >= l->limit) return 0;
    if ((l->err = ck_grow((void **)&l->c, &l->cap, l->n, sizeof *l->c)) < 0) return 1;
    l->c[l->n++] = *c;
    return 0;
}

/* A pack below the limit: its rows l->c[first, first + n), live bytes, size. */
struct cand {
    uint32_t id;
    size_t first, n;
    uint64_t live, size;
};

static int by_share(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    double sx = x->size ? (double)x->live / (double)x->size : 0;
    double sy = y->size ? (double)y->live / (double)y->size : 0;
    return sx < sy ? -1 : sx > sy;
}

/* Let writers go first: wait while blocks are queued for the workers. */
static void yield_to_writers(struct store *st)
{
    for (int i = 0; i < GC_YIELD_MAX && store_queued(st); i++)
        usleep(GC_YIELD_US);
}

/* Copy the records of c[0..n) (one pack) to the append pack; then point the
** chunks at the copies in one durable transaction. */
static int move_records(struct store *st, const struct fsm_chunk *c, size_t n)
{
    uint32_t *to_pack = calloc(n ? n : 1, sizeof *to_pack);
    uint64_t *to_off = calloc(n ? n : 1, sizeof *to_off);
    int rc = to_pack && to_off ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        yield_to_writers(st);
        struct pack_rec r = {.codec = c[i].codec, .raw_len = c[i].raw_len,
                             .stored_len = c[i].stored_len, .hash = c[i].hash};
        void *buf = malloc(r.stored_len ? r.stored_len : 1);
        rc = buf ? pack_read(st->packs, c[i].pack, c[i].off, &r, buf) : -ENOMEM;
        if (rc == 0)
            rc = pack_append_keep(st->packs, &r, buf, st->o.reserve_bytes / 2, &to_pack[i],
                                  &to_off[i]);
        if (rc == 0 && i > 0 && to_pack[i] != to_pack[i - 1])
            rc = pack_sync(st->packs, to_pack[i - 1]);
        free(buf);
    }
    if (rc == 0 && n) rc = pack_sync(st->packs, to_pack[n - 1]);
    if (rc == 0) rc = fsmeta_begin(st->meta, 1);
    if (rc == 0) {
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = fsmeta_chunk_move(st->meta, c[i].id, to_pack[i], to_off[i]);
        rc = fsmeta_end(st->meta, rc);
    }
    free(to_pack);
    free(to_off);
    return rc;
}

/* Candidates: every pack below the limit with its live bytes (*nc of them). */
static int candidates(struct store *st, const struct live *l, struct cand **out, size_t *nc)
{
    struct cand *v = NULL;
    size_t n = 0, cap = 0, i = 0;
    for (uint32_t id = 1; id < l->limit; id++) {
        struct cand c = {.id = id, .first = i};
        while (i < l->n && l->c[i].pack == id) c.live += PACK_REC_HDR + (uint64_t)l->c[i++].stored_len;
        c.n = i - c.first;
        struct stat sb;
        int rc = pack_file_stat(st, id, &sb);
        c.size = rc == 0 ? (uint64_t)sb.st_size : 0;
        if (rc == -ENOENT) continue;
        if (rc == 0) rc = ck_grow((void **)&v, &cap, n, sizeof *v);
        if (rc < 0) {
            free(v);
            return rc;
        }
        v[n++] = c;
    }
    *out = v;
    *nc = n;
    return 0;
}

/* Step 6 for a pack c kept with rows[0..c->n) (by offset): the runs of at
** least GC_PUNCH_MIN bytes between its records, and after the last, are
** garbage no row names (rows in grace are among rows); their pages go
** back to the filesystem. */
static int punch_gaps(struct store *st, const struct cand *c, const struct fsm_chunk *rows,
                      uint64_t *freed)
{
    uint64_t at = PACK_FILE_HDR;
    for (size_t i = 0; i <= c->n; i++) {
        uint64_t next = i < c->n ? rows[i].off : c->size;
        if (next >= at + GC_PUNCH_MIN) CK_TRY(pack_punch(st->packs, c->id, at, next - at, freed));
        if (i < c->n) at = CK_MAX(at, rows[i].off + PACK_REC_HDR + rows[i].stored_len);
    }
    return 0;
}

/* Steps 2, 4 and 6 over l: dead packs first (they need no space), then the
** emptiest; then holes in those kept. A full disk stops compaction (ENOSPC
** is no error here), not the holes. */
static int collect_packs(struct store *st, const struct gc_opts *o, const struct live *l,
                         gc_progress_cb cb, void *ctx, struct gc_stats *out)
{
    struct cand *v;
    size_t n;
    CK_TRY(candidates(st, l, &v, &n));
    qsort(v, n, sizeof *v, by_share);
    int rc = 0;
    size_t i = 0;
    for (; rc == 0 && i < n && !stopped(o); i++) {
        const struct cand *c = &v[i];
        if (c->n && (double)c->live >= o->threshold * (double)c->size) break; /* sorted */
        if (c->n) {
            rc = move_records(st, l->c + c->first, c->n);
            if (rc == 0) out->records_moved += c->n, out->packs_rewritten++;
        } else {
            out->packs_removed++;
        }
        if (rc == 0) rc = pack_remove(st->packs, c->id);
        if (cb) cb(ctx, i + 1, n);
    }
    if (rc == -ENOSPC) rc = 0; /* a full disk is when punching helps most */
    for (; rc == 0 && i < n && !stopped(o); i++) /* kept: step 6 */
        rc = punch_gaps(st, &v[i], l->c + v[i].first, &out->punched);
    free(v);
    return rc;
}

/* ---- a pass ---- */

static int delete_garbage(struct store *st, const struct gc_opts *o, struct gc_stats *out)
{
    struct bound b;
    bound_now(st, o, &b);
    uint64_t k = 0;
    CK_TRY(fsmeta_gc_chunks(st->meta, b.dead_before, &k));
    out->chunks_deleted += k;
    return 0;
}

/* 1 if the pack taking appends should be sealed for the next pass. */
static int worth_sealing(struct store *st, const struct gc_opts *o, const struct live *l)
{
    struct stat sb;
    if (!l->cur || pack_file_stat(st, l->cur, &sb) < 0 ||
        (uint64_t)sb.st_size < l->cur_live + GC_SEAL_MIN)
        return 0;
    return (double)l->cur_live < o->threshold * (double)sb.st_size;
}

/* Steps 1-4; *seal: step 5 applies. */
static int pass(struct store *st, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
                struct gc_stats *out, int *seal)
{
    CK_TRY(delete_garbage(st, o, out));
    if (o->rebase) {
        uint64_t before = out->rebased;
        int rc = rebase_orphans(st, o, out);
        if (rc < 0) ck_log(CK_LOG_WARN, "gc: re-encoding deltas of pruned bases: %s",
                           strerror(-rc));
        if (out->rebased > before) CK_TRY(delete_garbage(st, o, out));
    }
    /* The bound comes before the list: a session that commits in between
    ** wrote to packs at or past it. */
    struct bound b;
    bound_now(st, o, &b);
    uint32_t cur = pack_limit(st->packs);
    struct live l = {.limit = b.limit, .cur = cur <= pack_max_id(st->packs) ? cur : 0};
    int rc = fsmeta_all_chunks(st->meta, add_live, &l);
    if (rc == 0) rc = l.err;
    if (rc == 0) rc = collect_packs(st, o, &l, cb, ctx, out);
    *seal = rc == 0 && !stopped(o) && worth_sealing(st, o, &l);
    free(l.c);
    return rc;
}

int gc_run(struct store *st, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out)
{
    *out = (struct gc_stats){0};
    out->bytes_before = all_pack_bytes(st);
    int seal = 0;
    int rc = pass(st, o, cb, ctx, out, &seal);
    if (rc == 0 && seal) {
        pack_seal(st->packs);
        out->sealed++;
        rc = pass(st, o, cb, ctx, out, &seal);
    }
    out->bytes_after = all_pack_bytes(st);
    return rc;
}

int gc_idle(const struct gc_stats *s)
{
    return !s->chunks_deleted && !s->records_moved && !s->packs_removed && !s->rebased &&
           !s->sealed && !s->punched;
}
