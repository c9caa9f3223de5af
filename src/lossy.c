/*
** lossy.c: lossy coding of tensor blocks (see lossy.h).
**
** The encoder sorts the finite kept values (a radix sort of order-preserving
** keys) and reduces them to distinct values with running counts and sums, so
** that one Lloyd iteration costs k binary searches, not a pass over the
** block; it starts from clusters split by largest error and stops when no
** boundary moves. Each kept element then goes to its nearest centroid, and
** the block is rebuilt by the decoder's own code: that is what makes recon
** what decode returns. Scratch: about 34 bytes an element, freed on return.
**
** All arithmetic on values is f32 (the residual, base + centroid), rounded
** to the dtype to nearest even by integer code, so rebuilding is
** bit-deterministic wherever f32 is evaluated as f32 (FLT_EVAL_METHOD 0:
** x86-64, arm64).
*/
#include "lossy.h"
#include "common.h"
#include "bstream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KMAX 256
#define LLOYD_MAX_ITER 32 /* from the split start, 10 come within 2% of 1000 */
#define STATS_SAMPLE 65536

/* ---- elements ---- */

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 31, m = h & 0x3ff;
    if (e == 0) return f32_of(s | bits_of((float)m * 0x1p-24f)); /* exact */
    if (e == 31) return f32_of(s | 0x7f800000 | m << 13);
    return f32_of(s | (e + 112) << 23 | m << 13);
}

static uint16_t f32_to_f16(float f)
{
    uint32_t u = bits_of(f), s = u >> 16 & 0x8000;
    u &= 0x7fffffff;
    if (u > 0x7f800000) return (uint16_t)(s | 0x7e00 | (u >> 13 & 0x3ff)); /* NaN */
    if (u >= 0x477ff000) return (uint16_t)(s | 0x7c00); /* rounds past 65504 */
    if (u >= 0x38800000) { /* normal: drop 13 bits */
        u += 0xfff + (u >> 13 & 1);
        return (uint16_t)(s | (u - 0x38000000) >> 13);
    }
    uint32_t e = u >> 23; /* subnormal (or zero): units of 2^-24 */
    if (e < 102) return (uint16_t)s;
    uint32_t m = (u & 0x7fffff) | 0x800000, sh = 126 - e;
    uint32_t q = m >> sh, r = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    q += r > half || (r == half && (q & 1));
    return (uint16_t)(s | q);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)(u >> 16 | 0x40); /* NaN */
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

static unsigned width(int dtype) { return dtype == LOSSY_F32 ? 4 : 2; }

/* A known dtype, and n_bytes a whole number of its elements. */
static int dtype_ok(int dtype, size_t n_bytes)
{
    return dtype >= LOSSY_BF16 && dtype <= LOSSY_F32 && n_bytes % width(dtype) == 0;
}

static uint32_t get_bits(const uint8_t *p, size_t i, unsigned w)
{
    if (w == 4) return ck_get32(p + 4 * i);
    return ck_get16(p + 2 * i);
}

static void put_bits(uint8_t *p, size_t i, unsigned w, uint32_t v)
{
    p += w * i;
    for (unsigned k = 0; k < w; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* The value of an element with dtype bits b. */
static float value(int dtype, uint32_t b)
{
    switch (dtype) {
    case LOSSY_BF16: return f32_of(b << 16);
    case LOSSY_F16: return f16_to_f32((uint16_t)b);
    default: return f32_of(b);
    }
}

static float load(int dtype, const uint8_t *p, size_t i)
{
    return value(dtype, get_bits(p, i, width(dtype)));
}

/* The dtype's bits for f, rounded to nearest even. */
static uint32_t dt_bits(int dtype, float f)
{
    switch (dtype) {
    case LOSSY_BF16: return f32_to_bf16(f);
    case LOSSY_F16: return f32_to_f16(f);
    default: return bits_of(f);
    }
}

static int bit(const uint8_t *mask, size_t i) { return mask[i / 8] >> (i % 8) & 1; }

/* Order-preserving keys: a < b as floats iff key(a) < key(b) (-0 < +0). */
static uint32_t key_of(float f)
{
    uint32_t u = bits_of(f);
    return u ^ (u >> 31 ? 0xffffffffu : 0x80000000u);
}

static float f_of_key(uint32_t k) { return f32_of(k ^ (k >> 31 ? 0x80000000u : 0xffffffffu)); }

/* ---- k-means ---- */

/* Sort a[0..m) ascending, tmp holding m: LSD radix, 11 bits a pass; a pass
** whose digit is the same in every key is skipped. */
static void radix_sort(uint32_t *a, uint32_t *tmp, size_t m)
{
    uint32_t hist[3][2048];
    memset(hist, 0, sizeof hist);
    for (size_t i = 0; i < m; i++)
        for (int p = 0; p < 3; p++) hist[p][a[i] >> (11 * p) & 2047]++;
    uint32_t *src = a, *dst = tmp;
    for (int p = 0; p < 3; p++) {
        if (m == 0 || hist[p][a[0] >> (11 * p) & 2047] == m) continue;
        uint32_t sum = 0;
        for (int d = 0; d < 2048; d++) {
            uint32_t c = hist[p][d];
            hist[p][d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < m; i++) dst[hist[p][src[i] >> (11 * p) & 2047]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, m * sizeof *a);
}

/* Sorted values reduced to u distinct ones: val[j], with cum[j] values
** before it, sum[j] their sum and sq[j] the sum of their squares (cum, sum,
** sq: u + 1 entries). */
struct dist {
    float *val;
    uint32_t *cum;
    double *sum, *sq;
    size_t u;
};

static void dist_build(struct dist *d, const uint32_t *keys, size_t m)
{
    size_t u = 0;
    d->cum[0] = 0;
    d->sum[0] = d->sq[0] = 0;
    for (size_t i = 0; i < m; i++) {
        if (i == 0 || keys[i] != keys[i - 1]) {
            d->val[u++] = f_of_key(keys[i]);
            d->cum[u] = d->cum[u - 1];
            d->sum[u] = d->sum[u - 1];
            d->sq[u] = d->sq[u - 1];
        }
        double v = d->val[u - 1];
        d->cum[u]++;
        d->sum[u] += v;
        d->sq[u] += v * v;
    }
    d->u = u;
}

static double seg_mean(const struct dist *d, size_t a, size_t b)
{
    return (d->sum[b] - d->sum[a]) / (d->cum[b] - d->cum[a]);
}

/* Squared error of distinct values [a, b) about their mean. */
static double seg_err(const struct dist *d, size_t a, size_t b)
{
    double s = d->sum[b] - d->sum[a];
    return d->sq[b] - d->sq[a] - s * s / (d->cum[b] - d->cum[a]);
}

/* First j with val[j] >= x, or u. */
static size_t lower_bound(const float *val, size_t u, double x)
{
    size_t lo = 0;
    while (u > 0) {
        size_t h = u / 2;
        if (val[lo + h] < x) {
            lo += h + 1;
            u -= h + 1;
        } else {
            u = h;
        }
    }
    return lo;
}

/* Split d into k clusters of distinct values, cluster j = [b[j], b[j+1]):
** k - 1 times, the cluster of largest squared error splits at its mean.
** Quantiles would leave a heavy tail, which dominates the error, one
** cluster that Lloyd's iterations then take hundreds of steps to widen. */
static void split(const struct dist *d, unsigned k, size_t *b)
{
    b[0] = 0;
    b[1] = d->u;
    for (unsigned n = 1; n < k; n++) {
        unsigned worst = 0;
        double we = -INFINITY;
        for (unsigned j = 0; j < n; j++) {
            double e = b[j + 1] - b[j] > 1 ? seg_err(d, b[j], b[j + 1]) : -INFINITY;
            if (e > we) {
                we = e;
                worst = j;
            }
        }
        size_t lo = b[worst], hi = b[worst + 1];
        size_t at = lo + lower_bound(d->val + lo, hi - lo, seg_mean(d, lo, hi));
        memmove(b + worst + 2, b + worst + 1, (n - worst) * sizeof *b);
        b[worst + 1] = CK_MIN(CK_MAX(at, lo + 1), hi - 1);
    }
}

/* k centroids c (ascending) for d, which has more than k distinct values:
** split clusters to start, then Lloyd's iterations until none moves. */
static void lloyd(const struct dist *d, unsigned k, float *c)
{
    size_t b[KMAX + 1];
    split(d, k, b);
    for (int it = 0; it < LLOYD_MAX_ITER; it++) {
        for (unsigned j = 0; j < k; j++)
            if (b[j + 1] > b[j]) c[j] = (float)seg_mean(d, b[j], b[j + 1]);
        int moved = 0;
        for (unsigned j = 1; j < k; j++) {
            size_t nb = lower_bound(d->val, d->u, 0.5 * ((double)c[j - 1] + c[j]));
            moved |= nb != b[j];
            b[j] = nb;
        }
        if (!moved) break;
    }
}

/* Centroids for the values with keys keys[0..m) (sorted in place): the
** distinct values themselves if at most kmax, else kmax by k-means. Returns
** their number k >= 1. */
static unsigned centroids(uint32_t *keys, size_t m, unsigned kmax, struct dist *d, float *c)
{
    radix_sort(keys, d->cum, m);
    dist_build(d, keys, m);
    if (d->u > kmax) {
        lloyd(d, kmax, c);
        return kmax;
    }
    memcpy(c, d->val, d->u * sizeof *c);
    if (d->u == 0) c[0] = 0;
    return d->u ? (unsigned)d->u : 1;
}

/* Nearest-centroid search over key boundaries: bound[j] is the smallest key
** that goes to centroid j + 1, padded to span - 1 entries (span a power of
** two >= k) for a branch-free search. A value equal to a centroid always
** finds it, even -0.0 beside +0.0. */
struct search {
    unsigned span;
    uint32_t bound[KMAX];
};

static void search_init(struct search *s, const float *c, unsigned k)
{
    s->span = 1;
    while (s->span < k) s->span *= 2;
    for (unsigned j = 0; j + 1 < s->span; j++) {
        if (j + 1 >= k) {
            s->bound[j] = UINT32_MAX;
            continue;
        }
        float mid = (float)(0.5 * ((double)c[j] + c[j + 1]));
        s->bound[j] = CK_MAX(key_of(mid), key_of(c[j]) + 1);
    }
}

static unsigned search_index(const struct search *s, float v)
{
    uint32_t kv = key_of(v);
    unsigned i = 0;
    for (unsigned step = s->span / 2; step; step /= 2)
        if (kv >= s->bound[i + step - 1]) i += step;
    return i;
}

/* Index bits per element for k centroids. */
static unsigned pack_bits(unsigned k) { return k <= 2 ? 1 : k <= 4 ? 2 : k <= 16 ? 4 : 8; }

static size_t packed_len(size_t c, unsigned p) { return (c * p + 7) / 8; }

static void pack(const uint8_t *idx, size_t c, unsigned p, uint8_t *out)
{
    memset(out, 0, packed_len(c, p));
    for (size_t i = 0; i < c; i++) out[i * p / 8] |= (uint8_t)(idx[i] << (i * p % 8));
}

static int unpack(const uint8_t *in, size_t c, unsigned p, unsigned k, uint8_t *idx)
{
    unsigned bad = 0, m = (1u << p) - 1;
    for (size_t i = 0; i < c; i++) {
        idx[i] = (uint8_t)(in[i * p / 8] >> (i * p % 8) & m);
        bad |= idx[i] >= k;
    }
    return bad ? -EIO : 0;
}

/* ---- the stored form ---- */

/* What a stored block says, exceptions aside. */
struct plan {
    int kind, dtype;
    unsigned w, bits, k;
    float c[KMAX];
    const uint8_t *mask; /* NULL: all kept (k-means) */
    const uint8_t *idx;  /* one per kept element */
};

static unsigned kmax_of(int kind, unsigned bits)
{
    return kind == LOSSY_KMEANS ? 1u << bits : (1u << bits) - 1;
}

/* The block a plan stands for, exceptions aside. */
static void rebuild(const struct plan *p, size_t cnt, const uint8_t *base, uint8_t *dst)
{
    uint32_t tab[KMAX]; /* each centroid in the dtype, for the values kinds */
    for (unsigned j = 0; j < p->k; j++) tab[j] = dt_bits(p->dtype, p->c[j]);
    int res = p->kind == LOSSY_RESIDUAL;
    size_t at = 0;
    for (size_t i = 0; i < cnt; i++) {
        uint32_t v;
        if (p->mask && !bit(p->mask, i))
            v = res ? get_bits(base, i, p->w) : 0;
        else if (res)
            v = dt_bits(p->dtype, load(p->dtype, base, i) + p->c[p->idx[at++]]);
        else
            v = tab[p->idx[at++]];
        put_bits(dst, i, p->w, v);
    }
}

static size_t put_header(const struct plan *p, size_t cnt, uint64_t base_hash, uint8_t *dst)
{
    size_t off = 8;
    dst[0] = (uint8_t)p->kind;
    dst[1] = (uint8_t)p->dtype;
    dst[2] = (uint8_t)p->bits;
    dst[3] = (uint8_t)(p->k - 1);
    ck_put32(dst + 4, (uint32_t)cnt);
    if (p->kind == LOSSY_RESIDUAL) {
        ck_put64(dst + 8, base_hash);
        off = 16;
    }
    for (unsigned j = 0; j < p->k; j++, off += 4) ck_put32(dst + off, bits_of(p->c[j]));
    return off;
}

/* Parse and check the header and centroids; sets *off past them. */
static int get_header(const uint8_t *src, size_t len, const uint8_t *base, uint64_t base_hash,
                      size_t n_bytes, struct plan *p, size_t *off)
{
    if (len < 8) return -EIO;
    p->kind = src[0];
    p->dtype = src[1];
    p->bits = src[2];
    p->k = src[3] + 1u;
    if (p->kind > LOSSY_PRUNED || p->dtype > LOSSY_F32 || p->bits < 1 || p->bits > 8 ||
        p->k > kmax_of(p->kind, p->bits))
        return -EIO;
    p->w = width(p->dtype);
    if (n_bytes % p->w || n_bytes / p->w != ck_get32(src + 4)) return -EIO;
    *off = 8;
    if (p->kind == LOSSY_RESIDUAL) {
        if (!base || len < 16 || ck_get64(src + 8) != base_hash) return -EIO;
        *off = 16;
    }
    if (len - *off < 4 * p->k) return -EIO;
    for (unsigned j = 0; j < p->k; j++, *off += 4) p->c[j] = f32_of(ck_get32(src + *off));
    return 0;
}

/* ---- encode ---- */

size_t lossy_bound(size_t n_bytes)
{
    /* header, hash, centroids, counts, stream headers and coder slack; then
    ** per element of at least 2 bytes: a mask bit, an index byte and at
    ** worst a 6-byte exception record */
    size_t cnt = n_bytes / 2;
    return 64 + 4 * KMAX + cnt / 8 + 7 * cnt;
}

/* Scratch of one encoding, for cnt elements. */
struct work {
    double *sum, *sq;     /* cnt + 1 */
    float *v, *val;       /* cnt: each element's value (residual); distinct values */
    uint32_t *keys, *cum; /* cnt; cnt + 1 (also the sort's scratch) */
    uint8_t *idx, *packed, *mask;
};

static void *work_alloc(struct work *wk, size_t cnt)
{
    size_t n = cnt + 1;
    uint8_t *m = malloc(n * (8 + 8 + 4 + 4 + 4 + 4 + 1 + 1) + n / 8 + 1);
    if (!m) return NULL;
    wk->sum = (double *)m;
    wk->sq = wk->sum + n;
    wk->v = (float *)(wk->sq + n);
    wk->val = wk->v + n;
    wk->keys = (uint32_t *)(wk->val + n);
    wk->cum = wk->keys + n;
    wk->idx = (uint8_t *)(wk->cum + n);
    wk->packed = wk->idx + n;
    wk->mask = wk->packed + n;
    return m;
}

/* Each element's value or residual into wk->v, which are kept into wk->mask
** (all for k-means), the keys of the finite kept ones into wk->keys. Returns
** the number of those keys; *kept gets the number kept. */
static size_t select_kept(const struct lossy_params *p, int dtype, const uint8_t *raw,
                          const uint8_t *base, size_t cnt, struct work *wk, size_t *kept)
{
    size_t m = 0;
    *kept = 0;
    memset(wk->mask, 0, (cnt + 7) / 8);
    for (size_t i = 0; i < cnt; i++) {
        float v = load(dtype, raw, i);
        if (p->kind == LOSSY_RESIDUAL) v -= load(dtype, base, i);
        wk->v[i] = v;
        int fin = isfinite(v);
        int keep = !fin || p->kind == LOSSY_KMEANS ||
                   (fabsf(v) > p->threshold && (!p->mask || bit(p->mask, i)));
        wk->mask[i / 8] |= (uint8_t)(keep << (i % 8));
        *kept += (size_t)keep;
        if (keep && fin) wk->keys[m++] = key_of(v);
    }
    return m;
}

/* The centroid index of each kept element (0 for those not finite). */
static void assign(const struct plan *p, const struct work *wk, size_t cnt)
{
    struct search s;
    search_init(&s, p->c, p->k);
    uint8_t *idx = wk->idx;
    for (size_t i = 0; i < cnt; i++)
        if (bit(wk->mask, i))
            *idx++ = isfinite(wk->v[i]) ? (uint8_t)search_index(&s, wk->v[i]) : 0;
}

/* Write the exception records at dst: kept elements whose value (residual)
** or rebuilt value is not finite keep their raw bits, also in recon.
** Returns the bytes written. */
static size_t put_exceptions(const struct plan *p, const struct work *wk, const uint8_t *raw,
                             size_t cnt, uint8_t *recon, uint8_t *dst)
{
    uint8_t *o = dst + 4;
    uint32_t e = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (!bit(wk->mask, i) || (isfinite(wk->v[i]) && isfinite(load(p->dtype, recon, i))))
            continue;
        ck_put32(o, (uint32_t)i);
        memcpy(o + 4, raw + p->w * i, p->w);
        memcpy(recon + p->w * i, raw + p->w * i, p->w);
        o += 4 + p->w;
        e++;
    }
    ck_put32(dst, e);
    return (size_t)(o - dst);
}

static void measure(int dtype, const uint8_t *raw, const uint8_t *recon, size_t cnt,
                    size_t kept, struct lossy_err *err)
{
    *err = (struct lossy_err){0, 0, 0, kept};
    for (size_t i = 0; i < cnt; i++) {
        double x = load(dtype, raw, i), e = fabs(load(dtype, recon, i) - x);
        if (!isfinite(x)) continue;
        err->sq_err += e * e;
        err->sq_val += x * x;
        err->max_abs = CK_MAX(err->max_abs, e);
    }
}

/* Everything after the centroids; returns the bytes written. */
static size_t put_body(const struct plan *p, const struct work *wk, const uint8_t *raw,
                       size_t cnt, size_t kept, uint8_t *recon, uint8_t *dst, size_t room)
{
    size_t off = 0;
    if (p->mask) {
        ck_put32(dst, (uint32_t)kept);
        off = 4 + bstream_put(wk->mask, (cnt + 7) / 8, dst + 4, room - 4, BSTREAM_FAST);
    }
    unsigned pb = pack_bits(p->k);
    pack(wk->idx, kept, pb, wk->packed);
    off += bstream_put(wk->packed, packed_len(kept, pb), dst + off, room - off, BSTREAM_FAST);
    return off + put_exceptions(p, wk, raw, cnt, recon, dst + off);
}

static int check_args(size_t n_bytes, int dtype, const uint8_t *base,
                      const struct lossy_params *p, size_t cap)
{
    if (!dtype_ok(dtype, n_bytes) || n_bytes / width(dtype) > UINT32_MAX ||
        cap < lossy_bound(n_bytes))
        return -EINVAL;
    if (p->kind < LOSSY_KMEANS || p->kind > LOSSY_PRUNED || p->bits > 8 ||
        (p->kind == LOSSY_RESIDUAL && !base))
        return -EINVAL;
    return 0;
}

int lossy_encode(const uint8_t *raw, size_t n_bytes, int dtype, const uint8_t *base,
                 uint64_t base_hash, const struct lossy_params *p, uint8_t *dst,
                 size_t cap, size_t *out_len, uint8_t *recon, uint8_t *keep_mask,
                 struct lossy_err *err)
{
    CK_TRY(check_args(n_bytes, dtype, base, p, cap));
    struct plan pl = {.kind = p->kind, .dtype = dtype, .w = width(dtype), .bits = p->bits};
    if (!pl.bits) pl.bits = p->kind == LOSSY_KMEANS ? 8 : 4;
    size_t cnt = n_bytes / pl.w, kept;
    struct work wk;
    void *mem = work_alloc(&wk, cnt);
    if (!mem) return -ENOMEM;
    size_t m = select_kept(p, dtype, raw, base, cnt, &wk, &kept);
    struct dist d = {wk.val, wk.cum, wk.sum, wk.sq, 0};
    pl.k = centroids(wk.keys, m, kmax_of(pl.kind, pl.bits), &d, pl.c);
    /* Values rebuild to the dtype rounding of a centroid: round first, so
    ** that each goes to the nearest value it can rebuild to. */
    if (pl.kind != LOSSY_RESIDUAL)
        for (unsigned j = 0; j < pl.k; j++) pl.c[j] = value(dtype, dt_bits(dtype, pl.c[j]));
    pl.mask = pl.kind == LOSSY_KMEANS ? NULL : wk.mask;
    pl.idx = wk.idx;
    assign(&pl, &wk, cnt);
    rebuild(&pl, cnt, base, recon);
    size_t off = put_header(&pl, cnt, base_hash, dst);
    *out_len = off + put_body(&pl, &wk, raw, cnt, kept, recon, dst + off, cap - off);
    if (keep_mask) memcpy(keep_mask, wk.mask, (cnt + 7) / 8);
    if (err) measure(dtype, raw, recon, cnt, kept, err);
    free(mem);
    return *out_len < n_bytes ? 0 : -E2BIG;
}

/* ---- decode ---- */

int lossy_needs_base(const uint8_t *src, size_t len)
{
    return len >= 1 && src[0] == LOSSY_RESIDUAL;
}

/* Read the exception records src[0..len) into dst. */
static int get_exceptions(const uint8_t *src, size_t len, const struct plan *p, size_t cnt,
                          uint8_t *dst)
{
    if (len < 4) return -EIO;
    size_t e = ck_get32(src), rec = 4 + p->w;
    if ((len - 4) % rec || (len - 4) / rec != e) return -EIO;
    for (size_t j = 0; j < e; j++) {
        const uint8_t *r = src + 4 + rec * j;
        size_t at = ck_get32(r);
        if (at >= cnt || (j && at <= ck_get32(r - rec)) || (p->mask && !bit(p->mask, at)))
            return -EIO;
        memcpy(dst + p->w * at, r + 4, p->w);
    }
    return 0;
}

/* Everything after the centroids; buf holds the mask, indices and packed
** indices of cnt elements. */
static int get_body(const uint8_t *src, size_t len, struct plan *p, size_t cnt,
                    const uint8_t *base, uint8_t *dst, uint8_t *buf)
{
    uint8_t *mask = buf, *idx = mask + cnt / 8 + 1, *packed = idx + cnt;
    size_t c = cnt, off = 0;
    if (p->kind != LOSSY_KMEANS) {
        if (len < 4) return -EIO;
        c = ck_get32(src);
        if (c > cnt) return -EIO;
        long r = bstream_get_mask(src + 4, len - 4, mask, cnt, c);
        if (r < 0) return (int)r;
        off = 4 + (size_t)r;
        p->mask = mask;
    }
    unsigned pb = pack_bits(p->k);
    long r = bstream_get(src + off, len - off, packed, packed_len(c, pb));
    if (r < 0) return (int)r;
    off += (size_t)r;
    CK_TRY(unpack(packed, c, pb, p->k, idx));
    p->idx = idx;
    rebuild(p, cnt, base, dst);
    return get_exceptions(src + off, len - off, p, cnt, dst);
}

int lossy_decode(const uint8_t *src, size_t len, const uint8_t *base, uint64_t base_hash,
                 uint8_t *dst, size_t n_bytes)
{
    struct plan pl = {0};
    size_t off;
    CK_TRY(get_header(src, len, base, base_hash, n_bytes, &pl, &off));
    size_t cnt = n_bytes / pl.w;
    uint8_t *buf = malloc(2 * cnt + cnt / 8 + 1);
    if (!buf) return -ENOMEM;
    int rc = get_body(src + off, len - off, &pl, cnt, base, dst, buf);
    free(buf);
    return rc;
}

/* ---- statistics ---- */

int lossy_stats(const uint8_t *raw, const uint8_t *base, size_t n_bytes, int dtype,
                struct lossy_stats *st)
{
    if (!dtype_ok(dtype, n_bytes)) return -EINVAL;
    size_t cnt = n_bytes / width(dtype), every = cnt / STATS_SAMPLE + 1, m = 0;
    uint32_t *keys = malloc(2 * sizeof *keys * (cnt / every + 1));
    if (!keys) return -ENOMEM;
    double sum = 0, sum_abs = 0;
    *st = (struct lossy_stats){0};
    for (size_t i = 0, left = 0; i < cnt; i++, left = left ? left - 1 : every - 1) {
        float v = load(dtype, raw, i);
        if (base) v -= load(dtype, base, i);
        if (!isfinite(v)) continue;
        sum += v;
        sum_abs += fabsf(v);
        st->finite++;
        if (!left) keys[m++] = key_of(fabsf(v));
    }
    radix_sort(keys, keys + cnt / every + 1, m);
    if (st->finite) {
        st->mean = sum / (double)st->finite;
        st->mean_abs = sum_abs / (double)st->finite;
        st->median_abs = m ? f_of_key(keys[m / 2]) : 0;
    }
    free(keys);
    return 0;
}
