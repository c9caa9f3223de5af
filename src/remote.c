/*
** remote.c: the remote tier (remote.h): push a store to a bucket, and read
** a store from one, fetching pack granules on demand into sparse local
** copies.
*/
#include "remote.h"
#include "common.h"
#include "s3.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

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

static void rpack_close(struct rpack *p, int save);
static int map_sync(remote *r, struct rpack *p);
static struct rpack *entry(remote *r, uint32_t id);

int remote_open(const char *url, const char *endpoint, remote **out)
{
    remote *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    struct s3_cfg c = {.url = url, .endpoint = endpoint};
    int rc = s3_open(&c, &r->s);
    if (rc < 0) {
        free(r);
        return rc;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->fetched, NULL);
    pthread_cond_init(&r->ahead_cv, NULL);
    r->copy_lock = -1;
    *out = r;
    return 0;
}

static void ahead_end(remote *r);
static void ahead_drain(remote *r);

void remote_close(remote *r)
{
    if (!r) return;
    ahead_end(r);
    for (uint32_t i = 0; i < r->npacks; i++)
        if (r->packs[i]) rpack_close(r->packs[i], 1), free(r->packs[i]);
    free(r->packs);
    s3_close(r->s);
    if (r->copy_lock >= 0) close(r->copy_lock);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->fetched);
    pthread_cond_destroy(&r->ahead_cv);
    free(r);
}

const char *remote_url(const remote *r) { return s3_url(r->s); }

static void file_names(uint32_t id, char name[32], char hname[32])
{
    snprintf(name, 32, "%08" PRIu32 ".pack", id);
    snprintf(hname, 32, "%08" PRIu32 ".have", id);
}

/* st is a read-only copy of a bucket (remote_pull_meta made it). */
static int is_copy(struct store *st)
{
    return faccessat(st->dirfd, "remote.snapshot", F_OK, 0) == 0;
}

/* a and b name one bucket and prefix. */
static int same_url(const char *a, const char *b)
{
    char ab[64], ap[1024], bb[64], bp[1024];
    return s3_parse_url(a, ab, sizeof ab, ap, sizeof ap) == 0 &&
           s3_parse_url(b, bb, sizeof bb, bp, sizeof bp) == 0 && !strcmp(ab, bb) &&
           !strcmp(ap, bp);
}

static int pack_id_of(const char *name, const char *dir, uint32_t *id)
{
    unsigned v;
    char tail[8];
    size_t dl = strlen(dir);
    if (strncmp(name, dir, dl) != 0) return 0;
    if (sscanf(name + dl, "%8u.%7s", &v, tail) != 2 || strcmp(tail, "pack") != 0 ||
        strlen(name + dl) != 13 || v == 0)
        return 0;
    *id = v;
    return 1;
}

/* ---- the bucket's packs: sizes by id ---- */

struct sizes {
    uint64_t *v; /* v[id]; UINT64_MAX: none */
    uint32_t n;
};

static int sizes_set(struct sizes *z, uint32_t id, uint64_t size)
{
    if (id >= z->n) {
        uint32_t n = z->n ? z->n : 64;
        while (n <= id) n *= 2;
        uint64_t *v = realloc(z->v, n * sizeof *v);
        if (!v) return -ENOMEM;
        for (uint32_t i = z->n; i < n; i++) v[i] = UINT64_MAX;
        z->v = v, z->n = n;
    }
    z->v[id] = size;
    return 0;
}

static uint64_t sizes_get(const struct sizes *z, uint32_t id)
{
    return id < z->n ? z->v[id] : UINT64_MAX;
}

/* The highest id with a size (0: none). */
static uint32_t sizes_top(const struct sizes *z)
{
    uint32_t id = z->n;
    while (id > 0 && z->v[id - 1] == UINT64_MAX) id--;
    return id ? id - 1 : 0;
}

static int on_remote_pack(void *ctx, const char *key, uint64_t size)
{
    uint32_t id;
    return pack_id_of(key, "packs/", &id) ? sizes_set(ctx, id, size) : 0;
}

static int list_packs(remote *r, struct sizes *z)
{
    return s3_list(r->s, "packs/", on_remote_pack, z);
}

/* The sizes of the pack files in pdfd, and (disk != NULL) the bytes they
** take on disk. */
static int list_local(int pdfd, struct sizes *z, uint64_t *disk)
{
    DIR *d = ck_dir_of(pdfd);
    if (!d) return -errno;
    struct dirent *e;
    struct stat sb;
    int rc = 0;
    uint32_t id;
    if (disk) *disk = 0;
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (pack_id_of(e->d_name, "", &id) && fstatat(pdfd, e->d_name, &sb, 0) == 0) {
            rc = sizes_set(z, id, (uint64_t)sb.st_size);
            if (disk) *disk += (uint64_t)sb.st_blocks * 512;
        }
    closedir(d);
    return rc;
}

/* ---- LATEST ---- */

/* key is meta/ and 20 digits and .db: a snapshot. */
static int snapshot_key(const char *key)
{
    if (strncmp(key, "meta/", 5) != 0 || strlen(key) != 28 || strcmp(key + 25, ".db") != 0)
        return 0;
    for (int i = 5; i < 25; i++)
        if (key[i] < '0' || key[i] > '9') return 0;
    return 1;
}

struct latest {
    char snapshot[64];
    uint64_t size, hash;
};

static int parse_latest(const char *t, struct latest *l)
{
    unsigned v;
    char hex[17] = "";
    int k = 0;
    if (sscanf(t, "ckptfs-remote %u\nsnapshot %63s\nsize %" SCNu64 "\nxxh3 %16[0-9a-f]\n%n", &v,
               l->snapshot, &l->size, hex, &k) != 4 || v != 1 || k == 0 || t[k] ||
        strlen(hex) != 16 || !snapshot_key(l->snapshot))
        return -EIO;
    l->hash = strtoull(hex, NULL, 16);
    return 0;
}

static int read_latest(remote *r, struct latest *l)
{
    char t[LATEST_MAX + 1];
    size_t got = 0;
    CK_TRY(s3_get_buf(r->s, LATEST, t, LATEST_MAX, &got));
    t[got] = 0;
    int rc = parse_latest(t, l);
    if (rc < 0) ck_log(CK_LOG_ERR, "%s/%s: not a snapshot pointer", s3_url(r->s), LATEST);
    return rc;
}

/* ---- push ---- */

struct push {
    remote *r;
    remote_progress_cb cb;
    void *ctx;
    uint64_t base, total;
};

static void lease_tick(remote *r);
static int lease_check(remote *r);

static void on_part(void *ctx, uint64_t done)
{
    struct push *p = ctx;
    lease_tick(p->r); /* an upload may outlast the lease */
    if (p->cb) p->cb(p->ctx, p->base + done, p->total);
}

static int send_pack(struct push *p, int pdfd, uint32_t id, uint64_t size)
{
    char name[32], hname[32], key[48];
    file_names(id, name, hname);
    snprintf(key, sizeof key, "packs/%s", name);
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

static int file_hash(int fd, uint64_t *size, uint64_t *hash)
{
    XXH3_state_t *x = XXH3_createState();
    uint8_t *buf = malloc(1 << 20);
    int rc = x && buf ? 0 : -ENOMEM;
    if (rc == 0) XXH3_64bits_reset(x);
    uint64_t off = 0;
    for (ssize_t n = 1; rc == 0 && n > 0; off += (uint64_t)n) {
        n = pread(fd, buf, 1 << 20, (off_t)off);
        if (n < 0) rc = -errno;
        else XXH3_64bits_update(x, buf, (size_t)n);
        if (n <= 0) break;
    }
    if (rc == 0) *size = off, *hash = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    free(buf);
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
            CK_TRY(sizes_set(z, (uint32_t)id, 0));
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
    return file_hash(sn->fd, &sn->size, &sn->hash);
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
    if (!snapshot_key(key)) return 0;
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
                     const char *prev, int64_t now)
{
    if (i + REMOTE_KEEP_SNAPSHOTS >= s->n || strcmp(s->v[i], current) == 0 ||
        strncmp(s->v[i], prev, 25) == 0)
        return 1;
    int64_t t = strtoll(s->v[i] + 5, NULL, 10);
    const char *env = getenv("CKPTFS_SNAPSHOT_KEEP_S");
    int64_t age = env ? strtoll(env, NULL, 10) * 1000000000LL : REMOTE_KEEP_AGE_NS;
    if (now - t > age) return 0;
    return i == 0 || strtoll(s->v[i - 1] + 5, NULL, 10) / REMOTE_KEEP_EVERY_NS !=
                     t / REMOTE_KEEP_EVERY_NS;
}

/* Delete the snapshots snap_kept does not keep; the names kept to *kept. */
static int trim_snapshots(remote *r, const char *current, const char *prev,
                          struct snap_names *kept)
{
    struct snap_names s = {0};
    int64_t now = ck_now_ns();
    int rc = s3_list(r->s, "meta/", on_snapshot, &s);
    for (size_t i = 0; rc == 0 && i < s.n; i++) {
        char key[64];
        if (snap_kept(&s, i, current, prev, now)) {
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
        if (sizes_get(have, id) != size) p->total += size;
    }
    for (uint32_t id = 1; id <= last && id < local->n; id++) {
        uint64_t size = local->v[id];
        if (size == UINT64_MAX || sizes_get(have, id) == size) continue;
        if (p->r->lease_lost) return -EBUSY; /* said when it was lost */
        CK_TRY(send_pack(p, pdfd, id, size));
        z->packs_sent++, z->bytes_sent += size;
    }
    return 0;
}

/* The packs some kept snapshot names, in *used; 1 if one of them has no
** list (an older push): then nothing may be deleted. */
static int kept_packs(remote *r, const struct snap_names *kept, uint32_t limit, struct sizes *used)
{
    size_t cap = 1 << 20, got = 0;
    char *t = malloc(cap + 1), key[64];
    int rc = t ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < kept->n; i++) {
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
                      uint32_t last, const struct snap_names *kept, struct remote_push_stats *z)
{
    struct sizes used = {0};
    int rc = kept_packs(r, kept, have->n, &used);
    for (uint32_t id = 1; rc == 0 && id <= last && id < have->n; id++) {
        char key[48];
        if (have->v[id] == UINT64_MAX || sizes_get(local, id) != UINT64_MAX ||
            sizes_get(&used, id) != UINT64_MAX)
            continue;
        snprintf(key, sizeof key, "packs/%08" PRIu32 ".pack", id);
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
        struct rpack *p = entry(r, id);
        if (p) p->size = sizes_get(local, id);
    }
    pthread_mutex_unlock(&r->mu);
}


/* st may push to r: not a read-only copy, and not a store whose dropped
** packs live in another bucket. */
static int may_push(remote *r, struct store *st)
{
    char url[1024];
    if (is_copy(st)) {
        ck_log(CK_LOG_ERR, "%s is a read-only copy of a bucket: push from the store that "
               "wrote it", st->path);
        return -EROFS;
    }
    if (r->lease_lost) return -EBUSY; /* said when it was lost */
    if (remote_needed(st, url, sizeof url) && !same_url(url, s3_url(r->s))) {
        ck_log(CK_LOG_ERR, "some packs of %s are only in %s: it cannot push to %s", st->path,
               url[0] ? url : "another bucket", s3_url(r->s));
        return -EXDEV;
    }
    return 0;
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
    int rc = may_push(r, st);
    int pdfd = rc < 0 ? -1 : openat(st->dirfd, "packs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rc == 0 && pdfd < 0) rc = -errno;
    if (rc == 0) lease_tick(r);
    if (rc == 0) rc = remote_claim(r, st);
    if (rc == 0) rc = take_snapshot(st, &sn);
    /* Every record the snapshot names is in a pack up to the one taking
    ** appends now; sealed and its appends written, those are final. */
    uint32_t last = rc == 0 && live ? pack_seal_wait(st->packs) : UINT32_MAX;
    if (rc == 0) rc = list_packs(r, &have);
    if (rc == 0) rc = pack_note_id(st->packs, sizes_top(&have)); /* ids the bucket knows */
    if (rc == 0 && (rc = read_latest(r, &prev)) == -ENOENT) rc = 0, prev.snapshot[0] = 0;
    if (rc == 0) rc = list_local(pdfd, &local, NULL);
    if (rc == 0) rc = send_packs(&p, pdfd, &local, &have, last, &z);
    if (rc == 0) rc = lease_check(r);
    if (rc == 0) rc = send_snapshot(r, &sn);
    if (rc == 0) note_sent(r, &local, last);
    if (rc == 0) rc = lease_check(r);
    if (rc == 0) rc = trim_snapshots(r, sn.key, prev.snapshot, &kept);
    if (rc == 0) rc = drop_packs(r, &local, &have, last, &kept, &z);
    if (sn.fd >= 0) close(sn.fd);
    if (pdfd >= 0) close(pdfd);
    free(sn.used.t);
    free(kept.v);
    free(have.v);
    free(local.v);
    if (out) *out = z;
    return rc;
}

/* ---- pull ---- */

/* The snapshot name store_path/remote.snapshot records ("" none). */
static void recorded(int dfd, char *out, size_t cap)
{
    out[0] = 0;
    int fd = openat(dfd, "remote.snapshot", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    close(fd);
}

static int write_small(int dfd, const char *name, const char *text)
{
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int rc = ck_pwrite_full(fd, text, strlen(text), 0);
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    close(fd);
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0) rc = -errno;
    return rc;
}

static int fetch_snapshot(remote *r, int dfd, const struct latest *l)
{
    const char *tmp = "meta.db.remote";
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    uint64_t got = 0, size = 0, hash = 0;
    int rc = s3_get_fd(r->s, l->snapshot, fd, &got);
    if (rc == 0) rc = file_hash(fd, &size, &hash);
    if (rc == 0 && (size != l->size || hash != l->hash)) {
        ck_log(CK_LOG_ERR, "%s/%s: fails its hash (size %" PRIu64 ", want %" PRIu64 ")",
               s3_url(r->s), l->snapshot, size, l->size);
        rc = -EIO;
    }
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    close(fd);
    /* the old WAL belongs to the old database */
    if (rc == 0) unlinkat(dfd, "meta.db-wal", 0), unlinkat(dfd, "meta.db-shm", 0);
    if (rc == 0 && renameat(dfd, tmp, dfd, "meta.db") < 0) rc = -errno;
    if (rc < 0) unlinkat(dfd, tmp, 0);
    return rc;
}

/* Hold store_path's lock for as long as r lives: one mount of a copy at
** a time, and none while ckptctl changes it. A daemon just unmounted may
** hold it a moment longer: wait up to 5 s. */
static int lock_copy(remote *r, int dfd)
{
    int fd = openat(dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600), rc = -EBUSY;
    if (fd < 0) return -errno;
    for (int i = 0; i < 100 && rc == -EBUSY; i++) {
        rc = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? -EBUSY : -errno;
        if (rc == -EBUSY) usleep(50000);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    r->copy_lock = fd;
    return 0;
}

static int pull_into(remote *r, int dfd)
{
    if (faccessat(dfd, "meta.db", F_OK, 0) == 0 && faccessat(dfd, "remote.snapshot", F_OK, 0) < 0)
        return 1; /* a store of its own: its metadata is newer than any push */
    CK_TRY(lock_copy(r, dfd));
    /* what a store opened read-only expects to find */
    if ((mkdirat(dfd, "packs", 0700) < 0 && errno != EEXIST) ||
        (mkdirat(dfd, "staging", 0700) < 0 && errno != EEXIST))
        return -errno;
    struct latest l;
    char have[80];
    CK_TRY(read_latest(r, &l));
    recorded(dfd, have, sizeof have);
    if (strcmp(have, l.snapshot) == 0 && faccessat(dfd, "meta.db", F_OK, 0) == 0) return 0;
    /* marked a copy before meta.db exists: a crash between is still one */
    CK_TRY(write_small(dfd, "remote.snapshot", "pending"));
    if (fsync(dfd) < 0) return -errno;
    CK_TRY(fetch_snapshot(r, dfd, &l));
    CK_TRY(write_small(dfd, "remote.snapshot", l.snapshot));
    return fsync(dfd) < 0 ? -errno : 0;
}

int remote_pull_meta(remote *r, const char *store_path)
{
    if (mkdir(store_path, 0700) < 0 && errno != EEXIST) return -errno;
    int dfd = open(store_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -errno;
    int rc = pull_into(r, dfd);
    close(dfd);
    return rc;
}

/* ---- the store a prefix holds ---- */

static int store_id(struct store *st, char id[40])
{
    if (fsmeta_config_get(st->meta, "store_id", id, 40) == 0 && strlen(id) == 32) return 0;
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -EIO;
    for (int i = 0; i < 16; i++) snprintf(id + 2 * i, 3, "%02x", b[i]);
    return fsmeta_config_set(st->meta, "store_id", id);
}

int remote_claim(remote *r, struct store *st)
{
    char id[40], t[LATEST_MAX + 1], want[64], have[64] = "";
    size_t got = 0;
    CK_TRY(store_id(st, id));
    snprintf(want, sizeof want, "ckptfs-store %s\n", id);
    int rc = s3_get_buf(r->s, "store", t, LATEST_MAX, &got);
    if (rc == -ENOENT) return s3_put_buf(r->s, "store", want, strlen(want));
    if (rc < 0) return rc;
    t[got] = 0;
    if (strcmp(t, want) == 0) return 0;
    sscanf(t, "ckptfs-store %63s", have);
    ck_log(CK_LOG_ERR, "%s holds another store's copy (store %s; this one is %s): give it "
           "a prefix of its own", s3_url(r->s), have, id);
    return -EEXIST;
}

/* ---- the lease ---- */

#define LEASE "lease"
#define LEASE_MAX 8192

struct holder {
    char host[256], store[4096];
    long pid;
    int64_t renewed;
};

static int parse_lease(const char *t, struct holder *h)
{
    unsigned v;
    return sscanf(t, "ckptfs-lease %u\nholder %255s %ld\nstore %4095[^\n]\nrenewed %" SCNd64, &v,
                  h->host, &h->pid, h->store, &h->renewed) == 5 && v == 1 ? 0 : -EIO;
}

/* The lease as the bucket has it: -ENOENT none, -EIO unreadable. */
static int get_holder(remote *r, struct holder *h)
{
    char *t = malloc(LEASE_MAX + 1);
    size_t got = 0;
    int rc = t ? s3_get_buf(r->s, LEASE, t, LEASE_MAX, &got) : -ENOMEM;
    if (rc == 0) t[got] = 0, rc = parse_lease(t, h);
    free(t);
    return rc;
}

/* 1 if the holder h no longer holds: stale, or a process of this host that is gone. */
static int lease_free(const struct holder *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    if (ck_now_ns() - h->renewed > REMOTE_LEASE_NS) return 1;
    return strcmp(h->host, me) == 0 && kill((pid_t)h->pid, 0) < 0 && errno == ESRCH;
}

/* 1 if h is this mount: this host and this store (one mount per store on a
** host; the pid changes when the daemon forks). */
static int lease_mine(remote *r, const struct holder *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return strcmp(h->host, me) == 0 && strcmp(h->store, r->lease_store) == 0;
}

/* Write the lease as held by this process now. */
static int put_lease(remote *r)
{
    char host[256] = "", t[LEASE_MAX];
    gethostname(host, sizeof host - 1);
    int64_t now = ck_now_ns();
    int n = snprintf(t, sizeof t,
                     "ckptfs-lease 1\nholder %s %ld\nstore %s\nrenewed %" PRId64 "\n",
                     host, (long)getpid(), r->lease_store, now);
    int rc = s3_put_buf(r->s, LEASE, t, (size_t)n);
    if (rc == 0) r->lease_at = now;
    return rc;
}

int remote_lease_take(remote *r, const char *store_real, char *who, size_t cap)
{
    struct holder h;
    int rc = get_holder(r, &h);
    if (rc < 0 && rc != -ENOENT && rc != -EIO) return rc;
    if (rc == 0 && !lease_free(&h)) {
        snprintf(who, cap, "%s pid %ld (store %s), renewed %" PRId64 " s ago", h.host, h.pid,
                 h.store, (ck_now_ns() - h.renewed) / 1000000000);
        return -EBUSY;
    }
    snprintf(r->lease_store, sizeof r->lease_store, "%s", store_real);
    rc = put_lease(r);
    if (rc < 0) r->lease_store[0] = 0;
    return rc;
}

int remote_lease_renew(remote *r)
{
    if (!r->lease_store[0]) return 0;
    if (r->lease_lost) return -EBUSY;
    struct holder h;
    int rc = get_holder(r, &h);
    if (rc == 0 && !lease_mine(r, &h)) {
        ck_log(CK_LOG_ERR, "%s: %s pid %ld (store %s) took the lease while this mount held "
               "it (not renewed in time): uploads stop here", s3_url(r->s), h.host, h.pid,
               h.store);
        r->lease_lost = 1;
        return -EBUSY;
    }
    return rc < 0 && rc != -ENOENT && rc != -EIO ? rc : put_lease(r);
}

/* Renew the lease if a quarter of its time has passed (long uploads). */
static void lease_tick(remote *r)
{
    if (r->lease_store[0] && ck_now_ns() - r->lease_at > REMOTE_LEASE_NS / 4 &&
        remote_lease_renew(r) < 0 && !r->lease_lost)
        ck_log(CK_LOG_WARN, "cannot renew the lease of %s", s3_url(r->s));
}

/* Before LATEST moves or anything is deleted: this push's lease (if it
** holds one) is still its own. */
static int lease_check(remote *r)
{
    struct holder h;
    if (!r->lease_store[0]) return 0;
    int rc = r->lease_lost ? 0 : get_holder(r, &h);
    if (rc < 0 && rc != -ENOENT) return rc; /* unsure: move nothing */
    if (rc == 0 && !r->lease_lost && !lease_mine(r, &h)) {
        ck_log(CK_LOG_ERR, "%s: %s pid %ld (store %s) holds the lease now: this push stops",
               s3_url(r->s), h.host, h.pid, h.store);
        r->lease_lost = 1;
    }
    return r->lease_lost ? -EBUSY : 0;
}

void remote_lease_drop(remote *r)
{
    if (!r->lease_store[0]) return;
    struct holder h;
    if (!r->lease_lost && get_holder(r, &h) == 0 && lease_mine(r, &h) &&
        s3_delete(r->s, LEASE) < 0)
        ck_log(CK_LOG_WARN, "%s: could not drop the lease; it lapses in %lld s", s3_url(r->s),
               REMOTE_LEASE_NS / 1000000000);
    r->lease_store[0] = 0;
}

/* ---- reads from the bucket ---- */

static int pdir(remote *r) { return pack_dirfd(r->ps); }

/* The entry of pack id, the table grown to hold it; caller holds mu. */
static struct rpack *entry(remote *r, uint32_t id)
{
    if (id >= r->npacks) {
        uint32_t n = r->npacks ? r->npacks : 64;
        while (n <= id) n *= 2;
        struct rpack **v = realloc(r->packs, n * sizeof *v);
        if (!v) return NULL;
        memset(v + r->npacks, 0, (n - r->npacks) * sizeof *v);
        r->packs = v, r->npacks = n;
    }
    if (!r->packs[id]) {
        struct rpack *p = malloc(sizeof *p);
        if (!p) return NULL;
        *p = (struct rpack){.size = UINT64_MAX, .fd = -1, .hfd = -1};
        r->packs[id] = p;
    }
    return r->packs[id];
}

/* Close pack p's copy; save: sync what was fetched into the map first (not
** for a pack about to be deleted or punched). Caller holds mu or is the
** last user. */
static void rpack_close(struct rpack *p, int save)
{
    int rc = save && p->state == RP_PARTIAL ? map_sync(NULL, p) : 0;
    if (rc < 0) ck_log(CK_LOG_WARN, "cannot save the map of a fetched pack: %s", strerror(-rc));
    p->unsynced = 0;
    if (p->fd >= 0) close(p->fd);
    if (p->hfd >= 0) close(p->hfd);
    free(p->have);
    p->fd = p->hfd = -1;
    p->have = NULL;
    p->state = RP_UNKNOWN;
}

/* Open pack id as a partial copy of size bytes with its map, creating
** both when create; caller holds mu. */
static int open_partial(remote *r, uint32_t id, struct rpack *p, uint64_t size, int create)
{
    char name[32], hname[32];
    file_names(id, name, hname);
    int dfd = pdir(r), fl = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
    uint64_t n = (size + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    /* the map first: a pack file without one would pass for wholly local */
    p->hfd = openat(dfd, hname, fl, 0600);
    p->fd = p->hfd < 0 ? -1 : openat(dfd, name, fl, 0600);
    p->have = calloc(n ? n : 1, 1);
    int rc = p->fd < 0 || p->hfd < 0 ? -errno : p->have ? 0 : -ENOMEM;
    if (rc == 0 && create && ftruncate(p->fd, (off_t)size) < 0) rc = -errno;
    if (rc == 0 && pread(p->hfd, p->have, n, 0) < 0) rc = -errno;
    if (rc < 0) {
        rpack_close(p, 0);
        return rc;
    }
    for (uint64_t i = 0; i < n; i++) p->have[i] = p->have[i] == 1 ? G_HERE : G_MISSING;
    p->local = size;
    p->state = RP_PARTIAL;
    return 0;
}

/* What is local of pack id: all of it (a pack of this store with no map),
** part (a copy with its map), or nothing yet (a copy made now, when the
** bucket has the pack); caller holds mu. */
static int resolve(remote *r, uint32_t id, struct rpack *p)
{
    char name[32], hname[32];
    struct stat sb, hb;
    file_names(id, name, hname);
    int dfd = pdir(r);
    int have_pack = fstatat(dfd, name, &sb, 0) == 0, have_map = fstatat(dfd, hname, &hb, 0) == 0;
    /* A copy of another size than the bucket's is of another pack (a
    ** store older than packs/max-id reused an id gc freed): start over. */
    if (have_map && have_pack && p->size != UINT64_MAX && (uint64_t)sb.st_size != p->size &&
        r->readonly)
        unlinkat(dfd, name, 0), unlinkat(dfd, hname, 0), have_pack = have_map = 0;
    if (have_pack && !have_map) {
        p->state = RP_LOCAL;
        return 0;
    }
    if (have_pack) return open_partial(r, id, p, (uint64_t)sb.st_size, 0);
    if (p->size == UINT64_MAX) return -EIO;
    return open_partial(r, id, p, p->size, 1);
}

/* The pack's entry, resolved; NULL with *rc on failure. */
static struct rpack *rpack_get(remote *r, uint32_t id, int *rc)
{
    pthread_mutex_lock(&r->mu);
    struct rpack *p = entry(r, id);
    *rc = p ? 0 : -ENOMEM;
    if (p && p->state == RP_UNKNOWN) *rc = resolve(r, id, p);
    pthread_mutex_unlock(&r->mu);
    return *rc == 0 ? p : NULL;
}

/* Fetch granules [g, g + n) of pack id into its copy (not yet synced). */
static int fetch(remote *r, uint32_t id, struct rpack *p, uint64_t g, uint64_t n)
{
    char key[48];
    snprintf(key, sizeof key, "packs/%08" PRIu32 ".pack", id);
    uint64_t off = g * REMOTE_GRANULE;
    size_t len = (size_t)CK_MIN((uint64_t)n * REMOTE_GRANULE, p->local - off), got = 0;
    uint8_t *buf = malloc(len);
    if (!buf) return -ENOMEM;
    int rc = s3_get_range(r->s, key, off, len, buf, &got);
    if (rc == 0 && got != len) rc = -EIO;
    if (rc == 0) rc = ck_pwrite_full(p->fd, buf, len, off);
    free(buf);
    return rc;
}

/* Sync the granules fetched since the last sync, then write the map with
** them: a crash loses fetched bytes, never marks missing ones. With r, the
** caller holds r->mu, which is let go during the sync; a failed sync
** makes them missing again (its error is not reported twice). */
static int map_sync(remote *r, struct rpack *p)
{
    uint64_t n = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    if (!p->unsynced || p->syncing) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (p->have[i] == G_UNSYNCED) p->have[i] = G_SYNCING;
    p->unsynced = 0;
    p->syncing = 1;
    if (r) pthread_mutex_unlock(&r->mu);
    int rc = fdatasync(p->fd) < 0 ? -errno : 0;
    if (r) pthread_mutex_lock(&r->mu);
    p->syncing = 0;
    uint8_t *m = malloc(n ? n : 1);
    if (rc == 0 && !m) rc = -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        if (p->have[i] == G_SYNCING) p->have[i] = rc == 0 ? G_HERE : G_MISSING;
        if (m) m[i] = p->have[i] == G_HERE;
    }
    if (rc == 0) rc = ck_pwrite_full(p->hfd, m, n, 0);
    free(m);
    return rc;
}

/* ---- fetching ahead ---- */

static __thread int in_ahead; /* this thread is the one fetching ahead */

/* The thread: fetch the run asked for last, through the packs (which
** hold off gc and eviction meanwhile), until told to stop. */
static void *ahead_main(void *arg)
{
    remote *r = arg;
    in_ahead = 1;
    pthread_mutex_lock(&r->mu);
    while (!r->ahead_stop) {
        if (!r->ahead_id) {
            pthread_cond_wait(&r->ahead_cv, &r->mu);
            continue;
        }
        uint32_t id = r->ahead_id;
        uint64_t off = r->ahead_g * REMOTE_GRANULE;
        r->ahead_id = 0;
        r->ahead_busy++;
        pthread_mutex_unlock(&r->mu);
        (void)pack_fetch(r->ps, id, off, 1); /* a failure: the reader retries */
        pthread_mutex_lock(&r->mu);
        r->ahead_busy--;
        pthread_cond_broadcast(&r->ahead_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Ask for the first missing granule of pack p within AHEAD_GRANULES
** after g to be fetched ahead; caller holds mu. */
static void ahead_ask(remote *r, uint32_t id, struct rpack *p, uint64_t g)
{
    uint64_t total = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    uint64_t stop = CK_MIN(total, g + AHEAD_GRANULES);
    while (g < stop && p->have[g] != G_MISSING) g++;
    if (g >= stop || in_ahead) return;
    while (!r->ahead_stop && r->ahead_on < AHEAD_THREADS &&
           pthread_create(&r->ahead[r->ahead_on], NULL, ahead_main, r) == 0)
        r->ahead_on++;
    if (r->ahead_on <= 0) return;
    r->ahead_id = id, r->ahead_g = g;
    pthread_cond_signal(&r->ahead_cv);
}

/* Wait until nothing is being fetched ahead (the packs are about to change). */
static void ahead_drain(remote *r)
{
    pthread_mutex_lock(&r->mu);
    r->ahead_id = 0;
    while (r->ahead_busy) pthread_cond_wait(&r->ahead_cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void remote_detach(remote *r)
{
    if (r) ahead_end(r);
}

/* Stop the thread for good (remote_attach may start it again). */
static void ahead_end(remote *r)
{
    pthread_mutex_lock(&r->mu);
    int on = r->ahead_on;
    r->ahead_stop = 1;
    pthread_cond_broadcast(&r->ahead_cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < on; i++) pthread_join(r->ahead[i], NULL);
    pthread_mutex_lock(&r->mu);
    r->ahead_on = 0;
    pthread_mutex_unlock(&r->mu);
}

/* Make [off, off + len) of pack id local. Granules are fetched in runs of
** up to FETCH_MAX_GRANULES, reading ahead past len (reads of a pack go
** on sequentially); a granule another thread is fetching is waited for. */
static int fill(void *ctx, uint32_t id, uint64_t off, uint64_t len)
{
    remote *r = ctx;
    int rc;
    struct rpack *p = rpack_get(r, id, &rc);
    if (!p || len == 0 || p->state == RP_LOCAL) return rc;
    if (off + len > p->local) return -EIO;
    uint64_t g = off / REMOTE_GRANULE, end = (off + len - 1) / REMOTE_GRANULE + 1;
    uint64_t total = (p->local + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    pthread_mutex_lock(&r->mu);
    while (rc == 0 && g < end) {
        if (G_READABLE(p->have[g])) {
            g++;
            continue;
        }
        if (p->have[g] == G_FETCHING) {
            pthread_cond_wait(&r->fetched, &r->mu);
            continue;
        }
        uint64_t n = 0;
        while (g + n < total && n < FETCH_MAX_GRANULES && p->have[g + n] == G_MISSING)
            p->have[g + n++] = G_FETCHING;
        pthread_mutex_unlock(&r->mu);
        rc = fetch(r, id, p, g, n);
        pthread_mutex_lock(&r->mu);
        memset(p->have + g, rc == 0 ? G_UNSYNCED : G_MISSING, n);
        if (rc == 0 && (p->unsynced += n) >= MAP_FLUSH_GRANULES && map_sync(r, p) < 0)
            ck_log(CK_LOG_WARN, "cannot sync fetched pack bytes (fetched again when read)");
        pthread_cond_broadcast(&r->fetched);
        g += n;
    }
    if (rc == 0) ahead_ask(r, id, p, end);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* gc removed pack id: its map goes with it. */
static void forget(void *ctx, uint32_t id)
{
    remote *r = ctx;
    char name[32], hname[32];
    file_names(id, name, hname);
    pthread_mutex_lock(&r->mu);
    struct rpack *p = id < r->npacks ? r->packs[id] : NULL;
    if (p) rpack_close(p, 0), p->size = UINT64_MAX; /* never to be evicted again */
    unlinkat(pdir(r), hname, 0);
    pthread_mutex_unlock(&r->mu);
}

int remote_attach(remote *r, struct store *st)
{
    struct sizes z = {0};
    char url[1024];
    if (!is_copy(st) && remote_needed(st, url, sizeof url) && url[0] &&
        !same_url(url, s3_url(r->s))) {
        ck_log(CK_LOG_ERR, "some packs of %s are only in %s, not in %s", st->path, url,
               s3_url(r->s));
        return -EXDEV;
    }
    int rc = list_packs(r, &z);
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; rc == 0 && i < z.n; i++) {
        struct rpack *p = entry(r, i);
        if (!p) rc = -ENOMEM;
        else p->size = z.v[i];
    }
    r->st = st;
    r->ps = st->packs;
    r->ahead_stop = 0;
    r->readonly = st->o.readonly;
    pthread_mutex_unlock(&r->mu);
    /* a store older than packs/max-id may have freed ids the bucket holds */
    if (rc == 0 && !st->o.readonly) rc = pack_note_id(st->packs, sizes_top(&z));
    free(z.v);
    if (rc == 0)
        pack_set_source(st->packs, &(struct pack_source){.fill = fill, .forget = forget, .ctx = r});
    return rc;
}

int remote_needed(struct store *st, char *url, size_t cap)
{
    DIR *d = ck_dir_of(pack_dirfd(st->packs));
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        found = n > 5 && strcmp(e->d_name + n - 5, ".have") == 0;
    }
    if (d) closedir(d);
    if (found && fsmeta_config_get(st->meta, "remote", url, cap) < 0) url[0] = 0;
    return found;
}

int remote_read_all_from(remote *r, struct store *st, const char *dir, packset **saved)
{
    struct pack_opts po = {.max_pack_bytes = st->o.max_pack_bytes};
    packset *ps;
    ahead_drain(r);
    CK_TRY(pack_open(dir, &po, &ps));
    *saved = st->packs;
    st->packs = ps;
    int rc = remote_attach(r, st);
    pthread_mutex_lock(&r->mu);
    r->readonly = 1; /* copies made in dir, as a store read from the bucket does */
    pthread_mutex_unlock(&r->mu);
    if (rc < 0) {
        st->packs = *saved;
        pack_close(ps);
    }
    return rc;
}

void remote_read_all_done(remote *r, struct store *st, packset *saved)
{
    ahead_drain(r);
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < r->npacks; i++)
        if (r->packs[i]) rpack_close(r->packs[i], 1);
    r->ps = saved;
    pthread_mutex_unlock(&r->mu);
    pack_close(st->packs);
    st->packs = saved;
}

/* ---- keeping the local copy small ---- */

struct evict {
    remote *r;
    uint32_t id;
    uint64_t size;
};

/* Under the packs' write lock (no read in progress): the map first, all
** zeros and synced, then the bytes go; a crash between leaves a pack
** that reads from the bucket. */
static int punch(void *ctx)
{
    struct evict *e = ctx;
    remote *r = e->r;
    char name[32], hname[32];
    file_names(e->id, name, hname);
    pthread_mutex_lock(&r->mu);
    struct rpack *p = entry(r, e->id);
    int rc = p ? 0 : -ENOMEM;
    if (p) rpack_close(p, 0);
    uint64_t n = (e->size + REMOTE_GRANULE - 1) / REMOTE_GRANULE;
    uint8_t *zero = rc == 0 ? calloc(n ? n : 1, 1) : NULL;
    int hfd = zero ? openat(pdir(r), hname, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (rc == 0) rc = !zero ? -ENOMEM : hfd < 0 ? -errno : ck_pwrite_full(hfd, zero, n, 0);
    if (rc == 0 && fsync(hfd) < 0) rc = -errno;
    int fd = rc == 0 ? openat(pdir(r), name, O_RDWR | O_CLOEXEC) : -1;
    if (rc == 0 && fd < 0) rc = -errno;
    if (rc == 0 && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                             (off_t)e->size) < 0)
        rc = -errno;
    if (fd >= 0) close(fd);
    if (hfd >= 0) close(hfd);
    free(zero);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int remote_evict(remote *r, struct store *st, uint64_t keep, uint64_t *freed)
{
    struct sizes local = {0};
    uint64_t use = 0, before;
    uint32_t limit = pack_limit(st->packs);
    int pdfd = pack_dirfd(st->packs);
    int rc = list_local(pdfd, &local, &use);
    before = use;
    for (uint32_t id = 1; rc == 0 && use > keep && id < local.n && id < limit; id++) {
        pthread_mutex_lock(&r->mu);
        struct rpack *p = id < r->npacks ? r->packs[id] : NULL;
        int sent = p && p->size != UINT64_MAX && p->size == local.v[id];
        pthread_mutex_unlock(&r->mu);
        if (!sent) continue; /* not in the bucket as it is here */
        struct stat sb;
        char name[32], hname[32];
        file_names(id, name, hname);
        if (fstatat(pdfd, name, &sb, 0) < 0 || sb.st_blocks == 0) continue;
        struct evict e = {.r = r, .id = id, .size = local.v[id]};
        rc = pack_exclusive(st->packs, punch, &e);
        if (rc == 0) use -= CK_MIN(use, (uint64_t)sb.st_blocks * 512);
    }
    free(local.v);
    if (freed) *freed = before - use;
    return rc;
}
