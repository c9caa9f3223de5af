/*
** fuzz_fmt_pickle.c: libFuzzer target: the input is a torch data.pkl. It is
** framed as a torch-like zip (local headers with flags 0x0808 and zero
** sizes): "a/data.pkl" holding the input, then entries "a/data/0" to
** "a/data/15" of 64 bytes each, then a second data.pkl with the same input
** under "b/", so the storage table, the entries and the table replacement
** are all reached. Seeds: data.pkl files of the fixtures.
*/
#include "../../src/common.h"
#include "fuzz_common.h"

#include <stdio.h>

struct fbuf {
    uint8_t *b;
    size_t n, cap;
};

static void fput(struct fbuf *f, const void *p, size_t n)
{
    if (f->n + n > f->cap) {
        f->cap = 2 * (f->n + n);
        f->b = realloc(f->b, f->cap);
        FUZZ_REQUIRE(f->b != NULL);
    }
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

/* A local header as torch writes it, then the payload. */
static void entry(struct fbuf *f, const char *name, const uint8_t *d, size_t n)
{
    uint8_t h[30] = {'P', 'K', 3, 4, 20, 0, 8, 8};
    size_t nl = strlen(name);
    h[26] = (uint8_t)nl;
    fput(f, h, sizeof h);
    fput(f, name, nl);
    fput(f, d, n);
}

static void archive(struct fbuf *f, const char *prefix, const uint8_t *pkl, size_t n)
{
    char name[64];
    uint8_t payload[64];
    snprintf(name, sizeof name, "%sdata.pkl", prefix);
    entry(f, name, pkl, n);
    for (int i = 0; i < 16; i++) {
        memset(payload, i, sizeof payload);
        snprintf(name, sizeof name, "%sdata/%d", prefix, i);
        entry(f, name, payload, sizeof payload);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fbuf f = {0};
    archive(&f, "a/", data, size);
    archive(&f, "b/", data, size);
    fuzz_fmt_check(f.b, f.n, fuzz_seed(data, size));
    free(f.b);
    return 0;
}
