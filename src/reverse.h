/*
** reverse.h: reverse deltas, made in the background.
**
** The version people touch most is the newest: it is saved, and loaded to
** resume. So a new version's blocks are stored standalone (a block equal
** to its predecessor shares its chunk), and each block's predecessor, the
** same block of the version before, waits in a queue (fsmeta.h,
** fsmeta_reverse_*) to be re-encoded as a delta against it: the newest
** version decodes without older ones, and history pays, later. As in git
** and xdelta archives, chains point from the past to the present.
**
** A pair is dropped without change when the older block is not a plain
** standalone block (already a delta, or coded against the model weights
** beside it, CODEC_WIDE), when the delta does not come out smaller, or when
** the chain would pass the bounds a read relies on (store.h: at most
** STORE_MAX_DEPTH deltas, about STORE_MAX_CHAIN_X times the block's bytes):
** then the older block stays a keyframe. Each batch's new records are
** made durable before one transaction swaps them in (fsmeta_rebase_commit),
** so a crash leaves either block as it was; the records replaced become
** garbage for gc.
*/
#ifndef CKPT_REVERSE_H
#define CKPT_REVERSE_H

#include "store.h"

struct reverse_stats {
    uint64_t pairs;       /* pairs looked at */
    uint64_t reversed;    /* older blocks now deltas against their successor */
    uint64_t before, after; /* stored bytes of those blocks */
};

/* Work through up to max pairs (0: all), oldest first; stops early, without
** error, when *stop becomes non-zero. Returns 1 if pairs are left. */
int reverse_pending(struct store *st, const volatile int *stop, size_t max,
                    struct reverse_stats *s);

#endif
