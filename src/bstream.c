/*
** bstream.c: byte streams stored raw, constant, Huffman, rANS or zstd (see
** bstream.h).
*/
#include "bstream.h"
#include "common.h"
#include "huf.h"
#include "rans.h"

#include <math.h>
#include <string.h>
#include <zstd.h>

#define SAMPLE_RUN 256
#define SAMPLE_EVERY 2048

enum { PL_RAW = 0, PL_HUF = 1, PL_ZSTD = 2, PL_CONST = 3, PL_RANS = 4 };

/* rANS decodes several times slower than Huffman: under BSTREAM_FAST it is
** taken only where this much smaller, so that the exponent planes of
** trained weights, which Huffman codes close to their entropy, keep
** Huffman's fast decode. */
#define RANS_GAIN 0.97

static double rans_gain(int pref) { return pref == BSTREAM_SMALL ? 1.0 : RANS_GAIN; }

/* The most a coded stream of n bytes may take (bstream.h): it must save
** 1/64, or under BSTREAM_FAST a tenth. */
static size_t most(size_t n, int pref) { return n - n / (pref == BSTREAM_SMALL ? 64 : 10); }

double bstream_entropy(const uint32_t hist[256], size_t tot, size_t cnt)
{
    if (tot == 0) return 0;
    double h = 0;
    for (int s = 0; s < 256; s++)
        if (hist[s]) h -= hist[s] * log2((double)hist[s] / (double)tot);
    return h / 8.0 * ((double)cnt / (double)tot);
}

double bstream_cost(const uint32_t hist[256], size_t tot, size_t n, int pref)
{
    if (n == 0 || tot == 0) return BSTREAM_HDR;
    /* One log a symbol: estimates run for every group of every block. */
    float bits = 0, ent = 0, lt = log2f((float)tot);
    int lo = -1, hi = 0;
    for (int s = 0; s < 256; s++) {
        if (!hist[s]) continue;
        float l = lt - log2f((float)hist[s]);
        ent += (float)hist[s] * l;
        bits += (float)hist[s] * (l < 1 ? 1 : l);
        if (lo < 0) lo = s;
        hi = s;
    }
    if (lo == hi) return BSTREAM_HDR + 1;
    double scale = (double)n / (double)tot / 8;
    /* Huffman: the short table: range, nibbles, stream lengths (huf.h). */
    double huf = 3 + (hi - lo + 2) / 2 + 6 + bits * scale;
    /* rANS: the entropy, a varint a frequency, four states (rans.h). */
    double rans = 2 + 1.5 * (hi - lo + 1) + (n >= RANS_SPLIT ? 20 : 5) + ent * scale;
    double coded = rans < rans_gain(pref) * huf ? rans : huf;
    return BSTREAM_HDR + (coded <= (double)most(n, pref) ? coded : (double)n);
}

static int zstd_stream(const uint8_t *p, size_t cnt, uint8_t *dst, size_t cap, size_t *len)
{
    size_t r = ZSTD_compress(dst, cap, p, cnt, 1);
    if (ZSTD_isError(r)) return -1;
    *len = r;
    return 0;
}

size_t bstream_put(const uint8_t *p, size_t cnt, uint8_t *dst, size_t cap, int pref)
{
    uint8_t codec = PL_RAW;
    size_t len = cnt;
    uint8_t *out = dst + BSTREAM_HDR;
    uint32_t hist[256];
    if (cnt >= 4 * SAMPLE_EVERY) {
        /* Incompressible streams (mantissa bytes) leave after a sample. */
        uint32_t sh[256] = {0};
        size_t tot = 0;
        for (size_t a = 0; a + SAMPLE_RUN <= cnt; a += SAMPLE_EVERY, tot += SAMPLE_RUN)
            for (size_t i = a; i < a + SAMPLE_RUN; i++) sh[p[i]]++;
        double floor = pref == BSTREAM_SMALL ? 0.97 * (double)cnt : (double)most(cnt, pref);
        if (bstream_entropy(sh, tot, cnt) > floor) goto raw;
    }
    huf_hist(p, cnt, hist);
    uint32_t top = 0;
    int nsym = 0;
    for (int s = 0; s < 256; s++) {
        top = CK_MAX(top, hist[s]);
        nsym += hist[s] != 0;
    }
    if (nsym == 1) {
        codec = PL_CONST;
        out[0] = p[0];
        len = 1;
        goto done;
    }
    size_t hs = huf_size(hist, cnt), zs = 0;
    size_t room = cap - BSTREAM_HDR;
    uint16_t freq[256];
    double rs = rans_norm(hist, cnt, freq) == 0 ? rans_cost(hist, cnt, cnt, freq) : (double)cnt;
    size_t most_len = most(cnt, pref);
    int use_rans = rs < rans_gain(pref) * (double)(hs ? hs : cnt) && rs <= (double)most_len;
    double best = use_rans ? rs : (double)(hs ? CK_MIN(hs, cnt) : cnt);
    /* A dominant byte means runs; zstd codes a run in a few bytes. */
    if (top > cnt / 2 + cnt / 8 && zstd_stream(p, cnt, out, room, &zs) == 0 &&
        (double)zs < best && zs <= most_len) {
        codec = PL_ZSTD;
        len = zs;
        goto done;
    }
    if (use_rans) {
        size_t r = rans_encode(p, cnt, freq, out, CK_MIN(room, cnt));
        if (r) {
            codec = PL_RANS;
            len = r;
            goto done;
        }
    }
    if (hs && hs <= most_len) {
        size_t h = huf_encode(p, cnt, hist, out, room);
        if (h && h <= most_len) {
            codec = PL_HUF;
            len = h;
            goto done;
        }
    }
raw:
    codec = PL_RAW;
    len = cnt;
    memcpy(out, p, cnt);
done:
    dst[0] = codec;
    ck_put32(dst + 1, (uint32_t)len);
    return BSTREAM_HDR + len;
}

long bstream_get_mask(const uint8_t *src, size_t avail, uint8_t *mask, size_t cnt, size_t c)
{
    long r = bstream_get(src, avail, mask, (cnt + 7) / 8);
    if (r < 0) return r;
    size_t pop = 0;
    for (size_t i = 0; i < (cnt + 7) / 8; i++) pop += (size_t)__builtin_popcount(mask[i]);
    return pop == c && !(cnt % 8 && mask[cnt / 8] >> (cnt % 8)) ? r : -EIO;
}

long bstream_get(const uint8_t *src, size_t avail, uint8_t *p, size_t cnt)
{
    const uint8_t *at;
    long r = bstream_view(src, avail, p, cnt, &at);
    if (r >= 0 && at != p) memcpy(p, at, cnt);
    return r;
}

long bstream_view(const uint8_t *src, size_t avail, uint8_t *p, size_t cnt, const uint8_t **at)
{
    if (avail < BSTREAM_HDR) return -EIO;
    uint8_t codec = src[0];
    size_t len = ck_get32(src + 1);
    if (len > avail - BSTREAM_HDR) return -EIO;
    const uint8_t *in = src + BSTREAM_HDR;
    *at = p;
    switch (codec) {
    case PL_RAW:
        if (len != cnt) return -EIO;
        *at = in;
        break;
    case PL_CONST:
        if (len != 1) return -EIO;
        memset(p, in[0], cnt);
        break;
    case PL_HUF:
        CK_TRY(huf_decode(in, len, p, cnt));
        break;
    case PL_RANS:
        CK_TRY(rans_decode(in, len, p, cnt));
        break;
    case PL_ZSTD: {
        size_t r = ZSTD_decompress(p, cnt, in, len);
        if (ZSTD_isError(r) || r != cnt) return -EIO;
        break;
    }
    default:
        return -EIO;
    }
    return (long)(BSTREAM_HDR + len);
}
