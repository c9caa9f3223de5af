/*
** node.h: the table of in-memory inodes and their kernel reference counts.
**
** A node exists while the kernel holds references to the inode (lookup
** count), while it has open handles, or while an operation has it pinned.
** When the last of these goes, node_unpin reports it (and the table's gone
** hook runs) so the owner can delete an inode that was unlinked while in
** use. What a file's content is while it is written belongs to the write
** side, which extends each node (node_class; ingest.c).
*/
#ifndef CKPT_NODE_H
#define CKPT_NODE_H

#include <pthread.h>
#include <stdint.h>

#include <stddef.h>

/* An inode in memory: the kernel's references and how its handles cache.
** The table allocates nodes of its class (node_table_set_class): the
** write side (ingest.c) makes each node the head of its own per-file state. */
struct node {
    uint64_t ino;
    struct node *hnext;
    /* guarded by the table lock (nwriters is also read without it, atomically) */
    uint64_t nlookup;
    unsigned nopen, nwriters, pins;
    unsigned ndirect; /* open handles whose writes bypass the page cache */
    int stale;        /* such a handle wrote: the kernel's cached pages may be
                         older than the file */
};

/* What a table allocates: size bytes (a struct whose first member is a
** struct node), set up by init after the node fields and torn down by fini
** before it is freed. */
struct node_class {
    size_t size;
    void (*init)(struct node *n);
    void (*fini)(struct node *n);
};

typedef struct node_table node_table;

int node_table_create(node_table **out);
void node_table_destroy(node_table *t);
/* Allocate the table's nodes as cls (before the first node_pin). */
void node_table_set_class(node_table *t, const struct node_class *cls);
/* fn(ctx, ino) runs after a node is gone (its last reference dropped by
** node_unpin): the owner deletes an inode that was unlinked while in use. */
void node_table_on_gone(node_table *t, void (*fn)(void *ctx, uint64_t ino), void *ctx);

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
/* Drop a pin. Returns 1 when the node is gone (no refs of any kind left;
** the table's gone hook has run). */
int node_unpin(node_table *t, struct node *n);
/* Node of ino if one exists (pinned), else NULL. */
struct node *node_find(node_table *t, uint64_t ino);

/* Call fn on every node, pinned; fn drops the pin (the caller's unpin may
** have an unlinked inode to delete). */
void node_foreach(node_table *t, void (*fn)(struct node *n, void *ctx), void *ctx);

#endif
