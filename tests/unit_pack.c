/*
** unit_pack.c: tests of pack files (src/pack.h) and of the store's block
** checks on top of them (src/store.h).
**
** Record headers: encode/decode round trip and the on-disk layout; decode
** rejects a bad magic, a bad version and any flipped byte the checksum
** covers. Packsets in a temp directory: append records of many sizes and
** read each back; reads with a wrong expectation (hash, lengths, codec,
** offset) fail with -EIO; a flipped payload byte passes pack_read but fails
** store_read_block/store_verify_block; pack_scan visits clean packs in order
** and stops at a torn record with its offset; rollover to new packs; ENOSPC
** from the free-space reserve; EROFS on a readonly packset; pack_sync.
** pack_read_held reads records the page cache dropped with O_DIRECT, cached
** ones through the cache, and checks both the same way; pack_willneed
** brings a record back into the cache. Framed appends,
** mixed with plain ones from two threads: large records are written with
** O_DIRECT at page-aligned offsets, padded; all read back; pack_scan steps
** over the padding and still stops at garbage.
*/
#include "../src/bbuf.h"
#include "../src/codec.h"
#include "../src/common.h"
#include "../src/pack.h"
#include "../src/store.h"
#include "unit_util.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <xxhash.h>

static const struct pack_opts big_opts = {.max_pack_bytes = 1ull << 30, .reserve_bytes = 0};

static void packs_path(char *out, const char *dir)
{
    snprintf(out, 160, "%s/packs", dir);
}

/* A packset (big_opts) in a new directory dir; its path in pdir. */
static packset *fresh_packs(char dir[128], char pdir[160])
{
    packset *ps;
    ut_newdir(dir);
    packs_path(pdir, dir);
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    return ps;
}

static void pack_file(char *out, const char *dir, uint32_t id)
{
    snprintf(out, 200, "%s/packs/%08u.pack", dir, id);
}

/* One appended test record. */
struct rec {
    struct pack_rec r;
    uint8_t *data;
    uint32_t pack;
    uint64_t off;
};

static void make_rec(struct rec *x, uint32_t len, uint64_t seed)
{
    x->data = ut_xmalloc(len);
    ut_fill_random(x->data, len, seed);
    x->r = (struct pack_rec){.codec = (uint8_t)(seed % 2), .raw_len = len + (uint32_t)seed,
                             .stored_len = len, .hash = XXH3_64bits(x->data, len)};
}

static void append_rec(packset *ps, struct rec *x)
{
    ck_assert_int_eq(pack_append(ps, &x->r, x->data, &x->pack, &x->off), 0);
}

static void check_read(packset *ps, const struct rec *x)
{
    uint8_t *buf = ut_xmalloc(x->r.stored_len);
    struct pack_rec r = x->r; /* pack_read sets its flags */
    ck_assert_int_eq(pack_read(ps, x->pack, x->off, &r, buf), 0);
    ck_assert_uint_eq(r.flags, x->r.flags);
    ck_assert(x->r.stored_len == 0 || memcmp(buf, x->data, x->r.stored_len) == 0);
    free(buf);
}

START_TEST(test_rec_roundtrip)
{
    struct pack_rec in[] = {
        {.codec = CODEC_RAW, .raw_len = 0, .stored_len = 0, .hash = 0},
        {.codec = CODEC_ZSTD, .raw_len = 1 << 20, .stored_len = 12345, .hash = 0x0123456789ABCDEFull},
        {.codec = 0xFF, .raw_len = UINT32_MAX, .stored_len = UINT32_MAX, .hash = UINT64_MAX},
        {.codec = CODEC_RAW, .raw_len = 7, .stored_len = 7, .hash = 0x8000000000000001ull},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        uint8_t h[PACK_REC_HDR];
        memset(h, 0xCC, sizeof h);
        pack_rec_encode(&in[i], h);
        /* Layout as documented in pack.h. */
        ck_assert(memcmp(h, "CKPR", 4) == 0);
        ck_assert_uint_eq(h[4], PACK_VERSION);
        ck_assert_uint_eq(h[5], in[i].codec);
        ck_assert_uint_eq(h[6], 0);
        ck_assert_uint_eq(h[7], 0);
        ck_assert_uint_eq(ck_get32(h + 8), in[i].raw_len);
        ck_assert_uint_eq(ck_get32(h + 12), in[i].stored_len);
        ck_assert(ck_get64(h + 16) == in[i].hash);
        ck_assert_uint_eq(ck_get32(h + 24), XXH32(h, 24, 0));
        for (int k = 28; k < 32; k++) ck_assert_uint_eq(h[k], 0);
        struct pack_rec out;
        memset(&out, 0x77, sizeof out);
        ck_assert_int_eq(pack_rec_decode(h, &out), 0);
        ck_assert_uint_eq(out.codec, in[i].codec);
        ck_assert_uint_eq(out.raw_len, in[i].raw_len);
        ck_assert_uint_eq(out.stored_len, in[i].stored_len);
        ck_assert(out.hash == in[i].hash);
    }
}
END_TEST

START_TEST(test_rec_decode_rejects)
{
    struct pack_rec in = {.codec = CODEC_ZSTD, .raw_len = 4096, .stored_len = 100,
                          .hash = 0xDEADBEEFCAFEF00Dull}, out;
    uint8_t good[PACK_REC_HDR], h[PACK_REC_HDR];
    pack_rec_encode(&in, good);

    memcpy(h, good, sizeof h);
    h[0] = 'X';
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);
    memcpy(h, good, sizeof h);
    memcpy(h, "CKPT", 4);
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);

    /* Bad version, even with a recomputed checksum. */
    memcpy(h, good, sizeof h);
    h[4] = PACK_VERSION + 1;
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);
    ck_put32(h + 24, XXH32(h, 24, 0));
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);
    h[4] = 0;
    ck_put32(h + 24, XXH32(h, 24, 0));
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);

    /* Any flipped bit in bytes 0..27 (covered fields and the checksum). */
    for (int byte = 0; byte < 28; byte++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(h, good, sizeof h);
            h[byte] ^= (uint8_t)(1u << bit);
            ck_assert_msg(pack_rec_decode(h, &out) == -EIO, "flip byte %d bit %d accepted",
                          byte, bit);
        }
    /* All zeros (a hole in a pack file) is not a record. */
    memset(h, 0, sizeof h);
    ck_assert_int_eq(pack_rec_decode(h, &out), -EIO);
    ck_assert_int_eq(pack_rec_decode(good, &out), 0);
}
END_TEST

START_TEST(test_append_read)
{
    char dir[128], pdir[160], f[200];
    packset *ps = fresh_packs(dir, pdir);
    ck_assert_uint_eq(pack_max_id(ps), 0);

    uint32_t lens[] = {0, 1, 31, 32, 33, 100, 4096, 65537, 300000, 5};
    enum { N = sizeof lens / sizeof lens[0] };
    struct rec x[N];
    uint64_t expect_off = PACK_FILE_HDR;
    for (int i = 0; i < N; i++) {
        make_rec(&x[i], lens[i], (uint64_t)i + 1);
        append_rec(ps, &x[i]);
        ck_assert_uint_eq(x[i].pack, 1);
        ck_assert_uint_eq(x[i].off, expect_off); /* records are not padded */
        expect_off += PACK_REC_HDR + lens[i];
    }
    ck_assert_uint_eq(pack_max_id(ps), 1);
    uint64_t size = 0;
    ck_assert_int_eq(pack_size(ps, 1, &size), 0);
    ck_assert_uint_eq(size, expect_off);
    /* Read back in a different order than written. */
    for (int i = N - 1; i >= 0; i--) check_read(ps, &x[i]);
    for (int i = 0; i < N; i++) check_read(ps, &x[i]);

    /* The file header. */
    pack_file(f, dir, 1);
    int fd = open(f, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t h[PACK_FILE_HDR];
    ck_assert_int_eq(pread(fd, h, sizeof h, 0), (ssize_t)sizeof h);
    close(fd);
    ck_assert(memcmp(h, "CKPTPACK", 8) == 0);
    ck_assert_uint_eq(ck_get32(h + 8), PACK_VERSION);
    ck_assert_uint_eq(ck_get32(h + 12), 1);
    pack_close(ps);

    /* A new packset reads the old records and appends to a new pack. */
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    ck_assert_uint_eq(pack_max_id(ps), 1);
    for (int i = 0; i < N; i++) check_read(ps, &x[i]);
    struct rec y;
    make_rec(&y, 777, 99);
    append_rec(ps, &y);
    ck_assert_uint_eq(y.pack, 2);
    ck_assert_uint_eq(y.off, PACK_FILE_HDR);
    ck_assert_uint_eq(pack_max_id(ps), 2);
    check_read(ps, &y);
    ck_assert_int_eq(pack_size(ps, 1, &size), 0);
    ck_assert_uint_eq(size, expect_off); /* the old pack was not touched */
    pack_close(ps);
    for (int i = 0; i < N; i++) free(x[i].data);
    free(y.data);
}
END_TEST

/* Resident pages of file f in [off, off + len). */
static size_t resident(const char *f, size_t off, size_t len)
{
    int fd = open(f, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
    ck_assert(m != MAP_FAILED);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg, r = 0;
    unsigned char *v = ut_xmalloc(n);
    ck_assert_int_eq(mincore(m, len, v), 0);
    for (size_t i = 0; i < n; i++) r += v[i] & 1;
    free(v);
    munmap(m, len);
    close(fd);
    return r;
}

/* Write-behind: once the pack is two windows past a window, that window is
** on disk and out of the page cache; without it the pages stay. Either way
** every record reads back. */
START_TEST(test_write_behind)
{
    enum { W = 256 << 10, N = 40, LEN = 64 << 10 };
    for (int behind = 0; behind <= 1; behind++) {
        char dir[128], pdir[160], f[200];
        ut_newdir(dir);
        packs_path(pdir, dir);
        struct pack_opts o = big_opts;
        o.behind_bytes = behind ? W : 0;
        packset *ps;
        ck_assert_int_eq(pack_open(pdir, &o, &ps), 0);
        struct rec x[N];
        for (int i = 0; i < N; i++) {
            make_rec(&x[i], LEN, (uint64_t)i + 1);
            append_rec(ps, &x[i]);
        }
        pack_file(f, dir, 1);
        size_t r = resident(f, 0, W);
        if (behind)
            ck_assert_msg(r == 0, "%zu pages of the first window still cached", r);
        else
            ck_assert_msg(r > 0, "no page cached without write-behind");
        for (int i = 0; i < N; i++) check_read(ps, &x[i]);
        ck_assert_int_eq(pack_sync(ps, 1), 0);
        pack_close(ps);
        for (int i = 0; i < N; i++) free(x[i].data);
    }
}
END_TEST

/* A packset in a new directory dir (its packs in pdir). */
static packset *new_packset(char *dir, char *pdir)
{
    packset *ps;
    ut_newdir(dir);
    packs_path(pdir, dir);
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    return ps;
}

/* Pages of [off, off + len) of fd in the page cache, or -1 where the
** kernel cannot tell (as pack.c asks: cachestat(2)). */
static long cached_pages(int fd, uint64_t off, uint64_t len)
{
#if !defined(SYS_cachestat) && (defined(__x86_64__) || defined(__aarch64__))
#define SYS_cachestat 451
#endif
#ifdef SYS_cachestat
    struct { uint64_t off, len; } range = {off, len};
    struct { uint64_t cache, dirty, writeback, evicted, recently_evicted; } cs;
    if (syscall(SYS_cachestat, fd, &range, &cs, 0) == 0) return (long)cs.cache;
#endif
    return -1;
}

static int on_tmpfs(int fd)
{
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && sf.f_type == 0x01021994; /* TMPFS_MAGIC */
}

static void check_held(packset *ps, const struct rec *x)
{
    void *hold = NULL;
    const uint8_t *data = NULL;
    ck_assert_int_eq(pack_read_held(ps, x->pack, x->off, &x->r, &hold, &data), 0);
    ck_assert(memcmp(data, x->data, x->r.stored_len) == 0);
    bbuf_free(hold);
}

START_TEST(test_read_held)
{
    char dir[128], pdir[160], file[200];
    packset *ps = new_packset(dir, pdir);
    /* Unaligned offsets and lengths; the last ends the file mid-page. */
    struct rec x[4];
    uint32_t lens[4] = {1, 70001, 4096, 300007};
    for (int i = 0; i < 4; i++) {
        make_rec(&x[i], lens[i], 40 + (uint64_t)i);
        append_rec(ps, &x[i]);
    }
    ck_assert_int_eq(pack_sync(ps, x[0].pack), 0);
    pack_file(file, dir, x[0].pack);
    int fd = open(file, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    /* Direct where the filesystem allows O_DIRECT and the kernel can tell
    ** the pages were dropped (not on tmpfs, which cannot drop them). */
    int dio = open(file, O_RDONLY | O_DIRECT);
    uint64_t direct = dio >= 0 && cached_pages(fd, 0, 1 << 30) == 0 ? 1 : 0;
    for (int i = 0; i < 4; i++) check_held(ps, &x[i]);
    ck_assert_uint_eq(pack_direct_reads(ps), 4 * direct);
    if (direct) ck_assert_int_eq(cached_pages(fd, 0, 1 << 30), 0); /* and it stays so */
    /* pack_willneed brings a record into the cache: read through it then. */
    pack_willneed(ps, x[3].pack, x[3].off, PACK_REC_HDR + x[3].r.stored_len);
    if (direct) ck_assert_int_gt(cached_pages(fd, x[3].off, PACK_REC_HDR + x[3].r.stored_len), 0);
    check_held(ps, &x[3]);
    ck_assert_uint_eq(pack_direct_reads(ps), 4 * direct);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    for (int i = 0; i < 4; i++) check_read(ps, &x[i]); /* buffered: now cached */
    for (int i = 0; i < 4; i++) check_held(ps, &x[i]);
    ck_assert_uint_eq(pack_direct_reads(ps), 4 * direct);
    /* A wrong expectation fails on both paths. */
    struct pack_rec e = x[3].r;
    e.hash ^= 1;
    void *hold = NULL;
    const uint8_t *data;
    ck_assert_int_eq(pack_read_held(ps, x[3].pack, x[3].off, &e, &hold, &data), -EIO);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ck_assert_int_eq(pack_read_held(ps, x[3].pack, x[3].off, &e, &hold, &data), -EIO);
    ck_assert_int_eq(pack_read_held(ps, x[3].pack, x[3].off + 1, &x[3].r, &hold, &data), -EIO);
    ck_assert_uint_eq(pack_direct_reads(ps), 5 * direct); /* the short one read nothing */
    if (dio >= 0) close(dio);
    close(fd);
    for (int i = 0; i < 4; i++) free(x[i].data);
    pack_close(ps);
}
END_TEST

/* common.h's mountinfo line reader, which ckptfs and ckptctl share. */
START_TEST(test_mountinfo_parse)
{
    char line[] = "36 35 0:39 / /tmp/a\\040b\\011c rw,nosuid shared:1 master:2 - "
                  "fuse.ckptfs /var/st\\134ore rw,user_id=0\n";
    struct ck_mount m;
    ck_assert_int_eq(ck_mountinfo_parse(line, &m), 0);
    ck_assert_str_eq(m.dev, "0:39");
    ck_assert_str_eq(m.point, "/tmp/a b\tc");
    ck_assert_str_eq(m.fstype, "fuse.ckptfs");
    ck_assert_str_eq(m.source, "/var/st\\ore");
    char no_sep[] = "36 35 0:39 / /mnt rw fuse.ckptfs /st rw\n";
    ck_assert_int_eq(ck_mountinfo_parse(no_sep, &m), -1);
    char short_line[] = "36 35 0:39 - fuse.ckptfs /st rw\n";
    ck_assert_int_eq(ck_mountinfo_parse(short_line, &m), -1);
}
END_TEST

START_TEST(test_read_mismatch)
{
    char dir[128], pdir[160];
    packset *ps = fresh_packs(dir, pdir);
    struct rec a, b;
    make_rec(&a, 1000, 2);
    make_rec(&b, 2000, 3);
    append_rec(ps, &a);
    append_rec(ps, &b);
    uint8_t *buf = ut_xmalloc(4096);
    struct pack_rec e;

    e = a.r; e.hash ^= 1;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    e = a.r; e.raw_len += 1;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    e = a.r; e.stored_len -= 1;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    e = a.r; e.stored_len += 1;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    e = a.r; e.codec ^= 1;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    e = a.r; e.codec = 0xFF;
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &e, buf), -EIO);
    /* Right expectation, wrong place: another record, mid-record, past the end. */
    ck_assert_int_eq(pack_read(ps, a.pack, b.off, &a.r, buf), -EIO);
    ck_assert_int_eq(pack_read(ps, a.pack, a.off + 1, &a.r, buf), -EIO);
    ck_assert_int_eq(pack_read(ps, a.pack, 0, &a.r, buf), -EIO);
    ck_assert_int_eq(pack_read(ps, b.pack, b.off + 10000, &b.r, buf), -EIO);
    /* The last record, expecting more bytes than the file has. */
    e = b.r; e.stored_len += 100;
    ck_assert_int_eq(pack_read(ps, b.pack, b.off, &e, buf), -EIO);
    /* A pack that does not exist. */
    ck_assert_int_eq(pack_read(ps, 7, PACK_FILE_HDR, &a.r, buf), -EIO);
    /* And the right ones still read. */
    check_read(ps, &a);
    check_read(ps, &b);
    pack_close(ps);
    free(buf);
    free(a.data);
    free(b.data);
}
END_TEST

static void flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, (off_t)off), 1);
    c ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
}

/* pack_read checks the header only: a flipped payload byte reads back. */
START_TEST(test_payload_flip_pack_read)
{
    char dir[128], pdir[160], f[200];
    packset *ps = fresh_packs(dir, pdir);
    struct rec a;
    make_rec(&a, 5000, 4);
    append_rec(ps, &a);
    ck_assert_int_eq(pack_sync(ps, a.pack), 0);
    pack_close(ps);
    pack_file(f, dir, a.pack);
    flip_byte(f, a.off + PACK_REC_HDR + 1234);

    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    uint8_t *buf = ut_xmalloc(5000);
    ck_assert_int_eq(pack_read(ps, a.pack, a.off, &a.r, buf), 0);
    ck_assert_uint_eq(buf[1234], a.data[1234] ^ 0x10);
    ck_assert(memcmp(buf, a.data, 1234) == 0);
    pack_close(ps);
    free(buf);
    free(a.data);
}
END_TEST

static void open_store(const char *dir, struct store **st)
{
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = 64 * 1024;
    o.threads = 1;
    o.cache_bytes = 1 << 20;
    o.reserve_bytes = 0;
    ck_assert_int_eq(store_open(dir, &o, st), 0);
}

/* store_put_block_own caches a tensor block in the buffer it was given
** when the block fills most of it, and otherwise copies it and frees the
** buffer: counted by the bytes bbuf keeps on its free list. */
START_TEST(test_put_block_own)
{
    char dir[128];
    ut_newdir(dir);
    struct store *st;
    open_store(dir, &st);
    size_t n = 256 * 1024, m, k0, k1;
    struct store_hint h = {.width = 2, .is_float = 1};
    uint8_t *ref = ut_xmalloc(n), *got = ut_xmalloc(n);
    ut_fill_random(ref, n, 9);
    struct fsm_chunk ca, cb;

    uint8_t *a = bbuf_alloc(n);
    memcpy(a, ref, n);
    bbuf_stats(&m, &k0);
    ck_assert_int_eq(store_put_block_own(st, a, n, &h, &ca), 0);
    bbuf_stats(&m, &k1);
    ck_assert_uint_eq(k1, k0); /* a is the cache's now, not freed */
    ck_assert_int_eq(store_read_block(st, &ca, 0, n, got), 0);
    ck_assert(memcmp(got, ref, n) == 0);

    uint8_t *b = bbuf_alloc(n);
    memcpy(b, ref, n / 4);
    size_t cap = bbuf_cap(b);
    bbuf_stats(&m, &k0);
    ck_assert_int_eq(store_put_block_own(st, b, n / 4, &h, &cb), 0);
    bbuf_stats(&m, &k1);
    ck_assert_uint_eq(k1, k0 + cap); /* copied, b freed */
    ck_assert_int_eq(store_read_block(st, &cb, 0, n / 4, got), 0);
    ck_assert(memcmp(got, ref, n / 4) == 0);
    store_close(st);
    free(ref);
    free(got);
}
END_TEST

/* The store layer checks the raw hash: a flipped payload byte is -EIO for
** both a raw and a zstd block, read through a cold cache. */
START_TEST(test_payload_flip_store)
{
    char dir[128], f[200];
    ut_newdir(dir);
    struct store *st;
    open_store(dir, &st);
    size_t n = 64 * 1024;
    uint8_t *rnd = ut_xmalloc(n), *txt = ut_xmalloc(n), *buf = ut_xmalloc(n);
    ut_fill_random(rnd, n, 5);
    for (size_t i = 0; i < n; i++) txt[i] = (uint8_t)("0123456789abcdef"[i % 16] + (i / 4096));
    struct fsm_chunk cr, cz, cok;
    ck_assert_int_eq(store_put_block(st, rnd, n, NULL, &cr), 0);
    ck_assert_int_eq(store_put_block(st, txt, n, NULL, &cz), 0);
    ck_assert_int_eq(store_put_block(st, rnd, 1000, NULL, &cok), 0);
    ck_assert_int_eq(cr.codec, CODEC_RAW);
    ck_assert_int_eq(cz.codec, CODEC_ZSTD);
    ck_assert_uint_eq(cr.id, 0);
    ck_assert(cr.hash == XXH3_64bits(rnd, n));
    ck_assert_uint_eq(cr.raw_len, n);
    ck_assert_uint_eq(cz.raw_len, n);
    ck_assert_uint_lt(cz.stored_len, n);
    /* Sound before the damage. */
    ck_assert_int_eq(store_verify_block(st, &cr, buf), 0);
    ck_assert(memcmp(buf, rnd, n) == 0);
    ck_assert_int_eq(store_verify_block(st, &cz, buf), 0);
    ck_assert(memcmp(buf, txt, n) == 0);
    ck_assert_int_eq(store_sync_extents(st, (struct fsm_extent[]){{0, cr}}, 1), 0);
    store_close(st);

    pack_file(f, dir, cr.pack);
    flip_byte(f, cr.off + PACK_REC_HDR + 100);
    pack_file(f, dir, cz.pack);
    flip_byte(f, cz.off + PACK_REC_HDR + cz.stored_len / 2);

    /* pack_read alone does not notice. */
    char pdir[160];
    packs_path(pdir, dir);
    packset *ps;
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct pack_rec r = {.codec = cr.codec, .raw_len = cr.raw_len,
                         .stored_len = cr.stored_len, .hash = cr.hash};
    ck_assert_int_eq(pack_read(ps, cr.pack, cr.off, &r, buf), 0);
    pack_close(ps);

    int lvl = ck_log_level;
    ck_log_level = -1; /* the corrupt-block errors are expected */
    open_store(dir, &st);
    ck_assert_int_eq(store_verify_block(st, &cr, buf), -EIO);
    ck_assert_int_eq(store_read_block(st, &cr, 0, n, buf), -EIO);
    ck_assert_int_eq(store_read_block(st, &cr, 0, 10, buf), -EIO);
    ck_assert_int_eq(store_verify_block(st, &cz, buf), -EIO);
    ck_assert_int_eq(store_read_block(st, &cz, 0, n, buf), -EIO);
    /* A chunk with a wrong hash is also refused. */
    struct fsm_chunk bad = cok;
    bad.hash ^= 1;
    ck_assert_int_eq(store_verify_block(st, &bad, buf), -EIO);
    ck_log_level = lvl;
    /* The undamaged block still reads, through the cache and without. */
    ck_assert_int_eq(store_read_block(st, &cok, 10, 500, buf), 0);
    ck_assert(memcmp(buf, rnd + 10, 500) == 0);
    ck_assert_int_eq(store_verify_block(st, &cok, buf), 0);
    ck_assert(memcmp(buf, rnd, 1000) == 0);
    store_close(st);
    free(rnd);
    free(txt);
    free(buf);
}
END_TEST

struct visit {
    int n;
    uint64_t off[64];
    struct pack_rec r[64];
    int stop_after; /* return 1 once n reaches this (0: never) */
    int fail_with;
};

static int visit_cb(void *ctx, uint64_t off, const struct pack_rec *r)
{
    struct visit *v = ctx;
    if (v->fail_with && v->n == v->stop_after) return v->fail_with;
    if (v->n < 64) v->off[v->n] = off, v->r[v->n] = *r;
    v->n++;
    return v->stop_after && v->n >= v->stop_after && !v->fail_with;
}

START_TEST(test_scan_clean)
{
    char dir[128], pdir[160];
    packset *ps = fresh_packs(dir, pdir);
    enum { N = 12 };
    struct rec x[N];
    for (int i = 0; i < N; i++) {
        make_rec(&x[i], (uint32_t)(i * 997 % 5000), (uint64_t)i);
        append_rec(ps, &x[i]);
    }
    struct visit v = {0};
    uint64_t bad = 12345;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), 0);
    ck_assert_int_eq(v.n, N);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(v.off[i], x[i].off);
        ck_assert_uint_eq(v.r[i].codec, x[i].r.codec);
        ck_assert_uint_eq(v.r[i].raw_len, x[i].r.raw_len);
        ck_assert_uint_eq(v.r[i].stored_len, x[i].r.stored_len);
        ck_assert(v.r[i].hash == x[i].r.hash);
    }
    /* The callback stops the walk. */
    struct visit w = {.stop_after = 3};
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &w, &bad), 0);
    ck_assert_int_eq(w.n, 3);
    /* A negative return ends it with that error. */
    struct visit e = {.stop_after = 2, .fail_with = -ECANCELED};
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &e, &bad), -ECANCELED);
    ck_assert_int_eq(e.n, 2);
    pack_close(ps);

    /* An empty pack (header only) scans to nothing; a missing one fails. */
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct rec y;
    make_rec(&y, 10, 1);
    ck_assert_int_eq(pack_append(ps, &y.r, y.data, &y.pack, &y.off), 0);
    ck_assert_uint_eq(y.pack, 2);
    pack_close(ps);
    char f[200];
    pack_file(f, dir, 2);
    ck_assert_int_eq(truncate(f, PACK_FILE_HDR), 0);
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct visit z = {0};
    ck_assert_int_eq(pack_scan(ps, 2, visit_cb, &z, &bad), 0);
    ck_assert_int_eq(z.n, 0);
    ck_assert_int_lt(pack_scan(ps, 9, visit_cb, &z, &bad), 0);
    pack_close(ps);
    for (int i = 0; i < N; i++) free(x[i].data);
    free(y.data);
}
END_TEST

/* Truncate the pack at cut bytes into the last record: the scan visits the
** whole records and reports the torn one. */
static void torn_case(uint64_t cut_into_last)
{
    char dir[128], pdir[160], f[200];
    packset *ps = fresh_packs(dir, pdir);
    struct rec x[4];
    for (int i = 0; i < 4; i++) {
        make_rec(&x[i], 1000 + 100 * (uint32_t)i, (uint64_t)i + 20);
        append_rec(ps, &x[i]);
    }
    pack_close(ps);
    pack_file(f, dir, 1);
    ck_assert_int_eq(truncate(f, (off_t)(x[3].off + cut_into_last)), 0);

    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct visit v = {0};
    uint64_t bad = 0;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), -EIO);
    ck_assert_uint_eq(bad, x[3].off);
    ck_assert_int_eq(v.n, 3);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(v.off[i], x[i].off);
    /* Whole records before the tear still read; the torn one does not. */
    for (int i = 0; i < 3; i++) check_read(ps, &x[i]);
    uint8_t *buf = ut_xmalloc(x[3].r.stored_len);
    ck_assert_int_eq(pack_read(ps, 1, x[3].off, &x[3].r, buf), -EIO);
    free(buf);
    pack_close(ps);
    for (int i = 0; i < 4; i++) free(x[i].data);
}

/* A torn record in the middle (its header overwritten with junk, as a
** crash leaves an append others followed): pack_scan stops there,
** pack_scan_all finds the records after it and counts the bytes it
** skipped; the flags byte of each header comes back as written. */
START_TEST(test_scan_all_past_damage)
{
    char dir[128], pdir[160], f[200];
    packset *ps = fresh_packs(dir, pdir);
    struct rec x[5];
    for (int i = 0; i < 5; i++) {
        make_rec(&x[i], 700 + 300 * (uint32_t)i, (uint64_t)i + 40);
        x[i].r.flags = i == 4 ? PACK_REC_MANIFEST : 0;
        append_rec(ps, &x[i]);
    }
    pack_close(ps);
    pack_file(f, dir, 1);
    int fd = open(f, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t junk[PACK_REC_HDR];
    memset(junk, 0xA5, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, (off_t)x[2].off), (ssize_t)sizeof junk);
    close(fd);

    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct visit v = {0};
    uint64_t bad = 0, skipped = 0;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), -EIO);
    ck_assert_int_eq(v.n, 2);
    memset(&v, 0, sizeof v);
    ck_assert_int_eq(pack_scan_all(ps, 1, 0, visit_cb, &v, &skipped), 0);
    ck_assert_int_eq(v.n, 4);
    int want[4] = {0, 1, 3, 4};
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(v.off[i], x[want[i]].off);
        ck_assert_uint_eq(v.r[i].flags, x[want[i]].r.flags);
    }
    ck_assert_uint_eq(skipped, PACK_REC_HDR + x[2].r.stored_len);
    /* From an offset (a replay mark): only what lies past it, the damage
    ** before it unseen. */
    memset(&v, 0, sizeof v);
    ck_assert_int_eq(pack_scan_all(ps, 1, x[3].off, visit_cb, &v, &skipped), 0);
    ck_assert_int_eq(v.n, 2);
    ck_assert_uint_eq(v.off[0], x[3].off);
    ck_assert_uint_eq(v.off[1], x[4].off);
    ck_assert_uint_eq(skipped, 0);
    check_read(ps, &x[4]);
    pack_close(ps);
    for (int i = 0; i < 5; i++) free(x[i].data);
}
END_TEST

START_TEST(test_scan_torn_payload)
{
    torn_case(PACK_REC_HDR + 500); /* mid-payload */
}
END_TEST

START_TEST(test_scan_torn_header)
{
    torn_case(PACK_REC_HDR / 2); /* mid-header */
}
END_TEST

START_TEST(test_scan_torn_last_byte)
{
    torn_case(PACK_REC_HDR + 1300 - 1); /* one byte short */
}
END_TEST

/* Garbage in the middle (a flipped byte in a record header) also stops the
** scan there. */
START_TEST(test_scan_garbled)
{
    char dir[128], pdir[160], f[200];
    packset *ps = fresh_packs(dir, pdir);
    struct rec x[3];
    for (int i = 0; i < 3; i++) {
        make_rec(&x[i], 300, (uint64_t)i + 40);
        append_rec(ps, &x[i]);
    }
    pack_close(ps);
    pack_file(f, dir, 1);
    flip_byte(f, x[1].off + 9); /* raw length field of record 1 */
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct visit v = {0};
    uint64_t bad = 0;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), -EIO);
    ck_assert_uint_eq(bad, x[1].off);
    ck_assert_int_eq(v.n, 1);
    pack_close(ps);
    for (int i = 0; i < 3; i++) free(x[i].data);
}
END_TEST

START_TEST(test_rollover)
{
    char dir[128], pdir[160];
    ut_newdir(dir);
    packs_path(pdir, dir);
    /* Room for three 1000-byte records per pack. */
    struct pack_opts o = {.max_pack_bytes = PACK_FILE_HDR + 3 * (PACK_REC_HDR + 1000),
                          .reserve_bytes = 0};
    packset *ps;
    ck_assert_int_eq(pack_open(pdir, &o, &ps), 0);
    enum { N = 10 };
    struct rec x[N];
    for (int i = 0; i < N; i++) {
        make_rec(&x[i], 1000, (uint64_t)i + 60);
        append_rec(ps, &x[i]);
        ck_assert_uint_eq(x[i].pack, (uint32_t)(i / 3 + 1));
    }
    ck_assert_uint_eq(pack_max_id(ps), 4);
    for (int i = 0; i < N; i++) check_read(ps, &x[i]);
    int total = 0;
    for (uint32_t id = 1; id <= pack_max_id(ps); id++) {
        uint64_t size, bad;
        ck_assert_int_eq(pack_size(ps, id, &size), 0);
        ck_assert_uint_le(size, o.max_pack_bytes);
        struct visit v = {0};
        ck_assert_int_eq(pack_scan(ps, id, visit_cb, &v, &bad), 0);
        total += v.n;
    }
    ck_assert_int_eq(total, N);
    /* A record bigger than a whole pack still goes in, alone in a new pack. */
    struct rec big;
    make_rec(&big, 5000, 77);
    append_rec(ps, &big);
    ck_assert_uint_eq(big.pack, 5);
    ck_assert_uint_eq(big.off, PACK_FILE_HDR);
    check_read(ps, &big);
    pack_close(ps);

    ck_assert_int_eq(pack_open(pdir, &o, &ps), 0);
    ck_assert_uint_eq(pack_max_id(ps), 5);
    for (int i = 0; i < N; i++) check_read(ps, &x[i]);
    pack_close(ps);
    for (int i = 0; i < N; i++) free(x[i].data);
    free(big.data);
}
END_TEST

/* gc removing the highest pack does not free its id: a copy of the store
** elsewhere (remote.h) knows that id as that pack's content. */
START_TEST(test_ids_not_reused)
{
    char dir[128], pdir[160];
    packset *ps = fresh_packs(dir, pdir);
    struct rec a, b, c;
    make_rec(&a, 1000, 1);
    make_rec(&b, 1000, 2);
    make_rec(&c, 1000, 3);
    append_rec(ps, &a);
    pack_seal(ps);
    append_rec(ps, &b);
    ck_assert_uint_eq(b.pack, 2);
    ck_assert_int_eq(pack_remove(ps, 2), 0);
    pack_close(ps);
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    ck_assert_uint_eq(pack_max_id(ps), 2);
    append_rec(ps, &c);
    ck_assert_uint_eq(c.pack, 3);
    check_read(ps, &a);
    check_read(ps, &c);
    pack_close(ps);
    free(a.data);
    free(b.data);
    free(c.data);
}
END_TEST

/* A source holding pack 1's bytes, as a bucket would after they were
** dropped locally: fill writes them back. */
struct saved {
    int dfd;
    uint8_t *bytes;
    size_t len;
    int fills;
};

static int saved_fill(void *ctx, uint32_t id, uint64_t off, uint64_t len)
{
    struct saved *sv = ctx;
    if (id != 1 || len == 0) return 0;
    sv->fills++;
    int fd = openat(sv->dfd, "00000001.pack", O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_uint_le(off + len, sv->len);
    ck_assert_int_eq(pwrite(fd, sv->bytes + off, len, (off_t)off), (ssize_t)len);
    close(fd);
    return 0;
}

/* A scan (rebuild, replay) of a pack whose bytes were dropped asks the
** source for them first, and sees every record. */
START_TEST(test_scan_fills_dropped)
{
    char dir[128], pdir[160], path[200];
    packset *ps = fresh_packs(dir, pdir);
    enum { N = 5 };
    struct rec x[N];
    for (int i = 0; i < N; i++) make_rec(&x[i], 3000, (uint64_t)i + 90), append_rec(ps, &x[i]);
    ck_assert_int_eq(pack_sync(ps, 1), 0);
    snprintf(path, sizeof path, "%s/00000001.pack", pdir);
    struct saved sv = {.dfd = pack_dirfd(ps)};
    sv.bytes = ut_read_file(path, &sv.len);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                               (off_t)sv.len), 0);
    close(fd);
    pack_set_source(ps, &(struct pack_source){.fill = saved_fill, .ctx = &sv});
    struct visit v = {0};
    uint64_t skipped = 1;
    ck_assert_int_eq(pack_scan_all(ps, 1, 0, visit_cb, &v, &skipped), 0);
    ck_assert_int_eq(v.n, N);
    ck_assert_uint_eq(skipped, 0);
    ck_assert_int_ge(sv.fills, 1);
    pack_close(ps);
    for (int i = 0; i < N; i++) free(x[i].data);
    free(sv.bytes);
}
END_TEST

START_TEST(test_enospc)
{
    char dir[128], pdir[160];
    ut_newdir(dir);
    packs_path(pdir, dir);
    struct pack_opts o = {.max_pack_bytes = 1ull << 30, .reserve_bytes = 1ull << 60};
    packset *ps;
    ck_assert_int_eq(pack_open(pdir, &o, &ps), 0);
    struct rec a;
    make_rec(&a, 100, 1);
    ck_assert_int_eq(pack_append(ps, &a.r, a.data, &a.pack, &a.off), -ENOSPC);
    ck_assert_int_eq(pack_append(ps, &a.r, a.data, &a.pack, &a.off), -ENOSPC);
    pack_close(ps);
    /* With the reserve lifted, appends work again. */
    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    append_rec(ps, &a);
    check_read(ps, &a);
    pack_close(ps);
    free(a.data);
}
END_TEST

START_TEST(test_readonly)
{
    char dir[128], pdir[160];
    ut_newdir(dir);
    packs_path(pdir, dir);
    struct pack_opts ro = {.max_pack_bytes = 1ull << 30, .readonly = 1};
    packset *ps;
    /* Readonly does not create the directory. */
    ck_assert_int_lt(pack_open(pdir, &ro, &ps), 0);
    ck_assert_int_eq(access(pdir, F_OK), -1);

    ck_assert_int_eq(pack_open(pdir, &big_opts, &ps), 0);
    struct rec a;
    make_rec(&a, 2222, 8);
    append_rec(ps, &a);
    pack_close(ps);

    ck_assert_int_eq(pack_open(pdir, &ro, &ps), 0);
    ck_assert_uint_eq(pack_max_id(ps), 1);
    struct rec b;
    make_rec(&b, 10, 9);
    ck_assert_int_eq(pack_append(ps, &b.r, b.data, &b.pack, &b.off), -EROFS);
    check_read(ps, &a);
    struct visit v = {0};
    uint64_t bad;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), 0);
    ck_assert_int_eq(v.n, 1);
    ck_assert_uint_eq(pack_max_id(ps), 1);
    pack_close(ps);
    char p2[200];
    snprintf(p2, sizeof p2, "%s/00000002.pack", pdir);
    ck_assert_int_eq(access(p2, F_OK), -1); /* no pack 2 was made */
    free(a.data);
    free(b.data);
}
END_TEST

START_TEST(test_sync)
{
    char dir[128], pdir[160];
    packset *ps = fresh_packs(dir, pdir);
    struct rec a;
    make_rec(&a, 4096, 10);
    append_rec(ps, &a);
    ck_assert_int_eq(pack_sync(ps, a.pack), 0);
    ck_assert_int_eq(pack_sync(ps, a.pack), 0);
    ck_assert_int_lt(pack_sync(ps, a.pack + 5), 0); /* no such pack */
    check_read(ps, &a);
    pack_close(ps);
    free(a.data);
}
END_TEST

/* Two threads, each alternating framed and plain appends of its records. */
struct fthr {
    packset *ps;
    struct rec x[12];
};

static void *frame_thread(void *arg)
{
    struct fthr *t = arg;
    for (int i = 0; i < 12; i++) {
        struct rec *x = &t->x[i];
        if (i % 3 == 2) {
            if (pack_append(t->ps, &x->r, x->data, &x->pack, &x->off) < 0) return "plain";
            continue;
        }
        void *f;
        if (posix_memalign(&f, PACK_FRAME_ALIGN, PACK_FRAME_CAP(x->r.stored_len)) != 0)
            return "memalign";
        memcpy((uint8_t *)f + PACK_REC_HDR, x->data, x->r.stored_len);
        int rc = pack_append_frame(t->ps, &x->r, f, &x->pack, &x->off);
        free(f);
        if (rc < 0) return "frame";
    }
    return NULL;
}

START_TEST(test_append_frame)
{
    char dir[128], pdir[160], file[200];
    packset *ps = new_packset(dir, pdir);
    struct fthr t[2];
    pthread_t th[2];
    int large = 0;
    for (int k = 0; k < 2; k++) {
        t[k].ps = ps;
        for (int i = 0; i < 12; i++) {
            /* Around PACK_DIRECT_MIN, some a whole number of pages. */
            uint32_t len = i % 4 == 0 ? 1000u + (uint32_t)i
                           : i % 4 == 1 ? PACK_DIRECT_MIN - PACK_REC_HDR + 4096u * (uint32_t)i
                           : PACK_DIRECT_MIN + 777u * (uint32_t)i + (uint32_t)k;
            make_rec(&t[k].x[i], len, 300 + 20 * (uint64_t)k + (uint64_t)i);
            large += i % 3 != 2 && len >= PACK_DIRECT_MIN;
        }
        ck_assert_int_eq(pthread_create(&th[k], NULL, frame_thread, &t[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        void *err;
        pthread_join(th[k], &err);
        ck_assert_ptr_null(err);
    }
    pack_file(file, dir, 1);
    int dio = open(file, O_RDONLY | O_DIRECT);
    ck_assert_uint_eq(pack_direct_writes(ps), dio >= 0 ? (uint64_t)large : 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 12; i++) {
            const struct rec *x = &t[k].x[i];
            if (i % 3 == 2 || x->r.stored_len < PACK_DIRECT_MIN) continue;
            ck_assert_uint_eq(x->off % PACK_FRAME_ALIGN, 0);
            /* Written past the page cache: none of its pages is there
            ** (unless the filesystem keeps them anyway, as tmpfs does). */
            long c = cached_pages(dio, x->off, PACK_REC_HDR + x->r.stored_len);
            if (dio >= 0 && c >= 0 && !on_tmpfs(dio)) ck_assert_int_eq(c, 0);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 12; i++) {
            const struct rec *x = &t[k].x[i];
            check_read(ps, x);
            check_held(ps, x);
        }
    struct visit v = {0};
    uint64_t bad;
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), 0);
    ck_assert_int_eq(v.n, 24);
    for (int j = 0; j < 24; j++) { /* every record found, at its offset */
        int found = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 12; i++) found += t[k].x[i].off == v.off[j];
        ck_assert_int_eq(found, 1);
    }
    /* After a small record, mid-page: a page of bytes that are zeros but
    ** for one. Not padding: the scan stops where it starts. */
    struct rec tail;
    make_rec(&tail, 1000, 399);
    append_rec(ps, &tail);
    uint64_t size;
    ck_assert_int_eq(pack_size(ps, 1, &size), 0);
    ck_assert_uint_ne(size % PACK_FRAME_ALIGN, 0);
    uint8_t junk[PACK_FRAME_ALIGN] = {0};
    junk[3] = 'x';
    int fd = open(file, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ck_pwrite_full(fd, junk, sizeof junk, size), 0);
    ck_assert_int_eq(pack_scan(ps, 1, visit_cb, &v, &bad), -EIO);
    ck_assert_uint_eq(bad, size);
    close(fd);
    free(tail.data);
    if (dio >= 0) close(dio);
    pack_close(ps);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 12; i++) free(t[k].x[i].data);
}
END_TEST

/* Appends from several threads land in distinct, readable records. */
struct thr {
    packset *ps;
    struct rec x[20];
    int id;
};

static void *append_thread(void *arg)
{
    struct thr *t = arg;
    for (int i = 0; i < 20; i++)
        if (pack_append(t->ps, &t->x[i].r, t->x[i].data, &t->x[i].pack, &t->x[i].off) < 0)
            t->x[i].pack = 0;
    return NULL;
}

START_TEST(test_concurrent_append)
{
    char dir[128], pdir[160];
    ut_newdir(dir);
    packs_path(pdir, dir);
    struct pack_opts o = {.max_pack_bytes = 64 * 1024, .reserve_bytes = 0};
    packset *ps;
    ck_assert_int_eq(pack_open(pdir, &o, &ps), 0);
    struct thr t[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        t[k].ps = ps;
        t[k].id = k;
        for (int i = 0; i < 20; i++)
            make_rec(&t[k].x[i], (uint32_t)(100 + 317 * i + k), (uint64_t)(k * 100 + i));
        ck_assert_int_eq(pthread_create(&th[k], NULL, append_thread, &t[k]), 0);
    }
    for (int k = 0; k < 4; k++) pthread_join(th[k], NULL);
    int total = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 20; i++) {
            ck_assert_uint_ne(t[k].x[i].pack, 0);
            check_read(ps, &t[k].x[i]);
        }
    for (uint32_t id = 1; id <= pack_max_id(ps); id++) {
        struct visit v = {0};
        uint64_t bad;
        ck_assert_int_eq(pack_scan(ps, id, visit_cb, &v, &bad), 0);
        total += v.n;
    }
    ck_assert_int_eq(total, 80);
    pack_close(ps);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 20; i++) free(t[k].x[i].data);
}
END_TEST

int main(void)
{
    const TTest *const pack_tests[] = {
        test_rec_roundtrip,
        test_rec_decode_rejects,
        test_append_read,
        test_read_mismatch,
        test_payload_flip_pack_read,
        test_payload_flip_store,
        test_put_block_own,
        test_scan_clean,
        test_scan_torn_payload,
        test_scan_all_past_damage,
        test_scan_torn_header,
        test_scan_torn_last_byte,
        test_scan_garbled,
        test_rollover,
        test_enospc,
        test_readonly,
        test_sync,
        test_write_behind,
        test_read_held,
        test_append_frame,
        test_mountinfo_parse,
        test_concurrent_append,
        test_ids_not_reused,
        test_scan_fills_dropped,
        NULL,
    };
    return ut_main("pack", (const struct ut_tcase[]){
        {.name = "pack", .timeout = 60, .tests = pack_tests},
        {0},
    });
}
