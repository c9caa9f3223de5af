/*
** unit_bcache.c: the decoded block cache (bcache.h): bounds, LRU order,
** and the writer's policy for delta bases, which must keep serving a
** fixed share of the bases when a checkpoint is larger than the cache,
** and claims, which let one reader decode a block while others wait.
*/
#include "../src/bbuf.h"
#include "../src/bcache.h"
#include "unit_util.h"

#include <pthread.h>
#include <unistd.h>

#define BLK 1000

/* The cache frees what it holds with bbuf_free. */
static void *xbbuf(size_t n)
{
    void *p = bbuf_alloc(n);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void put_block(bcache *c, uint64_t key, int cold)
{
    uint8_t *b = xbbuf(BLK);
    memset(b, (int)(key & 0xFF), BLK);
    bcache_put(c, key, b, BLK, cold);
}

static int has(bcache *c, uint64_t key)
{
    uint8_t probe[BLK];
    int hit = bcache_get(c, key, 0, BLK, probe);
    if (hit) ck_assert_uint_eq(probe[BLK - 1], key & 0xFF);
    return hit;
}

START_TEST(test_bounds_and_ranges)
{
    bcache *c;
    ck_assert_int_eq(bcache_create(3 * BLK, &c), 0);
    for (uint64_t k = 1; k <= 4; k++) put_block(c, k, 0);
    ck_assert(!has(c, 1)); /* the least recently used went */
    ck_assert(has(c, 2) && has(c, 3) && has(c, 4));
    uint8_t part[10];
    ck_assert_int_eq(bcache_get(c, 3, BLK - 10, 10, part), 1);
    ck_assert_int_eq(bcache_get(c, 3, BLK - 9, 10, part), 0); /* past its end */
    put_block(c, 3, 0);                                      /* replaced, not doubled */
    put_block(c, 5, 0);
    ck_assert(!has(c, 2));
    ck_assert(has(c, 3) && has(c, 4) && has(c, 5));
    uint8_t *big = xbbuf(4 * BLK);
    bcache_put(c, 9, big, 4 * BLK, 0); /* larger than the cache: dropped */
    ck_assert(has(c, 3) && has(c, 4) && has(c, 5));
    bcache_destroy(c);
}
END_TEST

START_TEST(test_last_and_cold)
{
    bcache *c;
    ck_assert_int_eq(bcache_create(3 * BLK, &c), 0);
    for (uint64_t k = 1; k <= 3; k++) put_block(c, k, 0);
    ck_assert_int_eq(bcache_mark_last(c, 3), 1); /* newest, now first to go */
    put_block(c, 4, 0);
    ck_assert(!has(c, 3));
    ck_assert(has(c, 1) && has(c, 2) && has(c, 4));
    put_block(c, 5, 1); /* cold: evicts the LRU (1), then is the first to go */
    ck_assert(!has(c, 1));
    put_block(c, 6, 1);
    ck_assert(!has(c, 5));
    ck_assert(has(c, 6)); /* a hit makes it the most recently used */
    put_block(c, 7, 0);
    ck_assert(!has(c, 2));
    ck_assert(has(c, 4) && has(c, 6) && has(c, 7));
    bcache_destroy(c);
}
END_TEST

/* A base at its last use leaves the cache with its buffer: room for its
** successor without evicting another block. */
START_TEST(test_take)
{
    bcache *c;
    ck_assert_int_eq(bcache_create(3 * BLK, &c), 0);
    for (uint64_t k = 1; k <= 3; k++) put_block(c, k, 0);
    ck_assert_ptr_null(bcache_take(c, 9, BLK));     /* not cached */
    ck_assert_ptr_null(bcache_take(c, 2, BLK / 2)); /* not whole */
    uint8_t *b = bcache_take(c, 2, BLK);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b[0], 2);
    ck_assert_uint_eq(b[BLK - 1], 2);
    ck_assert(!has(c, 2));
    bbuf_free(b);
    put_block(c, 4, 0); /* fits in the room 2 left */
    ck_assert(has(c, 1) && has(c, 3) && has(c, 4));
    bcache_destroy(c);
}
END_TEST

/* A pinned block's bytes stay in place while the cache evicts it, replaces
** it or is asked to give it away; the last unpin frees them. Were an
** evicted pinned block freed, the next buffer of its size would reuse it
** (its bytes checked after that allocation) and its unpin would free it
** twice, which bbuf stops with an abort. */
START_TEST(test_pins)
{
    bcache *c;
    ck_assert_int_eq(bcache_create(2 * BLK, &c), 0);
    put_block(c, 1, 0);
    const uint8_t *at = NULL;
    void *pin = NULL, *pin2 = NULL;
    ck_assert_int_eq(bcache_pin_claim(c, 1, 10, 20, &at, &pin), BCACHE_HIT);
    ck_assert_ptr_nonnull(pin);
    ck_assert_uint_eq(at[0], 1);
    ck_assert_ptr_null(bcache_take(c, 1, BLK)); /* pinned: not given away */
    put_block(c, 2, 0);
    put_block(c, 3, 0); /* evicts 1, still pinned */
    ck_assert(!has(c, 1));
    const uint8_t *at1 = at;
    /* A miss claims; the decoded block goes in pinned. */
    ck_assert_int_eq(bcache_pin_claim(c, 4, 0, BLK, &at, &pin2), BCACHE_MINE);
    uint8_t *b = xbbuf(BLK); /* block 1's buffer, were it freed */
    memset(b, 4, BLK);
    ck_assert_uint_eq(at1[19], 1);
    ck_assert_uint_eq(at1[BLK - 11], 1);
    pin2 = bcache_put_pin(c, 4, b, BLK);
    ck_assert_ptr_nonnull(pin2);
    put_block(c, 4, 0); /* replaced while pinned */
    ck_assert_uint_eq(b[BLK - 1], 4);
    bcache_unpin(c, pin);
    bcache_unpin(c, pin2);
    ck_assert(has(c, 4));
    /* Too large to cache: NULL, the buffer stays the caller's. */
    uint8_t *big = xbbuf(3 * BLK);
    ck_assert_ptr_null(bcache_put_pin(c, 5, big, 3 * BLK));
    big[3 * BLK - 1] = 1;
    bbuf_free(big);
    /* Unpinned again, it can be taken. */
    ck_assert_int_eq(bcache_pin_claim(c, 4, 0, 1, &at, &pin), BCACHE_HIT);
    bcache_unpin(c, pin);
    bbuf_free(bcache_take(c, 4, BLK));
    ck_assert(!has(c, 4));
    bcache_destroy(c);
}
END_TEST

/* Versions of a file of N blocks written in turn, each block a delta
** against the same block of the version before, as store_put_block uses
** the cache: the base taken out (bcache_take) when cached, the new block
** put hot then, cold when its base was not cached; every KEY versions the
** chain is full and a keyframe is written instead, its base only marked
** (bcache_mark_last). With room for C < N blocks, plain LRU would miss
** every base; this serves C - 1 of N, keyframes or not. */
START_TEST(test_cyclic_bases)
{
    enum { N = 50, C = 20, VERSIONS = 20, KEY = 4 };
    bcache *c;
    ck_assert_int_eq(bcache_create(C * BLK, &c), 0);
    for (uint64_t b = 0; b < N; b++) put_block(c, b, 1);
    for (uint64_t v = 1; v < VERSIONS; v++) {
        int hits = 0;
        for (uint64_t b = 0; b < N; b++) {
            uint64_t old = (v - 1) * N + b;
            uint8_t *base = v % KEY ? bcache_take(c, old, BLK) : NULL;
            int hit = base || (v % KEY == 0 && bcache_mark_last(c, old));
            if (base) ck_assert_uint_eq(base[BLK - 1], old & 0xFF);
            bbuf_free(base);
            hits += hit;
            put_block(c, v * N + b, !hit);
        }
        ck_assert_int_ge(hits, C - 1);
    }
    bcache_destroy(c);
}
END_TEST

START_TEST(test_claims)
{
    bcache *c;
    uint8_t probe[BLK];
    ck_assert_int_eq(bcache_create(3 * BLK, &c), 0);
    ck_assert_int_eq(bcache_get_claim(c, 7, 0, BLK, probe, 0), BCACHE_MINE);
    ck_assert_int_eq(bcache_get_claim(c, 7, 0, BLK, probe, 0), BCACHE_BUSY);
    ck_assert_int_eq(bcache_get_claim(c, 8, 0, BLK, probe, 0), BCACHE_MINE); /* per key */
    put_block(c, 7, 0); /* ends the claim */
    probe[0] = 0;
    ck_assert_int_eq(bcache_get_claim(c, 7, 0, BLK, probe, 0), BCACHE_HIT);
    ck_assert_uint_eq(probe[0], 7);
    bcache_unclaim(c, 8); /* a failed decode: the next asker decodes */
    ck_assert_int_eq(bcache_get_claim(c, 8, 0, BLK, probe, 0), BCACHE_MINE);
    bcache_put(c, 8, xbbuf(4 * BLK), 4 * BLK, 0); /* too large: dropped, claim ended */
    ck_assert_int_eq(bcache_get_claim(c, 8, 0, BLK, probe, 0), BCACHE_MINE);
    bcache_destroy(c);
}
END_TEST

struct waiter {
    bcache *c;
    uint64_t key;
    int rc, started;
    uint8_t got[BLK];
};

static void *wait_claim(void *arg)
{
    struct waiter *w = arg;
    __atomic_store_n(&w->started, 1, __ATOMIC_RELEASE);
    int rc = bcache_get_claim(w->c, w->key, 0, BLK, w->got, 1);
    __atomic_store_n(&w->rc, rc, __ATOMIC_RELEASE);
    return NULL;
}

/* A waiter returns only when the claim ends: with the block when it was
** cached, else with the claim passed to it. */
START_TEST(test_claim_waiters)
{
    bcache *c;
    uint8_t probe[BLK];
    ck_assert_int_eq(bcache_create(3 * BLK, &c), 0);
    struct waiter w[2] = {{.c = c, .key = 5, .rc = -1}, {.c = c, .key = 6, .rc = -1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(bcache_get_claim(c, w[i].key, 0, BLK, probe, 1), BCACHE_MINE);
        ck_assert_int_eq(pthread_create(&t[i], NULL, wait_claim, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        while (!__atomic_load_n(&w[i].started, __ATOMIC_ACQUIRE)) usleep(1000);
    usleep(50 * 1000);
    ck_assert_int_eq(__atomic_load_n(&w[0].rc, __ATOMIC_ACQUIRE), -1); /* still waiting */
    ck_assert_int_eq(__atomic_load_n(&w[1].rc, __ATOMIC_ACQUIRE), -1);
    put_block(c, 5, 0);
    bcache_unclaim(c, 6);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    ck_assert_int_eq(w[0].rc, BCACHE_HIT);
    ck_assert_uint_eq(w[0].got[BLK - 1], 5);
    ck_assert_int_eq(w[1].rc, BCACHE_MINE);
    ck_assert_int_eq(bcache_get_claim(c, 6, 0, BLK, probe, 0), BCACHE_BUSY); /* now its */
    bcache_destroy(c);
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_bounds_and_ranges,
        test_last_and_cold,
        test_take,
        test_cyclic_bases,
        test_claims,
        test_claim_waiters,
        test_pins,
        NULL,
    };
    return ut_main("bcache", (const struct ut_tcase[]){
        {.name = "core", .tests = core_tests},
        {0},
    });
}
