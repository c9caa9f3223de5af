/*
** unit_fmt.c: tests of the checkpoint-format parser (src/fmt.h).
**
** Real fixtures (tests/fixtures, written by make-fixtures.py with torch 1.13)
** must give exactly the tensors of their .tensors manifests, which the script
** computes independently with Python's zipfile/pickle/json. Every parse here
** also checks the rules of fmt_next (increasing, non-overlapping, len > 0 and
** a multiple of the width, announced before the bytes, never late) and that
** feeding the same bytes in other chunkings gives the identical list.
**
** Then synthetic files, built here: safetensors headers valid and broken in
** each rule; torch-like zips (stored entries, "FB" padding, data descriptors)
** around hand-written pickles: protocol 2 and 4 opcodes, unknown opcodes,
** size checks of local headers, zip64 extras, compressed entries, prefixes,
** several archives in one stream, signatures inside tensor payloads. Last,
** robustness: truncations, byte flips and random bytes never crash or break
** the rules, memory stays bounded (a 200 MB claimed header allocates nothing,
** a never-ending pickle stops at FMT_MAX_HEADER), and simulated malloc
** failures give -ENOMEM without harm.
*/
#include "../src/common.h"
#include "../src/fmt.h"
#include "../src/fmt_int.h"
#include "unit_util.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

#define MiB (1u << 20)

/* ---- tensor lists and the rules every parse must keep ---- */

struct tlist {
    struct fmt_tensor *v;
    size_t n, cap;
};

static void tl_add(struct tlist *l, const struct fmt_tensor *t)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        ck_assert_ptr_nonnull(l->v);
    }
    l->v[l->n++] = *t;
}

static void tl_free(struct tlist *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* t was not available when prev_fed bytes had been fed. */
static void check_tensor(const struct fmt_tensor *t, const struct tlist *l, uint64_t prev_fed)
{
    ck_assert_uint_gt(t->len, 0);
    ck_assert_msg(t->dtype > FMT_OPAQUE && t->dtype < FMT_DTYPE_MAX, "dtype %u", t->dtype);
    ck_assert_uint_eq(t->width, fmt_dtypes[t->dtype].width);
    ck_assert_uint_eq(t->is_float, fmt_dtypes[t->dtype].is_float);
    ck_assert_uint_eq(t->len % t->width, 0);
    ck_assert_ptr_nonnull(memchr(t->name, 0, FMT_NAME_MAX));
    ck_assert_msg(t->off >= prev_fed, "%s at %llu announced late (after %llu)", t->name,
                  (unsigned long long)t->off, (unsigned long long)prev_fed);
    ck_assert_uint_ge(t->off + t->len, t->off);
    if (l->n) {
        const struct fmt_tensor *last = &l->v[l->n - 1];
        ck_assert_msg(t->off >= last->off + last->len, "%s overlaps %s", t->name, last->name);
    }
}

static void drain(fmt_parser *p, struct tlist *l, uint64_t prev_fed)
{
    struct fmt_tensor t;
    while (fmt_next(p, &t) == 1) {
        check_tensor(&t, l, prev_fed);
        tl_add(l, &t);
    }
}

/* Feed d in pieces of step bytes (0: all at once; with seed != 0, random
** sizes in 1..step), popping after each feed. */
static void parse(const uint8_t *d, size_t n, size_t step, uint64_t seed, struct tlist *out)
{
    fmt_parser *p;
    ck_assert_int_eq(fmt_parser_new(&p), 0);
    drain(p, out, 0);
    ck_assert_uint_eq(out->n, 0);
    for (size_t fed = 0; fed < n;) {
        size_t c = step == 0 ? n - fed : seed ? 1 + ut_rand(&seed) % step : step;
        c = CK_MIN(c, n - fed);
        ck_assert_int_eq(fmt_feed(p, d + fed, c), 0);
        drain(p, out, fed);
        fed += c;
    }
    ck_assert_uint_le(fmt_mem_peak(p), FMT_MAX_MEM);
    fmt_parser_free(p);
}

static void tl_assert_same(const struct tlist *a, const struct tlist *b, const char *what)
{
    ck_assert_msg(a->n == b->n, "%s: %zu tensors vs %zu", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct fmt_tensor *x = &a->v[i], *y = &b->v[i];
        ck_assert_msg(x->off == y->off && x->len == y->len && x->dtype == y->dtype &&
                      x->width == y->width && x->is_float == y->is_float &&
                      strcmp(x->name, y->name) == 0,
                      "%s: tensor %zu differs (%s vs %s)", what, i, x->name, y->name);
    }
}

/* Parse whole, then in many chunkings: all must agree. *out: the list. */
static void parse_all_ways(const uint8_t *d, size_t n, struct tlist *out)
{
    static const size_t steps[] = {1, 2, 3, 7, 8, 9, 64, 100, 4096};
    parse(d, n, 0, 0, out);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (steps[i] == 1 && n > 4 * MiB) continue; /* too slow to matter */
        struct tlist l = {0};
        parse(d, n, steps[i], 0, &l);
        tl_assert_same(out, &l, "fixed chunks");
        tl_free(&l);
    }
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct tlist l = {0};
        parse(d, n, seed % 2 ? 50 : 70000, seed, &l);
        tl_assert_same(out, &l, "random chunks");
        tl_free(&l);
    }
}

static size_t count_all_ways(const uint8_t *d, size_t n)
{
    struct tlist l = {0};
    parse_all_ways(d, n, &l);
    size_t c = l.n;
    tl_free(&l);
    return c;
}

/* ---- fixtures ---- */

static uint8_t *fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    return ut_read_file(path, len);
}

/* The manifest: "name dtype offset length" lines. */
static void manifest(const char *name, struct tlist *out)
{
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/%s.tensors", FIXTURES, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    while (fgets(line, sizeof line, f)) {
        struct fmt_tensor t = {0};
        char dt[32];
        unsigned long long off, len;
        ck_assert_int_eq(sscanf(line, "%255s %31s %llu %llu", t.name, dt, &off, &len), 4);
        t.off = off;
        t.len = len;
        int found = 0;
        for (uint8_t d = 1; d < FMT_DTYPE_MAX; d++)
            if (strcmp(fmt_dtype_name(d), dt) == 0) found = fmt_tensor_set_dtype(&t, d) == 0;
        ck_assert_msg(found, "unknown dtype %s in %s", dt, path);
        tl_add(out, &t);
    }
    fclose(f);
}

static const char *fixtures[] = {"model.pt", "optim.pt", "archive.pt", "dcp.distcp",
                                 "rezip.pt", "v3.pt", "model.safetensors", "legacy.pt"};
#define NFIXTURES (sizeof fixtures / sizeof fixtures[0])

START_TEST(test_fixture_manifest)
{
    const char *name = fixtures[_i];
    size_t n;
    uint8_t *d = fixture(name, &n);
    struct tlist got = {0}, want = {0};
    parse_all_ways(d, n, &got);
    manifest(name, &want);
    tl_assert_same(&got, &want, name);
    tl_free(&got);
    tl_free(&want);
    free(d);
}
END_TEST

/* Spot checks that the manifests themselves cover what they should. */
START_TEST(test_fixture_contents)
{
    struct tlist l = {0};
    manifest("model.pt", &l);
    ck_assert_uint_eq(l.n, 16); /* 16 storages; the tied view adds none */
    int bf16 = 0, i64 = 0;
    for (size_t i = 0; i < l.n; i++) {
        bf16 += l.v[i].dtype == FMT_BF16;
        i64 += l.v[i].dtype == FMT_I64;
    }
    ck_assert_int_eq(bf16, 2);
    ck_assert_int_eq(i64, 2);
    tl_free(&l);
    manifest("v3.pt", &l);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_int_eq(l.v[0].dtype, FMT_F8_E4M3);
    ck_assert_int_eq(l.v[1].dtype, FMT_BF16);
    tl_free(&l);
    manifest("model.safetensors", &l);
    ck_assert_uint_eq(l.n, 6);
    ck_assert_str_eq(l.v[4].name, "caf\xc3\xa9/\xc3\xbc" "ber");
    tl_free(&l);
    manifest("legacy.pt", &l);
    ck_assert_uint_eq(l.n, 0);
    tl_free(&l);
    manifest("dcp.distcp", &l);
    ck_assert_uint_eq(l.n, 3);
    tl_free(&l);
}
END_TEST

/* Feeding exactly up to a tensor's first byte announces it; one byte less
** does not (zip), and a safetensors header announces all at its last byte. */
static size_t pending_after(const uint8_t *d, size_t upto)
{
    fmt_parser *p;
    ck_assert_int_eq(fmt_parser_new(&p), 0);
    ck_assert_int_eq(fmt_feed(p, d, upto), 0);
    struct fmt_tensor t;
    size_t n = 0;
    while (fmt_next(p, &t)) n++;
    fmt_parser_free(p);
    return n;
}

START_TEST(test_announce_point)
{
    size_t n;
    uint8_t *d = fixture("model.pt", &n);
    struct tlist l = {0};
    manifest("model.pt", &l);
    for (size_t i = 0; i < l.n; i++) {
        ck_assert_uint_eq(pending_after(d, l.v[i].off), i + 1);
        ck_assert_uint_eq(pending_after(d, l.v[i].off - 1), i);
    }
    tl_free(&l);
    free(d);

    d = fixture("model.safetensors", &n);
    uint64_t end = 8 + ck_get64(d);
    ck_assert_uint_eq(pending_after(d, end - 1), 0);
    ck_assert_uint_eq(pending_after(d, end), 6);
    free(d);
}
END_TEST

/* A truncated file announces a prefix of the full list, holding at least
** every tensor that starts before the cut. */
START_TEST(test_truncations)
{
    const char *name = fixtures[_i];
    size_t n;
    uint8_t *d = fixture(name, &n);
    struct tlist full = {0};
    parse(d, n, 0, 0, &full);
    for (size_t cut = 0; cut <= n; cut += 1 + cut / 64) {
        struct tlist l = {0};
        parse(d, cut, 0, 0, &l);
        ck_assert_uint_le(l.n, full.n);
        for (size_t i = 0; i < l.n; i++)
            ck_assert(l.v[i].off == full.v[i].off && l.v[i].len == full.v[i].len);
        for (size_t i = l.n; i < full.n; i++) ck_assert_uint_ge(full.v[i].off, cut);
        tl_free(&l);
    }
    tl_free(&full);
    free(d);
}
END_TEST

/* ---- byte builders ---- */

struct buf {
    uint8_t *b;
    size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = CK_MAX(b->cap * 2, b->n + n + 64);
        b->b = realloc(b->b, b->cap);
        ck_assert_ptr_nonnull(b->b);
    }
    if (n) memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put8(struct buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void put16(struct buf *b, uint16_t v)
{
    put8(b, (uint8_t)v);
    put8(b, (uint8_t)(v >> 8));
}

static void put32(struct buf *b, uint32_t v)
{
    uint8_t x[4];
    ck_put32(x, v);
    put(b, x, 4);
}

static void put64(struct buf *b, uint64_t v)
{
    uint8_t x[8];
    ck_put64(x, v);
    put(b, x, 8);
}

static void puts_(struct buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void buf_free(struct buf *b)
{
    free(b->b);
    memset(b, 0, sizeof *b);
}

/* ---- safetensors ---- */

/* u64 N, the header, then data_len bytes of data. */
static void st_file(struct buf *f, const char *json, size_t data_len)
{
    put64(f, strlen(json));
    puts_(f, json);
    for (size_t i = 0; i < data_len; i++) put8(f, (uint8_t)(i * 7));
}

static size_t st_count(const char *json, size_t data_len)
{
    struct buf f = {0};
    st_file(&f, json, data_len);
    size_t n = count_all_ways(f.b, f.n);
    buf_free(&f);
    return n;
}

#define T(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

START_TEST(test_st_valid)
{
    ck_assert_uint_eq(st_count("{" T("a", "F32", "[2]", 0, 8) "," T("b", "BF16", "[2,2]", 8, 16) "}", 16), 2);
    /* whitespace around and inside, padding, metadata, null metadata */
    ck_assert_uint_eq(st_count(" \n\t{ \"__metadata__\" : {\"k\":\"v\",\"x\":\"\"} , "
                               T("a", "I64", "[1]", 0, 8) " }   \r\n   ", 8), 1);
    ck_assert_uint_eq(st_count("{\"__metadata__\":null," T("a", "U8", "[]", 0, 1) "}", 1), 1);
    ck_assert_uint_eq(st_count("{}", 0), 0);
    ck_assert_uint_eq(st_count("{\"__metadata__\":{}}", 0), 0);
    /* zero-size tensors tile but are not announced */
    ck_assert_uint_eq(st_count("{" T("z", "F32", "[0,3]", 0, 0) "," T("a", "F16", "[3]", 0, 6) ","
                               T("y", "F16", "[0]", 6, 6) "}", 6), 1);
    /* unknown dtype: checked nowhere, announced never; the others still are */
    ck_assert_uint_eq(st_count("{" T("q", "Q7", "[5]", 0, 3) "," T("a", "U8", "[2]", 3, 5) "}", 5), 1);
    /* sub-byte dtypes: sizes checked, not announced */
    ck_assert_uint_eq(st_count("{" T("f4", "F4", "[4]", 0, 2) "," T("f6", "F6_E2M3", "[4]", 2, 5) ","
                               T("a", "U8", "[1]", 5, 6) "}", 6), 1);
    /* unknown fields of an entry are skipped, nested or not */
    ck_assert_uint_eq(st_count("{\"a\":{\"x\":[1,{\"y\":[true,false,null,-1.5e+3,\"s\"]}],"
                               "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"z\":0}}", 4), 1);
}
END_TEST

START_TEST(test_st_names_and_dtypes)
{
    struct buf f = {0};
    /* escapes decode: e-acute, a surrogate pair (U+1F600), \n, \", \/ */
    st_file(&f, "{\"a\\u00e9\\ud83d\\ude00\\n\\\"\\/\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8);
    struct tlist l = {0};
    parse_all_ways(f.b, f.n, &l);
    ck_assert_uint_eq(l.n, 1);
    ck_assert_str_eq(l.v[0].name, "a\xc3\xa9\xf0\x9f\x98\x80\n\"/");
    ck_assert_int_eq(l.v[0].dtype, FMT_C64);
    ck_assert_int_eq(l.v[0].width, 4);
    ck_assert_int_eq(l.v[0].is_float, 1);
    ck_assert_uint_eq(l.v[0].off, f.n - 8);
    tl_free(&l);
    buf_free(&f);

    /* every byte-sized dtype, with its width and float flag */
    static const char *names[] = {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32",
                                  "F32", "I64", "U64", "F64", "C64", "F8_E5M2", "F8_E4M3",
                                  "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[4],\"data_offsets\":[0,32]}}", names[i]);
        int bytes = 0;
        for (uint8_t d = 1; d < FMT_DTYPE_MAX; d++)
            if (strcmp(fmt_dtype_name(d), names[i]) == 0)
                bytes = 4 * fmt_dtypes[d].width * fmt_dtypes[d].comps;
        ck_assert_int_gt(bytes, 0);
        char *p = strstr(json, "32]");
        snprintf(p, 16, "%d]}}", bytes);
        memset(&f, 0, sizeof f);
        st_file(&f, json, (size_t)bytes);
        parse(f.b, f.n, 0, 0, &l);
        ck_assert_uint_eq(l.n, 1);
        ck_assert_str_eq(fmt_dtype_name(l.v[0].dtype), names[i]);
        ck_assert_uint_eq(l.v[0].len, (uint64_t)bytes);
        tl_free(&l);
        buf_free(&f);
    }
}
END_TEST

/* An overlong name is cut at a character boundary below FMT_NAME_MAX. */
START_TEST(test_st_long_name)
{
    char json[1024] = "{\"";
    for (int i = 0; i < 200; i++) strcat(json, "\xc3\xa9"); /* 400 bytes */
    strcat(json, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    struct buf f = {0};
    st_file(&f, json, 1);
    struct tlist l = {0};
    parse(f.b, f.n, 0, 0, &l);
    ck_assert_uint_eq(l.n, 1);
    ck_assert_uint_eq(strlen(l.v[0].name), 254);
    tl_free(&l);
    buf_free(&f);
}
END_TEST

static const char *st_bad[] = {
    /* tiling */
    "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}",   /* overlap */
    "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 12, 20) "}",  /* gap */
    "{" T("a", "F32", "[2]", 4, 12) "}",                                  /* not from 0 */
    "{" T("a", "F32", "[2]", 8, 0) "}",                                   /* reversed */
    "{" T("a", "F32", "[3]", 0, 8) "}",                                   /* wrong size */
    "{" T("a", "F4", "[3]", 0, 2) "}",                                    /* 12 bits */
    "{" T("a", "U8", "[4294967296,4294967296,16]", 0, 0) "}",             /* overflow */
    "{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}",   /* same name */
    /* entries */
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}",
    "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551616]}}",
    "{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"a\":[]}",
    "{\"__metadata__\":{\"k\":1}," T("a", "U8", "[1]", 0, 1) "}",
    "{\"__metadata__\":{}, \"__metadata__\":{}," T("a", "U8", "[1]", 0, 1) "}",
    /* JSON */
    "{" T("a", "U8", "[1]", 0, 1) ",}",
    "{" T("a", "U8", "[1]", 0, 1),
    "{" T("a", "U8", "[1]", 0, 1) "}}",
    "{" T("a", "U8", "[1]", 0, 1) "} x",
    "{" T("a", "U8", "[1]", 0, 1) "}{}",
    "[" T("a", "U8", "[1]", 0, 1) "]",
    "{a:{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{'a':{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\\x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\\ud800\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\\udc00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\\u12G4\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\xc0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\xf4\x90\x80\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\xe2\x82\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"x\":tru,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"x\":-,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"x\":1.,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"x\":[1 2],\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "x",
    "{\"",
};

START_TEST(test_st_invalid)
{
    for (size_t i = 0; i < sizeof st_bad / sizeof st_bad[0]; i++)
        ck_assert_msg(st_count(st_bad[i], 64) == 0, "accepted: %s", st_bad[i]);
}
END_TEST

/* Nesting deeper than the parser's bound is rejected without trouble;
** shallower nesting in an unknown field is fine. */
START_TEST(test_st_depth)
{
    for (int depth = 10; depth <= 100000; depth *= 10) {
        struct buf j = {0};
        puts_(&j, "{\"a\":{\"x\":");
        for (int i = 0; i < depth; i++) put8(&j, '[');
        for (int i = 0; i < depth; i++) put8(&j, ']');
        puts_(&j, ",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
        put8(&j, 0);
        ck_assert_uint_eq(st_count((const char *)j.b, 1), depth <= 60 ? 1 : 0);
        buf_free(&j);
    }
}
END_TEST

static struct buf st_claim(uint64_t n, size_t body)
{
    struct buf f = {0};
    put64(&f, n);
    put8(&f, '{');
    for (size_t i = 1; i < body; i++) put8(&f, ' ');
    return f;
}

START_TEST(test_st_sizes_and_memory)
{
    /* N out of range, or too small */
    uint64_t bad[] = {0, 1, FMT_ST_MAX_N + 1, 200000000, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct buf f = st_claim(bad[i], MiB);
        fmt_parser *p;
        ck_assert_int_eq(fmt_parser_new(&p), 0);
        ck_assert_int_eq(fmt_feed(p, f.b, f.n), 0);
        ck_assert_uint_lt(fmt_mem_peak(p), 64 * 1024); /* nothing buffered */
        struct fmt_tensor t;
        ck_assert_int_eq(fmt_next(p, &t), 0);
        fmt_parser_free(p);
        buf_free(&f);
    }
    /* Legal but over FMT_MAX_HEADER: left opaque, not buffered. */
    struct buf f = st_claim(FMT_MAX_HEADER + 1, 2 * MiB);
    fmt_parser *p;
    ck_assert_int_eq(fmt_parser_new(&p), 0);
    ck_assert_int_eq(fmt_feed(p, f.b, f.n), 0);
    ck_assert_uint_lt(fmt_mem_peak(p), 64 * 1024);
    fmt_parser_free(p);
    buf_free(&f);
    /* A header being buffered holds what arrived, not what N claims. */
    f = st_claim(FMT_MAX_HEADER, MiB);
    ck_assert_int_eq(fmt_parser_new(&p), 0);
    ck_assert_int_eq(fmt_feed(p, f.b, f.n), 0);
    ck_assert_uint_lt(fmt_mem_peak(p), 2 * MiB + 64 * 1024);
    /* a control character ends it at once */
    ck_assert_int_eq(fmt_feed(p, "\x01", 1), 0);
    ck_assert_uint_lt(fmt_mem_now(p), 64 * 1024);
    fmt_parser_free(p);
    buf_free(&f);
    /* A truncated header announces nothing. */
    struct buf g = {0};
    st_file(&g, "{" T("a", "U8", "[1]", 0, 1) "}", 1);
    for (size_t cut = 0; cut < g.n - 1; cut++) {
        struct tlist l = {0};
        parse(g.b, cut, 0, 0, &l);
        ck_assert_uint_eq(l.n, 0);
        tl_free(&l);
    }
    buf_free(&g);
}
END_TEST

/* ---- pickles ---- */

static void pk_str(struct buf *b, const char *s)
{
    put8(b, 'X');
    put32(b, (uint32_t)strlen(s));
    puts_(b, s);
}

static void pk_global(struct buf *b, const char *mod, const char *name)
{
    put8(b, 'c');
    puts_(b, mod);
    put8(b, '\n');
    puts_(b, name);
    put8(b, '\n');
}

static void pk_int(struct buf *b, uint64_t v)
{
    if (v < 256) {
        put8(b, 'K');
        put8(b, (uint8_t)v);
    } else if (v < 65536) {
        put8(b, 'M');
        put16(b, (uint16_t)v);
    } else if (v < 0x80000000u) {
        put8(b, 'J');
        put32(b, (uint32_t)v);
    } else {
        put8(b, 0x8a); /* LONG1, 8 bytes (v < 2^63) */
        put8(b, 8);
        put64(b, v);
    }
}

/* ('storage', torch.<kind>, key, 'cpu', numel) BINPERSID */
static void pk_persid(struct buf *b, const char *kind, const char *key, uint64_t numel)
{
    put8(b, '(');
    pk_str(b, "storage");
    pk_global(b, "torch", kind);
    pk_str(b, key);
    pk_str(b, "cpu");
    pk_int(b, numel);
    put8(b, 't');
    put8(b, 'Q');
}

struct spec {
    const char *kind, *key;
    uint64_t numel, bytes; /* bytes: payload length */
};

/* PROTO 2, a list of the storages, STOP. */
static void pk_list(struct buf *b, const struct spec *s, size_t n)
{
    put8(b, 0x80);
    put8(b, 2);
    put8(b, ']');
    put8(b, '(');
    for (size_t i = 0; i < n; i++) pk_persid(b, s[i].kind, s[i].key, s[i].numel);
    put8(b, 'e');
    put8(b, '.');
}

/* ---- zips ---- */

struct entry {
    const char *name;
    const void *data;
    size_t len;
    uint16_t method, flags;
    uint32_t csize, usize;
    const uint8_t *extra; /* before the padding */
    size_t extra_len;
};

/* A local header (payload start padded to 64 bytes from base with an "FB"
** extra, as torch does), the payload, a data descriptor if flagged. Returns
** the payload's offset. */
static size_t zip_put(struct buf *z, size_t base, const struct entry *e)
{
    size_t nlen = strlen(e->name);
    size_t hdr_end = z->n - base + 30 + nlen + e->extra_len + 4;
    size_t pad = (64 - hdr_end % 64) % 64;
    put32(z, 0x04034b50);
    put16(z, 20);
    put16(z, e->flags);
    put16(z, e->method);
    put32(z, 0);
    put32(z, 0x12345678);
    put32(z, e->csize);
    put32(z, e->usize);
    put16(z, (uint16_t)nlen);
    put16(z, (uint16_t)(e->extra_len + 4 + pad));
    puts_(z, e->name);
    put(z, e->extra, e->extra_len);
    puts_(z, "FB");
    put16(z, (uint16_t)pad);
    for (size_t i = 0; i < pad; i++) put8(z, 'Z');
    size_t at = z->n;
    put(z, e->data, e->len);
    if (e->flags & 8) {
        put32(z, 0x08074b50);
        put32(z, 0x12345678);
        put32(z, (uint32_t)e->len);
        put32(z, (uint32_t)e->len);
    }
    return at;
}

static size_t zip_torch(struct buf *z, size_t base, const char *name, const void *d, size_t len)
{
    struct entry e = {name, d, len, 0, 0x0808, 0, 0, NULL, 0};
    return zip_put(z, base, &e);
}

/* Central directory and end record, so the archive looks complete (the
** parser needs neither). */
static void zip_end(struct buf *z)
{
    put32(z, 0x02014b50);
    for (int i = 0; i < 42; i++) put8(z, 0);
    put32(z, 0x06054b50);
    for (int i = 0; i < 18; i++) put8(z, 0);
}

static uint8_t *payload(size_t len, uint64_t seed)
{
    uint8_t *p = ut_xmalloc(len);
    ut_fill_random(p, len, seed);
    return p;
}

/* A torch-like archive: prefix/data.pkl listing the storages, then one
** prefix/data/<key> per storage with its bytes. off[i]: payload offsets. */
static void archive(struct buf *z, const char *prefix, const struct spec *s, size_t n,
                    size_t *off)
{
    size_t base = z->n;
    char name[256];
    struct buf pk = {0};
    pk_list(&pk, s, n);
    snprintf(name, sizeof name, "%sdata.pkl", prefix);
    zip_torch(z, base, name, pk.b, pk.n);
    for (size_t i = 0; i < n; i++) {
        uint8_t *d = payload(s[i].bytes, i + 1);
        snprintf(name, sizeof name, "%sdata/%s", prefix, s[i].key);
        size_t at = zip_torch(z, base, name, d, s[i].bytes);
        if (off) off[i] = at;
        free(d);
    }
    snprintf(name, sizeof name, "%sversion", prefix);
    zip_torch(z, base, name, "3\n", 2);
    zip_end(z);
    buf_free(&pk);
}

static const struct spec two[] = {{"FloatStorage", "0", 4, 16}, {"BFloat16Storage", "1", 3, 6}};

START_TEST(test_zip_basic)
{
    struct buf z = {0};
    size_t off[2];
    archive(&z, "arch/", two, 2, off);
    struct tlist l = {0};
    parse_all_ways(z.b, z.n, &l);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_str_eq(l.v[0].name, "data/0");
    ck_assert_int_eq(l.v[0].dtype, FMT_F32);
    ck_assert_uint_eq(l.v[0].off, off[0]);
    ck_assert_uint_eq(l.v[0].len, 16);
    ck_assert_str_eq(l.v[1].name, "data/1");
    ck_assert_int_eq(l.v[1].dtype, FMT_BF16);
    ck_assert_uint_eq(l.v[1].off, off[1]);
    ck_assert_uint_eq(l.v[1].len, 6);
    tl_free(&l);
    buf_free(&z);
    /* no prefix at all, and a deep one */
    archive(&z, "", two, 2, NULL);
    ck_assert_uint_eq(count_all_ways(z.b, z.n), 2);
    buf_free(&z);
    archive(&z, "a/b/c/", two, 2, NULL);
    ck_assert_uint_eq(count_all_ways(z.b, z.n), 2);
    buf_free(&z);
    /* "xdata.pkl" is not a data.pkl */
    archive(&z, "x", two, 2, NULL);
    ck_assert_uint_eq(count_all_ways(z.b, z.n), 0);
    buf_free(&z);
}
END_TEST

/* Every storage kind; numel 0 and unknown kinds are not announced; complex
** widths are per component. */
START_TEST(test_zip_kinds)
{
    static const struct spec s[] = {
        {"FloatStorage", "0", 3, 12}, {"BFloat16Storage", "1", 3, 6},
        {"HalfStorage", "2", 3, 6}, {"DoubleStorage", "3", 3, 24},
        {"LongStorage", "4", 3, 24}, {"IntStorage", "5", 3, 12},
        {"ShortStorage", "6", 3, 6}, {"CharStorage", "7", 3, 3},
        {"ByteStorage", "8", 3, 3}, {"BoolStorage", "9", 3, 3},
        {"ComplexFloatStorage", "10", 3, 24}, {"ComplexDoubleStorage", "11", 3, 48},
        {"FloatStorage", "12", 0, 0}, {"QInt8Storage", "13", 3, 3},
        {"FloatStorage", "14", 300, 1200}, {"FloatStorage", "15", 70000, 280000},
    };
    static const uint8_t want[] = {FMT_F32, FMT_BF16, FMT_F16, FMT_F64, FMT_I64, FMT_I32,
                                   FMT_I16, FMT_I8, FMT_U8, FMT_BOOL, FMT_C64, FMT_C128,
                                   FMT_F32, FMT_F32};
    struct buf z = {0};
    archive(&z, "k/", s, sizeof s / sizeof s[0], NULL);
    struct tlist l = {0};
    parse_all_ways(z.b, z.n, &l);
    ck_assert_uint_eq(l.n, sizeof want);
    for (size_t i = 0; i < l.n; i++) {
        ck_assert_int_eq(l.v[i].dtype, want[i]);
        ck_assert_uint_eq(l.v[i].len, s[i < 12 ? i : i + 2].bytes);
    }
    ck_assert_int_eq(l.v[10].width, 4);
    ck_assert_int_eq(l.v[11].width, 8);
    tl_free(&l);
    buf_free(&z);
}
END_TEST

/* Sizes in local headers must match when given; compressed or encrypted
** entries, unknown keys and other prefixes are never announced. */
START_TEST(test_zip_entry_rules)
{
    struct {
        const char *name;
        uint16_t method, flags;
        uint32_t csize, usize;
        size_t want;
    } cases[] = {
        {"p/data/0", 0, 0, 16, 16, 1}, {"p/data/0", 0, 0, 0, 16, 1},
        {"p/data/0", 0, 0, 16, 15, 0}, {"p/data/0", 0, 0, 17, 16, 0},
        {"p/data/0", 8, 0x0808, 0, 0, 0}, {"p/data/0", 0, 0x0809, 0, 0, 0},
        {"p/data/9", 0, 0x0808, 0, 0, 0}, {"q/data/0", 0, 0x0808, 0, 0, 0},
        {"p/data/0/", 0, 0x0808, 0, 0, 0}, {"p/data/", 0, 0x0808, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct buf z = {0}, pk = {0};
        pk_list(&pk, two, 1);
        zip_torch(&z, 0, "p/data.pkl", pk.b, pk.n);
        uint8_t d[16] = {0};
        struct entry e = {cases[i].name, d, 16, cases[i].method, cases[i].flags,
                          cases[i].csize, cases[i].usize, NULL, 0};
        zip_put(&z, 0, &e);
        ck_assert_msg(count_all_ways(z.b, z.n) == cases[i].want, "case %zu", i);
        buf_free(&z);
        buf_free(&pk);
    }
}
END_TEST

/* zip64: 0xffffffff sizes in the header, the real ones in extra id 1. */
START_TEST(test_zip64_extra)
{
    for (int good = 0; good <= 1; good++) {
        struct buf z = {0}, pk = {0}, x = {0};
        pk_list(&pk, two, 1);
        zip_torch(&z, 0, "p/data.pkl", pk.b, pk.n);
        put16(&x, 1);
        put16(&x, 16);
        put64(&x, good ? 16 : 17);
        put64(&x, 16);
        uint8_t d[16] = {0};
        struct entry e = {"p/data/0", d, 16, 0, 0, 0xffffffffu, 0xffffffffu, x.b, x.n};
        zip_put(&z, 0, &e);
        ck_assert_uint_eq(count_all_ways(z.b, z.n), (size_t)good);
        buf_free(&z);
        buf_free(&pk);
        buf_free(&x);
    }
}
END_TEST

/* DCP-like: archives back to back at odd offsets; each data.pkl replaces the
** storage table, so keys of the first archive mean nothing in the second. */
START_TEST(test_zip_several_archives)
{
    struct buf z = {0};
    size_t off[2];
    puts_(&z, "junk!");
    archive(&z, "archive/", two, 2, NULL);
    puts_(&z, "\x01\x02\x03");
    archive(&z, "archive/", two + 1, 1, off);
    /* a third whose pickle names key 5 only, but stores data/0 */
    struct buf pk = {0};
    static const struct spec five = {"FloatStorage", "5", 4, 16};
    pk_list(&pk, &five, 1);
    size_t base = z.n;
    zip_torch(&z, base, "archive/data.pkl", pk.b, pk.n);
    zip_torch(&z, base, "archive/data/0", "0123456789abcdef", 16);
    struct tlist l = {0};
    parse_all_ways(z.b, z.n, &l);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_uint_eq(l.v[2].off, off[0]);
    ck_assert_int_eq(l.v[2].dtype, FMT_BF16);
    tl_free(&l);
    buf_free(&pk);
    buf_free(&z);
}
END_TEST

/* An archive inside a tensor's payload is not looked at; inside any other
** payload it is found. */
START_TEST(test_zip_nested)
{
    struct buf inner = {0};
    archive(&inner, "in/", two, 2, NULL);
    static const struct spec outer_s = {"ByteStorage", "0", 0, 0};
    struct spec s = outer_s;
    s.numel = s.bytes = inner.n;
    struct buf pk = {0}, z = {0};
    pk_list(&pk, &s, 1);
    zip_torch(&z, 0, "out/data.pkl", pk.b, pk.n);
    zip_torch(&z, 0, "out/data/0", inner.b, inner.n);
    ck_assert_uint_eq(count_all_ways(z.b, z.n), 1);
    buf_free(&z);
    zip_torch(&z, 0, "out/data.pkl", pk.b, pk.n);
    zip_torch(&z, 0, "out/extra.bin", inner.b, inner.n);
    ck_assert_uint_eq(count_all_ways(z.b, z.n), 2);
    buf_free(&z);
    buf_free(&pk);
    buf_free(&inner);
}
END_TEST

/* Wrap a pickle as p/data.pkl followed by p/data/0 (16 bytes), then a good
** archive: returns how many tensors the whole announces. */
static size_t pickle_then_good(const struct buf *pk)
{
    struct buf z = {0};
    zip_torch(&z, 0, "p/data.pkl", pk->b, pk->n);
    zip_torch(&z, 0, "p/data/0", "0123456789abcdef", 16);
    archive(&z, "good/", two, 2, NULL);
    size_t n = count_all_ways(z.b, z.n);
    buf_free(&z);
    return n;
}

static void pk_head(struct buf *b)
{
    put8(b, 0x80);
    put8(b, 2);
    put8(b, ']');
    put8(b, '(');
    pk_persid(b, "FloatStorage", "0", 4);
}

/* A broken pickle loses its own archive only: the scan goes on. */
START_TEST(test_pickle_failures)
{
    static const char *tails[] = {
        "I12\n",                 /* protocol 0 INT: not supported */
        "\xff",                  /* not an opcode */
        "0000000",               /* POP below the MARK then past the bottom */
        "h\x63",                 /* BINGET of an empty memo slot */
        "r\xff\xff\xff\x7f",     /* LONG_BINPUT far past the memo bound */
        "X\xff\xff\xff\x7f",     /* string longer than FMT_MAX_HEADER */
        "T\xff\xff\xff\xff",     /* negative BINSTRING length */
        "\x80\x09",              /* unknown protocol */
        "tt",                    /* the second TUPLE has no MARK left */
        "ee",                    /* so has the second APPENDS */
        "s",                     /* SETITEM needs three values in the frame */
        "R",                     /* REDUCE needs two */
    };
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        struct buf pk = {0};
        pk_head(&pk);
        puts_(&pk, tails[i]);
        puts_(&pk, "e."); /* what would end the pickle well */
        size_t n = pickle_then_good(&pk);
        ck_assert_msg(n == 2, "tail %zu: %zu tensors", i, n);
        buf_free(&pk);
    }
    /* a GLOBAL line longer than the bound */
    struct buf pk = {0};
    pk_head(&pk);
    put8(&pk, 'c');
    for (int i = 0; i < 300; i++) put8(&pk, 'm');
    puts_(&pk, "\nx\n");
    ck_assert_uint_eq(pickle_then_good(&pk), 2);
    buf_free(&pk);
    /* and the control: the same head with a proper end gives 3 */
    pk_head(&pk);
    puts_(&pk, "e.");
    ck_assert_uint_eq(pickle_then_good(&pk), 3);
    buf_free(&pk);
}
END_TEST

/* Protocol 4 spellings: FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE,
** BINUNICODE8, BINGET of memoized parts, DUP/POP, dicts and sets. */
START_TEST(test_pickle_protocol4)
{
    struct buf pk = {0};
    put8(&pk, 0x80);
    put8(&pk, 4);
    put8(&pk, 0x95);
    put64(&pk, 999);
    put8(&pk, '}');                 /* EMPTY_DICT */
    put8(&pk, 0x94);                /* memo 0 */
    put8(&pk, '(');
    put8(&pk, 0x8c);
    put8(&pk, 1);
    put8(&pk, 'a');                 /* key */
    put8(&pk, '(');
    put8(&pk, 0x8c);
    put8(&pk, 7);
    puts_(&pk, "storage");
    put8(&pk, 0x94);                /* memo 1 */
    put8(&pk, 0x8c);
    put8(&pk, 5);
    puts_(&pk, "torch");
    put8(&pk, 0x8d);                /* BINUNICODE8 */
    put64(&pk, 12);
    puts_(&pk, "FloatStorage");
    put8(&pk, 0x93);                /* STACK_GLOBAL */
    put8(&pk, 0x94);                /* memo 2 */
    put8(&pk, 0x8c);
    put8(&pk, 1);
    put8(&pk, '0');
    put8(&pk, 0x8c);
    put8(&pk, 3);
    puts_(&pk, "cpu");
    put8(&pk, 0x8a);                /* LONG1 4 */
    put8(&pk, 1);
    put8(&pk, 4);
    put8(&pk, 't');
    put8(&pk, 'Q');
    put8(&pk, '2');                 /* DUP */
    put8(&pk, '0');                 /* POP */
    put8(&pk, '(');                 /* the same storage from memoized parts */
    put8(&pk, 'h');
    put8(&pk, 1);
    put8(&pk, 'h');
    put8(&pk, 2);
    put8(&pk, 'U');                 /* SHORT_BINSTRING */
    put8(&pk, 1);
    put8(&pk, '0');
    put8(&pk, 0x8c);
    put8(&pk, 3);
    puts_(&pk, "cpu");
    put8(&pk, 'K');
    put8(&pk, 4);
    put8(&pk, 't');
    put8(&pk, 'Q');
    put8(&pk, '0');
    put8(&pk, 0x8c);
    put8(&pk, 1);
    put8(&pk, 'b');
    put8(&pk, 0x8f);                /* EMPTY_SET */
    put8(&pk, '(');
    put8(&pk, 'G');
    put64(&pk, 0);
    put8(&pk, 0x88);
    put8(&pk, 0x90);                /* ADDITEMS */
    put8(&pk, 'u');                 /* SETITEMS */
    put8(&pk, '.');
    struct buf z = {0};
    zip_torch(&z, 0, "p/data.pkl", pk.b, pk.n);
    zip_torch(&z, 0, "p/data/0", "0123456789abcdef", 16);
    struct tlist l = {0};
    parse_all_ways(z.b, z.n, &l);
    ck_assert_uint_eq(l.n, 1);
    ck_assert_int_eq(l.v[0].dtype, FMT_F32);
    tl_free(&l);
    buf_free(&z);
    buf_free(&pk);
}
END_TEST

/* Odd but complete pickles (found by fuzzing: a MARK on an empty stack)
** end well and name no storage; the archive after them is found. */
START_TEST(test_pickle_odd)
{
    static const char *pickles[] = {"\x80\x02(t.", "(l.", "(d(t0.", ").", "N2.", "(1.", "."};
    for (size_t i = 0; i < sizeof pickles / sizeof pickles[0]; i++) {
        struct buf pk = {0};
        puts_(&pk, pickles[i]);
        ck_assert_uint_eq(pickle_then_good(&pk), 2);
        buf_free(&pk);
    }
}
END_TEST

/* A storage key seen twice must agree with itself. */
START_TEST(test_pickle_conflicts)
{
    static const struct spec same[] = {{"FloatStorage", "0", 4, 16}, {"FloatStorage", "0", 4, 16}};
    static const struct spec numel[] = {{"FloatStorage", "0", 4, 16}, {"FloatStorage", "0", 5, 16}};
    static const struct spec kind[] = {{"FloatStorage", "0", 4, 16}, {"IntStorage", "0", 4, 16}};
    const struct spec *cases[] = {same, numel, kind};
    for (int i = 0; i < 3; i++) {
        struct buf pk = {0}, z = {0};
        pk_list(&pk, cases[i], 2);
        zip_torch(&z, 0, "p/data.pkl", pk.b, pk.n);
        zip_torch(&z, 0, "p/data/0", "0123456789abcdef", 16);
        ck_assert_uint_eq(count_all_ways(z.b, z.n), i == 0 ? 1u : 0u);
        buf_free(&z);
        buf_free(&pk);
    }
}
END_TEST

/* A pickle that never stops: given up at FMT_MAX_HEADER, memory bounded,
** and the scan finds the next archive. */
START_TEST(test_pickle_endless)
{
    struct buf pk = {0};
    pk_head(&pk);
    while (pk.n < FMT_MAX_HEADER + MiB) {
        put8(&pk, 'K');
        put8(&pk, 1);
        put8(&pk, '0');
    }
    struct buf z = {0};
    zip_torch(&z, 0, "p/data.pkl", pk.b, pk.n);
    archive(&z, "good/", two, 2, NULL);
    uint64_t seeds[] = {0, 3};
    for (int i = 0; i < 2; i++) {
        struct tlist l = {0};
        parse(z.b, z.n, seeds[i] ? 100000 : 0, seeds[i], &l);
        ck_assert_uint_eq(l.n, 2);
        tl_free(&l);
    }
    fmt_parser *p;
    ck_assert_int_eq(fmt_parser_new(&p), 0);
    ck_assert_int_eq(fmt_feed(p, z.b, z.n), 0);
    ck_assert_uint_lt(fmt_mem_peak(p), FMT_MAX_HEADER + 2 * MiB);
    fmt_parser_free(p);
    buf_free(&z);
    buf_free(&pk);
}
END_TEST

/* Tensors left unpopped are capped; the rules still hold. */
START_TEST(test_pending_cap)
{
    struct buf pk = {0}, z = {0};
    static const struct spec one = {"FloatStorage", "0", 1, 4};
    pk_list(&pk, &one, 1);
    struct entry e = {"p/data.pkl", pk.b, pk.n, 0, 0, 0, 0, NULL, 0};
    zip_put(&z, 0, &e);
    for (int i = 0; i < 20000; i++) {
        struct entry t = {"p/data/0", "abcd", 4, 0, 0, 0, 0, NULL, 0};
        zip_put(&z, 0, &t);
    }
    struct tlist l = {0};
    parse(z.b, z.n, 0, 0, &l);
    ck_assert_uint_eq(l.n, 16384);
    tl_free(&l);
    parse(z.b, z.n, 4096, 0, &l); /* popping as it goes: all of them */
    ck_assert_uint_eq(l.n, 20000);
    tl_free(&l);
    buf_free(&z);
    buf_free(&pk);
}
END_TEST

/* ---- robustness ---- */

START_TEST(test_random_bytes)
{
    size_t n = 2 * MiB;
    uint8_t *d = ut_xmalloc(n);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ut_fill_random(d, n, seed);
        struct tlist a = {0}, b = {0};
        parse(d, n, 0, 0, &a);
        parse(d, n, 1000, seed, &b);
        tl_assert_same(&a, &b, "random");
        tl_free(&a);
        tl_free(&b);
    }
    /* random bytes with the safetensors and zip magic sprinkled in */
    for (uint64_t seed = 1; seed <= 200; seed++) {
        size_t m = 4096;
        ut_fill_random(d, m, seed);
        d[4] = d[5] = d[6] = d[7] = 0;
        d[0] = (uint8_t)(seed * 13);
        d[1] = 0;
        for (size_t i = 100; i + 4 < m; i += 97 + seed % 50) memcpy(d + i, "PK\3\4", 4);
        count_all_ways(d, m);
    }
    free(d);
}
END_TEST

/* Bit flips and byte changes in every fixture keep the rules. */
START_TEST(test_mutations)
{
    const char *name = fixtures[_i];
    size_t n;
    uint8_t *orig = fixture(name, &n);
    uint8_t *d = ut_xmalloc(n);
    uint64_t r = 0x1234 + (uint64_t)_i;
    for (int round = 0; round < 60; round++) {
        memcpy(d, orig, n);
        int flips = 1 + round % 8;
        for (int k = 0; k < flips; k++) {
            size_t at = ut_rand(&r) % n;
            d[at] = round % 2 ? d[at] ^ (uint8_t)(1u << (ut_rand(&r) % 8)) : (uint8_t)ut_rand(&r);
        }
        struct tlist a = {0}, b = {0}, c = {0};
        parse(d, n, 0, 0, &a);
        parse(d, n, 1, 0, &b);
        parse(d, n, 300, r, &c);
        tl_assert_same(&a, &b, "mutated, 1 byte");
        tl_assert_same(&a, &c, "mutated, random");
        tl_free(&a);
        tl_free(&b);
        tl_free(&c);
    }
    free(d);
    free(orig);
}
END_TEST

/* Every allocation failing in turn: -ENOMEM or 0, the rules kept, and the
** parser still usable; with enough allocations the full list. */
START_TEST(test_alloc_failures)
{
    const char *name = fixtures[_i];
    size_t n;
    uint8_t *d = fixture(name, &n);
    struct tlist want = {0};
    manifest(name, &want);
    int failed = 1;
    for (long k = 0; failed; k++) {
        ck_assert_int_lt(k, 10000);
        fmt_parser *p;
        ck_assert_int_eq(fmt_parser_new(&p), 0);
        fmt_fail_alloc_after(p, k);
        struct tlist l = {0};
        size_t step = 512;
        failed = 0;
        for (size_t fed = 0; fed < n; fed += step) {
            int rc = fmt_feed(p, d + fed, CK_MIN(step, n - fed));
            ck_assert(rc == 0 || rc == -ENOMEM);
            failed |= rc < 0;
            drain(p, &l, fed);
        }
        if (!failed) tl_assert_same(&l, &want, "no failure");
        tl_free(&l);
        fmt_parser_free(p);
    }
    tl_free(&want);
    free(d);
}
END_TEST

/* A memory limit too small to parse is not an error, just no tensors. */
START_TEST(test_mem_limit)
{
    const char *names[] = {"model.safetensors", "model.pt"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *d = fixture(names[i], &n);
        fmt_parser *p;
        ck_assert_int_eq(fmt_parser_new(&p), 0);
        size_t lim = fmt_mem_now(p) + 256;
        fmt_set_mem_limit(p, lim);
        ck_assert_int_eq(fmt_feed(p, d, n), 0);
        struct fmt_tensor t;
        ck_assert_int_eq(fmt_next(p, &t), 0);
        ck_assert_uint_le(fmt_mem_peak(p), lim);
        fmt_parser_free(p);
        free(d);
    }
}
END_TEST

START_TEST(test_dtype_names)
{
    ck_assert_str_eq(fmt_dtype_name(FMT_OPAQUE), "opaque");
    ck_assert_str_eq(fmt_dtype_name(FMT_BF16), "BF16");
    ck_assert_str_eq(fmt_dtype_name(FMT_F8_E5M2FNUZ), "F8_E5M2FNUZ");
    ck_assert_str_eq(fmt_dtype_name(FMT_DTYPE_MAX), "?");
    ck_assert_str_eq(fmt_dtype_name(255), "?");
    for (uint8_t d = 1; d < FMT_DTYPE_MAX; d++) {
        uint8_t w = fmt_dtypes[d].width;
        ck_assert(w == 1 || w == 2 || w == 4 || w == 8);
    }
}
END_TEST

int main(void)
{
    const TTest *const fmt_tests[] = {
        test_fixture_manifest,
        test_fixture_contents,
        test_announce_point,
        test_truncations,
        test_st_valid,
        test_st_names_and_dtypes,
        test_st_long_name,
        test_st_invalid,
        test_st_depth,
        test_st_sizes_and_memory,
        test_zip_basic,
        test_zip_kinds,
        test_zip_entry_rules,
        test_zip64_extra,
        test_zip_several_archives,
        test_zip_nested,
        test_pickle_failures,
        test_pickle_protocol4,
        test_pickle_odd,
        test_pickle_conflicts,
        test_pickle_endless,
        test_pending_cap,
        test_random_bytes,
        test_mutations,
        test_alloc_failures,
        test_mem_limit,
        test_dtype_names,
        NULL,
    };
    const TTest *const fmt_loops[] = {
        test_fixture_manifest, test_truncations, test_mutations, test_alloc_failures, NULL,
    };
    return ut_main("fmt", (const struct ut_tcase[]){
        {.name = "fmt", .timeout = 120, .tests = fmt_tests, .loops = fmt_loops, .loop_end = NFIXTURES},
        {0},
    });
}
