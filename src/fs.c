/*
** fs.c: FUSE low-level operations (see fs.h).
**
** Ownership: a daemon running as root creates every inode with the uid and
** gid of the request, so users own what they make. Names are looked up per
** directory inode; no path is ever assembled, so PATH_MAX never limits us.
*/
#include "fs.h"
#include "policy.h"
#include "common.h"
#include "history.h"
#include "ingest.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif

#define FS(req) ((struct fs *)fuse_req_userdata(req))

/* An open file. The kernel sends the open flags with release but not with
** flush, so whether the handle writes is kept here. */
struct handle {
    struct node *n;
    int writer;
    unsigned how; /* node_open's decision (NODE_DIRECT, NODE_DROP) */
    int wrote;    /* a write came through it (direct: privileges dropped) */
};
#define HANDLE(fi) ((struct handle *)(uintptr_t)(fi)->fh)
#define NODE(fi) (HANDLE(fi)->n)

static int name_ok(const char *name)
{
    return strlen(name) > NAME_MAX ? -ENAMETOOLONG : 0;
}

/* The history view is read-only, and its name in the root is taken. */
static int view_ro(uint64_t ino) { return hview_owns(ino) ? -EROFS : 0; }

static int reserved(uint64_t parent, const char *name)
{
    return parent == FSMETA_ROOT_INO && strcmp(name, HVIEW_NAME) == 0;
}

/* Errors for creating name in parent, or for changing either. */
static int may_create(uint64_t parent, const char *name)
{
    CK_TRY(view_ro(parent));
    return reserved(parent, name) ? -EEXIST : name_ok(name);
}

static int may_remove(uint64_t parent, const char *name)
{
    CK_TRY(view_ro(parent));
    return reserved(parent, name) ? -EROFS : name_ok(name);
}

/* Delete an unlinked inode once nothing refers to it. */
static void reap(struct fs *fs, uint64_t ino)
{
    struct fsm_attr a;
    if (fsmeta_getattr(fs->st->meta, ino, &a) == 0 && a.nlink == 0) {
        int rc = fsmeta_rminode(fs->st->meta, ino);
        if (rc < 0) ck_log(CK_LOG_WARN, "inode %llu: delete failed (%s); purged at next mount",
                           (unsigned long long)ino, strerror(-rc));
        store_stage_remove(fs->st, ino);
    }
}

static void unpin(struct fs *fs, struct node *n)
{
    uint64_t ino = n->ino;
    if (node_unpin(fs->nodes, n)) reap(fs, ino);
}

/* After a link count dropped: reap now unless the kernel still holds it. */
static void maybe_reap(struct fs *fs, uint64_t ino)
{
    struct node *n = node_find(fs->nodes, ino);
    if (n) unpin(fs, n); else reap(fs, ino);
}

static void to_timespec(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

static void fill_stat(const struct fsm_attr *a, struct stat *sb)
{
    memset(sb, 0, sizeof *sb);
    sb->st_ino = a->ino;
    sb->st_mode = a->mode;
    sb->st_nlink = a->nlink;
    sb->st_uid = a->uid;
    sb->st_gid = a->gid;
    sb->st_rdev = a->rdev;
    sb->st_size = (off_t)a->size;
    sb->st_blksize = 4096;
    /* Blocks actually used on disk (compressed), as ZFS and btrfs report. */
    sb->st_blocks = (blkcnt_t)((a->stored + 4095) / 4096 * 8);
    to_timespec(a->atime, &sb->st_atim);
    to_timespec(a->mtime, &sb->st_mtim);
    to_timespec(a->ctime, &sb->st_ctim);
}

/* Attributes of ino, including writes not yet committed. */
static int get_attr(struct fs *fs, uint64_t ino, struct fsm_attr *a)
{
    struct node *n = node_find(fs->nodes, ino);
    if (!n) return fsmeta_getattr(fs->st->meta, ino, a);
    int rc = ingest_getattr(fs->st, n, a);
    unpin(fs, n);
    return rc;
}

static int get_stat(struct fs *fs, uint64_t ino, struct stat *sb)
{
    if (hview_owns(ino)) return hview_getattr(fs->view, ino, sb);
    struct fsm_attr a;
    CK_TRY(get_attr(fs, ino, &a));
    fill_stat(&a, sb);
    return 0;
}

/* Count a new kernel reference to ino (an entry replied). */
static int count_entry(struct fs *fs, uint64_t ino)
{
    struct node *n = node_pin(fs->nodes, ino);
    if (!n) return -ENOMEM;
    node_add(fs->nodes, n, 1, 0, 0);
    unpin(fs, n);
    return 0;
}

/* Build an entry reply for ino and count the kernel's new reference. */
static int make_entry(struct fs *fs, uint64_t ino, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    CK_TRY(get_stat(fs, ino, &e->attr));
    CK_TRY(count_entry(fs, ino));
    e->ino = ino;
    e->attr_timeout = e->entry_timeout = fs->timeout;
    return 0;
}

static void reply_entry(fuse_req_t req, uint64_t ino)
{
    struct fuse_entry_param e;
    int rc = make_entry(FS(req), ino, &e);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_entry(req, &e);
}

static void touch_dir(struct fsm_attr *d, int dlink)
{
    d->mtime = d->ctime = ck_now_ns();
    d->nlink = (uint32_t)((int)d->nlink + dlink);
}

static int get_dir(fsmeta *m, uint64_t ino, struct fsm_attr *d)
{
    CK_TRY(fsmeta_getattr(m, ino, d));
    return S_ISDIR(d->mode) ? 0 : -ENOTDIR;
}

/* Create an inode named name in parent, owned by the caller. */
static int make_node(fuse_req_t req, uint64_t parent, const char *name, mode_t mode,
                     dev_t rdev, const char *target, struct fsm_attr *a)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    CK_TRY(may_create(parent, name));
    int64_t now = ck_now_ns();
    *a = (struct fsm_attr){.mode = (uint32_t)mode, .uid = ctx->uid, .gid = ctx->gid,
                           .nlink = S_ISDIR(mode) ? 2 : 1, .rdev = rdev,
                           .size = target ? strlen(target) : 0,
                           .atime = now, .mtime = now, .ctime = now};
    return fsmeta_create(FS(req)->st->meta, parent, name, a, target, 0);
}

/* The entry reply for an inode just made with attributes a (no query). */
static int made_entry(struct fs *fs, const struct fsm_attr *a, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    fill_stat(a, &e->attr);
    CK_TRY(count_entry(fs, a->ino));
    e->ino = a->ino;
    e->attr_timeout = e->entry_timeout = fs->timeout;
    return 0;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    conn->max_write = 1 << 20;
    conn->max_readahead = CK_MIN(conn->max_readahead, 1u << 20);
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    /* Every listing batch with attributes (they come from the same query):
    ** in "auto" mode the kernel stops after the first batch unless entries
    ** were looked up meanwhile, and `ls -l` then pays a lookup per entry. */
    conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
    /* Only this daemon changes the store and every change passes through the
    ** kernel: no need to revalidate the page cache on each read. */
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
}

/* At unmount: a final commit, or, while a writer is still open, a
** provisional one that saves what it wrote (as its fsync would). */
static void commit_all(struct node *n, void *ctx)
{
    struct fs *fs = ctx;
    ingest_commit(fs->st, n, 1, __atomic_load_n(&n->nwriters, __ATOMIC_ACQUIRE) == 0);
    unpin(fs, n);
}

static void op_destroy(void *userdata)
{
    struct fs *fs = userdata;
    node_foreach(fs->nodes, commit_all, fs);
}

/* The kernel reads ahead 128 KiB on a FUSE mount and resets the value when
** it takes our INIT reply; every later request comes after that. Each read
** request is a round trip, so large sequential loads want a wider window. */
static void tune_once(struct fs *fs)
{
    if (__atomic_exchange_n(&fs->ra_done, 1, __ATOMIC_ACQ_REL) || !fs->ra_path[0]) return;
    FILE *f = fopen(fs->ra_path, "w");
    if (!f || fprintf(f, "%lu\n", fs->ra_kib) < 0 || fclose(f) != 0)
        ck_log(CK_LOG_INFO, "cannot set readahead (%s): %s", fs->ra_path, strerror(errno));
}

struct settle {
    struct fs *fs;
    const char *fam;
    uint64_t dir;
    int rc;
};

static void settle_one(struct node *n, void *ctx)
{
    struct settle *s = ctx;
    int rc = ingest_settle(s->fs->st, n, s->fam, s->dir);
    if (s->rc == 0) s->rc = rc;
    unpin(s->fs, n);
}

/* Pay every owed commit (ingest.h) of family fam (NULL: all) in directory
** dir (0: all): the history view and fsync of a directory must show what
** writers have closed. */
static int settle_some(struct fs *fs, const char *fam, uint64_t dir)
{
    struct settle s = {fs, fam, dir, 0};
    if (__atomic_load_n(&fs->st->owed, __ATOMIC_ACQUIRE) > 0)
        node_foreach(fs->nodes, settle_one, &s);
    return s.rc;
}

static int settle_all(struct fs *fs) { return settle_some(fs, NULL, 0); }

void fs_settle_owed(void *ctx, const char *fam, uint64_t dir) { settle_some(ctx, fam, dir); }

static void view_entry(fuse_req_t req, uint64_t parent, const char *name)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    settle_all(FS(req));
    int rc = hview_lookup(FS(req)->view, parent, name, &e.attr);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    e.ino = e.attr.st_ino;
    e.attr_timeout = e.entry_timeout = FS(req)->timeout;
    fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    tune_once(FS(req));
    if (hview_owns(parent) || reserved(parent, name)) {
        view_entry(req, parent, name);
        return;
    }
    uint64_t ino;
    int rc = name_ok(name);
    if (rc == 0) rc = fsmeta_lookup(FS(req)->st->meta, parent, name, &ino);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    reply_entry(req, ino);
}

static void forget_one(struct fs *fs, uint64_t ino, uint64_t nlookup)
{
    if (hview_owns(ino)) {
        hview_forget(fs->view, ino, nlookup);
        return;
    }
    struct node *n = node_find(fs->nodes, ino);
    if (!n) return;
    node_add(fs->nodes, n, -(int64_t)nlookup, 0, 0);
    unpin(fs, n);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    forget_one(FS(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
    for (size_t i = 0; i < count; i++) forget_one(FS(req), f[i].ino, f[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    tune_once(FS(req));
    struct stat sb;
    int rc = get_stat(FS(req), ino, &sb);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_attr(req, &sb, FS(req)->timeout);
}

static int in_group(fuse_req_t req, gid_t gid)
{
    if (fuse_req_ctx(req)->gid == gid) return 1;
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    for (int i = 0; i < n && i < 64; i++)
        if (groups[i] == gid) return 1;
    return 0;
}

/* The setuid and setgid bits a write by the caller clears, as the kernel
** decides for its own filesystems: setuid always, setgid when the file is
** group-executable or the caller is not in its group; none for root. */
static uint32_t privs_to_kill(fuse_req_t req, const struct fsm_attr *a)
{
    if (fuse_req_ctx(req)->uid == 0) return 0;
    uint32_t kill = a->mode & S_ISUID;
    if ((a->mode & S_ISGID) && ((a->mode & S_IXGRP) || !in_group(req, a->gid))) kill |= S_ISGID;
    return kill;
}

/* 1 if mode change old -> new only clears setuid and setgid: what the
** kernel sends, as the writer, when a write, truncate or fallocate must
** drop them (the only mode change a non-owner may make). */
static int kills_privs_only(uint32_t old, uint32_t new)
{
    old &= 07777, new &= 07777;
    return (new & ~old) == 0 && ((old & ~new) & ~(uint32_t)(S_ISUID | S_ISGID)) == 0;
}

/* chmod/chown rules for a daemon that must enforce them itself. */
static int may_change(fuse_req_t req, const struct fsm_attr *a, const struct stat *sb,
                      int to_set)
{
    uid_t uid = fuse_req_ctx(req)->uid;
    if (uid == 0) return 0;
    if ((to_set & FUSE_SET_ATTR_MODE) && uid != a->uid && !kills_privs_only(a->mode, sb->st_mode))
        return -EPERM;
    if ((to_set & FUSE_SET_ATTR_GID) && uid != a->uid) return -EPERM;
    if ((to_set & FUSE_SET_ATTR_UID) && sb->st_uid != a->uid) return -EPERM;
    if ((to_set & FUSE_SET_ATTR_GID) && sb->st_gid != a->gid && !in_group(req, sb->st_gid))
        return -EPERM;
    return 0;
}

static int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static int set_size(struct fs *fs, uint64_t ino, uint64_t size)
{
    struct node *n = node_pin(fs->nodes, ino);
    if (!n) return -ENOMEM;
    int rc = ingest_truncate(fs->st, n, size);
    /* With no writer open, nothing else would commit it: do it now. */
    if (rc == 0 && node_add(fs->nodes, n, 0, 0, 0) == 0) rc = ingest_commit(fs->st, n, 0, 1);
    unpin(fs, n);
    return rc;
}

static int do_setattr(fuse_req_t req, uint64_t ino, struct stat *sb, int to_set)
{
    struct fs *fs = FS(req);
    fsmeta *m = fs->st->meta;
    struct fsm_attr a;
    CK_TRY(get_attr(fs, ino, &a));
    CK_TRY(may_change(req, &a, sb, to_set));
    if (to_set & FUSE_SET_ATTR_SIZE) {
        if (S_ISDIR(a.mode)) return -EISDIR;
        if (!S_ISREG(a.mode)) return -EINVAL;
        CK_TRY(set_size(fs, ino, (uint64_t)sb->st_size));
    }
    CK_TRY(fsmeta_getattr(m, ino, &a)); /* the row to update: committed size */
    int64_t now = ck_now_ns();
    if (to_set & FUSE_SET_ATTR_MODE) a.mode = (a.mode & S_IFMT) | (sb->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) a.uid = sb->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) a.gid = sb->st_gid;
    if ((to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) && fuse_req_ctx(req)->uid != 0)
        a.mode &= ~(uint32_t)(S_ISUID | S_ISGID); /* as the kernel does on chown */
    if (to_set & FUSE_SET_ATTR_ATIME) a.atime = ts_ns(&sb->st_atim);
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) a.atime = now;
    if (to_set & FUSE_SET_ATTR_MTIME) a.mtime = ts_ns(&sb->st_mtim);
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) a.mtime = now;
    a.ctime = (to_set & FUSE_SET_ATTR_CTIME) ? ts_ns(&sb->st_ctim) : now;
    struct node *n = node_find(fs->nodes, ino);
    if (n) {
        int mt = (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) != 0;
        ingest_set_times(n, mt ? a.mtime : -1, a.ctime);
        unpin(fs, n);
    }
    return fsmeta_setattr(m, &a);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)fi;
    int rc = view_ro(ino);
    if (rc == 0) rc = do_setattr(req, ino, attr, to_set);
    struct stat sb;
    if (rc == 0) rc = get_stat(FS(req), ino, &sb);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_attr(req, &sb, FS(req)->timeout);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char buf[PATH_MAX + 1];
    size_t len;
    int rc = hview_owns(ino) ? hview_readlink(FS(req)->view, ino, buf, PATH_MAX, &len)
                             : fsmeta_readlink(FS(req)->st->meta, ino, buf, PATH_MAX, &len);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    buf[len] = 0;
    fuse_reply_readlink(req, buf);
}

static void reply_made(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       dev_t rdev, const char *target)
{
    struct fsm_attr a;
    struct fuse_entry_param e;
    int rc = make_node(req, parent, name, mode, rdev, target, &a);
    if (rc == 0) rc = made_entry(FS(req), &a, &e);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_entry(req, &e);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    reply_made(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    reply_made(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    if (strlen(link) > PATH_MAX) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    reply_made(req, parent, name, S_IFLNK | 0777, 0, link);
}

/* Remove the entry (parent, name) of inode *ino; want_dir selects rmdir rules. */
static int remove_entry(fsmeta *m, uint64_t parent, const char *name, int want_dir,
                        uint64_t *ino, uint32_t *nlink)
{
    struct fsm_attr d, a;
    CK_TRY(get_dir(m, parent, &d));
    CK_TRY(fsmeta_lookup(m, parent, name, ino));
    CK_TRY(fsmeta_getattr(m, *ino, &a));
    int dir = S_ISDIR(a.mode);
    if (want_dir && !dir) return -ENOTDIR;
    if (!want_dir && dir) return -EISDIR;
    if (dir) {
        int r = fsmeta_has_children(m, *ino);
        if (r != 0) return r < 0 ? r : -ENOTEMPTY;
    }
    CK_TRY(fsmeta_unlink(m, parent, name));
    a.nlink = dir ? 0 : a.nlink - 1;
    a.ctime = ck_now_ns();
    CK_TRY(fsmeta_setattr(m, &a));
    touch_dir(&d, dir ? -1 : 0);
    *nlink = a.nlink;
    return fsmeta_setattr(m, &d);
}

static void do_remove(fuse_req_t req, fuse_ino_t parent, const char *name, int dir)
{
    fsmeta *m = FS(req)->st->meta;
    uint64_t ino = 0;
    uint32_t nlink = 1;
    int rc = may_remove(parent, name);
    if (rc == 0) rc = fsmeta_begin(m, 0);
    if (rc == 0) rc = fsmeta_end(m, remove_entry(m, parent, name, dir, &ino, &nlink));
    if (rc == 0 && nlink == 0) maybe_reap(FS(req), ino);
    fuse_reply_err(req, -rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    do_remove(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    do_remove(req, parent, name, 1);
}

/* Swap two entries (RENAME_EXCHANGE). */
static int exchange(fsmeta *m, uint64_t p1, const char *n1, uint64_t i1,
                    uint64_t p2, const char *n2, uint64_t i2)
{
    struct fsm_attr a1, a2, d1, d2;
    CK_TRY(fsmeta_getattr(m, i1, &a1));
    CK_TRY(fsmeta_getattr(m, i2, &a2));
    CK_TRY(fsmeta_relink(m, p1, n1, i2));
    CK_TRY(fsmeta_relink(m, p2, n2, i1));
    int64_t now = ck_now_ns();
    a1.ctime = a2.ctime = now;
    CK_TRY(fsmeta_setattr(m, &a1));
    CK_TRY(fsmeta_setattr(m, &a2));
    CK_TRY(get_dir(m, p1, &d1));
    int moved = (int)S_ISDIR(a2.mode) - (int)S_ISDIR(a1.mode); /* subdirs p1 gains */
    touch_dir(&d1, p1 == p2 ? 0 : moved);
    CK_TRY(fsmeta_setattr(m, &d1));
    if (p1 == p2) return 0;
    CK_TRY(get_dir(m, p2, &d2));
    touch_dir(&d2, -moved);
    return fsmeta_setattr(m, &d2);
}

/* Plain rename, replacing an existing destination; *victim gets its ino
** when its last link went. */
static int move(fsmeta *m, uint64_t p1, const char *n1, uint64_t i1, uint64_t p2,
                const char *n2, int have_dst, uint64_t i2, uint64_t *victim)
{
    struct fsm_attr a, d;
    CK_TRY(fsmeta_getattr(m, i1, &a));
    int dir = S_ISDIR(a.mode);
    if (have_dst) {
        /* remove_entry refuses a type mismatch (ENOTDIR / EISDIR / ENOTEMPTY). */
        uint32_t nlink;
        CK_TRY(remove_entry(m, p2, n2, dir, &i2, &nlink));
        if (nlink == 0) *victim = i2;
    }
    CK_TRY(fsmeta_move(m, p1, n1, p2, n2));
    a.ctime = ck_now_ns();
    CK_TRY(fsmeta_setattr(m, &a));
    CK_TRY(get_dir(m, p1, &d));
    touch_dir(&d, dir && p1 != p2 ? -1 : 0);
    CK_TRY(fsmeta_setattr(m, &d));
    if (p1 == p2) return 0;
    CK_TRY(get_dir(m, p2, &d));
    touch_dir(&d, dir ? 1 : 0);
    return fsmeta_setattr(m, &d);
}

static int do_rename(fsmeta *m, uint64_t p1, const char *n1, uint64_t p2, const char *n2,
                     unsigned flags, uint64_t *victim)
{
    uint64_t i1, i2 = 0;
    CK_TRY(fsmeta_lookup(m, p1, n1, &i1));
    int rc = fsmeta_lookup(m, p2, n2, &i2);
    if (rc < 0 && rc != -ENOENT) return rc;
    int have_dst = rc == 0;
    if (flags & RENAME_EXCHANGE) {
        if (!have_dst) return -ENOENT;
        return exchange(m, p1, n1, i1, p2, n2, i2);
    }
    if (have_dst && (flags & RENAME_NOREPLACE)) return -EEXIST;
    if (have_dst && i1 == i2) return 0; /* two links of one inode: POSIX no-op */
    return move(m, p1, n1, i1, p2, n2, have_dst, i2, victim);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    fsmeta *m = FS(req)->st->meta;
    uint64_t victim = 0;
    int rc = (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ? -EINVAL : 0;
    if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) rc = -EINVAL;
    if (rc == 0) rc = may_remove(parent, name);
    if (rc == 0) rc = may_remove(newparent, newname);
    if (rc == 0) rc = fsmeta_begin(m, 0);
    if (rc == 0) rc = fsmeta_end(m, do_rename(m, parent, name, newparent, newname, flags,
                                           &victim));
    if (rc == 0 && victim) maybe_reap(FS(req), victim);
    fuse_reply_err(req, -rc);
}

static int do_link(fsmeta *m, uint64_t ino, uint64_t parent, const char *name)
{
    struct fsm_attr a, d;
    CK_TRY(fsmeta_getattr(m, ino, &a));
    if (S_ISDIR(a.mode)) return -EPERM;
    if (a.nlink == 0) return -ENOENT;
    CK_TRY(get_dir(m, parent, &d));
    CK_TRY(fsmeta_link(m, parent, name, ino));
    a.nlink++;
    a.ctime = ck_now_ns();
    CK_TRY(fsmeta_setattr(m, &a));
    touch_dir(&d, 0);
    return fsmeta_setattr(m, &d);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    fsmeta *m = FS(req)->st->meta;
    int rc = view_ro(ino);
    if (rc == 0) rc = may_create(newparent, newname);
    if (rc == 0) rc = fsmeta_begin(m, 0);
    if (rc == 0) rc = fsmeta_end(m, do_link(m, ino, newparent, newname));
    if (rc < 0) fuse_reply_err(req, -rc); else reply_entry(req, ino);
}

static int writable(const struct fuse_file_info *fi)
{
    return (fi->flags & O_ACCMODE) != O_RDONLY;
}

/* Attach an open handle to the node of ino. */
/* A handle on ino for fi; created: ino was just made, empty (nothing to
** load from meta.db). */
static int open_node(struct fs *fs, uint64_t ino, struct fuse_file_info *fi, int created)
{
    struct handle *h = malloc(sizeof *h);
    struct node *n = h ? node_pin(fs->nodes, ino) : NULL;
    if (!n) {
        free(h);
        return -ENOMEM;
    }
    if (created) ingest_created(n);
    int w = writable(fi);
    /* Write-only handles (torch.save, safetensors) skip the page cache: the
    ** kernel then hands the writer's own pages to the daemon instead of
    ** first copying them into new cached pages, which cost the writer
    ** most of its time in the kernel. Nothing can mmap such a handle. */
    unsigned how = node_open(fs->nodes, n, w, fs->direct_writes && (fi->flags & O_ACCMODE) == O_WRONLY);
    int rc = w ? ingest_open_writer(fs->st, n) : 0;
    if (rc == 0 && (fi->flags & O_TRUNC) && w) rc = ingest_truncate(fs->st, n, 0);
    if (rc < 0) {
        node_open_undo(fs->nodes, n, w, how);
        free(h);
    } else {
        *h = (struct handle){n, w, how, 0};
        fi->fh = (uintptr_t)h;
        fi->direct_io = (how & NODE_DIRECT) != 0;
        /* cached pages stay unless direct writes may have outdated them */
        fi->keep_cache = (how & NODE_DROP) == 0;
    }
    unpin(fs, n);
    return rc;
}

/* A file of the history view: no handle, the page cache kept (it never changes). */
static void view_open(fuse_req_t req, uint64_t ino, struct fuse_file_info *fi)
{
    settle_all(FS(req));
    int rc = writable(fi) || (fi->flags & O_TRUNC) ? -EROFS : hview_open(FS(req)->view, ino);
    fi->fh = 0;
    fi->keep_cache = 1;
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_open(req, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (hview_owns(ino)) {
        view_open(req, ino, fi);
        return;
    }
    struct fsm_attr a;
    int rc = fsmeta_getattr(FS(req)->st->meta, ino, &a);
    if (rc == 0 && S_ISDIR(a.mode)) rc = -EISDIR;
    if (rc == 0) rc = open_node(FS(req), ino, fi, 0);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct fs *fs = FS(req);
    struct fsm_attr a;
    struct fuse_entry_param e;
    int rc = make_node(req, parent, name, S_IFREG | (mode & 07777), 0, NULL, &a);
    if (rc == 0) rc = made_entry(fs, &a, &e);
    if (rc == 0) {
        fi->flags &= ~O_TRUNC; /* new and empty already */
        rc = open_node(fs, a.ino, fi, 1);
    }
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_create(req, &e, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    uint8_t *buf = malloc(size ? size : 1);
    size_t got = 0;
    int rc = !buf ? -ENOMEM
             : hview_owns(ino) ? hview_read(FS(req)->view, ino, buf, size, (uint64_t)off, &got)
             : ingest_read(FS(req)->st, NODE(fi), buf, size, (uint64_t)off, &got);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_buf(req, (char *)buf, got);
    free(buf);
}

/* A write through a direct handle skips the kernel's own dropping of
** setuid and setgid (it does that for writes through its page cache):
** drop them here, at the handle's first write. */
static int drop_privs(fuse_req_t req, uint64_t ino)
{
    fsmeta *m = FS(req)->st->meta;
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(m, ino, &a));
    uint32_t kill = privs_to_kill(req, &a);
    if (!kill) return 0;
    a.mode &= ~kill;
    a.ctime = ck_now_ns();
    return fsmeta_setattr(m, &a);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
    struct fs *fs = FS(req);
    struct handle *h = HANDLE(fi);
    int rc = (h->how & NODE_DIRECT) && !h->wrote++ ? drop_privs(req, ino) : 0;
    if (rc == 0) rc = ingest_write(fs->st, h->n, buf, size, (uint64_t)off);
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* A reader opened beside this handle may hold pages of the range,
    ** read before the write reached us (kernels drop them before sending a
    ** direct write, or not at all): dropped before the write returns. */
    if ((h->how & NODE_DIRECT) && node_wrote_direct(fs->nodes, h->n))
        fuse_lowlevel_notify_inval_inode(fs->se, ino, off, (off_t)size);
    fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    /* close(2) waits for flush: errors met so far reach the writer here. */
    int rc = !hview_owns(ino) && HANDLE(fi)->writer ? ingest_flush(FS(req)->st, NODE(fi)) : 0;
    fuse_reply_err(req, -rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs *fs = FS(req);
    if (hview_owns(ino)) {
        fuse_reply_err(req, 0);
        return;
    }
    struct handle *h = HANDLE(fi);
    struct node *n = h->n;
    n = node_pin(fs->nodes, n->ino); /* keep it while the handle goes */
    if (node_close(fs->nodes, n, h->writer, h->how) == 0 && h->writer)
        ingest_commit(fs->st, n, 0, 1);
    free(h);
    unpin(fs, n);
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    fuse_reply_err(req, hview_owns(ino) ? 0 : -ingest_commit(FS(req)->st, NODE(fi), 1, 0));
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fsm_attr a;
    struct stat sb;
    int rc = !hview_owns(ino) ? get_dir(FS(req)->st->meta, ino, &a)
             : hview_getattr(FS(req)->view, ino, &sb) < 0 ? -ESTALE
             : S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
    fi->fh = 0;
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_open(req, fi);
}

struct dirbuf {
    fuse_req_t req;
    struct fs *fs;
    char *buf;
    size_t size, len;
    int plus;
};

/* Attributes of ino for a listing: a node's own (it may be being written),
** else what the listing's query found. */
static void listed_stat(struct fs *fs, const struct fsm_attr *listed, struct stat *sb)
{
    struct fsm_attr a = *listed;
    struct node *n = node_find(fs->nodes, listed->ino);
    if (n) {
        if (ingest_getattr(fs->st, n, &a) < 0) a = *listed;
        unpin(fs, n);
    }
    fill_stat(&a, sb);
}

/* Add one entry; returns 1 when the buffer is full. */
static int add_dirent(struct dirbuf *b, const char *name, const struct fsm_attr *a,
                      int64_t cookie)
{
    size_t room = b->size - b->len, need;
    int dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
    if (!b->plus) {
        struct stat sb = {.st_ino = a->ino, .st_mode = a->mode};
        need = fuse_add_direntry(b->req, b->buf + b->len, room, name, &sb, cookie);
    } else if (dots) {
        struct fuse_entry_param e = {.ino = a->ino};
        e.attr.st_ino = a->ino;
        e.attr.st_mode = S_IFDIR;
        need = fuse_add_direntry_plus(b->req, b->buf + b->len, room, name, &e, cookie);
    } else {
        struct fuse_entry_param e;
        memset(&e, 0, sizeof e);
        listed_stat(b->fs, a, &e.attr);
        e.ino = a->ino;
        e.attr_timeout = e.entry_timeout = b->fs->timeout;
        need = fuse_add_direntry_plus(b->req, b->buf + b->len, room, name, &e, cookie);
        if (need <= room && count_entry(b->fs, a->ino) < 0) return 1;
    }
    if (need > room) return 1;
    b->len += need;
    return 0;
}

/* Entries of a live directory, taken from fsmeta before their attributes:
** attributes of a node being written need its lock, which a commit holds
** while it waits for fsmeta's (lock order: node, then fsmeta). */
struct dents {
    fuse_req_t req;
    int plus;
    size_t room, n, cap;
    struct dent {
        struct fsm_attr a;
        int64_t cookie;
        char *name;
    } *v;
};

static int dent_cb(void *ctx, int64_t cookie, const char *name, const struct fsm_attr *a)
{
    struct dents *d = ctx;
    size_t need = d->plus ? fuse_add_direntry_plus(d->req, NULL, 0, name, NULL, 0)
                          : fuse_add_direntry(d->req, NULL, 0, name, NULL, 0);
    if (need > d->room) return 1;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 32;
        struct dent *v = realloc(d->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        d->v = v, d->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return -ENOMEM;
    d->v[d->n++] = (struct dent){*a, cookie + 2, copy};
    d->room -= need;
    return 0;
}

/* Entries of the live directory ino after off into b. */
static int live_readdir(struct dirbuf *b, uint64_t ino, off_t off)
{
    struct dents d = {b->req, b->plus, b->size - b->len, 0, 0, NULL};
    int rc = fsmeta_readdir(b->fs->st->meta, ino, off > 2 ? off - 2 : 0, dent_cb, &d);
    for (size_t i = 0; i < d.n; i++) {
        if (rc >= 0 && add_dirent(b, d.v[i].name, &d.v[i].a, d.v[i].cookie)) rc = 1;
        free(d.v[i].name);
    }
    free(d.v);
    return rc < 0 ? rc : 0;
}

/* An entry of the history view, its attributes given. */
static int view_dirent(void *ctx, const char *name, const struct stat *sb, uint64_t cookie)
{
    struct dirbuf *b = ctx;
    size_t room = b->size - b->len, need;
    if (b->plus) {
        struct fuse_entry_param e = {.ino = sb->st_ino, .attr = *sb};
        e.attr_timeout = e.entry_timeout = b->fs->timeout;
        need = fuse_add_direntry_plus(b->req, b->buf + b->len, room, name, &e, (off_t)cookie);
    } else {
        need = fuse_add_direntry(b->req, b->buf + b->len, room, name, sb, (off_t)cookie);
    }
    if (need > room) return 1;
    b->len += need;
    return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
    struct fs *fs = FS(req);
    struct dirbuf b = {req, fs, malloc(size), size, 0, plus};
    if (!b.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (hview_owns(ino)) {
        settle_all(fs);
        int rc = hview_readdir(fs->view, ino, (uint64_t)off, plus, view_dirent, &b);
        if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_buf(req, b.buf, b.len);
        free(b.buf);
        return;
    }
    uint64_t parent = ino;
    char name[NAME_MAX + 1];
    if (ino != FSMETA_ROOT_INO) fsmeta_name_of(fs->st->meta, ino, &parent, name, sizeof name);
    int full = 0, rc = 0;
    struct fsm_attr self = {.ino = ino, .mode = S_IFDIR}, up = {.ino = parent, .mode = S_IFDIR};
    if (off < 1) full = add_dirent(&b, ".", &self, 1);
    if (!full && off < 2) full = add_dirent(&b, "..", &up, 2);
    if (!full) rc = live_readdir(&b, ino, off);
    if (rc < 0) fuse_reply_err(req, -rc); else fuse_reply_buf(req, b.buf, b.len);
    free(b.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, 1);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
    (void)ino, (void)datasync, (void)fi;
    struct store *st = FS(req)->st;
    int rc = settle_all(FS(req)); /* `sync DIR`: every closed file committed */
    if (rc == 0) rc = fsmeta_sync(st->meta);
    int lost = __atomic_exchange_n(&st->lost, 0, __ATOMIC_ACQ_REL);
    if (rc == 0) rc = lost;
    fuse_reply_err(req, -rc);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    if (fstatvfs(FS(req)->st->dirfd, &sv) < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    sv.f_namemax = NAME_MAX;
    fuse_reply_statfs(req, &sv);
}

/* Which xattr namespaces we store; system.* (ACLs) is not supported. */
static int xattr_name_ok(fsmeta *m, uint64_t ino, const char *name)
{
    CK_TRY(view_ro(ino));
    if (history_is_xattr(name)) return -EPERM; /* computed, not stored */
    if (strncmp(name, "user.", 5) == 0) {
        struct fsm_attr a;
        CK_TRY(fsmeta_getattr(m, ino, &a));
        return S_ISREG(a.mode) || S_ISDIR(a.mode) ? 0 : -EPERM;
    }
    if (strncmp(name, "trusted.", 8) == 0 || strncmp(name, "security.", 9) == 0) return 0;
    return -EOPNOTSUPP;
}

static int touch_ctime(fsmeta *m, uint64_t ino)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(m, ino, &a));
    a.ctime = ck_now_ns();
    return fsmeta_setattr(m, &a);
}

/* A policy is stored in its canonical form, so getfattr shows every
** parameter and versions record what was applied. */
static int policy_value(const char *value, size_t size, char *buf)
{
    struct policy p;
    CK_TRY(policy_parse(value, size, &p));
    return policy_format(&p, buf, POLICY_TEXT_MAX);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        const char *value, size_t size, int flags)
{
    fsmeta *m = FS(req)->st->meta;
    int rc = xattr_name_ok(m, ino, name);
    int f = ((flags & XATTR_CREATE) ? FSMETA_XATTR_CREATE : 0) |
            ((flags & XATTR_REPLACE) ? FSMETA_XATTR_REPLACE : 0);
    char canon[POLICY_TEXT_MAX];
    if (rc == 0 && strcmp(name, POLICY_XATTR) == 0) {
        rc = policy_value(value, size, canon);
        if (rc >= 0) value = canon, size = (size_t)rc, rc = 0;
    }
    if (rc == 0) rc = fsmeta_begin(m, 0);
    if (rc == 0) {
        rc = fsmeta_xattr_set(m, ino, name, value, size, f);
        if (rc == 0) rc = touch_ctime(m, ino);
        rc = fsmeta_end(m, rc);
    }
    fuse_reply_err(req, -rc);
}

/* Reply to a get/list xattr call: size 0 asks for the length only. */
static void reply_xattr(fuse_req_t req, size_t size, int rc, const char *buf)
{
    if (rc < 0) fuse_reply_err(req, -rc);
    else if (size == 0) fuse_reply_xattr(req, (size_t)rc);
    else fuse_reply_buf(req, buf, (size_t)rc);
}

/* The version whose user.ckptfs.* a regular file shows; -ENODATA for others. */
static int shown_version(struct fs *fs, uint64_t ino, uint64_t *ver)
{
    if (hview_owns(ino)) return hview_version(fs->view, ino, ver) < 0 ? -ENODATA : 0;
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(fs->st->meta, ino, &a));
    if (!S_ISREG(a.mode)) return -ENODATA;
    struct fsm_version v;
    int rc = fsmeta_version_at(fs->st->meta, ino, FSM_SEQ_NOW, &v);
    *ver = rc == 0 ? v.id : 0;
    return rc == -ENOENT ? 0 : rc;
}

/* A file or directory without a policy of its own has the mount's. */
static int default_policy(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(fs->st->meta, ino, &a));
    if (!S_ISREG(a.mode) && !S_ISDIR(a.mode)) return -ENODATA;
    const char *p = fs->st->o.policy ? fs->st->o.policy : "lossless";
    size_t len = strlen(p);
    if (size == 0) return (int)len;
    if (len > size) return -ERANGE;
    memcpy(buf, p, len);
    return (int)len;
}

static int get_xattr(struct fs *fs, uint64_t ino, const char *name, char *buf, size_t size)
{
    uint64_t ver;
    if (history_is_xattr(name)) {
        struct node *n = hview_owns(ino) ? NULL : node_find(fs->nodes, ino);
        if (n) {
            ingest_settle(fs->st, n, NULL, 0); /* the version its writer closed */
            unpin(fs, n);
        }
        CK_TRY(shown_version(fs, ino, &ver));
        return history_xattr(fs->st->meta, ver, name, buf, size);
    }
    if (hview_owns(ino)) return -ENODATA;
    int rc = fsmeta_xattr_get(fs->st->meta, ino, name, buf, size);
    if (rc == -ENODATA && strcmp(name, POLICY_XATTR) == 0)
        return default_policy(fs, ino, buf, size);
    return rc;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    char *buf = size ? malloc(size) : NULL;
    int rc = size && !buf ? -ENOMEM : get_xattr(FS(req), ino, name, buf, size);
    reply_xattr(req, size, rc, buf);
    free(buf);
}

/* The stored names only. The computed user.ckptfs.* and the policy a file
** inherits from the mount are readable by name but not listed (as CephFS's
** ceph.* are): tools that copy what is listed (cp -a, rsync -X, tar
** --xattrs) would try to set them. A policy set on the file is stored. */
static int list_xattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
    if (hview_owns(ino)) return 0;
    return fsmeta_xattr_list(fs->st->meta, ino, buf, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    char *buf = size ? malloc(size) : NULL;
    int rc = size && !buf ? -ENOMEM : list_xattr(FS(req), ino, buf, size);
    reply_xattr(req, size, rc, buf);
    free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    fsmeta *m = FS(req)->st->meta;
    int rc = xattr_name_ok(m, ino, name);
    if (rc == 0) rc = fsmeta_begin(m, 0);
    if (rc == 0) {
        rc = fsmeta_xattr_remove(m, ino, name);
        if (rc == 0) rc = touch_ctime(m, ino);
        rc = fsmeta_end(m, rc);
    }
    fuse_reply_err(req, -rc);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct fsm_attr a;
    struct stat sb;
    int rc = hview_owns(ino) ? hview_getattr(FS(req)->view, ino, &sb)
                             : fsmeta_getattr(FS(req)->st->meta, ino, &a);
    if (rc == 0 && hview_owns(ino)) {
        a = (struct fsm_attr){.mode = sb.st_mode, .uid = sb.st_uid, .gid = sb.st_gid};
        if (mask & W_OK) rc = -EROFS;
    }
    const struct fuse_ctx *c = fuse_req_ctx(req);
    if (rc == 0 && mask != F_OK) {
        unsigned bits;
        if (c->uid == 0)
            bits = 06 | ((a.mode & 0111) || S_ISDIR(a.mode) ? 01 : 0);
        else if (c->uid == a.uid)
            bits = (a.mode >> 6) & 7;
        else if (in_group(req, a.gid))
            bits = (a.mode >> 3) & 7;
        else
            bits = a.mode & 7;
        if ((unsigned)mask & ~bits & 7) rc = -EACCES;
    }
    fuse_reply_err(req, -rc);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
    (void)ino;
    struct fs *fs = FS(req);
    int rc = 0;
    if (mode & ~FALLOC_FL_KEEP_SIZE) rc = -EOPNOTSUPP;
    else if (off < 0 || len <= 0) rc = -EINVAL;
    struct stat sb;
    if (rc == 0) rc = get_stat(fs, ino, &sb);
    /* Storage is allocated on write (compressed), so nothing is reserved;
    ** but a range past the end that could not be written uncompressed now
    ** is refused, as a filesystem that reserves would. */
    uint64_t end = (uint64_t)off + (uint64_t)len, size = (uint64_t)sb.st_size;
    if (rc == 0 && end > size) rc = store_space(fs->st, end - CK_MAX(size, (uint64_t)off));
    if (rc == 0 && !(mode & FALLOC_FL_KEEP_SIZE) && end > size)
        rc = ingest_truncate(fs->st, NODE(fi), end);
    fuse_reply_err(req, -rc);
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = op_init,
    .destroy = op_destroy,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .symlink = op_symlink,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .create = op_create,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .access = op_access,
    .fallocate = op_fallocate,
};

/* Link a recovered body whose inode is gone under /lost+found. */
static int lost_found(struct fs *fs, uint64_t *ino)
{
    fsmeta *m = fs->st->meta;
    uint64_t dir;
    int64_t now = ck_now_ns();
    char name[32];
    snprintf(name, sizeof name, "recovered-%lld", (long long)now);
    CK_TRY(fsmeta_begin(m, 0));
    int rc = fsmeta_lookup(m, FSMETA_ROOT_INO, "lost+found", &dir);
    struct fsm_attr a = {.uid = 0, .gid = 0, .atime = now, .mtime = now, .ctime = now};
    struct fsm_attr root;
    if (rc == -ENOENT) {
        a.mode = S_IFDIR | 0700;
        a.nlink = 2;
        rc = fsmeta_mkinode(m, &a, NULL, 0);
        if (rc == 0) rc = fsmeta_link(m, FSMETA_ROOT_INO, "lost+found", dir = a.ino);
        if (rc == 0) rc = fsmeta_getattr(m, FSMETA_ROOT_INO, &root);
        touch_dir(&root, 1);
        if (rc == 0) rc = fsmeta_setattr(m, &root);
    }
    a.mode = S_IFREG | 0600;
    a.nlink = 1;
    if (rc == 0) rc = fsmeta_mkinode(m, &a, NULL, 0);
    if (rc == 0) rc = fsmeta_link(m, dir, name, a.ino);
    CK_TRY(fsmeta_end(m, rc));
    *ino = a.ino;
    return 0;
}

static int recover_one(struct fs *fs, uint64_t ino)
{
    int fd = store_stage_open(fs->st, ino, 0);
    if (fd < 0) return fd;
    struct fsm_attr a;
    uint64_t target = ino;
    if (fsmeta_getattr(fs->st->meta, ino, &a) < 0 || a.nlink == 0 || !S_ISREG(a.mode)) {
        int rc = lost_found(fs, &target);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        ck_log(CK_LOG_WARN, "staging body of deleted inode %llu moved to /lost+found",
               (unsigned long long)ino);
    }
    struct node *n = node_pin(fs->nodes, target);
    if (!n) {
        close(fd);
        return -ENOMEM;
    }
    int rc = ingest_adopt_stage(fs->st, n, fd);
    if (rc == 0 && target != ino) store_stage_remove(fs->st, ino);
    unpin(fs, n);
    return rc;
}

int fs_recover(struct fs *fs)
{
    int dfd = dup(fs->st->stagefd);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) return -errno;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        unsigned long long ino = strtoull(e->d_name, &end, 10);
        if (e->d_name[0] == '.' || *end) continue;
        int r = recover_one(fs, ino);
        ck_log(r < 0 ? CK_LOG_ERR : CK_LOG_INFO, "recovering staged inode %llu: %s", ino,
               r < 0 ? strerror(-r) : "done");
        if (r < 0 && rc == 0) rc = r;
    }
    closedir(d);
    uint64_t purged;
    int r = fsmeta_purge_orphans(fs->st->meta, &purged);
    return rc < 0 ? rc : r;
}

void fs_content_changed(struct fs *fs, uint64_t ino)
{
    struct node *n = node_find(fs->nodes, ino);
    if (!n) return;
    ingest_reload(n);
    unpin(fs, n);
}
