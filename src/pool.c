/*
** pool.c: worker threads over a ring of pending jobs (see pool.h).
*/
#include "pool.h"
#include "common.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct job {
    pool_fn fn;
    void *arg;
    size_t cost;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t nonempty, nonfull;
    struct job *ring; /* grows: the budget, not the ring, bounds the queue */
    size_t cap, head, count;
    size_t budget, load; /* load: cost of the jobs queued or running */
    int stop;
    int nthreads, nice;
    pthread_t *threads;
};

static void *worker(void *arg)
{
    pool *p = arg;
    /* Linux gives each thread its own nice value; failure only costs priority. */
    if (p->nice) (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->stop) pthread_cond_wait(&p->nonempty, &p->mu);
        if (p->count == 0) break;
        struct job j = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        pthread_mutex_unlock(&p->mu);
        j.fn(j.arg);
        pthread_mutex_lock(&p->mu);
        assert(p->load >= j.cost);
        p->load -= j.cost;
        pthread_cond_broadcast(&p->nonfull);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_create(int nthreads, size_t budget, int nice, pool **out)
{
    pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->cap = 64;
    p->ring = calloc(p->cap, sizeof *p->ring);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return -ENOMEM;
    }
    p->budget = budget;
    p->nice = nice;
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

/* Room for one more job in the ring, unwrapped into a doubled array if full. */
static int ring_room(pool *p)
{
    if (p->count < p->cap) return 0;
    struct job *r = malloc(2 * p->cap * sizeof *r);
    if (!r) return -ENOMEM;
    for (size_t i = 0; i < p->count; i++) r[i] = p->ring[(p->head + i) % p->cap];
    free(p->ring);
    p->ring = r;
    p->head = 0;
    p->cap *= 2;
    return 0;
}

/* Over budget unless idle: one job, however costly, always gets in. */
static int full(const pool *p, size_t cost) { return p->load > 0 && p->load + cost > p->budget; }

static int submit(pool *p, pool_fn fn, void *arg, size_t cost, int wait)
{
    pthread_mutex_lock(&p->mu);
    while (wait && full(p, cost) && !p->stop) pthread_cond_wait(&p->nonfull, &p->mu);
    int rc = p->stop ? -ESHUTDOWN : full(p, cost) ? -EAGAIN : ring_room(p);
    if (rc == 0) {
        p->ring[(p->head + p->count) % p->cap] = (struct job){fn, arg, cost};
        p->count++;
        p->load += cost;
        pthread_cond_signal(&p->nonempty);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int pool_submit(pool *p, pool_fn fn, void *arg, size_t cost)
{
    return submit(p, fn, arg, cost, 1);
}

int pool_try_submit(pool *p, pool_fn fn, void *arg, size_t cost)
{
    return submit(p, fn, arg, cost, 0);
}

size_t pool_take(pool *p, pool_fn fn, int (*mine)(void *arg, void *ctx), void *ctx,
                 void **out, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    size_t got = 0, kept = 0;
    for (size_t i = 0; i < p->count; i++) {
        struct job j = p->ring[(p->head + i) % p->cap];
        if (got < cap && j.fn == fn && mine(j.arg, ctx)) {
            out[got++] = j.arg;
            p->load -= j.cost;
        } else {
            p->ring[(p->head + kept++) % p->cap] = j; /* kept <= i: never ahead */
        }
    }
    p->count = kept;
    if (got) pthread_cond_broadcast(&p->nonfull);
    pthread_mutex_unlock(&p->mu);
    return got;
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
