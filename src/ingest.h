/*
** ingest.h: the write path of one file, from FUSE writes to a commit.
**
** A file being written is in one of three modes:
**
**   CLEAN   nothing pending; reads come from the committed extents.
**   STREAM  written from empty by sequential appends, as trainers write. Each
**           full block goes to the worker pool to be encoded and appended to
**           a pack as it arrives, so the data reaches disk once. Extending the
**           size (ftruncate up) leaves a hole the appends may keep filling.
**   STAGE   any other write (random offsets, overwrite, truncate down) moves
**           the whole body into STORE/staging/<ino>; it is encoded at commit.
**
** A commit (on fsync, on close, or on truncate of a file nobody has open)
** waits for the workers, makes the pack records durable, then replaces the
** file's content in one metadata transaction: the single commit point. Only
** then is the staging file removed. If a commit fails, the staging file is
** kept and recovered at the next mount; nothing committed is ever lost.
**
** Closing a streamed file does not wait for its commit (write-behind, as a
** kernel filesystem's page cache): close(2) returns once every byte is
** queued, and the commit is owed. The last writer's release pays it, on a
** FUSE thread the writer does not wait for; so do, at once, fsync, a new
** writer, and ingest_settle (what a reader of the history or of meta.db
** must see first). Until then reads and getattr see the content as usual.
**
** Blocks are cut by a cutter (cutter.h): at tensor boundaries the format
** parser finds as the bytes arrive, so each tensor block can be encoded as a
** delta against the same block of the previous version.
**
** Memory: each writing file holds one block of tail and a cutter (the
** parser: at most FMT_MAX_MEM, in practice one safetensors header or one
** pickle; plus a few hundred bytes per tensor). The pool queue is the write
** buffer: it holds at most buffer_bytes of blocks (store_opts) and blocks
** writers when full (backpressure: training waits, nothing is dropped); a
** worker encoding a delta also holds the block, its base and about 3 blocks
** of scratch. So the bound is about buffer_bytes + block * (1 + 5 * workers)
** + the cache, whatever the file size. Queued bytes count as used in
** store_space, so a full disk fails the write (ENOSPC), not the commit.
*/
#ifndef CKPT_INGEST_H
#define CKPT_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "../fsmeta/fsmeta.h"
#include "node.h"
#include "store.h"

/* The write side of a mounted store: the files being written (their nodes'
** write state), and what a writer owes the others. */
struct ingest {
    struct store *st;
    node_table *nodes;  /* a writer settles other files' owed commits */
    unsigned long owed; /* files closed with their commit still owed (atomic) */
    int lost;           /* an owed commit failed: ingest_take_lost says so once */
};

void ingest_init(struct ingest *ig, struct store *st, node_table *nodes);
/* Pay every owed commit of family fam (NULL: any), or with narrow_in (0:
** any) of the files in that directory that hold BF16 tensors: what a
** reader of the history, an fsync (NULL, 0), or a writer looking for its
** base (xbase.h: its narrow base) must see committed. */
int ingest_settle_all(struct ingest *ig, const char *fam, uint64_t narrow_in);
/* The error of an owed commit that failed since the last call, or 0. */
int ingest_take_lost(struct ingest *ig);

int ingest_write(struct ingest *ig, struct node *n, const void *buf, size_t len,
                 uint64_t off);
int ingest_truncate(struct ingest *ig, struct node *n, uint64_t size);
/* final: the last writer closed; drop the write state after committing. */
int ingest_commit(struct ingest *ig, struct node *n, int durable, int final);
/* A writer's close (FUSE flush): a streamed file's commit becomes owed and
** the call returns the first error met so far without waiting; any other
** dirty file commits (provisionally) now. */
int ingest_flush(struct ingest *ig, struct node *n);
/* Pay n's owed commit, if it has one (provisionally: its release promotes
** it); with fam, only if n is of that family (cutter.h); with narrow_in,
** only if n is in that directory and holds BF16 tensors. Lock order: only
** a writer, holding its own node, settles others while holding a node;
** a node being written is never owed (writes clear it first) and a commit
** paying an owed node settles no other node, so an owed node's lock holders
** never wait for another node's. */
int ingest_settle(struct ingest *ig, struct node *n, const char *fam, uint64_t narrow_in);
/* A new writer opens n: a provisional version left by an earlier handle's
** close is kept (that handle's release may still be on its way). */
int ingest_open_writer(struct ingest *ig, struct node *n);
/* Read up to len bytes at off; *got is the count (short only at end of file). */
int ingest_read(struct ingest *ig, struct node *n, void *buf, size_t len,
                uint64_t off, size_t *got);
/* ingest_read with the bytes left where they lie (store_read_iov): out's
** pieces, released by the caller, are the bytes read; buf (len bytes)
** holds those that are not pinned cached blocks. */
int ingest_read_iov(struct ingest *ig, struct node *n, void *buf, size_t len,
                    uint64_t off, struct store_iov *out);
/* Attributes of n as a reader sees them now: the committed row with, while
** changes are pending, their size and times (stored is then the size).
** Taken under the node lock so a concurrent commit is seen whole. */
int ingest_getattr(struct ingest *ig, struct node *n, struct fsm_attr *a);
/* Times set by utimens must survive the next commit of a dirty file;
** mtime < 0 leaves the pending mtime as it is. */
void ingest_set_times(struct node *n, int64_t mtime, int64_t ctime);
/* n's inode was just created, empty: its committed state need not be
** loaded from meta.db. */
void ingest_created(struct node *n);
/* Take a staging file left by a crash as n's new content and commit it. */
int ingest_adopt_stage(struct ingest *ig, struct node *n, int fd);

/* n's committed content was rewritten beneath it (a lossy re-encoding):
** read it from meta.db again, unless n has changes of its own. */
void ingest_reload(struct node *n);

#endif
