/*
** gc.h: reclaiming space in a store nobody has mounted (ckptctl gc).
**
**   1. Garbage chunk rows (no references; dead for longer than the grace
**      period) are deleted in one transaction.
**   2. Packs last written before the grace period whose live records fill
**      less than `threshold` of the file are rewritten: their live records
**      are appended to a new pack, which is synced; one transaction points
**      the chunks at their new places; only then is the old pack deleted.
**      Packs no chunk row names are deleted outright.
**
** Interrupted at any point, the store stays consistent: before a commit the
** new copies are unreferenced bytes in a new pack; after it, the old pack
** is an unnamed one, deleted by the next run.
*/
#ifndef CKPT_GC_H
#define CKPT_GC_H

#include <stdint.h>

#include "store.h"

struct gc_opts {
    int64_t grace_ns; /* leave what changed more recently than this */
    double threshold; /* rewrite packs whose live share is below this */
};

struct gc_stats {
    uint64_t chunks_deleted, records_moved, packs_rewritten, packs_removed;
    uint64_t bytes_before, bytes_after; /* of all pack files */
};

typedef void (*gc_progress_cb)(void *ctx, uint64_t done, uint64_t total);

/* st must be opened read-write (holding the store lock). */
int gc_run(struct store *st, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out);

#endif
