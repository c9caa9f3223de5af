/*
** tcodec_kern.c: the kernels of the tensor codec (see tcodec_kern.h): the
** element transforms, the byte-plane split and join fused with them, the
** sparse compaction, and the group gathers. SSE2 paths for widths 2 and 4,
** scalar loops for the rest and for machines without SSE2.
**
** Every transform is written once per element width by a macro, and each
** whole-block kernel is instantiated once per op: with a constant op the
** compiler drops the switch from the inner loop and vectorises it.
*/
#include "tcodec_kern.h"

#include <string.h>

/* ---- SSE2 paths of the whole-block transforms, widths 2 and 4 ----
** Sixteen elements a step: the op on 16- or 32-bit lanes, then a byte
** transpose into the planes (or out of them). Each returns how many
** elements it did, a multiple of 16; the scalar loops do the rest. Other
** widths, and machines without SSE2, have only the scalar loops. */

#ifdef __SSE2__
#include <emmintrin.h>

typedef __m128i vec;
static inline vec v_ld(const uint8_t *p) { return _mm_loadu_si128((const vec *)(const void *)p); }
static inline void v_st(uint8_t *p, vec v) { _mm_storeu_si128((vec *)(void *)p, v); }
#define VX _mm_xor_si128
#define VO _mm_or_si128

/* The scalar transforms of DEFINE_WIDTH below, lane by lane. */
#define DEFINE_VLANES(B, SLLI, SRLI, SRAI, ADD, SUB, SET1, TOP)                \
    static inline vec vrotl##B(vec x) { return VO(SLLI(x, 1), SRLI(x, B - 1)); } \
    static inline vec vrotr##B(vec x) { return VO(SRLI(x, 1), SLLI(x, B - 1)); } \
    static inline vec vsgn##B(vec x) { return SRAI(x, B - 1); }                \
    static inline vec vord##B(vec x) { return VX(x, VO(vsgn##B(x), SET1(TOP))); } \
    static inline vec vunord##B(vec o) { return VX(o, VO(vsgn##B(VX(o, SET1(-1))), SET1(TOP))); } \
    static inline vec vzz##B(vec d) { return VX(SLLI(d, 1), vsgn##B(d)); }     \
    static inline vec vunzz##B(vec z)                                          \
    {                                                                          \
        return VX(SRLI(z, 1), SUB(_mm_setzero_si128(), _mm_and_si128(z, SET1(1)))); \
    }                                                                          \
    static inline __attribute__((always_inline)) vec vfwd1_##B(int op, vec x, vec b) \
    {                                                                          \
        switch (op) {                                                          \
        case TCK_ROT: return vrotl##B(x);                                      \
        case TCK_ULPF: return vzz##B(SUB(vord##B(x), vord##B(b)));             \
        case TCK_ULPI: return vzz##B(SUB(x, b));                               \
        case TCK_XORF: return vrotl##B(VX(x, b));                              \
        case TCK_XORI: return VX(x, b);                                        \
        default: return x;                                                     \
        }                                                                      \
    }                                                                          \
    static inline __attribute__((always_inline)) vec vinv1_##B(int op, vec v, vec b) \
    {                                                                          \
        switch (op) {                                                          \
        case TCK_ROT: return vrotr##B(v);                                      \
        case TCK_ULPF: return vunord##B(ADD(vord##B(b), vunzz##B(v)));         \
        case TCK_ULPI: return ADD(b, vunzz##B(v));                             \
        case TCK_XORF: return VX(vrotr##B(v), b);                              \
        case TCK_XORI: return VX(v, b);                                        \
        default: return v;                                                     \
        }                                                                      \
    }
DEFINE_VLANES(16, _mm_slli_epi16, _mm_srli_epi16, _mm_srai_epi16, _mm_add_epi16,
              _mm_sub_epi16, _mm_set1_epi16, INT16_MIN)
DEFINE_VLANES(32, _mm_slli_epi32, _mm_srli_epi32, _mm_srai_epi32, _mm_add_epi32,
              _mm_sub_epi32, _mm_set1_epi32, INT32_MIN)

/* Width 2: low bytes to plane 0, high bytes to plane 1 (a pack), and back
** (an interleave). */
static inline __attribute__((always_inline)) size_t vfwd2(int op, const uint8_t *x,
                                                          const uint8_t *b, size_t cnt,
                                                          uint8_t *pl, size_t stride)
{
    const vec lo = _mm_set1_epi16(0xFF);
    size_t i = 0;
    for (; i + 16 <= cnt; i += 16) {
        vec a0 = vfwd1_16(op, v_ld(x + 2 * i), v_ld(b + 2 * i));
        vec a1 = vfwd1_16(op, v_ld(x + 2 * i + 16), v_ld(b + 2 * i + 16));
        v_st(pl + i, _mm_packus_epi16(_mm_and_si128(a0, lo), _mm_and_si128(a1, lo)));
        v_st(pl + stride + i, _mm_packus_epi16(_mm_srli_epi16(a0, 8), _mm_srli_epi16(a1, 8)));
    }
    return i;
}

static inline __attribute__((always_inline)) size_t vinv2(int op, const uint8_t *const *pl,
                                                          const uint8_t *b, size_t cnt,
                                                          uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= cnt; i += 16) {
        vec l = v_ld(pl[0] + i), h = v_ld(pl[1] + i);
        v_st(dst + 2 * i, vinv1_16(op, _mm_unpacklo_epi8(l, h), v_ld(b + 2 * i)));
        v_st(dst + 2 * i + 16, vinv1_16(op, _mm_unpackhi_epi8(l, h), v_ld(b + 2 * i + 16)));
    }
    return i;
}

/* Width 4: vectors of elements 0-3, 4-7, 8-11, 12-15 to the four planes'
** 16 bytes: three rounds of byte interleaves, then one of 64-bit halves. */
static inline __attribute__((always_inline)) size_t vfwd4(int op, const uint8_t *x,
                                                          const uint8_t *b, size_t cnt,
                                                          uint8_t *pl, size_t stride)
{
    size_t i = 0;
    for (; i + 16 <= cnt; i += 16) {
        vec e[4];
        for (int k = 0; k < 4; k++)
            e[k] = vfwd1_32(op, v_ld(x + 4 * i + 16 * k), v_ld(b + 4 * i + 16 * k));
        vec t0 = _mm_unpacklo_epi8(e[0], e[1]), t1 = _mm_unpackhi_epi8(e[0], e[1]);
        vec t2 = _mm_unpacklo_epi8(e[2], e[3]), t3 = _mm_unpackhi_epi8(e[2], e[3]);
        vec u0 = _mm_unpacklo_epi8(t0, t1), u1 = _mm_unpackhi_epi8(t0, t1);
        vec u2 = _mm_unpacklo_epi8(t2, t3), u3 = _mm_unpackhi_epi8(t2, t3);
        vec w0 = _mm_unpacklo_epi8(u0, u1), w1 = _mm_unpackhi_epi8(u0, u1);
        vec w2 = _mm_unpacklo_epi8(u2, u3), w3 = _mm_unpackhi_epi8(u2, u3);
        v_st(pl + i, _mm_unpacklo_epi64(w0, w2));
        v_st(pl + stride + i, _mm_unpackhi_epi64(w0, w2));
        v_st(pl + 2 * stride + i, _mm_unpacklo_epi64(w1, w3));
        v_st(pl + 3 * stride + i, _mm_unpackhi_epi64(w1, w3));
    }
    return i;
}

static inline __attribute__((always_inline)) size_t vinv4(int op, const uint8_t *const *pl,
                                                          const uint8_t *b, size_t cnt,
                                                          uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= cnt; i += 16) {
        vec p0 = v_ld(pl[0] + i), p1 = v_ld(pl[1] + i);
        vec p2 = v_ld(pl[2] + i), p3 = v_ld(pl[3] + i);
        vec w0 = _mm_unpacklo_epi64(p0, p1), w2 = _mm_unpackhi_epi64(p0, p1);
        vec w1 = _mm_unpacklo_epi64(p2, p3), w3 = _mm_unpackhi_epi64(p2, p3);
        vec x0 = _mm_unpacklo_epi8(w0, w1), x1 = _mm_unpackhi_epi8(w0, w1);
        vec x2 = _mm_unpacklo_epi8(w2, w3), x3 = _mm_unpackhi_epi8(w2, w3);
        vec e[4] = {_mm_unpacklo_epi8(x0, x1), _mm_unpackhi_epi8(x0, x1),
                    _mm_unpacklo_epi8(x2, x3), _mm_unpackhi_epi8(x2, x3)};
        for (int k = 0; k < 4; k++)
            v_st(dst + 4 * i + 16 * k, vinv1_32(op, e[k], v_ld(b + 4 * i + 16 * k)));
    }
    return i;
}

/* Element-major, in place: d[i] = the inverse op of delta d[i] on base b[i]
** (a grouped delta, its planes already joined and gathered). */
static inline __attribute__((always_inline)) size_t vapply2(int op, uint8_t *d,
                                                            const uint8_t *b, size_t cnt)
{
    size_t i = 0;
    for (; i + 8 <= cnt; i += 8) v_st(d + 2 * i, vinv1_16(op, v_ld(d + 2 * i), v_ld(b + 2 * i)));
    return i;
}

static inline __attribute__((always_inline)) size_t vapply4(int op, uint8_t *d,
                                                            const uint8_t *b, size_t cnt)
{
    size_t i = 0;
    for (; i + 4 <= cnt; i += 4) v_st(d + 4 * i, vinv1_32(op, v_ld(d + 4 * i), v_ld(b + 4 * i)));
    return i;
}
#else
#define vapply2(op, d, b, cnt) ((size_t)0)
#define vapply4(op, d, b, cnt) ((size_t)0)
#define vfwd2(op, x, b, cnt, pl, stride) ((size_t)0)
#define vinv2(op, pl, b, cnt, dst) ((size_t)0)
#define vfwd4(op, x, b, cnt, pl, stride) ((size_t)0)
#define vinv4(op, pl, b, cnt, dst) ((size_t)0)
#endif
#define vfwd1(op, x, b, cnt, pl, stride) ((size_t)0)
#define vinv1(op, pl, b, cnt, dst) ((size_t)0)
#define vapply1(op, d, b, cnt) ((size_t)0)
#define vapply8(op, d, b, cnt) ((size_t)0)
#define vfwd8(op, x, b, cnt, pl, stride) ((size_t)0)
#define vinv8(op, pl, b, cnt, dst) ((size_t)0)

/* ---- transforms, one set per element width ---- */

#define DEFINE_WIDTH(T, W)                                                     \
    static inline T ld##W(const uint8_t *p)                                    \
    {                                                                          \
        T v;                                                                   \
        memcpy(&v, p, W);                                                      \
        return v;                                                              \
    }                                                                          \
    static inline T rotl##W(T x) { return (T)(x << 1 | x >> (8 * W - 1)); }    \
    static inline T rotr##W(T x) { return (T)(x >> 1 | x << (8 * W - 1)); }    \
    static inline T sgn##W(T x) { return (T)(0 - (T)(x >> (8 * W - 1))); }     \
    static inline T ord##W(T x) { return x ^ (sgn##W(x) | (T)((T)1 << (8 * W - 1))); } \
    static inline T unord##W(T o) { return o ^ (sgn##W((T)~o) | (T)((T)1 << (8 * W - 1))); } \
    static inline T zz##W(T d) { return (T)(d << 1) ^ sgn##W(d); }             \
    static inline T unzz##W(T z) { return (T)(z >> 1) ^ (T)(0 - (T)(z & 1)); } \
    static inline T fwd1_##W(int op, T x, T b)                                 \
    {                                                                          \
        switch (op) {                                                          \
        case TCK_ROT: return rotl##W(x);                                       \
        case TCK_ULPF: return zz##W((T)(ord##W(x) - ord##W(b)));               \
        case TCK_ULPI: return zz##W((T)(x - b));                               \
        case TCK_XORF: return rotl##W(x ^ b);                                  \
        case TCK_XORI: return x ^ b;                                           \
        default: return x;                                                     \
        }                                                                      \
    }                                                                          \
    static inline T inv1_##W(int op, T v, T b)                                 \
    {                                                                          \
        switch (op) {                                                          \
        case TCK_ROT: return rotr##W(v);                                       \
        case TCK_ULPF: return unord##W((T)(ord##W(b) + unzz##W(v)));           \
        case TCK_ULPI: return (T)(b + unzz##W(v));                             \
        case TCK_XORF: return rotr##W(v) ^ b;                                  \
        case TCK_XORI: return v ^ b;                                           \
        default: return v;                                                     \
        }                                                                      \
    }                                                                          \
    /* Element i into slot j of the planes, and back. */                       \
    static inline void fwd_at##W(int op, const uint8_t *x, const uint8_t *b, size_t i, \
                                 uint8_t *pl, size_t stride, size_t j)         \
    {                                                                          \
        T v = fwd1_##W(op, ld##W(x + W * i), ld##W(b + W * i));                \
        for (int k = 0; k < W; k++) pl[k * stride + j] = (uint8_t)(v >> (8 * k)); \
    }                                                                          \
    static inline void inv_at##W(int op, const uint8_t *const *pl, size_t j,     \
                                 const uint8_t *b, size_t i, uint8_t *dst)     \
    {                                                                          \
        T v = 0;                                                               \
        for (int k = 0; k < W; k++) v |= (T)((T)pl[k][j] << (8 * k));          \
        T x = inv1_##W(op, v, ld##W(b + W * i));                               \
        memcpy(dst + W * i, &x, W);                                            \
    }                                                                          \
    /* Planes of elements [0, cnt) (op is constant: the switch is hoisted). */ \
    static void fwd##W(int op, const uint8_t *x, const uint8_t *b, size_t cnt, \
                       uint8_t *pl, size_t stride)                             \
    {                                                                          \
        for (size_t i = vfwd##W(op, x, b, cnt, pl, stride); i < cnt; i++)      \
            fwd_at##W(op, x, b, i, pl, stride, i);                             \
    }                                                                          \
    static void inv##W(int op, const uint8_t *const *pl, const uint8_t *b,      \
                       size_t cnt, uint8_t *dst)                               \
    {                                                                          \
        for (size_t i = vinv##W(op, pl, b, cnt, dst); i < cnt; i++)            \
            inv_at##W(op, pl, i, b, i, dst);                                   \
    }                                                                          \
    /* Elements already joined (d, element-major): the op only, in place. */   \
    static inline __attribute__((always_inline)) void apply##W(int op, uint8_t *d, \
                                                               const uint8_t *b, size_t cnt) \
    {                                                                          \
        for (size_t i = vapply##W(op, d, b, cnt); i < cnt; i++) {              \
            T x = inv1_##W(op, ld##W(d + W * i), ld##W(b + W * i));            \
            memcpy(d + W * i, &x, W);                                          \
        }                                                                      \
    }

DEFINE_WIDTH(uint8_t, 1)
DEFINE_WIDTH(uint16_t, 2)
DEFINE_WIDTH(uint32_t, 4)
DEFINE_WIDTH(uint64_t, 8)

/* Specialised copies per op: the compiler sees a constant op and drops the
** switch from the inner loop. */
void tck_fwd(unsigned w, int op, const uint8_t *x, const uint8_t *b, size_t cnt, uint8_t *pl,
             size_t stride)
{
#define FWD_OPS(W)                                                             \
    switch (op) {                                                              \
    case TCK_ROT: fwd##W(TCK_ROT, x, b, cnt, pl, stride); break;               \
    case TCK_ULPF: fwd##W(TCK_ULPF, x, b, cnt, pl, stride); break;             \
    case TCK_ULPI: fwd##W(TCK_ULPI, x, b, cnt, pl, stride); break;             \
    case TCK_XORF: fwd##W(TCK_XORF, x, b, cnt, pl, stride); break;             \
    case TCK_XORI: fwd##W(TCK_XORI, x, b, cnt, pl, stride); break;             \
    default: fwd##W(TCK_ID, x, b, cnt, pl, stride); break;                     \
    }
    switch (w) {
    case 1: FWD_OPS(1); break;
    case 2: FWD_OPS(2); break;
    case 4: FWD_OPS(4); break;
    default: FWD_OPS(8); break;
    }
#undef FWD_OPS
}

void tck_inv(unsigned w, int op, const uint8_t *const *pl, const uint8_t *b, size_t cnt,
             uint8_t *dst)
{
#define INV_OPS(W)                                                             \
    switch (op) {                                                              \
    case TCK_ROT: inv##W(TCK_ROT, pl, b, cnt, dst); break;                     \
    case TCK_ULPF: inv##W(TCK_ULPF, pl, b, cnt, dst); break;                   \
    case TCK_ULPI: inv##W(TCK_ULPI, pl, b, cnt, dst); break;                   \
    case TCK_XORF: inv##W(TCK_XORF, pl, b, cnt, dst); break;                   \
    case TCK_XORI: inv##W(TCK_XORI, pl, b, cnt, dst); break;                   \
    default: inv##W(TCK_ID, pl, b, cnt, dst); break;                           \
    }
    switch (w) {
    case 1: INV_OPS(1); break;
    case 2: INV_OPS(2); break;
    case 4: INV_OPS(4); break;
    default: INV_OPS(8); break;
    }
#undef INV_OPS
}

/* ---- sparse bodies ----
** compact and expand, per width. Branch-free and in place: which elements
** changed is random, a branch would mispredict often. */
#define DEFINE_SPARSE(W)                                                       \
    static size_t compact##W(uint8_t *s, size_t stride, size_t cnt, uint8_t *mask) \
    {                                                                          \
        size_t c = 0;                                                          \
        memset(mask, 0, (cnt + 7) / 8);                                        \
        for (size_t i = 0; i < cnt; i++) {                                     \
            uint8_t any = 0;                                                   \
            for (int k = 0; k < W; k++) {                                      \
                any |= s[k * stride + i];                                      \
                s[k * stride + c] = s[k * stride + i];                         \
            }                                                                  \
            unsigned set = any != 0;                                           \
            mask[i >> 3] |= (uint8_t)(set << (i & 7));                         \
            c += set;                                                          \
        }                                                                      \
        return c;                                                              \
    }                                                                          \
    /* The inverse: spread c values back to the marked elements, from the back. */ \
    static void expand##W(uint8_t *s, size_t stride, size_t cnt, const uint8_t *mask, \
                          size_t c)                                            \
    {                                                                          \
        for (size_t i = cnt; i-- > 0;) {                                       \
            unsigned set = mask[i >> 3] >> (i & 7) & 1;                        \
            c -= set;                                                          \
            uint8_t keep = (uint8_t)(0u - set);                                \
            for (int k = 0; k < W; k++) s[k * stride + i] = s[k * stride + c] & keep; \
        }                                                                      \
    }
DEFINE_SPARSE(1)
DEFINE_SPARSE(2)
DEFINE_SPARSE(4)
DEFINE_SPARSE(8)

size_t tck_compact(uint8_t *s, size_t stride, size_t cnt, unsigned w, uint8_t *mask)
{
    switch (w) {
    case 1: return compact1(s, stride, cnt, mask);
    case 2: return compact2(s, stride, cnt, mask);
    case 4: return compact4(s, stride, cnt, mask);
    default: return compact8(s, stride, cnt, mask);
    }
}

void tck_expand(uint8_t *s, size_t stride, size_t cnt, unsigned w, const uint8_t *mask, size_t c)
{
    switch (w) {
    case 1: expand1(s, stride, cnt, mask, c); break;
    case 2: expand2(s, stride, cnt, mask, c); break;
    case 4: expand4(s, stride, cnt, mask, c); break;
    default: expand8(s, stride, cnt, mask, c); break;
    }
}

/* ---- grouped deltas ----
** Per width: the group of each element of a block comes from the exponent
** byte of its base value through gmap. gcount counts the groups (four
** partial counts, so runs of one group do not serialise on one counter);
** gfwd and ginv move elements between element order and group order (at[g]:
** where group g's next element goes), fused with the transform. */
#define GROUP_OF(W, b, i, gmap) gmap[tck_expbyte##W((b) + W * (i))]
#define DEFINE_GROUP(T, W)                                                     \
    static void gcount##W(const uint8_t *b, size_t cnt, const uint8_t gmap[256], \
                          size_t hist[256])                                    \
    {                                                                          \
        uint32_t h[4][256];                                                    \
        memset(h, 0, sizeof h);                                                \
        size_t i = 0;                                                          \
        for (; i + 4 <= cnt; i += 4)                                           \
            for (int k = 0; k < 4; k++) h[k][GROUP_OF(W, b, i + k, gmap)]++;   \
        for (; i < cnt; i++) h[0][GROUP_OF(W, b, i, gmap)]++;                  \
        for (int v = 0; v < 256; v++) hist[v] = (size_t)h[0][v] + h[1][v] + h[2][v] + h[3][v]; \
    }                                                                          \
    static inline __attribute__((always_inline)) void gfwd##W(                 \
        int op, const uint8_t *x, const uint8_t *b, size_t cnt, const uint8_t gmap[256], \
        size_t *at, uint8_t *pl)                                               \
    {                                                                          \
        for (size_t i = 0; i < cnt; i++)                                       \
            fwd_at##W(op, x, b, i, pl, cnt, at[GROUP_OF(W, b, i, gmap)]++);    \
    }                                                                          \
    /* v: the deltas in group order with their planes joined; the gather       \
    ** moves whole elements from the group streams, then the op runs in place  \
    ** on whole vectors. */                                                    \
    static inline __attribute__((always_inline)) void ginv##W(                 \
        int op, const uint8_t *v, const uint8_t *b, size_t cnt, const uint8_t gmap[256], \
        size_t *at, uint8_t *dst)                                              \
    {                                                                          \
        for (size_t i = 0; i < cnt; i++) {                                     \
            size_t j = at[GROUP_OF(W, b, i, gmap)]++;                          \
            j = j < cnt ? j : cnt - 1; /* sizes checked after */               \
            memcpy(dst + W * i, v + W * j, W);                                 \
        }                                                                      \
        apply##W(op, dst, b, cnt);                                             \
    }
DEFINE_GROUP(uint16_t, 2)
DEFINE_GROUP(uint32_t, 4)
DEFINE_GROUP(uint64_t, 8)

/* The two delta ops, specialised (a constant op drops the switch). */
#define GROUP_OPS(F, W, ...)                                                   \
    switch (op) {                                                              \
    case TCK_ULPF: F##W(TCK_ULPF, __VA_ARGS__); break;                         \
    default: F##W(TCK_XORF, __VA_ARGS__); break;                               \
    }
#define GROUP_WIDTHS(F, ...)                                                   \
    switch (w) {                                                               \
    case 2: GROUP_OPS(F, 2, __VA_ARGS__); break;                               \
    case 4: GROUP_OPS(F, 4, __VA_ARGS__); break;                               \
    default: GROUP_OPS(F, 8, __VA_ARGS__); break;                              \
    }

void tck_group_count(unsigned w, const uint8_t *b, size_t cnt, const uint8_t gmap[256],
                     size_t hist[256])
{
    switch (w) {
    case 2: gcount2(b, cnt, gmap, hist); break;
    case 4: gcount4(b, cnt, gmap, hist); break;
    default: gcount8(b, cnt, gmap, hist); break;
    }
}


void tck_group_fwd(unsigned w, int op, const uint8_t *x, const uint8_t *b, size_t cnt,
                   const uint8_t gmap[256], size_t *at, uint8_t *pl)
{
    GROUP_WIDTHS(gfwd, x, b, cnt, gmap, at, pl);
}

void tck_group_inv(unsigned w, int op, const uint8_t *v, const uint8_t *b, size_t cnt,
                   const uint8_t gmap[256], size_t *at, uint8_t *dst)
{
    GROUP_WIDTHS(ginv, v, b, cnt, gmap, at, dst);
}
