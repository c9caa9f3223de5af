/*
** tcodec.c: the lossless tensor block codec (see tcodec.h for the stored
** form): the cost model that chooses a block's mode, and the encoder and
** decoder of the format. The per-element work (transforms, byte planes,
** sparse compaction, group gathers) is in tcodec_kern.c.
**
** Encoding a block with a base estimates every candidate on a sample (runs of
** SAMPLE_RUN elements out of every SAMPLE_EVERY) by the order-0 entropy of
** its planes, then encodes only the winner. A delta whose real size exceeds
** the standalone estimate, or any delta when a standalone plane is so
** uniform that zstd may beat its entropy, is compared against a real
** standalone encoding, so a block never grows by having a base.
**
** Working memory (planes, sample planes, histograms) is this thread's
** SCRATCH_TCODEC buffer (scratch.h), taken once per call.
*/
#include "tcodec.h"
#include "common.h"
#include "bstream.h"
#include "huf.h"
#include "scratch.h"
#include "tcodec_kern.h"

#include <math.h>
#include <string.h>

#define SAMPLE_RUN 256
#define SAMPLE_EVERY 2048

static int op_of(int mode, int is_float, int xor)
{
    if (mode == TC_STANDALONE) return is_float ? TCK_ROT : TCK_ID;
    if (xor) return is_float ? TCK_XORF : TCK_XORI;
    return is_float ? TCK_ULPF : TCK_ULPI;
}

/* ---- estimation ---- */

struct estimate {
    double dense, sparse; /* bytes, as the coders would store them (deltas:
                             both; standalone: dense only) */
    double bound; /* standalone: the entropy, a lower bound of its size... */
    int runs;     /* ...unless a plane has a dominant byte that zstd codes */
};

/* Add the bytes of cnt values (w planes at p, stride stride) to hist[k];
** returns how many values are all zero. */
static size_t plane_hist(const uint8_t *p, size_t stride, size_t cnt, unsigned w,
                         uint32_t hist[][256])
{
    size_t zero = 0;
    for (size_t i = 0; i < cnt; i++) {
        uint8_t any = 0;
        for (unsigned k = 0; k < w; k++) {
            hist[k][p[k * stride + i]]++;
            any |= p[k * stride + i];
        }
        zero += !any;
    }
    return zero;
}

/* Bytes a body of n values costs, dense and sparse, from the histograms of
** its w planes (a sample of tot values, zero of them all-zero), as the
** plane coders store them (bstream_cost): the entropy would flatter the
** dense form, whose skewed planes Huffman cannot code below a bit a value.
** A standalone body (sparse NULL) gets its entropy, a lower bound of its
** size, in *bound instead. Clobbers hist[k][0]. */
static void body_cost(uint32_t hist[][256], unsigned w, size_t tot, size_t zero, size_t n,
                      double *dense, double *sparse, double *bound)
{
    size_t changed = tot ? (size_t)((double)(tot - zero) / (double)tot * (double)n) : 0;
    int pref = sparse ? BSTREAM_SMALL : BSTREAM_FAST;
    *dense = 0;
    if (!sparse) *bound = 0;
    else *sparse = 0;
    for (unsigned k = 0; k < w; k++) {
        *dense += bstream_cost(hist[k], tot, n, pref);
        if (!sparse) {
            *bound += CK_MIN(bstream_entropy(hist[k], tot, n), (double)n) + BSTREAM_HDR;
            continue;
        }
        hist[k][0] -= (uint32_t)zero;
        *sparse += bstream_cost(hist[k], tot - zero, changed, BSTREAM_SMALL);
    }
    if (!sparse) return;
    double f = tot ? (double)(tot - zero) / (double)tot : 0;
    double h2 = f <= 0 || f >= 1 ? 0 : -(f * log2(f) + (1 - f) * log2(1 - f));
    *sparse += (double)n * h2 / 8.0 + BSTREAM_HDR + 4 + HUF_HEADER;
}

/* The sample estimates look at: runs of `run` elements starting at every
** multiple of SAMPLE_EVERY (all of a small block). */
#define FOR_SAMPLE(cnt, a, run)                                                \
    for (size_t a = 0, run = (cnt) < 4 * SAMPLE_EVERY ? (cnt) : SAMPLE_RUN;     \
         a + run <= (cnt); a += (cnt) < 4 * SAMPLE_EVERY ? (cnt) : SAMPLE_EVERY)

/* Estimate the planes of op on a sample of the block; for deltas also the
** sparse form (mask + only the changed elements), for standalone its
** lower bound. */
static struct estimate estimate(unsigned w, int op, const uint8_t *raw, const uint8_t *base,
                                size_t cnt, uint8_t *tmp)
{
    uint32_t hist[8][256];
    memset(hist, 0, sizeof hist);
    size_t tot = 0, zero = 0;
    FOR_SAMPLE(cnt, a, run) {
        tck_fwd(w, op, raw + a * w, base + a * w, run, tmp, run);
        zero += plane_hist(tmp, run, run, w, hist);
        tot += run;
    }
    struct estimate e = {0, 0, 0, 0};
    if (tot == 0) return e;
    if (op != TCK_ROT && op != TCK_ID) {
        body_cost(hist, w, tot, zero, cnt, &e.dense, &e.sparse, NULL);
        return e;
    }
    for (unsigned k = 0; k < w; k++)
        for (int v = 0; v < 256; v++) e.runs |= hist[k][v] > tot / 2 + tot / 8;
    body_cost(hist, w, tot, zero, cnt, &e.dense, NULL, &e.bound);
    return e;
}

/* ---- encode / decode ---- */

size_t tc_bound(size_t n)
{
    /* header, hash, count, mask plane, 8 planes with headers and slack */
    return n + n / 8 + 16 + 8 * (BSTREAM_HDR + 16) + 64;
}

static size_t put_planes(const uint8_t *pl, size_t stride, size_t cnt, unsigned w, int pref,
                         uint8_t *dst, size_t cap)
{
    size_t off = 0;
    for (unsigned k = 0; k < w; k++)
        off += bstream_put(pl + k * stride, cnt, dst + off, cap - off, pref);
    return off;
}

/* ---- grouped deltas ----
** How far a value moves in ulps depends on its magnitude: one step of the
** optimizer is many ulps for a small weight and none for a large one. So a
** grouped delta sorts the elements by the exponent byte of their base value
** into up to TC_GROUPS ranges (group_bounds) and codes each range on its
** own, dense or sparse, with its own tables. The decoder finds each
** element's group from the base; the stored group sizes only spare it a
** counting pass, and the gather checks them. */

#define TC_GROUPS 16

/* gmap from the first context byte of groups 1..nb (strictly increasing). */
static void group_map(const uint8_t *bnd, int nb, uint8_t gmap[256])
{
    int g = 0;
    for (int v = 0; v < 256; v++) {
        while (g < nb && v >= bnd[g]) g++;
        gmap[v] = (uint8_t)g;
    }
}

/* Boundaries splitting the context bytes (histogram hist of cnt) into
** ranges: one per exponent where exponents are populous, wider ranges in
** the sparse tails, none smaller than 1/(16 TC_GROUPS) of the block
** (smaller ranges cost more in tables than their closer fit saves).
** Returns their number (groups - 1). */
static int group_bounds(const size_t hist[256], size_t cnt, uint8_t bnd[TC_GROUPS - 1])
{
    size_t acc = 0, left = cnt, min = cnt / (16 * TC_GROUPS);
    int nb = 0;
    for (int v = 0; v < 255 && nb < TC_GROUPS - 1; v++) {
        acc += hist[v];
        left -= hist[v];
        if (acc >= min && left >= min) {
            bnd[nb++] = (uint8_t)(v + 1);
            acc = 0;
        }
    }
    return nb;
}

/* Where each of ng groups starts in group order, from their counts. */
static void group_starts(const size_t *gcnt, int ng, size_t at[TC_GROUPS])
{
    size_t a = 0;
    for (int g = 0; g < ng; a += gcnt[g], g++) at[g] = a;
}

/* The body of cnt values (planes at p, stride stride): all of them, or
** (TC_SPARSE) the count, the change mask and only the changed values, which
** compacts p in place; mask is scratch. Returns the bytes written. The
** inverse of get_body. */
static size_t put_body(int mode, uint8_t *p, size_t stride, size_t cnt, unsigned w,
                       uint8_t *mask, uint8_t *dst, size_t cap)
{
    size_t off = 0;
    if (mode == TC_SPARSE) {
        size_t c = tck_compact(p, stride, cnt, w, mask);
        ck_put32(dst, (uint32_t)c);
        off = 4 + bstream_put(mask, (cnt + 7) / 8, dst + 4, cap - 4, BSTREAM_SMALL);
        cnt = c;
    }
    int pref = mode == TC_STANDALONE ? BSTREAM_FAST : BSTREAM_SMALL;
    return off + put_planes(p, stride, cnt, w, pref, dst + off, cap - off);
}

/* One group's cnt values: its mode byte, then its body, dense or sparse,
** whichever its cost model (body_cost) says is smaller. Returns the
** bytes written. */
static size_t put_group(uint8_t *p, size_t stride, size_t cnt, unsigned w, uint8_t *mask,
                        uint8_t *dst, size_t cap)
{
    uint32_t hist[8][256];
    memset(hist, 0, sizeof hist);
    size_t zero = plane_hist(p, stride, cnt, w, hist);
    double dense, sparse;
    body_cost(hist, w, cnt, zero, cnt, &dense, &sparse, NULL);
    dst[0] = sparse < dense ? TC_SPARSE : TC_DENSE;
    return 1 + put_body(dst[0], p, stride, cnt, w, mask, dst + 1, cap - 1);
}

/* Estimated bytes of the grouped form of delta op on the sample estimate()
** uses; gh is scratch of GROUP_HIST bytes. */
#define GROUP_HIST (TC_GROUPS * 8 * 256 * sizeof(uint32_t))
static double estimate_grouped(unsigned w, int op, const uint8_t *raw, const uint8_t *base,
                               size_t cnt, uint8_t *tmp, uint32_t (*gh)[8][256])
{
    size_t hist[256] = {0}, part[256], tot = 0, zero[TC_GROUPS] = {0}, num[TC_GROUPS] = {0};
    uint8_t ident[256], gmap[256], bnd[TC_GROUPS - 1];
    for (int v = 0; v < 256; v++) ident[v] = (uint8_t)v;
    FOR_SAMPLE(cnt, a, run) {
        tck_group_count(w, base + a * w, run, ident, part);
        for (int v = 0; v < 256; v++) hist[v] += part[v];
        tot += run;
    }
    int nb = group_bounds(hist, tot, bnd);
    group_map(bnd, nb, gmap);
    memset(gh, 0, GROUP_HIST);
    FOR_SAMPLE(cnt, a, run) {
        tck_fwd(w, op, raw + a * w, base + a * w, run, tmp, run);
        for (size_t i = 0; i < run; i++) {
            unsigned g = tck_group_of(w, base, a + i, gmap);
            uint8_t any = 0;
            for (unsigned k = 0; k < w; k++) {
                gh[g][k][tmp[k * run + i]]++;
                any |= tmp[k * run + i];
            }
            zero[g] += !any;
            num[g]++;
        }
    }
    double est = 13 + 5 * (double)nb + 4;
    for (int g = 0; g <= nb; g++) {
        double dense, sparse;
        size_t n = (size_t)((double)num[g] / (double)tot * (double)cnt);
        body_cost(gh[g], w, num[g], zero[g], n, &dense, &sparse, NULL);
        est += 1 + CK_MIN(dense, sparse);
    }
    return est;
}

/* Scratch of a grouped encode or decode: the planes in group order (p),
** then a change mask; a decode takes n bytes more after it (the joined
** elements). */
static size_t group_scratch(size_t n, unsigned w) { return n + n / (8 * w) + 16; }

/* Worth trying: float elements of 2+ bytes, and a block large enough that
** the worst case of 16 groups' headers (all sparse: 16 * (18 + 13w) bytes
** and n/8w of masks) fits the n/8 + 248 bytes of slack tc_bound leaves. */
static int groupable(unsigned w, int is_float, size_t n)
{
    return is_float && w >= 2 && n >= 32768;
}

/* Encode the delta op of raw against base as TC_GROUPED into dst, using
** scratch s of group_scratch(n, w) bytes. */
static void encode_grouped(const uint8_t *raw, size_t n, unsigned w, int flags, int op,
                           const uint8_t *base, uint64_t base_hash, uint8_t *s,
                           uint8_t *dst, size_t cap, size_t *out_len)
{
    size_t cnt = n / w, hist[256], gcnt[TC_GROUPS] = {0}, at[TC_GROUPS];
    uint8_t bnd[TC_GROUPS - 1], gmap[256], ident[256];
    uint8_t *p = s, *mask = p + n;
    for (int v = 0; v < 256; v++) ident[v] = (uint8_t)v;
    tck_group_count(w, base, cnt, ident, hist);
    int nb = group_bounds(hist, cnt, bnd);
    group_map(bnd, nb, gmap);
    for (int v = 0; v < 256; v++) gcnt[gmap[v]] += hist[v];
    group_starts(gcnt, nb + 1, at);
    tck_group_fwd(w, op, raw, base, cnt, gmap, at, p);
    dst[0] = TC_GROUPED;
    dst[1] = (uint8_t)w;
    dst[2] = (uint8_t)flags;
    dst[3] = 0;
    ck_put64(dst + 4, base_hash);
    dst[12] = (uint8_t)(nb + 1);
    memcpy(dst + 13, bnd, (size_t)nb);
    size_t off = 13 + (size_t)nb, a = 0;
    for (int g = 0; g <= nb; g++, off += 4) ck_put32(dst + off, (uint32_t)gcnt[g]);
    for (int g = 0; g <= nb; a += gcnt[g], g++)
        off += put_group(p + a, cnt, gcnt[g], w, mask, dst + off, cap - off);
    *out_len = off;
}

/* Encode in one given mode; scratch s holds n + n/8 + 16 bytes (planes, then
** the change mask). */
static int encode_mode(const uint8_t *raw, size_t n, unsigned w, int is_float, int mode,
                       int xor, const uint8_t *base, uint64_t base_hash, uint8_t *s,
                       uint8_t *dst, size_t cap, size_t *out_len)
{
    size_t cnt = n / w, off = 4;
    int op = op_of(mode, is_float, xor);
    dst[0] = (uint8_t)mode;
    dst[1] = (uint8_t)w;
    dst[2] = (uint8_t)((is_float ? 1 : 0) | (xor ? 2 : 0));
    dst[3] = 0;
    if (mode != TC_STANDALONE) {
        ck_put64(dst + 4, base_hash);
        off = 12;
    }
    tck_fwd(w, op, raw, mode == TC_STANDALONE ? raw : base, cnt, s, cnt);
    *out_len = off + put_body(mode, s, cnt, cnt, w, s + n, dst + off, cap - off);
    return 0;
}

static unsigned fit_width(unsigned width, size_t n)
{
    int ok = width == 1 || width == 2 || width == 4 || width == 8;
    return ok && n % width == 0 ? width : 1;
}

struct cand {
    int mode, xor, base; /* base: which of the bases a delta is against */
    double est;
};

/* A grouped delta decodes several times slower than a plain one (elements
** are gathered from their groups one at a time): take it only when it is
** estimated this much smaller. */
#define GROUP_GAIN 0.95

/* The candidate with the smallest estimate over standalone and the deltas
** against each of bases[0..nb), then the grouped form of the best delta;
** standalone first (ties keep it). gh: scratch of GROUP_HIST bytes. */
static struct cand choose(const uint8_t *raw, const uint8_t *const *bases, int nb, size_t n,
                          unsigned w, int is_float, const struct tc_opts *o, uint8_t *tmp,
                          uint32_t (*gh)[8][256], double *st, int *st_runs)
{
    size_t cnt = n / w;
    struct cand best = {TC_STANDALONE, 0, -1, 0};
    struct estimate se = estimate(w, op_of(TC_STANDALONE, is_float, 0), raw, raw, cnt, tmp);
    best.est = se.dense;
    *st = se.bound;
    *st_runs = se.runs;
    for (int b = 0; b < nb; b++) {
        for (int xor = 0; xor <= 1; xor++) {
            if ((xor && o->delta == TC_DELTA_ULP) || (!xor && o->delta == TC_DELTA_XOR)) continue;
            struct estimate e =
                estimate(w, op_of(TC_DENSE, is_float, xor), raw, bases[b], cnt, tmp);
            if (e.dense < best.est) best = (struct cand){TC_DENSE, xor, b, e.dense};
            if (!o->no_sparse && e.sparse < best.est)
                best = (struct cand){TC_SPARSE, xor, b, e.sparse};
        }
    }
    if (best.mode != TC_STANDALONE && groupable(w, is_float, n) && !o->no_group) {
        double g = estimate_grouped(w, op_of(TC_DENSE, is_float, best.xor), raw,
                                    bases[best.base], cnt, tmp, gh);
        if (g < best.est * GROUP_GAIN)
            best = (struct cand){TC_GROUPED, best.xor, best.base, g};
    }
    return best;
}

int tc_encode_from(const uint8_t *raw, size_t n, unsigned width, int is_float,
                   const uint8_t *const *bases, const uint64_t *hashes, int nb,
                   const struct tc_opts *o, uint8_t *dst, size_t cap, size_t *out_len,
                   int *mode, int *which)
{
    static const struct tc_opts defaults = {TC_DELTA_BEST, 0, 0};
    if (cap < tc_bound(n)) return -EINVAL;
    if (!o) o = &defaults;
    unsigned w = fit_width(width, n);
    if (w != width) is_float = 0;
    size_t alt_cap = tc_bound(n), work = n + n / 8 + 16 + w * SAMPLE_RUN;
    if (groupable(w, is_float, n)) work = CK_MAX(work, group_scratch(n, w));
    work = (work + 63) & ~(size_t)63;
    uint8_t *s = scratch_get(SCRATCH_TCODEC, work + GROUP_HIST + alt_cap);
    if (!s) return -ENOMEM;
    uint32_t(*gh)[8][256] = (uint32_t(*)[8][256])(void *)(s + work);
    uint8_t *alt = s + work + GROUP_HIST;
    *mode = TC_STANDALONE;
    *which = -1;
    if (nb == 0 || n == 0)
        return encode_mode(raw, n, w, is_float, TC_STANDALONE, 0, NULL, 0, s, dst, cap,
                           out_len);
    double st;
    int st_runs;
    struct cand c = choose(raw, bases, nb, n, w, is_float, o, s, gh, &st, &st_runs);
    const uint8_t *base = c.base >= 0 ? bases[c.base] : NULL;
    uint64_t bh = base ? hashes[c.base] : 0;
    if (c.mode == TC_GROUPED)
        encode_grouped(raw, n, w, (is_float ? 1 : 0) | (c.xor ? 2 : 0),
                       op_of(TC_DENSE, is_float, c.xor), base, bh, s, dst, cap, out_len);
    else
        CK_TRY(encode_mode(raw, n, w, is_float, c.mode, c.xor, base, bh, s, dst, cap, out_len));
    *mode = c.mode;
    *which = c.base;
    /* The entropy estimate bounds the standalone size from below unless
    ** runs let zstd beat it; otherwise settle it with a real encoding. */
    if (c.mode == TC_STANDALONE || (!st_runs && (double)*out_len <= st)) return 0;
    size_t alt_len;
    CK_TRY(encode_mode(raw, n, w, is_float, TC_STANDALONE, 0, NULL, 0, s, alt, alt_cap,
                       &alt_len));
    if (alt_len < *out_len) {
        memcpy(dst, alt, alt_len);
        *out_len = alt_len;
        *mode = TC_STANDALONE;
        *which = -1;
    }
    return 0;
}

int tc_encode(const uint8_t *raw, size_t n, unsigned width, int is_float,
              const uint8_t *base, uint64_t base_hash, const struct tc_opts *o,
              uint8_t *dst, size_t cap, size_t *out_len, int *mode)
{
    int which;
    return tc_encode_from(raw, n, width, is_float, &base, &base_hash, base ? 1 : 0, o, dst,
                          cap, out_len, mode, &which);
}

int tc_needs_base(const uint8_t *src, size_t len)
{
    return len >= 1 && src[0] != TC_STANDALONE;
}

/* The w planes of cnt values each: pl[k] is plane k, where it is stored
** when raw, else decoded into s + k * stride. */
static long view_planes(const uint8_t *src, size_t avail, uint8_t *s, size_t stride,
                        size_t cnt, unsigned w, const uint8_t **pl)
{
    size_t off = 0;
    for (unsigned k = 0; k < w; k++) {
        long r = bstream_view(src + off, avail - off, s + k * stride, cnt, &pl[k]);
        if (r < 0) return r;
        off += (size_t)r;
    }
    return (long)off;
}

/* Read w planes of cnt values each into s (stride stride): for bodies
** rearranged in place there (sparse, grouped). */
static long get_planes(const uint8_t *src, size_t avail, uint8_t *s, size_t stride,
                       size_t cnt, unsigned w)
{
    const uint8_t *pl[8];
    long r = view_planes(src, avail, s, stride, cnt, w, pl);
    for (unsigned k = 0; r >= 0 && k < w; k++)
        if (pl[k] != s + k * stride) memcpy(s + k * stride, pl[k], cnt);
    return r;
}

/* A dense or sparse body of cnt values into planes s (stride stride), mask
** as scratch; returns the bytes used or -EIO. */
static long get_body(int mode, const uint8_t *src, size_t avail, uint8_t *s, size_t stride,
                     size_t cnt, unsigned w, uint8_t *mask)
{
    size_t off = 0, c = cnt;
    if (mode == TC_SPARSE) {
        if (avail < 4) return -EIO;
        c = ck_get32(src);
        off = 4;
        long r = bstream_get_mask(src + off, avail - off, mask, cnt, c);
        if (r < 0) return r;
        off += (size_t)r;
    }
    long r = get_planes(src + off, avail - off, s, stride, c, w);
    if (r < 0) return r;
    if (mode == TC_SPARSE) tck_expand(s, stride, cnt, w, mask, c);
    return (long)off + r;
}

/* Decode the TC_GROUPED body src[0..len) of a block of n bytes against
** base (delta op op) into dst, using scratch s of group_scratch(n, w) + n. The
** group sizes are stored, sparing a pass over the base; the gather checks
** them (a wrong size leaves some group's cursor short of its end). */
static int decode_grouped(const uint8_t *src, size_t len, const uint8_t *base, unsigned w,
                          int op, uint8_t *s, uint8_t *dst, size_t n)
{
    size_t cnt = n / w, gcnt[TC_GROUPS], at[TC_GROUPS], end[TC_GROUPS], sum = 0;
    uint8_t gmap[256], *p = s, *mask = p + n;
    if (len < 1 || src[0] < 1 || src[0] > TC_GROUPS) return -EIO;
    int ng = src[0];
    size_t off = (size_t)ng + 4 * (size_t)ng;
    if (len < off) return -EIO;
    for (int i = 2; i < ng; i++)
        if (src[i] <= src[i - 1]) return -EIO;
    group_map(src + 1, ng - 1, gmap);
    for (int g = 0; g < ng; g++) sum += gcnt[g] = ck_get32(src + ng + 4 * g);
    if (sum != cnt) return -EIO;
    group_starts(gcnt, ng, at);
    for (int g = 0; g < ng; g++) {
        end[g] = at[g] + gcnt[g];
        if (off >= len || (src[off] != TC_DENSE && src[off] != TC_SPARSE)) return -EIO;
        long r = get_body(src[off], src + off + 1, len - off - 1, p + at[g], cnt, gcnt[g], w,
                          mask);
        if (r < 0) return (int)r;
        off += 1 + (size_t)r;
    }
    if (off != len) return -EIO;
    uint8_t *v = s + group_scratch(n, w);
    const uint8_t *pl[8];
    tck_planes(p, cnt, w, pl);
    tck_inv(w, TCK_ID, pl, base, cnt, v); /* join the planes (vectorised) */
    tck_group_inv(w, op, v, base, cnt, gmap, at, dst);
    for (int g = 0; g < ng; g++)
        if (at[g] != end[g]) return -EIO;
    return 0;
}

int tc_decode(const uint8_t *src, size_t len, const uint8_t *base, uint64_t base_hash,
              uint8_t *dst, size_t n)
{
    if (len < 4) return -EIO;
    int mode = src[0], flags = src[2];
    unsigned w = src[1];
    if (mode > TC_GROUPED || fit_width(w, n) != w || src[3] != 0 || flags > 3) return -EIO;
    if (mode == TC_GROUPED && !groupable(w, flags & 1, n)) return -EIO;
    size_t cnt = n / w, off = 4;
    if (mode != TC_STANDALONE) {
        if (!base || len < 12 || ck_get64(src + 4) != base_hash) return -EIO;
        off = 12;
    }
    size_t need = mode == TC_GROUPED ? group_scratch(n, w) + n : n + (cnt + 7) / 8 + 16;
    uint8_t *s = scratch_get(SCRATCH_TCODEC, need);
    if (!s) return -ENOMEM;
    int op = op_of(mode, flags & 1, flags & 2);
    if (mode == TC_GROUPED) return decode_grouped(src + off, len - off, base, w, op, s, dst, n);
    /* Dense planes stored raw are joined from the record itself. */
    const uint8_t *pl[8];
    long r = mode == TC_SPARSE ? get_body(mode, src + off, len - off, s, cnt, cnt, w, s + n)
                               : view_planes(src + off, len - off, s, cnt, cnt, w, pl);
    if (r < 0) return (int)r;
    if (off + (size_t)r != len) return -EIO;
    if (mode == TC_SPARSE) tck_planes(s, cnt, w, pl);
    tck_inv(w, op, pl, mode == TC_STANDALONE ? s : base, cnt, dst);
    return 0;
}
