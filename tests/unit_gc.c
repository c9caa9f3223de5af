/*
** unit_gc.c: tests of gc beside writers and readers (src/gc.h), against a
** real store in a temp directory (64 KiB blocks, 256 KiB packs so that a
** file spans several, two workers), without FUSE.
**
**   - A file being written (not yet committed) keeps its records through a
**     gc that rewrites every other pack: its commit then reads back exact.
**   - A reader's copy of a chunk row from before a gc moved its record
**     still reads the block (from where meta.db now says it is).
**   - A kept version that was a delta against a pruned one is re-encoded
**     standalone, so the pruned version's records are freed.
**   - A run of garbage in a pack too live to rewrite is punched out.
*/
#include "../src/common.h"
#include "../src/gc.h"
#include "../src/ingest.h"
#include "../src/node.h"
#include "../src/store.h"
#include "unit_util.h"

#define BS (64 * 1024)

struct fx {
    char dir[128];
    struct store *st;
    node_table *nt;
    struct ingest ig;
};

static void fx_open_packs(struct fx *f, uint64_t max_pack_bytes)
{
    ut_newdir(f->dir);
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = BS;
    o.threads = 2;
    o.cache_bytes = 256 << 10;
    o.reserve_bytes = 0;
    o.max_pack_bytes = max_pack_bytes;
    ck_assert_int_eq(store_open(f->dir, &o, &f->st), 0);
    ck_assert_int_eq(store_start(f->st), 0);
    ck_assert_int_eq(node_table_create(&f->nt), 0);
    ingest_init(&f->ig, f->st, f->nt);
}

static void fx_open(struct fx *f) { fx_open_packs(f, 256 << 10); }

static void fx_close(struct fx *f)
{
    node_table_destroy(f->nt);
    store_close(f->st);
}

static uint64_t mkfile(struct fx *f, const char *name)
{
    int64_t now = ck_now_ns();
    struct fsm_attr a = {.mode = S_IFREG | 0644, .uid = getuid(), .gid = getgid(),
                         .nlink = 1, .atime = now, .mtime = now, .ctime = now};
    ck_assert_int_eq(fsmeta_mkinode(f->st->meta, &a, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_link(f->st->meta, FSMETA_ROOT_INO, name, a.ino), 0);
    return a.ino;
}

/* Stream buf into n from offset 0 (after truncating it to 0). */
static void stream(struct fx *f, struct node *n, const uint8_t *buf, size_t len)
{
    ck_assert_int_eq(ingest_truncate(&f->ig, n, 0), 0);
    for (size_t off = 0; off < len; off += 10007)
        ck_assert_int_eq(ingest_write(&f->ig, n, buf + off, CK_MIN((size_t)10007, len - off), off),
                         0);
}

static void expect_content(struct fx *f, struct node *n, const uint8_t *ref, size_t len)
{
    uint8_t *buf = ut_xmalloc(len + 1);
    size_t got = 0;
    ck_assert_int_eq(ingest_read(&f->ig, n, buf, len + 1, 0, &got), 0);
    ck_assert_uint_eq(got, len);
    ck_assert_msg(memcmp(buf, ref, len) == 0, "content differs");
    free(buf);
}

static uint64_t current_version(struct fx *f, uint64_t ino)
{
    struct fsm_version v;
    ck_assert_int_eq(fsmeta_version_at(f->st->meta, ino, INT64_MAX, &v), 0);
    return v.id;
}

static int run_gc(struct fx *f, struct gc_stats *s)
{
    struct gc_opts o = {.grace_ns = 0, .threshold = 1.01, .rebase = 1};
    return gc_run(f->st, &o, NULL, NULL, s);
}

/* Every block of every version in use verifies. */
static void verify_all(struct fx *f)
{
    uint8_t *blk = ut_xmalloc(BS);
    struct fsm_extent *e;
    size_t n;
    for (uint64_t v = 1; v <= 8; v++) {
        if (fsmeta_version_extents(f->st->meta, v, &e, &n) < 0) continue;
        for (size_t i = 0; i < n; i++) ck_assert_int_eq(store_verify_block(f->st, &e[i].c, blk), 0);
        free(e);
    }
    free(blk);
}

START_TEST(test_writer_keeps_its_records)
{
    struct fx f;
    fx_open(&f);
    size_t len = 20 * BS + 123;
    uint8_t *a1 = ut_xmalloc(len), *a2 = ut_xmalloc(len), *b = ut_xmalloc(len);
    ut_fill_random(a1, len, 1);
    ut_fill_random(a2, len, 2);
    ut_fill_random(b, len, 3);
    struct node *na = node_pin(f.nt, mkfile(&f, "a"));
    struct node *nb = node_pin(f.nt, mkfile(&f, "b"));
    stream(&f, na, a1, len);
    ck_assert_int_eq(ingest_commit(&f.ig, na, 1, 1), 0);
    uint64_t v1 = current_version(&f, na->ino);
    /* b is written, not committed: its blocks sit in packs meta.db does not
    ** know of, which a gc must leave alone. */
    stream(&f, nb, b, len);
    stream(&f, na, a2, len);
    ck_assert_int_eq(ingest_commit(&f.ig, na, 1, 1), 0);
    ck_assert_int_eq(fsmeta_version_prune(f.st->meta, v1), 0);
    struct gc_stats s;
    ck_assert_int_eq(run_gc(&f, &s), 0);
    /* v1's blocks died after b started: b may have taken them as bases. */
    ck_assert_uint_eq(s.chunks_deleted, 0);
    ck_assert_uint_gt(s.packs_rewritten, 0);
    ck_assert_int_eq(ingest_commit(&f.ig, nb, 1, 1), 0);
    expect_content(&f, nb, b, len);
    expect_content(&f, na, a2, len);
    ck_assert_int_eq(run_gc(&f, &s), 0); /* b is done: now they go */
    ck_assert_uint_gt(s.chunks_deleted, 0);
    expect_content(&f, nb, b, len);
    verify_all(&f);
    node_unpin(f.nt, na);
    node_unpin(f.nt, nb);
    fx_close(&f);
    free(a1), free(a2), free(b);
}
END_TEST

START_TEST(test_reader_follows_moves)
{
    struct fx f;
    fx_open(&f);
    size_t len = 12 * BS;
    uint8_t *a = ut_xmalloc(len), *junk = ut_xmalloc(len), *blk = ut_xmalloc(BS);
    ut_fill_random(a, len, 4);
    ut_fill_random(junk, len, 5);
    struct node *na = node_pin(f.nt, mkfile(&f, "a"));
    struct node *nj = node_pin(f.nt, mkfile(&f, "junk"));
    stream(&f, na, a, len);
    ck_assert_int_eq(ingest_commit(&f.ig, na, 1, 1), 0);
    stream(&f, nj, junk, len);
    ck_assert_int_eq(ingest_commit(&f.ig, nj, 1, 1), 0);
    /* A reader's copies of a's rows, before gc moves every record. */
    struct fsm_extent *old;
    size_t n;
    ck_assert_int_eq(fsmeta_version_extents(f.st->meta, current_version(&f, na->ino), &old, &n), 0);
    ck_assert_uint_eq(n, 12);
    struct gc_stats s;
    ck_assert_int_eq(run_gc(&f, &s), 0);
    ck_assert_uint_gt(s.records_moved, 0);
    struct fsm_extent *now;
    size_t n2;
    ck_assert_int_eq(fsmeta_version_extents(f.st->meta, current_version(&f, na->ino), &now, &n2), 0);
    int moved = 0;
    for (size_t i = 0; i < n; i++) {
        moved += now[i].c.pack != old[i].c.pack;
        ck_assert_int_eq(store_read_block(f.st, &old[i].c, 0, BS, blk), 0);
        ck_assert_msg(memcmp(blk, a + i * BS, BS) == 0, "block %zu differs", i);
    }
    ck_assert_int_gt(moved, 0);
    free(old), free(now);
    node_unpin(f.nt, na);
    node_unpin(f.nt, nj);
    fx_close(&f);
    free(a), free(junk), free(blk);
}
END_TEST

static uint64_t deltas_now(struct fx *f)
{
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(f->st->meta, &s), 0);
    return s.delta_chunks;
}

/* A float32 "tensor" of len bytes, a small step from seed's. */
static void weights(uint8_t *buf, size_t len, int step)
{
    uint64_t r = ut_seed(9);
    float *w = (float *)buf;
    for (size_t i = 0; i < len / 4; i++)
        w[i] = (float)(ut_unif(&r) - 0.5) * (1.0f + 1e-4f * (float)step * (float)(i % 7));
}

START_TEST(test_pruned_base_rebased)
{
    struct fx f;
    fx_open(&f);
    size_t len = 8 * BS;
    uint8_t *v1 = ut_xmalloc(len), *v2 = ut_xmalloc(len);
    weights(v1, len, 1);
    weights(v2, len, 2);
    struct node *n = node_pin(f.nt, mkfile(&f, "w.bin"));
    stream(&f, n, v1, len);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 1), 0);
    uint64_t first = current_version(&f, n->ino);
    /* A second version written in place deltas against the first, when
    ** the cutter finds no tensors: hint them by hand through a store-level
    ** put against the first version's blocks. */
    struct fsm_extent *e;
    size_t ne;
    ck_assert_int_eq(fsmeta_version_extents(f.st->meta, first, &e, &ne), 0);
    struct fsm_extent *nv = calloc(ne, sizeof *nv);
    for (size_t i = 0; i < ne; i++) {
        struct store_hint h = {.width = 4, .is_float = 1, .has_base = 1, .base = e[i].c};
        nv[i].file_off = e[i].file_off;
        ck_assert_int_eq(store_put_block(f.st, v2 + e[i].file_off, e[i].c.raw_len, &h, &nv[i].c), 0);
    }
    ck_assert_int_eq(store_sync_extents(f.st, nv, ne), 0);
    ck_assert_int_eq(fsmeta_begin(f.st->meta, 1), 0);
    int64_t t = ck_now_ns();
    ck_assert_int_eq(fsmeta_end(f.st->meta, fsmeta_set_content(f.st->meta, n->ino, nv, ne, len, t, t, 0, NULL)), 0);
    ingest_reload(n);
    ck_assert_uint_gt(deltas_now(&f), 0);
    ck_assert_int_eq(fsmeta_version_prune(f.st->meta, first), 0);
    struct gc_stats s;
    ck_assert_int_eq(run_gc(&f, &s), 0);
    ck_assert_uint_gt(s.rebased, 0);
    ck_assert_uint_eq(deltas_now(&f), 0); /* the kept version stands alone */
    ck_assert_int_eq(run_gc(&f, &s), 0); /* its old bases are garbage now */
    struct fsm_stats st;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &st), 0);
    ck_assert_uint_eq(st.chunks, ne);
    expect_content(&f, n, v2, len);
    free(e), free(nv);
    node_unpin(f.nt, n);
    fx_close(&f);
    free(v1), free(v2);
}
END_TEST

/* A file of len random bytes committed durably; its inode. */
static uint64_t put_file(struct fx *f, const char *name, uint8_t *buf, size_t len, int seed)
{
    ut_fill_random(buf, len, seed);
    struct node *n = node_pin(f->nt, mkfile(f, name));
    stream(f, n, buf, len);
    ck_assert_int_eq(ingest_commit(&f->ig, n, 1, 1), 0);
    uint64_t ino = n->ino;
    node_unpin(f->nt, n);
    return ino;
}

static int count_rec(void *ctx, uint64_t off, const struct pack_rec *r)
{
    (void)off, (void)r;
    ++*(size_t *)ctx;
    return 0;
}

/* A run of garbage of 1 MiB or more in a pack too live to be rewritten
** (step 6) is punched out: the pack takes that much less on the disk, the
** files around it read back exact and verify, a scan of the pack still
** finds every record a row names, and the next run has nothing to punch
** and leaves the pack untouched. */
START_TEST(test_dead_run_punched)
{
    struct fx f;
    fx_open_packs(&f, 64 << 20); /* one pack holds everything */
    size_t small = 16 * BS, big = 40 * BS;
    uint8_t *a = ut_xmalloc(small), *b = ut_xmalloc(big), *c = ut_xmalloc(small);
    uint64_t ia = put_file(&f, "a", a, small, 1);
    uint64_t ib = put_file(&f, "b", b, big, 2);
    uint64_t ic = put_file(&f, "c", c, small, 3);
    uint64_t old = current_version(&f, ib);
    struct node *n = node_pin(f.nt, ib);
    stream(&f, n, b, 100); /* b's next version is small: its first can go */
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 1), 0);
    node_unpin(f.nt, n);
    ck_assert_int_eq(fsmeta_version_prune(f.st->meta, old), 0);
    pack_seal(f.st->packs);
    uint64_t before, after;
    ck_assert_int_eq(pack_usage(f.st->packs, 1, NULL, &before), 0);
    struct gc_opts o = {.grace_ns = 0, .threshold = 0.3, .rebase = 1}; /* the pack is kept */
    struct gc_stats s;
    ck_assert_int_eq(gc_run(f.st, &o, NULL, NULL, &s), 0);
    ck_assert_uint_eq(s.packs_rewritten, 0);
    ck_assert_uint_ge(s.punched, big - 2 * 4096);
    ck_assert_int_eq(pack_usage(f.st->packs, 1, NULL, &after), 0);
    ck_assert_uint_le(after, before - (big - 2 * 4096));
    n = node_pin(f.nt, ia);
    expect_content(&f, n, a, small);
    node_unpin(f.nt, n);
    n = node_pin(f.nt, ic);
    expect_content(&f, n, c, small);
    node_unpin(f.nt, n);
    verify_all(&f);
    size_t found = 0;
    uint64_t skipped = 0;
    ck_assert_int_eq(pack_scan_all(f.st->packs, 1, 0, count_rec, &found, &skipped), 0);
    struct fsm_stats fs;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &fs), 0);
    ck_assert_uint_ge(found, fs.chunks); /* every row's record, and any garbage left */
    char path[256];
    struct stat p0, p1;
    snprintf(path, sizeof path, "%s/packs/00000001.pack", f.dir);
    ck_assert_int_eq(stat(path, &p0), 0);
    usleep(10000);
    ck_assert_int_eq(gc_run(f.st, &o, NULL, NULL, &s), 0);
    ck_assert_uint_eq(s.punched, 0);
    ck_assert(gc_idle(&s));
    ck_assert_int_eq(stat(path, &p1), 0); /* the holes were left alone, not punched again */
    ck_assert_msg(p1.st_ctim.tv_sec == p0.st_ctim.tv_sec && p1.st_ctim.tv_nsec == p0.st_ctim.tv_nsec,
                  "the second run touched the pack");
    fx_close(&f);
    free(a), free(b), free(c);
}
END_TEST

int main(void)
{
    const TTest *const gc_tests[] = {
        test_writer_keeps_its_records,
        test_reader_follows_moves,
        test_pruned_base_rebased,
        test_dead_run_punched,
        NULL,
    };
    return ut_main("gc", (const struct ut_tcase[]){
        {.name = "gc", .timeout = 60, .tests = gc_tests},
        {0},
    });
}
