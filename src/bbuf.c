/*
** bbuf.c: buffers for blocks, recycled (the why is in bbuf.h).
**
** Every buffer is preceded by a 64-byte header in the same allocation:
**
**   offset 0  cap    u64 (native)  usable bytes after the header
**   offset 8  magic  u32           BBUF_MAGIC while allocated, BBUF_FREE
**                                  once freed
**   offset 12 mapped u32           1: a mapping of its own; 0: malloc's
**   offset 16 next, prev           free list links (most recently freed
**                                  first)
**
** A mapping is the request plus the header rounded up to a size class,
** four per power of two (a 1 MiB block takes 1.25 MiB of address space;
** pages never touched cost no memory). A request takes the most recently
** freed buffer of its class, so buffers of odd sizes cannot crowd out
** those that serve most requests; freeing beyond BBUF_KEEP unmaps the
** least recently freed buffers.
*/
#include "bbuf.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define BBUF_HDR 64
#define BBUF_MAGIC 0x62627566u /* "bbuf" */
#define BBUF_FREE 0x66726565u  /* "free" */
#define BBUF_SCAN 64           /* free buffers looked at per request */

/* Under AddressSanitizer (the fuzzers) every buffer is malloc's, exactly
** as large as asked: an overrun past the end must hit a red zone, not the
** slack of a size class. Buffers are then aligned to 16 bytes only. */
#if defined(__SANITIZE_ADDRESS__)
#define BBUF_EXACT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BBUF_EXACT 1
#endif
#endif
#ifndef BBUF_EXACT
#define BBUF_EXACT 0
#endif

struct hdr {
    size_t cap;
    uint32_t magic, mapped;
    struct hdr *next, *prev;
};
_Static_assert(sizeof(struct hdr) <= BBUF_HDR, "bbuf header too large");

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hdr *head, *tail; /* the free list */
static size_t kept, mapped;

static void unlink_free(struct hdr *h)
{
    *(h->prev ? &h->prev->next : &head) = h->next;
    *(h->next ? &h->next->prev : &tail) = h->prev;
    kept -= h->cap;
}

/* Bytes mapped for a request of n: n and the header, rounded up to a
** quarter of the power of two below them (at least 64 KiB). */
static size_t class_of(size_t n)
{
    size_t need = n + BBUF_HDR, step = 64u << 10;
    while (step * 8 <= need) step *= 2;
    return (need + step - 1) / step * step;
}

/* A free buffer of capacity cap, taken off the list, or NULL. */
static struct hdr *take(size_t cap)
{
    pthread_mutex_lock(&mu);
    struct hdr *h = head;
    for (int i = 0; h && i < BBUF_SCAN && h->cap != cap; i++) h = h->next;
    if (h && h->cap == cap)
        unlink_free(h);
    else
        h = NULL;
    pthread_mutex_unlock(&mu);
    return h;
}

void *bbuf_alloc(size_t n)
{
    struct hdr *h;
    if (n > SIZE_MAX / 2) return NULL;
    if (BBUF_EXACT) {
        if (!(h = malloc(BBUF_HDR + n))) return NULL;
        *h = (struct hdr){.cap = n, .mapped = 0};
    } else if (n < BBUF_MIN) {
        if (!(h = aligned_alloc(BBUF_HDR, (BBUF_HDR + n + BBUF_HDR - 1) / BBUF_HDR * BBUF_HDR)))
            return NULL;
        *h = (struct hdr){.cap = n, .mapped = 0};
    } else if (!(h = take(class_of(n) - BBUF_HDR))) {
        size_t len = class_of(n);
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        h = m;
        *h = (struct hdr){.cap = len - BBUF_HDR, .mapped = 1};
        __atomic_add_fetch(&mapped, 1, __ATOMIC_RELAXED);
    }
    h->magic = BBUF_MAGIC;
    return (uint8_t *)h + BBUF_HDR;
}

/* The header of p, which must be a live buffer: anything else (a pointer
** of malloc's, a buffer freed twice) would corrupt memory, so it stops
** the process, in every build. */
static struct hdr *header(const void *p)
{
    struct hdr *h = (struct hdr *)((uintptr_t)p - BBUF_HDR);
    if (h->magic != BBUF_MAGIC) {
        fprintf(stderr, "bbuf: %p is not a live buffer\n", p);
        abort();
    }
    return h;
}

void bbuf_free(void *p)
{
    if (!p) return;
    struct hdr *h = header(p);
    h->magic = BBUF_FREE;
    if (!h->mapped) {
        free(h);
        return;
    }
    struct hdr *drop = NULL; /* unmapped after the lock, linked by next */
    pthread_mutex_lock(&mu);
    h->prev = NULL;
    h->next = head;
    *(head ? &head->prev : &tail) = h;
    head = h;
    kept += h->cap;
    while (kept > BBUF_KEEP) {
        struct hdr *old = tail;
        unlink_free(old);
        old->next = drop;
        drop = old;
    }
    pthread_mutex_unlock(&mu);
    while (drop) {
        struct hdr *next = drop->next;
        munmap(drop, drop->cap + BBUF_HDR);
        drop = next;
    }
}

size_t bbuf_cap(const void *p)
{
    return header(p)->cap;
}

void bbuf_stats(size_t *n_mapped, size_t *n_kept)
{
    pthread_mutex_lock(&mu);
    *n_mapped = __atomic_load_n(&mapped, __ATOMIC_RELAXED);
    *n_kept = kept;
    pthread_mutex_unlock(&mu);
}
