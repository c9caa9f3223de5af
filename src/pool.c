/*
** pool.c: worker threads over a ring of pending jobs (see pool.h).
*/
#include "pool.h"
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

struct job {
    pool_fn fn;
    void *arg;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t nonempty, nonfull;
    struct job *ring;
    int cap, head, count;
    int stop;
    int nthreads;
    pthread_t *threads;
};

static void *worker(void *arg)
{
    pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->stop) pthread_cond_wait(&p->nonempty, &p->mu);
        if (p->count == 0) break;
        struct job j = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        pthread_cond_signal(&p->nonfull);
        pthread_mutex_unlock(&p->mu);
        j.fn(j.arg);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_create(int nthreads, int queue_cap, pool **out)
{
    pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->ring = calloc((size_t)queue_cap, sizeof *p->ring);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return -ENOMEM;
    }
    p->cap = queue_cap;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->nonempty, NULL);
    pthread_cond_init(&p->nonfull, NULL);
    for (; p->nthreads < nthreads; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) != 0) break;
    if (p->nthreads == 0) {
        pool_destroy(p);
        return -EAGAIN;
    }
    *out = p;
    return 0;
}

static int submit(pool *p, pool_fn fn, void *arg, int wait)
{
    pthread_mutex_lock(&p->mu);
    while (wait && p->count == p->cap && !p->stop) pthread_cond_wait(&p->nonfull, &p->mu);
    int rc = p->stop ? -ESHUTDOWN : p->count == p->cap ? -EAGAIN : 0;
    if (rc == 0) {
        p->ring[(p->head + p->count) % p->cap] = (struct job){fn, arg};
        p->count++;
        pthread_cond_signal(&p->nonempty);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int pool_submit(pool *p, pool_fn fn, void *arg)
{
    return submit(p, fn, arg, 1);
}

int pool_try_submit(pool *p, pool_fn fn, void *arg)
{
    return submit(p, fn, arg, 0);
}

void pool_destroy(pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->nonempty);
    pthread_cond_broadcast(&p->nonfull);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->nonempty);
    pthread_cond_destroy(&p->nonfull);
    free(p->ring);
    free(p->threads);
    free(p);
}
