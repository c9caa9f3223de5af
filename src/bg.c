/*
** bg.c: the daemon's background thread (see bg.h).
*/
#include "bg.h"
#include "common.h"
#include "compress.h"
#include "recode.h"
#include "reverse.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BG_TICK 2 /* seconds between looks at what is due */
#define BG_RECODE_BATCH 4 /* versions re-encoded between two looks at the rest */
#define BG_REVERSE_BATCH 256 /* blocks made reverse deltas between two looks */
#define BG_COMPRESS_BATCH 256 /* raw blocks compressed between two looks */
/* After this long without anything making garbage, the store is quiet: a
** run then rewrites packs up to BG_QUIET_THRESHOLD live, so a settled
** store's disk use comes close to its stored bytes, paid while nobody
** writes (up to 9 bytes copied per byte freed, once per quiet spell). */
#define BG_QUIET_NS (30 * 1000000000LL)
#define BG_QUIET_THRESHOLD 0.9

/* Work asked for by bg_gc or bg_push, waiting for the thread. */
struct req {
    const struct gc_opts *o; /* NULL: a push */
    gc_progress_cb cb;       /* remote_progress_cb has the same shape */
    void *ctx;
    struct gc_stats *out;
    struct remote_push_stats *pushed;
    int rc, done;
};

struct bg {
    struct store *st;
    struct bg_opts o;
    bg_changed_fn changed;
    void *ctx;
    uint64_t seen;     /* last change when retention last ran */
    uint64_t recoded;  /* last change when re-encoding last finished */
    uint64_t gc_seq, gc_dv; /* change and data version when gc last looked */
    int64_t gc_until;  /* reclaim at each interval until then ... */
    int64_t changed_at; /* when something last made garbage */
    int gc_busy;       /* ... or while the last run still found work */
    time_t next_retain, next_gc, next_backup, next_upload, next_lease;
    uint64_t backup_seq; /* last change when meta.db was last copied */
    uint64_t upload_seq, upload_dv; /* change and data version at the last upload */
    struct req *req;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    volatile int stop;
};

static int retains(const struct bg *b)
{
    return b->o.keep.keep_last || b->o.keep.keep_every || b->o.keep.keep_within_ns;
}

/* Something may have made garbage: reclaim for a while. */
static void gc_due(struct bg *b)
{
    b->changed_at = ck_now_ns();
    b->gc_until = b->changed_at + b->o.gc_grace_ns + BG_QUIET_NS +
                  3 * (int64_t)b->o.gc_interval * 1000000000;
}

static void retain_once(struct bg *b)
{
    /* Without keep_within the outcome changes only with the history: an idle
    ** mount need not walk every version each interval. */
    uint64_t last = 0;
    if (!retains(b)) return;
    if (fsmeta_seq_last(b->st->meta, &last) == 0 && last == b->seen && !b->o.keep.keep_within_ns)
        return;
    b->seen = last; /* 0 (never seen) when it could not be read */
    struct hist_prune_stats s;
    int rc = history_prune(b->st->meta, &b->o.keep, ck_now_ns(), 0, NULL, NULL, &s);
    if (rc < 0) ck_log(CK_LOG_ERR, "retention: %s", strerror(-rc));
    if (rc == 0 && s.pruned) {
        ck_log(CK_LOG_INFO, "retention pruned %llu of %llu versions",
               (unsigned long long)s.pruned, (unsigned long long)s.versions);
        gc_due(b);
    }
}

/* 1 if it re-encoded something. */
static int recode_once(struct bg *b)
{
    uint64_t last;
    if (fsmeta_seq_last(b->st->meta, &last) < 0 || last == b->recoded) return 0;
    struct recode_stats s = {0};
    /* A few at a time: gc reclaims what each batch replaced before the
    ** next adds more (a long backlog would otherwise double the store). */
    if (recode_pending(b->st, &b->stop, BG_RECODE_BATCH, b->changed, b->ctx, &s) == 0 &&
        !b->stop)
        b->recoded = last;
    if (s.versions) {
        ck_log(CK_LOG_INFO, "re-encoded %llu versions: %llu -> %llu bytes",
               (unsigned long long)s.versions, (unsigned long long)s.before,
               (unsigned long long)s.after);
        gc_due(b);
    }
    return s.versions > 0;
}

/* What a pass over a queue of blocks (what) did: done of looked blocks
** re-encoded, before -> after stored bytes, rc its result; 1 if more are
** waiting. Replaced records are garbage: gc is due. */
static int queue_pass(struct bg *b, const char *what, int rc, uint64_t done, uint64_t looked,
                      uint64_t before, uint64_t after)
{
    if (rc < 0) ck_log(CK_LOG_ERR, "%s: %s", what, strerror(-rc));
    if (done) {
        ck_log(CK_LOG_DEBUG, "%s: %llu of %llu blocks, %llu -> %llu bytes", what,
               (unsigned long long)done, (unsigned long long)looked,
               (unsigned long long)before, (unsigned long long)after);
        gc_due(b);
    }
    return rc > 0;
}

/* Older blocks as deltas against their successors (reverse.h), a batch at
** a time; 1 if more are waiting. */
static int reverse_once(struct bg *b)
{
    struct reverse_stats s = {0};
    int rc = reverse_pending(b->st, &b->stop, BG_REVERSE_BATCH, &s);
    return queue_pass(b, "reverse deltas", rc, s.reversed, s.pairs, s.before, s.after);
}

/* Blocks writers stored raw, compressed (compress.h), a batch at a time;
** 1 if more are waiting. */
static int compress_once(struct bg *b)
{
    struct compress_stats s = {0};
    int rc = compress_pending(b->st, &b->stop, BG_COMPRESS_BATCH, &s);
    return queue_pass(b, "compressing raw blocks", rc, s.compressed, s.blocks, s.before,
                      s.after);
}

/* Commits here, or anything another connection wrote, may have made garbage. */
static void watch_changes(struct bg *b)
{
    uint64_t seq = 0, dv = 0;
    fsmeta_seq_last(b->st->meta, &seq);
    fsmeta_data_version(b->st->meta, &dv);
    if (seq != b->gc_seq || dv != b->gc_dv) gc_due(b);
    b->gc_seq = seq;
    b->gc_dv = dv;
}

static void gc_once(struct bg *b)
{
    watch_changes(b);
    if (!b->gc_busy && ck_now_ns() > b->gc_until) return;
    int quiet = ck_now_ns() - b->changed_at > BG_QUIET_NS;
    struct gc_opts g = {.grace_ns = b->o.gc_grace_ns,
                        .threshold = quiet ? CK_MAX(b->o.gc_threshold, BG_QUIET_THRESHOLD)
                                           : b->o.gc_threshold,
                        .rebase = 1, .stop = &b->stop};
    struct gc_stats s;
    int rc = gc_run(b->st, &g, NULL, NULL, &s);
    b->gc_busy = rc == 0 && !gc_idle(&s);
    if (rc < 0) ck_log(CK_LOG_ERR, "reclaim: %s", strerror(-rc));
    if (rc == 0 && s.bytes_after != s.bytes_before)
        ck_log(CK_LOG_INFO, "reclaimed %llu bytes (%llu blocks dropped, %llu packs removed, "
               "%llu rewritten, %llu deltas re-encoded)",
               (unsigned long long)(s.bytes_before - CK_MIN(s.bytes_after, s.bytes_before)),
               (unsigned long long)s.chunks_deleted, (unsigned long long)s.packs_removed,
               (unsigned long long)s.packs_rewritten, (unsigned long long)s.rebased);
}

/* Upload what changed since the last upload (any, when forced). */
static int upload(struct bg *b, int force, remote_progress_cb cb, void *ctx,
                  struct remote_push_stats *out)
{
    uint64_t seq = 0, dv = 0;
    if (!b->o.remote) return -EDESTADDRREQ;
    fsmeta_seq_last(b->st->meta, &seq);
    fsmeta_data_version(b->st->meta, &dv);
    if (!force && seq == b->upload_seq && dv == b->upload_dv) return 0;
    struct remote_push_stats z;
    int rc = remote_push(b->o.remote, b->st, 1, cb, ctx, out ? out : &z);
    if (rc < 0)
        ck_log(CK_LOG_WARN, "upload to %s failed (%s); retrying later",
               remote_url(b->o.remote), strerror(-rc));
    else
        b->upload_seq = seq, b->upload_dv = dv;
    return rc;
}

/* Over local_bytes (uploads, or reads fetching packs back): drop uploaded packs. */
static void evict_once(struct bg *b)
{
    uint64_t freed = 0;
    int rc = remote_evict(b->o.remote, b->st, b->o.local_bytes, &freed);
    if (rc < 0) ck_log(CK_LOG_WARN, "cannot drop uploaded packs locally: %s", strerror(-rc));
    if (freed)
        ck_log(CK_LOG_INFO, "dropped %llu bytes of uploaded packs locally",
               (unsigned long long)freed);
}

static void serve_request(struct bg *b)
{
    struct req *r = b->req;
    if (r->o) {
        struct gc_opts g = *r->o;
        g.stop = &b->stop;
        r->rc = gc_run(b->st, &g, r->cb, r->ctx, r->out);
    } else {
        r->rc = upload(b, 1, r->cb, r->ctx, r->pushed);
    }
    pthread_mutex_lock(&b->mu);
    r->done = 1;
    b->req = NULL;
    pthread_cond_broadcast(&b->done_cv);
    pthread_mutex_unlock(&b->mu);
}

static void backup_once(struct bg *b)
{
    uint64_t seq = 0;
    if (fsmeta_seq_last(b->st->meta, &seq) < 0 || seq == b->backup_seq) return;
    int rc = store_backup_meta(b->st, BG_BACKUPS_KEPT);
    if (rc < 0) ck_log(CK_LOG_WARN, "metadata backup failed: %s", strerror(-rc));
    else b->backup_seq = seq;
}

/* The work due now, in order; the lock is not held. 1 if some is left
** that should not wait for the next tick. */
static int tick(struct bg *b)
{
    if (recode_once(b)) b->next_gc = 0; /* reclaim what it replaced before going on */
    int more = compress_once(b); /* the newest first: reverse deltas read it */
    more |= reverse_once(b);
    time_t now = time(NULL);
    if (now >= b->next_retain) {
        retain_once(b);
        b->next_retain = time(NULL) + b->o.prune_interval;
    }
    if (b->o.gc_interval && now >= b->next_gc) {
        gc_once(b);
        b->next_gc = time(NULL) + b->o.gc_interval;
    }
    if (b->o.backup_interval && now >= b->next_backup) {
        backup_once(b);
        b->next_backup = time(NULL) + b->o.backup_interval;
    }
    if (b->o.remote && now >= b->next_lease) {
        if (remote_lease_renew(b->o.remote) < 0)
            ck_log(CK_LOG_WARN, "cannot renew the lease of %s", remote_url(b->o.remote));
        b->next_lease = time(NULL) + REMOTE_LEASE_NS / 4000000000LL;
    }
    if (b->o.remote && now >= b->next_upload) {
        upload(b, 0, NULL, NULL, NULL);
        if (b->o.local_bytes) evict_once(b);
        b->next_upload = time(NULL) + b->o.upload_interval;
    }
    return more;
}

static void *bg_main(void *arg)
{
    struct bg *b = arg;
    /* History pays, behind the writers and readers: at the workers' nice. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), b->st->o.worker_nice) < 0)
        ck_log(CK_LOG_DEBUG, "background thread keeps its priority: %s", strerror(errno));
    int more = 0;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += more ? 0 : BG_TICK;
        while (!b->stop && !b->req && pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0) {}
        if (b->stop) break;
        int asked = b->req != NULL;
        pthread_mutex_unlock(&b->mu);
        if (asked) serve_request(b);
        else more = tick(b);
        pthread_mutex_lock(&b->mu);
    }
    if (b->req) { /* stopping: tell the one who asked */
        b->req->rc = -ESHUTDOWN;
        b->req->done = 1;
        b->req = NULL;
        pthread_cond_broadcast(&b->done_cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int bg_start(struct store *st, const struct bg_opts *o, bg_changed_fn changed, void *ctx,
             bg **out)
{
    struct bg *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    *b = (struct bg){.st = st, .o = *o, .changed = changed, .ctx = ctx};
    b->next_retain = time(NULL) + o->prune_interval;
    b->next_backup = time(NULL) + o->backup_interval;
    b->next_upload = time(NULL) + o->upload_interval;
    /* The lease names this process: the daemon, once forked. */
    if (o->remote && remote_lease_renew(o->remote) < 0)
        ck_log(CK_LOG_WARN, "cannot renew the lease of %s", remote_url(o->remote));
    b->next_lease = time(NULL) + REMOTE_LEASE_NS / 4000000000LL;
    gc_due(b); /* a previous mount may have left garbage */
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    pthread_cond_init(&b->done_cv, NULL);
    int rc = pthread_create(&b->thread, NULL, bg_main, b);
    if (rc != 0) {
        free(b);
        return -rc;
    }
    *out = b;
    return 0;
}

void bg_stop(bg *b)
{
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    retain_once(b);
    if (b->o.remote) upload(b, 0, NULL, NULL, NULL); /* what was written last */
    if (b->o.remote) remote_lease_drop(b->o.remote);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    pthread_cond_destroy(&b->done_cv);
    free(b);
}

static int ask(struct bg *b, struct req *rq)
{
    struct req r = *rq;
    pthread_mutex_lock(&b->mu);
    while (b->req && !b->stop) pthread_cond_wait(&b->done_cv, &b->mu); /* one at a time */
    if (b->stop) {
        pthread_mutex_unlock(&b->mu);
        return -ESHUTDOWN;
    }
    b->req = &r;
    pthread_cond_broadcast(&b->cv);
    while (!r.done) pthread_cond_wait(&b->done_cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    return r.rc;
}

int bg_gc(bg *b, const struct gc_opts *o, gc_progress_cb cb, void *ctx, struct gc_stats *out)
{
    return ask(b, &(struct req){.o = o, .cb = cb, .ctx = ctx, .out = out});
}

int bg_push(bg *b, remote_progress_cb cb, void *ctx, struct remote_push_stats *out)
{
    if (!b->o.remote) return -EDESTADDRREQ;
    return ask(b, &(struct req){.cb = cb, .ctx = ctx, .pushed = out});
}
