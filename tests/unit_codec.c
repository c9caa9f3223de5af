/*
** unit_codec.c: tests of the block codecs (src/codec.h).
**
** Round trips of raw and zstd blocks of many sizes and kinds of data, the
** choice of codec (incompressible data stays raw, compressible data becomes
** zstd, a stored form is never larger than the raw one), and the error paths:
** corrupted or truncated zstd frames and wrong raw lengths give -EIO without
** writing past the destination, an unknown codec id gives -EINVAL, and a
** destination smaller than codec_bound gives -EINVAL. CODEC_WIDE: fp32
** values coded against the bf16 block they round to, chosen over a worse
** same-length base, rebuilt exactly (NaN and infinities included), refused
** against a base that does not hold their elements.
*/
#include "../src/codec.h"
#include "unit_util.h"

static int dl; /* codec_encode reports delta use here; plain blocks never are */

#include <math.h>
#include <zstd.h>

#define MiB (1u << 20)

enum { DATA_RANDOM, DATA_ZERO, DATA_REPEAT, DATA_TEXT, DATA_HALF, DATA_KINDS };

static void fill(uint8_t *p, size_t n, int kind, uint64_t seed)
{
    switch (kind) {
    case DATA_RANDOM:
        ut_fill_random(p, n, seed);
        break;
    case DATA_ZERO:
        memset(p, 0, n);
        break;
    case DATA_REPEAT: /* a 251-byte random pattern repeated */
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((i % 251) * 131 + seed);
        break;
    case DATA_TEXT: {
        static const char words[] = "checkpoint tensor layer weight gradient epoch ";
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)words[(i * 7 + seed) % (sizeof words - 1)];
        break;
    }
    case DATA_HALF: /* first half random, second half zeros */
        ut_fill_random(p, n / 2, seed);
        memset(p + n / 2, 0, n - n / 2);
        break;
    }
}

/* Encode, check the invariants of the stored form, decode, compare. Returns
** the codec chosen; *stored_out gets the stored length. */
static uint8_t roundtrip(const uint8_t *raw, size_t n, size_t *stored_out)
{
    size_t cap = codec_bound(n);
    ck_assert_uint_ge(cap, n);
    uint8_t *st = ut_xmalloc(cap);
    uint8_t codec = 0xEE;
    size_t stored = (size_t)-1;
    dl = -1;
    ck_assert_int_eq(codec_encode(raw, n, st, cap, 1, NULL, &codec, &stored, &dl), 0);
    ck_assert_int_eq(dl, 0); /* no hint: never a delta */
    ck_assert_msg(codec == CODEC_RAW || codec == CODEC_ZSTD || codec == CODEC_TENSOR,
                  "codec %u", codec);
    ck_assert(!codec_needs_base(codec, st, stored));
    ck_assert_msg(stored <= n, "stored %zu > raw %zu", stored, n);
    if (codec == CODEC_RAW) {
        ck_assert_uint_eq(stored, n);
        ck_assert(n == 0 || memcmp(st, raw, n) == 0);
    }
    /* Decode into a buffer with a guard zone to catch overruns. */
    uint8_t *out = ut_xmalloc(n + UT_GUARD);
    memset(out, 0xA5, n + UT_GUARD);
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, NULL, 0), 0);
    ck_assert(n == 0 || memcmp(out, raw, n) == 0);
    ut_check_guard(out + n, 0xA5, "codec_decode");
    free(out);
    free(st);
    if (stored_out) *stored_out = stored;
    return codec;
}

/* bf16-like values: random mantissa, exponent from a narrow range. */
static void fill_bf16(uint8_t *p, size_t n, uint64_t seed)
{
    ut_fill_random(p, n, seed);
    for (size_t i = 1; i < n; i += 2) p[i] = (uint8_t)(0x3C + (p[i] & 1)); /* sign 0 */
}

/* fp32 values beside the bf16 block they round to (a narrow base at an
** element offset) code as CODEC_WIDE, chosen over a worse same-length base;
** the base is checked on decode. */
START_TEST(test_wide)
{
    const size_t cnt = 65536, n = 4 * cnt, off = 1000; /* bf16 block: 2 * cnt elements */
    float *raw = ut_xmalloc(n), *prev = ut_xmalloc(n);
    uint16_t *narrow = ut_xmalloc(4 * cnt);
    uint8_t *st = ut_xmalloc(codec_bound(n)), *out = ut_xmalloc(n);
    uint64_t rs = ut_seed(11);
    for (size_t i = 0; i < 2 * cnt; i++) narrow[i] = ut_bf16(0x3c000000u + (uint32_t)i);
    for (size_t i = 0; i < cnt; i++) {
        raw[i] = (float)ut_gauss(&rs) * 0.02f;
        prev[i] = raw[i] + (float)ut_gauss(&rs) * 1e-4f; /* a previous version: all changed */
    }
    raw[5] = NAN, raw[6] = INFINITY, raw[7] = -0.0f;
    for (size_t i = 0; i < cnt; i++) narrow[off + i] = ut_bf16f(raw[i]);
    struct codec_hint h = {4, 1, (uint8_t *)prev, 0x77, (uint8_t *)narrow, 4 * cnt, 0x99, off, 0, 0};
    uint8_t codec;
    size_t stored;
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, &h, &codec, &stored, &dl), 0);
    ck_assert_uint_eq(codec, CODEC_WIDE);
    ck_assert_int_eq(dl, CODEC_BASE_NARROW);
    ck_assert_uint_lt(stored, n * 56 / 100); /* the low half and a rounding bit */
    ck_assert(codec_needs_base(codec, st, stored));
    ck_assert_str_eq(codec_name(codec), "wide");
    ck_assert_int_eq(
        codec_decode_based(codec, st, stored, out, n, (uint8_t *)narrow, 4 * cnt, 0x99), 0);
    ck_assert(memcmp(out, raw, n) == 0);
    /* A base of another hash, too short to hold the elements, missing, or
    ** whose bytes changed. */
    ck_assert_int_eq(
        codec_decode_based(codec, st, stored, out, n, (uint8_t *)narrow, 4 * cnt, 0x98), -EIO);
    ck_assert_int_eq(
        codec_decode_based(codec, st, stored, out, n, (uint8_t *)narrow, 2 * cnt, 0x99), -EIO);
    ck_assert_int_eq(codec_decode_based(codec, st, stored, out, n, NULL, 0, 0x99), -EIO);
    narrow[off + 3] ^= 1;
    ck_assert_int_eq(
        codec_decode_based(codec, st, stored, out, n, (uint8_t *)narrow, 4 * cnt, 0x99), -EIO);
    /* Values that do not round to the narrow base: the same-length base wins. */
    for (size_t i = 0; i < cnt; i++) narrow[off + i] = (uint16_t)(narrow[off + i] + 0x300);
    memcpy(prev, raw, n);
    ((uint32_t *)prev)[9] ^= 1;
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, &h, &codec, &stored, &dl), 0);
    ck_assert_uint_eq(codec, CODEC_TENSOR);
    ck_assert_int_eq(dl, CODEC_BASE_SAME);
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, (uint8_t *)prev, 0x77), 0);
    ck_assert(memcmp(out, raw, n) == 0);
    /* Codecs other than wide refuse a base of another length. */
    ck_assert_int_eq(codec_decode_based(codec, st, stored, out, n, (uint8_t *)prev, n - 4, 0x77),
                     -EIO);
    free(raw), free(prev), free(narrow), free(st), free(out);
}
END_TEST

/* A hint selects the tensor codec; with a base that differs in a few
** elements the block becomes a delta that decodes only against that base. */
START_TEST(test_tensor_hint)
{
    size_t n = 1 << 16;
    uint8_t *raw = ut_xmalloc(n), *base = ut_xmalloc(n), *out = ut_xmalloc(n);
    uint8_t *st = ut_xmalloc(codec_bound(n));
    fill_bf16(raw, n, 7);
    memcpy(base, raw, n);
    for (size_t i = 0; i < n; i += 512) base[i] ^= 1; /* 1 element in 256 differs */
    uint8_t codec;
    size_t stored;
    struct codec_hint h = {2, 1, NULL, 0, NULL, 0, 0, 0, 0, 0};
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, &h, &codec, &stored, &dl), 0);
    ck_assert_uint_eq(codec, CODEC_TENSOR);
    ck_assert_int_eq(dl, 0);
    ck_assert_uint_lt(stored, n);
    size_t standalone = stored;
    ck_assert(!codec_needs_base(codec, st, stored));
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, NULL, 0), 0);
    ck_assert(memcmp(out, raw, n) == 0);

    h.base = base;
    h.base_hash = 0x1234;
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, &h, &codec, &stored, &dl), 0);
    ck_assert_uint_eq(codec, CODEC_TENSOR);
    ck_assert_int_eq(dl, 1);
    ck_assert_uint_lt(stored, standalone / 4);
    ck_assert(codec_needs_base(codec, st, stored));
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, NULL, 0), -EIO);
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, base, 0x9999), -EIO);
    ck_assert_int_eq(codec_decode(codec, st, stored, out, n, base, 0x1234), 0);
    ck_assert(memcmp(out, raw, n) == 0);
    free(raw), free(base), free(out), free(st);
}
END_TEST

/* A plain block with a base (codec_hint.plain): the smaller of its plain
** coding and a delta. JSON text that repeats but for a few bytes becomes a
** small delta; against an unrelated base, it stays zstd; without a base
** the hint changes nothing. */
START_TEST(test_plain_based)
{
    size_t n = 6000, len[3];
    char *raw = ut_xmalloc(n), *base = ut_xmalloc(n), *other = ut_xmalloc(n);
    char *out = ut_xmalloc(n);
    size_t k = 0;
    for (int i = 0; k + 80 < n; i++)
        k += (size_t)sprintf(raw + k, "\"layer.%d.weight\":{\"dtype\":\"BF16\",\"data_offsets\":[%d,%d]},",
                             i, i * 4096, i * 4096 + 4096);
    memset(raw + k, ' ', n - k);
    memcpy(base, raw, n);
    base[100] = 'X', base[3000] = 'Y';
    ut_fill_random((uint8_t *)other, n, 9);
    uint8_t *st = ut_xmalloc(codec_bound(n)), codec[3];
    const char *bases[3] = {NULL, base, other};
    for (int b = 0; b < 3; b++) {
        struct codec_hint h = {1, 0, (const uint8_t *)bases[b], 0x42, NULL, 0, 0, 0, 0, 1};
        ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 3, &h, &codec[b], &len[b], &dl),
                         0);
        ck_assert_int_eq(codec_needs_base(codec[b], st, len[b]), b == 1);
        ck_assert_int_eq(dl, b == 1 ? CODEC_BASE_SAME : CODEC_BASE_NONE);
        ck_assert_int_eq(codec_decode(codec[b], st, len[b], out, n, (const uint8_t *)bases[b],
                                      0x42), 0);
        ck_assert(memcmp(out, raw, n) == 0);
    }
    ck_assert_uint_eq(codec[0], CODEC_ZSTD);
    ck_assert_uint_eq(codec[1], CODEC_TENSOR);
    ck_assert_uint_eq(codec[2], CODEC_ZSTD);
    ck_assert_uint_eq(len[2], len[0]);
    ck_assert_uint_lt(len[1], 64);
    ck_assert_uint_lt(len[1] * 8, len[0]);
    free(raw), free(base), free(other), free(out), free(st);
}
END_TEST

static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 13, 63, 64, 65, 127, 255, 1000,
                               1023, 4095, 4097, 12345, 65535, 65537, 99991};

/* codec_hint.no_group keeps a delta that would be grouped (tcodec mode 3,
** the first byte of a tensor record) in a single-table form; both decode. */
START_TEST(test_no_group)
{
    size_t cnt = 256 * 1024, n = 2 * cnt;
    uint16_t *base = ut_xmalloc(n), *raw = ut_xmalloc(n);
    uint64_t s = ut_seed(5);
    for (size_t i = 0; i < cnt; i++) {
        float w = (float)(0.02 * ut_gauss(&s));
        base[i] = ut_bf16f(w);
        raw[i] = ut_bf16f(w + (float)(2e-4 * ut_gauss(&s)));
    }
    uint8_t *st = ut_xmalloc(codec_bound(n)), *out = ut_xmalloc(n);
    size_t len[2];
    for (int ng = 0; ng <= 1; ng++) {
        struct codec_hint h = {2, 1, (uint8_t *)base, 0x55, NULL, 0, 0, 0, ng, 0};
        uint8_t codec;
        int dl;
        ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, &h, &codec, &len[ng], &dl), 0);
        ck_assert_uint_eq(codec, CODEC_TENSOR);
        ck_assert_int_eq(dl, CODEC_BASE_SAME);
        ck_assert_int_eq(st[0] == 3, !ng);
        ck_assert_int_eq(codec_decode(codec, st, len[ng], out, n, (uint8_t *)base, 0x55), 0);
        ck_assert(memcmp(out, raw, n) == 0);
    }
    ck_assert_uint_lt(len[0], len[1]);
    free(base), free(raw), free(st), free(out);
}
END_TEST

START_TEST(test_roundtrip_sizes)
{
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        uint8_t *raw = ut_xmalloc(n);
        for (int k = 0; k < DATA_KINDS; k++) {
            fill(raw, n, k, si * 10 + (uint64_t)k);
            roundtrip(raw, n, NULL);
        }
        free(raw);
    }
}
END_TEST

START_TEST(test_empty_and_one_byte)
{
    uint8_t st[64], out[1];
    uint8_t codec = 0xEE;
    size_t stored = 99;
    ck_assert_int_eq(codec_encode("", 0, st, codec_bound(0), 1, NULL, &codec, &stored, &dl), 0);
    ck_assert_uint_eq(stored, 0);
    ck_assert_int_eq(codec, CODEC_RAW);
    ck_assert_int_eq(codec_decode(CODEC_RAW, st, 0, out, 0, NULL, 0), 0);

    uint8_t one = 0x5A;
    ck_assert_int_eq(codec_encode(&one, 1, st, codec_bound(1), 1, NULL, &codec, &stored, &dl), 0);
    ck_assert_int_eq(codec, CODEC_RAW); /* one byte cannot shrink */
    ck_assert_uint_eq(stored, 1);
    out[0] = 0;
    ck_assert_int_eq(codec_decode(codec, st, stored, out, 1, NULL, 0), 0);
    ck_assert_uint_eq(out[0], 0x5A);
}
END_TEST

/* codec_encode may never choose zstd for tiny blocks: check the zstd decoder
** path directly on frames made by libzstd, including empty and 1-byte ones. */
START_TEST(test_zstd_decode_small_frames)
{
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        uint8_t *raw = ut_xmalloc(n);
        fill(raw, n, DATA_RANDOM, si);
        size_t cap = ZSTD_compressBound(n);
        uint8_t *fr = ut_xmalloc(cap);
        size_t fl = ZSTD_compress(fr, cap, raw, n, 1);
        ck_assert(!ZSTD_isError(fl));
        uint8_t *out = ut_xmalloc(n + UT_GUARD);
        memset(out, 0xA5, n + UT_GUARD);
        ck_assert_int_eq(codec_decode(CODEC_ZSTD, fr, fl, out, n, NULL, 0), 0);
        ck_assert(n == 0 || memcmp(out, raw, n) == 0);
        ut_check_guard(out + n, 0xA5, "zstd frame");
        free(out);
        free(fr);
        free(raw);
    }
}
END_TEST

/* Plain bytes that are a float array become a standalone tensor block of
** the right width, smaller than zstd makes them; text does not (random
** bytes: test_random_1mib_stays_raw). */
START_TEST(test_sniff_floats)
{
    size_t n = MiB, cnt = n / 4, stored;
    float *f = ut_xmalloc(n);
    uint64_t s = ut_seed(11);
    for (size_t i = 0; i < cnt; i++) f[i] = (float)(0.02 * ut_gauss(&s));
    uint16_t *b = ut_xmalloc(n);
    for (size_t i = 0; i < 2 * cnt; i++) b[i] = ut_bf16f((float)(0.02 * ut_gauss(&s)));
    size_t cap = codec_bound(n), zl;
    uint8_t *st = ut_xmalloc(cap), codec;
    const void *arrays[2] = {f, b};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(codec_encode(arrays[k], n, st, cap, 1, NULL, &codec, &stored, &dl), 0);
        ck_assert_uint_eq(codec, CODEC_TENSOR);
        ck_assert_uint_eq(st[0], 0);          /* standalone */
        ck_assert_uint_eq(st[1], k ? 2 : 4);  /* element width guessed */
        zl = ZSTD_compress(st, cap, arrays[k], n, 1);
        ck_assert(!ZSTD_isError(zl));
        ck_assert_msg(stored < zl, "tensor %zu vs zstd %zu", stored, zl);
        ck_assert_uint_eq(roundtrip(arrays[k], n, &stored), CODEC_TENSOR);
    }
    uint8_t *txt = ut_xmalloc(n);
    fill(txt, n, DATA_TEXT, 3);
    ck_assert_uint_eq(roundtrip(txt, n, &stored), CODEC_ZSTD);
    free(f), free(b), free(st), free(txt);
}
END_TEST

START_TEST(test_random_1mib_stays_raw)
{
    uint8_t *raw = ut_xmalloc(MiB);
    ut_fill_random(raw, MiB, 42);
    size_t stored;
    ck_assert_int_eq(roundtrip(raw, MiB, &stored), CODEC_RAW);
    ck_assert_uint_eq(stored, MiB);
    free(raw);
}
END_TEST

START_TEST(test_zeros_1mib_compress)
{
    uint8_t *raw = ut_xmalloc(MiB);
    memset(raw, 0, MiB);
    size_t stored;
    ck_assert_int_eq(roundtrip(raw, MiB, &stored), CODEC_ZSTD);
    ck_assert_uint_lt(stored, MiB / 100);
    free(raw);
}
END_TEST

START_TEST(test_repetitive_1mib_compress)
{
    uint8_t *raw = ut_xmalloc(MiB);
    size_t stored;
    fill(raw, MiB, DATA_REPEAT, 3);
    ck_assert_int_eq(roundtrip(raw, MiB, &stored), CODEC_ZSTD);
    ck_assert_uint_lt(stored, MiB / 10);
    fill(raw, MiB, DATA_TEXT, 5);
    ck_assert_int_eq(roundtrip(raw, MiB, &stored), CODEC_ZSTD);
    ck_assert_uint_lt(stored, MiB / 10);
    fill(raw, MiB, DATA_HALF, 9);
    ck_assert_int_eq(roundtrip(raw, MiB, &stored), CODEC_ZSTD);
    ck_assert_uint_lt(stored, MiB);
    free(raw);
}
END_TEST

/* Data that zstd can barely shrink (bytes drawn from 0..249: about 0.4%
** redundancy) and small random blocks must never come out larger than raw. */
START_TEST(test_never_larger)
{
    size_t n = 256 * 1024;
    uint8_t *raw = ut_xmalloc(n);
    ut_fill_random(raw, n, 7);
    for (size_t i = 0; i < n; i++) raw[i] = raw[i] % 250;
    size_t stored;
    roundtrip(raw, n, &stored);
    ck_assert_uint_le(stored, n);
    for (size_t len = 1; len <= 600; len += 7) {
        ut_fill_random(raw, len, len);
        roundtrip(raw, len, &stored);
        ck_assert_uint_le(stored, len);
    }
    free(raw);
}
END_TEST

/* A zstd stored form of compressible but non-trivial data. */
static uint8_t *make_frame(size_t n, uint8_t **raw_out, size_t *stored)
{
    uint8_t *raw = ut_xmalloc(n);
    fill(raw, n, DATA_TEXT, 11);
    for (size_t i = 0; i < n; i += 97) raw[i] = (uint8_t)(i >> 3);
    uint8_t *st = ut_xmalloc(codec_bound(n));
    uint8_t codec;
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, NULL, &codec, stored, &dl), 0);
    ck_assert_int_eq(codec, CODEC_ZSTD);
    *raw_out = raw;
    return st;
}

START_TEST(test_corrupt_zstd)
{
    size_t n = 64 * 1024, stored;
    uint8_t *raw;
    uint8_t *st = make_frame(n, &raw, &stored);
    uint8_t *bad = ut_xmalloc(stored);
    uint8_t *out = ut_xmalloc(n + UT_GUARD);

    /* Broken magic number. */
    for (int i = 0; i < 4; i++) {
        memcpy(bad, st, stored);
        bad[i] ^= 0xFF;
        ck_assert_int_eq(codec_decode(CODEC_ZSTD, bad, stored, out, n, NULL, 0), -EIO);
    }
    /* Truncated frames. */
    size_t cuts[] = {0, 1, 4, 8, stored / 2, stored - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, cuts[i], out, n, NULL, 0), -EIO);
    /* Garbage. */
    ut_fill_random(bad, stored, 1234);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, bad, stored, out, n, NULL, 0), -EIO);
    memset(bad, 0, stored);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, bad, stored, out, n, NULL, 0), -EIO);

    /* Any flipped byte: the decoder may produce wrong bytes (the store's hash
    ** catches those) but must return 0 or -EIO and never write past dst. */
    int eio = 0;
    for (size_t pos = 0; pos < stored; pos += (stored < 2000 ? 1 : stored / 2000)) {
        memcpy(bad, st, stored);
        bad[pos] ^= (uint8_t)(1u << (pos % 8));
        memset(out, 0xA5, n + UT_GUARD);
        int rc = codec_decode(CODEC_ZSTD, bad, stored, out, n, NULL, 0);
        ck_assert_msg(rc == 0 || rc == -EIO, "flip at %zu: rc %d", pos, rc);
        if (rc == -EIO) eio++;
        ut_check_guard(out + n, 0xA5, "corrupt zstd");
    }
    ck_assert_int_gt(eio, 0);
    free(out);
    free(bad);
    free(st);
    free(raw);
}
END_TEST

START_TEST(test_wrong_raw_len)
{
    size_t n = 64 * 1024, stored;
    uint8_t *raw;
    uint8_t *st = make_frame(n, &raw, &stored);
    uint8_t *out = ut_xmalloc(n + 64);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, stored, out, n, NULL, 0), 0);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, stored, out, n - 1, NULL, 0), -EIO);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, stored, out, n + 1, NULL, 0), -EIO);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, stored, out, 1, NULL, 0), -EIO);
    ck_assert_int_eq(codec_decode(CODEC_ZSTD, st, stored, out, 0, NULL, 0), -EIO);
    /* Raw: the stored length must equal the raw length. */
    ck_assert_int_eq(codec_decode(CODEC_RAW, raw, 100, out, 101, NULL, 0), -EIO);
    ck_assert_int_eq(codec_decode(CODEC_RAW, raw, 101, out, 100, NULL, 0), -EIO);
    free(out);
    free(st);
    free(raw);
}
END_TEST

START_TEST(test_unknown_codec)
{
    uint8_t src[16] = {0}, dst[16];
    ck_assert_int_eq(codec_decode(CODEC_MAX + 1, src, 16, dst, 16, NULL, 0), -EINVAL);
    ck_assert_int_eq(codec_decode(0xFF, src, 16, dst, 16, NULL, 0), -EINVAL);
    ck_assert_str_eq(codec_name(CODEC_RAW), "raw");
    ck_assert_str_eq(codec_name(CODEC_ZSTD), "zstd");
    ck_assert_str_eq(codec_name(0xFF), "?");
}
END_TEST

START_TEST(test_small_cap)
{
    size_t n = 4096;
    uint8_t *raw = ut_xmalloc(n);
    memset(raw, 0, n);
    uint8_t *st = ut_xmalloc(codec_bound(n));
    uint8_t codec;
    size_t stored;
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n) - 1, 1, NULL, &codec, &stored, &dl), -EINVAL);
    ck_assert_int_eq(codec_encode(raw, n, st, n, 1, NULL, &codec, &stored, &dl), -EINVAL);
    ck_assert_int_eq(codec_encode(raw, n, st, 0, 1, NULL, &codec, &stored, &dl), -EINVAL);
    ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), 1, NULL, &codec, &stored, &dl), 0);
    free(st);
    free(raw);
}
END_TEST

/* Levels other than the default still round-trip. */
START_TEST(test_levels)
{
    size_t n = 200000;
    uint8_t *raw = ut_xmalloc(n), *st = ut_xmalloc(codec_bound(n)), *out = ut_xmalloc(n);
    fill(raw, n, DATA_TEXT, 1);
    int levels[] = {-5, 1, 3, 9, 19};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        uint8_t codec;
        size_t stored;
        ck_assert_int_eq(codec_encode(raw, n, st, codec_bound(n), levels[i], NULL, &codec, &stored, &dl), 0);
        ck_assert_uint_le(stored, n);
        ck_assert_int_eq(codec_decode(codec, st, stored, out, n, NULL, 0), 0);
        ck_assert(memcmp(out, raw, n) == 0);
    }
    free(out);
    free(st);
    free(raw);
}
END_TEST

int main(void)
{
    const TTest *const wide_tests[] = {
        test_wide,
        NULL,
    };
    const TTest *const codec_tests[] = {
        test_roundtrip_sizes,
        test_empty_and_one_byte,
        test_zstd_decode_small_frames,
        test_random_1mib_stays_raw,
        test_zeros_1mib_compress,
        test_repetitive_1mib_compress,
        test_never_larger,
        test_corrupt_zstd,
        test_wrong_raw_len,
        test_unknown_codec,
        test_small_cap,
        test_levels,
        test_tensor_hint,
        test_no_group,
        test_plain_based,
        test_sniff_floats,
        NULL,
    };
    return ut_main("codec", (const struct ut_tcase[]){
        {.name = "wide", .tests = wide_tests},
        {.name = "codec", .timeout = 60, .tests = codec_tests},
        {0},
    });
}
