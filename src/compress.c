/*
** compress.c: compressing the blocks writers stored raw (see compress.h).
*/
#include "compress.h"
#include "codec.h"
#include "common.h"

#include <stdlib.h>

#define COMPRESS_BATCH 64

/* r's block encoded as the workers would have into *nc (appended, not
** durable); 1 if that is smaller than the raw record, 0 if not. */
static int encode_raw(struct store *st, const struct fsm_rawblock *r, uint8_t *raw,
                      struct fsm_chunk *nc)
{
    CK_TRY(store_read_block(st, &r->c, 0, r->c.raw_len, raw));
    struct store_hint h = {.width = r->width,
                           .is_float = (r->flags & FSM_PRED_FLOAT) != 0,
                           .plain = (r->flags & FSM_PRED_PLAIN) != 0,
                           .has_narrow = r->narrow.id != 0 && r->width != 0,
                           .narrow = r->narrow, .narrow_off = r->narrow_off};
    CK_TRY(store_put_block(st, raw, r->c.raw_len, &h, nc));
    return nc->stored_len < r->c.stored_len;
}

/* One batch: swap in the compressed records that pay, drop every row. */
static int compress_batch(struct store *st, const struct fsm_rawblock *v, size_t n,
                          struct compress_stats *s)
{
    struct fsm_chunk *nc = calloc(n, sizeof *nc);
    uint64_t *ob = calloc(n, sizeof *ob), *done = calloc(n, sizeof *done);
    uint8_t *raw = NULL;
    size_t k = 0, big = 1, moved = 0;
    for (size_t i = 0; i < n; i++) big = CK_MAX(big, (size_t)v[i].c.raw_len);
    int rc = nc && ob && done && (raw = malloc(big)) ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        done[i] = v[i].c.id;
        if (v[i].c.codec != CODEC_RAW || v[i].c.base) continue; /* changed since */
        int pays = encode_raw(st, &v[i], raw, &nc[k]);
        if (pays < 0) rc = pays;
        if (pays <= 0) continue;
        s->before += v[i].c.stored_len;
        s->after += nc[k].stored_len;
        nc[k].id = v[i].c.id;
        ob[k++] = 0; /* a raw block has no base */
    }
    if (rc == 0) rc = store_swap_records(st, nc, ob, k, &moved);
    if (rc == 0) rc = fsmeta_compress_done(st->meta, done, n);
    s->blocks += rc == 0 ? n : 0;
    s->compressed += moved;
    free(nc), free(ob), free(done), free(raw);
    return rc;
}

/* Rows of blocks that died raw are dropped, so an idle queue is empty. */
static int drop_stale(struct store *st)
{
    uint64_t left = 0;
    CK_TRY(fsmeta_compress_count(st->meta, &left));
    return left ? fsmeta_compress_done(st->meta, NULL, 0) : 0;
}

int compress_pending(struct store *st, const volatile int *stop, size_t max,
                     struct compress_stats *s)
{
    size_t seen = 0;
    for (;;) {
        if (stop && *stop) return 0;
        if (max && seen >= max) return 1;
        struct fsm_rawblock *v;
        size_t n;
        size_t want = max ? CK_MIN((size_t)COMPRESS_BATCH, max - seen) : COMPRESS_BATCH;
        CK_TRY(fsmeta_compress_next(st->meta, want, &v, &n));
        int rc = n ? compress_batch(st, v, n, s) : 0;
        free(v);
        CK_TRY(rc);
        if (n < want) return n ? 0 : drop_stale(st);
        seen += n;
    }
}
