/*
** unit_xbase.c: tests of narrow bases for fp32 master weights (src/xbase.h)
** against a real store in a temp directory.
**
** A bf16 model file (safetensors) is committed through the write path, so
** its tensors are listed in fsmeta; then xbase_hint is asked about fp32
** blocks of a file beside it. Values that round to the bf16 tensor, of as
** many elements, get a narrow base naming the model's block and where the
** tensor's values start in it, also for a later block of the same tensor;
** different values, a different element count, or a file in another
** directory get none.
*/
#include "../src/common.h"
#include "../src/fmt.h"
#include "../src/ingest.h"
#include "../src/node.h"
#include "../src/store.h"
#include "../src/xbase.h"
#include "unit_util.h"

#include <sys/stat.h>

#define BS (64 * 1024)
#define N 4096 /* elements of the bf16 tensor w (at least CUTTER_MIN_TENSOR bytes) */

struct fx {
    char dir[128];
    struct store *st;
    node_table *nt;
    struct ingest ig;
    uint64_t d, other, model;
    size_t w_off; /* file offset of w in the model file */
    float *master; /* N fp32 values; w holds them rounded to bf16 */
};

static uint64_t fx_mk(struct fx *f, uint64_t parent, const char *name, uint32_t mode)
{
    int64_t now = ck_now_ns();
    struct fsm_attr a = {.mode = mode, .uid = getuid(), .gid = getgid(),
                         .nlink = S_ISDIR(mode) ? 2 : 1, .atime = now, .mtime = now,
                         .ctime = now};
    ck_assert_int_eq(fsmeta_mkinode(f->st->meta, &a, NULL, 0), 0);
    ck_assert_int_eq(fsmeta_link(f->st->meta, parent, name, a.ino), 0);
    return a.ino;
}

/* A store with dir /run holding model.safetensors: tensors "b" (F32, 1024
** elements of other data; tensors of 4 KiB and up are listed) and "w" (BF16, N elements: master rounded), and
** an empty directory /other. */
static void fx_open(struct fx *f)
{
    ut_newdir(f->dir);
    struct store_opts o;
    store_default_opts(&o);
    o.block_size = BS;
    o.threads = 2;
    o.cache_bytes = 1 << 20;
    ck_assert_int_eq(store_open(f->dir, &o, &f->st), 0);
    ck_assert_int_eq(store_start(f->st), 0);
    ck_assert_int_eq(node_table_create(&f->nt), 0);
    ingest_init(&f->ig, f->st, f->nt);

    f->master = ut_xmalloc(N * sizeof *f->master);
    uint64_t s = ut_seed(7);
    for (size_t i = 0; i < N; i++) f->master[i] = (float)(0.02 * ut_gauss(&s));

    struct ut_tensor t[2] = {{"b", "F32", 4, 4096}, {"w", "BF16", 2, 2 * N}};
    size_t len, data;
    uint8_t *file = ut_safetensors(t, 2, &len, &data);
    ut_fill_random(file + data, 4096, 3);
    f->w_off = data + 4096;
    for (size_t i = 0; i < N; i++) {
        uint16_t b = ut_bf16f(f->master[i]);
        memcpy(file + f->w_off + 2 * i, &b, 2);
    }
    f->d = fx_mk(f, FSMETA_ROOT_INO, "run", S_IFDIR | 0755);
    f->other = fx_mk(f, FSMETA_ROOT_INO, "other", S_IFDIR | 0755);
    f->model = fx_mk(f, f->d, "model.safetensors", S_IFREG | 0644);
    struct node *n = node_pin(f->nt, f->model);
    ck_assert_ptr_nonnull(n);
    for (size_t off = 0; off < len; off += 999)
        ck_assert_int_eq(ingest_write(&f->ig, n, file + off, CK_MIN((size_t)999, len - off), off),
                         0);
    ck_assert_int_eq(ingest_commit(&f->ig, n, 1, 1), 0);
    node_unpin(f->nt, n);
    free(file);

    /* The model's tensors are listed as the test expects. */
    struct fsm_tensor *tv;
    size_t nt;
    ck_assert_int_eq(fsmeta_tensors(f->st->meta, f->model, &tv, &nt), 0);
    ck_assert_uint_eq(nt, 2);
    ck_assert_str_eq(tv[1].name, "w");
    ck_assert_uint_eq(tv[1].dtype, FMT_BF16);
    ck_assert_uint_eq(tv[1].off, f->w_off);
    ck_assert_uint_eq(tv[1].len, 2 * N);
    free(tv);
}

static void fx_close(struct fx *f)
{
    node_table_destroy(f->nt);
    store_close(f->st);
    free(f->master);
}

/* The model's extent holding file offset off. */
static struct fsm_extent model_extent(struct fx *f, uint64_t off)
{
    struct fsm_extent *e, r = {0};
    size_t n;
    ck_assert_int_eq(fsmeta_extents(f->st->meta, f->model, &e, &n), 0);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].file_off <= off && off < e[i].file_off + e[i].c.raw_len) r = e[i], found = 1;
    free(e);
    ck_assert_msg(found, "no extent of the model at %llu", (unsigned long long)off);
    return r;
}

/* An fp32 tensor of cnt elements at offset off of a file. */
static struct fsm_tensor f32_tensor(uint64_t off, size_t cnt)
{
    struct fsm_tensor t = {.off = off, .len = 4 * cnt, .dtype = FMT_F32, .width = 4};
    snprintf(t.name, sizeof t.name, "w.master");
    return t;
}

/* The hint xbase gives block raw[0..4 * cnt), elements [e0, e0 + cnt) of t
** in file ino, with a fresh xbase; *h starts out zeroed. */
static void hint_of(struct fx *f, uint64_t ino, const struct fsm_tensor *t, uint64_t e0,
                    const float *raw, size_t cnt, struct store_hint *h)
{
    struct xbase *x = xbase_new();
    ck_assert_ptr_nonnull(x);
    memset(h, 0, sizeof *h);
    xbase_hint(x, f->st, ino, t, e0, (const uint8_t *)raw, 4 * cnt, h);
    xbase_free(x);
}

static void expect_narrow(struct fx *f, const struct store_hint *h, uint64_t e0)
{
    ck_assert_int_eq(h->has_narrow, 1);
    struct fsm_extent e = model_extent(f, f->w_off + 2 * e0);
    ck_assert_uint_eq(h->narrow.id, e.c.id);
    ck_assert_uint_eq(h->narrow.pack, e.c.pack);
    ck_assert_uint_eq(h->narrow.raw_len, e.c.raw_len);
    ck_assert_uint_eq(h->narrow_off, (f->w_off + 2 * e0 - e.file_off) / 2);
    ck_assert_int_eq(h->has_base, 0); /* the usual bases are left alone */
}

/* Masters that round to w, of as many elements, beside the model: a narrow
** base at w's values; a later block of the same tensor too, at its own
** element. */
START_TEST(test_master_finds_bf16)
{
    struct fx f;
    fx_open(&f);
    uint64_t opt = fx_mk(&f, f.d, "optimizer.safetensors", S_IFREG | 0644);
    struct fsm_tensor t = f32_tensor(4096, N);
    struct store_hint h;
    hint_of(&f, opt, &t, 0, f.master, N, &h);
    expect_narrow(&f, &h, 0);

    /* Block by block with one xbase: [0, 2500) then [2500, N). */
    struct xbase *x = xbase_new();
    memset(&h, 0, sizeof h);
    xbase_hint(x, f.st, opt, &t, 0, (const uint8_t *)f.master, 4 * 2500, &h);
    expect_narrow(&f, &h, 0);
    memset(&h, 0, sizeof h);
    xbase_hint(x, f.st, opt, &t, 2500, (const uint8_t *)(f.master + 2500), 4 * (N - 2500), &h);
    expect_narrow(&f, &h, 2500);
    xbase_free(x);

    /* Values that differ only below bf16's precision still round to w. */
    float *m2 = ut_xmalloc(N * sizeof *m2);
    for (size_t i = 0; i < N; i++) {
        uint32_t v;
        memcpy(&v, &f.master[i], 4);
        if (ut_bf16(v ^ 1) == ut_bf16(v)) v ^= 1;
        memcpy(&m2[i], &v, 4);
    }
    hint_of(&f, opt, &t, 0, m2, N, &h);
    expect_narrow(&f, &h, 0);
    free(m2);
    fx_close(&f);
}
END_TEST

/* Other values of the same size (an exp_avg), values that differ from w
** in a sampled window only, or the masters with an element more or less:
** no narrow base. */
START_TEST(test_no_match)
{
    struct fx f;
    fx_open(&f);
    uint64_t opt = fx_mk(&f, f.d, "optimizer.safetensors", S_IFREG | 0644);
    struct store_hint h;
    struct fsm_tensor t = f32_tensor(4096, N);

    float *other = ut_xmalloc((N + 1) * sizeof *other);
    uint64_t s = ut_seed(99);
    for (size_t i = 0; i < N; i++) other[i] = (float)(0.02 * ut_gauss(&s));
    hint_of(&f, opt, &t, 0, other, N, &h);
    ck_assert_int_eq(h.has_narrow, 0);

    /* The first elements match (the cheap check), the middle ones do not. */
    memcpy(other, f.master, N * sizeof *other);
    for (size_t i = N / 2 - 40; i < N / 2 + 40; i++) other[i] = -other[i] * 3.0f + 1.0f;
    hint_of(&f, opt, &t, 0, other, N, &h);
    ck_assert_int_eq(h.has_narrow, 0);

    /* The right values, the wrong element count. */
    memcpy(other, f.master, N * sizeof *other);
    other[N] = other[N - 1];
    struct fsm_tensor t1 = f32_tensor(4096, N + 1);
    hint_of(&f, opt, &t1, 0, other, N + 1, &h);
    ck_assert_int_eq(h.has_narrow, 0);
    struct fsm_tensor t2 = f32_tensor(4096, N - 1);
    hint_of(&f, opt, &t2, 0, other, N - 1, &h);
    ck_assert_int_eq(h.has_narrow, 0);

    /* Not fp32. */
    struct fsm_tensor t3 = f32_tensor(4096, N);
    t3.dtype = FMT_I32;
    hint_of(&f, opt, &t3, 0, f.master, N, &h);
    ck_assert_int_eq(h.has_narrow, 0);

    /* And the control: the masters themselves do match. */
    hint_of(&f, opt, &t, 0, f.master, N, &h);
    ck_assert_int_eq(h.has_narrow, 1);
    free(other);
    fx_close(&f);
}
END_TEST

/* A file in another directory does not see the model. */
START_TEST(test_other_dir)
{
    struct fx f;
    fx_open(&f);
    uint64_t opt = fx_mk(&f, f.other, "optimizer.safetensors", S_IFREG | 0644);
    struct fsm_tensor t = f32_tensor(4096, N);
    struct store_hint h;
    hint_of(&f, opt, &t, 0, f.master, N, &h);
    ck_assert_int_eq(h.has_narrow, 0);
    fx_close(&f);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = {test_master_finds_bf16, test_no_match, test_other_dir, NULL};
    return ut_main("xbase",
                   (const struct ut_tcase[]){{.name = "core", .timeout = 60, .tests = tests},
                                             {0}});
}
