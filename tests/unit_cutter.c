/*
** unit_cutter.c: tests of the cutter (src/cutter.h): family keys, where
** blocks end around the tensors of a safetensors file fed in pieces, and
** which chunk of a base version each tensor block is matched with.
*/
#include "../src/common.h"
#include "../src/cutter.h"
#include "unit_util.h"

#define BS 4096u

START_TEST(test_family)
{
    static const char *cases[][2] = {
        {"/run/checkpoint-500/model.safetensors", "/run/checkpoint-#/model.safetensors"},
        {"/run/checkpoint-1000/model.safetensors", "/run/checkpoint-#/model.safetensors"},
        {"/global_step42/mp_rank_00_model_states.pt", "/global_step#/mp_rank_00_model_states.pt"},
        {"/a1b22/c333/x9.pt", "/a#b#/c#/x9.pt"},
        {"/model-00001-of-00002.safetensors", "/model-00001-of-00002.safetensors"},
        {"/", "/"},
    };
    struct cutter *c = cutter_new(BS);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(cutter_family(c));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cutter_set_family(c, cases[i][0]);
        ck_assert_str_eq(cutter_family(c), cases[i][1]);
    }
    cutter_free(c);
}
END_TEST

/* A safetensors file: "a" F32 of na bytes, then "b" BF16 of nb bytes. */
static uint8_t *make_st(size_t na, size_t nb, size_t *len)
{
    struct ut_tensor t[2] = {{"a", "F32", 4, na}, {"b", "BF16", 2, nb}};
    size_t data;
    return ut_safetensors(t, 2, len, &data);
}

/* Cut a whole file fed in pieces of `piece` bytes; returns the block starts. */
static size_t cut_all(struct cutter *c, const uint8_t *f, size_t len, size_t piece,
                      uint64_t *starts, struct store_hint *hints)
{
    size_t n = 0;
    uint64_t start = 0, fed = 0;
    while (start < len) {
        uint64_t end = cutter_block_end(c, start);
        while (fed < end && fed < len) {
            size_t k = CK_MIN(piece, len - fed);
            cutter_feed(c, f + fed, k);
            fed += k;
            end = cutter_block_end(c, start); /* announcements may shorten it */
        }
        end = CK_MIN(end, (uint64_t)len);
        ck_assert_uint_gt(end, start);
        ck_assert_uint_le(end - start, BS);
        starts[n] = start;
        cutter_hint(c, start, end - start, &hints[n]);
        n++;
        start = end;
    }
    starts[n] = len;
    return n;
}

START_TEST(test_cuts_and_bases)
{
    size_t na = 3 * BS + 100, nb = 2 * BS, len;
    uint8_t *f = make_st(na, nb, &len);
    size_t data = len - na - nb;
    uint64_t starts[64];
    struct store_hint h[64];
    size_t pieces[] = {1, 7, 1000, 1 << 20};
    for (size_t p = 0; p < 4; p++) {
        struct cutter *c = cutter_new(BS);
        size_t n = cut_all(c, f, len, pieces[p], starts, h);
        /* header block, a in 4 blocks (3 full + 100), b in 2 */
        ck_assert_uint_eq(n, 7);
        ck_assert_uint_eq(starts[1], data);
        ck_assert_uint_eq(starts[2], data + BS);
        ck_assert_uint_eq(starts[4], data + 3 * BS);
        ck_assert_uint_eq(starts[5], data + na);
        ck_assert(h[0].plain);
        ck_assert_uint_eq(h[0].width, 1); /* the header: bytes */
        ck_assert(!h[1].plain);
        ck_assert_uint_eq(h[1].width, 4);
        ck_assert(h[1].is_float);
        ck_assert_uint_eq(h[5].width, 2);
        ck_assert(!h[1].has_base); /* no base version */
        size_t nt;
        const struct fsm_tensor *t = cutter_tensors(c, &nt);
        ck_assert_uint_eq(nt, 2);
        ck_assert_str_eq(t[0].name, "a");
        ck_assert_uint_eq(t[0].off, data);
        ck_assert_uint_eq(t[1].len, nb);
        cutter_free(c);
    }

    /* A base version laid out differently: b first, at other offsets. */
    struct fsm_extent ext[4] = {
        {.file_off = 64, .c = {.id = 11, .raw_len = BS}},
        {.file_off = 64 + BS, .c = {.id = 12, .raw_len = BS}},
        {.file_off = 64 + 2 * BS, .c = {.id = 13, .raw_len = BS}},
        {.file_off = 64 + 5 * BS, .c = {.id = 14, .raw_len = 100}},
    };
    struct fsm_tensor *bt = ut_xmalloc(2 * sizeof *bt);
    bt[0] = (struct fsm_tensor){.off = 64, .len = nb, .dtype = 7, .width = 2, .name = "b"};
    bt[1] = (struct fsm_tensor){.off = 64 + 2 * BS, .len = na, .dtype = 10, .width = 4,
                                .name = "a"};
    struct cutter *c = cutter_new(BS);
    ck_assert(!cutter_has_base(c));
    cutter_set_base(c, extmap_new(ext, 4), bt, 2);
    ck_assert(cutter_has_base(c));
    size_t n = cut_all(c, f, len, 333, starts, h);
    ck_assert_uint_eq(n, 7);
    ck_assert(h[1].has_base);
    ck_assert_uint_eq(h[1].base.id, 13);    /* a, block 0 */
    ck_assert(!h[2].has_base);              /* a, block 1: no extent there */
    ck_assert(h[4].has_base);
    ck_assert_uint_eq(h[4].base.id, 14);    /* a, the 100-byte tail */
    ck_assert(h[5].has_base);
    ck_assert_uint_eq(h[5].base.id, 11);    /* b, block 0 */
    ck_assert(h[6].has_base);
    ck_assert_uint_eq(h[6].base.id, 12);
    cutter_free(c);

    /* Same names, other dtype or length: no base. */
    bt = ut_xmalloc(2 * sizeof *bt);
    bt[0] = (struct fsm_tensor){.off = 64, .len = nb, .dtype = 10, .width = 4, .name = "b"};
    bt[1] = (struct fsm_tensor){.off = 64 + 2 * BS, .len = na + 4, .dtype = 10, .width = 4,
                                .name = "a"};
    c = cutter_new(BS);
    cutter_set_base(c, extmap_new(ext, 4), bt, 2);
    n = cut_all(c, f, len, 4096, starts, h);
    for (size_t i = 0; i < n; i++) ck_assert(!h[i].has_base);
    cutter_free(c);
    free(f);
}
END_TEST

/* cutter_hint finds the tensor of a block by itself, in file order, with no
** cutter_block_end call before it. */
START_TEST(test_hint_alone)
{
    size_t na = 2 * BS, nb = BS, len, data;
    struct ut_tensor t[2] = {{"a", "F32", 4, na}, {"b", "BF16", 2, nb}};
    uint8_t *f = ut_safetensors(t, 2, &len, &data);
    struct cutter *c = cutter_new(BS);
    cutter_feed(c, f, len);
    struct store_hint h;
    ck_assert_ptr_null(cutter_hint(c, 0, data, &h));      /* the header */
    ck_assert(h.plain);
    const struct fsm_tensor *r = cutter_hint(c, data + BS, BS, &h); /* a's second block */
    ck_assert_uint_eq(h.width, 4);
    ck_assert(h.is_float);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->name, "a");
    ck_assert_uint_eq(r->off, data);
    r = cutter_hint(c, data + na, nb, &h);      /* b, a skipped over */
    ck_assert_uint_eq(h.width, 2);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->name, "b");
    ck_assert_ptr_null(cutter_hint(c, data + na + 2, nb - 2, &h)); /* not a block of b's cut */
    ck_assert(h.plain);
    size_t nt;
    ck_assert_ptr_nonnull(cutter_tensors(c, &nt));
    ck_assert_uint_eq(nt, 2);
    cutter_free(c);
    free(f);
}
END_TEST

/* Bytes that are no checkpoint: plain blocks of BS from offset 0. */
START_TEST(test_opaque)
{
    size_t len = 5 * BS + 17;
    uint8_t *f = ut_xmalloc(len);
    ut_fill_random(f, len, 3);
    uint64_t starts[64];
    struct store_hint h[64];
    struct cutter *c = cutter_new(BS);
    size_t n = cut_all(c, f, len, 777, starts, h);
    ck_assert_uint_eq(n, 6);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(starts[i], i * BS);
        ck_assert(h[i].plain);
        ck_assert_uint_eq(h[i].width, 1);
        ck_assert(!h[i].has_base);
    }
    cutter_free(c);
    free(f);
}
END_TEST

/* Plain blocks: the base's chunk of the same byte range, and an element
** type from the small tensors in them. */
START_TEST(test_plain)
{
    size_t len, data;
    struct ut_tensor t[5] = {{"a", "F32", 4, BS}, {"n1", "BF16", 2, 512},
                             {"n2", "BF16", 2, 1000}, {"b", "BF16", 2, BS},
                             {"m", "F32", 4, 64}};
    uint8_t *f = ut_safetensors(t, 5, &len, &data);
    uint64_t run = data + BS, tail = run + 1512 + BS; /* n1 n2; then m */
    struct fsm_extent ext[3] = {
        {.file_off = 0, .c = {.id = 21, .raw_len = data}},
        {.file_off = run, .c = {.id = 22, .raw_len = 1512}},
        {.file_off = tail, .c = {.id = 23, .raw_len = 63}}, /* not m's length */
    };
    struct fsm_tensor *bt = ut_xmalloc(sizeof *bt);
    bt[0] = (struct fsm_tensor){.off = data, .len = BS, .dtype = 10, .width = 4, .name = "a"};
    struct cutter *c = cutter_new(BS);
    cutter_set_base(c, extmap_new(ext, 3), bt, 1);
    uint64_t starts[16];
    struct store_hint h[16];
    size_t n = cut_all(c, f, len, 100, starts, h);
    ck_assert_uint_eq(n, 5); /* header, a, n1 n2, b, m */
    ck_assert_uint_eq(starts[2], run);
    ck_assert(h[0].plain && h[0].has_base);
    ck_assert_uint_eq(h[0].base.id, 21);
    ck_assert_uint_eq(h[0].width, 1);
    ck_assert(h[2].plain && h[2].has_base);
    ck_assert_uint_eq(h[2].base.id, 22);
    ck_assert_uint_eq(h[2].width, 2); /* two bf16 norms */
    ck_assert(h[2].is_float);
    ck_assert(h[4].plain && !h[4].has_base);
    ck_assert_uint_eq(h[4].width, 4);
    cutter_free(c);

    /* Mixed widths, or a block only partly of small tensors: bytes. */
    c = cutter_new(BS);
    cutter_feed(c, f, len);
    cutter_hint(c, run - 4, 1516, &h[0]); /* the end of a, n1, n2: a's is no block */
    ck_assert_uint_eq(h[0].width, 2);     /* 1512 of 1516 bytes are bf16, aligned */
    cutter_hint(c, run + 1, 500, &h[0]);  /* inside n1, misaligned */
    ck_assert_uint_eq(h[0].width, 1);
    cutter_hint(c, run + 1, 1000, &h[0]); /* n1 and n2, misaligned */
    ck_assert_uint_eq(h[0].width, 1);
    cutter_hint(c, tail - 8, 72, &h[0]);  /* the end of b, all of m: m fills 64 of 72 */
    ck_assert_uint_eq(h[0].width, 4);
    cutter_free(c);
    struct ut_tensor u[3] = {{"a", "F32", 4, BS}, {"n1", "BF16", 2, 512}, {"n2", "F32", 4, 512}};
    free(f);
    f = ut_safetensors(u, 3, &len, &data);
    c = cutter_new(BS);
    n = cut_all(c, f, len, 4096, starts, h);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(h[2].width, 1); /* bf16 and fp32 */
    ck_assert(!h[2].is_float);
    cutter_free(c);
    free(f);
}
END_TEST

int main(void)
{
    const TTest *const cutter_tests[] = {
        test_family,
        test_cuts_and_bases,
        test_opaque,
        test_hint_alone,
        test_plain,
        NULL,
    };
    return ut_main("cutter", (const struct ut_tcase[]){
        {.name = "cutter", .tests = cutter_tests},
        {0},
    });
}
