/*
** unit_import.c: tests of import_tree (src/import.h), what ckptctl import
** runs, against a real store in a temp directory.
**
** A small tree (nested directories; files of 0, 1, 4096 bytes and a few MiB
** of random bytes, with distinct modes and nanosecond mtimes; a symlink; a
** FIFO, which import skips) is imported at the root and under a DEST made
** as needed. Through a freshly opened store every file reads back exact,
** and modes, mtimes and the symlink's target are the source's; the stats
** count what was imported and the progress callback ends at done == total.
** A name that exists already (EEXIST) and a DEST that is a file (ENOTDIR)
** fail without changing the store.
*/
#include "../src/common.h"
#include "../src/import.h"
#include "../src/ingest.h"
#include "../src/node.h"
#include "../src/store.h"
#include "unit_util.h"

#include <sys/stat.h>
#include <sys/time.h>

#define BS (64 * 1024)

struct fx {
    char dir[128];
    struct store *st;
    node_table *nt;
    struct ingest ig;
};

/* Open the store the way ckptctl does before import (not started). */
static void fx_open_at(struct fx *f)
{
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = BS;
    o.threads = 2;
    o.cache_bytes = 1 << 20;
    ck_assert_int_eq(store_open(f->dir, &o, &f->st), 0);
    f->nt = NULL;
}

static void fx_open(struct fx *f)
{
    ut_newdir(f->dir);
    fx_open_at(f);
}

static void fx_close(struct fx *f)
{
    if (f->nt) node_table_destroy(f->nt);
    store_close(f->st);
    f->nt = NULL;
    f->st = NULL;
}

/* Close and reopen, ready to read files through ingest_read. */
static void fx_reopen_read(struct fx *f)
{
    fx_close(f);
    fx_open_at(f);
    ck_assert_int_eq(store_start(f->st), 0);
    ck_assert_int_eq(node_table_create(&f->nt), 0);
    ingest_init(&f->ig, f->st, f->nt);
}

/* The inode at path ("/a/b") in the store; -errno of the failing lookup. */
static int lookup_path(struct fx *f, const char *path, uint64_t *ino)
{
    *ino = FSMETA_ROOT_INO;
    char name[256];
    for (const char *p = path; *p;) {
        p += strspn(p, "/");
        size_t len = strcspn(p, "/");
        if (!len) break;
        ck_assert_uint_lt(len, sizeof name);
        memcpy(name, p, len);
        name[len] = 0;
        p += len;
        int rc = fsmeta_lookup(f->st->meta, *ino, name, ino);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- the source tree ---- */

struct src_file {
    const char *path;
    size_t size;
    mode_t mode;
};

static const struct src_file FILES[] = {
    {"empty", 0, 0600},
    {"one", 1, 0640},
    {"sub/four_k", 4096, 0644},
    {"sub/deeper/big.bin", 3 * 1024 * 1024 + 123, 0755},
    {"sub/deeper/checkpoint-2", 5000, 0444},
};
#define NFILES (sizeof FILES / sizeof FILES[0])
static const char *const DIRS[] = {"sub", "sub/deeper"}; /* parents first */
#define NDIRS (sizeof DIRS / sizeof DIRS[0])
#define LINK_PATH "sub/link"
#define LINK_TARGET "deeper/big.bin"
#define FIFO_PATH "sub/fifo"

/* A distinct mtime for item i, with nanoseconds. */
static struct timespec mtime_of(size_t i)
{
    return (struct timespec){.tv_sec = 1600000000 + (time_t)i * 86401,
                             .tv_nsec = 123456789 + (long)i * 1000};
}

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static mode_t dir_mode(size_t i) { return i ? 0710 : 0750; }

static uint8_t *file_data(size_t i)
{
    uint8_t *b = ut_xmalloc(FILES[i].size);
    ut_fill_random(b, FILES[i].size, 100 + i);
    return b;
}

static uint64_t tree_bytes(void)
{
    uint64_t n = 0;
    for (size_t i = 0; i < NFILES; i++) n += FILES[i].size;
    return n;
}

static void set_mtime(const char *path, struct timespec m)
{
    struct timespec ts[2] = {m, m};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

/* Build the tree in a new directory src (128 bytes). */
static void make_tree(char *src)
{
    char p[512];
    ut_newdir(src);
    for (size_t i = 0; i < NDIRS; i++) {
        snprintf(p, sizeof p, "%s/%s", src, DIRS[i]);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        ck_assert_int_eq(chmod(p, dir_mode(i)), 0);
    }
    for (size_t i = 0; i < NFILES; i++) {
        snprintf(p, sizeof p, "%s/%s", src, FILES[i].path);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
        ck_assert_int_ge(fd, 0);
        uint8_t *b = file_data(i);
        ck_assert_int_eq(write(fd, b, FILES[i].size), (ssize_t)FILES[i].size);
        free(b);
        ck_assert_int_eq(fchmod(fd, FILES[i].mode), 0);
        close(fd);
        set_mtime(p, mtime_of(i));
    }
    snprintf(p, sizeof p, "%s/%s", src, LINK_PATH);
    ck_assert_int_eq(symlink(LINK_TARGET, p), 0);
    set_mtime(p, mtime_of(NFILES));
    snprintf(p, sizeof p, "%s/%s", src, FIFO_PATH);
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    /* Directories last, deepest first: their entries changed their mtimes. */
    for (size_t i = NDIRS; i-- > 0;) {
        snprintf(p, sizeof p, "%s/%s", src, DIRS[i]);
        set_mtime(p, mtime_of(NFILES + 1 + i));
    }
}

/* ---- progress ---- */

struct prog {
    uint64_t calls, last_done, last_total, first_total;
    int backwards, total_changed, over;
};

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    struct prog *p = ctx;
    if (p->calls == 0) p->first_total = total;
    if (p->calls && done < p->last_done) p->backwards = 1;
    if (total != p->first_total) p->total_changed = 1;
    if (done > total) p->over = 1;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

/* ---- checks ---- */

static void join(char *out, const char *dest, const char *rel)
{
    snprintf(out, 512, "%s/%s", strcmp(dest, "/") ? dest : "", rel);
}

static void check_file(struct fx *f, const char *dest, size_t i)
{
    char p[512];
    join(p, dest, FILES[i].path);
    uint64_t ino;
    ck_assert_msg(lookup_path(f, p, &ino) == 0, "%s missing", p);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f->st->meta, ino, &a), 0);
    ck_assert_msg(a.mode == (S_IFREG | FILES[i].mode), "%s: mode %o want %o", p, a.mode,
                  S_IFREG | FILES[i].mode);
    ck_assert_uint_eq(a.size, FILES[i].size);
    ck_assert_msg(a.mtime == ns_of(mtime_of(i)), "%s: mtime %lld want %lld", p,
                  (long long)a.mtime, (long long)ns_of(mtime_of(i)));
    ck_assert_uint_eq(a.uid, getuid());
    ck_assert_uint_eq(a.gid, getgid());

    uint8_t *want = file_data(i), *got = ut_xmalloc(FILES[i].size + 4096);
    struct node *n = node_pin(f->nt, ino);
    ck_assert_ptr_nonnull(n);
    size_t len = 12345;
    ck_assert_int_eq(ingest_read(&f->ig, n, got, FILES[i].size + 4096, 0, &len), 0);
    ck_assert_uint_eq(len, FILES[i].size);
    size_t d = ut_first_diff(got, want, len);
    ck_assert_msg(d == len, "%s: byte %zu of %zu differs", p, d, len);
    struct fsm_attr na; /* what a stat through the mount would say */
    ck_assert_int_eq(ingest_getattr(&f->ig, n, &na), 0);
    ck_assert_uint_eq(na.size, FILES[i].size);
    ck_assert_int_eq(na.mtime, ns_of(mtime_of(i)));
    node_unpin(f->nt, n);
    free(want), free(got);
}

/* Everything of the tree under dest, read through a reopened store. */
static void check_tree(struct fx *f, const char *dest)
{
    fx_reopen_read(f);
    for (size_t i = 0; i < NFILES; i++) check_file(f, dest, i);
    char p[512];
    uint64_t ino;
    struct fsm_attr a;
    for (size_t i = 0; i < NDIRS; i++) {
        join(p, dest, DIRS[i]);
        ck_assert_msg(lookup_path(f, p, &ino) == 0, "%s missing", p);
        ck_assert_int_eq(fsmeta_getattr(f->st->meta, ino, &a), 0);
        ck_assert_msg(a.mode == (S_IFDIR | dir_mode(i)), "%s: mode %o", p,
                      a.mode);
        ck_assert_msg(a.mtime == ns_of(mtime_of(NFILES + 1 + i)), "%s: mtime %lld want %lld",
                      p, (long long)a.mtime, (long long)ns_of(mtime_of(NFILES + 1 + i)));
    }
    join(p, dest, LINK_PATH);
    ck_assert_msg(lookup_path(f, p, &ino) == 0, "%s missing", p);
    ck_assert_int_eq(fsmeta_getattr(f->st->meta, ino, &a), 0);
    ck_assert_msg(S_ISLNK(a.mode), "%s: mode %o is not a symlink", p, a.mode);
    ck_assert_int_eq(a.mtime, ns_of(mtime_of(NFILES)));
    char target[256];
    size_t tl = 0;
    ck_assert_int_eq(fsmeta_readlink(f->st->meta, ino, target, sizeof target, &tl), 0);
    ck_assert_uint_eq(tl, strlen(LINK_TARGET));
    ck_assert_int_eq(memcmp(target, LINK_TARGET, tl), 0);
    ck_assert_uint_eq(a.size, strlen(LINK_TARGET));
    join(p, dest, FIFO_PATH); /* skipped */
    ck_assert_int_eq(lookup_path(f, p, &ino), -ENOENT);
}

static void check_stats(const struct import_stats *s)
{
    ck_assert_uint_eq(s->files, NFILES);
    ck_assert_uint_eq(s->dirs, NDIRS);
    ck_assert_uint_eq(s->symlinks, 1);
    ck_assert_uint_eq(s->bytes, tree_bytes());
}

static void check_progress(const struct prog *p)
{
    ck_assert_uint_gt(p->calls, 1);
    ck_assert_int_eq(p->backwards, 0);
    ck_assert_int_eq(p->total_changed, 0);
    ck_assert_int_eq(p->over, 0);
    ck_assert_uint_eq(p->last_total, tree_bytes());
    ck_assert_uint_eq(p->last_done, p->last_total);
}

static int count_entries(struct fx *f, uint64_t dir);

/* ---- tests ---- */

/* The whole tree at the root of a new store. */
START_TEST(test_import_root)
{
    char src[128];
    make_tree(src);
    struct fx f;
    fx_open(&f);
    struct prog pr = {0};
    struct import_stats s;
    memset(&s, 0xAB, sizeof s);
    ck_assert_int_eq(import_tree(f.st, src, "/", on_progress, &pr, &s), 0);
    check_stats(&s);
    check_progress(&pr);
    /* root: empty, one, sub (the FIFO is under sub, skipped) */
    ck_assert_int_eq(count_entries(&f, FSMETA_ROOT_INO), 3);
    check_tree(&f, "/");
    fx_close(&f);
}
END_TEST

struct counter {
    int n;
};

static int count_cb(void *ctx, int64_t cookie, const char *name, const struct fsm_attr *a)
{
    (void)cookie, (void)name, (void)a;
    ((struct counter *)ctx)->n++;
    return 0;
}

static int count_entries(struct fx *f, uint64_t dir)
{
    struct counter c = {0};
    ck_assert_int_eq(fsmeta_readdir(f->st->meta, dir, 0, count_cb, &c), 0);
    return c.n;
}

/* Under a DEST of two levels, made as needed; without a callback. Again
** into the same DEST: EEXIST, and the store is as it was. */
START_TEST(test_import_dest)
{
    char src[128];
    make_tree(src);
    struct fx f;
    fx_open(&f);
    struct import_stats s;
    ck_assert_int_eq(import_tree(f.st, src, "/runs/r1/", NULL, NULL, &s), 0);
    check_stats(&s);
    ck_assert_int_eq(count_entries(&f, FSMETA_ROOT_INO), 1); /* runs */
    uint64_t ino;
    ck_assert_int_eq(lookup_path(&f, "/runs/r1", &ino), 0);
    ck_assert_int_eq(count_entries(&f, ino), 3);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino, &a), 0);
    ck_assert_msg(S_ISDIR(a.mode), "DEST made as mode %o", a.mode);
    check_tree(&f, "/runs/r1");

    struct fsm_stats before, after;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &before), 0);
    struct prog pr = {0};
    int rc = import_tree(f.st, src, "/runs/r1", on_progress, &pr, &s);
    ck_assert_int_eq(rc, -EEXIST);
    ck_assert_uint_eq(s.files + s.dirs + s.symlinks, 0);
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &after), 0);
    ck_assert_int_eq(memcmp(&before, &after, sizeof before), 0);
    ck_assert_int_eq(count_entries(&f, ino), 3);
    check_tree(&f, "/runs/r1");
    fx_close(&f);
}
END_TEST

/* A DEST that is a file: ENOTDIR, nothing imported or changed. */
START_TEST(test_import_dest_is_file)
{
    char src[128];
    make_tree(src);
    struct fx f;
    fx_open(&f);
    struct import_stats s;
    ck_assert_int_eq(import_tree(f.st, src, "/", NULL, NULL, &s), 0);

    uint64_t ino;
    ck_assert_int_eq(lookup_path(&f, "/one", &ino), 0);
    struct fsm_attr a0, a1;
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino, &a0), 0);
    struct fsm_stats before, after;
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &before), 0);
    struct prog pr = {0};
    ck_assert_int_eq(import_tree(f.st, src, "/one", on_progress, &pr, &s), -ENOTDIR);
    ck_assert_uint_eq(s.files + s.dirs + s.symlinks + s.bytes, 0);
    ck_assert_uint_eq(pr.last_done, 0); /* no claim of a finished import */
    /* Nor a directory to be made inside the file. */
    ck_assert_int_eq(import_tree(f.st, src, "/one/sub", on_progress, &pr, &s), -ENOTDIR);
    ck_assert_uint_eq(s.files + s.dirs + s.symlinks + s.bytes, 0);
    ck_assert_uint_eq(pr.last_done, 0);
    ck_assert_int_eq(fsmeta_stats(f.st->meta, &after), 0);
    ck_assert_int_eq(memcmp(&before, &after, sizeof before), 0);
    ck_assert_int_eq(fsmeta_getattr(f.st->meta, ino, &a1), 0);
    ck_assert_int_eq(memcmp(&a0, &a1, sizeof a0), 0);
    ck_assert_int_eq(count_entries(&f, FSMETA_ROOT_INO), 3);
    check_tree(&f, "/");
    fx_close(&f);
}
END_TEST

/* An empty source directory: nothing imported, and the callback still
** hears that the import is done (0 of 0). */
START_TEST(test_import_empty_tree)
{
    char src[128];
    ut_newdir(src);
    struct fx f;
    fx_open(&f);
    struct prog pr = {0};
    struct import_stats s;
    memset(&s, 0xAB, sizeof s);
    ck_assert_int_eq(import_tree(f.st, src, "/e", on_progress, &pr, &s), 0);
    ck_assert_uint_eq(s.files + s.dirs + s.symlinks + s.bytes, 0);
    ck_assert_uint_ge(pr.calls, 1);
    ck_assert_uint_eq(pr.last_done, 0);
    ck_assert_uint_eq(pr.last_total, 0);
    uint64_t ino;
    ck_assert_int_eq(lookup_path(&f, "/e", &ino), 0); /* DEST is made */
    ck_assert_int_eq(count_entries(&f, ino), 0);
    fx_close(&f);
}
END_TEST

/* A source that is not a directory: ENOTDIR, no store change. */
START_TEST(test_import_src_not_dir)
{
    char src[128], p[256];
    ut_newdir(src);
    snprintf(p, sizeof p, "%s/plain", src);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    struct fx f;
    fx_open(&f);
    struct import_stats s;
    ck_assert_int_eq(import_tree(f.st, p, "/d", NULL, NULL, &s), -ENOTDIR);
    snprintf(p, sizeof p, "%s/missing", src);
    ck_assert_int_eq(import_tree(f.st, p, "/d", NULL, NULL, &s), -ENOENT);
    ck_assert_int_eq(count_entries(&f, FSMETA_ROOT_INO), 0);
    fx_close(&f);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {test_import_root, test_import_dest,
                                  test_import_dest_is_file, test_import_empty_tree,
                                  test_import_src_not_dir, NULL};
    return ut_main("import",
                   (const struct ut_tcase[]){{.name = "core", .timeout = 120, .tests = tests},
                                             {0}});
}
