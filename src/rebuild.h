/*
** rebuild.h: a store's metadata made anew from its packs alone.
**
** When meta.db is lost or older than the packs (its WAL deleted or cut,
** an old copy restored), `ckptctl rebuild` sets it aside, opens an empty
** one and calls rebuild_store. Every pack is scanned, past damage
** (pack_scan_all): each block record becomes a chunk row (a delta's base
** found by the hash its payload names), and each manifest (manifest.h) a
** version of its inode, in commit-time order, its extents found by the
** hash of their bytes. A provisional manifest followed by a later one of
** the same inode is dropped, as its version was.
**
** What comes back: every file that has a manifest whose blocks are all
** present, under the path of its newest one (directories made as needed,
** owned like the root), with every such version as history; inode numbers
** as they were. A name two inodes claim goes to the newer; the other
** lands in /lost+found as INO-NAME. What does not: files removed or
** renamed since their last commit come back under their old paths (until
** retention and gc drop their versions), empty directories, symbolic
** links, extended attributes, and tensor lists (the next save of a file
** encodes against nothing; later ones delta again).
*/
#ifndef CKPT_REBUILD_H
#define CKPT_REBUILD_H

#include "store.h"

struct rebuild_report {
    uint64_t packs, records, skipped_bytes; /* scanned; bytes of damage skipped */
    uint64_t manifests, files, versions;    /* found; files and versions made */
    uint64_t incomplete;  /* manifests dropped: a block they name is missing */
    uint64_t lost_found;  /* files placed in /lost+found */
};

/* Rebuild st's (empty) meta.db from st's packs. */
int rebuild_store(struct store *st, struct rebuild_report *r);

/* At mount: commit again what the packs hold and meta.db lost (a crash
** within a group commit's interval, a WAL deleted or cut, an older meta.db
** put back). Scans from the pack of the manifest of the version committed
** last, or from the replay mark (store.h) when that is further on, and
** moves the mark to the end of the packs after; a manifest newer than
** every version meta.db has of its inode is made a version (the inode
** made and named if meta.db lacks it), once the blocks it names that
** meta.db lacks are read back and hash-checked. r->versions: how many. */
int rebuild_replay(struct store *st, struct rebuild_report *r);

#endif
