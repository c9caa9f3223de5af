/*
** remote_push.c: a push (remote.h): a snapshot of meta.db and the packs it
** names, the packs the bucket lacks, LATEST, then what no kept snapshot
** needs any more is deleted.
*/
#include "remote_int.h"
#include "common.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- push ---- */

struct push {
    remote *r;
    remote_progress_cb cb;
    void *ctx;
    uint64_t base, total;
};

static void on_part(void *ctx, uint64_t done)
{
    struct push *p = ctx;
    rmt_lease_tick(p->r); /* an upload may outlast the lease */
    if (p->cb) p->cb(p->ctx, p->base + done, p->total);
}

static int send_pack(struct push *p, int pdfd, uint32_t id, uint64_t size)
{
    char name[32], hname[32], key[48];
    rmt_file_names(id, name, hname);
    rmt_pack_key(id, key);
    if (faccessat(pdfd, hname, F_OK, 0) == 0) { /* holes read as zeros: never send */
        ck_log(CK_LOG_ERR, "%s: lacks pack %" PRIu32 ", which is only partly here",
               s3_url(p->r->s), id);
        return -EIO;
    }
    int fd = openat(pdfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = s3_put_fd(p->r->s, key, fd, 0, size, on_part, p);
    close(fd);
    p->base += size;
    return rc;
}

/* Text: the packs a snapshot names, "ckptfs-packs 1\n" then one line
** "FIRST LAST\n" per run of consecutive ids. */
struct packs_text {
    char *t;
    size_t n, cap;
    uint32_t first, last; /* the run being built (first 0: none) */
};

static int text_add(struct packs_text *x, const char *s)
{
    size_t k = strlen(s);
    if (x->n + k + 1 > x->cap) {
        size_t nc = (x->cap ? 2 * x->cap : 256) + k;
        char *t = realloc(x->t, nc);
        if (!t) return -ENOMEM;
        x->t = t, x->cap = nc;
    }
    memcpy(x->t + x->n, s, k + 1);
    x->n += k;
    return 0;
}

static int run_flush(struct packs_text *x)
{
    char line[32];
    if (!x->first) return 0;
    snprintf(line, sizeof line, "%" PRIu32 " %" PRIu32 "\n", x->first, x->last);
    return text_add(x, line);
}

static int on_used(void *ctx, uint32_t id)
{
    struct packs_text *x = ctx;
    if (x->first && id == x->last + 1) {
        x->last = id;
        return 0;
    }
    int rc = run_flush(x);
    x->first = x->last = id;
    return rc;
}

/* Mark in *z (size 0) the ids of a packs text below limit. */
static int parse_used(const char *t, uint32_t limit, struct sizes *z)
{
    unsigned v;
    int k = 0;
    if (sscanf(t, "ckptfs-packs %u\n%n", &v, &k) != 1 || v != 1 || k == 0) return -EIO;
    for (const char *p = t + k; *p;) {
        unsigned long a, b;
        char *e;
        a = strtoul(p, &e, 10);
        if (*e != ' ') return -EIO;
        b = strtoul(e + 1, &e, 10);
        if (*e != '\n' || a == 0 || b < a) return -EIO;
        for (unsigned long id = a; id <= b && id < limit; id++)
            CK_TRY(rmt_sizes_set(z, (uint32_t)id, 0));
        p = e + 1;
    }
    return 0;
}

/* A snapshot of meta.db (an unlinked file), its size, hash, name, and the
** packs it names. */
struct snap {
    int fd;
    uint64_t size, hash;
    char key[40]; /* meta/NNNNNNNNNNNNNNNNNNNN */
    struct packs_text used;
};

static int take_snapshot(struct store *st, struct snap *sn)
{
    char path[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d/remote-push.db", st->dirfd);
    unlinkat(st->dirfd, "remote-push.db", 0);
    sn->fd = -1;
    snprintf(sn->key, sizeof sn->key, "meta/%020" PRId64, ck_now_ns());
    CK_TRY(fsmeta_backup(st->meta, path));
    sn->fd = openat(st->dirfd, "remote-push.db", O_RDONLY | O_CLOEXEC);
    unlinkat(st->dirfd, "remote-push.db", 0); /* the descriptor keeps it */
    if (sn->fd < 0) return -errno;
    /* Taken after the backup, the list can only name more packs than the
    ** snapshot does: rows are added meanwhile, not moved or deleted (gc
    ** and compaction run on the thread that pushes). */
    CK_TRY(text_add(&sn->used, "ckptfs-packs 1\n"));
    CK_TRY(fsmeta_packs_used(st->meta, on_used, &sn->used));
    CK_TRY(run_flush(&sn->used));
    return rmt_file_hash(sn->fd, &sn->size, &sn->hash);
}

/* Upload the snapshot and its packs list, then point LATEST at it. */
static int send_snapshot(remote *r, const struct snap *sn)
{
    char key[64], latest[LATEST_MAX];
    snprintf(key, sizeof key, "%s.db", sn->key);
    CK_TRY(s3_put_fd(r->s, key, sn->fd, 0, sn->size, NULL, NULL));
    snprintf(key, sizeof key, "%s.packs", sn->key);
    CK_TRY(s3_put_buf(r->s, key, sn->used.t, sn->used.n));
    int n = snprintf(latest, sizeof latest,
                     "ckptfs-remote 1\nsnapshot %s.db\nsize %" PRIu64 "\nxxh3 %016" PRIx64 "\n",
                     sn->key, sn->size, sn->hash);
    return s3_put_buf(r->s, LATEST, latest, (size_t)n);
}

/* Snapshot names (meta/NNN, no suffix) in key order: the oldest first. */
struct snap_names {
    char (*v)[40];
    size_t n, cap;
};

static int on_snapshot(void *ctx, const char *key, uint64_t size)
{
    struct snap_names *s = ctx;
    (void)size;
    if (!rmt_snapshot_key(key)) return 0;
    CK_TRY(ck_grow((void **)&s->v, &s->cap, s->n, sizeof *s->v));
    snprintf(s->v[s->n++], 40, "%.25s", key);
    return 0;
}

/* Snapshot i of s (oldest first) stays: one of the newest
** REMOTE_KEEP_SNAPSHOTS, current or prev (the one LATEST named before;
** whatever the clocks did, and however many failed pushes left theirs
** behind), or the oldest of its REMOTE_KEEP_EVERY_NS period within the
** last REMOTE_KEEP_AGE_NS (readers that mounted a while ago). */
static int snap_kept(const struct snap_names *s, size_t i, const char *current,
                     const char *prev, int64_t since)
{
    if (i + REMOTE_KEEP_SNAPSHOTS >= s->n || strcmp(s->v[i], current) == 0 ||
        strncmp(s->v[i], prev, 25) == 0)
        return 1;
    int64_t t = strtoll(s->v[i] + 5, NULL, 10);
    if (t < since) return 0;
    return i == 0 || strtoll(s->v[i - 1] + 5, NULL, 10) / REMOTE_KEEP_EVERY_NS !=
                     t / REMOTE_KEEP_EVERY_NS;
}

/* Delete the snapshots snap_kept does not keep; the names kept to *kept. */
static int trim_snapshots(remote *r, const char *current, const char *prev,
                          struct snap_names *kept)
{
    struct snap_names s = {0};
    const char *env = getenv("CKPTFS_SNAPSHOT_KEEP_S");
    int64_t since = ck_now_ns() - (env ? strtoll(env, NULL, 10) * 1000000000LL
                                       : REMOTE_KEEP_AGE_NS);
    int rc = s3_list(r->s, "meta/", on_snapshot, &s);
    for (size_t i = 0; rc == 0 && i < s.n; i++) {
        char key[64];
        if (snap_kept(&s, i, current, prev, since)) {
            rc = ck_grow((void **)&kept->v, &kept->cap, kept->n, sizeof *kept->v);
            if (rc == 0) memcpy(kept->v[kept->n++], s.v[i], sizeof *s.v);
            continue;
        }
        /* the list first: a listed snapshot without one holds deletions back */
        snprintf(key, sizeof key, "%s.packs", s.v[i]);
        rc = s3_delete(r->s, key);
        snprintf(key, sizeof key, "%s.db", s.v[i]);
        if (rc == 0) rc = s3_delete(r->s, key);
    }
    free(s.v);
    return rc;
}

/* Upload the packs up to id last that the bucket lacks or holds at
** another size; count them in *z. */
static int send_packs(struct push *p, int pdfd, const struct sizes *local,
                      const struct sizes *have, uint32_t last, struct remote_push_stats *z)
{
    for (uint32_t id = 1; id <= last && id < local->n; id++) {
        uint64_t size = local->v[id];
        if (size == UINT64_MAX) continue;
        z->packs++, z->bytes += size;
        if (rmt_sizes_get(have, id) != size) p->total += size;
    }
    for (uint32_t id = 1; id <= last && id < local->n; id++) {
        uint64_t size = local->v[id];
        if (size == UINT64_MAX || rmt_sizes_get(have, id) == size) continue;
        if (p->r->lease_lost) return -EBUSY; /* said when it was lost */
        CK_TRY(send_pack(p, pdfd, id, size));
        z->packs_sent++, z->bytes_sent += size;
    }
    return 0;
}

/* The packs some kept snapshot names, in *used (the current one's list is
** at hand); 1 if one of them has no list (an older push): then nothing
** may be deleted. */
static int kept_packs(remote *r, const struct snap *cur, const struct snap_names *kept,
                      uint32_t limit, struct sizes *used)
{
    size_t cap = 1 << 20, got = 0;
    char *t = malloc(cap + 1), key[64];
    int rc = t ? parse_used(cur->used.t, limit, used) : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < kept->n; i++) {
        if (strcmp(kept->v[i], cur->key) == 0) continue;
        snprintf(key, sizeof key, "%s.packs", kept->v[i]);
        rc = s3_get_buf(r->s, key, t, cap, &got);
        if (rc == -ENOENT) rc = 1;
        if (rc == 0) t[got] = 0, rc = parse_used(t, limit, used);
    }
    free(t);
    return rc;
}

/* Delete the bucket's packs up to id last that the store no longer has
** and no kept snapshot names. */
static int drop_packs(remote *r, const struct sizes *local, const struct sizes *have,
                      uint32_t last, const struct snap *cur, const struct snap_names *kept,
                      struct remote_push_stats *z)
{
    struct sizes used = {0};
    int rc = kept_packs(r, cur, kept, have->n, &used);
    for (uint32_t id = 1; rc == 0 && id <= last && id < have->n; id++) {
        char key[48];
        if (have->v[id] == UINT64_MAX || rmt_sizes_get(local, id) != UINT64_MAX ||
            rmt_sizes_get(&used, id) != UINT64_MAX)
            continue;
        rmt_pack_key(id, key);
        rc = s3_delete(r->s, key);
        if (rc == 0) z->packs_deleted++;
    }
    free(used.v);
    return rc > 0 ? 0 : rc;
}

/* The bucket now holds packs up to last as local has them: what
** remote_evict may drop locally. */
static void note_sent(remote *r, const struct sizes *local, uint32_t last)
{
    pthread_mutex_lock(&r->mu);
    uint32_t n = CK_MAX(local->n, r->npacks);
    for (uint32_t id = 1; id <= last && id < n; id++) {
        struct rpack *p = rmt_entry(r, id);
        if (p) p->size = rmt_sizes_get(local, id);
    }
    pthread_mutex_unlock(&r->mu);
}

/* st may push to r: not a read-only copy, and not a store whose dropped
** packs live in another bucket. */
static int may_push(remote *r, struct store *st)
{
    char url[1024];
    if (remote_is_copy(st->dirfd, ".")) {
        ck_log(CK_LOG_ERR, "%s is a read-only copy of a bucket: push from the store that "
               "wrote it", st->path);
        return -EROFS;
    }
    if (r->lease_lost) return -EBUSY; /* said when it was lost */
    if (remote_needed(st, url, sizeof url) && !rmt_same_url(url, s3_url(r->s))) {
        ck_log(CK_LOG_ERR, "some packs of %s are only in %s: it cannot push to %s", st->path,
               url[0] ? url : "another bucket", s3_url(r->s));
        return -EXDEV;
    }
    return 0;
}

/* Multipart uploads a killed push left (this prefix has one writer, and
** this thread is its only uploader): their parts go. Not fatal. */
static void sweep_uploads(remote *r)
{
    unsigned n = 0;
    int rc = s3_abort_uploads(r->s, &n);
    if (rc < 0)
        ck_log(CK_LOG_WARN, "%s: cannot list unfinished uploads: %s", s3_url(r->s),
               strerror(-rc));
    else if (n)
        ck_log(CK_LOG_INFO, "%s: %u unfinished uploads aborted", s3_url(r->s), n);
}

int remote_push(remote *r, struct store *st, int live, remote_progress_cb cb, void *ctx,
                struct remote_push_stats *out)
{
    struct sizes have = {0}, local = {0};
    struct remote_push_stats z = {0};
    struct push p = {.r = r, .cb = cb, .ctx = ctx};
    struct snap sn = {.fd = -1};
    struct snap_names kept = {0};
    struct latest prev = {.snapshot = ""};
    int pdfd = pack_dirfd(st->packs);
    int rc = may_push(r, st);
    if (rc == 0) rmt_lease_tick(r);
    if (rc == 0) rc = remote_claim(r, st);
    if (rc == 0) sweep_uploads(r);
    if (rc == 0) rc = take_snapshot(st, &sn);
    /* Every record the snapshot names is in a pack up to the one taking
    ** appends now; sealed and its appends written, those are final. */
    uint32_t last = rc == 0 && live ? pack_seal_wait(st->packs) : UINT32_MAX;
    if (rc == 0) rc = rmt_list_packs(r, &have);
    if (rc == 0) rc = pack_note_id(st->packs, rmt_sizes_top(&have)); /* ids the bucket knows */
    if (rc == 0 && (rc = rmt_read_latest(r, &prev)) == -ENOENT) rc = 0, prev.snapshot[0] = 0;
    if (rc == 0) rc = rmt_list_local(pdfd, &local, NULL);
    if (rc == 0) rc = send_packs(&p, pdfd, &local, &have, last, &z);
    if (rc == 0) rc = rmt_lease_check(r);
    if (rc == 0) rc = send_snapshot(r, &sn);
    if (rc == 0) note_sent(r, &local, last);
    if (rc == 0) rc = rmt_lease_check(r);
    if (rc == 0) rc = trim_snapshots(r, sn.key, prev.snapshot, &kept);
    if (rc == 0) rc = drop_packs(r, &local, &have, last, &sn, &kept, &z);
    if (sn.fd >= 0) close(sn.fd);
    free(sn.used.t);
    free(kept.v);
    free(have.v);
    free(local.v);
    if (out) *out = z;
    return rc;
}
