/*
** hview.h: the read-only history view, MOUNT/.ckptfs (see ckptfs(1)).
**
**   .ckptfs/seq/N/...          the whole tree as it was after change N,
**                              files deleted since included
**   .ckptfs/time/T/...         the same at a time T, named in UTC as
**                              2026-11-21T10:00:00Z (a lookup also takes
**                              fractions of a second and @EPOCH_SECONDS)
**   .ckptfs/versions/PATH/     every version PATH ever showed, as files named
**                              vNNNNNNNN-YYYYMMDDTHHMMSSZ (the change that
**                              committed it, then its time), so they sort in
**                              time order; mtime is the version's
**
** .ckptfs is hidden from its parent's listing (as ZFS hides .zfs) and
** reached by name. Everything under it is read-only: the FUSE layer answers
** EROFS to any change. Directories of a past tree have the type and
** permission bits their entry had, less the write bits.
**
** Inode numbers are a hash of what a node shows (a version, a directory at a
** sequence number, a path), in [HVIEW_INO_MIN, 2^64), far above any inode
** of the live tree: the same version has one inode number wherever it is
** seen, and numbers are stable across mounts. A table maps the numbers the
** kernel holds references to back to what they show.
*/
#ifndef CKPT_HVIEW_H
#define CKPT_HVIEW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "store.h"

#define HVIEW_NAME ".ckptfs"
#define HVIEW_INO_MIN (1ull << 62)

static inline int hview_owns(uint64_t ino) { return ino >= HVIEW_INO_MIN; }

typedef struct hview hview;

int hview_create(struct store *st, hview **out);
void hview_destroy(hview *h);

/* Look name up in the view directory parent (or HVIEW_NAME in the live
** root, FSMETA_ROOT_INO); on success the kernel holds one more reference. */
int hview_lookup(hview *h, uint64_t parent, const char *name, struct stat *sb);
void hview_forget(hview *h, uint64_t ino, uint64_t nlookup);
int hview_getattr(hview *h, uint64_t ino, struct stat *sb);
int hview_readlink(hview *h, uint64_t ino, char *buf, size_t cap, size_t *len);

/* cb returns non-zero when it cannot take the entry (buffer full). */
typedef int (*hview_dirent_cb)(void *ctx, const char *name, const struct stat *sb,
                               uint64_t cookie);
/* Entries of dir after cookie (0: from the start, "." and ".." first). With
** plus, each entry cb takes counts as a lookup. */
int hview_readdir(hview *h, uint64_t dir, uint64_t after, int plus, hview_dirent_cb cb,
                  void *ctx);

/* -EISDIR for directories; files are read-only (the caller refuses writes). */
int hview_open(hview *h, uint64_t ino);
int hview_read(hview *h, uint64_t ino, void *buf, size_t len, uint64_t off, size_t *got);

/* The version a view file shows (0 for an empty one, -EINVAL for others). */
int hview_version(hview *h, uint64_t ino, uint64_t *ver);

#endif
