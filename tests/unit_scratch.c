/*
** unit_scratch.c: per-thread working memory (scratch.h): a slot's buffer
** is aligned, kept from call to call and grows on demand; slots never share
** memory; threads never share a slot; an object is made once per thread and
** released when the thread exits.
*/
#include "../src/scratch.h"
#include "unit_util.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

START_TEST(test_buffers)
{
    uint8_t *a = scratch_get(SCRATCH_TCODEC, 100);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % SCRATCH_ALIGN, 0);
    memset(a, 7, 100);
    ck_assert_ptr_eq(scratch_get(SCRATCH_TCODEC, 50), a); /* no shrink, contents kept */
    ck_assert_uint_eq(a[99], 7);
    uint8_t *f = scratch_get(SCRATCH_FRAME, 100);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_ne(f, a);
    uint8_t *big = scratch_get(SCRATCH_TCODEC, 3 << 20);
    ck_assert_ptr_nonnull(big);
    ck_assert_uint_eq((uintptr_t)big % SCRATCH_ALIGN, 0);
    memset(big, 1, 3 << 20);
    ck_assert_ptr_eq(scratch_get(SCRATCH_TCODEC, 1 << 20), big);
    ck_assert_ptr_eq(scratch_get(SCRATCH_FRAME, 100), f);
}
END_TEST

static int made, dropped;
static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;

static void *make_obj(void)
{
    pthread_mutex_lock(&count_mu);
    made++;
    pthread_mutex_unlock(&count_mu);
    return malloc(16);
}

static void drop_obj(void *p)
{
    pthread_mutex_lock(&count_mu);
    dropped++;
    pthread_mutex_unlock(&count_mu);
    free(p);
}

/* A thread's own buffer and object: not the main thread's. */
static void *other_thread(void *arg)
{
    void **seen = arg;
    seen[0] = scratch_get(SCRATCH_TCODEC, 100);
    seen[1] = scratch_obj(SCRATCH_ZSTD_CCTX, make_obj, drop_obj);
    seen[2] = scratch_obj(SCRATCH_ZSTD_CCTX, make_obj, drop_obj);
    return NULL;
}

START_TEST(test_objects_and_threads)
{
    void *mine = scratch_obj(SCRATCH_ZSTD_CCTX, make_obj, drop_obj);
    ck_assert_ptr_nonnull(mine);
    ck_assert_ptr_eq(scratch_obj(SCRATCH_ZSTD_CCTX, make_obj, drop_obj), mine);
    ck_assert_int_eq(made, 1);
    void *buf = scratch_get(SCRATCH_TCODEC, 100);
    void *seen[3];
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, seen), 0);
    pthread_join(t, NULL);
    ck_assert_ptr_nonnull(seen[0]);
    ck_assert_ptr_ne(seen[0], buf);
    ck_assert_ptr_nonnull(seen[1]);
    ck_assert_ptr_eq(seen[1], seen[2]);
    ck_assert_int_eq(made, 2);
    ck_assert_int_eq(dropped, 1); /* the other thread's, at its exit */
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_buffers,
        test_objects_and_threads,
        NULL,
    };
    return ut_main("scratch", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
