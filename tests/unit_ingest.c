/*
** unit_ingest.c: tests of the write path (src/ingest.h) against a real store
** in a temp directory (64 KiB blocks, two workers), without FUSE.
**
** Every test keeps a reference copy of what the file should hold and checks
** ingest_read against it while the file is dirty, after each commit, and
** through a freshly opened store (a new node table, a cold block cache):
** sequential streaming writes; random-offset writes (stage mode); truncate
** down and up; all-zero blocks stored as holes; durable commits; an fsync
** (non-final commit) followed by more appends; removal of the staging file
** at the final commit; and adopting a staging file left by a crash.
*/
#include "../src/common.h"
#include "../src/compress.h"
#include "../src/fmt.h"
#include "../src/ingest.h"
#include "../src/node.h"
#include "../src/rebuild.h"
#include "../src/reverse.h"
#include "../src/store.h"
#include "unit_util.h"

#include <pthread.h>
#include <sys/stat.h>

#define BS (64 * 1024)

struct fx {
    char dir[128];
    struct store *st;
    node_table *nt;
    struct ingest ig;
};

/* The tests' store options: free disk kept back for metadata (0: none);
** with spill, writers the workers cannot keep up with store blocks raw. */
static struct store_opts fx_opts(uint64_t reserve, int spill)
{
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = BS;
    o.threads = 2;
    o.cache_bytes = 1 << 20;
    o.reserve_bytes = reserve;
    o.spill = spill;
    o.buffer_bytes = spill ? BS : o.buffer_bytes;
    return o;
}

/* Open the store and the write side on it. */
static void fx_start_opts(struct fx *f, const struct store_opts *o)
{
    ck_assert_int_eq(store_open(f->dir, o, &f->st), 0);
    ck_assert_int_eq(store_start(f->st), 0);
    ck_assert_int_eq(node_table_create(&f->nt), 0);
    ingest_init(&f->ig, f->st, f->nt);
}

static void fx_start_with(struct fx *f, uint64_t reserve, int spill)
{
    struct store_opts o = fx_opts(reserve, spill);
    fx_start_opts(f, &o);
}

static void fx_start_reserve(struct fx *f, uint64_t reserve) { fx_start_with(f, reserve, 0); }
static void fx_start(struct fx *f) { fx_start_reserve(f, 0); }

static void fx_open(struct fx *f)
{
    ut_newdir(f->dir);
    fx_start(f);
}

static void fx_stop(struct fx *f)
{
    node_table_destroy(f->nt);
    store_close(f->st);
    f->nt = NULL;
    f->st = NULL;
}

/* Close and reopen the store: new node table, cold cache. */
static void fx_reopen(struct fx *f)
{
    fx_stop(f);
    fx_start(f);
}

/* A new inode of mode named name in directory parent. */
static uint64_t fx_mk(struct fx *f, uint64_t parent, const char *name, uint32_t mode)
{
    int64_t now = ck_now_ns();
    struct fsm_attr a = {.mode = mode, .uid = getuid(), .gid = getgid(),
                         .nlink = S_ISDIR(mode) ? 2 : 1, .atime = now, .mtime = now,
                         .ctime = now};
    ck_assert_int_eq(fsmeta_mkinode(f->st->meta, &a, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_link(f->st->meta, parent, name, a.ino), 0);
    return a.ino;
}

static uint64_t fx_mkfile(struct fx *f, const char *name)
{
    return fx_mk(f, FSMETA_ROOT_INO, name, S_IFREG | 0644);
}

/* File name in two new directories of one family (checkpoint-N): ino[0]
** in dir1, ino[1] in dir2. */
static void fx_family(struct fx *f, const char *dir1, const char *dir2, const char *name,
                      uint64_t ino[2])
{
    const char *dir[2] = {dir1, dir2};
    for (int k = 0; k < 2; k++)
        ino[k] = fx_mk(f, fx_mk(f, FSMETA_ROOT_INO, dir[k], S_IFDIR | 0755), name,
                       S_IFREG | 0644);
}

static struct node *pin(struct fx *f, uint64_t ino)
{
    struct node *n = node_pin(f->nt, ino);
    ck_assert_ptr_nonnull(n);
    return n;
}

static void staging_path(char *out, const struct fx *f, uint64_t ino)
{
    snprintf(out, 200, "%s/staging/%llu", f->dir, (unsigned long long)ino);
}

static int staging_count(const struct fx *f)
{
    char p[160];
    snprintf(p, sizeof p, "%s/staging", f->dir);
    return ut_count_entries(p);
}

static void wr(struct fx *f, struct node *n, const uint8_t *buf, size_t len, uint64_t off)
{
    ck_assert_int_eq(ingest_write(&f->ig, n, buf, len, off), 0);
}

/* Check n reads as ref[0..size): whole, in odd-sized pieces, and past EOF. */
static void check_content(struct fx *f, struct node *n, const uint8_t *ref, size_t size)
{
    uint8_t *buf = ut_xmalloc(size + 4096);
    size_t got = 12345;
    ck_assert_int_eq(ingest_read(&f->ig, n, buf, size + 4096, 0, &got), 0);
    ck_assert_uint_eq(got, size);
    for (size_t i = 0; i < size; i++)
        if (buf[i] != ref[i])
            ck_abort_msg("byte %zu of %zu: got %u want %u", i, size, buf[i], ref[i]);
    /* Pieces that straddle block boundaries. */
    for (size_t off = 0; off < size; off += 40009) {
        size_t len = CK_MIN((size_t)30011, size - off);
        memset(buf, 0xEE, len);
        ck_assert_int_eq(ingest_read(&f->ig, n, buf, 30011, off, &got), 0);
        ck_assert_uint_eq(got, len);
        ck_assert_msg(memcmp(buf, ref + off, len) == 0, "piece at %zu differs", off);
    }
    if (size > 0) {
        ck_assert_int_eq(ingest_read(&f->ig, n, buf, 10, size - 1, &got), 0);
        ck_assert_uint_eq(got, 1);
        ck_assert_uint_eq(buf[0], ref[size - 1]);
    }
    ck_assert_int_eq(ingest_read(&f->ig, n, buf, 10, size, &got), 0);
    ck_assert_uint_eq(got, 0);
    ck_assert_int_eq(ingest_read(&f->ig, n, buf, 10, size + 100000, &got), 0);
    ck_assert_uint_eq(got, 0);
    free(buf);
}

/* Check the committed metadata of ino: size, sorted non-overlapping extents
** inside the file and on block boundaries, no all-zero extent needed
** (zero_blocks_are_holes), stored equal to the sum of stored lengths.
** Returns the number of extents. */
static size_t check_meta(struct fx *f, uint64_t ino, const uint8_t *ref, size_t size)
{
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f->st->meta, ino, &a), 0);
    ck_assert_uint_eq(a.size, size);
    struct fsm_extent *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(fsmeta_extents(f->st->meta, ino, &e, &n), 0);
    uint64_t stored = 0, end = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_ge(e[i].file_off, end);
        ck_assert_uint_eq(e[i].file_off % BS, 0);
        ck_assert_uint_gt(e[i].c.raw_len, 0);
        ck_assert_uint_le(e[i].c.raw_len, BS);
        ck_assert_uint_le(e[i].file_off + e[i].c.raw_len, size);
        ck_assert_uint_ne(e[i].c.id, 0);
        end = e[i].file_off + e[i].c.raw_len;
        stored += e[i].c.stored_len;
    }
    ck_assert_uint_eq(a.stored, stored);
    /* Every block holding a non-zero byte is covered by an extent. */
    for (size_t b = 0; b < size; b += BS) {
        size_t len = CK_MIN((size_t)BS, size - b);
        if (ck_is_zero(ref + b, len)) continue;
        int covered = 0;
        for (size_t i = 0; i < n; i++)
            covered |= e[i].file_off == b;
        ck_assert_msg(covered, "block at %zu has data but no extent", b);
    }
    free(e);
    return n;
}

/* check_content of inode ino. */
static void check_ino(struct fx *f, uint64_t ino, const uint8_t *ref, size_t size)
{
    struct node *n = pin(f, ino);
    check_content(f, n, ref, size);
    node_unpin(f->nt, n);
}

/* Check through a fresh store, then leave the store open again. */
static void check_after_reopen(struct fx *f, uint64_t ino, const uint8_t *ref, size_t size)
{
    fx_reopen(f);
    check_ino(f, ino, ref, size);
    check_meta(f, ino, ref, size);
}

START_TEST(test_seq_write)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "seq");
    struct node *n = pin(&f, ino);
    const size_t N = 1000000;
    uint8_t *ref = ut_xmalloc(N);
    ut_fill_random(ref, N, 1);
    static const size_t steps[] = {1, 7, 4096, 65536, 100000, 3333, 65535, 131072, 10};
    size_t off = 0;
    for (int i = 0; off < N; i++) {
        size_t len = CK_MIN(steps[i % 9], N - off);
        wr(&f, n, ref + off, len, off);
        off += len;
        if (i == 4) check_content(&f, n, ref, off); /* mid-stream, dirty */
    }
    /* Pending size and times show while dirty; the row is not written yet. */
    struct fsm_attr pa, a;
    ck_assert_int_eq(ingest_getattr(&f.ig, n, &pa), 0);
    ck_assert_uint_eq(pa.size, N);
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino, &a), 0);
    ck_assert_uint_eq(a.size, 0);
    check_content(&f, n, ref, N);
    ck_assert_int_eq(staging_count(&f), 0); /* streamed: no staging file */

    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    size_t next = check_meta(&f, ino, ref, N);
    ck_assert_uint_eq(next, (N + BS - 1) / BS); /* random data: no holes */
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino, &a), 0);
    ck_assert_int_eq(a.mtime, pa.mtime); /* the pending times were committed */
    struct fsm_attr ca;
    ck_assert_int_eq(ingest_getattr(&f.ig, n, &ca), 0);
    ck_assert_uint_eq(ca.size, N);
    ck_assert_uint_eq(ca.stored, a.stored);
    check_content(&f, n, ref, N);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, N);
    fx_stop(&f);
    free(ref);
}
END_TEST

/* Random writes (some past the end, leaving gaps), checked against ref. */
static void random_writes(struct fx *f, struct node *n, uint8_t *ref, size_t *size,
                          size_t cap, int count, uint64_t *seed)
{
    uint8_t *data = ut_xmalloc(20000);
    for (int i = 0; i < count; i++) {
        size_t off = (size_t)(ut_rand(seed) % (cap - 20000));
        size_t len = 1 + (size_t)(ut_rand(seed) % 19999);
        ut_fill_random(data, len, ut_rand(seed));
        wr(f, n, data, len, off);
        memcpy(ref + off, data, len);
        *size = CK_MAX(*size, off + len);
        if (i % 10 == 9) check_content(f, n, ref, *size);
    }
    free(data);
}

/* A node that goes with a partly filled block (an unmount with a writer
** open, an import that failed) frees its tail buffer the way it got it. */
START_TEST(test_free_with_tail)
{
    struct fx f;
    fx_open(&f);
    uint8_t buf[BS + 1000];
    memset(buf, 0x5a, sizeof buf);
    wr(&f, pin(&f, fx_mkfile(&f, "a")), buf, 1000, 0);       /* tail only */
    wr(&f, pin(&f, fx_mkfile(&f, "b")), buf, sizeof buf, 0); /* a block and a tail */
    fx_stop(&f);
}
END_TEST

START_TEST(test_random_writes)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "rnd");
    struct node *n = pin(&f, ino);
    const size_t CAP = 400000;
    uint8_t *ref = ut_xmalloc(CAP);
    memset(ref, 0, CAP);
    size_t size = 0;
    uint64_t seed = 0x1234567;
    /* The first write is not at 0: a gap (a hole, the stream goes on from
    ** there); the next goes back before it, into stage mode. */
    uint8_t first[3000];
    ut_fill_random(first, sizeof first, 77);
    wr(&f, n, first, sizeof first, 100000);
    memcpy(ref + 100000, first, sizeof first);
    size = 100000 + sizeof first;
    check_content(&f, n, ref, size);
    char sp[200];
    staging_path(sp, &f, ino);
    ck_assert_int_lt(ut_file_size(sp), 0); /* still streaming */
    wr(&f, n, first, 1000, 50000);
    memcpy(ref + 50000, first, 1000);
    check_content(&f, n, ref, size);
    ck_assert_int_ge(ut_file_size(sp), 0); /* body staged in STORE/staging/<ino> */

    random_writes(&f, n, ref, &size, CAP, 40, &seed);
    check_content(&f, n, ref, size);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 0), 0); /* fsync-style */
    check_content(&f, n, ref, size);
    check_meta(&f, ino, ref, size);
    random_writes(&f, n, ref, &size, CAP, 20, &seed);
    check_content(&f, n, ref, size);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, size);
    check_meta(&f, ino, ref, size);
    ck_assert_int_eq(staging_count(&f), 0);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, size);

    /* Overwrite the committed file at random places (copies it to staging). */
    n = pin(&f, ino);
    random_writes(&f, n, ref, &size, CAP, 20, &seed);
    check_content(&f, n, ref, size);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, size);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, size);
    fx_stop(&f);
    free(ref);
}
END_TEST

START_TEST(test_truncate)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "trunc");
    struct node *n = pin(&f, ino);
    const size_t CAP = 300000;
    uint8_t *ref = ut_xmalloc(CAP);
    ut_fill_random(ref, 200000, 3);
    for (size_t off = 0; off < 200000; off += 50000) wr(&f, n, ref + off, 50000, off);
    check_content(&f, n, ref, 200000);

    /* Down while streaming, then up: the extension reads as zeros. */
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 70000), 0);
    check_content(&f, n, ref, 70000);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 250000), 0);
    memset(ref + 70000, 0, 250000 - 70000);
    check_content(&f, n, ref, 250000);
    struct fsm_attr pa;
    ck_assert_int_eq(ingest_getattr(&f.ig, n, &pa), 0);
    ck_assert_uint_eq(pa.size, 250000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 250000);
    ck_assert_uint_eq(check_meta(&f, ino, ref, 250000), 2); /* blocks 0 and 1 only */
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, 250000);

    /* On a committed (clean) file: down, commit, up, commit. */
    n = pin(&f, ino);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 1000), 0);
    check_content(&f, n, ref, 1000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 1000);
    check_meta(&f, ino, ref, 1000);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 5000), 0);
    memset(ref + 1000, 0, 4000);
    check_content(&f, n, ref, 5000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 5000);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, 5000);

    /* To zero, then write again (the O_TRUNC case). */
    n = pin(&f, ino);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 0), 0);
    check_content(&f, n, ref, 0);
    ut_fill_random(ref, 3000, 4);
    wr(&f, n, ref, 3000, 0);
    check_content(&f, n, ref, 3000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 3000);
    check_meta(&f, ino, ref, 3000);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, 3000);
    ck_assert_int_eq(staging_count(&f), 0);
    fx_stop(&f);
    free(ref);
}
END_TEST

/* ftruncate up on an empty file, then sequential appends fill the hole. */
START_TEST(test_truncate_up_then_append)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "preallocated");
    struct node *n = pin(&f, ino);
    const size_t CAP = 200000;
    uint8_t *ref = ut_xmalloc(CAP);
    memset(ref, 0, CAP);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 100000), 0);
    check_content(&f, n, ref, 100000);
    uint8_t *data = ut_xmalloc(130000);
    ut_fill_random(data, 130000, 5);
    wr(&f, n, data, 50000, 0);
    memcpy(ref, data, 50000);
    check_content(&f, n, ref, 100000); /* data, then the rest of the hole */
    wr(&f, n, data + 50000, 80000, 50000);
    memcpy(ref + 50000, data + 50000, 80000);
    free(data);
    check_content(&f, n, ref, 130000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 130000);
    check_meta(&f, ino, ref, 130000);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, 130000);

    /* And a hole left at the end of a committed stream. */
    uint64_t ino2 = fx_mkfile(&f, "tailhole");
    n = pin(&f, ino2);
    ut_fill_random(ref, 70000, 6);
    memset(ref + 70000, 0, 100000);
    wr(&f, n, ref, 70000, 0);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 170000), 0);
    check_content(&f, n, ref, 170000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 170000);
    ck_assert_uint_eq(check_meta(&f, ino2, ref, 170000), 2);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino2, ref, 170000);
    fx_stop(&f);
    free(ref);
}
END_TEST

START_TEST(test_zero_holes)
{
    struct fx f;
    fx_open(&f);
    /* Streamed: data, three zero blocks, data, a zero tail. */
    uint64_t ino = fx_mkfile(&f, "holes");
    struct node *n = pin(&f, ino);
    const size_t N = 5 * BS + 1000;
    uint8_t *ref = ut_xmalloc(N);
    memset(ref, 0, N);
    ut_fill_random(ref, BS, 7);
    ut_fill_random(ref + 4 * BS, BS, 8);
    for (size_t off = 0; off < N; off += 10000) wr(&f, n, ref + off, CK_MIN((size_t)10000, N - off), off);
    check_content(&f, n, ref, N);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, N);
    struct fsm_extent *e;
    size_t ne;
    ck_assert_int_eq(fsmeta_extents(f.st->meta, ino, &e, &ne), 0);
    ck_assert_uint_eq(ne, 2);
    ck_assert_uint_eq(e[0].file_off, 0);
    ck_assert_uint_eq(e[1].file_off, 4 * BS);
    free(e);
    check_meta(&f, ino, ref, N);
    node_unpin(f.nt, n);

    /* All zeros: no extents at all, nothing stored, reads zeros. */
    uint64_t z = fx_mkfile(&f, "zeros");
    n = pin(&f, z);
    uint8_t *zero = ut_xmalloc(200000);
    memset(zero, 0, 200000);
    wr(&f, n, zero, 123456, 0);
    wr(&f, n, zero, 200000 - 123456, 123456);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, zero, 200000);
    ck_assert_int_eq(fsmeta_extents(f.st->meta, z, &e, &ne), 0);
    ck_assert_uint_eq(ne, 0);
    free(e);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, z, &a), 0);
    ck_assert_uint_eq(a.size, 200000);
    ck_assert_uint_eq(a.stored, 0);
    node_unpin(f.nt, n);

    /* Stage mode: zeros written at an offset, a little data at 0. */
    uint64_t s = fx_mkfile(&f, "stagedholes");
    n = pin(&f, s);
    memset(ref, 0, N);
    wr(&f, n, zero, 50000, 100000);
    ref[5] = 0x42;
    wr(&f, n, ref + 5, 1, 5);
    check_content(&f, n, ref, 150000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, 150000);
    ck_assert_uint_eq(check_meta(&f, s, ref, 150000), 1);
    node_unpin(f.nt, n);

    check_after_reopen(&f, z, zero, 200000);
    check_after_reopen(&f, s, ref, 150000);
    fx_stop(&f);
    free(zero);
    free(ref);
}
END_TEST

START_TEST(test_durable_commit)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "durable");
    struct node *n = pin(&f, ino);
    const size_t N = 300000;
    uint8_t *ref = ut_xmalloc(N);
    ut_fill_random(ref, N, 9);
    wr(&f, n, ref, N, 0);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 1), 0);
    check_content(&f, n, ref, N);
    /* A durable commit with nothing new (fsync of a clean file). */
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 0), 0);
    check_meta(&f, ino, ref, N);
    /* Stage mode, durable. */
    ut_fill_random(ref + 1000, 5000, 10);
    wr(&f, n, ref + 1000, 5000, 1000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 1), 0);
    check_content(&f, n, ref, N);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, N);
    fx_stop(&f);
    free(ref);
}
END_TEST

/* fsync (a non-final durable commit) in the middle of a stream, then more
** appends and the final commit: the file holds all of it. */
START_TEST(test_fsync_then_append)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "ckpt");
    struct node *n = pin(&f, ino);
    const size_t N1 = 100000, N = 250000;
    uint8_t *ref = ut_xmalloc(N);
    ut_fill_random(ref, N, 11);
    wr(&f, n, ref, 60000, 0);
    wr(&f, n, ref + 60000, N1 - 60000, 60000);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 0), 0);
    check_content(&f, n, ref, N1);
    check_meta(&f, ino, ref, N1);

    /* What another connection (a tool) sees now: the first part, complete. */
    char db[200];
    snprintf(db, sizeof db, "%s/meta.db", f.dir);
    fsmeta *ro;
    ck_assert_int_eq(fsmeta_open(db, 1, 0, 0, &ro), 0);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(ro, ino, &a), 0);
    ck_assert_uint_eq(a.size, N1);
    struct fsm_extent *e;
    size_t ne;
    ck_assert_int_eq(fsmeta_extents(ro, ino, &e, &ne), 0);
    uint64_t covered = 0;
    for (size_t i = 0; i < ne; i++) covered += e[i].c.raw_len;
    ck_assert_uint_eq(covered, N1);
    uint8_t *blk = ut_xmalloc(BS);
    for (size_t i = 0; i < ne; i++) {
        ck_assert_int_eq(store_verify_block(f.st, &e[i].c, blk), 0);
        ck_assert(memcmp(blk, ref + e[i].file_off, e[i].c.raw_len) == 0);
    }
    free(blk);
    free(e);
    fsmeta_close(ro);

    wr(&f, n, ref + N1, 70000, N1);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 1, 0), 0); /* a second fsync */
    check_content(&f, n, ref, N1 + 70000);
    wr(&f, n, ref + N1 + 70000, N - N1 - 70000, N1 + 70000);
    check_content(&f, n, ref, N);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    check_content(&f, n, ref, N);
    size_t k = check_meta(&f, ino, ref, N);
    /* fsyncs of a file still open make provisional versions, replaced by the
    ** next commit: the tail blocks and the manifests of the earlier commits
    ** are unreferenced; the blocks and the manifest of the last are live. */
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &s), 0);
    ck_assert_uint_eq(s.chunks, k + 1);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, N);
    fx_stop(&f);
    free(ref);
}
END_TEST

START_TEST(test_staging_removed)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "staged");
    struct node *n = pin(&f, ino);
    uint8_t data[7000], ref[12000];
    memset(ref, 0, sizeof ref);
    ut_fill_random(data, sizeof data, 12);
    wr(&f, n, data + 3000, sizeof data - 3000, 8000);
    wr(&f, n, data, 3000, 5000); /* back before the end: staged */
    memcpy(ref + 5000, data, sizeof data);
    char sp[200];
    staging_path(sp, &f, ino);
    ck_assert_int_eq(ut_file_size(sp), 12000);
    ck_assert_int_eq(staging_count(&f), 1);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 0), 0);
    check_content(&f, n, ref, sizeof ref);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    ck_assert_int_eq(staging_count(&f), 0);
    ck_assert_int_eq(ut_file_size(sp), -1);
    check_content(&f, n, ref, sizeof ref);
    /* truncate to 0 of a staged file drops its staging file too. */
    wr(&f, n, data, 100, 50);
    ck_assert_int_eq(staging_count(&f), 1);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 0), 0);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    ck_assert_int_eq(staging_count(&f), 0);
    check_content(&f, n, ref, 0);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, 0);
    fx_stop(&f);
}
END_TEST

START_TEST(test_adopt_stage)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "recovered");
    const size_t N = 300000;
    uint8_t *ref = ut_xmalloc(N);
    ut_fill_random(ref, N, 13);
    memset(ref + BS, 0, 2 * BS); /* two zero blocks: holes */

    /* Give the file some committed content first: adoption replaces it. */
    struct node *n = pin(&f, ino);
    uint8_t old[5000];
    ut_fill_random(old, sizeof old, 14);
    wr(&f, n, old, sizeof old, 0);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);

    char sp[200];
    staging_path(sp, &f, ino);
    int wfd = open(sp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(wfd, 0);
    ck_assert_int_eq(write(wfd, ref, N), (ssize_t)N);
    close(wfd);
    int fd = store_stage_open(f.st, ino, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ingest_adopt_stage(&f.ig, n, fd), 0);
    check_content(&f, n, ref, N);
    ck_assert_uint_eq(check_meta(&f, ino, ref, N), (N + BS - 1) / BS - 2);
    ck_assert_int_eq(staging_count(&f), 0);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino, ref, N);

    /* A file that never had content, adopted on a fresh node. */
    uint64_t ino2 = fx_mkfile(&f, "recovered2");
    staging_path(sp, &f, ino2);
    wfd = open(sp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(wfd, 0);
    ck_assert_int_eq(write(wfd, ref, 1234), 1234);
    close(wfd);
    n = pin(&f, ino2);
    ck_assert_int_eq(ingest_adopt_stage(&f.ig, n, store_stage_open(f.st, ino2, 0)), 0);
    check_content(&f, n, ref, 1234);
    node_unpin(f.nt, n);
    check_after_reopen(&f, ino2, ref, 1234);
    ck_assert_int_eq(staging_count(&f), 0);
    fx_stop(&f);
    free(ref);
}
END_TEST

/* Out of space (a reserve larger than the disk): writes or commits fail with
** -ENOSPC and the committed content stays as it was. */
START_TEST(test_enospc_keeps_committed)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = fx_mkfile(&f, "full");
    struct node *n = pin(&f, ino);
    const size_t N = 150000;
    uint8_t *ref = ut_xmalloc(N), *data = ut_xmalloc(3 * BS);
    ut_fill_random(ref, N, 15);
    wr(&f, n, ref, N, 0);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    node_unpin(f.nt, n);
    fx_stop(&f);
    fx_start_reserve(&f, 1ull << 60); /* more than any disk: every write is refused */
    int lvl = ck_log_level;
    ck_log_level = -1;

    /* Overwrite in place: the commit cannot store the blocks. */
    n = pin(&f, ino);
    ut_fill_random(data, 1000, 16);
    int rc = ingest_write(&f.ig, n, data, 1000, 5000);
    if (rc == 0) rc = ingest_commit(&f.ig, n, 0, 1);
    ck_assert_int_eq(rc, -ENOSPC);
    check_content(&f, n, ref, N);
    check_meta(&f, ino, ref, N);
    /* Extending the file: refused. */
    ck_assert_int_eq(ingest_write(&f.ig, n, data, 1000, N + 10), -ENOSPC);
    rc = ingest_commit(&f.ig, n, 0, 1);
    ck_assert_msg(rc == 0 || rc == -ENOSPC, "commit after a refused write: %d", rc);
    check_content(&f, n, ref, N);
    node_unpin(f.nt, n);

    /* A new streamed file: the write or the commit fails; nothing half-made. */
    uint64_t ino2 = fx_mkfile(&f, "full2");
    n = pin(&f, ino2);
    ut_fill_random(data, 3 * BS, 17);
    rc = 0;
    for (size_t off = 0; off < 3 * BS && rc == 0; off += BS)
        rc = ingest_write(&f.ig, n, data + off, BS, off);
    int crc = ingest_commit(&f.ig, n, 0, 1);
    ck_assert_int_eq(rc < 0 ? rc : crc, -ENOSPC);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino2, &a), 0);
    ck_assert_uint_eq(a.size, 0);
    check_content(&f, n, data, 0);
    node_unpin(f.nt, n);
    ck_log_level = lvl;
    check_after_reopen(&f, ino, ref, N); /* reopened with the normal reserve */
    check_after_reopen(&f, ino2, data, 0);
    fx_stop(&f);
    free(data);
    free(ref);
}
END_TEST

/* Write buf into n from offset 0 in uneven pieces. */
static void write_pieces(struct fx *f, struct node *n, const uint8_t *buf, size_t len)
{
    for (size_t off = 0; off < len; off += 9973) wr(f, n, buf + off, CK_MIN((size_t)9973, len - off), off);
}

/* Stream buf into n from offset 0 in uneven pieces and commit (last close). */
static void stream_file(struct fx *f, struct node *n, const uint8_t *buf, size_t len)
{
    write_pieces(f, n, buf, len);
    ck_assert_int_eq(ingest_commit(&f->ig, n, 0, 1), 0);
}

/* stream_file into the file ino, pinned for it. */
static void stream_new(struct fx *f, uint64_t ino, const uint8_t *buf, size_t len)
{
    struct node *n = pin(f, ino);
    stream_file(f, n, buf, len);
    node_unpin(f->nt, n);
}

static uint64_t delta_chunks(struct fx *f)
{
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(f->st->meta, &s), 0);
    return s.delta_chunks;
}

static uint64_t stored_of(struct fx *f, uint64_t ino)
{
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f->st->meta, ino, &a), 0);
    return a.stored;
}

/* The current version's chunks: none of them a delta (it decodes alone). */
static void expect_standalone(struct fx *f, uint64_t ino)
{
    struct fsm_version v;
    struct fsm_extent *e;
    size_t n;
    ck_assert_int_eq(fsmeta_version_at(f->st->meta, ino, FSM_SEQ_NOW, &v), 0);
    ck_assert_int_eq(fsmeta_version_extents(f->st->meta, v.id, &e, &n), 0);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(e[i].c.base, 0);
    free(e);
}

static uint64_t reverse_all(struct fx *f)
{
    struct reverse_stats s = {0};
    ck_assert_int_eq(reverse_pending(f->st, NULL, 0, &s), 0);
    return s.reversed;
}

/* A checkpoint's tensors are found as it streams in, and it is stored
** standalone; its previous version (the same file in the previous
** checkpoint-N directory, its family, or the file's own content when
** rewritten in place) becomes a delta against it once the reverse deltas
** run (reverse.h). A version equal to the last shares its blocks.
** Everything reads back exact, also from a reopened store. */
START_TEST(test_checkpoint_deltas)
{
    struct fx f;
    fx_open(&f);
    struct ut_tensor t[2] = {{"w", "BF16", 2, 3 * BS + 1000}, {"b", "F32", 4, BS}};
    size_t len, data;
    uint8_t *v1 = ut_safetensors(t, 2, &len, &data);
    ut_fill_random(v1 + data, len - data, 21); /* incompressible on its own */
    uint8_t *v2 = ut_xmalloc(len), *v3 = ut_xmalloc(len);
    memcpy(v2, v1, len);
    for (size_t i = data; i < len; i += 997) v2[i] ^= 0x5A;
    memcpy(v3, v2, len);
    for (size_t i = data + 1; i < len; i += 1499) v3[i] ^= 0x33;

    uint64_t ino[2];
    fx_family(&f, "checkpoint-100", "checkpoint-200", "model.safetensors", ino);
    uint64_t i1 = ino[0], i2 = ino[1];
    struct node *n = pin(&f, i1);
    stream_file(&f, n, v1, len);
    node_unpin(f.nt, n);
    ck_assert_uint_eq(delta_chunks(&f), 0);
    ck_assert_uint_ge(stored_of(&f, i1), len - data); /* random data: no gain */

    n = pin(&f, i2);
    stream_file(&f, n, v2, len);
    node_unpin(f.nt, n);
    ck_assert_uint_eq(delta_chunks(&f), 0); /* saved standalone */
    ck_assert_uint_ge(stored_of(&f, i2), len - data);
    ck_assert_uint_ge(reverse_all(&f), 5); /* w in 4 blocks, b in 1: ck-100 on ck-200 */
    uint64_t after2 = delta_chunks(&f);
    ck_assert_uint_ge(after2, 5);
    ck_assert_uint_lt(stored_of(&f, i1), stored_of(&f, i2) / 4);
    expect_standalone(&f, i2);
    struct fsm_tensor *tv;
    size_t nt;
    ck_assert_int_eq(fsmeta_tensors(f.st->meta, i2, &tv, &nt), 0);
    ck_assert_uint_eq(nt, 2);
    ck_assert_str_eq(tv[0].name, "w");
    ck_assert_uint_eq(tv[0].off, data);
    ck_assert_uint_eq(tv[0].dtype, FMT_BF16);
    ck_assert_uint_eq(tv[0].width, 2);
    ck_assert_str_eq(tv[1].name, "b");
    ck_assert_uint_eq(tv[1].width, 4);
    free(tv);

    /* Rewritten in place (O_TRUNC): its old content becomes the delta. */
    n = pin(&f, i2);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 0), 0);
    stream_file(&f, n, v3, len);
    check_content(&f, n, v3, len);
    node_unpin(f.nt, n);
    /* w's 1000-byte tail is the same in v3 (no byte of it changed): shared */
    ck_assert_uint_ge(reverse_all(&f), 4);
    ck_assert_uint_ge(delta_chunks(&f), after2 + 4);
    expect_standalone(&f, i2);

    /* The same bytes again: the blocks are shared, not stored twice. */
    struct fsm_stats before, after;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &before), 0);
    n = pin(&f, i2);
    ck_assert_int_eq(ingest_truncate(&f.ig, n, 0), 0);
    stream_file(&f, n, v3, len);
    node_unpin(f.nt, n);
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &after), 0);
    ck_assert_uint_le(after.stored_bytes, before.stored_bytes + 4096); /* the header at most */

    fx_reopen(&f); /* cold cache: deltas rebuild their bases from the packs */
    check_ino(&f, i1, v1, len);
    check_ino(&f, i2, v3, len);
    fx_stop(&f);
    free(v1), free(v2), free(v3);
}
END_TEST

/* Several files streamed at once share the worker pool. */
struct writer {
    struct fx *f;
    struct node *n;
    uint8_t *ref;
    size_t len;
    int rc;
};

static void *writer_thread(void *arg)
{
    struct writer *w = arg;
    w->rc = 0;
    for (size_t off = 0; off < w->len && w->rc == 0; off += 7000)
        w->rc = ingest_write(&w->f->ig, w->n, w->ref + off, CK_MIN((size_t)7000, w->len - off), off);
    if (w->rc == 0) w->rc = ingest_commit(&w->f->ig, w->n, 0, 1);
    return NULL;
}

START_TEST(test_parallel_files)
{
    struct fx f;
    fx_open(&f);
    enum { K = 3 };
    struct writer w[K];
    pthread_t th[K];
    uint64_t ino[K];
    for (int i = 0; i < K; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        ino[i] = fx_mkfile(&f, name);
        w[i] = (struct writer){.f = &f, .n = pin(&f, ino[i]), .len = 300000 + 1111 * (size_t)i};
        w[i].ref = ut_xmalloc(w[i].len);
        ut_fill_random(w[i].ref, w[i].len, 100 + (uint64_t)i);
    }
    for (int i = 0; i < K; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, writer_thread, &w[i]), 0);
    for (int i = 0; i < K; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < K; i++) {
        ck_assert_int_eq(w[i].rc, 0);
        check_content(&f, w[i].n, w[i].ref, w[i].len);
        node_unpin(f.nt, w[i].n);
    }
    fx_reopen(&f);
    for (int i = 0; i < K; i++) {
        struct node *n = pin(&f, ino[i]);
        check_content(&f, n, w[i].ref, w[i].len);
        node_unpin(f.nt, n);
        check_meta(&f, ino[i], w[i].ref, w[i].len);
        free(w[i].ref);
    }
    fx_stop(&f);
}
END_TEST

/* A worker held until the gate opens: the write buffer stays full. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
};

static void gate_job(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* A new store with o's options but one worker, held by g until it opens. */
static void fx_start_held(struct fx *f, struct store_opts *o, struct gate *g)
{
    ut_newdir(f->dir);
    o->threads = 1;
    fx_start_opts(f, o);
    ck_assert_int_eq(pool_submit(f->st->workers, gate_job, g, 0), 0);
}

/* Whether *flag (atomic) is set within 10 s. */
static int done_within_10s(const int *flag)
{
    for (int i = 0; i < 1000 && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++) usleep(10000);
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

/* Chunks of ino's current version stored raw (codec 0), and all of them. */
static size_t raw_chunks(struct fx *f, uint64_t ino, size_t *all)
{
    struct fsm_version v;
    struct fsm_extent *e;
    size_t n, raw = 0;
    ck_assert_int_eq(fsmeta_version_at(f->st->meta, ino, FSM_SEQ_NOW, &v), 0);
    ck_assert_int_eq(fsmeta_version_extents(f->st->meta, v.id, &e, &n), 0);
    for (size_t i = 0; i < n; i++) raw += e[i].c.codec == 0;
    free(e);
    *all = n;
    return raw;
}

/* A new store whose writers go raw behind busy workers (spill). They do
** only while store_space_raw's margin is free: without it the raw tests'
** writers would wait behind the held workers until the timeout. Say so
** instead. */
static void fx_start_raw(struct fx *f)
{
    ut_newdir(f->dir);
    fx_start_with(f, 0, 1);
    int rc = store_space_raw(f->st, (uint64_t)64 << 20);
    ck_assert_msg(rc == 0, "too little free disk under %s for blocks stored raw "
                  "(a tenth of the filesystem, at least 1 GiB): %s", f->dir, strerror(-rc));
}

/* Float32 weights that compress, a step of small moves apart per version. */
static uint8_t *weights(const struct ut_tensor *t, size_t *len, size_t *data, int step)
{
    uint8_t *b = ut_safetensors(t, 1, len, data);
    float *w = (float *)(b + *data);
    for (size_t i = 0; i < t->bytes / 4; i++)
        w[i] = (float)((i * 2654435761u) % 256) / 256 + (i % 7 == 0 ? (float)step * 1e-6f : 0);
    return b;
}

/* Saves the workers cannot keep up with (-o spill, the write buffer held
** full) store their blocks raw and never wait; each reads back exact, is
** queued, and the background compresses it (compress.h) into fewer bytes,
** still exact, also from a reopened store. The next version's raw blocks
** pair with their predecessors, which are not compressed first: they
** become reverse deltas from their raw bytes; the newest stays standalone. */
START_TEST(test_raw_behind)
{
    struct fx f;
    fx_start_raw(&f);
    struct ut_tensor t = {"w", "F32", 4, 12 * BS};
    size_t len, data, all;
    uint8_t *v1 = weights(&t, &len, &data, 1), *v2 = weights(&t, &len, &data, 2);
    uint64_t ino[2];
    fx_family(&f, "checkpoint-1", "checkpoint-2", "w.safetensors", ino);
    uint64_t i1 = ino[0], i2 = ino[1];
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    ck_assert_int_eq(pool_submit(f.st->workers, gate_job, &g, (size_t)1 << 30), 0); /* fills it */

    struct node *n = pin(&f, i1);
    stream_file(&f, n, v1, len); /* the workers are held: it would hang if it waited */
    size_t nraw = raw_chunks(&f, i1, &all);
    ck_assert_msg(nraw >= 12, "%zu raw of %zu", nraw, all);
    check_content(&f, n, v1, len);
    uint64_t waiting = 0;
    ck_assert_int_eq(fsmeta_compress_count(f.st->meta, &waiting), 0);
    ck_assert_uint_ge(waiting, 12);
    uint64_t raw_stored = stored_of(&f, i1);
    ck_assert_uint_ge(raw_stored, len - data);
    node_unpin(f.nt, n);

    n = pin(&f, i2);
    stream_file(&f, n, v2, len);
    node_unpin(f.nt, n);
    gate_open(&g);
    struct compress_stats cs = {0};
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_ge(cs.compressed, 12); /* checkpoint-2's */
    ck_assert_uint_lt(cs.after, cs.before / 4 * 3);
    ck_assert_uint_le(raw_chunks(&f, i2, &all), 1); /* the 72-byte header gains nothing */
    ck_assert_uint_ge(raw_chunks(&f, i1, &all), 12); /* waits for its reverse delta */
    ck_assert_uint_ge(reverse_all(&f), 12); /* checkpoint-1 against checkpoint-2, from raw */
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_int_eq(fsmeta_compress_count(f.st->meta, &waiting), 0);
    ck_assert_uint_eq(waiting, 0);
    ck_assert_uint_le(raw_chunks(&f, i1, &all), 1);
    ck_assert_uint_lt(stored_of(&f, i1), raw_stored / 4 * 3);
    expect_standalone(&f, i2);
    ck_assert_uint_lt(stored_of(&f, i1), stored_of(&f, i2) / 2);
    fx_reopen(&f);
    check_ino(&f, i1, v1, len);
    check_ino(&f, i2, v2, len);
    fx_stop(&f);
    free(v1);
    free(v2);
}
END_TEST

/* A new file name in the root written with the workers held by g (a job
** that fills the pool's budget, so every block goes raw); its inode. */
static uint64_t held_stream(struct fx *f, struct gate *g, const char *name, const uint8_t *buf,
                            size_t len)
{
    uint64_t ino = fx_mk(f, FSMETA_ROOT_INO, name, S_IFREG | 0644);
    ck_assert_int_eq(pool_submit(f->st->workers, gate_job, g, (size_t)1 << 30), 0);
    struct node *n = pin(f, ino);
    stream_file(f, n, buf, len);
    node_unpin(f->nt, n);
    return ino;
}

/* Noise stored raw gains nothing from compression: the compressor looks at
** each block, keeps it raw and appends nothing (no garbage in the packs). */
START_TEST(test_raw_noise)
{
    struct fx f;
    fx_start_raw(&f);
    size_t len = 10 * BS + 123;
    uint8_t *noise = ut_xmalloc(len);
    ut_fill_random(noise, len, 9);
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    uint64_t ino = held_stream(&f, &g, "noise.bin", noise, len);
    size_t all, nraw = raw_chunks(&f, ino, &all);
    ck_assert_msg(nraw + 1 >= all && all >= 10, "%zu raw of %zu", nraw, all);
    gate_open(&g);
    ck_assert_int_eq(pack_sync_dirty(f.st->packs), 0);
    char packs[256];
    snprintf(packs, sizeof packs, "%s/packs", f.dir);
    long long before = ut_dir_bytes(packs);
    ck_assert_int_gt(before, (long long)len);
    struct compress_stats cs = {0};
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_ge(cs.blocks + 1, nraw); /* a short tail may not be queued */
    ck_assert_uint_eq(cs.compressed, 0);
    ck_assert_int_eq(pack_sync_dirty(f.st->packs), 0);
    ck_assert_int_eq(ut_dir_bytes(packs), before);
    uint64_t waiting = 1;
    ck_assert_int_eq(fsmeta_compress_count(f.st->meta, &waiting), 0);
    ck_assert_uint_eq(waiting, 0);
    check_ino(&f, ino, noise, len);
    fx_stop(&f);
    free(noise);
}
END_TEST

/* Metadata rebuilt from the packs knows no encoder hints: blocks still raw
** then are queued again (as plain bytes), compressed, and read back exact. */
START_TEST(test_rebuild_requeues_raw)
{
    struct fx f;
    fx_start_raw(&f);
    struct ut_tensor t = {"w", "F32", 4, 12 * BS};
    size_t len, data;
    uint8_t *v1 = weights(&t, &len, &data, 1);
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    uint64_t ino = held_stream(&f, &g, "w.safetensors", v1, len);
    size_t all, nraw = raw_chunks(&f, ino, &all);
    ck_assert_msg(nraw >= 12, "%zu raw of %zu", nraw, all);
    gate_open(&g);
    ck_assert_int_eq(fsmeta_sync(f.st->meta), 0);
    fx_stop(&f);
    struct store_opts o = fx_opts(0, 0);
    o.rebuild = 1; /* sets meta.db aside */
    fx_start_opts(&f, &o);
    struct rebuild_report rep;
    ck_assert_int_eq(rebuild_store(f.st, &rep), 0);
    ck_assert_uint_eq(rep.files, 1);
    ck_assert_int_eq(fsmeta_lookup(f.st->meta, FSMETA_ROOT_INO, "w.safetensors", &ino), 0);
    uint64_t waiting = 0;
    ck_assert_int_eq(fsmeta_compress_count(f.st->meta, &waiting), 0);
    ck_assert_uint_ge(waiting, nraw / 2); /* equal blocks share a chunk */
    struct compress_stats cs = {0};
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_ge(cs.compressed, 1);
    ck_assert_uint_lt(cs.after, cs.before);
    ck_assert_uint_lt(raw_chunks(&f, ino, &all), nraw);
    fx_reopen(&f);
    check_ino(&f, ino, v1, len);
    fx_stop(&f);
    free(v1);
}
END_TEST

struct flusher {
    struct fx *f;
    struct node *n;
    const uint8_t *buf;
    size_t len;
    int done; /* atomic */
};

/* Write w's file from offset 0 and close it (flush: its commit is owed). */
static void *write_flush(void *arg)
{
    struct flusher *w = arg;
    write_pieces(w->f, w->n, w->buf, w->len);
    ck_assert_int_eq(ingest_flush(&w->f->ig, w->n), 0);
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* An fp32 file written beside an fp32 one whose commit is owed does not
** wait for that commit, which waits for the encoding of its blocks: only a
** file with BF16 tensors can be the narrow base of its master weights
** (xbase.h). The one worker is held by a gate, so waiting would be for
** good; the gate opens after 10 s either way. */
START_TEST(test_fp32_beside_owed)
{
    struct fx f;
    struct store_opts o = fx_opts(0, 0);
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    fx_start_held(&f, &o, &g);
    struct ut_tensor t = {"w", "F32", 4, 4 * BS};
    size_t len, data;
    uint8_t *a = weights(&t, &len, &data, 1), *b = weights(&t, &len, &data, 2);
    struct node *na = pin(&f, fx_mkfile(&f, "a.safetensors"));
    struct node *nb = pin(&f, fx_mkfile(&f, "b.safetensors"));
    struct flusher wa = {&f, na, a, len, 0}, wb = {&f, nb, b, len, 0};
    write_flush(&wa); /* its blocks wait behind the gate */
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, write_flush, &wb), 0);
    int done = done_within_10s(&wb.done);
    gate_open(&g);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(done, "b.safetensors waited for the commit of a.safetensors");
    ck_assert_int_eq(ingest_commit(&f.ig, na, 0, 1), 0);
    ck_assert_int_eq(ingest_commit(&f.ig, nb, 0, 1), 0);
    check_content(&f, na, a, len);
    check_content(&f, nb, b, len);
    node_unpin(f.nt, na);
    node_unpin(f.nt, nb);
    fx_stop(&f);
    free(a);
    free(b);
}
END_TEST

struct syncer {
    struct fx *f;
    struct node *n;
    int rc, done; /* done: atomic */
};

static void *fsync_file(void *arg)
{
    struct syncer *y = arg;
    y->rc = ingest_commit(&y->f->ig, y->n, 1, 0);
    __atomic_store_n(&y->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* An fsync does not wait for the workers: blocks still queued behind the
** one worker, held by a gate, are stored raw by the fsync itself and read
** back exact. Blocks queued to be encoded (-o spill) are compressed by the
** background later; a checkpoint's blocks queued to be appended raw (-o
** raw_newest, here without spill) stay raw, held. The gate opens after
** 10 s either way. */
static void fsync_takes_back(int raw_newest)
{
    struct fx f;
    struct store_opts o = fx_opts(0, !raw_newest);
    o.raw_newest = raw_newest;
    o.buffer_bytes = 16 * BS; /* room: the blocks queue instead of going raw */
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    fx_start_held(&f, &o, &g);
    ck_assert_int_eq(store_space_raw(f.st, (uint64_t)64 << 20), 0);
    struct ut_tensor t = {"w", "F32", 4, 6 * BS};
    size_t len, data, all;
    uint8_t *v = weights(&t, &len, &data, 1);
    uint64_t dir = fx_mk(&f, FSMETA_ROOT_INO, "checkpoint-1", S_IFDIR | 0755); /* a series */
    uint64_t ino = fx_mk(&f, dir, "w.safetensors", S_IFREG | 0644);
    struct node *n = pin(&f, ino);
    write_pieces(&f, n, v, len);
    struct syncer y = {&f, n, -1, 0};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fsync_file, &y), 0);
    int done = done_within_10s(&y.done);
    size_t nraw = done ? raw_chunks(&f, ino, &all) : 0;
    gate_open(&g);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(done, "the fsync waited for the workers");
    ck_assert_int_eq(y.rc, 0);
    ck_assert_msg(nraw >= 6, "%zu raw of %zu", nraw, all);
    check_content(&f, n, v, len);
    ck_assert_int_eq(ingest_commit(&f.ig, n, 0, 1), 0);
    struct compress_stats cs = {0};
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    if (raw_newest) {
        ck_assert_uint_eq(cs.blocks, 0);
        ck_assert_uint_ge(raw_chunks(&f, ino, &all), 6);
    } else {
        ck_assert_uint_ge(cs.compressed, 6);
        ck_assert_uint_le(raw_chunks(&f, ino, &all), 1); /* the header gains nothing */
    }
    node_unpin(f.nt, n);
    fx_reopen(&f);
    check_ino(&f, ino, v, len);
    fx_stop(&f);
    free(v);
}

START_TEST(test_fsync_takes_back_raw) { fsync_takes_back(0); }
END_TEST

START_TEST(test_fsync_takes_back_held) { fsync_takes_back(1); }
END_TEST

static uint64_t raw_waiting(struct fx *f, uint64_t *held)
{
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(f->st->meta, &s), 0);
    uint64_t n = 1;
    ck_assert_int_eq(fsmeta_compress_count(f->st->meta, &n), 0);
    ck_assert_uint_eq(n, s.raw_waiting);
    *held = s.raw_held;
    return n;
}

/* With -o raw_newest a save is stored raw without waiting for any worker,
** and stays raw while it is the newest: the compressor leaves it. The next
** version of its family lets go of it: it becomes reverse deltas against
** the next (raw) one, from its raw bytes (not compressed first), exact. A mount without raw_newest lets go of every
** hold, and the newest is compressed too. */
START_TEST(test_raw_newest_held)
{
    struct fx f;
    ut_newdir(f.dir);
    struct store_opts o = fx_opts(0, 1);
    o.raw_newest = 1;
    fx_start_opts(&f, &o);
    ck_assert_int_eq(store_space_raw(f.st, (uint64_t)64 << 20), 0);
    struct ut_tensor t = {"w", "F32", 4, 12 * BS};
    size_t len, data, all;
    uint8_t *v1 = weights(&t, &len, &data, 1), *v2 = weights(&t, &len, &data, 2);
    uint64_t ino[2];
    fx_family(&f, "checkpoint-1", "checkpoint-2", "w.safetensors", ino);
    uint64_t i1 = ino[0], i2 = ino[1];

    stream_new(&f, i1, v1, len);
    ck_assert_uint_ge(raw_chunks(&f, i1, &all), 12);
    uint64_t held;
    ck_assert_uint_eq(raw_waiting(&f, &held), 0);
    ck_assert_uint_ge(held, 12);
    struct compress_stats cs = {0};
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_eq(cs.blocks, 0);
    ck_assert_uint_ge(raw_chunks(&f, i1, &all), 12);
    check_ino(&f, i1, v1, len);

    stream_new(&f, i2, v2, len);
    ck_assert_uint_ge(raw_waiting(&f, &held), 12); /* checkpoint-1's, superseded */
    ck_assert_uint_ge(held, 12);
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0); /* the daemon's order */
    ck_assert_uint_eq(cs.blocks, 0); /* checkpoint-1's wait for their reverse deltas */
    ck_assert_uint_ge(reverse_all(&f), 12);
    ck_assert_uint_ge(delta_chunks(&f), 12);
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_eq(raw_waiting(&f, &held), 0);
    ck_assert_uint_le(raw_chunks(&f, i1, &all), 1); /* the header gains nothing */
    ck_assert_uint_ge(raw_chunks(&f, i2, &all), 12);
    ck_assert_uint_lt(stored_of(&f, i1), stored_of(&f, i2) / 2);
    fx_reopen(&f);
    check_ino(&f, i1, v1, len);
    check_ino(&f, i2, v2, len);

    /* A model file with no family and nothing before it: no successor is
    ** expected, so it is encoded at once. */
    o.raw_newest = 1;
    fx_stop(&f);
    fx_start_opts(&f, &o);
    struct ut_tensor tx = {"x", "F32", 4, 12 * BS}; /* no twin to take as base */
    size_t xlen, xdata;
    uint8_t *vx = weights(&tx, &xlen, &xdata, 3);
    uint64_t one = fx_mkfile(&f, "model.safetensors"), held0;
    raw_waiting(&f, &held0);
    stream_new(&f, one, vx, xlen);
    raw_waiting(&f, &held);
    ck_assert_uint_eq(held, held0);
    check_ino(&f, one, vx, xlen);
    free(vx);

    ck_assert_int_eq(fsmeta_compress_release(f.st->meta), 0);
    ck_assert_uint_ge(raw_waiting(&f, &held), 12);
    ck_assert_uint_eq(held, 0);
    ck_assert_int_eq(compress_pending(f.st, NULL, 0, &cs), 0);
    ck_assert_uint_ge(cs.compressed, 12);
    ck_assert_uint_le(raw_chunks(&f, i2, &all), 1);
    fx_reopen(&f);
    check_ino(&f, i1, v1, len);
    check_ino(&f, i2, v2, len);
    fx_stop(&f);
    free(v1);
    free(v2);
}
END_TEST

int main(void)
{
    const TTest *const ingest_tests[] = {
        test_seq_write,
        test_free_with_tail,
        test_random_writes,
        test_truncate,
        test_truncate_up_then_append,
        test_zero_holes,
        test_durable_commit,
        test_fsync_then_append,
        test_staging_removed,
        test_adopt_stage,
        test_enospc_keeps_committed,
        test_parallel_files,
        test_checkpoint_deltas,
        test_raw_behind,
        test_raw_noise,
        test_rebuild_requeues_raw,
        test_fp32_beside_owed,
        test_fsync_takes_back_raw,
        test_raw_newest_held,
        test_fsync_takes_back_held,
        NULL,
    };
    return ut_main("ingest", (const struct ut_tcase[]){
        {.name = "ingest", .timeout = 120, .tests = ingest_tests},
        {0},
    });
}
