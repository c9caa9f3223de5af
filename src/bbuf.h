/*
** bbuf.h: buffers for blocks, recycled.
**
** A block of file content (1 MiB by default) passes through several
** buffers on its way: the tail a request thread fills, the decoded copy
** the cache keeps, the bases and temporaries of the codec. Left to malloc,
** each buffer is either a fresh mapping (above glibc's mmap threshold:
** every 4 KiB page faults and is zeroed again) or a chunk of an arena that
** stays resident once the arenas fragment (a daemon using 86 MB held
** 237 MB after twelve checkpoints). Here a buffer of BBUF_MIN bytes or more
** is a mapping of its own; freed, it waits on a free list for the next
** request of its size class, up to BBUF_KEEP bytes in all, and is
** unmapped beyond that. Smaller buffers are malloc's. BBUF_KEEP covers
** the swing of the default write buffer (64 MiB of blocks queued, then
** drained) with some to spare: at 48 MiB a daemon saving checkpoint after
** checkpoint still mapped 40000 fresh pages per 412 MB saved, at 80 MiB
** 4000 to 16000.
**
** Any thread may free a buffer any thread allocated. Buffers are aligned
** to 64 bytes (16 under AddressSanitizer, where every buffer is malloc's,
** of the exact size asked). A pure module: no dependency on the rest of
** ckptfs.
*/
#ifndef CKPT_BBUF_H
#define CKPT_BBUF_H

#include <stddef.h>

#define BBUF_MIN (64u << 10)  /* smaller requests go to malloc */
#define BBUF_KEEP (80u << 20) /* bytes of freed buffers kept for reuse */

/* A buffer of at least n bytes (n may be 0), or NULL when out of memory. */
void *bbuf_alloc(size_t n);
/* Release a buffer of bbuf_alloc (NULL is ignored). */
void bbuf_free(void *p);
/* Bytes p can hold (at least what was asked for). */
size_t bbuf_cap(const void *p);

/* Counters, for tests and benchmarks: buffers mapped so far, and bytes
** now kept on the free list. */
void bbuf_stats(size_t *mapped, size_t *kept);

#endif
