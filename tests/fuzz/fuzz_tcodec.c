/*
** fuzz_tcodec.c: libFuzzer target for the tensor codec and the Huffman coder.
**
** Byte 0 picks the width and float flag, byte 1 the options and the length
** of the stored-block decode.
** Two properties: (1) round trip: the rest of the input, as raw bytes and
** as a base (the input shifted by one byte), must encode and decode back
** exactly, with and without the base; (2) robustness: the same bytes taken
** as a stored block must decode (against a base of the hash they name) to
** -EIO or to anything, without touching memory outside the buffers (ASan),
** and likewise as a Huffman stream.
*/
#include "../../src/huf.h"
#include "../../src/rans.h"
#include "../../src/tcodec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 3) return 0;
    static const unsigned widths[] = {1, 2, 4, 8};
    unsigned w = widths[d[0] & 3];
    int is_float = (d[0] >> 2) & 1;
    const uint8_t *x = d + 2;
    size_t len = n - 2;
    uint8_t *raw = malloc(len), *base = malloc(len), *out = malloc(len + 1);
    uint8_t *st = malloc(tc_bound(len));
    memcpy(raw, x, len);
    for (size_t i = 0; i < len; i++) base[i] = x[(i + 1) % len] ^ (uint8_t)(i % 7 == 0);
    uint64_t bh = 0x1234 + len;
    for (int with_base = 0; with_base <= 1; with_base++) {
        size_t sl;
        int mode;
        struct tc_opts o = {d[1] % 3, d[1] & 4, d[1] & 8};
        REQUIRE(tc_encode(raw, len, w, is_float, with_base ? base : NULL, bh, &o, st,
                          tc_bound(len), &sl, &mode) == 0);
        REQUIRE(sl <= tc_bound(len));
        REQUIRE(tc_decode(st, sl, with_base ? base : NULL, bh, out, len) == 0);
        REQUIRE(memcmp(out, raw, len) == 0);
    }
    /* The input as a stored block (against a base made of the input, so a
    ** grouped block sees several groups, and of the hash the block names,
    ** so a delta gets past that check) and as a Huffman and an rANS stream. */
    size_t outn = (size_t)d[1] * 256 + (len & 255);
    uint8_t *big = malloc(outn + 1), *bbase = calloc(outn + 1, 1);
    for (size_t i = 0; i < outn; i++) bbase[i] = x[i % len];
    uint64_t sh = 0;
    if (len >= 12) memcpy(&sh, x + 4, 8);
    int rc = tc_decode(x, len, bbase, sh, big, outn);
    REQUIRE(rc == 0 || rc == -EIO);
    rc = huf_decode(x, len, big, outn);
    REQUIRE(rc == 0 || rc == -EIO);
    rc = rans_decode(x, len, big, outn);
    REQUIRE(rc == 0 || rc == -EIO);
    free(big), free(bbase), free(raw), free(base), free(out), free(st);
    return 0;
}
