/*
** vfs_node.c: inode references and attributes, shared by the filesystem
** core's operations (see vfs_int.h).
**
** Ownership: a daemon running as root creates every inode with the uid and
** gid of the request, so users own what they make. Names are looked up per
** directory inode; no path is ever assembled, so PATH_MAX never limits us.
*/
#include "vfs_int.h"
#include "common.h"

#include <string.h>

/* Delete inodes ino[0..n) that have no link left, in one transaction, and
** their staging files. A failed transaction leaves the inodes to the next
** mount's purge; their staging files go anyway, or that mount's recovery
** would bring the bodies of unlinked files back under /lost+found. */
static void reap_all(vfs *v, const uint64_t *ino, size_t n)
{
    fsmeta *m = v->st->meta;
    uint8_t gone[VFS_REAP_BATCH] = {0};
    int rc = fsmeta_begin(m, 0);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            struct fsm_attr a;
            gone[i] = fsmeta_getattr(m, ino[i], &a) == 0 && a.nlink == 0;
            if (gone[i] && rc == 0) rc = fsmeta_rminode(m, ino[i]);
        }
        rc = fsmeta_end(m, rc);
    }
    if (rc < 0)
        ck_log(CK_LOG_WARN, "%zu unlinked inodes: delete failed (%s); purged at next mount", n,
               strerror(-rc));
    for (size_t i = 0; i < n; i++)
        if (gone[i]) store_stage_remove(v->st, ino[i]);
}

/* Take the queue and delete what it holds. */
static void reap_queued(vfs *v)
{
    struct vfs_reaps *r = &v->reaps;
    uint64_t ino[VFS_REAP_BATCH];
    pthread_mutex_lock(&r->mu);
    size_t n = r->n;
    if (n) memcpy(ino, r->ino, n * sizeof *ino);
    r->n = 0;
    pthread_mutex_unlock(&r->mu);
    if (n) reap_all(v, ino, n);
}

void vfs_reap(void *ctx, uint64_t ino)
{
    vfs *v = ctx;
    struct vfs_reaps *r = &v->reaps;
    pthread_mutex_lock(&r->mu);
    int queued = r->later && r->n < VFS_REAP_BATCH;
    if (queued) r->ino[r->n++] = ino;
    int full = queued && r->n == VFS_REAP_BATCH;
    pthread_mutex_unlock(&r->mu);
    if (!queued) reap_all(v, &ino, 1);
    if (full) reap_queued(v); /* the committer fell behind: this thread pays */
}

void vfs_reap_pending(void *ctx)
{
    reap_queued(ctx);
}

void vfs_reap_later(vfs *v, int on)
{
    struct vfs_reaps *r = &v->reaps;
    pthread_mutex_lock(&r->mu);
    r->later = on;
    pthread_mutex_unlock(&r->mu);
    if (!on) reap_queued(v);
}

void vfs_maybe_reap(vfs *v, uint64_t ino)
{
    struct node *n = node_find(v->nodes, ino);
    if (n) node_unpin(v->nodes, n); else vfs_reap(v, ino);
}

int vfs_count_entry(vfs *v, uint64_t ino)
{
    struct node *n = node_pin(v->nodes, ino);
    if (!n) return -ENOMEM;
    node_add(v->nodes, n, 1, 0, 0);
    node_unpin(v->nodes, n);
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
    int rc = ingest_getattr(&v->ig, n, a);
    node_unpin(v->nodes, n);
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
