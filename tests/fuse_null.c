/*
** fuse_null: the fastest FUSE filesystem this kernel allows, for
** scripts/bench-io to measure the ceiling any FUSE filesystem reaches on a
** machine, beside ckptfs and the native disk.
**
**   tests/fuse_null MOUNTPOINT
**
** One flat directory of up to NULL_FILES regular files. Writes are
** acknowledged and discarded (only the size is kept); reads return zeros.
** The connection is set up as ckptfs sets up its own (max_write 1 MiB,
** readahead 1 MiB, page cache kept across opens, write-only opens
** bypassing it (always: ckptfs only as a file's sole open handle), no
** writeback cache, the same multithreaded loop), so the gap between this and native is what the
** kernel's FUSE path costs, and the gap between this and ckptfs is what
** ckptfs itself costs. Not installed; not a test of anything by itself.
*/
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NULL_FILES 64
#define NULL_NAME_MAX 64

struct nfile {
    char name[NULL_NAME_MAX]; /* "" when the slot is free */
    off_t size;
};

static struct nfile files[NULL_FILES]; /* inode i + 2 is files[i] */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char zeros[1 << 20];

static struct nfile *file_of(fuse_ino_t ino)
{
    if (ino < 2 || ino >= 2 + NULL_FILES || !files[ino - 2].name[0]) return NULL;
    return &files[ino - 2];
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = getuid();
    st->st_gid = getgid();
    if (ino == FUSE_ROOT_ID) {
        st->st_mode = S_IFDIR | 0777;
        st->st_nlink = 2;
        return;
    }
    st->st_mode = S_IFREG | 0666;
    st->st_nlink = 1;
    st->st_size = files[ino - 2].size;
    st->st_blocks = (st->st_size + 511) / 512;
}

static void reply_entry(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fuse_entry_param e = {.ino = ino, .attr_timeout = 1, .entry_timeout = 1};
    fill_stat(ino, &e.attr);
    if (fi) fuse_reply_create(req, &e, fi); else fuse_reply_entry(req, &e);
}

static void null_init(void *data, struct fuse_conn_info *conn)
{
    (void)data;
    conn->max_write = 1 << 20;
    if (conn->max_readahead > 1u << 20) conn->max_readahead = 1u << 20;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
}

static void null_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_ino_t ino = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; parent == FUSE_ROOT_ID && i < NULL_FILES; i++)
        if (!strcmp(files[i].name, name)) ino = (fuse_ino_t)i + 2;
    if (ino) reply_entry(req, ino, NULL); else fuse_reply_err(req, ENOENT);
    pthread_mutex_unlock(&lock);
}

static void null_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    pthread_mutex_lock(&lock);
    int ok = ino == FUSE_ROOT_ID || file_of(ino);
    if (ok) fill_stat(ino, &st);
    pthread_mutex_unlock(&lock);
    if (ok) fuse_reply_attr(req, &st, 1); else fuse_reply_err(req, ENOENT);
}

static void null_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                         struct fuse_file_info *fi)
{
    pthread_mutex_lock(&lock);
    struct nfile *f = file_of(ino);
    if (f && (to_set & FUSE_SET_ATTR_SIZE)) f->size = attr->st_size;
    pthread_mutex_unlock(&lock);
    null_getattr(req, ino, fi);
}

static void null_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        struct fuse_file_info *fi)
{
    (void)mode;
    int slot = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < NULL_FILES && slot < 0; i++)
        if (!files[i].name[0] || !strcmp(files[i].name, name)) slot = i;
    if (parent != FUSE_ROOT_ID || strlen(name) >= NULL_NAME_MAX || slot < 0) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, slot < 0 ? ENOSPC : EINVAL);
        return;
    }
    snprintf(files[slot].name, NULL_NAME_MAX, "%s", name);
    files[slot].size = 0;
    fi->keep_cache = 1;
    fi->direct_io = (fi->flags & O_ACCMODE) == O_WRONLY;
    reply_entry(req, (fuse_ino_t)slot + 2, fi);
    pthread_mutex_unlock(&lock);
}

static void null_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&lock);
    struct nfile *f = file_of(ino);
    if (f && (fi->flags & O_TRUNC)) f->size = 0;
    pthread_mutex_unlock(&lock);
    fi->keep_cache = 1;
    fi->direct_io = (fi->flags & O_ACCMODE) == O_WRONLY;
    if (f) fuse_reply_open(req, fi); else fuse_reply_err(req, ENOENT);
}

static void null_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)fi;
    pthread_mutex_lock(&lock);
    off_t end = file_of(ino) ? files[ino - 2].size : 0;
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
    struct nfile *f = file_of(ino);
    if (f && off + (off_t)size > f->size) f->size = off + (off_t)size;
    pthread_mutex_unlock(&lock);
    if (f) fuse_reply_write(req, size); else fuse_reply_err(req, ENOENT);
}

static void null_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; parent == FUSE_ROOT_ID && i < NULL_FILES; i++)
        if (!strcmp(files[i].name, name)) files[i].name[0] = 0, found = 1;
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, found ? 0 : ENOENT);
}

static void null_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino, (void)fi;
    fuse_reply_err(req, 0);
}

static void null_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                       struct fuse_file_info *fi)
{
    (void)datasync;
    null_ok(req, ino, fi);
}

static const struct fuse_lowlevel_ops ops = {
    .init = null_init,       .lookup = null_lookup, .getattr = null_getattr,
    .setattr = null_setattr, .create = null_create, .open = null_open,
    .read = null_read,       .write = null_write,   .unlink = null_unlink,
    .flush = null_ok,        .release = null_ok,    .fsync = null_fsync,
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
        return 2;
    }
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
    int rc = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    fuse_remove_signal_handlers(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return rc ? 1 : 0;
}
