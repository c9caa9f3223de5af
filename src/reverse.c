/*
** reverse.c: re-encoding older blocks as deltas against newer ones (see
** reverse.h).
*/
#include "reverse.h"
#include "codec.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

#define REVERSE_BATCH 64

/* Can older take newer as its base without passing the read bounds? Its
** own deltas (height) move one step further from their keyframe. */
static int chain_fits(struct store *st, const struct fsm_rpair *p)
{
    const struct fsm_chunk *o = &p->older, *n = &p->newer;
    if (o->base || o->codec == CODEC_WIDE || o->raw_len != n->raw_len) return 0;
    uint32_t height = 0;
    if (fsmeta_chunk_height(st->meta, o->id, &height) < 0) return 0;
    if (n->depth + 1 + height > STORE_MAX_DEPTH) return 0;
    return n->chain <= CK_MAX((uint64_t)STORE_MAX_CHAIN_X * o->raw_len,
                              (uint64_t)STORE_CHAIN_FLOOR);
}

/* A reverse delta rewrites a block that is stored already, and the record
** it replaces is garbage until gc rewrites its pack: it must save at least
** this share of the block's stored bytes, or the block stays a keyframe. */
#define REVERSE_MIN_SAVING 8 /* 1/8 */

/* older's bytes as a delta against newer into *nc (appended, not durable);
** 1 if that saves enough of what older has (REVERSE_MIN_SAVING), 0 if not
** (nothing to swap). */
static int encode_pair(struct store *st, const struct fsm_rpair *p, uint8_t *raw,
                       struct fsm_chunk *nc)
{
    CK_TRY(store_read_block(st, &p->older, 0, p->older.raw_len, raw));
    struct store_hint h = {.width = p->width ? p->width : 1,
                           .is_float = (p->flags & FSM_PRED_FLOAT) != 0,
                           .plain = (p->flags & FSM_PRED_PLAIN) != 0,
                           .has_base = 1, .base = p->newer};
    CK_TRY(store_put_block(st, raw, p->older.raw_len, &h, nc));
    return nc->base == p->newer.id &&
           nc->stored_len <= p->older.stored_len - p->older.stored_len / REVERSE_MIN_SAVING;
}

/* One batch of pairs: swap in the reverse deltas that pay, drop them all. */
static int reverse_batch(struct store *st, const struct fsm_rpair *v, size_t n,
                         struct reverse_stats *s)
{
    struct fsm_chunk *nc = calloc(n, sizeof *nc);
    uint64_t *done = calloc(n, sizeof *done);
    uint8_t *raw = NULL;
    size_t k = 0, big = 1, moved = 0;
    for (size_t i = 0; i < n; i++) big = CK_MAX(big, (size_t)v[i].older.raw_len);
    int rc = nc && done && (raw = malloc(big)) ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        done[i] = v[i].newer.id;
        if (!chain_fits(st, &v[i])) continue;
        int pays = encode_pair(st, &v[i], raw, &nc[k]);
        if (pays < 0) rc = pays;
        if (pays <= 0) continue;
        s->before += v[i].older.stored_len;
        s->after += nc[k].stored_len;
        nc[k++].id = v[i].older.id;
    }
    if (rc == 0) rc = store_swap_records(st, nc, NULL, k, &moved); /* standalone: chain_fits */
    if (rc == 0) rc = fsmeta_reverse_done(st->meta, done, n);
    s->pairs += rc == 0 ? n : 0;
    s->reversed += moved;
    free(nc), free(done), free(raw);
    return rc;
}

/* Pairs left that no batch will take (their blocks died, or belong to
** lossy versions) are dropped, so an idle queue is an empty one. */
static int drop_stale(struct store *st)
{
    uint64_t left = 0;
    CK_TRY(fsmeta_reverse_count(st->meta, &left));
    return left ? fsmeta_reverse_done(st->meta, NULL, 0) : 0;
}

int reverse_pending(struct store *st, const volatile int *stop, size_t max,
                    struct reverse_stats *s)
{
    size_t seen = 0;
    for (;;) {
        if (stop && *stop) return 0;
        if (max && seen >= max) return 1;
        struct fsm_rpair *v;
        size_t n;
        size_t want = max ? CK_MIN((size_t)REVERSE_BATCH, max - seen) : REVERSE_BATCH;
        CK_TRY(fsmeta_reverse_next(st->meta, want, &v, &n));
        int rc = n ? reverse_batch(st, v, n, s) : 0;
        free(v);
        CK_TRY(rc);
        if (n < want) return drop_stale(st);
        seen += n;
    }
}
