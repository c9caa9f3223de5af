/*
** unit_lossy.c: tests of the lossy tensor block coder (src/lossy.h).
**
** Every encoding is decoded twice: by lossy_decode from an exact-size heap
** copy (outputs carry guard zones), and by a reference decoder written here
** from the format in lossy.h, with its own dtype rounding (frexp and
** nearbyint); both must give recon bit for bit. The keep mask is checked
** against its definition in lossy.h, the error statistics against a
** recomputation, and finite values must rebuild finite.
**
** Covered: k-means centroids of a known mixture, and an error near the
** Lloyd-Max optimum for a Gaussian; every kind, dtype and bits 1..8 on blocks
** of 0, 1, odd and 256K elements; exact coding when there are no more
** distinct values than centroids (every bf16 and f16 bit pattern included),
** constant and zero blocks; NaN payloads and infinities in values, residuals
** and bases, and rebuilt values that would overflow; wrong or missing base;
** truncated, extended and corrupted stored forms; bad arguments; the masks
** of the pruning kinds (a given mask ANDed in, m's mask handed to v); the
** statistics helper; each stream codec where it should win; compression
** ratios; and a closed-loop chain of 10 versions whose error does not grow,
** beside an open-loop chain whose does.
*/
#include "../src/huf.h"
#include "../src/rans.h"
#include "../src/lossy.h"
#include "unit_util.h"

#include <math.h>
#include <xxhash.h>
#include <zstd.h>

#define BIG (256u * 1024u)

/* An assertion for inner loops: each of check's own, even passing, writes a
** record to a pipe, which made this program spend a minute in the kernel. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                \
    } while (0)

static const unsigned W[3] = {2, 2, 4}; /* element width of each dtype */
static const char *const DT[3] = {"bf16", "f16", "f32"};

/* ---- data ---- */

static uint32_t get_el(const uint8_t *p, int dt, size_t i)
{
    uint32_t v = 0;
    for (unsigned k = 0; k < W[dt]; k++) v |= (uint32_t)p[W[dt] * i + k] << (8 * k);
    return v;
}

static void put_el(uint8_t *p, int dt, size_t i, uint32_t v)
{
    for (unsigned k = 0; k < W[dt]; k++) p[W[dt] * i + k] = (uint8_t)(v >> (8 * k));
}

static int get_bit(const uint8_t *m, size_t i) { return m[i / 8] >> (i % 8) & 1; }

/* ---- reference dtype arithmetic, from IEEE 754 ---- */

static double ref_value(int dt, uint32_t b)
{
    float f;
    if (dt != LOSSY_F16) {
        uint32_t u = dt == LOSSY_BF16 ? b << 16 : b;
        memcpy(&f, &u, 4);
        return f;
    }
    double s = b & 0x8000 ? -1 : 1;
    unsigned e = b >> 10 & 31, m = b & 0x3ff;
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * (e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24));
}

/* The dtype bits nearest to x, ties to even. */
static uint32_t ref_bits(int dt, double x)
{
    float f = (float)x;
    uint32_t u;
    if (isnan(x)) return UINT32_MAX; /* only ever overwritten by an exception */
    if (dt == LOSSY_F32) {
        memcpy(&u, &f, 4);
        return u;
    }
    int sig = dt == LOSSY_BF16 ? 8 : 11, qmin = dt == LOSSY_BF16 ? -133 : -24, e;
    frexp(x, &e);
    int q = isinf(x) || e - sig < qmin ? qmin : e - sig;
    double r = ldexp(nearbyint(ldexp(x, -q)), q), a = fabs(r);
    uint32_t s = signbit(r) ? 0x8000 : 0;
    if (dt == LOSSY_BF16) {
        f = (float)r; /* exact, or infinite */
        memcpy(&u, &f, 4);
        return u >> 16;
    }
    if (a > 65504) return s | 0x7c00;
    if (a < 0x1p-14) return s | (uint32_t)ldexp(a, 24);
    frexp(a, &e);
    return s | (uint32_t)(e + 14) << 10 | ((uint32_t)ldexp(a, 11 - e) - 1024);
}

/* A block of cnt elements with values f(i) rounded to dt. */
static uint8_t *block(int dt, size_t cnt, double (*f)(size_t, uint64_t *), uint64_t seed)
{
    uint8_t *p = ut_xmalloc(cnt * W[dt]);
    uint64_t s = ut_seed(seed);
    for (size_t i = 0; i < cnt; i++) put_el(p, dt, i, ref_bits(dt, f(i, &s)));
    return p;
}

static double weight(size_t i, uint64_t *s) { return 0.02 * ut_gauss(s); }

/* ---- the reference decoder, from the format in lossy.h ---- */

struct ref {
    int kind, dtype;
    unsigned bits, k;
    size_t c, e;  /* kept elements, exceptions */
    int codec[2]; /* of the mask (-1: none) and index streams */
    float cent[256];
};

static long ref_stream(const uint8_t *s, size_t avail, uint8_t *out, size_t m, int *codec)
{
    *codec = s[0];
    ck_assert_uint_ge(avail, 5);
    size_t len = s[1] | (size_t)s[2] << 8 | (size_t)s[3] << 16 | (size_t)s[4] << 24;
    ck_assert_uint_le(len, avail - 5);
    switch (s[0]) {
    case 0: ck_assert_uint_eq(len, m); memcpy(out, s + 5, m); break;
    case 1: ck_assert_int_eq(huf_decode(s + 5, len, out, m), 0); break;
    case 2: ck_assert_uint_eq(ZSTD_decompress(out, m, s + 5, len), m); break;
    case 3: ck_assert_uint_eq(len, 1); memset(out, s[5], m); break;
    case 4: ck_assert_int_eq(rans_decode(s + 5, len, out, m), 0); break;
    default: ck_abort_msg("stream codec %u", s[0]);
    }
    return (long)(5 + len);
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)get_el(p, LOSSY_F32, 0); }

static struct ref ref_decode(const uint8_t *src, size_t len, const uint8_t *base, size_t n,
                             uint8_t *out, uint8_t *mask_out)
{
    struct ref r = {src[0], src[1], src[2], src[3] + 1u, 0, 0, {-1, -1}, {0}};
    ck_assert_int_le(r.kind, 2);
    ck_assert_int_le(r.dtype, 2);
    size_t w = W[r.dtype], cnt = le32(src + 4), off = r.kind == LOSSY_RESIDUAL ? 16 : 8;
    ck_assert_uint_eq(cnt * w, n);
    ck_assert_uint_le(r.k, r.kind == LOSSY_KMEANS ? 1u << r.bits : (1u << r.bits) - 1);
    for (unsigned j = 0; j < r.k; j++, off += 4) {
        uint32_t u = le32(src + off);
        memcpy(&r.cent[j], &u, 4);
        CHECK(j == 0 || r.cent[j] >= r.cent[j - 1], "centroids not ascending");
    }
    uint8_t *mask = ut_xmalloc(cnt / 8 + 1);
    memset(mask, 0, cnt / 8 + 1);
    for (size_t i = 0; i < cnt; i++) mask[i / 8] |= (uint8_t)(1u << (i % 8));
    r.c = cnt;
    if (r.kind != LOSSY_KMEANS) {
        r.c = le32(src + off);
        off += 4 + (size_t)ref_stream(src + off + 4, len - off - 4, mask, (cnt + 7) / 8,
                                        &r.codec[0]);
    }
    unsigned p = r.k <= 2 ? 1 : r.k <= 4 ? 2 : r.k <= 16 ? 4 : 8;
    uint8_t *packed = ut_xmalloc((r.c * p + 7) / 8);
    off += (size_t)ref_stream(src + off, len - off, packed, (r.c * p + 7) / 8, &r.codec[1]);
    size_t at = 0;
    for (size_t i = 0; i < cnt; i++) {
        uint32_t v = 0;
        if (get_bit(mask, i)) {
            CHECK(at < r.c, "more kept elements than indices");
            unsigned j = packed[at * p / 8] >> (at * p % 8) & ((1u << p) - 1);
            CHECK(j < r.k, "index %u of %u", j, r.k);
            at++;
            v = r.kind != LOSSY_RESIDUAL
                    ? ref_bits(r.dtype, r.cent[j])
                    : ref_bits(r.dtype, (float)ref_value(r.dtype, get_el(base, r.dtype, i)) +
                                            r.cent[j]);
        } else if (r.kind == LOSSY_RESIDUAL) {
            v = get_el(base, r.dtype, i);
        }
        put_el(out, r.dtype, i, v);
    }
    ck_assert_uint_eq(at, r.c);
    r.e = le32(src + off);
    off += 4;
    ck_assert_uint_eq(len - off, r.e * (4 + w));
    for (size_t j = 0; j < r.e; j++, off += 4 + w) {
        size_t i = le32(src + off);
        CHECK(i < cnt && get_bit(mask, i), "exception %zu not kept", i);
        CHECK(j == 0 || i > le32(src + off - 4 - w), "exceptions not ascending");
        memcpy(out + w * i, src + off + 4, w);
    }
    if (mask_out) memcpy(mask_out, mask, (cnt + 7) / 8);
    free(mask);
    free(packed);
    return r;
}

/* ---- encode and check ---- */

struct enc {
    uint8_t *stored, *recon, *mask;
    size_t len;
    int rc; /* 0 or -E2BIG */
    struct ref r;
    struct lossy_err err;
};

static void enc_free(struct enc *e)
{
    free(e->stored);
    free(e->recon);
    free(e->mask);
}

/* The keep mask from its definition in lossy.h. */
static void check_mask(int dt, const uint8_t *raw, const uint8_t *base, size_t cnt,
                       const struct lossy_params *p, const uint8_t *mask)
{
    for (size_t i = 0; i < cnt; i++) {
        float v = (float)ref_value(dt, get_el(raw, dt, i));
        if (p->kind == LOSSY_RESIDUAL) v -= (float)ref_value(dt, get_el(base, dt, i));
        int keep = !isfinite(v) || p->kind == LOSSY_KMEANS ||
                   (fabsf(v) > p->threshold && (!p->mask || get_bit(p->mask, i)));
        CHECK(get_bit(mask, i) == keep, "mask bit %zu", i);
    }
    if (cnt % 8) ck_assert_uint_eq(mask[cnt / 8] >> (cnt % 8), 0);
}

/* Error statistics recomputed; finite values rebuild finite. */
static void check_err(int dt, const uint8_t *raw, const uint8_t *recon, size_t cnt,
                      const uint8_t *mask, const struct lossy_err *err)
{
    double sq_err = 0, sq_val = 0, max_abs = 0;
    size_t kept = 0;
    for (size_t i = 0; i < cnt; i++) {
        double x = ref_value(dt, get_el(raw, dt, i)), r = ref_value(dt, get_el(recon, dt, i));
        kept += (size_t)get_bit(mask, i);
        if (!isfinite(x)) continue;
        CHECK(isfinite(r), "element %zu rebuilt not finite", i);
        sq_err += (r - x) * (r - x);
        sq_val += x * x;
        max_abs = fmax(max_abs, fabs(r - x));
    }
    ck_assert_uint_eq(err->kept, kept);
    ck_assert_double_eq_tol(err->sq_err, sq_err, 1e-9 * sq_err + 1e-300);
    ck_assert_double_eq_tol(err->sq_val, sq_val, 1e-9 * sq_val + 1e-300);
    ck_assert_double_eq(err->max_abs, max_abs);
}

/* Decode stored[0..len) from an exact-size copy into a guarded buffer. */
static int decode_copy(const uint8_t *stored, size_t len, const uint8_t *base, uint64_t h,
                       uint8_t *out, size_t n)
{
    uint8_t *copy = ut_xmalloc(len);
    memcpy(copy, stored, len);
    memset(out, 0x5A, n + UT_GUARD);
    int rc = lossy_decode(copy, len, base, h, out, n);
    ut_check_guard(out + n, 0x5A, "decode");
    free(copy);
    return rc;
}

static uint64_t hash_of(const uint8_t *base, size_t n) { return base ? XXH3_64bits(base, n) : 0; }

/* Encode, then check all that holds for any block. */
static struct enc encode_checked(int dt, const uint8_t *raw, const uint8_t *base, size_t n,
                                 const struct lossy_params *p)
{
    struct enc e = {0};
    size_t cap = lossy_bound(n), cnt = n / W[dt], mb = (cnt + 7) / 8;
    uint64_t h = hash_of(base, n);
    e.stored = ut_xmalloc(cap);
    e.recon = ut_xmalloc(n + UT_GUARD);
    e.mask = ut_xmalloc(mb + UT_GUARD);
    memset(e.recon, 0xA5, n + UT_GUARD);
    memset(e.mask, 0xA5, mb + UT_GUARD);
    e.rc = lossy_encode(raw, n, dt, base, h, p, e.stored, cap, &e.len, e.recon, e.mask, &e.err);
    ck_assert_msg(e.rc == 0 || e.rc == -E2BIG, "encode: %d", e.rc);
    ck_assert_int_eq(e.rc == 0, e.len < n);
    ck_assert_uint_le(e.len, cap);
    ut_check_guard(e.recon + n, 0xA5, "recon");
    ut_check_guard(e.mask + mb, 0xA5, "mask");

    uint8_t *out = ut_xmalloc(n + UT_GUARD), *rmask = ut_xmalloc(mb + 1);
    ck_assert_int_eq(decode_copy(e.stored, e.len, base, h, out, n), 0);
    ck_assert_msg(memcmp(out, e.recon, n) == 0, "%s kind %d bits %u n %zu: decode differs at %zu",
                  DT[dt], p->kind, p->bits, n, ut_first_diff(out, e.recon, n));
    e.r = ref_decode(e.stored, e.len, base, n, out, rmask);
    ck_assert_msg(memcmp(out, e.recon, n) == 0, "%s kind %d bits %u n %zu: reference differs at %zu",
                  DT[dt], p->kind, p->bits, n, ut_first_diff(out, e.recon, n));
    ck_assert(memcmp(rmask, e.mask, mb) == 0);
    ck_assert_int_eq(e.r.kind, p->kind);
    ck_assert_int_eq(e.r.dtype, dt);
    ck_assert_int_eq(lossy_needs_base(e.stored, e.len), p->kind == LOSSY_RESIDUAL);
    check_mask(dt, raw, base, cnt, p, e.mask);
    check_err(dt, raw, e.recon, cnt, e.mask, &e.err);
    free(out);
    free(rmask);
    return e;
}

static double rel_err(const struct lossy_err *e) { return sqrt(e->sq_err / e->sq_val); }

/* ==================================================================== */

/* Three well separated clusters: centroids land on their means. */
START_TEST(test_kmeans_mixture)
{
    const double mean[3] = {-5, 0.5, 7};
    size_t cnt = 30000;
    uint8_t *raw = ut_xmalloc(4 * cnt);
    uint64_t s = ut_seed(1);
    for (size_t i = 0; i < cnt; i++)
        put_el(raw, LOSSY_F32, i, ref_bits(LOSSY_F32, mean[i % 3] + 0.01 * ut_gauss(&s)));
    struct lossy_params p = {LOSSY_PRUNED, 2, -1, NULL}; /* 3 centroids */
    struct enc e = encode_checked(LOSSY_F32, raw, NULL, 4 * cnt, &p);
    ck_assert_uint_eq(e.r.k, 3);
    for (int j = 0; j < 3; j++) ck_assert_double_eq_tol(e.r.cent[j], mean[j], 0.002);
    ck_assert_double_le(e.err.max_abs, 0.06);
    enc_free(&e);

    p = (struct lossy_params){LOSSY_KMEANS, 2, 0, NULL}; /* 4: one cluster split */
    e = encode_checked(LOSSY_F32, raw, NULL, 4 * cnt, &p);
    ck_assert_uint_eq(e.r.k, 4);
    for (int j = 0; j < 3; j++) {
        double best = INFINITY;
        for (unsigned c = 0; c < 4; c++) best = fmin(best, fabs(e.r.cent[c] - mean[j]));
        ck_assert_double_le(best, 0.05);
    }
    for (unsigned c = 0; c < 4; c++) {
        double best = INFINITY;
        for (int j = 0; j < 3; j++) best = fmin(best, fabs(e.r.cent[c] - mean[j]));
        ck_assert_double_le(best, 0.05);
    }
    enc_free(&e);
    free(raw);
}
END_TEST

static double unit_gauss(size_t i, uint64_t *s) { return ut_gauss(s); }

/* On N(0,1), 16 centroids come near the Lloyd-Max quantizer (MSE 0.009497)
** and well below a uniform grid over the range. */
START_TEST(test_kmeans_gauss)
{
    size_t cnt = 65536;
    uint8_t *raw = block(LOSSY_F32, cnt, unit_gauss, 2);
    struct lossy_params p = {LOSSY_KMEANS, 4, 0, NULL};
    struct enc e = encode_checked(LOSSY_F32, raw, NULL, 4 * cnt, &p);
    double lo = INFINITY, hi = -INFINITY, uni = 0;
    for (size_t i = 0; i < cnt; i++) {
        double x = ref_value(LOSSY_F32, get_el(raw, LOSSY_F32, i));
        lo = fmin(lo, x);
        hi = fmax(hi, x);
    }
    double step = (hi - lo) / 16;
    for (size_t i = 0; i < cnt; i++) {
        double x = ref_value(LOSSY_F32, get_el(raw, LOSSY_F32, i));
        double q = lo + step * (fmin(floor((x - lo) / step), 15) + 0.5);
        uni += (q - x) * (q - x);
    }
    ck_assert_double_lt(e.err.sq_err / cnt, 0.0105);
    ck_assert_double_lt(e.err.sq_err, 0.6 * uni);
    enc_free(&e);
    free(raw);
}
END_TEST

/* Specials at fixed places of a generated block, base or not. */
static void sprinkle(int dt, uint8_t *raw, uint8_t *base, size_t cnt)
{
    static const uint32_t nan[3] = {0x7fc1, 0x7e01, 0x7fc00001}, inf[3] = {0x7f80, 0x7c00, 0x7f800000};
    if (cnt > 12) {
        put_el(raw, dt, 2, nan[dt]);
        put_el(raw, dt, 5, inf[dt] | (dt == LOSSY_F32 ? 0x80000000 : 0x8000));
        put_el(raw, dt, 6, dt == LOSSY_F32 ? 0x80000000 : 0x8000); /* -0.0 */
        put_el(raw, dt, 9, 1);                                    /* the smallest denormal */
        if (base) put_el(base, dt, 11, nan[dt] ^ 1);
    }
}

/* Every kind, dtype and bits on blocks of 0, 1, odd and 256K elements. */
START_TEST(test_roundtrip)
{
    static const size_t sizes[] = {0, 1, 7, 4099, BIG};
    for (int dt = 0; dt < 3; dt++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            size_t cnt = sizes[si], n = cnt * W[dt];
            uint8_t *raw = block(dt, cnt, weight, 10 + si), *base = ut_xmalloc(n);
            uint64_t s = ut_seed(20 + si);
            for (size_t i = 0; i < cnt; i++) {
                double x = ref_value(dt, get_el(raw, dt, i));
                put_el(base, dt, i, ref_bits(dt, x + 2e-4 * ut_gauss(&s)));
            }
            sprinkle(dt, raw, base, cnt);
            uint8_t *rmask = ut_xmalloc(cnt / 8 + 1);
            ut_fill_random(rmask, cnt / 8 + 1, 30 + si);
            struct lossy_stats sd, sx;
            ck_assert_int_eq(lossy_stats(raw, base, n, dt, &sd), 0);
            ck_assert_int_eq(lossy_stats(raw, NULL, n, dt, &sx), 0);
            for (int kind = 0; kind < 3; kind++)
                for (unsigned bits = 1; bits <= 8; bits++) {
                    struct lossy_params p = {kind, bits, 0, NULL};
                    if (kind == LOSSY_RESIDUAL) p.threshold = (float)(2.5 * sd.median_abs);
                    if (kind == LOSSY_PRUNED) p.threshold = (float)(2 * sx.mean_abs);
                    if (kind != LOSSY_KMEANS && bits % 2) p.mask = rmask;
                    struct enc e = encode_checked(dt, raw, base, n, &p);
                    ck_assert_uint_eq(e.r.bits, bits);
                    if (cnt == BIG) ck_assert_int_eq(e.rc, 0);
                    if (cnt <= 1) ck_assert_int_eq(e.rc, -E2BIG);
                    if (cnt == 4099) { /* deterministic */
                        struct enc again = encode_checked(dt, raw, base, n, &p);
                        ck_assert_uint_eq(again.len, e.len);
                        ck_assert(memcmp(again.stored, e.stored, e.len) == 0);
                        enc_free(&again);
                    }
                    enc_free(&e);
                }
            free(raw);
            free(base);
            free(rmask);
        }
}
END_TEST

/* Blocks with at most as many distinct values as centroids code exactly. */
START_TEST(test_exact_few_values)
{
    for (int dt = 0; dt < 3; dt++)
        for (unsigned bits = 1; bits <= 8; bits++)
            for (int kind = LOSSY_KMEANS; kind <= LOSSY_PRUNED; kind += 2) {
                unsigned k = kind == LOSSY_KMEANS ? 1u << bits : (1u << bits) - 1;
                uint32_t vals[256];
                uint64_t s = ut_seed(bits);
                for (unsigned j = 0; j < k; j++) /* signed zeros, denormals, range ends */
                    vals[j] = j == 0 ? 0 : j == 1 ? (dt == LOSSY_F32 ? 0x80000000 : 0x8000)
                              : j == 2 ? 1 : j == 3 ? (dt == LOSSY_F32 ? 0xff7fffff : 0xfbff)
                              : ref_bits(dt, ut_gauss(&s));
                size_t cnt = 5000;
                uint8_t *raw = ut_xmalloc(cnt * W[dt]);
                for (size_t i = 0; i < cnt; i++) put_el(raw, dt, i, vals[ut_rand(&s) % k]);
                struct lossy_params p = {kind, bits, -1, NULL};
                struct enc e = encode_checked(dt, raw, NULL, cnt * W[dt], &p);
                ck_assert_msg(memcmp(e.recon, raw, cnt * W[dt]) == 0, "%s bits %u kind %d",
                              DT[dt], bits, kind);
                ck_assert_double_eq(e.err.sq_err, 0);
                enc_free(&e);
                free(raw);
            }
}
END_TEST

/* Every bf16 and f16 bit pattern, 256 at a time, survives k-means exactly. */
START_TEST(test_exact_all_patterns)
{
    for (int dt = LOSSY_BF16; dt <= LOSSY_F16; dt++)
        for (uint32_t blk = 0; blk < 256; blk++) {
            uint8_t raw[512];
            for (uint32_t j = 0; j < 256; j++) put_el(raw, dt, j, blk << 8 | j);
            struct lossy_params p = {LOSSY_KMEANS, 8, 0, NULL};
            struct enc e = encode_checked(dt, raw, NULL, sizeof raw, &p);
            ck_assert_msg(memcmp(e.recon, raw, sizeof raw) == 0, "%s block %u at %zu", DT[dt],
                          blk, ut_first_diff(e.recon, raw, sizeof raw));
            enc_free(&e);
        }
}
END_TEST

/* A few distinct residuals on small integers code exactly too. */
START_TEST(test_exact_residual)
{
    static const int d[] = {0, -3, -1, 1, 2, 5, 7};
    for (int dt = 0; dt < 3; dt++) {
        size_t cnt = 3001, n = cnt * W[dt];
        uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
        uint64_t s = ut_seed(5);
        for (size_t i = 0; i < cnt; i++) {
            int b = (int)(ut_rand(&s) % 201) - 100;
            put_el(base, dt, i, ref_bits(dt, b));
            put_el(raw, dt, i, ref_bits(dt, b + d[ut_rand(&s) % 7]));
        }
        struct lossy_params p = {LOSSY_RESIDUAL, 3, 0.5f, NULL};
        struct enc e = encode_checked(dt, raw, base, n, &p);
        ck_assert(memcmp(e.recon, raw, n) == 0);
        ck_assert_uint_eq(e.r.k, 6);
        ck_assert_int_eq(e.rc, 0);
        enc_free(&e);
        free(raw);
        free(base);
    }
}
END_TEST

static double constant(size_t i, uint64_t *s) { return 0.75; }
static double zero(size_t i, uint64_t *s) { return 0; }
static double half(size_t i, uint64_t *s) { return 0.5; }

/* Constant and all-zero blocks: exact and a few bytes. */
START_TEST(test_constant_and_zero)
{
    for (int dt = 0; dt < 3; dt++)
        for (int z = 0; z <= 1; z++) {
            size_t cnt = 65536, n = cnt * W[dt];
            uint8_t *raw = block(dt, cnt, z ? zero : constant, 1);
            uint8_t *base = block(dt, cnt, z ? zero : half, 1);
            for (int kind = 0; kind < 3; kind++) {
                struct lossy_params p = {kind, 0, kind == LOSSY_PRUNED ? -1 : 0, NULL};
                struct enc e = encode_checked(dt, raw, base, n, &p);
                ck_assert(memcmp(e.recon, raw, n) == 0);
                ck_assert_msg(e.len < 64, "%s kind %d zero %d: %zu bytes", DT[dt], kind, z, e.len);
                enc_free(&e);
            }
            free(raw);
            free(base);
        }
}
END_TEST

/* NaN payloads and infinities survive in every kind; so do values whose
** base is not finite, and kept values whose rebuilt value would overflow. */
START_TEST(test_specials)
{
    static const uint32_t sp[3][5] = {/* NaNs (one signalling), infinities */
        {0x7fc1, 0xffc3, 0x7f81, 0x7f80, 0xff80},
        {0x7e01, 0xfe03, 0x7c01, 0x7c00, 0xfc00},
        {0x7fc00001, 0xffc00003, 0x7f800001, 0x7f800000, 0xff800000}};
    for (int dt = 0; dt < 3; dt++) {
        size_t cnt = 2000, n = cnt * W[dt];
        uint8_t *raw = block(dt, cnt, weight, 3), *base = block(dt, cnt, weight, 4);
        for (size_t i = 0; i < cnt; i += 37) put_el(raw, dt, i, sp[dt][i % 5]);
        for (size_t i = 1; i < cnt; i += 41) put_el(base, dt, i, sp[dt][i % 5]);
        for (int kind = 0; kind < 3; kind++) {
            struct lossy_params p = {kind, 4, 0.01f, NULL};
            struct enc e = encode_checked(dt, raw, base, n, &p);
            for (size_t i = 0; i < cnt; i++) {
                if (i % 37 == 0 || (kind == LOSSY_RESIDUAL && i % 41 == 1))
                    CHECK(get_el(e.recon, dt, i) == get_el(raw, dt, i), "%s kind %d el %zu",
                                  DT[dt], kind, i);
            }
            ck_assert_uint_ge(e.r.e, cnt / 37);
            enc_free(&e);
        }
        /* One centroid, the mean of big and 0: big + it overflows. */
        double big = dt == LOSSY_F16 ? 60000 : 3e38;
        for (size_t i = 0; i < cnt; i++) {
            put_el(raw, dt, i, ref_bits(dt, big));
            put_el(base, dt, i, ref_bits(dt, i % 2 ? big : 0));
        }
        struct lossy_params p = {LOSSY_RESIDUAL, 1, -1, NULL};
        struct enc e = encode_checked(dt, raw, base, n, &p);
        for (size_t i = 1; i < cnt; i += 2)
            CHECK(get_el(e.recon, dt, i) == get_el(raw, dt, i), "%s el %zu", DT[dt], i);
        ck_assert_uint_eq(e.r.e, cnt / 2);
        enc_free(&e);
        if (dt != LOSSY_F16) { /* and big - (-big) overflows */
            put_el(base, dt, 0, ref_bits(dt, -big));
            e = encode_checked(dt, raw, base, n, &p);
            ck_assert_uint_eq(get_el(e.recon, dt, 0), get_el(raw, dt, 0));
            ck_assert_uint_eq(e.r.e, cnt / 2 + 1);
            enc_free(&e);
        }
        /* All NaN: every element an exception, the largest stored form. */
        for (size_t i = 0; i < cnt; i++) put_el(raw, dt, i, sp[dt][i % 3]);
        for (int kind = 0; kind < 3; kind++) {
            p = (struct lossy_params){kind, 8, 0, NULL};
            e = encode_checked(dt, raw, base, n, &p);
            ck_assert(memcmp(e.recon, raw, n) == 0);
            ck_assert_uint_eq(e.r.e, cnt);
            ck_assert_int_eq(e.rc, -E2BIG);
            enc_free(&e);
        }
        free(raw);
        free(base);
    }
}
END_TEST

static double tail(size_t i, uint64_t *s) { return i % 199 ? 0.02 * ut_gauss(s) : 1 + ut_gauss(s); }

/* Each stream codec where it should win: zstd for a sparse mask, Huffman for
** dense indices, raw for a few bytes. */
START_TEST(test_stream_codecs)
{
    size_t cnt = BIG, n = 4 * cnt;
    uint8_t *raw = block(LOSSY_F32, cnt, tail, 23), *base = ut_xmalloc(n);
    memset(base, 0, n);
    struct lossy_params p = {LOSSY_RESIDUAL, 4, 0.5f, NULL}; /* keeps 1 in 200 */
    struct enc e = encode_checked(LOSSY_F32, raw, base, n, &p);
    fprintf(stderr, "residual keeping %zu of %zu: ratio %.4f\n", e.err.kept, cnt, (double)e.len / n);
    ck_assert_int_eq(e.r.codec[0], 2);
    ck_assert_double_lt((double)e.len / n, 0.01);
    enc_free(&e);
    p = (struct lossy_params){LOSSY_KMEANS, 8, 0, NULL};
    e = encode_checked(LOSSY_F32, raw, NULL, n, &p);
    ck_assert_int_eq(e.r.codec[1], 1);
    enc_free(&e);
    e = encode_checked(LOSSY_F32, raw, NULL, 4 * 7, &p);
    ck_assert_int_eq(e.r.codec[1], 0);
    enc_free(&e);
    free(raw);
    free(base);
}
END_TEST

START_TEST(test_wrong_base)
{
    size_t cnt = 5000, n = 4 * cnt;
    uint8_t *raw = block(LOSSY_F32, cnt, weight, 7), *base = block(LOSSY_F32, cnt, weight, 8);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    uint64_t h = hash_of(base, n);
    struct lossy_params p = {LOSSY_RESIDUAL, 4, 0.001f, NULL};
    struct enc e = encode_checked(LOSSY_F32, raw, base, n, &p);
    ck_assert_int_eq(decode_copy(e.stored, e.len, base, h + 1, out, n), -EIO);
    ck_assert_int_eq(decode_copy(e.stored, e.len, NULL, h, out, n), -EIO);
    ck_assert_int_eq(lossy_needs_base(e.stored, 0), 0);
    enc_free(&e);
    p.kind = LOSSY_KMEANS; /* no base used: any base or none decodes */
    e = encode_checked(LOSSY_F32, raw, NULL, n, &p);
    ck_assert_int_eq(decode_copy(e.stored, e.len, base, 42, out, n), 0);
    ck_assert(memcmp(out, e.recon, n) == 0);
    memset(out, 0, n);
    ck_assert_int_eq(decode_copy(e.stored, e.len, NULL, 0, out, n), 0);
    ck_assert(memcmp(out, e.recon, n) == 0);
    enc_free(&e);
    free(raw);
    free(base);
    free(out);
}
END_TEST

/* Truncated, extended, flipped and random stored forms: -EIO or some output,
** never a read or write out of bounds. */
static void corrupt_one(int dt, int kind, size_t cnt, int every_byte)
{
    size_t n = cnt * W[dt];
    uint8_t *raw = block(dt, cnt, weight, 11), *base = block(dt, cnt, weight, 12);
    sprinkle(dt, raw, base, cnt);
    uint64_t h = hash_of(base, n), s = ut_seed(13);
    struct lossy_params p = {kind, 4, 0.01f, NULL};
    struct enc e = encode_checked(dt, raw, base, n, &p);
    uint8_t *out = ut_xmalloc(n + UT_GUARD), *bad = ut_xmalloc(e.len + 1);
    for (size_t l = 0; l < e.len; l += every_byte ? 1 : 1 + l / 16)
        ck_assert_int_eq(decode_copy(e.stored, l, base, h, out, n), -EIO);
    memcpy(bad, e.stored, e.len);
    bad[e.len] = 0;
    ck_assert_int_eq(decode_copy(bad, e.len + 1, base, h, out, n), -EIO);
    ck_assert_int_eq(decode_copy(e.stored, e.len, base, h, out, n - W[dt]), -EIO);
    for (size_t t = 0; t < (every_byte ? 2 * e.len : 400); t++) {
        size_t at = every_byte ? t / 2 : ut_rand(&s) % e.len;
        memcpy(bad, e.stored, e.len);
        bad[at] ^= every_byte ? (t % 2 ? 0xFF : 0x01) : (uint8_t)(1 + ut_rand(&s) % 255);
        int rc = decode_copy(bad, e.len, base, h, out, n);
        ck_assert_msg(rc == 0 || rc == -EIO, "flip at %zu: %d", at, rc);
    }
    enc_free(&e);
    free(raw);
    free(base);
    free(out);
    free(bad);
}

START_TEST(test_corrupt)
{
    for (int kind = 0; kind < 3; kind++) {
        corrupt_one(LOSSY_F32, kind, 300, 1);
        corrupt_one(LOSSY_BF16, kind, 301, 1);
        corrupt_one(LOSSY_F16, kind, 30011, 0);
    }
    uint64_t s = ut_seed(14);
    uint8_t *out = ut_xmalloc(4000 + UT_GUARD), base[4000] = {0}, buf[2048];
    for (int t = 0; t < 2000; t++) {
        size_t len = ut_rand(&s) % sizeof buf;
        ut_fill_random(buf, len, (uint64_t)t);
        if (t % 2 && len >= 8) { /* a plausible header */
            buf[0] = (uint8_t)(t / 2 % 3);
            buf[1] = (uint8_t)(t / 6 % 3);
            buf[2] = (uint8_t)(1 + t % 8);
            buf[3] %= 16;
            size_t cnt = 4000 / W[buf[1]];
            for (int k = 0; k < 4; k++) buf[4 + k] = (uint8_t)(cnt >> (8 * k));
            if (len >= 16) memset(buf + 8, 0, 8); /* base hash 0 */
        }
        int rc = decode_copy(buf, len, base, 0, out, 4000);
        ck_assert(rc == 0 || rc == -EIO);
    }
    free(out);
}
END_TEST

START_TEST(test_bad_args)
{
    uint8_t raw[64] = {0}, dst[4096], recon[64];
    size_t len;
    struct lossy_params p = {LOSSY_KMEANS, 8, 0, NULL};
    ck_assert_uint_le(lossy_bound(64), sizeof dst);
    ck_assert_int_eq(lossy_encode(raw, 64, 3, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    ck_assert_int_eq(lossy_encode(raw, 64, -1, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    ck_assert_int_eq(lossy_encode(raw, 62, LOSSY_F32, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_F32, NULL, 0, &p, dst, lossy_bound(64) - 1, &len, recon, NULL, NULL), -EINVAL);
    p.bits = 9;
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_F32, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    p = (struct lossy_params){3, 4, 0, NULL};
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_F32, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    p.kind = LOSSY_RESIDUAL; /* needs a base */
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_F32, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), -EINVAL);
    p = (struct lossy_params){LOSSY_KMEANS, 0, 0, NULL}; /* default bits */
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_BF16, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), 0);
    ck_assert_uint_eq(dst[2], 8);
    p.kind = LOSSY_PRUNED;
    ck_assert_int_eq(lossy_encode(raw, 64, LOSSY_BF16, NULL, 0, &p, dst, sizeof dst, &len, recon, NULL, NULL), 0);
    ck_assert_uint_eq(dst[2], 4);
}
END_TEST

static double moment(size_t i, uint64_t *s) { return 1e-3 * ut_gauss(s); }

/* LOSSY_PRUNED: a given mask ANDed in; v coded with m's mask keeps the same
** elements; non-finite values are kept even where the mask says not. */
START_TEST(test_pruned_masks)
{
    size_t cnt = 40000, n = 4 * cnt, mb = (cnt + 7) / 8;
    uint8_t *m = block(LOSSY_F32, cnt, moment, 15), *v = ut_xmalloc(n), *wmask = ut_xmalloc(mb);
    for (size_t i = 0; i < cnt; i++) {
        double x = ref_value(LOSSY_F32, get_el(m, LOSSY_F32, i));
        put_el(v, LOSSY_F32, i, ref_bits(LOSSY_F32, 10 * x * x + 1e-9));
    }
    ut_fill_random(wmask, mb, 16);
    wmask[0] &= (uint8_t)~8; /* element 3 masked off, yet NaN */
    put_el(m, LOSSY_F32, 3, 0x7fc00123);
    struct lossy_stats st;
    ck_assert_int_eq(lossy_stats(m, NULL, n, LOSSY_F32, &st), 0);
    struct lossy_params p = {LOSSY_PRUNED, 4, (float)(2 * st.mean_abs), wmask};
    struct enc em = encode_checked(LOSSY_F32, m, NULL, n, &p);
    ck_assert(get_bit(em.mask, 3));
    ck_assert_uint_eq(get_el(em.recon, LOSSY_F32, 3), 0x7fc00123);
    size_t kept = 0;
    for (size_t i = 0; i < cnt; i++) {
        kept += (size_t)get_bit(em.mask, i);
        CHECK(get_bit(em.mask, i) || get_el(em.recon, LOSSY_F32, i) == 0, "el %zu", i);
    }
    ck_assert(kept > cnt / 50 && kept < cnt / 5);
    p = (struct lossy_params){LOSSY_PRUNED, 4, -1, em.mask};
    struct enc ev = encode_checked(LOSSY_F32, v, NULL, n, &p);
    ck_assert(memcmp(ev.mask, em.mask, mb) == 0);
    ck_assert_uint_eq(ev.err.kept, kept);
    ck_assert_int_eq(ev.rc, 0);
    enc_free(&ev);
    /* The residual kind ANDs a mask in the same way; pruned elements are the base. */
    p = (struct lossy_params){LOSSY_RESIDUAL, 4, 1e-4f, wmask};
    ev = encode_checked(LOSSY_F32, v, m, n, &p);
    for (size_t i = 0; i < cnt; i++)
        CHECK(get_bit(ev.mask, i) || get_el(ev.recon, LOSSY_F32, i) == get_el(m, LOSSY_F32, i),
              "el %zu", i);
    enc_free(&ev);
    enc_free(&em);
    free(m);
    free(v);
    free(wmask);
}
END_TEST

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

START_TEST(test_stats)
{
    for (int dt = 0; dt < 3; dt++)
        for (size_t cnt = 1000; cnt <= BIG; cnt *= 262) {
            size_t n = cnt * W[dt], f = 0;
            uint8_t *raw = block(dt, cnt, weight, 17), *base = block(dt, cnt, weight, 18);
            put_el(raw, dt, 7, dt == LOSSY_F32 ? 0x7fc00000 : 0x7fc0 - (dt == LOSSY_F16) * 0x1c0);
            double *a = ut_xmalloc(cnt * sizeof *a), sum = 0, sum_abs = 0;
            for (int b = 0; b <= 1; b++, f = 0, sum = sum_abs = 0) {
                for (size_t i = 0; i < cnt; i++) {
                    float v = (float)ref_value(dt, get_el(raw, dt, i));
                    if (b) v -= (float)ref_value(dt, get_el(base, dt, i));
                    if (!isfinite(v)) continue;
                    sum += v;
                    sum_abs += fabsf(v);
                    a[f++] = fabsf(v);
                }
                qsort(a, f, sizeof *a, cmp_double);
                struct lossy_stats st;
                ck_assert_int_eq(lossy_stats(raw, b ? base : NULL, n, dt, &st), 0);
                ck_assert_uint_eq(st.finite, cnt - 1);
                ck_assert_double_eq_tol(st.mean, sum / f, 1e-12);
                ck_assert_double_eq_tol(st.mean_abs, sum_abs / f, 1e-12);
                if (cnt <= 65536) /* the sample is the block */
                    ck_assert_double_eq(st.median_abs, a[f / 2]);
                else
                    ck_assert_double_eq_tol(st.median_abs, a[f / 2], 0.02 * a[f / 2]);
            }
            free(a);
            free(raw);
            free(base);
        }
    struct lossy_stats st;
    uint8_t raw[8] = {0};
    ck_assert_int_eq(lossy_stats(raw, NULL, 6, LOSSY_F32, &st), -EINVAL);
    ck_assert_int_eq(lossy_stats(raw, NULL, 8, 3, &st), -EINVAL);
    ck_assert_int_eq(lossy_stats(raw, NULL, 0, LOSSY_F32, &st), 0);
    ck_assert_uint_eq(st.finite, 0);
}
END_TEST

static double adam_v(size_t i, uint64_t *s) { return 1e-8 * exp(2 * ut_gauss(s)); }

/* k-means at 8 bits stores fp32 optimizer states in under 0.4 of their size. */
START_TEST(test_ratio_kmeans)
{
    double (*gen[2])(size_t, uint64_t *) = {moment, adam_v};
    for (int g = 0; g < 2; g++) {
        uint8_t *raw = block(LOSSY_F32, BIG, gen[g], 19);
        struct lossy_params p = {LOSSY_KMEANS, 8, 0, NULL};
        struct enc e = encode_checked(LOSSY_F32, raw, NULL, 4 * BIG, &p);
        double ratio = (double)e.len / (4.0 * BIG);
        fprintf(stderr, "kmeans 8-bit fp32 %s: ratio %.3f, relative error %.2e\n",
                g ? "exp_avg_sq" : "exp_avg", ratio, rel_err(&e.err));
        ck_assert_double_lt(ratio, 0.4);
        ck_assert_double_lt(rel_err(&e.err), 0.02);
        enc_free(&e);
        free(raw);
    }
}
END_TEST

/* Training-like versions: w_{k+1} = w_k + 1e-3 relative noise. Each coded as
** a residual, with threshold 2.5 * median |d|, against the previous version
** as the reader rebuilds it (closed loop) or as it was (open loop). */
START_TEST(test_closed_loop)
{
    for (int dt = LOSSY_BF16; dt <= LOSSY_F32; dt += 2) {
        size_t cnt = BIG, n = cnt * W[dt];
        uint8_t *w = block(dt, cnt, weight, 21), *prev_w = ut_xmalloc(n);
        uint8_t *closed = ut_xmalloc(n), *open = ut_xmalloc(n), *out = ut_xmalloc(n + UT_GUARD);
        memcpy(closed, w, n); /* version 0 is stored lossless */
        memcpy(open, w, n);
        double ec[11], eo[11], sc = 0;
        uint64_t s = ut_seed(22);
        for (int k = 1; k <= 10; k++) {
            memcpy(prev_w, w, n);
            for (size_t i = 0; i < cnt; i++) {
                double x = ref_value(dt, get_el(w, dt, i));
                put_el(w, dt, i, ref_bits(dt, x + 2e-5 * ut_gauss(&s) * (dt == LOSSY_BF16 ? 20 : 1)));
            }
            struct lossy_stats st;
            ck_assert_int_eq(lossy_stats(w, closed, n, dt, &st), 0);
            struct lossy_params p = {LOSSY_RESIDUAL, 4, (float)(2.5 * st.median_abs), NULL};
            struct enc e = encode_checked(dt, w, closed, n, &p);
            ck_assert_int_eq(e.rc, 0);
            ck_assert_uint_lt(e.err.kept, cnt / 5); /* about 90% pruned */
            ck_assert_double_lt((double)e.len / n, 0.1);
            sc = fmax(sc, (double)e.len / n);
            memcpy(closed, e.recon, n);
            ec[k] = rel_err(&e.err);
            enc_free(&e);

            ck_assert_int_eq(lossy_stats(w, prev_w, n, dt, &st), 0);
            p.threshold = (float)(2.5 * st.median_abs);
            e = encode_checked(dt, w, prev_w, n, &p);
            /* the reader has only its own previous rebuild to add to */
            ck_assert_int_eq(decode_copy(e.stored, e.len, open, hash_of(prev_w, n), out, n), 0);
            memcpy(open, out, n);
            double se = 0, sv = 0;
            for (size_t i = 0; i < cnt; i++) {
                double x = ref_value(dt, get_el(w, dt, i)), r = ref_value(dt, get_el(open, dt, i));
                se += (r - x) * (r - x);
                sv += x * x;
            }
            eo[k] = sqrt(se / sv);
            enc_free(&e);
        }
        fprintf(stderr, "%s chain, relative error by version (closed / open), largest ratio %.3f:\n",
                DT[dt], sc);
        for (int k = 1; k <= 10; k++) fprintf(stderr, "  %2d  %.3e  %.3e\n", k, ec[k], eo[k]);
        double early = fmax(ec[1], fmax(ec[2], ec[3]));
        ck_assert_double_le(ec[10], 1.5 * early);
        ck_assert_double_gt(eo[10], 2 * eo[1]);
        ck_assert_double_gt(eo[10], 1.5 * ec[10]);
        free(w);
        free(prev_w);
        free(closed);
        free(open);
        free(out);
    }
}
END_TEST

int main(void)
{
    const TTest *const core_tests[] = {
        test_kmeans_mixture,
        test_kmeans_gauss,
        test_roundtrip,
        test_exact_few_values,
        test_exact_all_patterns,
        test_exact_residual,
        test_constant_and_zero,
        test_specials,
        test_stream_codecs,
        test_wrong_base,
        test_corrupt,
        test_bad_args,
        test_pruned_masks,
        test_stats,
        test_ratio_kmeans,
        test_closed_loop,
        NULL,
    };
    return ut_main("lossy", (const struct ut_tcase[]){
        {.name = "core", .timeout = 300, .tests = core_tests},
        {0},
    });
}
