/*
** fuzz_codec.c: libFuzzer target for the block codecs above tcodec: the
** lossy codec (lossy.h) and CODEC_WIDE (codec.h), whose stored forms are
** parsed when a block is read.
**
** Byte 0 picks the dtype, the lossy kind and the bits; byte 1 the pruning
** threshold; byte 2 the element offset of the narrow base. Properties:
** (1) lossy round trip: the rest of the input as raw values (and, shifted,
** as a base) encodes, unless refused (-E2BIG, -EINVAL), to a form that
** decodes to exactly the reconstruction the encoder reported; (2) CODEC_WIDE
** round trip: the input as fp32 values encodes against a bf16 base that
** holds their rounding, and decodes back exactly; (3) plain bytes with a
** base (codec_hint.plain): the input, against itself shifted and with a
** few bytes changed, under the element type byte 0 names, encodes to
** plain or delta form and decodes back exactly; (4) robustness: the input
** as a stored form of every codec id, against a base whose hash is the one
** the input names, decodes to 0 or an error, without touching memory
** outside the buffers (ASan).
*/
#include "../../src/codec.h"
#include "../../src/lossy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static void lossy_roundtrip(const uint8_t *d, const uint8_t *x, size_t len)
{
    static const size_t widths[] = {2, 2, 4};
    int dt = d[0] % 3;
    len -= len % widths[dt];
    uint8_t *base = malloc(len + 1), *dst = malloc(lossy_bound(len) + 1);
    uint8_t *recon = malloc(len + 1), *out = malloc(len + 1), *mask = calloc(len / 8 + 2, 1);
    for (size_t i = 0; i < len; i++) base[i] = x[(i + 1) % len];
    struct lossy_params p = {.kind = (d[0] >> 2) % 3, .bits = (d[0] >> 4) % 9,
                             .threshold = (float)d[1] / 64.0f, .mask = NULL};
    const uint8_t *b = p.kind == LOSSY_KMEANS ? NULL : base;
    size_t sl;
    struct lossy_err err;
    int rc = lossy_encode(x, len, dt, b, 0x55, &p, dst, lossy_bound(len), &sl, recon, mask, &err);
    REQUIRE(rc == 0 || rc == -E2BIG || rc == -EINVAL);
    if (rc == 0) {
        REQUIRE(sl <= lossy_bound(len));
        REQUIRE(lossy_decode(dst, sl, b, 0x55, out, len) == 0);
        REQUIRE(memcmp(out, recon, len) == 0);
    }
    free(base), free(dst), free(recon), free(out), free(mask);
}

static uint16_t bf16_of(uint32_t f)
{
    if ((f >> 23 & 0xff) == 0xff) return (uint16_t)(f >> 16);
    return (uint16_t)((f + 0x7fff + (f >> 16 & 1)) >> 16);
}

static void wide_roundtrip(const uint8_t *d, const uint8_t *x, size_t len)
{
    len -= len % 4;
    size_t cnt = len / 4, off = d[2], nlen = 2 * (off + cnt);
    uint16_t *narrow = malloc(nlen + 2);
    uint8_t *st = malloc(codec_bound(len)), *out = malloc(len + 1);
    for (size_t i = 0; i < off; i++) narrow[i] = (uint16_t)(i * 31);
    for (size_t i = 0; i < cnt; i++) {
        uint32_t f;
        memcpy(&f, x + 4 * i, 4);
        narrow[off + i] = bf16_of(f);
    }
    struct codec_hint h = {4, 1, NULL, 0, (const uint8_t *)narrow, nlen, 0x1234, (uint32_t)off, 0, 0};
    uint8_t codec;
    size_t sl;
    int delta;
    REQUIRE(codec_encode(x, len, st, codec_bound(len), 1, &h, &codec, &sl, &delta) == 0);
    const uint8_t *base = delta == CODEC_BASE_NARROW ? (const uint8_t *)narrow : NULL;
    REQUIRE(codec_decode_based(codec, st, sl, out, len, base, base ? nlen : 0, 0x1234) == 0);
    REQUIRE(memcmp(out, x, len) == 0);
    free(narrow), free(st), free(out);
}

static void plain_roundtrip(const uint8_t *d, const uint8_t *x, size_t len)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    uint8_t *base = malloc(len + 1), *st = malloc(codec_bound(len)), *out = malloc(len + 1);
    for (size_t i = 0; i < len; i++) base[i] = x[(i + d[2] % 4) % len];
    for (size_t i = 0; i < len; i += 97) base[i] ^= d[1];
    struct codec_hint h = {.width = widths[d[0] & 3], .is_float = d[0] >> 2 & 1, .base = base,
                           .base_hash = 0x77, .plain = 1};
    uint8_t codec;
    size_t sl;
    int delta;
    REQUIRE(codec_encode(x, len, st, codec_bound(len), 1, &h, &codec, &sl, &delta) == 0);
    REQUIRE(delta == CODEC_BASE_NONE || delta == CODEC_BASE_SAME);
    REQUIRE(codec_decode(codec, st, sl, out, len, delta ? base : NULL, 0x77) == 0);
    REQUIRE(memcmp(out, x, len) == 0);
    free(base), free(st), free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 4) return 0;
    const uint8_t *x = d + 3;
    size_t len = n - 3;
    lossy_roundtrip(d, x, len);
    wide_roundtrip(d, x, len);
    plain_roundtrip(d, x, len);
    /* The input as a stored form of every codec, raw length from byte 1. */
    size_t outn = (size_t)d[1] * 16 + (len & 15);
    uint8_t *out = malloc(outn + 1), *base = calloc(outn + 1024, 1);
    for (uint8_t c = 0; c <= CODEC_MAX + 1; c++) {
        /* The base hash the stored form claims, so decoding gets past the
        ** check into the planes (tensor and wide: at 4, lossy: at 8). */
        size_t at = c == CODEC_LOSSY ? 8 : 4;
        uint64_t bh = 0;
        if (len >= at + 8) memcpy(&bh, x + at, 8);
        int rc = codec_decode_based(c, x, len, out, outn, base, c == CODEC_WIDE ? 1024 : outn, bh);
        REQUIRE(rc == 0 || rc == -EIO || rc == -EINVAL || rc == -ENOMEM);
    }
    free(out), free(base);
    return 0;
}
