/*
** manifest.h: the record of one file commit, kept in the packs beside the
** file's blocks, so that the packs alone say which files exist, where, and
** what they hold: `ckptctl rebuild` makes meta.db anew from them, and a
** mount replays those its meta.db lost. Pure: no I/O.
**
** A manifest is a pack record (pack.h) with header flag PACK_REC_MANIFEST
** and codec raw; its bytes, little-endian:
**
**   offset  size  content
**        0     8  magic "CKPTMANI"
**        8     2  format version: 1
**       10     2  path length p (1 to 4095)
**       12     4  number of extents n
**       16     8  inode number
**       24     8  commit time, ns since the epoch
**       32     8  size in bytes
**       40     8  mtime, ns
**       48     8  ctime, ns
**       56     4  mode (st_mode)
**       60     4  uid
**       64     4  gid
**       68     4  flags: bit 0 provisional (committed by fsync while open);
**                 bit 1 replaces: this commit replaced the inode's previous
**                 version (a provisional one), which is no version since
**       72     p  path from the root, '/'-separated, no leading '/'
**     72+p  24*n  extents in file order, each: file offset u64, raw length
**                 u32, reserved u32 (zero), XXH3-64 of the raw bytes u64
**
** An extent names its block by the hash of its bytes, not by where it is:
** gc moves records and reverse deltas re-encode them, and any record of
** those bytes will do. Ranges without an extent, below the size, are zeros.
** A manifest says nothing of renames or removals after its commit, or of
** empty directories and symbolic links.
*/
#ifndef CKPT_MANIFEST_H
#define CKPT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define MANIFEST_HDR 72
#define MANIFEST_EXT 24
#define MANIFEST_PATH_MAX 4095
enum { MANIFEST_PROVISIONAL = 1, MANIFEST_REPLACES = 2 };

struct manifest_ext {
    uint64_t off;
    uint32_t raw_len;
    uint64_t hash;
};

struct manifest {
    uint64_t ino;
    int64_t time;
    uint64_t size;
    int64_t mtime, ctime;
    uint32_t mode, uid, gid, flags;
    char path[MANIFEST_PATH_MAX + 1]; /* NUL-terminated, no leading '/' */
    uint32_t n;
    struct manifest_ext *ext;         /* n of them */
};

/* Bytes of a manifest with a path of path_len bytes and n extents. */
size_t manifest_size(size_t path_len, uint32_t n);
/* Write m into buf (cap >= manifest_size); the length, or -ENAMETOOLONG /
** -EINVAL (empty path) / -ENOSPC (cap too small). */
long manifest_encode(const struct manifest *m, uint8_t *buf, size_t cap);
/* Parse buf[0..len): 0, or -EIO if it is not a well-formed manifest. m->ext
** is allocated (free with manifest_free); -ENOMEM. */
int manifest_decode(const uint8_t *buf, size_t len, struct manifest *m);
void manifest_free(struct manifest *m);

#endif
