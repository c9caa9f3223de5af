/*
** extmap.h: an immutable, reference-counted list of a file's extents.
**
** Readers keep the map they started with while a commit installs the next
** one (ingest.c), and the cutter keeps the previous version's map as its
** delta base (cutter.h); the last reference frees it.
*/
#ifndef CKPT_EXTMAP_H
#define CKPT_EXTMAP_H

#include "../fsmeta/fsmeta.h"

#include <stddef.h>

struct extmap {
    int refs; /* atomic */
    size_t n;
    struct fsm_extent e[];
};

/* Wrap ext[0..n) (copied) in a map with one reference; NULL on no memory. */
struct extmap *extmap_new(const struct fsm_extent *ext, size_t n);
void extmap_get(struct extmap *m);
/* Drop a reference (NULL: nothing); the last frees the map. */
void extmap_put(struct extmap *m);
/* Index of the first of ext[0..n) (sorted by offset) ending after off; n if
** none: where a read at off starts. */
size_t extmap_first_after(const struct fsm_extent *ext, size_t n, uint64_t off);

#endif
