/*
** huf.c: canonical Huffman coding of byte streams (see huf.h).
**
** Code lengths come from the classic two-queue construction over symbols
** sorted by count; when the longest code exceeds HUF_MAX_BITS the counts are
** flattened and the code rebuilt, which costs a little ratio only on very
** skewed planes and keeps the decode table at 2^11 entries (4 KiB, in L1).
**
** Bit I/O moves 64 bits at a time: the encoder emits 4 codes (<= 44 bits)
** per store, the decoder 5 codes (<= 55 bits) per load.
*/
#include "huf.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

struct huf_table {
    uint8_t len[256];
    uint16_t code[256]; /* bit-reversed canonical code */
    int maxlen;         /* 0: a single symbol */
};

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void store64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

void huf_hist(const uint8_t *src, size_t n, uint32_t hist[256])
{
    /* Four tables: runs of one symbol would otherwise serialise on one counter. */
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h[0][src[i]]++;
        h[1][src[i + 1]]++;
        h[2][src[i + 2]]++;
        h[3][src[i + 3]]++;
    }
    for (; i < n; i++) h[0][src[i]]++;
    for (int s = 0; s < 256; s++) hist[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

struct leaf {
    uint64_t w;
    int sym;
};

static int leaf_cmp(const void *a, const void *b)
{
    const struct leaf *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? -1 : 1;
    return x->sym - y->sym;
}

/* Huffman code lengths of the m leaves (m >= 2); returns the longest. */
static int tree_lengths(const struct leaf *lf, int m, uint8_t len[256])
{
    uint64_t w[512];
    int parent[512], depth[512];
    int li = 0, ni = m, nn = m; /* next leaf, next internal node, nodes made */
    for (int i = 0; i < m; i++) w[i] = lf[i].w;
    for (int k = 0; k < m - 1; k++) {
        int pick[2];
        for (int j = 0; j < 2; j++) {
            if (li < m && (ni >= nn || w[li] <= w[ni])) pick[j] = li++;
            else pick[j] = ni++;
        }
        w[nn] = w[pick[0]] + w[pick[1]];
        parent[pick[0]] = parent[pick[1]] = nn;
        nn++;
    }
    depth[nn - 1] = 0;
    int maxlen = 0;
    for (int i = nn - 2; i >= 0; i--) {
        depth[i] = depth[parent[i]] + 1;
        if (i < m) {
            len[lf[i].sym] = (uint8_t)depth[i];
            if (depth[i] > maxlen) maxlen = depth[i];
        }
    }
    return maxlen;
}

/* Canonical codes from lengths, bit-reversed for LSB-first packing. */
static void assign_codes(struct huf_table *t)
{
    unsigned count[HUF_MAX_BITS + 2] = {0}, next[HUF_MAX_BITS + 2] = {0};
    for (int s = 0; s < 256; s++) count[t->len[s]]++;
    count[0] = 0;
    for (int l = 1; l <= HUF_MAX_BITS; l++) next[l] = (next[l - 1] + count[l - 1]) << 1;
    for (int s = 0; s < 256; s++) {
        int l = t->len[s];
        if (!l) continue;
        unsigned c = next[l]++, r = 0;
        for (int b = 0; b < l; b++) r |= ((c >> b) & 1u) << (l - 1 - b);
        t->code[s] = (uint16_t)r;
    }
}

/* Build the table for hist; -1 if there are no symbols at all. */
static int build_table(const uint32_t hist[256], struct huf_table *t)
{
    struct leaf lf[256];
    int m = 0;
    memset(t, 0, sizeof *t);
    for (int s = 0; s < 256; s++)
        if (hist[s]) lf[m++] = (struct leaf){hist[s], s};
    if (m == 0) return -1;
    if (m == 1) {
        t->len[lf[0].sym] = 1;
        return 0;
    }
    qsort(lf, (size_t)m, sizeof lf[0], leaf_cmp);
    for (unsigned shift = 0;; shift++) {
        struct leaf l2[256];
        for (int i = 0; i < m; i++) l2[i] = (struct leaf){CK_MAX(lf[i].w >> shift, 1), lf[i].sym};
        /* Flattening keeps the order of weights, so l2 stays sorted. */
        memset(t->len, 0, sizeof t->len);
        t->maxlen = tree_lengths(l2, m, t->len);
        if (t->maxlen <= HUF_MAX_BITS) break;
    }
    assign_codes(t);
    return 0;
}

/* Bytes of each stream-length field of the short form: enough for the
** longest stream n symbols of codes of at most maxlen bits can make. */
static unsigned field_bytes(size_t n, int maxlen)
{
    uint64_t most = ((uint64_t)(n + 3) / 4 * (unsigned)maxlen + 7) / 8;
    unsigned f = 1;
    while (f < 8 && most >> (8 * f)) f++;
    return f;
}

/* The header t is written with: its size, and for the short form the
** first and last symbol with a code. */
struct hdr {
    size_t size;
    int shrt, lo, hi;
    unsigned field;
};

static struct hdr header_of(const struct huf_table *t, size_t n)
{
    struct hdr h = {HUF_HEADER, 1, 0, 255, field_bytes(n, t->maxlen)};
    while (!t->len[h.lo]) h.lo++;
    while (!t->len[h.hi]) h.hi--;
    size_t shrt = 3 + (size_t)(h.hi - h.lo + 2) / 2 + 3 * h.field;
    if (shrt < HUF_HEADER) h.size = shrt;
    else h.shrt = 0;
    return h;
}

/* Encoded size of n symbols with table t: exact but for the rounding of 4
** streams. */
static size_t coded_size(const struct huf_table *t, const uint32_t hist[256], size_t n)
{
    if (t->maxlen == 0) return 2;
    uint64_t bits = 0;
    for (int s = 0; s < 256; s++) bits += (uint64_t)hist[s] * t->len[s];
    return header_of(t, n).size + (size_t)((bits + 7) / 8) + 3;
}

size_t huf_size(const uint32_t hist[256], size_t n)
{
    struct huf_table t;
    if (n == 0 || build_table(hist, &t) < 0) return 0;
    return coded_size(&t, hist, n);
}

/* The header but for the stream lengths; returns where they go. */
static uint8_t *write_header(const struct huf_table *t, const struct hdr *h, uint8_t *dst)
{
    if (!h->shrt) {
        dst[0] = (uint8_t)t->maxlen;
        for (int s = 0; s < 256; s += 2) dst[1 + s / 2] = (uint8_t)(t->len[s] | t->len[s + 1] << 4);
        return dst + 129;
    }
    dst[0] = (uint8_t)(HUF_SHORT | t->maxlen);
    dst[1] = (uint8_t)h->lo;
    dst[2] = (uint8_t)h->hi;
    uint8_t *p = dst + 3;
    for (int s = h->lo; s <= h->hi; s += 2)
        *p++ = (uint8_t)(t->len[s] | (s < h->hi ? t->len[s + 1] << 4 : 0));
    return p;
}

static void put_field(uint8_t *p, uint64_t v, unsigned f)
{
    for (unsigned i = 0; i < f; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_field(const uint8_t *p, unsigned f)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < f; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Pack the codes of src[0..n) at p; returns the end. Needs 8 bytes of slack. */
static uint8_t *encode_stream(const struct huf_table *t, const uint8_t *src, size_t n,
                              uint8_t *p)
{
    uint64_t acc = 0;
    unsigned nb = 0;
    size_t i = 0;
#define PUT(s) (acc |= (uint64_t)t->code[s] << nb, nb += t->len[s])
#define FLUSH() (store64(p, acc), p += nb >> 3, acc = (nb & ~7u) == 64 ? 0 : acc >> (nb & ~7u), nb &= 7)
    for (; i + 4 <= n; i += 4) {
        PUT(src[i]);
        PUT(src[i + 1]);
        PUT(src[i + 2]);
        PUT(src[i + 3]);
        FLUSH();
    }
    for (; i < n; i++) {
        PUT(src[i]);
        FLUSH();
    }
    if (nb) store64(p, acc), p++;
#undef PUT
#undef FLUSH
    return p;
}

size_t huf_encode(const uint8_t *src, size_t n, const uint32_t hist[256],
                  uint8_t *dst, size_t cap)
{
    struct huf_table t;
    if (n == 0 || build_table(hist, &t) < 0) return 0;
    if (t.maxlen == 0) {
        if (cap < 2) return 0;
        dst[0] = 0;
        dst[1] = src[0];
        return 2;
    }
    if (cap < coded_size(&t, hist, n) + 8) return 0;
    struct hdr h = header_of(&t, n);
    uint8_t *lens = write_header(&t, &h, dst);
    unsigned f = h.shrt ? h.field : 4;
    size_t q = (n + 3) / 4;
    uint8_t *p = dst + h.size;
    for (int k = 0; k < 4; k++) {
        size_t a = CK_MIN(n, k * q), b = CK_MIN(n, (k + 1) * q);
        uint8_t *e = encode_stream(&t, src + a, b - a, p);
        if (k < 3) put_field(lens + f * (unsigned)k, (uint64_t)(e - p), f);
        p = e;
    }
    return (size_t)(p - dst);
}

/* Fill the decode table from code lengths: entry = symbol | length << 8.
** -EIO unless the code is complete. */
static int read_table(const uint8_t len[256], int maxlen, uint16_t *tab)
{
    uint64_t kraft = 0;
    for (int s = 0; s < 256; s++) {
        if (len[s] > maxlen) return -EIO;
        if (len[s]) kraft += 1ull << (maxlen - len[s]);
    }
    if (kraft != 1ull << maxlen) return -EIO;
    struct huf_table t = {.maxlen = maxlen};
    memcpy(t.len, len, sizeof t.len);
    assign_codes(&t);
    for (int s = 0; s < 256; s++) {
        if (!len[s]) continue;
        for (unsigned j = t.code[s]; j < 1u << maxlen; j += 1u << len[s])
            tab[j] = (uint16_t)(s | len[s] << 8);
    }
    return 0;
}

/* Two-symbol table: for each maxlen-bit window, the first code and, when it
** fits in the window too, the second. Entry = sym0 | sym1 << 8 | count << 16 |
** bits << 24. */
static void pair_table(const uint16_t *tab, int maxlen, uint32_t *tab2)
{
    for (unsigned i = 0; i < 1u << maxlen; i++) {
        unsigned l1 = tab[i] >> 8, rest = i >> l1;
        uint16_t e2 = tab[rest];
        unsigned l2 = e2 >> 8;
        if (l1 + l2 <= (unsigned)maxlen)
            tab2[i] = (tab[i] & 0xffu) | (uint32_t)(e2 & 0xff) << 8 | 2u << 16 | (l1 + l2) << 24;
        else
            tab2[i] = (tab[i] & 0xffu) | 1u << 16 | l1 << 24;
    }
}

struct rd {
    const uint8_t *s;
    size_t len; /* bytes */
    uint64_t pos; /* bits */
};

/* Rounds of the fast loop every stream can take with no check: a round
** reads 8 bytes from each stream's byte position, consumes at most 4 codes
** (4 * maxlen bits) and writes at most 8 symbols, and 9 must stay left. */
static size_t rounds_left(const struct rd r[4], const size_t cnt[4], const size_t got[4],
                          int maxlen)
{
    size_t n = SIZE_MAX;
    for (int k = 0; k < 4; k++) {
        size_t at = (size_t)(r[k].pos >> 3);
        if (cnt[k] < got[k] + 9 || r[k].len < at + 8) return 0;
        size_t by_out = (cnt[k] - got[k] - 9) / 8 + 1;
        size_t by_in = (r[k].len - at - 8) * 8 / (4 * (size_t)maxlen) + 1;
        n = CK_MIN(n, CK_MIN(by_out, by_in));
    }
    return n;
}

/* One round of the fast loop: per 64-bit load, four lookups in the
** two-symbol table from each stream, the four streams interleaved so that
** their lookups overlap. rounds_left says how many need no check. */
static inline __attribute__((always_inline)) void
fast_round(struct rd r[4], uint8_t *const o[4], size_t got[4], const uint32_t *tab2,
           unsigned mask)
{
    uint64_t v0 = load64(r[0].s + (r[0].pos >> 3)) >> (r[0].pos & 7);
    uint64_t v1 = load64(r[1].s + (r[1].pos >> 3)) >> (r[1].pos & 7);
    uint64_t v2 = load64(r[2].s + (r[2].pos >> 3)) >> (r[2].pos & 7);
    uint64_t v3 = load64(r[3].s + (r[3].pos >> 3)) >> (r[3].pos & 7);
    uint8_t *p0 = o[0] + got[0], *p1 = o[1] + got[1], *p2 = o[2] + got[2],
            *p3 = o[3] + got[3];
    unsigned b0 = 0, b1 = 0, b2 = 0, b3 = 0;
#define STEP(k) do {                                \
        uint32_t e = tab2[(v##k >> b##k) & mask];   \
        p##k[0] = (uint8_t)e;                       \
        p##k[1] = (uint8_t)(e >> 8);                \
        p##k += (e >> 16) & 0xff;                   \
        b##k += e >> 24;                            \
    } while (0)
    for (int j = 0; j < 4; j++) {
        STEP(0);
        STEP(1);
        STEP(2);
        STEP(3);
    }
#undef STEP
    r[0].pos += b0, got[0] = (size_t)(p0 - o[0]);
    r[1].pos += b1, got[1] = (size_t)(p1 - o[1]);
    r[2].pos += b2, got[2] = (size_t)(p2 - o[2]);
    r[3].pos += b3, got[3] = (size_t)(p3 - o[3]);
}

/* Up to 64 bits at bit position pos, zero past the end. */
static inline uint64_t peek_safe(const struct rd *r)
{
    size_t b = (size_t)(r->pos >> 3);
    uint8_t tmp[8] = {0};
    if (b < r->len) memcpy(tmp, r->s + b, CK_MIN((size_t)8, r->len - b));
    return load64(tmp) >> (r->pos & 7);
}

static int decode_tail(struct rd *r, const uint16_t *tab, unsigned mask, uint8_t *o,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t e = tab[peek_safe(r) & mask];
        o[i] = (uint8_t)e;
        r->pos += e >> 8;
    }
    return (r->pos + 7) / 8 == r->len ? 0 : -EIO;
}

int huf_decode(const uint8_t *src, size_t len, uint8_t *dst, size_t n)
{
    if (n == 0) return len == 0 ? 0 : -EIO;
    if (len < 2) return -EIO;
    if (src[0] == 0) {
        if (len != 2) return -EIO;
        memset(dst, src[1], n);
        return 0;
    }
    int maxlen = src[0] & ~HUF_SHORT;
    if (maxlen < 1 || maxlen > HUF_MAX_BITS) return -EIO;
    uint8_t lens[256];
    const uint8_t *fields;
    size_t off;
    unsigned f = 4;
    if (src[0] & HUF_SHORT) {
        int lo = src[1], hi = len >= 3 ? src[2] : -1;
        f = field_bytes(n, maxlen);
        off = 3 + (size_t)(hi - lo + 2) / 2 + 3 * f;
        if (hi < lo || len < off) return -EIO;
        memset(lens, 0, sizeof lens);
        for (int s = lo; s <= hi; s++) lens[s] = (src[3 + (s - lo) / 2] >> ((s - lo) & 1 ? 4 : 0)) & 15;
        fields = src + off - 3 * f;
    } else {
        if (len < HUF_HEADER) return -EIO;
        for (int s = 0; s < 256; s++) lens[s] = (src[1 + s / 2] >> (s & 1 ? 4 : 0)) & 15;
        fields = src + 129;
        off = HUF_HEADER;
    }
    uint16_t tab[1 << HUF_MAX_BITS];
    CK_TRY(read_table(lens, maxlen, tab));
    unsigned mask = (1u << maxlen) - 1;
    struct rd r[4];
    size_t q = (n + 3) / 4;
    for (int k = 0; k < 4; k++) {
        uint64_t sl = k < 3 ? get_field(fields + f * (unsigned)k, f) : len - off;
        if (sl > len - off) return -EIO;
        r[k] = (struct rd){src + off, sl, 0};
        off += sl;
    }
    uint8_t *o[4];
    size_t cnt[4];
    for (int k = 0; k < 4; k++) {
        size_t a = CK_MIN(n, k * q), b = CK_MIN(n, (k + 1) * q);
        o[k] = dst + a;
        cnt[k] = b - a;
    }
    uint32_t tab2[1 << HUF_MAX_BITS];
    pair_table(tab, maxlen, tab2);
    size_t got[4] = {0, 0, 0, 0};
    size_t safe;
    while ((safe = rounds_left(r, cnt, got, maxlen)) > 0)
        while (safe--) fast_round(r, o, got, tab2, mask);
    for (int k = 0; k < 4; k++)
        CK_TRY(decode_tail(&r[k], tab, mask, o[k] + got[k], cnt[k] - got[k]));
    return 0;
}
