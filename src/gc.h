/*
** gc.h: reclaiming space, in a store nobody has mounted (ckptctl gc) or
** from the daemon while it serves (online: in the background, and when
** ckptctl gc asks it through the control socket, ctl.h).
**
** One run:
**   1. Garbage chunk rows (no references, dead for longer than the grace
**      period) are deleted in one transaction.
**   2. Packs no chunk row names are deleted outright.
**   3. With rebase: a kept version's delta whose base only pruned versions
**      used is re-encoded standalone (same bytes), so the pruned chain dies
**      instead of living on as its base.
**   4. Packs whose live records fill less than `threshold` of the file are
**      compacted, emptiest first: their live records are appended to the
**      pack taking appends, which is synced; one transaction points the
**      chunks at their new places; only then is the old pack deleted.
**      Copies may use half of the metadata reserve: a full disk can always
**      be reclaimed.
**   5. If the pack taking appends would qualify for 4, it is sealed (the
**      next record starts a new pack) and 1-4 run once more.
**   6. In the packs 4 keeps, runs of garbage of 1 MiB or more are punched
**      out of the file (pack_punch): a block stored raw and compressed
**      later, or a newest version made a reverse delta, leaves such runs
**      in packs too live to be worth a copy.
**
** Safe beside writers (store.h, store_pin): packs a write session may still
** append to, or hold records of that meta.db does not know yet, are left
** alone; garbage a session's delta may bring back to life (a base it picked
** before the base died) is kept. Readers that hold a moved chunk's old
** place find the new one (store.c). Interrupted at any point, the store
** stays consistent: before a commit the new copies are unreferenced bytes;
** after it, the old pack is an unnamed one, deleted by the next run.
*/
#ifndef CKPT_GC_H
#define CKPT_GC_H

#include <stdint.h>

#include "store.h"

/* Packs less than this share live are rewritten by default. Reverse deltas
** (reverse.h) leave each superseded version's standalone records dead in
** the packs that hold the newest: at 3/4 a settled store's disk use follows
** its stored bytes, for at most 3 bytes copied per byte freed. */
#define GC_THRESHOLD 0.75

struct gc_opts {
    int64_t grace_ns;         /* leave garbage that died more recently than this */
    double threshold;         /* compact packs whose live share is below this */
    int rebase;               /* step 3 */
    const volatile int *stop; /* set: finish the pack in hand and return */
};

struct gc_stats {
    uint64_t chunks_deleted, records_moved, packs_rewritten, packs_removed;
    uint64_t rebased;                  /* deltas re-encoded standalone (step 3) */
    uint64_t sealed;                   /* packs sealed (step 5) */
    uint64_t punched;                  /* disk bytes given back by step 6 */
    uint64_t bytes_before, bytes_after; /* on the disk, of all pack files */
};

/* done of total steps of the current pass. */
typedef void (*gc_progress_cb)(void *ctx, uint64_t done, uint64_t total);

/* st must be opened read-write (the daemon's, or holding the store lock). */
int gc_run(struct store *st, const struct gc_opts *o, gc_progress_cb cb, void *ctx,
           struct gc_stats *out);

/* 1 if the run found nothing to do. */
int gc_idle(const struct gc_stats *s);

#endif
