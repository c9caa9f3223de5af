/*
** unit_pool.c: the worker pool (pool.h): the cost budget that bounds the
** write buffer (try_submit refuses, submit waits), a job costlier than the
** whole budget admitted when the pool is idle, FIFO order past the ring's
** first size, the workers' nice value, and taking queued jobs back.
*/
#include "../src/pool.h"
#include "unit_util.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A gate jobs wait at until the test opens it. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int open_gate, started, ran, order_ok, next_seq, nice_seen;

static void reset(void)
{
    open_gate = started = ran = next_seq = 0;
    order_ok = 1;
}

static void gate_job(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_broadcast(&cv);
    while (!open_gate) pthread_cond_wait(&cv, &mu);
    ran++;
    pthread_mutex_unlock(&mu);
}

static void seq_job(void *arg)
{
    int seq = (int)(intptr_t)arg;
    pthread_mutex_lock(&mu);
    if (seq != next_seq++) order_ok = 0;
    ran++;
    pthread_mutex_unlock(&mu);
}

static void nice_job(void *arg)
{
    (void)arg;
    errno = 0;
    int v = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    pthread_mutex_lock(&mu);
    nice_seen = errno ? -100 : v;
    ran++;
    pthread_mutex_unlock(&mu);
}

static void wait_started(int n)
{
    pthread_mutex_lock(&mu);
    while (started < n) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void open_the_gate(void)
{
    pthread_mutex_lock(&mu);
    open_gate = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

START_TEST(test_budget)
{
    pool *p;
    reset();
    ck_assert_int_eq(pool_create(1, 100, 0, &p), 0);
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 60), 0);
    wait_started(1); /* running: its cost stays counted until it ends */
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 50), -EAGAIN);
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 40), 0); /* exactly the budget */
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 1), -EAGAIN);
    open_the_gate();
    pool_destroy(p); /* finishes what was queued */
    ck_assert_int_eq(ran, 2);
}
END_TEST

START_TEST(test_oversized_job_when_idle)
{
    pool *p;
    reset();
    ck_assert_int_eq(pool_create(1, 10, 0, &p), 0);
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 1000), 0);
    wait_started(1);
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 1), -EAGAIN);
    open_the_gate();
    pool_destroy(p);
    ck_assert_int_eq(ran, 1);
}
END_TEST

struct waiter {
    pool *p;
    int rc, gate_was_open;
};

static void *blocked_submit(void *arg)
{
    struct waiter *w = arg;
    w->rc = pool_submit(w->p, gate_job, NULL, 60);
    pthread_mutex_lock(&mu);
    w->gate_was_open = open_gate;
    pthread_mutex_unlock(&mu);
    return NULL;
}

START_TEST(test_submit_waits_for_budget)
{
    pool *p;
    pthread_t t;
    reset();
    ck_assert_int_eq(pool_create(1, 100, 0, &p), 0);
    ck_assert_int_eq(pool_submit(p, gate_job, NULL, 60), 0);
    wait_started(1);
    struct waiter w = {p, -1, 0};
    ck_assert_int_eq(pthread_create(&t, NULL, blocked_submit, &w), 0);
    usleep(50000); /* it would return now if it did not wait */
    open_the_gate();
    pthread_join(t, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_int_eq(w.gate_was_open, 1);
    pool_destroy(p);
    ck_assert_int_eq(ran, 2);
}
END_TEST

START_TEST(test_fifo_past_ring_growth)
{
    enum { N = 1000 };
    pool *p;
    reset();
    ck_assert_int_eq(pool_create(1, (size_t)-1, 0, &p), 0);
    ck_assert_int_eq(pool_submit(p, gate_job, NULL, 1), 0);
    wait_started(1); /* the one worker is held: the rest queue up */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pool_submit(p, seq_job, (void *)(intptr_t)i, 1), 0);
    open_the_gate();
    pool_destroy(p);
    ck_assert_int_eq(ran, N + 1);
    ck_assert_int_eq(order_ok, 1);
}
END_TEST

static int odd(void *arg, void *ctx)
{
    (void)ctx;
    return (intptr_t)arg % 2 == 1;
}

/* pool_take returns the matching queued jobs in order, never one a worker
** has started nor another function's, frees their cost (a submit that
** waited for it gets in) and leaves the rest queued, to run. */
START_TEST(test_take_back)
{
    enum { N = 100 }; /* past the ring's first size, wrapped by the gate */
    pool *p;
    reset();
    ck_assert_int_eq(pool_create(1, N + 2, 0, &p), 0);
    ck_assert_int_eq(pool_submit(p, gate_job, (void *)(intptr_t)1, 1), 0);
    wait_started(1);
    for (int i = 0; i < N; i++) /* odd i: seq_job with arg i; even: gate_job */
        ck_assert_int_eq(pool_submit(p, i % 2 ? seq_job : gate_job, (void *)(intptr_t)i, 1), 0);
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, 2), -EAGAIN);
    void *out[N];
    ck_assert_uint_eq(pool_take(p, seq_job, odd, NULL, out, 10), 10);
    for (int i = 0; i < 10; i++) ck_assert_int_eq((int)(intptr_t)out[i], 2 * i + 1);
    ck_assert_uint_eq(pool_take(p, seq_job, odd, NULL, out, N), N / 2 - 10);
    ck_assert_int_eq((int)(intptr_t)out[0], 21);
    ck_assert_uint_eq(pool_take(p, seq_job, odd, NULL, out, N), 0);
    ck_assert_uint_eq(pool_take(p, gate_job, odd, NULL, out, N), 0); /* even args only */
    ck_assert_int_eq(pool_try_submit(p, gate_job, NULL, N / 2), 0); /* the cost came back */
    open_the_gate();
    pool_destroy(p);
    ck_assert_int_eq(ran, 1 + N / 2 + 1); /* the held job, the gates left, the last */
}
END_TEST

START_TEST(test_workers_nice)
{
    pool *p;
    reset();
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0);
    ck_assert_int_eq(errno, 0);
    ck_assert_int_eq(pool_create(1, 1, 7, &p), 0);
    ck_assert_int_eq(pool_submit(p, nice_job, NULL, 1), 0);
    pool_destroy(p);
    ck_assert_int_eq(ran, 1);
    /* Raising the value is always allowed; lowering it from above 7 needs
    ** CAP_SYS_NICE or RLIMIT_NICE, and without them the worker keeps base. */
    ck_assert(nice_seen == 7 || (base > 7 && nice_seen == base));
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_budget,
        test_oversized_job_when_idle,
        test_submit_waits_for_budget,
        test_fifo_past_ring_growth,
        test_workers_nice,
        test_take_back,
        NULL,
    };
    return ut_main("pool", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
