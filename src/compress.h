/*
** compress.h: compressing, in the background, the blocks writers stored
** raw.
**
** A save should go at the speed the kernel hands ckptfs its bytes. When a
** writer fills the write buffer faster than the workers encode (-o spill,
** the default), its further blocks are appended as they are (CODEC_RAW,
** through the page cache) and queued with the encoder's hints (fsmeta.h,
** fsmeta_compress_*). Here the background encodes each one as the workers
** would have (standalone, or fp32 masters against the bf16 model block
** beside them, CODEC_WIDE), and swaps the new record in when it is smaller
** (fsmeta_rebase_commit): the records are made durable before the one
** transaction that names them, so a crash leaves every block as it was, and
** the raw records replaced become garbage for gc. Reading a raw block costs
** no decoding, so the newest version stays the cheapest meanwhile.
*/
#ifndef CKPT_COMPRESS_H
#define CKPT_COMPRESS_H

#include "store.h"

struct compress_stats {
    uint64_t blocks;        /* raw blocks looked at */
    uint64_t compressed;    /* of them, now stored compressed */
    uint64_t before, after; /* stored bytes of those */
};

/* Work through up to max raw blocks (0: all), oldest first; stops early,
** without error, when *stop becomes non-zero. Returns 1 if blocks are left. */
int compress_pending(struct store *st, const volatile int *stop, size_t max,
                     struct compress_stats *s);

#endif
