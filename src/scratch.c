/*
** scratch.c: per-thread working memory (see scratch.h).
**
** One pthread key holds, per thread, a table of SCRATCH_SLOTS entries; its
** destructor frees them when the thread exits. A buffer grows by freeing
** the old one and taking a larger one, since its contents need not survive
** growth; it never shrinks, so a thread holds the largest size it asked for.
*/
#include "scratch.h"

#include <pthread.h>
#include <stdlib.h>

struct scratch_ent {
    void *p;
    size_t cap;             /* buffers: bytes at p */
    void (*drop)(void *);   /* objects: how to release p; NULL for buffers */
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    struct scratch_ent *t = arg;
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        if (t[i].drop) t[i].drop(t[i].p);
        else free(t[i].p);
    }
    free(t);
}

static void scratch_make_key(void) { pthread_key_create(&scratch_key, scratch_free); }

/* This thread's table, made on first use; NULL when out of memory. */
static struct scratch_ent *scratch_table(void)
{
    pthread_once(&scratch_once, scratch_make_key);
    struct scratch_ent *t = pthread_getspecific(scratch_key);
    if (t) return t;
    t = calloc(SCRATCH_SLOTS, sizeof *t);
    if (t && pthread_setspecific(scratch_key, t) != 0) {
        free(t);
        t = NULL;
    }
    return t;
}

void *scratch_get(enum scratch_slot slot, size_t size)
{
    struct scratch_ent *t = scratch_table();
    if (!t) return NULL;
    struct scratch_ent *e = &t[slot];
    if (e->p && e->cap >= size) return e->p;
    void *p;
    if (posix_memalign(&p, SCRATCH_ALIGN, size ? size : 1) != 0) return NULL;
    free(e->p);
    e->p = p;
    e->cap = size;
    return p;
}

void *scratch_obj(enum scratch_slot slot, void *(*make)(void), void (*drop)(void *))
{
    struct scratch_ent *t = scratch_table();
    if (!t) return NULL;
    struct scratch_ent *e = &t[slot];
    if (!e->p && (e->p = make()) != NULL) e->drop = drop;
    return e->p;
}
