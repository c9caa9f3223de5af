/*
** vfs_file.c: open handles of live files (see vfs.h): reads, writes and
** the points where content commits (ingest.h): close (flush, then the last
** writer's release), fsync, and a truncate with no writer open.
*/
#include "vfs_int.h"
#include "common.h"
#include "ingest.h"

#include <fcntl.h>
#include <stdlib.h>

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif

/* The kernel sends the open flags with release but not with flush, so
** whether the handle writes is kept here. */
struct vfs_file {
    struct node *n;
    int writer;
    unsigned how; /* node_open's decision (NODE_DIRECT, NODE_DROP) */
    int wrote;    /* a write came through it (direct: privileges dropped) */
};

int vfs_file_open(vfs *v, uint64_t ino, int flags, int created, struct vfs_open *o)
{
    struct vfs_file *h = malloc(sizeof *h);
    struct node *n = h ? node_pin(v->nodes, ino) : NULL;
    if (!n) {
        free(h);
        return -ENOMEM;
    }
    if (created) ingest_created(n);
    int w = (flags & O_ACCMODE) != O_RDONLY;
    /* Write-only handles (torch.save, safetensors) skip the page cache: the
    ** kernel then hands the writer's own pages to the daemon instead of
    ** first copying them into new cached pages, which cost the writer
    ** most of its time in the kernel. Nothing can mmap such a handle. */
    int want_direct = v->o.direct_writes && (flags & O_ACCMODE) == O_WRONLY;
    unsigned how = node_open(v->nodes, n, w, want_direct);
    int rc = w ? ingest_open_writer(&v->ig, n) : 0;
    if (rc == 0 && (flags & O_TRUNC) && w) rc = ingest_truncate(&v->ig, n, 0);
    if (rc < 0) {
        node_open_undo(v->nodes, n, w, how);
        free(h);
    } else {
        *h = (struct vfs_file){n, w, how, 0};
        /* cached pages stay unless direct writes may have outdated them */
        *o = (struct vfs_open){h, (how & NODE_DIRECT) != 0, (how & NODE_DROP) == 0};
    }
    node_unpin(v->nodes, n);
    return rc;
}

int vfs_file_read(vfs *v, uint64_t ino, struct vfs_file *f, void *buf, size_t len,
                  uint64_t off, struct store_iov *out)
{
    return ingest_read_iov(&v->ig, f->n, buf, len, off, out);
}

/* A write through a direct handle skips the kernel's own dropping of
** setuid and setgid (it does that for writes through its page cache):
** drop them here, at the handle's first write. */
static int drop_privs(vfs *v, const struct cred *c, uint64_t ino)
{
    struct fsm_attr a;
    CK_TRY(fsmeta_getattr(v->st->meta, ino, &a));
    struct perm_obj o = {a.mode, a.uid, a.gid};
    uint32_t kill = perm_privs_to_kill(c, &o);
    if (!kill) return 0;
    a.mode &= ~kill;
    a.ctime = ck_now_ns();
    return fsmeta_setattr(v->st->meta, &a);
}

int vfs_file_write(vfs *v, const struct cred *c, uint64_t ino, struct vfs_file *f,
                   const void *buf, size_t len, uint64_t off, int *inval)
{
    int direct = (f->how & NODE_DIRECT) != 0;
    if (direct && !f->wrote++) CK_TRY(drop_privs(v, c, ino));
    CK_TRY(ingest_write(&v->ig, f->n, buf, len, off));
    /* A reader opened beside this handle may hold pages of the range,
    ** read before the write reached us (kernels drop them before sending a
    ** direct write, or not at all): dropped before the write returns. */
    *inval = direct && node_wrote_direct(v->nodes, f->n);
    return 0;
}

/* close(2) waits for flush: errors met so far reach the writer here. */
int vfs_file_flush(vfs *v, struct vfs_file *f)
{
    return f->writer ? ingest_flush(&v->ig, f->n) : 0;
}

void vfs_file_release(vfs *v, struct vfs_file *f)
{
    struct node *n = node_pin(v->nodes, f->n->ino); /* keep it while the handle goes */
    if (node_close(v->nodes, n, f->writer, f->how) == 0 && f->writer)
        ingest_commit(&v->ig, n, 0, 1);
    free(f);
    node_unpin(v->nodes, n);
}

int vfs_file_fsync(vfs *v, struct vfs_file *f) { return ingest_commit(&v->ig, f->n, 1, 0); }

int vfs_file_set_size(vfs *v, uint64_t ino, uint64_t size)
{
    struct node *n = node_pin(v->nodes, ino);
    if (!n) return -ENOMEM;
    int rc = ingest_truncate(&v->ig, n, size);
    /* With no writer open, nothing else would commit it: do it now. */
    if (rc == 0 && node_add(v->nodes, n, 0, 0, 0) == 0) rc = ingest_commit(&v->ig, n, 0, 1);
    node_unpin(v->nodes, n);
    return rc;
}

/* Storage is allocated on write (compressed), so nothing is reserved; but
** a range past the end that could not be written uncompressed now is
** refused, as a filesystem that reserves would. */
int vfs_file_fallocate(vfs *v, uint64_t ino, struct vfs_file *f, int mode, uint64_t off,
                       uint64_t len)
{
    if (mode & ~FALLOC_FL_KEEP_SIZE) return -EOPNOTSUPP;
    if (len == 0) return -EINVAL;
    struct stat sb;
    CK_TRY(vfs_get_stat(v, ino, &sb));
    uint64_t end = off + len, size = (uint64_t)sb.st_size;
    if (end <= size) return 0;
    CK_TRY(store_space(v->st, end - CK_MAX(size, off)));
    return (mode & FALLOC_FL_KEEP_SIZE) ? 0 : ingest_truncate(&v->ig, f->n, end);
}
