/*
** unit_bbuf.c: recycled block buffers (bbuf.h): a freed buffer serves the
** next request of its size class, the free list stays within BBUF_KEEP by unmapping
** the least recently freed, small requests stay with malloc, and buffers
** pass between threads.
*/
#include "../src/bbuf.h"
#include "unit_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1u << 20)

static size_t mapped_now(void)
{
    size_t m, k;
    bbuf_stats(&m, &k);
    return m;
}

static size_t kept_now(void)
{
    size_t m, k;
    bbuf_stats(&m, &k);
    return k;
}

/* 1 if the page holding p is mapped (mincore fails with ENOMEM if not). */
static int is_mapped(const void *p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char v;
    void *a = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));
    if (mincore(a, page, &v) == 0) return 1;
    ck_assert_int_eq(errno, ENOMEM);
    return 0;
}

START_TEST(test_reuse)
{
    size_t m0 = mapped_now();
    uint8_t *p = bbuf_alloc(MIB);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    memset(p, 0xab, MIB);
    ck_assert_uint_eq(mapped_now(), m0 + 1);
    bbuf_free(p);
    ck_assert_uint_ge(kept_now(), MIB);

    uint8_t *q = bbuf_alloc(MIB); /* the same buffer, not a new mapping */
    ck_assert_ptr_eq(q, p);
    ck_assert_uint_eq(mapped_now(), m0 + 1);
    bbuf_free(q);
    q = bbuf_alloc(MIB + 1000); /* the same size class */
    ck_assert_ptr_eq(q, p);
    memset(q, 0xcd, MIB + 1000);
    bbuf_free(q);
    q = bbuf_alloc(MIB / 4); /* another class: a new one */
    ck_assert_ptr_ne(q, p);
    ck_assert_uint_eq(mapped_now(), m0 + 2);
    memset(q, 1, MIB / 4);
    bbuf_free(q);
}
END_TEST

START_TEST(test_small_and_empty)
{
    size_t m0 = mapped_now(), k0 = kept_now();
    uint8_t *s = bbuf_alloc(100);
    uint8_t *z = bbuf_alloc(0);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(z);
    ck_assert_uint_eq((uintptr_t)s % 64, 0);
    memset(s, 7, 100);
    bbuf_free(s);
    bbuf_free(z);
    bbuf_free(NULL);
    ck_assert_uint_eq(mapped_now(), m0); /* malloc's, not mappings */
    ck_assert_uint_eq(kept_now(), k0);
}
END_TEST

START_TEST(test_bound)
{
    enum { N = BBUF_KEEP / MIB + 8 };
    uint8_t *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = bbuf_alloc(MIB);
        ck_assert_ptr_nonnull(b[i]);
        b[i][MIB - 1] = (uint8_t)i;
    }
    for (int i = 0; i < N; i++) bbuf_free(b[i]);
    ck_assert_uint_le(kept_now(), BBUF_KEEP);
    ck_assert_uint_gt(kept_now(), BBUF_KEEP - 2 * MIB);
    /* The first freed went back to the system; the last freed waits. */
    ck_assert(!is_mapped(b[0]));
    ck_assert(!is_mapped(b[7]));
    ck_assert(is_mapped(b[N - 1]));
    uint8_t *q = bbuf_alloc(MIB);
    ck_assert_ptr_eq(q, b[N - 1]); /* most recently freed first */
    bbuf_free(q);
}
END_TEST

/* One thread allocates and fills, another checks and frees. */
#define HANDOFF 200
static uint8_t *box[HANDOFF];
static pthread_mutex_t box_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t box_cv = PTHREAD_COND_INITIALIZER;
static int filled;

static void *consumer(void *arg)
{
    int *bad = arg;
    for (int i = 0; i < HANDOFF; i++) {
        pthread_mutex_lock(&box_mu);
        while (filled <= i) pthread_cond_wait(&box_cv, &box_mu);
        uint8_t *p = box[i];
        pthread_mutex_unlock(&box_mu);
        size_t n = MIB - (size_t)i * 1000;
        if (p[0] != (uint8_t)i || p[n - 1] != (uint8_t)i || p[n / 2] != (uint8_t)i) (*bad)++;
        bbuf_free(p);
    }
    return NULL;
}

START_TEST(test_threads)
{
    pthread_t t;
    int bad = 0;
    ck_assert_int_eq(pthread_create(&t, NULL, consumer, &bad), 0);
    for (int i = 0; i < HANDOFF; i++) {
        size_t n = MIB - (size_t)i * 1000;
        uint8_t *p = bbuf_alloc(n);
        ck_assert_ptr_nonnull(p);
        memset(p, i, n);
        pthread_mutex_lock(&box_mu);
        box[i] = p;
        filled = i + 1;
        pthread_cond_signal(&box_cv);
        pthread_mutex_unlock(&box_mu);
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_le(kept_now(), BBUF_KEEP);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_reuse,
        test_small_and_empty,
        test_bound,
        test_threads,
        NULL,
    };
    return ut_main("bbuf", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
