/*
** node.h: in-memory inodes: kernel reference counts and write state.
**
** A node exists while the kernel holds references to the inode (lookup
** count), while it has open handles, or while an operation has it pinned.
** When the last of these goes, node_unref reports it so the caller can
** delete an inode that was unlinked while in use.
**
** The write state (mode and the fields after it) belongs to ingest.c and is
** guarded by mu; inflight, pend and err are also touched by compression
** workers and are guarded by cmu.
*/
#ifndef CKPT_NODE_H
#define CKPT_NODE_H

#include <pthread.h>
#include <stdint.h>

#include "../fsmeta/fsmeta.h"
#include "extmap.h"
#include "store.h"

enum node_mode {
    NODE_CLEAN,  /* content is what meta.db says */
    NODE_STREAM, /* appended sequentially from empty: blocks go straight to packs */
    NODE_STAGE,  /* whole body in STORE/staging/<ino> */
};

struct node {
    uint64_t ino;
    struct node *hnext;
    /* guarded by the table lock (nwriters is also read without it, atomically) */
    uint64_t nlookup;
    unsigned nopen, nwriters, pins;
    unsigned ndirect; /* open handles whose writes bypass the page cache */
    int stale;        /* such a handle wrote: the kernel's cached pages may be
                         older than the file */

    pthread_mutex_t mu;
    /* committed content, cached for reads (loaded on first use) */
    int loaded;
    uint64_t csize;
    struct extmap *map;
    uint64_t rd_end, ra_end; /* end of the last read; prefetch issued up to */

    enum node_mode mode;
    int dirty;             /* changes since the last commit */
    int provisional;       /* the last commit made a provisional version */
    int flushed;           /* dirty, and every writer has closed (flushed) it
                              since its last change: a commit is owed */
    uint64_t famkey;       /* hash of the cutter's family, 0 if none: read
                              without mu, to skip others' families unlocked */
    int lost;              /* an owed commit failed: the next fsync says so */
    uint64_t size;         /* current size while not clean */
    int64_t mtime, ctime;  /* times of the last change while not clean */
    int stage_fd;          /* NODE_STAGE */
    int spill_fd;          /* NODE_STREAM: blocks waiting for a worker on disk
                              (ingest.c), -1 until the first */
    uint64_t send;         /* NODE_STREAM: bytes appended; [send, size) is a hole */
    uint8_t *tail;         /* NODE_STREAM: bytes after the last full block */
    size_t tail_len, tail_cap;
    struct cutter *cut;    /* where blocks end and what they hold (ingest.c) */
    struct xbase *xb;      /* narrow bases of fp32 master weights (xbase.h) */
    struct store_pin wpin; /* held while not clean (store.h) */

    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    unsigned inflight;       /* blocks being encoded */
    int err;                 /* first error of a worker, reported at next call */
    struct fsm_extent *pend; /* finished blocks in offset order; raw_len 0: hole */
    size_t npend, pend_cap;
};

typedef struct node_table node_table;

int node_table_create(node_table **out);
void node_table_destroy(node_table *t);

/* Pin the node of ino, creating it if needed. */
struct node *node_pin(node_table *t, uint64_t ino);
/* Adjust counters of a pinned node (lookup, open, writers); returns the
** number of writers left. */
unsigned node_add(node_table *t, struct node *n, int64_t dlookup, int dopen, int dwriters);
/* What node_open decided for a handle (node_open's result bits). */
#define NODE_DIRECT 1 /* its writes bypass the kernel's page cache */
#define NODE_DROP 2   /* the kernel must drop its cached pages at this open */

/* Count an open handle of a pinned node (a writer if writer is set) and
** decide, atomically with the other opens, how the kernel caches it. A
** handle that asks for direct writes gets them only as the node's sole
** open handle, so no cached handle's pages predate them unseen; the next
** cached open after such writes drops the pages (node_wrote_direct has
** the kernel drop those of handles opened beside it). */
unsigned node_open(node_table *t, struct node *n, int writer, int want_direct);
/* Undo node_open for a handle with those result bits; returns the number
** of writers left. node_open_undo is for an open that failed before the
** kernel heard of it (its drop is still owed). */
unsigned node_close(node_table *t, struct node *n, int writer, unsigned how);
void node_open_undo(node_table *t, struct node *n, int writer, unsigned how);
/* A direct handle (NODE_DIRECT) wrote: 1 if other handles are open, whose
** pages of the range the caller must have the kernel drop. */
int node_wrote_direct(node_table *t, struct node *n);
/* Drop a pin. Returns 1 when the node is gone (no refs of any kind left). */
int node_unpin(node_table *t, struct node *n);
/* Node of ino if one exists (pinned), else NULL. */
struct node *node_find(node_table *t, uint64_t ino);

/* Call fn on every node, pinned; fn drops the pin (the caller's unpin may
** have an unlinked inode to delete). */
void node_foreach(node_table *t, void (*fn)(struct node *n, void *ctx), void *ctx);

#endif
