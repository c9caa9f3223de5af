/*
** bcache.c: LRU cache of decoded blocks (see bcache.h).
**
** A small open hash over a doubly linked LRU list. Copies happen under the
** lock: a block is at most a few MiB and the machines are small. Claims
** (blocks being decoded) are a short array: with more than NCLAIM decodes
** at once, the extra ones go unclaimed and may be decoded twice. An entry
** evicted while pinned leaves the list and the hash (its bytes no longer
** count) and is freed by its last unpin.
*/
#include "bcache.h"
#include "bbuf.h"
#include "common.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKET 256
#define NCLAIM 32

struct entry {
    uint64_t key;
    void *buf;
    size_t len;
    int pins;                  /* replies reading buf in place */
    int gone;                  /* evicted while pinned */
    struct entry *prev, *next; /* LRU: head is newest */
    struct entry *hnext;
};

struct bcache {
    pthread_mutex_t mu;
    struct claim {                /* a key being decoded */
        uint64_t key;
        int used;
        pthread_cond_t cv;        /* its claim ended */
    } claim[NCLAIM];
    size_t cap, used;
    struct entry *head, *tail;
    struct entry *bucket[NBUCKET];
};

int bcache_create(size_t cap_bytes, bcache **out)
{
    bcache *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < NCLAIM; i++) pthread_cond_init(&c->claim[i].cv, NULL);
    c->cap = cap_bytes;
    *out = c;
    return 0;
}

void bcache_destroy(bcache *c)
{
    if (!c) return;
    for (struct entry *e = c->head, *n; e; e = n) {
        n = e->next;
        bbuf_free(e->buf);
        free(e);
    }
    pthread_mutex_destroy(&c->mu);
    for (int i = 0; i < NCLAIM; i++) pthread_cond_destroy(&c->claim[i].cv);
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

/* Under c->mu: take e out of the cache (it stays the caller's). */
static void detach(bcache *c, struct entry *e)
{
    lru_unlink(c, e);
    *slot(c, e->key) = e->hnext;
    c->used -= e->len;
}

static void evict(bcache *c, struct entry *e)
{
    detach(c, e);
    if (e->pins) {
        e->gone = 1;
        return;
    }
    bbuf_free(e->buf);
    free(e);
}

/* Under c->mu: look key up; when it holds [off, off + len), copy that to
** dst (unless NULL) and move it to the head, or with last to the tail. */
static struct entry *get_locked(bcache *c, uint64_t key, size_t off, size_t len, void *dst,
                                int last)
{
    struct entry *e = *slot(c, key);
    if (!e || off + len > e->len) return NULL;
    if (dst) memcpy(dst, (uint8_t *)e->buf + off, len);
    lru_unlink(c, e);
    lru_push(c, e, last);
    return e;
}

static int get(bcache *c, uint64_t key, size_t off, size_t len, void *dst, int last)
{
    pthread_mutex_lock(&c->mu);
    int hit = get_locked(c, key, off, len, dst, last) != NULL;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

/* Under c->mu: index of key's claim, or -1. */
static int claim_find(const bcache *c, uint64_t key)
{
    for (int i = 0; i < NCLAIM; i++)
        if (c->claim[i].used && c->claim[i].key == key) return i;
    return -1;
}

/* Under c->mu: end key's claim, if any, and wake its waiters only: one
** condition for all claims woke every waiter at every block decoded (a
** chain rebuilt under claims ends one per level). */
static void claim_end(bcache *c, uint64_t key)
{
    int i = claim_find(c, key);
    if (i < 0) return;
    c->claim[i].used = 0;
    pthread_cond_broadcast(&c->claim[i].cv);
}

/* Under c->mu: bcache_get_claim's loop; *hit is the entry on a hit. */
static int get_claim_locked(bcache *c, uint64_t key, size_t off, size_t len, void *dst,
                            int wait, struct entry **hit)
{
    int rc;
    for (;;) {
        if ((*hit = get_locked(c, key, off, len, dst, 0)) != NULL) {
            rc = BCACHE_HIT;
            break;
        }
        int i = claim_find(c, key);
        if (i < 0) {
            i = 0;
            while (i < NCLAIM && c->claim[i].used) i++;
            if (i < NCLAIM) { /* fields, not the struct: a condition is not copied */
                c->claim[i].key = key;
                c->claim[i].used = 1;
            }
            rc = BCACHE_MINE;
            break;
        }
        if (!wait) {
            rc = BCACHE_BUSY;
            break;
        }
        pthread_cond_wait(&c->claim[i].cv, &c->mu);
    }
    return rc;
}

int bcache_get_claim(bcache *c, uint64_t key, size_t off, size_t len, void *dst, int wait)
{
    struct entry *e;
    pthread_mutex_lock(&c->mu);
    int rc = get_claim_locked(c, key, off, len, dst, wait, &e);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int bcache_pin_claim(bcache *c, uint64_t key, size_t off, size_t len, const uint8_t **at,
                     void **pin)
{
    struct entry *e;
    pthread_mutex_lock(&c->mu);
    int rc = get_claim_locked(c, key, off, len, NULL, 1, &e);
    if (rc == BCACHE_HIT) {
        e->pins++;
        *at = (const uint8_t *)e->buf + off;
        *pin = e;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void bcache_unpin(bcache *c, void *pin)
{
    struct entry *e = pin;
    pthread_mutex_lock(&c->mu);
    assert(e->pins > 0);
    int last = --e->pins == 0 && e->gone;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        bbuf_free(e->buf);
        free(e);
    }
}

void bcache_unclaim(bcache *c, uint64_t key)
{
    pthread_mutex_lock(&c->mu);
    claim_end(c, key);
    pthread_mutex_unlock(&c->mu);
}

int bcache_get(bcache *c, uint64_t key, size_t off, size_t len, void *dst)
{
    return get(c, key, off, len, dst, 0);
}

void *bcache_take(bcache *c, uint64_t key, size_t len)
{
    pthread_mutex_lock(&c->mu);
    struct entry *e = *slot(c, key);
    void *buf = NULL;
    if (e && e->len == len && !e->pins) {
        buf = e->buf;
        detach(c, e);
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(e);
    return buf;
}

size_t bcache_used(bcache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->used;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int bcache_mark_last(bcache *c, uint64_t key)
{
    return get(c, key, 0, 0, NULL, 1);
}

/* Insert buf (pinned pins times); NULL, buf still the caller's, when it
** cannot be cached. */
static struct entry *put(bcache *c, uint64_t key, void *buf, size_t len, int cold, int pins)
{
    struct entry *e = malloc(sizeof *e);
    if (!e || len > c->cap) {
        free(e);
        bcache_unclaim(c, key); /* its waiters decode it themselves */
        return NULL;
    }
    *e = (struct entry){.key = key, .buf = buf, .len = len, .pins = pins};
    pthread_mutex_lock(&c->mu);
    claim_end(c, key);
    struct entry **p = slot(c, key);
    if (*p) evict(c, *p); /* a racing reader decoded it too */
    while (c->used + len > c->cap && c->tail) evict(c, c->tail);
    p = slot(c, key);
    e->hnext = *p;
    *p = e;
    lru_push(c, e, cold);
    c->used += len;
    pthread_mutex_unlock(&c->mu);
    return e;
}

void bcache_put(bcache *c, uint64_t key, void *buf, size_t len, int cold)
{
    if (!put(c, key, buf, len, cold, 0)) bbuf_free(buf);
}

void *bcache_put_pin(bcache *c, uint64_t key, void *buf, size_t len)
{
    return put(c, key, buf, len, 0, 1);
}
