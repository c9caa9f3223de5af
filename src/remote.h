/*
** remote.h: a store's copy in an S3-compatible bucket (the remote tier).
**
** Objects under s3://BUCKET/PREFIX/:
**
**   packs/NNNNNNNN.pack   each pack file as it is on disk (pack.h); a reader
**                         fetches the records it needs with ranged GETs
**   meta/NNNNNNNNNNNNNNNNNNNN.db
**                         a snapshot of meta.db (SQLite's online backup),
**                         named by its time in ns, 20 digits; the last
**                         REMOTE_KEEP_SNAPSHOTS are kept, the one LATEST
**                         names, and the oldest of every 10 minutes of
**                         the last hour
**   meta/NNNNNNNNNNNNNNNNNNNN.packs
**                         the packs that snapshot names, text lines:
**                           ckptfs-packs 1
**                           FIRST LAST   (a run of pack ids, decimal)
**   store                 "ckptfs-store ID\n": the store whose copy this is (ID:
**                         32 hex digits, config key store_id); a push or a
**                         writing mount of another store is refused
**   lease                 the writing mount of this prefix, text lines:
**                           ckptfs-lease 1
**                           holder HOST PID
**                           store PATH
**                           renewed NS (time of the last renewal)
**   meta/LATEST           the snapshot to use, as text lines:
**                           ckptfs-remote 1
**                           snapshot meta/NNNNNNNNNNNNNNNNNNNN.db
**                           size BYTES
**                           xxh3 16 hex digits of XXH3-64 of the snapshot
**
** A push uploads in that order (packs, then the snapshot and its packs
** list, then LATEST), so LATEST never names a snapshot whose records are
** not all in the bucket. Then it deletes the old snapshots, then the packs
** the store no longer has that no kept snapshot names: a reader of any
** kept snapshot finds every record it names. Pack ids are never reused
** (pack.h), so an id names one object for good.
**
** A store read from a bucket keeps what it fetched in its own packs/
** directory: NNNNNNNN.pack is a sparse file of the remote size, and
** NNNNNNNN.have one byte per REMOTE_GRANULE of it, set once that granule's
** bytes are in the file and synced. Records carry their own hashes
** (pack.h), so a damaged object fails its read with EIO and is never served.
*/
#ifndef CKPT_REMOTE_H
#define CKPT_REMOTE_H

#include <stdint.h>

#include "store.h"

#define REMOTE_GRANULE (1u << 20)
#define REMOTE_KEEP_SNAPSHOTS 3
/* and, of the last hour ($CKPTFS_SNAPSHOT_KEEP_S seconds if set), the
** oldest of every 10 minutes */
#define REMOTE_KEEP_AGE_NS (3600 * 1000000000LL)
#define REMOTE_KEEP_EVERY_NS (600 * 1000000000LL)

typedef struct remote remote;

/* url: s3://BUCKET[/PREFIX]; endpoint: NULL for $AWS_ENDPOINT_URL (s3.h). */
int remote_open(const char *url, const char *endpoint, remote **out);
void remote_close(remote *r);
const char *remote_url(const remote *r);

struct remote_push_stats {
    uint32_t packs, packs_sent, packs_deleted;
    uint64_t bytes, bytes_sent;
};
/* Progress of a push: bytes sent of the total to send. */
typedef void (*remote_progress_cb)(void *ctx, uint64_t done, uint64_t total);

/* Take a snapshot of meta.db, upload every pack of st the bucket lacks
** (or holds at another size), then the snapshot and LATEST; then drop the
** bucket's packs st no longer has, and old snapshots. live: st is a
** mount's, appended to meanwhile: the pack taking appends is sealed
** (pack_seal_wait) after the snapshot, and only packs up to it are sent.
** The caller keeps gc from removing packs meanwhile (bg.h: one thread). */
int remote_push(remote *r, struct store *st, int live, remote_progress_cb cb, void *ctx,
                struct remote_push_stats *out);

/* Make store_path/meta.db the snapshot LATEST names, unless it is already
** (store_path/remote.snapshot records which). Verified by size and hash
** before it replaces anything. The copy's lock is held until remote_close
** (-EBUSY: it is in use). Returns 1, pulling nothing, when store_path is a
** store of its own (meta.db and no remote.snapshot). -ENOENT: the bucket
** holds no snapshot. */
int remote_pull_meta(remote *r, const char *store_path);

/* 1 if the store at dir (relative to dirfd) is a read-only copy of a
** bucket (remote_pull_meta made it: it holds remote.snapshot). */
int remote_is_copy(int dirfd, const char *dir);

/* Make sure the prefix is st's copy (the object "store"), claiming an
** empty prefix: -EEXIST, said in the log, when it holds another store's. */
int remote_claim(remote *r, struct store *st);

/* A writing mount holds the prefix's lease, renewed at least every
** REMOTE_LEASE_NS / 4; another is refused while it is fresh, unless it
** names this host and a process that is gone (a crash). S3 has no
** conditional PUT here, so two mounts starting in the same instant could
** both win: the lease guards against mistakes, not races. */
#define REMOTE_LEASE_NS (120 * 1000000000LL)
/* Take the lease for the store at real path store_real: -EBUSY with the
** holder described in who (cap bytes) when another has it. */
int remote_lease_take(remote *r, const char *store_real, char *who, size_t cap);
int remote_lease_renew(remote *r);
void remote_lease_drop(remote *r);

/* Serve reads of st's packs from the bucket: pack files it lacks are
** created sparse and filled granule by granule as records are read, and
** so are packs remote_evict dropped (their .have map says what is here).
** A pack with no map is wholly local. Reads of a copy fetch up to 4 MiB
** at a time, and two threads fetch up to 16 MiB ahead of the reader. */
int remote_attach(remote *r, struct store *st);

/* Stop what remote_attach started (fetching ahead of readers): before
** st closes. */
void remote_detach(remote *r);

/* Read every record of st from the bucket instead of its packs (ckptctl
** verify --remote): st's packs are set aside for a packset in the empty
** directory dir, filled from the bucket as records are read. Put back
** with remote_read_all_done (dir is left to the caller to remove). */
int remote_read_all_from(remote *r, struct store *st, const char *dir, packset **saved);
void remote_read_all_done(remote *r, struct store *st, packset *saved);

/* 1 if some of st's packs are only partly local (a copy of a bucket, or
** packs remote_evict dropped): its reads need remote_attach. url gets the
** store's remote (config remote), "" if none. */
int remote_needed(struct store *st, char *url, size_t cap);

/* Keep st's pack files under keep bytes on disk: drop the local bytes of
** sealed packs the bucket holds as they are here (as the last push saw
** it), oldest first; they read back from the bucket. *freed: bytes. */
int remote_evict(remote *r, struct store *st, uint64_t keep, uint64_t *freed);

#endif
