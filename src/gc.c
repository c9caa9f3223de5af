/*
** gc.c: garbage collection of chunk rows and packs (see gc.h).
*/
#include "gc.h"
#include "common.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct live {
    struct fsm_chunk *c;
    size_t n, cap;
    int err;
};

static int add_live(void *ctx, const struct fsm_chunk *c, int64_t refs)
{
    (void)refs; /* rows left after step 1 are all kept: live or in grace */
    struct live *l = ctx;
    if ((l->err = ck_grow((void **)&l->c, &l->cap, l->n, sizeof *l->c)) < 0) return 1;
    l->c[l->n++] = *c;
    return 0;
}

/* Size and age of a pack; -ENOENT if it is gone. */
static int pack_info(struct store *st, uint32_t id, uint64_t *size, int64_t *mtime)
{
    char name[48];
    snprintf(name, sizeof name, "packs/%08u.pack", id);
    struct stat sb;
    if (fstatat(st->dirfd, name, &sb, 0) < 0) return -errno;
    *size = (uint64_t)sb.st_size;
    *mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    return 0;
}

/* Copy the records of c[0..n) (one pack) to the append pack; then point the
** chunks at the copies in one durable transaction. */
static int move_records(struct store *st, struct fsm_chunk *c, size_t n)
{
    uint32_t *to_pack = calloc(n ? n : 1, sizeof *to_pack);
    uint64_t *to_off = calloc(n ? n : 1, sizeof *to_off);
    int rc = to_pack && to_off ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct pack_rec r = {c[i].codec, c[i].raw_len, c[i].stored_len, c[i].hash};
        void *buf = malloc(r.stored_len ? r.stored_len : 1);
        rc = buf ? pack_read(st->packs, c[i].pack, c[i].off, &r, buf) : -ENOMEM;
        if (rc == 0) rc = pack_append(st->packs, &r, buf, &to_pack[i], &to_off[i]);
        if (rc == 0 && (i == 0 || to_pack[i] != to_pack[i - 1]) && i > 0)
            rc = pack_sync(st->packs, to_pack[i - 1]);
        free(buf);
    }
    if (rc == 0 && n) rc = pack_sync(st->packs, to_pack[n - 1]);
    if (rc == 0) rc = fsmeta_begin(st->meta, 1);
    if (rc == 0) {
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = fsmeta_chunk_move(st->meta, c[i].id, to_pack[i], to_off[i]);
        rc = fsmeta_end(st->meta, rc);
    }
    free(to_pack);
    free(to_off);
    return rc;
}

/* Rewrite or remove pack id, whose live chunks are c[0..n). */
static int collect_pack(struct store *st, const struct gc_opts *o, uint32_t id,
                        struct fsm_chunk *c, size_t n, int64_t now, struct gc_stats *out)
{
    uint64_t size;
    int64_t mtime;
    int rc = pack_info(st, id, &size, &mtime);
    if (rc == -ENOENT) return 0;
    CK_TRY(rc);
    if (mtime > now - o->grace_ns) return 0; /* still being written, perhaps */
    uint64_t live = 0;
    for (size_t i = 0; i < n; i++) live += PACK_REC_HDR + c[i].stored_len;
    if (n && (double)live >= o->threshold * (double)size) return 0;
    if (n) {
        CK_TRY(move_records(st, c, n));
        out->records_moved += n;
        out->packs_rewritten++;
    } else {
        out->packs_removed++;
    }
    return pack_remove(st->packs, id);
}

static uint64_t packs_bytes(struct store *st, uint32_t max_id)
{
    uint64_t total = 0, size;
    int64_t mtime;
    for (uint32_t id = 1; id <= max_id; id++)
        if (pack_info(st, id, &size, &mtime) == 0) total += size;
    return total;
}

int gc_run(struct store *st, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out)
{
    *out = (struct gc_stats){0};
    int64_t now = ck_now_ns();
    uint32_t last = pack_max_id(st->packs); /* packs made by this run come after */
    out->bytes_before = packs_bytes(st, last);
    CK_TRY(fsmeta_gc_chunks(st->meta, now - o->grace_ns, &out->chunks_deleted));
    struct live l = {0};
    int rc = fsmeta_all_chunks(st->meta, add_live, &l);
    if (rc == 0) rc = l.err;
    size_t i = 0;
    for (uint32_t id = 1; rc == 0 && id <= last; id++) {
        while (i < l.n && l.c[i].pack < id) i++;
        size_t j = i;
        while (j < l.n && l.c[j].pack == id) j++;
        rc = collect_pack(st, o, id, l.c + i, j - i, now, out);
        if (cb) cb(ctx, id, last);
        i = j;
    }
    free(l.c);
    out->bytes_after = packs_bytes(st, pack_max_id(st->packs));
    return rc;
}
