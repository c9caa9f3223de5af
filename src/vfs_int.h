/*
** vfs_int.h: what the files of the filesystem core share (vfs.h).
**
**   vfs.c          the vfs object, inode references, attributes, settling
**   vfs_ns.c       the live tree's names: lookup, create, remove, rename,
**                  link, setattr; its operations table
**   vfs_dir.c      listings of the live tree
**   vfs_xattr.c    extended attributes and access(2) of the live tree
**   vfs_file.c     open handles of live files: read, write, commit points
**   vfs_view.c     the history view's operations (read-only)
**   vfs_recover.c  file bodies a crash left in staging
*/
#ifndef CKPT_VFS_INT_H
#define CKPT_VFS_INT_H

#include "vfs.h"
#include "hview.h"
#include "node.h"

struct vfs {
    struct store *st;
    node_table *nodes;
    hview *view;
    struct vfs_opts o;
};

/* Drop a pin of n; an unlinked inode whose last reference went is deleted. */
void vfs_unpin(vfs *v, struct node *n);
/* After a link count dropped to 0: delete now unless still referenced. */
void vfs_maybe_reap(vfs *v, uint64_t ino);
/* Count a new kernel reference to ino (an entry replied). */
int vfs_count_entry(vfs *v, uint64_t ino);
/* Attributes of a live inode, including writes not yet committed. */
int vfs_get_attr(vfs *v, uint64_t ino, struct fsm_attr *a);
void vfs_fill_stat(const struct fsm_attr *a, struct stat *sb);
int vfs_get_stat(vfs *v, uint64_t ino, struct stat *sb);
/* Pay the owed commits (ingest.h) of family fam (NULL: all) in directory
** dir (0: all): the history view must show what writers have closed. */
int vfs_settle(vfs *v, const char *fam, uint64_t dir);
/* The directory update a change of its entries makes. */
void vfs_touch_dir(struct fsm_attr *d, int dlink);
int vfs_get_dir(fsmeta *m, uint64_t ino, struct fsm_attr *d);

/* vfs_file.c: a handle on live file ino (created: just made, empty). */
int vfs_file_open(vfs *v, uint64_t ino, int flags, int created, struct vfs_open *o);
int vfs_file_read(vfs *v, uint64_t ino, struct vfs_file *f, void *buf, size_t len,
                  uint64_t off, size_t *got);
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
