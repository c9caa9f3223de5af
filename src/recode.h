/*
** recode.h: re-encode old versions of checkpoint files under their lossy
** policy (policy.h, lossy.h).
**
** Ingest always stores exact bytes. A version committed under a lossy
** policy waits (fsmeta_recode_next) until a newer version of its file or
** family exists, so the newest version of every checkpoint stays exact and
** resuming after a crash is exact; then its tensor blocks are re-encoded
** and swapped in, one transaction per version.
**
** Roles, found from the tensor list of one file in order: a float scalar
** followed by two float tensors of one length is an optimizer's (step,
** exp_avg, exp_avg_sq); every other float tensor of two or more elements is
** a weight (in an optimizer file: a master weight). Integer tensors,
** scalars and non-tensor bytes are never touched. In an optimizer file the
** k-th master weight of a given length is paired with the k-th moment pair
** of that length (an optimizer orders its state by parameter group, the
** masters follow the model), for lengths with as many of each; a tensor
** left without a partner is judged by its own statistics. Under excp the weights of a model file are paired
** the same way, by element count, with the moments of the optimizer file
** of the same directory committed nearest in time (whole-tensor mean of v).
**
** Residual chains are bounded: a weight block whose previous block is
** RECODE_MAX_DEPTH (16) deep is re-encoded standalone, k-means to 8 bits.
**
** Once a version's blocks are replaced, the next version's deltas against
** them are re-encoded losslessly against the new blocks (rebased), so the
** exact blocks die instead of staying alive as bases.
**
**   bitsnap  weights of model files stay exact; master weights are stored
**            as their change since the previous version, cluster-quantized
**            to the policy's bits (so their error does not grow); exp_avg
**            and exp_avg_sq are cluster-quantized to the policy's bits.
**   excp     every weight as a residual against what a reader rebuilds for
**            the previous version (closed loop), pruned where |dW| <=
**            r * median|dW|, r = min(2.5, alpha / sqrt(mean v)) with v the
**            paired exp_avg_sq (1 unpaired); exp_avg kept where |m| >
**            beta * mean|m| and, when paired, the weight's residual
**            survived; exp_avg_sq keeps exp_avg's mask; survivors quantized
**            to 2^bits - 1 levels.
**
** Statistics (median, means) are taken per block (about 1 MiB of one
** tensor), not per whole tensor: a reader never needs more than one block,
** and so does the recoder. A weight without a previous version stays
** exact (there is nothing to take a residual against). A block is only
** replaced when its lossy form is smaller than what it has.
*/
#ifndef CKPT_RECODE_H
#define CKPT_RECODE_H

#include "store.h"

struct recode_stats {
    uint64_t versions;      /* versions re-encoded (or found nothing to do) */
    uint64_t blocks;        /* blocks replaced */
    uint64_t rebased;       /* newer deltas rebased onto replaced blocks */
    uint64_t before, after; /* stored bytes of those versions */
};

/* Re-encode one version (v from fsmeta_recode_next); returns the number of
** blocks replaced (0: it stays exact) or an error. */
int recode_version(struct store *st, const struct fsm_version *v, struct recode_stats *s);

/* Called after a version of ino was re-encoded: what the kernel cached of
** the file is stale if that was its current version. */
typedef void (*recode_changed_fn)(void *ctx, uint64_t ino);

/* Re-encode every version that is due, oldest first, or the first max of
** them (max 0: no limit; returns 1 if some are left). Stops early, without
** error, when *stop becomes non-zero (stop may be NULL). */
int recode_pending(struct store *st, const volatile int *stop, unsigned max,
                   recode_changed_fn changed, void *ctx, struct recode_stats *s);

#endif
