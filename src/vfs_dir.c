/*
** vfs_dir.c: listings of the live tree (see vfs.h).
**
** Entries come from fsmeta with their attributes in one query per batch;
** a file being written shows its node's size and times instead. Names are
** taken first and attributes after: a node's attributes need its lock,
** which a commit holds while it waits for fsmeta's (lock order: node, then
** fsmeta). Cookies 1 and 2 are "." and ".."; fsmeta's follow, shifted by 2.
*/
#include "vfs_int.h"
#include "common.h"
#include "ingest.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int vfs_dir_open(vfs *v, uint64_t ino)
{
    struct fsm_attr a;
    return vfs_get_dir(v->st->meta, ino, &a);
}

/* Attributes of a listed inode: a node's own (it may be being written),
** else what the listing's query found. */
static void listed_stat(vfs *v, const struct fsm_attr *listed, struct stat *sb)
{
    struct fsm_attr a = *listed;
    struct node *n = node_find(v->nodes, listed->ino);
    if (n) {
        if (ingest_getattr(&v->ig, n, &a) < 0) a = *listed;
        node_unpin(v->nodes, n);
    }
    vfs_fill_stat(&a, sb);
}

struct dents {
    const struct vfs_dirsink *s;
    size_t room, n, cap;
    struct dent {
        struct fsm_attr a;
        int64_t cookie;
        char *name;
    } *v;
};

static int dent_cb(void *ctx, int64_t cookie, const char *name, const struct fsm_attr *a)
{
    struct dents *d = ctx;
    size_t need = d->s->need(d->s->ctx, name);
    if (need > d->room) return 1;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 32;
        struct dent *v = realloc(d->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        d->v = v, d->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return -ENOMEM;
    d->v[d->n++] = (struct dent){*a, cookie + 2, copy};
    d->room -= need;
    return 0;
}

/* Hand one entry to the sink; 1 when it is full. With plus, an entry taken
** is a kernel reference. */
static int add(vfs *v, const struct vfs_dirsink *s, const char *name,
               const struct fsm_attr *a, int64_t cookie)
{
    struct stat sb = {.st_ino = a->ino, .st_mode = a->mode};
    if (s->plus) listed_stat(v, a, &sb);
    if (s->add(s->ctx, name, &sb, cookie)) return 1;
    return s->plus && vfs_count_entry(v, a->ino) < 0;
}

static int entries(vfs *v, uint64_t ino, off_t off, const struct vfs_dirsink *s)
{
    struct dents d = {s, s->room(s->ctx), 0, 0, NULL};
    int rc = fsmeta_readdir(v->st->meta, ino, off > 2 ? off - 2 : 0, dent_cb, &d);
    for (size_t i = 0; i < d.n; i++) {
        if (rc >= 0 && add(v, s, d.v[i].name, &d.v[i].a, d.v[i].cookie)) rc = 1;
        free(d.v[i].name);
    }
    free(d.v);
    return rc < 0 ? rc : 0;
}

/* "." and "..": the kernel takes no reference on them. */
static int dot(const struct vfs_dirsink *s, const char *name, uint64_t ino, off_t cookie)
{
    struct stat sb = {.st_ino = ino, .st_mode = S_IFDIR};
    return s->add(s->ctx, name, &sb, cookie);
}

int vfs_dir_read(vfs *v, uint64_t ino, off_t off, const struct vfs_dirsink *s)
{
    uint64_t parent = ino;
    if (ino != FSMETA_ROOT_INO) {
        char name[NAME_MAX + 1];
        fsmeta_name_of(v->st->meta, ino, &parent, name, sizeof name);
    }
    if (off < 1 && dot(s, ".", ino, 1)) return 0;
    if (off < 2 && dot(s, "..", parent, 2)) return 0;
    return entries(v, ino, off, s);
}
