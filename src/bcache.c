/*
** bcache.c: LRU cache of decoded blocks (see bcache.h).
**
** A small open hash over a doubly linked LRU list. Copies happen under the
** lock: a block is at most a few MiB and the machines are small.
*/
#include "bcache.h"
#include "common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKET 256

struct entry {
    uint64_t key;
    void *buf;
    size_t len;
    struct entry *prev, *next; /* LRU: head is newest */
    struct entry *hnext;
};

struct bcache {
    pthread_mutex_t mu;
    size_t cap, used;
    struct entry *head, *tail;
    struct entry *bucket[NBUCKET];
};

int bcache_create(size_t cap_bytes, bcache **out)
{
    bcache *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    c->cap = cap_bytes;
    *out = c;
    return 0;
}

void bcache_destroy(bcache *c)
{
    if (!c) return;
    for (struct entry *e = c->head, *n; e; e = n) {
        n = e->next;
        free(e->buf);
        free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static struct entry **slot(bcache *c, uint64_t key)
{
    struct entry **p = &c->bucket[(key * 0x9E3779B97F4A7C15ull) >> 56];
    while (*p && (*p)->key != key) p = &(*p)->hnext;
    return p;
}

static void lru_unlink(bcache *c, struct entry *e)
{
    if (e->prev) e->prev->next = e->next; else c->head = e->next;
    if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
    e->prev = e->next = NULL;
}

/* Link e at the head (newest) or, cold, at the tail (first to go). */
static void lru_push(bcache *c, struct entry *e, int cold)
{
    if (cold) {
        e->prev = c->tail;
        if (c->tail) c->tail->next = e;
        c->tail = e;
        if (!c->head) c->head = e;
        return;
    }
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void evict(bcache *c, struct entry *e)
{
    lru_unlink(c, e);
    *slot(c, e->key) = e->hnext;
    c->used -= e->len;
    free(e->buf);
    free(e);
}

/* Look key up; when it holds [off, off + len), copy that to dst (unless
** NULL) and move it to the head, or with last to the tail. */
static int get(bcache *c, uint64_t key, size_t off, size_t len, void *dst, int last)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = *slot(c, key);
    int hit = e != NULL && off + len <= e->len;
    if (hit) {
        if (dst) memcpy(dst, (uint8_t *)e->buf + off, len);
        lru_unlink(c, e);
        lru_push(c, e, last);
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

int bcache_get(bcache *c, uint64_t key, size_t off, size_t len, void *dst)
{
    return get(c, key, off, len, dst, 0);
}

int bcache_get_last(bcache *c, uint64_t key, size_t off, size_t len, void *dst)
{
    return get(c, key, off, len, dst, 1);
}

int bcache_mark_last(bcache *c, uint64_t key)
{
    return get(c, key, 0, 0, NULL, 1);
}

void bcache_put(bcache *c, uint64_t key, void *buf, size_t len, int cold)
{
    struct entry *e = malloc(sizeof *e);
    if (!e || len > c->cap) {
        free(e);
        free(buf);
        return;
    }
    *e = (struct entry){.key = key, .buf = buf, .len = len};
    pthread_mutex_lock(&c->mu);
    struct entry **p = slot(c, key);
    if (*p) evict(c, *p); /* a racing reader decoded it too */
    while (c->used + len > c->cap && c->tail) evict(c, c->tail);
    p = slot(c, key);
    e->hnext = *p;
    *p = e;
    lru_push(c, e, cold);
    c->used += len;
    pthread_mutex_unlock(&c->mu);
}
