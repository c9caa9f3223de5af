/*
** vfs.c: the filesystem core's object, inode references and attributes
** (see vfs.h; the operations are in vfs_ns.c, vfs_file.c, vfs_view.c).
**
** Ownership: a daemon running as root creates every inode with the uid and
** gid of the request, so users own what they make. Names are looked up per
** directory inode; no path is ever assembled, so PATH_MAX never limits us.
*/
#include "vfs_int.h"
#include "common.h"
#include "ingest.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void settle_owed(void *ctx, const char *fam, uint64_t dir) { vfs_settle(ctx, fam, dir); }

int vfs_create(struct store *st, const struct vfs_opts *o, vfs **out)
{
    vfs *v = calloc(1, sizeof *v);
    if (!v) return -ENOMEM;
    *v = (struct vfs){.st = st, .o = *o};
    int rc = node_table_create(&v->nodes);
    if (rc == 0) rc = hview_create(st, &v->view);
    if (rc < 0) {
        vfs_destroy(v);
        return rc;
    }
    st->settle_owed = settle_owed;
    st->settle_ctx = v;
    *out = v;
    return 0;
}

void vfs_destroy(vfs *v)
{
    if (!v) return;
    if (v->st && v->st->settle_ctx == v) v->st->settle_owed = NULL;
    node_table_destroy(v->nodes);
    hview_destroy(v->view);
    free(v);
}

const struct vfs_ops *vfs_ops_of(uint64_t ino)
{
    return hview_owns(ino) ? &vfs_view_ops : &vfs_live_ops;
}

/* Delete an unlinked inode once nothing refers to it. */
static void reap(vfs *v, uint64_t ino)
{
    struct fsm_attr a;
    if (fsmeta_getattr(v->st->meta, ino, &a) == 0 && a.nlink == 0) {
        int rc = fsmeta_rminode(v->st->meta, ino);
        if (rc < 0) ck_log(CK_LOG_WARN, "inode %llu: delete failed (%s); purged at next mount",
                           (unsigned long long)ino, strerror(-rc));
        store_stage_remove(v->st, ino);
    }
}

void vfs_unpin(vfs *v, struct node *n)
{
    uint64_t ino = n->ino;
    if (node_unpin(v->nodes, n)) reap(v, ino);
}

void vfs_maybe_reap(vfs *v, uint64_t ino)
{
    struct node *n = node_find(v->nodes, ino);
    if (n) vfs_unpin(v, n); else reap(v, ino);
}

int vfs_count_entry(vfs *v, uint64_t ino)
{
    struct node *n = node_pin(v->nodes, ino);
    if (!n) return -ENOMEM;
    node_add(v->nodes, n, 1, 0, 0);
    vfs_unpin(v, n);
    return 0;
}

static void to_timespec(int64_t ns, struct timespec *ts)
{
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

void vfs_fill_stat(const struct fsm_attr *a, struct stat *sb)
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

int vfs_get_attr(vfs *v, uint64_t ino, struct fsm_attr *a)
{
    struct node *n = node_find(v->nodes, ino);
    if (!n) return fsmeta_getattr(v->st->meta, ino, a);
    int rc = ingest_getattr(v->st, n, a);
    vfs_unpin(v, n);
    return rc;
}

int vfs_get_stat(vfs *v, uint64_t ino, struct stat *sb)
{
    struct fsm_attr a;
    CK_TRY(vfs_get_attr(v, ino, &a));
    vfs_fill_stat(&a, sb);
    return 0;
}

void vfs_touch_dir(struct fsm_attr *d, int dlink)
{
    d->mtime = d->ctime = ck_now_ns();
    d->nlink = (uint32_t)((int)d->nlink + dlink);
}

int vfs_get_dir(fsmeta *m, uint64_t ino, struct fsm_attr *d)
{
    CK_TRY(fsmeta_getattr(m, ino, d));
    return S_ISDIR(d->mode) ? 0 : -ENOTDIR;
}

struct settle {
    vfs *v;
    const char *fam;
    uint64_t dir;
    int rc;
};

static void settle_one(struct node *n, void *ctx)
{
    struct settle *s = ctx;
    int rc = ingest_settle(s->v->st, n, s->fam, s->dir);
    if (s->rc == 0) s->rc = rc;
    vfs_unpin(s->v, n);
}

int vfs_settle(vfs *v, const char *fam, uint64_t dir)
{
    struct settle s = {v, fam, dir, 0};
    if (__atomic_load_n(&v->st->owed, __ATOMIC_ACQUIRE) > 0)
        node_foreach(v->nodes, settle_one, &s);
    return s.rc;
}

/* A final commit, or, while a writer is still open, a provisional one that
** saves what it wrote (as its fsync would). */
static void commit_one(struct node *n, void *ctx)
{
    vfs *v = ctx;
    ingest_commit(v->st, n, 1, __atomic_load_n(&n->nwriters, __ATOMIC_ACQUIRE) == 0);
    vfs_unpin(v, n);
}

void vfs_commit_all(vfs *v) { node_foreach(v->nodes, commit_one, v); }

void vfs_content_changed(vfs *v, uint64_t ino)
{
    struct node *n = node_find(v->nodes, ino);
    if (!n) return;
    ingest_reload(n);
    vfs_unpin(v, n);
}

int vfs_sync(vfs *v)
{
    int rc = vfs_settle(v, NULL, 0);
    if (rc == 0) rc = fsmeta_sync(v->st->meta);
    int lost = __atomic_exchange_n(&v->st->lost, 0, __ATOMIC_ACQ_REL);
    return rc < 0 ? rc : lost;
}

int vfs_statfs(vfs *v, struct statvfs *sv)
{
    if (fstatvfs(v->st->dirfd, sv) < 0) return -errno;
    sv->f_namemax = NAME_MAX;
    return 0;
}
