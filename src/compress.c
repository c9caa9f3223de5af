/*
** compress.c: compressing the blocks writers stored raw (see compress.h).
*/
#include "compress.h"
#include "codec.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define COMPRESS_BATCH 64

/* Can r be coded against its narrow block without passing the read
** bounds? Reverse deltas made while it was raw may hang below it already. */
static int narrow_fits(struct store *st, const struct fsm_rawblock *r)
{
    uint32_t height = 0;
    if (!r->narrow.id || !r->width || fsmeta_chunk_height(st->meta, r->c.id, &height) < 0)
        return 0;
    return r->narrow.depth + 1 + height <= STORE_MAX_DEPTH;
}

/* r's block encoded as the workers would have into *nc (appended, not
** durable) if that is smaller than the raw record: 1; 0 if not (nothing
** appended). */
static int encode_raw(struct store *st, const struct fsm_rawblock *r, uint8_t *raw,
                      struct fsm_chunk *nc)
{
    CK_TRY(store_verify_block(st, &r->c, raw)); /* not through the readers' cache */
    struct store_hint h = {.width = r->width,
                           .is_float = (r->flags & FSM_PRED_FLOAT) != 0,
                           .plain = (r->flags & FSM_PRED_PLAIN) != 0,
                           .has_narrow = narrow_fits(st, r),
                           .narrow = r->narrow, .narrow_off = r->narrow_off,
                           .below = r->c.stored_len};
    int rc = store_put_block(st, raw, r->c.raw_len, &h, nc);
    return rc < 0 ? rc : rc == 0; /* 1 from put: it would not pay, nothing written */
}

/* One batch: swap in the compressed records that pay and drop the rows
** looked at. A full disk ends the batch (what fitted is kept, and frees
** the raw records it replaces): 1 returned. A block that cannot be read
** stays raw. */
static int compress_batch(struct store *st, const struct fsm_rawblock *v, size_t n,
                          struct compress_stats *s)
{
    struct fsm_chunk *nc = calloc(n, sizeof *nc);
    uint64_t *done = calloc(n, sizeof *done);
    uint8_t *raw = NULL;
    size_t k = 0, big = 1, moved = 0, looked = 0;
    for (size_t i = 0; i < n; i++) big = CK_MAX(big, (size_t)v[i].c.raw_len);
    int rc = nc && done && (raw = malloc(big)) ? 0 : -ENOMEM;
    for (; rc == 0 && looked < n; looked++) {
        const struct fsm_rawblock *r = &v[looked];
        int pays = r->c.codec != CODEC_RAW || r->c.base ? 0 /* changed since */
                                                        : encode_raw(st, r, raw, &nc[k]);
        if (pays == -ENOSPC) break; /* the rest waits for room */
        if (pays == -ENOMEM) rc = pays;
        else if (pays < 0)
            ck_log(CK_LOG_WARN, "raw block %llu left uncompressed: %s",
                   (unsigned long long)r->c.id, strerror(-pays));
        done[looked] = r->c.id;
        if (pays <= 0) continue;
        s->before += r->c.stored_len;
        s->after += nc[k].stored_len;
        nc[k++].id = r->c.id;
    }
    if (rc == 0) rc = store_swap_records(st, nc, NULL, k, &moved); /* raw: no base */
    if (rc == 0) rc = fsmeta_compress_done(st->meta, done, looked);
    s->blocks += rc == 0 ? looked : 0;
    s->compressed += moved;
    free(nc), free(done), free(raw);
    return rc < 0 ? rc : looked < n;
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
        if (rc != 0) return rc < 0 ? rc : 0; /* a full disk: again later */
        if (n < want) return n ? 0 : drop_stale(st);
        seen += n;
    }
}
