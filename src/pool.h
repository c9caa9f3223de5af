/*
** pool.h: a fixed pool of worker threads with a queue bounded by cost.
**
** The bound is the memory bound of the write path: each job costs the bytes
** it holds, and a submitter blocks while the queued and running jobs cost
** more than the budget, so a writer that outruns compression waits
** (backpressure) instead of buffering without limit.
*/
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

#include <stddef.h>

typedef struct pool pool;
typedef void (*pool_fn)(void *arg);

/* budget: the total cost of jobs queued or running before submitters wait
** (the caller's unit: bytes held). Workers run at nice value nice (0: the
** caller's), background work that yields the CPU to those it serves. */
int pool_create(int nthreads, size_t budget, int nice, pool **out);
/* Run fn(arg) on a worker; blocks while the budget is spent (a job costlier
** than the whole budget waits until the pool is idle). */
int pool_submit(pool *p, pool_fn fn, void *arg, size_t cost);
/* As pool_submit, but -EAGAIN instead of waiting. */
int pool_try_submit(pool *p, pool_fn fn, void *arg, size_t cost);
/* Take back queued jobs of fn that no worker has started and whose arg
** mine(arg, ctx) accepts, up to cap, in queue order: their args go to out
** and their cost leaves the budget; the caller runs them. Returns how many. */
size_t pool_take(pool *p, pool_fn fn, int (*mine)(void *arg, void *ctx), void *ctx,
                 void **out, size_t cap);
/* Finish queued jobs, then stop the workers. */
void pool_destroy(pool *p);

#endif
