/*
** history.h: questions about the past, answered from fsmeta's history
** (versions, dhist, changes): which inodes a path named over time, which
** file versions it showed, which names a directory ever held, and which
** versions a retention policy keeps. No FUSE and no packs: the mount's
** history view and ckptctl both build on it.
**
** Time is sequence numbers. A span is one inode named by a path during
** [from, to); to is FSM_SEQ_NOW while the name still stands.
*/
#ifndef CKPT_HISTORY_H
#define CKPT_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "../fsmeta/fsmeta.h"

struct hist_span {
    uint64_t ino;
    uint32_t mode; /* the inode's type and bits when it was linked */
    uint64_t from, to;
};

/* Every span of path ("/a/b"; "/" is the root). *out malloc'd; n may be 0. */
int history_resolve(fsmeta *m, const char *path, struct hist_span **out, size_t *n);

/* The file versions the spans showed (not pruned), by seq, each once. */
int history_versions(fsmeta *m, const struct hist_span *sp, size_t n,
                     struct fsm_version **out, size_t *nv);

/* Names the directory spans ever held, sorted, each once; a single malloc'd
** block (free(*names) frees all). */
int history_names(fsmeta *m, const struct hist_span *sp, size_t n, char ***names,
                  size_t *nn);

/* A path that named ino at seq; -ENOENT if none did. */
int history_path_at(fsmeta *m, uint64_t ino, uint64_t seq, char *buf, size_t cap);

/* Retention. Versions are grouped by the family of the path that last
** showed them (numbers in directory names as '#', see cutter.h): the
** versions of a file rewritten in place form one group, and so do the
** files of checkpoint-N/ trees, deleted or not. In each group, by seq, a
** version is kept if it is among the last keep_last, if its ordinal (counted
** from the group's first version, pruned ones included, so repeated prunes
** agree) is a multiple of keep_every, or if it was still current within
** keep_within_ns of now. The current version of a live file is always kept;
** a version no path ever showed is never kept. 0 disables a rule. */
struct hist_policy {
    unsigned keep_last, keep_every;
    int64_t keep_within_ns;
};

struct hist_pruned {
    const char *path;         /* the path that last showed it; "" if none */
    const struct fsm_version *v;
};
typedef void (*history_prune_cb)(void *ctx, const struct hist_pruned *p);

struct hist_prune_stats {
    uint64_t versions, kept, pruned;
    uint64_t pruned_bytes; /* sizes of the pruned versions */
};

/* Apply p at time now (ns); dry_run reports without pruning. cb (may be
** NULL) hears of each version pruned. */
int history_prune(fsmeta *m, const struct hist_policy *p, int64_t now, int dry_run,
                  history_prune_cb cb, void *ctx, struct hist_prune_stats *st);

/* Extended attributes describing a version, readable on every file of a
** mount (user.ckptfs.version: the change that committed it; stored_bytes;
** ratio: size over stored bytes; codec: the share of its bytes per codec).
** HISTORY_XATTRS lists their names, each NUL-terminated. */
#define HISTORY_XATTRS \
    "user.ckptfs.version\0user.ckptfs.stored_bytes\0user.ckptfs.ratio\0user.ckptfs.codec"
#define HISTORY_XATTRS_LEN sizeof(HISTORY_XATTRS)
int history_is_xattr(const char *name);
/* Value of xattr name for version ver into buf (cap 0: length only);
** returns its length, -ERANGE if cap is too small, -ENODATA if not ours. */
int history_xattr(fsmeta *m, uint64_t ver, const char *name, char *buf, size_t cap);
/* The codec mix of ver as text ("tensor-delta 81.2% tensor 18.8%"). */
int history_codec_mix(fsmeta *m, uint64_t ver, char *buf, size_t cap);

/* Parse "30d", "12h", "90m", "45s" or "2w" into ns; -EINVAL otherwise. */
int history_parse_duration(const char *s, int64_t *ns);

#endif
