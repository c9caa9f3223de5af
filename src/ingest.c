/*
** ingest.c: per-file write state and commits (see ingest.h).
**
** Locks: n->mu is held by every entry point for its whole duration; n->cmu
** only around the fields workers share (inflight, pend, err). Writers may
** block in pool_submit while holding n->mu: workers never take n->mu.
*/
#include "ingest.h"
#include "policy.h"
#include "bbuf.h"
#include "common.h"
#include "cutter.h"
#include "fmt.h"
#include "manifest.h"
#include "xbase.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

enum node_mode {
    NODE_CLEAN,  /* content is what meta.db says */
    NODE_STREAM, /* appended sequentially from empty: blocks go straight to packs */
    NODE_STAGE,  /* whole body in STORE/staging/<ino> */
};

/* A file's state on the write side: the head of the node the table
** allocates for it (ingest_init sets the class). Everything from mode on
** is guarded by mu; inflight, pend and err are also touched by the
** compression workers and are guarded by cmu. */
struct ifile {
    struct node node;
    pthread_mutex_t mu;
    /* committed content, cached for reads (loaded on first use) */
    int loaded;
    uint64_t csize;
    struct extmap *map;
    uint64_t rd_end, ra_end; /* end of the last read; prefetch issued up to */
    struct passed *passed;   /* blocks ending by here left the cache */

    enum node_mode mode;
    int dirty;             /* changes since the last commit */
    int provisional;       /* the last commit made a provisional version */
    int flushed;           /* dirty, and every writer has closed (flushed) it
                              since its last change: a commit is owed */
    uint64_t famkey;       /* hash of the cutter's family, 0 if none: read
                              without mu, to skip others' families unlocked */
    int narrow;            /* the cutter met a BF16 tensor, a narrow base for
                              fp32 files beside it (xbase.h): read without mu */
    int lost;              /* an owed commit failed: the next fsync says so */
    uint64_t size;         /* current size while not clean */
    int64_t mtime, ctime;  /* times of the last change while not clean */
    int stage_fd;          /* NODE_STAGE */
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

static struct ifile *ifile_of(struct node *n) { return (struct ifile *)n; }

/* How far a sequential reader has gone, shared with the decode-ahead jobs
** it queued (which may outlive the file's node): a job for a block the
** reader has passed, and dropped, is not done. */
struct passed {
    int refs;     /* atomic */
    uint64_t off; /* atomic */
};

static struct passed *passed_get(struct passed *p)
{
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

static void passed_put(struct passed *p)
{
    if (p && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) free(p);
}

static void ifile_init(struct node *node)
{
    struct ifile *n = ifile_of(node);
    n->stage_fd = -1;
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->cmu, NULL);
    pthread_cond_init(&n->ccv, NULL);
}

static void ifile_fini(struct node *node)
{
    struct ifile *n = ifile_of(node);
    if (n->stage_fd >= 0) close(n->stage_fd);
    extmap_put(n->map);
    bbuf_free(n->tail);
    cutter_free(n->cut);
    passed_put(n->passed);
    if (n->wpin.st) store_unpin(n->wpin.st, &n->wpin); /* freed mid-write: shutdown */
    xbase_free(n->xb);
    free(n->pend);
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->cmu);
    pthread_cond_destroy(&n->ccv);
}

static const struct node_class ifile_class = {sizeof(struct ifile), ifile_init, ifile_fini};

struct job {
    struct store *st;
    struct ifile *n;
    uint8_t *raw;
    size_t len;
    size_t idx;
    struct store_hint h;
};

/* Store j's block, encoded or (raw) as it is, and put its chunk in place. */
static void store_job(struct job *j, int raw)
{
    struct fsm_chunk c = {0}; /* raw_len 0 marks an all-zero block: a hole */
    int rc = 0;
    if (ck_is_zero(j->raw, j->len)) bbuf_free(j->raw);
    else if (raw) rc = store_put_raw(j->st, j->raw, j->len, &j->h, &c);
    else rc = store_put_block_own(j->st, j->raw, j->len, &j->h, &c);
    store_queued_add(j->st, -(int64_t)j->len);
    struct ifile *n = j->n;
    pthread_mutex_lock(&n->cmu);
    if (rc < 0 && n->err == 0) n->err = rc;
    n->pend[j->idx].c = c;
    n->inflight--;
    pthread_cond_broadcast(&n->ccv);
    pthread_mutex_unlock(&n->cmu);
    free(j);
}

static void encode_job(void *arg) { store_job(arg, 0); }

/* A block held raw (-o raw_newest): a worker appends it as it is, unless
** the disk is near full (store_space_raw), where it is encoded instead. */
static void raw_job(void *arg)
{
    struct job *j = arg;
    store_job(j, store_space_raw(j->st, j->len) == 0);
}

static void hint_for(struct ingest *ig, struct ifile *n, const uint8_t *raw, uint64_t off,
                     size_t len, struct store_hint *h);
static int commit_locked(struct ingest *ig, struct ifile *n, int durable, int final);

/* Hand j to the workers: to encode it, or for a checkpoint's block under
** -o raw_newest (hint_for) to append it raw, so the newest version reads
** without decoding and is compressed once superseded; either way the
** writer goes on once the block is in the write buffer. When the buffer is
** full (-o spill), rather than make the writer wait, it stores the block
** raw itself, through the page cache as a native save goes, for the
** background to compress (compress.h): memory stays bounded by the buffer,
** and the disk holds the backlog. A disk near full (store_space_raw) makes
** the writer wait. */
static void hand_over(struct store *st, struct job *j)
{
    void (*fn)(void *) = j->h.hold ? raw_job : encode_job;
    int rc = st->o.spill || j->h.hold ? pool_try_submit(st->workers, fn, j, j->len)
                                      : pool_submit(st->workers, fn, j, j->len);
    if (rc == -EAGAIN && store_space_raw(st, j->len) == 0) {
        store_job(j, 1);
        return;
    }
    if (rc == -EAGAIN) rc = pool_submit(st->workers, encode_job, j, j->len);
    if (rc < 0) encode_job(j); /* pool stopping: encode here */
}

static int job_of(void *arg, void *n) { return ((struct job *)arg)->n == n; }

/* An fsync does not wait for the workers either: n's blocks no worker has
** started (to encode, with -o spill; held raw, always) are stored raw here,
** as hand_over stores them when the buffer is full, so the sync costs what
** a native one does. */
static void take_back(struct store *st, struct ifile *n)
{
    void (*const fn[2])(void *) = {raw_job, encode_job};
    void *j[32];
    size_t k;
    for (int f = 0; f < (st->o.spill ? 2 : 1); f++)
        while ((k = pool_take(st->workers, fn[f], job_of, n, j, 32)) > 0)
            for (size_t i = 0; i < k; i++) {
                struct job *b = j[i];
                store_job(b, store_space_raw(st, b->len) == 0);
            }
}

/* Queue raw (bbuf.h, ownership passes) as the block at file offset off,
** just cut by the node's cutter if it has one. */
static int submit_block(struct ingest *ig, struct ifile *n, uint8_t *raw, size_t len,
                        uint64_t off)
{
    struct store *st = ig->st;
    struct job *j = malloc(sizeof *j);
    struct store_hint h;
    hint_for(ig, n, raw, off, len, &h);
    pthread_mutex_lock(&n->cmu);
    if (j && n->npend == n->pend_cap) {
        size_t cap = n->pend_cap ? 2 * n->pend_cap : 64;
        struct fsm_extent *p = realloc(n->pend, cap * sizeof *p);
        if (p) n->pend = p, n->pend_cap = cap;
    }
    int ok = j && n->npend < n->pend_cap;
    if (ok) {
        *j = (struct job){st, n, raw, len, n->npend, h};
        n->pend[n->npend++] = (struct fsm_extent){.file_off = off};
        n->inflight++;
    }
    pthread_mutex_unlock(&n->cmu);
    if (!ok) {
        free(j);
        bbuf_free(raw);
        return -ENOMEM;
    }
    store_queued_add(st, (int64_t)len);
    hand_over(st, j);
    return 0;
}

/* The first error the workers met (kept), after waiting for them if wait. */
static int worker_err(struct ifile *n, int wait)
{
    pthread_mutex_lock(&n->cmu);
    while (wait && n->inflight > 0) pthread_cond_wait(&n->ccv, &n->cmu);
    int rc = n->err;
    pthread_mutex_unlock(&n->cmu);
    return rc;
}

static int settle(struct ifile *n) { return worker_err(n, 1); }

/* Mark (on 1) or clear n's owed commit, counted in ig->owed. Clear it
** wherever the content changes or is committed. */
static void set_owed(struct ingest *ig, struct ifile *n, int on)
{
    if (n->flushed == on) return;
    __atomic_store_n(&n->flushed, on, __ATOMIC_RELEASE);
    if (on) __atomic_add_fetch(&ig->owed, 1, __ATOMIC_RELEASE);
    else __atomic_sub_fetch(&ig->owed, 1, __ATOMIC_RELEASE);
}

/* The committed extents of ino as a map. */
static int load_map(struct ingest *ig, uint64_t ino, struct extmap **out)
{
    struct store *st = ig->st;
    struct fsm_extent *ext;
    size_t cnt;
    CK_TRY(fsmeta_extents(st->meta, ino, &ext, &cnt));
    *out = extmap_new(ext, cnt);
    free(ext);
    return *out ? 0 : -ENOMEM;
}

/* Load the committed extents and size; *a (optional) gets the row read. */
static int load_committed(struct ingest *ig, struct ifile *n, struct fsm_attr *out)
{
    struct store *st = ig->st;
    struct fsm_attr a;
    if (n->loaded && !out) return 0;
    if (n->loaded) return fsmeta_getattr(st->meta, n->node.ino, out);
    CK_TRY(fsmeta_getattr(st->meta, n->node.ino, &a));
    struct extmap *m;
    CK_TRY(load_map(ig, n->node.ino, &m));
    extmap_put(n->map);
    n->map = m;
    n->csize = a.size;
    n->loaded = 1;
    if (out) *out = a;
    return 0;
}

static void drop_stream(struct ifile *n)
{
    bbuf_free(n->tail);
    n->tail = NULL;
    n->tail_len = 0;
    n->tail_cap = 0;
    n->npend = 0;
    n->send = 0;
    cutter_free(n->cut);
    n->cut = NULL;
    __atomic_store_n(&n->famkey, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&n->narrow, 0, __ATOMIC_RELEASE);
    xbase_free(n->xb);
    n->xb = NULL;
}

/* The tensors of ino's committed content into *t: 1 if there are any. */
static int tensors_of(struct ingest *ig, uint64_t ino, struct fsm_tensor **t, size_t *nt)
{
    struct store *st = ig->st;
    if (fsmeta_tensors(st->meta, ino, t, nt) < 0) return 0;
    if (*nt) return 1;
    free(*t);
    *t = NULL;
    return 0;
}

/* Find the base version of n's new body, once, at the first block cut
** after the parser found a tensor (most files written are no checkpoints
** and never pay for this; a safetensors header block gets its base):
** its own committed content when that has tensors (a file rewritten in
** place), else the latest file of its family (the same file in the
** previous checkpoint-N/ directory), else the latest file holding its first
** tensor (another copy of the model: the pretrained model a fine-tuning
** run started from). Also records the family. */
static void find_base(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    char path[4096];
    if (fsmeta_path(st->meta, n->node.ino, path, sizeof path) == 0) cutter_set_family(n->cut, path);
    const char *fam = cutter_family(n->cut);
    __atomic_store_n(&n->famkey, fam ? XXH3_64bits(fam, strlen(fam)) : 0, __ATOMIC_RELEASE);
    /* Not while n is owed itself (a commit paying it): lock order, ingest.h. */
    if (fam && !n->flushed) ingest_settle_all(ig, fam, 0); /* the last version, closed a moment ago */
    struct extmap *m = NULL;
    struct fsm_tensor *t = NULL;
    size_t nt = 0;
    const struct fsm_tensor *first = cutter_first(n->cut);
    uint64_t b;
    if (n->loaded && n->map->n && tensors_of(ig, n->node.ino, &t, &nt)) {
        extmap_get(m = n->map);
    } else if (((fam && fsmeta_family_latest(st->meta, fam, n->node.ino, &b) == 0) ||
                (first && fsmeta_layout_latest(st->meta, first, n->node.ino, &b) == 0)) &&
               tensors_of(ig, b, &t, &nt) && load_map(ig, b, &m) < 0) {
        free(t);
        t = NULL;
        nt = 0;
    }
    cutter_set_base(n->cut, m, t, nt);
}

/* Before fp32 tensors look for the bf16 model beside them (xbase.h): the
** model file closed a moment ago in the same directory must be committed.
** Files there without BF16 tensors are left owed (ingest_settle): an fp32
** model's commit waits for its encoding, which the writer need not. */
static void settle_siblings(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    uint64_t parent;
    char name[256];
    if (n->flushed || __atomic_load_n(&ig->owed, __ATOMIC_ACQUIRE) == 0 ||
        fsmeta_name_of(st->meta, n->node.ino, &parent, name, sizeof name) < 0)
        return;
    ingest_settle_all(ig, NULL, parent);
}

/* Whether the file is one of a series: numbers in its directory names
** (checkpoint-500/, step_100/), which cutter_family_key makes '#'. */
static int in_series(const struct cutter *c)
{
    const char *fam = cutter_family(c);
    return fam && strchr(fam, '#') != NULL;
}

/* Describe the block raw = [off, off + len) just cut, for the encoder. */
static void hint_for(struct ingest *ig, struct ifile *n, const uint8_t *raw, uint64_t off,
                     size_t len, struct store_hint *h)
{
    struct store *st = ig->st;
    memset(h, 0, sizeof *h);
    if (!n->cut) return;
    const struct fsm_tensor *t = cutter_hint(n->cut, off, len, h);
    if (!cutter_has_base(n->cut) && cutter_first(n->cut)) {
        find_base(ig, n);
        t = cutter_hint(n->cut, off, len, h);
    }
    if (t && t->dtype == FMT_BF16) __atomic_store_n(&n->narrow, 1, __ATOMIC_RELEASE);
    /* The newest version decodes alone (a checkpoint's without decoding at
    ** all, -o raw_newest): the block of the version before becomes a delta
    ** against this one later, in the background. */
    h->pred_only = h->has_base;
    h->hold = st->o.raw_newest && cutter_first(n->cut) != NULL &&
              (h->has_base || in_series(n->cut)); /* a successor may come */
    if (t && h->width == 4 && h->is_float) {
        if (!n->xb) settle_siblings(ig, n);
        if (!n->xb) n->xb = xbase_new();
        xbase_hint(n->xb, st, n->node.ino, t, (off - t->off) / 4, raw, len, h);
    }
}

/* Every mode but CLEAN is a write session, pinned against an online gc
** (store.h): its records are not in meta.db yet. */
static void set_mode(struct ingest *ig, struct ifile *n, enum node_mode mode)
{
    struct store *st = ig->st;
    if (mode == NODE_CLEAN) store_unpin(st, &n->wpin);
    else store_pin(st, &n->wpin);
    n->mode = mode;
}

/* A new body of n starts streaming from offset 0: parse it as it comes. */
static void cut_begin(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    cutter_free(n->cut);
    n->cut = cutter_new(st->o.block_size); /* NULL: plain blocks, no deltas */
}

/* Move the current body of n into a fresh staging file. */
static int to_stage(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    CK_TRY(settle(n));
    int fd = store_stage_open(st, n->node.ino, 1);
    if (fd < 0) return fd;
    const struct fsm_extent *ext = n->mode == NODE_STREAM ? n->pend : n->map->e;
    size_t cnt = n->mode == NODE_STREAM ? n->npend : n->map->n;
    size_t big = 1; /* blocks may predate the current block size */
    for (size_t i = 0; i < cnt; i++) big = CK_MAX(big, (size_t)ext[i].c.raw_len);
    uint8_t *buf = bbuf_alloc(big);
    int rc = buf ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < cnt; i++) {
        if (ext[i].c.raw_len == 0) continue;
        rc = store_read_block(st, &ext[i].c, 0, ext[i].c.raw_len, buf);
        if (rc == 0) rc = ck_pwrite_full(fd, buf, ext[i].c.raw_len, ext[i].file_off);
    }
    if (rc == 0 && n->mode == NODE_STREAM && n->tail_len)
        rc = ck_pwrite_full(fd, n->tail, n->tail_len, n->send - n->tail_len);
    if (rc == 0 && ftruncate(fd, (off_t)n->size) < 0) rc = -errno;
    bbuf_free(buf);
    if (rc < 0) {
        close(fd);
        store_stage_remove(st, n->node.ino);
        return rc;
    }
    drop_stream(n);
    n->stage_fd = fd;
    set_mode(ig, n, NODE_STAGE);
    return 0;
}

/* Enter a write mode from CLEAN: carry the committed size and times over. */
static int leave_clean(struct ingest *ig, struct ifile *n)
{
    struct fsm_attr a;
    CK_TRY(load_committed(ig, n, &a));
    n->size = n->csize;
    n->mtime = a.mtime;
    n->ctime = a.ctime;
    drop_stream(n);
    if (n->csize > 0) return to_stage(ig, n); /* copies the committed extents */
    set_mode(ig, n, NODE_STREAM);
    cut_begin(ig, n);
    return 0;
}

/* A tail buffer for a block of len bytes (at most bs). Sized to the block,
** not bs: the buffer goes on to the cache and the free list (bbuf.h), where
** the same block of the next checkpoint finds one of its size. */
static int tail_room(struct ifile *n, size_t len, size_t bs)
{
    assert(len <= bs);
    if (n->tail && len <= n->tail_cap) return 0;
    size_t cap = n->tail ? bs : len; /* the cut moved: make room for any */
    uint8_t *t = bbuf_alloc(cap);
    if (!t) return -ENOMEM;
    if (n->tail) memcpy(t, n->tail, n->tail_len);
    bbuf_free(n->tail);
    n->tail = t;
    n->tail_cap = cap;
    return 0;
}

/* Append bytes at the end of the body (n->send), cutting and queueing the
** blocks they complete. */
static int stream_append(struct ingest *ig, struct ifile *n, const uint8_t *buf, size_t len)
{
    struct store *st = ig->st;
    size_t bs = st->o.block_size;
    if (n->cut) cutter_feed(n->cut, buf, len);
    while (len > 0) {
        uint64_t start = n->send - n->tail_len;
        uint64_t end = n->cut ? cutter_block_end(n->cut, start) : start + bs;
        CK_TRY(tail_room(n, (size_t)(end - start), bs));
        size_t take = (size_t)CK_MIN((uint64_t)len, end - n->send);
        memcpy(n->tail + n->tail_len, buf, take);
        n->tail_len += take;
        n->send += take;
        buf += take;
        len -= take;
        if (n->send == end) {
            uint8_t *full = n->tail;
            size_t flen = n->tail_len;
            n->tail = NULL;
            n->tail_len = 0;
            n->tail_cap = 0;
            CK_TRY(submit_block(ig, n, full, flen, start));
        }
    }
    n->size = CK_MAX(n->size, n->send);
    return 0;
}

/* The stream's tail, however short, as a block of its own. */
static int flush_tail(struct ingest *ig, struct ifile *n)
{
    if (!n->tail_len) return 0;
    uint8_t *t = n->tail;
    size_t len = n->tail_len;
    n->tail = NULL;
    n->tail_len = 0;
    n->tail_cap = 0;
    return submit_block(ig, n, t, len, n->send - len);
}

/* A write at off past the end of the stream: what lies between reads as
** zeros. A gap under a block is streamed as zeros (a parser sees the file
** whole); a longer one costs nothing: the tail goes as a block of its own
** and the stream goes on from off, cut into plain blocks (a file with
** holes that large is no checkpoint), so a sparse file of any size costs
** its data only. */
static int stream_gap(struct ingest *ig, struct ifile *n, uint64_t off)
{
    struct store *st = ig->st;
    static const uint8_t zeros[64 << 10];
    if (off - n->send < st->o.block_size) {
        while (n->send < off)
            CK_TRY(stream_append(ig, n, zeros, (size_t)CK_MIN((uint64_t)sizeof zeros, off - n->send)));
        return 0;
    }
    CK_TRY(flush_tail(ig, n));
    cutter_free(n->cut);
    n->cut = NULL;
    n->send = off;
    n->size = CK_MAX(n->size, off);
    return 0;
}

static int write_locked(struct ingest *ig, struct ifile *n, const void *buf, size_t len,
                        uint64_t off)
{
    struct store *st = ig->st;
    /* No settle: blocks of one stream encode on every worker at once. A
    ** change of mode settles itself (to_stage); clean nodes have no jobs. */
    CK_TRY(worker_err(n, 0));
    set_owed(ig, n, 0); /* first: a node being written is never owed (lock order) */
    if (n->mode == NODE_CLEAN) CK_TRY(leave_clean(ig, n));
    if (n->mode == NODE_STREAM && off > n->send) CK_TRY(stream_gap(ig, n, off));
    if (n->mode == NODE_STREAM && off != n->send) CK_TRY(to_stage(ig, n));
    /* Streamed bytes all need room (ENOSPC here, not after close); a staged
    ** file only what it grows by, roughly. */
    if (n->mode == NODE_STREAM || off + len > n->size) CK_TRY(store_space(st, len));
    if (n->mode == NODE_STREAM) {
        CK_TRY(stream_append(ig, n, buf, len));
    } else {
        CK_TRY(ck_pwrite_full(n->stage_fd, buf, len, off));
        n->size = CK_MAX(n->size, off + len);
    }
    n->dirty = 1;
    n->mtime = n->ctime = ck_now_ns();
    return 0;
}

int ingest_write(struct ingest *ig, struct node *node, const void *buf, size_t len,
                 uint64_t off)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    int rc = write_locked(ig, n, buf, len, off);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* Keep n's provisional version (the one it has) as a version. */
static int keep_provisional(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    int rc = n->provisional ? fsmeta_keep_current(st->meta, n->node.ino) : 0;
    if (rc == 0) n->provisional = 0;
    return rc;
}

/* What the last writers closed becomes a version (kept, not provisional)
** before anyone changes it again. */
static int pay_owed(struct ingest *ig, struct ifile *n)
{
    int rc = n->flushed ? commit_locked(ig, n, 0, 0) : 0;
    return rc == 0 ? keep_provisional(ig, n) : rc;
}

static int truncate_locked(struct ingest *ig, struct ifile *n, uint64_t size)
{
    struct store *st = ig->st;
    CK_TRY(pay_owed(ig, n));
    CK_TRY(settle(n));
    if (n->mode == NODE_CLEAN && size == 0) {
        CK_TRY(load_committed(ig, n, NULL));
        set_mode(ig, n, NODE_STREAM);
    } else if (n->mode == NODE_CLEAN) {
        CK_TRY(leave_clean(ig, n));
    }
    if (size == 0) {
        /* Nothing survives: start a fresh stream (O_TRUNC, the trainers' case). */
        if (n->mode == NODE_STAGE) {
            close(n->stage_fd);
            n->stage_fd = -1;
            store_stage_remove(st, n->node.ino);
        }
        drop_stream(n);
        set_mode(ig, n, NODE_STREAM);
        cut_begin(ig, n);
    } else if (n->mode == NODE_STREAM && size < n->send) {
        CK_TRY(to_stage(ig, n));
    }
    if (n->mode == NODE_STAGE && ftruncate(n->stage_fd, (off_t)size) < 0) return -errno;
    n->size = size;
    n->dirty = 1;
    set_owed(ig, n, 0);
    n->mtime = n->ctime = ck_now_ns();
    return 0;
}

int ingest_truncate(struct ingest *ig, struct node *node, uint64_t size)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    int rc = truncate_locked(ig, n, size);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* The next run of data in the staging file at or after *off, below size:
** [*off, *end). 0 when there is none. Filesystems that do not know holes
** report all of it as data. */
static int next_data(int fd, uint64_t size, uint64_t *off, uint64_t *end)
{
    off_t d = lseek(fd, (off_t)*off, SEEK_DATA);
    if (d < 0 && errno == ENXIO) return 0;                 /* only a hole is left */
    if (d < 0) d = (off_t)*off;                           /* no SEEK_DATA here */
    if ((uint64_t)d >= size) return 0;
    off_t h = lseek(fd, d, SEEK_HOLE);
    *off = (uint64_t)d;
    *end = h < 0 ? size : CK_MIN((uint64_t)h, size);
    return 1;
}

/* Queue every block of the staging file for encoding, cut as if it had
** streamed in; its holes are skipped (stream_gap), so they cost nothing.
** The stream fields are free in NODE_STAGE. */
static int stage_encode(struct ingest *ig, struct ifile *n)
{
    struct store *st = ig->st;
    size_t bs = st->o.block_size;
    drop_stream(n);
    cut_begin(ig, n);
    uint8_t *buf = bbuf_alloc(bs);
    int rc = buf ? 0 : -ENOMEM;
    uint64_t size = n->size, off = 0, end;
    while (rc == 0 && next_data(n->stage_fd, size, &off, &end)) {
        if (off > n->send) rc = stream_gap(ig, n, off);
        for (off = n->send; rc == 0 && off < end; off += bs) {
            size_t len = (size_t)CK_MIN((uint64_t)bs, end - off);
            ssize_t got = pread(n->stage_fd, buf, len, (off_t)off);
            if (got < 0) {
                rc = -errno;
                break;
            }
            memset(buf + got, 0, len - (size_t)got); /* past the staging end: zeros */
            rc = stream_append(ig, n, buf, len);
        }
        off = end;
    }
    bbuf_free(buf);
    if (rc == 0) rc = flush_tail(ig, n);
    n->size = size;
    return rc;
}

/* Below this many bytes a commit leaves syncing its records to meta.db's
** pre-commit hook (store.c), one sync for every commit of a group; above,
** it syncs them itself first, outside the metadata lock. */
#define SYNC_OWN_BYTES (1u << 20)

/* Collect the extents to commit: finished blocks plus the stream tail. */
static int gather(struct ingest *ig, struct ifile *n, int durable, struct fsm_extent **out,
                  size_t *cnt)
{
    struct store *st = ig->st;
    struct fsm_extent *v = malloc((n->npend + 1) * sizeof *v);
    if (!v) return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n->npend; i++)
        if (n->pend[i].c.raw_len) v[k++] = n->pend[i];
    int rc = 0;
    if (n->mode == NODE_STREAM && n->tail_len && !ck_is_zero(n->tail, n->tail_len)) {
        struct store_hint h;
        v[k].file_off = n->send - n->tail_len;
        hint_for(ig, n, n->tail, v[k].file_off, n->tail_len, &h);
        rc = store_put_block(st, n->tail, n->tail_len, &h, &v[k].c);
        k++;
    }
    if (rc == 0 && (durable || n->size >= SYNC_OWN_BYTES)) rc = store_sync_extents(st, v, k);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *cnt = k;
    return 0;
}

/* The lossy policy n's new version is to get (NULL: lossless): its own
** user.ckptfs.policy, else the mount's default; *now when it makes the
** newest version lossy too. */
static const char *policy_of(struct ingest *ig, struct ifile *n, char *buf, size_t cap,
                             int *now)
{
    struct store *st = ig->st;
    int len = fsmeta_xattr_get(st->meta, n->node.ino, POLICY_XATTR, buf, cap - 1);
    const char *text = len < 0 ? st->o.policy : buf;
    struct policy p;
    if (len >= 0) buf[len] = 0;
    if (!text || policy_parse(text, strlen(text), &p) < 0 || p.kind == POLICY_LOSSLESS)
        return NULL;
    *now = p.newest;
    return text;
}

/* Append the manifest of the commit of v[0..k) (manifest.h) to the packs:
** *out, or out->raw_len 0 when the file has no path to record (removed
** while open, or a path too long for one). */
static int put_manifest(struct ingest *ig, struct ifile *n, const struct fsm_extent *v,
                        size_t k, int provisional, struct fsm_chunk *out)
{
    struct store *st = ig->st;
    static _Thread_local struct manifest mf; /* 4 KiB of path: not on the stack */
    char path[MANIFEST_PATH_MAX + 2];
    struct fsm_attr a;
    out->raw_len = 0;
    int rc = fsmeta_getattr(st->meta, n->node.ino, &a);
    int replaces = rc == 0 ? fsmeta_provisional(st->meta, n->node.ino) : rc;
    if (replaces < 0) return replaces;
    if (fsmeta_path(st->meta, n->node.ino, path, sizeof path) < 0 || strlen(path) < 2) return 0;
    mf = (struct manifest){.ino = n->node.ino, .time = ck_now_ns(), .size = n->size,
                           .mtime = n->mtime, .ctime = n->ctime, .mode = a.mode, .uid = a.uid,
                           .gid = a.gid,
                           .flags = (provisional ? MANIFEST_PROVISIONAL : 0) |
                                    (replaces ? MANIFEST_REPLACES : 0),
                           .n = (uint32_t)k};
    memcpy(mf.path, path + 1, strlen(path)); /* without the leading '/' */
    size_t len = manifest_size(strlen(mf.path), mf.n);
    mf.ext = malloc(k ? k * sizeof *mf.ext : 1);
    uint8_t *buf = malloc(len);
    rc = mf.ext && buf ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < k; i++)
        mf.ext[i] = (struct manifest_ext){v[i].file_off, v[i].c.raw_len, v[i].c.hash};
    long w = rc == 0 ? manifest_encode(&mf, buf, len) : rc;
    rc = w < 0 ? (int)w : store_put_manifest(st, buf, (size_t)w, out);
    free(mf.ext);
    free(buf);
    return rc;
}

static int commit_dirty(struct ingest *ig, struct ifile *n, int durable, int provisional)
{
    struct store *st = ig->st;
    /* A staging body outlives the commit while the file stays open, and is
    ** adopted after a crash: make it at least as new on disk as the version
    ** committed now, or power loss could bring back an older, torn body. */
    if (n->mode == NODE_STAGE && fdatasync(n->stage_fd) < 0) return -errno;
    int rc = n->mode == NODE_STAGE ? stage_encode(ig, n) : 0; /* may look for bases */
    if (rc == 0 && durable) take_back(st, n);
    if (rc == 0) rc = settle(n);
    struct fsm_extent *v = NULL;
    size_t k = 0;
    if (rc == 0) rc = gather(ig, n, durable, &v, &k);
    struct fsm_chunk mani;
    if (rc == 0) rc = put_manifest(ig, n, v, k, provisional, &mani);
    if (rc < 0) {
        free(v);
        return rc;
    }
    rc = fsmeta_begin(st->meta, durable);
    if (rc == 0) {
        rc = fsmeta_set_content(st->meta, n->node.ino, v, k, n->size, n->mtime, n->ctime,
                                provisional, mani.raw_len ? &mani : NULL);
        if (rc == 0 && n->cut) {
            size_t nt;
            const struct fsm_tensor *t = cutter_tensors(n->cut, &nt);
            char pbuf[POLICY_TEXT_MAX];
            int now = 0;
            const char *pol = policy_of(ig, n, pbuf, sizeof pbuf, &now);
            rc = fsmeta_set_tensors(st->meta, n->node.ino, cutter_family(n->cut), pol, now, t, nt);
        }
        rc = fsmeta_end(st->meta, rc);
    }
    if (rc < 0) {
        store_note_unreplayed(st); /* its manifest is in the packs */
        free(v);
        return rc;
    }
    /* Blocks now have chunk ids: a later commit of the same stream reuses them. */
    for (size_t i = 0, j = 0; i < n->npend && j < k; i++)
        if (n->pend[i].c.raw_len) n->pend[i].c.id = v[j++].c.id;
    struct extmap *map = extmap_new(v, k);
    free(v);
    extmap_put(n->map);
    n->map = map;
    n->csize = n->size;
    n->loaded = map != NULL; /* without memory: reload from meta.db later */
    n->dirty = 0;
    set_owed(ig, n, 0);
    store_pin_advance(st, &n->wpin);
    n->provisional = provisional;
    return 0;
}

/* The last writer is gone: drop the write state after its final commit,
** which returned rc. A failure no close(2) reported (the commit was owed)
** is kept for the next fsync of the file and of a directory. */
static void end_write(struct ingest *ig, struct ifile *n, int rc)
{
    struct store *st = ig->st;
    settle(n);
    if (rc < 0)
        ck_log(CK_LOG_ERR, "inode %llu: commit failed (%s)%s", (unsigned long long)n->node.ino,
               strerror(-rc),
               n->mode == NODE_STAGE ? "; staging kept for recovery at next mount"
                                     : "; unsaved writes dropped");
    if (rc < 0 && n->flushed) {
        n->lost = rc;
        __atomic_store_n(&ig->lost, rc, __ATOMIC_RELEASE);
    }
    if (n->mode == NODE_STAGE) {
        close(n->stage_fd);
        n->stage_fd = -1;
        /* The staging file goes only once its commit is in meta.db, not
        ** just in an open group (fsmeta_group). */
        if (rc == 0 && fsmeta_flush(st->meta, 0) == 0) store_stage_remove(st, n->node.ino);
    }
    drop_stream(n);
    pthread_mutex_lock(&n->cmu);
    n->err = 0;
    pthread_mutex_unlock(&n->cmu);
    set_mode(ig, n, NODE_CLEAN);
    n->dirty = 0;
    set_owed(ig, n, 0);
    if (rc < 0) n->loaded = 0; /* reload what is really committed */
}

static int commit_locked(struct ingest *ig, struct ifile *n, int durable, int final)
{
    struct store *st = ig->st;
    /* A release decides it is the last writer before it gets here; a new
    ** writer may have opened (and even written) since. Its own close will
    ** commit: committing its partial content now would keep it as a version. */
    if (final && __atomic_load_n(&n->node.nwriters, __ATOMIC_ACQUIRE) > 0) return 0;
    int rc = 0;
    /* A commit while writers remain (fsync, or flush: close of one of possibly
    ** many descriptors, as a shell's dup2 does) makes a provisional version,
    ** which the next commit replaces: history keeps what the last writer
    ** closed, and the final release promotes it. */
    int provisional = !final;
    if (n->mode != NODE_CLEAN && n->dirty)
        rc = commit_dirty(ig, n, durable, provisional);
    else if (durable)
        rc = fsmeta_sync(st->meta); /* an earlier commit may not be durable yet */
    if (rc == 0 && !provisional) rc = keep_provisional(ig, n);
    if (n->mode != NODE_CLEAN && final) end_write(ig, n, rc);
    return rc;
}

int ingest_commit(struct ingest *ig, struct node *node, int durable, int final)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    int rc = commit_locked(ig, n, durable, final);
    if (rc == 0 && durable && n->lost) rc = n->lost; /* fsync: an owed commit failed */
    if (durable) n->lost = 0;
    pthread_mutex_unlock(&n->mu);
    return rc;
}

int ingest_flush(struct ingest *ig, struct node *node)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    int rc;
    if (n->mode == NODE_STREAM && n->dirty) {
        rc = worker_err(n, 0);
        set_owed(ig, n, 1);
    } else {
        rc = commit_locked(ig, n, 0, 0);
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

int ingest_settle(struct ingest *ig, struct node *node, const char *fam, uint64_t narrow_in)
{
    struct ifile *n = ifile_of(node);
    struct store *st = ig->st;
    if (!__atomic_load_n(&n->flushed, __ATOMIC_ACQUIRE)) return 0;
    /* Not n's family, or not a narrow base in that directory: no need to
    ** wait for n's lock (a commit may hold it). */
    if (fam && __atomic_load_n(&n->famkey, __ATOMIC_ACQUIRE) != XXH3_64bits(fam, strlen(fam)))
        return 0;
    uint64_t parent;
    char name[256];
    if (narrow_in && (!__atomic_load_n(&n->narrow, __ATOMIC_ACQUIRE) ||
                      fsmeta_name_of(st->meta, n->node.ino, &parent, name, sizeof name) < 0 ||
                      parent != narrow_in))
        return 0;
    pthread_mutex_lock(&n->mu);
    const char *f = n->cut ? cutter_family(n->cut) : NULL;
    int rc = n->flushed && (!fam || (f && strcmp(f, fam) == 0)) ? commit_locked(ig, n, 0, 0) : 0;
    pthread_mutex_unlock(&n->mu);
    return rc;
}

void ingest_init(struct ingest *ig, struct store *st, node_table *nodes)
{
    *ig = (struct ingest){.st = st, .nodes = nodes};
    node_table_set_class(nodes, &ifile_class);
}

struct settle {
    struct ingest *ig;
    const char *fam;
    uint64_t narrow_in;
    int rc;
};

static void settle_one(struct node *n, void *ctx)
{
    struct settle *s = ctx;
    int rc = ingest_settle(s->ig, n, s->fam, s->narrow_in);
    if (s->rc == 0) s->rc = rc;
    node_unpin(s->ig->nodes, n);
}

int ingest_settle_all(struct ingest *ig, const char *fam, uint64_t narrow_in)
{
    struct settle s = {ig, fam, narrow_in, 0};
    if (__atomic_load_n(&ig->owed, __ATOMIC_ACQUIRE) > 0) node_foreach(ig->nodes, settle_one, &s);
    return s.rc;
}

int ingest_take_lost(struct ingest *ig)
{
    return __atomic_exchange_n(&ig->lost, 0, __ATOMIC_ACQ_REL);
}

int ingest_open_writer(struct ingest *ig, struct node *node)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    /* If paying fails and no other writer is open, it fails as the last
    ** writers' final commit would have: logged, kept for fsync, and this
    ** writer starts from what is committed. With another writer still
    ** open, its acknowledged writes stay and this open fails. */
    int rc = pay_owed(ig, n);
    if (rc < 0 && __atomic_load_n(&n->node.nwriters, __ATOMIC_ACQUIRE) <= 1) {
        end_write(ig, n, rc);
        rc = 0;
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

struct prefetch {
    struct store *st;
    struct extmap *map;
    size_t i;
    struct passed *passed;
};

static void prefetch_job(void *arg)
{
    struct prefetch *p = arg;
    const struct fsm_extent *e = &p->map->e[p->i];
    uint64_t e_end = e->file_off + e->c.raw_len;
    if (e_end > __atomic_load_n(&p->passed->off, __ATOMIC_ACQUIRE)) {
        store_prefetch_block(p->st, &e->c);
        /* passed while decoding: the reader's next drop_behind looks back */
        if (e_end <= __atomic_load_n(&p->passed->off, __ATOMIC_ACQUIRE))
            store_drop_block(p->st, &e->c);
    }
    extmap_put(p->map);
    passed_put(p->passed);
    free(p);
}

/* Blocks a sequential reader has passed leave the cache: those ending
** one request back from a reader at off asking len bytes (the kernel's
** readahead keeps requests in flight in parallel; one still copying out of
** a dropped block would decode it again), and again those of the last two
** requests, which a decode-ahead job may have put back. */
static void drop_behind(struct store *st, struct ifile *n, struct extmap *m, uint64_t off,
                        uint64_t len)
{
    off = off > len ? off - len : 0;
    uint64_t was = n->passed->off, back = 2 * len;
    was = was > back ? was - back : 0;
    for (size_t i = extmap_first_after(m->e, m->n, was); i < m->n && m->e[i].file_off < off;
         i++) {
        uint64_t e_end = m->e[i].file_off + m->e[i].c.raw_len;
        if (e_end > was && e_end <= off) store_drop_block(st, &m->e[i].c);
    }
    if (off > n->passed->off) __atomic_store_n(&n->passed->off, off, __ATOMIC_RELEASE);
}

/* On a sequential read ending at end, queue decoding of the blocks in the
** next STORE_AHEAD_BLOCKS so they wait in the cache when the kernel asks. */
static void prefetch(struct ingest *ig, struct ifile *n, struct extmap *m, uint64_t off,
                     uint64_t end)
{
    struct store *st = ig->st;
    int seq = off == n->rd_end;
    n->rd_end = end;
    if (!seq && n->passed) __atomic_store_n(&n->passed->off, 0, __ATOMIC_RELAXED); /* anew */
    if (seq && !n->passed && (n->passed = calloc(1, sizeof *n->passed))) n->passed->refs = 1;
    if (!seq || !n->passed) return;
    drop_behind(st, n, m, off, end - off);
    if (!st->readers) return;
    uint64_t from = CK_MAX(n->ra_end, end);
    uint64_t to = end + STORE_AHEAD_BLOCKS * (uint64_t)st->o.block_size;
    if (from >= to) return;
    n->ra_end = to;
    for (size_t i = extmap_first_after(m->e, m->n, from); i < m->n && m->e[i].file_off < to;
         i++) {
        const struct fsm_extent *e = &m->e[i];
        if (e->file_off < end) continue;
        struct prefetch *p = malloc(sizeof *p);
        if (!p) return;
        *p = (struct prefetch){st, m, i, passed_get(n->passed)};
        extmap_get(m);
        if (pool_try_submit(st->readers, prefetch_job, p, e->c.raw_len) < 0) {
            extmap_put(m);
            passed_put(p->passed);
            free(p);
            return;
        }
    }
}

/* Dirty file: read under the node lock from staging or the stream. */
static int read_dirty(struct ingest *ig, struct ifile *n, uint8_t *buf, size_t len,
                      uint64_t off)
{
    struct store *st = ig->st;
    if (n->mode == NODE_STAGE) {
        ssize_t r = pread(n->stage_fd, buf, len, (off_t)off);
        if (r < 0) return -errno;
        memset(buf + r, 0, len - (size_t)r);
        return 0;
    }
    CK_TRY(store_read_range(st, n->pend, n->npend, buf, len, off));
    uint64_t tstart = n->send - n->tail_len, end = off + len;
    uint64_t a = CK_MAX(off, tstart), b = CK_MIN(end, n->send);
    if (a < b) memcpy(buf + (a - off), n->tail + (a - tstart), b - a);
    return 0;
}

int ingest_read_iov(struct ingest *ig, struct node *node, void *buf, size_t len,
                    uint64_t off, struct store_iov *out)
{
    struct ifile *n = ifile_of(node);
    struct store *st = ig->st;
    pthread_mutex_lock(&n->mu);
    int rc = settle(n);
    if (rc == 0 && n->mode == NODE_CLEAN) rc = load_committed(ig, n, NULL);
    uint64_t size = n->mode == NODE_CLEAN ? n->csize : n->size;
    size_t got = off >= size ? 0 : (size_t)CK_MIN((uint64_t)len, size - off);
    store_iov_buf(out, buf, got);
    if (rc < 0 || got == 0 || n->mode != NODE_CLEAN) {
        if (rc == 0 && got) rc = read_dirty(ig, n, buf, got, off);
        pthread_mutex_unlock(&n->mu);
        return rc;
    }
    /* Clean: decode outside the lock, on a map a commit cannot free. */
    struct extmap *m = n->map;
    extmap_get(m);
    prefetch(ig, n, m, off, off + got);
    pthread_mutex_unlock(&n->mu);
    rc = store_read_iov(st, m->e, m->n, buf, got, off, out);
    extmap_put(m);
    return rc;
}

int ingest_read(struct ingest *ig, struct node *node, void *buf, size_t len, uint64_t off,
                size_t *got)
{
    struct store_iov v;
    CK_TRY(ingest_read_iov(ig, node, buf, len, off, &v));
    *got = store_iov_gather(&v, buf);
    return 0;
}

int ingest_getattr(struct ingest *ig, struct node *node, struct fsm_attr *a)
{
    struct ifile *n = ifile_of(node);
    struct store *st = ig->st;
    pthread_mutex_lock(&n->mu);
    int rc = fsmeta_getattr(st->meta, n->node.ino, a);
    if (rc == 0 && n->mode != NODE_CLEAN) {
        a->size = a->stored = n->size;
        a->mtime = n->mtime;
        a->ctime = n->ctime;
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

void ingest_created(struct node *node)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    struct extmap *empty = n->loaded ? NULL : extmap_new(NULL, 0);
    if (empty) {
        extmap_put(n->map);
        n->map = empty;
        n->csize = 0;
        n->loaded = 1;
    }
    pthread_mutex_unlock(&n->mu);
}

void ingest_set_times(struct node *node, int64_t mtime, int64_t ctime)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    if (n->mode != NODE_CLEAN) {
        if (mtime >= 0) n->mtime = mtime;
        n->ctime = ctime;
    }
    pthread_mutex_unlock(&n->mu);
}

int ingest_adopt_stage(struct ingest *ig, struct node *node, int fd)
{
    struct ifile *n = ifile_of(node);
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        close(fd);
        return -errno;
    }
    pthread_mutex_lock(&n->mu);
    set_mode(ig, n, NODE_STAGE);
    n->stage_fd = fd;
    n->size = (uint64_t)sb.st_size;
    n->mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    n->ctime = ck_now_ns();
    n->dirty = 1;
    set_owed(ig, n, 0);
    pthread_mutex_unlock(&n->mu);
    return ingest_commit(ig, node, 1, 1);
}

void ingest_reload(struct node *node)
{
    struct ifile *n = ifile_of(node);
    pthread_mutex_lock(&n->mu);
    if (n->mode == NODE_CLEAN && !n->dirty) n->loaded = 0;
    pthread_mutex_unlock(&n->mu);
}
