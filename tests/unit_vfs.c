/*
** unit_vfs.c: the filesystem core (src/vfs.h) against a real store in a temp
** directory, without FUSE: every operation is called through
** vfs_ops_of(ino)->op, as the adapter does.
**
** Names and attributes (mkdir, mknod, symlink, lookup, getattr, the link
** count of directories), content written through one handle and read back
** through another, an unlinked open file living until its last reference,
** rename (replace, NOREPLACE, EXCHANGE, type mismatches, two links of one
** inode), hard links, listings through a sink of our own (small buffers that
** force batches resumed from the cookie, and the references readdirplus
** takes), the read-only history view and its reserved name, setattr and
** access(2) with non-root callers, extended attributes (the canonical
** policy, unsupported namespaces), over-long names, and the recovery of a
** staging body whose inode is gone, setgid directories.
*/
#include "../src/bcache.h"
#include "../src/common.h"
#include "../src/hview.h"
#include "../src/policy.h"
#include "../src/store.h"
#include "../src/vfs.h"
#include "unit_util.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#define BS (64 * 1024)
#define ROOT FSMETA_ROOT_INO

struct fx {
    char dir[128];
    struct store *st;
    vfs *v;
};

static const struct cred root_cred = {0, 0, NULL, NULL};
static const struct cred user_cred = {1000, 1000, NULL, NULL};

static void fx_start(struct fx *f)
{
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = BS;
    o.threads = 2;
    o.cache_bytes = 1 << 20;
    o.reserve_bytes = 0;
    ck_assert_int_eq(store_open(f->dir, &o, &f->st), 0);
    ck_assert_int_eq(store_start(f->st), 0);
    ck_assert_int_eq(vfs_create(f->st, &(struct vfs_opts){.direct_writes = 1}, &f->v), 0);
}

static void fx_open(struct fx *f)
{
    ut_newdir(f->dir);
    fx_start(f);
}

static void fx_close(struct fx *f)
{
    vfs_commit_all(f->v);
    vfs_destroy(f->v);
    store_close(f->st);
    f->v = NULL;
    f->st = NULL;
}

static const struct vfs_ops *ops(uint64_t ino) { return vfs_ops_of(ino); }

/* The read op with its pieces gathered into buf, as a copying caller sees it. */
static int rd(vfs *v, uint64_t ino, struct vfs_file *fh, void *buf, size_t len, uint64_t off,
              size_t *got)
{
    struct store_iov r;
    int rc = ops(ino)->read(v, ino, fh, buf, len, off, &r);
    if (rc == 0) *got = store_iov_gather(&r, buf);
    return rc;
}

/* Make an inode (mknod, mkdir or symlink); returns its ino. The kernel
** reference mknod takes is given back. */
static uint64_t mk(struct fx *f, const struct cred *c, uint64_t parent, const char *name,
                   mode_t mode, const char *target)
{
    struct stat sb;
    int rc = ops(parent)->mknod(f->v, c, parent, name, mode, 0, target, &sb);
    ck_assert_msg(rc == 0, "mknod %s: %s", name, strerror(-rc));
    ck_assert_uint_eq(sb.st_mode, mode);
    ck_assert_uint_ne(sb.st_ino, 0);
    ops(sb.st_ino)->forget(f->v, sb.st_ino, 1);
    return sb.st_ino;
}

/* ino of name in parent, or the negative errno of its lookup; the
** reference a lookup takes is given back. */
static int64_t lookup(struct fx *f, uint64_t parent, const char *name, struct stat *out)
{
    struct stat sb;
    int rc = ops(parent)->lookup(f->v, parent, name, &sb);
    if (rc < 0) return rc;
    ops(sb.st_ino)->forget(f->v, sb.st_ino, 1);
    if (out) *out = sb;
    return (int64_t)sb.st_ino;
}

/* The same, keeping the reference: the history view knows only the inode
** numbers the kernel holds (hview.h). */
static int64_t lookup_keep(struct fx *f, uint64_t parent, const char *name, struct stat *out)
{
    struct stat sb;
    int rc = ops(parent)->lookup(f->v, parent, name, &sb);
    if (rc < 0) return rc;
    if (out) *out = sb;
    return (int64_t)sb.st_ino;
}

static struct stat attr(struct fx *f, uint64_t ino)
{
    struct stat sb;
    int rc = ops(ino)->getattr(f->v, ino, &sb);
    ck_assert_msg(rc == 0, "getattr %llu: %s", (unsigned long long)ino, strerror(-rc));
    return sb;
}

static int attr_rc(struct fx *f, uint64_t ino)
{
    struct stat sb;
    return ops(ino)->getattr(f->v, ino, &sb);
}

/* create, write buf, flush, release: the new file's ino (one kernel
** reference, from create, is kept unless forget is set). */
static uint64_t put_file(struct fx *f, const struct cred *c, uint64_t parent, const char *name,
                         const void *buf, size_t len, int forget)
{
    struct stat sb;
    struct vfs_open o;
    int rc = ops(parent)->create(f->v, c, parent, name, 0644, O_WRONLY | O_CREAT, &sb, &o);
    ck_assert_msg(rc == 0, "create %s: %s", name, strerror(-rc));
    ck_assert_ptr_nonnull(o.fh);
    uint64_t ino = sb.st_ino;
    /* In two pieces, the second crossing a block boundary. */
    size_t half = len / 3;
    int inval = -1;
    ck_assert_int_eq(ops(ino)->write(f->v, c, ino, o.fh, buf, half, 0, &inval), 0);
    ck_assert_int_eq(ops(ino)->write(f->v, c, ino, o.fh, (const uint8_t *)buf + half,
                                     len - half, half, &inval), 0);
    ck_assert_int_eq(ops(ino)->flush(f->v, o.fh), 0);
    ops(ino)->release(f->v, o.fh);
    if (forget) ops(ino)->forget(f->v, ino, 1);
    return ino;
}

/* A committed file of n random bytes (seed) in the root, the kernel's
** reference given back: its contents (the caller frees them), *ino set. */
static uint8_t *put_random(struct fx *f, const char *name, size_t n, uint64_t seed,
                           uint64_t *ino)
{
    uint8_t *ref = ut_xmalloc(n);
    ut_fill_random(ref, n, seed);
    *ino = put_file(f, &user_cred, ROOT, name, ref, n, 1);
    return ref;
}

/* Read ino whole through a new read-only handle; check it is ref[0..len). */
static void check_file(struct fx *f, uint64_t ino, const uint8_t *ref, size_t len)
{
    struct vfs_open o;
    ck_assert_int_eq(ops(ino)->open(f->v, ino, O_RDONLY, &o), 0);
    uint8_t *buf = ut_xmalloc(len + 100);
    size_t got = 0;
    ck_assert_int_eq(rd(f->v, ino, o.fh, buf, len + 100, 0, &got), 0);
    ck_assert_uint_eq(got, len);
    size_t d = ut_first_diff(buf, ref, len);
    ck_assert_msg(d == len, "ino %llu: byte %zu of %zu differs", (unsigned long long)ino, d, len);
    /* A piece in the middle. */
    if (len > 1000) {
        ck_assert_int_eq(rd(f->v, ino, o.fh, buf, 777, len / 2, &got), 0);
        ck_assert_uint_eq(got, 777);
        ck_assert_int_eq(memcmp(buf, ref + len / 2, 777), 0);
    }
    ck_assert_int_eq(ops(ino)->flush(f->v, o.fh), 0);
    ops(ino)->release(f->v, o.fh);
    free(buf);
}

/* ---- a directory sink ---------------------------------------------- */

struct dent {
    char name[NAME_MAX + 1];
    uint64_t ino;
    mode_t mode;
    off_t size;
    off_t cookie;
};

struct sink {
    size_t cap, used; /* bytes of the pretend buffer */
    int refuse;       /* add() calls refused (did not fit) */
    struct dent *v;   /* this batch */
    size_t n, vcap;
};

/* What an entry takes, as fuse_add_direntry counts it (24-byte header,
** name, aligned to 8); a plus entry carries attributes too. */
static size_t ent_size(const char *name, int plus)
{
    return ((plus ? 152 : 24) + strlen(name) + 7) & ~(size_t)7;
}

static int sink_plus;

static size_t s_room(void *ctx)
{
    struct sink *s = ctx;
    return s->cap - s->used;
}

static size_t s_need(void *ctx, const char *name) { return ent_size(name, sink_plus); }

static int s_add(void *ctx, const char *name, const struct stat *sb, off_t cookie)
{
    struct sink *s = ctx;
    size_t need = ent_size(name, sink_plus);
    if (need > s->cap - s->used) {
        s->refuse++;
        return 1;
    }
    if (s->n == s->vcap) {
        s->vcap = s->vcap ? 2 * s->vcap : 16;
        s->v = realloc(s->v, s->vcap * sizeof *s->v);
        ck_assert_ptr_nonnull(s->v);
    }
    struct dent *d = &s->v[s->n++];
    ck_assert_uint_le(strlen(name), NAME_MAX);
    strcpy(d->name, name);
    d->ino = sb->st_ino;
    d->mode = sb->st_mode;
    d->size = sb->st_size;
    d->cookie = cookie;
    s->used += need;
    return 0;
}

/* The whole listing of dir, read in batches of room bytes each resumed from
** the last cookie; *batches gets how many calls returned entries. */
static struct dent *list_dir(struct fx *f, uint64_t dir, size_t room, int plus, size_t *n,
                             int *batches)
{
    struct sink s = {.cap = room};
    struct vfs_dirsink ds = {&s, plus, s_room, s_need, s_add};
    sink_plus = plus;
    struct dent *all = NULL;
    size_t nall = 0;
    off_t off = 0;
    int calls = 0;
    ck_assert_int_eq(ops(dir)->opendir(f->v, dir), 0);
    for (;;) {
        s.used = 0, s.n = 0;
        int rc = ops(dir)->readdir(f->v, dir, off, &ds);
        ck_assert_msg(rc == 0, "readdir: %s", strerror(-rc));
        if (s.n == 0) break;
        ck_assert_int_lt(++calls, 100000);
        all = realloc(all, (nall + s.n) * sizeof *all);
        ck_assert_ptr_nonnull(all);
        for (size_t i = 0; i < s.n; i++) {
            /* cookies grow: the next batch resumes after this one */
            ck_assert_msg(s.v[i].cookie > off, "entry %s: cookie %lld not after %lld",
                          s.v[i].name, (long long)s.v[i].cookie, (long long)off);
            off = s.v[i].cookie;
            all[nall++] = s.v[i];
        }
    }
    free(s.v);
    *n = nall;
    if (batches) *batches = calls;
    return all;
}

static const struct dent *find(const struct dent *v, size_t n, const char *name)
{
    const struct dent *hit = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0) {
            ck_assert_msg(hit == NULL, "%s listed twice", name);
            hit = &v[i];
        }
    return hit;
}

/* ---- tests ----------------------------------------------------------- */

START_TEST(test_make_and_lookup)
{
    struct fx f;
    fx_open(&f);
    struct stat r0 = attr(&f, ROOT);
    ck_assert(S_ISDIR(r0.st_mode));

    struct stat sb;
    ck_assert_int_eq(ops(ROOT)->mknod(f.v, &user_cred, ROOT, "d", S_IFDIR | 0750, 0, NULL, &sb),
                     0);
    uint64_t d = sb.st_ino;
    ck_assert_uint_eq(sb.st_mode, S_IFDIR | 0750);
    ck_assert_uint_eq(sb.st_uid, 1000);
    ck_assert_uint_eq(sb.st_gid, 1000);
    ck_assert_uint_eq(sb.st_nlink, 2);
    /* The parent counts the new subdirectory's "..". */
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 1);

    struct cred other = {1234, 4321, NULL, NULL};
    uint64_t reg = mk(&f, &other, d, "f", S_IFREG | 0604, NULL);
    uint64_t sl = mk(&f, &user_cred, d, "l", S_IFLNK | 0777, "some/target/path");
    uint64_t sub = mk(&f, &user_cred, d, "sub", S_IFDIR | 0700, NULL);
    ck_assert_uint_eq(attr(&f, d).st_nlink, 3);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 1);

    /* lookup finds what mknod made, with the caller's ownership. */
    ck_assert_int_eq(lookup(&f, ROOT, "d", &sb), (int64_t)d);
    ck_assert_int_eq(lookup(&f, d, "f", &sb), (int64_t)reg);
    ck_assert_uint_eq(sb.st_mode, S_IFREG | 0604);
    ck_assert_uint_eq(sb.st_uid, 1234);
    ck_assert_uint_eq(sb.st_gid, 4321);
    ck_assert_uint_eq(sb.st_nlink, 1);
    ck_assert_int_eq(sb.st_size, 0);
    ck_assert_int_eq(lookup(&f, d, "l", &sb), (int64_t)sl);
    ck_assert(S_ISLNK(sb.st_mode));
    ck_assert_int_eq(sb.st_size, (off_t)strlen("some/target/path"));
    char tgt[PATH_MAX + 1];
    ck_assert_int_eq(ops(sl)->readlink(f.v, sl, tgt, PATH_MAX), 0);
    ck_assert_str_eq(tgt, "some/target/path");
    ck_assert_int_eq(lookup(&f, d, "sub", NULL), (int64_t)sub);
    ck_assert_int_eq(lookup(&f, d, "nope", NULL), -ENOENT);
    /* getattr agrees with lookup */
    sb = attr(&f, reg);
    ck_assert_uint_eq(sb.st_ino, reg);
    ck_assert_uint_eq(sb.st_uid, 1234);

    /* A name taken: EEXIST, whatever the type. */
    ck_assert_int_eq(ops(d)->mknod(f.v, &user_cred, d, "f", S_IFDIR | 0755, 0, NULL, &sb),
                     -EEXIST);
    ck_assert_int_eq(ops(d)->mknod(f.v, &user_cred, d, "sub", S_IFREG | 0644, 0, NULL, &sb),
                     -EEXIST);
    /* mknod under a file: ENOTDIR */
    ck_assert_int_lt(ops(reg)->mknod(f.v, &user_cred, reg, "x", S_IFREG | 0644, 0, NULL, &sb),
                     0);

    /* rmdir/unlink type rules, then nlink of the parent drops back. */
    ck_assert_int_eq(ops(d)->remove(f.v, d, "f", 1), -ENOTDIR);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "sub", 0), -EISDIR);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "d", 1), -ENOTEMPTY);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "sub", 1), 0);
    ck_assert_uint_eq(attr(&f, d).st_nlink, 2);
    ck_assert_int_eq(lookup(&f, d, "sub", NULL), -ENOENT);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "f", 0), 0);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "l", 0), 0);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "l", 0), -ENOENT);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "d", 1), 0);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink);
    ck_assert_int_eq(lookup(&f, ROOT, "d", NULL), -ENOENT);
    fx_close(&f);
}
END_TEST

START_TEST(test_write_read_back)
{
    struct fx f;
    fx_open(&f);
    const size_t N = 3 * BS + 12345;
    uint64_t ino;
    uint8_t *ref = put_random(&f, "data.bin", N, 7, &ino);
    struct stat sb = attr(&f, ino);
    ck_assert_int_eq(sb.st_size, (off_t)N);
    ck_assert_uint_eq(sb.st_mode, S_IFREG | 0644);
    check_file(&f, ino, ref, N);

    /* Rewrite a range through a read-write handle; read back beside it. */
    struct vfs_open o;
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_RDWR, &o), 0);
    uint8_t patch[5000];
    ut_fill_random(patch, sizeof patch, 8);
    int inval;
    ck_assert_int_eq(ops(ino)->write(f.v, &user_cred, ino, o.fh, patch, sizeof patch, BS - 100,
                                     &inval), 0);
    memcpy(ref + BS - 100, patch, sizeof patch);
    uint8_t buf[sizeof patch];
    size_t got;
    ck_assert_int_eq(rd(f.v, ino, o.fh, buf, sizeof buf, BS - 100, &got), 0);
    ck_assert_uint_eq(got, sizeof buf);
    ck_assert_int_eq(memcmp(buf, patch, sizeof buf), 0);
    ck_assert_int_eq(ops(ino)->flush(f.v, o.fh), 0);
    ops(ino)->release(f.v, o.fh);
    check_file(&f, ino, ref, N);

    /* O_TRUNC empties it. */
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_WRONLY | O_TRUNC, &o), 0);
    ck_assert_int_eq(ops(ino)->flush(f.v, o.fh), 0);
    ops(ino)->release(f.v, o.fh);
    ck_assert_int_eq(attr(&f, ino).st_size, 0);

    /* Content survives a new vfs on a reopened store. */
    uint64_t ino2 = put_file(&f, &user_cred, ROOT, "again.bin", ref, N, 1);
    fx_close(&f);
    fx_start(&f);
    ck_assert_int_eq(lookup(&f, ROOT, "again.bin", &sb), (int64_t)ino2);
    ck_assert_int_eq(sb.st_size, (off_t)N);
    check_file(&f, ino2, ref, N);
    /* open of a directory: EISDIR */
    ck_assert_int_eq(ops(ROOT)->open(f.v, ROOT, O_RDONLY, &o), -EISDIR);
    free(ref);
    fx_close(&f);
}
END_TEST

/* A sequential reader's blocks leave the cache behind it: the kernel's
** page cache holds them, and their buffers serve the next blocks. */
START_TEST(test_read_drops_behind)
{
    struct fx f;
    fx_open(&f);
    const size_t N = 12 * BS;
    uint64_t ino;
    uint8_t *ref = put_random(&f, "seq.bin", N, 9, &ino);
    uint8_t *buf = ut_xmalloc(BS);
    fx_close(&f);
    fx_start(&f); /* an empty cache, which holds 16 blocks */
    struct vfs_open o;
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_RDONLY, &o), 0);
    size_t most = 0, got;
    for (size_t off = 0; off < N; off += BS) {
        ck_assert_int_eq(rd(f.v, ino, o.fh, buf, BS, off, &got), 0);
        ck_assert_uint_eq(got, BS);
        ck_assert_int_eq(memcmp(buf, ref + off, BS), 0);
        most = CK_MAX(most, bcache_used(f.st->cache));
    }
    /* The block read, one behind, STORE_AHEAD_BLOCKS ahead, and one a late
    ** decode-ahead job may have put back until the next read: not all 12. */
    ck_assert_uint_le(most, (3 + STORE_AHEAD_BLOCKS) * BS);
    ck_assert_uint_gt(most, 0);
    ops(ino)->release(f.v, o.fh);
    free(ref);
    free(buf);
    fx_close(&f);
}
END_TEST

/* Reads of a committed file come back as pieces of the cached blocks
** themselves (no copy into the caller's buffer); one that would take more
** pieces than a reply holds is copied into it instead. */
START_TEST(test_read_pieces)
{
    struct fx f;
    fx_open(&f);
    const size_t N = 10 * BS + 100;
    uint64_t ino;
    uint8_t *ref = put_random(&f, "pieces.bin", N, 11, &ino);
    uint8_t *buf = ut_xmalloc(N);
    struct vfs_open o;
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_RDONLY, &o), 0);
    struct store_iov r;
    ck_assert_int_eq(ops(ino)->read(f.v, ino, o.fh, buf, BS, BS / 2, &r), 0);
    ck_assert_int_eq(r.n, 2); /* the ends of two blocks */
    for (int i = 0; i < r.n; i++) {
        ck_assert_ptr_nonnull(r.pin[i]);
        ck_assert((uint8_t *)r.v[i].iov_base < buf || (uint8_t *)r.v[i].iov_base >= buf + N);
    }
    ck_assert_int_eq(memcmp(r.v[0].iov_base, ref + BS / 2, BS / 2), 0);
    ck_assert_int_eq(memcmp(r.v[1].iov_base, ref + BS, BS / 2), 0);
    store_iov_release(&r);
    /* The last block, short: asked past the end. */
    ck_assert_int_eq(ops(ino)->read(f.v, ino, o.fh, buf, 2 * BS, 10 * BS, &r), 0);
    ck_assert_uint_eq(store_iov_len(&r), 100);
    ck_assert_int_eq(memcmp(r.v[0].iov_base, ref + 10 * BS, 100), 0);
    store_iov_release(&r);
    /* 11 blocks: more than STORE_IOV_MAX pieces, so copied whole into buf. */
    ck_assert_int_eq(ops(ino)->read(f.v, ino, o.fh, buf, N, 0, &r), 0);
    ck_assert_int_eq(r.n, 1);
    ck_assert_ptr_null(r.pin[0]);
    ck_assert_ptr_eq(r.v[0].iov_base, buf);
    ck_assert_uint_eq(r.v[0].iov_len, N);
    ck_assert_int_eq(memcmp(buf, ref, N), 0);
    store_iov_release(&r);
    ops(ino)->release(f.v, o.fh);
    free(ref);
    free(buf);
    fx_close(&f);
}
END_TEST

/* With reaps later (as the daemon runs), a forgotten unlinked inode waits
** for vfs_reap_pending; a full queue is deleted by the forget that fills
** it; turning reaps later off deletes what waits. */
START_TEST(test_reap_later)
{
    struct fx f;
    fx_open(&f);
    vfs_reap_later(f.v, 1);
    /* put_file keeps create's kernel reference; remove, then forget it. */
    uint64_t a = put_file(&f, &user_cred, ROOT, "a", "x", 1, 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "a", 0), 0);
    ops(a)->forget(f.v, a, 1);
    ck_assert_int_eq(attr_rc(&f, a), 0); /* waiting */
    vfs_reap_pending(f.v);
    ck_assert_int_eq(attr_rc(&f, a), -ENOENT);
    uint64_t ino[VFS_REAP_BATCH];
    for (int i = 0; i < VFS_REAP_BATCH; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", i);
        ino[i] = put_file(&f, &user_cred, ROOT, name, "x", 1, 0);
        ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, name, 0), 0);
        ops(ino[i])->forget(f.v, ino[i], 1);
        ck_assert_int_eq(attr_rc(&f, ino[i]), i + 1 < VFS_REAP_BATCH ? 0 : -ENOENT);
    }
    ck_assert_int_eq(attr_rc(&f, ino[0]), -ENOENT); /* the last forget took them all */
    uint64_t b = put_file(&f, &user_cred, ROOT, "b", "x", 1, 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "b", 0), 0);
    ops(b)->forget(f.v, b, 1);
    ck_assert_int_eq(attr_rc(&f, b), 0);
    vfs_reap_later(f.v, 0);
    ck_assert_int_eq(attr_rc(&f, b), -ENOENT);
    /* Off: at once again. */
    uint64_t c = put_file(&f, &user_cred, ROOT, "c", "x", 1, 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "c", 0), 0);
    ops(c)->forget(f.v, c, 1);
    ck_assert_int_eq(attr_rc(&f, c), -ENOENT);
    fx_close(&f);
}
END_TEST

START_TEST(test_unlink_open_file)
{
    struct fx f;
    fx_open(&f);
    const size_t N = 2 * BS + 77;
    uint64_t ino;
    uint8_t *ref = put_random(&f, "doomed", N, 9, &ino);

    /* The kernel looks it up and opens it; then it is unlinked. */
    struct stat sb;
    ck_assert_int_eq(ops(ROOT)->lookup(f.v, ROOT, "doomed", &sb), 0);
    struct vfs_open o;
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_RDONLY, &o), 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "doomed", 0), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "doomed", NULL), -ENOENT);

    /* Still readable through the handle, and its attributes say nlink 0. */
    sb = attr(&f, ino);
    ck_assert_uint_eq(sb.st_nlink, 0);
    ck_assert_int_eq(sb.st_size, (off_t)N);
    uint8_t *buf = ut_xmalloc(N);
    size_t got;
    ck_assert_int_eq(rd(f.v, ino, o.fh, buf, N, 0, &got), 0);
    ck_assert_uint_eq(got, N);
    ck_assert_int_eq(memcmp(buf, ref, N), 0);
    /* No new link to an unlinked inode. */
    ck_assert_int_eq(ops(ROOT)->link(f.v, ino, ROOT, "revive", &sb), -ENOENT);

    /* Closed, but the kernel still holds its lookup: still there. */
    ops(ino)->release(f.v, o.fh);
    ck_assert_int_eq(attr_rc(&f, ino), 0);
    /* The last reference goes: the inode is deleted. */
    ops(ino)->forget(f.v, ino, 1);
    ck_assert_int_eq(attr_rc(&f, ino), -ENOENT);
    ck_assert_int_eq(ops(ino)->open(f.v, ino, O_RDONLY, &o), -ENOENT);

    /* An unlinked file nobody holds is gone at once. */
    uint64_t ino2 = put_file(&f, &user_cred, ROOT, "gone", ref, 100, 1);
    ck_assert_int_eq(attr_rc(&f, ino2), 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "gone", 0), 0);
    ck_assert_int_eq(attr_rc(&f, ino2), -ENOENT);

    /* The same for a handle opened for writing: the writes still land. */
    uint64_t ino3 = put_file(&f, &user_cred, ROOT, "w", ref, 1000, 1);
    ck_assert_int_eq(ops(ino3)->open(f.v, ino3, O_RDWR, &o), 0);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "w", 0), 0);
    int inval;
    ck_assert_int_eq(ops(ino3)->write(f.v, &user_cred, ino3, o.fh, "XYZ", 3, 1000, &inval), 0);
    ck_assert_int_eq(rd(f.v, ino3, o.fh, buf, 2000, 0, &got), 0);
    ck_assert_uint_eq(got, 1003);
    ck_assert_int_eq(memcmp(buf + 1000, "XYZ", 3), 0);
    ck_assert_int_eq(ops(ino3)->flush(f.v, o.fh), 0);
    ops(ino3)->release(f.v, o.fh);
    ck_assert_int_eq(attr_rc(&f, ino3), -ENOENT);
    free(buf);
    free(ref);
    fx_close(&f);
}
END_TEST

START_TEST(test_rename)
{
    struct fx f;
    fx_open(&f);
    uint64_t a = put_file(&f, &user_cred, ROOT, "a", "AAAA", 4, 1);
    uint64_t b = put_file(&f, &user_cred, ROOT, "b", "BBBBBB", 6, 1);

    /* Plain rename to a new name. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a", ROOT, "a2", 0), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "a", NULL), -ENOENT);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)a);
    /* Missing source. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a", ROOT, "zz", 0), -ENOENT);

    /* NOREPLACE onto an existing name: EEXIST, nothing changes. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a2", ROOT, "b", VFS_RENAME_NOREPLACE),
                     -EEXIST);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)a);
    ck_assert_int_eq(lookup(&f, ROOT, "b", NULL), (int64_t)b);
    /* Both flags at once: EINVAL. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a2", ROOT, "b",
                                       VFS_RENAME_NOREPLACE | VFS_RENAME_EXCHANGE), -EINVAL);

    /* EXCHANGE swaps. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a2", ROOT, "b", VFS_RENAME_EXCHANGE), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)b);
    ck_assert_int_eq(lookup(&f, ROOT, "b", NULL), (int64_t)a);
    check_file(&f, a, (const uint8_t *)"AAAA", 4);
    /* EXCHANGE with a missing destination: ENOENT. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "b", ROOT, "none", VFS_RENAME_EXCHANGE),
                     -ENOENT);

    /* Replace: the destination's inode is gone (no one holds it). */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "b", ROOT, "a2", 0), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "b", NULL), -ENOENT);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)a);
    ck_assert_int_eq(attr_rc(&f, b), -ENOENT);
    check_file(&f, a, (const uint8_t *)"AAAA", 4);

    /* Replacing a file that is open: it lives on until closed and forgotten. */
    uint64_t c = put_file(&f, &user_cred, ROOT, "c", "CCC", 3, 0); /* create's ref kept */
    uint64_t e = put_file(&f, &user_cred, ROOT, "e", "EEEEE", 5, 1);
    struct vfs_open o;
    ck_assert_int_eq(ops(c)->open(f.v, c, O_RDONLY, &o), 0);
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "e", ROOT, "c", 0), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "c", NULL), (int64_t)e);
    ck_assert_uint_eq(attr(&f, c).st_nlink, 0);
    char cb[8];
    size_t got;
    ck_assert_int_eq(rd(f.v, c, o.fh, cb, sizeof cb, 0, &got), 0);
    ck_assert_uint_eq(got, 3);
    ck_assert_int_eq(memcmp(cb, "CCC", 3), 0);
    ops(c)->release(f.v, o.fh);
    ck_assert_int_eq(attr_rc(&f, c), 0);
    ops(c)->forget(f.v, c, 1);
    ck_assert_int_eq(attr_rc(&f, c), -ENOENT);
    check_file(&f, e, (const uint8_t *)"EEEEE", 5);

    /* Directories. */
    struct stat r0 = attr(&f, ROOT);
    uint64_t d1 = mk(&f, &user_cred, ROOT, "d1", S_IFDIR | 0755, NULL);
    uint64_t d2 = mk(&f, &user_cred, ROOT, "d2", S_IFDIR | 0755, NULL);
    uint64_t full = mk(&f, &user_cred, ROOT, "full", S_IFDIR | 0755, NULL);
    mk(&f, &user_cred, full, "inside", S_IFREG | 0644, NULL);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 3);
    /* dir onto non-empty dir: ENOTEMPTY */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "d1", ROOT, "full", 0), -ENOTEMPTY);
    /* file onto dir: EISDIR; dir onto file: ENOTDIR */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a2", ROOT, "d1", 0), -EISDIR);
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "d1", ROOT, "a2", 0), -ENOTDIR);
    ck_assert_int_eq(lookup(&f, ROOT, "d1", NULL), (int64_t)d1);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)a);
    /* dir onto empty dir: replaced; the root lost one subdirectory. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "d1", ROOT, "d2", 0), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "d2", NULL), (int64_t)d1);
    ck_assert_int_eq(attr_rc(&f, d2), -ENOENT);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 2);
    /* Moving a dir between parents moves its ".." link count. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "d2", full, "moved", 0), 0);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 1);
    ck_assert_uint_eq(attr(&f, full).st_nlink, 3);
    ck_assert_int_eq(lookup(&f, full, "moved", NULL), (int64_t)d1);
    /* EXCHANGE of a file (root) and a dir (in full): link counts follow. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "a2", full, "moved", VFS_RENAME_EXCHANGE), 0);
    ck_assert_int_eq(lookup(&f, ROOT, "a2", NULL), (int64_t)d1);
    ck_assert_int_eq(lookup(&f, full, "moved", NULL), (int64_t)a);
    ck_assert_uint_eq(attr(&f, ROOT).st_nlink, r0.st_nlink + 2);
    ck_assert_uint_eq(attr(&f, full).st_nlink, 2);

    /* Two links of one inode: rename is a no-op, both names stay. */
    struct stat sb;
    ck_assert_int_eq(ops(ROOT)->link(f.v, a, ROOT, "hard", &sb), 0);
    ops(a)->forget(f.v, a, 1);
    ck_assert_uint_eq(sb.st_nlink, 2);
    ck_assert_int_eq(ops(full)->rename(f.v, full, "moved", ROOT, "hard", 0), 0);
    ck_assert_int_eq(lookup(&f, full, "moved", NULL), (int64_t)a);
    ck_assert_int_eq(lookup(&f, ROOT, "hard", NULL), (int64_t)a);
    ck_assert_uint_eq(attr(&f, a).st_nlink, 2);
    fx_close(&f);
}
END_TEST

START_TEST(test_link_count)
{
    struct fx f;
    fx_open(&f);
    uint64_t d = mk(&f, &user_cred, ROOT, "d", S_IFDIR | 0755, NULL);
    uint64_t ino = put_file(&f, &user_cred, ROOT, "f", "hello", 5, 1);
    struct stat sb;
    ck_assert_int_eq(ops(d)->link(f.v, ino, d, "f1", &sb), 0);
    ck_assert_uint_eq(sb.st_ino, ino);
    ck_assert_uint_eq(sb.st_nlink, 2);
    ops(ino)->forget(f.v, ino, 1);
    ck_assert_int_eq(ops(d)->link(f.v, ino, d, "f2", &sb), 0);
    ops(ino)->forget(f.v, ino, 1);
    ck_assert_uint_eq(attr(&f, ino).st_nlink, 3);
    /* A taken name; a directory cannot be linked. */
    ck_assert_int_eq(ops(d)->link(f.v, ino, d, "f1", &sb), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->link(f.v, d, ROOT, "dlink", &sb), -EPERM);
    ck_assert_uint_eq(attr(&f, ino).st_nlink, 3);
    /* Directories do not count links to files. */
    ck_assert_uint_eq(attr(&f, d).st_nlink, 2);

    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "f", 0), 0);
    ck_assert_uint_eq(attr(&f, ino).st_nlink, 2);
    check_file(&f, ino, (const uint8_t *)"hello", 5);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "f1", 0), 0);
    ck_assert_uint_eq(attr(&f, ino).st_nlink, 1);
    ck_assert_int_eq(lookup(&f, d, "f2", NULL), (int64_t)ino);
    ck_assert_int_eq(ops(d)->remove(f.v, d, "f2", 0), 0);
    ck_assert_int_eq(attr_rc(&f, ino), -ENOENT);
    fx_close(&f);
}
END_TEST

START_TEST(test_readdir)
{
    struct fx f;
    fx_open(&f);
    enum { NF = 60 };
    uint64_t d = mk(&f, &user_cred, ROOT, "dir", S_IFDIR | 0755, NULL);
    uint64_t ino[NF];
    char name[64];
    for (int i = 0; i < NF; i++) {
        /* names of varied lengths */
        snprintf(name, sizeof name, "entry-%d-%.*s", i, i % 23, "xxxxxxxxxxxxxxxxxxxxxxxxx");
        mode_t mode = i % 5 == 0 ? S_IFDIR | 0755 : i % 7 == 0 ? S_IFLNK | 0777 : S_IFREG | 0644;
        ino[i] = mk(&f, &user_cred, d, name, mode, S_ISLNK(mode) ? "t" : NULL);
    }
    mk(&f, &user_cred, ROOT, "rootfile", S_IFREG | 0644, NULL);

    /* One big buffer: ".", "..", then every entry once with its type. */
    size_t n;
    int batches;
    struct dent *v = list_dir(&f, d, 1 << 16, 0, &n, &batches);
    ck_assert_uint_eq(n, NF + 2);
    ck_assert_int_eq(batches, 1);
    ck_assert_str_eq(v[0].name, ".");
    ck_assert_uint_eq(v[0].ino, d);
    ck_assert(S_ISDIR(v[0].mode));
    ck_assert_str_eq(v[1].name, "..");
    ck_assert_uint_eq(v[1].ino, ROOT);
    for (int i = 0; i < NF; i++) {
        snprintf(name, sizeof name, "entry-%d-%.*s", i, i % 23, "xxxxxxxxxxxxxxxxxxxxxxxxx");
        const struct dent *e = find(v, n, name);
        ck_assert_msg(e != NULL, "%s not listed", name);
        ck_assert_uint_eq(e->ino, ino[i]);
        ck_assert_uint_eq(e->mode & S_IFMT, attr(&f, ino[i]).st_mode & S_IFMT);
    }
    free(v);

    /* Small buffers: several batches, each resumed from the last cookie,
    ** give every entry exactly once. */
    size_t rooms[] = {ent_size("entry-22-xxxxxxxxxxxxxxxxxxxxxx", 0), 100, 256, 1000};
    for (size_t r = 0; r < sizeof rooms / sizeof *rooms; r++) {
        v = list_dir(&f, d, rooms[r], 0, &n, &batches);
        ck_assert_msg(n == NF + 2, "room %zu: %zu entries", rooms[r], n);
        ck_assert_msg(batches > 1, "room %zu: one batch", rooms[r]);
        ck_assert_ptr_nonnull(find(v, n, "."));
        ck_assert_ptr_nonnull(find(v, n, ".."));
        for (int i = 0; i < NF; i++) {
            snprintf(name, sizeof name, "entry-%d-%.*s", i, i % 23, "xxxxxxxxxxxxxxxxxxxxxxxxx");
            ck_assert_msg(find(v, n, name) != NULL, "room %zu: %s missing", rooms[r], name);
        }
        free(v);
    }

    /* The root: "." and ".." are the root, the history view is hidden. */
    v = list_dir(&f, ROOT, 4096, 0, &n, NULL);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(find(v, n, ".")->ino, ROOT);
    ck_assert_uint_eq(find(v, n, "..")->ino, ROOT);
    ck_assert_ptr_nonnull(find(v, n, "dir"));
    ck_assert_ptr_nonnull(find(v, n, "rootfile"));
    ck_assert_ptr_null(find(v, n, HVIEW_NAME));
    free(v);

    /* An empty directory lists "." and ".." only; ".." is its parent. */
    uint64_t e = ino[0]; /* "entry-0-", a directory */
    ck_assert(S_ISDIR(attr(&f, e).st_mode));
    uint64_t e2 = mk(&f, &user_cred, e, "deeper", S_IFDIR | 0755, NULL);
    v = list_dir(&f, e2, 4096, 0, &n, NULL);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(find(v, n, ".")->ino, e2);
    ck_assert_uint_eq(find(v, n, "..")->ino, e);
    free(v);
    ck_assert_int_eq(ops(ino[1])->opendir(f.v, ino[1]), -ENOTDIR);
    fx_close(&f);
}
END_TEST

/* readdirplus: every entry handed out counts one kernel reference, so an
** entry unlinked afterwards lives until forget gives it back. */
START_TEST(test_readdirplus_refs)
{
    struct fx f;
    fx_open(&f);
    enum { NF = 12 };
    uint64_t d = mk(&f, &user_cred, ROOT, "dir", S_IFDIR | 0755, NULL);
    uint64_t ino[NF];
    char name[32];
    const size_t N = 3000;
    uint8_t *ref = ut_xmalloc(N);
    ut_fill_random(ref, N, 3);
    for (int i = 0; i < NF; i++) {
        snprintf(name, sizeof name, "f%02d", i);
        ino[i] = put_file(&f, &user_cred, d, name, ref, N - (size_t)i, 1);
    }
    /* A file not listed: the control. */
    uint64_t late = put_file(&f, &user_cred, ROOT, "late", ref, 10, 1);
    /* A file being written shows its writer's size, not the committed one. */
    struct vfs_open wo;
    ck_assert_int_eq(ops(ino[0])->open(f.v, ino[0], O_RDWR, &wo), 0);
    int inval;
    ck_assert_int_eq(ops(ino[0])->write(f.v, &user_cred, ino[0], wo.fh, ref, 100, N + 5000,
                                        &inval), 0);

    size_t n;
    int batches;
    struct dent *v = list_dir(&f, d, 3 * ent_size("f00", 1), 1, &n, &batches);
    ck_assert_uint_eq(n, NF + 2);
    ck_assert_int_gt(batches, 1);
    ck_assert_int_eq(find(v, n, "f00")->size, (off_t)(N + 5100));
    ck_assert_int_eq(find(v, n, "f01")->size, (off_t)(N - 1));
    ck_assert_int_eq(ops(ino[0])->flush(f.v, wo.fh), 0);
    ops(ino[0])->release(f.v, wo.fh);
    for (int i = 0; i < NF; i++) {
        snprintf(name, sizeof name, "f%02d", i);
        const struct dent *e = find(v, n, name);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->ino, ino[i]);
        ck_assert_uint_eq(e->mode, S_IFREG | 0644);
    }
    free(v);

    for (int i = 0; i < NF; i++) {
        snprintf(name, sizeof name, "f%02d", i);
        ck_assert_int_eq(ops(d)->remove(f.v, d, name, 0), 0);
    }
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "late", 0), 0);
    ck_assert_int_eq(attr_rc(&f, late), -ENOENT);
    for (int i = 0; i < NF; i++) {
        struct stat sb = attr(&f, ino[i]); /* held by the listing */
        ck_assert_uint_eq(sb.st_nlink, 0);
        ck_assert_int_eq(sb.st_size, (off_t)(i == 0 ? N + 5100 : N - (size_t)i));
        ops(ino[i])->forget(f.v, ino[i], 1);
        ck_assert_msg(attr_rc(&f, ino[i]) == -ENOENT, "f%02d outlived its last reference", i);
    }
    /* "." and ".." took none: the directory goes with rmdir. */
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "dir", 1), 0);
    ck_assert_int_eq(attr_rc(&f, d), -ENOENT);
    free(ref);
    fx_close(&f);
}
END_TEST

START_TEST(test_history_view_readonly)
{
    struct fx f;
    fx_open(&f);
    const size_t N = BS + 999;
    uint64_t file;
    uint8_t *ref = put_random(&f, "ck.bin", N, 21, &file);

    struct stat sb;
    int64_t view = lookup_keep(&f, ROOT, HVIEW_NAME, &sb);
    ck_assert_int_gt(view, 0);
    ck_assert(hview_owns((uint64_t)view));
    ck_assert(S_ISDIR(sb.st_mode));
    uint64_t vi = (uint64_t)view;
    ck_assert_ptr_eq(ops(vi), ops(vi)); /* the view's own table ... */
    ck_assert_ptr_ne(ops(vi), ops(ROOT)); /* ... not the live tree's */

    /* Find the version of ck.bin: .ckptfs/versions/ck.bin/vNNN-... */
    int64_t vers = lookup_keep(&f, vi, "versions", NULL);
    ck_assert_int_gt(vers, 0);
    int64_t vdir = lookup_keep(&f, (uint64_t)vers, "ck.bin", NULL);
    ck_assert_int_gt(vdir, 0);
    size_t n;
    struct dent *v = list_dir(&f, (uint64_t)vdir, 4096, 0, &n, NULL);
    ck_assert_uint_eq(n, 3);
    const struct dent *ve = NULL;
    for (size_t i = 0; i < n; i++)
        if (v[i].name[0] == 'v') ve = &v[i];
    ck_assert_ptr_nonnull(ve);
    int64_t vf = lookup_keep(&f, (uint64_t)vdir, ve->name, &sb);
    ck_assert_int_gt(vf, 0);
    ck_assert_int_eq(sb.st_size, (off_t)N);
    uint64_t vfi = (uint64_t)vf;
    /* It reads as the file. */
    struct vfs_open o;
    ck_assert_int_eq(ops(vfi)->open(f.v, vfi, O_RDONLY, &o), 0);
    uint8_t *buf = ut_xmalloc(N);
    size_t got;
    ck_assert_int_eq(rd(f.v, vfi, o.fh, buf, N, 0, &got), 0);
    ck_assert_uint_eq(got, N);
    ck_assert_int_eq(memcmp(buf, ref, N), 0);
    ops(vfi)->release(f.v, o.fh);
    free(v);
    ck_assert_int_eq(ops(vfi)->getxattr(f.v, vfi, "user.x", (char *)buf, N), -ENODATA);
    ck_assert_int_eq(ops(vfi)->getxattr(f.v, vfi, "system.posix_acl_access", (char *)buf, N),
                     -EOPNOTSUPP);

    /* Every change inside the view: EROFS. */
    const uint64_t dirs[] = {vi, (uint64_t)vers, (uint64_t)vdir};
    for (size_t i = 0; i < 3; i++) {
        uint64_t p = dirs[i];
        ck_assert_int_eq(ops(p)->mknod(f.v, &root_cred, p, "x", S_IFREG | 0644, 0, NULL, &sb),
                         -EROFS);
        ck_assert_int_eq(ops(p)->mknod(f.v, &root_cred, p, "x", S_IFDIR | 0755, 0, NULL, &sb),
                         -EROFS);
        ck_assert_int_eq(ops(p)->mknod(f.v, &root_cred, p, "x", S_IFLNK | 0777, 0, "t", &sb),
                         -EROFS);
        ck_assert_int_eq(ops(p)->create(f.v, &root_cred, p, "x", 0644, O_WRONLY | O_CREAT, &sb,
                                        &o), -EROFS);
        ck_assert_int_eq(ops(p)->setattr(f.v, &root_cred, p, &(struct stat){.st_mode = 0777},
                                         PERM_SET_MODE, &sb), -EROFS);
        ck_assert_int_eq(ops(p)->setxattr(f.v, p, "user.x", "1", 1, 0), -EROFS);
        ck_assert_int_eq(ops(p)->removexattr(f.v, p, "user.x"), -EROFS);
        ck_assert_int_eq(ops(p)->link(f.v, file, p, "x", &sb), -EROFS);
    }
    ck_assert_int_eq(ops(vi)->remove(f.v, vi, "versions", 1), -EROFS);
    ck_assert_int_eq(ops(vdir)->remove(f.v, (uint64_t)vdir, ve->name, 0), -EROFS);
    ck_assert_int_eq(ops(vdir)->rename(f.v, (uint64_t)vdir, ve->name, (uint64_t)vdir, "y", 0),
                     -EROFS);
    /* From the live tree into the view, and the view file into the tree. */
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "ck.bin", vi, "y", 0), -EROFS);
    ck_assert_int_eq(ops(ROOT)->link(f.v, vfi, ROOT, "y", &sb), -EROFS);
    /* The version file: no write, no truncate, no attributes. */
    ck_assert_int_eq(ops(vfi)->open(f.v, vfi, O_WRONLY, &o), -EROFS);
    ck_assert_int_eq(ops(vfi)->open(f.v, vfi, O_RDWR, &o), -EROFS);
    ck_assert_int_eq(ops(vfi)->open(f.v, vfi, O_RDONLY | O_TRUNC, &o), -EROFS);
    ck_assert_int_eq(ops(vfi)->setattr(f.v, &root_cred, vfi, &(struct stat){.st_size = 0},
                                       VFS_SET_SIZE, &sb), -EROFS);
    ck_assert_int_eq(ops(vfi)->setxattr(f.v, vfi, "user.x", "1", 1, 0), -EROFS);
    int inval;
    ck_assert_int_eq(ops(vfi)->write(f.v, &root_cred, vfi, NULL, "x", 1, 0, &inval), -EROFS);
    ck_assert_int_eq(ops(vfi)->access(f.v, &root_cred, vfi, W_OK), -EROFS);
    ck_assert_int_eq(ops(vfi)->access(f.v, &root_cred, vfi, R_OK), 0);
    ck_assert_int_eq(ops(vi)->access(f.v, &root_cred, vi, W_OK), -EROFS);

    /* The reserved name in the live root. */
    ck_assert_int_eq(ops(ROOT)->mknod(f.v, &root_cred, ROOT, HVIEW_NAME, S_IFREG | 0644, 0, NULL,
                                      &sb), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->mknod(f.v, &root_cred, ROOT, HVIEW_NAME, S_IFDIR | 0755, 0, NULL,
                                      &sb), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->mknod(f.v, &root_cred, ROOT, HVIEW_NAME, S_IFLNK | 0777, 0, "t",
                                      &sb), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->create(f.v, &root_cred, ROOT, HVIEW_NAME, 0644,
                                       O_WRONLY | O_CREAT, &sb, &o), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->link(f.v, file, ROOT, HVIEW_NAME, &sb), -EEXIST);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, HVIEW_NAME, 1), -EROFS);
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, "ck.bin", ROOT, HVIEW_NAME, 0), -EROFS);
    ck_assert_int_eq(ops(ROOT)->rename(f.v, ROOT, HVIEW_NAME, ROOT, "z", 0), -EROFS);
    /* The name is free below the root. */
    uint64_t sub = mk(&f, &user_cred, ROOT, "sub", S_IFDIR | 0755, NULL);
    uint64_t fake = mk(&f, &user_cred, sub, HVIEW_NAME, S_IFREG | 0644, NULL);
    ck_assert(!hview_owns(fake));
    ck_assert_int_eq(lookup(&f, sub, HVIEW_NAME, NULL), (int64_t)fake);
    /* Nothing of the above reached the live tree. */
    ck_assert_int_eq(lookup(&f, ROOT, "y", NULL), -ENOENT);
    ck_assert_int_eq(lookup(&f, ROOT, "ck.bin", NULL), (int64_t)file);
    free(buf);
    free(ref);
    fx_close(&f);
}
END_TEST

/* A listing of .ckptfs/seq hands out a reference per change ever made:
** thousands of view nodes, all found again after the view's table grew,
** and all gone once forgotten. */
START_TEST(test_view_many_refs)
{
    struct fx f;
    fx_open(&f);
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "f%d", i);
        mk(&f, &root_cred, ROOT, name, S_IFREG | 0644, NULL);
    }
    int64_t view = lookup_keep(&f, ROOT, HVIEW_NAME, NULL);
    ck_assert_int_gt(view, 0);
    int64_t seqs = lookup_keep(&f, (uint64_t)view, "seq", NULL);
    ck_assert_int_gt(seqs, 0);
    size_t n;
    struct dent *v = list_dir(&f, (uint64_t)seqs, 1 << 20, 1, &n, NULL);
    ck_assert_uint_ge(n, 3000 + 2);
    size_t refs = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].name, ".") == 0 || strcmp(v[i].name, "..") == 0) continue;
        struct stat sb = attr(&f, v[i].ino);
        ck_assert(S_ISDIR(sb.st_mode));
        refs++;
    }
    ck_assert_uint_ge(refs, 3000);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, ".") && strcmp(v[i].name, ".."))
            ops(v[i].ino)->forget(f.v, v[i].ino, 1);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, ".") && strcmp(v[i].name, ".."))
            ck_assert_int_eq(attr_rc(&f, v[i].ino), -ESTALE);
    free(v);
    fx_close(&f);
}
END_TEST

START_TEST(test_setattr_perms)
{
    struct fx f;
    fx_open(&f);
    const struct cred owner = user_cred;
    const struct cred other = {1001, 1001, NULL, NULL};
    uint64_t ino = put_file(&f, &owner, ROOT, "f", "0123456789", 10, 1);
    struct stat sb, out;

    /* chmod by a non-owner: EPERM, mode unchanged. */
    sb = (struct stat){.st_mode = 0777};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &other, ino, &sb, PERM_SET_MODE, &out), -EPERM);
    ck_assert_uint_eq(attr(&f, ino).st_mode, S_IFREG | 0644);
    /* by the owner: done, the type kept. */
    sb = (struct stat){.st_mode = 06750};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &owner, ino, &sb, PERM_SET_MODE, &out), 0);
    ck_assert_uint_eq(out.st_mode, S_IFREG | 06750);
    ck_assert_uint_eq(attr(&f, ino).st_mode, S_IFREG | 06750);
    /* A non-owner may only clear setuid/setgid (the kernel's drop on write). */
    sb = (struct stat){.st_mode = 02750};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &other, ino, &sb, PERM_SET_MODE, &out), 0);
    ck_assert_uint_eq(attr(&f, ino).st_mode, S_IFREG | 02750);
    /* chown to another uid: EPERM for the owner, fine for root. */
    sb = (struct stat){.st_uid = 1001, .st_gid = 1000};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &owner, ino, &sb, PERM_SET_UID, &out), -EPERM);
    ck_assert_uint_eq(attr(&f, ino).st_uid, 1000);
    /* chgrp to a group the owner is not in: EPERM; to one it is in, via
    ** the caller's groups: done, and setgid is cleared (as on chown). */
    sb = (struct stat){.st_uid = 1000, .st_gid = 77};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &owner, ino, &sb, PERM_SET_GID, &out), -EPERM);
    ck_assert_uint_eq(attr(&f, ino).st_gid, 1000);
    ck_assert_int_eq(ops(ino)->setattr(f.v, &root_cred, ino, &sb, PERM_SET_GID, &out), 0);
    ck_assert_uint_eq(attr(&f, ino).st_gid, 77);
    ck_assert_uint_eq(attr(&f, ino).st_mode, S_IFREG | 02750); /* root keeps it */
    sb = (struct stat){.st_uid = 1000, .st_gid = 1000};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &owner, ino, &sb, PERM_SET_GID, &out), 0);
    ck_assert_uint_eq(out.st_gid, 1000);
    ck_assert_uint_eq(out.st_mode, S_IFREG | 0750);
    sb = (struct stat){.st_uid = 1001, .st_gid = 1001};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &root_cred, ino, &sb, PERM_SET_UID | PERM_SET_GID,
                                       &out), 0);
    ck_assert_uint_eq(attr(&f, ino).st_uid, 1001);
    ck_assert_uint_eq(attr(&f, ino).st_gid, 1001);

    /* Times as given. */
    sb = (struct stat){0};
    sb.st_mtim.tv_sec = 1234567890, sb.st_mtim.tv_nsec = 5;
    sb.st_atim.tv_sec = 1000000000;
    ck_assert_int_eq(ops(ino)->setattr(f.v, &root_cred, ino, &sb, VFS_SET_MTIME | VFS_SET_ATIME,
                                       &out), 0);
    ck_assert_int_eq(attr(&f, ino).st_mtim.tv_sec, 1234567890);
    ck_assert_int_eq(attr(&f, ino).st_mtim.tv_nsec, 5);
    ck_assert_int_eq(attr(&f, ino).st_atim.tv_sec, 1000000000);

    /* truncate: down, then up (zeros). */
    sb = (struct stat){.st_size = 4};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &root_cred, ino, &sb, VFS_SET_SIZE, &out), 0);
    ck_assert_int_eq(out.st_size, 4);
    check_file(&f, ino, (const uint8_t *)"0123", 4);
    sb = (struct stat){.st_size = 8};
    ck_assert_int_eq(ops(ino)->setattr(f.v, &root_cred, ino, &sb, VFS_SET_SIZE, &out), 0);
    check_file(&f, ino, (const uint8_t *)"0123\0\0\0\0", 8);
    /* Not on a directory. */
    sb = (struct stat){.st_size = 0};
    ck_assert_int_eq(ops(ROOT)->setattr(f.v, &root_cred, ROOT, &sb, VFS_SET_SIZE, &out), -EISDIR);

    /* A non-root write through a direct handle drops setuid. */
    uint64_t su = put_file(&f, &owner, ROOT, "su", "abc", 3, 1);
    sb = (struct stat){.st_mode = 04755};
    ck_assert_int_eq(ops(su)->setattr(f.v, &owner, su, &sb, PERM_SET_MODE, &out), 0);
    struct vfs_open o;
    ck_assert_int_eq(ops(su)->open(f.v, su, O_WRONLY, &o), 0);
    ck_assert_int_eq(o.direct_io, 1);
    int inval;
    ck_assert_int_eq(ops(su)->write(f.v, &owner, su, o.fh, "d", 1, 3, &inval), 0);
    ck_assert_int_eq(ops(su)->flush(f.v, o.fh), 0);
    ops(su)->release(f.v, o.fh);
    ck_assert_uint_eq(attr(&f, su).st_mode, S_IFREG | 0755);
    check_file(&f, su, (const uint8_t *)"abcd", 4);
    fx_close(&f);
}
END_TEST

/* A groups callback listing one supplementary group. */
static int one_group(void *ctx, gid_t *list, int cap)
{
    list[0] = *(gid_t *)ctx;
    return 1;
}

START_TEST(test_access)
{
    struct fx f;
    fx_open(&f);
    const struct cred owner = user_cred;
    gid_t g = 1000;
    const struct cred member = {2000, 2000, one_group, &g};
    const struct cred other = {3000, 3000, NULL, NULL};
    uint64_t ino = mk(&f, &owner, ROOT, "f", S_IFREG | 0640, NULL);
    uint64_t d = mk(&f, &owner, ROOT, "d", S_IFDIR | 0700, NULL);
    const struct vfs_ops *L = ops(ino);
    ck_assert_int_eq(L->access(f.v, &owner, ino, R_OK | W_OK), 0);
    ck_assert_int_eq(L->access(f.v, &owner, ino, X_OK), -EACCES);
    ck_assert_int_eq(L->access(f.v, &member, ino, R_OK), 0);
    ck_assert_int_eq(L->access(f.v, &member, ino, W_OK), -EACCES);
    ck_assert_int_eq(L->access(f.v, &other, ino, R_OK), -EACCES);
    ck_assert_int_eq(L->access(f.v, &other, ino, F_OK), 0);
    ck_assert_int_eq(L->access(f.v, &root_cred, ino, R_OK | W_OK), 0);
    ck_assert_int_eq(L->access(f.v, &root_cred, ino, X_OK), -EACCES);
    ck_assert_int_eq(L->access(f.v, &root_cred, d, X_OK), 0);
    ck_assert_int_eq(L->access(f.v, &other, d, X_OK), -EACCES);
    ck_assert_int_eq(L->access(f.v, &owner, d, R_OK | W_OK | X_OK), 0);
    /* The answer follows a chmod. */
    struct stat sb = {.st_mode = 0644}, out;
    ck_assert_int_eq(L->setattr(f.v, &owner, ino, &sb, PERM_SET_MODE, &out), 0);
    ck_assert_int_eq(L->access(f.v, &other, ino, R_OK), 0);
    ck_assert_int_eq(L->access(f.v, &other, ino, W_OK), -EACCES);
    /* A missing inode. */
    ck_assert_int_eq(L->access(f.v, &owner, 987654, F_OK), -ENOENT);
    fx_close(&f);
}
END_TEST

START_TEST(test_xattr)
{
    struct fx f;
    fx_open(&f);
    uint64_t ino = put_file(&f, &user_cred, ROOT, "f", "x", 1, 1);
    uint64_t d = mk(&f, &user_cred, ROOT, "d", S_IFDIR | 0755, NULL);
    uint64_t sl = mk(&f, &user_cred, ROOT, "l", S_IFLNK | 0777, "f");
    const struct vfs_ops *L = ops(ino);
    char buf[256];

    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(L->setxattr(f.v, ino, "user.x", "hello", 5, 0), 0);
    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", NULL, 0), 5);
    memset(buf, 0, sizeof buf);
    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", buf, sizeof buf), 5);
    ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", buf, 2), -ERANGE);
    /* CREATE on an existing name, REPLACE on a missing one. */
    ck_assert_int_eq(L->setxattr(f.v, ino, "user.x", "y", 1, VFS_XATTR_CREATE), -EEXIST);
    ck_assert_int_eq(L->setxattr(f.v, ino, "user.nope", "y", 1, VFS_XATTR_REPLACE), -ENODATA);
    ck_assert_int_eq(L->setxattr(f.v, ino, "user.x", "bye", 3, VFS_XATTR_REPLACE), 0);
    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", buf, sizeof buf), 3);
    ck_assert_int_eq(memcmp(buf, "bye", 3), 0);
    ck_assert_int_eq(L->setxattr(f.v, ino, "trusted.t", "T", 1, 0), 0);

    /* list: the stored names, NUL-terminated. */
    int len = L->listxattr(f.v, ino, NULL, 0);
    ck_assert_int_eq(len, (int)(sizeof "user.x" + sizeof "trusted.t"));
    ck_assert_int_eq(L->listxattr(f.v, ino, buf, sizeof buf), len);
    int seen_x = 0, seen_t = 0;
    for (char *p = buf; p < buf + len; p += strlen(p) + 1) {
        if (strcmp(p, "user.x") == 0) seen_x++;
        else if (strcmp(p, "trusted.t") == 0) seen_t++;
        else ck_abort_msg("unexpected name %s", p);
    }
    ck_assert_int_eq(seen_x, 1);
    ck_assert_int_eq(seen_t, 1);
    ck_assert_int_eq(L->listxattr(f.v, ino, buf, 3), -ERANGE);

    /* remove */
    ck_assert_int_eq(L->removexattr(f.v, ino, "user.x"), 0);
    ck_assert_int_eq(L->getxattr(f.v, ino, "user.x", buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(L->removexattr(f.v, ino, "user.x"), -ENODATA);
    ck_assert_int_eq(L->listxattr(f.v, ino, NULL, 0), (int)sizeof "trusted.t");

    /* system.* (ACLs) is not supported; user.* only on files and dirs. */
    ck_assert_int_eq(L->setxattr(f.v, ino, "system.posix_acl_access", "a", 1, 0), -EOPNOTSUPP);
    ck_assert_int_eq(L->removexattr(f.v, ino, "system.posix_acl_access"), -EOPNOTSUPP);
    /* Reads of what cannot be stored say so (ls -l then stops asking). */
    ck_assert_int_eq(L->getxattr(f.v, ino, "system.posix_acl_access", buf, sizeof buf),
                     -EOPNOTSUPP);
    ck_assert_int_eq(L->getxattr(f.v, ino, "security.selinux", buf, sizeof buf), -EOPNOTSUPP);
    ck_assert_int_eq(L->setxattr(f.v, ino, "security.selinux", "a", 1, 0), -EOPNOTSUPP);
    ck_assert_int_eq(L->setxattr(f.v, ino, "security.capability", "a", 1, 0), 0);
    ck_assert_int_eq(L->removexattr(f.v, ino, "security.capability"), 0);
    ck_assert_int_eq(L->setxattr(f.v, ino, "other.x", "a", 1, 0), -EOPNOTSUPP);
    ck_assert_int_eq(L->setxattr(f.v, sl, "user.x", "a", 1, 0), -EPERM);
    ck_assert_int_eq(L->setxattr(f.v, d, "user.x", "a", 1, 0), 0);

    /* The policy: defaults to the mount's, stored canonical, refused when
    ** malformed, inherited by what is made under a directory. */
    int pl = L->getxattr(f.v, ino, POLICY_XATTR, buf, sizeof buf);
    ck_assert_int_eq(pl, (int)strlen("lossless"));
    ck_assert_int_eq(memcmp(buf, "lossless", (size_t)pl), 0);
    ck_assert_int_eq(L->setxattr(f.v, d, POLICY_XATTR, "bitsnap:newest", 14, 0), 0);
    const char *canon = "bitsnap:bits=8,newest";
    pl = L->getxattr(f.v, d, POLICY_XATTR, buf, sizeof buf);
    ck_assert_int_eq(pl, (int)strlen(canon));
    ck_assert_int_eq(memcmp(buf, canon, strlen(canon)), 0);
    ck_assert_int_eq(L->setxattr(f.v, d, POLICY_XATTR, "zip", 3, 0), -EINVAL);
    pl = L->getxattr(f.v, d, POLICY_XATTR, buf, sizeof buf);
    ck_assert_int_eq(memcmp(buf, canon, strlen(canon)), 0);
    uint64_t child = mk(&f, &user_cred, d, "child", S_IFREG | 0644, NULL);
    pl = L->getxattr(f.v, child, POLICY_XATTR, buf, sizeof buf);
    ck_assert_int_eq(pl, (int)strlen(canon));
    ck_assert_int_eq(memcmp(buf, canon, strlen(canon)), 0);
    ck_assert_int_eq(L->setxattr(f.v, ino, POLICY_XATTR, "excp:bits=2,beta=1.5", 20, 0), 0);
    canon = "excp:alpha=5e-05,beta=1.5,bits=2";
    pl = L->getxattr(f.v, ino, POLICY_XATTR, buf, sizeof buf);
    ck_assert_int_eq(pl, (int)strlen(canon));
    ck_assert_int_eq(memcmp(buf, canon, strlen(canon)), 0);
    fx_close(&f);
}
END_TEST

START_TEST(test_name_too_long)
{
    struct fx f;
    fx_open(&f);
    char longname[NAME_MAX + 2], maxname[NAME_MAX + 1];
    memset(longname, 'a', NAME_MAX + 1);
    longname[NAME_MAX + 1] = 0;
    memset(maxname, 'b', NAME_MAX);
    maxname[NAME_MAX] = 0;
    uint64_t ino = put_file(&f, &user_cred, ROOT, "f", "z", 1, 1);
    struct stat sb;
    struct vfs_open o;
    const struct vfs_ops *L = ops(ROOT);
    ck_assert_int_eq(L->lookup(f.v, ROOT, longname, &sb), -ENAMETOOLONG);
    ck_assert_int_eq(L->mknod(f.v, &user_cred, ROOT, longname, S_IFREG | 0644, 0, NULL, &sb),
                     -ENAMETOOLONG);
    ck_assert_int_eq(L->mknod(f.v, &user_cred, ROOT, longname, S_IFDIR | 0755, 0, NULL, &sb),
                     -ENAMETOOLONG);
    ck_assert_int_eq(L->create(f.v, &user_cred, ROOT, longname, 0644, O_WRONLY, &sb, &o),
                     -ENAMETOOLONG);
    ck_assert_int_eq(L->link(f.v, ino, ROOT, longname, &sb), -ENAMETOOLONG);
    ck_assert_int_eq(L->rename(f.v, ROOT, "f", ROOT, longname, 0), -ENAMETOOLONG);
    ck_assert_int_eq(L->remove(f.v, ROOT, longname, 0), -ENAMETOOLONG);
    ck_assert_int_eq(lookup(&f, ROOT, "f", NULL), (int64_t)ino);
    /* NAME_MAX itself is fine. */
    uint64_t m = mk(&f, &user_cred, ROOT, maxname, S_IFREG | 0644, NULL);
    ck_assert_int_eq(lookup(&f, ROOT, maxname, NULL), (int64_t)m);
    ck_assert_int_eq(L->rename(f.v, ROOT, maxname, ROOT, "short", 0), 0);
    ck_assert_int_eq(L->rename(f.v, ROOT, "short", ROOT, maxname, 0), 0);
    ck_assert_int_eq(L->remove(f.v, ROOT, maxname, 0), 0);
    /* A symlink target longer than PATH_MAX. */
    char *target = ut_xmalloc(PATH_MAX + 2);
    memset(target, 't', PATH_MAX + 1);
    target[PATH_MAX + 1] = 0;
    ck_assert_int_eq(L->mknod(f.v, &user_cred, ROOT, "sl", S_IFLNK | 0777, 0, target, &sb),
                     -ENAMETOOLONG);
    free(target);
    fx_close(&f);
}
END_TEST

/* A setgid directory hands its group to what is made in it, and its setgid
** bit to new directories (BSD semantics, as Linux does). */
START_TEST(test_setgid_dir)
{
    struct fx f;
    fx_open(&f);
    struct stat sb, out;
    uint64_t d = mk(&f, &root_cred, ROOT, "sgid", S_IFDIR | 0777, NULL);
    sb = (struct stat){.st_mode = 02777, .st_gid = 4321};
    ck_assert_int_eq(ops(d)->setattr(f.v, &root_cred, d, &sb, PERM_SET_MODE | PERM_SET_GID, &out),
                     0);
    ck_assert_uint_eq(out.st_mode, S_IFDIR | 02777);
    ck_assert_uint_eq(out.st_gid, 4321);
    const struct cred nobody = {65534, 65534, NULL, NULL};
    ck_assert_int_eq(ops(d)->mknod(f.v, &nobody, d, "f", S_IFREG | 0644, 0, NULL, &sb), 0);
    ck_assert_uint_eq(sb.st_uid, 65534);
    ck_assert_uint_eq(sb.st_gid, 4321);
    ops(d)->forget(f.v, sb.st_ino, 1);
    sb = attr(&f, (uint64_t)lookup(&f, d, "f", NULL));
    ck_assert_uint_eq(sb.st_gid, 4321);
    ck_assert_uint_eq(sb.st_mode, S_IFREG | 0644);
    ck_assert_int_eq(ops(d)->mknod(f.v, &nobody, d, "sub", S_IFDIR | 0755, 0, NULL, &sb), 0);
    ops(d)->forget(f.v, sb.st_ino, 1);
    sb = attr(&f, (uint64_t)lookup(&f, d, "sub", NULL));
    ck_assert_uint_eq(sb.st_gid, 4321);
    ck_assert_uint_eq(sb.st_mode & S_ISGID, S_ISGID);
    struct vfs_open o;
    ck_assert_int_eq(ops(d)->create(f.v, &nobody, d, "c", 0600, O_WRONLY, &sb, &o), 0);
    ck_assert_uint_eq(sb.st_gid, 4321);
    ops(d)->release(f.v, o.fh);
    /* Outside it: the caller's group. */
    ck_assert_int_eq(ops(ROOT)->mknod(f.v, &nobody, ROOT, "g", S_IFREG | 0644, 0, NULL, &sb), 0);
    ck_assert_uint_eq(sb.st_gid, 65534);
    /* statfs names NAME_MAX. */
    struct statvfs sv;
    ck_assert_int_eq(vfs_statfs(f.v, &sv), 0);
    ck_assert_uint_eq(sv.f_namemax, NAME_MAX);
    fx_close(&f);
}
END_TEST

/* A staging body left by a crash: of a live inode, committed as its new
** content; of a deleted one, put under /lost+found. */
START_TEST(test_recover)
{
    struct fx f;
    fx_open(&f);
    const size_t N = 2 * BS + 500;
    uint8_t *body = ut_xmalloc(N), *body2 = ut_xmalloc(N);
    ut_fill_random(body, N, 31);
    ut_fill_random(body2, N, 32);
    uint64_t live = put_file(&f, &user_cred, ROOT, "live", "old", 3, 1);
    uint64_t dead = put_file(&f, &user_cred, ROOT, "dead", "old", 3, 1);
    ck_assert_int_eq(ops(ROOT)->remove(f.v, ROOT, "dead", 0), 0);
    ck_assert_int_eq(attr_rc(&f, dead), -ENOENT);
    fx_close(&f);

    /* The crash's leftovers. */
    struct store_opts so;
    store_default_opts(&so);
    so.reserve_bytes = 0;
    so.block_size = BS;
    ck_assert_int_eq(store_open(f.dir, &so, &f.st), 0);
    const struct {
        uint64_t ino;
        const uint8_t *b;
    } left[] = {{live, body}, {dead, body2}};
    for (int i = 0; i < 2; i++) {
        int fd = store_stage_open(f.st, left[i].ino, 1);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, left[i].b, N, 0), (ssize_t)N);
        close(fd);
    }
    store_close(f.st);

    fx_start(&f);
    char sp[200];
    snprintf(sp, sizeof sp, "%s/staging", f.dir);
    ck_assert_int_eq(ut_count_entries(sp), 2);
    ck_assert_int_eq(vfs_recover(f.v), 0);
    ck_assert_int_eq(ut_count_entries(sp), 0);

    /* The live file has the body. */
    ck_assert_int_eq(attr(&f, live).st_size, (off_t)N);
    check_file(&f, live, body, N);
    /* The dead one's body is the only file in /lost+found. */
    struct stat sb;
    int64_t lf = lookup(&f, ROOT, "lost+found", &sb);
    ck_assert_int_gt(lf, 0);
    ck_assert(S_ISDIR(sb.st_mode));
    size_t n;
    struct dent *v = list_dir(&f, (uint64_t)lf, 4096, 0, &n, NULL);
    ck_assert_uint_eq(n, 3);
    const struct dent *e = NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(v[i].name, "recovered-", 10) == 0) e = &v[i];
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_ne(e->ino, dead);
    ck_assert_uint_eq(attr(&f, e->ino).st_size, N);
    check_file(&f, e->ino, body2, N);
    ck_assert_int_eq(attr_rc(&f, dead), -ENOENT);
    free(v);
    /* It survives a remount. */
    uint64_t rino = e->ino;
    fx_close(&f);
    fx_start(&f);
    check_file(&f, rino, body2, N);
    check_file(&f, live, body, N);
    free(body);
    free(body2);
    fx_close(&f);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {
        test_make_and_lookup,
        test_write_read_back,
        test_read_drops_behind,
        test_read_pieces,
        test_reap_later,
        test_unlink_open_file,
        test_rename,
        test_link_count,
        test_readdir,
        test_readdirplus_refs,
        test_history_view_readonly,
        test_view_many_refs,
        test_setattr_perms,
        test_access,
        test_xattr,
        test_name_too_long,
        test_setgid_dir,
        test_recover,
        NULL,
    };
    return ut_main("vfs", (const struct ut_tcase[]){
        {.name = "vfs", .timeout = 120, .tests = tests},
        {0},
    });
}
