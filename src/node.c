/*
** node.c: the table of in-memory inodes (see node.h).
*/
#include "node.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBUCKET 4096

struct node_table {
    pthread_mutex_t mu;
    const struct node_class *cls;
    void (*gone)(void *ctx, uint64_t ino);
    void *gone_ctx;
    struct node *bucket[NBUCKET];
};

static const struct node_class plain = {sizeof(struct node), NULL, NULL};

int node_table_create(node_table **out)
{
    node_table *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    t->cls = &plain;
    *out = t;
    return 0;
}

static void node_free(node_table *t, struct node *n)
{
    if (t->cls->fini) t->cls->fini(n);
    free(n);
}

void node_table_set_class(node_table *t, const struct node_class *cls)
{
    t->cls = cls;
}

void node_table_on_gone(node_table *t, void (*fn)(void *ctx, uint64_t ino), void *ctx)
{
    t->gone = fn;
    t->gone_ctx = ctx;
}

void node_table_destroy(node_table *t)
{
    if (!t) return;
    for (int i = 0; i < NBUCKET; i++)
        for (struct node *n = t->bucket[i], *nx; n; n = nx) {
            nx = n->hnext;
            node_free(t, n);
        }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static struct node **slot(node_table *t, uint64_t ino)
{
    struct node **p = &t->bucket[(ino * 0x9E3779B97F4A7C15ull) >> 52];
    while (*p && (*p)->ino != ino) p = &(*p)->hnext;
    return p;
}

struct node *node_pin(node_table *t, uint64_t ino)
{
    pthread_mutex_lock(&t->mu);
    struct node **p = slot(t, ino);
    struct node *n = *p;
    if (!n && (n = calloc(1, t->cls->size)) != NULL) {
        n->ino = ino;
        if (t->cls->init) t->cls->init(n);
        *p = n;
    }
    if (n) n->pins++;
    pthread_mutex_unlock(&t->mu);
    return n;
}

struct node *node_find(node_table *t, uint64_t ino)
{
    pthread_mutex_lock(&t->mu);
    struct node *n = *slot(t, ino);
    if (n) n->pins++;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* node_add with the table lock held. */
static unsigned add_locked(struct node *n, int64_t dlookup, int dopen, int dwriters)
{
    n->nlookup = (uint64_t)((int64_t)n->nlookup + dlookup);
    n->nopen = (unsigned)((int)n->nopen + dopen);
    /* Atomic: ingest_commit reads it under the node lock, not the table's. */
    unsigned w = (unsigned)((int)n->nwriters + dwriters);
    __atomic_store_n(&n->nwriters, w, __ATOMIC_RELEASE);
    return w;
}

unsigned node_add(node_table *t, struct node *n, int64_t dlookup, int dopen, int dwriters)
{
    pthread_mutex_lock(&t->mu);
    unsigned w = add_locked(n, dlookup, dopen, dwriters);
    pthread_mutex_unlock(&t->mu);
    return w;
}

unsigned node_open(node_table *t, struct node *n, int writer, int want_direct)
{
    pthread_mutex_lock(&t->mu);
    unsigned how = 0;
    if (want_direct && n->nopen == 0) {
        how = NODE_DIRECT;
        n->ndirect++;
    } else if (n->stale) {
        how = NODE_DROP;
        n->stale = 0;
    }
    add_locked(n, 0, 1, writer);
    pthread_mutex_unlock(&t->mu);
    return how;
}

/* node_close with the table lock held. */
static unsigned close_locked(struct node *n, int writer, unsigned how)
{
    if (how & NODE_DIRECT) n->ndirect--;
    return add_locked(n, 0, -1, -writer);
}

void node_open_undo(node_table *t, struct node *n, int writer, unsigned how)
{
    pthread_mutex_lock(&t->mu);
    close_locked(n, writer, how);
    if (how & NODE_DROP) n->stale = 1; /* the kernel never dropped them */
    pthread_mutex_unlock(&t->mu);
}

int node_wrote_direct(node_table *t, struct node *n)
{
    pthread_mutex_lock(&t->mu);
    n->stale = 1;
    int shared = n->nopen > n->ndirect;
    pthread_mutex_unlock(&t->mu);
    return shared;
}

unsigned node_close(node_table *t, struct node *n, int writer, unsigned how)
{
    pthread_mutex_lock(&t->mu);
    unsigned w = close_locked(n, writer, how);
    pthread_mutex_unlock(&t->mu);
    return w;
}

int node_unpin(node_table *t, struct node *n)
{
    pthread_mutex_lock(&t->mu);
    int gone = --n->pins == 0 && n->nlookup == 0 && n->nopen == 0;
    if (gone) *slot(t, n->ino) = n->hnext;
    pthread_mutex_unlock(&t->mu);
    if (!gone) return 0;
    uint64_t ino = n->ino;
    node_free(t, n);
    if (t->gone) t->gone(t->gone_ctx, ino);
    return 1;
}

void node_foreach(node_table *t, void (*fn)(struct node *n, void *ctx), void *ctx)
{
    /* Collect inos first, then visit each pinned, so fn may take other locks. */
    size_t cap = 64, len = 0;
    uint64_t *inos = malloc(cap * sizeof *inos);
    if (!inos) return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < NBUCKET; i++)
        for (struct node *n = t->bucket[i]; n; n = n->hnext) {
            if (len == cap) {
                uint64_t *ni = realloc(inos, 2 * cap * sizeof *ni);
                if (!ni) break;
                inos = ni;
                cap *= 2;
            }
            inos[len++] = n->ino;
        }
    pthread_mutex_unlock(&t->mu);
    for (size_t i = 0; i < len; i++) {
        struct node *n = node_find(t, inos[i]);
        if (!n) continue;
        fn(n, ctx); /* drops the pin */
    }
    free(inos);
}
