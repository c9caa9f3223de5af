/*
** unit_tcodec.c: tests of the Huffman and rANS coders (src/huf.h,
** src/rans.h) and of the tensor block codec (src/tcodec.h).
**
** huf: round trips of empty, one-symbol, two-symbol, uniform, very skewed
** (length-limited) and realistic exponent streams of many sizes; every
** encoding is also decoded by an independent bit-by-bit reference decoder
** written from the format in huf.h, so the layout (header nibbles, stream
** lengths, canonical order, LSB-first reversed codes) is checked, not just
** the round trip. huf_size bounds the real size from above by at most 3
** bytes; a too small cap gives 0 without writing past it; malformed inputs
** (truncated, extended, bad lengths, incomplete or oversubscribed codes,
** stream lengths past the end, flipped bytes) give -EIO or some output but
** never a read or write out of bounds (inputs are decoded from exact-size
** heap copies and outputs carry guard zones; run under valgrind to check
** reads).
**
** tcodec: round trips for widths 1, 2, 4, 8, float or not, without a base
** and with bases that are equal, slightly changed, sparsely changed or
** unrelated, under each delta option; block sizes 0, 1, odd, 4 KiB, 1 MiB;
** special float values (NaN payloads, infinities, signed zeros, denormals)
** in bf16, f16, f32 and f64 and deltas across signs; integer wraparound.
** Every stored block is also parsed by the test from the format in
** tcodec.h and each plane value compared with a reference transform
** (rotation, ordered-ulp zigzag delta, XOR, sparse mask). Also: the mode
** choice, a block never larger with a base than without, wrong or missing
** base, corrupted stored blocks, concurrent use from threads, and the
** compression ratios of realistic bf16 weights and of a fine-tuning-like
** delta.
**
** test_tc_never_larger_runs is the regression test of a bug it found: a
** delta compared only with the estimated standalone size on run-heavy data.
*/
#include "../src/bstream.h"
#include "../src/huf.h"
#include "../src/rans.h"
#include "../src/tcodec.h"
#include "unit_util.h"

#include <math.h>
#include <pthread.h>
#include <xxhash.h>
#include <zstd.h>

#define KiB 1024u
#define MiB (1u << 20)

/* ---- small helpers ---- */

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void shuffle(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = ut_seed(seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(ut_rand(&s) % i);
        uint8_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
}

/* ==================================================================== */
/* huf                                                                  */
/* ==================================================================== */

/* The header of a coded stream of n symbols (byte 0 not 0) as huf.h
** documents it, either form: the code lengths, the longest, the stream
** lengths and where the streams start. 0, or -1 if cut short. */
struct ref_hdr {
    uint8_t ln[256];
    unsigned L, field; /* field: bytes per stream length */
    size_t size, sl[3];
};

static int ref_header(const uint8_t *e, size_t len, size_t n, struct ref_hdr *h)
{
    memset(h, 0, sizeof *h);
    h->L = e[0] & 0x7F;
    if (!(e[0] & 0x80)) { /* full form */
        if (len < 141) return -1;
        for (int s = 0; s < 256; s++)
            h->ln[s] = (uint8_t)((s & 1) ? e[1 + s / 2] >> 4 : e[1 + s / 2] & 15);
        for (int k = 0; k < 3; k++) h->sl[k] = get32(e + 129 + 4 * k);
        h->field = 4;
        h->size = 141;
        return 0;
    }
    if (len < 3 || e[1] > e[2]) return -1;
    uint64_t most = ((uint64_t)(n + 3) / 4 * h->L + 7) / 8; /* longest stream */
    h->field = 1;
    while (h->field < 8 && most >> (8 * h->field)) h->field++;
    unsigned a = e[1], b = e[2], nib = (b - a + 2) / 2;
    h->size = 3 + nib + 3 * h->field;
    if (len < h->size) return -1;
    for (unsigned s = a; s <= b; s++)
        h->ln[s] = (uint8_t)(((s - a) & 1) ? e[3 + (s - a) / 2] >> 4 : e[3 + (s - a) / 2] & 15);
    for (int k = 0; k < 3; k++)
        for (unsigned i = 0; i < h->field; i++)
            h->sl[k] |= (size_t)e[3 + nib + h->field * (unsigned)k + i] << (8 * i);
    return 0;
}

/* Header bytes of an encoded stream of n symbols (byte 0 not 0). */
static size_t hdr_size(const uint8_t *e, size_t len, size_t n)
{
    struct ref_hdr h;
    ck_assert_int_eq(ref_header(e, len, n, &h), 0);
    return h.size;
}

/* The full form of a short-form encoding e[0..len) of n symbols into out
** (room for len + 141); returns its length. What stores written before the
** short form hold. */
static size_t to_full(const uint8_t *e, size_t len, size_t n, uint8_t *out)
{
    struct ref_hdr h;
    ck_assert_int_eq(ref_header(e, len, n, &h), 0);
    memset(out, 0, 141);
    out[0] = (uint8_t)h.L;
    for (int s = 0; s < 256; s++) out[1 + s / 2] |= (uint8_t)(h.ln[s] << ((s & 1) ? 4 : 0));
    for (int k = 0; k < 3; k++) put32(out + 129 + 4 * k, (uint32_t)h.sl[k]);
    memcpy(out + 141, e + h.size, len - h.size);
    return 141 + len - h.size;
}

/* Independent decoder written from the format in huf.h: code lengths from
** the header nibbles, canonical codes (shorter first, then by symbol),
** bits read LSB first with the first bit read being the code's MSB. Each
** stream must end in its last byte. 0, or -1 if the format is not met. */
static int ref_huf_decode(const uint8_t *e, size_t len, uint8_t *out, size_t n)
{
    if (n == 0) return len == 0 ? 0 : -1;
    if (len < 2) return -1;
    if (e[0] == 0) {
        if (len != 2) return -1;
        memset(out, e[1], n);
        return 0;
    }
    struct ref_hdr hd;
    if (ref_header(e, len, n, &hd) < 0) return -1;
    unsigned L = hd.L;
    if (L < 1 || L > HUF_MAX_BITS) return -1;
    uint8_t *ln = hd.ln;
    unsigned count[16] = {0}, first[16] = {0}, start[16] = {0};
    for (int s = 0; s < 256; s++) {
        if (ln[s] > L) return -1;
        count[ln[s]]++;
    }
    count[0] = 0;
    uint8_t sorted[256];
    unsigned ns = 0;
    for (unsigned l = 1; l <= L; l++) {
        start[l] = ns;
        for (int s = 0; s < 256; s++)
            if (ln[s] == l) sorted[ns++] = (uint8_t)s;
    }
    for (unsigned l = 2; l <= L; l++) first[l] = (first[l - 1] + count[l - 1]) << 1;
    size_t q = (n + 3) / 4, off = hd.size;
    for (size_t k = 0; k < 4; k++) {
        size_t sl = k < 3 ? hd.sl[k] : len - off;
        if (sl > len - off) return -1;
        size_t a = k * q < n ? k * q : n, b = (k + 1) * q < n ? (k + 1) * q : n;
        uint64_t pos = 0;
        for (size_t i = a; i < b; i++) {
            unsigned code = 0, l;
            for (l = 1; l <= L; l++) {
                if (pos >= 8 * (uint64_t)sl) return -1;
                code = code << 1 | ((e[off + pos / 8] >> (pos % 8)) & 1u);
                pos++;
                if (code >= first[l] && code - first[l] < count[l]) {
                    out[i] = sorted[start[l] + code - first[l]];
                    break;
                }
            }
            if (l > L) return -1;
        }
        if ((pos + 7) / 8 != sl) return -1;
        off += sl;
    }
    return 0;
}

/* Code length of each symbol from an encoded header (maxlen > 0). */
static void header_lengths(const uint8_t *e, size_t len, size_t n, uint8_t ln[256])
{
    struct ref_hdr h;
    ck_assert_int_eq(ref_header(e, len, n, &h), 0);
    memcpy(ln, h.ln, 256);
}

/* Encode with exactly the documented capacity, check the header against the
** histogram, the size against huf_size, decode with huf_decode (from an
** exact-size copy) and with the reference decoder. Returns the size. */
static size_t huf_rt(const uint8_t *src, size_t n)
{
    uint32_t hist[256];
    huf_hist(src, n, hist);
    uint64_t sum = 0;
    for (int s = 0; s < 256; s++) sum += hist[s];
    ck_assert_uint_eq(sum, n);
    size_t sz = huf_size(hist, n);
    if (n == 0) {
        uint8_t d[16];
        ck_assert_uint_eq(sz, 0);
        ck_assert_uint_eq(huf_encode(src, 0, hist, d, sizeof d), 0);
        return 0;
    }
    ck_assert_uint_ge(sz, 2);
    size_t cap = sz + 8; /* huf_encode needs 8 bytes of slack */
    uint8_t *enc = ut_xmalloc(cap + UT_GUARD);
    memset(enc, 0xA5, cap + UT_GUARD);
    size_t len = huf_encode(src, n, hist, enc, cap);
    ck_assert_msg(len > 0, "huf_encode n=%zu cap=%zu failed", n, cap);
    ut_check_guard(enc + cap, 0xA5, "huf_encode");
    ck_assert_msg(len <= sz && sz - len < 4, "n=%zu: huf_size %zu, real %zu", n, sz, len);

    int nsym = 0;
    for (int s = 0; s < 256; s++) nsym += hist[s] != 0;
    if (nsym == 1) {
        ck_assert_uint_eq(len, 2);
        ck_assert_uint_eq(enc[0], 0);
        ck_assert_uint_eq(enc[1], src[0]);
    } else {
        unsigned L = enc[0] & ~HUF_SHORT;
        ck_assert_uint_ge(L, 1);
        ck_assert_uint_le(L, HUF_MAX_BITS);
        uint8_t ln[256];
        header_lengths(enc, len, n, ln);
        uint64_t kraft = 0, bits = 0;
        unsigned maxl = 0;
        for (int s = 0; s < 256; s++) {
            ck_assert_msg((ln[s] != 0) == (hist[s] != 0), "symbol %d: length %u, count %u", s,
                          ln[s], hist[s]);
            if (ln[s]) kraft += 1ull << (HUF_MAX_BITS - ln[s]);
            bits += (uint64_t)hist[s] * ln[s];
            if (ln[s] > maxl) maxl = ln[s];
        }
        ck_assert_uint_eq(maxl, L);
        ck_assert_uint_eq(kraft, 1ull << HUF_MAX_BITS); /* a complete code */
        /* The smaller form: short unless its header would not be smaller. */
        int lo = 0, hi = 255;
        while (!ln[lo]) lo++;
        while (!ln[hi]) hi--;
        struct ref_hdr rh;
        ck_assert_int_eq(ref_header(enc, len, n, &rh), 0);
        size_t shrt = 3 + (size_t)(hi - lo + 2) / 2 + 3 * rh.field;
        ck_assert_uint_eq(rh.size, shrt < HUF_HEADER ? shrt : HUF_HEADER);
        ck_assert_uint_eq(sz, rh.size + (bits + 7) / 8 + 3);
        ck_assert_uint_ge(len, rh.size + (bits + 7) / 8);
        /* The full form of the same code decodes too (older stores). */
        if (enc[0] & HUF_SHORT) {
            uint8_t *full = ut_xmalloc(len + HUF_HEADER), *o2 = ut_xmalloc(n);
            size_t fl = to_full(enc, len, n, full);
            ck_assert_int_eq(huf_decode(full, fl, o2, n), 0);
            ck_assert_msg(memcmp(o2, src, n) == 0, "n=%zu: full form differs", n);
            free(full), free(o2);
        }
    }

    uint8_t *copy = ut_xmalloc(len);
    memcpy(copy, enc, len);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0x5A, n + UT_GUARD);
    ck_assert_int_eq(huf_decode(copy, len, out, n), 0);
    size_t d = ut_first_diff(out, src, n);
    ck_assert_msg(d == n, "huf n=%zu: first difference at %zu", n, d);
    ut_check_guard(out + n, 0x5A, "huf_decode");
    memset(out, 0x5A, n);
    ck_assert_msg(ref_huf_decode(copy, len, out, n) == 0, "n=%zu: format not as documented", n);
    ck_assert_msg(memcmp(out, src, n) == 0, "n=%zu: reference decoder disagrees", n);
    free(out);
    free(copy);
    free(enc);
    return len;
}

/* Data with the given counts per symbol, shuffled. Returns the length. */
static size_t from_counts(uint8_t *p, const uint32_t cnt[256], uint64_t seed)
{
    size_t n = 0;
    for (int s = 0; s < 256; s++)
        for (uint32_t i = 0; i < cnt[s]; i++) p[n++] = (uint8_t)s;
    shuffle(p, n, seed);
    return n;
}

/* Length of the longest code and total bits of an unlimited Huffman code
** (simple O(m^2) merging; the test's own premise check). */
static unsigned huffman_height(const uint32_t cnt[256], uint64_t *bits)
{
    uint64_t w[256];
    unsigned h[256];
    int m = 0;
    for (int s = 0; s < 256; s++)
        if (cnt[s]) w[m] = cnt[s], h[m++] = 0;
    *bits = 0;
    while (m > 1) {
        int a = 0, b = 1;
        if (w[b] < w[a]) a = 1, b = 0;
        for (int i = 2; i < m; i++) {
            if (w[i] < w[a]) b = a, a = i;
            else if (w[i] < w[b]) b = i;
        }
        uint64_t nw = w[a] + w[b];
        unsigned nh = (h[a] > h[b] ? h[a] : h[b]) + 1;
        *bits += nw;
        int lo = a < b ? a : b, hi = a < b ? b : a;
        w[lo] = nw, h[lo] = nh;
        w[hi] = w[m - 1], h[hi] = h[m - 1];
        m--;
    }
    return h[0];
}

START_TEST(test_huf_empty)
{
    uint32_t hist[256];
    uint8_t src[1] = {0}, dst[32], out[4] = {7, 7, 7, 7};
    huf_hist(src, 0, hist);
    for (int s = 0; s < 256; s++) ck_assert_uint_eq(hist[s], 0);
    ck_assert_uint_eq(huf_size(hist, 0), 0);
    ck_assert_uint_eq(huf_encode(src, 0, hist, dst, sizeof dst), 0);
    ck_assert_int_eq(huf_decode(dst, 0, out, 0), 0);
    ck_assert_int_eq(huf_decode(dst, 1, out, 0), -EIO);
    ck_assert_int_eq(huf_decode(dst, 2, out, 0), -EIO);
    ck_assert_uint_eq(out[0], 7);
    /* n > 0 but nothing stored. */
    ck_assert_int_eq(huf_decode(dst, 0, out, 1), -EIO);
    ck_assert_int_eq(huf_decode(dst, 1, out, 1), -EIO);
    huf_rt(src, 0);
}
END_TEST

START_TEST(test_huf_one_symbol)
{
    static const size_t ns[] = {1, 2, 3, 4, 5, 17, 1000, 65536, 1000003};
    static const uint8_t syms[] = {0, 1, 0x37, 0x80, 0xFF};
    uint8_t *p = ut_xmalloc(1000003);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof syms / sizeof syms[0]; j++) {
            memset(p, syms[j], ns[i]);
            ck_assert_uint_eq(huf_rt(p, ns[i]), 2);
        }
    /* The 2-byte form: other lengths are malformed; cap 1 is too small. */
    uint8_t two[3] = {0, 0x42, 0}, out[8];
    ck_assert_int_eq(huf_decode(two, 2, out, 8), 0);
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(out[i], 0x42);
    ck_assert_int_eq(huf_decode(two, 3, out, 8), -EIO);
    ck_assert_int_eq(huf_decode(two, 1, out, 8), -EIO);
    uint32_t hist[256];
    memset(p, 9, 100);
    huf_hist(p, 100, hist);
    ck_assert_uint_eq(hist[9], 100);
    uint8_t d[4] = {0xEE, 0xEE, 0xEE, 0xEE};
    ck_assert_uint_eq(huf_encode(p, 100, hist, d, 1), 0);
    ck_assert_uint_eq(d[1], 0xEE);
    ck_assert_uint_eq(huf_encode(p, 100, hist, d, 2), 2);
    free(p);
}
END_TEST

START_TEST(test_huf_two_symbols)
{
    static const size_t ns[] = {2, 3, 4, 5, 8, 9, 100, 4096, 100001};
    uint8_t *p = ut_xmalloc(100001);
    uint64_t s = ut_seed(5);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        size_t n = ns[i];
        for (int skew = 0; skew < 3; skew++) {
            /* skew 0: even mix; 1: 1 in 16 is the other; 2: just one other */
            for (size_t j = 0; j < n; j++)
                p[j] = skew == 0 ? (ut_rand(&s) & 1 ? 0x10 : 0xF3)
                                 : skew == 1 ? (ut_rand(&s) % 16 ? 0x10 : 0xF3) : 0x10;
            if (skew == 2 || memchr(p, 0xF3, n) == NULL) p[n / 2] = 0xF3;
            if (memchr(p, 0x10, n) == NULL) p[0] = 0x10;
            size_t len = huf_rt(p, n);
            /* One bit per symbol: at most one byte of rounding per stream,
            ** and a short header: 0x10 to 0xF3 is 227 nibbles. */
            size_t hs = 3 + 114 + 3 * (n > 4 * 2040 ? 2 : 1);
            ck_assert_uint_le(len, hs + (n + 7) / 8 + 3);
            ck_assert_uint_ge(len, hs + (n + 7) / 8);
        }
    }
    free(p);
}
END_TEST

START_TEST(test_huf_uniform)
{
    /* Each of 256 symbols exactly once, and a lot of uniform random bytes:
    ** all codes are 8 bits, and the data grows by at most the header, n/64
    ** and the rounding of the streams. */
    uint8_t *p = ut_xmalloc(MiB);
    for (int i = 0; i < 256; i++) p[i] = (uint8_t)i;
    shuffle(p, 256, 1);
    size_t len = huf_rt(p, 256);
    ck_assert_uint_eq(len, 3 + 128 + 3 + 256); /* short form, 1-byte fields */
    for (size_t n = 256; n <= MiB; n *= 16) {
        uint32_t hist[256];
        ut_fill_random(p, n, n);
        huf_hist(p, n, hist);
        int all = 1;
        for (int s = 0; s < 256; s++) all &= hist[s] != 0;
        ck_assert(all || n == 256);
        if (!all) continue;
        len = huf_rt(p, n);
        uint8_t d[HUF_HEADER];
        ck_assert_uint_eq(huf_encode(p, n, hist, d, 0), 0);
        ck_assert_uint_le(len, HUF_HEADER + n + n / 64 + 3); /* either form */
    }
    /* Exactly equal counts: every length must be 8. */
    memset(p, 0, 256 * 40);
    for (size_t i = 0; i < 256 * 40; i++) p[i] = (uint8_t)(i % 256);
    shuffle(p, 256 * 40, 3);
    uint32_t hist[256];
    huf_hist(p, 256 * 40, hist);
    size_t cap = huf_size(hist, 256 * 40) + 8;
    uint8_t *e = ut_xmalloc(cap);
    len = huf_encode(p, 256 * 40, hist, e, cap);
    /* Short form: symbols 0..255, then 2-byte fields (2560 bytes a stream). */
    ck_assert_uint_eq(len, 3 + 128 + 6 + 256 * 40);
    ck_assert_uint_eq(e[0], HUF_SHORT | 8);
    ck_assert_uint_eq(e[1], 0);
    ck_assert_uint_eq(e[2], 255);
    for (int i = 3; i < 3 + 128; i++) ck_assert_uint_eq(e[i], 0x88);
    huf_rt(p, 256 * 40);
    free(e);
    free(p);
}
END_TEST

/* Distributions whose unlimited Huffman code is longer than HUF_MAX_BITS. */
START_TEST(test_huf_length_limit)
{
    uint32_t cnt[256];
    uint8_t *p = ut_xmalloc(2 * MiB);
    for (int kind = 0; kind < 5; kind++) {
        memset(cnt, 0, sizeof cnt);
        switch (kind) {
        case 0: /* Fibonacci counts on 25 consecutive symbols */
        case 1: /* ... on 25 scattered symbols, largest count on symbol 0 */
            for (int i = 0, a = 1, b = 1; i < 25; i++) {
                cnt[kind == 0 ? 100 + i : (255 - 10 * i) & 255] = (uint32_t)a;
                int t = a + b;
                a = b;
                b = t;
            }
            break;
        case 2: /* powers of two: 1, 1, 2, 4, ..., 2^18 */
            cnt[0] = 1;
            for (int i = 0; i < 19; i++) cnt[1 + 13 * i] = 1u << i;
            break;
        case 3: /* Fibonacci chain plus every other symbol once: all 256 used */
            for (int s = 0; s < 256; s++) cnt[s] = 1;
            for (int i = 0, a = 1, b = 2; i < 22; i++) {
                cnt[200 + i] = (uint32_t)a;
                int t = a + b;
                a = b;
                b = t;
            }
            break;
        case 4: /* one symbol dominates a geometric tail */
            for (int i = 0; i < 30; i++) cnt[i] = (1u << 19) >> i ? (1u << 19) >> i : 1;
            cnt[30] = 1;
            break;
        }
        uint64_t opt_bits, tot = 0;
        for (int s = 0; s < 256; s++) tot += cnt[s];
        ck_assert_uint_le(tot, 2 * MiB);
        unsigned h = huffman_height(cnt, &opt_bits);
        ck_assert_msg(h > HUF_MAX_BITS, "kind %d: premise: unlimited height %u", kind, h);
        size_t n = from_counts(p, cnt, (uint64_t)kind + 1);
        size_t len = huf_rt(p, n); /* checks lengths <= maxlen <= 11 */
        uint32_t hist[256];
        huf_hist(p, n, hist);
        size_t cap = huf_size(hist, n) + 8;
        uint8_t *e = ut_xmalloc(cap);
        ck_assert_uint_eq(huf_encode(p, n, hist, e, cap), len);
        ck_assert_uint_le(e[0] & ~HUF_SHORT, HUF_MAX_BITS);
        ck_assert_uint_ge(e[0] & ~HUF_SHORT, 2);
        /* The limited code costs little over the optimal unlimited one. */
        uint8_t ln[256];
        header_lengths(e, len, n, ln);
        uint64_t bits = 0;
        for (int s = 0; s < 256; s++) bits += (uint64_t)hist[s] * ln[s];
        ck_assert_msg((double)bits <= 1.10 * (double)opt_bits + 64,
                      "kind %d: %llu bits vs optimal %llu", kind, (unsigned long long)bits,
                      (unsigned long long)opt_bits);
        free(e);
    }
    free(p);
}
END_TEST

/* n = 1..40 (tails, n % 4 != 0, empty and uneven streams) for several kinds. */
START_TEST(test_huf_small_sizes)
{
    uint8_t p[64];
    uint64_t s = ut_seed(77);
    for (size_t n = 1; n <= 40; n++)
        for (int kind = 0; kind < 5; kind++) {
            for (size_t i = 0; i < n; i++) {
                uint64_t r = ut_rand(&s);
                switch (kind) {
                case 0: p[i] = (uint8_t)r; break;
                case 1: p[i] = (uint8_t)(r % 3); break;
                case 2: p[i] = r % 8 ? 0x7F : (uint8_t)(r >> 8); break;
                case 3: p[i] = (uint8_t)(i % 2 ? 200 : 201); break;
                default: p[i] = (uint8_t)(i == n - 1 ? 1 : 0); break; /* odd one last */
                }
            }
            huf_rt(p, n);
        }
}
END_TEST

/* Exponent bytes of N(0, 0.02) weights in f32: a skewed, 10-odd symbol set. */
static void gen_exponents(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = ut_seed(seed);
    for (size_t i = 0; i < n; i++) {
        float f = (float)(0.02 * ut_gauss(&s));
        uint32_t u;
        memcpy(&u, &f, 4);
        p[i] = (uint8_t)(u >> 23);
    }
}

START_TEST(test_huf_exponents_1mib)
{
    uint8_t *p = ut_xmalloc(MiB);
    gen_exponents(p, MiB, 11);
    size_t len = huf_rt(p, MiB);
    /* The order-0 entropy is about 2.6 bits: expect well under 40%. */
    ck_assert_msg(len < MiB * 4 / 10, "exponents: %zu of %u", len, MiB);
    ck_assert_uint_gt(len, MiB / 5);
    /* Uneven lengths around 1 MiB. */
    for (size_t n = MiB - 7; n < MiB; n += 2) huf_rt(p, n);
    free(p);
}
END_TEST

/* huf_size >= real size >= huf_size - 3 on many random distributions. */
START_TEST(test_huf_size_bound)
{
    uint8_t *p = ut_xmalloc(200000);
    uint64_t s = ut_seed(99);
    for (int t = 0; t < 300; t++) {
        size_t n = 1 + (size_t)(ut_rand(&s) % (t < 200 ? 3000 : 200000));
        unsigned alpha = 1 + (unsigned)(ut_rand(&s) % 256);
        double skew = ut_unif(&s) * 4;
        for (size_t i = 0; i < n; i++) {
            /* symbol ~ alpha * u^(1+skew): heavier on small symbols */
            double u = pow(ut_unif(&s), 1 + skew);
            unsigned v = (unsigned)(u * alpha);
            p[i] = (uint8_t)(v >= alpha ? alpha - 1 : v);
        }
        huf_rt(p, n);
    }
    free(p);
}
END_TEST

START_TEST(test_huf_small_cap)
{
    size_t n = 5000;
    uint8_t *p = ut_xmalloc(n);
    gen_exponents(p, n, 3);
    uint32_t hist[256];
    huf_hist(p, n, hist);
    size_t sz = huf_size(hist, n);
    uint8_t *e = ut_xmalloc(sz + 8 + UT_GUARD);
    size_t len = huf_encode(p, n, hist, e, sz + 8);
    ck_assert_uint_gt(len, 0);
    size_t caps[] = {0, 1, 2, HUF_HEADER, len / 2, len - 1, len};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        if (caps[i] >= len + 8) continue;
        memset(e, 0xA5, sz + 8 + UT_GUARD);
        size_t r = huf_encode(p, n, hist, e, caps[i]);
        if (caps[i] < len) ck_assert_uint_eq(r, 0);
        ck_assert_msg(r == 0 || r == len, "cap %zu: %zu", caps[i], r);
        /* Nothing written past cap. */
        for (size_t j = caps[i]; j < sz + 8 + UT_GUARD; j++)
            ck_assert_msg(e[j] == 0xA5, "cap %zu: byte %zu written", caps[i], j);
    }
    free(e);
    free(p);
}
END_TEST

/* A well-formed encoding of skewed data, n symbols (all streams non-empty). */
static uint8_t *huf_sample(size_t n, uint64_t seed, uint8_t **src_out, size_t *len)
{
    uint8_t *p = ut_xmalloc(n);
    gen_exponents(p, n, seed);
    uint32_t hist[256];
    huf_hist(p, n, hist);
    size_t cap = huf_size(hist, n) + 8;
    uint8_t *e = ut_xmalloc(cap);
    *len = huf_encode(p, n, hist, e, cap);
    ck_assert_uint_gt(*len, HUF_HEADER);
    *src_out = p;
    return e;
}

/* Decode an exact-size copy of src[0..len) into a guarded n-byte buffer;
** returns the result, which must be 0 or -EIO. */
static int huf_try(const uint8_t *src, size_t len, size_t n)
{
    uint8_t *c = ut_xmalloc(len);
    if (len) memcpy(c, src, len);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0x5A, n + UT_GUARD);
    int rc = huf_decode(c, len, out, n);
    ck_assert_msg(rc == 0 || rc == -EIO, "huf_decode: rc %d", rc);
    ut_check_guard(out + n, 0x5A, "huf_decode (corrupt)");
    free(out);
    free(c);
    return rc;
}

START_TEST(test_huf_corrupt_truncate)
{
    size_t len, n = 10007;
    uint8_t *src;
    uint8_t *e = huf_sample(n, 21, &src, &len);
    ck_assert_int_eq(huf_try(e, len, n), 0);
    /* Every truncation is -EIO: the last stream loses bits it needs, or a
    ** stated stream length passes the end, or the header is cut. */
    for (size_t l = 0; l < len; l++)
        ck_assert_msg(huf_try(e, l, n) == -EIO, "truncated to %zu of %zu decoded", l, len);
    /* A trailing extra byte makes stream 3 end early: -EIO. */
    uint8_t *x = ut_xmalloc(len + 1);
    memcpy(x, e, len);
    x[len] = 0;
    ck_assert_int_eq(huf_try(x, len + 1, n), -EIO);
    /* The wrong symbol count: 0 or -EIO, never an overrun. */
    ck_assert_int_eq(huf_try(e, len, 0), -EIO);
    for (size_t m = 1; m < 40; m++) huf_try(e, len, m);
    huf_try(e, len, n - 1);
    huf_try(e, len, n + 1);
    huf_try(e, len, n + 4);
    huf_try(e, len, 2 * n);
    free(x);
    free(e);
    free(src);
}
END_TEST

/* The short form's header: flags, symbol range, nibbles, stream lengths. */
static void corrupt_short_header(const uint8_t *e, size_t len, size_t n)
{
    struct ref_hdr h;
    ck_assert_uint_eq(e[0] & HUF_SHORT, HUF_SHORT);
    ck_assert_int_eq(ref_header(e, len, n, &h), 0);
    uint8_t *b = ut_xmalloc(len);
    for (int v = 0; v < 256; v++) {
        memcpy(b, e, len);
        b[0] = (uint8_t)v;
        int rc = huf_try(b, len, n);
        if ((v & 0x7F) > HUF_MAX_BITS || (v & 0x7F) == 0) ck_assert_int_eq(rc, -EIO);
    }
    /* Every bit of every nibble in use; the padding nibble is ignored. */
    unsigned a = e[1], z = e[2], nib = (z - a + 2) / 2;
    for (unsigned i = 0; i < nib; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, e, len);
            b[3 + i] ^= (uint8_t)(1u << bit);
            int pad = bit >= 4 && a + 2 * i + 1 > z;
            ck_assert_int_eq(huf_try(b, len, n), pad ? 0 : -EIO);
        }
    /* The symbol range, and stream lengths past the end. */
    for (int k = 1; k <= 2; k++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, e, len);
            b[k] ^= (uint8_t)(1u << bit);
            huf_try(b, len, n);
        }
    for (int k = 0; k < 3; k++) {
        memcpy(b, e, len);
        memset(b + h.size - 3 * h.field + h.field * (unsigned)k, 0xFF, h.field);
        ck_assert_int_eq(huf_try(b, len, n), -EIO);
    }
    free(b);
}

START_TEST(test_huf_corrupt_header)
{
    size_t slen, n = 10007;
    uint8_t *src;
    uint8_t *se = huf_sample(n, 22, &src, &slen);
    corrupt_short_header(se, slen, n);
    /* The rest on the full form, which stores made before the short form
    ** hold. */
    uint8_t *e = ut_xmalloc(slen + HUF_HEADER);
    size_t len = to_full(se, slen, n, e);
    free(se);
    uint8_t *b = ut_xmalloc(len);
    /* maxlen byte: 12..255 is -EIO; other values 0 or -EIO. */
    for (int v = 0; v < 256; v++) {
        memcpy(b, e, len);
        b[0] = (uint8_t)v;
        int rc = huf_try(b, len, n);
        if (v > HUF_MAX_BITS || v == 0) ck_assert_int_eq(rc, -EIO); /* v 0: len != 2 */
    }
    /* Every bit of every length nibble. */
    int eio = 0, tries = 0;
    for (size_t i = 1; i <= 128; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, e, len);
            b[i] ^= (uint8_t)(1u << bit);
            eio += huf_try(b, len, n) == -EIO;
            tries++;
        }
    /* A changed length breaks Kraft equality or the stream ends. */
    ck_assert_int_eq(eio, tries);
    /* Stream lengths: past the end, overflowing sums, shifted by one. */
    uint32_t bad[] = {0xFFFFFFFFu, 0x80000000u, (uint32_t)len, (uint32_t)len - HUF_HEADER + 1};
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            memcpy(b, e, len);
            put32(b + 129 + 4 * k, bad[j]);
            ck_assert_int_eq(huf_try(b, len, n), -EIO);
        }
    for (int k = 0; k < 3; k++)
        for (int d = -2; d <= 2; d++) {
            if (!d) continue;
            memcpy(b, e, len);
            put32(b + 129 + 4 * k, get32(e + 129 + 4 * k) + (uint32_t)d);
            huf_try(b, len, n);
        }
    /* Every byte flipped in turn, several patterns: never a crash. */
    for (size_t i = 0; i < len; i += (i < HUF_HEADER + 64 ? 1 : 37))
        for (int pat = 0; pat < 3; pat++) {
            static const uint8_t xr[] = {0x01, 0x80, 0xFF};
            memcpy(b, e, len);
            b[i] ^= xr[pat];
            huf_try(b, len, n);
        }
    free(b);
    free(e);
    free(src);
}
END_TEST

/* Hand-made headers: incomplete and oversubscribed codes, lengths > maxlen. */
START_TEST(test_huf_crafted)
{
    size_t n = 64;
    uint8_t h[HUF_HEADER + 32];
    memset(h, 0, sizeof h);
    /* Streams: 16 symbols each; give each stream 8 bytes of zero bits. */
    for (int k = 0; k < 3; k++) put32(h + 129 + 4 * k, 8);
    size_t len = HUF_HEADER + 32;

    /* A complete code: 'a' (len 1), 'b' 'c' (len 2), maxlen 2. All zero
    ** bits decode to 'a', one bit per symbol: 16 bits per stream, so a
    ** stream of 8 bytes is too long: -EIO; of 2 bytes, exact. */
    h[0] = 2;
    h[1 + 'a' / 2] |= (uint8_t)(1 << ('a' & 1 ? 4 : 0));
    h[1 + 'b' / 2] |= (uint8_t)(2 << ('b' & 1 ? 4 : 0));
    h[1 + 'c' / 2] |= (uint8_t)(2 << ('c' & 1 ? 4 : 0));
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    for (int k = 0; k < 3; k++) put32(h + 129 + 4 * k, 2);
    len = HUF_HEADER + 8;
    uint8_t out[64 + UT_GUARD];
    {
        uint8_t *c = ut_xmalloc(len);
        memcpy(c, h, len);
        ck_assert_int_eq(huf_decode(c, len, out, n), 0);
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(out[i], 'a');
        uint8_t ref[64];
        ck_assert_int_eq(ref_huf_decode(c, len, ref, n), 0);
        ck_assert(memcmp(ref, out, n) == 0);
        /* 0xFF bytes: '1' then '1' -> code 11 = 'c' (canonical: a=0, b=10, c=11). */
        memset(c + HUF_HEADER, 0xFF, 8);
        ck_assert_int_eq(huf_decode(c, len, out, n), -EIO); /* 16 symbols need 32 bits */
        free(c);
        uint8_t c2[HUF_HEADER + 16];
        memcpy(c2, h, HUF_HEADER);
        for (int k = 0; k < 3; k++) put32(c2 + 129 + 4 * k, 4);
        memset(c2 + HUF_HEADER, 0xFF, 16);
        uint8_t *c3 = ut_xmalloc(sizeof c2);
        memcpy(c3, c2, sizeof c2);
        ck_assert_int_eq(huf_decode(c3, sizeof c2, out, n), 0);
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(out[i], 'c');
        /* 0x55 = bits 1,0,1,0... LSB first: "10" = b each time. */
        memset(c3 + HUF_HEADER, 0x55, 16);
        ck_assert_int_eq(huf_decode(c3, sizeof c2, out, n), 0);
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(out[i], 'b');
        free(c3);
    }

    /* Incomplete: drop 'c' (Kraft 3/4). */
    h[1 + 'c' / 2] &= (uint8_t)('c' & 1 ? 0x0F : 0xF0);
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    /* Oversubscribed: 'c' back with length 1 (Kraft 5/4). */
    h[1 + 'c' / 2] |= (uint8_t)(1 << ('c' & 1 ? 4 : 0));
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    /* A single symbol of length 1 under maxlen 1 (Kraft 1/2). */
    memset(h + 1, 0, 128);
    h[0] = 1;
    h[1] = 1;
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    /* Lengths above maxlen. */
    memset(h + 1, 0, 128);
    h[0] = 1;
    h[1] = 0x21; /* symbol 0 length 1, symbol 1 length 2 */
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    /* Nibble 15 everywhere with maxlen 11 (way oversubscribed), and all zero. */
    memset(h + 1, 0xFF, 128);
    h[0] = 11;
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    memset(h + 1, 0x00, 128);
    ck_assert_int_eq(huf_try(h, len, n), -EIO);
    /* All 256 symbols at length 8 under maxlen 11: complete, so any stream
    ** bits decode; random streams give 0 or -EIO. */
    memset(h + 1, 0x88, 128);
    uint8_t *g = ut_xmalloc(HUF_HEADER + 4096);
    uint64_t s = ut_seed(8);
    for (int t = 0; t < 200; t++) {
        size_t m = 1 + (size_t)(ut_rand(&s) % 4000);
        size_t gl = HUF_HEADER + (size_t)(ut_rand(&s) % 4096);
        memcpy(g, h, HUF_HEADER);
        g[0] = (uint8_t)(8 + t % 4);
        ut_fill_random(g + HUF_HEADER, gl - HUF_HEADER, (uint64_t)t);
        size_t room = gl - HUF_HEADER;
        for (int k = 0; k < 3; k++)
            put32(g + 129 + 4 * k, (uint32_t)(room ? ut_rand(&s) % (room / 3 + 1) : 0));
        huf_try(g, gl, m);
    }
    /* Fully random headers. */
    for (int t = 0; t < 200; t++) {
        size_t gl = HUF_HEADER + (size_t)(ut_rand(&s) % 256);
        ut_fill_random(g, gl, 1000 + (uint64_t)t);
        g[0] = (uint8_t)(1 + t % HUF_MAX_BITS);
        huf_try(g, gl, 1 + (size_t)(ut_rand(&s) % 1000));
    }
    free(g);
}
END_TEST

/* Valid streams that decode but with swapped stream contents / random bits
** under a real (complete) header exercise the fast path on garbage. */
START_TEST(test_huf_corrupt_streams)
{
    size_t len, n = 50000;
    uint8_t *src;
    uint8_t *e = huf_sample(n, 23, &src, &len);
    uint8_t *b = ut_xmalloc(len);
    uint64_t s = ut_seed(4);
    int eio = 0;
    size_t hs = hdr_size(e, len, n);
    for (int t = 0; t < 100; t++) {
        memcpy(b, e, len);
        ut_fill_random(b + hs, len - hs, (uint64_t)t);
        eio += huf_try(b, len, n) == -EIO;
        memcpy(b, e, len);
        for (int j = 0; j < 5; j++) b[hs + ut_rand(&s) % (len - hs)] ^= 0xFF;
        huf_try(b, len, n);
    }
    ck_assert_int_gt(eio, 0);
    free(b);
    free(e);
    free(src);
}
END_TEST

/* ==================================================================== */
/* rans                                                                 */
/* ==================================================================== */

/* Normalise, check the table (sum, every present symbol >= 1, absent 0),
** encode into a buffer of exactly the returned size (a second encode
** must fit it: the size is exact), decode an exact-size copy into a guarded
** buffer, compare. Returns the encoded size. */
static size_t rans_rt(const uint8_t *src, size_t n)
{
    uint32_t hist[256];
    uint16_t freq[256];
    huf_hist(src, n, hist);
    ck_assert_int_eq(rans_norm(hist, n, freq), 0);
    uint32_t sum = 0;
    for (int k = 0; k < 256; k++) {
        ck_assert_msg((freq[k] != 0) == (hist[k] != 0), "symbol %d: freq %u count %u", k,
                      freq[k], hist[k]);
        sum += freq[k];
    }
    ck_assert_uint_eq(sum, RANS_M);
    size_t cap = 64 + 600 + n + n / 2;
    uint8_t *e = ut_xmalloc(cap + UT_GUARD);
    memset(e, 0xA5, cap + UT_GUARD);
    size_t len = rans_encode(src, n, freq, e, cap);
    ck_assert_msg(len > 0, "rans_encode n=%zu failed", n);
    ut_check_guard(e + cap, 0xA5, "rans_encode");
    double est = rans_cost(hist, n, n, freq);
    ck_assert_msg(fabs(est - (double)len) <= 8 + (double)len / 1000,
                  "n=%zu: rans_cost %.1f, real %zu", n, est, len);
    uint8_t *e2 = ut_xmalloc(len);
    ck_assert_uint_eq(rans_encode(src, n, freq, e2, len), len);
    ck_assert(memcmp(e, e2, len) == 0);
    ck_assert_uint_eq(rans_encode(src, n, freq, e, len - 1), 0); /* e: scratch now */
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0x5A, n + UT_GUARD);
    ck_assert_int_eq(rans_decode(e2, len, out, n), 0);
    size_t d = ut_first_diff(out, src, n);
    ck_assert_msg(d == n, "rans n=%zu: first difference at %zu", n, d);
    ut_check_guard(out + n, 0x5A, "rans_decode");
    free(out), free(e2), free(e);
    return len;
}

/* Every frequency 1..RANS_M-1 of a two-symbol alphabet, so every divisor
** the encoder's reciprocals stand for is checked by a round trip. */
START_TEST(test_rans_every_frequency)
{
    uint8_t p[600];
    uint64_t s = ut_seed(31);
    for (uint32_t f = 1; f < RANS_M; f++) {
        size_t n = 64 + (size_t)(ut_rand(&s) % 500);
        size_t k = (size_t)((uint64_t)n * f / RANS_M);
        k = k ? k : 1;
        k = k < n ? k : n - 1;
        for (size_t i = 0; i < n; i++) p[i] = i < k ? 7 : 200;
        shuffle(p, n, f);
        rans_rt(p, n);
    }
}
END_TEST

/* Sizes 1..40 and odd ones (coders left with nothing to do), one symbol,
** extreme skew, uniform bytes, exponents: near the entropy. */
START_TEST(test_rans_shapes)
{
    uint8_t *p = ut_xmalloc(MiB);
    uint64_t s = ut_seed(32);
    for (size_t n = 1; n <= 40; n++) {
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(ut_rand(&s) % 3);
        rans_rt(p, n);
    }
    memset(p, 9, 1000);
    size_t len = rans_rt(p, 1000);
    ck_assert_uint_le(len, 2 + 2 + 4); /* a single symbol: no bits at all */
    /* 1 in 1000 changed: 0.0114 bits a symbol of information. */
    memset(p, 0, MiB);
    for (size_t i = 0; i < MiB; i += 1000) p[i + ut_rand(&s) % 1000 % (MiB - i)] = 1;
    len = rans_rt(p, MiB);
    ck_assert_msg(len < MiB / 64, "skewed: %zu bytes (Huffman needs %zu)", len, (size_t)MiB / 8);
    ut_fill_random(p, MiB, 33);
    len = rans_rt(p, MiB);
    ck_assert_uint_le(len, MiB + MiB / 200);
    gen_exponents(p, MiB, 34);
    uint32_t hist[256];
    huf_hist(p, MiB, hist);
    double h = 0;
    for (int k = 0; k < 256; k++)
        if (hist[k]) h -= hist[k] * log2((double)hist[k] / MiB);
    len = rans_rt(p, MiB);
    ck_assert_msg((double)len <= h / 8 * 1.005 + 64, "exponents: %zu bytes, entropy %.0f", len,
                  h / 8);
    for (size_t n = 1001; n < 1100; n += 7) rans_rt(p, n);
    free(p);
}
END_TEST

/* Every truncation and trailing byte is -EIO (the coders must end at
** RANS_L with every byte used); flipped bytes give 0 or -EIO, never an
** access outside the buffers (guards; ASan in the fuzzer). */
START_TEST(test_rans_corrupt)
{
    size_t n = 20011;
    uint8_t *p = ut_xmalloc(n);
    gen_exponents(p, n, 35);
    uint32_t hist[256];
    uint16_t freq[256];
    huf_hist(p, n, hist);
    ck_assert_int_eq(rans_norm(hist, n, freq), 0);
    size_t cap = 2 * n + 600;
    uint8_t *e = ut_xmalloc(cap);
    size_t len = rans_encode(p, n, freq, e, cap);
    ck_assert_uint_gt(len, 0);
    uint8_t *b = ut_xmalloc(len + 1), *out = ut_xmalloc(n + UT_GUARD);
    ck_assert_int_eq(rans_decode(e, len, out, n), 0);
    ck_assert(memcmp(out, p, n) == 0);
    for (size_t l = 0; l < len; l++) {
        memcpy(b, e, l);
        uint8_t *c = ut_xmalloc(l ? l : 1);
        memcpy(c, b, l);
        ck_assert_msg(rans_decode(c, l, out, n) == -EIO, "truncated to %zu decoded", l);
        free(c);
    }
    memcpy(b, e, len);
    b[len] = 0;
    ck_assert_int_eq(rans_decode(b, len + 1, out, n), -EIO);
    ck_assert_int_eq(rans_decode(e, len, out, 0), -EIO);
    ck_assert_int_eq(rans_decode(e, len, out, n - 1), -EIO);
    int eio = 0, tries = 0;
    for (size_t i = 0; i < len; i += (i < 64 ? 1 : 13))
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(b, e, len);
            b[i] ^= (uint8_t)(1u << bit);
            memset(out, 0x5A, n + UT_GUARD);
            int rc = rans_decode(b, len, out, n);
            ck_assert(rc == 0 || rc == -EIO);
            ut_check_guard(out + n, 0x5A, "rans_decode (corrupt)");
            eio += rc == -EIO;
            tries++;
        }
    ck_assert_int_gt(eio, tries / 2);
    /* Crafted tables: sum off by one, a range ending on an absent symbol. */
    /* (n = 1: one coder, one state.) */
    uint8_t h[2 + 4 + 4] = {5, 6, 0x80, 0x20, 0};
    put32(h + 5, RANS_L);
    ck_assert_int_eq(rans_decode(h, 9, out, 1), -EIO); /* 4096 + 0: ends absent */
    h[3] = 0x10, h[4] = 0xFF, h[5] = 0x0F; /* 2048 + 2047 */
    put32(h + 6, RANS_L);
    ck_assert_int_eq(rans_decode(h, sizeof h, out, 1), -EIO);
    h[4] = 0x80, h[5] = 0x10; /* 2048 + 2048: valid; RANS_L decodes as symbol 5 */
    ck_assert_int_eq(rans_decode(h, sizeof h, out, 1), -EIO); /* the coder ends off RANS_L */
    put32(h + 6, RANS_L << 1); /* from 2 RANS_L: symbol 5 back to RANS_L, no bytes */
    ck_assert_int_eq(rans_decode(h, sizeof h, out, 1), 0);
    ck_assert_uint_eq(out[0], 5);
    free(b), free(out), free(e), free(p);
}
END_TEST

/* bstream_put under pref, then bstream_get and bstream_view: returns the
** codec byte. A view of a raw stream is the stored bytes themselves. */
static int bs_rt(const uint8_t *p, size_t n, int pref, size_t *len)
{
    uint8_t *d = ut_xmalloc(bstream_bound(n)), *out = ut_xmalloc(n);
    *len = bstream_put(p, n, d, bstream_bound(n), pref);
    ck_assert_int_eq(bstream_get(d, *len, out, n), (long)*len);
    ck_assert(memcmp(out, p, n) == 0);
    const uint8_t *at = NULL;
    memset(out, 0, n);
    ck_assert_int_eq(bstream_view(d, *len, out, n, &at), (long)*len);
    ck_assert(memcmp(at, p, n) == 0);
    int codec = d[0];
    ck_assert_ptr_eq(at, codec == 0 ? d + BSTREAM_HDR : out); /* 0: stored raw */
    free(d), free(out);
    return codec;
}

/* Exponent bytes keep Huffman under BSTREAM_FAST (standalone decode
** speed); a plane Huffman codes half again over its entropy takes rANS
** either way; one coding shrinks by a twentieth is coded only under
** BSTREAM_SMALL; BSTREAM_SMALL is never larger. */
START_TEST(test_bstream_pref)
{
    size_t n = MiB, lf, ls;
    uint8_t *p = ut_xmalloc(n);
    gen_exponents(p, n, 41);
    ck_assert_int_eq(bs_rt(p, n, BSTREAM_FAST, &lf), 1);
    bs_rt(p, n, BSTREAM_SMALL, &ls);
    ck_assert_uint_le(ls, lf);
    uint64_t s = ut_seed(42);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ut_rand(&s) % 100;
        p[i] = r < 85 ? 0 : (uint8_t)(1 + r % 3); /* 0.85 bits; Huffman 1.25 */
    }
    ck_assert_int_eq(bs_rt(p, n, BSTREAM_FAST, &lf), 4);
    ck_assert_int_eq(bs_rt(p, n, BSTREAM_SMALL, &ls), 4);
    ck_assert_uint_lt(lf, n / 8); /* below Huffman's floor of a bit */
    for (size_t i = 0; i < n; i++) /* 128 values at 1/64, 64 at 1/256: 7.5 bits */
        p[i] = (uint8_t)(ut_rand(&s) % 4 ? ut_rand(&s) % 128 : 128 + ut_rand(&s) % 64);
    ck_assert_int_eq(bs_rt(p, n, BSTREAM_FAST, &lf), 0);
    ck_assert_int_ne(bs_rt(p, n, BSTREAM_SMALL, &ls), 0);
    ck_assert_uint_lt(ls, n - n / 64);
    ut_fill_random(p, n, 43); /* no coder shrinks noise: stored raw */
    ck_assert_int_eq(bs_rt(p, n, BSTREAM_FAST, &lf), 0);
    free(p);
}
END_TEST

/* ==================================================================== */
/* tcodec                                                               */
/* ==================================================================== */

static uint64_t wmask(unsigned w)
{
    return w == 8 ? ~0ull : (1ull << (8 * w)) - 1;
}

static uint64_t rdw(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < w; k++) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

static void wrw(uint8_t *p, unsigned w, uint64_t v)
{
    for (unsigned k = 0; k < w; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t ref_rotl(uint64_t x, unsigned w)
{
    return ((x << 1) | (x >> (8 * w - 1))) & wmask(w);
}

/* IEEE total order as an unsigned key: -NaN(max) ... -0, +0 ... +NaN(max). */
static uint64_t ref_ord(uint64_t x, unsigned w)
{
    uint64_t sign = 1ull << (8 * w - 1);
    return (x & sign) ? (~x & wmask(w)) : (x | sign);
}

static uint64_t ref_zz(uint64_t d, unsigned w)
{
    d &= wmask(w);
    uint64_t neg = (d >> (8 * w - 1)) & 1;
    return ((d << 1) ^ (neg ? ~0ull : 0)) & wmask(w);
}

/* What the documented format puts in the planes for element x (base b). */
static uint64_t ref_value(int mode, int flags, uint64_t x, uint64_t b, unsigned w)
{
    int fl = flags & 1, xr = flags & 2;
    if (mode == TC_STANDALONE) return fl ? ref_rotl(x, w) : x;
    if (xr) return fl ? ref_rotl(x ^ b, w) : x ^ b;
    if (fl) return ref_zz(ref_ord(x, w) - ref_ord(b, w), w);
    return ref_zz(x - b, w);
}

/* How often each plane codec was seen by parse_block. */
static unsigned long plane_codecs[5];

/* One plane as in tcodec.h; returns bytes used or 0 if malformed. */
static size_t parse_plane(const uint8_t *p, size_t avail, uint8_t *out, size_t cnt, int *codec)
{
    ck_assert_msg(avail >= 5, "plane header cut");
    size_t l = get32(p + 1);
    ck_assert_msg(l <= avail - 5, "plane length %zu > %zu", l, avail - 5);
    *codec = p[0];
    switch (p[0]) {
    case 0: ck_assert_uint_eq(l, cnt); memcpy(out, p + 5, cnt); break;
    case 1: ck_assert_int_eq(huf_decode(p + 5, l, out, cnt), 0); break;
    case 2: ck_assert_uint_eq(ZSTD_decompress(out, cnt, p + 5, l), cnt); break;
    case 3: ck_assert_uint_eq(l, 1); memset(out, p[5], cnt); break;
    case 4: ck_assert_int_eq(rans_decode(p + 5, l, out, cnt), 0); break;
    default: ck_abort_msg("plane codec %u", p[0]);
    }
    /* Planes never grow: a raw plane is the worst case. */
    ck_assert_uint_le(l, cnt < 1 ? 1 : cnt);
    plane_codecs[p[0]]++;
    return 5 + l;
}

/* A dense or sparse body at st+*off over the elements idx[0..m) (mode
** TC_DENSE or TC_SPARSE): parse it and compare every value with the
** reference transform of raw against base. codecs[] gets the codec of the
** mask plane (sparse) then of each value plane. */
static void verify_body(const uint8_t *st, size_t len, size_t *off, int mode, int flags,
                        const uint8_t *raw, const uint8_t *base, const size_t *idx, size_t m,
                        unsigned w, int codecs[9])
{
    size_t c = m;
    uint8_t *mask = NULL;
    if (mode == TC_SPARSE) {
        ck_assert_uint_ge(len - *off, 4);
        c = get32(st + *off);
        *off += 4;
        size_t mb = (m + 7) / 8;
        mask = ut_xmalloc(mb + 1);
        *off += parse_plane(st + *off, len - *off, mask, mb, &codecs[0]);
        size_t pop = 0;
        for (size_t t = 0; t < m; t++) {
            size_t i = idx[t];
            int bit = (mask[t / 8] >> (t % 8)) & 1;
            pop += (size_t)bit;
            if (bit != (rdw(raw + w * i, w) != rdw(base + w * i, w)))
                ck_abort_msg("mask bit %zu (element %zu) is %d", t, i, bit);
        }
        ck_assert_uint_eq(pop, c);
        if (m % 8) ck_assert_uint_eq(mask[m / 8] >> (m % 8), 0);
    }
    uint8_t *pl = ut_xmalloc(w * c + 1);
    for (unsigned k = 0; k < w; k++)
        *off += parse_plane(st + *off, len - *off, pl + k * c, c, &codecs[1 + k]);
    size_t j = 0;
    for (size_t t = 0; t < m; t++) {
        if (mask && !((mask[t / 8] >> (t % 8)) & 1)) continue;
        size_t i = idx[t];
        uint64_t v = 0;
        for (unsigned k = 0; k < w; k++) v |= (uint64_t)pl[k * c + j] << (8 * k);
        uint64_t x = rdw(raw + w * i, w), b = base ? rdw(base + w * i, w) : 0;
        uint64_t want = ref_value(mode == TC_STANDALONE ? mode : TC_DENSE, flags, x, b, w);
        if (v != want)
            ck_abort_msg("mode %d flags %d w %u elem %zu: x %#llx b %#llx: plane value %#llx, "
                         "want %#llx", mode, flags, w, i, (unsigned long long)x,
                         (unsigned long long)b, (unsigned long long)v, (unsigned long long)want);
        j++;
    }
    ck_assert_uint_eq(j, c);
    free(pl);
    free(mask);
}

/* How many grouped blocks verify_format saw, and of their groups how many
** had a dense and a sparse body. */
static unsigned long grouped_seen, group_bodies[3];

/* Parse a stored block by the format in tcodec.h and compare every plane
** value with the reference transform of raw (against base). codecs[] gets
** the codec of the mask plane (sparse) then of each value plane; -1 unused
** (for a grouped block: those of its last group). */
static void verify_format(const uint8_t *st, size_t len, const uint8_t *raw, const uint8_t *base,
                          size_t n, unsigned w, int codecs[9])
{
    for (int i = 0; i < 9; i++) codecs[i] = -1;
    int mode = st[0], flags = st[2];
    size_t cnt = n / w, off = mode == TC_STANDALONE ? 4 : 12;
    ck_assert_int_le(flags, 3);
    size_t *idx = ut_xmalloc((cnt + 1) * sizeof *idx);
    if (mode != TC_GROUPED) {
        for (size_t i = 0; i < cnt; i++) idx[i] = i;
        verify_body(st, len, &off, mode, flags, raw, base, idx, cnt, w, codecs);
    } else {
        grouped_seen++;
        ck_assert_uint_ge(len, off + 1);
        unsigned g = st[off++];
        ck_assert(g >= 1 && g <= 16 && (flags & 1) && w >= 2);
        const uint8_t *bnd = st + off;
        off += g - 1;
        const uint8_t *sizes = st + off;
        off += 4 * g;
        for (unsigned k = 0; k < g; k++) {
            unsigned lo = k ? bnd[k - 1] : 0, hi = k + 1 < g ? bnd[k] : 256;
            ck_assert_uint_lt(lo, hi);
            size_t m = 0;
            for (size_t i = 0; i < cnt; i++) {
                unsigned e = (unsigned)(ref_rotl(rdw(base + w * i, w), w) >> (8 * w - 8));
                if (e >= lo && e < hi) idx[m++] = i;
            }
            ck_assert_uint_eq(get32(sizes + 4 * k), m);
            ck_assert_uint_lt(off, len);
            int sub = st[off++];
            ck_assert(sub == TC_DENSE || sub == TC_SPARSE);
            group_bodies[sub]++;
            verify_body(st, len, &off, sub, flags, raw, base, idx, m, w, codecs);
        }
    }
    ck_assert_uint_eq(off, len);
    free(idx);
}

static unsigned eff_width(unsigned width, size_t n)
{
    int ok = width == 1 || width == 2 || width == 4 || width == 8;
    return ok && n % width == 0 ? width : 1;
}

struct tc_res {
    size_t len;
    int mode;
    int codecs[9];
};

/* Encode (into exactly tc_bound bytes plus a guard), check the header and
** the documented format, decode from an exact-size copy into a guarded
** buffer, and check base handling. */
static struct tc_res tc_rt(const uint8_t *raw, size_t n, unsigned width, int is_float,
                           const uint8_t *base, const struct tc_opts *o)
{
    struct tc_res r = {0, -1, {0}};
    size_t cap = tc_bound(n);
    ck_assert_uint_ge(cap, n);
    uint8_t *dst = ut_xmalloc(cap + UT_GUARD);
    memset(dst, 0xA5, cap + UT_GUARD);
    uint64_t h = base ? XXH3_64bits(base, n) : 0;
    ck_assert_int_eq(tc_encode(raw, n, width, is_float, base, h, o, dst, cap, &r.len, &r.mode), 0);
    ut_check_guard(dst + cap, 0xA5, "tc_encode");
    ck_assert_uint_le(r.len, cap);
    ck_assert_uint_ge(r.len, 4);
    unsigned w = eff_width(width, n);
    ck_assert_int_eq(dst[0], r.mode);
    ck_assert_uint_eq(dst[1], w);
    ck_assert_uint_eq(dst[2] & 1, is_float && w == width ? 1 : 0);
    ck_assert_uint_eq(dst[2] & ~3u, 0);
    ck_assert_uint_eq(dst[3], 0);
    ck_assert(r.mode >= TC_STANDALONE && r.mode <= TC_GROUPED);
    if (!base) ck_assert_int_eq(r.mode, TC_STANDALONE);
    if (r.mode == TC_STANDALONE) {
        ck_assert_msg(r.len <= 4 + 5 * w + n, "standalone %zu > raw %zu + headers", r.len, n);
        ck_assert(!tc_needs_base(dst, r.len));
    } else {
        ck_assert(tc_needs_base(dst, r.len));
        ck_assert_uint_eq(get64(dst + 4), h);
        if (o && o->delta == TC_DELTA_ULP) ck_assert_uint_eq(dst[2] & 2, 0);
        if (o && o->delta == TC_DELTA_XOR) ck_assert_uint_eq(dst[2] & 2, 2);
        if (o && o->no_sparse) ck_assert_int_ne(r.mode, TC_SPARSE);
        if (o && o->no_group) ck_assert_int_ne(r.mode, TC_GROUPED);
    }
    verify_format(dst, r.len, raw, base, n, w, r.codecs);

    uint8_t *st = ut_xmalloc(r.len);
    memcpy(st, dst, r.len);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0x5A, n + UT_GUARD);
    ck_assert_int_eq(tc_decode(st, r.len, base, h, out, n), 0);
    size_t d = ut_first_diff(out, raw, n);
    ck_assert_msg(d == n, "n=%zu w=%u float=%d mode %d: first difference at byte %zu", n, width,
                  is_float, r.mode, d);
    ut_check_guard(out + n, 0x5A, "tc_decode");
    if (r.mode != TC_STANDALONE) {
        ck_assert_int_eq(tc_decode(st, r.len, NULL, h, out, n), -EIO);
        ck_assert_int_eq(tc_decode(st, r.len, base, h ^ 1, out, n), -EIO);
        ck_assert_int_eq(tc_decode(st, r.len, base, ~h, out, n), -EIO);
    } else if (base) {
        memset(out, 0x5A, n);
        ck_assert_int_eq(tc_decode(st, r.len, NULL, 0, out, n), 0);
        ck_assert(memcmp(out, raw, n) == 0);
    }
    ut_check_guard(out + n, 0x5A, "tc_decode (no base)");
    free(out);
    free(st);
    free(dst);
    return r;
}

/* Weight-like data: N(0, 0.02) as f64, f32 or bf16 (w 8, 4, 2), or int8
** quantised (w 1); is_float only decides what the codec is told. A tail of
** n % w bytes is random. */
static void gen_weights(uint8_t *p, size_t n, unsigned w, uint64_t seed)
{
    uint64_t s = ut_seed(seed);
    size_t cnt = n / w;
    for (size_t i = 0; i < cnt; i++) {
        double g = 0.02 * ut_gauss(&s);
        switch (w) {
        case 8: memcpy(p + 8 * i, &g, 8); break;
        case 4: {
            float f = (float)g;
            memcpy(p + 4 * i, &f, 4);
            break;
        }
        case 2: {
            uint16_t b = ut_bf16f((float)g);
            memcpy(p + 2 * i, &b, 2);
            break;
        }
        default: {
            double q = round(g * 2000);
            p[i] = (uint8_t)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
        }
    }
    ut_fill_random(p + cnt * w, n - cnt * w, seed ^ 0x55);
}

/* Change a fraction of the elements by +-1..maxd in their integer bits (for
** floats of one sign: that many ulps). */
static void perturb(uint8_t *p, size_t n, unsigned w, double frac, unsigned maxd, uint64_t seed)
{
    uint64_t s = ut_seed(seed);
    for (size_t i = 0; i < n / w; i++) {
        if (ut_unif(&s) > frac) continue;
        uint64_t v = rdw(p + w * i, w), r = ut_rand(&s);
        uint64_t d = 1 + (r >> 1) % maxd;
        v = r & 1 ? v + d : v - d;
        wrw(p + w * i, w, v & wmask(w));
    }
}

/* Replace a fraction of the elements (at least one) by unrelated values. */
static size_t replace_some(uint8_t *p, size_t n, unsigned w, double frac, uint64_t seed)
{
    size_t cnt = n / w, changed = 0;
    if (!cnt) return 0;
    uint8_t *other = ut_xmalloc(n);
    gen_weights(other, n, w, seed + 7777);
    uint64_t s = ut_seed(seed);
    for (size_t i = 0; i < cnt; i++)
        if (ut_unif(&s) <= frac && memcmp(p + w * i, other + w * i, w)) {
            memcpy(p + w * i, other + w * i, w);
            changed++;
        }
    if (!changed) {
        size_t i = cnt / 2;
        p[w * i] ^= 0x5C;
        changed = 1;
    }
    free(other);
    return changed;
}

static const struct tc_opts all_opts[] = {
    {TC_DELTA_BEST, 0, 0}, {TC_DELTA_ULP, 0, 0}, {TC_DELTA_XOR, 0, 0},
    {TC_DELTA_BEST, 1, 0}, {TC_DELTA_ULP, 1, 0}, {TC_DELTA_XOR, 1, 0},
    {TC_DELTA_BEST, 0, 1}, {TC_DELTA_ULP, 1, 1}};
#define NOPTS (sizeof all_opts / sizeof all_opts[0])

enum { BASE_EQUAL, BASE_FEW, BASE_SLIGHT, BASE_UNRELATED, BASE_KINDS };

/* Every width, float flag, base kind and option at one block size. */
static void tc_matrix(size_t n, uint64_t seed)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    for (size_t wi = 0; wi < 4; wi++)
        for (int fl = 0; fl <= 1; fl++) {
            unsigned width = widths[wi], w = eff_width(width, n);
            gen_weights(raw, n, width, seed + wi);
            struct tc_res sa = tc_rt(raw, n, width, fl, NULL, NULL);
            struct tc_res sa2 = tc_rt(raw, n, width, fl, NULL, &all_opts[2]);
            ck_assert_uint_eq(sa.len, sa2.len); /* options do not matter standalone */
            for (int bk = 0; bk < BASE_KINDS; bk++) {
                memcpy(base, raw, n);
                switch (bk) {
                case BASE_FEW: replace_some(base, n, w, 0.005, seed + 100 + wi); break;
                case BASE_SLIGHT: perturb(base, n, w, 0.9, 4, seed + 200 + wi); break;
                case BASE_UNRELATED: gen_weights(base, n, width, seed + 300 + wi); break;
                }
                size_t lens[NOPTS], best = sa.len;
                int modes[NOPTS];
                for (size_t oi = 0; oi < NOPTS; oi++) {
                    const struct tc_opts *o = &all_opts[oi];
                    struct tc_res r = tc_rt(raw, n, width, fl, base, o);
                    lens[oi] = r.len;
                    modes[oi] = r.mode;
                    if (r.len < best) best = r.len;
                    ck_assert_msg(r.len <= sa.len,
                                  "n=%zu w=%u fl=%d base %d opt %zu: %zu with base > %zu without",
                                  n, width, fl, bk, oi, r.len, sa.len);
                    if (n < 4 * KiB) continue;
                    switch (bk) {
                    case BASE_EQUAL:
                        ck_assert_int_ne(r.mode, TC_STANDALONE);
                        ck_assert_msg(r.len <= 22 + 6 * w, "equal base: %zu bytes", r.len);
                        break;
                    case BASE_FEW:
                        ck_assert_int_ne(r.mode, TC_STANDALONE);
                        ck_assert_msg(r.len * 4 < sa.len, "few changed: %zu vs %zu", r.len, sa.len);
                        if (n >= MiB && w >= 2 && !o->no_sparse)
                            ck_assert_msg(r.mode == TC_SPARSE, "w=%u fl=%d opt %zu: mode %d", width,
                                          fl, oi, r.mode);
                        break;
                    case BASE_SLIGHT:
                        /* 90% changed: a delta, at most 2/3 of standalone
                        ** (checked below: dense, or sparse only where
                        ** measured smaller). XOR of float bits across an
                        ** exponent step or of int8 across sign is not
                        ** small: the size bound is for ulp/best. */
                        if (o->delta != TC_DELTA_XOR) {
                            ck_assert_msg(r.mode == TC_DENSE || r.mode == TC_SPARSE ||
                                              r.mode == TC_GROUPED, "slight: mode %d", r.mode);
                            ck_assert_msg(r.len * 3 < sa.len * 2, "slight: %zu vs %zu", r.len,
                                          sa.len);
                        }
                        break;
                    case BASE_UNRELATED:
                        break;
                    }
                }
                /* Best and ulp with sparse allowed (options 0 and 1) may go
                ** sparse at 90% changed only if that beats their dense-only
                ** twins (options 3 and 4), which must be dense. */
                if (bk == BASE_SLIGHT && n >= 4 * KiB)
                    for (size_t oi = 0; oi < 2; oi++) {
                        ck_assert_msg(modes[oi + 3] == TC_DENSE || modes[oi + 3] == TC_GROUPED,
                                      "slight, no sparse: mode %d", modes[oi + 3]);
                        if (modes[oi] == TC_SPARSE)
                            ck_assert_msg(lens[oi] <= lens[oi + 3],
                                          "w=%u fl=%d opt %zu: sparse %zu > dense %zu", width, fl,
                                          oi, lens[oi], lens[oi + 3]);
                    }
                /* The estimate on samples picks (nearly) the best candidate:
                ** unrestricted options within 5% of the smallest result. */
                ck_assert_msg(lens[0] <= best + best / 20 + 64,
                              "n=%zu w=%u fl=%d base %d: best option gives %zu, smallest %zu", n,
                              width, fl, bk, lens[0], best);
            }
        }
    free(base);
    free(raw);
}

START_TEST(test_tc_matrix_small)
{
    static const size_t ns[] = {0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 24, 100, 1001};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) tc_matrix(ns[i], 10 + i);
}
END_TEST

START_TEST(test_tc_matrix_4k)
{
    tc_matrix(4 * KiB, 40);
    tc_matrix(4 * KiB + 8, 41);
    tc_matrix(64 * KiB, 42);
}
END_TEST

START_TEST(test_tc_matrix_1m)
{
    tc_matrix(MiB, 50);
}
END_TEST

/* Block sizes that are not a multiple of the width are coded with w = 1 and
** no float transform. */
START_TEST(test_tc_odd_sizes)
{
    uint8_t raw[64], base[64];
    for (unsigned width = 1; width <= 8; width++) /* 3, 5, 6, 7: invalid widths -> 1 */
        for (size_t n = 1; n <= 40; n++) {
            ut_fill_random(raw, n, n * 16 + width);
            memcpy(base, raw, n);
            base[n / 3] ^= 1;
            struct tc_res r = tc_rt(raw, n, width, 1, NULL, NULL);
            (void)r;
            for (size_t oi = 0; oi < NOPTS; oi++) tc_rt(raw, n, width, 1, base, &all_opts[oi]);
        }
    /* The example of the brief: 7 bytes at width 2. */
    uint8_t dst[512];
    size_t len;
    int mode;
    ck_assert_uint_le(tc_bound(7), sizeof dst);
    ck_assert_int_eq(tc_encode(raw, 7, 2, 1, NULL, 0, NULL, dst, sizeof dst, &len, &mode), 0);
    ck_assert_uint_eq(dst[1], 1);
    ck_assert_uint_eq(dst[2], 0);
    /* Empty block with a base: standalone, and it decodes. */
    ck_assert_int_eq(tc_encode(raw, 0, 4, 1, base, 123, NULL, dst, tc_bound(0), &len, &mode), 0);
    ck_assert_int_eq(mode, TC_STANDALONE);
    ck_assert_int_eq(tc_decode(dst, len, NULL, 0, raw, 0), 0);
}
END_TEST

/* ---- special float values ---- */

static const uint16_t sp_bf16[] = {
    0x7FC0, 0x7FC1, 0x7FFF, 0x7F81, 0x7FA0, 0xFFC0, 0xFFFF, 0xFF81, /* NaNs */
    0x7F80, 0xFF80, 0x0000, 0x8000,                                 /* inf, zero */
    0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080,                 /* denormal, min normal */
    0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x3C23, 0xBC23};                /* max, +-1, +-0.01 */
static const uint16_t sp_f16[] = {
    0x7E00, 0x7E01, 0x7FFF, 0x7C01, 0x7D00, 0xFE00, 0xFFFF, 0xFC01,
    0x7C00, 0xFC00, 0x0000, 0x8000,
    0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400,
    0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x211F, 0xA11F};
static const uint32_t sp_f32[] = {
    0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0x7F800001, 0x7FA00000, 0xFFC00000, 0xFFFFFFFF,
    0xFF800001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001,
    0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000,
    0xBF800000, 0x3C23D70A, 0xBC23D70A};
static const uint64_t sp_f64[] = {
    0x7FF8000000000000ull, 0x7FF8000000000001ull, 0x7FFFFFFFFFFFFFFFull, 0x7FF0000000000001ull,
    0x7FF4000000000000ull, 0xFFF8000000000000ull, 0xFFFFFFFFFFFFFFFFull, 0xFFF0000000000001ull,
    0x7FF0000000000000ull, 0xFFF0000000000000ull, 0x0000000000000000ull, 0x8000000000000000ull,
    0x0000000000000001ull, 0x8000000000000001ull, 0x000FFFFFFFFFFFFFull, 0x800FFFFFFFFFFFFFull,
    0x0010000000000000ull, 0x8010000000000000ull, 0x7FEFFFFFFFFFFFFFull, 0xFFEFFFFFFFFFFFFFull,
    0x3FF0000000000000ull, 0xBFF0000000000000ull, 0x3F847AE147AE147Bull, 0xBF847AE147AE147Bull};
#define NSP 24

static uint64_t special(int type, int i)
{
    switch (type) {
    case 0: return sp_bf16[i];
    case 1: return sp_f16[i];
    case 2: return sp_f32[i];
    default: return sp_f64[i];
    }
}

START_TEST(test_tc_special_floats)
{
    static const unsigned tw[] = {2, 2, 4, 8};
    static const char *const tn[] = {"bf16", "f16", "f32", "f64"};
    for (int t = 0; t < 4; t++) {
        unsigned w = tw[t];
        /* Every (value, base) pair of specials, then repeated with weights
        ** around them to pass the sampling threshold. */
        size_t reps[] = {1, 40};
        for (size_t ri = 0; ri < 2; ri++) {
            size_t cnt = NSP * NSP * reps[ri], n = cnt * w;
            uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
            gen_weights(raw, n, w, 5 + (uint64_t)t);
            memcpy(base, raw, n);
            for (size_t i = 0; i < cnt; i++) {
                size_t k = i % (NSP * NSP);
                if (ri == 1 && (i / (NSP * NSP)) % 3 == 2) continue; /* keep some equal */
                wrw(raw + w * i, w, special(t, (int)(k / NSP)));
                wrw(base + w * i, w, special(t, (int)(k % NSP)));
            }
            for (int fl = 0; fl <= 1; fl++) {
                struct tc_res r = tc_rt(raw, n, w, fl, NULL, NULL);
                ck_assert_msg(r.mode == TC_STANDALONE, "%s", tn[t]);
                for (size_t oi = 0; oi < NOPTS; oi++) {
                    struct tc_res d = tc_rt(raw, n, w, fl, base, &all_opts[oi]);
                    ck_assert_uint_le(d.len, r.len);
                }
            }
            free(base);
            free(raw);
        }
    }
}
END_TEST

/* Element i of a sign-crossing ramp: ordered index k around zero (k >= 0:
** +0, denormals...; k < 0: -0, -denormals...). */
static uint64_t near_zero(int64_t k, unsigned w)
{
    uint64_t sign = 1ull << (8 * w - 1);
    return k >= 0 ? (uint64_t)k : sign | (uint64_t)(-k - 1);
}

/* Deltas of +-1 ulp in IEEE order across zero (-0 -> +0, -denormal ->
** +denormal, ...) must be tiny under the ulp delta: only the low plane
** varies (zigzag 1 or 2), every other plane is a constant 0. */
START_TEST(test_tc_ulp_across_zero)
{
    static const unsigned ws[] = {2, 4, 8};
    for (size_t wi = 0; wi < 3; wi++) {
        unsigned w = ws[wi];
        size_t cnt = 64 * KiB / w, n = cnt * w;
        uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
        uint64_t s = ut_seed(w);
        for (size_t i = 0; i < cnt; i++) {
            int64_t k = (int64_t)(ut_rand(&s) % 41) - 20;
            int64_t kb = k + (ut_rand(&s) & 1 ? 1 : -1);
            wrw(raw + w * i, w, near_zero(k, w));
            wrw(base + w * i, w, near_zero(kb, w));
        }
        /* Spot checks of the premise: -0 -> +0 is one step. */
        ck_assert_uint_eq(ref_ord(near_zero(0, w), w) - ref_ord(near_zero(-1, w), w), 1);
        ck_assert_uint_eq(near_zero(-1, w), 1ull << (8 * w - 1));
        struct tc_opts o = {TC_DELTA_ULP, 1, 1};
        struct tc_res r = tc_rt(raw, n, w, 1, base, &o);
        ck_assert_int_eq(r.mode, TC_DENSE);
        for (unsigned k = 1; k < w; k++)
            ck_assert_msg(r.codecs[1 + k] == 3, "w=%u plane %u codec %d", w, k, r.codecs[1 + k]);
        ck_assert_msg(r.len < 12 + n / w / 4 + 6 * w + HUF_HEADER + 16, "w=%u: %zu bytes", w,
                      r.len);
        /* Best choice: no worse. */
        struct tc_res b = tc_rt(raw, n, w, 1, base, NULL);
        ck_assert_uint_le(b.len, r.len);
        free(raw);
        free(base);
    }
}
END_TEST

/* A dense ulp delta made by hand from the format in tcodec.h: the decoder
** applies the documented transform, including across sign and to NaN. */
START_TEST(test_tc_handmade_ulp)
{
    static const struct {
        uint32_t base;
        int32_t d;
        uint32_t want;
    } c[] = {
        {0x80000000, 1, 0x00000000},  /* -0 + 1 = +0 */
        {0x00000000, -1, 0x80000000}, /* +0 - 1 = -0 */
        {0x00000000, 1, 0x00000001},  /* +0 + 1 = min denormal */
        {0x80000000, -1, 0x80000001}, /* -0 - 1 = -min denormal */
        {0x80000001, 2, 0x00000000},  /* across zero */
        {0x80000001, 3, 0x00000001},
        {0x00000001, -3, 0x80000001},
        {0x7F7FFFFF, 1, 0x7F800000},  /* max + 1 = +inf */
        {0x7F7FFFFF, 2, 0x7F800001},  /* ... then NaN */
        {0xFF7FFFFF, -1, 0xFF800000}, /* -max - 1 = -inf */
        {0xFF800000, -1, 0xFF800001}, /* -inf - 1 = -NaN */
        {0x3F800000, -1, 0x3F7FFFFF}, /* 1.0 - 1 ulp */
        {0xBF800000, 1, 0xBF7FFFFF},  /* -1.0 + 1 ulp: smaller magnitude */
        {0xBF800000, -1, 0xBF800001},
        {0xFFFFFFFF, -1, 0x7FFFFFFF}, /* wraps: lowest key - 1 = highest */
        {0x7FFFFFFF, 1, 0xFFFFFFFF},
        {0x00000000, INT32_MIN, 0xFFFFFFFF},
        {0x3F800000, 0, 0x3F800000},
        {0x7FC00000, -0x7FC00000 + 0x3F800000, 0x3F800000}, /* NaN -> 1.0 */
    };
    size_t cnt = sizeof c / sizeof c[0], n = 4 * cnt;
    uint8_t base[4 * 32], out[4 * 32 + UT_GUARD];
    for (size_t i = 0; i < cnt; i++) wrw(base + 4 * i, 4, c[i].base);
    uint64_t h = XXH3_64bits(base, n);
    size_t len = 12 + 4 * (5 + cnt);
    uint8_t *st = ut_xmalloc(len);
    st[0] = TC_DENSE;
    st[1] = 4;
    st[2] = 1; /* float, ulp */
    st[3] = 0;
    put64(st + 4, h);
    for (unsigned k = 0; k < 4; k++) {
        uint8_t *p = st + 12 + k * (5 + cnt);
        p[0] = 0;
        put32(p + 1, (uint32_t)cnt);
        for (size_t i = 0; i < cnt; i++) {
            uint32_t z = (uint32_t)ref_zz((uint32_t)c[i].d, 4);
            p[5 + i] = (uint8_t)(z >> (8 * k));
        }
    }
    memset(out, 0x5A, sizeof out);
    ck_assert(tc_needs_base(st, len));
    ck_assert_int_eq(tc_decode(st, len, base, h, out, n), 0);
    for (size_t i = 0; i < cnt; i++)
        ck_assert_msg(rdw(out + 4 * i, 4) == c[i].want, "case %zu: %#x + %d ulp: got %#llx want %#x",
                      i, c[i].base, c[i].d, (unsigned long long)rdw(out + 4 * i, 4), c[i].want);
    ut_check_guard(out + n, 0x5A, "handmade");
    /* Encoding the result against the base reproduces these planes. */
    struct tc_opts o = {TC_DELTA_ULP, 1, 0};
    tc_rt(out, n, 4, 1, base, &o);
    /* The same block as an XOR delta means something else; still decodes. */
    st[2] = 3;
    ck_assert_int_eq(tc_decode(st, len, base, h, out, n), 0);
    free(st);
}
END_TEST

/* Integers near the wraparound: every pair of extreme values at each
** width, integer (ulp = modular difference) and float views. */
START_TEST(test_tc_int_wrap)
{
    static const int64_t ex[] = {INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 0, 1, -1, 2,
                                 -2, INT32_MIN, INT32_MAX, INT16_MIN, INT16_MAX, INT8_MIN,
                                 INT8_MAX, 0x5555555555555555ll};
    size_t ne = sizeof ex / sizeof ex[0];
    static const unsigned ws[] = {1, 2, 4, 8};
    for (size_t wi = 0; wi < 4; wi++) {
        unsigned w = ws[wi];
        for (size_t rep = 1; rep <= 40; rep *= 40) {
            size_t cnt = ne * ne * rep, n = cnt * w;
            uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
            for (size_t i = 0; i < cnt; i++) {
                size_t k = i % (ne * ne);
                /* Reduce to the width keeping the extremes of that width. */
                int64_t x = ex[k / ne], b = ex[k % ne];
                int sh = 64 - 8 * (int)w;
                uint64_t xv = sh ? ((uint64_t)x >> sh) ^ ((uint64_t)x & 1) : (uint64_t)x;
                uint64_t bv = sh ? ((uint64_t)b >> sh) ^ ((uint64_t)b & 3) : (uint64_t)b;
                wrw(raw + w * i, w, xv & wmask(w));
                wrw(base + w * i, w, bv & wmask(w));
            }
            for (int fl = 0; fl <= 1; fl++) {
                tc_rt(raw, n, w, fl, NULL, NULL);
                for (size_t oi = 0; oi < NOPTS; oi++) tc_rt(raw, n, w, fl, base, &all_opts[oi]);
            }
            free(raw);
            free(base);
        }
    }
    /* MIN vs MAX is a difference of 1: a constant-plane delta. */
    size_t cnt = 8192, n = 8 * cnt;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    uint64_t s = ut_seed(3);
    for (size_t i = 0; i < cnt; i++) {
        int up = (int)(ut_rand(&s) & 1);
        wrw(raw + 8 * i, 8, up ? (uint64_t)INT64_MIN : (uint64_t)INT64_MAX);
        wrw(base + 8 * i, 8, up ? (uint64_t)INT64_MAX : (uint64_t)INT64_MIN);
    }
    struct tc_opts o = {TC_DELTA_ULP, 1, 0};
    struct tc_res r = tc_rt(raw, n, 8, 0, base, &o);
    ck_assert_int_eq(r.mode, TC_DENSE);
    for (unsigned k = 1; k < 8; k++) ck_assert_int_eq(r.codecs[1 + k], 3);
    free(raw);
    free(base);
}
END_TEST

/* Random data (and random bases): never larger with a base than without. */
START_TEST(test_tc_never_larger)
{
    static const unsigned ws[] = {1, 2, 4, 8};
    static const size_t ns[] = {64, 4 * KiB, 64 * KiB + 8, 256 * KiB};
    uint8_t *raw = ut_xmalloc(256 * KiB), *base = ut_xmalloc(256 * KiB);
    int seen_delta = 0;
    for (uint64_t seed = 1; seed <= 4; seed++)
        for (size_t ni = 0; ni < 4; ni++)
            for (size_t wi = 0; wi < 4; wi++)
                for (int kind = 0; kind < 4; kind++) {
                    size_t n = ns[ni];
                    unsigned w = ws[wi];
                    ut_fill_random(raw, n, seed * 1000 + ni * 10 + wi);
                    switch (kind) {
                    case 0: /* unrelated random base */
                        ut_fill_random(base, n, seed * 7777 + ni);
                        break;
                    case 1: /* half the bytes the same */
                        ut_fill_random(base, n, seed * 7777 + ni);
                        for (size_t i = 0; i < n; i += 2) base[i] = raw[i];
                        break;
                    case 2: /* random data, few elements differ */
                        memcpy(base, raw, n);
                        replace_some(base, n, w, 0.02, seed);
                        break;
                    default: /* low-entropy raw (small values), random base */
                        for (size_t i = 0; i < n; i++) raw[i] &= 0x03;
                        ut_fill_random(base, n, seed * 99 + ni);
                        break;
                    }
                    for (int fl = 0; fl <= 1; fl++) {
                        struct tc_res sa = tc_rt(raw, n, w, fl, NULL, NULL);
                        for (size_t oi = 0; oi < NOPTS; oi++) {
                            struct tc_res r = tc_rt(raw, n, w, fl, base, &all_opts[oi]);
                            ck_assert_msg(r.len <= sa.len,
                                          "seed %llu n %zu w %u kind %d fl %d opt %zu: %zu > %zu",
                                          (unsigned long long)seed, n, w, kind, fl, oi, r.len,
                                          sa.len);
                            seen_delta += r.mode != TC_STANDALONE;
                        }
                    }
                }
    ck_assert_int_gt(seen_delta, 0);
    free(raw);
    free(base);
}
END_TEST

/* Regression: tc_encode once compared the delta it chose only with the
** *estimated* standalone size (order-0 entropy of samples). On planes of a
** dominant byte in long runs zstd beats that estimate by far, and a delta
** many times the real standalone size was kept. Now any delta is settled
** against a real standalone encoding when a standalone plane has runs. */
START_TEST(test_tc_never_larger_runs)
{
    size_t n = 64 * KiB;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    uint64_t s = ut_seed(31);
    for (size_t i = 0; i < n;) {
        size_t run = 100 + (size_t)(ut_rand(&s) % 200);
        uint8_t v = ut_rand(&s) % 10 < 7 ? 0 : (uint8_t)(ut_rand(&s) >> 24);
        for (size_t j = 0; j < run && i < n; j++) raw[i++] = v;
    }
    for (size_t i = 0; i < n; i++) base[i] = ut_rand(&s) % 20 == 0 ? (uint8_t)ut_rand(&s) : raw[i];
    static const unsigned ws[] = {1, 4};
    char msg[512] = "";
    int bad = 0;
    for (size_t wi = 0; wi < 2; wi++)
        for (int fl = 0; fl <= 1; fl++) {
            struct tc_res sa = tc_rt(raw, n, ws[wi], fl, NULL, NULL);
            struct tc_res r = tc_rt(raw, n, ws[wi], fl, base, NULL);
            if (r.len > sa.len) {
                size_t l = strlen(msg);
                snprintf(msg + l, sizeof msg - l, " [w %u fl %d: %zu with base (mode %d) > %zu]",
                         ws[wi], fl, r.len, r.mode, sa.len);
                bad++;
            }
        }
    free(raw);
    free(base);
    ck_assert_msg(bad == 0, "a block grows by having a base:%s", msg);
}
END_TEST

/* A well-formed stored block of realistic data, with base. */
static uint8_t *tc_sample(size_t n, unsigned w, int kind, uint8_t *raw, uint8_t *base,
                          uint64_t *h, size_t *len, int *mode)
{
    gen_weights(raw, n, w, 60 + (uint64_t)kind);
    memcpy(base, raw, n);
    struct tc_opts o = {TC_DELTA_BEST, 0, 0};
    if (kind == 1) replace_some(base, n, w, 0.01, 61);
    if (kind == 2) {
        perturb(base, n, w, 0.5, 3, 62);
        o.no_sparse = 1;
    }
    if (kind == 3) gen_weights(base, n, w, 63);
    *h = XXH3_64bits(base, n);
    size_t cap = tc_bound(n);
    uint8_t *st = ut_xmalloc(cap);
    ck_assert_int_eq(tc_encode(raw, n, w, 1, kind == 0 ? NULL : base, *h, &o, st, cap, len, mode),
                     0);
    return st;
}

/* Decode an exact-size copy into a guarded buffer; 0 or -EIO. */
static int tc_try(const uint8_t *src, size_t len, const uint8_t *base, uint64_t h, size_t n)
{
    uint8_t *c = ut_xmalloc(len);
    if (len) memcpy(c, src, len);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0x5A, n + UT_GUARD);
    int rc = tc_decode(c, len, base, h, out, n);
    ck_assert_msg(rc == 0 || rc == -EIO, "tc_decode rc %d", rc);
    ut_check_guard(out + n, 0x5A, "tc_decode (corrupt)");
    free(out);
    free(c);
    return rc;
}

START_TEST(test_tc_wrong_base)
{
    size_t n = 64 * KiB, len;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    uint64_t h;
    int mode;
    for (int kind = 1; kind <= 2; kind++) {
        uint8_t *st = tc_sample(n, 2, kind, raw, base, &h, &len, &mode);
        ck_assert_int_eq(mode, kind == 1 ? TC_SPARSE : TC_DENSE);
        ck_assert(tc_needs_base(st, len));
        ck_assert_int_eq(tc_try(st, len, base, h, n), 0);
        ck_assert_int_eq(tc_try(st, len, NULL, h, n), -EIO);
        ck_assert_int_eq(tc_try(st, len, base, h + 1, n), -EIO);
        ck_assert_int_eq(tc_try(st, len, base, 0, n), -EIO);
        /* The hash is what is checked: another base with the right hash is
        ** accepted (the layer above hashes the result). */
        ck_assert_int_eq(tc_try(st, len, raw, h, n), 0);
        /* A delta too short to hold its hash. */
        for (size_t l = 0; l < 12; l++) ck_assert_int_eq(tc_try(st, l, base, h, n), -EIO);
        free(st);
    }
    /* Standalone: no base needed, and a base given is ignored. */
    uint8_t *st = tc_sample(n, 2, 0, raw, base, &h, &len, &mode);
    ck_assert(!tc_needs_base(st, len));
    ck_assert_int_eq(tc_try(st, len, NULL, 0, n), 0);
    ck_assert_int_eq(tc_try(st, len, base, 12345, n), 0);
    ck_assert(!tc_needs_base(st, 0));
    uint8_t m[1] = {TC_DENSE};
    ck_assert(tc_needs_base(m, 1));
    m[0] = TC_SPARSE;
    ck_assert(tc_needs_base(m, 1));
    free(st);
    free(raw);
    free(base);
}
END_TEST

START_TEST(test_tc_corrupt)
{
    size_t n = 64 * KiB, len;
    /* The base holds n + 8 bytes: one decode below asks for n + w. */
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n + 8);
    memset(base + n, 0, 8);
    uint64_t h;
    int mode;
    for (int kind = 0; kind <= 3; kind++) {
        for (unsigned w = 1; w <= 8; w *= 2) {
            uint8_t *st = tc_sample(n, w, kind, raw, base, &h, &len, &mode);
            ck_assert_int_eq(tc_try(st, len, base, h, n), 0);
            /* Truncation and extension: always -EIO. */
            for (size_t l = 0; l < len; l += (l < 400 ? 1 : 97))
                ck_assert_msg(tc_try(st, l, base, h, n) == -EIO, "kind %d w %u: cut to %zu of %zu",
                              kind, w, l, len);
            ck_assert_int_eq(tc_try(st, len - 1, base, h, n), -EIO);
            uint8_t *b = ut_xmalloc(len + 8);
            memcpy(b, st, len);
            memset(b + len, 0, 8);
            ck_assert_int_eq(tc_try(b, len + 1, base, h, n), -EIO);
            ck_assert_int_eq(tc_try(b, len + 8, base, h, n), -EIO);
            /* Header fields out of range. */
            static const uint8_t bad_mode[] = {3, 4, 0x80, 0xFF};
            for (size_t i = 0; i < sizeof bad_mode; i++) {
                memcpy(b, st, len);
                b[0] = bad_mode[i];
                ck_assert_int_eq(tc_try(b, len, base, h, n), -EIO);
            }
            static const uint8_t bad_w[] = {0, 3, 5, 6, 7, 9, 16, 0xFF};
            for (size_t i = 0; i < sizeof bad_w; i++) {
                memcpy(b, st, len);
                b[1] = bad_w[i];
                ck_assert_int_eq(tc_try(b, len, base, h, n), -EIO);
            }
            memcpy(b, st, len);
            b[2] |= 4;
            ck_assert_int_eq(tc_try(b, len, base, h, n), -EIO);
            memcpy(b, st, len);
            b[3] = 1;
            ck_assert_int_eq(tc_try(b, len, base, h, n), -EIO);
            /* Other widths that divide n: planes no longer fit: 0 or -EIO. */
            for (unsigned w2 = 1; w2 <= 8; w2 *= 2) {
                memcpy(b, st, len);
                b[1] = (uint8_t)w2;
                tc_try(b, len, base, h, n);
            }
            /* Mode changed between the three: mostly -EIO. */
            for (int m2 = 0; m2 <= 2; m2++) {
                memcpy(b, st, len);
                b[0] = (uint8_t)m2;
                tc_try(b, len, base, h, n);
            }
            /* Every byte of the first 300 and a spread of the rest, flipped. */
            for (size_t i = 0; i < len; i += (i < 300 ? 1 : 53))
                for (int pat = 0; pat < 2; pat++) {
                    memcpy(b, st, len);
                    b[i] ^= pat ? 0xFF : (uint8_t)(1u << (i % 8));
                    tc_try(b, len, base, h, n);
                }
            /* A wrong block length. */
            tc_try(st, len, base, h, n - w);
            tc_try(st, len, base, h, n + w);
            tc_try(st, len, base, h, n / 2);
            tc_try(st, len, base, h, 0);
            free(b);
            free(st);
        }
    }
    /* Random garbage behind valid-looking headers. */
    uint8_t *g = ut_xmalloc(4096);
    uint64_t s = ut_seed(17);
    for (int t = 0; t < 2000; t++) {
        size_t gl = 4 + (size_t)(ut_rand(&s) % 4000);
        ut_fill_random(g, gl, (uint64_t)t + 500);
        g[0] = (uint8_t)(t % 3);
        g[1] = (uint8_t)(1u << (t % 4));
        g[2] = (uint8_t)(t % 4);
        g[3] = 0;
        if (gl >= 12) put64(g + 4, h);
        /* Plausible plane headers. */
        if (gl > 20) {
            g[12 + (g[0] == TC_SPARSE ? 4 : 0)] = (uint8_t)(t % 4);
            put32(g + 13 + (g[0] == TC_SPARSE ? 4 : 0), (uint32_t)(ut_rand(&s) % gl));
        }
        size_t gn = (size_t)(ut_rand(&s) % 600) * 8;
        tc_try(g, gl, base, h, gn < n ? gn : n);
    }
    free(g);
    free(raw);
    free(base);
}
END_TEST

/* A sparse block made by hand: mask and compacted values. */
START_TEST(test_tc_handmade_sparse)
{
    /* 20 u16 integer elements, elements 3 and 17 changed: +5 and -1 (ulp). */
    size_t cnt = 20, n = 2 * cnt;
    uint8_t base[40], out[40 + UT_GUARD];
    for (size_t i = 0; i < cnt; i++) wrw(base + 2 * i, 2, 1000 + 37 * i);
    uint64_t h = XXH3_64bits(base, n);
    uint8_t st[64];
    size_t off = 0;
    st[off++] = TC_SPARSE;
    st[off++] = 2;
    st[off++] = 0; /* integer, ulp */
    st[off++] = 0;
    put64(st + off, h), off += 8;
    put32(st + off, 2), off += 4;
    /* mask plane: 3 bytes raw */
    st[off++] = 0;
    put32(st + off, 3), off += 4;
    st[off++] = 1u << 3;
    st[off++] = 0;
    st[off++] = 1u << (17 - 16);
    /* plane 0: zz(+5) = 10, zz(-1) = 1; plane 1: const 0 */
    st[off++] = 0;
    put32(st + off, 2), off += 4;
    st[off++] = 10;
    st[off++] = 1;
    st[off++] = 3;
    put32(st + off, 1), off += 4;
    st[off++] = 0;
    memset(out, 0x5A, sizeof out);
    ck_assert_int_eq(tc_decode(st, off, base, h, out, n), 0);
    for (size_t i = 0; i < cnt; i++) {
        uint64_t want = 1000 + 37 * i + (i == 3 ? 5 : 0) - (i == 17 ? 1 : 0);
        ck_assert_uint_eq(rdw(out + 2 * i, 2), want);
    }
    ut_check_guard(out + n, 0x5A, "sparse");
    /* Count and mask disagree, or mask bits past the end: -EIO. */
    put32(st + 12, 3);
    ck_assert_int_eq(tc_decode(st, off, base, h, out, n), -EIO);
    put32(st + 12, 2);
    st[16 + 5 + 2] |= 0x80; /* element 23 of 20 */
    st[16 + 5] = 0;         /* keep the count at 2 */
    ck_assert_int_eq(tc_decode(st, off, base, h, out, n), -EIO);
}
END_TEST

START_TEST(test_tc_bad_args)
{
    size_t n = 4096, len = 0;
    int mode = -1;
    uint8_t *raw = ut_xmalloc(n), *dst = ut_xmalloc(tc_bound(n));
    gen_weights(raw, n, 4, 1);
    ck_assert_int_eq(tc_encode(raw, n, 4, 1, NULL, 0, NULL, dst, tc_bound(n) - 1, &len, &mode),
                     -EINVAL);
    ck_assert_int_eq(tc_encode(raw, n, 4, 1, NULL, 0, NULL, dst, n, &len, &mode), -EINVAL);
    ck_assert_int_eq(tc_encode(raw, n, 4, 1, NULL, 0, NULL, dst, 0, &len, &mode), -EINVAL);
    ck_assert_int_eq(tc_encode(raw, n, 4, 1, NULL, 0, NULL, dst, tc_bound(n), &len, &mode), 0);
    ck_assert_uint_ge(tc_bound(0), 4 + 8 * 5);
    for (size_t k = 0; k < 40; k++) ck_assert_uint_ge(tc_bound(k), k + 4 + 12 + 4 + 5 + 8 * 5);
    /* Width 0 or 16: coded as bytes. */
    ck_assert_int_eq(tc_encode(raw, n, 0, 1, NULL, 0, NULL, dst, tc_bound(n), &len, &mode), 0);
    ck_assert_uint_eq(dst[1], 1);
    ck_assert_int_eq(tc_encode(raw, n, 16, 0, NULL, 0, NULL, dst, tc_bound(n), &len, &mode), 0);
    ck_assert_uint_eq(dst[1], 1);
    free(dst);
    free(raw);
}
END_TEST

/* Scratch memory is per thread: concurrent encodes and decodes of blocks of
** different sizes must not disturb each other. Threads count their own
** failures (check's asserts belong to the test's main thread). */
struct thr {
    unsigned id;
    int failures;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    for (unsigned it = 0; it < 12; it++) {
        size_t n = (size_t)(4 * KiB) << ((t->id + it) % 7); /* 4 KiB .. 256 KiB */
        unsigned w = 1u << ((t->id + it) % 4);
        uint8_t *raw = malloc(n), *base = malloc(n), *out = malloc(n);
        size_t cap = tc_bound(n), len;
        uint8_t *st = malloc(cap);
        if (!raw || !base || !out || !st) {
            t->failures++;
            break;
        }
        gen_weights(raw, n, w, t->id * 100 + it);
        memcpy(base, raw, n);
        perturb(base, n, w, 0.3, 2, it);
        uint64_t h = XXH3_64bits(base, n);
        int mode;
        const uint8_t *b = it % 2 ? base : NULL;
        if (tc_encode(raw, n, w, 1, b, h, NULL, st, cap, &len, &mode) != 0 ||
            tc_decode(st, len, b, h, out, n) != 0 || memcmp(out, raw, n) != 0)
            t->failures++;
        free(st);
        free(out);
        free(base);
        free(raw);
    }
    return NULL;
}

START_TEST(test_tc_threads)
{
    pthread_t th[4];
    struct thr t[4];
    for (unsigned i = 0; i < 4; i++) {
        t[i] = (struct thr){i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (unsigned i = 0; i < 4; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_msg(t[i].failures == 0, "thread %u: %d failed round trips", i, t[i].failures);
    }
}
END_TEST

/* ---- realistic ratios ---- */

START_TEST(test_tc_realistic_bf16)
{
    size_t n = MiB, cnt = n / 2;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    gen_weights(base, n, 2, 2024); /* N(0, 0.02) rounded to bf16 */
    struct tc_res sa = tc_rt(base, n, 2, 1, NULL, NULL);
    double ratio = (double)n / (double)sa.len;
    fprintf(stderr, "bf16 N(0,0.02) standalone: %zu -> %zu bytes, ratio %.3f\n", n, sa.len, ratio);
    ck_assert_msg(ratio > 1.3, "standalone ratio %.3f", ratio);
    /* Plane 1 (exponent after the rotation) is entropy coded, plane 0
    ** (mantissa and sign) is incompressible and kept raw. */
    ck_assert_int_eq(sa.codecs[1], 0);
    ck_assert_int_eq(sa.codecs[2], 1);

    /* Truncated instead of rounded: about the same. */
    uint64_t s = ut_seed(2025);
    for (size_t i = 0; i < cnt; i++) {
        float f = (float)(0.02 * ut_gauss(&s));
        uint32_t u;
        memcpy(&u, &f, 4);
        wrw(raw + 2 * i, 2, u >> 16);
    }
    struct tc_res tr = tc_rt(raw, n, 2, 1, NULL, NULL);
    ck_assert_msg((double)n / (double)tr.len > 1.3, "truncated: %zu", tr.len);

    /* Fine-tuning step: 30% of the elements move by one ulp either way. */
    memcpy(raw, base, n);
    size_t moved = 0;
    s = ut_seed(7);
    for (size_t i = 0; i < cnt; i++) {
        if (ut_unif(&s) > 0.3) continue;
        uint64_t v = rdw(raw + 2 * i, 2);
        if ((v & 0x7FFF) == 0 || (v & 0x7FFF) >= 0x7F7F) continue; /* keep off zero and inf */
        wrw(raw + 2 * i, 2, ut_rand(&s) & 1 ? v + 1 : v - 1);
        moved++;
    }
    ck_assert_uint_gt(moved, cnt / 4);
    struct tc_res d = tc_rt(raw, n, 2, 1, base, NULL);
    double dr = (double)n / (double)d.len;
    fprintf(stderr, "bf16 30%% +-1 ulp delta: %zu -> %zu bytes (mode %d), ratio %.2f\n", n, d.len,
            d.mode, dr);
    ck_assert_int_ne(d.mode, TC_STANDALONE);
    ck_assert_msg(dr > 4.0, "delta ratio %.2f", dr);
    for (size_t oi = 0; oi < NOPTS; oi++) {
        struct tc_res r = tc_rt(raw, n, 2, 1, base, &all_opts[oi]);
        if (all_opts[oi].delta != TC_DELTA_XOR)
            ck_assert_msg((double)n / (double)r.len > 4.0, "opt %zu: %zu bytes", oi, r.len);
    }
    /* Realistic f32 too: sign/mantissa planes raw, exponent plane coded. */
    uint8_t *f = ut_xmalloc(n);
    gen_weights(f, n, 4, 77);
    struct tc_res r4 = tc_rt(f, n, 4, 1, NULL, NULL);
    ck_assert_msg(r4.len < n * 9 / 10, "f32: %zu", r4.len);
    ck_assert_int_eq(r4.codecs[4], 1);
    for (int k = 1; k <= 3; k++) ck_assert_int_eq(r4.codecs[k], 0);
    free(f);
    free(raw);
    free(base);
}
END_TEST

/* One optimizer step of about the same size for every weight: many ulps
** for small weights, none for large ones. The grouped mode must win, by a
** margin, over the best single-table delta, and round-trip. */
START_TEST(test_tc_grouped)
{
    size_t cnt = 512 * 1024, n = 2 * cnt;
    uint8_t *base = ut_xmalloc(n), *raw = ut_xmalloc(n);
    uint64_t s = ut_seed(31);
    for (size_t i = 0; i < cnt; i++) {
        float w = (float)(0.02 * ut_gauss(&s)), step = (float)(2e-4 * ut_gauss(&s));
        float nw = w + step;
        wrw(base + 2 * i, 2, ut_bf16f(w));
        wrw(raw + 2 * i, 2, ut_bf16f(nw));
    }
    unsigned long seen = grouped_seen;
    struct tc_res g = tc_rt(raw, n, 2, 1, base, NULL);
    struct tc_opts flat = {TC_DELTA_BEST, 0, 1};
    struct tc_res f = tc_rt(raw, n, 2, 1, base, &flat);
    fprintf(stderr, "bf16 constant-size steps: grouped %zu bytes, single tables %zu (mode %d)\n",
            g.len, f.len, f.mode);
    ck_assert_int_eq(g.mode, TC_GROUPED);
    ck_assert_uint_gt(grouped_seen, seen);
    ck_assert_msg(g.len < f.len * 95 / 100, "grouped %zu vs %zu", g.len, f.len);
    /* Group sizes that sum right but disagree with the base are refused. */
    size_t cap = tc_bound(n), len;
    int mode;
    uint8_t *st = ut_xmalloc(cap), *out = ut_xmalloc(n);
    uint64_t h = XXH3_64bits(base, n);
    ck_assert_int_eq(tc_encode(raw, n, 2, 1, base, h, NULL, st, cap, &len, &mode), 0);
    ck_assert_int_eq(mode, TC_GROUPED);
    ck_assert_int_eq(tc_decode(st, len, base, h, out, n), 0);
    unsigned ng = st[12];
    ck_assert_uint_ge(ng, 2);
    uint8_t *sz = st + 13 + (ng - 1);
    put32(sz, get32(sz) + 1);
    put32(sz + 4, get32(sz + 4) - 1);
    ck_assert_int_eq(tc_decode(st, len, base, h, out, n), -EIO);
    free(st);
    free(out);
    /* A base with two exponents, one group each: every element of the one
    ** moves by an ulp (a dense body), 1 in 64 of the other get random bits
    ** (a sparse body). Grouped, with both body kinds. */
    for (size_t i = 0; i < cnt; i++) wrw(base + 2 * i, 2, (i & 1) ? 0x3c00 : 0x3c80);
    memcpy(raw, base, n);
    for (size_t i = 0; i < cnt; i++) {
        uint64_t b = rdw(base + 2 * i, 2);
        if (i & 1) wrw(raw + 2 * i, 2, b + 1);
        else if (ut_rand(&s) % 64 == 0) wrw(raw + 2 * i, 2, b ^ (1 + ut_rand(&s) % 0x7fff));
    }
    unsigned long dense = group_bodies[TC_DENSE], sparse = group_bodies[TC_SPARSE];
    ck_assert_int_eq(tc_rt(raw, n, 2, 1, base, NULL).mode, TC_GROUPED);
    ck_assert_uint_gt(group_bodies[TC_DENSE], dense);
    ck_assert_uint_gt(group_bodies[TC_SPARSE], sparse);
    /* The smallest groupable block, every width, elements over 16 exponents
    ** (a group each), each group a mix of changed and unchanged with its
    ** own change (one byte value in its own byte): grouped, and within
    ** tc_bound (tc_rt checks the guard). */
    for (unsigned w = 2; w <= 8; w *= 2) {
        size_t m = 32768, c = m / w;
        uint8_t *bb = ut_xmalloc(m), *rr = ut_xmalloc(m);
        for (size_t i = 0; i < c; i++) {
            uint64_t v = ut_rand(&s) & wmask(w);
            uint64_t e = (uint64_t)(i % 16) << (8 * w - 9);
            v = (v & ~(0xFFull << (8 * w - 9))) | e;
            wrw(bb + w * i, w, v);
            uint64_t d = (uint64_t)(1 + i % 16 * 15) << (8 * (i % 16 % w));
            wrw(rr + w * i, w, (ut_rand(&s) & 1) ? v ^ d : v);
        }
        ck_assert_int_eq(tc_rt(rr, m, w, 1, bb, NULL).mode, TC_GROUPED);
        free(bb), free(rr);
    }
    /* Too small to group, or not floats: never grouped (as floats, this
    ** data was). */
    ck_assert_int_ne(tc_rt(raw, 8192, 2, 1, base, NULL).mode, TC_GROUPED);
    ck_assert_int_ne(tc_rt(raw, n, 2, 0, base, NULL).mode, TC_GROUPED);
    free(base);
    free(raw);
}
END_TEST

/* All plane codecs occur on the data made here (the parser checked each). */
START_TEST(test_tc_plane_codecs_seen)
{
    memset(plane_codecs, 0, sizeof plane_codecs);
    size_t n = 64 * KiB;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n);
    gen_weights(raw, n, 4, 9);
    tc_rt(raw, n, 4, 1, NULL, NULL);          /* raw + huffman */
    memcpy(base, raw, n);
    tc_rt(raw, n, 4, 1, base, NULL);          /* constant */
    replace_some(base, n, 4, 0.01, 3);
    struct tc_opts o = {TC_DELTA_BEST, 1, 1};
    tc_rt(raw, n, 4, 1, base, &o);            /* mostly-zero planes: zstd */
    /* ... and rANS for a skewed plane among them. */
    for (int c = 0; c < 5; c++) ck_assert_msg(plane_codecs[c] > 0, "codec %d never used", c);
    free(raw);
    free(base);
}
END_TEST

int main(void)
{
    const TTest *const huf_tests[] = {
        test_huf_empty,
        test_huf_one_symbol,
        test_huf_two_symbols,
        test_huf_uniform,
        test_huf_length_limit,
        test_huf_small_sizes,
        test_huf_exponents_1mib,
        test_huf_size_bound,
        test_huf_small_cap,
        test_huf_corrupt_truncate,
        test_huf_corrupt_header,
        test_huf_crafted,
        test_huf_corrupt_streams,
        NULL,
    };
    const TTest *const rans_tests[] = {
        test_rans_every_frequency,
        test_rans_shapes,
        test_rans_corrupt,
        test_bstream_pref,
        NULL,
    };
    const TTest *const tcodec_tests[] = {
        test_tc_matrix_small,
        test_tc_matrix_4k,
        test_tc_matrix_1m,
        test_tc_odd_sizes,
        test_tc_special_floats,
        test_tc_ulp_across_zero,
        test_tc_handmade_ulp,
        test_tc_handmade_sparse,
        test_tc_int_wrap,
        test_tc_never_larger,
        test_tc_never_larger_runs,
        test_tc_wrong_base,
        test_tc_corrupt,
        test_tc_bad_args,
        test_tc_threads,
        test_tc_realistic_bf16,
        test_tc_plane_codecs_seen,
        test_tc_grouped,
        NULL,
    };
    return ut_main("tcodec", (const struct ut_tcase[]){
        {.name = "huf", .timeout = 120, .tests = huf_tests},
        {.name = "rans", .timeout = 120, .tests = rans_tests},
        {.name = "tcodec", .timeout = 300, .tests = tcodec_tests},
        {0},
    });
}
