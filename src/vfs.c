/*
** vfs.c: the filesystem core's object, its operations tables, and what
** concerns the whole mount: commits at unmount, sync, statfs (see vfs.h).
*/
#include "vfs_int.h"
#include "common.h"
#include "ingest.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int vfs_create(struct store *st, const struct vfs_opts *o, vfs **out)
{
    vfs *v = calloc(1, sizeof *v);
    if (!v) return -ENOMEM;
    *v = (struct vfs){.st = st, .o = *o};
    pthread_mutex_init(&v->reaps.mu, NULL);
    int rc = node_table_create(&v->nodes);
    if (rc == 0) rc = hview_create(st, &v->view);
    if (rc < 0) {
        vfs_destroy(v);
        return rc;
    }
    ingest_init(&v->ig, st, v->nodes);
    node_table_on_gone(v->nodes, vfs_reap, v);
    *out = v;
    return 0;
}

void vfs_destroy(vfs *v)
{
    if (!v) return;
    node_table_destroy(v->nodes);
    vfs_reap_later(v, 0); /* the table's last gone hooks may have queued some */
    hview_destroy(v->view);
    pthread_mutex_destroy(&v->reaps.mu);
    free(v);
}

const struct vfs_ops vfs_live_ops = {
    .lookup = vfs_ns_lookup,
    .forget = vfs_ns_forget,
    .getattr = vfs_get_stat,
    .setattr = vfs_ns_setattr,
    .readlink = vfs_ns_readlink,
    .mknod = vfs_ns_mknod,
    .remove = vfs_ns_remove,
    .rename = vfs_ns_rename,
    .link = vfs_ns_link,
    .open = vfs_ns_open,
    .create = vfs_ns_create,
    .read = vfs_file_read,
    .write = vfs_file_write,
    .flush = vfs_file_flush,
    .release = vfs_file_release,
    .fsync = vfs_file_fsync,
    .fallocate = vfs_file_fallocate,
    .opendir = vfs_dir_open,
    .readdir = vfs_dir_read,
    .setxattr = vfs_xattr_set,
    .getxattr = vfs_xattr_get,
    .listxattr = vfs_xattr_list,
    .removexattr = vfs_xattr_remove,
    .access = vfs_access,
};

const struct vfs_ops *vfs_ops_of(uint64_t ino)
{
    return hview_owns(ino) ? &vfs_view_ops : &vfs_live_ops;
}

/* A final commit, or, while a writer is still open, a provisional one that
** saves what it wrote (as its fsync would). */
static void commit_one(struct node *n, void *ctx)
{
    vfs *v = ctx;
    ingest_commit(&v->ig, n, 1, __atomic_load_n(&n->nwriters, __ATOMIC_ACQUIRE) == 0);
    node_unpin(v->nodes, n);
}

void vfs_commit_all(vfs *v) { node_foreach(v->nodes, commit_one, v); }

void vfs_content_changed(vfs *v, uint64_t ino)
{
    struct node *n = node_find(v->nodes, ino);
    if (!n) return;
    ingest_reload(n);
    node_unpin(v->nodes, n);
}

int vfs_sync(vfs *v)
{
    int rc = ingest_settle_all(&v->ig, NULL, 0);
    if (rc == 0) rc = fsmeta_sync(v->st->meta);
    int lost = ingest_take_lost(&v->ig);
    return rc < 0 ? rc : lost;
}

int vfs_statfs(vfs *v, struct statvfs *sv)
{
    if (fstatvfs(v->st->dirfd, sv) < 0) return -errno;
    sv->f_namemax = NAME_MAX;
    return 0;
}
