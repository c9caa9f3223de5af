/*
** unit_fsmeta.c: tests of the metadata store (fsmeta/fsmeta.h) on a
** temporary SQLite database.
**
** A new database has the root directory as inode 1; inodes are made, linked,
** looked up, unlinked, relinked and moved with the documented errors; inode
** numbers grow and are never reused; readdir cookies increase and resume a
** paged listing exactly; xattrs honour CREATE/REPLACE, -ERANGE and the
** cap-0 length query; transactions roll back, commit durably, nest, and an
** inner rollback aborts the outer commit; set_content assigns chunk ids,
** returns extents sorted, counts references and drops unused chunks, and
** keeps inode.stored equal to the sum of stored lengths; purge_orphans;
** readlink; readonly opens.
*/
#include "../fsmeta/fsmeta.h"
#include "../src/common.h"
#include "unit_util.h"

#include <sqlite3.h>
#include <sys/stat.h>

static void db_path(char *out, const char *dir)
{
    snprintf(out, 160, "%s/meta.db", dir);
}

/* A fresh database in a new temp dir; path gets its file name. */
static fsmeta *new_db(char *path)
{
    char dir[128];
    ut_newdir(dir);
    db_path(path, dir);
    fsmeta *m = NULL;
    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    ck_assert_ptr_nonnull(m);
    return m;
}

static uint64_t mk(fsmeta *m, uint32_t mode, uint32_t nlink)
{
    struct fsm_attr a = {.mode = mode, .uid = 1000, .gid = 100, .nlink = nlink,
                         .atime = 1, .mtime = 2, .ctime = 3};
    ck_assert_int_eq(fsmeta_mkinode(m, &a, NULL, 0), 0);
    ck_assert_uint_gt(a.ino, FSMETA_ROOT_INO);
    return a.ino;
}

static uint64_t mkfile(fsmeta *m) { return mk(m, S_IFREG | 0644, 1); }

static uint64_t lookup(fsmeta *m, uint64_t parent, const char *name)
{
    uint64_t ino = 0;
    int rc = fsmeta_lookup(m, parent, name, &ino);
    return rc == 0 ? ino : (uint64_t)(int64_t)rc;
}

START_TEST(test_open_root)
{
    char dir[128], path[160];
    ut_newdir(dir);
    db_path(path, dir);
    fsmeta *m;
    ck_assert_int_eq(fsmeta_open(path, 0, 1234, 5678, &m), 0);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(m, FSMETA_ROOT_INO, &a), 0);
    ck_assert_uint_eq(a.ino, FSMETA_ROOT_INO);
    ck_assert(S_ISDIR(a.mode));
    ck_assert_uint_eq(a.uid, 1234);
    ck_assert_uint_eq(a.gid, 5678);
    ck_assert_uint_ge(a.nlink, 2);
    ck_assert_int_gt(a.mtime, 0);
    ck_assert_int_eq(fsmeta_has_children(m, FSMETA_ROOT_INO), 0);
    ck_assert_int_eq(fsmeta_getattr(m, 2, &a), -ENOENT);
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(m, &s), 0);
    ck_assert_uint_eq(s.dirs, 1);
    ck_assert_uint_eq(s.files, 0);
    ck_assert_uint_eq(s.chunks, 0);
    fsmeta_close(m);

    /* Reopening keeps the root as it was (no second root, same owner). */
    ck_assert_int_eq(fsmeta_open(path, 0, 1, 1, &m), 0);
    ck_assert_int_eq(fsmeta_getattr(m, FSMETA_ROOT_INO, &a), 0);
    ck_assert_uint_eq(a.uid, 1234);
    ck_assert_int_eq(fsmeta_stats(m, &s), 0);
    ck_assert_uint_eq(s.dirs, 1);
    ck_assert_int_eq(fsmeta_getattr(m, 2, &a), -ENOENT);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_mkinode_link_lookup)
{
    char path[160];
    fsmeta *m = new_db(path);
    struct fsm_attr a = {.mode = S_IFREG | 0640, .uid = 42, .gid = 43, .nlink = 1,
                         .size = 12345, .rdev = 0, .atime = 111, .mtime = 222, .ctime = 333};
    ck_assert_int_eq(fsmeta_mkinode(m, &a, NULL, 0), 0);
    uint64_t ino = a.ino;
    ck_assert_uint_gt(ino, FSMETA_ROOT_INO);
    struct fsm_attr b;
    ck_assert_int_eq(fsmeta_getattr(m, ino, &b), 0);
    ck_assert_uint_eq(b.ino, ino);
    ck_assert_uint_eq(b.mode, S_IFREG | 0640);
    ck_assert_uint_eq(b.uid, 42);
    ck_assert_uint_eq(b.gid, 43);
    ck_assert_uint_eq(b.nlink, 1);
    ck_assert_uint_eq(b.size, 12345);
    ck_assert_int_eq(b.atime, 111);
    ck_assert_int_eq(b.mtime, 222);
    ck_assert_int_eq(b.ctime, 333);
    ck_assert_uint_eq(b.stored, 0);

    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "a file", ino), 0);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "a file"), ino);
    ck_assert_int_eq(fsmeta_has_children(m, FSMETA_ROOT_INO), 1);

    /* Names are bytes: case, UTF-8 and prefixes are distinct. */
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "A file"), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "a fil"), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "missing"), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, 999, "a file"), -ENOENT);
    uint64_t ino2 = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "\xc3\xa9t\xc3\xa9", ino2), 0);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "\xc3\xa9t\xc3\xa9"), ino2);

    /* A taken name: -EEXIST, and the entry is unchanged. */
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "a file", ino2), -EEXIST);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "a file"), ino);
    /* The same name in another directory is fine; hard links are fine. */
    uint64_t d = mk(m, S_IFDIR | 0755, 2);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "dir", d), 0);
    ck_assert_int_eq(fsmeta_link(m, d, "a file", ino), 0);
    ck_assert_uint_eq(lookup(m, d, "a file"), ino);

    /* setattr writes every field; missing inode -> -ENOENT. */
    b.mode = S_IFREG | 0600;
    b.size = 7;
    b.nlink = 2;
    b.mtime = 999;
    b.uid = 4321;
    b.gid = 8765;
    b.atime = 555;
    b.ctime = 777;
    b.rdev = 0x0801;
    ck_assert_int_eq(fsmeta_setattr(m, &b), 0);
    struct fsm_attr c;
    ck_assert_int_eq(fsmeta_getattr(m, ino, &c), 0);
    ck_assert_uint_eq(c.mode, S_IFREG | 0600);
    ck_assert_uint_eq(c.size, 7);
    ck_assert_uint_eq(c.nlink, 2);
    ck_assert_int_eq(c.mtime, 999);
    ck_assert_uint_eq(c.uid, 4321);
    ck_assert_uint_eq(c.gid, 8765);
    ck_assert_int_eq(c.atime, 555);
    ck_assert_int_eq(c.ctime, 777);
    ck_assert_uint_eq(c.rdev, 0x0801);
    b.ino = 99999;
    ck_assert_int_eq(fsmeta_setattr(m, &b), -ENOENT);

    uint64_t par;
    char name[64];
    ck_assert_int_eq(fsmeta_name_of(m, ino2, &par, name, sizeof name), 0);
    ck_assert_uint_eq(par, FSMETA_ROOT_INO);
    ck_assert_str_eq(name, "\xc3\xa9t\xc3\xa9");
    ck_assert_int_eq(fsmeta_name_of(m, 99999, &par, name, sizeof name), -ENOENT);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_ino_never_reused)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t a = mkfile(m), b = mkfile(m);
    ck_assert_uint_gt(b, a);
    ck_assert_int_eq(fsmeta_xattr_set(m, b, "user.x", "v", 1, 0), 0);
    ck_assert_int_eq(fsmeta_rminode(m, b), 0); /* the highest one */
    struct fsm_attr at;
    ck_assert_int_eq(fsmeta_getattr(m, b, &at), -ENOENT);
    ck_assert_int_eq(fsmeta_xattr_get(m, b, "user.x", NULL, 0), -ENODATA);
    uint64_t c = mkfile(m);
    ck_assert_uint_gt(c, b);
    ck_assert_int_eq(fsmeta_rminode(m, c), 0);
    ck_assert_int_eq(fsmeta_rminode(m, a), 0);
    fsmeta_close(m);
    /* Also across a reopen. */
    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    uint64_t d = mkfile(m);
    ck_assert_uint_gt(d, c);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_unlink_relink_move)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t R = FSMETA_ROOT_INO;
    uint64_t i1 = mkfile(m), i2 = mkfile(m);
    uint64_t d = mk(m, S_IFDIR | 0755, 2);
    ck_assert_int_eq(fsmeta_link(m, R, "d", d), 0);

    /* unlink */
    ck_assert_int_eq(fsmeta_link(m, R, "a", i1), 0);
    ck_assert_int_eq(fsmeta_unlink(m, R, "a"), 0);
    ck_assert_int_eq((int64_t)lookup(m, R, "a"), -ENOENT);
    ck_assert_int_eq(fsmeta_unlink(m, R, "a"), -ENOENT);
    ck_assert_int_eq(fsmeta_unlink(m, d, "nothing"), -ENOENT);
    struct fsm_attr at;
    ck_assert_int_eq(fsmeta_getattr(m, i1, &at), 0); /* the inode stays */
    ck_assert_int_eq(fsmeta_link(m, R, "a", i1), 0); /* the name is free again */

    /* relink: point an existing entry at another inode */
    ck_assert_int_eq(fsmeta_link(m, R, "x", i1), 0);
    ck_assert_int_eq(fsmeta_relink(m, R, "x", i2), 0);
    ck_assert_uint_eq(lookup(m, R, "x"), i2);
    ck_assert_uint_eq(lookup(m, R, "a"), i1);
    ck_assert_int_eq(fsmeta_relink(m, R, "nope", i2), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, R, "nope"), -ENOENT);

    /* move to another directory and name */
    ck_assert_int_eq(fsmeta_move(m, R, "x", d, "y"), 0);
    ck_assert_int_eq((int64_t)lookup(m, R, "x"), -ENOENT);
    ck_assert_uint_eq(lookup(m, d, "y"), i2);
    /* rename within a directory */
    ck_assert_int_eq(fsmeta_move(m, d, "y", d, "z"), 0);
    ck_assert_int_eq((int64_t)lookup(m, d, "y"), -ENOENT);
    ck_assert_uint_eq(lookup(m, d, "z"), i2);
    /* destination taken: -EEXIST and nothing moves */
    ck_assert_int_eq(fsmeta_move(m, d, "z", R, "a"), -EEXIST);
    ck_assert_uint_eq(lookup(m, d, "z"), i2);
    ck_assert_uint_eq(lookup(m, R, "a"), i1);
    /* missing source */
    ck_assert_int_eq(fsmeta_move(m, R, "ghost", d, "g"), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, d, "g"), -ENOENT);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_has_children)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t d = mk(m, S_IFDIR | 0755, 2), f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "d", d), 0);
    ck_assert_int_eq(fsmeta_has_children(m, d), 0);
    ck_assert_int_eq(fsmeta_link(m, d, "f", f), 0);
    ck_assert_int_eq(fsmeta_has_children(m, d), 1);
    ck_assert_int_eq(fsmeta_has_children(m, f), 0);
    ck_assert_int_eq(fsmeta_move(m, d, "f", FSMETA_ROOT_INO, "f"), 0);
    ck_assert_int_eq(fsmeta_has_children(m, d), 0);
    ck_assert_int_eq(fsmeta_has_children(m, FSMETA_ROOT_INO), 1);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "f"), 0);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "d"), 0);
    ck_assert_int_eq(fsmeta_has_children(m, FSMETA_ROOT_INO), 0);
    fsmeta_close(m);
}
END_TEST

struct page {
    int n, limit;         /* accept at most limit entries (0: all) */
    int64_t cookie[256];
    char name[256][16];
    uint64_t ino[256];
    int calls;
};
static fsmeta *page_meta; /* the handle page_cb checks attributes against */

static int page_cb(void *ctx, int64_t cookie, const char *name, const struct fsm_attr *a)
{
    struct page *p = ctx;
    uint64_t ino = a->ino;
    struct fsm_attr want;
    ck_assert_int_eq(fsmeta_getattr(page_meta, ino, &want), 0);
    ck_assert_uint_eq(a->mode, want.mode); /* the listing carries the attributes */
    ck_assert_uint_eq(a->nlink, want.nlink);
    ck_assert_int_eq(a->mtime, want.mtime);
    p->calls++;
    if (p->limit && p->n >= p->limit) return 1;
    ck_assert_int_lt(p->n, 256);
    p->cookie[p->n] = cookie;
    snprintf(p->name[p->n], 16, "%s", name);
    p->ino[p->n] = ino;
    p->n++;
    return 0;
}

/* Group commit (fsmeta_group): transactions end as savepoints of one open
** SQLite transaction. This connection sees them at once, another only after
** fsmeta_flush or a durable transaction; a failed one rolls back alone;
** each takes its own sequence number; the pre-commit hook runs before every
** COMMIT and not before. */
static int hook_calls;
static int count_hook(void *ctx)
{
    (void)ctx;
    hook_calls++;
    return 0;
}

static uint64_t make_named(fsmeta *m, const char *name, int *rc)
{
    struct fsm_attr a = {.mode = S_IFREG | 0644, .nlink = 1};
    *rc = fsmeta_create(m, FSMETA_ROOT_INO, name, &a, NULL, 0);
    return a.ino;
}

START_TEST(test_group_commit)
{
    char path[160];
    fsmeta *m = new_db(path), *other = NULL;
    ck_assert_int_eq(fsmeta_open(path, 1, 0, 0, &other), 0);
    fsmeta_set_pre_commit(m, count_hook, NULL);
    ck_assert_int_eq(fsmeta_group(m, 1), 0);
    uint64_t seq0 = 0, seq1 = 0, seq2 = 0;
    ck_assert_int_eq(fsmeta_seq_last(m, &seq0), 0);
    int rc;
    uint64_t a = make_named(m, "a", &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(fsmeta_seq_last(m, &seq1), 0);
    uint64_t b = make_named(m, "b", &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(fsmeta_seq_last(m, &seq2), 0);
    ck_assert_uint_gt(seq1, seq0); /* each its own sequence number */
    ck_assert_uint_gt(seq2, seq1);
    make_named(m, "a", &rc); /* taken: fails and rolls back only itself */
    ck_assert_int_eq(rc, -EEXIST);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "a"), a); /* seen here at once */
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "b"), b);
    ck_assert_int_eq(hook_calls, 0); /* nothing committed yet */
    uint64_t ino;
    ck_assert_int_eq(fsmeta_lookup(other, FSMETA_ROOT_INO, "a", &ino), -ENOENT);
    ck_assert_int_eq(fsmeta_flush(m, INT64_MAX), 0); /* not old enough: stays open */
    ck_assert_int_eq(fsmeta_lookup(other, FSMETA_ROOT_INO, "a", &ino), -ENOENT);
    ck_assert_int_eq(fsmeta_flush(m, 0), 0);
    ck_assert_int_eq(hook_calls, 1);
    ck_assert_uint_eq(lookup(other, FSMETA_ROOT_INO, "a"), a);
    ck_assert_uint_eq(lookup(other, FSMETA_ROOT_INO, "b"), b);
    /* A durable transaction commits what is open with it. */
    uint64_t c = make_named(m, "c", &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(fsmeta_begin(m, 1), 0);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "b"), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0);
    ck_assert_int_eq(hook_calls, 2);
    ck_assert_uint_eq(lookup(other, FSMETA_ROOT_INO, "c"), c);
    ck_assert_int_eq(fsmeta_lookup(other, FSMETA_ROOT_INO, "b", &ino), -ENOENT);
    /* Turning it off commits what is open. */
    make_named(m, "d", &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(fsmeta_group(m, 0), 0);
    ck_assert_int_eq(hook_calls, 3);
    ck_assert_int_eq(fsmeta_lookup(other, FSMETA_ROOT_INO, "d", &ino), 0);
    fsmeta_close(other);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_readdir_pages)
{
    char path[160];
    fsmeta *m = new_db(path);
    page_meta = m;
    uint64_t d = mk(m, S_IFDIR | 0755, 2);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "d", d), 0);
    enum { N = 100 };
    uint64_t inos[N];
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%03d", (i * 37) % N); /* not in name order */
        inos[i] = mkfile(m);
        ck_assert_int_eq(fsmeta_link(m, d, name, inos[i]), 0);
    }
    ck_assert_int_eq(fsmeta_commit(m), 0);

    /* All at once. */
    struct page *all = ut_xmalloc(sizeof *all);
    memset(all, 0, sizeof *all);
    ck_assert_int_eq(fsmeta_readdir(m, d, 0, page_cb, all), 0);
    ck_assert_int_eq(all->n, N);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        ck_assert_int_ge(all->cookie[i], 1);
        if (i) ck_assert_int_gt(all->cookie[i], all->cookie[i - 1]);
        int k = atoi(all->name[i] + 1);
        ck_assert(k >= 0 && k < N);
        ck_assert_int_eq(seen[k]++, 0);
        ck_assert_uint_eq(lookup(m, d, all->name[i]), all->ino[i]);
    }

    /* In pages of 7: the entry a page refuses comes first in the next one. */
    struct page *pg = ut_xmalloc(sizeof *pg);
    int64_t after = 0;
    int total = 0, pages = 0;
    for (;;) {
        memset(pg, 0, sizeof *pg);
        pg->limit = 7;
        ck_assert_int_eq(fsmeta_readdir(m, d, after, page_cb, pg), 0);
        if (pg->n == 0) break;
        ck_assert_int_le(pg->n, 7);
        for (int i = 0; i < pg->n; i++) {
            ck_assert_int_lt(total, N);
            ck_assert_int_eq(pg->cookie[i], all->cookie[total]);
            ck_assert_str_eq(pg->name[i], all->name[total]);
            ck_assert_uint_eq(pg->ino[i], all->ino[total]);
            total++;
        }
        after = pg->cookie[pg->n - 1];
        pages++;
        ck_assert_int_lt(pages, 100);
    }
    ck_assert_int_eq(total, N);
    ck_assert_int_eq(pages, (N + 6) / 7);

    /* Resume from a cookie in the middle after changes: removed entries are
    ** gone, new entries come after the old ones. */
    int64_t mid = all->cookie[49];
    ck_assert_int_eq(fsmeta_unlink(m, d, all->name[50]), 0);
    ck_assert_int_eq(fsmeta_link(m, d, "new", inos[0]), 0);
    memset(pg, 0, sizeof *pg);
    ck_assert_int_eq(fsmeta_readdir(m, d, mid, page_cb, pg), 0);
    ck_assert_int_eq(pg->n, N - 50);
    ck_assert_str_eq(pg->name[0], all->name[51]);
    ck_assert_str_eq(pg->name[pg->n - 1], "new");
    ck_assert_int_gt(pg->cookie[pg->n - 1], all->cookie[N - 1]);
    /* Past the last cookie: nothing. */
    memset(pg, 0, sizeof *pg);
    ck_assert_int_eq(fsmeta_readdir(m, d, INT64_C(1) << 40, page_cb, pg), 0);
    ck_assert_int_eq(pg->n, 0);
    /* An empty directory, and a directory's entries do not leak into another. */
    uint64_t e = mk(m, S_IFDIR | 0755, 2);
    memset(pg, 0, sizeof *pg);
    ck_assert_int_eq(fsmeta_readdir(m, e, 0, page_cb, pg), 0);
    ck_assert_int_eq(pg->calls, 0);
    memset(pg, 0, sizeof *pg);
    ck_assert_int_eq(fsmeta_readdir(m, FSMETA_ROOT_INO, 0, page_cb, pg), 0);
    ck_assert_int_eq(pg->n, 1);
    ck_assert_str_eq(pg->name[0], "d");
    free(pg);
    free(all);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_xattr)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t f = mkfile(m);
    char buf[64];

    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(fsmeta_xattr_list(m, f, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.a", "hello", 5, 0), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", NULL, 0), 5); /* cap 0: length */
    memset(buf, 0, sizeof buf);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, 5), 5);
    ck_assert(memcmp(buf, "hello", 5) == 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, 4), -ERANGE);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, 1), -ERANGE);

    /* CREATE on an existing name; REPLACE on a missing one. */
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.a", "zz", 2, FSMETA_XATTR_CREATE), -EEXIST);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, sizeof buf), 5);
    ck_assert(memcmp(buf, "hello", 5) == 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.b", "zz", 2, FSMETA_XATTR_REPLACE), -ENODATA);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.b", buf, sizeof buf), -ENODATA);
    /* REPLACE on an existing one, plain set replaces too. */
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.a", "world!!", 7, FSMETA_XATTR_REPLACE), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, sizeof buf), 7);
    ck_assert(memcmp(buf, "world!!", 7) == 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.a", "x", 1, 0), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, sizeof buf), 1);
    /* CREATE on a new name; empty and binary values. */
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.b", "", 0, FSMETA_XATTR_CREATE), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.b", buf, sizeof buf), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.b", NULL, 0), 0);
    const char bin[6] = {0, 1, 0, (char)0xFF, 0, 2};
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "trusted.bin", bin, 6, 0), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "trusted.bin", buf, sizeof buf), 6);
    ck_assert(memcmp(buf, bin, 6) == 0);

    /* list: names NUL-terminated, cap 0 gives the length, small cap -ERANGE */
    int len = fsmeta_xattr_list(m, f, NULL, 0);
    const int want = (int)(sizeof "trusted.bin" + sizeof "user.a" + sizeof "user.b");
    ck_assert_int_eq(len, want);
    char list[128];
    memset(list, 'Q', sizeof list);
    ck_assert_int_eq(fsmeta_xattr_list(m, f, list, (size_t)len), len);
    int found = 0;
    for (int i = 0; i < len; i += (int)strlen(list + i) + 1) {
        found |= strcmp(list + i, "user.a") == 0 ? 1
                 : strcmp(list + i, "user.b") == 0 ? 2
                 : strcmp(list + i, "trusted.bin") == 0 ? 4 : 8;
    }
    ck_assert_int_eq(found, 7);
    ck_assert_int_eq(fsmeta_xattr_list(m, f, list, (size_t)len - 1), -ERANGE);

    /* Another inode's xattrs are separate. */
    uint64_t g = mkfile(m);
    ck_assert_int_eq(fsmeta_xattr_list(m, g, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, g, "user.a", NULL, 0), -ENODATA);

    /* remove */
    ck_assert_int_eq(fsmeta_xattr_remove(m, f, "user.a"), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(fsmeta_xattr_remove(m, f, "user.a"), -ENODATA);
    ck_assert_int_eq(fsmeta_xattr_remove(m, g, "user.b"), -ENODATA);
    ck_assert_int_eq(fsmeta_xattr_list(m, f, NULL, 0),
                     (int)(sizeof "trusted.bin" + sizeof "user.b"));
    /* After a remove, CREATE works again. */
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.a", "again", 5, FSMETA_XATTR_CREATE), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.a", NULL, 0), 5);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_txn_rollback)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t keep = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "keep", keep), 0);

    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "temp", f), 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, keep, "user.t", "1", 1, 0), 0);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "keep"), 0);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "temp"), f); /* visible inside */
    fsmeta_rollback(m);

    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(m, f, &a), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "temp"), -ENOENT);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "keep"), keep);
    ck_assert_int_eq(fsmeta_xattr_get(m, keep, "user.t", NULL, 0), -ENODATA);
    fsmeta_close(m);
    /* Still nothing after a reopen. */
    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    ck_assert_int_eq(fsmeta_getattr(m, f, &a), -ENOENT);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "keep"), keep);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_txn_commit_persists)
{
    char path[160];
    fsmeta *m = new_db(path);
    ck_assert_int_eq(fsmeta_begin(m, 1), 0);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "f", f), 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.k", "v", 1, 0), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0);
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t g = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "g", g), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0);
    ck_assert_int_eq(fsmeta_sync(m), 0);
    fsmeta_close(m);

    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "f"), f);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "g"), g);
    ck_assert_int_eq(fsmeta_xattr_get(m, f, "user.k", NULL, 0), 1);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_txn_nested)
{
    char path[160];
    fsmeta *m = new_db(path);
    fsmeta *ro;
    ck_assert_int_eq(fsmeta_open(path, 1, 0, 0, &ro), 0); /* a second connection */

    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "f", f), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0); /* inner: not yet committed */
    ck_assert_int_eq((int64_t)lookup(ro, FSMETA_ROOT_INO, "f"), -ENOENT);
    ck_assert_uint_eq(lookup(m, FSMETA_ROOT_INO, "f"), f);
    ck_assert_int_eq(fsmeta_commit(m), 0); /* outer */
    ck_assert_uint_eq(lookup(ro, FSMETA_ROOT_INO, "f"), f);

    /* An operation that runs its own transaction (rminode) inside ours. */
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t g = mkfile(m);
    ck_assert_int_eq(fsmeta_rminode(m, g), 0);
    uint64_t h = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "h", h), 0);
    fsmeta_rollback(m);
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "h"), -ENOENT);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(m, h, &a), -ENOENT);

    /* An inner rollback dooms the outer transaction. */
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t i = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "i", i), 0);
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    fsmeta_rollback(m);
    ck_assert_int_lt(fsmeta_commit(m), 0);
    ck_assert_int_eq((int64_t)lookup(m, FSMETA_ROOT_INO, "i"), -ENOENT);
    ck_assert_int_eq((int64_t)lookup(ro, FSMETA_ROOT_INO, "i"), -ENOENT);

    /* The handle is usable afterwards. */
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    uint64_t j = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "j", j), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0);
    ck_assert_uint_eq(lookup(ro, FSMETA_ROOT_INO, "j"), j);
    fsmeta_close(ro);
    fsmeta_close(m);
}
END_TEST

static struct fsm_chunk chunk(uint32_t pack, uint64_t off, uint32_t raw, uint32_t stored,
                              uint8_t codec, uint64_t hash)
{
    return (struct fsm_chunk){.id = 0, .pack = pack, .off = off, .raw_len = raw,
                              .stored_len = stored, .codec = codec, .hash = hash,
                              .chain = stored}; /* a keyframe reads itself */
}

static void check_stats(fsmeta *m, uint64_t chunks, uint64_t stored)
{
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(m, &s), 0);
    ck_assert_uint_eq(s.chunks, chunks);
    ck_assert_uint_eq(s.stored_bytes, stored);
}

static int count_chunk(void *ctx, const struct fsm_chunk *c)
{
    (void)c;
    (*(int *)ctx)++;
    return 0;
}

static int prune_one(void *ctx, const struct fsm_version *v)
{
    int rc = fsmeta_version_prune(ctx, v->id);
    ck_assert(rc == 0 || rc == -EBUSY);
    return 0;
}

/* Retention at its harshest: prune every version but the current ones. */
static void prune_history(fsmeta *m)
{
    ck_assert_int_eq(fsmeta_versions(m, 0, prune_one, m), 0);
}

/* One extent of content for file f made of chunk c (id 0: new). */
static void set_one(fsmeta *m, uint64_t f, struct fsm_chunk *c)
{
    struct fsm_extent e = {.file_off = 0, .c = *c};
    ck_assert_int_eq(fsmeta_set_content(m, f, &e, 1, c->raw_len, 5, 6, 0, NULL), 0);
    *c = e.c;
}

/* A delta holds its base alive after the base's version is pruned; when the
** delta dies the base dies with it; a delta against a dead chunk revives it.
** Files removed keep their content as history until it is pruned. */
START_TEST(test_delta_refs)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t f1 = mkfile(m), f2 = mkfile(m), f3 = mkfile(m);
    struct fsm_chunk a = chunk(1, 16, 100, 60, 2, 11);
    set_one(m, f1, &a);
    struct fsm_chunk b = chunk(1, 200, 100, 10, 2, 22);
    b.base = a.id, b.depth = 1, b.chain = 70;
    set_one(m, f2, &b);
    check_stats(m, 2, 70);
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(m, &s), 0);
    ck_assert_uint_eq(s.delta_chunks, 1);
    struct fsm_chunk got;
    ck_assert_int_eq(fsmeta_chunk_get(m, b.id, &got), 0);
    ck_assert_uint_eq(got.base, a.id);
    ck_assert_uint_eq(got.depth, 1);
    ck_assert_uint_eq(got.chain, 70);

    ck_assert_int_eq(fsmeta_rminode(m, f1), 0);
    ck_assert_int_eq(fsmeta_rminode(m, f2), 0);
    check_stats(m, 2, 70); /* both are history now */
    struct fsm_version v;
    ck_assert_int_eq(fsmeta_version_at(m, f1, FSM_SEQ_NOW, &v), 0);
    ck_assert_int_eq(fsmeta_version_prune(m, v.id), 0); /* a lives on as b's base */
    check_stats(m, 2, 70);
    prune_history(m); /* b dies, and a with it */
    check_stats(m, 0, 0);
    ck_assert_int_eq(fsmeta_chunk_get(m, a.id, &got), 0); /* rows stay: garbage */

    struct fsm_chunk c = chunk(1, 300, 100, 12, 2, 33);
    c.base = b.id, c.depth = 2, c.chain = 82;
    set_one(m, f3, &c);                          /* revives b, which revives a */
    check_stats(m, 3, 82);
    ck_assert_int_eq(fsmeta_chunk_get(m, 999, &got), -ENOENT);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_tensors_family)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t d1 = mk(m, S_IFDIR | 0755, 2), d2 = mk(m, S_IFDIR | 0755, 2);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "checkpoint-500", d1), 0);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "checkpoint-1000", d2), 0);
    uint64_t f1 = mkfile(m), f2 = mkfile(m);
    /* Tensors belong to a version: give each file an (empty) one. */
    ck_assert_int_eq(fsmeta_set_tensors(m, f1, "x", NULL, 0, NULL, 0), -ENOENT);
    ck_assert_int_eq(fsmeta_set_content(m, f1, NULL, 0, 0, 5, 6, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_set_content(m, f2, NULL, 0, 0, 5, 6, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_link(m, d1, "model.safetensors", f1), 0);
    ck_assert_int_eq(fsmeta_link(m, d2, "model.safetensors", f2), 0);
    char p[256];
    ck_assert_int_eq(fsmeta_path(m, f2, p, sizeof p), 0);
    ck_assert_str_eq(p, "/checkpoint-1000/model.safetensors");
    ck_assert_int_eq(fsmeta_path(m, FSMETA_ROOT_INO, p, sizeof p), 0);
    ck_assert_str_eq(p, "/");
    ck_assert_int_eq(fsmeta_path(m, f2, p, 10), -ENAMETOOLONG);

    struct fsm_tensor t[2] = {{.off = 100, .len = 64, .dtype = 7, .width = 2, .name = "w"},
                              {.off = 8, .len = 32, .dtype = 10, .width = 4, .name = "b"}};
    uint64_t got;
    ck_assert_int_eq(fsmeta_family_latest(m, "/checkpoint-#/model.safetensors", 0, &got),
                     -ENOENT);
    const char *fam = "/checkpoint-#/model.safetensors";
    ck_assert_int_eq(fsmeta_set_tensors(m, f1, fam, NULL, 0, t, 2), 0);
    ck_assert_int_eq(fsmeta_family_latest(m, fam, f2, &got), 0);
    ck_assert_uint_eq(got, f1);
    /* Itself excluded; a member without tensors is no base. */
    ck_assert_int_eq(fsmeta_set_tensors(m, f2, fam, NULL, 0, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_family_latest(m, fam, f1, &got), -ENOENT);
    /* The most recently modified member wins; an unlinked one never does. */
    uint64_t f3 = mkfile(m);
    ck_assert_int_eq(fsmeta_set_content(m, f3, NULL, 0, 0, 5, 6, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_set_tensors(m, f3, fam, NULL, 0, t, 1), 0);
    struct fsm_attr a3;
    ck_assert_int_eq(fsmeta_getattr(m, f3, &a3), 0);
    a3.mtime = 1000; /* mkfile's mtime is 2 */
    ck_assert_int_eq(fsmeta_setattr(m, &a3), 0);
    ck_assert_int_eq(fsmeta_family_latest(m, fam, f2, &got), 0);
    ck_assert_uint_eq(got, f3);
    a3.nlink = 0;
    ck_assert_int_eq(fsmeta_setattr(m, &a3), 0);
    ck_assert_int_eq(fsmeta_family_latest(m, fam, f2, &got), 0);
    ck_assert_uint_eq(got, f1);
    ck_assert_int_eq(fsmeta_family_latest(m, "/other/#", 0, &got), -ENOENT);
    struct fsm_tensor *v;
    size_t n;
    ck_assert_int_eq(fsmeta_tensors(m, f1, &v, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(v[0].off, 8); /* by offset */
    ck_assert_str_eq(v[0].name, "b");
    ck_assert_uint_eq(v[1].len, 64);
    ck_assert_uint_eq(v[1].dtype, 7);
    ck_assert_uint_eq(v[1].width, 2);
    free(v);
    /* New content of f1 drops its tensors until they are set again. */
    struct fsm_chunk c = chunk(1, 16, 10, 10, 0, 1);
    set_one(m, f1, &c);
    ck_assert_int_eq(fsmeta_tensors(m, f1, &v, &n), 0);
    ck_assert_uint_eq(n, 0);
    free(v);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_set_content)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t f = mkfile(m);
    /* Given out of order; one hash with the top bit set. */
    struct fsm_extent e[3] = {
        {.file_off = 200, .c = chunk(1, 5000, 100, 60, 1, 0xFEDCBA9876543210ull)},
        {.file_off = 0, .c = chunk(1, 16, 100, 100, 0, 0x1111)},
        {.file_off = 100, .c = chunk(2, 16, 100, 40, 1, 0x2222)},
    };
    ck_assert_int_eq(fsmeta_begin(m, 0), 0);
    ck_assert_int_eq(fsmeta_set_content(m, f, e, 3, 300, 777, 888, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_commit(m), 0);
    for (int i = 0; i < 3; i++) ck_assert_uint_ne(e[i].c.id, 0);
    ck_assert_uint_ne(e[0].c.id, e[1].c.id);
    ck_assert_uint_ne(e[1].c.id, e[2].c.id);
    ck_assert_uint_ne(e[0].c.id, e[2].c.id);

    struct fsm_extent *out = NULL;
    size_t n = 0;
    ck_assert_int_eq(fsmeta_extents(m, f, &out, &n), 0);
    ck_assert_uint_eq(n, 3);
    const int order[3] = {1, 2, 0};
    for (int i = 0; i < 3; i++) {
        const struct fsm_extent *w = &e[order[i]];
        ck_assert_uint_eq(out[i].file_off, w->file_off);
        ck_assert_uint_eq(out[i].c.id, w->c.id);
        ck_assert_uint_eq(out[i].c.pack, w->c.pack);
        ck_assert_uint_eq(out[i].c.off, w->c.off);
        ck_assert_uint_eq(out[i].c.raw_len, w->c.raw_len);
        ck_assert_uint_eq(out[i].c.stored_len, w->c.stored_len);
        ck_assert_uint_eq(out[i].c.codec, w->c.codec);
        ck_assert(out[i].c.hash == w->c.hash);
    }
    free(out);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(m, f, &a), 0);
    ck_assert_uint_eq(a.size, 300);
    ck_assert_int_eq(a.mtime, 777);
    ck_assert_int_eq(a.ctime, 888);
    ck_assert_uint_eq(a.stored, 200);
    check_stats(m, 3, 200);
    int cnt = 0;
    ck_assert_int_eq(fsmeta_chunks(m, count_chunk, &cnt), 0);
    ck_assert_int_eq(cnt, 3);

    /* Replace: keep one old chunk (by id), add one new, drop two. */
    struct fsm_extent e2[2] = {
        {.file_off = 0, .c = e[1].c},
        {.file_off = 100, .c = chunk(3, 16, 50, 30, 1, 0x3333)},
    };
    uint64_t kept = e[1].c.id;
    ck_assert_int_eq(fsmeta_set_content(m, f, e2, 2, 150, 1, 2, 0, NULL), 0);
    ck_assert_uint_eq(e2[0].c.id, kept);
    ck_assert_uint_ne(e2[1].c.id, 0);
    check_stats(m, 4, 230); /* the first version is history */
    prune_history(m);
    check_stats(m, 2, 130);
    ck_assert_int_eq(fsmeta_getattr(m, f, &a), 0);
    ck_assert_uint_eq(a.size, 150);
    ck_assert_uint_eq(a.stored, 130);
    ck_assert_int_eq(fsmeta_extents(m, f, &out, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(out[0].c.id, kept);
    ck_assert_uint_eq(out[1].file_off, 100);
    ck_assert_uint_eq(out[1].c.raw_len, 50);
    free(out);

    /* A chunk shared by two files lives while either uses it. */
    uint64_t g = mkfile(m);
    struct fsm_extent e3[1] = {{.file_off = 0, .c = e2[1].c}};
    ck_assert_int_eq(fsmeta_set_content(m, g, e3, 1, 50, 1, 2, 0, NULL), 0);
    check_stats(m, 2, 130);
    ck_assert_int_eq(fsmeta_set_content(m, f, NULL, 0, 0, 1, 2, 0, NULL), 0);
    prune_history(m);
    check_stats(m, 1, 30);
    ck_assert_int_eq(fsmeta_extents(m, f, &out, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(fsmeta_getattr(m, f, &a), 0);
    ck_assert_uint_eq(a.stored, 0);
    ck_assert_uint_eq(a.size, 0);
    ck_assert_int_eq(fsmeta_getattr(m, g, &a), 0);
    ck_assert_uint_eq(a.stored, 30);
    /* Setting the same content again changes nothing. */
    ck_assert_int_eq(fsmeta_set_content(m, g, e3, 1, 50, 1, 2, 0, NULL), 0);
    prune_history(m);
    check_stats(m, 1, 30);
    /* Removing the last user, then its history, frees the chunk. */
    ck_assert_int_eq(fsmeta_rminode(m, g), 0);
    check_stats(m, 1, 30);
    prune_history(m);
    check_stats(m, 0, 0);
    cnt = 0;
    ck_assert_int_eq(fsmeta_chunks(m, count_chunk, &cnt), 0);
    ck_assert_int_eq(cnt, 0);
    fsmeta_close(m);
}
END_TEST

struct seen {
    int n;
    struct fsm_hentry last;
    struct fsm_version ver[8];
};

static int see_entry(void *ctx, const struct fsm_hentry *e)
{
    struct seen *s = ctx;
    s->n++;
    s->last = *e;
    return 0;
}

static int see_version(void *ctx, const struct fsm_version *v)
{
    struct seen *s = ctx;
    ck_assert_int_lt(s->n, 8);
    s->ver[s->n++] = *v;
    return 0;
}

static int entries_at(fsmeta *m, uint64_t seq, const char *name, struct seen *s)
{
    *s = (struct seen){0};
    ck_assert_int_eq(fsmeta_hist_at(m, seq, FSMETA_ROOT_INO, name, 0, see_entry, s), 0);
    return s->n;
}

/* Versions and directory history: what the tree was at each sequence
** number, provisional versions replaced, pruning refused for live content. */
START_TEST(test_history)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t s0, s1, s2, s3, s4;
    ck_assert_int_eq(fsmeta_seq_last(m, &s0), 0);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "a", f), 0);
    struct fsm_chunk c1 = chunk(1, 16, 10, 10, 0, 1), c2 = chunk(1, 60, 10, 10, 0, 2);
    set_one(m, f, &c1);
    ck_assert_int_eq(fsmeta_seq_last(m, &s1), 0);
    ck_assert_uint_gt(s1, s0);
    struct fsm_extent e = {.file_off = 0, .c = c2};
    ck_assert_int_eq(fsmeta_set_content(m, f, &e, 1, 10, 7, 7, 1, NULL), 0); /* fsync */
    ck_assert_int_eq(fsmeta_keep_current(m, f), 0);                     /* closed */
    ck_assert_int_eq(fsmeta_seq_last(m, &s2), 0);
    ck_assert_int_eq(fsmeta_set_content(m, f, &e, 1, 20, 8, 8, 1, NULL), 0); /* fsync */
    ck_assert_int_eq(fsmeta_set_content(m, f, &e, 1, 30, 9, 9, 0, NULL), 0); /* replaces it */
    ck_assert_int_eq(fsmeta_move(m, FSMETA_ROOT_INO, "a", FSMETA_ROOT_INO, "b"), 0);
    ck_assert_int_eq(fsmeta_seq_last(m, &s3), 0);
    ck_assert_int_eq(fsmeta_unlink(m, FSMETA_ROOT_INO, "b"), 0);
    ck_assert_int_eq(fsmeta_seq_last(m, &s4), 0);
    ck_assert_uint_gt(s4, s3);

    struct seen s;
    ck_assert_int_eq(entries_at(m, s0, NULL, &s), 0);
    ck_assert_int_eq(entries_at(m, s1, "a", &s), 1);
    ck_assert_uint_eq(s.last.ino, f);
    ck_assert(S_ISREG(s.last.mode));
    ck_assert_int_eq(entries_at(m, s1, "b", &s), 0);
    ck_assert_int_eq(entries_at(m, s3, NULL, &s), 1);
    ck_assert_str_eq(s.last.name, "b");
    ck_assert_int_eq(entries_at(m, s4, NULL, &s), 0);
    s = (struct seen){0};
    ck_assert_int_eq(fsmeta_hist_all(m, FSMETA_ROOT_INO, "b", see_entry, &s), 0);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.last.born, s3);
    ck_assert_uint_eq(s.last.died, s4);

    struct fsm_version v;
    ck_assert_int_eq(fsmeta_version_at(m, f, s1, &v), 0);
    ck_assert_uint_eq(v.size, 10);
    ck_assert_int_eq(fsmeta_version_at(m, f, s2, &v), 0);
    ck_assert_int_eq(v.mtime, 7);
    ck_assert_int_eq(fsmeta_version_at(m, f, s0, &v), -ENOENT);
    s = (struct seen){0};
    ck_assert_int_eq(fsmeta_versions(m, f, see_version, &s), 0);
    ck_assert_int_eq(s.n, 3); /* the provisional size-20 version is gone */
    ck_assert_uint_eq(s.ver[1].size, 10);
    ck_assert_uint_eq(s.ver[2].size, 30);
    ck_assert_int_eq(s.ver[2].state, FSM_VER_KEPT);
    ck_assert_int_gt(s.ver[2].time, 0);

    /* The current version of a live file cannot be pruned. */
    uint64_t g = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "g", g), 0);
    set_one(m, g, &c1);
    ck_assert_int_eq(fsmeta_version_at(m, g, FSM_SEQ_NOW, &v), 0);
    ck_assert_int_eq(fsmeta_version_prune(m, v.id), -EBUSY);
    ck_assert_int_eq(fsmeta_version_prune(m, s.ver[0].id), 0);
    ck_assert_int_eq(fsmeta_version_get(m, s.ver[0].id, &v), 0);
    ck_assert_int_eq(v.state, FSM_VER_PRUNED);
    fsmeta_close(m);
}
END_TEST

static void count_problem(void *ctx, const char *what)
{
    (void)what;
    (*(int *)ctx)++;
}

static int collect_version(void *ctx, const struct fsm_version *v)
{
    uint64_t *ids = ctx;
    ids[++ids[0]] = v->id;
    return 0;
}

/* A lossy re-encoding replaces a version's block, and the next version's
** delta is rebased onto the new block, whose id is larger than its own:
** fsck counts references right (the base of a base stays alive), history
** pruned and garbage collected keeps every block the current version
** needs, and a rebase of a chunk that died meanwhile changes nothing. */
START_TEST(test_rebase_refs)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "f", f), 0);
    struct fsm_chunk a = chunk(1, 16, 100, 60, 2, 11), e = chunk(1, 200, 100, 10, 2, 22),
                     x = chunk(1, 300, 100, 10, 2, 33), l = chunk(1, 400, 100, 5, 3, 44);
    set_one(m, f, &a);
    e.base = a.id, e.depth = 1, e.chain = 70;
    set_one(m, f, &e);
    x.base = e.id, x.depth = 2, x.chain = 80;
    set_one(m, f, &x);
    uint64_t ids[8] = {0};
    ck_assert_int_eq(fsmeta_versions(m, f, collect_version, ids), 0);
    ck_assert_uint_eq(ids[0], 3);
    uint64_t v1 = ids[2]; /* the middle version, holding e */
    struct fsm_extent le = {.file_off = 0, .c = l};
    le.c.base = a.id, le.c.depth = 1, le.c.chain = 65;
    ck_assert_int_eq(fsmeta_recode_commit(m, v1, &le, 1, 0.01), 0);
    ck_assert_uint_gt(le.c.id, x.id);
    struct fsm_chunk x2 = chunk(1, 500, 100, 8, 2, 33);
    x2.id = x.id, x2.base = le.c.id, x2.depth = 2, x2.chain = 73;
    uint64_t old = e.id;
    size_t moved;
    ck_assert_int_eq(fsmeta_rebase_commit(m, &x2, &old, 1, &moved), 0);
    ck_assert_uint_eq(moved, 1);
    ck_assert_int_eq(fsmeta_check(m, 0, NULL, NULL), 0);
    prune_history(m);
    uint64_t gone;
    ck_assert_int_eq(fsmeta_gc_chunks(m, INT64_MAX, &gone), 0);
    ck_assert_uint_eq(gone, 1); /* e, the replaced block */
    ck_assert_int_eq(fsmeta_check(m, 0, NULL, NULL), 0);
    struct fsm_chunk got;
    ck_assert_int_eq(fsmeta_chunk_get(m, a.id, &got), 0);
    ck_assert_int_eq(fsmeta_chunk_get(m, le.c.id, &got), 0);
    ck_assert_int_eq(fsmeta_chunk_get(m, x.id, &got), 0);
    ck_assert_uint_eq(got.base, le.c.id);
    ck_assert_uint_eq(got.pack, 1);
    ck_assert_uint_eq(got.off, 500);
    /* Rebasing again from a base it no longer has: nothing happens. */
    struct fsm_chunk x3 = x2;
    x3.off = 600, x3.base = a.id;
    ck_assert_int_eq(fsmeta_rebase_commit(m, &x3, &old, 1, &moved), 0);
    ck_assert_uint_eq(moved, 0);
    ck_assert_int_eq(fsmeta_chunk_get(m, x.id, &got), 0);
    ck_assert_uint_eq(got.off, 500);
    /* Rebasing a chunk that died (e, collected above): nothing happens, and
    ** it stays gone. */
    struct fsm_chunk e2 = e;
    e2.off = 700;
    uint64_t e_base = a.id;
    ck_assert_int_ne(fsmeta_chunk_get(m, e.id, &got), 0);
    ck_assert_int_eq(fsmeta_rebase_commit(m, &e2, &e_base, 1, &moved), 0);
    ck_assert_uint_eq(moved, 0);
    ck_assert_int_ne(fsmeta_chunk_get(m, e.id, &got), 0);
    ck_assert_int_eq(fsmeta_check(m, 0, NULL, NULL), 0);
    fsmeta_close(m);
}
END_TEST

/* fsck finds a wrong reference count and a wrong link count, and repairs both. */
START_TEST(test_check_repair)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "f", f), 0);
    struct fsm_chunk a = chunk(1, 16, 100, 60, 2, 11), b = chunk(1, 200, 100, 10, 2, 22);
    set_one(m, f, &a);
    b.base = a.id, b.depth = 1;
    set_one(m, f, &b);
    int n = 0;
    ck_assert_int_eq(fsmeta_check(m, 0, count_problem, &n), 0);
    ck_assert_int_eq(n, 0);
    fsmeta_close(m);

    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "UPDATE chunk SET refs=refs+3 WHERE base<>0;"
                                      "UPDATE inode SET nlink=5 WHERE ino<>1", 0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    ck_assert_int_eq(fsmeta_check(m, 0, count_problem, &n), 2);
    ck_assert_int_eq(fsmeta_check(m, 1, count_problem, &n), 2);
    ck_assert_int_eq(fsmeta_check(m, 0, count_problem, &n), 0);
    struct fsm_attr at;
    ck_assert_int_eq(fsmeta_getattr(m, f, &at), 0);
    ck_assert_uint_eq(at.nlink, 1);
    fsmeta_close(m);
}
END_TEST

static int count_file(void *ctx, uint64_t ino, uint64_t size, uint64_t stored)
{
    (void)ino; (void)size; (void)stored;
    (*(int *)ctx)++;
    return 0;
}

START_TEST(test_purge_orphans)
{
    char path[160];
    fsmeta *m = new_db(path);
    uint64_t live = mkfile(m), orphan = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "live", live), 0);
    struct fsm_extent el[1] = {{0, chunk(1, 16, 10, 10, 0, 1)}};
    struct fsm_extent eo[2] = {{0, chunk(1, 100, 10, 7, 0, 2)}, {10, chunk(1, 200, 10, 5, 0, 3)}};
    ck_assert_int_eq(fsmeta_set_content(m, live, el, 1, 10, 1, 1, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_set_content(m, orphan, eo, 2, 20, 1, 1, 0, NULL), 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, orphan, "user.o", "1", 1, 0), 0);
    check_stats(m, 3, 22);
    int files = 0;
    ck_assert_int_eq(fsmeta_files(m, count_file, &files), 0);
    ck_assert_int_eq(files, 2);

    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(m, orphan, &a), 0);
    a.nlink = 0; /* unlinked while open */
    ck_assert_int_eq(fsmeta_setattr(m, &a), 0);
    files = 0;
    ck_assert_int_eq(fsmeta_files(m, count_file, &files), 0);
    ck_assert_int_eq(files, 1);

    uint64_t purged = 99;
    ck_assert_int_eq(fsmeta_purge_orphans(m, &purged), 0);
    ck_assert_uint_eq(purged, 1);
    ck_assert_int_eq(fsmeta_getattr(m, orphan, &a), -ENOENT);
    ck_assert_int_eq(fsmeta_getattr(m, live, &a), 0);
    ck_assert_int_eq(fsmeta_getattr(m, FSMETA_ROOT_INO, &a), 0);
    ck_assert_int_eq(fsmeta_xattr_get(m, orphan, "user.o", NULL, 0), -ENODATA);
    check_stats(m, 3, 22); /* its content is history until pruned */
    prune_history(m);
    check_stats(m, 1, 10);
    struct fsm_extent *out;
    size_t n;
    ck_assert_int_eq(fsmeta_extents(m, live, &out, &n), 0);
    ck_assert_uint_eq(n, 1);
    free(out);
    ck_assert_int_eq(fsmeta_purge_orphans(m, &purged), 0);
    ck_assert_uint_eq(purged, 0);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_readlink)
{
    char path[160];
    fsmeta *m = new_db(path);
    const char target[] = "../some/target\x01path";
    size_t tlen = sizeof target - 1;
    struct fsm_attr a = {.mode = S_IFLNK | 0777, .nlink = 1, .size = tlen};
    ck_assert_int_eq(fsmeta_mkinode(m, &a, target, tlen), 0);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "ln", a.ino), 0);
    char buf[256];
    size_t len = 0;
    memset(buf, 'Z', sizeof buf);
    ck_assert_int_eq(fsmeta_readlink(m, a.ino, buf, sizeof buf, &len), 0);
    ck_assert_uint_eq(len, tlen);
    ck_assert(memcmp(buf, target, tlen) == 0);
    ck_assert_int_eq(fsmeta_readlink(m, a.ino, buf, tlen, &len), 0);
    ck_assert_int_eq(fsmeta_readlink(m, a.ino, buf, 3, &len), -ERANGE);
    /* Not a symlink; no such inode. */
    uint64_t f = mkfile(m);
    ck_assert_int_lt(fsmeta_readlink(m, f, buf, sizeof buf, &len), 0);
    ck_assert_int_lt(fsmeta_readlink(m, 99999, buf, sizeof buf, &len), 0);
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(m, &s), 0);
    ck_assert_uint_eq(s.symlinks, 1);
    ck_assert_uint_eq(s.files, 1);
    struct fsm_attr b;
    ck_assert_int_eq(fsmeta_getattr(m, a.ino, &b), 0);
    ck_assert(S_ISLNK(b.mode));
    ck_assert_uint_eq(b.size, tlen);
    fsmeta_close(m);
}
END_TEST

START_TEST(test_readonly)
{
    char dir[128], path[160];
    ut_newdir(dir);
    db_path(path, dir);
    fsmeta *m, *ro;
    /* Readonly does not create a database (quiet: the error is expected). */
    int lvl = ck_log_level;
    ck_log_level = -1;
    ck_assert_int_lt(fsmeta_open(path, 1, 0, 0, &ro), 0);
    ck_log_level = lvl;
    ck_assert_int_eq(access(path, F_OK), -1);

    ck_assert_int_eq(fsmeta_open(path, 0, 0, 0, &m), 0);
    uint64_t f = mkfile(m);
    ck_assert_int_eq(fsmeta_link(m, FSMETA_ROOT_INO, "f", f), 0);
    ck_assert_int_eq(fsmeta_xattr_set(m, f, "user.k", "vv", 2, 0), 0);
    struct fsm_extent e[1] = {{0, chunk(1, 16, 10, 10, 0, 5)}};
    ck_assert_int_eq(fsmeta_set_content(m, f, e, 1, 10, 1, 1, 0, NULL), 0);

    /* Beside a live read-write handle (a tool next to a mount). */
    ck_assert_int_eq(fsmeta_open(path, 1, 0, 0, &ro), 0);
    ck_assert_uint_eq(lookup(ro, FSMETA_ROOT_INO, "f"), f);
    fsmeta_close(ro);
    fsmeta_close(m);

    /* After the writer closed. */
    ck_assert_int_eq(fsmeta_open(path, 1, 0, 0, &ro), 0);
    struct fsm_attr a;
    ck_assert_int_eq(fsmeta_getattr(ro, FSMETA_ROOT_INO, &a), 0);
    ck_assert(S_ISDIR(a.mode));
    ck_assert_uint_eq(lookup(ro, FSMETA_ROOT_INO, "f"), f);
    ck_assert_int_eq(fsmeta_getattr(ro, f, &a), 0);
    ck_assert_uint_eq(a.size, 10);
    ck_assert_int_eq(fsmeta_xattr_get(ro, f, "user.k", NULL, 0), 2);
    struct fsm_extent *out;
    size_t n;
    ck_assert_int_eq(fsmeta_extents(ro, f, &out, &n), 0);
    ck_assert_uint_eq(n, 1);
    free(out);
    struct fsm_stats s;
    ck_assert_int_eq(fsmeta_stats(ro, &s), 0);
    ck_assert_uint_eq(s.files, 1);
    /* Writes are refused. */
    struct fsm_attr na = {.mode = S_IFREG | 0644, .nlink = 1};
    ck_assert_int_lt(fsmeta_mkinode(ro, &na, NULL, 0), 0);
    ck_assert_int_lt(fsmeta_link(ro, FSMETA_ROOT_INO, "g", f), 0);
    ck_assert_int_eq((int64_t)lookup(ro, FSMETA_ROOT_INO, "g"), -ENOENT);
    fsmeta_close(ro);
}
END_TEST

int main(void)
{
    const TTest *const fsmeta_tests[] = {
        test_open_root,
        test_mkinode_link_lookup,
        test_ino_never_reused,
        test_unlink_relink_move,
        test_has_children,
        test_readdir_pages,
        test_group_commit,
        test_xattr,
        test_txn_rollback,
        test_txn_commit_persists,
        test_txn_nested,
        test_set_content,
        test_delta_refs,
        test_tensors_family,
        test_purge_orphans,
        test_readlink,
        test_readonly,
        test_history,
        test_check_repair,
        test_rebase_refs,
        NULL,
    };
    return ut_main("fsmeta", (const struct ut_tcase[]){
        {.name = "fsmeta", .timeout = 60, .tests = fsmeta_tests},
        {0},
    });
}
