/*
** pool.h: a fixed pool of worker threads with a bounded queue.
**
** The bound is the memory bound of the write path: a submitter blocks while
** the queue is full, so a writer that outruns compression waits (backpressure)
** instead of buffering without limit.
*/
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *arg);

int pool_create(int nthreads, int queue_cap, pool **out);
/* Run fn(arg) on a worker; blocks while queue_cap jobs are waiting. */
int pool_submit(pool *p, pool_fn fn, void *arg);
/* As pool_submit, but -EAGAIN instead of waiting when the queue is full. */
int pool_try_submit(pool *p, pool_fn fn, void *arg);
/* Finish queued jobs, then stop the workers. */
void pool_destroy(pool *p);

#endif
