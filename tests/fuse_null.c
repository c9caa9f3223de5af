/*
** fuse_null: the fastest FUSE filesystem this kernel allows, for
** scripts/bench-io and scripts/bench-meta to measure the ceiling any FUSE
** filesystem reaches on a machine, beside ckptfs and the native disk.
**
**   tests/fuse_null MOUNTPOINT
**
** A tree of directories and regular files held in memory: names and sizes
** only. Writes are acknowledged and discarded; reads return zeros. The
** connection is set up as ckptfs sets up its own (max_write 1 MiB,
** readahead 1 MiB, page cache kept across opens, write-only opens
** bypassing it, no writeback cache, readdirplus on every batch, extended
** attributes answered, 1 s entry and attribute timeouts, the same
** multithreaded loop), so the gap between this and
** native is what the kernel's FUSE path costs, and the gap between this
** and ckptfs is what ckptfs itself costs. Not installed; not a test of
** anything by itself.
**
** Inode i is ents[i]; inodes are never reused. A directory keeps its
** children in arrival order (a slot emptied when one leaves), and a readdir
** offset is the slot after the last entry returned.
*/
#define FUSE_USE_VERSION 314 /* as ckptfs: the loop configuration API */
#include <fuse_lowlevel.h>

#include "../src/vfs.h" /* vfs_xattr_supported: answered as ckptfs answers */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NULL_NAME_MAX 256
#define NULL_BUCKETS (1u << 18)

struct nent {
    char *name;       /* NULL: unused or removed */
    fuse_ino_t parent;
    mode_t mode;
    off_t size;
    uint32_t hnext;   /* next inode in the same hash bucket, 0 ends */
    uint32_t slot;    /* its index in the parent's kids */
    uint32_t *kids;   /* directory: children in arrival order, 0 where one left */
    uint32_t nkids, capkids, live;
};

static struct nent *ents;   /* ents[0] unused, ents[1] the root */
static size_t n_ents, cap_ents;
static uint32_t buckets[NULL_BUCKETS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char zeros[1 << 20];

static uint32_t bucket_of(fuse_ino_t parent, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ parent;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32)) & (NULL_BUCKETS - 1);
}

static fuse_ino_t find(fuse_ino_t parent, const char *name)
{
    for (uint32_t i = buckets[bucket_of(parent, name)]; i; i = ents[i].hnext)
        if (ents[i].parent == parent && !strcmp(ents[i].name, name)) return i;
    return 0;
}

static void unhash(fuse_ino_t ino)
{
    uint32_t *p = &buckets[bucket_of(ents[ino].parent, ents[ino].name)];
    while (*p != ino) p = &ents[*p].hnext;
    *p = ents[ino].hnext;
}

static void hash_in(fuse_ino_t ino)
{
    uint32_t *b = &buckets[bucket_of(ents[ino].parent, ents[ino].name)];
    ents[ino].hnext = *b;
    *b = (uint32_t)ino;
}

static int live(fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID || (ino > FUSE_ROOT_ID && ino < n_ents && ents[ino].name);
}

/* Append ino to the children of its parent; called locked. */
static int adopt(fuse_ino_t ino)
{
    struct nent *d = &ents[ents[ino].parent];
    if (d->nkids == d->capkids) {
        uint32_t cap = d->capkids ? 2 * d->capkids : 16;
        uint32_t *k = realloc(d->kids, cap * sizeof *k);
        if (!k) return -ENOMEM;
        d->kids = k, d->capkids = cap;
    }
    ents[ino].slot = d->nkids;
    d->kids[d->nkids++] = (uint32_t)ino;
    d->live++;
    return 0;
}

static void disown(fuse_ino_t ino)
{
    struct nent *d = &ents[ents[ino].parent];
    d->kids[ents[ino].slot] = 0;
    d->live--;
}

/* A new entry, or -errno. Called locked. */
static long add(fuse_ino_t parent, const char *name, mode_t mode)
{
    if (!live(parent) || !S_ISDIR(ents[parent].mode)) return -ENOENT;
    if (strlen(name) >= NULL_NAME_MAX) return -ENAMETOOLONG;
    if (find(parent, name)) return -EEXIST;
    if (n_ents == UINT32_MAX) return -ENOSPC;
    if (n_ents == cap_ents) {
        size_t cap = cap_ents * 2;
        struct nent *e = realloc(ents, cap * sizeof *e);
        if (!e) return -ENOMEM;
        ents = e, cap_ents = cap;
    }
    char *copy = strdup(name);
    if (!copy) return -ENOMEM;
    ents[n_ents] = (struct nent){.name = copy, .parent = parent, .mode = mode};
    if (adopt(n_ents) < 0) {
        free(copy);
        return -ENOMEM;
    }
    hash_in(n_ents);
    return (long)n_ents++;
}

static void drop(fuse_ino_t ino)
{
    unhash(ino);
    disown(ino);
    free(ents[ino].name);
    ents[ino].name = NULL;
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_mode = ents[ino].mode;
    st->st_nlink = S_ISDIR(ents[ino].mode) ? 2 : 1;
    st->st_size = ents[ino].size;
    st->st_blocks = (st->st_size + 511) / 512;
}

static void entry_of(fuse_ino_t ino, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    e->ino = ino;
    e->attr_timeout = e->entry_timeout = 1;
    fill_stat(ino, &e->attr);
}

static void null_init(void *data, struct fuse_conn_info *conn)
{
    (void)data;
    conn->max_write = 1 << 20;
    if (conn->max_readahead > 1u << 20) conn->max_readahead = 1u << 20;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA |
                              FUSE_CAP_READDIRPLUS_AUTO);
}

static void null_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    pthread_mutex_lock(&lock);
    fuse_ino_t ino = live(parent) ? find(parent, name) : 0;
    if (ino) entry_of(ino, &e);
    pthread_mutex_unlock(&lock);
    if (ino) fuse_reply_entry(req, &e); else fuse_reply_err(req, ENOENT);
}

static void null_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    pthread_mutex_lock(&lock);
    int ok = live(ino);
    if (ok) fill_stat(ino, &st);
    pthread_mutex_unlock(&lock);
    if (ok) fuse_reply_attr(req, &st, 1); else fuse_reply_err(req, ENOENT);
}

static void null_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                         struct fuse_file_info *fi)
{
    pthread_mutex_lock(&lock);
    if (live(ino) && (to_set & FUSE_SET_ATTR_SIZE)) ents[ino].size = attr->st_size;
    if (live(ino) && (to_set & FUSE_SET_ATTR_MODE))
        ents[ino].mode = (ents[ino].mode & S_IFMT) | (attr->st_mode & 07777);
    pthread_mutex_unlock(&lock);
    null_getattr(req, ino, fi);
}

static void set_open(struct fuse_file_info *fi)
{
    fi->keep_cache = 1;
    fi->direct_io = (fi->flags & O_ACCMODE) == O_WRONLY;
}

static void make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                 struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    pthread_mutex_lock(&lock);
    long ino = add(parent, name, mode);
    if (ino > 0) entry_of((fuse_ino_t)ino, &e);
    pthread_mutex_unlock(&lock);
    if (ino < 0) {
        fuse_reply_err(req, (int)-ino);
    } else if (fi) {
        set_open(fi);
        fuse_reply_create(req, &e, fi);
    } else {
        fuse_reply_entry(req, &e);
    }
}

static void null_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        struct fuse_file_info *fi)
{
    make(req, parent, name, S_IFREG | (mode & 07777), fi);
}

static void null_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make(req, parent, name, S_IFDIR | (mode & 07777), NULL);
}

static void null_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&lock);
    int ok = live(ino);
    if (ok && (fi->flags & O_TRUNC)) ents[ino].size = 0;
    pthread_mutex_unlock(&lock);
    set_open(fi);
    if (ok) fuse_reply_open(req, fi); else fuse_reply_err(req, ENOENT);
}

static void null_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)fi;
    pthread_mutex_lock(&lock);
    off_t end = live(ino) ? ents[ino].size : 0;
    pthread_mutex_unlock(&lock);
    size_t n = off >= end ? 0 : (size_t)(end - off) < size ? (size_t)(end - off) : size;
    if (n > sizeof zeros) n = sizeof zeros;
    fuse_reply_buf(req, zeros, n);
}

static void null_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                       off_t off, struct fuse_file_info *fi)
{
    (void)buf, (void)fi;
    pthread_mutex_lock(&lock);
    int ok = live(ino);
    if (ok && off + (off_t)size > ents[ino].size) ents[ino].size = off + (off_t)size;
    pthread_mutex_unlock(&lock);
    if (ok) fuse_reply_write(req, size); else fuse_reply_err(req, ENOENT);
}

static int has_children(fuse_ino_t dir) { return ents[dir].live > 0; }

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, int dir)
{
    int err = 0;
    pthread_mutex_lock(&lock);
    fuse_ino_t ino = live(parent) ? find(parent, name) : 0;
    if (!ino) err = ENOENT;
    else if (dir && !S_ISDIR(ents[ino].mode)) err = ENOTDIR;
    else if (!dir && S_ISDIR(ents[ino].mode)) err = EISDIR;
    else if (dir && has_children(ino)) err = ENOTEMPTY;
    else drop(ino);
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, err);
}

static void null_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_entry(req, parent, name, 0);
}

static void null_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_entry(req, parent, name, 1);
}

static void null_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                        fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    int err = 0;
    pthread_mutex_lock(&lock);
    fuse_ino_t ino = live(parent) ? find(parent, name) : 0;
    fuse_ino_t old = live(newparent) ? find(newparent, newname) : 0;
    char *copy = strlen(newname) < NULL_NAME_MAX ? strdup(newname) : NULL;
    if (!ino || !live(newparent)) err = ENOENT;
    else if (!copy) err = ENAMETOOLONG;
    else if (flags) err = EINVAL;
    else if (old && S_ISDIR(ents[old].mode) && has_children(old)) err = ENOTEMPTY;
    if (!err && old != ino) {
        if (old) drop(old);
        unhash(ino);
        free(ents[ino].name);
        ents[ino].name = copy, copy = NULL;
        if (newparent != parent) {
            disown(ino);
            ents[ino].parent = newparent;
            if (adopt(ino) < 0) err = ENOMEM; /* cannot happen in a benchmark */
        }
        hash_in(ino);
    }
    pthread_mutex_unlock(&lock);
    free(copy);
    fuse_reply_err(req, err);
}

/* One batch of a listing from offset off; plus adds attributes. */
static void list(fuse_req_t req, fuse_ino_t dir, size_t size, off_t off, int plus)
{
    char *buf = malloc(size);
    size_t used = 0;
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_mutex_lock(&lock);
    const struct nent *d = live(dir) ? &ents[dir] : NULL;
    for (uint32_t k = (uint32_t)off; d && k < d->nkids; k++) {
        fuse_ino_t i = d->kids[k];
        if (!i) continue;
        struct fuse_entry_param e;
        entry_of(i, &e);
        size_t n = plus ? fuse_add_direntry_plus(req, buf + used, size - used, ents[i].name,
                                                 &e, (off_t)k + 1)
                        : fuse_add_direntry(req, buf + used, size - used, ents[i].name,
                                            &e.attr, (off_t)k + 1);
        if (n > size - used) break;
        used += n;
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void null_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi)
{
    (void)fi;
    list(req, ino, size, off, 0);
}

static void null_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             struct fuse_file_info *fi)
{
    (void)fi;
    list(req, ino, size, off, 1);
}

/* No extended attributes, but requests are answered as ckptfs answers
** them (a filesystem that stores user.* attributes cannot answer ENOSYS to
** stop them): names it cannot store unsupported, others absent. */
static void null_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    (void)ino, (void)size;
    fuse_reply_err(req, vfs_xattr_supported(name) < 0 ? EOPNOTSUPP : ENODATA);
}

static void null_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino, (void)fi;
    fuse_reply_err(req, 0);
}

static void null_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    fuse_reply_open(req, fi);
}

static void null_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                       struct fuse_file_info *fi)
{
    (void)datasync;
    null_ok(req, ino, fi);
}

static const struct fuse_lowlevel_ops ops = {
    .init = null_init,         .lookup = null_lookup,   .getattr = null_getattr,
    .setattr = null_setattr,   .create = null_create,   .mkdir = null_mkdir,
    .open = null_open,         .read = null_read,       .write = null_write,
    .unlink = null_unlink,     .rmdir = null_rmdir,     .rename = null_rename,
    .opendir = null_opendir,        .readdir = null_readdir, .readdirplus = null_readdirplus,
    .releasedir = null_ok,     .flush = null_ok,        .release = null_ok,
    .fsync = null_fsync,       .fsyncdir = null_fsync,     .getxattr = null_getxattr,
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
        return 2;
    }
    cap_ents = 1024;
    ents = calloc(cap_ents, sizeof *ents);
    if (!ents) return 1;
    ents[FUSE_ROOT_ID] = (struct nent){.name = "", .mode = S_IFDIR | 0777};
    n_ents = FUSE_ROOT_ID + 1;
    char *fargv[] = {argv[0], "-o", "fsname=fuse_null", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se || fuse_session_mount(se, argv[1]) != 0) {
        fprintf(stderr, "fuse_null: cannot mount %s\n", argv[1]);
        return 1;
    }
    if (fuse_daemonize(0) != 0) return 1;
    fuse_set_signal_handlers(se);
    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(lc, 10); /* what ckptfs passes (fuse_parse_cmdline's) */
    int rc = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    fuse_remove_signal_handlers(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return rc ? 1 : 0;
}
