/*
** import.h: ingesting an existing directory tree into a store without
** mounting it (ckptctl import). Files go through the same write path as a
** mount's (ingest.h), so checkpoints are parsed and stored as deltas just
** as if a trainer had written them; each file is committed durably.
** Directories, regular files and symlinks are imported with their modes,
** owners and mtimes; other file types are skipped with a warning. An
** existing name in the destination is an error (EEXIST), never overwritten.
*/
#ifndef CKPT_IMPORT_H
#define CKPT_IMPORT_H

#include <stdint.h>

#include "store.h"

struct import_stats {
    uint64_t files, dirs, symlinks, bytes;
};

typedef void (*import_progress_cb)(void *ctx, uint64_t done, uint64_t total);

/* Copy the tree at dir into the store under dest ("/a/b", created as
** needed). st must be open read-write (holding the store lock). */
int import_tree(struct store *st, const char *dir, const char *dest,
                import_progress_cb cb, void *ctx, struct import_stats *out);

#endif
