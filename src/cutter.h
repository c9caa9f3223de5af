/*
** cutter.h: where the blocks of a file being written end, and what they hold.
**
** A file streams through a cutter in order. The cutter runs the format
** parser (fmt.h) over the bytes and cuts blocks so that no block straddles a
** tensor boundary: a tensor is cut into blocks of the block size counted from
** its first byte; the bytes between tensors (headers, zip framing, pickles)
** into blocks of at most the block size. Cut this way, block k of a tensor is
** block k of the same tensor in the previous version, which is what makes
** that block a good base for a delta.
**
** The base version is the committed content of a file (its extents and the
** tensors recorded with them); for each tensor block the cutter finds the
** chunk holding the same bytes of the same tensor (same name, dtype and
** length) there.
**
** A cutter holds the parser (bounded, fmt.h), the queue of tensors announced
** but not yet reached, the base's extents and tensors, and the list of
** tensors this version has: all proportional to the number of tensors.
*/
#ifndef CKPT_CUTTER_H
#define CKPT_CUTTER_H

#include <stddef.h>
#include <stdint.h>

#include "extmap.h"
#include "store.h"

/* Tensors smaller than this are left in the plain byte blocks around them:
** a block of their own would cost more in records than a delta saves. */
#define CUTTER_MIN_TENSOR 4096

struct cutter;

/* A cutter for blocks of bs bytes; NULL on no memory (the caller then cuts
** plain blocks). */
struct cutter *cutter_new(size_t bs);
void cutter_free(struct cutter *c);

/* The family of the file at path: the path with the numbers in its
** directory names replaced by '#'. A trainer that writes checkpoint-N/
** trees writes one family; its latest member is the next one's base. */
void cutter_set_family(struct cutter *c, const char *path);
/* The family key of path into out (room for strlen(path) + 1 bytes). */
void cutter_family_key(const char *path, char *out);
const char *cutter_family(const struct cutter *c); /* NULL if unknown */

/* Take over the base version: a reference on map and the malloc'd t[0..n);
** map NULL (and n 0) records that there is none. */
void cutter_set_base(struct cutter *c, struct extmap *map, struct fsm_tensor *t, size_t n);

/* Feed the next bytes of the file (before cutting them). */
void cutter_feed(struct cutter *c, const void *buf, size_t len);

/* End of the block that starts at start (everything before it is cut).
** Never more than start + the block size. */
uint64_t cutter_block_end(struct cutter *c, uint64_t start);

/* Describe block [start, start + len), as cut: its element type, and the
** chunk holding the same block of the base version when there is one.
** For a tensor's block that is the same block of the same tensor; records
** the tensor for cutter_tensors and returns that record (NULL: no memory).
** For a plain block (h->plain; returns NULL) it is the base's chunk of the
** same byte range, and the type is a guess from the small tensors in it
** (else bytes, width 1): headers and pickles mostly repeat, and biases and
** norm weights change as little as the big tensors. Blocks are described
** in file order: start is at or after any start given before. */
const struct fsm_tensor *cutter_hint(struct cutter *c, uint64_t start, size_t len,
                                     struct store_hint *h);

/* Whether cutter_set_base was called (with or without a base found). */
int cutter_has_base(const struct cutter *c);

/* The first tensor cut, or else the first announced and not yet passed
** (for finding a base before any tensor block is cut); NULL if none. Valid
** until the next call. */
const struct fsm_tensor *cutter_first(struct cutter *c);

/* Tensors of the blocks cut so far, in file order. */
const struct fsm_tensor *cutter_tensors(const struct cutter *c, size_t *n);

#endif
