/*
** bg.h: the daemon's background work, on one thread, one task at a time:
**
**   - re-encoding, a few seconds after changes, the versions a lossy
**     policy has made due (recode.h);
**   - making older blocks reverse deltas against their successors
**     (reverse.h), a batch per look, looking again at once while some wait;
**   - retention every interval, when a policy is set (history.h);
**   - reclaiming space (gc.h) after anything that may have made garbage:
**     a commit, an unlink, a re-encoding, a prune here or by ckptctl
**     beside the mount; again until a run finds nothing to do, and once
**     the store has been quiet for 30 s, more thoroughly (packs up to 90%
**     live rewritten);
**   - a reclaim asked for now (bg_gc: ckptctl gc through ctl.h);
**   - a copy of meta.db every backup interval, if anything changed;
**   - with a remote (remote.h), an upload every upload interval, if
**     anything changed, and one asked for now (bg_push: ckptctl push);
**     a last one when it stops.
**
** One thread keeps gc, the recoder and the reverse deltas, which all move
** records, apart. It runs at the workers' nice value: history comes after
** saves and loads.
*/
#ifndef CKPT_BG_H
#define CKPT_BG_H

#include "gc.h"
#include "history.h"
#include "remote.h"
#include "store.h"

struct bg_opts {
    struct hist_policy keep;  /* retention (nothing set: none) */
    unsigned prune_interval;  /* seconds between retention runs */
    unsigned gc_interval;     /* seconds between background reclaims; 0: never */
    int64_t gc_grace_ns;      /* garbage younger than this waits for the next run */
    double gc_threshold;      /* compact packs whose live share is below this */
    unsigned backup_interval; /* seconds between copies of meta.db (store.h
                                 store_backup_meta), when it changed; 0: never */
    remote *remote;           /* NULL: none */
    unsigned upload_interval; /* seconds between uploads, when something changed */
    uint64_t local_bytes;     /* with remote: after an upload, drop the local
                                 bytes of uploaded packs beyond this (0: keep
                                 all; remote_evict) */
};

#define BG_BACKUPS_KEPT 3

/* Called after a version of ino was re-encoded (recode.h). */
typedef void (*bg_changed_fn)(void *ctx, uint64_t ino);

typedef struct bg bg;

/* Start the thread; st's metadata connection must stay the same while it runs. */
int bg_start(struct store *st, const struct bg_opts *o, bg_changed_fn changed, void *ctx,
             bg **out);
/* Stop the thread, then apply retention once more to what was written last. */
void bg_stop(bg *b);
/* Run gc now on the background thread and wait for it; cb (may be NULL) is
** called from that thread. -ESHUTDOWN if the daemon is stopping. */
int bg_gc(bg *b, const struct gc_opts *o, gc_progress_cb cb, void *ctx, struct gc_stats *out);
/* Upload to the remote now (remote_push), likewise; -EDESTADDRREQ when the
** mount has no remote. */
int bg_push(bg *b, remote_progress_cb cb, void *ctx, struct remote_push_stats *out);

#endif
