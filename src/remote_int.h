/*
** remote_int.h: what the files of the remote tier share (remote.h is the
** interface): remote.c (the object, pulling a copy, the store claim, the
** lease), remote_bucket.c (names, listings, LATEST), remote_push.c
** (uploads and deletions), remote_read.c (reading packs from the bucket,
** fetching ahead, dropping local bytes).
*/
#ifndef CKPT_REMOTE_INT_H
#define CKPT_REMOTE_INT_H

#include "remote.h"
#include "s3.h"

#include <pthread.h>
#include <stdint.h>

#define LATEST "meta/LATEST"
#define LATEST_MAX 512
#define FETCH_MAX_GRANULES 4 /* one GET: up to 4 MiB of missing granules */
#define AHEAD_GRANULES 16     /* fetched ahead of a reader: up to 16 MiB */
#define AHEAD_THREADS 2       /* GETs in flight ahead of a reader */
#define MAP_FLUSH_GRANULES 64 /* fetched bytes synced and mapped every 64 MiB */
/* A granule in rpack.have: missing; here and in the map; here, not yet
** synced (G_UNSYNCED) or being synced (G_SYNCING), so not in the map;
** being fetched by some thread. The map file holds 1 for G_HERE only. */
enum { G_MISSING, G_HERE, G_UNSYNCED, G_SYNCING, G_FETCHING };
#define G_READABLE(v) ((v) == G_HERE || (v) == G_UNSYNCED || (v) == G_SYNCING)

/* A pack, as the bucket and the local store have it. */
enum { RP_UNKNOWN, RP_LOCAL, RP_PARTIAL };
struct rpack {
    uint64_t size;  /* the bucket's object (as last listed or sent); UINT64_MAX: none */
    uint64_t local; /* RP_PARTIAL: the size of the local copy */
    int state;      /* RP_LOCAL: the whole pack is here (no map) */
    uint8_t *have;  /* RP_PARTIAL: one G_* per granule */
    uint64_t unsynced; /* granules G_UNSYNCED */
    int syncing;       /* a thread syncs this copy (outside mu) */
    int fd, hfd;    /* RP_PARTIAL: the copy and its .have */
};

struct remote {
    s3 *s;
    char lease_store[4096]; /* the store holding the lease ("" none) */
    int64_t lease_at;       /* when it was last written */
    int lease_lost;         /* another took it: no more uploads */
    int copy_lock;          /* a copy's STORE/lock, held (remote_pull_meta) */
    /* reads: */
    struct store *st;
    packset *ps;         /* st's packs as attached (verify --remote swaps them) */
    int readonly;        /* st is a read-only copy of the bucket */
    pthread_mutex_t mu;  /* the table and the maps */
    pthread_cond_t fetched; /* some granules stopped being G_FETCHING */
    /* fetching ahead of a sequential reader, on threads of their own: */
    pthread_t ahead[AHEAD_THREADS];
    int ahead_on, ahead_stop, ahead_busy; /* threads started, busy */
    uint32_t ahead_id;   /* the run to fetch next: pack (0 none) */
    uint64_t ahead_g;    /* and first granule */
    pthread_cond_t ahead_cv;
    struct rpack **packs; /* by id; an entry, once made, never moves (readers
                             use it outside mu) */
    uint32_t npacks;
};

struct sizes {
    uint64_t *v; /* v[id]; UINT64_MAX: none */
    uint32_t n;
};

struct latest {
    char snapshot[64];
    uint64_t size, hash;
};

void rmt_file_names(uint32_t id, char name[32], char hname[32]);
void rmt_pack_key(uint32_t id, char key[48]); /* the object: packs/NNNNNNNN.pack */
int rmt_same_url(const char *a, const char *b);
int rmt_sizes_set(struct sizes *z, uint32_t id, uint64_t size);
uint64_t rmt_sizes_get(const struct sizes *z, uint32_t id);
uint32_t rmt_sizes_top(const struct sizes *z);
int rmt_list_packs(remote *r, struct sizes *z);
int rmt_list_local(int pdfd, struct sizes *z, struct sizes *disk);
int rmt_snapshot_key(const char *key);
int rmt_read_latest(remote *r, struct latest *l);
int rmt_file_hash(int fd, uint64_t *size, uint64_t *hash);
void rmt_lease_tick(remote *r);
int rmt_lease_check(remote *r);
struct rpack *rmt_entry(remote *r, uint32_t id);
void rmt_rpack_close(struct rpack *p, int save);
void rmt_ahead_end(remote *r);

#endif
