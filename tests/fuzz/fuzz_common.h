/*
** fuzz_common.h: the checks every fmt fuzz target makes (header-only).
**
** fuzz_fmt_check(d, n, seed) parses d[0..n) all at once, in chunks whose
** sizes come from seed, and (for small inputs) one byte at a time, popping
** after every feed. It traps unless each list keeps the rules of fmt_next
** (len > 0, a valid dtype and width, len % width == 0, offsets increasing
** and not overlapping, no tensor announced later than the feed that reached
** its first byte), memory stays within FMT_MAX_MEM, and all lists agree.
*/
#ifndef CKPT_FUZZ_COMMON_H
#define CKPT_FUZZ_COMMON_H

#include "../../src/fmt.h"
#include "../../src/fmt_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

struct fuzz_list {
    struct fmt_tensor *v;
    size_t n, cap;
};

static inline void fuzz_add(struct fuzz_list *l, const struct fmt_tensor *t, uint64_t prev_fed)
{
    FUZZ_REQUIRE(t->len > 0);
    FUZZ_REQUIRE(t->dtype > FMT_OPAQUE && t->dtype < FMT_DTYPE_MAX);
    FUZZ_REQUIRE(t->width == fmt_dtypes[t->dtype].width && t->width != 0);
    FUZZ_REQUIRE(t->is_float == fmt_dtypes[t->dtype].is_float);
    FUZZ_REQUIRE(t->len % t->width == 0);
    FUZZ_REQUIRE(memchr(t->name, 0, FMT_NAME_MAX) != NULL);
    FUZZ_REQUIRE(t->off >= prev_fed);
    FUZZ_REQUIRE(t->off + t->len > t->off);
    if (l->n) {
        const struct fmt_tensor *last = &l->v[l->n - 1];
        FUZZ_REQUIRE(t->off >= last->off + last->len);
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        FUZZ_REQUIRE(l->v != NULL);
    }
    l->v[l->n++] = *t;
}

static inline uint64_t fuzz_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* step 0: all at once; seed 0: steps of `step` bytes; else random sizes. */
static inline void fuzz_parse(const uint8_t *d, size_t n, size_t step, uint64_t seed,
                       struct fuzz_list *l)
{
    fmt_parser *p;
    struct fmt_tensor t;
    FUZZ_REQUIRE(fmt_parser_new(&p) == 0);
    for (size_t fed = 0; fed < n;) {
        size_t c = step == 0 ? n - fed : seed ? 1 + fuzz_rand(&seed) % step : step;
        if (c > n - fed) c = n - fed;
        FUZZ_REQUIRE(fmt_feed(p, d + fed, c) == 0);
        while (fmt_next(p, &t)) fuzz_add(l, &t, fed);
        fed += c;
    }
    FUZZ_REQUIRE(fmt_mem_peak(p) <= FMT_MAX_MEM);
    fmt_parser_free(p);
}

static inline void fuzz_same(const struct fuzz_list *a, const struct fuzz_list *b)
{
    FUZZ_REQUIRE(a->n == b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct fmt_tensor *x = &a->v[i], *y = &b->v[i];
        FUZZ_REQUIRE(x->off == y->off && x->len == y->len && x->dtype == y->dtype);
        FUZZ_REQUIRE(strcmp(x->name, y->name) == 0);
    }
}

static inline void fuzz_fmt_check(const uint8_t *d, size_t n, uint64_t seed)
{
    struct fuzz_list whole = {0}, chunked = {0}, bytes = {0};
    fuzz_parse(d, n, 0, 0, &whole);
    fuzz_parse(d, n, 1 + seed % 300, seed | 1, &chunked);
    fuzz_same(&whole, &chunked);
    if (n <= 4096) {
        fuzz_parse(d, n, 1, 0, &bytes);
        fuzz_same(&whole, &bytes);
    }
    free(whole.v);
    free(chunked.v);
    free(bytes.v);
}

/* A seed for the chunk sizes from the input's first bytes. */
static inline uint64_t fuzz_seed(const uint8_t *d, size_t n)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n && i < 8; i++) s = s * 131 + d[i];
    return s;
}

#endif
