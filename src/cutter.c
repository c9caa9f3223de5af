/*
** cutter.c: block boundaries and hints from the format parser (see cutter.h).
*/
#include "cutter.h"
#include "common.h"
#include "fmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor left in plain blocks: where it is and its element type. */
struct span {
    uint64_t off, len;
    uint8_t width, is_float;
};

struct cutter {
    size_t bs;                 /* block size */
    int based;                 /* cutter_set_base was called */
    fmt_parser *fp;            /* NULL after running out of memory */
    struct fmt_tensor *q;      /* announced tensors not yet passed: q[qhead..qlen) */
    size_t qhead, qlen, qcap;
    struct span *sq;           /* the same of the tensors too small to cut */
    size_t sqhead, sqlen, sqcap;
    struct fsm_tensor first;   /* cutter_first's record */
    struct extmap *bmap;       /* base version */
    struct fsm_tensor *bt;     /* its tensors, sorted by name */
    size_t nbt;
    uint64_t bt_for;           /* offset of the tensor bt_cur was looked up for */
    const struct fsm_tensor *bt_cur; /* its base tensor, NULL if none */
    struct fsm_tensor *used;   /* tensors cut so far */
    size_t nused, ucap;
    char *family;
};

struct cutter *cutter_new(size_t bs)
{
    struct cutter *c = calloc(1, sizeof *c);
    if (c && fmt_parser_new(&c->fp) < 0) {
        free(c);
        return NULL;
    }
    if (c) c->bs = bs, c->bt_for = UINT64_MAX;
    return c;
}

void cutter_free(struct cutter *c)
{
    if (!c) return;
    fmt_parser_free(c->fp);
    free(c->q);
    free(c->sq);
    extmap_put(c->bmap);
    free(c->bt);
    free(c->used);
    free(c->family);
    free(c);
}

void cutter_family_key(const char *path, char *out)
{
    /* Numbers in directory names become '#': checkpoint-500/x and
    ** checkpoint-1000/x are one family; the file name is kept as it is. */
    const char *last = strrchr(path, '/');
    char *w = out;
    for (const char *r = path; *r;) {
        if (last && r < last && *r >= '0' && *r <= '9') {
            while (r < last && *r >= '0' && *r <= '9') r++;
            *w++ = '#';
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

void cutter_set_family(struct cutter *c, const char *path)
{
    free(c->family);
    c->family = malloc(strlen(path) + 1);
    if (c->family) cutter_family_key(path, c->family);
}

const char *cutter_family(const struct cutter *c)
{
    return c->family;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct fsm_tensor *)a)->name, ((const struct fsm_tensor *)b)->name);
}

void cutter_set_base(struct cutter *c, struct extmap *map, struct fsm_tensor *t, size_t n)
{
    extmap_put(c->bmap);
    free(c->bt);
    if (n) qsort(t, n, sizeof *t, by_name);
    c->bmap = map;
    c->bt = t;
    c->nbt = n;
    c->bt_for = UINT64_MAX;
    c->based = 1;
}

int cutter_has_base(const struct cutter *c)
{
    return c->based;
}

/* Room for one more entry of size sz at the end of queue *q, whose live
** entries are [*head, *len): the passed ones are dropped first. */
static int queue_room(void **q, size_t *head, size_t *len, size_t *cap, size_t sz)
{
    if (*head > 0 && *len == *cap) {
        memmove(*q, (char *)*q + *head * sz, (*len - *head) * sz);
        *len -= *head;
        *head = 0;
    }
    if (*len < *cap) return 0;
    size_t ncap = *cap ? 2 * *cap : 64;
    void *nq = realloc(*q, ncap * sz);
    if (!nq) return -ENOMEM;
    *q = nq;
    *cap = ncap;
    return 0;
}

/* Queue an announced tensor: to be cut into blocks of its own, or, small,
** for the element type of the plain blocks holding it. Without memory it is
** forgotten, and cut (or typed) as plain bytes. */
static void push(struct cutter *c, const struct fmt_tensor *t)
{
    if (t->len < CUTTER_MIN_TENSOR) {
        if (queue_room((void **)&c->sq, &c->sqhead, &c->sqlen, &c->sqcap, sizeof *c->sq) == 0)
            c->sq[c->sqlen++] = (struct span){t->off, t->len, t->width, t->is_float};
        return;
    }
    if (queue_room((void **)&c->q, &c->qhead, &c->qlen, &c->qcap, sizeof *c->q) == 0)
        c->q[c->qlen++] = *t;
}

void cutter_feed(struct cutter *c, const void *buf, size_t len)
{
    if (!c->fp) return;
    if (fmt_feed(c->fp, buf, len) < 0) {
        fmt_parser_free(c->fp); /* parsing is an optimisation: stop it */
        c->fp = NULL;
        return;
    }
    struct fmt_tensor t;
    while (fmt_next(c->fp, &t) == 1) push(c, &t);
}

/* The announced tensor that holds or follows start, dropping those before
** it; NULL if none. A tensor announced too late to cut at its first byte is
** dropped too: its blocks would not line up with its previous version's. */
static const struct fmt_tensor *current(struct cutter *c, uint64_t start)
{
    size_t bs = c->bs;
    while (c->qhead < c->qlen) {
        const struct fmt_tensor *t = &c->q[c->qhead];
        int passed = t->off + t->len <= start;
        int misaligned = t->off < start && (start - t->off) % bs != 0;
        if (!passed && !misaligned) return t;
        c->qhead++;
    }
    return NULL;
}

uint64_t cutter_block_end(struct cutter *c, uint64_t start)
{
    const struct fmt_tensor *t = current(c, start);
    uint64_t end = start + c->bs;
    if (!t) return end;
    if (t->off <= start) return CK_MIN(end, t->off + t->len);
    return CK_MIN(end, t->off);
}

/* The metadata record of announced tensor t. */
static void to_record(const struct fmt_tensor *t, struct fsm_tensor *u)
{
    *u = (struct fsm_tensor){.off = t->off, .len = t->len, .dtype = t->dtype,
                             .width = t->width};
    memcpy(u->name, t->name, sizeof u->name);
    u->name[sizeof u->name - 1] = 0;
}

/* Record t among the tensors cut; returns the record, NULL without memory
** (only the next version's deltas suffer). */
static const struct fsm_tensor *note_used(struct cutter *c, const struct fmt_tensor *t)
{
    if (c->nused && c->used[c->nused - 1].off == t->off) return &c->used[c->nused - 1];
    if (ck_grow((void **)&c->used, &c->ucap, c->nused, sizeof *c->used) < 0) return NULL;
    struct fsm_tensor *u = &c->used[c->nused++];
    to_record(t, u);
    return u;
}

/* The base version's tensor of the same name, dtype and length as t; looked
** up once per tensor, not per block. */
static const struct fsm_tensor *base_tensor(struct cutter *c, const struct fmt_tensor *t)
{
    if (c->bt_for == t->off) return c->bt_cur;
    c->bt_for = t->off;
    c->bt_cur = NULL;
    if (!c->bmap || !c->nbt) return NULL;
    struct fsm_tensor key = {0};
    snprintf(key.name, sizeof key.name, "%s", t->name);
    const struct fsm_tensor *b = bsearch(&key, c->bt, c->nbt, sizeof key, by_name);
    if (b && b->dtype == t->dtype && b->len == t->len) c->bt_cur = b;
    return c->bt_cur;
}

/* The chunk of the base version holding its bytes [off, off + len); 0 if
** no one chunk holds exactly those. */
static int base_chunk(struct cutter *c, uint64_t off, size_t len, struct fsm_chunk *out)
{
    if (!c->bmap) return 0;
    const struct fsm_extent *e = c->bmap->e;
    size_t lo = 0, hi = c->bmap->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (e[mid].file_off < off) lo = mid + 1; else hi = mid;
    }
    if (lo == c->bmap->n || e[lo].file_off != off || e[lo].c.raw_len != len) return 0;
    *out = e[lo].c;
    return 1;
}

/* The chunk of the base version holding bytes rel.. of tensor t, len long. */
static int find_base(struct cutter *c, const struct fmt_tensor *t, uint64_t rel, size_t len,
                     struct fsm_chunk *out)
{
    const struct fsm_tensor *b = base_tensor(c, t);
    return b && base_chunk(c, b->off + rel, len, out);
}

/* The element type of plain block [start, start + len): bytes, unless the
** small tensors in it are floats of one width w >= 2, aligned to the block,
** and fill half of it or more (a run of biases and norm weights). */
static void plain_type(struct cutter *c, uint64_t start, size_t len, struct store_hint *h)
{
    while (c->sqhead < c->sqlen && c->sq[c->sqhead].off + c->sq[c->sqhead].len <= start)
        c->sqhead++;
    unsigned w = 0;
    uint64_t cover = 0, end = start + len;
    for (size_t i = c->sqhead; i < c->sqlen && c->sq[i].off < end; i++) {
        const struct span *s = &c->sq[i];
        uint64_t a = CK_MAX(s->off, start), b = CK_MIN(s->off + s->len, end);
        /* Widths are powers of two: the wrapped difference keeps the residue. */
        if (!s->is_float || s->width < 2 || (w && s->width != w) || (s->off - start) % s->width) {
            w = 0;
            break;
        }
        w = s->width;
        cover += b - a;
    }
    h->width = w && 2 * cover >= len ? w : 1;
    h->is_float = h->width > 1;
}

const struct fsm_tensor *cutter_hint(struct cutter *c, uint64_t start, size_t len,
                                     struct store_hint *h)
{
    memset(h, 0, sizeof *h);
    const struct fmt_tensor *t = current(c, start);
    if (!t || t->off > start || start + len > t->off + t->len) {
        h->plain = 1;
        plain_type(c, start, len, h);
        h->has_base = base_chunk(c, start, len, &h->base);
        return NULL;
    }
    h->width = t->width;
    h->is_float = t->is_float;
    h->has_base = find_base(c, t, start - t->off, len, &h->base);
    return note_used(c, t);
}

const struct fsm_tensor *cutter_tensors(const struct cutter *c, size_t *n)
{
    *n = c->nused;
    return c->used;
}

const struct fsm_tensor *cutter_first(struct cutter *c)
{
    if (c->nused) return c->used;
    if (c->qhead == c->qlen) return NULL;
    to_record(&c->q[c->qhead], &c->first);
    return &c->first;
}
