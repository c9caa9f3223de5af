/*
** extmap.c: reference-counted extent lists (see extmap.h).
*/
#include "extmap.h"

#include <stdlib.h>
#include <string.h>

struct extmap *extmap_new(const struct fsm_extent *ext, size_t n)
{
    struct extmap *m = malloc(sizeof *m + n * sizeof *ext);
    if (!m) return NULL;
    m->refs = 1;
    m->n = n;
    if (n) memcpy(m->e, ext, n * sizeof *ext);
    return m;
}

void extmap_get(struct extmap *m)
{
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

void extmap_put(struct extmap *m)
{
    if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) free(m);
}

size_t extmap_first_after(const struct fsm_extent *ext, size_t n, uint64_t off)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ext[mid].file_off + ext[mid].c.raw_len <= off) lo = mid + 1; else hi = mid;
    }
    return lo;
}
