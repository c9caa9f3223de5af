/*
** rans.c: static range-ANS coding of byte streams (see rans.h).
**
** The encoder divides by a symbol's frequency once a symbol; it multiplies
** by a reciprocal (below 2^32, kept in 64 bits) and shifts instead, exact
** for the 31-bit states (Granlund and Montgomery). Four coders interleave
** so the decoder's multiplies overlap.
*/
#include "rans.h"
#include "common.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    size_t s;
    double rem; /* fractional part of the scaled count */
};

static int by_rem(const void *a, const void *b)
{
    const struct slot *x = a, *y = b;
    if (x->rem != y->rem) return x->rem > y->rem ? -1 : 1;
    return (int)x->s - (int)y->s;
}

int rans_norm(const uint32_t hist[256], size_t tot, uint16_t freq[256])
{
    if (tot == 0) return -1;
    struct slot sl[256];
    size_t m = 0;
    uint32_t sum = 0;
    for (size_t s = 0; s < 256; s++) {
        freq[s] = 0;
        if (!hist[s]) continue;
        double x = (double)hist[s] * RANS_M / (double)tot;
        uint32_t f = (uint32_t)x;
        freq[s] = (uint16_t)(f ? f : 1);
        sum += freq[s];
        sl[m++] = (struct slot){s, f ? x - f : -1};
    }
    if (m == 0) return -1;
    /* Short: round up the largest remainders. */
    qsort(sl, m, sizeof sl[0], by_rem);
    for (size_t i = 0; sum < RANS_M; i = (i + 1) % m, sum++) freq[sl[i].s]++;
    /* Over (rare symbols forced to 1): take from where it costs least. */
    while (sum > RANS_M) {
        size_t best = 256;
        double cost = 0;
        for (size_t s = 0; s < 256; s++) {
            if (freq[s] <= 1) continue;
            double c = (double)hist[s] / freq[s];
            if (best == 256 || c < cost) best = s, cost = c;
        }
        freq[best]--;
        sum--;
    }
    return 0;
}

static size_t varint_len(uint32_t v) { return v < 128 ? 1 : v < 16384 ? 2 : 3; }

static void range_of(const uint16_t freq[256], int *a, int *b)
{
    *a = 0, *b = 255;
    while (!freq[*a]) (*a)++;
    while (!freq[*b]) (*b)--;
}

static unsigned coders(size_t n) { return n >= RANS_SPLIT ? 4 : 1; }

static size_t header_len(const uint16_t freq[256], size_t n)
{
    int a, b;
    range_of(freq, &a, &b);
    size_t h = 2 + 4 * coders(n);
    for (int s = a; s <= b; s++) h += varint_len(freq[s]);
    return h;
}

double rans_cost(const uint32_t hist[256], size_t tot, size_t n, const uint16_t freq[256])
{
    if (tot == 0) return 0;
    double bits = 0;
    for (int s = 0; s < 256; s++)
        if (hist[s]) bits += hist[s] * (RANS_BITS - log2((double)freq[s]));
    return (double)header_len(freq, n) + bits / 8 * ((double)n / (double)tot) + coders(n);
}

struct esym {
    uint64_t rcp; /* floor(2^shift / f) + 1: x * rcp >> shift == x / f */
    uint32_t f, c, shift, xmax;
};

static void esym_init(struct esym *e, uint32_t f, uint32_t c)
{
    uint32_t l = 0;
    while ((1u << l) < f) l++;
    e->f = f;
    e->c = c;
    e->shift = 31 + l;
    e->rcp = ((uint64_t)1 << e->shift) / f + 1;
    e->xmax = ((RANS_L >> RANS_BITS) << 8) * f;
}

/* State v (renormalised, below e->xmax) with symbol e coded into it. */
static inline uint32_t enc_step(uint32_t v, const struct esym *e)
{
    uint32_t q = (uint32_t)(((uint64_t)v * e->rcp) >> e->shift);
    return (q << RANS_BITS) + (v - q * e->f) + e->c;
}

/* Code one symbol into state *x, renormalising into the bytes below *p
** (not below lo). 0, or -1 when out of room. */
static int put(uint32_t *x, const struct esym *e, const uint8_t *lo, uint8_t **p)
{
    uint32_t v = *x;
    assert(e->f);
    while (v >= e->xmax) {
        if (*p == lo) return -1;
        *--*p = (uint8_t)v;
        v >>= 8;
    }
    *x = enc_step(v, e);
    return 0;
}

size_t rans_encode(const uint8_t *src, size_t n, const uint16_t freq[256], uint8_t *dst,
                   size_t cap)
{
    struct esym es[256];
    memset(es, 0, sizeof es); /* a symbol without a frequency: see rans.h */
    uint32_t c = 0;
    for (int s = 0; s < 256; s++) {
        if (freq[s]) esym_init(&es[s], freq[s], c);
        c += freq[s];
    }
    if (n == 0 || c != RANS_M) return 0;
    size_t hl = header_len(freq, n), km = coders(n) - 1;
    if (cap < hl) return 0;
    uint8_t *lo = dst + hl, *p = dst + cap;
    uint32_t x[4] = {RANS_L, RANS_L, RANS_L, RANS_L};
    size_t i = n;
    /* The last symbols, down to a multiple of 4 when there are 4 coders. */
    for (; i > 0 && (km == 0 || i % 4); i--)
        if (put(&x[(i - 1) & km], &es[src[i - 1]], lo, &p) < 0) return 0;
    if (km == 3) {
        uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
        /* At most two bytes out a step (x < 2^31, xmax >= 2^19), their
        ** count known up front; both stored, the count kept: no branch. */
#define STEP(X, J) do {                                                    \
        const struct esym *e = &es[src[i + J]];                            \
        uint32_t nb = (X >= e->xmax) + ((X >> 8) >= e->xmax);              \
        p[-1] = (uint8_t)X;                                                \
        p[-2] = (uint8_t)(X >> 8);                                         \
        p -= nb;                                                           \
        X = enc_step(X >> (8 * nb), e);                                    \
    } while (0)
        for (; i >= 4 && p - lo >= 8; i -= 4) {
            STEP(x3, -1);
            STEP(x2, -2);
            STEP(x1, -3);
            STEP(x0, -4);
        }
#undef STEP
        x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    }
    for (; i > 0; i--)
        if (put(&x[(i - 1) & km], &es[src[i - 1]], lo, &p) < 0) return 0;
    int a, b;
    range_of(freq, &a, &b);
    uint8_t *h = dst;
    *h++ = (uint8_t)a;
    *h++ = (uint8_t)b;
    for (int s = a; s <= b; s++)
        for (uint32_t v = freq[s];; v >>= 7) {
            *h++ = (uint8_t)((v & 127) | (v >= 128 ? 128 : 0));
            if (v < 128) break;
        }
    for (size_t k = 0; k <= km; k++, h += 4) ck_put32(h, x[k]);
    size_t body = (size_t)(dst + cap - p);
    memmove(h, p, body);
    return hl + body;
}

/* The frequency table of an encoded stream with k coders; returns the
** header length or -EIO. */
static long read_header(const uint8_t *src, size_t len, unsigned k, uint16_t freq[256])
{
    if (len < 2 || src[0] > src[1]) return -EIO;
    memset(freq, 0, 256 * sizeof freq[0]);
    size_t at = 2;
    uint32_t sum = 0;
    for (int s = src[0]; s <= src[1]; s++) {
        uint32_t v = 0;
        for (int sh = 0;; sh += 7) {
            if (at >= len || sh > 14) return -EIO;
            v |= (uint32_t)(src[at] & 127) << sh;
            if (!(src[at++] & 128)) break;
        }
        if (v > RANS_M) return -EIO;
        freq[s] = (uint16_t)v;
        sum += v;
    }
    if (sum != RANS_M || !freq[src[0]] || !freq[src[1]] || len - at < 4 * k) return -EIO;
    return (long)(at + 4 * k);
}

/* Decode entry of a slot: symbol | (slot - its cumulative frequency) << 8 |
** (its frequency - 1) << 20: one load a symbol. */
#define D_SYM(e) ((uint8_t)(e))
#define D_BIAS(e) (((e) >> 8) & (RANS_M - 1))
#define D_FREQ(e) (((e) >> 20) + 1)
_Static_assert(8 + 2 * RANS_BITS <= 32, "a decode entry holds symbol, bias and frequency");

/* State v with the symbol of its decode entry e taken out (not yet
** renormalised). */
static inline uint32_t dec_step(uint32_t v, uint32_t e)
{
    return D_FREQ(e) * (v >> RANS_BITS) + D_BIAS(e);
}

int rans_decode(const uint8_t *src, size_t len, uint8_t *dst, size_t n)
{
    uint16_t freq[256];
    unsigned k = coders(n), km = k - 1;
    long hl = read_header(src, len, k, freq);
    if (hl < 0 || n == 0) return -EIO;
    uint32_t tab[RANS_M];
    uint32_t c = 0;
    for (uint32_t s = 0; s < 256; s++)
        for (uint32_t j = 0; j < freq[s]; j++, c++) tab[c] = s | j << 8 | (freq[s] - 1u) << 20;
    uint32_t x[4] = {RANS_L, RANS_L, RANS_L, RANS_L};
    for (unsigned j = 0; j < k; j++) {
        x[j] = ck_get32(src + hl - 4 * k + 4 * j);
        if (x[j] < RANS_L || x[j] >= RANS_L << 8) return -EIO;
    }
    const uint8_t *p = src + hl, *end = src + len;
    size_t i = 0;
    if (k == 4) {
        /* The four states in registers. A step leaves x >= 2^11 (x >>
        ** RANS_BITS >= 2^11, frequency >= 1), so at most two bytes
        ** renormalise it, two exactly when x < RANS_L / 256: the count
        ** is known before the bytes are read, so the shared byte pointer
        ** does not chain one state's loads to the last one's. No branch:
        ** the count is unpredictable. While 8 bytes remain. */
        uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
#define STEP(X, J) do {                                                    \
        uint32_t e = tab[X & (RANS_M - 1)];                                \
        X = dec_step(X, e);                                                \
        dst[i + J] = D_SYM(e);                                             \
        uint32_t r1 = X < RANS_L, r2 = X < (RANS_L >> 8), nb = r1 + r2;    \
        uint32_t in2 = (uint32_t)p[0] << 8 | p[1];                         \
        uint32_t in = r2 ? in2 : p[0] & (0u - r1);                         \
        X = X << (8 * nb) | in;                                            \
        p += nb;                                                           \
    } while (0)
        for (; i + 4 <= n && end - p >= 8; i += 4) {
            STEP(x0, 0);
            STEP(x1, 1);
            STEP(x2, 2);
            STEP(x3, 3);
        }
#undef STEP
        x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    }
    for (; i < n; i++) {
        uint32_t v = x[i & km], e = tab[v & (RANS_M - 1)];
        v = dec_step(v, e);
        while (v < RANS_L) {
            if (p == end) return -EIO;
            v = v << 8 | *p++;
        }
        x[i & km] = v;
        dst[i] = D_SYM(e);
    }
    for (unsigned j = 0; j < 4; j++)
        if (x[j] != RANS_L) return -EIO;
    return p == end ? 0 : -EIO;
}
