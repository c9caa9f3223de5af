/*
** scratch.h: per-thread working memory, kept from call to call. A pure
** layer: no files, no SQL, nothing else of ckptfs.
**
** Code that needs a large buffer on every call (a block being coded) takes
** it from here instead of allocating it each time, which for a 1 MiB block
** would cost fresh page faults per call; code that needs a costly object per
** thread (a zstd context) keeps it here too. Everything is freed when the
** thread exits.
**
** Ownership: each slot of enum scratch_slot belongs to the one file named
** beside it, and no other code touches it. So users that call one another
** (store.c encodes into its frame by calling the tensor codec, which takes
** its own buffer) never share memory. A slot is not reentrant: while its
** owner uses the buffer it must not call code that takes the same slot.
** A new user adds a slot of its own rather than borrowing one.
*/
#ifndef CKPT_SCRATCH_H
#define CKPT_SCRATCH_H

#include <stddef.h>

enum scratch_slot {
    SCRATCH_TCODEC,    /* tcodec.c: planes, masks, histograms of one call */
    SCRATCH_FRAME,     /* store.c: the pack frame a block is encoded into */
    SCRATCH_ZSTD_CCTX, /* codec.c: the thread's zstd compression context */
    SCRATCH_ZSTD_DCTX, /* codec.c: the thread's zstd decompression context */
    SCRATCH_FUSE_READ, /* fs.c: the reply to one FUSE read */
    SCRATCH_SLOTS
};

/* Alignment of every buffer scratch_get returns (a page: enough for the
** direct I/O of a pack frame). */
#define SCRATCH_ALIGN 4096

/* This thread's buffer of slot, at least size bytes, SCRATCH_ALIGN-aligned.
** Its contents last until the next call for that slot, and across calls
** unless it has to grow. NULL when out of memory (the old buffer stays). */
void *scratch_get(enum scratch_slot slot, size_t size);

/* This thread's object of slot: made by make() on first use, released by
** drop() when the thread exits. NULL when make() fails (tried again on the
** next call). A slot holds either buffers or objects, never both. */
void *scratch_obj(enum scratch_slot slot, void *(*make)(void), void (*drop)(void *));

#endif
