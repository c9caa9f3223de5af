/*
** fmt_base.c: what the format parsers share (fmt_int.h): memory accounting
** against FMT_MAX_MEM and the dtype table. fmt.c drives fmt_json.c and
** fmt_pickle.c; all three use this and nothing of each other's but their
** entry points, so no file of the module needs a file that needs it back.
*/
#include "fmt_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- memory accounting ---- */

static int mem_take(struct fmt_mem *m, size_t old, size_t bytes)
{
    if (bytes > old && m->cur - old + bytes > m->limit) return -E2BIG;
    if (m->fail_after == 0) {
        m->fail_after = -1; /* one failure; later allocations work */
        m->oom = 1;
        return -ENOMEM;
    }
    if (m->fail_after > 0) m->fail_after--;
    return 0;
}

void fmt_mem_count(struct fmt_mem *m, size_t old, size_t bytes)
{
    m->cur = m->cur - old + bytes;
    if (m->cur > m->peak) m->peak = m->cur;
}

int fmt_mem_reserve(struct fmt_mem *m, void **p, size_t *cap, size_t need,
                    size_t elem, size_t max)
{
    if (need <= *cap) return 0;
    if (need > max || max > SIZE_MAX / elem) return -E2BIG;
    size_t n = *cap ? *cap : 16;
    while (n < need) n = n > max / 2 ? max : n * 2;
    /* Near the limit, settle for exactly what is needed. */
    if (m->cur - *cap * elem + n * elem > m->limit) n = need;
    int rc = mem_take(m, *cap * elem, n * elem);
    if (rc < 0) return rc;
    void *q = realloc(*p, n * elem);
    if (!q) {
        m->oom = 1;
        return -ENOMEM;
    }
    fmt_mem_count(m, *cap * elem, n * elem);
    *p = q;
    *cap = n;
    return 0;
}

void *fmt_mem_alloc(struct fmt_mem *m, size_t n)
{
    if (mem_take(m, 0, n) < 0) return NULL;
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        m->oom = 1;
        return NULL;
    }
    fmt_mem_count(m, 0, n);
    return p;
}

void fmt_mem_free(struct fmt_mem *m, void *p, size_t n)
{
    if (!p) return;
    free(p);
    m->cur -= n;
}

/* ---- dtypes ---- */

const struct fmt_dtype_info fmt_dtypes[FMT_DTYPE_MAX] = {
    [FMT_OPAQUE] = {"opaque", 0, 0, 0},
    [FMT_BOOL] = {"BOOL", 1, 1, 0},
    [FMT_U8] = {"U8", 1, 1, 0},
    [FMT_I8] = {"I8", 1, 1, 0},
    [FMT_I16] = {"I16", 2, 1, 0},
    [FMT_U16] = {"U16", 2, 1, 0},
    [FMT_F16] = {"F16", 2, 1, 1},
    [FMT_BF16] = {"BF16", 2, 1, 1},
    [FMT_I32] = {"I32", 4, 1, 0},
    [FMT_U32] = {"U32", 4, 1, 0},
    [FMT_F32] = {"F32", 4, 1, 1},
    [FMT_I64] = {"I64", 8, 1, 0},
    [FMT_U64] = {"U64", 8, 1, 0},
    [FMT_F64] = {"F64", 8, 1, 1},
    [FMT_C64] = {"C64", 4, 2, 1},
    [FMT_C128] = {"C128", 8, 2, 1},
    [FMT_F8_E5M2] = {"F8_E5M2", 1, 1, 1},
    [FMT_F8_E4M3] = {"F8_E4M3", 1, 1, 1},
    [FMT_F8_E8M0] = {"F8_E8M0", 1, 1, 1},
    [FMT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 1, 1, 1},
    [FMT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 1, 1, 1},
};

const char *fmt_dtype_name(uint8_t dtype)
{
    return dtype < FMT_DTYPE_MAX ? fmt_dtypes[dtype].name : "?";
}

int fmt_dtype_is_float(uint8_t dtype)
{
    return dtype < FMT_DTYPE_MAX && fmt_dtypes[dtype].is_float;
}

int fmt_tensor_set_dtype(struct fmt_tensor *t, uint8_t dtype)
{
    if (dtype == FMT_OPAQUE || dtype >= FMT_DTYPE_MAX) return -EINVAL;
    t->dtype = dtype;
    t->width = fmt_dtypes[dtype].width;
    t->is_float = fmt_dtypes[dtype].is_float;
    return 0;
}
