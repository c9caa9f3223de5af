/*
** vfs_view.c: the history view's operations (see vfs.h, hview.h).
**
** Reads go to hview, after paying the owed commits of closed files so the
** view shows what writers have closed; every change fails with EROFS.
** Files are opened without a handle and keep the kernel's page cache: a
** version never changes.
*/
#include "vfs_int.h"
#include "common.h"
#include "history.h"

#include <fcntl.h>
#include <unistd.h>

int vfs_view_lookup(vfs *v, uint64_t parent, const char *name, struct stat *out)
{
    ingest_settle_all(&v->ig, NULL, 0);
    return hview_lookup(v->view, parent, name, out);
}

static void view_forget(vfs *v, uint64_t ino, uint64_t nlookup)
{
    hview_forget(v->view, ino, nlookup);
}

static int view_getattr(vfs *v, uint64_t ino, struct stat *out)
{
    return hview_getattr(v->view, ino, out);
}

static int view_readlink(vfs *v, uint64_t ino, char *buf, size_t cap)
{
    size_t len;
    CK_TRY(hview_readlink(v->view, ino, buf, cap, &len));
    buf[len] = 0;
    return 0;
}

static int view_open(vfs *v, uint64_t ino, int flags, struct vfs_open *o)
{
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) return -EROFS;
    ingest_settle_all(&v->ig, NULL, 0);
    CK_TRY(hview_open(v->view, ino));
    *o = (struct vfs_open){NULL, 0, 1};
    return 0;
}

static int view_read(vfs *v, uint64_t ino, struct vfs_file *f, void *buf, size_t len,
                     uint64_t off, struct store_iov *out)
{
    size_t got = 0;
    CK_TRY(hview_read(v->view, ino, buf, len, off, &got));
    store_iov_buf(out, buf, got);
    return 0;
}

static int view_flush(vfs *v, struct vfs_file *f) { return 0; }
static void view_release(vfs *v, struct vfs_file *f) {}
static int view_fsync(vfs *v, struct vfs_file *f) { return 0; }

static int view_opendir(vfs *v, uint64_t ino)
{
    struct stat sb;
    if (hview_getattr(v->view, ino, &sb) < 0) return -ESTALE;
    return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

static int view_dirent(void *ctx, const char *name, const struct stat *sb, uint64_t cookie)
{
    const struct vfs_dirsink *s = ctx;
    return s->add(s->ctx, name, sb, (off_t)cookie);
}

static int view_readdir(vfs *v, uint64_t ino, off_t off, const struct vfs_dirsink *s)
{
    ingest_settle_all(&v->ig, NULL, 0);
    return hview_readdir(v->view, ino, (uint64_t)off, s->plus, view_dirent, (void *)s);
}

/* Only the computed user.ckptfs.* of the version a file shows; names the
** live tree could not store are unsupported here too. */
static int view_getxattr(vfs *v, uint64_t ino, const char *name, char *buf, size_t size)
{
    uint64_t ver;
    CK_TRY(vfs_xattr_supported(name));
    if (!history_is_xattr(name) || hview_version(v->view, ino, &ver) < 0) return -ENODATA;
    return history_xattr(v->st->meta, ver, name, buf, size);
}

static int view_listxattr(vfs *v, uint64_t ino, char *buf, size_t size) { return 0; }

static int view_access(vfs *v, const struct cred *c, uint64_t ino, int mask)
{
    struct stat sb;
    CK_TRY(hview_getattr(v->view, ino, &sb));
    if (mask & W_OK) return -EROFS;
    struct perm_obj o = {sb.st_mode, sb.st_uid, sb.st_gid};
    return perm_access(c, &o, mask);
}

/* Every change: one refusal per signature. */
static int ro_setattr(vfs *v, const struct cred *c, uint64_t ino, const struct stat *sb,
                      int to_set, struct stat *out) { return -EROFS; }
static int ro_mknod(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                    mode_t mode, dev_t rdev, const char *target, struct stat *out)
{
    return -EROFS;
}
static int ro_remove(vfs *v, uint64_t parent, const char *name, int dir) { return -EROFS; }
static int ro_rename(vfs *v, uint64_t p1, const char *n1, uint64_t p2, const char *n2,
                     unsigned flags) { return -EROFS; }
static int ro_link(vfs *v, uint64_t ino, uint64_t parent, const char *name, struct stat *out)
{
    return -EROFS;
}
static int ro_create(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                     mode_t mode, int flags, struct stat *out, struct vfs_open *o)
{
    return -EROFS;
}
static int ro_write(vfs *v, const struct cred *c, uint64_t ino, struct vfs_file *f,
                    const void *buf, size_t len, uint64_t off, int *inval) { return -EROFS; }
static int ro_fallocate(vfs *v, uint64_t ino, struct vfs_file *f, int mode, uint64_t off,
                        uint64_t len) { return -EROFS; }
static int ro_setxattr(vfs *v, uint64_t ino, const char *name, const char *value, size_t size,
                       int flags) { return -EROFS; }
static int ro_removexattr(vfs *v, uint64_t ino, const char *name) { return -EROFS; }

const struct vfs_ops vfs_view_ops = {
    .lookup = vfs_view_lookup,
    .forget = view_forget,
    .getattr = view_getattr,
    .setattr = ro_setattr,
    .readlink = view_readlink,
    .mknod = ro_mknod,
    .remove = ro_remove,
    .rename = ro_rename,
    .link = ro_link,
    .open = view_open,
    .create = ro_create,
    .read = view_read,
    .write = ro_write,
    .flush = view_flush,
    .release = view_release,
    .fsync = view_fsync,
    .fallocate = ro_fallocate,
    .opendir = view_opendir,
    .readdir = view_readdir,
    .setxattr = ro_setxattr,
    .getxattr = view_getxattr,
    .listxattr = view_listxattr,
    .removexattr = ro_removexattr,
    .access = view_access,
};
