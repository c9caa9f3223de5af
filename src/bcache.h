/*
** bcache.h: a bounded cache of decoded blocks, keyed by pack record.
**
** Reads rarely ask for a whole block at once (the kernel reads 128 KiB to
** 1 MiB at a time), so a decoded block is kept for the next request instead
** of being read, hash-checked and decompressed again. The cache holds at most
** cap bytes of blocks; the least recently used go first.
**
** Writers use it for the bases of their deltas, which come round in a
** cycle: each block of a checkpoint is the base of the same block of the
** next one. Under plain LRU a checkpoint larger than the cache would evict
** every base just before its use. So a base leaves the cache when its
** successor is encoded (bcache_take: that successor takes its place), and
** a block whose base was not cached goes in as the first to go: the blocks
** that are cached stay cached, and a cache of a fraction of a checkpoint
** serves that fraction of its bases.
*/
#ifndef CKPT_BCACHE_H
#define CKPT_BCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bcache bcache;

int bcache_create(size_t cap_bytes, bcache **out);
void bcache_destroy(bcache *c);

/* Copy [off, off+len) of the cached block `key` into dst; 1 if present, 0
** if not. It becomes the most recently used. */
int bcache_get(bcache *c, uint64_t key, size_t off, size_t len, void *dst);
/* Take the whole cached block `key` (len bytes) out of the cache: its
** buffer (bbuf.h) is the caller's. NULL if not cached whole. For a base
** at its last use, which its successor replaces. */
void *bcache_take(bcache *c, uint64_t key, size_t len);
/* Make block `key` the first to go, unread (a base not used because its
** chain is full: the keyframe written instead takes its place); 1 if it
** was cached. */
int bcache_mark_last(bcache *c, uint64_t key);
/* Insert a decoded block; the cache takes ownership of buf (bbuf.h). It
** is the most recently used, or with cold the first to go. Ends a claim
** on key. */
void bcache_put(bcache *c, uint64_t key, void *buf, size_t len, int cold);

/* Decoding a block once: like bcache_get, but a miss claims key for the
** caller, who decodes it and ends the claim with bcache_put, or with
** bcache_unclaim on failure. Meanwhile others asking for key wait (wait)
** and then copy it, or get BCACHE_BUSY. Claims never wait on each other in
** a cycle: a block's base was always stored before it (store.c cuts a
** loop in a corrupt index by depth). */
enum { BCACHE_MINE = 0, BCACHE_HIT = 1, BCACHE_BUSY = 2 };
int bcache_get_claim(bcache *c, uint64_t key, size_t off, size_t len, void *dst, int wait);
void bcache_unclaim(bcache *c, uint64_t key);

/* Pins, for replies sent straight from the cache: bcache_pin_claim is
** bcache_get_claim (waiting) that, on a hit, sets *at to byte off of the
** block instead of copying it out, and *pin to a pin that keeps those
** bytes in place, evicted or not, until bcache_unpin. bcache_put_pin is
** bcache_put that pins what it inserts; it returns NULL when the block is
** too large to cache, and buf then stays the caller's. A pinned block is
** never taken (bcache_take answers NULL). */
int bcache_pin_claim(bcache *c, uint64_t key, size_t off, size_t len, const uint8_t **at,
                     void **pin);
void *bcache_put_pin(bcache *c, uint64_t key, void *buf, size_t len);
void bcache_unpin(bcache *c, void *pin);

/* Bytes of blocks cached now. */
size_t bcache_used(bcache *c);

/* Key of the record at (pack, off). */
static inline uint64_t bcache_key(uint32_t pack, uint64_t off)
{
    return ((uint64_t)pack << 40) ^ off;
}

#endif
