/*
** vfs_int.h: what the files of the filesystem core share (vfs.h).
**
**   vfs.c          the vfs object, the operations tables, whole-mount calls
**   vfs_ns.c       the live tree's names: lookup, create, remove, rename,
**                  link, setattr
**   vfs_dir.c      listings of the live tree
**   vfs_xattr.c    extended attributes and access(2) of the live tree
**   vfs_file.c     open handles of live files: read, write, commit points
**   vfs_view.c     the history view's operations (read-only)
**   vfs_recover.c  file bodies a crash left in staging
**   vfs_node.c     inode references and attributes, for all of the above
*/
#ifndef CKPT_VFS_INT_H
#define CKPT_VFS_INT_H

#include "vfs.h"
#include "hview.h"
#include "ingest.h"
#include "node.h"

struct vfs {
    struct store *st;
    node_table *nodes;
    hview *view;
    struct ingest ig; /* the write side: file content, commits */
    struct vfs_opts o;
    struct vfs_reaps {  /* unlinked inodes forgotten, to delete (vfs_reap_later) */
        pthread_mutex_t mu;
        uint64_t ino[VFS_REAP_BATCH];
        size_t n;
        int later;
    } reaps;
};

/* vfs_node.c. Delete an unlinked inode once nothing refers to it (the node
** table's gone hook, ctx the vfs): at once, or queued for vfs_reap_pending. */
void vfs_reap(void *ctx, uint64_t ino);
/* After a link count dropped to 0: delete now unless still referenced. */
void vfs_maybe_reap(vfs *v, uint64_t ino);
/* Count a new kernel reference to ino (an entry replied). */
int vfs_count_entry(vfs *v, uint64_t ino);
/* Attributes of a live inode, including writes not yet committed. */
int vfs_get_attr(vfs *v, uint64_t ino, struct fsm_attr *a);
void vfs_fill_stat(const struct fsm_attr *a, struct stat *sb);
int vfs_get_stat(vfs *v, uint64_t ino, struct stat *sb);
/* The directory update a change of its entries makes. */
void vfs_touch_dir(struct fsm_attr *d, int dlink);
int vfs_get_dir(fsmeta *m, uint64_t ino, struct fsm_attr *d);

/* vfs_ns.c: the live tree's names (see struct vfs_ops) */
int vfs_ns_lookup(vfs *v, uint64_t parent, const char *name, struct stat *out);
void vfs_ns_forget(vfs *v, uint64_t ino, uint64_t nlookup);
int vfs_ns_setattr(vfs *v, const struct cred *c, uint64_t ino, const struct stat *sb,
                   int to_set, struct stat *out);
int vfs_ns_readlink(vfs *v, uint64_t ino, char *buf, size_t cap);
int vfs_ns_mknod(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                 mode_t mode, dev_t rdev, const char *target, struct stat *out);
int vfs_ns_create(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                  mode_t mode, int flags, struct stat *out, struct vfs_open *o);
int vfs_ns_remove(vfs *v, uint64_t parent, const char *name, int dir);
int vfs_ns_rename(vfs *v, uint64_t p1, const char *n1, uint64_t p2, const char *n2,
                  unsigned flags);
int vfs_ns_link(vfs *v, uint64_t ino, uint64_t parent, const char *name, struct stat *out);
int vfs_ns_open(vfs *v, uint64_t ino, int flags, struct vfs_open *o);

/* vfs_view.c: ".ckptfs" looked up in the live root enters the view */
int vfs_view_lookup(vfs *v, uint64_t parent, const char *name, struct stat *out);

/* vfs_file.c: a handle on live file ino (created: just made, empty). */
int vfs_file_open(vfs *v, uint64_t ino, int flags, int created, struct vfs_open *o);
int vfs_file_read(vfs *v, uint64_t ino, struct vfs_file *f, void *buf, size_t len,
                  uint64_t off, struct store_iov *out);
int vfs_file_write(vfs *v, const struct cred *c, uint64_t ino, struct vfs_file *f,
                   const void *buf, size_t len, uint64_t off, int *inval);
int vfs_file_flush(vfs *v, struct vfs_file *f);
void vfs_file_release(vfs *v, struct vfs_file *f);
int vfs_file_fsync(vfs *v, struct vfs_file *f);
int vfs_file_fallocate(vfs *v, uint64_t ino, struct vfs_file *f, int mode, uint64_t off,
                       uint64_t len);
/* truncate outside a handle (setattr): committed at once if no writer is open */
int vfs_file_set_size(vfs *v, uint64_t ino, uint64_t size);

/* vfs_dir.c: listings of the live tree */
int vfs_dir_open(vfs *v, uint64_t ino);
int vfs_dir_read(vfs *v, uint64_t ino, off_t off, const struct vfs_dirsink *s);

/* vfs_xattr.c: extended attributes and access(2) of live inodes */
int vfs_xattr_set(vfs *v, uint64_t ino, const char *name, const char *value, size_t size,
                  int flags);
int vfs_xattr_get(vfs *v, uint64_t ino, const char *name, char *buf, size_t size);
int vfs_xattr_list(vfs *v, uint64_t ino, char *buf, size_t size);
int vfs_xattr_remove(vfs *v, uint64_t ino, const char *name);
int vfs_access(vfs *v, const struct cred *c, uint64_t ino, int mask);

extern const struct vfs_ops vfs_live_ops, vfs_view_ops;

#endif
