/*
** vfs_ns.c: the live tree's names and attributes (see vfs.h): lookup,
** create, remove, rename, link, setattr, listings, extended attributes,
** access. Each change is one metadata transaction.
*/
#include "vfs_int.h"
#include "common.h"
#include "history.h"
#include "ingest.h"
#include "policy.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int name_ok(const char *name)
{
    return strlen(name) > NAME_MAX ? -ENAMETOOLONG : 0;
}

/* The history view's name in the root is taken, and the view is read-only. */
static int reserved(uint64_t parent, const char *name)
{
    return parent == FSMETA_ROOT_INO && strcmp(name, HVIEW_NAME) == 0;
}

static int view_ro(uint64_t ino) { return hview_owns(ino) ? -EROFS : 0; }

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

static struct perm_obj obj_of(const struct fsm_attr *a)
{
    return (struct perm_obj){a->mode, a->uid, a->gid};
}

int vfs_ns_lookup(vfs *v, uint64_t parent, const char *name, struct stat *out)
{
    if (reserved(parent, name)) return vfs_view_lookup(v, parent, name, out);
    uint64_t ino;
    CK_TRY(name_ok(name));
    CK_TRY(fsmeta_lookup(v->st->meta, parent, name, &ino));
    CK_TRY(vfs_get_stat(v, ino, out));
    return vfs_count_entry(v, ino);
}

void vfs_ns_forget(vfs *v, uint64_t ino, uint64_t nlookup)
{
    struct node *n = node_find(v->nodes, ino);
    if (!n) return;
    node_add(v->nodes, n, -(int64_t)nlookup, 0, 0);
    node_unpin(v->nodes, n);
}

static int64_t ts_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* The row a setattr writes: a's committed row with the changes asked. */
static void apply_attr(const struct cred *c, struct fsm_attr *a, const struct stat *sb,
                       int to_set)
{
    int64_t now = ck_now_ns();
    if (to_set & PERM_SET_MODE) a->mode = (a->mode & S_IFMT) | (sb->st_mode & 07777);
    if (to_set & PERM_SET_UID) a->uid = sb->st_uid;
    if (to_set & PERM_SET_GID) a->gid = sb->st_gid;
    if ((to_set & (PERM_SET_UID | PERM_SET_GID)) && c->uid != 0)
        a->mode &= ~(uint32_t)(S_ISUID | S_ISGID); /* as the kernel does on chown */
    if (to_set & VFS_SET_ATIME) a->atime = ts_ns(&sb->st_atim);
    if (to_set & VFS_SET_ATIME_NOW) a->atime = now;
    if (to_set & VFS_SET_MTIME) a->mtime = ts_ns(&sb->st_mtim);
    if (to_set & VFS_SET_MTIME_NOW) a->mtime = now;
    a->ctime = (to_set & VFS_SET_CTIME) ? ts_ns(&sb->st_ctim) : now;
}

static int do_setattr(vfs *v, const struct cred *c, uint64_t ino, const struct stat *sb,
                      int to_set)
{
    struct fsm_attr a;
    CK_TRY(vfs_get_attr(v, ino, &a));
    struct perm_obj o = obj_of(&a);
    CK_TRY(perm_may_change(c, &o, to_set, sb->st_mode, sb->st_uid, sb->st_gid));
    if (to_set & VFS_SET_SIZE) {
        if (S_ISDIR(a.mode)) return -EISDIR;
        if (!S_ISREG(a.mode)) return -EINVAL;
        CK_TRY(vfs_file_set_size(v, ino, (uint64_t)sb->st_size));
    }
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a)); /* the row to update: committed size */
    apply_attr(c, &a, sb, to_set);
    struct node *n = node_find(v->nodes, ino);
    if (n) {
        int mt = (to_set & (VFS_SET_MTIME | VFS_SET_MTIME_NOW)) != 0;
        ingest_set_times(n, mt ? a.mtime : -1, a.ctime);
        node_unpin(v->nodes, n);
    }
    return fsmeta_setattr(v->st->meta, &a);
}

int vfs_ns_setattr(vfs *v, const struct cred *c, uint64_t ino, const struct stat *sb,
                        int to_set, struct stat *out)
{
    CK_TRY(do_setattr(v, c, ino, sb, to_set));
    return vfs_get_stat(v, ino, out);
}

int vfs_ns_readlink(vfs *v, uint64_t ino, char *buf, size_t cap)
{
    size_t len;
    CK_TRY(fsmeta_readlink(v->st->meta, ino, buf, cap, &len));
    buf[len] = 0;
    return 0;
}

/* The entry of an inode just made with attributes a (no query). */
static int made_entry(vfs *v, const struct fsm_attr *a, struct stat *out)
{
    vfs_fill_stat(a, out);
    return vfs_count_entry(v, a->ino);
}

/* Create an inode named name in parent, owned by the caller. */
static int make_node(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                     mode_t mode, dev_t rdev, const char *target, struct fsm_attr *a)
{
    CK_TRY(may_create(parent, name));
    if (target && strlen(target) > PATH_MAX) return -ENAMETOOLONG;
    int64_t now = ck_now_ns();
    *a = (struct fsm_attr){.mode = (uint32_t)mode, .uid = c->uid, .gid = c->gid,
                           .nlink = S_ISDIR(mode) ? 2 : 1, .rdev = rdev,
                           .size = target ? strlen(target) : 0,
                           .atime = now, .mtime = now, .ctime = now};
    return fsmeta_create(v->st->meta, parent, name, a, target, 0);
}

int vfs_ns_mknod(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                      mode_t mode, dev_t rdev, const char *target, struct stat *out)
{
    struct fsm_attr a;
    CK_TRY(make_node(v, c, parent, name, mode, rdev, target, &a));
    return made_entry(v, &a, out);
}

int vfs_ns_create(vfs *v, const struct cred *c, uint64_t parent, const char *name,
                       mode_t mode, int flags, struct stat *out, struct vfs_open *o)
{
    struct fsm_attr a;
    CK_TRY(make_node(v, c, parent, name, S_IFREG | (mode & 07777), 0, NULL, &a));
    CK_TRY(made_entry(v, &a, out));
    return vfs_file_open(v, a.ino, flags & ~O_TRUNC, 1, o); /* new and empty already */
}

/* Remove the entry (parent, name) of inode *ino; want_dir selects rmdir rules. */
static int remove_entry(fsmeta *m, uint64_t parent, const char *name, int want_dir,
                        uint64_t *ino, uint32_t *nlink)
{
    struct fsm_attr d, a;
    CK_TRY(vfs_get_dir(m, parent, &d));
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
    vfs_touch_dir(&d, dir ? -1 : 0);
    *nlink = a.nlink;
    return fsmeta_setattr(m, &d);
}

int vfs_ns_remove(vfs *v, uint64_t parent, const char *name, int dir)
{
    uint64_t ino = 0;
    uint32_t nlink = 1;
    CK_TRY(may_remove(parent, name));
    CK_TRY(fsmeta_begin(v->st->meta, 0));
    CK_TRY(fsmeta_end(v->st->meta, remove_entry(v->st->meta, parent, name, dir, &ino, &nlink)));
    if (nlink == 0) vfs_maybe_reap(v, ino);
    return 0;
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
    CK_TRY(vfs_get_dir(m, p1, &d1));
    int moved = (int)S_ISDIR(a2.mode) - (int)S_ISDIR(a1.mode); /* subdirs p1 gains */
    vfs_touch_dir(&d1, p1 == p2 ? 0 : moved);
    CK_TRY(fsmeta_setattr(m, &d1));
    if (p1 == p2) return 0;
    CK_TRY(vfs_get_dir(m, p2, &d2));
    vfs_touch_dir(&d2, -moved);
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
    CK_TRY(vfs_get_dir(m, p1, &d));
    vfs_touch_dir(&d, dir && p1 != p2 ? -1 : 0);
    CK_TRY(fsmeta_setattr(m, &d));
    if (p1 == p2) return 0;
    CK_TRY(vfs_get_dir(m, p2, &d));
    vfs_touch_dir(&d, dir ? 1 : 0);
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
    if (flags & VFS_RENAME_EXCHANGE) {
        if (!have_dst) return -ENOENT;
        return exchange(m, p1, n1, i1, p2, n2, i2);
    }
    if (have_dst && (flags & VFS_RENAME_NOREPLACE)) return -EEXIST;
    if (have_dst && i1 == i2) return 0; /* two links of one inode: POSIX no-op */
    return move(m, p1, n1, i1, p2, n2, have_dst, i2, victim);
}

int vfs_ns_rename(vfs *v, uint64_t p1, const char *n1, uint64_t p2, const char *n2,
                       unsigned flags)
{
    uint64_t victim = 0;
    unsigned both = VFS_RENAME_NOREPLACE | VFS_RENAME_EXCHANGE;
    if ((flags & ~both) || (flags & both) == both) return -EINVAL;
    CK_TRY(may_remove(p1, n1));
    CK_TRY(may_remove(p2, n2));
    CK_TRY(fsmeta_begin(v->st->meta, 0));
    CK_TRY(fsmeta_end(v->st->meta, do_rename(v->st->meta, p1, n1, p2, n2, flags, &victim)));
    if (victim) vfs_maybe_reap(v, victim);
    return 0;
}

static int do_link(fsmeta *m, uint64_t ino, uint64_t parent, const char *name)
{
    struct fsm_attr a, d;
    CK_TRY(fsmeta_getattr(m, ino, &a));
    if (S_ISDIR(a.mode)) return -EPERM;
    if (a.nlink == 0) return -ENOENT;
    CK_TRY(vfs_get_dir(m, parent, &d));
    CK_TRY(fsmeta_link(m, parent, name, ino));
    a.nlink++;
    a.ctime = ck_now_ns();
    CK_TRY(fsmeta_setattr(m, &a));
    vfs_touch_dir(&d, 0);
    return fsmeta_setattr(m, &d);
}

int vfs_ns_link(vfs *v, uint64_t ino, uint64_t parent, const char *name,
                     struct stat *out)
{
    CK_TRY(view_ro(ino));
    CK_TRY(may_create(parent, name));
    CK_TRY(fsmeta_begin(v->st->meta, 0));
    CK_TRY(fsmeta_end(v->st->meta, do_link(v->st->meta, ino, parent, name)));
    CK_TRY(vfs_get_stat(v, ino, out));
    return vfs_count_entry(v, ino);
}

int vfs_ns_open(vfs *v, uint64_t ino, int flags, struct vfs_open *o)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a));
    if (S_ISDIR(a.mode)) return -EISDIR;
    return vfs_file_open(v, ino, flags, 0, o);
}
