/*
** store.h: a ckptfs store on disk, and block I/O against it.
**
** Layout of a store directory:
**
**   STORE/meta.db     metadata (fsmeta/schema.sql), SQLite in WAL mode
**   STORE/packs/      append-only pack files of block records (pack.h)
**   STORE/staging/    bodies of files being written at random offsets,
**                     one file per inode named by its decimal inode number
**   STORE/lock        held (flock) by the daemon that has the store mounted
**   STORE/backups/    copies of meta.db a mount takes now and then
**
** A block is written by encoding it (codec.h), appending the record to a pack
** and describing it in a struct fsm_chunk; the chunk enters meta.db only
** when a file that uses it commits. Reading a block checks the record header
** against the chunk, decodes (a delta after rebuilding its base, through the
** cache), and checks the XXH3 of the result: corruption is reported as -EIO
** and logged, never returned as data.
*/
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "../fsmeta/fsmeta.h"
#include "bcache.h"
#include "pack.h"
#include "pool.h"

struct store_opts {
    size_t block_size;       /* raw bytes per block (default 1 MiB) */
    int zstd_level;          /* default 1 */
    int threads;             /* compression workers (default: twice the online CPUs:
                                a worker writing a record with direct I/O waits for
                                the disk); decode ahead has one thread per CPU */
    size_t cache_bytes;      /* decoded block cache (default 64 MiB) */
    size_t buffer_bytes;     /* raw blocks queued for the workers before a
                                writer waits (default 64 MiB) */
    int worker_nice;         /* nice value of the workers (default 10: writers
                                and readers come first) */
    uint64_t reserve_bytes;  /* free disk kept back for metadata (default 64 MiB) */
    uint64_t max_pack_bytes; /* pack size before a new one starts (default 1 GiB) */
    uint64_t behind_bytes;   /* pack write-behind window (default 16 MiB; 0 off) */
    int no_group;            /* tensor deltas never grouped (faster to decode) */
    int spill;               /* past the write buffer, blocks are stored raw
                                and compressed in the background (ingest.c) */
    int raw_newest;          /* a checkpoint's blocks are stored raw, and held so
                                until a newer version supersedes them (ingest.c) */
    int readonly;            /* tools: no lock, no writes */
    int shared;              /* tools beside a live mount: metadata writable
                                through SQLite; no lock, packs read-only */
    int init_nonempty;       /* make a store in a directory holding other files */
    int rebuild;             /* set meta.db aside (renamed, with its WAL) and
                                start an empty one: ckptctl rebuild */
    const char *policy;      /* lossy policy of files without their own
                                (policy.h canonical text); NULL: lossless */
};

/* A write session's claim on what an online gc must leave alone (gc.h):
** records it appends go to packs numbered `pack` or higher and are not in
** meta.db until it commits; a base it picks may die (be pruned) while it
** encodes against it, at `since` or later, and comes back when it commits. */
struct store_pin {
    uint32_t pack;
    int64_t since;
    struct store *st; /* while pinned; NULL otherwise */
    struct store_pin *prev, *next;
};

struct store {
    char *path;
    int dirfd, stagefd, lockfd;
    struct store_opts o;
    fsmeta *meta;
    packset *packs;
    pool *workers;  /* NULL until store_start */
    pool *readers;  /* decode ahead of readers, at their priority; ditto */
    bcache *cache;
    uint64_t queued; /* store_queued_add (atomic) */
    pthread_mutex_t pin_mu;
    struct store_pin *pins; /* write sessions in progress */
    char meta_aside[64];    /* rebuild: the name meta.db was given; "" none */
    int replayed;           /* store_replayed: every manifest is judged */
    int unreplayed;         /* store_note_unreplayed (atomic) */
};

void store_default_opts(struct store_opts *o);

/* Open STORE (creating it when missing or empty unless readonly). A
** read-write open takes the store lock: -EBUSY if another daemon holds it.
** A directory that is not a store is refused untouched: -EMEDIUMTYPE (its
** meta.db is not ckptfs's), -ENOMEDIUM (packs but no meta.db), -ENOTEMPTY
** (other files; allowed with init_nonempty). store_strerror says which. */
int store_open(const char *path, const struct store_opts *o, struct store **out);
void store_close(struct store *st);

/* The replay mark (meta.db's config "replay_from"): every manifest the
** packs hold before (pack, off) is in meta.db, or was judged by a replay
** (rebuild.h), so the next replay starts there. Packs are only appended to
** and a pack id names one content for good, so the mark stays true as the
** store grows; meta.db holds it, so an older meta.db put back brings its
** own, older mark. get: -ENOENT if the store has none. */
int store_replay_mark(struct store *st, uint32_t *pack, uint64_t *off);
/* A replay judged every manifest the packs hold: the mark moves to their
** end, and store_close moves it again to the end of what this opener
** appended, unless one of its commits failed. A read-write open whose mark
** is at the end already counts as replayed. */
int store_replayed(struct store *st);
/* A manifest was appended whose commit then failed: store_close leaves
** the mark before it, for the next mount's replay. */
void store_note_unreplayed(struct store *st);
/* What a store_open error means, for a user. */
const char *store_strerror(int rc);
/* Start the compression workers and the decode-ahead threads (after any
** fork: threads do not survive it). */
int store_start(struct store *st);
/* Close and reopen the metadata connection: after fork (daemonizing), whose
** child inherits SQLite's file descriptors but not its POSIX locks. */
int store_reopen_meta(struct store *st);

/* What a writer knows of a block: a tensor's element type, the same block
** of the tensor's previous version (a committed chunk), and for fp32 master
** weights the block of bf16 weights they round to (codec.h, CODEC_WIDE). */
struct store_hint {
    unsigned width;        /* bytes per element (a guess when plain); 0: no
                              hint, plain bytes */
    int is_float;
    int plain;             /* no tensor's block: width is a guess, and the
                              block is coded as plain bytes unless a delta
                              against base is smaller */
    int has_base;          /* base below is set */
    int pred_only;         /* base is the block's predecessor: code the block
                              standalone (or share base if identical) and
                              record the pair for a reverse delta (reverse.h) */
    struct fsm_chunk base;
    int has_narrow;        /* narrow and narrow_off below are set */
    struct fsm_chunk narrow;
    uint32_t narrow_off;   /* element of narrow where this block's values start */
    uint32_t below;        /* nonzero: append only a record of fewer stored
                              bytes (store_put_block returns 1 otherwise) */
    int hold;              /* store_put_raw: keep it raw while its version is
                              the newest (FSM_PRED_HOLD) */
};

/* Chains of deltas are bounded so a read never decodes more than
** STORE_MAX_DEPTH + 1 blocks nor reads more than about 3x the block size:
** a block is stored as a delta only when its base has depth below
** STORE_MAX_DEPTH and a chain of at most STORE_MAX_CHAIN_X times its size,
** or of STORE_CHAIN_FLOOR bytes for a small block (a run of biases between
** two big tensors), whose reads cost a record each more than their bytes. */
#define STORE_MAX_DEPTH 8
#define STORE_MAX_CHAIN_X 2
#define STORE_CHAIN_FLOOR (64 << 10)

/* Blocks a sequential reader has decoded ahead of it (store.readers). */
#define STORE_AHEAD_BLOCKS 4

/* Encode and append one block (h may be NULL); fills *c (id 0). Not
** durable until synced. 1, nothing appended: it did not code below
** h->below bytes. */
int store_put_block(struct store *st, const void *raw, size_t len,
                    const struct store_hint *h, struct fsm_chunk *c);
/* store_put_block of a buffer from bbuf_alloc, which it takes over (to
** cache without copying, or to free), whatever the outcome. */
int store_put_block_own(struct store *st, void *raw, size_t len, const struct store_hint *h,
                        struct fsm_chunk *c);
/* Append a block as it is (the encoder is behind the writer: ingest.c),
** taking over raw (bbuf.h) whatever the outcome; *c's pred carries
** FSM_PRED_RAW and the encoder's hints, so the commit that first names it
** queues it for the background to compress (compress.h). A block equal to
** its predecessor (pred_only) shares its chunk instead, as with
** store_put_block. */
int store_put_raw(struct store *st, void *raw, size_t len, const struct store_hint *h,
                  struct fsm_chunk *c);
/* Append a block encoded elsewhere (a lossy re-encoding): stored[0..len),
** codec id codec, decodes to raw[0..raw_len), against base (NULL: none).
** Fills *c (id 0) and caches raw. Not durable until synced. */
int store_put_encoded(struct store *st, uint8_t codec, const void *stored, size_t len,
                      const void *raw, size_t raw_len, const struct fsm_chunk *base,
                      struct fsm_chunk *c);
/* Append a manifest (manifest.h), raw[0..len), as a record flagged
** PACK_REC_MANIFEST; fills *c (id 0). Not durable until synced. */
int store_put_manifest(struct store *st, const void *raw, size_t len, struct fsm_chunk *c);
/* Copy meta.db, as committed, to STORE/backups/meta-YYYYMMDDTHHMMSSZ.db
** (written as .tmp, then renamed) and keep only the newest keep of them. */
int store_backup_meta(struct store *st, int keep);
/* -ENOSPC unless len more bytes fit on the store's disk beside the
** metadata reserve and the bytes queued for the workers. */
int store_space(struct store *st, uint64_t len);
/* store_space for a block stored raw (store_put_raw), which takes room
** until the background compresses it: -ENOSPC unless a margin is left
** beyond it (a tenth of the filesystem, at least 1 GiB), so a save that
** fits compressed is not failed by raw bytes. */
int store_space_raw(struct store *st, uint64_t len);
/* Raw bytes on their way to a pack (queued for the workers): counted as
** used by store_space, so a full disk fails the write, not the commit. */
void store_queued_add(struct store *st, int64_t delta);
uint64_t store_queued(struct store *st);
/* Copy [off, off+len) of the block of c into dst, through the cache. */
int store_read_block(struct store *st, const struct fsm_chunk *c, size_t off,
                     size_t len, void *dst);
/* Copy [off, off+len) of content made of ext[0..n) (sorted by offset, holes
** between them reading as zeros) into dst, through the cache. */
int store_read_range(struct store *st, const struct fsm_extent *ext, size_t n,
                     void *dst, size_t len, uint64_t off);
/* A read's bytes in order, as pieces of the caller's buffer and of cached
** blocks, pinned (bcache.h) so a reply can be sent from where they lie
** instead of copied first; store_iov_release unpins. */
#define STORE_IOV_MAX 8
struct store_iov {
    struct iovec v[STORE_IOV_MAX];
    void *pin[STORE_IOV_MAX]; /* NULL: a piece of the caller's buffer */
    int n;
    bcache *cache;
};
/* store_read_range, the bytes left where they are: out's pieces are
** [off, off + len) in order; a piece that is not a pinned cached block lies
** in buf (len bytes) at its own offset in the range. */
int store_read_iov(struct store *st, const struct fsm_extent *ext, size_t n, void *buf,
                   size_t len, uint64_t off, struct store_iov *out);
/* Out as one piece: buf[0..len) (a read made there by copying). */
void store_iov_buf(struct store_iov *out, void *buf, size_t len);
/* Total bytes of v's pieces. */
size_t store_iov_len(const struct store_iov *v);
/* Copy v's pinned pieces into their places in buf (which then holds all
** of v) and release v; returns the bytes of v. */
size_t store_iov_gather(struct store_iov *v, void *buf);
void store_iov_release(struct store_iov *v);
/* Decode a block into the cache unless it is there already. */
void store_prefetch_block(struct store *st, const struct fsm_chunk *c);
/* Drop block c's decoded copy from the cache (a sequential reader is past
** it, and the kernel's page cache holds it): the next block decoded reuses
** its buffer instead of faulting in fresh pages. */
void store_drop_block(struct store *st, const struct fsm_chunk *c);
/* Read and check a whole block without the cache (verification tools, and
** background re-encoding, which must not push out readers' blocks). */
int store_verify_block(struct store *st, const struct fsm_chunk *c, void *dst);
/* Make the records of ext[0..n) durable: fdatasync each pack they use once. */
int store_sync_extents(struct store *st, const struct fsm_extent *ext, size_t n);
/* Blocks re-encoded in the background (compress, reverse deltas, lossy,
** gc's rebase): make the new records nc[0..n) durable, then point each
** chunk nc[i].id at its record in one transaction (fsmeta_rebase_commit,
** old_base[i] the base it had when read, NULL: none had one). *moved:
** chunks swapped. */
int store_swap_records(struct store *st, const struct fsm_chunk *nc, const uint64_t *old_base,
                       size_t n, size_t *moved);

/* Write sessions: store_pin when one starts, store_pin_advance after each
** of its commits (what it wrote so far is in meta.db), store_unpin at its
** end (harmless when not pinned). store_pins_floor: the lowest pack and time any session holds
** (UINT32_MAX and INT64_MAX when none). */
void store_pin(struct store *st, struct store_pin *p);
void store_pin_advance(struct store *st, struct store_pin *p);
void store_unpin(struct store *st, struct store_pin *p);
void store_pins_floor(struct store *st, uint32_t *pack, int64_t *since);

/* Staging file of an inode: open (creating and truncating it with create). */
int store_stage_open(struct store *st, uint64_t ino, int create);
int store_stage_remove(struct store *st, uint64_t ino);

#endif
