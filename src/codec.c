/*
** codec.c: block codecs (see codec.h): raw and zstd here, the tensor and
** lossy codecs through tcodec.h and lossy.h, and the widening of a bf16
** base for CODEC_WIDE.
**
** zstd contexts are reused per thread (scratch.h): creating one per block
** would cost more than compressing a small block.
*/
#include "codec.h"
#include "bbuf.h"
#include "common.h"
#include "lossy.h"
#include "tcodec.h"
#include "bstream.h"
#include "scratch.h"

#include <xxhash.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define WIDE_HDR 12 /* CODEC_WIDE: element offset, hash of the base block */

static void *make_cctx(void) { return ZSTD_createCCtx(); }
static void *make_dctx(void) { return ZSTD_createDCtx(); }
static void free_cctx(void *p) { ZSTD_freeCCtx(p); }
static void free_dctx(void *p) { ZSTD_freeDCtx(p); }

static ZSTD_CCtx *thread_cctx(void)
{
    return scratch_obj(SCRATCH_ZSTD_CCTX, make_cctx, free_cctx);
}

static ZSTD_DCtx *thread_dctx(void)
{
    return scratch_obj(SCRATCH_ZSTD_DCTX, make_dctx, free_dctx);
}

size_t codec_bound(size_t raw_len)
{
    return CK_MAX(ZSTD_compressBound(raw_len), tc_bound(raw_len) + WIDE_HDR);
}

/* bf16 elements [off, off + n/4) of base[0..base_len) widened to fp32 into
** out[0..n); -EIO if base does not hold them. */
static int widen(const uint8_t *base, size_t base_len, uint32_t off, uint8_t *out, size_t n)
{
    size_t cnt = n / 4;
    if (n % 4 || (uint64_t)off + cnt > base_len / 2) return -EIO;
    for (size_t i = 0; i < cnt; i++) {
        uint16_t b;
        memcpy(&b, base + 2 * ((size_t)off + i), 2);
        uint32_t f = (uint32_t)b << 16;
        memcpy(out + 4 * i, &f, 4);
    }
    return 0;
}

/* The tensor codec against the smaller-estimated of the block's bases: the
** same block of the previous version, and for fp32 values the bf16 block
** they round to, widened (CODEC_WIDE, whose header goes first). */
static int encode_tensor(const void *raw, size_t raw_len, uint8_t *dst, size_t cap,
                         const struct codec_hint *h, uint8_t *codec, size_t *stored_len,
                         int *delta)
{
    const uint8_t *bases[2];
    uint64_t hashes[2];
    int nb = 0, wide = -1, mode, which;
    if (h->base) bases[nb] = h->base, hashes[nb++] = h->base_hash;
    uint8_t *wbase = NULL;
    if (h->narrow && h->width == 4 && h->is_float && (wbase = bbuf_alloc(raw_len)) &&
        widen(h->narrow, h->narrow_len, h->narrow_off, wbase, raw_len) == 0)
        wide = nb, bases[nb] = wbase, hashes[nb++] = XXH3_64bits(wbase, raw_len);
    size_t hdr = wide >= 0 ? WIDE_HDR : 0;
    /* ulp deltas only: on trained checkpoints XOR deltas store about the
    ** same bytes, and estimating them too slows ingest down. The decoder
    ** takes either. */
    struct tc_opts o = {TC_DELTA_ULP, 0, h->no_group};
    int rc = tc_encode_from(raw, raw_len, h->width, h->is_float, bases, hashes, nb, &o,
                            dst + hdr, cap - hdr, stored_len, &mode, &which);
    bbuf_free(wbase);
    CK_TRY(rc);
    if (mode != TC_STANDALONE && which == wide) {
        ck_put32(dst, h->narrow_off);
        ck_put64(dst + 4, h->narrow_hash);
        *stored_len += WIDE_HDR;
        *codec = CODEC_WIDE;
        *delta = CODEC_BASE_NARROW;
        return 0;
    }
    if (hdr) memmove(dst, dst + hdr, *stored_len);
    *delta = mode != TC_STANDALONE ? CODEC_BASE_SAME : CODEC_BASE_NONE;
    if (*delta || *stored_len < raw_len) {
        *codec = CODEC_TENSOR;
        return 0;
    }
    memcpy(dst, raw, raw_len);
    *codec = CODEC_RAW;
    *stored_len = raw_len;
    return 0;
}

/* Plain bytes that are an array of fp32 or 16-bit floats (a raw tensor in
** a file no parser knows) code better as a tensor, exponents on their own
** plane, than through zstd, and decode several times faster. The width is
** guessed from a sample of every 4 bytes: byte 0 is low mantissa, near
** uniform (structured data, whose matches zstd codes better, is not); byte
** 3 holds an exponent, skewed; byte 1 is another exponent in little-endian
** 16-bit floats, mantissa in fp32. The tensor form is kept if it saves
** 1/SNIFF_GAIN of the block. 0 when dst holds it, -1 to fall back to zstd. */
#define SNIFF_MIN 4096
#define SNIFF_GAIN 16
static int sniff_floats(const uint8_t *raw, size_t raw_len, uint8_t *dst, size_t cap,
                        size_t *stored_len)
{
    if (raw_len < SNIFF_MIN || raw_len % 4) return -1;
    uint32_t h[3][256] = {{0}};
    size_t tot = 0;
    for (size_t i = 0; i + 4 <= raw_len; i += 4 * 16, tot++) {
        h[0][raw[i]]++;
        h[1][raw[i + 1]]++;
        h[2][raw[i + 3]]++;
    }
    double skewed = 0.9 * (double)tot; /* bytes: entropy below 7.2 bits */
    if (bstream_entropy(h[0], tot, tot) < skewed || bstream_entropy(h[2], tot, tot) >= skewed)
        return -1;
    unsigned w = bstream_entropy(h[1], tot, tot) < skewed ? 2 : 4;
    size_t len;
    int mode;
    if (tc_encode(raw, raw_len, w, 1, NULL, 0, NULL, dst, cap, &len, &mode) != 0 ||
        len > raw_len - raw_len / SNIFF_GAIN)
        return -1;
    *stored_len = len;
    return 0;
}

/* Plain bytes: a sniffed float array, else zstd, else raw. */
static int encode_plain(const void *raw, size_t raw_len, void *dst, size_t cap, int level,
                        uint8_t *codec, size_t *stored_len)
{
    if (sniff_floats(raw, raw_len, dst, cap, stored_len) == 0) {
        *codec = CODEC_TENSOR;
        return 0;
    }
    ZSTD_CCtx *c = thread_cctx();
    if (!c) return -ENOMEM;
    size_t n = ZSTD_compressCCtx(c, dst, cap, raw, raw_len, level);
    /* Keep compressed only when it saves at least 1/64 of the block: decoding
    ** a block that barely shrank costs more read time than it saves disk. */
    if (!ZSTD_isError(n) && n < raw_len - raw_len / 64) {
        *codec = CODEC_ZSTD;
        *stored_len = n;
        return 0;
    }
    memcpy(dst, raw, raw_len);
    *codec = CODEC_RAW;
    *stored_len = raw_len;
    return 0;
}

/* Plain bytes with a previous version (h->base): the smaller of their plain
** coding and a tensor-codec delta against that version, of the element
** type h guesses. Both are tried: a header that repeats is a delta of
** almost nothing, one that moved codes better through zstd. */
static int encode_plain_based(const void *raw, size_t raw_len, uint8_t *dst, size_t cap,
                              int level, const struct codec_hint *h, uint8_t *codec,
                              size_t *stored_len, int *delta)
{
    CK_TRY(encode_plain(raw, raw_len, dst, cap, level, codec, stored_len));
    uint8_t *alt = bbuf_alloc(cap), alt_codec;
    if (!alt) return 0; /* the plain form stands */
    struct codec_hint t = *h;
    t.narrow = NULL;
    t.plain = 0;
    size_t alt_len;
    int alt_delta;
    int rc = encode_tensor(raw, raw_len, alt, cap, &t, &alt_codec, &alt_len, &alt_delta);
    if (rc == 0 && alt_delta == CODEC_BASE_SAME && alt_len < *stored_len) {
        memcpy(dst, alt, alt_len);
        *codec = alt_codec;
        *stored_len = alt_len;
        *delta = alt_delta;
    }
    bbuf_free(alt);
    return rc == -ENOMEM ? 0 : rc;
}

int codec_encode(const void *raw, size_t raw_len, void *dst, size_t cap, int level,
                 const struct codec_hint *h, uint8_t *codec, size_t *stored_len,
                 int *delta)
{
    if (cap < codec_bound(raw_len)) return -EINVAL;
    *delta = CODEC_BASE_NONE;
    if (h && h->width && h->plain && h->base)
        return encode_plain_based(raw, raw_len, dst, cap, level, h, codec, stored_len, delta);
    if (h && h->width && !h->plain)
        return encode_tensor(raw, raw_len, dst, cap, h, codec, stored_len, delta);
    return encode_plain(raw, raw_len, dst, cap, level, codec, stored_len);
}

int codec_base_hash(uint8_t codec, const void *src, size_t stored_len, uint64_t *hash)
{
    if (!codec_needs_base(codec, src, stored_len)) return 0;
    size_t at = codec == CODEC_LOSSY ? 8 : 4; /* after the form's own header */
    if (stored_len < at + 8) return -EIO;
    *hash = ck_get64((const uint8_t *)src + at);
    return 1;
}

int codec_needs_base(uint8_t codec, const void *src, size_t stored_len)
{
    if (codec == CODEC_LOSSY) return lossy_needs_base(src, stored_len);
    if (codec == CODEC_WIDE) return 1;
    return codec == CODEC_TENSOR && tc_needs_base(src, stored_len);
}

static int decode_wide(const uint8_t *src, size_t stored_len, void *dst, size_t raw_len,
                       const uint8_t *base, size_t base_len, uint64_t base_hash)
{
    if (stored_len < WIDE_HDR || !base || ck_get64(src + 4) != base_hash) return -EIO;
    uint32_t off = ck_get32(src);
    uint8_t *wbase = bbuf_alloc(raw_len);
    if (!wbase) return -ENOMEM;
    int rc = widen(base, base_len, off, wbase, raw_len);
    if (rc == 0)
        rc = tc_decode(src + WIDE_HDR, stored_len - WIDE_HDR, wbase, XXH3_64bits(wbase, raw_len),
                       dst, raw_len);
    bbuf_free(wbase);
    return rc;
}

int codec_decode(uint8_t codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len, const uint8_t *base, uint64_t base_hash)
{
    return codec_decode_based(codec, src, stored_len, dst, raw_len, base, raw_len, base_hash);
}

int codec_decode_based(uint8_t codec, const void *src, size_t stored_len, void *dst,
                       size_t raw_len, const uint8_t *base, size_t base_len,
                       uint64_t base_hash)
{
    if (base && base_len != raw_len && codec != CODEC_WIDE) return -EIO;
    switch (codec) {
    case CODEC_RAW:
        if (stored_len != raw_len) return -EIO;
        memmove(dst, src, raw_len);
        return 0;
    case CODEC_ZSTD: {
        ZSTD_DCtx *d = thread_dctx();
        if (!d) return -ENOMEM;
        size_t n = ZSTD_decompressDCtx(d, dst, raw_len, src, stored_len);
        if (ZSTD_isError(n) || n != raw_len) return -EIO;
        return 0;
    }
    case CODEC_TENSOR:
        return tc_decode(src, stored_len, base, base_hash, dst, raw_len);
    case CODEC_LOSSY:
        return lossy_decode(src, stored_len, base, base_hash, dst, raw_len);
    case CODEC_WIDE:
        return decode_wide(src, stored_len, dst, raw_len, base, base_len, base_hash);
    default:
        return -EINVAL;
    }
}

const char *codec_name(uint8_t codec)
{
    switch (codec) {
    case CODEC_RAW: return "raw";
    case CODEC_ZSTD: return "zstd";
    case CODEC_TENSOR: return "tensor";
    case CODEC_LOSSY: return "lossy";
    case CODEC_WIDE: return "wide";
    default: return "?";
    }
}
