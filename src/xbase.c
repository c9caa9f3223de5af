/*
** xbase.c: narrow bases for fp32 master weights (see xbase.h).
*/
#include "xbase.h"
#include "common.h"
#include "fmt.h"

#include <stdlib.h>
#include <string.h>

#define XB_SIBLINGS 4 /* sibling versions searched */
#define XB_SAMPLE 64  /* elements per sample window; two windows per block */

struct xcand {
    struct fsm_tensor t; /* a bf16 tensor of a sibling version */
    size_t ver;          /* which of x->ext */
    int fp_state;        /* 0: fp not read yet; 1: read; -1: unreadable */
    uint16_t fp[XB_SAMPLE]; /* its first elements: cheap to compare */
};

struct xbase {
    int loaded;
    struct xcand *c;
    size_t nc;
    struct fsm_extent *ext[XB_SIBLINGS];
    size_t next[XB_SIBLINGS];
    uint64_t memo_off; /* the fp32 tensor memo is about (its offset), */
    long memo;         /* its matching candidate, or -1 */
    int memo_set;
};

struct xbase *xbase_new(void) { return calloc(1, sizeof(struct xbase)); }

void xbase_free(struct xbase *x)
{
    if (!x) return;
    for (size_t i = 0; i < XB_SIBLINGS; i++) free(x->ext[i]);
    free(x->c);
    free(x);
}

/* Keep the bf16 tensors of sibling version ver (slot i), and its extents
** when it has any. */
static int load_one(struct xbase *x, struct store *st, uint64_t ver, size_t i)
{
    struct fsm_tensor *t;
    size_t nt, cap = x->nc, first = x->nc;
    CK_TRY(fsmeta_version_tensors(st->meta, ver, &t, &nt));
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < nt; k++) {
        if (t[k].dtype != FMT_BF16) continue;
        if ((rc = ck_grow((void **)&x->c, &cap, x->nc, sizeof *x->c)) < 0) break;
        x->c[x->nc++] = (struct xcand){.t = t[k], .ver = i};
    }
    free(t);
    if (rc == 0 && x->nc > first)
        rc = fsmeta_version_extents(st->meta, ver, &x->ext[i], &x->next[i]);
    if (rc < 0) x->nc = first; /* no candidates without their extents */
    return rc;
}

static void load(struct xbase *x, struct store *st, uint64_t ino)
{
    uint64_t sib[XB_SIBLINGS];
    size_t ns = 0;
    x->loaded = 1;
    if (fsmeta_siblings(st->meta, ino, UINT64_MAX, sib, XB_SIBLINGS, &ns) < 0) return;
    for (size_t i = 0; i < ns; i++)
        if (load_one(x, st, sib[i], i) < 0) return;
}

/* The extent of sibling slot v holding file bytes [off, off + len); NULL if
** no one extent does. */
static const struct fsm_extent *extent_over(const struct xbase *x, size_t v, uint64_t off,
                                            uint64_t len)
{
    const struct fsm_extent *e = x->ext[v];
    size_t lo = 0, hi = x->next[v];
    while (lo < hi) { /* the last extent starting at or before off */
        size_t mid = (lo + hi) / 2;
        if (e[mid].file_off <= off) lo = mid + 1; else hi = mid;
    }
    if (lo == 0) return NULL;
    e += lo - 1;
    return off + len <= e->file_off + e->c.raw_len ? e : NULL;
}

/* fp32 bits rounded to bf16, nearest even; -1 for NaN and infinities,
** which any bf16 may stand for. */
static long bf16_of(uint32_t f)
{
    if ((f >> 23 & 0xff) == 0xff) return -1;
    return (long)((f + 0x7fff + (f >> 16 & 1)) >> 16);
}

/* Whether the fp32 values f[0..k) round to the bf16 values b[0..k). */
static int rounds_to(const uint8_t *f, const uint16_t *b, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        uint32_t v;
        memcpy(&v, f + 4 * i, 4);
        long r = bf16_of(v);
        if (r >= 0 && r != b[i]) return 0;
    }
    return 1;
}

/* Read elements [e, e + k) of candidate c into b. */
static int read_cand(const struct xbase *x, struct store *st, const struct xcand *c, uint64_t e,
                     size_t k, uint16_t *b)
{
    return store_read_range(st, x->ext[c->ver], x->next[c->ver], b, 2 * k, c->t.off + 2 * e);
}

/* Whether elements [w, w + k) of the block (raw, starting at element e0)
** round to candidate c. */
static int window_matches(const struct xbase *x, struct store *st, const struct xcand *c,
                          uint64_t e0, const uint8_t *raw, size_t w, size_t k)
{
    uint16_t got[XB_SAMPLE];
    return read_cand(x, st, c, e0 + w, k, got) == 0 && rounds_to(raw + 4 * w, got, k);
}

/* Whether the first elements of a tensor's block raw round to candidate
** c's first elements, read once and kept: the cheap test every candidate
** of the right size gets before a real one. */
static int fp_matches(const struct xbase *x, struct store *st, struct xcand *c,
                      const uint8_t *raw, size_t cnt)
{
    size_t k = CK_MIN(cnt, (size_t)XB_SAMPLE);
    if (c->fp_state == 0) c->fp_state = read_cand(x, st, c, 0, k, c->fp) == 0 ? 1 : -1;
    return c->fp_state > 0 && rounds_to(raw, c->fp, k);
}

static int matches(const struct xbase *x, struct store *st, const struct xcand *c, uint64_t e0,
                   const uint8_t *raw, size_t cnt)
{
    size_t k = CK_MIN(cnt, (size_t)XB_SAMPLE);
    return window_matches(x, st, c, e0, raw, 0, k) &&
           window_matches(x, st, c, e0, raw, (cnt - k) / 2, k);
}

void xbase_hint(struct xbase *x, struct store *st, uint64_t ino, const struct fsm_tensor *t,
                uint64_t e0, const uint8_t *raw, size_t len, struct store_hint *h)
{
    size_t cnt = len / 4;
    if (!x || t->dtype != FMT_F32 || t->width != 4 || len % 4 || cnt == 0) return;
    if (!x->loaded) load(x, st, ino);
    if (!x->memo_set || x->memo_off != t->off) {
        x->memo_set = 1, x->memo_off = t->off, x->memo = -1;
        for (size_t i = 0; e0 == 0 && i < x->nc && x->memo < 0; i++)
            if (x->c[i].t.len / 2 == t->len / 4 && fp_matches(x, st, &x->c[i], raw, cnt) &&
                matches(x, st, &x->c[i], e0, raw, cnt))
                x->memo = (long)i;
    }
    if (x->memo < 0) return;
    const struct xcand *c = &x->c[x->memo];
    const struct fsm_extent *e = extent_over(x, c->ver, c->t.off + 2 * e0, 2 * cnt);
    if (!e || !matches(x, st, c, e0, raw, cnt)) return;
    h->has_narrow = 1;
    h->narrow = e->c;
    h->narrow_off = (uint32_t)((c->t.off + 2 * e0 - e->file_off) / 2);
}
