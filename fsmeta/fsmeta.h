/*
** fsmeta.h: the metadata store, the one module that speaks SQL.
**
** One SQLite database (STORE/meta.db, WAL mode, schema in fsmeta/schema.sql)
** holds the namespace, attributes, extended attributes, the map from file
** content to pack records, and history: every version of every file and
** every directory entry there ever was, ordered by sequence numbers. Every
** statement is prepared once at open.
**
** History: each write transaction that changes the namespace or commits a
** file takes the next sequence number (seq), recorded with its time. A
** commit makes a new version of the file; the versions before it stay, and
** so do those of files unlinked since, until retention prunes them.
**
** Concurrency: an fsmeta handle is shared by threads. fsmeta_begin takes the
** handle's (recursive) lock and opens a write transaction; fsmeta_commit or
** fsmeta_rollback ends both. Calls outside a transaction take the lock for
** their own duration and, if they write, are atomic on their own.
**
** Errors: -ENOENT (no such row), -EEXIST (name taken), -ENOSPC (disk full),
** -EIO (anything else SQLite reports; logged).
*/
#ifndef CKPT_FSMETA_H
#define CKPT_FSMETA_H

#include <stddef.h>
#include <stdint.h>

typedef struct fsmeta fsmeta;

#define FSMETA_ROOT_INO 1

struct fsm_attr {
    uint64_t ino;
    uint32_t mode, uid, gid, nlink;
    uint64_t size, rdev, stored;
    int64_t atime, mtime, ctime; /* ns */
};

/* A pack record holding one block of raw bytes. id 0: not yet in the table. */
struct fsm_chunk {
    uint64_t id;
    uint32_t pack;
    uint64_t off;
    uint32_t raw_len, stored_len;
    uint8_t codec;
    uint64_t hash;
    uint64_t base;  /* chunk this is a delta against; 0: a keyframe */
    uint32_t depth; /* deltas between this chunk and its keyframe */
    uint64_t chain; /* stored bytes read to rebuild it, its own included */
    /* A new block's predecessor, to be re-encoded against it (reverse.h),
    ** and for a block stored raw how to compress it later (compress.h):
    ** written with the chunk's first commit, not columns of its row. */
    struct fsm_pred {
        uint64_t older;   /* chunk id; 0: none */
        uint8_t width;    /* bytes per element */
        uint8_t flags;    /* FSM_PRED_* */
        uint64_t narrow;  /* FSM_PRED_RAW: the bf16 block of fp32 masters; 0 none */
        uint32_t narrow_off;
    } pred;
};
#define FSM_PRED_FLOAT 1
#define FSM_PRED_PLAIN 2
#define FSM_PRED_RAW 4 /* stored raw by a writer: queued for compression */
/* With FSM_PRED_RAW: a block of the newest version, kept raw (cheapest to
** read) until a newer version of its file names it as predecessor. */
#define FSM_PRED_HOLD 8

/* A tensor of a file's committed content (see src/fmt.h). */
#define FSM_TNAME_MAX 256
struct fsm_tensor {
    uint64_t off, len;
    uint8_t dtype, width;
    char name[FSM_TNAME_MAX];
};

struct fsm_extent {
    uint64_t file_off;
    struct fsm_chunk c;
};

struct fsm_stats {
    uint64_t files, dirs, symlinks, others;
    uint64_t logical_bytes; /* sum of regular file sizes */
    uint64_t versions;      /* file versions kept, current ones included */
    uint64_t version_bytes; /* sum of their sizes */
    uint64_t stored_bytes;  /* sum of stored lengths of chunks in use */
    uint64_t chunks;
    uint64_t delta_chunks;  /* chunks stored as deltas against a base */
    uint64_t reverse_waiting; /* blocks waiting to become reverse deltas */
    uint64_t raw_waiting;     /* blocks stored raw, waiting to be compressed */
    uint64_t raw_held;        /* blocks of newest versions kept raw (FSM_PRED_HOLD) */
};

/* SQLite's application_id of a ckptfs meta.db: "CKPT". */
#define FSM_APP_ID 0x434b5054

/* Open (creating the schema and root directory, owned by root_uid/root_gid,
** if new). readonly: for tools beside a live mount. A database that is not
** a ckptfs store's (another program's, or not SQLite) is -EMEDIUMTYPE,
** found before anything is written to it. */
int fsmeta_open(const char *path, int readonly, uint32_t root_uid,
                uint32_t root_gid, fsmeta **out);
void fsmeta_close(fsmeta *m);
/* 0 if the database at path is a ckptfs store's (or empty), -EMEDIUMTYPE
** if not; opens it read-only and changes nothing. */
int fsmeta_probe(const char *path);

/* durable: the commit must survive power loss (fsync); otherwise it survives
** a crash of the process (under group commit: once flushed) and stays
** consistent after power loss. */
int fsmeta_begin(fsmeta *m, int durable);
int fsmeta_commit(fsmeta *m);
void fsmeta_rollback(fsmeta *m);
/* End a transaction by the outcome of its work: commit when rc is 0 (and
** return the commit's result), else roll back and return rc. */
int fsmeta_end(fsmeta *m, int rc);

/* Make every transaction committed so far durable. */
int fsmeta_sync(fsmeta *m);

/* The store's settings (table config): text values by key. get: -ENOENT
** when unset, -ERANGE when longer than cap - 1. */
int fsmeta_config_get(fsmeta *m, const char *key, char *buf, size_t cap);
int fsmeta_config_set(fsmeta *m, const char *key, const char *value);

/* Copy the committed database to a new SQLite file at path (SQLite's
** online backup, a few pages at a time beside other work). */
int fsmeta_backup(fsmeta *m, const char *path);

/* Before every SQLite COMMIT, fn(ctx) runs under the handle's lock: it makes
** the data the new rows name durable (the packs), so meta.db never names
** bytes a crash could lose. A failure of fn fails the commit. */
void fsmeta_set_pre_commit(fsmeta *m, int (*fn)(void *ctx), void *ctx);

/* Group commit (the daemon's): with it on, a transaction that is not
** durable ends as a savepoint inside one SQLite transaction that stays open
** (each keeps its own sequence number, and this connection sees it at
** once); fsmeta_flush commits that transaction, and so does the next
** durable one. Until then a crash of the process loses it. Many small
** transactions then share one commit: one pack sync, each page written
** once. Off: commits the open transaction. */
int fsmeta_group(fsmeta *m, int on);
/* 1 if a COMMIT of this handle failed since it was opened: what it held
** is not in meta.db, though the packs may hold its manifests. */
int fsmeta_lost(fsmeta *m);
/* Commit the open group transaction if it began at least older_ns ago. */
int fsmeta_flush(fsmeta *m, int64_t older_ns);

int fsmeta_getattr(fsmeta *m, uint64_t ino, struct fsm_attr *a);
/* Write every field of a but ino and stored. */
int fsmeta_setattr(fsmeta *m, const struct fsm_attr *a);
/* Insert a new inode from a (ino ignored, set on return); target for symlinks. */
int fsmeta_mkinode(fsmeta *m, struct fsm_attr *a, const void *target, size_t tlen);
/* Insert an inode numbered a->ino (ckptctl rebuild: numbers from the packs). */
int fsmeta_mkinode_at(fsmeta *m, const struct fsm_attr *a);
/* Insert chunk c (refs 0; its base, if any, inserted before) and set c->id. */
int fsmeta_chunk_add(fsmeta *m, struct fsm_chunk *c);
/* The one extended attribute a new file or directory inherits from the
** directory it is created in (src/policy.h). */
#define FSMETA_INHERITED_XATTR "user.ckptfs.policy"

/* Make inode *a (ino set on return; target for symlinks) and name it name
** in directory parent, whose link count and times follow, in one transaction
** (durable: as fsmeta_begin). -ENOTDIR, -ENOENT if parent was removed while
** open, -EEXIST if the name is taken. Under a setgid directory the group is
** the directory's and a new directory is setgid too (BSD semantics). A new
** file or directory gets the parent's FSMETA_INHERITED_XATTR. */
int fsmeta_create(fsmeta *m, uint64_t parent, const char *name, struct fsm_attr *a,
                  const char *target, int durable);
/* Delete an inode with its xattrs and content. */
int fsmeta_rminode(fsmeta *m, uint64_t ino);
int fsmeta_readlink(fsmeta *m, uint64_t ino, void *buf, size_t cap, size_t *len);

int fsmeta_lookup(fsmeta *m, uint64_t parent, const char *name, uint64_t *ino);
int fsmeta_link(fsmeta *m, uint64_t parent, const char *name, uint64_t ino);
int fsmeta_unlink(fsmeta *m, uint64_t parent, const char *name);
/* Point entry (parent, name) at another inode. */
int fsmeta_relink(fsmeta *m, uint64_t parent, const char *name, uint64_t ino);
/* Move an entry; the destination name must be free. */
int fsmeta_move(fsmeta *m, uint64_t parent, const char *name,
                uint64_t newparent, const char *newname);
int fsmeta_has_children(fsmeta *m, uint64_t dir);

/* Entries of dir with cookie > after, in cookie order, each with its
** inode's attributes (one query: a listing costs no lookup per entry); cb
** returns non-zero to stop (the entry it stopped at is not consumed).
** Cookies are >= 1. */
typedef int (*fsmeta_dirent_cb)(void *ctx, int64_t cookie, const char *name,
                                const struct fsm_attr *a);
int fsmeta_readdir(fsmeta *m, uint64_t dir, int64_t after, fsmeta_dirent_cb cb,
                   void *ctx);

/* Extended attributes. get/list return the length; cap 0 asks for it only. */
enum { FSMETA_XATTR_CREATE = 1, FSMETA_XATTR_REPLACE = 2 };
int fsmeta_xattr_get(fsmeta *m, uint64_t ino, const char *name, void *buf, size_t cap);
int fsmeta_xattr_set(fsmeta *m, uint64_t ino, const char *name, const void *val,
                     size_t len, int flags);
int fsmeta_xattr_list(fsmeta *m, uint64_t ino, char *buf, size_t cap);
int fsmeta_xattr_remove(fsmeta *m, uint64_t ino, const char *name);

/* Content of ino, sorted by offset; *out is malloc'd (NULL when n is 0). */
int fsmeta_extents(fsmeta *m, uint64_t ino, struct fsm_extent **out, size_t *n);
/* Commit ext[0..n) as the new version of ino: chunks with id 0 are inserted
** and their ids written back. Also writes size, mtime, ctime and stored. The
** previous version stays as history, unless it was provisional. provisional:
** the file is still being written (an fsync), so the next commit replaces
** this version instead of keeping it. manifest (NULL: none): the pack record
** describing this commit (src/manifest.h), inserted as a chunk the version
** holds a reference on. */
int fsmeta_set_content(fsmeta *m, uint64_t ino, struct fsm_extent *ext, size_t n,
                       uint64_t size, int64_t mtime, int64_t ctime, int provisional,
                       struct fsm_chunk *manifest);

/* 1 if ino's current version is provisional (the next commit replaces it),
** else 0. */
int fsmeta_provisional(fsmeta *m, uint64_t ino);
/* Make a provisional current version of ino a kept one. */
int fsmeta_keep_current(fsmeta *m, uint64_t ino);

/* One chunk by id (any, garbage included). -ENOENT if there is none. */
int fsmeta_chunk_get(fsmeta *m, uint64_t id, struct fsm_chunk *c);
/* Up to cap kept versions with tensors of the other files in ino's
** directory, those committed nearest to sequence seq first (UINT64_MAX:
** the latest): where a model file's optimizer file is, and the reverse. */
int fsmeta_siblings(fsmeta *m, uint64_t ino, uint64_t seq, uint64_t *out, size_t cap, size_t *n);

/* Record the tensors of ino's current version, its family key (NULL: none)
** and the lossy policy that applies to it (NULL: lossless; ignored when it
** has no tensors), due at once when now is set, else once superseded;
** replaces earlier ones. -ENOENT if ino has no content. Call in the
** transaction that sets the content. */
int fsmeta_set_tensors(fsmeta *m, uint64_t ino, const char *family, const char *policy,
                       int now, const struct fsm_tensor *t, size_t n);
/* Tensors of ino's current version (none if it has no content), or of
** version ver, by offset; *out malloc'd. */
int fsmeta_tensors(fsmeta *m, uint64_t ino, struct fsm_tensor **out, size_t *n);
int fsmeta_version_tensors(fsmeta *m, uint64_t ver, struct fsm_tensor **out, size_t *n);
/* The most recently modified other live file of the family that has
** tensors (on a tie of mtimes, as ckptctl import may copy, the one made
** last); -ENOENT if none. */
int fsmeta_family_latest(fsmeta *m, const char *family, uint64_t not_ino, uint64_t *ino);
/* The most recently modified (then made) other live file whose content
** has tensor t (same name, dtype and length): a copy of the same model
** elsewhere, such as the pretrained model a fine-tuning run started from.
** -ENOENT if none. */
int fsmeta_layout_latest(fsmeta *m, const struct fsm_tensor *t, uint64_t not_ino,
                         uint64_t *ino);
/* A path of ino from the root ("/a/b"), for family keys. */
int fsmeta_path(fsmeta *m, uint64_t ino, char *buf, size_t cap);

/* Delete inodes whose link count is 0 (unlinked while open before a crash). */
int fsmeta_purge_orphans(fsmeta *m, uint64_t *purged);
int fsmeta_stats(fsmeta *m, struct fsm_stats *s);
/* Every chunk in use, for verification; cb returns non-zero to stop. */
typedef int (*fsmeta_chunk_cb)(void *ctx, const struct fsm_chunk *c);
int fsmeta_chunks(fsmeta *m, fsmeta_chunk_cb cb, void *ctx);
/* Path-free walk of regular files: ino, size, stored; for per-file stats. */
typedef int (*fsmeta_file_cb)(void *ctx, uint64_t ino, uint64_t size, uint64_t stored);
int fsmeta_files(fsmeta *m, fsmeta_file_cb cb, void *ctx);
/* One name of ino (any), with its parent, for reports. */
int fsmeta_name_of(fsmeta *m, uint64_t ino, uint64_t *parent, char *name, size_t cap);

/* ---- History (fsmeta_hist.c) ---- */

#define FSM_SEQ_NOW UINT64_MAX /* "alive now" as an end of life */

enum { FSM_VER_KEPT = 0, FSM_VER_PROVISIONAL = 1, FSM_VER_PRUNED = 2 };
/* Where a version with a policy stands: waiting for a newer version,
** re-encoded lossily, left exact (nothing to quantize), or waiting for the
** recoder only (its policy makes the newest lossy too). */
enum { FSM_LOSSY_TODO = 0, FSM_LOSSY_DONE = 1, FSM_LOSSY_EXACT = 2, FSM_LOSSY_NOW = 3 };

struct fsm_version {
    uint64_t id, ino, seq;
    int64_t time;  /* when seq was committed (ns) */
    int64_t mtime; /* the file's mtime in this version */
    uint64_t size, stored;
    uint32_t mode, uid, gid;
    int state;     /* FSM_VER_* */
    char policy[128]; /* lossy policy (src/policy.h); "": lossless */
    int lossy;     /* FSM_LOSSY_* */
    double err;    /* FSM_LOSSY_DONE: relative L2 error of its tensors; else -1 */
};

/* A directory entry of history: alive for born <= seq < died. */
struct fsm_hentry {
    uint64_t id; /* row id: a stable readdir cookie (>= 1) */
    uint64_t parent, ino;
    uint32_t mode;
    uint64_t born, died; /* died FSM_SEQ_NOW: alive now */
    char name[256];
};

typedef int (*fsmeta_version_cb)(void *ctx, const struct fsm_version *v);
typedef int (*fsmeta_hentry_cb)(void *ctx, const struct fsm_hentry *e);
typedef int (*fsmeta_change_cb)(void *ctx, uint64_t seq, int64_t time);

int fsmeta_version_get(fsmeta *m, uint64_t id, struct fsm_version *v);
/* The latest version of ino committed at or before seq (any state: a pruned
** one means the content of that time is gone). -ENOENT if none. */
int fsmeta_version_at(fsmeta *m, uint64_t ino, uint64_t seq, struct fsm_version *v);
/* Versions of ino (0: of every inode), by inode then seq. */
int fsmeta_versions(fsmeta *m, uint64_t ino, fsmeta_version_cb cb, void *ctx);
int fsmeta_version_extents(fsmeta *m, uint64_t ver, struct fsm_extent **out, size_t *n);
/* Release a version's content (retention): its row stays, pruned. -EBUSY for
** the current version of a live file. */
int fsmeta_version_prune(fsmeta *m, uint64_t ver);
/* Raw bytes of ver by codec: raw[CODEC] and delta (tensor blocks stored as
** deltas). */
struct fsm_mix { uint64_t raw[5], delta, blocks; }; /* raw bytes by codec id */
int fsmeta_version_mix(fsmeta *m, uint64_t ver, struct fsm_mix *mix);
/* A version holding the base of one of ver's delta blocks; 0 if none. */
int fsmeta_version_base(fsmeta *m, uint64_t ver, uint64_t *base_ver);

/* Entries of dir alive at seq (name NULL: all, with row id > after). */
int fsmeta_hist_at(fsmeta *m, uint64_t seq, uint64_t dir, const char *name,
                   uint64_t after, fsmeta_hentry_cb cb, void *ctx);
/* fsmeta_hist_at of every name, each entry with its inode's latest version
** committed at or before seq (NULL: none), from one query. */
typedef int (*fsmeta_hentry_ver_cb)(void *ctx, const struct fsm_hentry *e,
                                    const struct fsm_version *v);
int fsmeta_hist_at_versions(fsmeta *m, uint64_t seq, uint64_t dir, uint64_t after,
                            fsmeta_hentry_ver_cb cb, void *ctx);
/* Every entry dir ever had (name NULL: under any name). */
int fsmeta_hist_all(fsmeta *m, uint64_t dir, const char *name, fsmeta_hentry_cb cb,
                    void *ctx);
/* Every entry that ever named ino. */
int fsmeta_hist_of(fsmeta *m, uint64_t ino, fsmeta_hentry_cb cb, void *ctx);
int fsmeta_hist_target(fsmeta *m, uint64_t id, void *buf, size_t cap, size_t *len);

/* Sequence numbers: the last one, the last at or before time t (0: none),
** the time of one, and every one after `after` in order. */
int fsmeta_seq_last(fsmeta *m, uint64_t *seq);
int fsmeta_seq_at(fsmeta *m, int64_t t, uint64_t *seq);
int fsmeta_seq_time(fsmeta *m, uint64_t seq, int64_t *t);
int fsmeta_changes(fsmeta *m, uint64_t after, fsmeta_change_cb cb, void *ctx);

/* ---- Lossy re-encoding (fsmeta_lossy.c) ---- */

/* The oldest version waiting for its lossy policy that may be re-encoded
** now: FSM_LOSSY_NOW, or FSM_LOSSY_TODO and a newer version of its inode or
** family exists. -ENOENT if none. */
int fsmeta_recode_next(fsmeta *m, struct fsm_version *v);
/* The kept version of v's inode or family committed last before v: what a
** reader rebuilds for it is the base of v's residuals. -ENOENT if none. */
int fsmeta_recode_prev(fsmeta *m, const struct fsm_version *v, uint64_t *prev);
/* Replace blocks of version ver: ext[i].c (inserted when its id is 0)
** becomes the block at ext[i].file_off, which must already be an extent of
** ver; then mark ver FSM_LOSSY_DONE with error err, or, when n is 0,
** FSM_LOSSY_EXACT. One transaction. */
int fsmeta_recode_commit(fsmeta *m, uint64_t ver, struct fsm_extent *ext, size_t n,
                         double err);
/* How many live deltas deep the chains below chunk id reach (0: none). */
int fsmeta_chunk_height(fsmeta *m, uint64_t id, uint32_t *h);
/* The live chunks that are deltas against chunk id (*out malloc'd). */
int fsmeta_chunk_deltas(fsmeta *m, uint64_t id, struct fsm_chunk **out, size_t *n);
/* Point chunks c[i].id at new records of the same raw bytes (c[i] as
** store_put_block fills it, id set): each moves its reference from its old
** base old_base[i] (old_base NULL: none had one) to c[i].base, the depth
** and chain of the deltas below it follow, and the versions using it have
** their stored bytes recounted. A chunk that died or changed base since
** it was read is left as it is; *moved counts the others. One transaction.
** A replaced block that only newer deltas kept alive dies so. */
int fsmeta_rebase_commit(fsmeta *m, const struct fsm_chunk *c, const uint64_t *old_base,
                         size_t n, size_t *moved);

/* ---- Checks and garbage collection (fsmeta_check.c) ---- */

/* Every chunk row, garbage included, by pack and offset; refs is passed too. */
typedef int (*fsmeta_chunk_refs_cb)(void *ctx, const struct fsm_chunk *c, int64_t refs);
int fsmeta_all_chunks(fsmeta *m, fsmeta_chunk_refs_cb cb, void *ctx);
/* Delete garbage chunk rows that died before dead_before; *n gets the count. */
int fsmeta_gc_chunks(fsmeta *m, int64_t dead_before, uint64_t *n);
/* A pair waiting for its reverse delta: older, to be re-encoded against
** newer (both live). */
struct fsm_rpair {
    struct fsm_chunk newer, older;
    uint8_t width, flags; /* fsm_pred's */
};
/* Up to max pairs, oldest first (*out malloc'd). */
int fsmeta_reverse_next(fsmeta *m, size_t max, struct fsm_rpair **out, size_t *n);
/* Drop the pairs of newer[0..n) (done, or left standalone as keyframes) and
** those whose blocks died. */
int fsmeta_reverse_done(fsmeta *m, const uint64_t *newer, size_t n);
/* Pairs waiting. */
int fsmeta_reverse_count(fsmeta *m, uint64_t *n);
/* A block stored raw, waiting to be compressed: c (live), with the
** encoder's hints and, when narrow.id is not 0, the bf16 block its fp32
** values are coded against. */
struct fsm_rawblock {
    struct fsm_chunk c, narrow;
    uint8_t width, flags;
    uint32_t narrow_off;
};
/* Up to max raw blocks, oldest first, none held (*out malloc'd). */
int fsmeta_compress_next(fsmeta *m, size_t max, struct fsm_rawblock **out, size_t *n);
/* Drop the rows of chunk[0..n) (compressed, or left raw) and those of dead
** blocks. */
int fsmeta_compress_done(fsmeta *m, const uint64_t *chunk, size_t n);
/* Raw blocks waiting (not held), dead ones included until the next
** fsmeta_compress_done. */
int fsmeta_compress_count(fsmeta *m, uint64_t *n);
/* Let go of every hold (FSM_PRED_HOLD): a mount that keeps no newest
** version raw compresses those too. */
int fsmeta_compress_release(fsmeta *m);
/* Queue every live block stored raw, with no hints (it is tried as plain
** bytes): a rebuild's chunk rows know no encoder hints, and a block raw
** at the rebuild would otherwise stay raw. Blocks that gain nothing are
** looked at once and left. */
int fsmeta_compress_requeue(fsmeta *m);

/* A number that changes when another connection (ckptctl prune beside a
** mount) commits to meta.db. */
int fsmeta_data_version(fsmeta *m, uint64_t *v);
/* A live delta kept by some version whose base no version uses (its
** versions were pruned): it alone keeps that chain alive. width and dtype:
** the tensor it holds elements of (width 0: none known). */
struct fsm_orphan {
    struct fsm_chunk c;
    unsigned width;
    uint8_t dtype;
};
/* Up to max of them (*out malloc'd). */
int fsmeta_orphan_deltas(fsmeta *m, size_t max, struct fsm_orphan **out, size_t *n);
/* Point chunk id at its record's new place (pack compaction). */
int fsmeta_chunk_move(fsmeta *m, uint64_t id, uint32_t pack, uint64_t off);

/* The pack holding the manifest of the version committed last; -ENOENT if
** no version has one. Where a mount looks for commits meta.db lost. */
int fsmeta_last_manifest_pack(fsmeta *m, uint32_t *pack);

/* Every pack some chunk row names, garbage rows included, ascending, to cb
** (non-zero stops; a negative value is returned). */
int fsmeta_packs_used(fsmeta *m, int (*cb)(void *ctx, uint32_t pack), void *ctx);

/* Metadata consistency. Each problem found is reported through cb (a line
** of text); with repair, those that can be repaired are. Returns the number
** of problems (>= 0) or an error. */
typedef void (*fsmeta_problem_cb)(void *ctx, const char *what); /* may be NULL */
int fsmeta_check(fsmeta *m, int repair, fsmeta_problem_cb cb, void *ctx);

#endif
