/*
** vfs.h: the filesystem core under the FUSE adapter (fs.c).
**
** A vfs owns what a mounted store is as a filesystem: the table of
** in-memory inodes (node.h) with the kernel's references to them, open
** handles, the permission rules the daemon enforces (perm.h), the
** semantics of create, rename, link and remove, extended attributes, and
** the recovery of file bodies a crash left in staging. It speaks no FUSE:
** every call returns 0 or a negative errno and fills plain structures, so
** it runs, and is tested, without a mount.
**
** Inodes come in two classes, each with its own operations table: the live
** tree (metadata in fsmeta, content through ingest) and the read-only
** history view under .ckptfs (hview.h), whose changes all fail with EROFS.
** vfs_ops_of(ino) picks the table from the inode number alone (hview.h
** gives view inodes numbers above HVIEW_INO_MIN). Operations on a name pick
** by the directory: the live root's lookup of ".ckptfs" enters the view.
**
** References: every entry a lookup, create, mknod or link returns, and every
** entry a readdir with plus hands out, counts one kernel reference; forget
** gives them back. An inode unlinked while referenced or open is deleted
** when the last reference goes.
*/
#ifndef CKPT_VFS_H
#define CKPT_VFS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "perm.h"
#include "store.h"

typedef struct vfs vfs;
struct vfs_file; /* an open handle of a live file (vfs_file.c) */

struct vfs_opts {
    int direct_writes; /* write-only handles bypass the kernel's page cache */
};

int vfs_create(struct store *st, const struct vfs_opts *o, vfs **out);
void vfs_destroy(vfs *v);

/* An unlinked inode the kernel forgets is deleted from the metadata. With
** vfs_reap_later on, that waits in a queue of up to VFS_REAP_BATCH for
** vfs_reap_pending (the group committer's tick), which deletes the batch in
** one transaction: rm of many files then pays one transaction per file,
** not two, on its way. Off, it drains the queue and deletes at once from
** then on. A crash loses only the queue: the next mount purges inodes left
** with no link. */
#define VFS_REAP_BATCH 256
void vfs_reap_later(vfs *v, int on);
void vfs_reap_pending(void *v);
/* Bring back file bodies a crash left in STORE/staging (before serving). */
int vfs_recover(vfs *v);
/* At unmount: commit every file with pending writes. */
void vfs_commit_all(vfs *v);
/* The committed content of ino was rewritten in the store (recode.h):
** forget what is cached of it (the kernel's pages are the caller's). */
void vfs_content_changed(vfs *v, uint64_t ino);
/* `sync DIR`: every closed file committed, meta.db durable; reports once a
** write-behind commit that failed since the last call. */
int vfs_sync(vfs *v);
int vfs_statfs(vfs *v, struct statvfs *sv);

/* How the kernel should cache a handle just opened. */
struct vfs_open {
    struct vfs_file *fh; /* NULL for files of the history view */
    int direct_io;       /* bypass the page cache */
    int keep_cache;      /* the kernel's cached pages are still the file's */
};

/* A listing's destination: room() bytes are left, need(name) is what an
** entry takes, add() appends one and returns 1 when it does not fit. */
struct vfs_dirsink {
    void *ctx;
    int plus; /* entries carry attributes and count kernel references */
    size_t (*room)(void *ctx);
    size_t (*need)(void *ctx, const char *name);
    int (*add)(void *ctx, const char *name, const struct stat *sb, off_t cookie);
};

/* What setattr changes: PERM_SET_* and these (the values of FUSE_SET_ATTR_*). */
#define VFS_SET_SIZE (1 << 3)
#define VFS_SET_ATIME (1 << 4)
#define VFS_SET_MTIME (1 << 5)
#define VFS_SET_ATIME_NOW (1 << 7)
#define VFS_SET_MTIME_NOW (1 << 8)
#define VFS_SET_CTIME (1 << 10)

/* rename flags (renameat2) */
#define VFS_RENAME_NOREPLACE (1 << 0)
#define VFS_RENAME_EXCHANGE (1 << 1)

struct vfs_ops {
    int (*lookup)(vfs *v, uint64_t parent, const char *name, struct stat *out);
    void (*forget)(vfs *v, uint64_t ino, uint64_t nlookup);
    int (*getattr)(vfs *v, uint64_t ino, struct stat *out);
    /* out: the attributes after the change */
    int (*setattr)(vfs *v, const struct cred *c, uint64_t ino, const struct stat *sb,
                   int to_set, struct stat *out);
    /* buf holds cap + 1 bytes; the target comes back NUL-terminated */
    int (*readlink)(vfs *v, uint64_t ino, char *buf, size_t cap);
    /* mknod, mkdir (S_IFDIR in mode) and symlink (target set) */
    int (*mknod)(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                 mode_t mode, dev_t rdev, const char *target, struct stat *out);
    int (*remove)(vfs *v, uint64_t parent, const char *name, int dir);
    int (*rename)(vfs *v, uint64_t p1, const char *n1, uint64_t p2, const char *n2,
                  unsigned flags);
    int (*link)(vfs *v, uint64_t ino, uint64_t parent, const char *name, struct stat *out);
    int (*open)(vfs *v, uint64_t ino, int flags, struct vfs_open *o);
    int (*create)(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                  mode_t mode, int flags, struct stat *out, struct vfs_open *o);
    /* up to len bytes at off (short only at end of file) as out's pieces
    ** (store.h): in buf, or pinned where they are cached; the caller
    ** replies from them, then calls store_iov_release */
    int (*read)(vfs *v, uint64_t ino, struct vfs_file *f, void *buf, size_t len,
                uint64_t off, struct store_iov *out);
    /* *inval: other handles may cache pages of the range; the kernel must
    ** drop them before the write returns */
    int (*write)(vfs *v, const struct cred *c, uint64_t ino, struct vfs_file *f,
                 const void *buf, size_t len, uint64_t off, int *inval);
    int (*flush)(vfs *v, struct vfs_file *f);
    void (*release)(vfs *v, struct vfs_file *f);
    int (*fsync)(vfs *v, struct vfs_file *f);
    int (*fallocate)(vfs *v, uint64_t ino, struct vfs_file *f, int mode, uint64_t off,
                     uint64_t len);
    int (*opendir)(vfs *v, uint64_t ino);
    int (*readdir)(vfs *v, uint64_t ino, off_t off, const struct vfs_dirsink *s);
    int (*setxattr)(vfs *v, uint64_t ino, const char *name, const char *value, size_t size,
                    int flags);
    /* size 0 asks for the length; returns the length or -errno */
    int (*getxattr)(vfs *v, uint64_t ino, const char *name, char *buf, size_t size);
    int (*listxattr)(vfs *v, uint64_t ino, char *buf, size_t size);
    int (*removexattr)(vfs *v, uint64_t ino, const char *name);
    int (*access)(vfs *v, const struct cred *c, uint64_t ino, int mask);
};

/* setxattr flags */
#define VFS_XATTR_CREATE 1
#define VFS_XATTR_REPLACE 2

/* 0 if an extended attribute called name can be stored, else -EOPNOTSUPP,
** for reads as for writes: user.*, trusted.* and security.* but not
** system.* (ACLs) nor security.selinux (SELinux labels a FUSE mount as a
** whole). EOPNOTSUPP, not ENODATA, is what lets ls -l stop asking after the
** first file (coreutils remembers it per filesystem). tests/fuse_null
** answers by it too. */
static inline int vfs_xattr_supported(const char *name)
{
    if (strncmp(name, "user.", 5) == 0 || strncmp(name, "trusted.", 8) == 0) return 0;
    if (strncmp(name, "security.", 9) == 0 && strcmp(name + 9, "selinux") != 0) return 0;
    return -EOPNOTSUPP;
}

const struct vfs_ops *vfs_ops_of(uint64_t ino);

#endif
