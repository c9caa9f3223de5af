/*
** bcache.h: a bounded cache of decoded blocks, keyed by pack record.
**
** Reads rarely ask for a whole block at once (the kernel reads 128 KiB to
** 1 MiB at a time), so a decoded block is kept for the next request instead
** of being read, hash-checked and decompressed again. The cache holds at most
** cap bytes of blocks; the least recently used go first.
*/
#ifndef CKPT_BCACHE_H
#define CKPT_BCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bcache bcache;

int bcache_create(size_t cap_bytes, bcache **out);
void bcache_destroy(bcache *c);

/* Copy [off, off+len) of the cached block `key` into dst; 1 if present, 0 if not. */
int bcache_get(bcache *c, uint64_t key, size_t off, size_t len, void *dst);
/* Insert a decoded block; the cache takes ownership of buf (malloc'd). */
void bcache_put(bcache *c, uint64_t key, void *buf, size_t len);

/* Key of the record at (pack, off). */
static inline uint64_t bcache_key(uint32_t pack, uint64_t off)
{
    return ((uint64_t)pack << 40) ^ off;
}

#endif
