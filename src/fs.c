/*
** fs.c: the FUSE adapter (see fs.h): each request becomes one call of the
** filesystem core (vfs.h), chosen by the inode's operations table, and the
** result becomes the reply. The only state here is the kernel's: timeouts,
** the session for notifications, the mount's readahead.
*/
#include "fs.h"
#include "common.h"
#include "scratch.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#define FS(req) ((struct fs *)fuse_req_userdata(req))
#define OPS(ino) vfs_ops_of(ino)

static_assert(PERM_SET_MODE == FUSE_SET_ATTR_MODE && PERM_SET_UID == FUSE_SET_ATTR_UID &&
              PERM_SET_GID == FUSE_SET_ATTR_GID && VFS_SET_SIZE == FUSE_SET_ATTR_SIZE &&
              VFS_SET_ATIME == FUSE_SET_ATTR_ATIME && VFS_SET_MTIME == FUSE_SET_ATTR_MTIME &&
              VFS_SET_ATIME_NOW == FUSE_SET_ATTR_ATIME_NOW &&
              VFS_SET_MTIME_NOW == FUSE_SET_ATTR_MTIME_NOW &&
              VFS_SET_CTIME == FUSE_SET_ATTR_CTIME, "setattr flags are FUSE's");

static int req_groups(void *ctx, gid_t *list, int cap)
{
    return fuse_req_getgroups(ctx, cap, list);
}

static struct cred cred_of(fuse_req_t req)
{
    const struct fuse_ctx *c = fuse_req_ctx(req);
    return (struct cred){c->uid, c->gid, req_groups, req};
}

static void reply_rc(fuse_req_t req, int rc) { fuse_reply_err(req, -rc); }

static void fill_entry(struct fs *fs, const struct stat *sb, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    e->ino = sb->st_ino;
    e->attr = *sb;
    e->attr_timeout = e->entry_timeout = fs->timeout;
}

static void reply_entry(fuse_req_t req, int rc, const struct stat *sb)
{
    struct fuse_entry_param e;
    if (rc < 0) {
        reply_rc(req, rc);
        return;
    }
    fill_entry(FS(req), sb, &e);
    fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, int rc, const struct stat *sb)
{
    if (rc < 0) reply_rc(req, rc); else fuse_reply_attr(req, sb, FS(req)->timeout);
}

static void set_open(struct fuse_file_info *fi, const struct vfs_open *o)
{
    fi->fh = (uintptr_t)o->fh;
    fi->direct_io = o->direct_io;
    fi->keep_cache = o->keep_cache;
}

#define FH(fi) ((struct vfs_file *)(uintptr_t)(fi)->fh)

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

static void op_destroy(void *userdata) { vfs_commit_all(((struct fs *)userdata)->v); }

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

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct stat sb;
    tune_once(FS(req));
    reply_entry(req, OPS(parent)->lookup(FS(req)->v, parent, name, &sb), &sb);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    OPS(ino)->forget(FS(req)->v, ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
    for (size_t i = 0; i < count; i++) OPS(f[i].ino)->forget(FS(req)->v, f[i].ino, f[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat sb;
    tune_once(FS(req));
    reply_attr(req, OPS(ino)->getattr(FS(req)->v, ino, &sb), &sb);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    struct stat sb;
    struct cred c = cred_of(req);
    reply_attr(req, OPS(ino)->setattr(FS(req)->v, &c, ino, attr, to_set, &sb), &sb);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char buf[PATH_MAX + 1];
    int rc = OPS(ino)->readlink(FS(req)->v, ino, buf, PATH_MAX);
    if (rc < 0) reply_rc(req, rc); else fuse_reply_readlink(req, buf);
}

static void make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
                 const char *target)
{
    struct stat sb;
    struct cred c = cred_of(req);
    reply_entry(req, OPS(parent)->mknod(FS(req)->v, &c, parent, name, mode, rdev, target, &sb),
                &sb);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    make(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    make(req, parent, name, S_IFLNK | 0777, 0, link);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    reply_rc(req, OPS(parent)->remove(FS(req)->v, parent, name, 0));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    reply_rc(req, OPS(parent)->remove(FS(req)->v, parent, name, 1));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    reply_rc(req, OPS(parent)->rename(FS(req)->v, parent, name, newparent, newname, flags));
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    struct stat sb;
    reply_entry(req, OPS(newparent)->link(FS(req)->v, ino, newparent, newname, &sb), &sb);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct vfs_open o;
    int rc = OPS(ino)->open(FS(req)->v, ino, fi->flags, &o);
    if (rc < 0) {
        reply_rc(req, rc);
        return;
    }
    set_open(fi, &o);
    fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct stat sb;
    struct vfs_open o;
    struct cred c = cred_of(req);
    int rc = OPS(parent)->create(FS(req)->v, &c, parent, name, mode, fi->flags, &sb, &o);
    if (rc < 0) {
        reply_rc(req, rc);
        return;
    }
    struct fuse_entry_param e;
    fill_entry(FS(req), &sb, &e);
    set_open(fi, &o);
    fuse_reply_create(req, &e, fi);
}

/* The reply goes out of a buffer the thread keeps: a fresh 1 MiB one per
** request would be fresh pages, faulted in and zeroed each time. */
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    uint8_t *buf = scratch_get(SCRATCH_FUSE_READ, size ? size : 1);
    struct store_iov r;
    int rc = !buf ? -ENOMEM
                  : OPS(ino)->read(FS(req)->v, ino, FH(fi), buf, size, (uint64_t)off, &r);
    if (rc < 0) {
        reply_rc(req, rc);
        return;
    }
    fuse_reply_iov(req, r.v, r.n); /* from the cache where the bytes are: no copy */
    store_iov_release(&r);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
    struct cred c = cred_of(req);
    int inval = 0;
    int rc = OPS(ino)->write(FS(req)->v, &c, ino, FH(fi), buf, size, (uint64_t)off, &inval);
    if (rc < 0) {
        reply_rc(req, rc);
        return;
    }
    if (inval) fuse_lowlevel_notify_inval_inode(FS(req)->se, ino, off, (off_t)size);
    fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    reply_rc(req, OPS(ino)->flush(FS(req)->v, FH(fi)));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    OPS(ino)->release(FS(req)->v, FH(fi));
    reply_rc(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    reply_rc(req, OPS(ino)->fsync(FS(req)->v, FH(fi)));
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
    int rc = off < 0 || len <= 0 ? -EINVAL
             : OPS(ino)->fallocate(FS(req)->v, ino, FH(fi), mode, (uint64_t)off, (uint64_t)len);
    reply_rc(req, rc);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int rc = OPS(ino)->opendir(FS(req)->v, ino);
    fi->fh = 0;
    if (rc < 0) reply_rc(req, rc); else fuse_reply_open(req, fi);
}

/* A listing reply being filled (vfs_dirsink). */
struct dirbuf {
    fuse_req_t req;
    struct fs *fs;
    char *buf;
    size_t size, len;
    int plus;
};

static size_t dir_room(void *ctx)
{
    struct dirbuf *b = ctx;
    return b->size - b->len;
}

static size_t dir_need(void *ctx, const char *name)
{
    struct dirbuf *b = ctx;
    return b->plus ? fuse_add_direntry_plus(b->req, NULL, 0, name, NULL, 0)
                   : fuse_add_direntry(b->req, NULL, 0, name, NULL, 0);
}

static int dir_add(void *ctx, const char *name, const struct stat *sb, off_t cookie)
{
    struct dirbuf *b = ctx;
    size_t room = b->size - b->len, need;
    if (b->plus) {
        struct fuse_entry_param e;
        fill_entry(b->fs, sb, &e);
        need = fuse_add_direntry_plus(b->req, b->buf + b->len, room, name, &e, cookie);
    } else {
        need = fuse_add_direntry(b->req, b->buf + b->len, room, name, sb, cookie);
    }
    if (need > room) return 1;
    b->len += need;
    return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
    struct dirbuf b = {req, FS(req), malloc(size), size, 0, plus};
    struct vfs_dirsink s = {&b, plus, dir_room, dir_need, dir_add};
    int rc = !b.buf ? -ENOMEM : OPS(ino)->readdir(FS(req)->v, ino, off, &s);
    if (rc < 0) reply_rc(req, rc); else fuse_reply_buf(req, b.buf, b.len);
    free(b.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, 1);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
    reply_rc(req, vfs_sync(FS(req)->v));
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs sv;
    int rc = vfs_statfs(FS(req)->v, &sv);
    if (rc < 0) reply_rc(req, rc); else fuse_reply_statfs(req, &sv);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        const char *value, size_t size, int flags)
{
    int f = ((flags & XATTR_CREATE) ? VFS_XATTR_CREATE : 0) |
            ((flags & XATTR_REPLACE) ? VFS_XATTR_REPLACE : 0);
    reply_rc(req, OPS(ino)->setxattr(FS(req)->v, ino, name, value, size, f));
}

/* Reply to a get/list xattr call: size 0 asks for the length only. */
static void reply_xattr(fuse_req_t req, size_t size, int rc, const char *buf)
{
    if (rc < 0) reply_rc(req, rc);
    else if (size == 0) fuse_reply_xattr(req, (size_t)rc);
    else fuse_reply_buf(req, buf, (size_t)rc);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    char *buf = size ? malloc(size) : NULL;
    int rc = size && !buf ? -ENOMEM : OPS(ino)->getxattr(FS(req)->v, ino, name, buf, size);
    reply_xattr(req, size, rc, buf);
    free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    char *buf = size ? malloc(size) : NULL;
    int rc = size && !buf ? -ENOMEM : OPS(ino)->listxattr(FS(req)->v, ino, buf, size);
    reply_xattr(req, size, rc, buf);
    free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    reply_rc(req, OPS(ino)->removexattr(FS(req)->v, ino, name));
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct cred c = cred_of(req);
    reply_rc(req, OPS(ino)->access(FS(req)->v, &c, ino, mask));
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
